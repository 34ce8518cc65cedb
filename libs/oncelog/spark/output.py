"""A sink's records column by column, and how they reach the producer: in bulk, in each partition's order.

Both sink modes turn rows into :class:`RecordColumns` (one list per field, a bounded number of rows each)
and hand them to a :class:`BatchedSender`, which sends runs of records through ``Producer.send_batch``: one
call checks, partitions and appends up to :data:`SEND_CHUNK_ROWS` records under one lock, several times
cheaper per record than ``send()``. Rows that came as Arrow batches to one topic, without headers, go through
``Producer.send_arrow`` as the Arrow columns they are, with no Python per record. ``send_batch`` carries no
headers, so a record with headers goes through ``send()``.

Order. A consumer sees each partition's records in the order the sink handed them to the producer, and a
pipeline may rely on that order per key. The sender keeps exactly the per-partition order that calling
``send()`` row by row would give: records without headers wait in a buffer per (topic, explicit partition),
and any buffer whose records could share a partition with the next record handed over otherwise — an
explicit partition and the partitioner's choice, or a record with headers — is sent first. Buffers of
different topics, or of different explicit partitions, never share a partition, so their relative order
does not matter.

Errors. A batch the cluster refuses makes the producer's transaction abortable, and ``commit_transaction``
then raises. The sender does not depend on that alone: :meth:`BatchedSender.finish` waits for every
record's acknowledgement and raises the first failure, before the caller commits (Kafka's producer
contract, design/kafka-semantics.md §1.1: a transaction commits only after all its sends succeeded).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

__all__ = ["SEND_CHUNK_ROWS", "BatchedSender", "Headers", "RecordColumns"]

SEND_CHUNK_ROWS = 1_000
"""Rows per ``send_batch`` call and per :class:`RecordColumns`: large enough to amortize the call, small
enough that a task holds only this many encoded rows besides what the producer buffers."""

Headers = tuple[tuple[str, bytes | None], ...]


@dataclass(slots=True)
class RecordColumns:
    """Consecutive records of a task, one list per field (entry ``i`` of every list is record ``i``).

    Attributes:
        topics: each record's topic.
        partitions: each record's explicit partition, or None to let the producer's partitioner choose.
        keys: each record's key.
        values: each record's value.
        headers: each record's headers, or None when no record has any (the DataFrame has no headers column).
        target: the ``(topic, partition)`` every record shares, when the encoder knows it (the ``topic``
            option and no ``partition`` column); None otherwise.
        arrow: the same keys (None for a DataFrame without a key column) and values as Arrow columns, when the
            rows came as Arrow batches; the sender then hands them to ``Producer.send_arrow``.
    """

    topics: list[str]
    partitions: list[int | None]
    keys: list[bytes | None]
    values: list[bytes | None]
    headers: list[Headers] | None = None
    target: tuple[str, int | None] | None = None
    arrow: tuple[Any, Any] | None = None

    def __len__(self) -> int:
        return len(self.values)

    def rows(self) -> Iterator[tuple[str, int | None, bytes | None, bytes | None, Headers]]:
        """``(topic, partition, key, value, headers)`` of each record, in order."""
        headers = self.headers if self.headers is not None else ((),) * len(self.values)
        return zip(self.topics, self.partitions, self.keys, self.values, headers, strict=True)

    def payload_size(self) -> int:
        """Bytes of keys, values and header names and values."""
        size = sum(len(v) for v in self.values if v) + sum(len(k) for k in self.keys if k)
        for pairs in self.headers or ():
            for name, data in pairs:
                size += len(name) + (len(data) if data else 0)
        return size


class BatchedSender:
    """Hands records to a producer's open transaction through ``send_batch``, in each partition's order.

    Args:
        producer: a producer with an open transaction (``send``, ``send_batch``, ``flush``).
        chunk_rows: most records buffered before they are handed over, and per ``send_batch`` call.

    Attributes:
        records: records added so far.
    """

    def __init__(self, producer: Any, chunk_rows: int = SEND_CHUNK_ROWS) -> None:
        self._producer = producer
        self._chunk_rows = chunk_rows
        # (topic, explicit partition or None) -> (keys, values), in arrival order; for each topic either
        # only the partitioner's buffer (None) or only explicit-partition buffers exist, never both
        self._buffers: dict[tuple[str, int | None], tuple[list[bytes | None], list[bytes | None]]] = {}
        self._buffered = 0
        self._pending: list[Future[Any]] = []
        self._prune_at = chunk_rows
        self._failure: BaseException | None = None
        self.records = 0

    def add(self, columns: RecordColumns) -> None:
        """Queue ``columns``' records; they reach the producer in chunks, at the latest at :meth:`flush_buffers`.

        Raises:
            The exceptions of ``send``/``send_batch`` for records handed over now (unknown topic or
            partition, a record too large, a failed transaction).
        """
        self.records += len(columns)
        if columns.target is not None and columns.headers is None:
            if columns.arrow is not None and hasattr(self._producer, "send_arrow"):
                self._send_arrow(columns.target, *columns.arrow)
            else:
                self._add_run(columns.target, columns.keys, columns.values)
            return
        for topic, partition, key, value, headers in columns.rows():
            if headers:
                self._release(topic, partition, including_own=True)
                self._track(self._producer.send(topic, value, key=key, headers=headers, partition=partition))
                continue
            buffer = self._buffers.get((topic, partition))
            if buffer is None:
                self._release(topic, partition, including_own=False)
                buffer = self._buffers[(topic, partition)] = ([], [])
            buffer[0].append(key)
            buffer[1].append(value)
            self._buffered += 1
            if self._buffered >= self._chunk_rows:
                self.flush_buffers()

    def _add_run(self, target: tuple[str, int | None], keys: list[bytes | None], values: list[bytes | None]) -> None:
        """Records of one target, without headers: the bulk path of :meth:`add`."""
        buffer = self._buffers.get(target)
        if buffer is None:
            self._release(*target, including_own=False)
            buffer = self._buffers[target] = ([], [])
        start = 0
        while start < len(values):
            room = self._chunk_rows - self._buffered
            buffer[0].extend(keys[start : start + room])
            buffer[1].extend(values[start : start + room])
            taken = min(room, len(values) - start)
            self._buffered += taken
            start += taken
            if self._buffered >= self._chunk_rows:
                self.flush_buffers()
                buffer = self._buffers[target] = ([], [])
        if not buffer[1]:
            del self._buffers[target]

    def _send_arrow(self, target: tuple[str, int | None], keys: Any, values: Any) -> None:
        """Records of one target as Arrow columns: straight to ``send_arrow``, after what is buffered for it."""
        topic, partition = target
        self._release(topic, partition, including_own=True)
        if keys is not None and keys.null_count == len(keys):
            keys = None
        self._track(self._producer.send_arrow(topic, values, keys=keys, partition=partition))

    def _release(self, topic: str, partition: int | None, *, including_own: bool) -> None:
        """Send the buffers whose records could land in the partition of a record of ``(topic, partition)``."""
        for buffered_topic, buffered_partition in list(self._buffers):
            if buffered_topic != topic:
                continue
            same = buffered_partition == partition
            if (same and including_own) or (not same and (partition is None or buffered_partition is None)):
                self._send_buffer((buffered_topic, buffered_partition))

    def flush_buffers(self) -> None:
        """Hand every buffered record to the producer (it sends them on its I/O thread)."""
        for target in list(self._buffers):
            self._send_buffer(target)

    def _send_buffer(self, target: tuple[str, int | None]) -> None:
        keys, values = self._buffers.pop(target)
        self._buffered -= len(values)
        if not values:
            return
        topic, partition = target
        self._track(
            self._producer.send_batch(
                topic, values, keys=keys if any(k is not None for k in keys) else None, partition=partition
            )
        )

    def _track(self, future: Future[Any]) -> None:
        if self._settled(future):
            return
        self._pending.append(future)
        if len(self._pending) >= self._prune_at:
            # settled futures are dropped (their failure noted), so a long task keeps only those in flight;
            # the threshold doubles with what stays, so pruning costs O(1) per future however many are in flight
            self._pending = [pending for pending in self._pending if not self._settled(pending)]
            self._prune_at = max(self._chunk_rows, 2 * len(self._pending))

    def _settled(self, future: Future[Any]) -> bool:
        if not future.done():
            return False
        error = future.exception()
        if error is not None and self._failure is None:
            self._failure = error
        return True

    def finish(self) -> None:
        """Hand over what is buffered, wait until every record is acknowledged, and raise the first failure.

        Call it before committing: a transaction whose records were not all written must not commit. The
        wait is bounded by the producer's delivery timeout, after which a record fails.

        Raises:
            OncelogError: a record's batch failed (the transaction must be aborted).
        """
        self.flush_buffers()
        self._producer.flush()
        for future in self._pending:
            error = future.exception()
            if error is not None and self._failure is None:
                self._failure = error
        self._pending = []
        if self._failure is not None:
            raise self._failure
