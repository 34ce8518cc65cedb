"""Kafka RecordBatch v2 (magic 2), byte for byte: build, validate, iterate and decode (design/architecture.md §4).

This module reads: the header, validation, iteration and decoding (Kafka's ``DefaultRecordBatch``). Batches are
built by :mod:`oncelog.records.builder` (``MemoryRecordsBuilder``) and compressed by
:mod:`oncelog.records.compression` (``CompressionType``).

Layout (big-endian; Kafka's ``DefaultRecordBatch``)::

    offset  field                   type    covered by CRC
         0  base_offset             int64   no   (assigned by the partition leader)
         8  batch_length            int32   no   (bytes after this field)
        12  partition_leader_epoch  int32   no   (assigned by the partition leader)
        16  magic                   int8    no   (always 2)
        17  crc                     uint32  --   CRC32C of bytes 21..end
        21  attributes              int16   yes  bits 0-2 compression, 3 timestamp type,
                                                 4 transactional, 5 control
        23  last_offset_delta       int32   yes
        27  base_timestamp          int64   yes
        35  max_timestamp           int64   yes
        43  producer_id             int64   yes
        51  producer_epoch          int16   yes
        53  base_sequence           int32   yes
        57  record_count            int32   yes
        61  records (compressed as a whole when bits 0-2 are set)

Each record (``DefaultRecord``) is framed by zigzag varints: length, attributes int8 (unused),
timestamp_delta varlong, offset_delta varint, key, value, header count, headers. A control batch
(design/kafka-semantics.md §3.1) carries one record whose key is ``version int16 = 0, type int16`` (ABORT 0, COMMIT 1)
and whose value is ``version int16 = 0, coordinator_epoch int32`` (``EndTransactionMarker``).

Error classes follow the retry semantics of the wire reasons:

* :class:`~oncelog.errors.CorruptMessage` (retriable) — the bytes are damaged: truncated, wrong
  magic, a ``batch_length`` that disagrees with the buffer, or a CRC mismatch. Sending the same
  batch again may succeed.
* :class:`~oncelog.errors.InvalidRecord` (not retriable) — the CRC holds, so the producer wrote
  these bytes, but their content is inconsistent (record count, framing, sequence fields,
  unsupported compression). Sending it again cannot help.

The server path (``read_header``, ``validate_batch(check_records=False)``, ``with_base_offset``,
``iter_batches``) touches only the 61-byte header with ``struct`` and computes one CRC; nothing
there loops over records.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterator
from dataclasses import dataclass

import google_crc32c

from oncelog.errors import CorruptMessage, InvalidRecord
from oncelog.records.compression import SNAPPY_UNSUPPORTED, Compression, decompress
from oncelog.records.varint import INT32_MAX, decode_varint, decode_varlong
from oncelog.vocabulary import ControlType  # re-exported by oncelog.records: public API

__all__ = [
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "Compression",
    "ControlType",
    "Record",
    "RecordFields",
    "TimestampType",
    "batches_end_offset",
    "decode_record_fields",
    "decode_records",
    "iter_batches",
    "records_section",
    "read_control_record",
    "read_header",
    "split_batches",
    "validate_batch",
    "with_base_offset",
]

MAGIC = 2

_HEADER = struct.Struct(">qiibIhiqqqhii")
# the part before the CRC region: base_offset, batch_length, partition_leader_epoch, magic, crc
_PREFIX = struct.Struct(">qiibI")
# the CRC-covered part of the header: attributes .. record_count
_TAIL = struct.Struct(">hiqqqhii")
_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23  # after base_offset, batch_length, partition_leader_epoch, magic, crc, attributes

BATCH_OVERHEAD = _HEADER.size
"""Bytes of the RecordBatch header before the first record (61)."""

LOG_OVERHEAD = 12
"""Bytes before ``batch_length`` counts: base_offset and batch_length itself."""

_ATTRIBUTES_OFFSET = _PREFIX.size
_MIN_BATCH_LENGTH = BATCH_OVERHEAD - LOG_OVERHEAD

_COMPRESSION_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20

_NO_PRODUCER_ID = -1
_NO_SEQUENCE = -1

_CONTROL_KEY = struct.Struct(">hh")
_END_TXN_MARKER_VALUE = struct.Struct(">hi")
_CONTROL_RECORD_VERSION = 0
_END_TXN_MARKER_VERSION = 0


class TimestampType(enum.IntEnum):
    """Attribute bit 3: who set the record timestamps."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a batch.

    When building, ``timestamp`` is absolute epoch milliseconds (``None`` takes the batch's base
    timestamp) and ``offset`` is ignored: offsets are consecutive from the batch's base offset.
    When decoding, both are absolute values.
    """

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset: int | None = None


RecordFields = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
"""``(offset, timestamp, key, value, headers)`` of one decoded record (:func:`decode_record_fields`)."""


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The 61-byte header of a RecordBatch, field for field in wire order."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def compression(self) -> Compression:
        """Codec of the records section; ``InvalidRecord`` for the unassigned ids 5-7."""
        code = self.attributes & _COMPRESSION_MASK
        try:
            return Compression(code)
        except ValueError:
            raise InvalidRecord(f"unknown compression codec id {code} in batch attributes") from None

    @property
    def timestamp_type(self) -> TimestampType:
        """CREATE_TIME, or LOG_APPEND_TIME when every record's timestamp is ``max_timestamp``."""
        return TimestampType.LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_MASK else TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        """True when the batch belongs to a transaction (attribute bit 4)."""
        return bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        """True for a control batch, i.e. a transaction marker (attribute bit 5)."""
        return bool(self.attributes & _CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        """True when the batch is stamped by an idempotent or transactional producer."""
        return self.producer_id > _NO_PRODUCER_ID

    @property
    def last_offset(self) -> int:
        """Offset of the batch's last record."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """Offset right after the batch."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record, wrapping past int32 max to 0; -1 without a sequence.

        Same arithmetic as ``DefaultRecordBatch.incrementSequence`` (design/kafka-semantics.md §4.2).
        """
        if self.base_sequence == _NO_SEQUENCE:
            return _NO_SEQUENCE
        if self.base_sequence > INT32_MAX - self.last_offset_delta:
            return self.last_offset_delta - (INT32_MAX - self.base_sequence) - 1
        return self.base_sequence + self.last_offset_delta

    @property
    def size_in_bytes(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD


def _crc32c(batch: memoryview) -> int:
    # google_crc32c's C entry point parses its argument as "y#", which accepts only `bytes`
    # (it refuses memoryview and bytearray), so the covered region is copied once; at ~25 GB/s
    # that costs less than the CRC itself.
    return google_crc32c.value(bytes(batch[_ATTRIBUTES_OFFSET:]))


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the batch header at ``pos`` without touching the records or the CRC.

    Only the 61 header bytes need to be present, so a log reader can learn a batch's size before
    reading the rest of it.

    Raises:
        CorruptMessage: fewer than 61 bytes at ``pos``, magic other than 2, or a
            ``batch_length`` too small to hold the header.
    """
    available = len(buf) - pos
    if available < BATCH_OVERHEAD:
        raise CorruptMessage(
            f"truncated RecordBatch header at byte {pos}: {max(available, 0)} of {BATCH_OVERHEAD} bytes present"
        )
    fields = _HEADER.unpack_from(buf, pos)
    if fields[3] != MAGIC:
        raise CorruptMessage(f"RecordBatch at byte {pos} has magic {fields[3]}; only magic {MAGIC} is supported")
    if fields[1] < _MIN_BATCH_LENGTH:
        raise CorruptMessage(
            f"RecordBatch at byte {pos} has batch_length {fields[1]}, below the {_MIN_BATCH_LENGTH}-byte minimum"
        )
    return BatchHeader(*fields)


def _read_whole(view: memoryview) -> BatchHeader:
    header = read_header(view)
    if header.size_in_bytes != len(view):
        if header.size_in_bytes > len(view):
            raise CorruptMessage(
                f"truncated RecordBatch: batch_length {header.batch_length} means {header.size_in_bytes} bytes, "
                f"only {len(view)} present"
            )
        raise CorruptMessage(
            f"batch_length {header.batch_length} means {header.size_in_bytes} bytes, but the buffer holds "
            f"{len(view)}: {len(view) - header.size_in_bytes} bytes follow the batch"
        )
    return header


def _check_crc(header: BatchHeader, batch: memoryview, pos: int = 0) -> None:
    computed = _crc32c(batch)
    if computed != header.crc:
        raise CorruptMessage(
            f"RecordBatch at byte {pos} failed its CRC32C check: stored 0x{header.crc:08x}, computed 0x{computed:08x}"
        )


def _check_header(header: BatchHeader) -> None:
    """Rules that depend on the header alone (Kafka's ``LogValidator.validateBatch``)."""
    compression = header.compression
    if compression is Compression.SNAPPY:
        raise InvalidRecord(SNAPPY_UNSUPPORTED)
    if header.record_count <= 0:
        raise InvalidRecord(f"batch declares record_count {header.record_count}; a batch needs at least one record")
    if header.last_offset_delta != header.record_count - 1:
        raise InvalidRecord(
            f"record_count {header.record_count} does not match last_offset_delta {header.last_offset_delta} "
            f"(a batch of n records spans offset deltas 0..n-1)"
        )
    if header.is_transactional and not header.has_producer_id:
        raise InvalidRecord("transactional batch has no producer id")
    if header.is_control:
        if not header.is_transactional:
            raise InvalidRecord("control batch is not transactional; only transaction markers are supported")
        if header.record_count != 1:
            raise InvalidRecord(f"control batch holds {header.record_count} records; a marker has exactly one")
    elif header.has_producer_id:
        if header.producer_epoch < 0:
            raise InvalidRecord(
                f"invalid producer epoch {header.producer_epoch} in batch of producer id {header.producer_id}"
            )
        if header.base_sequence < 0:
            raise InvalidRecord(
                f"invalid sequence number {header.base_sequence} in batch of producer id {header.producer_id}"
            )


def validate_batch(buf: bytes | bytearray | memoryview, *, check_records: bool = True) -> BatchHeader:
    """Check that ``buf`` is exactly one sound RecordBatch and return its header.

    Always checked: length against the buffer, magic, CRC32C, compression codec, record count
    against ``last_offset_delta``, and the producer fields (a transactional batch has a producer
    id; an idempotent data batch has an epoch and a sequence; a control batch is one
    transactional record). With ``check_records`` the records are also decompressed and parsed:
    their framing must consume the section exactly, offset deltas must run 0..n-1, a
    CREATE_TIME batch's ``max_timestamp`` must equal its largest record timestamp, and a control
    record must be a well-formed COMMIT or ABORT marker. Without it the cost is one header
    unpack and one CRC, for servers that leave record checks to the reader.

    Raises:
        CorruptMessage: truncated, trailing bytes, bad magic or batch_length, CRC mismatch.
        InvalidRecord: the CRC holds but the content is inconsistent or unsupported.
    """
    view = memoryview(buf)
    header = _read_whole(view)
    _check_crc(header, view)
    _check_header(header)
    if check_records:
        records = _decode(header, view)
        _check_records(header, records)
    return header


def _check_records(header: BatchHeader, records: list[Record]) -> None:
    for index, record in enumerate(records):
        if record.offset != header.base_offset + index:
            raise InvalidRecord(
                f"record {index} has offset {record.offset}, expected {header.base_offset + index} "
                f"(offset deltas must run 0..n-1)"
            )
    if header.timestamp_type is TimestampType.CREATE_TIME:
        largest = max(record.timestamp for record in records if record.timestamp is not None)
        if largest != header.max_timestamp:
            raise InvalidRecord(
                f"max_timestamp {header.max_timestamp} differs from the largest record timestamp {largest}"
            )
    if header.is_control:
        _parse_control_record(records[0])


def iter_batches(
    buf: bytes | bytearray | memoryview, *, verify_crc: bool = False
) -> Iterator[tuple[BatchHeader, memoryview]]:
    """Yield ``(header, batch_view)`` for each RecordBatch concatenated in ``buf``.

    The views share ``buf``'s memory. Records are not parsed.

    Raises:
        CorruptMessage: at the first batch that is truncated or has a bad header, or (with
            ``verify_crc``) fails its CRC; the message names the byte position. The batches
            yielded before it are sound, so a caller recovering a log may truncate there (or
            use :func:`split_batches`).
    """
    view = memoryview(buf)
    end = len(view)
    pos = 0
    while pos < end:
        header = read_header(view, pos)
        batch_end = pos + header.size_in_bytes
        if batch_end > end:
            raise CorruptMessage(
                f"truncated RecordBatch at byte {pos}: batch_length {header.batch_length} means "
                f"{header.size_in_bytes} bytes, only {end - pos} present"
            )
        batch = view[pos:batch_end]
        if verify_crc:
            _check_crc(header, batch, pos)
        yield header, batch
        pos = batch_end


def batches_end_offset(buf: bytes | bytearray | memoryview) -> int | None:
    """The offset after the last whole batch in ``buf`` (its base offset + last offset delta + 1), from the batch
    framing alone, or None when ``buf`` holds no whole batch. Where a reader of these batches ends up, and so
    where a read of the batches after them starts; nothing is validated (the reader does that)."""
    view = memoryview(buf)
    end, pos, found = len(view), 0, None
    while pos + BATCH_OVERHEAD <= end:
        base_offset, batch_length, _ = _OFFSET_LENGTH_EPOCH.unpack_from(view, pos)
        if batch_length < _MIN_BATCH_LENGTH or pos + LOG_OVERHEAD + batch_length > end:
            break
        (last_offset_delta,) = _LAST_OFFSET_DELTA.unpack_from(view, pos + _LAST_OFFSET_DELTA_AT)
        found = base_offset + last_offset_delta + 1
        pos += LOG_OVERHEAD + batch_length
    return found


def split_batches(buf: bytes | bytearray | memoryview) -> tuple[list[tuple[BatchHeader, memoryview]], int]:
    """Return the longest prefix of whole, CRC-valid batches and its length in bytes.

    This is log recovery's view of a segment (Kafka's ``LogSegment.recover``): everything from
    the first truncated or corrupt batch on is a torn tail to be truncated at ``valid_bytes``.
    """
    batches: list[tuple[BatchHeader, memoryview]] = []
    valid_bytes = 0
    try:
        for header, batch in iter_batches(buf, verify_crc=True):
            batches.append((header, batch))
            valid_bytes += header.size_in_bytes
    except CorruptMessage:
        pass
    return batches, valid_bytes


def decode_records(batch: bytes | bytearray | memoryview) -> list[Record]:
    """Decompress and parse the records of exactly one batch, with absolute offsets and timestamps.

    The CRC is not verified here; call :func:`validate_batch` (or :func:`iter_batches` with
    ``verify_crc``) first for bytes that crossed a network or a disk. Control records are
    returned like any other, with their raw key and value.

    Raises:
        CorruptMessage: ``batch`` is not exactly one batch (see :func:`read_header`).
        InvalidRecord: unsupported compression, or records that do not parse.
    """
    view = memoryview(batch)
    return _decode(_read_whole(view), view)


def decode_record_fields(batch: bytes | bytearray | memoryview) -> list[RecordFields]:
    """:func:`decode_records` as plain tuples, ``(offset, timestamp, key, value, headers)`` per record.

    The consumer's per-record path: it builds its own record objects, so a :class:`Record` per record in between
    would only be made and dropped. Same checks, same errors.
    """
    view = memoryview(batch)
    header = _read_whole(view)
    return _parse_fields(_section_bytes(header, view), header)


def records_section(batch: bytes | bytearray | memoryview) -> tuple[BatchHeader, bytes]:
    """The header of exactly one batch and its records section, decompressed (what the decoders parse).

    Raises:
        CorruptMessage: ``batch`` is not exactly one batch.
    """
    view = memoryview(batch)
    header = _read_whole(view)
    return header, _section_bytes(header, view)


def read_control_record(batch: bytes | bytearray | memoryview) -> tuple[ControlType, int]:
    """Return ``(type, coordinator_epoch)`` of a transaction-marker batch.

    Raises:
        CorruptMessage: ``batch`` is not exactly one batch.
        InvalidRecord: not a control batch, or its record is not a COMMIT/ABORT marker.
    """
    view = memoryview(batch)
    header = _read_whole(view)
    if not header.is_control:
        raise InvalidRecord("not a control batch: attribute bit 5 is clear")
    records = _decode(header, view)
    if len(records) != 1:
        raise InvalidRecord(f"control batch holds {len(records)} records; a marker has exactly one")
    return _parse_control_record(records[0])


def _parse_control_record(record: Record) -> tuple[ControlType, int]:
    """Decode a marker's key and value as ``ControlRecordType`` and ``EndTransactionMarker`` do."""
    key, value = record.key, record.value
    if key is None or len(key) < _CONTROL_KEY.size:
        raise InvalidRecord(f"control record key must hold version and type (4 bytes), got {key!r}")
    version, type_id = _CONTROL_KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecord(f"control record key has invalid version {version}")
    try:
        control_type = ControlType(type_id)
    except ValueError:
        raise InvalidRecord(f"control record type {type_id} is not a transaction marker (ABORT 0, COMMIT 1)") from None
    if value is None or len(value) < _END_TXN_MARKER_VALUE.size:
        raise InvalidRecord(
            f"transaction marker value must hold version and coordinator epoch (6 bytes), got {value!r}"
        )
    value_version, coordinator_epoch = _END_TXN_MARKER_VALUE.unpack_from(value)
    if value_version < 0:
        raise InvalidRecord(f"transaction marker value has invalid version {value_version}")
    # newer versions may append fields; like Kafka, read the ones we know and ignore the rest
    return control_type, coordinator_epoch


def _decode(header: BatchHeader, batch: memoryview) -> list[Record]:
    return [
        Record(key=key, value=value, headers=headers, timestamp=timestamp, offset=offset)
        for offset, timestamp, key, value, headers in _parse_fields(_section_bytes(header, batch), header)
    ]


def _section_bytes(header: BatchHeader, batch: memoryview) -> bytes:
    """The records section of ``batch``, decompressed."""
    compression = header.compression
    section = batch[BATCH_OVERHEAD:]
    return bytes(section) if compression is Compression.NONE else decompress(compression, section)


def _read_nullable(data: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > limit:
        raise ValueError(f"{what} of {length} bytes runs past the end of the record")
    return data[pos:end], end


def _parse_fields(data: bytes, header: BatchHeader) -> list[RecordFields]:
    """Every record of a batch's records section (``DefaultRecord.readFrom``), with absolute offset and timestamp.

    Each varint that fits in one byte (attributes aside, every field of a small record, and the deltas and null
    key of most records) is decoded inline; longer ones go through :func:`decode_varint`. This loop is the
    consumer's hot path: about half the cost per record of calling the varint functions for every field.
    """
    count = header.record_count
    if count < 0:
        raise InvalidRecord(f"batch declares record_count {count}")
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    size = len(data)
    records: list[RecordFields] = []
    append = records.append
    pos = 0
    for index in range(count):
        start = pos
        try:
            byte = data[pos]
            if byte < 0x80:
                length, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < 0 or record_end > size:
                raise ValueError(f"record length {length} runs past the end of the records section ({size} bytes)")
            body_start = pos
            byte = data[pos + 1]  # after the record attributes, unused in magic 2
            if byte < 0x80:
                timestamp_delta, pos = (byte >> 1) ^ -(byte & 1), pos + 2
            else:
                timestamp_delta, pos = decode_varlong(data, pos + 1)
            byte = data[pos]
            if byte < 0x80:
                offset_delta, pos = (byte >> 1) ^ -(byte & 1), pos + 1
            else:
                offset_delta, pos = decode_varint(data, pos)
            if data[pos] == _NULL_LENGTH:
                key, pos = None, pos + 1
            else:
                key, pos = _read_nullable(data, pos, record_end, "key")
            byte = data[pos]
            if byte == _NULL_LENGTH:
                value, pos = None, pos + 1
            elif byte < 0x80 and not byte & 1:  # a length of 0-63 bytes
                end = pos + 1 + (byte >> 1)
                if end > record_end:
                    raise ValueError(f"value of {byte >> 1} bytes runs past the end of the record")
                value, pos = data[pos + 1 : end], end
            else:
                value, pos = _read_nullable(data, pos, record_end, "value")
            if data[pos] == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, record_end)
            if pos != record_end:
                raise ValueError(f"record length says {length} bytes but its fields take {pos - body_start}")
        except IndexError:
            raise InvalidRecord(
                f"record {index} of {count} (at byte {start} of the records section): cut off at the end of the "
                f"records section ({size} bytes)"
            ) from None
        except ValueError as err:  # includes UnicodeDecodeError
            raise InvalidRecord(f"record {index} of {count} (at byte {start} of the records section): {err}") from None
        append(
            (
                base_offset + offset_delta,
                base_timestamp + timestamp_delta if append_time is None else append_time,
                key,
                value,
                headers,
            )
        )
    if pos != size:
        raise InvalidRecord(f"{size - pos} bytes follow the {count} records the batch declares")
    return records


_NULL_LENGTH = 0x01  # zigzag(-1): a null key or value


def _read_headers(data: bytes, pos: int, record_end: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    header_count, pos = decode_varint(data, pos)
    if header_count < 0:
        raise ValueError(f"negative header count {header_count}")
    headers = []
    for _ in range(header_count):
        key_length, pos = decode_varint(data, pos)
        if key_length < 0:
            raise ValueError("header key is null")
        key_end = pos + key_length
        if key_end > record_end:
            raise ValueError(f"header key of {key_length} bytes runs past the end of the record")
        header_key = data[pos:key_end].decode("utf-8")
        header_value, pos = _read_nullable(data, key_end, record_end, "header value")
        headers.append((header_key, header_value))
    return tuple(headers), pos


def with_base_offset(
    batch: bytes | bytearray | memoryview, base_offset: int, partition_leader_epoch: int | None = None
) -> bytes:
    """Return a copy of one batch with a new base offset (and optionally leader epoch).

    Both fields lie outside the CRC region, so the CRC and every other byte stay as the producer
    wrote them: this is how the partition leader assigns offsets without re-encoding.

    Raises:
        CorruptMessage: ``batch`` is not exactly one batch (see :func:`read_header`).
        ValueError: ``base_offset`` or ``partition_leader_epoch`` is out of range.
    """
    view = memoryview(batch)
    header = _read_whole(view)
    epoch = header.partition_leader_epoch if partition_leader_epoch is None else partition_leader_epoch
    try:
        fields = _OFFSET_LENGTH_EPOCH.pack(base_offset, header.batch_length, epoch)
    except struct.error as err:
        raise ValueError(f"base offset {base_offset} or leader epoch {epoch} out of range: {err}") from None
    return b"".join((fields, view[_OFFSET_LENGTH_EPOCH.size :]))
