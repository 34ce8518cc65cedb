"""The futures a producer hands out: one per record, one per bulk send, all derived from one future per batch.

Like Kafka's ``FutureRecordMetadata`` over a ``ProduceRequestResult``, a :class:`RecordFuture` is a light view
of its batch's outcome (:attr:`~oncelog.client.producer_batch.ProducerBatch.outcome`, a future of
``(base_offset, log_append_time_ms)``), so settling a batch costs one future, not one per record.
``send_batch()`` gets one future for all its records (:func:`gather_runs`), settled once per batch behind
them, whose :class:`RecordMetadataList` is derived only when read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import overload

from oncelog.client.records import RecordMetadata, TopicPartition

__all__ = ["RecordFuture", "RecordMetadataList", "RecordRun", "gather_runs"]


# What concurrent.futures.wait() and as_completed() read directly instead of through methods.
_FUTURE_INTERNALS = frozenset({"_condition", "_state", "_result", "_exception", "_waiters", "_done_callbacks"})


class RecordFuture(Future):  # type: ignore[type-arg]
    """The future of one record: its batch's outcome plus the record's place in it (``FutureRecordMetadata``).

    It is a :class:`concurrent.futures.Future` (``result``, ``exception``, ``done``, ``add_done_callback``,
    ``asyncio.wrap_future``, ``concurrent.futures.wait``) that holds no lock of its own: ``result()`` waits
    on the batch's future and derives the record's :class:`~oncelog.client.records.RecordMetadata` from the
    batch's base offset. Only ``concurrent.futures.wait``/``as_completed``, which reach into a future's
    internals, give it full future state, chained to the batch. It cannot be cancelled.
    """

    def __init__(self, outcome: Future[tuple[int, int]], tp: TopicPartition, index: int, timestamp: int) -> None:
        # Future.__init__ is deliberately not called: its Condition is most of the cost of a send()
        self._outcome = outcome
        self._tp = tp
        self._index = index
        self._timestamp = timestamp

    def __getattr__(self, name: str) -> object:
        # reached only for attributes never set: Future's internals, read by concurrent.futures.wait()
        if name in _FUTURE_INTERNALS:
            self._materialize()
            return object.__getattribute__(self, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _materialize(self) -> None:
        with self._outcome._condition:  # one upgrade even when two threads wait on the same record
            if "_condition" in self.__dict__:
                return
            Future.__init__(self)
            Future.set_running_or_notify_cancel(self)
        self._outcome.add_done_callback(self._settle)

    def _settle(self, outcome: Future[tuple[int, int]]) -> None:
        error = outcome.exception()
        if error is not None:
            Future.set_exception(self, error)
        else:
            Future.set_result(self, self._metadata(outcome.result()))

    def _metadata(self, outcome: tuple[int, int]) -> RecordMetadata:
        base_offset, log_append_time_ms = outcome
        return RecordMetadata(
            self._tp.topic,
            self._tp.partition,
            base_offset + self._index if base_offset >= 0 else -1,
            log_append_time_ms if log_append_time_ms >= 0 else self._timestamp,
        )

    def cancel(self) -> bool:
        """Records handed to the producer cannot be cancelled: always False."""
        return False

    def cancelled(self) -> bool:
        """Always False."""
        return False

    def running(self) -> bool:
        """True until the record is acknowledged or failed."""
        return not self._outcome.done()

    def done(self) -> bool:
        """True once the record is acknowledged or failed."""
        return self._outcome.done()

    def result(self, timeout: float | None = None) -> RecordMetadata:
        """Wait for the acknowledgement and return where the record was written.

        Raises:
            TimeoutError: ``timeout`` seconds passed first.
            OncelogError: the error that failed the record's batch.
        """
        return self._metadata(self._outcome.result(timeout))

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """Wait for the outcome and return the error that failed the record, or None."""
        return self._outcome.exception(timeout)

    def add_done_callback(self, fn: Callable[[Future[RecordMetadata]], object]) -> None:
        """Call ``fn(self)`` once the record is settled (on the producer's I/O thread, or now if it is)."""
        self._outcome.add_done_callback(lambda _: fn(self))

    def set_running_or_notify_cancel(self) -> bool:
        """Always True: the producer owns the record from ``send()`` on."""
        return True

    def set_result(self, result: object) -> None:
        """Not supported: the record's batch settles it."""
        raise RuntimeError("a record's future is settled by its batch")

    def set_exception(self, exception: BaseException | None) -> None:
        """Not supported: the record's batch settles it."""
        raise RuntimeError("a record's future is settled by its batch")

    def __repr__(self) -> str:
        state = "pending" if not self._outcome.done() else "failed" if self._outcome.exception() else "done"
        return f"<RecordFuture {self._tp} #{self._index} {state}>"


class RecordMetadataList(Sequence[RecordMetadata]):
    """Where records sent together were written, in the order they were given; built on first access.

    A bulk send of thousands of records settles once per batch; the per-record metadata is derived from
    the batches' base offsets only if somebody reads it.

    Args:
        placements: for each group of runs, the positions of its records among all records (None: the
            group holds every record, in order) and its runs in record order. Every run must have succeeded.
        total: number of records.
    """

    def __init__(self, placements: Sequence[tuple[Sequence[int] | None, Sequence[RecordRun]]], total: int) -> None:
        self._placements = placements
        self._total = total
        self._items: list[RecordMetadata] | None = None

    def _materialize(self) -> list[RecordMetadata]:
        if self._items is None:
            items: list[RecordMetadata] = [None] * self._total  # type: ignore[list-item]  # every slot is filled
            for positions, runs in self._placements:
                metadata = [entry for run in runs for entry in run.metadata()]
                if positions is None:
                    items[: len(metadata)] = metadata
                else:
                    for position, entry in zip(positions, metadata, strict=True):
                        items[position] = entry
            self._items = items
        return self._items

    def __len__(self) -> int:
        return self._total

    @overload
    def __getitem__(self, index: int) -> RecordMetadata: ...

    @overload
    def __getitem__(self, index: slice) -> list[RecordMetadata]: ...

    def __getitem__(self, index: int | slice) -> RecordMetadata | list[RecordMetadata]:
        return self._materialize()[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence):
            return self._materialize() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable-looking sequence, like list

    def __repr__(self) -> str:
        return f"RecordMetadataList({self._materialize()!r})"


def gather_runs(
    placements: Sequence[tuple[Sequence[int] | None, Sequence[RecordRun]]], total: int
) -> Future[Sequence[RecordMetadata]]:
    """One future for records appended in runs: a :class:`RecordMetadataList`, or the first error of their batches.

    It waits on the distinct batches behind the runs (usually one or two), not on each record.
    """
    combined: Future[Sequence[RecordMetadata]] = Future()
    combined.set_running_or_notify_cancel()
    outcomes = list({id(run.outcome): run.outcome for _, runs in placements for run in runs}.values())
    result = RecordMetadataList(placements, total)
    if not outcomes:
        combined.set_result(result)
        return combined
    remaining = [len(outcomes)]
    lock = threading.Lock()

    def settled(outcome: Future[tuple[int, int]]) -> None:
        error = outcome.exception()
        with lock:
            if combined.done():
                return
            remaining[0] -= 1
            if error is not None:
                combined.set_exception(error)
            elif remaining[0] == 0:
                combined.set_result(result)

    for outcome in outcomes:
        outcome.add_done_callback(settled)
    return combined


@dataclass(frozen=True, slots=True)
class RecordRun:
    """Consecutive records of one batch appended by one :meth:`RecordAccumulator.append_many` call.

    Attributes:
        outcome: the batch's outcome, ``(base_offset, log_append_time_ms)`` or its error.
        topic_partition: the batch's partition.
        first_index: the first record's place in the batch.
        count: records in the run.
        timestamp: their CreateTime.
    """

    outcome: Future[tuple[int, int]]
    topic_partition: TopicPartition
    first_index: int
    count: int
    timestamp: int

    def metadata(self) -> list[RecordMetadata]:
        """Where each record of the run was written; call only once :attr:`outcome` succeeded."""
        base_offset, log_append_time_ms = self.outcome.result(0)
        topic, partition = self.topic_partition
        timestamp = log_append_time_ms if log_append_time_ms >= 0 else self.timestamp
        first = base_offset + self.first_index
        if base_offset < 0:
            return [RecordMetadata(topic, partition, -1, timestamp)] * self.count
        return [RecordMetadata(topic, partition, first + i, timestamp) for i in range(self.count)]
