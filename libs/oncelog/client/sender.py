"""The producer's network side (Kafka's ``Sender``): in-flight batches, produce streams, retries and sequences.

:class:`Sender` runs on the producer's I/O thread (its own asyncio loop, :mod:`oncelog.client.transport`).
It drains ready batches from the :class:`~oncelog.client.accumulator.RecordAccumulator`, at most one per
partition per request, groups them by leader and writes them on one :class:`NodeStream` per storage node. Up
to ``max_in_flight`` (≤ 5) batches per partition are unacknowledged; the
:class:`~oncelog.client.sequences.ProducerSequences` book stamps (producer id, epoch, sequence) and decides what
may be retried. A retry resends the same bytes with the same sequence, so the partition writes it at most once
(design/architecture.md §1.1); a broken stream fails every request in flight on it as indeterminate and puts
the batches back in order. All sender state lives on that one thread.

An idempotent producer without ``transactional_id`` gets its producer id from any transaction coordinator
through InitProducerId with an empty id (Kafka's null ``transactional.id``), epoch 0, lazily before its first
batch. A sequence gap makes it bump its epoch locally (KIP-360, design/kafka-semantics.md §4.2, §5.1); a batch
that may already be written (its answer timed out) keeps its original stamp until the partition answers for it,
so the bump never makes a retry write it twice.

The sender reaches the servers only through the :class:`SenderTransport` and :class:`SenderMetadata` it is
given (:mod:`oncelog.client.producer_rpc` over gRPC; an in-memory fake in the unit tests), so it never builds a
request itself.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.errors import AbortableError, Action, FatalError, Refresh, RetriableError, classify
from oncelog.client.producer_batch import ProducerBatch
from oncelog.client.records import TopicPartition
from oncelog.client.sequences import ProducerSequences
from oncelog.client.services import PartitionResult, ProduceAnswer, ProduceEntry, ProduceSettings
from oncelog.client.transaction_manager import ProducerIdSource, TransactionManager
from oncelog.client.transport import Backoff, Deadline
from oncelog.errors import CoordinatorNotAvailable, InvalidRecord, NetworkException, OncelogError, RequestTimedOut

__all__ = [
    "LeaderInfo",
    "NodeStream",
    "PartitionResult",
    "ProduceAnswer",
    "ProduceEntry",
    "ProduceSettings",
    "ProduceStream",
    "Sender",
    "SenderConfig",
    "SenderMetadata",
    "SenderTransport",
]

log = logging.getLogger("oncelog.client.producer")

SENDER_TICK_S = 0.1  # longest sleep of the sender: delivery timeouts and request timeouts are checked this often

# ------------------------------------------------------------------------------------------------ transport


class ProduceStream(Protocol):
    """One open ProduceStream to a storage node; answers come in request order.

    ``write`` and ``read`` raise :class:`~oncelog.errors.OncelogError` when the stream fails.
    """

    async def write(self, correlation_id: int, entries: Sequence[ProduceEntry]) -> None:
        """Send one request."""
        ...

    async def read(self) -> ProduceAnswer | None:
        """The next answer, or None once the server closed the stream."""
        ...

    def cancel(self) -> None:
        """Drop the stream; a pending ``read`` or ``write`` ends."""
        ...


class SenderTransport(ProducerIdSource, Protocol):
    """The calls the sender makes: produce streams, and InitProducerId for an idempotent producer."""

    def open_produce_stream(self, address: str, settings: ProduceSettings) -> ProduceStream:
        """Open a produce stream to the storage node at ``address``."""
        ...

    async def txn_coordinator_addresses(self) -> list[str]:
        """Addresses of the live transaction coordinators."""
        ...


class LeaderInfo(Protocol):
    """Who leads a partition (:class:`~oncelog.client.metadata.PartitionInfo` is one)."""

    @property
    def leader_address(self) -> str: ...

    @property
    def leader_epoch(self) -> int: ...


class SenderMetadata(Protocol):
    """The metadata cache the sender reads (:class:`~oncelog.client.metadata.ClusterMetadata` is one)."""

    def cached_leader(self, tp: TopicPartition) -> LeaderInfo | None: ...

    def needs_update(self, topic: str) -> bool: ...

    def request_update(self, topic: str) -> None: ...

    def known_topics(self) -> list[str]: ...

    async def refresh_stale(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SenderConfig:
    """The producer settings the sender applies (see :class:`~oncelog.client.producer.Producer`)."""

    produce: ProduceSettings
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1_000
    max_request_size: int = 1024 * 1024
    max_in_flight: int = 5
    transaction_timeout_ms: int = 60_000


# ------------------------------------------------------------------------------------------------ streams


class NodeStream:
    """One ProduceStream to a storage node: requests written in order, answers matched by correlation id.

    The server answers in request order, so each partition's answers arrive in the order its batches were
    sent. When the stream breaks (the node died, the connection dropped, a request outlived
    ``request_timeout``), every request still waiting fails as indeterminate, oldest first, and the
    sender puts the batches back for a retry with their original sequences.
    """

    def __init__(
        self,
        address: str,
        transport: SenderTransport,
        on_result: Callable[[ProducerBatch, PartitionResult | None, OncelogError | None], None],
        on_idle: Callable[[], None],
        *,
        config: SenderConfig,
    ) -> None:
        self.address = address
        self._transport = transport
        self._on_result = on_result
        self._on_idle = on_idle
        self._config = config
        self._stream: ProduceStream | None = None
        self._outbox: asyncio.Queue[tuple[int, list[ProduceEntry]]] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: dict[int, tuple[float, list[ProducerBatch]]] = {}
        self._correlation = itertools.count()
        self.breaks = 0

    @property
    def in_flight(self) -> int:
        """Requests written and not answered."""
        return len(self._pending)

    def send(self, batches: list[ProducerBatch], leader_epochs: Mapping[TopicPartition, int]) -> None:
        """Queue one request carrying ``batches``; never blocks.

        A partition's batches (in sequence order) travel as one entry, their encodings one after the other,
        which the partition validates and appends together or not at all (design/kafka-semantics.md §4.2).
        """
        payloads: dict[TopicPartition, list[bytes]] = {}
        for batch in batches:
            payloads.setdefault(batch.topic_partition, []).append(batch.payload)
        entries = [
            (tp, leader_epochs.get(tp, -1), parts[0] if len(parts) == 1 else b"".join(parts))
            for tp, parts in payloads.items()
        ]
        correlation_id = next(self._correlation)
        self._pending[correlation_id] = (time.monotonic(), batches)
        if self._stream is None:
            self._open()
        assert self._outbox is not None
        self._outbox.put_nowait((correlation_id, entries))

    def _open(self) -> None:
        stream = self._transport.open_produce_stream(self.address, self._config.produce)
        self._stream = stream
        self._outbox = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._write(stream, self._outbox), name=f"produce-write-{self.address}"),
            loop.create_task(self._read(stream), name=f"produce-read-{self.address}"),
        ]

    async def _write(self, stream: ProduceStream, outbox: asyncio.Queue[tuple[int, list[ProduceEntry]]]) -> None:
        try:
            while True:
                await stream.write(*await outbox.get())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._break(stream, exc)

    async def _read(self, stream: ProduceStream) -> None:
        try:
            while True:
                answer = await stream.read()
                if answer is None:
                    raise NetworkException(f"the produce stream to {self.address} was closed by the server")
                entry = self._pending.pop(answer.correlation_id, None)
                if entry is None:
                    continue  # an answer to a request failed earlier by a timeout: already retried
                self._dispatch(entry[1], answer.results)
                if not self._pending:
                    self._on_idle()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._break(stream, exc)

    def _dispatch(self, batches: list[ProducerBatch], results: Mapping[TopicPartition, PartitionResult]) -> None:
        # A partition answers an entry of several batches once, with the first batch's offset; the others follow
        # it in the log (only batches sent for the first time share an entry, so none of them is a duplicate).
        next_offset: dict[TopicPartition, int] = {}
        for batch in batches:
            tp = batch.topic_partition
            result = results.get(tp)
            if result is None:
                err = NetworkException(f"the answer from {self.address} omitted {tp}", definite=False)
                self._on_result(batch, None, err)
                continue
            following = next_offset.get(tp)
            if following is not None:
                result = replace(result, base_offset=following)
            if result.error is None and result.base_offset >= 0:
                next_offset[tp] = result.base_offset + batch.record_count
            else:
                next_offset[tp] = -1
            self._on_result(batch, result, None)

    def check_timeout(self, now: float) -> None:
        """Break the stream when its oldest request waited longer than the request timeout."""
        if not self._pending or self._stream is None:
            return
        oldest = min(sent for sent, _ in self._pending.values())
        # The server bounds its own wait by timeout_ms and then answers REQUEST_TIMED_OUT; the margin
        # leaves it room to do so before the client gives up on the connection.
        if now - oldest > self._config.request_timeout_ms / 1000 + 5:
            self._break(self._stream, RequestTimedOut(f"no answer from {self.address} within the request timeout"))

    def _break(self, stream: ProduceStream, cause: BaseException) -> None:
        if stream is not self._stream:
            return
        self.breaks += 1
        self._stream, self._outbox = None, None
        stream.cancel()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._tasks = []
        err = NetworkException(
            f"the produce stream to {self.address} broke ({cause}); the outcome of its requests is unknown",
            definite=False,
        )
        pending, self._pending = self._pending, {}
        log.info("produce stream to %s broke with %d request(s) in flight: %s", self.address, len(pending), cause)
        for correlation_id in sorted(pending):
            for batch in pending[correlation_id][1]:
                self._on_result(batch, None, err)
        self._on_idle()

    async def close(self) -> None:
        """Stop the stream; requests still waiting are not failed (the producer is shutting down)."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ------------------------------------------------------------------------------------------------ sender


class Sender:
    """The producer's network side (Kafka's ``Sender``): drain ready batches and handle their answers.

    Runs as one task on the I/O loop; everything it touches is owned by that loop. It reaches the servers only
    through ``transport`` and ``metadata``.
    """

    def __init__(
        self,
        *,
        config: SenderConfig,
        accumulator: RecordAccumulator,
        sequences: ProducerSequences | None,
        metadata: SenderMetadata,
        transport: SenderTransport,
        transactions: TransactionManager | None,
        enter_fatal: Callable[[OncelogError], None],
        metrics: Counter[str],
    ) -> None:
        self._config = config
        self._accumulator = accumulator
        self._sequences = sequences
        self._metadata = metadata
        self._transport = transport
        self._txn = transactions
        self._enter_fatal = enter_fatal
        self._metrics = metrics
        self._wakeup = asyncio.Event()
        self._streams: dict[str, NodeStream] = {}
        self._in_flight: Counter[TopicPartition] = Counter()
        self._stopped = False
        self._pid_task: asyncio.Task[None] | None = None
        self._refresh_task: asyncio.Task[None] | None = None
        self._drain_rotation = 0
        self._last_refresh = 0.0
        self.fatal: OncelogError | None = None

    def wakeup(self) -> None:
        """Make the sender look for work now (must run on the loop)."""
        self._wakeup.set()

    def stop(self) -> None:
        """End :meth:`run` after its current iteration."""
        self._stopped = True
        self._wakeup.set()

    async def run(self) -> None:
        """Loop until stopped: send what is ready, then sleep until woken or until something is due."""
        try:
            while not self._stopped:
                self._wakeup.clear()
                try:
                    wait_s = await self._run_once()
                except Exception:
                    log.exception("producer sender iteration failed; continuing")
                    wait_s = self._config.retry_backoff_ms / 1000
                if wait_s == 0:
                    await asyncio.sleep(0)
                    continue
                try:
                    await asyncio.wait_for(self._wakeup.wait(), min(wait_s, SENDER_TICK_S))
                except TimeoutError:
                    pass
        finally:
            for task in (self._pid_task, self._refresh_task):
                if task is not None:
                    task.cancel()
            await asyncio.gather(*(stream.close() for stream in self._streams.values()), return_exceptions=True)

    async def _run_once(self) -> float:
        seq = self._sequences
        if self.fatal is not None:
            return SENDER_TICK_S
        if seq is not None and self._txn is None:
            if seq.epoch_bump_required and seq.identity.is_valid:
                self._metrics["epoch_bumps"] += 1
                if not seq.bump_epoch():
                    log.info("producer epoch exhausted; fetching a new producer id")
            if not seq.identity.is_valid:
                self._ensure_producer_id()
        if self._txn is not None:
            self._txn.before_send()

        for batch in self._accumulator.expire():
            self._on_batch_given_up(batch, definite=batch.drain_order is None)
        if seq is not None:
            doubtful = seq.resolve_sequences()
            if doubtful and self._txn is not None:
                self._txn.set_abortable(
                    AbortableError(
                        f"the outcome of batches for {', '.join(map(str, doubtful))} is unknown; abort the "
                        "transaction and retry it",
                    ),
                    epoch_bump=True,
                )
        now = time.monotonic()
        for stream in self._streams.values():
            stream.check_timeout(now)

        check = self._accumulator.ready()
        by_leader: dict[str, list[TopicPartition]] = {}
        epochs: dict[TopicPartition, int] = {}
        missing_leader = False
        for tp in check.partitions:
            if self._txn is not None and not self._txn.may_send_to(tp):
                continue
            if seq is None and self._in_flight[tp] >= self._config.max_in_flight:
                continue
            leader = self._metadata.cached_leader(tp)
            if leader is None or self._metadata.needs_update(tp.topic):
                self._metadata.request_update(tp.topic)
                missing_leader = missing_leader or leader is None
                if leader is None:
                    continue
            by_leader.setdefault(leader.leader_address, []).append(tp)
            epochs[tp] = leader.leader_epoch
        if missing_leader or any(self._metadata.needs_update(t) for t in self._metadata.known_topics()):
            self._ensure_metadata_refresh()

        sent = False
        self._drain_rotation += 1
        for address, partitions in by_leader.items():
            # rotate the start so a large batch on one partition cannot starve the others of request space
            shift = self._drain_rotation % len(partitions)
            ordered = partitions[shift:] + partitions[:shift]
            batches = self._accumulator.drain(ordered, max_bytes=self._config.max_request_size)
            for batch, exc in self._accumulator.take_unencodable():
                self._on_batch_error(
                    batch,
                    InvalidRecord(
                        f"{batch.record_count} record(s) for {batch.topic_partition} could not be encoded into a "
                        f"batch ({type(exc).__name__}: {exc}); nothing was sent",
                        definite=True,
                    ),
                )
            if not batches:
                continue
            if address not in self._streams:
                self._streams[address] = NodeStream(
                    address, self._transport, self._on_batch_result, self.wakeup, config=self._config
                )
            stream = self._streams[address]
            for batch in batches:
                self._in_flight[batch.topic_partition] += 1
                self._metrics["batches_sent"] += 1
            stream.send(batches, epochs)
            self._metrics["produce_requests"] += 1
            sent = True
        if sent:
            return 0
        if check.next_ready_check_ms is None:
            return SENDER_TICK_S
        return check.next_ready_check_ms / 1000

    # -------------------------------------------------------------------------------- metadata and ids

    def _ensure_metadata_refresh(self) -> None:
        now = time.monotonic()
        if (self._refresh_task is None or self._refresh_task.done()) and (
            now - self._last_refresh >= self._config.retry_backoff_ms / 1000
        ):
            self._last_refresh = now
            self._refresh_task = asyncio.get_running_loop().create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        await self._metadata.refresh_stale()
        self.wakeup()

    def _ensure_producer_id(self) -> None:
        if self._pid_task is None or self._pid_task.done():
            self._pid_task = asyncio.get_running_loop().create_task(self._init_producer_id())

    async def _init_producer_id(self) -> None:
        """InitProducerId with an empty transactional id on any coordinator: a fresh id at epoch 0."""
        assert self._sequences is not None
        backoff = Backoff(self._config.retry_backoff_ms, self._config.retry_backoff_max_ms)
        while not self._stopped:
            try:
                addresses = await self._transport.txn_coordinator_addresses()
                if not addresses:
                    raise CoordinatorNotAvailable("no txn-coordinator is live to hand out a producer id")
                last: OncelogError | None = None
                for address in addresses:
                    try:
                        identity = await self._transport.init_producer_id(
                            address,
                            "",
                            self._config.transaction_timeout_ms,
                            expected=None,
                            timeout_s=self._config.request_timeout_ms / 1000,
                        )
                    except OncelogError as err:
                        if not err.retriable:
                            raise
                        last = err
                        continue
                    self._sequences.set_identity(identity)
                    log.debug("idempotent producer got %s", identity)
                    self.wakeup()
                    return
                assert last is not None
                raise last
            except OncelogError as err:
                if not err.retriable:
                    self._enter_fatal(FatalError(f"cannot obtain a producer id: {err.message}", cause=err))
                    return
                log.info("InitProducerId failed (%s); retrying", err)
            await asyncio.sleep(backoff.next_s())

    # -------------------------------------------------------------------------------- answers

    def _on_batch_result(self, batch: ProducerBatch, result: PartitionResult | None, err: OncelogError | None) -> None:
        tp = batch.topic_partition
        self._in_flight[tp] = max(self._in_flight[tp] - 1, 0)
        if err is None and result is not None and result.error is not None:
            err = result.error
        if err is None:
            assert result is not None
            if result.duplicate:
                self._metrics["duplicate_batches"] += 1
            self._accumulator.complete(batch, result.base_offset, result.log_append_time_ms)
            return
        self._on_batch_error(batch, err)

    def _on_batch_error(self, batch: ProducerBatch, err: OncelogError) -> None:
        tp = batch.topic_partition
        transactional = self._txn is not None
        disposition = classify(err, source="produce", transactional=transactional)
        if self.fatal is not None:
            self._accumulator.fail(batch, self.fatal, definite=err.definite)
            return
        if disposition.refresh is Refresh.METADATA:
            self._metadata.request_update(tp.topic)
            self._ensure_metadata_refresh()
        if self._sequences is not None:
            retry = self._sequences.can_retry(batch, err)
        else:
            retry = disposition.action is Action.RETRY
        if retry and not self._accumulator.has_reached_delivery_timeout(batch):
            self._metrics["batch_retries"] += 1
            log.debug("retrying %r after %r", batch, err)
            self._accumulator.reenqueue(batch)
            return
        if disposition.action is Action.COMPLETE:
            self._accumulator.complete(batch, -1)
            return
        if retry:
            error: OncelogError = RetriableError(
                f"{batch.record_count} record(s) for {tp} expired after {self._accumulator.delivery_timeout_ms} ms "
                f"of retries (delivery_timeout_ms); last error: {err.message}",
                cause=err,
            )
            error.definite = err.definite
        else:
            error = disposition.user_error(
                err, f"producing {batch.record_count} record(s) to {tp} failed: {err.message}"
            )
        self._accumulator.fail(batch, error, definite=err.definite)
        if disposition.action is Action.FATAL:
            self._enter_fatal(error)
        elif self._txn is not None:
            abortable = error if isinstance(error, AbortableError) else AbortableError(error.message, cause=err)
            self._txn.set_abortable(abortable, epoch_bump=disposition.epoch_bump or not err.definite)

    def _on_batch_given_up(self, batch: ProducerBatch, *, definite: bool) -> None:
        """A batch expired in the queue (already failed by the accumulator)."""
        if self._txn is not None:
            self._txn.set_abortable(
                AbortableError(
                    f"records for {batch.topic_partition} expired before they were acknowledged "
                    f"(delivery_timeout_ms={self._accumulator.delivery_timeout_ms})"
                ),
                epoch_bump=not definite,
            )

    def in_flight_requests(self) -> int:
        """Requests on the wire across all streams."""
        return sum(stream.in_flight for stream in self._streams.values())

    def stream_breaks(self) -> int:
        """How often a produce stream broke."""
        return sum(stream.breaks for stream in self._streams.values())

    async def flush(self, deadline: Deadline) -> None:
        """Send every queued batch now and wait until each is settled (an abort waits so for those sent).

        Raises:
            RetriableError: ``deadline`` passed first.
        """
        self._accumulator.begin_flush()
        self.wakeup()
        try:
            futures = [batch.outcome for batch in self._accumulator.incomplete() if batch.record_count]
            if futures:
                waiters = [asyncio.wrap_future(f) for f in futures]
                done, pending = await asyncio.wait(waiters, timeout=deadline.remaining())
                for waiter in done:
                    waiter.exception()  # retrieved: failures are the futures' business
                if pending:
                    for waiter in pending:
                        waiter.cancel()
                    raise RetriableError(
                        f"{len(pending)} record(s) were not acknowledged in time; call flush() again or wait longer"
                    )
        finally:
            self._accumulator.end_flush()
