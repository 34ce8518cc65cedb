"""One partition's records sent, retried and acknowledged together (Kafka's ``ProducerBatch``), and the sizes
of records in it.

A batch is open to new records until the sender drains it. Draining stamps it, for an idempotent or
transactional producer, with producer id, epoch, base sequence and the transactional flag through
:class:`~oncelog.client.sequences.ProducerSequences`; its :attr:`ProducerBatch.payload` is then the Kafka
RecordBatch v2 encoding of exactly that stamp. The :class:`~oncelog.client.accumulator.RecordAccumulator`
owns every batch and is the only writer of its private fields.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future

from oncelog.client.futures import RecordFuture
from oncelog.client.records import TopicPartition
from oncelog.client.sequences import NO_SEQUENCE
from oncelog.errors import MessageTooLarge
from oncelog.records import BATCH_OVERHEAD, Compression, Record, RecordsBuilder
from oncelog.records.varint import size_of_varint
from oncelog.vocabulary import ProducerIdAndEpoch

__all__ = [
    "MAX_RECORD_OVERHEAD",
    "MAX_RUN_RECORD_OVERHEAD",
    "ProducerBatch",
    "all_bytes",
    "as_bytes",
    "byte_length",
    "estimate_record_size",
    "normalize_headers",
]

Headers = Sequence[tuple[str, bytes | None]]


MAX_RECORD_OVERHEAD = 5 + 1 + 1 + 1 + 5 + 5 + 5
"""Most bytes a header-less record at offset and timestamp delta 0 adds to its key and value: length varint,
attributes, the two deltas, key length, value length, header count (each varint at most 5 bytes here)."""


MAX_RUN_RECORD_OVERHEAD = 5 + 1 + 10 + 5 + 5 + 5 + 1
"""Most bytes a header-less record adds to its key and value anywhere in a batch: length varint, attributes,
timestamp delta (a varlong), offset delta, key length, value length, header count."""


def nullable_size(data: bytes | None) -> int:
    return 1 if data is None else size_of_varint(len(data)) + len(data)


def estimate_record_size(
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[bytes, bytes | None]] = (),
    *,
    offset_delta: int = 0,
    timestamp_delta: int = 0,
) -> int:
    """Bytes one record takes in an uncompressed batch (``DefaultRecord.sizeInBytes``); header keys UTF-8 encoded."""
    body = 1 + size_of_varint(timestamp_delta) + size_of_varint(offset_delta)
    body += nullable_size(key) + nullable_size(value) + size_of_varint(len(headers))
    for header_key, header_value in headers:
        body += size_of_varint(len(header_key)) + len(header_key) + nullable_size(header_value)
    return size_of_varint(body) + body


def check_record_size(
    key: bytes | None,
    value: bytes | None,
    encoded_headers: Sequence[tuple[bytes, bytes | None]],
    max_request_size: int,
) -> None:
    """Raise :class:`~oncelog.errors.MessageTooLarge` when the record alone, in a batch of its own, exceeds
    ``max_request_size``."""
    # Hot path: a record whose raw bytes plus the largest possible varint overhead fit needs no exact size
    # here (its in-batch size is computed once, when it is appended).
    raw = (len(key) if key else 0) + (len(value) if value else 0)
    if not encoded_headers and BATCH_OVERHEAD + raw + MAX_RECORD_OVERHEAD <= max_request_size:
        return
    alone = BATCH_OVERHEAD + estimate_record_size(key, value, encoded_headers)
    if alone > max_request_size:
        raise MessageTooLarge(
            f"a record of {alone} bytes (batch header included) exceeds max_request_size={max_request_size}; "
            "send a smaller record or raise max_request_size (the topic's max_message_bytes also applies)"
        )


def bulk_bound(count: int, raw: int, largest: int, batch_size: int) -> int:
    """Most bytes ``count`` header-less records of ``raw`` key and value bytes (at most ``largest`` in one
    record) can add to a partition's batches of ``batch_size``: each record's framing, and the header of each
    new batch."""
    records = raw + count * MAX_RUN_RECORD_OVERHEAD
    # every new batch but the last closed because the next record did not fit, so it holds more than this
    filled = batch_size - BATCH_OVERHEAD - largest - MAX_RUN_RECORD_OVERHEAD
    batches = count if filled <= 0 else min(count, records // filled + 1)
    return records + batches * BATCH_OVERHEAD


def as_bytes(data: object, what: str) -> bytes | None:
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)  # a copy: the caller may reuse its buffer after send()
    raise TypeError(f"{what} must be bytes or None, not {type(data).__name__}; serialize it first")


def all_bytes(items: Sequence[object]) -> bool:
    return all(type(item) is bytes for item in items)


def byte_length(data: bytes | None) -> int:
    return 0 if data is None else len(data)


def normalize_headers(
    headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None],
) -> tuple[tuple[str, bytes | None], ...]:
    items = headers.items() if isinstance(headers, Mapping) else headers
    normalized = []
    for item in items:
        name, value = item
        if not isinstance(name, str):
            raise TypeError(f"header name must be str, not {type(name).__name__}")
        normalized.append((name, as_bytes(value, f"value of header {name!r}")))
    return tuple(normalized)


class ProducerBatch:
    """Records for one partition that are sent, retried and acknowledged together (Kafka's ``ProducerBatch``).

    Attributes:
        topic_partition: the destination.
        created_ms: clock time of the first record.
        attempts: how many times the batch was put back for a retry.
        last_attempt_ms: clock time of the last retry (``created_ms`` before any).
        drained_ms: clock time of the first drain, None while never drained.
        transactional: the batch belongs to a transaction (set when drained).
        outcome: settles once for the whole batch, to ``(base_offset, log_append_time_ms)`` or the error
            that failed it; every record's :class:`RecordFuture` derives from it.
    """

    def __init__(self, tp: TopicPartition, *, created_ms: int, batch_size: int, compression: Compression) -> None:
        self.topic_partition = tp
        self.created_ms = created_ms
        self.attempts = 0
        self.last_attempt_ms = created_ms
        self.drained_ms: int | None = None
        self.drain_order: int | None = None
        self.transactional = False
        self._batch_size = batch_size
        self._compression = compression
        self._builder = RecordsBuilder()
        self.outcome: Future[tuple[int, int]] = Future()
        self.outcome.set_running_or_notify_cancel()
        self._reserved = 0
        self._closed = False
        self._done = False
        self._identity = ProducerIdAndEpoch(-1, -1)
        self._base_sequence = NO_SEQUENCE
        self._payload: bytes | None = None

    @property
    def record_count(self) -> int:
        """Records in the batch."""
        return self._builder.count

    @property
    def records(self) -> tuple[Record, ...]:
        """The records, with their final timestamps (decoded from the batch: for inspection)."""
        return tuple(self._builder.records())

    @property
    def size_in_bytes(self) -> int:
        """Encoded size before compression, header included."""
        return self._builder.size_in_bytes

    @property
    def is_full(self) -> bool:
        """No further record fits under ``batch_size``."""
        return self._builder.size_in_bytes >= self._batch_size

    @property
    def is_done(self) -> bool:
        """The batch was completed or failed; its futures are settled."""
        return self._done

    @property
    def producer_id(self) -> int:
        """Producer id stamped at drain time (-1 for a non-idempotent producer)."""
        return self._identity.producer_id

    @property
    def producer_epoch(self) -> int:
        """Producer epoch stamped at drain time (-1 for a non-idempotent producer)."""
        return self._identity.epoch

    @property
    def base_sequence(self) -> int:
        """Sequence of the first record, or -1 before stamping."""
        return self._base_sequence

    def stamp(self, identity: ProducerIdAndEpoch, base_sequence: int) -> None:
        """Set producer id, epoch and base sequence; the payload is re-encoded on next access."""
        self._identity = identity
        self._base_sequence = base_sequence
        self._payload = None

    @property
    def payload(self) -> bytes:
        """The batch as one Kafka RecordBatch v2, encoded with the current stamp (cached)."""
        if self._payload is None:
            self._payload = self._builder.build(
                producer_id=self._identity.producer_id,
                producer_epoch=self._identity.epoch,
                base_sequence=self._base_sequence,
                transactional=self.transactional,
                compression=self._compression,
            )
        return self._payload

    def __repr__(self) -> str:
        return (
            f"ProducerBatch({self.topic_partition}, records={self.record_count}, "
            f"producer_id={self.producer_id}, epoch={self.producer_epoch}, base_sequence={self._base_sequence}, "
            f"attempts={self.attempts})"
        )

    def _fits(self, size: int) -> bool:
        return not self._closed and self._builder.size_in_bytes + size <= self._batch_size

    def _append(self, record: bytes, timestamp: int) -> RecordFuture:
        """Add a record encoded by ``_builder.encode`` whose memory the accumulator reserved."""
        future = RecordFuture(self.outcome, self.topic_partition, self._builder.count, timestamp)
        self._builder.append_encoded(record, timestamp)
        self._reserved = self._builder.size_in_bytes
        return future
