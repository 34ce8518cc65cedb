"""Kafka RecordBatch v2 (magic 2), byte for byte: build, validate, iterate and decode (design/architecture.md §4).

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
import gzip
import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import google_crc32c
import lz4.frame
import zstandard

from oncelog.errors import CorruptMessage, InvalidRecord
from oncelog.records.varint import (
    INT32_MAX,
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
)
from oncelog.vocabulary import ControlType  # re-exported by oncelog.records: public API

__all__ = [
    "BATCH_OVERHEAD",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "Compression",
    "ControlType",
    "Record",
    "RecordsBuilder",
    "TimestampType",
    "build_batch",
    "build_control_batch",
    "decode_records",
    "iter_batches",
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

_SNAPPY_UNSUPPORTED = "snappy compression is not supported by oncelog; use gzip, lz4 or zstd (or no compression)"


class Compression(enum.IntEnum):
    """Codec in attribute bits 0-2 (Kafka's ``CompressionType`` ids)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


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
        raise InvalidRecord(_SNAPPY_UNSUPPORTED)
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


def _compress(compression: Compression, data: bytes | bytearray) -> bytes:
    if compression is Compression.NONE:
        return bytes(data)
    if compression is Compression.GZIP:
        # level 6 is Java's GZIPOutputStream default; mtime 0 keeps the output deterministic
        return gzip.compress(data, compresslevel=6, mtime=0)
    if compression is Compression.LZ4:
        # Kafka's KafkaLZ4BlockInputStream reads only independent blocks with no block checksum,
        # and its own writer uses 64 KiB blocks without content size or content checksum
        return lz4.frame.compress(
            data,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            store_size=False,
        )
    if compression is Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise InvalidRecord(_SNAPPY_UNSUPPORTED)


def _zstd_decompress(data: memoryview) -> bytes:
    # Java writers stream frames without a content size, so one-shot decompress() is unusable;
    # decompressobj also reports a truncated frame (eof stays False) instead of a short result.
    out = []
    decompressor = zstandard.ZstdDecompressor()
    remaining: bytes | memoryview = data
    while remaining:
        frame = decompressor.decompressobj()
        out.append(frame.decompress(remaining))
        if not frame.eof:
            raise InvalidRecord("cannot decompress zstd records: the frame is truncated")
        remaining = frame.unused_data
    return b"".join(out)


def _decompress(compression: Compression, data: memoryview) -> bytes:
    try:
        if compression is Compression.GZIP:
            return gzip.decompress(data)
        if compression is Compression.LZ4:
            return lz4.frame.decompress(data)
        if compression is Compression.ZSTD:
            return _zstd_decompress(data)
    except (OSError, EOFError, zlib.error, RuntimeError, zstandard.ZstdError) as err:
        raise InvalidRecord(f"cannot decompress {compression.name.lower()} records: {err}") from None
    raise InvalidRecord(_SNAPPY_UNSUPPORTED)


def _decode(header: BatchHeader, batch: memoryview) -> list[Record]:
    compression = header.compression
    section = batch[BATCH_OVERHEAD:]
    data = bytes(section) if compression is Compression.NONE else _decompress(compression, section)
    return _parse_records(data, header)


def _read_nullable(data: bytes, pos: int, limit: int, what: str) -> tuple[bytes | None, int]:
    length, pos = decode_varint(data, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > limit:
        raise ValueError(f"{what} of {length} bytes runs past the end of the record")
    return data[pos:end], end


def _parse_records(data: bytes, header: BatchHeader) -> list[Record]:
    count = header.record_count
    if count < 0:
        raise InvalidRecord(f"batch declares record_count {count}")
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    append_time = header.max_timestamp if header.timestamp_type is TimestampType.LOG_APPEND_TIME else None
    size = len(data)
    records = []
    pos = 0
    for index in range(count):
        start = pos
        try:
            length, pos = decode_varint(data, pos)
            record_end = pos + length
            if length < 0 or record_end > size:
                raise ValueError(f"record length {length} runs past the end of the records section ({size} bytes)")
            body_start = pos
            pos += 1  # record attributes: unused in magic 2
            timestamp_delta, pos = decode_varlong(data, pos)
            offset_delta, pos = decode_varint(data, pos)
            key, pos = _read_nullable(data, pos, record_end, "key")
            value, pos = _read_nullable(data, pos, record_end, "value")
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
            if pos != record_end:
                raise ValueError(f"record length says {length} bytes but its fields take {pos - body_start}")
        except ValueError as err:  # includes UnicodeDecodeError
            raise InvalidRecord(f"record {index} of {count} (at byte {start} of the records section): {err}") from None
        records.append(
            Record(
                key=key,
                value=value,
                headers=tuple(headers),
                timestamp=base_timestamp + timestamp_delta if append_time is None else append_time,
                offset=base_offset + offset_delta,
            )
        )
    if pos != size:
        raise InvalidRecord(f"{size - pos} bytes follow the {count} records the batch declares")
    return records


def _nullable(data: bytes | bytearray | memoryview | None, what: str) -> bytes:
    if data is None:
        return b"\x01"  # zigzag(-1)
    if not isinstance(data, bytes | bytearray | memoryview):
        raise TypeError(f"{what} must be bytes or None, not {type(data).__name__}")
    return encode_varint(len(data)) + bytes(data)


def _encode_record(out: bytearray, offset_delta: int, timestamp_delta: int, record: Record) -> None:
    out += _record_bytes(offset_delta, timestamp_delta, record.key, record.value, record.headers)


def _record_bytes(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | bytearray | memoryview | None,
    value: bytes | bytearray | memoryview | None,
    headers: Sequence[tuple[str, bytes | None]],
) -> bytes:
    """One record, length prefix included."""
    body = bytearray(b"\x00")  # attributes
    body += encode_varlong(timestamp_delta)
    body += encode_varint(offset_delta)
    body += _nullable(key, "key")
    body += _nullable(value, "value")
    body += encode_varint(len(headers))
    for header_key, header_value in headers:
        if not isinstance(header_key, str):
            raise TypeError(f"header key must be str, not {type(header_key).__name__}")
        encoded_key = header_key.encode("utf-8")
        body += encode_varint(len(encoded_key))
        body += encoded_key
        body += _nullable(header_value, "header value")
    return encode_varint(len(body)) + bytes(body)


# zigzag varints of 0 .. 8191 (lengths and offset deltas of most records), looked up instead of computed
_VARINTS = tuple(encode_varint(i) for i in range(1 << 13))
_NULL = b"\x01"  # zigzag(-1): a null key or value
_NO_HEADERS = b"\x00"


class RecordsBuilder:
    """The records section of one batch, encoded record by record as they arrive (``MemoryRecordsBuilder``).

    A producer appends to the open batch of a partition and sends it later; encoding each record when it
    is appended, rather than all of them when the batch is sent, means the bytes are final (offset and
    timestamp deltas are fixed by the record's place in the batch) and the size of the batch is known
    exactly at every step. Only the header fields stamped at send time — producer id, epoch, base
    sequence, transactional flag — and the CRC are written by :meth:`build`. Keys and values must be
    ``bytes`` (or None); callers check types before appending.

    Attributes:
        count: records appended.
        base_timestamp: timestamp of the first record (None while empty); every delta is relative to it.
        max_timestamp: the largest record timestamp.
    """

    __slots__ = ("_section", "base_timestamp", "count", "max_timestamp")

    def __init__(self) -> None:
        self._section = bytearray()
        self.count = 0
        self.base_timestamp: int | None = None
        self.max_timestamp = -1

    @property
    def size_in_bytes(self) -> int:
        """The uncompressed batch size so far, header included."""
        return BATCH_OVERHEAD + len(self._section)

    def encode(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
        timestamp: int,
    ) -> bytes:
        """The bytes the next record would take, for a size check before :meth:`append_encoded`."""
        base = timestamp if self.base_timestamp is None else self.base_timestamp
        return _record_bytes(self.count, timestamp - base, key, value, headers)

    def append_encoded(self, record: bytes, timestamp: int) -> None:
        """Append a record encoded by :meth:`encode` (with no append in between) at ``timestamp``."""
        if self.base_timestamp is None:
            self.base_timestamp = timestamp
        self._section += record
        self.count += 1
        if timestamp > self.max_timestamp:
            self.max_timestamp = timestamp

    def append_run(
        self,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        timestamp: int,
        max_batch_bytes: int,
    ) -> int:
        """Append header-less records ``values[start:]`` (and ``keys[start:]``) while the batch stays within
        ``max_batch_bytes``, all at ``timestamp``; return how many were appended.

        An empty batch takes its first record whatever its size (the caller bounds a record by the
        request size), so a run always makes progress on a new batch. This loop is the producer's bulk
        path: a table lookup per varint and a few concatenations per record.
        """
        if self.base_timestamp is None:
            self.base_timestamp = timestamp
        head = b"\x00" + encode_varlong(timestamp - self.base_timestamp)  # attributes, timestamp delta
        table = _VARINTS
        limit = len(table)
        section = self._section
        room = max_batch_bytes - BATCH_OVERHEAD - len(section)
        delta = self.count
        end = len(values)
        index = start
        while index < end:
            value = values[index]
            key = None if keys is None else keys[index]
            if key is None:
                key_part = _NULL
            else:
                size = len(key)
                key_part = (table[size] if size < limit else encode_varint(size)) + key
            if value is None:
                value_part = _NULL
            else:
                size = len(value)
                value_part = (table[size] if size < limit else encode_varint(size)) + value
            body = b"".join(
                (head, table[delta] if delta < limit else encode_varint(delta), key_part, value_part, _NO_HEADERS)
            )
            size = len(body)
            prefix = table[size] if size < limit else encode_varint(size)
            room -= len(prefix) + size
            if room < 0 and delta > 0:
                break
            section += prefix
            section += body
            delta += 1
            index += 1
        self.count = delta
        if index > start and timestamp > self.max_timestamp:
            self.max_timestamp = timestamp
        return index - start

    def truncate(self, count: int, size_in_bytes: int, max_timestamp: int) -> None:
        """Drop what was appended after the builder had ``count`` records, ``size_in_bytes`` and ``max_timestamp``."""
        del self._section[size_in_bytes - BATCH_OVERHEAD :]
        self.count = count
        self.max_timestamp = max_timestamp
        if count == 0:
            self.base_timestamp = None

    def build(
        self,
        *,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        compression: Compression = Compression.NONE,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
    ) -> bytes:
        """The batch: the records (compressed as a whole with ``compression``) under a header and its CRC.

        Raises:
            ValueError: no records, a field out of its wire range, or producer fields that
                :func:`validate_batch` would reject.
            InvalidRecord: ``compression`` is SNAPPY.
        """
        if not self.count or self.base_timestamp is None:
            raise ValueError("a RecordBatch needs at least one record")
        compression = Compression(compression)
        if compression is Compression.SNAPPY:
            raise InvalidRecord(_SNAPPY_UNSUPPORTED)
        if transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        if producer_id >= 0 and (producer_epoch < 0 or base_sequence < 0):
            raise ValueError(
                f"producer id {producer_id} needs a producer epoch and base sequence >= 0, "
                f"got {producer_epoch} and {base_sequence}"
            )
        return _assemble(
            _compress(compression, self._section),
            base_offset=base_offset,
            partition_leader_epoch=partition_leader_epoch,
            attributes=compression | (_TRANSACTIONAL_MASK if transactional else 0),
            last_offset_delta=self.count - 1,
            base_timestamp=self.base_timestamp,
            max_timestamp=self.max_timestamp,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            base_sequence=base_sequence,
            record_count=self.count,
        )

    def records(self) -> list[Record]:
        """The records appended so far, decoded (offsets from 0): for inspection, not for the send path."""
        if not self.count:
            return []
        return decode_records(self.build())


def _assemble(
    records_section: bytes,
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    record_count: int,
) -> bytes:
    try:
        covered = (
            _TAIL.pack(
                attributes,
                last_offset_delta,
                base_timestamp,
                max_timestamp,
                producer_id,
                producer_epoch,
                base_sequence,
                record_count,
            )
            + records_section
        )
        prefix = _PREFIX.pack(
            base_offset,
            len(covered) + _ATTRIBUTES_OFFSET - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC,
            google_crc32c.value(covered),
        )
    except struct.error as err:
        raise ValueError(f"a batch header field is out of range for its wire type: {err}") from None
    return prefix + covered


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    compression: Compression = Compression.NONE,
    partition_leader_epoch: int = -1,
    base_timestamp: int | None = None,
) -> bytes:
    """Encode ``records`` as one CREATE_TIME RecordBatch, as a Kafka producer would.

    Offsets are consecutive from ``base_offset``. ``base_timestamp`` defaults to the first
    record timestamp that is set; records without a timestamp take it. The batch is compressed
    with ``compression`` even when that does not shrink it, so the attributes always say what
    was asked for.

    Raises:
        ValueError: no records, no timestamp anywhere, a field out of its wire range, or
            producer fields that :func:`validate_batch` would reject.
        TypeError: a key, value or header of the wrong type.
        InvalidRecord: ``compression`` is SNAPPY.
    """
    if not records:
        raise ValueError("a RecordBatch needs at least one record")
    if base_timestamp is None:
        base_timestamp = next((r.timestamp for r in records if r.timestamp is not None), None)
        if base_timestamp is None:
            raise ValueError("no record has a timestamp; pass base_timestamp")
    builder = RecordsBuilder()
    builder.base_timestamp = base_timestamp
    for record in records:
        timestamp = base_timestamp if record.timestamp is None else record.timestamp
        builder.append_encoded(builder.encode(record.key, record.value, record.headers, timestamp), timestamp)
    return builder.build(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        transactional=transactional,
        compression=compression,
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_control_batch(
    control_type: ControlType,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    base_offset: int = 0,
    timestamp: int,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Encode a COMMIT or ABORT transaction marker (``MemoryRecords.withEndTransactionMarker``).

    The batch is transactional and control, uncompressed, without a sequence, and holds one
    record with the control key and the ``EndTransactionMarker`` value (design/kafka-semantics.md §3.1).

    Raises:
        ValueError: ``producer_id`` or ``producer_epoch`` is negative, or a field is out of range.
    """
    control_type = ControlType(control_type)
    if producer_id < 0 or producer_epoch < 0:
        raise ValueError(f"a transaction marker needs producer id and epoch >= 0, got {producer_id}/{producer_epoch}")
    try:
        key = _CONTROL_KEY.pack(_CONTROL_RECORD_VERSION, control_type)
        value = _END_TXN_MARKER_VALUE.pack(_END_TXN_MARKER_VERSION, coordinator_epoch)
    except struct.error as err:
        raise ValueError(f"coordinator epoch {coordinator_epoch} does not fit in int32: {err}") from None
    section = bytearray()
    _encode_record(section, 0, 0, Record(key=key, value=value))
    return _assemble(
        bytes(section),
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=_TRANSACTIONAL_MASK | _CONTROL_MASK,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=_NO_SEQUENCE,
        record_count=1,
    )


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
