"""The asyncio consumer: :class:`AsyncConsumer`, exported as ``oncelog.aio.Consumer``.

It is the same consumer as :class:`oncelog.client.Consumer` (one fetcher, one group membership with its heartbeat
loop, all on the consumer's own I/O thread), seen from an asyncio application: every call that may wait on the
network returns an awaitable, so the application's event loop keeps running while it waits.

How it shares the synchronous consumer's logic instead of copying it: the synchronous consumer is used whole, and
its blocking calls run one at a time on a single worker thread of this consumer (a consumer is not thread-safe;
one thread keeps its rule). Cheap calls that never wait (``assignment``, ``subscription``, ``group_metadata``,
``seek``...) run directly.

Rebalance listener callbacks run on the application's event loop and may be coroutines (``async def
on_partitions_revoked``, as in aiokafka): the worker thread waits while they run, so a callback may await this
consumer's own calls (``await consumer.commit()`` in ``on_partitions_revoked`` is the usual one). A plain function
works too.

A ``poll()`` cancelled while it waits does not lose records: what it fetched is returned by the next ``poll()``.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

from oncelog.client.consumer import Consumer as _SyncConsumer
from oncelog.client.records import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, TopicPartition

__all__ = ["AsyncConsumer"]

T = TypeVar("T")

_IN_LISTENER: contextvars.ContextVar[bool] = contextvars.ContextVar("oncelog_aio_consumer_in_listener", default=False)
"""True inside a rebalance callback, whose consumer calls cannot queue behind the poll that runs it."""


class _LoopListener:
    """The synchronous consumer's listener: runs the application's callbacks on its event loop and waits."""

    def __init__(self, listener: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._listener = listener
        self._loop = loop

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self._call("on_partitions_revoked", revoked)

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._call("on_partitions_assigned", assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self._call("on_partitions_lost", lost)

    def _call(self, name: str, partitions: set[TopicPartition]) -> None:
        callback = getattr(self._listener, name, None)
        if callback is None:
            return

        async def invoke() -> None:
            _IN_LISTENER.set(True)  # this task's own context: calls awaited in the callback see it
            result = callback(partitions)
            if inspect.isawaitable(result):
                await result

        asyncio.run_coroutine_threadsafe(invoke(), self._loop).result()


class AsyncConsumer:
    """Read records from asyncio code; read_committed by default.

    Takes the arguments of :class:`oncelog.client.Consumer`. Use it as an async context manager, or call
    :meth:`close`::

        async with oncelog.aio.Consumer(bootstrap, group_id="billing") as consumer:
            await consumer.subscribe(["orders"], listener=listener)
            while True:
                for record in await consumer.poll(timeout_ms=1000):
                    ...
                await consumer.commit()

    Errors are those of the synchronous consumer, with the same meaning. Use one consumer from one task at a time:
    its calls run one after another, as the synchronous consumer's do.
    """

    def __init__(self, bootstrap: str | Sequence[str] | None = None, **config: Any) -> None:
        self._core = _SyncConsumer(bootstrap, **config)
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"oncelog-aio-{self._core._client_id}")
        self._unclaimed_poll: Future[list[ConsumerRecord]] | None = None

    # -------------------------------------------------------------------------------- plumbing

    async def _blocking(self, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a blocking call of the synchronous consumer on the worker thread (or, from inside a rebalance
        callback, on a thread of its own: the worker is waiting for that callback)."""
        job = functools.partial(call, *args, **kwargs)
        if _IN_LISTENER.get():
            return await asyncio.to_thread(job)
        return await asyncio.wrap_future(self._worker.submit(job))

    # -------------------------------------------------------------------------------- assignment

    async def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (see :meth:`oncelog.client.Consumer.assign`)."""
        await self._blocking(self._core.assign, list(partitions))

    async def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        listener: Any = None,
    ) -> None:
        """Join the consumer group (see :meth:`oncelog.client.Consumer.subscribe`).

        ``listener`` has ``on_partitions_revoked``, ``on_partitions_assigned`` and ``on_partitions_lost``, each a
        function or a coroutine function; they run on this event loop, inside :meth:`poll` (or this call).
        """
        wrapped = None if listener is None else _LoopListener(listener, asyncio.get_running_loop())
        names = None if topics is None else list(topics)
        await self._blocking(self._core.subscribe, names, pattern=pattern, listener=wrapped)

    async def unsubscribe(self) -> None:
        """Stop reading every partition; a subscribed consumer leaves its group."""
        await self._blocking(self._core.unsubscribe)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        return self._core.assignment()

    def subscription(self) -> set[str]:
        """The subscribed topics (empty with a manual assignment)."""
        return self._core.subscription()

    # -------------------------------------------------------------------------------- positions

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Read ``partition`` from ``offset`` on the next poll."""
        self._core.seek(partition, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the log start of ``partitions`` (default all assigned), evaluated lazily."""
        self._core.seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the end of ``partitions`` (the last stable offset at read_committed), evaluated lazily."""
        self._core.seek_to_end(partitions)

    async def position(self, partition: TopicPartition | tuple[str, int], timeout: float | None = None) -> int:
        """The offset of the next record ``poll()`` returns for ``partition``, resolving it if needed."""
        return await self._blocking(self._core.position, partition, timeout)

    async def rewind_to_committed(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """Put positions back to the committed offsets (see :meth:`oncelog.client.Consumer.rewind_to_committed`)."""
        return await self._blocking(self._core.rewind_to_committed, partitions, timeout)

    # -------------------------------------------------------------------------------- group offsets

    async def committed(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed)."""
        return await self._blocking(self._core.committed, partitions, timeout)

    async def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None, timeout: float | None = None
    ) -> None:
        """Commit ``offsets`` (default: every assigned partition's position) outside any transaction."""
        await self._blocking(self._core.commit, offsets, timeout)

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group identity for ``Producer.send_offsets_to_transaction`` (member id and epoch, KIP-447)."""
        return self._core.group_metadata()

    # -------------------------------------------------------------------------------- offsets lookup

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The first offset still stored in each partition."""
        return await self._blocking(self._core.beginning_offsets, list(partitions), timeout)

    async def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The end of each partition for this consumer (the last stable offset at read_committed)."""
        return await self._blocking(self._core.end_offsets, list(partitions), timeout)

    async def partitions_for(self, topic: str) -> list[TopicPartition]:
        """The partitions of ``topic``."""
        return await self._blocking(self._core.partitions_for, topic)

    # -------------------------------------------------------------------------------- poll

    async def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """The next records of the assigned partitions, waiting up to ``timeout_ms`` for some (see
        :meth:`oncelog.client.Consumer.poll`); the listener's callbacks run here when the assignment changed.

        If this call is cancelled while it waits, the records it was fetching are returned by the next ``poll()``
        (their positions have moved past them).
        """
        pending = self._unclaimed_poll or self._worker.submit(self._core.poll, timeout_ms, max_records)
        self._unclaimed_poll = pending
        try:
            records = await asyncio.shield(asyncio.wrap_future(pending))
        except asyncio.CancelledError:
            raise  # the records stay claimable by the next poll()
        except BaseException:
            self._unclaimed_poll = None
            raise
        self._unclaimed_poll = None
        return records

    # -------------------------------------------------------------------------------- lifecycle

    async def close(self, timeout: float | None = None) -> None:
        """Commit positions if auto-commit is on, leave the group, release the connections. Idempotent."""
        if self._core._closed:
            return
        try:
            await self._blocking(self._core.close, timeout)
        finally:
            self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AsyncConsumer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"aio.{self._core!r}"
