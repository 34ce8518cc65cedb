"""Cross-checks against kafka-python's independent RecordBatch v2 implementation (``kafka.record``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record._crc32c import crc as kafka_python_crc32c
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.record.util import decode_varint as kafka_decode_varint
from kafka.record.util import encode_varint as kafka_encode_varint

from oncelog.records import (
    Compression,
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
    read_control_record,
    validate_batch,
)
from oncelog.records.varint import INT32_MAX, INT32_MIN, decode_varint, encode_varint

SUPPORTED = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]


def sample_records() -> list[Record]:
    # values repeat so that kafka-python keeps the compression it was asked for
    return [
        Record(b"key-1", b"payload " * 40, (("trace-id", b"abc"), ("empty", b""), ("null", None)), 1_700_000_000_000),
        Record(None, b"payload " * 40, (), 1_700_000_000_005),
        Record(b"", None, (("k", b"v"),), 1_699_999_999_990),
        Record(b"key-4", b"", (), 1_700_000_000_001),
    ]


def kafka_python_batch(
    records: list[Record],
    *,
    compression: Compression = Compression.NONE,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(compression),
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 20,
    )
    for offset, record in enumerate(records):
        assert builder.append(offset, record.timestamp, record.key, record.value, list(record.headers)) is not None
    return bytes(builder.build())


class KafkaPythonControlBatchBuilder(DefaultRecordBatchBuilder):
    """kafka-python never writes control batches (brokers do); setting bit 5 reuses its encoder for one."""

    def _get_attributes(self, include_compression_type: bool = True) -> int:
        return super()._get_attributes(include_compression_type) | self.CONTROL_MASK


# --- our batches read by kafka-python ------------------------------------------------------------


@pytest.mark.parametrize("compression", SUPPORTED)
@pytest.mark.parametrize("transactional", [False, True])
def test_kafka_python_reads_our_batches(compression: Compression, transactional: bool) -> None:
    records = sample_records()
    batch = build_batch(
        records,
        base_offset=1_000,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        transactional=transactional,
        compression=compression,
        partition_leader_epoch=5,
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.magic == 2
    assert theirs.compression_type == compression
    assert (theirs.base_offset, theirs.leader_epoch, theirs.size_in_bytes) == (1_000, 5, len(batch))
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (42, 3, 17)
    assert theirs.last_sequence == 20
    assert theirs.is_transactional is transactional
    assert not theirs.is_control_batch
    assert (theirs.records_count, theirs.last_offset_delta) == (4, 3)
    assert (theirs.first_timestamp, theirs.max_timestamp) == (1_700_000_000_000, 1_700_000_000_005)
    decoded = list(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in decoded] == [
        (1_000 + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("control_type", list(ControlType))
def test_kafka_python_reads_our_transaction_markers(control_type: ControlType) -> None:
    batch = build_control_batch(
        control_type, producer_id=9, producer_epoch=2, coordinator_epoch=4, base_offset=77, timestamp=123
    )
    theirs = DefaultRecordBatch(batch)
    assert theirs.validate_crc()
    assert theirs.is_control_batch and theirs.is_transactional
    assert (theirs.producer_id, theirs.producer_epoch, theirs.base_sequence) == (9, 2, -1)
    [marker] = list(theirs)
    assert (marker.version, marker.type) == (0, control_type)
    assert marker.commit is (control_type is ControlType.COMMIT)
    assert marker.abort is (control_type is ControlType.ABORT)
    assert (marker.offset, marker.timestamp) == (77, 123)
    assert marker.value == b"\x00\x00\x00\x00\x00\x04"  # version 0, coordinator epoch 4


def test_kafka_python_iterates_our_concatenated_batches() -> None:
    ours = [
        build_batch(
            sample_records(),
            base_offset=0,
            producer_id=1,
            producer_epoch=0,
            base_sequence=0,
            transactional=True,
            compression=Compression.LZ4,
        ),
        build_control_batch(
            ControlType.ABORT, producer_id=1, producer_epoch=0, coordinator_epoch=0, base_offset=4, timestamp=1
        ),
        build_batch(sample_records(), base_offset=5, compression=Compression.ZSTD),
    ]
    memory = MemoryRecords(b"".join(ours))
    seen = []
    while memory.has_next():
        batch = memory.next_batch()
        assert batch.validate_crc()
        seen.append((batch.base_offset, batch.is_control_batch, [r.offset for r in batch]))
    assert seen == [(0, False, [0, 1, 2, 3]), (4, True, [4]), (5, False, [5, 6, 7, 8])]
    assert memory.valid_bytes() == sum(map(len, ours))


def test_uncompressed_batch_is_byte_identical_to_kafka_python() -> None:
    records = sample_records()
    theirs = kafka_python_batch(records, producer_id=11, producer_epoch=1, base_sequence=30, transactional=True)
    # kafka-python leaves base offset and leader epoch 0 for the broker to fill in
    ours = build_batch(
        records, producer_id=11, producer_epoch=1, base_sequence=30, transactional=True, partition_leader_epoch=0
    )
    assert ours == theirs


def test_crc_agrees_with_kafka_pythons_pure_python_crc32c() -> None:
    batch = build_batch(sample_records(), compression=Compression.GZIP)
    assert DefaultRecordBatch(batch).crc == kafka_python_crc32c(batch[21:])


# --- kafka-python batches read by us -------------------------------------------------------------


@pytest.mark.parametrize("compression", SUPPORTED)
def test_we_read_kafka_python_batches(compression: Compression) -> None:
    records = sample_records()
    theirs = kafka_python_batch(records, compression=compression, producer_id=5, producer_epoch=0, base_sequence=8)
    header = validate_batch(theirs)
    assert header.compression is compression
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence) == (5, 0, 8, 11)
    assert not header.is_transactional and not header.is_control
    assert (header.base_timestamp, header.max_timestamp) == (1_700_000_000_000, 1_700_000_000_005)
    decoded = decode_records(theirs)
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(records)
    ]


@pytest.mark.parametrize("compression", SUPPORTED)
def test_we_read_a_kafka_python_transactional_batch(compression: Compression) -> None:
    theirs = kafka_python_batch(
        sample_records(),
        compression=compression,
        transactional=True,
        producer_id=1_234,
        producer_epoch=7,
        base_sequence=2**31 - 2,
    )
    header = validate_batch(theirs)
    assert header.is_transactional
    assert (header.producer_id, header.producer_epoch) == (1_234, 7)
    assert header.last_sequence == DefaultRecordBatch(theirs).last_sequence == 1
    assert [r.key for r in decode_records(theirs)] == [r.key for r in sample_records()]


@pytest.mark.parametrize("control_type", list(ControlType))
def test_we_read_a_control_batch_encoded_by_kafka_python(control_type: ControlType) -> None:
    builder = KafkaPythonControlBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=88,
        producer_epoch=4,
        base_sequence=-1,
        batch_size=1 << 10,
    )
    builder.append(0, 1_000, b"\x00\x00\x00" + bytes([control_type]), b"\x00\x00\x00\x00\x00\x0d", [])
    theirs = bytes(builder.build())
    header = validate_batch(theirs)
    assert header.is_control and header.is_transactional
    assert read_control_record(theirs) == (control_type, 13)
    ours = build_control_batch(
        control_type,
        producer_id=88,
        producer_epoch=4,
        coordinator_epoch=13,
        timestamp=1_000,
        partition_leader_epoch=0,
    )
    assert ours == theirs


def test_we_iterate_kafka_python_memory_records() -> None:
    builder = MemoryRecordsBuilder(magic=2, compression_type=4, batch_size=1 << 20)
    for record in sample_records():
        assert builder.append(record.timestamp, record.key, record.value, list(record.headers)) is not None
    builder.close()
    first = bytes(builder.buffer())
    second = kafka_python_batch(sample_records(), compression=Compression.GZIP)
    seen = list(iter_batches(first + second, verify_crc=True))
    assert [h.record_count for h, _ in seen] == [4, 4]
    assert [h.compression for h, _ in seen] == [Compression.ZSTD, Compression.GZIP]
    for _, view in seen:
        validate_batch(view)
        assert [r.value for r in decode_records(view)] == [r.value for r in sample_records()]


# --- varints ---------------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=INT32_MIN, max_value=INT32_MAX))
def test_varints_match_kafka_python(value: int) -> None:
    theirs = bytearray()
    kafka_encode_varint(value, theirs.append)
    assert encode_varint(value) == bytes(theirs)
    assert decode_varint(bytes(theirs), 0) == kafka_decode_varint(bytes(theirs), 0)
