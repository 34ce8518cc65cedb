"""The asyncio producer: :class:`AsyncProducer`, exported as ``oncelog.aio.Producer``.

It is the same producer as :class:`oncelog.client.Producer` (one accumulator, one sender, one transaction
manager, all on the producer's own I/O loop), seen from an asyncio application: every operation that
would block returns an awaitable instead, so the application's event loop never waits on the network.

* ``await send(...)`` appends the record at once (records keep the order of the ``send()`` calls, also
  when many are started together with ``asyncio.gather``) and returns its
  :class:`~oncelog.client.records.RecordMetadata` once the partition acknowledged it.
* ``await send_batch(...)`` is the bulk form, one await for many records; ``await send_arrow(...)`` takes Arrow
  columns.
* Coordinator calls (``init_transactions``, ``add_offsets_to_transaction``, ``send_offsets_to_transaction``,
  ``commit_transaction``, ``abort_transaction``) and ``flush`` run on the producer's I/O loop; the caller
  awaits their outcome.

Errors are those of the synchronous producer (:mod:`oncelog.client.errors`), with the same meaning.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from oncelog.client.bulk_records import ColumnRecords
from oncelog.client.errors import BufferExhaustedError
from oncelog.client.producer import Producer as _SyncProducer
from oncelog.client.producer import TransactionState
from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, RecordMetadata, TopicPartition
from oncelog.client.sequences import ProducerIdAndEpoch
from oncelog.client.transport import Deadline

__all__ = ["AsyncProducer"]

T = TypeVar("T")

_MEMORY_POLL_S = 0.005  # how often a send() waiting for buffer memory tries again


class AsyncProducer:
    """Send records from asyncio code; idempotent by default, transactional with ``transactional_id``.

    Takes the arguments of :class:`oncelog.client.Producer`. Use it as an async context manager, or call
    :meth:`close`::

        async with oncelog.aio.Producer(bootstrap, transactional_id="copier-0") as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send("out", b"x")
            await producer.commit_transaction()

    Delivery callbacks are not needed: ``await send(...)`` returns the record's metadata or raises its
    error.
    """

    def __init__(self, bootstrap: str | Sequence[str] | None = None, **config: Any) -> None:
        self._core = _SyncProducer(bootstrap, **config)
        self._turn = asyncio.Lock()  # first come, first served: sends that could not append at once
        self._waiting = 0  # sends queued on (or holding) self._turn

    # -------------------------------------------------------------------------------- plumbing

    async def _on_io_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the producer's I/O loop and await it from the caller's loop."""
        return await asyncio.wrap_future(self._core._io.submit(coro))

    async def _known_topic(self, topic: str) -> None:
        core = self._core
        core._ensure_usable()
        if core._metadata.cached_topic(topic) is None:
            await self._on_io_loop(core._topic(topic, core._deadline(None)))

    async def _append_in_call_order(self, topic: str, append: Callable[[], T]) -> T:
        """Run ``append`` (which adds records without blocking) in call order among this producer's sends.

        The fast path appends before the first suspension: the topic's metadata is cached, memory is free
        and no earlier send is waiting. Otherwise the send takes a place in a first-come queue
        (``self._turn``, a FIFO lock) and waits there for the topic's metadata and for memory; every
        later send queues behind it while any send waits, so a record never overtakes one started
        before it (per partition, records are written in the order of the calls). ``append`` adds all of
        its records or none, so retrying it after :class:`BufferExhaustedError` never adds one twice.
        """
        core = self._core
        deadline = time.monotonic() + core._config.max_block_ms / 1000
        if not self._waiting and core._metadata.cached_topic(topic) is not None:
            try:
                return append()
            except BufferExhaustedError:
                pass
        self._waiting += 1
        try:
            async with self._turn:
                if core._metadata.cached_topic(topic) is None:
                    await self._known_topic(topic)
                while True:
                    try:
                        return append()
                    except BufferExhaustedError:
                        # the synchronous producer would block its caller for memory; this loop keeps running
                        if time.monotonic() >= deadline:
                            raise
                        await asyncio.sleep(_MEMORY_POLL_S)
        finally:
            self._waiting -= 1

    # -------------------------------------------------------------------------------- properties

    @property
    def transactional_id(self) -> str | None:
        """The transactional id, or None."""
        return self._core.transactional_id

    @property
    def transaction_state(self) -> TransactionState | None:
        """The transactional state (None for a non-transactional producer)."""
        return self._core.transaction_state

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch | None:
        """The identity stamped on the next batch, or None for a producer that is not idempotent."""
        return self._core.producer_id_and_epoch

    def metrics(self) -> dict[str, int]:
        """The counters of :meth:`oncelog.client.Producer.metrics`."""
        return self._core.metrics()

    # -------------------------------------------------------------------------------- records

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordMetadata:
        """Send one record and return its :class:`RecordMetadata` once it is acknowledged.

        The record is appended before the first suspension when the topic's metadata is known and memory
        is free; otherwise it waits in line behind earlier sends, so records started in a given order
        (also with ``asyncio.gather``, also to a topic not seen before) are written in that order.

        Raises:
            The exceptions of :meth:`oncelog.client.Producer.send`, and the record's delivery error.
        """
        core = self._core
        future = await self._append_in_call_order(
            topic, lambda: core._send(topic, value, key, headers, partition, timestamp_ms, max_block_s=0.0)
        )
        return await asyncio.wrap_future(future)

    async def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Sequence[RecordMetadata]:
        """Send many records and return their metadata in order (see :meth:`oncelog.client.Producer.send_batch`)."""
        core = self._core
        future = await self._append_in_call_order(
            topic, lambda: core._send_bulk(topic, core._rows(values, keys), partition, timestamp_ms, 0.0)
        )
        return await asyncio.wrap_future(future)

    async def send_arrow(
        self,
        topic: str,
        values: object,
        keys: object | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Sequence[RecordMetadata]:
        """Send Arrow columns of records and return their metadata in order (see
        :meth:`oncelog.client.Producer.send_arrow`)."""
        core = self._core
        future = await self._append_in_call_order(
            topic,
            lambda: core._send_bulk(
                topic, partial(ColumnRecords.from_arrow, values, keys), partition, timestamp_ms, 0.0
            ),
        )
        return await asyncio.wrap_future(future)

    async def partitions_for(self, topic: str) -> list[int]:
        """The partition indexes of ``topic``."""
        await self._known_topic(topic)
        info = self._core._metadata.cached_topic(topic)
        assert info is not None
        return [p.partition for p in info.partitions]

    async def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is acknowledged or failed."""
        if self._core._closed:
            return
        await self._on_io_loop(self._core._flush(Deadline(timeout)))

    # -------------------------------------------------------------------------------- transactions

    async def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id (see :meth:`oncelog.client.Producer.init_transactions`)."""
        await self._on_io_loop(self._core._init_transactions(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction; local, so not a coroutine."""
        self._core.begin_transaction()

    async def add_offsets_to_transaction(
        self, group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None
    ) -> None:
        """Add the group's offsets to the transaction ahead of time (see the synchronous producer's method)."""
        await self._on_io_loop(self._core._add_offsets_to_transaction(group_metadata, timeout))

    async def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit consumer offsets with the transaction (like the synchronous producer's method)."""
        await self._on_io_loop(self._core._send_offsets_to_transaction(offsets, group_metadata, timeout))

    async def commit_transaction(
        self, timeout: float | None = None, *, wait_for_completion: bool | None = None
    ) -> None:
        """Flush and commit; ``wait_for_completion`` also waits for every marker.

        See :meth:`oncelog.client.Producer.commit_transaction`.
        """
        await self._on_io_loop(self._core._commit_transaction(timeout, wait_for_completion))

    async def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort (see :meth:`oncelog.client.Producer.abort_transaction`)."""
        await self._on_io_loop(self._core._abort_transaction(timeout))

    # -------------------------------------------------------------------------------- lifecycle

    async def close(self, timeout: float | None = None) -> None:
        """Send what is queued, abort an open transaction, release the connections (``timeout=0``: the forced
        close of the synchronous producer). Idempotent."""
        # close() joins the I/O thread: run it off the caller's loop so that loop keeps serving
        await asyncio.to_thread(self._core.close, timeout)

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"aio.{self._core!r}"
