"""The producer: idempotent by default, transactional with a ``transactional_id`` (Kafka's ``KafkaProducer``).

Shape (Kafka's split into ``KafkaProducer``, ``RecordAccumulator``, ``Sender`` and ``TransactionManager``):

* :class:`Producer` is the synchronous public API. ``send()`` picks the partition (murmur2 of the key,
  sticky round-robin without one), appends the record to the partition's open batch in the
  :class:`~oncelog.client.accumulator.RecordAccumulator` and returns a future; it blocks only for the first
  metadata of a topic or when ``buffer_memory`` is full.
* :class:`_Sender` runs on the producer's I/O thread (its own asyncio loop, :mod:`oncelog.client.transport`).
  It drains ready batches, at most one per partition per request, groups them by leader and writes them on
  one ProduceStream per storage node. Up to ``max_in_flight`` (≤ 5) batches per partition are unacknowledged;
  the :class:`~oncelog.client.sequences.ProducerSequences` book stamps (producer id, epoch, sequence) and
  decides what may be retried. A retry resends the same bytes with the same sequence, so the partition
  writes it at most once (design/architecture.md §1.1); a broken stream fails every request in flight on it as
  indeterminate and puts the batches back in order. All sender state lives on that one thread.
* :class:`_TransactionManager` holds the transactional state machine (Kafka's ``TransactionManager.State``,
  table :data:`_VALID_PREVIOUS_STATES`) and makes the coordinator calls: InitProducerId, AddPartitionsToTxn
  (before the first batch of each new partition, batched), AddOffsetsToTxn plus TxnOffsetCommit to the
  group's owner, and EndTxn, whose answer carries the epoch for the next transaction (KIP-890: bumped on
  every EndTxn).

An idempotent producer without ``transactional_id`` gets its producer id from any transaction coordinator
through InitProducerId with an empty id (Kafka's null ``transactional.id``), epoch 0, lazily before its
first batch. A sequence gap makes it bump its epoch locally (design/kafka-semantics.md §4.2, §5.1); a batch that may
already be
written (its answer timed out) keeps its original stamp until the partition answers for it, so the bump never
makes a retry write it twice.

Errors (:mod:`oncelog.client.errors`): a fatal error (``ProducerFencedError``, ``InvalidProducerEpochError``
from a coordinator, an unexpected coordinator error) fails every pending record and every later call and
stops the producer's network activity; only ``close()`` remains. An ``AbortableError`` fails the current
transaction; the application calls ``abort_transaction()`` and runs it again. Retriable errors are
retried inside the client within ``delivery_timeout_ms`` (batches) or ``max_block_ms`` (blocking calls).
A commit whose outcome is unknown is retried with the same identity, and ``commit_transaction()`` may be
called again; it is never turned into an abort (design/architecture.md §1.7).

Delivery callbacks (``future.add_done_callback``) run on the I/O thread: keep them short and do not call
blocking producer methods from them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import itertools
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.accumulator import DEFAULT_BUFFER_MEMORY, DEFAULT_MAX_REQUEST_SIZE, RecordAccumulator
from oncelog.client.errors import (
    AbortableError,
    Action,
    FatalError,
    IllegalStateError,
    Refresh,
    RetriableError,
    classify,
    may_have_taken_effect,
)
from oncelog.client.futures import RecordFuture, gather_runs
from oncelog.client.metadata import ClusterMetadata, TopicInfo
from oncelog.client.partitioner import DefaultPartitioner
from oncelog.client.producer_batch import ProducerBatch
from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, RecordMetadata, TopicPartition
from oncelog.client.sequences import MAX_IN_FLIGHT, ProducerIdAndEpoch, ProducerSequences
from oncelog.client.transport import Backoff, Channels, Deadline, IoThread, call, resolve_bootstrap
from oncelog.errors import (
    CoordinatorNotAvailable,
    InvalidRecord,
    NetworkException,
    OncelogError,
    Reason,
    RequestTimedOut,
    UnknownTopicOrPartition,
)
from oncelog.records import Compression
from oncelog.rpc.errors import from_error_info, from_rpc_error

__all__ = ["Producer"]

log = logging.getLogger("oncelog.client.producer")

T = TypeVar("T")
Serializer = Callable[[Any], bytes | None]

_TRANSACTION = cluster_pb.COORDINATOR_TYPE_TRANSACTION
_GROUP = cluster_pb.COORDINATOR_TYPE_GROUP
_ACKS = {"all": storage_pb.ACKS_ALL, "-1": storage_pb.ACKS_ALL, "1": storage_pb.ACKS_LEADER}
_COMPRESSION = {
    None: Compression.NONE,
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}
# CONCURRENT_TRANSACTIONS mostly means "the previous transaction is still writing its markers", which takes a
# few milliseconds here: retry fast at first and back off to Kafka's 20 ms (ADD_PARTITIONS_RETRY_BACKOFF_MS)
# only when the coordinator stays busy, instead of the general retry_backoff_ms.
_CONCURRENT_TRANSACTIONS_BACKOFF_MS = 2
_CONCURRENT_TRANSACTIONS_BACKOFF_MAX_MS = 20
_SENDER_TICK_S = 0.1  # longest sleep of the sender: delivery timeouts and request timeouts are checked this often


# ------------------------------------------------------------------------------------------------ states


class TransactionState(enum.Enum):
    """Client-side state of a transactional producer (Kafka's ``TransactionManager.State``).

    Legal transitions are listed in :data:`_VALID_PREVIOUS_STATES` (target → allowed sources):
    UNINITIALIZED → INITIALIZING → READY → IN_TRANSACTION → COMMITTING_TRANSACTION or
    ABORTING_TRANSACTION → READY. A failed batch or coordinator call moves IN_TRANSACTION (or a commit
    that has not sent EndTxn yet) to ABORTABLE_ERROR, from which only ABORTING_TRANSACTION leads on.
    Any state may become FATAL_ERROR, which is final.
    """

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING_TRANSACTION = "committing_transaction"
    ABORTING_TRANSACTION = "aborting_transaction"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"


_S = TransactionState
_VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _S.UNINITIALIZED: frozenset(),
    _S.INITIALIZING: frozenset({_S.UNINITIALIZED, _S.INITIALIZING}),
    _S.READY: frozenset({_S.INITIALIZING, _S.COMMITTING_TRANSACTION, _S.ABORTING_TRANSACTION}),
    _S.IN_TRANSACTION: frozenset({_S.READY}),
    _S.COMMITTING_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION}),
    _S.ABORTING_TRANSACTION: frozenset({_S.IN_TRANSACTION, _S.ABORTABLE_ERROR, _S.ABORTING_TRANSACTION}),
    _S.ABORTABLE_ERROR: frozenset({_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.ABORTABLE_ERROR}),
    _S.FATAL_ERROR: frozenset(TransactionState),
}


@dataclass(frozen=True, slots=True)
class _Config:
    client_id: str
    transactional_id: str | None
    idempotent: bool
    acks: storage_pb.Acks.ValueType
    request_timeout_ms: int
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    max_block_ms: int
    max_request_size: int
    max_in_flight: int
    transaction_timeout_ms: int
    commit_wait_for_completion: bool = False


# ------------------------------------------------------------------------------------------------ sender


class _NodeStream:
    """One ProduceStream to a storage node: requests written in order, answers matched by correlation id.

    The server answers in request order, so each partition's answers arrive in the order its batches were
    sent. When the stream breaks (the node died, the connection dropped, a request outlived
    ``request_timeout``), every request still waiting fails as indeterminate, oldest first, and the
    sender puts the batches back for a retry with their original sequences.
    """

    def __init__(
        self,
        address: str,
        channels: Channels,
        on_result: Callable[[ProducerBatch, storage_pb.PartitionProduceResult | None, OncelogError | None], None],
        on_idle: Callable[[], None],
        *,
        config: _Config,
    ) -> None:
        self.address = address
        self._channels = channels
        self._on_result = on_result
        self._on_idle = on_idle
        self._config = config
        self._call: Any = None
        self._outbox: asyncio.Queue[storage_pb.ProduceStreamRequest] | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._pending: dict[int, tuple[float, list[ProducerBatch]]] = {}
        self._correlation = itertools.count()
        self.breaks = 0

    @property
    def in_flight(self) -> int:
        """Requests written and not answered."""
        return len(self._pending)

    def send(self, batches: list[ProducerBatch], leader_epochs: Mapping[TopicPartition, int]) -> None:
        """Queue one request carrying ``batches`` (one per partition); never blocks."""
        request = storage_pb.ProduceRequest(
            transactional_id=self._config.transactional_id or "",
            acks=self._config.acks,
            timeout_ms=self._config.request_timeout_ms,
            partitions=[
                storage_pb.PartitionBatches(
                    topic_partition=common_pb.TopicPartition(
                        topic=batch.topic_partition.topic, partition=batch.topic_partition.partition
                    ),
                    leader_epoch=leader_epochs.get(batch.topic_partition, -1),
                    records=batch.payload,
                )
                for batch in batches
            ],
        )
        correlation_id = next(self._correlation)
        self._pending[correlation_id] = (time.monotonic(), batches)
        if self._call is None:
            self._open()
        assert self._outbox is not None
        self._outbox.put_nowait(storage_pb.ProduceStreamRequest(correlation_id=correlation_id, request=request))

    def _open(self) -> None:
        call_ = self._channels.storage(self.address).ProduceStream()
        self._call = call_
        self._outbox = asyncio.Queue()
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._write(call_, self._outbox), name=f"produce-write-{self.address}"),
            loop.create_task(self._read(call_), name=f"produce-read-{self.address}"),
        ]

    async def _write(self, call_: Any, outbox: asyncio.Queue[storage_pb.ProduceStreamRequest]) -> None:
        try:
            while True:
                await call_.write(await outbox.get())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._break(call_, exc)

    async def _read(self, call_: Any) -> None:
        try:
            while True:
                message = await call_.read()
                if message is grpc.aio.EOF:
                    raise NetworkException(f"the produce stream to {self.address} was closed by the server")
                entry = self._pending.pop(message.correlation_id, None)
                if entry is None:
                    continue  # an answer to a request failed earlier by a timeout: already retried
                self._dispatch(entry[1], message.response)
                if not self._pending:
                    self._on_idle()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._break(call_, exc)

    def _dispatch(self, batches: list[ProducerBatch], response: storage_pb.ProduceResponse) -> None:
        results = {TopicPartition(r.topic_partition.topic, r.topic_partition.partition): r for r in response.results}
        for batch in batches:
            result = results.get(batch.topic_partition)
            if result is None:
                err = NetworkException(
                    f"the answer from {self.address} omitted {batch.topic_partition}", definite=False
                )
                self._on_result(batch, None, err)
            else:
                self._on_result(batch, result, None)

    def check_timeout(self, now: float) -> None:
        """Break the stream when its oldest request waited longer than the request timeout."""
        if not self._pending or self._call is None:
            return
        oldest = min(sent for sent, _ in self._pending.values())
        # The server bounds its own wait by timeout_ms and then answers REQUEST_TIMED_OUT; the margin
        # leaves it room to do so before the client gives up on the connection.
        if now - oldest > self._config.request_timeout_ms / 1000 + 5:
            self._break(self._call, RequestTimedOut(f"no answer from {self.address} within the request timeout"))

    def _break(self, call_: Any, exc: BaseException) -> None:
        if call_ is not self._call:
            return
        self.breaks += 1
        self._call, self._outbox = None, None
        call_.cancel()
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        self._tasks = []
        cause = from_rpc_error(exc) if isinstance(exc, grpc.RpcError) else exc
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
        call_, self._call = self._call, None
        if call_ is not None:
            call_.cancel()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class _Sender:
    """The producer's network side (Kafka's ``Sender``): drain ready batches and handle their answers.

    Runs as one task on the I/O loop; everything it touches is owned by that loop.
    """

    def __init__(
        self,
        *,
        config: _Config,
        accumulator: RecordAccumulator,
        sequences: ProducerSequences | None,
        metadata: ClusterMetadata,
        channels: Channels,
        transactions: _TransactionManager | None,
        enter_fatal: Callable[[OncelogError], None],
        metrics: Counter[str],
    ) -> None:
        self._config = config
        self._accumulator = accumulator
        self._sequences = sequences
        self._metadata = metadata
        self._channels = channels
        self._txn = transactions
        self._enter_fatal = enter_fatal
        self._metrics = metrics
        self._wakeup = asyncio.Event()
        self._streams: dict[str, _NodeStream] = {}
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
                    await asyncio.wait_for(self._wakeup.wait(), min(wait_s, _SENDER_TICK_S))
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
            return _SENDER_TICK_S
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
                self._streams[address] = _NodeStream(
                    address, self._channels, self._on_batch_result, self.wakeup, config=self._config
                )
            stream = self._streams[address]
            for batch in batches:
                self._in_flight[batch.topic_partition] += 1
                self._metrics["batches_sent"] += 1
            stream.send(batches, epochs)
            sent = True
        if sent:
            return 0
        if check.next_ready_check_ms is None:
            return _SENDER_TICK_S
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
                cluster = await self._metadata.describe_cluster()
                addresses = cluster.addresses("txn-coordinator")
                if not addresses:
                    raise CoordinatorNotAvailable("no txn-coordinator is live to hand out a producer id")
                last: OncelogError | None = None
                for address in addresses:
                    try:
                        response = await call(
                            self._channels.txn(address).InitProducerId,
                            txn_pb.InitProducerIdRequest(
                                transactional_id="", transaction_timeout_ms=self._config.transaction_timeout_ms
                            ),
                            timeout_s=self._config.request_timeout_ms / 1000,
                        )
                    except OncelogError as err:
                        if not err.retriable:
                            raise
                        last = err
                        continue
                    identity = ProducerIdAndEpoch(response.producer.producer_id, response.producer.producer_epoch)
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

    def _on_batch_result(
        self, batch: ProducerBatch, result: storage_pb.PartitionProduceResult | None, err: OncelogError | None
    ) -> None:
        tp = batch.topic_partition
        self._in_flight[tp] = max(self._in_flight[tp] - 1, 0)
        if err is None and result is not None and result.HasField("error"):
            err = from_error_info(result.error)
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


# ------------------------------------------------------------------------------------------------ transactions


class _TransactionManager:
    """Transactional state and coordinator calls of one producer (Kafka's ``TransactionManager``).

    State changes happen under ``_lock`` because ``send()`` and ``begin_transaction()`` read the state on
    the caller's thread; the coordinator calls run on the I/O loop.
    """

    def __init__(
        self,
        *,
        config: _Config,
        sequences: ProducerSequences,
        accumulator: RecordAccumulator,
        metadata: ClusterMetadata,
        channels: Channels,
        wake: Callable[[], None],
        enter_fatal: Callable[[OncelogError], None],
    ) -> None:
        assert config.transactional_id
        self._config = config
        self._tid = config.transactional_id
        self._sequences = sequences
        self._accumulator = accumulator
        self._metadata = metadata
        self._channels = channels
        self._wake = wake
        self._enter_fatal = enter_fatal
        self._lock = threading.Lock()
        self.state = TransactionState.UNINITIALIZED
        self.last_error: OncelogError | None = None
        self._epoch_bump_required = False
        self._started = False
        self._partitions: set[TopicPartition] = set()
        self._pending_partitions: set[TopicPartition] = set()
        # groups whose offsets partition this transaction has (AddOffsetsToTxn answered), with the address of
        # the group's offsets owner from that answer ("" when it named none)
        self._groups: dict[str, str] = {}
        # offsets of send_offsets_to_transaction() calls that did not complete (a retriable failure): the commit
        # sends them first, so output and input offsets commit together or not at all (Kafka queues them ahead
        # of EndTxn)
        self._pending_offsets: dict[str, tuple[dict[TopicPartition, OffsetAndMetadata], ConsumerGroupMetadata]] = {}
        self._add_task: asyncio.Task[None] | None = None
        # One transaction-changing request at a time, as Kafka's TransactionManager does: two in flight
        # would make the coordinator answer the second with CONCURRENT_TRANSACTIONS and cost a retry.
        self._coordinator_turn = asyncio.Lock()

    # -------------------------------------------------------------------------------- state

    def _transition(self, target: TransactionState) -> None:
        """Move to ``target``; the caller holds the lock."""
        if self.state not in _VALID_PREVIOUS_STATES[target]:
            raise IllegalStateError(
                f"transactional id {self._tid!r}: cannot go from {self.state.value} to {target.value}"
            )
        self.state = target

    def _raise_if_failed(self) -> None:
        if self.state is TransactionState.FATAL_ERROR and self.last_error is not None:
            raise self.last_error
        if self.state is TransactionState.ABORTABLE_ERROR and self.last_error is not None:
            raise AbortableError(
                f"the transaction cannot commit ({self.last_error.message}); call abort_transaction() and retry it",
                cause=self.last_error,
                epoch_bump_required=self._epoch_bump_required,
            )

    def check_send(self) -> None:
        """Raise unless records may be added to the current transaction (runs on the caller's thread)."""
        with self._lock:
            if self.state is TransactionState.IN_TRANSACTION:
                return
            if self.state is TransactionState.COMMITTING_TRANSACTION:
                raise IllegalStateError("commit_transaction() is in progress; send records in the next transaction")
            self._raise_if_failed()
            raise IllegalStateError(self._hint("send()"))

    def _hint(self, what: str) -> str:
        if self.state in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING):
            return f"{what} needs init_transactions() first (transactional id {self._tid!r})"
        if self.state is TransactionState.READY:
            return f"{what} needs an open transaction: call begin_transaction() first"
        if self.state is TransactionState.COMMITTING_TRANSACTION:
            return (
                f"{what} is not allowed while a commit is in progress; its outcome is unknown, so call "
                "commit_transaction() again"
            )
        return f"{what} is not allowed in state {self.state.value}"

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """Note that the transaction writes to ``tp``; the sender adds it before its first batch."""
        with self._lock:
            if tp not in self._partitions:
                self._pending_partitions.add(tp)

    def may_send_to(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may be sent: it is part of the transaction (design/kafka-semantics.md §1.1 step
        3)."""
        return tp in self._partitions

    def set_abortable(self, error: AbortableError, *, epoch_bump: bool) -> None:
        """A batch or call failed: the transaction can only be aborted now."""
        with self._lock:
            self._epoch_bump_required = self._epoch_bump_required or epoch_bump
            if self.state in (
                TransactionState.IN_TRANSACTION,
                TransactionState.COMMITTING_TRANSACTION,
                TransactionState.ABORTABLE_ERROR,
            ):
                if self.state is not TransactionState.ABORTABLE_ERROR:
                    log.info("transaction of %r is now abortable: %s", self._tid, error.message)
                    self.last_error = error
                self.state = TransactionState.ABORTABLE_ERROR

    def set_fatal(self, error: OncelogError) -> None:
        """The producer is finished."""
        with self._lock:
            self.state = TransactionState.FATAL_ERROR
            self.last_error = error

    def before_send(self) -> None:
        """Sender hook: drop unsent records of a doomed transaction, and add new partitions in one call."""
        state = self.state
        if state is TransactionState.ABORTABLE_ERROR and self.last_error is not None:
            self._accumulator.abort_undrained(
                AbortableError(f"not sent: the transaction must be aborted ({self.last_error.message})")
            )
            return
        if state not in (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING_TRANSACTION):
            return
        if self._pending_partitions and (self._add_task is None or self._add_task.done()):
            self._add_task = asyncio.get_running_loop().create_task(self._add_partitions())

    async def _add_partitions(self) -> None:
        async with self._coordinator_turn:
            # taken after the wait for our turn, so partitions seen meanwhile join this request
            with self._lock:
                partitions = sorted(self._pending_partitions)
            if not partitions:
                return
            identity = self._sequences.identity
            request = txn_pb.AddPartitionsToTxnRequest(
                transactional_id=self._tid,
                producer=_identity_pb(identity),
                partitions=[common_pb.TopicPartition(topic=tp.topic, partition=tp.partition) for tp in partitions],
            )
            self._started = True
            try:
                await self._coordinator_call(
                    "AddPartitionsToTxn",
                    lambda stub: call(stub.AddPartitionsToTxn, request, timeout_s=self._request_timeout_s),
                    Deadline(self._accumulator.delivery_timeout_ms / 1000),
                )
            except OncelogError as err:
                self._on_call_failed(err, f"adding {', '.join(map(str, partitions))} to the transaction")
                return
            finally:
                self._wake()
        with self._lock:
            self._partitions.update(partitions)
            self._pending_partitions.difference_update(partitions)

    # -------------------------------------------------------------------------------- coordinator calls

    @property
    def _request_timeout_s(self) -> float:
        return self._config.request_timeout_ms / 1000

    async def _coordinator_call(
        self,
        name: str,
        rpc: Callable[[txn_pb.TransactionCoordinatorServiceStub], Awaitable[T]],
        deadline: Deadline,
    ) -> T:
        """Call the transactional id's coordinator, retrying retriable errors until ``deadline``.

        Raises:
            RetriableError: a retriable error outlasted the deadline. ``definite`` is False as soon as any
                attempt may have reached the coordinator and taken effect (no answer, or an answer like
                NOT_COORDINATOR that a coordinator may give after it wrote the change), not only the last.
            OncelogError: a non-retriable answer, for the caller to classify.
        """
        backoff = Backoff(self._config.retry_backoff_ms, self._config.retry_backoff_max_ms)
        concurrent = Backoff(_CONCURRENT_TRANSACTIONS_BACKOFF_MS, _CONCURRENT_TRANSACTIONS_BACKOFF_MAX_MS)
        taken_effect_maybe = False
        while True:
            sent = False
            try:
                address = await self._metadata.find_coordinator(self._tid, _TRANSACTION)
                sent = True
                return await rpc(self._channels.txn(address))
            except OncelogError as err:
                taken_effect_maybe = taken_effect_maybe or may_have_taken_effect(err, sent=sent)
                disposition = classify(err, source="coordinator", transactional=True)
                if disposition.action is not Action.RETRY:
                    raise
                if disposition.refresh is not Refresh.NONE or err.reason is Reason.NOT_COORDINATOR:
                    self._metadata.invalidate_coordinator(self._tid, _TRANSACTION)
                if deadline.expired:
                    timed_out = RetriableError(
                        f"{name} for transactional id {self._tid!r} did not complete in time: {err.message}"
                        + ("; an earlier attempt may have taken effect" if taken_effect_maybe else ""),
                        cause=err,
                    )
                    timed_out.definite = err.definite and not taken_effect_maybe
                    raise timed_out from err
                pause = concurrent.next_s() if err.reason is Reason.CONCURRENT_TRANSACTIONS else backoff.next_s()
                await asyncio.sleep(deadline.cap(pause))

    def _on_call_failed(self, err: OncelogError, doing: str) -> OncelogError:
        """Apply a failed coordinator or group call to the state; return the exception for the user."""
        if isinstance(err, RetriableError):
            return err
        disposition = classify(err, source="coordinator", transactional=True)
        user_error = disposition.user_error(err, f"{doing} failed: {err.message}")
        if disposition.action is Action.FATAL:
            self._enter_fatal(user_error)
        elif disposition.action is Action.ABORTABLE:
            assert isinstance(user_error, AbortableError)
            self.set_abortable(user_error, epoch_bump=disposition.epoch_bump)
        return user_error

    async def _init_producer_id(self, deadline: Deadline, expected: ProducerIdAndEpoch | None) -> ProducerIdAndEpoch:
        request = txn_pb.InitProducerIdRequest(
            transactional_id=self._tid, transaction_timeout_ms=self._config.transaction_timeout_ms
        )
        if expected is not None:
            request.producer.CopyFrom(_identity_pb(expected))
        response = await self._coordinator_call(
            "InitProducerId",
            lambda stub: call(stub.InitProducerId, request, timeout_s=self._request_timeout_s),
            deadline,
        )
        return ProducerIdAndEpoch(response.producer.producer_id, response.producer.producer_epoch)

    async def _end_txn(self, commit: bool, deadline: Deadline, wait_for_completion: bool = False) -> ProducerIdAndEpoch:
        """EndTxn; with ``wait_for_completion`` also until the coordinator reports the transaction complete.

        Each waiting call is a long poll the coordinator answers at completion or shortly before the request
        timeout; the next one names the same epoch, so it is a retry of the decision, never a second one.

        Raises:
            RetriableError: (waiting only) the transaction is decided but was not complete by ``deadline``.
        """
        request = txn_pb.EndTxnRequest(
            transactional_id=self._tid,
            producer=_identity_pb(self._sequences.identity),
            result=common_pb.TRANSACTION_RESULT_COMMIT if commit else common_pb.TRANSACTION_RESULT_ABORT,
            wait_for_completion=wait_for_completion,
        )
        # A waiting call may be held until shortly before its own deadline: keep that within the caller's.
        timeout_s = deadline.cap(self._request_timeout_s) if wait_for_completion else self._request_timeout_s
        while True:
            response = await self._coordinator_call(
                "EndTxn", lambda stub: call(stub.EndTxn, request, timeout_s=timeout_s), deadline
            )
            if response.completed or not wait_for_completion:
                return ProducerIdAndEpoch(response.producer.producer_id, response.producer.producer_epoch)
            if deadline.expired:
                raise RetriableError(
                    f"the {'commit' if commit else 'abort'} of transactional id {self._tid!r} is decided, but not "
                    "every marker was written in time; call it again to keep waiting (it will not be undone)"
                )

    # -------------------------------------------------------------------------------- operations (on the loop)

    async def init_transactions(self, deadline: Deadline) -> None:
        """InitProducerId: fence older instances and abort (or complete) their transaction
        (design/kafka-semantics.md §2.3)."""
        with self._lock:
            if self.state not in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING):
                self._raise_if_failed()
                raise IllegalStateError(
                    f"init_transactions() was already called for transactional id {self._tid!r}; call it once per "
                    "producer"
                )
            self._transition(TransactionState.INITIALIZING)
        try:
            identity = await self._init_producer_id(deadline, None)
        except OncelogError as err:
            raise self._on_call_failed(err, "init_transactions()") from err
        self._sequences.set_identity(identity)
        with self._lock:
            self._transition(TransactionState.READY)
        log.info("transactional id %r initialised with %s", self._tid, identity)

    def begin_transaction(self) -> None:
        """Open a transaction locally; nothing is sent until the first record or offsets."""
        with self._lock:
            if self.state is not TransactionState.READY:
                self._raise_if_failed()
                raise IllegalStateError(self._hint("begin_transaction()"))
            self._transition(TransactionState.IN_TRANSACTION)
            self._reset_transaction()

    def _reset_transaction(self) -> None:
        self._started = False
        self._partitions.clear()
        self._pending_partitions.clear()
        self._groups.clear()
        self._pending_offsets.clear()

    def _check_in_transaction(self, what: str) -> None:
        with self._lock:
            if self.state is not TransactionState.IN_TRANSACTION:
                self._raise_if_failed()
                raise IllegalStateError(self._hint(what))

    async def add_offsets(self, group_id: str, deadline: Deadline) -> str:
        """AddOffsetsToTxn for ``group_id``, once per transaction; the group's offsets owner (or "")."""
        self._check_in_transaction("send_offsets_to_transaction()")
        return await self._add_offsets(group_id, deadline)

    async def _add_offsets(self, group_id: str, deadline: Deadline) -> str:
        async with self._coordinator_turn:
            # checked after the wait for our turn: a call for the same group that held it may have added it
            if group_id in self._groups:
                return self._groups[group_id]
            request = txn_pb.AddOffsetsToTxnRequest(
                transactional_id=self._tid, producer=_identity_pb(self._sequences.identity), group_id=group_id
            )
            self._started = True
            try:
                response = await self._coordinator_call(
                    "AddOffsetsToTxn",
                    lambda stub: call(stub.AddOffsetsToTxn, request, timeout_s=self._request_timeout_s),
                    deadline,
                )
            except OncelogError as err:
                raise self._on_call_failed(err, f"adding the offsets of group {group_id!r}") from err
            self._groups[group_id] = response.group_coordinator_address
            return response.group_coordinator_address

    async def send_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: ConsumerGroupMetadata, deadline: Deadline
    ) -> None:
        """AddOffsetsToTxn (unless this transaction already added the group), then TxnOffsetCommit to the
        group's owner (design/kafka-semantics.md §1.1 step 4, KIP-447).

        Until the offsets are committed they stay pending, merged with earlier pending offsets of the group:
        when this call fails with a retriable error, ``commit_transaction()`` commits them before EndTxn.
        """
        self._check_in_transaction("send_offsets_to_transaction()")
        earlier = self._pending_offsets.get(group.group_id)
        merged = {**earlier[0], **offsets} if earlier is not None else dict(offsets)
        self._pending_offsets[group.group_id] = (merged, group)
        await self._commit_offsets(merged, group, deadline)
        if self._pending_offsets.get(group.group_id, (None,))[0] is merged:
            del self._pending_offsets[group.group_id]

    async def _commit_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: ConsumerGroupMetadata, deadline: Deadline
    ) -> None:
        address = await self._add_offsets(group.group_id, deadline)
        identity = self._sequences.identity
        commit = offsets_pb.TxnOffsetCommitRequest(
            transactional_id=self._tid,
            producer=_identity_pb(identity),
            group_id=group.group_id,
            member=offsets_pb.GroupMember(
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id or "",
            ),
            offsets=[_offset_pb(tp, om) for tp, om in sorted(offsets.items())],
        )
        backoff = Backoff(self._config.retry_backoff_ms, self._config.retry_backoff_max_ms)
        while True:
            try:
                if not address:
                    address = await self._metadata.find_coordinator(group.group_id, _GROUP)
                await call(self._channels.offsets(address).TxnOffsetCommit, commit, timeout_s=self._request_timeout_s)
                return
            except OncelogError as err:
                disposition = classify(err, source="group", transactional=True)
                if disposition.action is Action.RETRY and not deadline.expired:
                    if disposition.refresh is not Refresh.NONE or err.reason is Reason.NOT_COORDINATOR:
                        self._metadata.invalidate_coordinator(group.group_id, _GROUP)
                        address = ""
                    await asyncio.sleep(deadline.cap(backoff.next_s()))
                    continue
                if disposition.action is Action.RETRY:
                    raise RetriableError(
                        f"TxnOffsetCommit for group {group.group_id!r} did not complete in time: {err.message}",
                        cause=err,
                    ) from err
                user_error = disposition.user_error(
                    err, f"committing offsets of group {group.group_id!r}: {err.message}"
                )
                if disposition.action is Action.FATAL:
                    self._enter_fatal(user_error)
                elif disposition.action is Action.ABORTABLE:
                    assert isinstance(user_error, AbortableError)
                    self.set_abortable(user_error, epoch_bump=disposition.epoch_bump)
                raise user_error from err

    async def commit_transaction(
        self, flush: Callable[[Deadline], Awaitable[None]], deadline: Deadline, wait_for_completion: bool = False
    ) -> None:
        """Flush, then EndTxn(COMMIT) until it answers (and, if asked, until complete); adopt the epoch it returns.

        A commit that timed out while waiting for completion stays COMMITTING_TRANSACTION with the old epoch, so
        calling it again retries the same decision and waits again (KIP-890 epoch bump on completion of the call).
        """
        with self._lock:
            if self.state is TransactionState.IN_TRANSACTION:
                self._transition(TransactionState.COMMITTING_TRANSACTION)
            elif self.state is not TransactionState.COMMITTING_TRANSACTION:
                self._raise_if_failed()
                raise IllegalStateError(self._hint("commit_transaction()"))
        await flush(deadline)
        with self._lock:
            self._raise_if_failed()
            if self._pending_partitions:
                # flush() returns only after every batch was sent, so every partition was added already
                raise IllegalStateError(f"partitions {sorted(self._pending_partitions)} were never added")
        for group_id, (offsets, group) in list(self._pending_offsets.items()):
            # a send_offsets_to_transaction() that failed: the commit carries its offsets or does not happen
            await self._commit_offsets(offsets, group, deadline)
            del self._pending_offsets[group_id]
        with self._lock:
            self._raise_if_failed()
            started = self._started
        if started:
            try:
                identity = await self._end_txn(True, deadline, wait_for_completion)
            except OncelogError as err:
                raise self._on_call_failed(err, "commit_transaction()") from err
            self._sequences.set_identity(identity)
        with self._lock:
            self._transition(TransactionState.READY)
            self._reset_transaction()

    async def abort_transaction(
        self, wait_in_flight: Callable[[Deadline], Awaitable[None]], deadline: Deadline
    ) -> None:
        """Drop unsent records, wait for those on the wire, then EndTxn(ABORT) and adopt the new epoch.

        When the abort follows a sequence error (KIP-360), the epoch EndTxn returns restarts every
        partition's sequences at 0. If the coordinator no longer maps the id to this producer id
        (INVALID_PRODUCER_ID_MAPPING), InitProducerId with the current identity takes its place.
        """
        with self._lock:
            if self.state not in _VALID_PREVIOUS_STATES[TransactionState.ABORTING_TRANSACTION]:
                if self.state is TransactionState.FATAL_ERROR:
                    self._raise_if_failed()
                raise IllegalStateError(self._hint("abort_transaction()"))
            self._transition(TransactionState.ABORTING_TRANSACTION)
            self._pending_partitions.clear()
            last_error = self.last_error
        self._accumulator.abort_undrained(AbortableError("the transaction was aborted before this record was sent"))
        if self._add_task is not None and not self._add_task.done():
            self._add_task.cancel()
            self._started = True  # the coordinator may have added the partitions before the cancel
        await wait_in_flight(deadline)
        with self._lock:
            bump = self._epoch_bump_required
            started = self._started
        if started or bump:
            try:
                if last_error is not None and last_error.reason is Reason.INVALID_PRODUCER_ID_MAPPING:
                    identity = await self._init_producer_id(deadline, self._sequences.identity)
                else:
                    identity = await self._end_txn(False, deadline)
            except OncelogError as err:
                raise self._on_call_failed(err, "abort_transaction()") from err
            if bump:
                self._sequences.reset()
            self._sequences.set_identity(identity)
        with self._lock:
            self._transition(TransactionState.READY)
            self._reset_transaction()
            self.last_error = None
            self._epoch_bump_required = False


# ------------------------------------------------------------------------------------------------ producer


class Producer:
    """Send records to oncelog topics; idempotent by default, transactional with ``transactional_id``.

    Example:
        >>> from oncelog.client import Producer
        >>> with Producer() as producer:                      # bootstrap from .oncelog/cluster.json
        ...     producer.send("orders", b"hello", key=b"customer-7").result().offset
        0

    Transactions (design/kafka-semantics.md §1.1)::

        producer = Producer(transactional_id="copier-0")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"x")
        producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(42)},
                                             consumer.group_metadata())
        producer.commit_transaction()

    Args:
        bootstrap: any cluster address(es), ``"host:port[,host:port]"``; None reads ``.oncelog/cluster.json``.
        transactional_id: stable identity across restarts; enables the transactional API and fences
            older instances that used the same id.
        enable_idempotence: stamp batches with producer id, epoch and sequence so retries never
            duplicate (requires ``acks="all"``); required for transactions.
        acks: ``"all"`` (every in-sync replica has the batch durably) or ``1`` (the leader appended it).
        linger_ms: how long a batch that is not full waits for more records.
        batch_size: bytes that fill a batch.
        max_in_flight: unacknowledged batches per partition, 1 to 5.
        delivery_timeout_ms: upper bound on the time from ``send()`` to the acknowledgement, retries
            included; a record still unacknowledged then fails.
        transaction_timeout_ms: the coordinator aborts a transaction open longer than this.
        commit_wait_for_completion: the default of ``commit_transaction(wait_for_completion=...)``: False
            returns once the commit is durable (Kafka's contract), True once every marker is written too, so a
            read_committed read started afterwards sees the whole transaction (docs/design/read-after-commit.md).
        compression: None, ``"gzip"``, ``"lz4"`` or ``"zstd"`` (snappy is not supported: refused here).
        buffer_memory: bytes of records waiting to be sent before ``send()`` blocks.
        max_request_size: largest batch sent; larger records are refused at ``send()``.
        max_block_ms: how long ``send()`` (metadata, memory) and the blocking calls (``init_transactions``,
            ``commit_transaction``, ...) may block.
        request_timeout_ms: deadline of one request.
        retry_backoff_ms: first pause before a retry.
        retry_backoff_max_ms: the pause doubles up to this.
        key_serializer: turns a key into bytes (default: keys must be bytes or None).
        value_serializer: turns a value into bytes (default: values must be bytes or None).
        client_id: a name for logs and thread names.
        credentials: TLS channel credentials; None for plaintext.

    Raises:
        ValueError: an inconsistent configuration (every problem is listed).
        BootstrapError: ``bootstrap`` is None and ``.oncelog/cluster.json`` does not exist, or an address
            is malformed.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        *,
        transactional_id: str | None = None,
        enable_idempotence: bool = True,
        acks: str | int = "all",
        linger_ms: int = 5,
        batch_size: int = 16384,
        max_in_flight: int = 5,
        delivery_timeout_ms: int = 120_000,
        transaction_timeout_ms: int = 60_000,
        commit_wait_for_completion: bool = False,
        compression: str | None = None,
        buffer_memory: int = DEFAULT_BUFFER_MEMORY,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        max_block_ms: int = 60_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        client_id: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        problems = []
        acks_value = _ACKS.get(str(acks).lower())
        if acks_value is None:
            problems.append(f"acks={acks!r}; use 'all' or 1")
        if transactional_id is not None and not transactional_id:
            problems.append("transactional_id must not be empty; pass None for a non-transactional producer")
        if transactional_id and not enable_idempotence:
            problems.append("a transactional producer must be idempotent: drop enable_idempotence=False")
        if enable_idempotence and acks_value is not None and acks_value != storage_pb.ACKS_ALL:
            problems.append("an idempotent producer needs acks='all' (or pass enable_idempotence=False)")
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            problems.append(f"max_in_flight must be between 1 and {MAX_IN_FLIGHT}, got {max_in_flight}")
        if compression not in _COMPRESSION:
            unsupported = " is not supported by oncelog" if compression == "snappy" else ""
            problems.append(f"compression={compression!r}{unsupported}; use one of None, 'gzip', 'lz4', 'zstd'")
        if transaction_timeout_ms <= 0 or request_timeout_ms <= 0 or max_block_ms < 0:
            problems.append("transaction_timeout_ms and request_timeout_ms must be positive, max_block_ms >= 0")
        if problems:
            raise ValueError("invalid producer configuration: " + "; ".join(problems))
        assert acks_value is not None
        self._config = _Config(
            client_id=client_id or f"producer-{uuid.uuid4().hex[:8]}",
            transactional_id=transactional_id,
            idempotent=enable_idempotence,
            acks=acks_value,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            max_block_ms=max_block_ms,
            max_request_size=max_request_size,
            max_in_flight=max_in_flight,
            transaction_timeout_ms=transaction_timeout_ms,
            commit_wait_for_completion=commit_wait_for_completion,
        )
        bootstrap_addresses = resolve_bootstrap(bootstrap)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._sequences = (
            ProducerSequences(transactional=transactional_id is not None, max_in_flight=max_in_flight)
            if enable_idempotence
            else None
        )
        self._accumulator = RecordAccumulator(
            batch_size=batch_size,
            linger_ms=linger_ms,
            buffer_memory=buffer_memory,
            max_request_size=max_request_size,
            compression=_COMPRESSION[compression],
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            sequences=self._sequences,
        )
        self._partitioner = DefaultPartitioner(sticky_batch_size=batch_size)
        self._metrics: Counter[str] = Counter()
        self._closed = False
        self._close_lock = threading.Lock()
        self._fatal: OncelogError | None = None
        self._wake_pending = False
        self._io = IoThread(f"oncelog-{self._config.client_id}")
        self._channels = Channels(credentials=credentials)
        self._metadata = ClusterMetadata(
            self._channels,
            bootstrap_addresses,
            request_timeout_s=request_timeout_ms / 1000,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
        )
        self._txn: _TransactionManager | None = None
        if transactional_id is not None:
            assert self._sequences is not None
            self._txn = _TransactionManager(
                config=self._config,
                sequences=self._sequences,
                accumulator=self._accumulator,
                metadata=self._metadata,
                channels=self._channels,
                wake=self._wake_on_loop,
                enter_fatal=self._enter_fatal,
            )
        self._sender = self._io.run(self._create_sender())
        self._sender_task = self._io.submit(self._sender.run())

    async def _create_sender(self) -> _Sender:
        # created on the loop so its asyncio primitives belong to it
        return _Sender(
            config=self._config,
            accumulator=self._accumulator,
            sequences=self._sequences,
            metadata=self._metadata,
            channels=self._channels,
            transactions=self._txn,
            enter_fatal=self._enter_fatal,
            metrics=self._metrics,
        )

    # -------------------------------------------------------------------------------- helpers

    def _wake_on_loop(self) -> None:
        self._wake_pending = False
        self._sender.wakeup()

    def _wake(self) -> None:
        # A cross-thread wakeup is a syscall on the loop's self-pipe: coalesce them, so a burst of send()
        # calls costs one until the sender has run (a lost race only costs one extra wakeup).
        if not self._wake_pending:
            self._wake_pending = True
            self._io.call_soon(self._wake_on_loop)

    def _enter_fatal(self, error: OncelogError) -> None:
        """Runs on the loop: fail everything pending, refuse everything later."""
        if self._fatal is not None:
            return
        log.error("producer %s hit a fatal error: %s", self._config.client_id, error)
        self._fatal = error
        self._sender.fatal = error
        if self._txn is not None:
            self._txn.set_fatal(error)
        self._accumulator.abort_all(error)
        self._sender.stop()  # nothing may be written any more: drop the streams now, close() does the rest

    def _ensure_usable(self) -> None:
        if self._closed:
            raise IllegalStateError("the producer is closed; create a new Producer")
        if self._fatal is not None:
            raise self._fatal

    def _require_transactional(self, what: str) -> _TransactionManager:
        self._ensure_usable()
        if self._txn is None:
            raise IllegalStateError(f"{what} needs a transactional producer: pass transactional_id=... to Producer()")
        return self._txn

    def _deadline(self, timeout: float | None) -> Deadline:
        return Deadline(self._config.max_block_ms / 1000 if timeout is None else timeout)

    def _run(self, coro: Awaitable[T]) -> T:
        return self._io.run(coro)  # type: ignore[arg-type]

    async def _topic(self, topic: str, deadline: Deadline) -> TopicInfo:
        backoff = Backoff(self._config.retry_backoff_ms, self._config.retry_backoff_max_ms)
        while True:
            try:
                return await self._metadata.topic(topic)
            except OncelogError as err:
                if err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION or not err.retriable or deadline.expired:
                    raise
                await asyncio.sleep(deadline.cap(backoff.next_s()))

    # -------------------------------------------------------------------------------- public API

    @property
    def transactional_id(self) -> str | None:
        """The transactional id, or None for an idempotent or plain producer."""
        return self._config.transactional_id

    @property
    def transaction_state(self) -> TransactionState | None:
        """The transactional state (None for a non-transactional producer)."""
        return None if self._txn is None else self._txn.state

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch | None:
        """The identity stamped on the next batch, or None for a producer that is not idempotent."""
        return None if self._sequences is None else self._sequences.identity

    def metrics(self) -> dict[str, int]:
        """Counters since creation: ``batches_sent``, ``batch_retries``, ``duplicate_batches`` (retries the
        partition recognised as already written), ``epoch_bumps``, ``stream_breaks``."""
        values = dict(self._metrics)
        values["stream_breaks"] = self._sender.stream_breaks()
        for key in ("batches_sent", "batch_retries", "duplicate_batches", "epoch_bumps"):
            values.setdefault(key, 0)
        return values

    def partitions_for(self, topic: str) -> list[int]:
        """The partition indexes of ``topic``.

        Raises:
            UnknownTopicOrPartition: the topic does not exist.
        """
        self._ensure_usable()
        info = self._run(self._topic(topic, self._deadline(None)))
        return [p.partition for p in info.partitions]

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue a record and return a future for its :class:`RecordMetadata` (topic, partition, offset).

        The record goes to ``partition`` if given, else to murmur2(key) mod partitions (Kafka's default
        partitioner), else to a sticky round-robin partition. In a transaction, the first record for a
        partition makes the producer add the partition to the transaction before the batch is sent.

        Args:
            topic: an existing topic.
            value: the value (bytes or None, or anything ``value_serializer`` accepts).
            key: the key (bytes or None, or anything ``key_serializer`` accepts).
            headers: ``(name, bytes)`` pairs or a mapping.
            partition: an explicit partition.
            timestamp_ms: the record's CreateTime; default now.

        Raises:
            UnknownTopicOrPartition: the topic or partition does not exist.
            MessageTooLarge: the record alone exceeds ``max_request_size``.
            BufferExhaustedError: ``buffer_memory`` stayed full for ``max_block_ms``.
            IllegalStateError: the producer is closed, or (transactional) no transaction is open.
            AbortableError: the open transaction already failed; abort it.
            ProducerFencedError: a newer instance with the same transactional id exists.
            TypeError: key or value is not bytes and no serializer was given.
        """
        # waiting for memory on the I/O thread (a send() from a callback) would wait for ourselves
        max_block_s = 0.0 if self._io.on_loop_thread else self._config.max_block_ms / 1000
        return self._send(topic, value, key, headers, partition, timestamp_ms, max_block_s=max_block_s)

    def _send(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None,
        partition: int | None,
        timestamp_ms: int | None,
        *,
        max_block_s: float,
    ) -> RecordFuture:
        """:meth:`send` without the wait for memory beyond ``max_block_s`` (the asyncio producer passes 0)."""
        self._ensure_usable()
        if self._txn is not None:
            self._txn.check_send()
        key_bytes = self._key_serializer(key) if self._key_serializer is not None and key is not None else key
        value_bytes = (
            self._value_serializer(value) if self._value_serializer is not None and value is not None else value
        )
        info = self._metadata.cached_topic(topic)
        if info is None:
            info = self._run(self._topic(topic, self._deadline(None)))
        elif self._metadata.needs_update(topic):
            self._wake()  # the sender refreshes stale metadata in the background
        count = len(info.partitions)
        if partition is not None:
            if not 0 <= partition < count:
                raise UnknownTopicOrPartition(
                    f"partition {partition} of topic {topic!r} does not exist (the topic has {count} partition(s))"
                )
            chosen = partition
        else:
            chosen = self._partitioner.partition(topic, key_bytes, count, info.available_partitions())
        tp = TopicPartition(topic, chosen)
        if self._txn is not None:
            self._txn.maybe_add_partition(tp)
        result = self._accumulator.append(
            tp, key_bytes, value_bytes, headers or (), timestamp_ms, max_block_s=max_block_s
        )
        if partition is None and key_bytes is None:
            self._partitioner.on_append(topic, chosen, result.appended_bytes, enable_switch=result.open_batch_is_full)
        # the sender needs to hear of a batch only when it starts (linger clock) or fills up
        if result.new_batch_created or result.open_batch_is_full:
            self._wake()
        return result.future

    def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Future[Sequence[RecordMetadata]]:
        """Queue many records at once and return one future for all their :class:`RecordMetadata`, in order.

        The bulk form of :meth:`send` for high throughput: the records are checked, partitioned and appended
        under one lock, and the returned future settles once per underlying batch instead of once per
        record. Records keep their order within each partition, exactly as the same ``send()`` calls would;
        records without keys and without ``partition`` all go to the current sticky partition.

        Args:
            topic: an existing topic.
            values: the values (bytes or None, or what ``value_serializer`` accepts).
            keys: one key per value, or None for keyless records.
            partition: an explicit partition for every record.
            timestamp_ms: the CreateTime of every record; default now.

        Returns:
            A future resolving to a sequence of one :class:`RecordMetadata` per value (built when first
            read), or raising the first error of the batches that hold the records.

        Raises:
            ValueError: ``keys`` and ``values`` differ in length.
            The exceptions of :meth:`send`; a record that is refused (too large, wrong type) refuses all.
        """
        max_block_s = 0.0 if self._io.on_loop_thread else self._config.max_block_ms / 1000
        return self._send_batch(topic, values, keys, partition, timestamp_ms, max_block_s=max_block_s)

    def _send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        partition: int | None,
        timestamp_ms: int | None,
        *,
        max_block_s: float,
    ) -> Future[Sequence[RecordMetadata]]:
        self._ensure_usable()
        if self._txn is not None:
            self._txn.check_send()
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values; pass one key per value or none")
        if self._value_serializer is not None:
            serialize = self._value_serializer
            values = [None if v is None else serialize(v) for v in values]
        if keys is not None and self._key_serializer is not None:
            serialize = self._key_serializer
            keys = [None if k is None else serialize(k) for k in keys]
        info = self._metadata.cached_topic(topic)
        if info is None:
            info = self._run(self._topic(topic, self._deadline(None)))
        elif self._metadata.needs_update(topic):
            self._wake()
        count = len(info.partitions)
        # partition -> (positions of its records among all, or None when it takes all in order; keys; values)
        groups: dict[int, tuple[list[int] | None, Sequence[Any] | None, Sequence[Any]]]
        if partition is not None:
            if not 0 <= partition < count:
                raise UnknownTopicOrPartition(
                    f"partition {partition} of topic {topic!r} does not exist (the topic has {count} partition(s))"
                )
            groups = {partition: (None, keys, values)}
        elif keys is None:
            groups = {
                self._partitioner.partition(topic, None, count, info.available_partitions()): (None, None, values)
            }
        else:
            targets = self._partitioner.partition_keys(topic, keys, count, info.available_partitions())
            if len(set(targets)) == 1:
                groups = {targets[0]: (None, keys, values)} if targets else {}
            else:
                groups = {}
                for index, target in enumerate(targets):
                    positions, group_keys, group_values = groups.setdefault(target, ([], [], []))
                    positions.append(index)  # type: ignore[union-attr]
                    group_keys.append(keys[index])  # type: ignore[union-attr]
                    group_values.append(values[index])  # type: ignore[attr-defined]
        if self._txn is not None:
            for target in groups:
                self._txn.maybe_add_partition(TopicPartition(topic, target))
        # one all-or-nothing append across partitions: a refused record (or a full buffer) adds none anywhere
        runs_per_group, wake = self._accumulator.append_groups(
            [
                (TopicPartition(topic, target), group_keys, group_values)
                for target, (_, group_keys, group_values) in groups.items()
            ],
            timestamp_ms,
            max_block_s=max_block_s,
        )
        placements = [
            (positions, runs) for (positions, _, _), runs in zip(groups.values(), runs_per_group, strict=True)
        ]
        if partition is None and keys is None:
            for target, (_, _, group_values) in groups.items():
                appended = sum(len(v) for v in group_values if v is not None)
                self._partitioner.on_append(topic, target, appended, enable_switch=True)
        if wake:
            self._wake()
        return gather_runs(placements, len(values))

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is acknowledged or failed.

        Failures are reported through each record's future, not raised here.

        Raises:
            RetriableError: ``timeout`` seconds passed first.
        """
        if self._closed:
            return
        self._io.run(self._flush(Deadline(timeout)))

    async def _flush(self, deadline: Deadline) -> None:
        self._accumulator.begin_flush()
        self._sender.wakeup()
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

    async def _wait_in_flight(self, deadline: Deadline) -> None:
        """Wait until every batch that was sent is settled (abort: the unsent ones were dropped)."""
        await self._flush(deadline)

    def init_transactions(self, timeout: float | None = None) -> None:
        """Register the transactional id: fence older instances and finish their open transaction.

        Must be called once, before any other transactional method. May be called again after a
        :class:`RetriableError`.

        Raises:
            ProducerFencedError: a newer instance took over concurrently.
            RetriableError: the coordinator did not answer within ``timeout`` (default ``max_block_ms``).
            IllegalStateError: not transactional, or already initialised.
        """
        self._run(self._init_transactions(timeout))

    def _init_transactions(self, timeout: float | None) -> Coroutine[Any, Any, None]:
        txn = self._require_transactional("init_transactions()")
        return txn.init_transactions(self._deadline(timeout))

    def begin_transaction(self) -> None:
        """Start a transaction; every record sent until commit or abort belongs to it.

        Raises:
            IllegalStateError: ``init_transactions()`` was not called, or a transaction is open.
            AbortableError: the previous transaction failed and was not aborted.
        """
        self._require_transactional("begin_transaction()").begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce).

        The offsets become visible to the group exactly when the transaction commits, and vanish with
        it on abort (design/architecture.md §1.2). Pass the consumer's positions (the next offset to read) and
        ``consumer.group_metadata()``.

        Raises:
            ProducerFencedError: a newer instance took over.
            AbortableError: the group rejected the commit (stale generation or member); abort.
            RetriableError: no answer within ``timeout`` (default ``max_block_ms``). The offsets stay part of
                the transaction: call again, or go on to ``commit_transaction()``, which commits them before
                the transaction (and does not commit the transaction without them).
            IllegalStateError: no open transaction.
        """
        self._run(self._send_offsets_to_transaction(offsets, group_metadata, timeout))

    def _send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None,
    ) -> Coroutine[Any, Any, None]:
        txn = self._require_transactional("send_offsets_to_transaction()")
        group = ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        if not group.group_id:
            raise ValueError("group_metadata names no group; use consumer.group_metadata() of a consumer with group_id")
        normalized = {
            TopicPartition(*tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            for tp, om in offsets.items()
        }
        return txn.send_offsets(normalized, group, self._deadline(timeout))

    def add_offsets_to_transaction(
        self, group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None
    ) -> None:
        """Make the group's offsets part of the open transaction now, before they are known.

        :meth:`send_offsets_to_transaction` does two round trips: it adds the group to the transaction
        (AddOffsetsToTxn, to the transaction coordinator), then commits the offsets (TxnOffsetCommit, to the
        group's owner). A caller that knows the group early — at the start of the transaction — but its
        offsets only at the end can take the first round trip here, while it is still producing; the later
        ``send_offsets_to_transaction`` for the group then only commits the offsets. Calling it again for
        the same group in the same transaction does nothing.

        Raises:
            The exceptions of :meth:`send_offsets_to_transaction`.
        """
        self._run(self._add_offsets_to_transaction(group_metadata, timeout))

    def _add_offsets_to_transaction(
        self, group_metadata: ConsumerGroupMetadata | str, timeout: float | None
    ) -> Coroutine[Any, Any, str]:
        txn = self._require_transactional("add_offsets_to_transaction()")
        group = ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        if not group.group_id:
            raise ValueError("group_metadata names no group; use consumer.group_metadata() of a consumer with group_id")
        return txn.add_offsets(group.group_id, self._deadline(timeout))

    def commit_transaction(self, timeout: float | None = None, *, wait_for_completion: bool | None = None) -> None:
        """Flush the transaction's records, then commit it; returns once the commit is durable.

        Offsets of a ``send_offsets_to_transaction()`` call that failed with a retriable error are committed
        first: the transaction commits with every offset it was given, or not at all.

        Durable means decided: nothing can undo the commit, but, as in Kafka, the markers that make the records
        visible reach the partitions shortly after, so a read_committed read started right away may not see them
        yet. With ``wait_for_completion`` (default: the ``commit_wait_for_completion`` setting) it returns only
        once every marker is written, so any read_committed read started afterwards sees every record and
        offset of the transaction (docs/design/read-after-commit.md).

        Args:
            timeout: seconds to block; default ``max_block_ms``.
            wait_for_completion: also wait for the markers (see above).

        Raises:
            AbortableError: a record or offset commit of the transaction failed; call
                ``abort_transaction()`` and run the transaction again.
            ProducerFencedError: a newer instance took over; close this producer. It does not prove that
                nothing committed: if an earlier attempt of this commit reached the coordinator, the
                transaction may have committed (the new instance's ``init_transactions()`` completes it).
            RetriableError: no answer within ``timeout`` (default ``max_block_ms``). ``definite`` is False
                when any attempt may have reached the coordinator (the commit may have happened or may
                still happen): call ``commit_transaction()`` again — never ``abort_transaction()``. Also
                when the commit is decided but its markers were not all written in time
                (``wait_for_completion``); calling it again waits again.
            IllegalStateError: no open transaction.
        """
        self._run(self._commit_transaction(timeout, wait_for_completion))

    def _commit_transaction(
        self, timeout: float | None, wait_for_completion: bool | None = None
    ) -> Coroutine[Any, Any, None]:
        txn = self._require_transactional("commit_transaction()")
        wait = self._config.commit_wait_for_completion if wait_for_completion is None else wait_for_completion
        return txn.commit_transaction(self._flush, self._deadline(timeout), wait)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: unsent records are dropped, sent ones and its offsets never become visible.

        Raises:
            ProducerFencedError: a newer instance took over (its InitProducerId already aborted this
                transaction).
            RetriableError: no answer within ``timeout`` (default ``max_block_ms``); call again.
            IllegalStateError: no open transaction, or a commit with unknown outcome is pending.
        """
        self._run(self._abort_transaction(timeout))

    def _abort_transaction(self, timeout: float | None) -> Coroutine[Any, Any, None]:
        txn = self._require_transactional("abort_transaction()")
        return txn.abort_transaction(self._wait_in_flight, self._deadline(timeout))

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued and release the connections. Idempotent.

        An open transaction is aborted (as Kafka's producer does on close), unless a commit is pending.
        Records still unsent after ``timeout`` seconds (default: wait for all) fail with
        :class:`IllegalStateError`.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._io.on_loop_thread:
            raise IllegalStateError("close() was called from a send() callback; call it from another thread")
        deadline = Deadline(timeout)
        self._accumulator.close()
        try:
            txn = self._txn
            if (
                self._fatal is None
                and txn is not None
                and txn.state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR)
            ):
                log.info("aborting the open transaction of %r on close", self._config.transactional_id)
                self._io.run(txn.abort_transaction(self._wait_in_flight, deadline))
            elif self._fatal is None:
                self._io.run(self._flush(deadline))
        except OncelogError as err:
            log.warning("producer %s closed with records unsettled: %s", self._config.client_id, err)
        finally:
            self._io.call_soon(self._sender.stop)
            try:
                self._sender_task.result(timeout=10)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError, Exception):
                pass
            self._accumulator.abort_all(IllegalStateError("the producer was closed before this record was sent"))
            try:
                self._io.submit(self._channels.close()).result(timeout=5)
            except Exception:
                pass
            self._io.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = (
            f"transactional_id={self._config.transactional_id!r}"
            if self._txn
            else "idempotent"
            if (self._sequences)
            else "non-idempotent"
        )
        return f"Producer({self._config.client_id}, {kind})"


def _identity_pb(identity: ProducerIdAndEpoch) -> common_pb.ProducerIdentity:
    return common_pb.ProducerIdentity(producer_id=identity.producer_id, producer_epoch=identity.epoch)


def _offset_pb(tp: TopicPartition, om: OffsetAndMetadata) -> common_pb.PartitionOffset:
    return common_pb.PartitionOffset(
        topic_partition=common_pb.TopicPartition(topic=tp.topic, partition=tp.partition),
        offset=om.offset,
        leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
        metadata=om.metadata,
    )
