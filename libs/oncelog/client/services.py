"""Typed clients of the oncelog services: domain values in, domain values out, one retry table, one backoff.

Every gRPC service has one class here, and nothing else in the client library, the Spark connector or the
test helpers builds a request message by hand (Temporal's Python SDK wraps its stubs the same way):

* :class:`ClusterClient` — ClusterService, served by every process: nodes, topics, leaders, coordinators.
* :class:`PidAllocatorClient` — PidAllocatorService: blocks of producer ids.
* :class:`TransactionCoordinatorClient` — TransactionCoordinatorService: producer ids, transactions.
* :class:`PartitionStorageClient` — PartitionStorageService: fetch, offsets, producers, markers.
* :class:`GroupOffsetsClient` — GroupOffsetsService: committed and transactional offsets, markers.

A client makes one attempt per call and raises the server's :class:`~oncelog.errors.OncelogError`; a call
with one answer per partition returns the partition's error in place, so the caller decides per partition.
Which failures are worth another attempt is decided in one place, :data:`RETRY_TABLE`; how long to pause
between attempts in one place, :class:`RetryPolicy` (built on tenacity, design/client.md §3).

All calls are coroutines on a ``grpc.aio`` channel; ``channel_for`` maps an address to a channel (the
client's :class:`~oncelog.client.transport.Channels` cache, or one channel per address in a test).
"""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

import grpc
import tenacity
from grpc import aio

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.pid import v1 as pid_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.fetch_filter import AbortedTransaction
from oncelog.client.group_admin import ConsumerGroupDescription, ConsumerGroupListing, description, listing
from oncelog.client.records import (
    ClusterDescription,
    ConfigEntry,
    NewTopic,
    NodeInfo,
    OffsetAndMetadata,
    PartitionInfo,
    ProducerStateDescription,
    TopicInfo,
    TransactionDescription,
    TransactionListing,
)
from oncelog.errors import OncelogError, Reason
from oncelog.rpc.errors import from_error_info, from_rpc_error
from oncelog.vocabulary import ControlType, CoordinatorKind, IsolationLevel, ProducerIdAndEpoch, Role, TopicPartition

__all__ = [
    "RETRY_TABLE",
    "AbortedTransaction",
    "Backoff",
    "ChannelSource",
    "ClusterClient",
    "Deadline",
    "EndTxnResult",
    "FetchPosition",
    "FetchedPartition",
    "GroupMember",
    "GroupOffsetsClient",
    "ListedOffset",
    "OffsetQuery",
    "PartitionStorageClient",
    "PidAllocatorClient",
    "ProducerIdBlock",
    "Retry",
    "RetryPolicy",
    "TransactionCoordinatorClient",
    "TxnMarker",
    "TxnMarkerResult",
    "call",
    "check_transaction_states",
    "is_retriable",
    "retry_of",
]

T = TypeVar("T")

ChannelSource = Callable[[str], aio.Channel]
"""Returns the channel to an address (opened on the caller's event loop)."""


# ------------------------------------------------------------------------------------------- retries


class Retry(enum.Enum):
    """How a retriable failure is retried."""

    SAME = "same"
    """Send the same request to the same server after a pause: it is busy, loading, or was slow."""
    LOCATE = "locate"
    """Find the server again first (partition metadata for a leader, FindCoordinator for a coordinator), then
    send the same request: the server moved, or the connection to it broke."""


RETRY_TABLE: Mapping[Reason, Retry] = {
    # the leader of a partition moved, or its metadata is not there yet
    Reason.NOT_LEADER: Retry.LOCATE,
    Reason.FENCED_LEADER_EPOCH: Retry.LOCATE,
    Reason.UNKNOWN_LEADER_EPOCH: Retry.LOCATE,
    Reason.UNKNOWN_TOPIC_OR_PARTITION: Retry.LOCATE,
    # a coordinator shard moved or has no owner right now
    Reason.NOT_COORDINATOR: Retry.LOCATE,
    Reason.COORDINATOR_NOT_AVAILABLE: Retry.LOCATE,
    # the connection broke: Kafka's NetworkException is an InvalidMetadataException
    Reason.NETWORK_EXCEPTION: Retry.LOCATE,
    # the right server, not ready yet
    Reason.COORDINATOR_LOAD_IN_PROGRESS: Retry.SAME,
    Reason.CONCURRENT_TRANSACTIONS: Retry.SAME,
    Reason.UNSTABLE_OFFSET_COMMIT: Retry.SAME,
    Reason.NOT_ENOUGH_REPLICAS: Retry.SAME,
    Reason.STORAGE_UNAVAILABLE: Retry.SAME,
    Reason.REQUEST_TIMED_OUT: Retry.SAME,
    # damaged in transit: the stored copy is checked before it is served (Kafka retries CORRUPT_MESSAGE)
    Reason.CORRUPT_MESSAGE: Retry.SAME,
    # the partition forgot the producer (retention); the producer's own handler decides (design/kafka-semantics.md §4.2)
    Reason.UNKNOWN_PRODUCER_ID: Retry.SAME,
}
"""Every reason a call may be retried for, and how: the one table of the client library.

A reason missing here is final. The keys are exactly the reasons :data:`oncelog.errors.REASONS` marks
retriable (a unit test keeps the two in step); this table adds what to do before the next attempt.
"""


def retry_of(err: OncelogError) -> Retry | None:
    """How to retry ``err``, or None when it is final.

    The error's own ``retriable`` flag, as the server sent it, can only turn a retry off: a server that knows
    an attempt cannot succeed (a topic it has just been told is gone) says so.
    """
    if not err.retriable:
        return None
    return RETRY_TABLE.get(err.reason)


def is_retriable(err: OncelogError, *, unknown_topic_is_final: bool = False) -> bool:
    """Whether :func:`retry_of` allows another attempt.

    Args:
        unknown_topic_is_final: UNKNOWN_TOPIC_OR_PARTITION ends the call. The catalog is authoritative about
            topics, so a topic it does not know will not appear by waiting; a partition leader that does not
            know it yet (a topic just created) is retried by the callers that leave this False.
    """
    if unknown_topic_is_final and err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION:
        return False
    return retry_of(err) is not None


class Deadline:
    """A point in monotonic time that bounds a blocking call (Kafka's ``max.block.ms``)."""

    def __init__(self, timeout_s: float | None) -> None:
        self._at = None if timeout_s is None else time.monotonic() + timeout_s

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None without a bound."""
        return None if self._at is None else max(self._at - time.monotonic(), 0.0)

    @property
    def expired(self) -> bool:
        """True once the time is up."""
        return self._at is not None and time.monotonic() >= self._at

    def cap(self, timeout_s: float) -> float:
        """``timeout_s``, shortened to what is left."""
        left = self.remaining()
        return timeout_s if left is None else min(timeout_s, left)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The one backoff of the client library: exponential from ``initial_ms`` to ``max_ms``, ±20 % jitter.

    Kafka's ``retry.backoff.ms`` and ``retry.backoff.max.ms``. :meth:`run` retries a coroutine with tenacity
    while :func:`retry_of` allows and a :class:`Deadline` lasts; :meth:`backoff` hands the same curve to a
    loop that schedules its own retries (the producer's sender re-enqueues batches instead of awaiting).
    """

    initial_ms: int = 100
    max_ms: int = 1_000

    def pause_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to pause after failed attempt number ``attempt`` (0 for the first failure)."""
        initial = max(self.initial_ms, 1)
        base = min(initial * 2 ** min(attempt, 32), max(self.max_ms, initial))
        return base * (rng or random).uniform(0.8, 1.2) / 1000

    def backoff(self, rng: random.Random | None = None) -> Backoff:
        """A stateful pause counter on this curve."""
        return Backoff(self.initial_ms, self.max_ms, rng=rng)

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        deadline: Deadline,
        *,
        retry_if: Callable[[OncelogError], bool] = is_retriable,
        before_retry: Callable[[OncelogError], object] | None = None,
        out_of_time: Callable[[OncelogError], BaseException] | None = None,
    ) -> T:
        """Await ``attempt()`` until it succeeds, fails for good, or ``deadline`` passes.

        Args:
            attempt: makes one attempt; raises :class:`OncelogError` on failure.
            deadline: no attempt starts after it; pauses are cut short to end with it.
            retry_if: whether a failure is worth another attempt (default: :data:`RETRY_TABLE`).
            before_retry: called with the failure before the pause (refresh metadata, forget a coordinator).
            out_of_time: builds the exception raised when a retriable failure is still there at the deadline;
                by default that failure itself.

        Raises:
            OncelogError: the final failure.
        """

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if before_retry is not None:
                before_retry(_failure(state))

        try:
            async for state in tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, OncelogError) and retry_if(exc)),
                stop=lambda _state: deadline.expired,
                wait=lambda state: deadline.cap(self.pause_s(state.attempt_number - 1)),
                before_sleep=before_sleep,
                reraise=True,
            ):
                with state:
                    return await attempt()
        except OncelogError as err:
            if out_of_time is not None and deadline.expired and retry_if(err):
                raise out_of_time(err) from err
            raise
        raise AssertionError("tenacity ended without an outcome")  # pragma: no cover

    def run_sync(
        self,
        attempt: Callable[[], T],
        deadline: Deadline,
        *,
        retry_if: Callable[[OncelogError], bool] = is_retriable,
        before_retry: Callable[[OncelogError], object] | None = None,
    ) -> T:
        """:meth:`run` for blocking code (the Spark connector's executors): pauses with ``time.sleep``.

        Raises:
            OncelogError: the final failure, or the last retriable one once ``deadline`` passed.
        """

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if before_retry is not None:
                before_retry(_failure(state))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, OncelogError) and retry_if(exc)),
            stop=lambda _state: deadline.expired,
            wait=lambda state: deadline.cap(self.pause_s(state.attempt_number - 1)),
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(attempt)


def _failure(state: tenacity.RetryCallState) -> OncelogError:
    assert state.outcome is not None
    failure = state.outcome.exception()
    assert isinstance(failure, OncelogError)
    return failure


class Backoff:
    """Pauses between the retries of one operation, on :class:`RetryPolicy`'s curve.

    Args:
        initial_ms: the first pause.
        max_ms: pauses double up to this.
        rng: source of jitter; the module's by default.
    """

    def __init__(self, initial_ms: int = 100, max_ms: int = 1_000, *, rng: random.Random | None = None) -> None:
        self._policy = RetryPolicy(initial_ms, max_ms)
        self._attempts = 0
        self._rng = rng

    def next_s(self) -> float:
        """Seconds to wait before the next attempt; grows with each call."""
        pause = self._policy.pause_s(self._attempts, self._rng)
        self._attempts += 1
        return pause

    def reset(self) -> None:
        """Start again from the initial pause (after a success)."""
        self._attempts = 0


async def call(rpc: Callable[..., Awaitable[T]], request: object, *, timeout_s: float) -> T:
    """Make one unary call and turn a failure into the server's domain error.

    Raises:
        OncelogError: the server's error (``ErrorInfo``), or a transport failure mapped from the status
            code: UNAVAILABLE becomes NETWORK_EXCEPTION and DEADLINE_EXCEEDED becomes REQUEST_TIMED_OUT,
            both retriable and indeterminate.
    """
    try:
        return await rpc(request, timeout=max(timeout_s, 0.001))
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from exc


# ------------------------------------------------------------------------------------------- wire helpers


def _tp_pb(tp: TopicPartition) -> common_pb.TopicPartition:
    return common_pb.TopicPartition(topic=tp.topic, partition=tp.partition)


def _tp(pb: common_pb.TopicPartition) -> TopicPartition:
    return TopicPartition(pb.topic, pb.partition)


def _identity_pb(identity: ProducerIdAndEpoch | None) -> common_pb.ProducerIdentity:
    if identity is None:
        return common_pb.ProducerIdentity(producer_id=-1, producer_epoch=-1)
    return common_pb.ProducerIdentity(producer_id=identity.producer_id, producer_epoch=identity.epoch)


def _identity(pb: common_pb.ProducerIdentity) -> ProducerIdAndEpoch:
    return ProducerIdAndEpoch(pb.producer_id, pb.producer_epoch)


_HasError = (
    common_pb.PartitionError
    | common_pb.GroupError
    | storage_pb.FetchPartitionResult
    | storage_pb.ListOffsetsPartitionResult
    | storage_pb.PartitionProducers
    | storage_pb.PartitionProduceResult
    | offsets_pb.ConsumerGroupDescription
)


def _error(holder: _HasError) -> OncelogError | None:
    """The per-item error of a result message, or None when it has none."""
    if not holder.HasField("error") or holder.error.reason == common_pb.ERROR_REASON_UNSPECIFIED:
        return None
    return from_error_info(holder.error)


def _offsets_pb(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> list[common_pb.PartitionOffset]:
    return [
        common_pb.PartitionOffset(
            topic_partition=_tp_pb(tp),
            offset=om.offset,
            leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
            metadata=om.metadata,
        )
        for tp, om in sorted(offsets.items())
    ]


_ISOLATION_PB = {
    IsolationLevel.READ_UNCOMMITTED: storage_pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
    IsolationLevel.READ_COMMITTED: storage_pb.ISOLATION_LEVEL_READ_COMMITTED,
}
_ROLE_OF_PB = {
    cluster_pb.SERVICE_ROLE_PID_ALLOCATOR: Role.PID_ALLOCATOR,
    cluster_pb.SERVICE_ROLE_TXN_COORDINATOR: Role.TXN_COORDINATOR,
    cluster_pb.SERVICE_ROLE_PARTITION_STORAGE: Role.PARTITION_STORAGE,
    cluster_pb.SERVICE_ROLE_GROUP_OFFSETS: Role.GROUP_OFFSETS,
}
_RESULT_PB = {
    ControlType.COMMIT: common_pb.TRANSACTION_RESULT_COMMIT,
    ControlType.ABORT: common_pb.TRANSACTION_RESULT_ABORT,
}
_STATE_PREFIX = "TRANSACTION_STATE_"


def transaction_state_name(value: int) -> str:
    """The lower-case name of a wire ``TransactionState`` (``ongoing``, ``prepare_commit``, ...)."""
    return txn_pb.TransactionState.Name(value)[len(_STATE_PREFIX) :].lower()  # type: ignore[arg-type]


def transaction_state_value(name: str) -> txn_pb.TransactionState.ValueType:
    """The wire ``TransactionState`` of a lower-case name.

    Raises:
        ValueError: ``name`` is not a state; the message lists them.
    """
    try:
        return txn_pb.TransactionState.Value(_STATE_PREFIX + name.upper())
    except ValueError:
        known = [transaction_state_name(v) for v in txn_pb.TransactionState.values() if v]
        raise ValueError(f"unknown transaction state {name!r}; use one of {', '.join(known)}") from None


def check_transaction_states(names: Iterable[str]) -> None:
    """Raise ValueError, before anything is sent, when a name is not a transaction state."""
    for name in names:
        transaction_state_value(name)


def topic_info(topic: cluster_pb.TopicMetadata) -> TopicInfo:
    """Convert a wire ``TopicMetadata``."""
    return TopicInfo(
        name=topic.name,
        topic_id=topic.topic_id,
        partitions=tuple(
            PartitionInfo(
                topic=topic.name,
                partition=p.partition,
                leader_node_id=p.leader_node_id,
                leader_address=p.leader_address,
                leader_epoch=p.leader_epoch,
                replicas=tuple(p.replica_node_ids),
                isr=tuple(p.isr_node_ids),
                partition_epoch=p.partition_epoch,
            )
            for p in sorted(topic.partitions, key=lambda p: p.partition)
        ),
        configs=dict(topic.configs),
    )


class _Client:
    """What every typed client shares: where channels come from and the deadline of one call."""

    def __init__(self, channel_for: ChannelSource, *, timeout_s: float = 30.0) -> None:
        self._channel_for = channel_for
        self.timeout_s = timeout_s

    def _timeout(self, timeout_s: float | None) -> float:
        return self.timeout_s if timeout_s is None else timeout_s


# --------------------------------------------------------------------------------------- ClusterService


_COORDINATOR_PB = {
    CoordinatorKind.TRANSACTION: cluster_pb.COORDINATOR_TYPE_TRANSACTION,
    CoordinatorKind.GROUP: cluster_pb.COORDINATOR_TYPE_GROUP,
}


class ClusterClient(_Client):
    """ClusterService: every oncelog process answers it, from the shared catalog."""

    def _stub(self, address: str) -> cluster_pb.ClusterServiceStub:
        return cluster_pb.ClusterServiceStub(self._channel_for(address))

    async def describe_cluster(
        self, address: str, *, include_expired: bool = False, timeout_s: float | None = None
    ) -> ClusterDescription:
        """The cluster id, its nodes (live ones unless ``include_expired``) and the shard counts."""
        response = await call(
            self._stub(address).DescribeCluster,
            cluster_pb.DescribeClusterRequest(include_expired=include_expired),
            timeout_s=self._timeout(timeout_s),
        )
        return ClusterDescription(
            cluster_id=response.cluster_id,
            nodes=tuple(
                NodeInfo(
                    node_id=n.node_id,
                    role=_ROLE_OF_PB.get(n.role, "unknown"),
                    address=n.address,
                    node_epoch=n.node_epoch,
                    lease_expires_at_ms=n.lease_expires_at_ms,
                )
                for n in response.nodes
            ),
            txn_coordinator_shards=response.txn_coordinator_shards,
            group_offsets_shards=response.group_offsets_shards,
        )

    async def metadata(
        self, address: str, topics: Iterable[str] = (), *, timeout_s: float | None = None
    ) -> list[TopicInfo]:
        """The named topics (every topic when none is named), sorted by name.

        Raises:
            UnknownTopicOrPartition: a named topic does not exist.
        """
        response = await call(
            self._stub(address).Metadata,
            cluster_pb.MetadataRequest(topics=list(topics)),
            timeout_s=self._timeout(timeout_s),
        )
        return sorted((topic_info(t) for t in response.topics), key=lambda t: t.name)

    async def find_coordinator(
        self, address: str, key: str, kind: CoordinatorKind, *, timeout_s: float | None = None
    ) -> str:
        """The address of the process owning ``key``'s shard (a transactional id or a group id).

        Raises:
            CoordinatorNotAvailable: no process owns the shard right now (retriable).
        """
        response = await call(
            self._stub(address).FindCoordinator,
            cluster_pb.FindCoordinatorRequest(key=key, type=_COORDINATOR_PB[kind]),
            timeout_s=self._timeout(timeout_s),
        )
        return response.address

    async def create_topics(
        self, address: str, topics: Sequence[NewTopic], *, validate_only: bool = False, timeout_s: float | None = None
    ) -> list[TopicInfo]:
        """Create topics (all or none); with ``validate_only`` only check them."""
        request = cluster_pb.CreateTopicsRequest(
            topics=[
                cluster_pb.TopicSpec(
                    name=t.name,
                    partitions=t.num_partitions,
                    configs=dict(t.configs),
                    replication_factor=t.replication_factor,
                )
                for t in topics
            ],
            validate_only=validate_only,
        )
        response = await call(self._stub(address).CreateTopics, request, timeout_s=self._timeout(timeout_s))
        return [topic_info(t) for t in response.topics]

    async def delete_topics(self, address: str, names: Iterable[str], *, timeout_s: float | None = None) -> list[str]:
        """Delete topics; returns the names deleted."""
        response = await call(
            self._stub(address).DeleteTopics,
            cluster_pb.DeleteTopicsRequest(topics=list(names)),
            timeout_s=self._timeout(timeout_s),
        )
        return list(response.deleted)

    async def create_partitions(
        self,
        address: str,
        new_counts: Mapping[str, int],
        *,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> list[TopicInfo]:
        """Grow topics to new total partition counts (all or nothing); returns the grown topics."""
        response = await call(
            self._stub(address).CreatePartitions,
            cluster_pb.CreatePartitionsRequest(
                topics=[cluster_pb.PartitionsSpec(topic=name, count=count) for name, count in new_counts.items()],
                validate_only=validate_only,
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return [topic_info(t) for t in response.topics]

    async def describe_configs(
        self, address: str, topics: Iterable[str] = (), *, timeout_s: float | None = None
    ) -> dict[str, list[ConfigEntry]]:
        """Every setting of the named topics (every topic when none is named), by topic."""
        response = await call(
            self._stub(address).DescribeConfigs,
            cluster_pb.DescribeConfigsRequest(topics=list(topics)),
            timeout_s=self._timeout(timeout_s),
        )
        return _config_entries(response.topics)

    async def incremental_alter_configs(
        self,
        address: str,
        changes: Mapping[str, Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout_s: float | None = None,
    ) -> dict[str, list[ConfigEntry]]:
        """Set (a string) or delete (None) topic settings, all or nothing; returns every setting afterwards."""
        set_op, delete_op = cluster_pb.ALTER_CONFIG_OP_TYPE_SET, cluster_pb.ALTER_CONFIG_OP_TYPE_DELETE
        request = cluster_pb.IncrementalAlterConfigsRequest(
            topics=[
                cluster_pb.TopicConfigAlteration(
                    topic=topic,
                    ops=[
                        cluster_pb.AlterConfigOp(
                            name=name, value=value or "", op=delete_op if value is None else set_op
                        )
                        for name, value in ops.items()
                    ],
                )
                for topic, ops in changes.items()
            ],
            validate_only=validate_only,
        )
        response = await call(self._stub(address).IncrementalAlterConfigs, request, timeout_s=self._timeout(timeout_s))
        return _config_entries(response.topics)


_CONFIG_SOURCES = {cluster_pb.CONFIG_SOURCE_TOPIC: "topic", cluster_pb.CONFIG_SOURCE_DEFAULT: "default"}


def _config_entries(topics: Iterable[cluster_pb.TopicConfigs]) -> dict[str, list[ConfigEntry]]:
    return {
        t.topic: [ConfigEntry(e.name, e.value, _CONFIG_SOURCES.get(e.source, "unknown")) for e in t.entries]
        for t in topics
    }


# --------------------------------------------------------------------------------------- PidAllocatorService


class ProducerIdBlock(NamedTuple):
    """An inclusive range of producer ids lent to one coordinator."""

    first_id: int
    last_id: int


class PidAllocatorClient(_Client):
    """PidAllocatorService: lends blocks of producer ids from one durable counter."""

    async def allocate_producer_id_block(
        self,
        address: str,
        requester_id: str,
        requester_epoch: int,
        *,
        block_size: int = 0,
        timeout_s: float | None = None,
    ) -> ProducerIdBlock:
        """The next block of ids for the requesting node (``block_size`` 0: the server's default).

        Raises:
            StaleRequesterEpoch: ``requester_epoch`` is older than the node's registration.
        """
        response = await call(
            pid_pb.PidAllocatorServiceStub(self._channel_for(address)).AllocateProducerIdBlock,
            pid_pb.AllocateProducerIdBlockRequest(
                requester_id=requester_id, requester_epoch=requester_epoch, block_size=block_size
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return ProducerIdBlock(response.first_id, response.last_id)


# --------------------------------------------------------------------------------------- TransactionCoordinatorService


class EndTxnResult(NamedTuple):
    """The answer to EndTxn."""

    producer: ProducerIdAndEpoch
    """The identity for the next transaction (a new epoch or id once the epoch space runs out)."""
    completed: bool
    """Every participant had its marker before the answer (only asked for with ``wait_for_completion``)."""


class TransactionCoordinatorClient(_Client):
    """TransactionCoordinatorService: producer ids, transaction state, markers (design/architecture.md §5)."""

    def _stub(self, address: str) -> txn_pb.TransactionCoordinatorServiceStub:
        return txn_pb.TransactionCoordinatorServiceStub(self._channel_for(address))

    async def init_producer_id(
        self,
        address: str,
        transactional_id: str = "",
        *,
        transaction_timeout_ms: int = 0,
        current: ProducerIdAndEpoch | None = None,
        timeout_s: float | None = None,
    ) -> ProducerIdAndEpoch:
        """A producer identity: a fresh id for an idempotent producer (empty ``transactional_id``), else the
        id's current one with a bumped epoch, fencing older instances. ``current`` asks for the bump of that
        identity (KIP-360)."""
        request = txn_pb.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms
        )
        if current is not None:
            request.producer.CopyFrom(_identity_pb(current))
        response = await call(self._stub(address).InitProducerId, request, timeout_s=self._timeout(timeout_s))
        return _identity(response.producer)

    async def add_partitions_to_txn(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        partitions: Iterable[TopicPartition],
        *,
        timeout_s: float | None = None,
    ) -> list[TopicPartition]:
        """Add partitions to the open transaction (opening it); returns the partitions added."""
        response = await call(
            self._stub(address).AddPartitionsToTxn,
            txn_pb.AddPartitionsToTxnRequest(
                transactional_id=transactional_id,
                producer=_identity_pb(producer),
                partitions=[_tp_pb(tp) for tp in partitions],
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return [_tp(tp) for tp in response.partitions]

    async def add_offsets_to_txn(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        group_id: str,
        *,
        timeout_s: float | None = None,
    ) -> str:
        """Add a group's offsets to the open transaction; returns the group coordinator's address."""
        response = await call(
            self._stub(address).AddOffsetsToTxn,
            txn_pb.AddOffsetsToTxnRequest(
                transactional_id=transactional_id, producer=_identity_pb(producer), group_id=group_id
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return response.group_coordinator_address

    async def end_txn(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        result: ControlType,
        *,
        wait_for_completion: bool = False,
        timeout_s: float | None = None,
    ) -> EndTxnResult:
        """Commit or abort the open transaction (design/read-after-commit.md for ``wait_for_completion``)."""
        response = await call(
            self._stub(address).EndTxn,
            txn_pb.EndTxnRequest(
                transactional_id=transactional_id,
                producer=_identity_pb(producer),
                result=_RESULT_PB[result],
                wait_for_completion=wait_for_completion,
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return EndTxnResult(_identity(response.producer), response.completed)

    async def describe_transactions(
        self, address: str, transactional_ids: Iterable[str], *, timeout_s: float | None = None
    ) -> list[TransactionDescription]:
        """The coordinator's view of each id.

        Raises:
            TransactionalIdNotFound: an id is unknown or expired.
        """
        response = await call(
            self._stub(address).DescribeTransactions,
            txn_pb.DescribeTransactionsRequest(transactional_ids=list(transactional_ids)),
            timeout_s=self._timeout(timeout_s),
        )
        return [
            TransactionDescription(
                transactional_id=d.transactional_id,
                state=transaction_state_name(d.state),
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                partitions=tuple(_tp(p) for p in d.partitions),
                groups=tuple(d.groups),
                coordinator_node_id=d.coordinator_node_id,
                coordinator_epoch=d.coordinator_epoch,
                last_update_time_ms=d.last_update_time_ms,
            )
            for d in response.transactions
        ]

    async def list_transactions(
        self,
        address: str,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        older_than_ms: int = 0,
        timeout_s: float | None = None,
    ) -> list[TransactionListing]:
        """The ids this coordinator owns, filtered by state names, producer ids and age of the open transaction.

        Raises:
            ValueError: a state name is unknown (before anything is sent).
        """
        request = txn_pb.ListTransactionsRequest(
            states=[transaction_state_value(s) for s in states],
            producer_ids=list(producer_ids),
            older_than_ms=older_than_ms,
        )
        response = await call(self._stub(address).ListTransactions, request, timeout_s=self._timeout(timeout_s))
        return [
            TransactionListing(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                state=transaction_state_name(t.state),
                transaction_start_time_ms=t.transaction_start_time_ms,
            )
            for t in response.transactions
        ]

    async def abort_transaction(
        self, address: str, transactional_id: str, *, timeout_s: float | None = None
    ) -> ProducerIdAndEpoch:
        """Abort the id's open transaction, fencing its producer; returns the fenced identity."""
        response = await call(
            self._stub(address).AbortTransaction,
            txn_pb.AbortTransactionRequest(transactional_id=transactional_id),
            timeout_s=self._timeout(timeout_s),
        )
        return _identity(response.producer)

    async def skip_txn_markers(
        self,
        address: str,
        transactional_id: str,
        partitions: Iterable[TopicPartition] = (),
        groups: Iterable[str] = (),
        *,
        timeout_s: float | None = None,
    ) -> tuple[list[TopicPartition], list[str]]:
        """Give up on the markers of a completing transaction for these participants; returns those skipped."""
        response = await call(
            self._stub(address).SkipTxnMarkers,
            txn_pb.SkipTxnMarkersRequest(
                transactional_id=transactional_id,
                partitions=[_tp_pb(TopicPartition(*tp)) for tp in partitions],
                groups=list(groups),
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return [_tp(tp) for tp in response.partitions], list(response.groups)


# ------------------------------------------------------------------------------------------- markers (two services)


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A transaction marker for the participants of one transaction on one server."""

    transactional_id: str
    producer: ProducerIdAndEpoch
    coordinator_epoch: int
    result: ControlType
    partitions: tuple[TopicPartition, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnMarkerResult:
    """Each participant's answer to a marker: None where it was written."""

    producer_id: int
    partition_errors: Mapping[TopicPartition, OncelogError | None]
    group_errors: Mapping[str, OncelogError | None]


def _markers_pb(markers: Iterable[TxnMarker]) -> list[common_pb.TxnMarker]:
    return [
        common_pb.TxnMarker(
            producer=_identity_pb(m.producer),
            coordinator_epoch=m.coordinator_epoch,
            result=_RESULT_PB[m.result],
            partitions=[_tp_pb(tp) for tp in m.partitions],
            groups=list(m.groups),
            transactional_id=m.transactional_id,
        )
        for m in markers
    ]


def _marker_results(results: Iterable[common_pb.TxnMarkerResult]) -> list[TxnMarkerResult]:
    return [
        TxnMarkerResult(
            producer_id=r.producer_id,
            partition_errors={_tp(e.topic_partition): _error(e) for e in r.partition_errors},
            group_errors={e.group_id: _error(e) for e in r.group_errors},
        )
        for r in results
    ]


# --------------------------------------------------------------------------------------- PartitionStorageService


class FetchPosition(NamedTuple):
    """Where to read one partition from."""

    topic_partition: TopicPartition
    offset: int
    leader_epoch: int = -1
    max_bytes: int = 1 << 20


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition's answer to Fetch: bytes of whole RecordBatch v2 batches, or ``error``."""

    topic_partition: TopicPartition
    error: OncelogError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted_transactions: tuple[AbortedTransaction, ...] = ()


class OffsetQuery(NamedTuple):
    """Which offset ListOffsets resolves: ``earliest``, ``latest``, or the first at or after a timestamp."""

    spec: str
    timestamp_ms: int = -1

    @classmethod
    def of(cls, spec: str | int) -> OffsetQuery:
        """``"earliest"``, ``"latest"`` or a Unix-millisecond timestamp.

        Raises:
            ValueError: anything else.
        """
        if spec in ("earliest", "latest"):
            return cls(str(spec))
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls("timestamp", spec)
        raise ValueError(f"offset spec {spec!r}: use 'earliest', 'latest' or a timestamp in ms")


_OFFSET_SPEC_PB = {
    "earliest": storage_pb.OFFSET_SPEC_EARLIEST,
    "latest": storage_pb.OFFSET_SPEC_LATEST,
    "timestamp": storage_pb.OFFSET_SPEC_TIMESTAMP,
}


class ListedOffset(NamedTuple):
    """A resolved offset, with the timestamp of its record (-1 for earliest and latest, and when none matched)."""

    offset: int
    timestamp_ms: int


class PartitionStorageClient(_Client):
    """PartitionStorageService on a partition's leader: fetch, offsets, producer state, transaction markers."""

    def _stub(self, address: str) -> storage_pb.PartitionStorageServiceStub:
        return storage_pb.PartitionStorageServiceStub(self._channel_for(address))

    async def produce(
        self,
        address: str,
        batches: Mapping[TopicPartition, bytes],
        *,
        transactional_id: str = "",
        acks_all: bool = True,
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, int | OncelogError]:
        """Append one encoded RecordBatch v2 per partition (unary Produce); each partition's base offset or error.

        The producer streams instead (ProduceStream, ``client/producer_rpc.py``); this is for tools and tests.
        """
        request = storage_pb.ProduceRequest(
            transactional_id=transactional_id,
            acks=storage_pb.ACKS_ALL if acks_all else storage_pb.ACKS_LEADER,
            partitions=[
                storage_pb.PartitionBatches(topic_partition=_tp_pb(tp), leader_epoch=-1, records=records)
                for tp, records in batches.items()
            ],
        )
        response = await call(self._stub(address).Produce, request, timeout_s=self._timeout(timeout_s))
        return {_tp(r.topic_partition): _error(r) or r.base_offset for r in response.results}

    async def fetch(
        self,
        address: str,
        positions: Iterable[FetchPosition],
        *,
        isolation: IsolationLevel,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 50 << 20,
        timeout_s: float | None = None,
    ) -> list[FetchedPartition]:
        """Read from each position; waits up to ``max_wait_ms`` for ``min_bytes``.

        The call's deadline is ``timeout_s`` plus the wait. A partition's failure is in its result.
        """
        request = storage_pb.FetchRequest(
            partitions=[
                storage_pb.FetchPartition(
                    topic_partition=_tp_pb(p.topic_partition),
                    fetch_offset=p.offset,
                    max_bytes=p.max_bytes,
                    leader_epoch=p.leader_epoch,
                )
                for p in positions
            ],
            isolation_level=_ISOLATION_PB[isolation],
            max_wait_ms=max_wait_ms,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
        )
        response = await call(
            self._stub(address).Fetch, request, timeout_s=self._timeout(timeout_s) + max_wait_ms / 1000
        )
        return [
            FetchedPartition(
                topic_partition=_tp(r.topic_partition),
                error=_error(r),
                high_watermark=r.high_watermark,
                last_stable_offset=r.last_stable_offset,
                log_start_offset=r.log_start_offset,
                records=r.records,
                aborted_transactions=tuple(
                    AbortedTransaction(a.producer_id, a.first_offset) for a in r.aborted_transactions
                ),
            )
            for r in response.results
        ]

    async def list_offsets(
        self,
        address: str,
        queries: Mapping[TopicPartition, OffsetQuery],
        *,
        isolation: IsolationLevel,
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, ListedOffset | OncelogError]:
        """Resolve an offset per partition (``latest`` is the last stable offset at READ_COMMITTED)."""
        request = storage_pb.ListOffsetsRequest(
            partitions=[
                storage_pb.ListOffsetsPartition(
                    topic_partition=_tp_pb(tp), spec=_OFFSET_SPEC_PB[q.spec], timestamp_ms=max(q.timestamp_ms, 0)
                )
                for tp, q in queries.items()
            ],
            isolation_level=_ISOLATION_PB[isolation],
        )
        response = await call(self._stub(address).ListOffsets, request, timeout_s=self._timeout(timeout_s))
        return {_tp(r.topic_partition): _error(r) or ListedOffset(r.offset, r.timestamp_ms) for r in response.results}

    async def describe_producers(
        self, address: str, partitions: Iterable[TopicPartition], *, timeout_s: float | None = None
    ) -> dict[TopicPartition, list[ProducerStateDescription] | OncelogError]:
        """The producer state of each partition (KIP-664)."""
        response = await call(
            self._stub(address).DescribeProducers,
            storage_pb.DescribeProducersRequest(partitions=[_tp_pb(tp) for tp in partitions]),
            timeout_s=self._timeout(timeout_s),
        )
        return {
            _tp(item.topic_partition): _error(item)
            or [
                ProducerStateDescription(
                    producer_id=p.producer.producer_id,
                    producer_epoch=p.producer.producer_epoch,
                    last_sequence=p.last_sequence,
                    last_timestamp_ms=p.last_timestamp_ms,
                    coordinator_epoch=p.coordinator_epoch,
                    current_transaction_start_offset=(
                        None if p.current_txn_start_offset < 0 else p.current_txn_start_offset
                    ),
                )
                for p in item.producers
            ]
            for item in response.partitions
        }

    async def write_txn_markers(
        self, address: str, markers: Iterable[TxnMarker], *, timeout_s: float | None = None
    ) -> list[TxnMarkerResult]:
        """Write COMMIT/ABORT markers to the partitions this node leads; one result per marker."""
        response = await call(
            self._stub(address).WriteTxnMarkers,
            storage_pb.WriteTxnMarkersRequest(markers=_markers_pb(markers)),
            timeout_s=self._timeout(timeout_s),
        )
        return _marker_results(response.results)


# --------------------------------------------------------------------------------------- GroupOffsetsService


@dataclass(frozen=True, slots=True)
class GroupMember:
    """The member a commit comes from; the defaults skip the generation and member checks."""

    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str = ""


def _member_pb(member: GroupMember | None) -> offsets_pb.GroupMember | None:
    if member is None:
        return None
    return offsets_pb.GroupMember(
        generation_id=member.generation_id, member_id=member.member_id, group_instance_id=member.group_instance_id
    )


def _committed(offsets: Iterable[common_pb.PartitionOffset]) -> dict[TopicPartition, OffsetAndMetadata | None]:
    return {
        _tp(o.topic_partition): (
            OffsetAndMetadata(o.offset, o.metadata, None if o.leader_epoch < 0 else o.leader_epoch)
            if o.offset >= 0
            else None
        )
        for o in offsets
    }


class GroupOffsetsClient(_Client):
    """GroupOffsetsService on the process owning a group's shard: committed offsets, inside and outside
    transactions (design/architecture.md §6)."""

    def _stub(self, address: str) -> offsets_pb.GroupOffsetsServiceStub:
        return offsets_pb.GroupOffsetsServiceStub(self._channel_for(address))

    async def commit_offsets(
        self,
        address: str,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        member: GroupMember | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Commit offsets outside any transaction."""
        await call(
            self._stub(address).CommitOffsets,
            offsets_pb.CommitOffsetsRequest(
                group_id=group_id,
                member=_member_pb(member),
                offsets=_offsets_pb(offsets),
            ),
            timeout_s=self._timeout(timeout_s),
        )

    async def fetch_offsets(
        self,
        address: str,
        group_id: str,
        partitions: Iterable[TopicPartition] = (),
        *,
        require_stable: bool = False,
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offsets (None where nothing is committed); every partition of the group when none is
        named. ``require_stable`` answers UNSTABLE_OFFSET_COMMIT while a transactional commit is pending."""
        response = await call(
            self._stub(address).FetchOffsets,
            offsets_pb.FetchOffsetsRequest(
                group_id=group_id, partitions=[_tp_pb(tp) for tp in partitions], require_stable=require_stable
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return _committed(response.offsets)

    async def txn_offset_commit(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        member: GroupMember | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Stage offsets in the open transaction; they become visible with its COMMIT marker."""
        await call(
            self._stub(address).TxnOffsetCommit,
            offsets_pb.TxnOffsetCommitRequest(
                transactional_id=transactional_id,
                producer=_identity_pb(producer),
                group_id=group_id,
                member=_member_pb(member),
                offsets=_offsets_pb(offsets),
            ),
            timeout_s=self._timeout(timeout_s),
        )

    async def consumer_group_heartbeat(
        self,
        address: str,
        request: offsets_pb.ConsumerGroupHeartbeatRequest,
        *,
        timeout_s: float | None = None,
    ) -> offsets_pb.ConsumerGroupHeartbeatResponse:
        """One member's heartbeat (KIP-848). Takes and returns the wire messages, which
        :mod:`oncelog.client.group_membership` builds and reads, until it moves onto domain values."""
        return await call(self._stub(address).ConsumerGroupHeartbeat, request, timeout_s=self._timeout(timeout_s))

    async def list_consumer_groups(self, address: str, *, timeout_s: float | None = None) -> list[ConsumerGroupListing]:
        """Every consumer group with its state (any group-offsets replica answers from SQL)."""
        response = await call(
            self._stub(address).ListConsumerGroups,
            offsets_pb.ListConsumerGroupsRequest(),
            timeout_s=self._timeout(timeout_s),
        )
        return [listing(g) for g in response.groups]

    async def describe_consumer_groups(
        self, address: str, group_ids: Iterable[str], *, timeout_s: float | None = None
    ) -> dict[str, ConsumerGroupDescription | OncelogError]:
        """Each group's state, epochs, members and assignments, or its error (GroupIdNotFound)."""
        response = await call(
            self._stub(address).DescribeConsumerGroups,
            offsets_pb.DescribeConsumerGroupsRequest(group_ids=list(group_ids)),
            timeout_s=self._timeout(timeout_s),
        )
        return {g.group_id: _error(g) or description(g) for g in response.groups}

    async def delete_consumer_group(self, address: str, group_id: str, *, timeout_s: float | None = None) -> None:
        """Delete a group that has no members, with its committed offsets."""
        await call(
            self._stub(address).DeleteConsumerGroup,
            offsets_pb.DeleteConsumerGroupRequest(group_id=group_id),
            timeout_s=self._timeout(timeout_s),
        )

    async def write_txn_markers(
        self, address: str, markers: Iterable[TxnMarker], *, timeout_s: float | None = None
    ) -> list[TxnMarkerResult]:
        """Apply COMMIT/ABORT markers to the pending offsets of the groups this process owns."""
        response = await call(
            self._stub(address).WriteTxnMarkers,
            offsets_pb.WriteTxnMarkersRequest(markers=_markers_pb(markers)),
            timeout_s=self._timeout(timeout_s),
        )
        return _marker_results(response.results)
