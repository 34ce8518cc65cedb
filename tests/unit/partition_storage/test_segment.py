"""Tests of one log segment and its indexes on real files: layout, lookups, reads, recovery, rebuilds."""

from __future__ import annotations

import os
import random
import struct
from pathlib import Path

import pytest

from oncelog.partition_storage.segment import (
    NO_TIMESTAMP,
    CorruptIndexError,
    LogSegment,
    OffsetIndex,
    TimeIndex,
    file_name,
    parse_file_name,
)
from oncelog.records import Record, build_batch, decode_records, read_header, split_batches, with_base_offset

INTERVAL = 256


def batch(base_offset: int, records: int = 1, value_size: int = 40, timestamp: int = 1_000) -> bytes:
    """A batch of ``records`` records with timestamps ``timestamp, timestamp + 1, ...``."""
    return build_batch(
        [
            Record(key=b"k%d" % (base_offset + i), value=b"v" * value_size, timestamp=timestamp + i)
            for i in range(records)
        ],
        base_offset=base_offset,
    )


def new_segment(directory: Path, base_offset: int = 0, interval: int = INTERVAL) -> LogSegment:
    return LogSegment.create(directory, base_offset, index_interval_bytes=interval, now_ms=0)


def reopen(directory: Path, base_offset: int = 0, interval: int = INTERVAL) -> LogSegment:
    return LogSegment.open(directory, base_offset, index_interval_bytes=interval, now_ms=0)


def fill(segment: LogSegment, count: int, rng: random.Random | None = None) -> list[bytes]:
    """Append ``count`` batches of random shape, one or a few per call; returns them with offsets assigned."""
    rng = rng or random.Random(7)
    written = []
    offset = segment.next_offset
    while len(written) < count:
        group = []
        for _ in range(min(rng.randint(1, 3), count - len(written))):
            records = rng.randint(1, 4)
            group.append(batch(offset, records, rng.randint(1, 200), timestamp=rng.randint(0, 10_000)))
            offset += records
        metas = []
        for data in group:
            header = read_header(data)
            metas.append((header.last_offset, header.max_timestamp, header.size_in_bytes))
        segment.append(group, metas, sum(len(b) for b in group))
        written.extend(group)
    return written


def headers_of(data: bytes) -> list[tuple[int, int]]:
    batches, valid = split_batches(data)
    assert valid == len(data), "a read must return whole, CRC-valid batches only"
    return [(h.base_offset, h.last_offset) for h, _ in batches]


# ------------------------------------------------------------------------------------------------ names


def test_file_names_are_twenty_digit_offsets() -> None:
    assert file_name(1234, ".log") == "00000000000000001234.log"
    assert parse_file_name("00000000000000001234.timeindex", ".timeindex") == 1234
    assert parse_file_name("1234.log", ".log") is None
    assert parse_file_name("0000000000000000123x.log", ".log") is None
    assert parse_file_name("00000000000000001234.log", ".index") is None


# ---------------------------------------------------------------------------------------------- indexes


def test_offset_index_file_uses_kafka_8_byte_big_endian_entries(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", base_offset=100)
    index.reset()
    index.append(105, 4097)
    index.append(130, 9000)
    index.persist()
    index.close()
    assert (tmp_path / "x.index").read_bytes() == struct.pack(">IIII", 5, 4097, 30, 9000)


def test_offset_index_lookup_returns_position_of_largest_last_offset_not_above_target(tmp_path: Path) -> None:
    index = OffsetIndex(tmp_path / "x.index", base_offset=100)
    index.reset()
    for last_offset, position in [(110, 1000), (120, 2000), (130, 3000)]:
        index.append(last_offset, position)
    assert index.lookup(100) == 0
    assert index.lookup(109) == 0
    assert index.lookup(110) == 1000
    assert index.lookup(125) == 2000
    assert index.lookup(10**6) == 3000
    assert index.count_below(120) == 1
    assert index.floor_position(2999) == 2000


def test_offset_index_load_rejects_partial_entries_and_disorder(tmp_path: Path) -> None:
    path = tmp_path / "x.index"
    path.write_bytes(struct.pack(">II", 1, 10) + b"\x00")
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0).load()
    path.write_bytes(struct.pack(">IIII", 5, 100, 3, 200))
    with pytest.raises(CorruptIndexError):
        OffsetIndex(path, 0).load()
    path.write_bytes(struct.pack(">IIII", 3, 100, 5, 200))
    index = OffsetIndex(path, 0)
    index.load()
    assert len(index) == 2


def test_time_index_keeps_only_growing_timestamps_in_kafka_12_byte_entries(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", base_offset=50)
    index.reset()
    index.maybe_append(1_000, 55)
    index.maybe_append(1_000, 60)  # not larger: ignored
    index.maybe_append(900, 61)  # smaller: ignored
    index.maybe_append(2_000, 70)
    index.persist()
    index.close()
    assert (tmp_path / "x.timeindex").read_bytes() == struct.pack(">qIqI", 1_000, 5, 2_000, 20)
    assert index.lookup_below(1_000) is None
    assert index.lookup_below(1_001) == 55
    assert index.lookup_below(5_000) == 70
    assert index.last == (2_000, 70)


# ---------------------------------------------------------------------------------------- append / read


def test_append_writes_batches_and_indexes_each_interval(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=1000)
    written = fill(segment, 60)
    assert segment.log_path.read_bytes() == b"".join(written)
    index = OffsetIndex(segment.offset_index.path, 1000)
    index.load()
    assert len(index) > 3
    previous = 0
    for i in range(len(index)):
        last_offset, position = index.entry(i)
        header = read_header(segment.log_path.read_bytes(), position)
        # every entry maps a batch's last offset to that batch's position
        assert header.last_offset == last_offset
        assert position - previous > INTERVAL
        previous = position


def test_index_entry_goes_before_the_batch_that_follows_more_than_an_interval_of_bytes(tmp_path: Path) -> None:
    size = len(batch(0))
    segment = new_segment(tmp_path, interval=2 * size)
    for offset in range(10):
        fill_one(segment, batch(offset))
    # Kafka's rule: strictly more than the interval since the last entry, so every third batch here
    assert [segment.offset_index.entry(i) for i in range(len(segment.offset_index))] == [
        (3, 3 * size),
        (6, 6 * size),
        (9, 9 * size),
    ]


def test_time_index_tracks_largest_timestamp_and_its_batch(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 80)
    headers = [read_header(b) for b in written]
    largest = max(headers, key=lambda h: h.max_timestamp)
    assert segment.max_timestamp == largest.max_timestamp
    assert segment.offset_of_max_timestamp == largest.last_offset
    segment.seal()
    index = TimeIndex(segment.time_index.path, 0)
    index.load()
    # sealing adds the segment's largest timestamp as the last entry
    assert index.last == (largest.max_timestamp, largest.last_offset)


def test_translate_offset_finds_the_batch_containing_every_offset(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=500)
    written = fill(segment, 70)
    for data in written:
        header = read_header(data)
        for offset in range(header.base_offset, header.last_offset + 1):
            found = segment.translate_offset(offset)
            assert found is not None
            assert found[1].base_offset == header.base_offset
    assert segment.translate_offset(segment.next_offset) is None


def test_read_returns_at_least_one_whole_batch_and_never_a_partial_one(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 50)
    sizes = {read_header(b).base_offset: len(b) for b in written}
    for max_bytes in (0, 1, 100, 333, 1024, 5000, 10**6):
        for data in written[::3]:
            start = read_header(data).base_offset
            out, next_offset = segment.read(start, max_bytes, upper_bound_offset=segment.next_offset)
            spans = headers_of(out)
            assert spans[0][0] == start
            assert len(out) <= max(max_bytes, sizes[start])
            assert next_offset == spans[-1][1] + 1
            if next_offset < segment.next_offset:
                # it stopped only because the next batch did not fit
                assert len(out) + sizes[next_offset] > max_bytes


def test_read_stops_before_the_batch_reaching_the_upper_bound(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    for offset in range(0, 30, 3):
        fill_one(segment, batch(offset, 3))
    out, next_offset = segment.read(4, 10**6, upper_bound_offset=13)
    assert headers_of(out) == [(3, 5), (6, 8), (9, 11)]
    assert next_offset == 12
    # the bound inside the first batch: nothing at all
    assert segment.read(4, 10**6, upper_bound_offset=5) == (b"", 4)


def fill_one(segment: LogSegment, data: bytes) -> None:
    header = read_header(data)
    segment.append([data], [(header.last_offset, header.max_timestamp, len(data))], len(data))


def test_find_offset_by_timestamp_matches_a_full_scan(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 120, random.Random(3))
    records = []
    for data in written:
        records.extend(decode_records(data))
    for target in [-5, 0, 17, 2_500, 5_000, 9_999, 10_003, 20_000]:
        expected = next(((r.timestamp, r.offset) for r in records if r.timestamp >= target), None)
        if expected is not None:
            # Kafka's contract: the first batch reaching the target, then its first record reaching it
            first_batch = next(read_header(b) for b in written if read_header(b).max_timestamp >= target)
            expected = next(
                (r.timestamp, r.offset)
                for r in records
                if first_batch.base_offset <= r.offset <= first_batch.last_offset and r.timestamp >= target
            )
        assert segment.find_offset_by_timestamp(target, 0) == expected


# ------------------------------------------------------------------------------------------------ recovery


def test_recover_from_last_index_entry_scans_only_the_tail(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 200)
    segment.close()
    reopened = reopen(tmp_path)
    result = reopened.recover(recovery_point=read_header(written[-1]).next_offset)
    assert result.truncated_bytes == 0
    assert result.start_position > 0
    assert result.scanned_bytes <= INTERVAL + max(len(b) for b in written) * 2
    assert reopened.next_offset == read_header(written[-1]).next_offset
    assert reopened.offset_index.path.read_bytes() == segment.offset_index.path.read_bytes()


def test_recover_truncates_a_torn_tail_and_rebuilds_identical_indexes(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 100)
    segment.close()
    good_index = segment.offset_index.path.read_bytes()
    keep = sum(len(b) for b in written[:-1])
    with open(segment.log_path, "r+b") as file:
        file.truncate(keep + len(written[-1]) // 2)
    reopened = reopen(tmp_path)
    result = reopened.recover(recovery_point=None)
    assert result.truncated_bytes == len(written[-1]) // 2
    assert reopened.size == keep == os.path.getsize(segment.log_path)
    assert reopened.next_offset == read_header(written[-1]).base_offset
    # entries that pointed at the lost batch are gone; the others are rebuilt byte for byte
    assert good_index.startswith(reopened.offset_index.path.read_bytes())


def test_recover_truncates_at_a_batch_failing_its_crc(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 40)
    segment.close()
    damaged_at = sum(len(b) for b in written[:30])
    with open(segment.log_path, "r+b") as file:
        file.seek(damaged_at + 70)
        byte = file.read(1)
        file.seek(damaged_at + 70)
        file.write(bytes([byte[0] ^ 0xFF]))
    reopened = reopen(tmp_path)
    result = reopened.recover(recovery_point=None)
    assert "CRC" in (result.reason or "")
    assert reopened.size == damaged_at
    assert reopened.next_offset == read_header(written[30]).base_offset


def test_recover_truncates_where_offsets_stop_being_contiguous(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill_one(segment, batch(0, 2))
    fill_one(segment, batch(2, 2))
    # a batch that skips offset 4: the log must never contain a gap
    gap = with_base_offset(batch(0, 1), 5)
    segment.append([gap], [(5, 1_000, len(gap))], len(gap))
    segment.close()
    reopened = reopen(tmp_path)
    result = reopened.recover(recovery_point=None)
    assert "expected 4" in (result.reason or "")
    assert reopened.next_offset == 4
    assert reopened.size == len(batch(0, 2)) + len(batch(2, 2))


def test_recover_rejects_a_first_batch_not_at_the_segment_base(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=10)
    fill_one(segment, batch(11, 2))
    segment.close()
    reopened = reopen(tmp_path, base_offset=10)
    reopened.recover(recovery_point=None)
    assert reopened.size == 0 and reopened.next_offset == 10


def test_recover_rescans_everything_when_the_index_disagrees_with_the_log(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill(segment, 100)
    segment.close()
    good_index = segment.offset_index.path.read_bytes()
    entries = list(struct.iter_unpack(">II", good_index))
    # plausible-looking but wrong: every position shifted by one byte
    segment.offset_index.path.write_bytes(b"".join(struct.pack(">II", o, p + 1) for o, p in entries))
    reopened = reopen(tmp_path)
    result = reopened.recover(recovery_point=reopened.size * 10)
    assert result.start_position == 0
    assert result.truncated_bytes == 0
    assert reopened.offset_index.path.read_bytes() == good_index


def test_recover_handles_a_batch_larger_than_the_read_chunk(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    fill_one(segment, batch(0, 1))
    fill_one(segment, batch(1, 3, value_size=600_000))  # 1.8 MB, past the 1 MiB chunk
    fill_one(segment, batch(4, 1))
    segment.close()
    reopened = reopen(tmp_path)
    result = reopened.recover(recovery_point=None)
    assert result.truncated_bytes == 0
    assert reopened.next_offset == 5
    assert [h.base_offset for h, _ in reopened.iter_batches(0, reopened.size, verify_crc=True)] == [0, 1, 4]


def test_sealed_segment_with_garbled_index_rebuilds_it_on_first_use(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 100)
    segment.seal()
    segment.close()
    good = segment.offset_index.path.read_bytes()
    entries = list(struct.iter_unpack(">II", good))
    # reversed entries: the last one still looks plausible, so only the full check catches it
    segment.offset_index.path.write_bytes(b"".join(struct.pack(">II", *e) for e in reversed(entries)))
    reopened = reopen(tmp_path)
    end = read_header(written[-1]).next_offset
    assert reopened.check_sealed(end)
    target = read_header(written[77]).base_offset
    found = reopened.translate_offset(target)
    assert found is not None and found[1].base_offset == target
    assert segment.offset_index.path.read_bytes() == good


def test_check_sealed_refuses_an_index_pointing_past_the_segment(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    written = fill(segment, 60)
    segment.seal()
    segment.close()
    end = read_header(written[-1]).next_offset
    assert reopen(tmp_path).check_sealed(end)
    with open(segment.offset_index.path, "ab") as file:
        file.write(struct.pack(">II", end + 5, 10**6))
    assert not reopen(tmp_path).check_sealed(end)
    segment.offset_index.path.unlink()
    assert not reopen(tmp_path).check_sealed(end)


def test_empty_sealed_segment_reports_no_timestamp(tmp_path: Path) -> None:
    segment = new_segment(tmp_path)
    segment.seal()
    assert segment.max_timestamp == NO_TIMESTAMP
    assert segment.time_index.path.read_bytes() == b""


# ------------------------------------------------------------------------------------------- txn index


def test_txn_index_file_is_appended_read_and_replaced_verbatim(tmp_path: Path) -> None:
    segment = new_segment(tmp_path, base_offset=42)
    assert segment.read_txn_index() == b""
    segment.append_txn_index(b"a" * 34)
    segment.append_txn_index(b"b" * 34)
    segment.fsync_txn_index()
    assert segment.read_txn_index() == b"a" * 34 + b"b" * 34
    assert segment.txn_index_path.name == "00000000000000000042.txnindex"
    segment.replace_txn_index(b"c" * 34)
    segment.append_txn_index(b"d" * 34)
    assert segment.read_txn_index() == b"c" * 34 + b"d" * 34
    assert not list(tmp_path.glob("*.tmp"))
    segment.delete()
    assert not list(tmp_path.iterdir())
