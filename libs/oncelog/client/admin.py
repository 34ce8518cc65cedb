"""Administration of a cluster: topics, producers, transactions and group offsets (Kafka's ``Admin``).

Every call is synchronous and bounded by ``timeout`` (default ``request_timeout_ms``); retriable errors
(a moved coordinator, an unreachable node, a shard still loading) are retried within that bound, others
are raised as the domain error the server returned. The hanging-transaction tooling of KIP-664
(design/kafka-semantics.md §5.4) is here: :meth:`AdminClient.describe_producers` shows each partition's open
transactions,
:meth:`AdminClient.list_transactions` finds old ones, :meth:`AdminClient.abort_transaction` ends one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import grpc

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.errors import IllegalStateError, Refresh, RetriableError, classify
from oncelog.client.group_admin import ConsumerGroupDescription, ConsumerGroupListing, description, listing
from oncelog.client.metadata import ClusterDescription, ClusterMetadata, TopicInfo, topic_info
from oncelog.client.records import OffsetAndMetadata, TopicPartition
from oncelog.client.transport import Backoff, BootstrapError, Channels, Deadline, IoThread, call, resolve_bootstrap
from oncelog.errors import CoordinatorNotAvailable, InvalidRequest, OncelogError, Reason
from oncelog.rpc.errors import from_error_info
from oncelog.vocabulary import Role

__all__ = [
    "AdminClient",
    "ConfigEntry",
    "NewTopic",
    "OffsetSpec",
    "ProducerStateDescription",
    "TransactionDescription",
    "TransactionListing",
]

T = TypeVar("T")

_MAX_PRODUCER_EPOCH = 32_767
_TRANSACTION = cluster_pb.COORDINATOR_TYPE_TRANSACTION
_GROUP = cluster_pb.COORDINATOR_TYPE_GROUP
_LISTING_KEY = "oncelog-consumer-group-listing"
"""Key whose group coordinator answers ListConsumerGroups (every replica reads the same SQL)."""
_STATE_PREFIX = "TRANSACTION_STATE_"
OffsetSpec = str | int
"""``"earliest"``, ``"latest"``, or a Unix-millisecond timestamp (first offset at or after it)."""


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create.

    Attributes:
        name: ``[a-zA-Z0-9._-]{1,249}``.
        num_partitions: at least 1.
        configs: topic settings: ``flush`` (``sync``/``async``), ``max_message_bytes``, ``retention_ms``,
            ``retention_bytes``, ``segment_bytes``, ``segment_ms``, ``min_insync_replicas`` (in-sync copies an
            acks=all write needs; at most the replication factor).
        replication_factor: copies of each partition, 1 to the number of live storage nodes; None uses the
            cluster's ``default_replication_factor``.
    """

    name: str
    num_partitions: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int | None = None


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One topic setting (Kafka's ``ConfigEntry``).

    Attributes:
        name: oncelog's name (``retention_ms``; Kafka's dotted names are accepted as input only).
        value: the effective value, as a string.
        source: ``"topic"`` when set on the topic, ``"default"`` otherwise.
    """

    name: str
    value: str
    source: str


_CONFIG_SOURCES = {cluster_pb.CONFIG_SOURCE_TOPIC: "topic", cluster_pb.CONFIG_SOURCE_DEFAULT: "default"}


def _config_entries(topics: Iterable[cluster_pb.TopicConfigs]) -> dict[str, list[ConfigEntry]]:
    return {
        t.topic: [ConfigEntry(e.name, e.value, _CONFIG_SOURCES.get(e.source, "unknown")) for e in t.entries]
        for t in topics
    }


@dataclass(frozen=True, slots=True)
class ProducerStateDescription:
    """One producer id's state on a partition (Kafka's ``ProducerState``, KIP-664).

    Attributes:
        producer_id: the producer id.
        producer_epoch: its latest epoch on the partition.
        last_sequence: last sequence written, -1 if none.
        last_timestamp_ms: time of its last write or marker.
        coordinator_epoch: epoch of the coordinator that wrote its last marker, -1 if none.
        current_transaction_start_offset: first offset of its open transaction, None when none is open.
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_transaction_start_offset: int | None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One row of :meth:`AdminClient.list_transactions`.

    Attributes:
        transactional_id: the producer's stable id.
        producer_id: its current producer id.
        state: ``empty``, ``ongoing``, ``prepare_commit``, ``prepare_abort``, ``complete_commit``,
            ``complete_abort``, ``prepare_epoch_fence`` or ``dead``.
        transaction_start_time_ms: when the open transaction started, -1 if none.
    """

    transactional_id: str
    producer_id: int
    state: str
    transaction_start_time_ms: int


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """The coordinator's view of a transactional id (Kafka's ``TransactionDescription``).

    Attributes:
        transactional_id: the producer's stable id.
        state: as in :class:`TransactionListing`.
        producer_id: current producer id.
        producer_epoch: current epoch.
        transaction_timeout_ms: the timeout the producer asked for.
        transaction_start_time_ms: when the open transaction started, -1 if none.
        partitions: partitions of the open or completing transaction.
        groups: consumer groups whose offsets it commits.
        coordinator_node_id: the coordinator owning the id's shard.
        coordinator_epoch: that coordinator's epoch on the shard.
        last_update_time_ms: when the state last changed.
    """

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    partitions: tuple[TopicPartition, ...]
    groups: tuple[str, ...]
    coordinator_node_id: str
    coordinator_epoch: int
    last_update_time_ms: int


def _state_name(value: int) -> str:
    return txn_pb.TransactionState.Name(value)[len(_STATE_PREFIX) :].lower()  # type: ignore[arg-type]


def _state_value(name: str) -> txn_pb.TransactionState.ValueType:
    try:
        return txn_pb.TransactionState.Value(_STATE_PREFIX + name.upper())
    except ValueError:
        known = [_state_name(v) for v in txn_pb.TransactionState.values() if v]
        raise ValueError(f"unknown transaction state {name!r}; use one of {', '.join(known)}") from None


def _tp_pb(tp: TopicPartition) -> common_pb.TopicPartition:
    return common_pb.TopicPartition(topic=tp.topic, partition=tp.partition)


class AdminClient:
    """Manage topics and inspect producers, transactions and group offsets.

    Example:
        >>> from oncelog.client import AdminClient, NewTopic
        >>> with AdminClient() as admin:                        # bootstrap from .oncelog/cluster.json
        ...     admin.create_topics([NewTopic("orders", num_partitions=3)])
        ...     admin.list_transactions(states=["ongoing"], older_than_ms=60_000)

    Args:
        bootstrap: any cluster address(es); None reads ``.oncelog/cluster.json``.
        request_timeout_ms: default bound of each call, retries included.
        retry_backoff_ms: first pause before a retry.
        client_id: a name for logs and thread names.
        credentials: TLS channel credentials; None for plaintext.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        *,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        client_id: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        addresses = resolve_bootstrap(bootstrap)
        self._timeout_s = request_timeout_ms / 1000
        self._retry_backoff_ms = retry_backoff_ms
        self._closed = False
        self._io = IoThread(f"oncelog-{client_id or 'admin-' + uuid.uuid4().hex[:8]}")
        self._channels = Channels(credentials=credentials)
        self._metadata = ClusterMetadata(
            self._channels, addresses, request_timeout_s=self._timeout_s, retry_backoff_ms=retry_backoff_ms
        )

    # -------------------------------------------------------------------------------- plumbing

    def _run(self, make: Callable[[Deadline], Awaitable[T]], timeout: float | None) -> T:
        if self._closed:
            raise IllegalStateError("the admin client is closed; create a new AdminClient")
        deadline = Deadline(self._timeout_s if timeout is None else timeout)
        return self._io.run(self._retrying(make, deadline))  # type: ignore[arg-type]

    async def _retrying(self, make: Callable[[Deadline], Awaitable[T]], deadline: Deadline) -> T:
        backoff = Backoff(self._retry_backoff_ms, 1_000)
        while True:
            try:
                return await make(deadline)
            except OncelogError as err:
                # the catalog is authoritative about topics: an unknown one will not appear by waiting
                if not err.retriable or err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
                if deadline.expired:
                    if isinstance(err, BootstrapError):
                        raise  # no server answered at all: the address or the cluster is the problem, not time
                    raise RetriableError(f"did not complete in time: {err.message}", cause=err) from err
                await asyncio.sleep(deadline.cap(backoff.next_s()))

    def _rpc_timeout(self, deadline: Deadline) -> float:
        return deadline.cap(self._timeout_s)

    async def _txn_coordinators(self) -> list[str]:
        addresses = (await self._metadata.describe_cluster()).addresses(Role.TXN_COORDINATOR)
        if not addresses:
            raise CoordinatorNotAvailable("no txn-coordinator is live")
        return addresses

    async def _leader_call(self, partitions: Iterable[TopicPartition], pending: Awaitable[T]) -> T:
        """Await a call to the storage node leading ``partitions``; a failure that may mean it moved marks
        them stale, so the retry looks the leader up again."""
        try:
            return await pending
        except OncelogError as err:
            self._metadata.note_failure({tp.topic for tp in partitions}, err)
            raise

    async def _coordinator_call(
        self, key: str, kind: cluster_pb.CoordinatorType.ValueType, rpc: Callable[[str], Awaitable[T]]
    ) -> T:
        address = await self._metadata.find_coordinator(key, kind)
        try:
            return await rpc(address)
        except OncelogError as err:
            if classify(err, source="coordinator").refresh is not Refresh.NONE or err.reason is Reason.NOT_COORDINATOR:
                self._metadata.invalidate_coordinator(key, kind)
            raise

    # -------------------------------------------------------------------------------- cluster and topics

    def describe_cluster(self, *, include_expired: bool = False, timeout: float | None = None) -> ClusterDescription:
        """The cluster id, its live nodes by role and the fixed shard counts."""
        return self._run(lambda _d: self._metadata.describe_cluster(include_expired=include_expired), timeout)

    def create_topics(
        self, topics: Iterable[NewTopic | str], *, validate_only: bool = False, timeout: float | None = None
    ) -> list[TopicInfo]:
        """Create topics (a bare name means one partition, default configs).

        Raises:
            TopicAlreadyExists: a topic of that name exists (nothing was created).
            InvalidTopic / InvalidPartitions / InvalidConfig: a spec is not acceptable (every problem is named).
            InvalidReplicationFactor: a replication factor below 1 or above the live storage nodes.
        """
        specs = [NewTopic(t) if isinstance(t, str) else t for t in topics]
        request = cluster_pb.CreateTopicsRequest(
            topics=[
                cluster_pb.TopicSpec(
                    name=s.name,
                    partitions=s.num_partitions,
                    configs=dict(s.configs),
                    replication_factor=s.replication_factor,
                )
                for s in specs
            ],
            validate_only=validate_only,
        )

        async def create(deadline: Deadline) -> list[TopicInfo]:
            response = await self._metadata.cluster_call(
                lambda stub: call(stub.CreateTopics, request, timeout_s=self._rpc_timeout(deadline))
            )
            return [topic_info(t) for t in response.topics]

        return self._run(create, timeout)

    def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> list[str]:
        """Delete topics; storage nodes drop their data afterwards. Returns the names deleted.

        Raises:
            UnknownTopicOrPartition: a topic does not exist.
        """
        request = cluster_pb.DeleteTopicsRequest(topics=list(names))

        async def delete(deadline: Deadline) -> list[str]:
            response = await self._metadata.cluster_call(
                lambda stub: call(stub.DeleteTopics, request, timeout_s=self._rpc_timeout(deadline))
            )
            return list(response.deleted)

        return self._run(delete, timeout)

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, TopicInfo]:
        """Partitions, leaders and configs of ``names`` (default every topic), by name.

        Raises:
            UnknownTopicOrPartition: a named topic does not exist.
        """
        request = cluster_pb.MetadataRequest(topics=list(names or ()))

        async def describe(deadline: Deadline) -> dict[str, TopicInfo]:
            response = await self._metadata.cluster_call(
                lambda stub: call(stub.Metadata, request, timeout_s=self._rpc_timeout(deadline))
            )
            return {t.name: topic_info(t) for t in sorted(response.topics, key=lambda t: t.name)}

        return self._run(describe, timeout)

    def create_partitions(
        self, new_counts: Mapping[str, int], *, validate_only: bool = False, timeout: float | None = None
    ) -> dict[str, TopicInfo]:
        """Grow topics to new total partition counts (Kafka's ``createPartitions``); all or nothing.

        Existing partitions keep their data and leaders; new ones get the topic's replication factor and are
        placed like at creation. Producers and consumers see them at their next metadata refresh
        (``metadata_max_age_ms``, or at once for a record sent to a partition they did not know).

        Raises:
            InvalidPartitions: a count is not above the current one (partitions are never removed).
            InvalidReplicationFactor: fewer live storage nodes than the topic's replication factor.
            UnknownTopicOrPartition: a topic does not exist.
        """
        request = cluster_pb.CreatePartitionsRequest(
            topics=[cluster_pb.PartitionsSpec(topic=name, count=count) for name, count in new_counts.items()],
            validate_only=validate_only,
        )

        async def grow(deadline: Deadline) -> dict[str, TopicInfo]:
            response = await self._metadata.cluster_call(
                lambda stub: call(stub.CreatePartitions, request, timeout_s=self._rpc_timeout(deadline))
            )
            return {t.name: topic_info(t) for t in response.topics}

        return self._run(grow, timeout)

    def describe_configs(
        self, topics: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, list[ConfigEntry]]:
        """Every setting of ``topics`` (default every topic) with its value and source, by topic.

        Raises:
            UnknownTopicOrPartition: a named topic does not exist.
        """
        request = cluster_pb.DescribeConfigsRequest(topics=list(topics or ()))

        async def describe(deadline: Deadline) -> dict[str, list[ConfigEntry]]:
            response = await self._metadata.cluster_call(
                lambda stub: call(stub.DescribeConfigs, request, timeout_s=self._rpc_timeout(deadline))
            )
            return _config_entries(response.topics)

        return self._run(describe, timeout)

    def incremental_alter_configs(
        self,
        changes: Mapping[str, Mapping[str, str | None]],
        *,
        validate_only: bool = False,
        timeout: float | None = None,
    ) -> dict[str, list[ConfigEntry]]:
        """Set or delete topic settings (Kafka's ``incrementalAlterConfigs``); all or nothing.

        ``changes`` maps a topic to ``{name: value}``: a string sets the setting, None deletes the topic's value
        so the default applies again. Names may be Kafka's dotted ones (``retention.ms``). Storage nodes apply
        the new settings (retention, segment rolling, max message size, flush, min in-sync replicas) at their
        next catalog refresh. Returns every setting of each topic after the change.

        Raises:
            InvalidConfig: an unknown name or a bad value (every problem is named); nothing was changed.
            UnknownTopicOrPartition: a topic does not exist.
        """
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

        async def alter(deadline: Deadline) -> dict[str, list[ConfigEntry]]:
            response = await self._metadata.cluster_call(
                lambda stub: call(stub.IncrementalAlterConfigs, request, timeout_s=self._rpc_timeout(deadline))
            )
            return _config_entries(response.topics)

        return self._run(alter, timeout)

    def list_topics(self, *, timeout: float | None = None) -> list[str]:
        """Names of every topic, sorted."""
        return sorted(self.describe_topics(timeout=timeout))

    def list_offsets(
        self,
        specs: Mapping[TopicPartition, OffsetSpec],
        *,
        isolation_level: str = "read_uncommitted",
        timeout: float | None = None,
    ) -> dict[TopicPartition, tuple[int, int]]:
        """Resolve offsets per partition: ``"earliest"``, ``"latest"`` (the last stable offset at
        read_committed, else the high watermark) or a timestamp. Returns ``(offset, timestamp_ms)`` pairs;
        -1 when no record matches a timestamp."""
        isolation = {
            "read_uncommitted": storage_pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
            "read_committed": storage_pb.ISOLATION_LEVEL_READ_COMMITTED,
        }.get(isolation_level)
        if isolation is None:
            raise ValueError(f"isolation_level={isolation_level!r}; use 'read_committed' or 'read_uncommitted'")
        normalized = {TopicPartition(*tp): spec for tp, spec in specs.items()}

        def spec_pb(tp: TopicPartition, spec: OffsetSpec) -> storage_pb.ListOffsetsPartition:
            if spec == "earliest":
                return storage_pb.ListOffsetsPartition(topic_partition=_tp_pb(tp), spec=storage_pb.OFFSET_SPEC_EARLIEST)
            if spec == "latest":
                return storage_pb.ListOffsetsPartition(topic_partition=_tp_pb(tp), spec=storage_pb.OFFSET_SPEC_LATEST)
            if isinstance(spec, int) and not isinstance(spec, bool):
                return storage_pb.ListOffsetsPartition(
                    topic_partition=_tp_pb(tp), spec=storage_pb.OFFSET_SPEC_TIMESTAMP, timestamp_ms=spec
                )
            raise ValueError(f"offset spec {spec!r} for {tp}: use 'earliest', 'latest' or a timestamp in ms")

        requests = {tp: spec_pb(tp, spec) for tp, spec in normalized.items()}

        async def resolve(deadline: Deadline) -> dict[TopicPartition, tuple[int, int]]:
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in requests:
                leader = await self._metadata.wait_for_leader(tp, deadline)
                by_leader.setdefault(leader.leader_address, []).append(tp)
            found: dict[TopicPartition, tuple[int, int]] = {}
            for address, tps in by_leader.items():
                request = storage_pb.ListOffsetsRequest(
                    partitions=[requests[tp] for tp in tps], isolation_level=isolation
                )
                response = await self._leader_call(
                    tps,
                    call(self._channels.storage(address).ListOffsets, request, timeout_s=self._rpc_timeout(deadline)),
                )
                for result in response.results:
                    tp = TopicPartition(result.topic_partition.topic, result.topic_partition.partition)
                    if result.HasField("error"):
                        failure = from_error_info(result.error)
                        self._metadata.note_failure([tp.topic], failure)
                        raise failure
                    found[tp] = (result.offset, result.timestamp_ms)
            return found

        return self._run(resolve, timeout)

    # -------------------------------------------------------------------------------- producers and transactions

    def describe_producers(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], *, timeout: float | None = None
    ) -> dict[TopicPartition, list[ProducerStateDescription]]:
        """Producer state of each partition, from its leader: who wrote, with which epoch, and which
        transactions are open there (a hanging one keeps ``current_transaction_start_offset`` set)."""
        wanted = [TopicPartition(*tp) for tp in partitions]

        async def describe(deadline: Deadline) -> dict[TopicPartition, list[ProducerStateDescription]]:
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in wanted:
                leader = await self._metadata.wait_for_leader(tp, deadline)
                by_leader.setdefault(leader.leader_address, []).append(tp)
            found: dict[TopicPartition, list[ProducerStateDescription]] = {}
            for address, tps in by_leader.items():
                request = storage_pb.DescribeProducersRequest(partitions=[_tp_pb(tp) for tp in tps])
                stub = self._channels.storage(address)
                response = await self._leader_call(
                    tps, call(stub.DescribeProducers, request, timeout_s=self._rpc_timeout(deadline))
                )
                for item in response.partitions:
                    tp = TopicPartition(item.topic_partition.topic, item.topic_partition.partition)
                    if item.HasField("error"):
                        failure = from_error_info(item.error)
                        self._metadata.note_failure([tp.topic], failure)
                        raise failure
                    found[tp] = [
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
            return {tp: found[tp] for tp in wanted}

        return self._run(describe, timeout)

    def list_transactions(
        self,
        *,
        states: Iterable[str] | None = None,
        producer_ids: Iterable[int] | None = None,
        older_than_ms: int | None = None,
        timeout: float | None = None,
    ) -> list[TransactionListing]:
        """Transactional ids known to every coordinator, filtered (KIP-664).

        Args:
            states: keep these states only (for example ``["ongoing"]``).
            producer_ids: keep these producer ids only.
            older_than_ms: keep open transactions started more than this long ago.
        """
        request = txn_pb.ListTransactionsRequest(
            states=[_state_value(s) for s in states or ()],
            producer_ids=list(producer_ids or ()),
            older_than_ms=older_than_ms or 0,
        )

        async def listing(deadline: Deadline) -> list[TransactionListing]:
            found: dict[str, TransactionListing] = {}
            for address in await self._txn_coordinators():
                response = await call(
                    self._channels.txn(address).ListTransactions, request, timeout_s=self._rpc_timeout(deadline)
                )
                for t in response.transactions:
                    found[t.transactional_id] = TransactionListing(
                        transactional_id=t.transactional_id,
                        producer_id=t.producer_id,
                        state=_state_name(t.state),
                        transaction_start_time_ms=t.transaction_start_time_ms,
                    )
            return [found[k] for k in sorted(found)]

        return self._run(listing, timeout)

    def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout: float | None = None
    ) -> dict[str, TransactionDescription]:
        """The coordinator's view of each transactional id.

        Raises:
            TransactionalIdNotFound: an id is unknown or expired.
        """
        ids = list(dict.fromkeys(transactional_ids))

        async def describe_one(transactional_id: str, deadline: Deadline) -> TransactionDescription:
            request = txn_pb.DescribeTransactionsRequest(transactional_ids=[transactional_id])
            response = await self._coordinator_call(
                transactional_id,
                _TRANSACTION,
                lambda address: call(
                    self._channels.txn(address).DescribeTransactions, request, timeout_s=self._rpc_timeout(deadline)
                ),
            )
            d = response.transactions[0]
            return TransactionDescription(
                transactional_id=d.transactional_id,
                state=_state_name(d.state),
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                partitions=tuple(TopicPartition(p.topic, p.partition) for p in d.partitions),
                groups=tuple(d.groups),
                coordinator_node_id=d.coordinator_node_id,
                coordinator_epoch=d.coordinator_epoch,
                last_update_time_ms=d.last_update_time_ms,
            )

        async def describe(deadline: Deadline) -> dict[str, TransactionDescription]:
            return {tid: await describe_one(tid, deadline) for tid in ids}

        return self._run(describe, timeout)

    def abort_transaction(self, transactional_id: str, *, timeout: float | None = None) -> tuple[int, int]:
        """Abort the open transaction of ``transactional_id`` (a hanging one, KIP-664).

        The producer instance that opened it is fenced: its later writes and its commit are rejected.
        Returns the fenced ``(producer_id, producer_epoch)``.

        Raises:
            TransactionalIdNotFound: the id is unknown.
            InvalidTxnState: no transaction is open.
        """
        request = txn_pb.AbortTransactionRequest(transactional_id=transactional_id)

        async def abort(deadline: Deadline) -> tuple[int, int]:
            response = await self._coordinator_call(
                transactional_id,
                _TRANSACTION,
                lambda address: call(
                    self._channels.txn(address).AbortTransaction, request, timeout_s=self._rpc_timeout(deadline)
                ),
            )
            return response.producer.producer_id, response.producer.producer_epoch

        return self._run(abort, timeout)

    def abort_transaction_on_partition(
        self,
        partition: TopicPartition | tuple[str, int],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        timeout: float | None = None,
    ) -> None:
        """Abort one producer's open transaction on one partition by writing its ABORT marker there (KIP-664's
        ``abortTransaction(AbortTransactionSpec)``), for a hanging transaction its coordinator does not know.

        ``producer_epoch`` and ``coordinator_epoch`` are the partition's view (:meth:`describe_producers`). The
        marker carries the next epoch, as the coordinator's own markers do (KIP-890): the partition accepts it and
        fences that producer instance there. The last stable offset moves past the transaction and read_committed
        consumers never see its records.

        Raises:
            InvalidRequest: the producer epoch is already the largest one (32767).
            InvalidProducerEpoch / TransactionCoordinatorFenced: the partition has newer state for the producer.
        """
        tp = TopicPartition(*partition)
        marker = common_pb.TxnMarker(
            producer=common_pb.ProducerIdentity(producer_id=producer_id, producer_epoch=producer_epoch + 1),
            coordinator_epoch=max(coordinator_epoch, 0),
            result=common_pb.TRANSACTION_RESULT_ABORT,
            partitions=[_tp_pb(tp)],
        )

        async def abort(deadline: Deadline) -> None:
            leader = await self._metadata.wait_for_leader(tp, deadline)
            request = storage_pb.WriteTxnMarkersRequest(markers=[marker])
            response = await self._leader_call(
                [tp],
                call(
                    self._channels.storage(leader.leader_address).WriteTxnMarkers,
                    request,
                    timeout_s=self._rpc_timeout(deadline),
                ),
            )
            for result in response.results:
                for item in result.partition_errors:
                    if item.HasField("error"):
                        failure = from_error_info(item.error)
                        self._metadata.note_failure([tp.topic], failure)
                        raise failure

        if producer_epoch >= _MAX_PRODUCER_EPOCH:
            raise InvalidRequest(
                f"producer {producer_id} is at epoch {producer_epoch}, the largest: no marker epoch can fence it; "
                "this transaction cannot be aborted by a marker"
            )
        self._run(abort, timeout)

    def skip_transaction_markers(
        self,
        transactional_id: str,
        partitions: Iterable[TopicPartition] = (),
        groups: Iterable[str] = (),
        *,
        timeout: float | None = None,
    ) -> tuple[list[TopicPartition], list[str]]:
        """Give up on the markers of a completing transaction that these participants will never accept.

        An operator's last resort for a transaction stuck in PrepareCommit/PrepareAbort because one participant
        refuses its marker for good: the named participants never get that transaction's marker (a skipped
        partition keeps the transaction open there, so its last stable offset stays held at its first record;
        a skipped group never sees the offsets), and the transaction completes for the others. Returns the
        partitions and groups that were still waiting and are now skipped; those that had acknowledged already
        are left out.

        Raises:
            TransactionalIdNotFound: the id is unknown.
            InvalidTxnState: the transaction is not completing, or a name is not one of its participants.
        """
        request = txn_pb.SkipTxnMarkersRequest(
            transactional_id=transactional_id,
            partitions=[_tp_pb(TopicPartition(*tp)) for tp in partitions],
            groups=list(groups),
        )

        async def skip(deadline: Deadline) -> tuple[list[TopicPartition], list[str]]:
            response = await self._coordinator_call(
                transactional_id,
                _TRANSACTION,
                lambda address: call(
                    self._channels.txn(address).SkipTxnMarkers, request, timeout_s=self._rpc_timeout(deadline)
                ),
            )
            return [TopicPartition(tp.topic, tp.partition) for tp in response.partitions], list(response.groups)

        return self._run(skip, timeout)

    # -------------------------------------------------------------------------------- group offsets

    def list_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        require_stable: bool = False,
        timeout: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        """The committed offsets of ``group_id`` (default every partition it has one for).

        With ``require_stable`` the call waits while a transactional commit is pending (KIP-447).
        """
        request = offsets_pb.FetchOffsetsRequest(
            group_id=group_id,
            partitions=[_tp_pb(TopicPartition(*tp)) for tp in partitions or ()],
            require_stable=require_stable,
        )

        async def fetch(deadline: Deadline) -> dict[TopicPartition, OffsetAndMetadata]:
            response = await self._coordinator_call(
                group_id,
                _GROUP,
                lambda address: call(
                    self._channels.offsets(address).FetchOffsets, request, timeout_s=self._rpc_timeout(deadline)
                ),
            )
            return {
                TopicPartition(o.topic_partition.topic, o.topic_partition.partition): OffsetAndMetadata(
                    o.offset, o.metadata, None if o.leader_epoch < 0 else o.leader_epoch
                )
                for o in response.offsets
                if o.offset >= 0
            }

        return self._run(fetch, timeout)

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], *, timeout: float | None = None
    ) -> None:
        """Set committed offsets of ``group_id`` (stop its consumers first, as with Kafka)."""
        normalized = {
            TopicPartition(*tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            for tp, om in offsets.items()
        }
        request = offsets_pb.CommitOffsetsRequest(
            group_id=group_id,
            offsets=[
                common_pb.PartitionOffset(
                    topic_partition=_tp_pb(tp),
                    offset=om.offset,
                    leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
                    metadata=om.metadata,
                )
                for tp, om in sorted(normalized.items())
            ],
        )

        async def alter(deadline: Deadline) -> None:
            await self._coordinator_call(
                group_id,
                _GROUP,
                lambda address: call(
                    self._channels.offsets(address).CommitOffsets, request, timeout_s=self._rpc_timeout(deadline)
                ),
            )

        self._run(alter, timeout)

    # -------------------------------------------------------------------------------- consumer groups

    def list_consumer_groups(self, *, timeout: float | None = None) -> list[ConsumerGroupListing]:
        """Every consumer group with its state, sorted by id (any group-offsets replica answers from SQL)."""

        async def fetch(deadline: Deadline) -> list[ConsumerGroupListing]:
            response = await self._coordinator_call(
                _LISTING_KEY,
                _GROUP,
                lambda address: call(
                    self._channels.offsets(address).ListConsumerGroups,
                    offsets_pb.ListConsumerGroupsRequest(),
                    timeout_s=self._rpc_timeout(deadline),
                ),
            )
            return [listing(g) for g in response.groups]

        return self._run(fetch, timeout)

    def describe_consumer_group(self, group_id: str, *, timeout: float | None = None) -> ConsumerGroupDescription:
        """A consumer group's state, epochs, members and their assignments.

        Raises:
            GroupIdNotFound: no consumer group of that id.
        """
        request = offsets_pb.DescribeConsumerGroupsRequest(group_ids=[group_id])

        async def fetch(deadline: Deadline) -> ConsumerGroupDescription:
            response = await self._coordinator_call(
                group_id,
                _GROUP,
                lambda address: call(
                    self._channels.offsets(address).DescribeConsumerGroups,
                    request,
                    timeout_s=self._rpc_timeout(deadline),
                ),
            )
            [found] = response.groups
            if found.HasField("error"):
                raise from_error_info(found.error)
            return description(found)

        return self._run(fetch, timeout)

    def delete_consumer_group(self, group_id: str, *, timeout: float | None = None) -> None:
        """Delete a group that has no members, with its committed offsets.

        Raises:
            NonEmptyGroup: the group has members (stop its consumers first).
            GroupIdNotFound: no consumer group of that id.
        """
        request = offsets_pb.DeleteConsumerGroupRequest(group_id=group_id)

        async def delete(deadline: Deadline) -> None:
            await self._coordinator_call(
                group_id,
                _GROUP,
                lambda address: call(
                    self._channels.offsets(address).DeleteConsumerGroup, request, timeout_s=self._rpc_timeout(deadline)
                ),
            )

        self._run(delete, timeout)

    # -------------------------------------------------------------------------------- lifecycle

    def close(self) -> None:
        """Release the connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._io.submit(self._channels.close()).result(timeout=5)
        except Exception:
            pass
        self._io.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
