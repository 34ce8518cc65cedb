"""Tests of the partition log on real files: offsets, reads, roll, retention, recovery, snapshots, group commit.

Crash behaviour is tested two ways: by damaging files of a closed log, by copying the directory of a log
that is still open (the image a crash would leave, with the recovery point of the last checkpoint), and
by SIGKILLing a real appender process in the middle of its work (tests/integration/test_partition_log_crash.py).
"""

from __future__ import annotations

import asyncio
import itertools
import random
import shutil
import threading
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oncelog.errors import CorruptMessage, InvalidConfig, OffsetOutOfRange, StorageUnavailable
from oncelog.partition_storage.partition_log import (
    CHECKPOINT_FILE,
    FlushCoordinator,
    PartitionLog,
    TimestampOffset,
)
from oncelog.partition_storage.segment import file_name
from oncelog.records import (
    Record,
    build_batch,
    decode_records,
    read_header,
    split_batches,
    validate_batch,
    with_base_offset,
)

INTERVAL = 512


class Clock:
    """Injected wall clock, in milliseconds."""

    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make_batch(records: int = 1, value_size: int = 40, timestamp: int = 1_000, key: bytes = b"k") -> bytes:
    """A client batch (base offset 0, as a producer sends it)."""
    return build_batch(
        [Record(key=key, value=b"v" * value_size, timestamp=timestamp + i) for i in range(records)],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
    )


def open_log(directory: Path, clock: Clock | None = None, **config: int) -> PartitionLog:
    config.setdefault("index_interval_bytes", INTERVAL)
    return PartitionLog(directory, clock=clock or Clock(), **config)


def fill(log: PartitionLog, count: int, seed: int = 1, timestamp: Callable[[int], int] | None = None) -> list[bytes]:
    """Append ``count`` random batches in groups; returns the client batches in offset order."""
    rng = random.Random(seed)
    batches = []
    while len(batches) < count:
        group = [
            make_batch(rng.randint(1, 5), rng.randint(0, 300), timestamp(len(batches) + i) if timestamp else 1_000)
            for i in range(min(rng.randint(1, 4), count - len(batches)))
        ]
        log.append(group)
        batches.extend(group)
    return batches


def spans(data: bytes) -> list[tuple[int, int]]:
    batches, valid = split_batches(data)
    assert valid == len(data), "reads must return whole, CRC-valid batches only"
    return [(h.base_offset, h.last_offset) for h, _ in batches]


def all_batches(log: PartitionLog) -> list[tuple[int, int]]:
    return [(h.base_offset, h.last_offset) for h, _ in log.batches_from(log.log_start_offset, verify_crc=True)]


def read_everything(log: PartitionLog) -> list[tuple[bytes, int]]:
    return [log.read(offset, 1) for offset in range(log.log_start_offset, log.log_end_offset + 1)]


def assert_contiguous(batches: list[tuple[int, int]], start: int, end: int) -> None:
    expected = start
    for base, last in batches:
        assert base == expected
        assert last >= base
        expected = last + 1
    assert expected == end


def batches_bytes(log: PartitionLog) -> Iterator[bytes]:
    for _, data in log.batches_from(log.log_start_offset):
        yield data


def log_offset_for(records: list[Record], target: int) -> TimestampOffset:
    return next(TimestampOffset(r.timestamp, r.offset) for r in records if r.timestamp >= target)


def log_segment_size(log: PartitionLog, base: int) -> int:
    return (log.directory / file_name(base, ".log")).stat().st_size


def copy_crash_image(log: PartitionLog, target: Path) -> Path:
    """The files of a log that is still open: what a crash of the process would leave behind."""
    shutil.copytree(log.directory, target)
    return target


# ------------------------------------------------------------------------------------------------- append


def test_offsets_are_contiguous_across_appends_and_rolls(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=4_000) as log:
        ranges = []
        rng = random.Random(5)
        for _ in range(200):
            group = [make_batch(rng.randint(1, 6), rng.randint(0, 200)) for _ in range(rng.randint(1, 3))]
            ranges.extend(log.append(group))
        assert len(log.segment_bases) > 5
        assert_contiguous(ranges, 0, log.log_end_offset)
        assert all_batches(log) == ranges
        # every segment starts where the previous one ended
        assert log.segment_bases == [base for base, _ in ranges if base in set(log.segment_bases)]


def test_append_stores_the_client_bytes_with_only_the_base_offset_changed(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        log.append([make_batch(3)])
        client = make_batch(2, 77, key=b"client")
        [(base, last)] = log.append([client])
        assert (base, last) == (3, 4)
        stored, _ = log.read(base, 10**6)
        assert stored == with_base_offset(client, 3)
        validate_batch(stored)  # the producer's CRC still holds


def test_append_sets_the_partition_leader_epoch_when_given(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        client = make_batch()
        log.append([client], partition_leader_epoch=9)
        stored, _ = log.read(0, 10**6)
        assert stored == with_base_offset(client, 0, 9)
        assert read_header(stored).partition_leader_epoch == 9
        with pytest.raises(ValueError):
            log.append([client], partition_leader_epoch=2**31)


def test_one_append_of_more_batches_than_writev_takes_is_stored_whole(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        clients = [make_batch(1 + i % 3, i % 50, key=b"%d" % i) for i in range(1500)]
        ranges = log.append(clients)
        assert_contiguous(ranges, 0, log.log_end_offset)
        stored = [data for _, data in log.batches_from(0, verify_crc=True)]
        assert stored == [with_base_offset(c, base) for c, (base, _) in zip(clients, ranges, strict=True)]


def test_append_rejects_a_buffer_that_is_not_exactly_one_batch_and_writes_nothing(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        log.append([make_batch()])
        with pytest.raises(CorruptMessage):
            log.append([make_batch(), make_batch() + b"\x00"])
        with pytest.raises(CorruptMessage):
            log.append([make_batch()[:-1]])
        with pytest.raises(CorruptMessage):
            log.append([make_batch()[:16] + b"\x01" + make_batch()[17:]])  # magic 1
        with pytest.raises(CorruptMessage):
            log.append([b"\x00" * 20])
        assert log.log_end_offset == 1
        assert log.size_in_bytes == len(make_batch())


# --------------------------------------------------------------------------------------------------- read


def test_read_at_any_offset_returns_the_batch_containing_it(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=6_000) as log:
        fill(log, 150)
        batches = all_batches(log)
        containing = {offset: (base, last) for base, last in batches for offset in range(base, last + 1)}
        for offset in range(log.log_end_offset):
            data, next_offset = log.read(offset, 1)
            assert spans(data) == [containing[offset]]
            assert next_offset == containing[offset][1] + 1


def test_read_respects_max_bytes_but_returns_one_oversized_batch_whole(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=50_000) as log:
        fill(log, 120, seed=3)
        sizes = {read_header(b).base_offset: len(b) for b in batches_bytes(log)}
        rng = random.Random(11)
        for _ in range(300):
            offset = rng.randrange(log.log_end_offset)
            max_bytes = rng.choice([0, 1, 50, 400, 1_000, 4_096, 20_000])
            data, next_offset = log.read(offset, max_bytes)
            got = spans(data)
            first_base = got[0][0]
            assert first_base <= offset <= got[0][1]
            assert len(data) <= max(max_bytes, sizes[first_base])
            assert next_offset == got[-1][1] + 1
            following = sizes.get(next_offset)
            # one read stays within one segment, like Kafka's
            segment_end = next((b for b in log.segment_bases if b > first_base), log.log_end_offset)
            if following is not None and next_offset < segment_end:
                assert len(data) + following > max_bytes


def test_read_never_returns_a_batch_at_or_past_the_upper_bound(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=8_000) as log:
        fill(log, 100, seed=4)
        rng = random.Random(2)
        for _ in range(300):
            offset = rng.randrange(log.log_end_offset)
            upper = rng.randrange(offset, log.log_end_offset + 1)
            data, next_offset = log.read(offset, rng.choice([1, 10**6]), upper)
            got = spans(data) if data else []
            assert all(last < upper for _, last in got)
            assert next_offset == (got[-1][1] + 1 if got else offset)


def test_read_at_the_log_end_is_empty_and_outside_the_log_is_out_of_range(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        assert log.read(0, 100) == (b"", 0)
        log.append([make_batch(3)])
        assert log.read(3, 100) == (b"", 3)
        with pytest.raises(OffsetOutOfRange):
            log.read(4, 100)
        with pytest.raises(OffsetOutOfRange):
            log.read(-1, 100)
        with pytest.raises(ValueError):
            log.read(0, -1)


def test_batches_from_replays_from_the_batch_containing_the_offset(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=5_000) as log:
        fill(log, 80)
        batches = all_batches(log)
        middle = batches[40]
        replayed = [(h.base_offset, h.last_offset) for h, _ in log.batches_from(middle[1])]
        assert replayed == batches[40:]
        assert list(log.batches_from(log.log_end_offset)) == []
        with pytest.raises(OffsetOutOfRange):
            log.batches_from(log.log_end_offset + 1)


def test_offset_for_timestamp_searches_across_segments(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=3_000) as log:
        fill(log, 90, timestamp=lambda i: 10_000 + 10 * i)
        assert len(log.segment_bases) > 3
        records = [r for data in batches_bytes(log) for r in decode_records(data)]
        for target in [0, 10_000, 10_001, 10_455, 10_880, 10_890, 99_999]:
            expected = next((TimestampOffset(r.timestamp, r.offset) for r in records if r.timestamp >= target), None)
            assert log.offset_for_timestamp(target) == expected
        log.close()
        with open_log(tmp_path / "p", segment_bytes=3_000) as reopened:
            assert reopened.offset_for_timestamp(10_455) == log_offset_for(records, 10_455)


# ------------------------------------------------------------------------------------------------ rolling


def test_roll_by_size_keeps_segments_under_segment_bytes_and_full(tmp_path: Path) -> None:
    rng = random.Random(8)
    with open_log(tmp_path / "p", segment_bytes=2_000) as log:
        for _ in range(100):
            log.append([make_batch(rng.randint(1, 3), rng.randint(0, 400))])
        names = sorted(p.name for p in (tmp_path / "p").glob("*.log"))
        assert names == [file_name(base, ".log") for base in log.segment_bases]
        bases = log.segment_bases
        for base, following in itertools.pairwise(bases):
            size = log_segment_size(log, base)
            assert size <= 2_000
            # rolled only because the next batch did not fit
            first_of_next = log.read(following, 1)[0]
            assert size + len(first_of_next) > 2_000


def test_batch_larger_than_a_segment_gets_a_segment_of_its_own(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=1_000) as log:
        log.append([make_batch(1, 100)])
        big = make_batch(3, 2_000)
        [(base, _)] = log.append([big])
        log.append([make_batch(1, 100)])
        assert log.segment_bases == [0, 1, 4]
        assert base == 1
        assert log.read(1, 1)[0][8:] == big[8:]


def test_roll_by_age_uses_the_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    with open_log(tmp_path / "p", clock, segment_ms=60_000) as log:
        log.append([make_batch()])
        clock.now += 60_000
        log.append([make_batch()])
        assert log.segment_bases == [0]
        clock.now += 1
        log.append([make_batch()])
        assert log.segment_bases == [0, 2]
        clock.now += 59_999
        log.append([make_batch()])
        assert log.segment_bases == [0, 2]


def test_empty_active_segment_never_rolls(tmp_path: Path) -> None:
    clock = Clock()
    with open_log(tmp_path / "p", clock, segment_ms=10, segment_bytes=100) as log:
        clock.now += 1_000
        log.append([make_batch(1, 500)])
        assert log.segment_bases == [0]


# ---------------------------------------------------------------------------------------------- retention


def test_retention_by_size_deletes_oldest_segments_but_never_the_active_one(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=2_000, retention_bytes=5_000) as log:
        fill(log, 120)
        log.flush()
        bases = log.segment_bases
        deleted = log.enforce_retention()
        assert deleted and deleted == bases[: len(deleted)]
        assert log.log_start_offset == log.segment_bases[0] == bases[len(deleted)]
        # Kafka's rule: drop a segment only if the log stays at or above the limit without it
        assert log.size_in_bytes >= 5_000
        assert log.size_in_bytes - log_segment_size(log, log.log_start_offset) < 5_000
        for base in deleted:
            assert not list((tmp_path / "p").glob(file_name(base, ".*")))
        with pytest.raises(OffsetOutOfRange):
            log.read(log.log_start_offset - 1, 100)
        assert log.enforce_retention() == []
    with open_log(tmp_path / "q", segment_bytes=2_000, retention_bytes=0) as log:
        fill(log, 60)
        log.enforce_retention()
        # a zero budget still leaves the active segment
        assert log.segment_bases == [log.active_segment_base]
        assert log.read(log.log_start_offset, 10)[0]


def test_reconfigured_retention_and_segment_size_apply_to_the_open_log(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=2_000, retention_bytes=-1) as log:
        fill(log, 120)
        log.flush()
        assert log.enforce_retention() == []  # no limit yet
        with pytest.raises(InvalidConfig, match="retention_bytes must be -1"):
            log.reconfigure(segment_bytes=2_000, segment_ms=10**9, retention_bytes=-5, retention_ms=-1)
        assert log.enforce_retention() == []  # a refused change changes nothing
        log.reconfigure(segment_bytes=500, segment_ms=10**9, retention_bytes=0, retention_ms=-1)
        assert log.enforce_retention()
        assert log.segment_bases == [log.active_segment_base]
        before = len(log.segment_bases)
        fill(log, 20)
        assert len(log.segment_bases) > before  # rolls at the new, smaller size


def test_retention_by_time_uses_largest_timestamps_and_spares_the_active_segment(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=1_500, retention_ms=1_000) as log:
        fill(log, 60, timestamp=lambda i: 100 * i)
        log.flush()
        bases = log.segment_bases
        largest = {}
        for header, _ in log.batches_from(0):
            base = bases[bisect_right(bases, header.base_offset) - 1]
            largest[base] = max(largest.get(base, -1), header.max_timestamp)
        assert log.enforce_retention(now_ms=0) == []
        deleted = log.enforce_retention(now_ms=3_000)
        assert deleted == [base for base in bases[:-1] if 3_000 - largest[base] > 1_000]
        assert deleted and len(deleted) < len(bases) - 1
        assert log.enforce_retention(now_ms=10**12) == bases[len(deleted) : -1]
        assert log.segment_bases == [bases[-1]]
        assert log.append([make_batch()])[0][0] == log.log_end_offset - 1


def test_txn_index_files_follow_their_segment(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=1_500, retention_bytes=0) as log:
        fill(log, 10)
        first = log.active_segment_base
        log.append_txn_index_entry(first, b"A" * 34)
        fill(log, 30)
        second = log.active_segment_base
        assert second != first
        log.append_txn_index_entry(second, b"B" * 34)
        log.append_txn_index_entry(second, b"C" * 34)
        log.flush()
        assert log.read_txn_index(first) == b"A" * 34
        assert log.read_txn_index(second) == b"B" * 34 + b"C" * 34
        with pytest.raises(ValueError):
            log.read_txn_index(second + 1)
    with open_log(tmp_path / "p", segment_bytes=1_500, retention_bytes=0) as log:
        assert log.read_txn_index(second) == b"B" * 34 + b"C" * 34
        log.replace_txn_index(second, b"D" * 34)
        assert log.read_txn_index(second) == b"D" * 34
        log.enforce_retention()
        assert not (tmp_path / "p" / file_name(first, ".txnindex")).exists()


# ----------------------------------------------------------------------------------------------- recovery


def test_reopen_after_clean_close_gives_identical_reads_and_scans_only_the_tail(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=20_000) as log:
        fill(log, 300)
        before = read_everything(log)
        end = log.log_end_offset
    assert (tmp_path / "p" / CHECKPOINT_FILE).read_text().split() == ["0", str(end)]
    with open_log(tmp_path / "p", segment_bytes=20_000) as log:
        assert log.recovery.recovery_point == end
        assert log.recovery.truncated_bytes == 0
        # one index interval plus a few batches, not the segment
        assert 0 < log.recovery.scanned_bytes <= INTERVAL + 3 * 1_500
        assert read_everything(log) == before
        log.append([make_batch(2)])
        assert log.log_end_offset == end + 2


def test_torn_tail_is_cut_at_the_last_whole_batch_and_appends_continue(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        ranges = [log.append([make_batch(2, 100)])[0] for _ in range(30)]
        active = log.directory / file_name(log.active_segment_base, ".log")
    size = active.stat().st_size
    with open(active, "r+b") as file:
        file.truncate(size - 50)  # the last batch loses its end
    with open_log(tmp_path / "p") as log:
        assert log.recovery.truncated_bytes == len(make_batch(2, 100)) - 50
        assert log.log_end_offset == ranges[-1][0]
        assert all_batches(log) == ranges[:-1]
        assert log.append([make_batch(3)]) == [(ranges[-1][0], ranges[-1][0] + 2)]
    with open_log(tmp_path / "p") as log:
        assert all_batches(log) == [*ranges[:-1], (ranges[-1][0], ranges[-1][0] + 2)]


def test_flipped_byte_in_the_last_batch_cuts_that_batch(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        ranges = [log.append([make_batch(1, 200)])[0] for _ in range(40)]
        active = log.directory / file_name(log.active_segment_base, ".log")
    size = active.stat().st_size
    with open(active, "r+b") as file:
        file.seek(size - 20)
        byte = file.read(1)
        file.seek(size - 20)
        file.write(bytes([byte[0] ^ 0x01]))
    with open_log(tmp_path / "p") as log:
        assert "CRC" in (log.recovery.segments[-1].reason or "")
        assert all_batches(log) == ranges[:-1]
        assert active.stat().st_size == size - len(make_batch(1, 200))
        assert log.append([make_batch()]) == [(39, 39)]


def test_index_is_rebuilt_identically_after_its_file_is_deleted(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=30_000) as log:
        fill(log, 400)
        before = read_everything(log)
        bases = log.segment_bases
    assert len(bases) >= 3
    directory = tmp_path / "p"
    indexes = {p.name: p.read_bytes() for p in directory.glob("*index")}
    sealed, active = bases[0], bases[-1]
    for base in (sealed, active):
        (directory / file_name(base, ".index")).unlink()
        (directory / file_name(base, ".timeindex")).unlink()
    with open_log(directory, segment_bytes=30_000) as log:
        rebuilt = {s.base_offset for s in log.recovery.segments if s.start_position == 0}
        assert rebuilt == {sealed, active}
        assert read_everything(log) == before
    assert {p.name: p.read_bytes() for p in directory.glob("*index")} == indexes


def test_garbage_in_the_active_index_is_detected_and_rebuilt(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        fill(log, 200)
        before = read_everything(log)
        index_path = log.directory / file_name(log.active_segment_base, ".index")
    good = index_path.read_bytes()
    index_path.write_bytes(random.Random(0).randbytes(len(good)))
    with open_log(tmp_path / "p") as log:
        assert log.recovery.segments[-1].start_position == 0
        assert read_everything(log) == before
    assert index_path.read_bytes() == good


def test_crash_image_is_recovered_from_the_checkpointed_recovery_point(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=10_000)
    fill(log, 150)
    log.flush()  # checkpoints the recovery point: the flush follows rolls
    checkpointed = log.log_end_offset
    bases = log.segment_bases
    for _ in range(5):
        log.append([make_batch(2, 10)])
    assert log.segment_bases == bases
    log.flush()  # no roll since: the recovery point advances in memory only
    assert log.recovery_point == log.log_end_offset > checkpointed
    before = read_everything(log)
    image = copy_crash_image(log, tmp_path / "image")
    log.close()
    with open_log(image, segment_bytes=10_000) as recovered:
        assert recovered.recovery.recovery_point == checkpointed
        assert recovered.recovery.truncated_bytes == 0
        assert read_everything(recovered) == before
        # recovery made the rescanned tail durable and checkpointed it
        end = recovered.log_end_offset
        assert recovered.recovery_point == end
        assert (image / CHECKPOINT_FILE).read_text().split() == ["0", str(end)]


def test_segments_after_a_damaged_one_are_deleted_to_keep_offsets_contiguous(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p", segment_bytes=3_000)
    batches = fill(log, 100)  # never flushed: the image's recovery point is the log start
    bases = log.segment_bases
    log.write_snapshot(bases[2], b"state at the third segment")
    log.write_snapshot(bases[1], b"state at the second segment")
    image = copy_crash_image(log, tmp_path / "image")
    log.close()
    assert len(bases) > 4
    damaged = image / file_name(bases[1], ".log")
    with open(damaged, "r+b") as file:
        file.seek(200)
        byte = file.read(1)
        file.seek(200)
        file.write(bytes([byte[0] ^ 0x80]))
    with open_log(image, segment_bytes=3_000) as recovered:
        assert recovered.recovery.recovery_point == 0
        assert recovered.recovery.deleted_segments == tuple(bases[2:])
        assert recovered.segment_bases == bases[:2]
        assert recovered.recovery.deleted_snapshots == (bases[2],)
        assert recovered.snapshot_offsets() == [bases[1]]
        end = recovered.log_end_offset
        assert bases[1] <= end < bases[2]
        assert_contiguous(all_batches(recovered), 0, end)
        stored = [data for _, data in recovered.batches_from(0)]
        assert [s[8:] for s in stored] == [b[8:] for b in batches[: len(stored)]]
        assert recovered.append([make_batch()]) == [(end, end)]


def test_leftover_temporary_files_and_orphan_indexes_are_removed_on_open(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        log.append([make_batch()])
    directory = tmp_path / "p"
    (directory / (file_name(5, ".snapshot") + ".tmp")).write_bytes(b"half")
    (directory / file_name(999, ".index")).write_bytes(b"")
    with open_log(directory) as log:
        assert log.log_end_offset == 1
    assert not list(directory.glob("*.tmp"))
    assert not (directory / file_name(999, ".index")).exists()


def test_a_directory_can_be_open_in_only_one_log(tmp_path: Path) -> None:
    with open_log(tmp_path / "p"), pytest.raises(StorageUnavailable):
        open_log(tmp_path / "p")
    with open_log(tmp_path / "p") as log:
        assert log.log_end_offset == 0


def test_closed_log_refuses_writes(tmp_path: Path) -> None:
    log = open_log(tmp_path / "p")
    log.close()
    log.close()
    with pytest.raises(StorageUnavailable):
        log.append([make_batch()])
    with pytest.raises(StorageUnavailable):
        log.flush()


def test_invalid_settings_are_rejected_together() -> None:
    with pytest.raises(InvalidConfig) as info:
        PartitionLog("/nonexistent/never-created", segment_bytes=0, retention_ms=-2, index_interval_bytes=-1)
    assert "segment_bytes" in str(info.value) and "retention_ms" in str(info.value)
    assert "index_interval_bytes" in str(info.value)


# ---------------------------------------------------------------------------------------------- snapshots


def test_snapshots_are_atomic_and_only_the_newest_two_are_kept(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        assert log.latest_snapshot() is None
        for i in range(4):
            log.append([make_batch()])
            log.write_snapshot(log.log_end_offset, b"state %d" % i)
        assert log.snapshot_offsets() == [3, 4]
        assert log.latest_snapshot() == (4, b"state 3")
        assert (tmp_path / "p" / "00000000000000000004.snapshot").read_bytes() == b"state 3"
        assert not list((tmp_path / "p").glob("*.tmp"))
        # a corrupt newest snapshot: the engine deletes it and falls back to the previous one
        log.delete_snapshot(4)
        assert log.latest_snapshot() == (3, b"state 2")
        with pytest.raises(ValueError):
            log.write_snapshot(log.log_end_offset + 1, b"future")


def test_snapshots_above_the_log_end_are_deleted_when_recovery_truncates(tmp_path: Path) -> None:
    with open_log(tmp_path / "p") as log:
        ranges = [log.append([make_batch(2)])[0] for _ in range(5)]
        log.write_snapshot(6, b"at 6")
        log.write_snapshot(10, b"at 10")
        active = log.directory / file_name(0, ".log")
    with open(active, "r+b") as file:
        file.truncate(active.stat().st_size - 1)
    with open_log(tmp_path / "p") as log:
        assert log.log_end_offset == ranges[-1][0] == 8
        assert log.recovery.deleted_snapshots == (10,)
        assert log.latest_snapshot() == (6, b"at 6")


# ---------------------------------------------------------------------------------------------- durability


def test_flush_advances_the_recovery_point_and_rolls_checkpoint_it(tmp_path: Path) -> None:
    with open_log(tmp_path / "p", segment_bytes=2_000) as log:
        checkpoint = tmp_path / "p" / CHECKPOINT_FILE
        log.append([make_batch()])
        assert log.recovery_point == 0
        log.flush()
        assert log.recovery_point == 1
        assert checkpoint.read_text().split() == ["0", "0"]  # no roll yet: not rewritten
        fill(log, 40)
        log.flush()
        assert log.recovery_point == log.log_end_offset
        assert checkpoint.read_text().split() == ["0", str(log.log_end_offset)]


# -------------------------------------------------------------------------------------------- group commit


class RecordingFlush:
    """Wraps ``PartitionLog.flush`` and stamps the start and end of every run on a shared event counter."""

    def __init__(self, flush: Callable[[], None], ticks: Iterator[int]) -> None:
        self._flush = flush
        self._ticks = ticks
        self.runs: list[tuple[int, int]] = []

    def __call__(self) -> None:
        start = next(self._ticks)
        self._flush()
        self.runs.append((start, next(self._ticks)))


async def test_concurrent_appenders_share_fsyncs_and_ack_only_after_a_later_fsync(tmp_path: Path) -> None:
    ticks = itertools.count()
    with open_log(tmp_path / "p", segment_bytes=20_000) as log:
        recorder = RecordingFlush(log.flush, ticks)
        flusher = FlushCoordinator(recorder)
        acks: list[tuple[int, int, int]] = []  # (last offset, write tick, ack tick)
        rng = random.Random(0)

        async def appender(rounds: int) -> None:
            for _ in range(rounds):
                [(_, last)] = log.append([make_batch(1, rng.randint(0, 500))])
                written = next(ticks)
                await flusher.sync()
                acks.append((last, written, next(ticks)))
                await asyncio.sleep(0)

        await asyncio.gather(*(appender(20) for _ in range(16)))
        assert len(acks) == 320
        assert len(recorder.runs) == flusher.flush_count < len(acks) / 4
        for last, written, acked in acks:
            assert any(written < start and end < acked for start, end in recorder.runs), (last, written, acked)
        assert log.recovery_point == log.log_end_offset == 320


async def test_write_during_an_inflight_fsync_waits_for_the_next_fsync() -> None:
    release = [threading.Event(), threading.Event()]
    started = [threading.Event(), threading.Event()]
    runs = itertools.count()

    def blocking_flush() -> None:
        run = next(runs)
        started[run].set()
        release[run].wait(timeout=30)

    flusher = FlushCoordinator(blocking_flush)
    first = asyncio.ensure_future(flusher.sync())
    await asyncio.to_thread(started[0].wait, 30)
    # this write lands while flush 0 is running: flush 0 may have missed it
    second = asyncio.ensure_future(flusher.sync())
    await asyncio.sleep(0)
    release[0].set()
    await asyncio.wait_for(first, 30)
    await asyncio.to_thread(started[1].wait, 30)
    assert not second.done()
    release[1].set()
    await asyncio.wait_for(second, 30)
    assert flusher.flush_count == 2


async def test_failed_fsync_fails_every_waiter_and_every_later_sync() -> None:
    calls = []

    def failing_flush() -> None:
        calls.append(1)
        raise OSError(5, "Input/output error")

    flusher = FlushCoordinator(failing_flush)
    results = await asyncio.gather(*(flusher.sync() for _ in range(5)), return_exceptions=True)
    assert all(isinstance(r, StorageUnavailable) and not r.definite for r in results)
    with pytest.raises(StorageUnavailable):
        await flusher.sync()
    assert len(calls) == 1  # no retry: after a failed fsync a later success would prove nothing


async def test_cancelled_waiter_does_not_cancel_the_shared_fsync() -> None:
    release = threading.Event()
    started = threading.Event()
    done = []

    def slow_flush() -> None:
        started.set()
        release.wait(timeout=30)
        done.append(1)

    flusher = FlushCoordinator(slow_flush)
    impatient = asyncio.ensure_future(flusher.sync())  # starts flush 1
    patient = asyncio.ensure_future(flusher.sync())  # arrives during flush 1, so needs flush 2
    await asyncio.to_thread(started.wait, 30)
    impatient.cancel()
    release.set()
    await asyncio.wait_for(patient, 30)
    assert impatient.cancelled()
    # flush 1 ran to completion despite the cancellation (else the patient waiter would have failed)
    assert done == [1, 1]
    assert flusher.flush_count == 2


@pytest.mark.timeout(20)
async def test_sync_yields_when_the_flush_is_done_but_its_callback_has_not_run() -> None:
    """Regression: awaiting an already-done flush future never yields, so sync() must not spin on it."""
    import functools

    from oncelog.partition_storage.partition_log import FlushCoordinator

    flushes: list[int] = []
    coordinator = FlushCoordinator(lambda: flushes.append(1))
    loop = asyncio.get_running_loop()
    done: asyncio.Future[object] = loop.create_future()
    coordinator._started += 1
    coordinator._inflight = done
    done.add_done_callback(functools.partial(coordinator._finished, coordinator._started))
    done.set_result(None)  # done now; its callback is only scheduled
    # awaited directly (not as a task) so sync() runs before the scheduled callback, as in the engine
    await coordinator.sync()
    assert flushes == [1], "the write before sync() needs a flush that started after it"
