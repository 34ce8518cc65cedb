"""A transactional producer and a read_committed reader, one RPC at a time, with no client library state machine.

Full-stack tests and benchmarks drive the services with these instead of the Producer and Consumer, so that they
exercise exactly the wire protocol and nothing hides a retry or a reordering. Each call goes through the typed
clients of :mod:`oncelog.client.services` (one attempt each; the retries are the ones listed here); FindCoordinator
and DescribeTransactions still hand their wire answers to the tests, which read fields the domain types omit.

* :class:`ClusterView` finds things: transaction and group coordinators (FindCoordinator, retried while a
  shard has no owner), partition leaders (Metadata, cached until a call says the leader moved), and keeps one
  ``grpc.aio`` channel per address.
* :class:`TransactionalDriver` is one producer instance of one transactional id, speaking the KIP-98 protocol
  with KIP-890's epoch bump on every EndTxn (design/kafka-semantics.md §2.3-2.5, §5.6): InitProducerId,
  AddPartitionsToTxn,
  AddOffsetsToTxn, transactional Produce with per-partition sequences, TxnOffsetCommit, EndTxn. Coordinator
  calls are retried on the reasons a client retries (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
  COORDINATOR_LOAD_IN_PROGRESS, transport errors and, unless told otherwise, CONCURRENT_TRANSACTIONS) with
  the same identity; everything else is raised as the :class:`~oncelog.errors.OncelogError` the server sent.
* :func:`read_partition` reads one partition from offset 0 to the high watermark (read_uncommitted) or the
  last stable offset (read_committed), filters it with the consumer's own :mod:`oncelog.client.fetch_filter`,
  and also returns the raw batches, so tests can look at the control records themselves.

Nothing here sleeps to wait for a state: :func:`eventually` polls a condition against a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc
from grpc import aio

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.fetch_filter import AbortedTransaction, filter_fetch
from oncelog.client.records import ConsumerRecord, NewTopic, OffsetAndMetadata, TopicPartition
from oncelog.client.services import (
    ClusterClient,
    FetchPosition,
    GroupOffsetsClient,
    PartitionStorageClient,
    TransactionCoordinatorClient,
)
from oncelog.errors import OncelogError, Reason
from oncelog.records import BatchHeader, ControlType, Record, build_batch, iter_batches, read_control_record
from oncelog.rpc import ChannelPool, from_rpc_error
from oncelog.vocabulary import IsolationLevel, ProducerIdAndEpoch

__all__ = [
    "COORDINATOR_RETRY_REASONS",
    "ClusterView",
    "ControlMarker",
    "PartitionRead",
    "TransactionalDriver",
    "eventually",
    "fetch_group_offsets",
    "read_partition",
]

T = TypeVar("T")

COORDINATOR_RETRY_REASONS = frozenset(
    {
        Reason.NOT_COORDINATOR,
        Reason.COORDINATOR_NOT_AVAILABLE,
        Reason.COORDINATOR_LOAD_IN_PROGRESS,
        Reason.NETWORK_EXCEPTION,
        Reason.REQUEST_TIMED_OUT,
    }
)
"""Reasons after which a coordinator call is sent again, to the coordinator FindCoordinator names then."""

_LEADER_RETRY_REASONS = frozenset(
    {
        Reason.NOT_LEADER,
        Reason.FENCED_LEADER_EPOCH,
        Reason.UNKNOWN_LEADER_EPOCH,
        Reason.NETWORK_EXCEPTION,
        Reason.REQUEST_TIMED_OUT,
        Reason.STORAGE_UNAVAILABLE,
    }
)
_RPC_TIMEOUT_S = 30.0
_FIRST_BACKOFF_S = 0.002
_MAX_BACKOFF_S = 0.05
"""Retry pauses double from the first to the max. CONCURRENT_TRANSACTIONS after an EndTxn lasts one marker round
trip (a few ms when idle, more under load) and reaches the driver only when the coordinator's parking is off or
timed out; Kafka's client waits a fixed 20 ms before retrying AddPartitions."""


async def eventually(condition: Callable[[], Awaitable[T | None]], what: str, timeout: float = 30.0) -> T:
    """Poll ``condition`` until it returns a truthy value and return that value.

    Raises:
        AssertionError: ``timeout`` seconds passed; the message names ``what`` and the last value seen.
    """
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting until {what}; last value {value!r}")
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.2)


def _error_of(exc: grpc.RpcError) -> OncelogError:
    return from_rpc_error(exc)


class ClusterView:
    """Coordinators, leaders and channels of one cluster, found through the ClusterService of any node.

    Args:
        bootstrap: addresses of live nodes, or a callable returning them (tests pass one that follows
            restarts, since a restarted process listens on a new port).
        deadline_s: how long lookups are retried while the cluster has no answer yet.
    """

    def __init__(self, bootstrap: Sequence[str] | Callable[[], Sequence[str]], *, deadline_s: float = 30.0) -> None:
        self._bootstrap = bootstrap if callable(bootstrap) else (lambda: tuple(bootstrap))
        self.deadline_s = deadline_s
        self._channels = ChannelPool()
        self._leaders: dict[TopicPartition, str] = {}
        self.cluster = ClusterClient(self.channel, timeout_s=_RPC_TIMEOUT_S)
        self.partitions = PartitionStorageClient(self.channel, timeout_s=_RPC_TIMEOUT_S)
        self.coordinators = TransactionCoordinatorClient(self.channel, timeout_s=_RPC_TIMEOUT_S)
        self.groups = GroupOffsetsClient(self.channel, timeout_s=_RPC_TIMEOUT_S)

    # ------------------------------------------------------------------------------ channels and stubs

    def channel(self, address: str) -> aio.Channel:
        """The (cached) channel to ``address``."""
        return self._channels.get(address)

    def storage(self, address: str) -> storage_pb.PartitionStorageServiceStub:
        """PartitionStorageService of the node at ``address``."""
        return storage_pb.PartitionStorageServiceStub(self.channel(address))

    def coordinator(self, address: str) -> txn_pb.TransactionCoordinatorServiceStub:
        """TransactionCoordinatorService of the node at ``address``."""
        return txn_pb.TransactionCoordinatorServiceStub(self.channel(address))

    def offsets(self, address: str) -> offsets_pb.GroupOffsetsServiceStub:
        """GroupOffsetsService of the node at ``address``."""
        return offsets_pb.GroupOffsetsServiceStub(self.channel(address))

    async def close(self) -> None:
        """Close every channel."""
        await self._channels.close()

    # ------------------------------------------------------------------------------ ClusterService

    async def _cluster_call(self, call: Callable[[str], Awaitable[T]]) -> T:
        """Run ``call(address)`` against the first bootstrap node that answers; retried until the deadline."""
        deadline = time.monotonic() + self.deadline_s
        while True:
            last: OncelogError | None = None
            for address in self._bootstrap():
                try:
                    return await call(address)
                except grpc.RpcError as exc:
                    last = _error_of(exc)
                    if last.reason not in COORDINATOR_RETRY_REASONS:
                        raise last from exc
                except OncelogError as error:
                    last = error
                    if last.reason not in COORDINATOR_RETRY_REASONS:
                        raise
            if time.monotonic() > deadline:
                raise last or OncelogError("no bootstrap address", reason=Reason.COORDINATOR_NOT_AVAILABLE)
            await asyncio.sleep(0.05)

    async def create_topic(self, name: str, partitions: int, **configs: str) -> dict[int, str]:
        """Create a topic; returns partition -> leader node id."""
        spec = NewTopic(name, partitions, configs)
        [topic] = await self._cluster_call(lambda address: self.cluster.create_topics(address, [spec]))
        return {p.partition: p.leader_node_id for p in topic.partitions}

    async def find_coordinator(
        self, key: str, kind: cluster_pb.CoordinatorType.ValueType = cluster_pb.COORDINATOR_TYPE_TRANSACTION
    ) -> cluster_pb.FindCoordinatorResponse:
        """The live owner of ``key``'s shard; retried while no owner is live (failover in progress)."""
        request = cluster_pb.FindCoordinatorRequest(key=key, type=kind)
        return await self._cluster_call(
            lambda address: cluster_pb.ClusterServiceStub(self.channel(address)).FindCoordinator(
                request, timeout=_RPC_TIMEOUT_S
            )
        )

    async def leader(self, tp: TopicPartition) -> str:
        """Address of the partition's leader (cached; see :meth:`forget_leader`)."""
        address = self._leaders.get(tp)
        if address:
            return address
        topics = await self._cluster_call(lambda address: self.cluster.metadata(address, [tp.topic]))
        for topic in topics:
            for p in topic.partitions:
                if p.leader_address:
                    self._leaders[p.topic_partition] = p.leader_address
        address = self._leaders.get(tp)
        if not address:
            raise OncelogError(f"{tp} has no live leader", reason=Reason.NOT_LEADER)
        return address

    def forget_leader(self, tp: TopicPartition) -> None:
        """Drop the cached leader of ``tp`` after it answered NOT_LEADER or could not be reached."""
        self._leaders.pop(tp, None)


# ---------------------------------------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True)
class ControlMarker:
    """One COMMIT/ABORT control record as stored in a partition."""

    offset: int
    producer_id: int
    producer_epoch: int
    control_type: ControlType
    coordinator_epoch: int


@dataclass(frozen=True)
class PartitionRead:
    """A partition read from offset 0 up to the high watermark or the last stable offset."""

    records: list[ConsumerRecord]
    """What a consumer of this isolation level gets (control records and, read_committed, aborted data removed)."""
    high_watermark: int
    last_stable_offset: int
    aborted: list[AbortedTransaction]
    """The aborted transactions the server listed (read_committed only)."""
    headers: list[BatchHeader] = field(default_factory=list)
    """Every stored batch returned, data and control."""
    markers: list[ControlMarker] = field(default_factory=list)
    """Every control record returned, in offset order."""

    @property
    def values(self) -> list[bytes | None]:
        """Record values in offset order."""
        return [r.value for r in self.records]


async def read_partition(
    view: ClusterView,
    tp: TopicPartition,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    *,
    max_bytes: int = 1 << 20,
) -> PartitionRead:
    """Read ``tp`` from offset 0 to its end for ``isolation``, in fetches of ``max_bytes``.

    Raises:
        OncelogError: the partition could not be read (its leader is down, for instance).
    """
    chunks: list[bytes] = []
    aborted: dict[tuple[int, int], AbortedTransaction] = {}
    offset = 0
    while True:
        address = await view.leader(tp)
        try:
            [result] = await view.partitions.fetch(
                address, [FetchPosition(tp, offset, max_bytes=max_bytes)], isolation=isolation
            )
        except OncelogError:
            view.forget_leader(tp)
            raise
        if result.error is not None:
            view.forget_leader(tp)
            raise result.error
        for t in result.aborted_transactions:
            aborted[(t.producer_id, t.first_offset)] = t
        if not result.records:
            break
        chunks.append(result.records)
        *_, (last, _) = iter_batches(result.records)
        offset = last.next_offset
    data = b"".join(chunks)
    records, _ = filter_fetch(
        tp, data, fetch_offset=0, isolation_level=isolation, aborted_transactions=aborted.values()
    )
    headers: list[BatchHeader] = []
    markers: list[ControlMarker] = []
    for header, batch in iter_batches(data):
        headers.append(header)
        if header.is_control:
            control_type, coordinator_epoch = read_control_record(batch)
            markers.append(
                ControlMarker(
                    header.base_offset, header.producer_id, header.producer_epoch, control_type, coordinator_epoch
                )
            )
    return PartitionRead(
        records=records,
        high_watermark=result.high_watermark,
        last_stable_offset=result.last_stable_offset,
        aborted=sorted(aborted.values(), key=lambda a: (a.first_offset, a.producer_id)),
        headers=headers,
        markers=markers,
    )


async def fetch_group_offsets(
    view: ClusterView, group: str, partitions: Iterable[TopicPartition], *, require_stable: bool = False
) -> dict[TopicPartition, int]:
    """FetchOffsets from the group's coordinator: partition -> committed offset (-1 when none).

    Raises:
        OncelogError: e.g. UNSTABLE_OFFSET_COMMIT with ``require_stable`` while a transactional commit is pending.
    """
    found = await view.find_coordinator(group, cluster_pb.COORDINATOR_TYPE_GROUP)
    committed = await view.groups.fetch_offsets(found.address, group, partitions, require_stable=require_stable)
    return {tp: -1 if om is None else om.offset for tp, om in committed.items()}


# ---------------------------------------------------------------------------------------------- producing


def _tp_pb(tp: TopicPartition) -> common_pb.TopicPartition:
    return common_pb.TopicPartition(topic=tp.topic, partition=tp.partition)


class TransactionalDriver:
    """One producer instance of ``transactional_id``, speaking the coordinator and storage protocols directly.

    The identity (producer id, epoch) it holds is :attr:`identity`; EndTxn replaces it with the bumped one
    the coordinator returns (KIP-890), and sequences restart at 0 on every partition whenever it changes.

    Args:
        view: how to reach the cluster.
        transactional_id: the id this instance produces for.
        timeout_ms: the transaction timeout sent with InitProducerId.
        retry_deadline_s: how long retriable errors are retried before they are raised.
    """

    def __init__(
        self, view: ClusterView, transactional_id: str, *, timeout_ms: int = 60_000, retry_deadline_s: float = 30.0
    ) -> None:
        self.view = view
        self.transactional_id = transactional_id
        self.timeout_ms = timeout_ms
        self.retry_deadline_s = retry_deadline_s
        self.identity: tuple[int, int] | None = None
        self._sequences: dict[TopicPartition, int] = {}
        self._coordinator_address: str | None = None

    @property
    def producer(self) -> common_pb.ProducerIdentity:
        """The current identity as a message; raises if InitProducerId has not succeeded yet."""
        if self.identity is None:
            raise RuntimeError(f"{self.transactional_id!r}: call init_producer_id first")
        return common_pb.ProducerIdentity(producer_id=self.identity[0], producer_epoch=self.identity[1])

    def _identity(self) -> ProducerIdAndEpoch:
        if self.identity is None:
            raise RuntimeError(f"{self.transactional_id!r}: call init_producer_id first")
        return ProducerIdAndEpoch(*self.identity)

    def _adopt(self, producer: ProducerIdAndEpoch) -> tuple[int, int]:
        identity = (producer.producer_id, producer.epoch)
        if identity != self.identity:
            self._sequences.clear()  # a new epoch starts every partition at sequence 0 (design/kafka-semantics.md §4.2)
        self.identity = identity
        return identity

    # ------------------------------------------------------------------------------ coordinator calls

    async def coordinator_address(self, *, refresh: bool = False) -> str:
        """The address of the coordinator FindCoordinator names for this id (cached until ``refresh``)."""
        if refresh or self._coordinator_address is None:
            self._coordinator_address = (await self.view.find_coordinator(self.transactional_id)).address
        return self._coordinator_address

    async def coordinator_stub(self, *, refresh: bool = False) -> txn_pb.TransactionCoordinatorServiceStub:
        """The stub of the coordinator FindCoordinator names for this id (cached until ``refresh``)."""
        return self.view.coordinator(await self.coordinator_address(refresh=refresh))

    async def _coordinator_call(self, call: Callable[[str], Awaitable[T]], *, retry_concurrent: bool = True) -> T:
        """``call(address)`` on this id's coordinator, retried as described in the module docstring."""
        deadline = time.monotonic() + self.retry_deadline_s
        delay = _FIRST_BACKOFF_S
        refresh = False
        while True:
            try:
                return await call(await self.coordinator_address(refresh=refresh))
            except grpc.RpcError as exc:
                error = _error_of(exc)
            except OncelogError as failure:
                error = failure
            retry_same = error.reason is Reason.CONCURRENT_TRANSACTIONS and retry_concurrent
            if not (retry_same or error.reason in COORDINATOR_RETRY_REASONS) or time.monotonic() > deadline:
                raise error
            refresh = not retry_same
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_BACKOFF_S)

    async def init_producer_id(self, *, retry_concurrent: bool = True, recover: bool = False) -> tuple[int, int]:
        """InitProducerId: a new instance (or, with ``recover``, this one under KIP-360) takes over the id.

        With ``retry_concurrent`` the call is repeated while the coordinator answers CONCURRENT_TRANSACTIONS
        (the previous transaction is being aborted or completed), as a client does.
        """
        current = self._identity() if recover else None
        identity = await self._coordinator_call(
            lambda address: self.view.coordinators.init_producer_id(
                address, self.transactional_id, transaction_timeout_ms=self.timeout_ms, current=current
            ),
            retry_concurrent=retry_concurrent,
        )
        return self._adopt(identity)

    async def add_partitions(self, *partitions: TopicPartition) -> None:
        """AddPartitionsToTxn; retried while the previous transaction completes (CONCURRENT_TRANSACTIONS)."""
        identity = self._identity()
        await self._coordinator_call(
            lambda address: self.view.coordinators.add_partitions_to_txn(
                address, self.transactional_id, identity, partitions
            )
        )

    async def add_offsets(self, group: str) -> str:
        """AddOffsetsToTxn; returns the group coordinator's address the coordinator reported."""
        identity = self._identity()
        return await self._coordinator_call(
            lambda address: self.view.coordinators.add_offsets_to_txn(address, self.transactional_id, identity, group)
        )

    async def end_txn(self, commit: bool, *, identity: tuple[int, int] | None = None) -> tuple[int, int]:
        """EndTxn with this instance's identity (or ``identity``, to send a late or retried request).

        The returned identity is adopted only when the request used the current one.
        """
        used = identity or self.identity
        if used is None:
            raise RuntimeError(f"{self.transactional_id!r}: call init_producer_id first")
        result = ControlType.COMMIT if commit else ControlType.ABORT
        ended = await self._coordinator_call(
            lambda address: self.view.coordinators.end_txn(
                address, self.transactional_id, ProducerIdAndEpoch(*used), result
            )
        )
        if used == self.identity:
            return self._adopt(ended.producer)
        return ended.producer.producer_id, ended.producer.epoch

    async def commit(self) -> tuple[int, int]:
        """EndTxn(COMMIT); returns the next identity."""
        return await self.end_txn(True)

    async def abort(self) -> tuple[int, int]:
        """EndTxn(ABORT); returns the next identity."""
        return await self.end_txn(False)

    async def describe(self) -> txn_pb.TransactionDescription:
        """DescribeTransactions for this id, from its coordinator."""
        request = txn_pb.DescribeTransactionsRequest(transactional_ids=[self.transactional_id])
        response = await self._coordinator_call(
            lambda address: self.view.coordinator(address).DescribeTransactions(request, timeout=_RPC_TIMEOUT_S)
        )
        return response.transactions[0]

    async def wait_state(
        self, state: txn_pb.TransactionState.ValueType, timeout: float = 30.0
    ) -> txn_pb.TransactionDescription:
        """Poll DescribeTransactions until the id is in ``state``."""

        async def reached() -> txn_pb.TransactionDescription | None:
            described = await self.describe()
            return described if described.state == state else None

        return await eventually(reached, f"{self.transactional_id} is {txn_pb.TransactionState.Name(state)}", timeout)

    # ------------------------------------------------------------------------------ offsets

    async def commit_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """TxnOffsetCommit to the group's coordinator: the offsets become visible only with the transaction."""
        identity = self._identity()
        found = await self.view.find_coordinator(group, cluster_pb.COORDINATOR_TYPE_GROUP)
        await self.view.groups.txn_offset_commit(
            found.address,
            self.transactional_id,
            identity,
            group,
            {tp: OffsetAndMetadata(offset) for tp, offset in offsets.items()},
        )

    async def send_offsets_to_transaction(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """AddOffsetsToTxn then TxnOffsetCommit: Kafka's ``sendOffsetsToTransaction``."""
        await self.add_offsets(group)
        await self.commit_offsets(group, offsets)

    # ------------------------------------------------------------------------------ produce

    def batch(self, tp: TopicPartition, values: Sequence[bytes], *, timestamp: int | None = None) -> bytes:
        """The next transactional batch of ``tp`` with this identity (the sequence is not advanced)."""
        if self.identity is None:
            raise RuntimeError(f"{self.transactional_id!r}: call init_producer_id first")
        records = [Record(key=None, value=value) for value in values]
        return build_batch(
            records,
            producer_id=self.identity[0],
            producer_epoch=self.identity[1],
            base_sequence=self._sequences.get(tp, 0),
            transactional=True,
            base_timestamp=timestamp if timestamp is not None else int(time.time() * 1000),
        )

    async def send(self, records: Mapping[TopicPartition, Sequence[bytes]]) -> dict[TopicPartition, int]:
        """Append one transactional batch per partition, one Produce call per leader; returns base offsets.

        Leader changes and transport errors are retried with the same batch (the server deduplicates it);
        any other per-partition error is raised. Sequences advance only for acknowledged batches.
        """
        batches = {tp: self.batch(tp, values) for tp, values in records.items()}
        offsets: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + self.retry_deadline_s
        delay = _FIRST_BACKOFF_S
        pending = dict(batches)
        while pending:
            retry: OncelogError | None = None
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in pending:
                try:
                    by_leader.setdefault(await self.view.leader(tp), []).append(tp)
                except OncelogError as error:
                    if error.reason not in _LEADER_RETRY_REASONS:
                        raise
                    retry = error  # no live leader yet: the partition waits for the next round
            outcomes = await asyncio.gather(
                *(self._produce(address, tps, pending) for address, tps in by_leader.items())
            )
            for outcome in outcomes:
                for tp, result in outcome.items():
                    if isinstance(result, OncelogError):
                        if result.reason not in _LEADER_RETRY_REASONS:
                            raise result
                        self.view.forget_leader(tp)
                        retry = result
                    else:
                        offsets[tp] = result
                        self._sequences[tp] = self._sequences.get(tp, 0) + len(records[tp])
                        del pending[tp]
            if pending:
                if time.monotonic() > deadline:
                    raise retry or OncelogError("produce did not complete", reason=Reason.REQUEST_TIMED_OUT)
                await asyncio.sleep(delay)
                delay = min(delay * 2, _MAX_BACKOFF_S)
        return offsets

    async def _produce(
        self, address: str, tps: Sequence[TopicPartition], batches: Mapping[TopicPartition, bytes]
    ) -> dict[TopicPartition, int | OncelogError]:
        try:
            return await self.view.partitions.produce(
                address, {tp: batches[tp] for tp in tps}, transactional_id=self.transactional_id
            )
        except OncelogError as error:
            return dict.fromkeys(tps, error)
