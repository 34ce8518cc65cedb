"""Property tests of the RecordBatch v2 codec: round trips, damage detection, torn tails, fuzzed records."""

from __future__ import annotations

import struct

import google_crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oncelog.errors import CorruptMessage, InvalidRecord
from oncelog.records import (
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    Compression,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_record_fields,
    decode_records,
    read_control_record,
    read_header,
    split_batches,
    validate_batch,
    with_base_offset,
)
from oncelog.records.varint import (
    INT32_MAX,
    INT32_MIN,
    INT64_MAX,
    INT64_MIN,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
)

SUPPORTED = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]
CRC_REGION_START = 21  # attributes .. end
PROTECTED_OUTSIDE_CRC = [*range(8, 12), 16, *range(17, 21)]  # batch_length, magic, crc
LEADER_ASSIGNED = [*range(0, 8), *range(12, 16)]  # base_offset, partition_leader_epoch

PROPERTY_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

nullable_bytes = st.one_of(st.none(), st.binary(max_size=64))
headers = st.lists(st.tuples(st.text(max_size=12), nullable_bytes), max_size=3).map(tuple)
timestamps = st.integers(min_value=0, max_value=2**42)
records = st.lists(
    st.builds(
        Record,
        key=nullable_bytes,
        value=st.one_of(st.none(), st.binary(max_size=400)),
        headers=headers,
        timestamp=st.one_of(st.none(), timestamps),
    ),
    min_size=1,
    max_size=25,
)
producers = st.one_of(
    st.just((-1, -1, -1, False)),
    st.tuples(
        st.integers(min_value=0, max_value=2**63 - 1),
        st.integers(min_value=0, max_value=2**15 - 1),
        st.integers(min_value=0, max_value=2**31 - 1),
        st.booleans(),
    ),
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, list[Record], dict[str, int]]:
    recs = draw(records)
    producer_id, producer_epoch, base_sequence, transactional = draw(producers)
    fields = {
        "base_offset": draw(st.integers(min_value=0, max_value=2**62)),
        "producer_id": producer_id,
        "producer_epoch": producer_epoch,
        "base_sequence": base_sequence,
        "partition_leader_epoch": draw(st.integers(min_value=-1, max_value=2**31 - 1)),
        "base_timestamp": draw(timestamps),
    }
    compression = draw(st.sampled_from(SUPPORTED))
    batch = build_batch(recs, transactional=transactional, compression=compression, **fields)
    fields["transactional"] = int(transactional)
    fields["compression"] = int(compression)
    return batch, recs, fields


def flip(batch: bytes, bit: int) -> bytes:
    data = bytearray(batch)
    data[bit // 8] ^= 1 << (bit % 8)
    return bytes(data)


@PROPERTY_SETTINGS
@given(batches())
def test_build_then_decode_round_trips(case: tuple[bytes, list[Record], dict[str, int]]) -> None:
    batch, recs, fields = case
    header = validate_batch(batch)
    assert header.size_in_bytes == len(batch)
    assert header.base_offset == fields["base_offset"]
    assert header.partition_leader_epoch == fields["partition_leader_epoch"]
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (
        fields["producer_id"],
        fields["producer_epoch"],
        fields["base_sequence"],
    )
    assert header.is_transactional == bool(fields["transactional"])
    assert not header.is_control
    assert header.compression == fields["compression"]
    assert header.record_count == len(recs)
    assert header.base_timestamp == fields["base_timestamp"]
    expected_timestamps = [fields["base_timestamp"] if r.timestamp is None else r.timestamp for r in recs]
    assert header.max_timestamp == max(expected_timestamps)

    decoded = decode_records(batch)
    assert [(r.key, r.value, r.headers) for r in decoded] == [(r.key, r.value, r.headers) for r in recs]
    assert [r.timestamp for r in decoded] == expected_timestamps
    assert [r.offset for r in decoded] == list(range(header.base_offset, header.next_offset))
    assert decode_record_fields(batch) == [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded]


@PROPERTY_SETTINGS
@given(batches(), st.integers(min_value=0, max_value=2**63 - 1), st.integers(min_value=0, max_value=2**31 - 1))
def test_offset_assignment_keeps_the_batch_valid(
    case: tuple[bytes, list[Record], dict[str, int]], base_offset: int, leader_epoch: int
) -> None:
    batch, recs, _ = case
    moved = with_base_offset(batch, base_offset, leader_epoch)
    header = validate_batch(moved)
    assert (header.base_offset, header.partition_leader_epoch) == (base_offset, leader_epoch)
    assert moved[16:] == batch[16:]
    assert [r.offset for r in decode_records(moved)] == [base_offset + i for i in range(len(recs))]


@PROPERTY_SETTINGS
@given(batches(), st.data())
def test_every_single_bit_flip_of_the_crc_region_is_rejected(
    case: tuple[bytes, list[Record], dict[str, int]], data: st.DataObject
) -> None:
    batch = case[0]
    bits = data.draw(
        st.lists(st.integers(min_value=CRC_REGION_START * 8, max_value=len(batch) * 8 - 1), min_size=1, max_size=8)
    )
    for bit in bits:
        with pytest.raises(CorruptMessage, match="CRC32C"):
            validate_batch(flip(batch, bit), check_records=False)
        with pytest.raises(CorruptMessage, match="CRC32C"):
            validate_batch(flip(batch, bit))


@pytest.mark.parametrize(
    "batch",
    [
        build_control_batch(ControlType.COMMIT, producer_id=3, producer_epoch=1, coordinator_epoch=2, timestamp=9),
        build_batch(
            [Record(b"k", b"v", (("h", None),), timestamp=1)],
            producer_id=1,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
        ),
        build_batch([Record(b"k", b"v" * 30, timestamp=1)] * 2, compression=Compression.ZSTD),
    ],
    ids=["control", "transactional", "zstd"],
)
def test_every_bit_flip_of_a_small_batch_is_caught_except_leader_assigned_fields(batch: bytes) -> None:
    for bit in range(len(batch) * 8):
        damaged = flip(batch, bit)
        if bit // 8 in LEADER_ASSIGNED:
            # base offset and leader epoch are outside the CRC by design: the leader rewrites them
            assert validate_batch(damaged).crc == read_header(batch).crc
            continue
        with pytest.raises(CorruptMessage):
            validate_batch(damaged)


@PROPERTY_SETTINGS
@given(batches(), st.data())
def test_bit_flips_in_length_magic_and_crc_are_corrupt(
    case: tuple[bytes, list[Record], dict[str, int]], data: st.DataObject
) -> None:
    batch = case[0]
    byte = data.draw(st.sampled_from(PROTECTED_OUTSIDE_CRC))
    bit = byte * 8 + data.draw(st.integers(min_value=0, max_value=7))
    with pytest.raises(CorruptMessage):
        validate_batch(flip(batch, bit), check_records=False)


@PROPERTY_SETTINGS
@given(st.lists(batches(), min_size=1, max_size=4), st.data())
def test_split_batches_keeps_exactly_the_whole_batches_before_a_cut(
    cases: list[tuple[bytes, list[Record], dict[str, int]]], data: st.DataObject
) -> None:
    parts = [case[0] for case in cases]
    log = b"".join(parts)
    cut = data.draw(st.integers(min_value=0, max_value=len(log)))
    valid, valid_bytes = split_batches(log[:cut])
    whole = 0
    ends = []
    for part in parts:
        if whole + len(part) > cut:
            break
        whole += len(part)
        ends.append(whole)
    assert valid_bytes == whole
    assert [bytes(view) for _, view in valid] == parts[: len(ends)]


def reseal(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, google_crc32c.value(bytes(data[CRC_REGION_START:])))
    return bytes(data)


@PROPERTY_SETTINGS
@given(
    st.binary(max_size=300),
    st.integers(min_value=1, max_value=5),
    st.sampled_from(SUPPORTED),
    st.booleans(),
)
def test_garbage_records_section_raises_only_domain_errors(
    section: bytes, record_count: int, compression: Compression, control: bool
) -> None:
    """Whatever a producer puts behind a valid CRC, the codec answers with InvalidRecord, never a crash."""
    header = struct.pack(
        ">qiibIhiqqqhii",
        0,
        BATCH_OVERHEAD - LOG_OVERHEAD + len(section),
        -1,
        2,
        0,
        int(compression) | (0x30 if control else 0),
        record_count - 1,
        0,
        0,
        7 if control else -1,
        0 if control else -1,
        -1,
        record_count,
    )
    batch = reseal(bytearray(header + section))
    for check in (validate_batch, decode_records, read_control_record):
        try:
            check(batch)
        except InvalidRecord:
            pass
    # the consumer's tuple decoder accepts and refuses exactly what decode_records does
    try:
        decoded = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decode_records(batch)]
    except InvalidRecord:
        with pytest.raises(InvalidRecord):
            decode_record_fields(batch)
    else:
        assert decode_record_fields(batch) == decoded


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=INT32_MIN, max_value=INT32_MAX), st.binary(max_size=3))
def test_varint_round_trips(value: int, prefix: bytes) -> None:
    encoded = encode_varint(value)
    assert len(encoded) == size_of_varint(value) <= 5
    assert decode_varint(prefix + encoded + b"\xff", len(prefix)) == (value, len(prefix) + len(encoded))


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=INT64_MIN, max_value=INT64_MAX))
def test_varlong_round_trips(value: int) -> None:
    encoded = encode_varlong(value)
    assert len(encoded) == size_of_varint(value) <= 10
    assert decode_varlong(encoded, 0) == (value, len(encoded))


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=12))
def test_varint_decoding_of_garbage_fails_cleanly(data: bytes) -> None:
    for decode in (decode_varint, decode_varlong):
        try:
            value, end = decode(data, 0)
        except ValueError:
            continue
        assert 0 < end <= len(data)
        assert encode_varlong(value) == data[:end] or data[end - 1] == 0  # non-minimal encodings end in 0x00


_SIZES = st.sampled_from([0, 1, 63, 64, 127, 128, 8191, 8192, 20_000])


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    key=st.none() | _SIZES.map(lambda n: b"k" * n),
    value=st.none() | _SIZES.map(lambda n: b"v" * n),
    timestamp_delta=st.sampled_from([0, 1, 8191, 8192, 10**9, -1, -(10**6)]),
    offset_delta=st.sampled_from([0, 1, 8191, 8192, 100_000]),
)
def test_the_per_record_fast_path_encodes_the_bytes_of_the_general_one(
    key: bytes | None, value: bytes | None, timestamp_delta: int, offset_delta: int
) -> None:
    """send()'s record encoding (bytes, no headers: looked-up varints) matches the general encoder, which takes
    memoryviews, and decodes back to the record."""
    from oncelog.records.builder import _record_bytes

    fast = _record_bytes(offset_delta, timestamp_delta, key, value, ())
    general = _record_bytes(
        offset_delta,
        timestamp_delta,
        None if key is None else memoryview(key),
        None if value is None else memoryview(value),
        (),
    )
    assert fast == general
    body_size, at = decode_varint(fast, 0)
    assert at + body_size == len(fast)
    assert fast[at] == 0, "attributes"
    ts, at = decode_varlong(fast, at + 1)
    delta, at = decode_varint(fast, at)
    assert (ts, delta) == (timestamp_delta, offset_delta)
