"""The producer's per-partition batches between ``send()`` and the network (Kafka's ``RecordAccumulator``).

``send()`` appends a record to the open :class:`~oncelog.client.producer_batch.ProducerBatch` of its partition
and gets a :class:`~oncelog.client.futures.RecordFuture`. The sender thread asks :meth:`RecordAccumulator.ready`
which partitions have a batch worth sending — full, older than ``linger_ms``, or everything when a flush, a
close or a memory shortage is pending — and :meth:`RecordAccumulator.drain` hands over their first batches (and,
for an idempotent producer with a backlog, a few more of each). Draining closes a batch to new records and, for
an idempotent or transactional producer, stamps it through :class:`~oncelog.client.sequences.ProducerSequences`.

A failed send the sender wants to retry goes back with :meth:`RecordAccumulator.reenqueue`: ahead
of every batch never sent, in its original order, with its sequence unchanged, and not before
``retry_backoff_ms``. :meth:`RecordAccumulator.complete` and :meth:`RecordAccumulator.fail`
end a batch, settle its futures (outside the lock, so a callback may call ``send()`` again)
and release its memory. Unsent records count against ``buffer_memory``; a record that does
not fit raises :class:`~oncelog.client.errors.BufferExhaustedError`, after waiting up to
``max_block_s`` for memory.

Time comes from an injected clock (Unix milliseconds) for record timestamps, linger, backoff and
delivery timeouts; only the optional wait for memory uses real time. The object is thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from oncelog.client.bulk_records import BulkRecords, RowRecords
from oncelog.client.errors import AbortableError, BufferExhaustedError, IllegalStateError, RetriableError
from oncelog.client.futures import RecordFuture, RecordRun
from oncelog.client.producer_batch import (
    ProducerBatch,
    as_bytes,
    check_record_size,
    normalize_headers,
)
from oncelog.client.records import TopicPartition
from oncelog.client.sequences import NO_SEQUENCE, ProducerSequences
from oncelog.errors import OncelogError, RequestTimedOut
from oncelog.records import BATCH_OVERHEAD, Compression

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BUFFER_MEMORY",
    "DEFAULT_MAX_REQUEST_SIZE",
    "MAX_BATCH_SIZE",
    "AppendResult",
    "ReadyCheck",
    "RecordAccumulator",
]

DEFAULT_BATCH_SIZE = 16 * 1024
MAX_BATCH_SIZE = 1024 * 1024
DEFAULT_BUFFER_MEMORY = 32 * 1024 * 1024
DEFAULT_MAX_REQUEST_SIZE = 1024 * 1024


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class AppendResult(NamedTuple):
    """What :meth:`RecordAccumulator.append` did (a named tuple: built once per record, and a tuple is built
    several times faster than a frozen dataclass, whose ``__init__`` sets each field through ``object.__setattr__``).

    Attributes:
        future: resolves to the record's :class:`~oncelog.client.records.RecordMetadata`, or
            raises the error that failed its batch. It cannot be cancelled.
        batch_is_full: the partition has a full batch waiting: wake the sender.
        open_batch_is_full: the batch that took the record is full, so a new batch starts with
            the next record; the sticky partitioner switches partitions only then
            (``enable_switch`` of :meth:`~oncelog.client.partitioner.DefaultPartitioner.on_append`).
        new_batch_created: the record opened a new batch.
        appended_bytes: the record's encoded size.
    """

    future: RecordFuture
    batch_is_full: bool
    open_batch_is_full: bool
    new_batch_created: bool
    appended_bytes: int


@dataclass(frozen=True, slots=True)
class ReadyCheck:
    """Answer of :meth:`RecordAccumulator.ready`.

    Attributes:
        partitions: partitions whose first batch may be sent now.
        next_ready_check_ms: milliseconds until another batch becomes sendable by linger or
            backoff; None when no batch is waiting.
    """

    partitions: list[TopicPartition]
    next_ready_check_ms: int | None


class RecordAccumulator:
    """Per-partition queues of batches waiting to be sent.

    Args:
        batch_size: bytes a batch may reach before it counts as full (up to 1 MiB); a single
            larger record still gets a batch of its own, up to ``max_request_size``.
        linger_ms: how long a batch that is not full waits for more records.
        buffer_memory: bytes of unsent and unacknowledged records the producer may hold.
        max_request_size: largest record batch a request may carry; larger records are refused.
        compression: codec of the encoded batches.
        retry_backoff_ms: how long a batch put back for a retry waits before it is sendable.
        delivery_timeout_ms: how long after its creation a batch may still be sent; see :meth:`expire`.
        sequences: the producer's sequence book; None for a producer that is not idempotent.
        clock: Unix milliseconds.
    """

    def __init__(
        self,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        linger_ms: int = 5,
        buffer_memory: int = DEFAULT_BUFFER_MEMORY,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        compression: Compression = Compression.NONE,
        retry_backoff_ms: int = 100,
        delivery_timeout_ms: int = 120_000,
        sequences: ProducerSequences | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        problems = []
        if not 1 <= batch_size <= MAX_BATCH_SIZE:
            problems.append(f"batch_size must be between 1 and {MAX_BATCH_SIZE} bytes, got {batch_size}")
        if batch_size > max_request_size:
            problems.append(f"batch_size ({batch_size}) must not exceed max_request_size ({max_request_size})")
        if buffer_memory < max_request_size:
            problems.append(f"buffer_memory ({buffer_memory}) must be at least max_request_size ({max_request_size})")
        if linger_ms < 0 or retry_backoff_ms < 0:
            problems.append(f"linger_ms and retry_backoff_ms must be >= 0, got {linger_ms} and {retry_backoff_ms}")
        if delivery_timeout_ms < linger_ms:
            problems.append(f"delivery_timeout_ms ({delivery_timeout_ms}) must be at least linger_ms ({linger_ms})")
        if problems:
            raise ValueError("; ".join(problems))
        self._batch_size = batch_size
        self._linger_ms = linger_ms
        self._buffer_memory = buffer_memory
        self._max_request_size = max_request_size
        self._compression = Compression(compression)
        self._retry_backoff_ms = retry_backoff_ms
        self._delivery_timeout_ms = delivery_timeout_ms
        self._sequences = sequences
        self._clock = clock
        self._lock = threading.Lock()
        self._memory_freed = threading.Condition(self._lock)
        self._batches: dict[TopicPartition, deque[ProducerBatch]] = {}
        self._incomplete: set[ProducerBatch] = set()
        self._used_bytes = 0
        self._waiters = 0
        self._exhausted = False
        self._flushes = 0
        self._closed = False
        self._drain_counter = 0
        self._unencodable: list[tuple[ProducerBatch, Exception]] = []

    @property
    def delivery_timeout_ms(self) -> int:
        """Configured delivery timeout."""
        return self._delivery_timeout_ms

    @property
    def used_bytes(self) -> int:
        """Bytes of buffer memory held by incomplete batches."""
        with self._lock:
            return self._used_bytes

    @property
    def waiting_for_memory(self) -> int:
        """Callers of :meth:`append` currently blocked waiting for memory."""
        with self._lock:
            return self._waiters

    def append(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] = (),
        timestamp: int | None = None,
        *,
        max_block_s: float = 0.0,
    ) -> AppendResult:
        """Add one record to ``tp``'s open batch, or to a new batch when it does not fit.

        Args:
            tp: the destination partition.
            key: serialized key, or None.
            value: serialized value, or None.
            headers: ``(name, value)`` pairs (names may repeat), or a mapping of them.
            timestamp: Unix milliseconds; None takes the clock.
            max_block_s: how long to wait for buffer memory before giving up.

        Raises:
            IllegalStateError: the accumulator is closed.
            MessageTooLarge: the record alone exceeds ``max_request_size``.
            BufferExhaustedError: ``buffer_memory`` stayed full for ``max_block_s``.
            TypeError: key, value or a header is not bytes (or a header name not str).
            ValueError: a negative timestamp.
        """
        key = as_bytes(key, "key")
        value = as_bytes(value, "value")
        if headers:
            header_tuple = normalize_headers(headers)
            encoded_headers = [(name.encode("utf-8"), header_value) for name, header_value in header_tuple]
        else:
            header_tuple, encoded_headers = (), []
        if timestamp is not None and timestamp < 0:
            raise ValueError(f"record timestamp must be >= 0 (Unix milliseconds), got {timestamp}")
        check_record_size(key, value, encoded_headers, self._max_request_size)
        deadline = time.monotonic() + max_block_s
        with self._lock:
            return self._append_locked(tp, key, value, header_tuple, timestamp, deadline)

    def append_many(
        self,
        tp: TopicPartition,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        timestamp: int | None = None,
        *,
        max_block_s: float = 0.0,
    ) -> tuple[list[RecordRun], bool]:
        """Add header-less ``values`` (with ``keys``, if given) to ``tp`` in order, under one lock; see :meth:`append`.

        The bulk path: every record is checked before the first is added, so a bad one adds none; then the
        records are encoded straight into the open batch, filling it and opening new ones as needed, with
        one clock reading per batch and no per-record future.

        Returns:
            The runs of records per batch, in order, and whether a batch was created or filled (the sender
            should look).

        Raises:
            The exceptions of :meth:`append`; ``ValueError`` also when ``keys`` and ``values`` differ in length.
        """
        runs, wake = self.append_groups([(tp, RowRecords(keys, values))], timestamp, max_block_s=max_block_s)
        return runs[0], wake

    def append_groups(
        self,
        groups: Sequence[tuple[TopicPartition, BulkRecords]],
        timestamp: int | None = None,
        *,
        max_block_s: float = 0.0,
    ) -> tuple[list[list[RecordRun]], bool]:
        """:meth:`append_many` for several partitions at once, all or nothing; rows or Arrow columns alike.

        Every record of every group is checked, and buffer memory for all of them is reserved, before the
        first is added: a bad record, a closed accumulator or a full buffer adds none anywhere, so a caller
        may simply call again after :class:`~oncelog.client.errors.BufferExhaustedError` without writing
        any record twice.

        Args:
            groups: ``(partition, records)`` per partition, each appended in order.

        Returns:
            The runs of each group (in the order of ``groups``), and whether the sender should look.
        """
        if timestamp is not None and timestamp < 0:
            raise ValueError(f"record timestamp must be >= 0 (Unix milliseconds), got {timestamp}")
        bound = sum(records.memory_bound(self._batch_size, self._max_request_size) for _, records in groups)
        total = sum(len(records) for _, records in groups)
        if total == 0:
            return [[] for _ in groups], False
        deadline = time.monotonic() + max_block_s
        with self._lock:
            # all or nothing: memory for every record is reserved (an upper bound) before the first is added
            self._ensure_open()
            while not self._reserve(bound):
                if bound > self._buffer_memory:
                    raise BufferExhaustedError(
                        f"{total} records may take up to {bound} bytes, more than buffer_memory="
                        f"{self._buffer_memory}; send them in smaller groups or raise buffer_memory"
                    )
                self._wait_for_memory(bound, deadline)
                self._ensure_open()
            unused = bound
            wake = False
            all_runs: list[list[RecordRun]] = []
            for tp, records in groups:
                runs, used, created = self._append_run_locked(tp, records, timestamp)
                unused -= used
                wake = wake or created
                all_runs.append(runs)
            self._used_bytes -= unused
            if unused > 0:
                self._memory_freed.notify_all()
        return all_runs, wake

    def _append_run_locked(
        self, tp: TopicPartition, records: BulkRecords, timestamp: int | None
    ) -> tuple[list[RecordRun], int, bool]:
        """Encode checked records into ``tp``'s batches; their memory is reserved. Runs, bytes used, wake."""
        runs: list[RecordRun] = []
        used = 0
        wake = False
        start = 0
        open_new = False  # the open batch has no room for the next record
        while start < len(records):
            now = self._clock()
            ts = now if timestamp is None else timestamp
            queue = self._batches.get(tp)
            if queue is None:
                queue = self._batches[tp] = deque()
            last = queue[-1] if queue and not open_new else None
            batch = last if last is not None and not last._closed and not last.is_full else None
            created = batch is None
            if batch is None:
                batch = ProducerBatch(tp, created_ms=now, batch_size=self._batch_size, compression=self._compression)
            builder = batch._builder
            count = builder.count
            taken = records.append_to(builder, start, ts, self._batch_size)
            open_new = taken == 0  # only an open batch takes none: the next record starts a new one
            if open_new:
                continue
            used += builder.size_in_bytes - batch._reserved  # the batch now holds that part
            batch._reserved = builder.size_in_bytes
            if created:
                queue.append(batch)
                self._incomplete.add(batch)
            runs.append(RecordRun(batch.outcome, tp, count, taken, ts))
            start += taken
            wake = wake or created or batch.is_full
        return runs, used, wake

    def _append_locked(
        self,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        header_tuple: tuple[tuple[str, bytes | None], ...],
        timestamp: int | None,
        deadline: float,
    ) -> AppendResult:
        while True:
            self._ensure_open()
            now = self._clock()
            ts = now if timestamp is None else timestamp
            queue = self._batches.get(tp)
            if queue is None:
                queue = self._batches[tp] = deque()
            last = queue[-1] if queue and not queue[-1]._closed else None
            if last is not None:
                record = last._builder.encode(key, value, header_tuple, ts)
                if last._fits(len(record)):
                    if not self._reserve(len(record)):
                        self._wait_for_memory(len(record), deadline)
                        continue
                    future = last._append(record, ts)
                    full = last.is_full
                    return AppendResult(future, full or len(queue) > 1, full, False, len(record))
            batch = ProducerBatch(tp, created_ms=now, batch_size=self._batch_size, compression=self._compression)
            record = batch._builder.encode(key, value, header_tuple, ts)
            if not self._reserve(BATCH_OVERHEAD + len(record)):
                self._wait_for_memory(BATCH_OVERHEAD + len(record), deadline)
                continue
            future = batch._append(record, ts)
            queue.append(batch)
            self._incomplete.add(batch)
            full = batch.is_full
            return AppendResult(future, full or len(queue) > 1, full, True, len(record))

    def ready(self) -> ReadyCheck:
        """Partitions whose first batch should be sent now, and when to check again (``RecordAccumulator.ready``).

        A batch is sendable when it is full or another batch queues behind it, when it waited
        ``linger_ms``, or when a flush, a close or a memory shortage is pending; a batch put
        back for a retry waits ``retry_backoff_ms`` regardless. Partitions the sequence book
        holds back (five batches in flight, a retry waiting for an older batch, a pending
        epoch bump) are left out: an answer from the partition, not time, unblocks them.
        """
        with self._lock:
            now = self._clock()
            hurry = self._closed or self._flushes > 0 or self._waiters > 0 or self._exhausted
            partitions = []
            next_check: int | None = None
            for tp, queue in self._batches.items():
                if not queue:
                    continue
                first = queue[0]
                backing_off = first.attempts > 0 and now - first.last_attempt_ms < self._retry_backoff_ms
                wait_ms = self._retry_backoff_ms if backing_off else self._linger_ms
                waited = now - first.last_attempt_ms
                if self._sequences is not None and not self._sequences.may_send(first):
                    continue  # in-flight limit or ordering: a response, not time, unblocks it
                full = len(queue) > 1 or first.is_full
                if not backing_off and (full or hurry or waited >= wait_ms):
                    partitions.append(tp)
                else:
                    left = max(wait_ms - waited, 0)
                    next_check = left if next_check is None else min(next_check, left)
            return ReadyCheck(partitions, next_check)

    def drain(self, partitions: Iterable[TopicPartition], *, max_bytes: int | None = None) -> list[ProducerBatch]:
        """Take the first batch of each of ``partitions``, then more of their queued batches while room is left,
        ready to send (``RecordAccumulator.drain``).

        The caller passes the partitions it may write now: those with a known leader and, for a
        transactional producer, already added to the transaction (design/kafka-semantics.md §1.1 step 3).
        A batch is skipped while it backs off, or while the sequence book does not let it go
        (in-flight limit, a pending epoch bump, or a retry waiting for an older batch). A
        batch drained for the first time is closed to new records and stamped; its
        :attr:`ProducerBatch.payload` is encoded before this returns. ``max_bytes`` bounds
        the sum of batch sizes, except that the first batch is always taken.

        Every partition gets its first batch before any gets a second; then an idempotent producer's partition
        adds full, never-sent batches behind a never-sent first one, up to the sequence book's
        ``batches_per_request`` (design/kafka-semantics.md §4.2). A partition's batches come in sequence order.
        """
        drained: list[ProducerBatch] = []
        with self._lock:
            now = self._clock()
            total = 0
            firsts: list[deque[ProducerBatch]] = []
            for tp in partitions:
                queue = self._batches.get(tp)
                if not queue:
                    continue
                first = queue[0]
                if first.attempts > 0 and now - first.last_attempt_ms < self._retry_backoff_ms:
                    continue
                if self._sequences is not None and not self._sequences.may_send(first):
                    continue
                if max_bytes is not None and drained and total + first.size_in_bytes > max_bytes:
                    break
                fresh = first.drain_order is None
                self._take(queue, now)
                total += first.size_in_bytes
                drained.append(first)
                if fresh:
                    firsts.append(queue)
            sequences = self._sequences
            for queue in firsts:
                for _ in range(0 if sequences is None else sequences.batches_per_request - 1):
                    # a follower: never sent (so no retry rides along), full, within max_bytes, and allowed
                    follower = queue[0] if queue else None
                    if (
                        follower is None
                        or follower.drain_order is not None
                        or not (len(queue) > 1 or follower.is_full)
                        or (max_bytes is not None and total + follower.size_in_bytes > max_bytes)
                        or not (sequences is not None and sequences.may_send(follower))
                    ):
                        break
                    self._take(queue, now)
                    total += follower.size_in_bytes
                    drained.append(follower)
        encoded: list[ProducerBatch] = []
        for batch in drained:
            try:
                batch.payload  # noqa: B018 - encode outside the lock so appends to other batches proceed
            except Exception as exc:  # a codec that fails must fail its batch, never strand its futures
                log.error("encoding %r failed: %r", batch, exc)
                with self._lock:
                    self._unencodable.append((batch, exc))
                continue
            encoded.append(batch)
        return encoded

    def _take(self, queue: deque[ProducerBatch], now: int) -> None:
        """Pop ``queue``'s first batch for sending: closed to records, and stamped the first time (lock held)."""
        batch = queue.popleft()
        batch._closed = True
        if batch.drain_order is None:
            batch.drain_order = self._drain_counter
            self._drain_counter += 1
            batch.drained_ms = now
            if self._sequences is not None:
                batch.transactional = self._sequences.transactional
                self._sequences.assign(batch)
        elif self._sequences is not None:
            self._sequences.resending(batch)

    def take_unencodable(self) -> list[tuple[ProducerBatch, Exception]]:
        """Batches :meth:`drain` took but could not encode, with their error; the caller fails them.

        Such a batch was stamped (it holds sequence numbers), so it must be failed through the same
        path as a batch the partition refused, which settles its sequences and its transaction.
        """
        with self._lock:
            taken, self._unencodable = self._unencodable, []
        return taken

    def reenqueue(self, batch: ProducerBatch) -> None:
        """Put a sent batch back for a retry, unchanged, ahead of every batch never sent (``reenqueue``)."""
        with self._lock:
            if batch.is_done:
                return
            batch.attempts += 1
            batch.last_attempt_ms = self._clock()
            queue = self._batches.setdefault(batch.topic_partition, deque())
            order = batch.drain_order if batch.drain_order is not None else -1
            position = len(queue)
            for index, queued in enumerate(queue):
                if queued.drain_order is None or queued.drain_order > order:
                    position = index
                    break
            queue.insert(position, batch)

    def complete(self, batch: ProducerBatch, base_offset: int, log_append_time_ms: int = -1) -> bool:
        """Resolve the futures of a written batch; False when the batch was already settled.

        Args:
            batch: the acknowledged batch.
            base_offset: offset of its first record, or -1 when the partition did not say
                (a duplicate older than its cache, design/kafka-semantics.md §4.2).
            log_append_time_ms: the partition's append time for LogAppendTime topics, else -1.
        """
        with self._lock:
            if not self._finish(batch):
                return False
            if self._sequences is not None and batch.base_sequence != NO_SEQUENCE:
                self._sequences.complete(batch, base_offset)
        batch.outcome.set_result((base_offset, log_append_time_ms))
        return True

    def fail(self, batch: ProducerBatch, error: BaseException, *, definite: bool = True) -> bool:
        """Fail every record of ``batch`` with ``error``; False when the batch was already settled.

        Args:
            batch: the batch given up on.
            error: raised by each record's future.
            definite: the partition certainly did not write the batch. False (it timed out
                after being sent) makes its partition's sequences unresolved.
        """
        return self._fail(batch, error, definite=definite, track_sequences=True)

    def has_reached_delivery_timeout(self, batch: ProducerBatch) -> bool:
        """Whether ``delivery_timeout_ms`` passed since ``batch`` was created."""
        return self._clock() - batch.created_ms >= self._delivery_timeout_ms

    def expire(self) -> list[ProducerBatch]:
        """Fail the queued batches whose delivery timeout passed, oldest first, and return them.

        Each record fails with :class:`~oncelog.client.errors.RetriableError`. A batch that
        was never sent fails definitely; one put back for a retry after being sent may have
        been written, so it fails indeterminately and leaves its partition unresolved. Batches
        on the wire are the sender's to expire (through :meth:`fail` with ``definite=False``).
        """
        expired: list[tuple[ProducerBatch, int]] = []
        with self._lock:
            now = self._clock()
            for queue in self._batches.values():
                while queue and now - queue[0].created_ms >= self._delivery_timeout_ms:
                    expired.append((queue.popleft(), now))
        for batch, now in expired:
            sent = batch.drain_order is not None
            elapsed = now - batch.created_ms
            text = (
                f"{batch.record_count} record(s) for {batch.topic_partition} expired: {elapsed} ms passed since the "
                f"batch was created (delivery_timeout_ms={self._delivery_timeout_ms}) "
                + ("and the partition never answered, so they may have been written" if sent else "before it was sent")
            )
            cause = RequestTimedOut(text, definite=not sent)
            self.fail(batch, RetriableError(text, cause=cause), definite=not sent)
        return [batch for batch, _ in expired]

    def abort_undrained(self, error: OncelogError | None = None) -> int:
        """Fail every batch never drained (``abortUndrainedBatches``); return how many.

        ``abort_transaction()`` calls this: records not yet sent are dropped, each future
        raising ``error`` (an :class:`~oncelog.client.errors.AbortableError` by default).
        Batches already sent, including those waiting for a retry, are left to finish.
        """
        error = error or AbortableError("the transaction was aborted before this record was sent")
        with self._lock:
            undrained: list[ProducerBatch] = []
            for queue in self._batches.values():
                keep = [batch for batch in queue if batch.drain_order is not None]
                undrained.extend(batch for batch in queue if batch.drain_order is None)
                queue.clear()
                queue.extend(keep)
        for batch in undrained:
            self.fail(batch, error)
        return len(undrained)

    def abort_all(self, error: BaseException) -> int:
        """Fail every incomplete batch, sent or not (a forced close or a fatal error); return how many."""
        with self._lock:
            batches = list(self._incomplete)
            for queue in self._batches.values():
                queue.clear()
        # the producer is finished, so its sequence state no longer matters
        return sum(1 for batch in batches if self._fail(batch, error, definite=False, track_sequences=False))

    def begin_flush(self) -> None:
        """Make every batch sendable at once until :meth:`end_flush` (``flush()`` ignores ``linger_ms``)."""
        with self._lock:
            self._flushes += 1

    def end_flush(self) -> None:
        """Undo one :meth:`begin_flush`."""
        with self._lock:
            self._flushes = max(self._flushes - 1, 0)

    def incomplete(self) -> list[ProducerBatch]:
        """Batches not yet completed or failed; ``flush()`` waits on their futures."""
        with self._lock:
            return list(self._incomplete)

    def has_undrained(self) -> bool:
        """Whether any batch waits in a queue (never sent, or put back for a retry)."""
        with self._lock:
            return any(self._batches.values())

    def close(self) -> None:
        """Refuse new records and make every queued batch sendable; callers blocked on memory fail."""
        with self._lock:
            self._closed = True
            self._memory_freed.notify_all()

    def _fail(self, batch: ProducerBatch, error: BaseException, *, definite: bool, track_sequences: bool) -> bool:
        with self._lock:
            if not self._finish(batch):
                return False
            if track_sequences and self._sequences is not None and batch.base_sequence != NO_SEQUENCE:
                self._sequences.fail(batch, definite=definite)
        batch.outcome.set_exception(error)
        return True

    # -- internals, called with the lock held -------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the producer is closed; create a new producer to send more records")

    def _reserve(self, size: int) -> bool:
        if self._used_bytes + size > self._buffer_memory:
            self._exhausted = True
            return False
        self._used_bytes += size
        return True

    def _wait_for_memory(self, size: int, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BufferExhaustedError(
                f"buffer_memory={self._buffer_memory} bytes is full ({self._used_bytes} bytes of unsent or "
                f"unacknowledged records) and {size} more bytes do not fit; call flush(), slow down, "
                "raise max_block_ms to wait longer, or raise buffer_memory"
            )
        self._waiters += 1
        try:
            self._memory_freed.wait(remaining)
        finally:
            self._waiters -= 1

    def _finish(self, batch: ProducerBatch) -> bool:
        if batch._done:
            return False
        batch._done = True
        batch._closed = True
        queue = self._batches.get(batch.topic_partition)
        if queue and batch in queue:
            queue.remove(batch)
        self._incomplete.discard(batch)
        self._used_bytes -= batch._reserved
        batch._reserved = 0
        self._exhausted = False
        self._memory_freed.notify_all()
        return True
