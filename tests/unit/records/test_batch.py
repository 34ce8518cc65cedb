"""Unit tests of the RecordBatch v2 codec: layout, flags, control markers, offsets and every error path."""

from __future__ import annotations

import struct
from typing import Any

import google_crc32c
import pytest

from oncelog.errors import CorruptMessage, InvalidRecord
from oncelog.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    BatchHeader,
    Compression,
    ControlType,
    Record,
    TimestampType,
    batches_end_offset,
    build_batch,
    build_control_batch,
    decode_record_fields,
    decode_records,
    iter_batches,
    read_control_record,
    read_header,
    split_batches,
    validate_batch,
    with_base_offset,
)
from oncelog.records.varint import decode_varint, decode_varlong, encode_varint, encode_varlong

HEADER = struct.Struct(">qiibIhiqqqhii")
SUPPORTED = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]

# field offsets in the header, for tests that damage one field
BATCH_LENGTH_AT = 8
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
MAX_TIMESTAMP_AT = 35
PRODUCER_ID_AT = 43
BASE_SEQUENCE_AT = 53
RECORD_COUNT_AT = 57


def sample_records(n: int = 3) -> list[Record]:
    return [
        Record(
            key=f"key-{i}".encode(), value=b"value-%d" % i * 10, headers=(("trace", b"t%d" % i),), timestamp=1_000 + i
        )
        for i in range(n)
    ]


def reseal(batch: bytes | bytearray) -> bytes:
    """Recompute the CRC of a batch edited on purpose, so the edit reaches the checks behind the CRC."""
    data = bytearray(batch)
    struct.pack_into(">I", data, CRC_AT, google_crc32c.value(bytes(data[ATTRIBUTES_AT:])))
    return bytes(data)


def patch(batch: bytes, fmt: str, at: int, value: int, *, seal: bool = True) -> bytes:
    data = bytearray(batch)
    struct.pack_into(fmt, data, at, value)
    return reseal(data) if seal else bytes(data)


def raw_record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


def batch_with_section(section: bytes, *, record_count: int, attributes: int = 0, max_timestamp: int = 0) -> bytes:
    """Assemble a batch around an arbitrary records section, with a correct length and CRC."""
    header = bytearray(
        HEADER.pack(
            0,
            BATCH_OVERHEAD - LOG_OVERHEAD + len(section),
            -1,
            2,
            0,
            attributes,
            record_count - 1,
            0,
            max_timestamp,
            -1,
            -1,
            -1,
            record_count,
        )
    )
    return reseal(header + section)


# --- layout -------------------------------------------------------------------------------------


def test_header_is_61_bytes() -> None:
    assert BATCH_OVERHEAD == HEADER.size == 61
    assert LOG_OVERHEAD == 12


def test_single_record_batch_matches_hand_encoded_bytes() -> None:
    batch = build_batch(
        [Record(b"k", b"v", timestamp=1_000)],
        base_offset=42,
        producer_id=7,
        producer_epoch=3,
        base_sequence=5,
        partition_leader_epoch=9,
    )
    # length 8, attributes 0, timestamp delta 0, offset delta 0, key len 1 "k", value len 1 "v", 0 headers
    records = bytes([0x10, 0x00, 0x00, 0x00, 0x02]) + b"k" + bytes([0x02]) + b"v" + bytes([0x00])
    covered = struct.pack(">hiqqqhii", 0, 0, 1_000, 1_000, 7, 3, 5, 1) + records
    crc = google_crc32c.value(covered)
    expected = struct.pack(">qiibI", 42, 4 + 1 + 4 + len(covered), 9, 2, crc) + covered
    assert batch == expected


def test_crc32c_is_castagnoli() -> None:
    # RFC 3720 check value; a plain CRC-32 would give 0xcbf43926
    assert google_crc32c.value(b"123456789") == 0xE3069283


def test_every_header_field_round_trips() -> None:
    batch = build_batch(
        sample_records(4),
        base_offset=1_000_000_007,
        producer_id=123_456_789_012,
        producer_epoch=17,
        base_sequence=99,
        transactional=True,
        partition_leader_epoch=12,
    )
    header = read_header(batch)
    raw = HEADER.unpack_from(batch)
    assert header == BatchHeader(*raw)
    assert header.base_offset == 1_000_000_007
    assert header.batch_length == len(batch) - LOG_OVERHEAD
    assert header.partition_leader_epoch == 12
    assert header.magic == 2
    assert header.crc == google_crc32c.value(batch[ATTRIBUTES_AT:])
    assert header.attributes == 0x10
    assert header.last_offset_delta == 3
    assert header.base_timestamp == 1_000
    assert header.max_timestamp == 1_003
    assert header.producer_id == 123_456_789_012
    assert header.producer_epoch == 17
    assert header.base_sequence == 99
    assert header.record_count == 4
    assert header.size_in_bytes == len(batch)
    assert header.last_offset == 1_000_000_010
    assert header.next_offset == 1_000_000_011
    assert header.last_sequence == 102
    assert header.has_producer_id


def test_plain_batch_has_no_producer_fields() -> None:
    header = validate_batch(build_batch(sample_records(2)))
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.has_producer_id
    assert header.last_sequence == -1
    assert header.partition_leader_epoch == -1
    assert header.base_offset == 0


@pytest.mark.parametrize("compression", list(Compression))
def test_compression_bits(compression: Compression) -> None:
    header = BatchHeader(0, 49, -1, 2, 0, int(compression) | 0x18, 0, 0, 0, -1, -1, -1, 1)
    assert header.compression is compression
    assert header.is_transactional
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert not header.is_control


@pytest.mark.parametrize("code", [5, 6, 7])
def test_unassigned_compression_ids_are_invalid(code: int) -> None:
    header = BatchHeader(0, 49, -1, 2, 0, code, 0, 0, 0, -1, -1, -1, 1)
    with pytest.raises(InvalidRecord, match=f"unknown compression codec id {code}"):
        _ = header.compression


@pytest.mark.parametrize(
    ("attributes", "transactional", "control", "timestamp_type"),
    [
        (0x00, False, False, TimestampType.CREATE_TIME),
        (0x08, False, False, TimestampType.LOG_APPEND_TIME),
        (0x10, True, False, TimestampType.CREATE_TIME),
        (0x20, False, True, TimestampType.CREATE_TIME),
        (0x30, True, True, TimestampType.CREATE_TIME),
    ],
)
def test_attribute_flags(attributes: int, transactional: bool, control: bool, timestamp_type: TimestampType) -> None:
    header = BatchHeader(0, 49, -1, 2, 0, attributes, 0, 0, 0, -1, -1, -1, 1)
    assert header.is_transactional is transactional
    assert header.is_control is control
    assert header.timestamp_type is timestamp_type
    assert header.compression is Compression.NONE


@pytest.mark.parametrize(
    ("base_sequence", "last_offset_delta", "last_sequence"),
    [
        (0, 0, 0),
        (10, 4, 14),
        (2**31 - 1, 0, 2**31 - 1),
        (2**31 - 1, 1, 0),
        (2**31 - 2, 3, 1),
        (2**31 - 5, 9, 4),
        (-1, 7, -1),
    ],
)
def test_last_sequence_wraps_like_kafka(base_sequence: int, last_offset_delta: int, last_sequence: int) -> None:
    header = BatchHeader(0, 49, -1, 2, 0, 0, last_offset_delta, 0, 0, 1, 0, base_sequence, last_offset_delta + 1)
    assert header.last_sequence == last_sequence


def test_sequence_wraps_past_int32_max_in_a_built_batch() -> None:
    header = validate_batch(build_batch(sample_records(3), producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    assert header.base_sequence == 2**31 - 2
    assert header.last_sequence == 0


# --- records --------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", SUPPORTED)
def test_records_round_trip_with_absolute_offsets_and_timestamps(compression: Compression) -> None:
    records = [
        Record(b"a", b"1", timestamp=5_000),
        Record(None, b"2", (("h1", b"x"), ("h2", None), ("", b"")), timestamp=4_990),
        Record(b"", None, timestamp=5_020),
        Record(None, None),
    ]
    batch = build_batch(records, base_offset=100, compression=compression)
    header = validate_batch(batch)
    assert header.compression is compression
    assert header.base_timestamp == 5_000
    assert header.max_timestamp == 5_020
    decoded = decode_records(batch)
    assert [(r.key, r.value, r.headers) for r in decoded] == [(r.key, r.value, r.headers) for r in records]
    assert [r.offset for r in decoded] == [100, 101, 102, 103]
    assert [r.timestamp for r in decoded] == [5_000, 4_990, 5_020, 5_000]


def test_base_timestamp_stamps_records_without_one() -> None:
    batch = build_batch([Record(b"a", b"1"), Record(b"b", b"2", timestamp=7_000)], base_timestamp=6_000)
    header = validate_batch(batch)
    assert (header.base_timestamp, header.max_timestamp) == (6_000, 7_000)
    assert [r.timestamp for r in decode_records(batch)] == [6_000, 7_000]


def test_record_offset_is_ignored_when_building() -> None:
    batch = build_batch([Record(b"a", b"1", timestamp=1, offset=77), Record(b"b", b"2", timestamp=1, offset=3)])
    assert [r.offset for r in decode_records(batch)] == [0, 1]


def test_log_append_time_gives_every_record_the_max_timestamp() -> None:
    batch = bytearray(build_batch(sample_records(3)))
    struct.pack_into(">h", batch, ATTRIBUTES_AT, 0x08)
    struct.pack_into(">q", batch, MAX_TIMESTAMP_AT, 9_999)
    sealed = reseal(batch)
    header = validate_batch(sealed)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert [r.timestamp for r in decode_records(sealed)] == [9_999, 9_999, 9_999]


def test_record_fields_match_the_records_past_every_one_byte_varint() -> None:
    """Offset deltas from 64 on, values from 64 bytes on, keys and headers take the decoder's slow paths."""
    built = [
        Record(
            key=None if i % 3 else b"k" * (i % 70),
            value=None if i % 17 == 0 else b"v" * (i * 7 % 300),
            headers=(("h", b"x"),) if i % 50 == 0 else (),
            timestamp=1_700_000_000_000 + i * (1 if i % 2 else 100_000),
        )
        for i in range(200)
    ]
    batch = build_batch(built, base_offset=1_000)
    decoded = decode_records(batch)
    assert [(r.key, r.value, r.headers) for r in decoded] == [(r.key, r.value, r.headers) for r in built]
    assert decode_record_fields(batch) == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded]
    assert [fields[0] for fields in decode_record_fields(batch)] == list(range(1_000, 1_200))


def test_large_values_use_multi_byte_lengths() -> None:
    records = [Record(b"k" * 200, bytes(range(256)) * 300, ((("h" * 70), b"v" * 9_000),), timestamp=1)]
    for compression in SUPPORTED:
        batch = build_batch(records, compression=compression)
        validate_batch(batch)
        assert decode_records(batch)[0] == Record(records[0].key, records[0].value, records[0].headers, 1, 0)


def test_unicode_header_keys_round_trip() -> None:
    batch = build_batch([Record(None, b"v", (("clé-🔑", b"x"),), timestamp=1)])
    assert decode_records(batch)[0].headers == (("clé-🔑", b"x"),)


def test_compression_is_applied_even_when_it_does_not_shrink() -> None:
    batch = build_batch([Record(None, b"x", timestamp=1)], compression=Compression.ZSTD)
    assert read_header(batch).compression is Compression.ZSTD
    assert decode_records(batch)[0].value == b"x"


def test_compression_shrinks_repetitive_records() -> None:
    records = [Record(None, b"abc" * 1_000, timestamp=1)] * 10
    plain = len(build_batch(records))
    for compression in (Compression.GZIP, Compression.LZ4, Compression.ZSTD):
        assert len(build_batch(records, compression=compression)) < plain // 10


def test_lz4_uses_kafka_frame_settings() -> None:
    # more than one 64 KiB block, since a single-block frame is always written as independent
    batch = build_batch([Record(None, bytes(range(256)) * 1_000, timestamp=1)], compression=Compression.LZ4)
    frame = batch[BATCH_OVERHEAD:]
    assert frame[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    flags, block_descriptor = frame[4], frame[5]
    assert flags >> 6 == 1  # version 01
    assert flags & 0x20  # independent blocks: KafkaLZ4BlockInputStream rejects linked blocks
    assert not flags & 0x10  # no block checksum
    assert not flags & 0x08  # no content size
    assert not flags & 0x04  # no content checksum
    assert (block_descriptor >> 4) & 0x7 == 4  # 64 KiB blocks


def test_gzip_output_is_deterministic() -> None:
    batch = build_batch([Record(None, b"x" * 100, timestamp=1)], compression=Compression.GZIP)
    member = batch[BATCH_OVERHEAD:]
    assert member[:2] == b"\x1f\x8b"  # gzip magic
    assert member[4:8] == b"\x00\x00\x00\x00"  # mtime 0: equal records give equal bytes


def test_varint_encoding_matches_kafka_examples() -> None:
    assert encode_varint(0) == b"\x00"
    assert encode_varint(-1) == b"\x01"
    assert encode_varint(1) == b"\x02"
    assert encode_varint(-64) == b"\x7f"
    assert encode_varint(64) == b"\x80\x01"
    assert encode_varint(2**31 - 1) == b"\xfe\xff\xff\xff\x0f"
    assert encode_varint(-(2**31)) == b"\xff\xff\xff\xff\x0f"
    assert encode_varlong(-(2**63)) == b"\xff" * 9 + b"\x01"
    assert decode_varint(b"\xfe\xff\xff\xff\x0f", 0) == (2**31 - 1, 5)
    assert decode_varlong(b"\x00" + b"\xff" * 9 + b"\x01", 1) == (-(2**63), 11)
    with pytest.raises(ValueError, match="does not fit"):
        encode_varint(2**31)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\x80\x80\x80\x80\x80\x01", "longer than 5 bytes"),
        (b"\xff\xff\xff\xff\x1f", "overflows 32 bits"),
        (b"\x80\x80", "cut off"),
        (b"", "cut off"),
    ],
)
def test_malformed_varints_are_rejected(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        decode_varint(data, 0)


def test_malformed_varlong_is_rejected() -> None:
    with pytest.raises(ValueError, match="longer than 10 bytes"):
        decode_varlong(b"\x80" * 11, 0)


# --- control batches ------------------------------------------------------------------------------


@pytest.mark.parametrize("control_type", list(ControlType))
def test_control_batch_layout(control_type: ControlType) -> None:
    batch = build_control_batch(
        control_type,
        producer_id=4_000,
        producer_epoch=6,
        coordinator_epoch=11,
        base_offset=500,
        timestamp=1_700_000_000_000,
        partition_leader_epoch=2,
    )
    header = validate_batch(batch)
    assert header.is_control and header.is_transactional
    assert header.attributes == 0x30
    assert header.compression is Compression.NONE
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4_000, 6, -1)
    assert (header.base_offset, header.partition_leader_epoch, header.record_count) == (500, 2, 1)
    assert header.base_timestamp == header.max_timestamp == 1_700_000_000_000
    [record] = decode_records(batch)
    assert record.key == struct.pack(">hh", 0, control_type)
    assert record.value == struct.pack(">hi", 0, 11)
    assert record.headers == ()
    assert (record.offset, record.timestamp) == (500, 1_700_000_000_000)
    assert read_control_record(batch) == (control_type, 11)


def test_read_control_record_rejects_a_data_batch() -> None:
    with pytest.raises(InvalidRecord, match="not a control batch"):
        read_control_record(build_batch(sample_records(1), producer_id=1, producer_epoch=0, base_sequence=0))


def control_batch_with(key: bytes | None, value: bytes | None) -> bytes:
    section = raw_record(b"\x00\x00\x00" + _nullable(key) + _nullable(value) + b"\x00")
    data = bytearray(batch_with_section(section, record_count=1, attributes=0x30))
    struct.pack_into(">qhi", data, PRODUCER_ID_AT, 9, 0, -1)
    return reseal(data)


def _nullable(data: bytes | None) -> bytes:
    return b"\x01" if data is None else encode_varint(len(data)) + data


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        (struct.pack(">hh", 0, 2), struct.pack(">hi", 0, 1), "type 2 is not a transaction marker"),
        (struct.pack(">hh", -1, 1), struct.pack(">hi", 0, 1), "invalid version -1"),
        (b"\x00\x00\x00", struct.pack(">hi", 0, 1), "4 bytes"),
        (None, struct.pack(">hi", 0, 1), "4 bytes"),
        (struct.pack(">hh", 0, 1), b"\x00\x00\x00", "6 bytes"),
        (struct.pack(">hh", 0, 0), struct.pack(">hi", -3, 1), "invalid version -3"),
    ],
)
def test_malformed_control_records_are_rejected(key: bytes | None, value: bytes | None, message: str) -> None:
    batch = control_batch_with(key, value)
    with pytest.raises(InvalidRecord, match=message):
        read_control_record(batch)
    with pytest.raises(InvalidRecord, match=message):
        validate_batch(batch)


def test_newer_control_record_versions_are_read_like_kafka() -> None:
    batch = control_batch_with(struct.pack(">hh", 1, 1), struct.pack(">hi", 1, 8) + b"future")
    assert read_control_record(batch) == (ControlType.COMMIT, 8)


def test_control_batch_must_be_transactional() -> None:
    batch = patch(
        build_control_batch(ControlType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=1),
        ">h",
        ATTRIBUTES_AT,
        0x20,
    )
    with pytest.raises(InvalidRecord, match="not transactional"):
        validate_batch(batch, check_records=False)


# --- offset assignment ----------------------------------------------------------------------------


def test_with_base_offset_rewrites_only_base_offset_and_leader_epoch() -> None:
    batch = build_batch(
        sample_records(5),
        producer_id=3,
        producer_epoch=1,
        base_sequence=0,
        transactional=True,
        compression=Compression.ZSTD,
    )
    moved = with_base_offset(batch, 9_000_000_000, partition_leader_epoch=7)
    assert len(moved) == len(batch)
    assert moved[16:] == batch[16:]
    header = validate_batch(moved)
    assert (header.base_offset, header.partition_leader_epoch) == (9_000_000_000, 7)
    assert header.crc == read_header(batch).crc
    assert [r.offset for r in decode_records(moved)] == list(range(9_000_000_000, 9_000_000_005))


def test_producer_identity_survives_offset_assignment() -> None:
    batch = build_batch(sample_records(2), producer_id=77, producer_epoch=4, base_sequence=40, transactional=True)
    before, after = read_header(batch), read_header(with_base_offset(batch, 1_234))
    assert (after.producer_id, after.producer_epoch, after.base_sequence, after.last_sequence) == (77, 4, 40, 41)
    assert after.is_transactional
    assert after.partition_leader_epoch == before.partition_leader_epoch


def test_with_base_offset_accepts_memoryview_and_bytearray() -> None:
    batch = build_batch(sample_records(1))
    assert with_base_offset(memoryview(batch), 5) == with_base_offset(bytearray(batch), 5)
    assert read_header(with_base_offset(memoryview(batch), 5)).base_offset == 5


def test_with_base_offset_rejects_out_of_range_values() -> None:
    with pytest.raises(ValueError, match="out of range"):
        with_base_offset(build_batch(sample_records(1)), 2**63)


def test_with_base_offset_needs_exactly_one_batch() -> None:
    batch = build_batch(sample_records(1))
    with pytest.raises(CorruptMessage, match="follow the batch"):
        with_base_offset(batch + batch, 1)


# --- several batches ------------------------------------------------------------------------------


def three_batches() -> list[bytes]:
    return [
        build_batch(sample_records(2), base_offset=0),
        build_control_batch(
            ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=0, base_offset=2, timestamp=5
        ),
        build_batch(sample_records(4), base_offset=3, compression=Compression.GZIP),
    ]


def test_iter_batches_yields_each_batch_as_a_view() -> None:
    batches = three_batches()
    seen = list(iter_batches(b"".join(batches), verify_crc=True))
    assert [bytes(view) for _, view in seen] == batches
    assert [h.base_offset for h, _ in seen] == [0, 2, 3]
    assert [h.next_offset for h, _ in seen] == [2, 3, 7]
    assert all(isinstance(view, memoryview) for _, view in seen)


def test_iter_batches_of_empty_buffer_yields_nothing() -> None:
    assert list(iter_batches(b"")) == []


def test_iter_batches_raises_on_a_torn_tail_after_yielding_whole_batches() -> None:
    batches = three_batches()
    data = b"".join(batches)[:-3]
    iterator = iter_batches(data)
    assert bytes(next(iterator)[1]) == batches[0]
    assert bytes(next(iterator)[1]) == batches[1]
    with pytest.raises(CorruptMessage, match=f"truncated RecordBatch at byte {len(batches[0]) + len(batches[1])}"):
        next(iterator)


def test_iter_batches_checks_crc_only_when_asked() -> None:
    batches = three_batches()
    damaged = bytearray(b"".join(batches))
    damaged[len(batches[0]) + 40] ^= 0x01
    assert len(list(iter_batches(damaged))) == 3
    with pytest.raises(CorruptMessage, match=f"at byte {len(batches[0])} failed its CRC32C check"):
        list(iter_batches(damaged, verify_crc=True))


def test_batches_end_offset_is_the_offset_after_the_last_whole_batch() -> None:
    batches = three_batches()  # offsets 0-1, a marker at 2, 3-6 (gzip)
    whole = b"".join(batches)
    assert batches_end_offset(whole) == 7
    assert batches_end_offset(memoryview(whole)[len(batches[0]) :]) == 7
    for cut in range(len(whole) + 1):  # a torn tail counts for nothing
        complete = [b for i, b in enumerate(batches) if len(b"".join(batches[: i + 1])) <= cut]
        assert batches_end_offset(whole[:cut]) == [None, 2, 3, 7][len(complete)]
    garbage = bytearray(whole)
    garbage[len(batches[0]) + 8 : len(batches[0]) + 12] = (1).to_bytes(4, "big")  # a batch length under a header
    assert batches_end_offset(garbage) == 2


def test_split_batches_returns_the_valid_prefix_of_a_torn_log() -> None:
    batches = three_batches()
    whole = b"".join(batches)
    assert split_batches(whole)[1] == len(whole)
    for cut in range(len(whole)):
        valid, valid_bytes = split_batches(whole[:cut])
        expected = 0
        complete = 0
        for batch in batches:
            if expected + len(batch) > cut:
                break
            expected += len(batch)
            complete += 1
        assert valid_bytes == expected
        assert len(valid) == complete


def test_split_batches_stops_at_a_corrupt_batch_in_the_middle() -> None:
    batches = three_batches()
    damaged = bytearray(b"".join(batches))
    damaged[len(batches[0]) + 30] ^= 0x80
    valid, valid_bytes = split_batches(damaged)
    assert valid_bytes == len(batches[0])
    assert [bytes(view) for _, view in valid] == [batches[0]]


# --- errors: damaged bytes (CorruptMessage) ------------------------------------------------------


def test_every_truncation_is_rejected_as_corrupt() -> None:
    batch = build_batch(sample_records(3), producer_id=1, producer_epoch=0, base_sequence=0)
    for cut in range(len(batch)):
        with pytest.raises(CorruptMessage, match="truncated RecordBatch"):
            validate_batch(batch[:cut])
        with pytest.raises(CorruptMessage, match="truncated RecordBatch"):
            decode_records(batch[:cut])


def test_read_header_needs_only_the_header() -> None:
    batch = build_batch(sample_records(3))
    assert read_header(batch[:BATCH_OVERHEAD]) == read_header(batch)
    with pytest.raises(CorruptMessage, match=f"60 of {BATCH_OVERHEAD} bytes present"):
        read_header(batch[: BATCH_OVERHEAD - 1])


def test_read_header_at_position() -> None:
    first, second = build_batch(sample_records(1)), build_batch(sample_records(2), base_offset=1)
    assert read_header(first + second, len(first)).base_offset == 1
    with pytest.raises(CorruptMessage, match=f"at byte {len(first) + 1}"):
        read_header(first + second, len(first) + 1)


@pytest.mark.parametrize("magic", [0, 1, 3, -1])
def test_bad_magic_is_corrupt(magic: int) -> None:
    batch = patch(build_batch(sample_records(1)), ">b", MAGIC_AT, magic, seal=False)
    with pytest.raises(CorruptMessage, match=f"magic {magic}; only magic 2"):
        validate_batch(batch)
    with pytest.raises(CorruptMessage, match="magic"):
        read_header(batch)


def test_bad_crc_is_corrupt() -> None:
    batch = build_batch(sample_records(2))
    crc = read_header(batch).crc
    damaged = patch(batch, ">I", CRC_AT, crc ^ 0xFFFF, seal=False)
    with pytest.raises(CorruptMessage, match=f"stored 0x{crc ^ 0xFFFF:08x}, computed 0x{crc:08x}"):
        validate_batch(damaged)
    with pytest.raises(CorruptMessage, match="CRC32C"):
        validate_batch(damaged, check_records=False)


def test_damaged_record_byte_is_corrupt() -> None:
    data = bytearray(build_batch(sample_records(2)))
    data[-5] ^= 0x04
    with pytest.raises(CorruptMessage, match="CRC32C"):
        validate_batch(data)


@pytest.mark.parametrize("delta", [1, 7, -1, -8])
def test_wrong_batch_length_is_corrupt(delta: int) -> None:
    batch = build_batch(sample_records(2))
    length = read_header(batch).batch_length
    with pytest.raises(CorruptMessage, match=f"batch_length {length + delta}"):
        validate_batch(patch(batch, ">i", BATCH_LENGTH_AT, length + delta, seal=False))


def test_batch_length_below_the_header_is_corrupt() -> None:
    batch = patch(build_batch(sample_records(1)), ">i", BATCH_LENGTH_AT, 48, seal=False)
    with pytest.raises(CorruptMessage, match="below the 49-byte minimum"):
        read_header(batch)


def test_trailing_bytes_are_corrupt() -> None:
    with pytest.raises(CorruptMessage, match="2 bytes follow the batch"):
        validate_batch(build_batch(sample_records(1)) + b"\x00\x00")


# --- errors: CRC-valid but inconsistent (InvalidRecord) ------------------------------------------


def test_record_count_above_last_offset_delta_is_invalid() -> None:
    batch = patch(build_batch(sample_records(3)), ">i", RECORD_COUNT_AT, 4)
    with pytest.raises(InvalidRecord, match="record_count 4 does not match last_offset_delta 2"):
        validate_batch(batch, check_records=False)


def test_more_declared_records_than_present_is_invalid() -> None:
    batch = bytearray(build_batch(sample_records(3)))
    struct.pack_into(">i", batch, LAST_OFFSET_DELTA_AT, 3)
    struct.pack_into(">i", batch, RECORD_COUNT_AT, 4)
    with pytest.raises(InvalidRecord, match=r"record 3 of 4 .* cut off"):
        validate_batch(reseal(batch))


def test_fewer_declared_records_than_present_is_invalid() -> None:
    batch = bytearray(build_batch(sample_records(3)))
    struct.pack_into(">i", batch, LAST_OFFSET_DELTA_AT, 1)
    struct.pack_into(">i", batch, RECORD_COUNT_AT, 2)
    with pytest.raises(InvalidRecord, match="bytes follow the 2 records"):
        validate_batch(reseal(batch))


def test_empty_batch_is_invalid() -> None:
    batch = batch_with_section(b"", record_count=0)
    with pytest.raises(InvalidRecord, match="at least one record"):
        validate_batch(batch)


def test_snappy_is_rejected_with_a_clear_message() -> None:
    batch = patch(build_batch(sample_records(1)), ">h", ATTRIBUTES_AT, int(Compression.SNAPPY))
    with pytest.raises(InvalidRecord, match="snappy compression is not supported"):
        validate_batch(batch, check_records=False)
    with pytest.raises(InvalidRecord, match="snappy compression is not supported"):
        decode_records(batch)
    with pytest.raises(InvalidRecord, match="snappy compression is not supported"):
        build_batch(sample_records(1), compression=Compression.SNAPPY)


def test_unknown_compression_is_invalid() -> None:
    batch = patch(build_batch(sample_records(1)), ">h", ATTRIBUTES_AT, 6)
    with pytest.raises(InvalidRecord, match="unknown compression codec id 6"):
        validate_batch(batch, check_records=False)


@pytest.mark.parametrize("compression", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_undecompressable_records_are_invalid(compression: Compression) -> None:
    batch = bytearray(build_batch(sample_records(20), compression=compression))
    truncated = batch[: BATCH_OVERHEAD + (len(batch) - BATCH_OVERHEAD) // 2]
    struct.pack_into(">i", truncated, BATCH_LENGTH_AT, len(truncated) - LOG_OVERHEAD)
    with pytest.raises(InvalidRecord, match=f"cannot decompress {compression.name.lower()} records"):
        validate_batch(reseal(truncated))


def test_compressed_records_with_wrong_codec_are_invalid() -> None:
    batch = patch(
        build_batch(sample_records(5), compression=Compression.GZIP), ">h", ATTRIBUTES_AT, int(Compression.ZSTD)
    )
    with pytest.raises(InvalidRecord, match="cannot decompress zstd records"):
        validate_batch(batch)


def test_transactional_batch_without_producer_id_is_invalid() -> None:
    batch = patch(build_batch(sample_records(1)), ">h", ATTRIBUTES_AT, 0x10)
    with pytest.raises(InvalidRecord, match="transactional batch has no producer id"):
        validate_batch(batch)


def test_idempotent_batch_without_sequence_is_invalid() -> None:
    batch = patch(
        build_batch(sample_records(1), producer_id=5, producer_epoch=0, base_sequence=0), ">i", BASE_SEQUENCE_AT, -1
    )
    with pytest.raises(InvalidRecord, match="invalid sequence number -1 in batch of producer id 5"):
        validate_batch(batch)


def test_idempotent_batch_without_epoch_is_invalid() -> None:
    batch = patch(
        build_batch(sample_records(1), producer_id=5, producer_epoch=0, base_sequence=0), ">h", PRODUCER_ID_AT + 8, -1
    )
    with pytest.raises(InvalidRecord, match="invalid producer epoch -1"):
        validate_batch(batch)


def test_control_batch_with_two_records_is_invalid() -> None:
    section = raw_record(b"\x00\x00\x00\x08" + struct.pack(">hh", 0, 1) + b"\x0c" + struct.pack(">hi", 0, 0) + b"\x00")
    section += raw_record(b"\x00\x00\x02\x08" + struct.pack(">hh", 0, 1) + b"\x0c" + struct.pack(">hi", 0, 0) + b"\x00")
    data = bytearray(batch_with_section(section, record_count=2, attributes=0x30))
    struct.pack_into(">qhi", data, PRODUCER_ID_AT, 9, 0, -1)
    with pytest.raises(InvalidRecord, match="control batch holds 2 records"):
        validate_batch(reseal(data))


def test_non_consecutive_offset_deltas_are_invalid() -> None:
    section = raw_record(b"\x00\x00\x00\x01\x01\x00") + raw_record(b"\x00\x00\x04\x01\x01\x00")
    batch = batch_with_section(section, record_count=2)
    with pytest.raises(InvalidRecord, match="record 1 has offset 2, expected 1"):
        validate_batch(batch)
    # decoding alone reports what is there, as Kafka's reader does for compacted batches
    assert [r.offset for r in decode_records(batch)] == [0, 2]


def test_max_timestamp_must_match_the_records() -> None:
    batch = patch(build_batch(sample_records(3)), ">q", MAX_TIMESTAMP_AT, 5_000)
    with pytest.raises(InvalidRecord, match="max_timestamp 5000 differs from the largest record timestamp 1002"):
        validate_batch(batch)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"\x00\x00\x00\x0a\x01\x00", "key of 5 bytes runs past the end"),
        (b"\x00\x00\x00\x01\x0a\x00", "value of 5 bytes runs past the end"),
        (b"\x00\x00\x00\x01\x01\x01", "negative header count -1"),
        (b"\x00\x00\x00\x01\x01\x02\x01\x01", "header key is null"),
        (b"\x00\x00\x00\x01\x01\x02\x02\xff\x01", "invalid start byte"),
        (b"\x00\x00\x00\x01\x01\x02\x0a\x01", "header key of 5 bytes runs past"),
        (b"\x00\x00\x00\x01\x01\x02\x00\x0a", "header value of 5 bytes runs past"),
        (b"\x00\x00\x00\x01\x01\x02\x00", "cut off"),
        (b"\x00\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01\x00\x01\x01\x00", "longer than 10 bytes"),
    ],
)
def test_malformed_records_are_invalid(body: bytes, message: str) -> None:
    batch = batch_with_section(raw_record(body), record_count=1)
    with pytest.raises(InvalidRecord, match=message) as raised:
        validate_batch(batch)
    assert "record 0 of 1" in str(raised.value)
    with pytest.raises(InvalidRecord, match=message):
        decode_records(batch)


def test_record_length_longer_than_its_fields_is_invalid() -> None:
    # the length claims one byte more than the fields use; the spare byte is inside the section
    section = encode_varint(7) + b"\x00\x00\x00\x01\x01\x00" + b"\x00"
    with pytest.raises(InvalidRecord, match="record length says 7 bytes but its fields take 6"):
        validate_batch(batch_with_section(section, record_count=1))


def test_record_length_beyond_the_section_is_invalid() -> None:
    batch = batch_with_section(encode_varint(50) + b"\x00\x00\x00\x01\x01\x00", record_count=1)
    with pytest.raises(InvalidRecord, match="record length 50 runs past the end"):
        validate_batch(batch)


def test_check_records_false_skips_only_the_record_checks() -> None:
    section = raw_record(b"\x00\x00\x00\x01\x01\x00") + raw_record(b"\x00\x00\x04\x01\x01\x00")
    batch = batch_with_section(section, record_count=2)
    header = validate_batch(batch, check_records=False)
    assert header.record_count == 2
    with pytest.raises(InvalidRecord):
        validate_batch(batch, check_records=True)


def test_errors_carry_their_retry_semantics() -> None:
    with pytest.raises(CorruptMessage) as corrupt:
        validate_batch(b"\x00" * 10)
    assert corrupt.value.retriable and corrupt.value.definite
    with pytest.raises(InvalidRecord) as invalid:
        validate_batch(batch_with_section(b"", record_count=0))
    assert not invalid.value.retriable and invalid.value.definite


# --- build argument checks ------------------------------------------------------------------------


def test_build_rejects_an_empty_batch() -> None:
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])


def test_build_needs_a_timestamp() -> None:
    with pytest.raises(ValueError, match="pass base_timestamp"):
        build_batch([Record(b"k", b"v")])


def test_build_rejects_transactional_without_producer_id() -> None:
    with pytest.raises(ValueError, match="transactional batch needs a producer id"):
        build_batch(sample_records(1), transactional=True)


@pytest.mark.parametrize(("epoch", "sequence"), [(-1, 0), (0, -1)])
def test_build_rejects_producer_id_without_epoch_or_sequence(epoch: int, sequence: int) -> None:
    with pytest.raises(ValueError, match="needs a producer epoch and base sequence"):
        build_batch(sample_records(1), producer_id=1, producer_epoch=epoch, base_sequence=sequence)


@pytest.mark.parametrize(
    "kwargs", [{"producer_epoch": 2**15, "producer_id": 1, "base_sequence": 0}, {"partition_leader_epoch": 2**31}]
)
def test_build_rejects_out_of_range_header_fields(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="out of range"):
        build_batch(sample_records(1), **kwargs)


@pytest.mark.parametrize(
    "record",
    [
        Record("text", b"v", timestamp=1),  # type: ignore[arg-type]
        Record(b"k", 5, timestamp=1),  # type: ignore[arg-type]
        Record(b"k", b"v", ((b"key", b"v"),), 1),  # type: ignore[arg-type]
        Record(b"k", b"v", (("key", "v"),), 1),  # type: ignore[arg-type]
    ],
)
def test_build_rejects_wrong_types(record: Record) -> None:
    with pytest.raises(TypeError, match="must be"):
        build_batch([record])


def test_build_control_batch_rejects_missing_producer() -> None:
    with pytest.raises(ValueError, match="producer id and epoch"):
        build_control_batch(ControlType.COMMIT, producer_id=-1, producer_epoch=0, coordinator_epoch=0, timestamp=1)
    with pytest.raises(ValueError, match="coordinator epoch"):
        build_control_batch(ControlType.COMMIT, producer_id=1, producer_epoch=0, coordinator_epoch=2**31, timestamp=1)
