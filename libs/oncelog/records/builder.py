"""Building RecordBatch v2: records encoded as they arrive, then one batch or one transaction marker (Kafka's
``MemoryRecordsBuilder``, ``DefaultRecord.writeTo`` and ``MemoryRecords.withEndTransactionMarker``).

The layout is documented in :mod:`oncelog.records.batch`, which reads what this module writes; the two share its
format constants. Clients build batches; the partition leader only rewrites the base offset and leader epoch
(:func:`oncelog.records.batch.with_base_offset`).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import google_crc32c

from oncelog.errors import InvalidRecord
from oncelog.records.batch import (
    _ATTRIBUTES_OFFSET,
    _CONTROL_KEY,
    _CONTROL_MASK,
    _CONTROL_RECORD_VERSION,
    _END_TXN_MARKER_VALUE,
    _END_TXN_MARKER_VERSION,
    _NO_SEQUENCE,
    _PREFIX,
    _TAIL,
    _TRANSACTIONAL_MASK,
    BATCH_OVERHEAD,
    LOG_OVERHEAD,
    MAGIC,
    Record,
    decode_records,
)
from oncelog.records.compression import SNAPPY_UNSUPPORTED, Compression, compress
from oncelog.records.varint import encode_varint, encode_varlong
from oncelog.vocabulary import ControlType


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
    if not headers and (key is None or type(key) is bytes) and (value is None or type(value) is bytes):
        # the producer's per-record path (send()): the same bytes as below, each varint looked up, one join
        table = _VARINTS
        limit = len(table)
        if 0 <= timestamp_delta < limit and 0 <= offset_delta < limit:
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
            record = b"".join((b"\x00", table[timestamp_delta], table[offset_delta], key_part, value_part, _NO_HEADERS))
            size = len(record)
            return (table[size] if size < limit else encode_varint(size)) + record
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

    def append_section(self, section: bytes | memoryview, count: int, timestamp: int) -> None:
        """Append ``count`` records encoded elsewhere, all at ``timestamp``, their offset deltas starting at
        :attr:`count` and their timestamp deltas relative to :attr:`base_timestamp` (as
        :func:`oncelog.records.columnar.encode_run` writes them)."""
        if self.base_timestamp is None:
            self.base_timestamp = timestamp
        self._section += section
        self.count += count
        if count and timestamp > self.max_timestamp:
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
            raise InvalidRecord(SNAPPY_UNSUPPORTED)
        if transactional and producer_id < 0:
            raise ValueError("a transactional batch needs a producer id")
        if producer_id >= 0 and (producer_epoch < 0 or base_sequence < 0):
            raise ValueError(
                f"producer id {producer_id} needs a producer epoch and base sequence >= 0, "
                f"got {producer_epoch} and {base_sequence}"
            )
        return _assemble(
            compress(compression, self._section),
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


__all__ = ["RecordsBuilder", "build_batch", "build_control_batch"]
