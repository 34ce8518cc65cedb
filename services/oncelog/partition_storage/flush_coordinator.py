"""Group commit for one partition: concurrent appenders share fsyncs (:class:`FlushCoordinator`), and writes wait
for the fsync that covers them (:class:`GroupCommit`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import logging
from collections.abc import Callable
from concurrent.futures import Executor

from oncelog.errors import StorageUnavailable

__all__ = ["FlushCoordinator", "GroupCommit"]

log = logging.getLogger(__name__)


class FlushCoordinator:
    """Group commit: concurrent appenders of one partition share fsyncs (design/architecture.md §4).

    Each appender writes (``PartitionLog.append``, synchronous) and then awaits :meth:`sync`. The rule that
    makes an acknowledgement safe: :meth:`sync` returns only after an fsync that *started after* the call
    completed. If no fsync is running, the caller starts one in a worker thread; if one is already running,
    it began before this write may have reached the page cache, so the caller waits for it to finish and
    then for the next one, which is shared with everybody who arrived meanwhile. At most one fsync runs at a
    time, so under load each fsync covers every write made during the previous one.

    After a failed fsync every current and future :meth:`sync` raises (see :meth:`PartitionLog.flush`).

    Args:
        flush: blocking function that makes all completed writes durable (``PartitionLog.flush``).
        executor: where ``flush`` runs; the event loop's default executor if ``None``.
    """

    def __init__(self, flush: Callable[[], object], *, executor: Executor | None = None) -> None:
        self._flush = flush
        self._executor = executor
        self._started = 0  # generations handed to the executor
        self._completed = 0  # newest generation that finished successfully
        self._inflight: asyncio.Future[object] | None = None
        self._failure: BaseException | None = None

    @property
    def flush_count(self) -> int:
        """Flushes started so far (for metrics: appends per fsync)."""
        return self._started

    async def sync(self) -> None:
        """Return once everything written before this call is durable.

        Cancelling the caller does not cancel a running fsync; other waiters still get it.

        Raises:
            StorageUnavailable: the fsync failed (``definite=False``: the write may or may not survive).
        """
        target = self._started + 1  # generations from here on start after this call
        while self._completed < target:
            if self._failure is not None:
                raise StorageUnavailable(f"flush failed earlier: {self._failure}", definite=False)
            if self._inflight is None:
                self._start()
            assert self._inflight is not None
            if self._inflight.done():
                # finished, but its _finished callback has not run yet: awaiting a done future does not
                # yield, so without this the loop would spin forever and the callback would never run
                await asyncio.sleep(0)
                continue
            with contextlib.suppress(Exception):
                # the outcome is read from _completed/_failure, set by _finished before waiters resume
                await asyncio.shield(self._inflight)

    def _start(self) -> None:
        self._started += 1
        future = asyncio.get_running_loop().run_in_executor(self._executor, self._flush)
        self._inflight = future
        # registered before any waiter's callback, so it runs first when the flush completes
        future.add_done_callback(functools.partial(self._finished, self._started))

    def _finished(self, generation: int, future: asyncio.Future[object]) -> None:
        self._inflight = None
        if future.cancelled():
            self._failure = asyncio.CancelledError("flush cancelled")
        elif (error := future.exception()) is not None:
            self._failure = error
            log.error("group flush %d failed: %s", generation, error)
        else:
            self._completed = generation


class GroupCommit:
    """Waits for durability on top of a :class:`FlushCoordinator`: one pump task runs one fsync at a time, and
    each waiter is released, in offset order, once the durable offset passes the offset it asked for.

    The pump is the coordinator's only caller (which also keeps ``sync`` from ever being entered while a
    finished flush's bookkeeping is still pending).

    Args:
        flusher: the partition's flush coordinator.
        durable_offset: the offset below which everything is fsynced (the log's recovery point).
        name: names the partition in the error a failed fsync gives its waiters.
        on_durable: called with the durable offset after each fsync, before waiters are released.
        on_failure: called with the error of a failed fsync, before every waiter fails with ``StorageUnavailable``.
    """

    def __init__(
        self,
        flusher: FlushCoordinator,
        durable_offset: Callable[[], int],
        name: str,
        *,
        on_durable: Callable[[int], None],
        on_failure: Callable[[BaseException], None],
    ) -> None:
        self._flusher = flusher
        self._durable_offset = durable_offset
        self._name = name
        self._on_durable = on_durable
        self._on_failure = on_failure
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_ids = itertools.count()
        self._pump: asyncio.Task[None] | None = None

    @property
    def flush_count(self) -> int:
        """fsyncs started so far."""
        return self._flusher.flush_count

    async def wait(self, offset: int) -> None:
        """Return once everything below ``offset`` is fsynced.

        Raises:
            StorageUnavailable: the fsync failed (``definite=False``).
        """
        waiter = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._waiter_ids), waiter))
        if self._pump is None:
            self._pump = asyncio.get_running_loop().create_task(self._pump_fsyncs())
        await waiter

    async def _pump_fsyncs(self) -> None:
        """Group commit: one fsync at a time, each covering every write made before it started; while an fsync
        runs, new writes queue up as waiters and the next fsync covers them all."""
        waiters = self._waiters
        try:
            while waiters:
                await self._flusher.sync()
                durable = self._durable_offset()
                self._on_durable(durable)
                while waiters and waiters[0][0] <= durable:
                    waiter = heapq.heappop(waiters)[2]
                    if not waiter.done():
                        waiter.set_result(None)
        except Exception as err:
            self._on_failure(err)
            failure = StorageUnavailable(f"{self._name}: fsync failed: {err}", definite=False)
            while waiters:
                waiter = heapq.heappop(waiters)[2]
                if not waiter.done():
                    waiter.set_exception(failure)
        finally:
            self._pump = None
