"""Administration of a cluster: topics, producers, transactions and group offsets (Kafka's ``Admin``).

Every call is synchronous and bounded by ``timeout`` (default ``request_timeout_ms``); retriable errors
(a moved coordinator, an unreachable node, a shard still loading) are retried within that bound, others
are raised as the domain error the server returned. The hanging-transaction tooling of KIP-664
(design/kafka-semantics.md §5.4) is here: :meth:`AdminClient.describe_producers` shows each partition's open
transactions,
:meth:`AdminClient.list_transactions` finds old ones, :meth:`AdminClient.abort_transaction` ends one.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TypeVar

import grpc

from oncelog.client.errors import IllegalStateError, RetriableError
from oncelog.client.group_admin import ConsumerGroupDescription, ConsumerGroupListing
from oncelog.client.metadata import ClusterMetadata

# the value types are re-exported here: public API
from oncelog.client.records import (
    ClusterDescription,
    ConfigEntry,
    NewTopic,
    OffsetAndMetadata,
    PartitionInfo,
    ProducerStateDescription,
    ReplicaDescription,
    TopicInfo,
    TopicPartition,
    TransactionDescription,
    TransactionListing,
)
from oncelog.client.services import (
    ClusterClient,
    Deadline,
    GroupOffsetsClient,
    OffsetQuery,
    PartitionStorageClient,
    Retry,
    RetryPolicy,
    TransactionCoordinatorClient,
    check_transaction_states,
    fencing_abort_marker,
    is_retriable,
    retry_of,
)
from oncelog.client.transport import BootstrapError, Channels, IoThread, resolve_bootstrap
from oncelog.errors import CoordinatorNotAvailable, OncelogError
from oncelog.vocabulary import CoordinatorKind, IsolationLevel, Role

__all__ = [
    "AdminClient",
    "ConfigEntry",
    "NewTopic",
    "OffsetSpec",
    "ProducerStateDescription",
    "ReplicaDescription",
    "TransactionDescription",
    "TransactionListing",
]

T = TypeVar("T")
V = TypeVar("V")

_LISTING_KEY = "oncelog-consumer-group-listing"
"""Key whose group coordinator answers ListConsumerGroups (every replica reads the same SQL)."""

OffsetSpec = str | int
"""``"earliest"``, ``"latest"``, or a Unix-millisecond timestamp (first offset at or after it)."""


def _retriable(err: OncelogError) -> bool:
    return is_retriable(err, unknown_topic_is_final=True)


def _out_of_time(err: OncelogError) -> OncelogError:
    if isinstance(err, BootstrapError):
        return err  # no server answered at all: the address or the cluster is the problem, not time
    return RetriableError(f"did not complete in time: {err.message}", cause=err)


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
        self._closed = False
        self._io = IoThread(f"oncelog-{client_id or 'admin-' + uuid.uuid4().hex[:8]}")
        self._channels = Channels(credentials=credentials)
        self._metadata = ClusterMetadata(
            self._channels, addresses, request_timeout_s=self._timeout_s, retry_backoff_ms=retry_backoff_ms
        )
        self._retry = RetryPolicy(retry_backoff_ms, 1_000)
        self._storage = PartitionStorageClient(self._channels.get, timeout_s=self._timeout_s)
        self._txn = TransactionCoordinatorClient(self._channels.get, timeout_s=self._timeout_s)
        self._offsets = GroupOffsetsClient(self._channels.get, timeout_s=self._timeout_s)

    # -------------------------------------------------------------------------------- plumbing

    def _run(self, make: Callable[[Deadline], Awaitable[T]], timeout: float | None) -> T:
        if self._closed:
            raise IllegalStateError("the admin client is closed; create a new AdminClient")
        deadline = Deadline(self._timeout_s if timeout is None else timeout)
        return self._io.run(  # type: ignore[arg-type]
            self._retry.run(lambda: make(deadline), deadline, retry_if=_retriable, out_of_time=_out_of_time)
        )

    def _rpc_timeout(self, deadline: Deadline) -> float:
        return deadline.cap(self._timeout_s)

    def _on_cluster(self, rpc: Callable[[ClusterClient, str, float], Awaitable[T]], timeout: float | None) -> T:
        """``rpc(client, address, timeout_s)`` on the first ClusterService address that answers, retried."""
        cluster = self._metadata.cluster
        return self._run(
            lambda deadline: self._metadata.cluster_call(
                lambda address: rpc(cluster, address, self._rpc_timeout(deadline))
            ),
            timeout,
        )

    async def _txn_coordinators(self) -> list[str]:
        addresses = (await self._metadata.describe_cluster()).addresses(Role.TXN_COORDINATOR)
        if not addresses:
            raise CoordinatorNotAvailable("no txn-coordinator is live")
        return addresses

    async def _by_leader(
        self, partitions: Iterable[TopicPartition], deadline: Deadline
    ) -> dict[str, list[TopicPartition]]:
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            leader = await self._metadata.wait_for_leader(tp, deadline)
            by_leader.setdefault(leader.leader_address, []).append(tp)
        return by_leader

    async def _leader_call(self, partitions: Iterable[TopicPartition], pending: Awaitable[T]) -> T:
        """Await a call to the storage node leading ``partitions``; a failure that may mean it moved marks
        them stale, so the retry looks the leader up again."""
        try:
            return await pending
        except OncelogError as err:
            self._metadata.note_failure({tp.topic for tp in partitions}, err)
            raise

    async def _from_leaders(
        self,
        partitions: Iterable[TopicPartition],
        deadline: Deadline,
        rpc: Callable[[str, list[TopicPartition], float], Awaitable[Mapping[TopicPartition, V | OncelogError]]],
    ) -> dict[TopicPartition, V]:
        """Ask each partition's leader, one ``rpc(address, its partitions, timeout_s)`` per leader; the first
        partition that failed raises its error (its leader marked stale, so the retry looks it up again)."""
        wanted = list(partitions)
        found: dict[TopicPartition, V] = {}
        for address, tps in (await self._by_leader(wanted, deadline)).items():
            answers = await self._leader_call(tps, rpc(address, tps, self._rpc_timeout(deadline)))
            for tp, answer in answers.items():
                if isinstance(answer, OncelogError):
                    self._raise_failure(tp, answer)
                else:
                    found[tp] = answer
        return {tp: found[tp] for tp in wanted}

    def _raise_failure(self, tp: TopicPartition, failure: OncelogError) -> None:
        self._metadata.note_failure([tp.topic], failure)
        raise failure

    async def _coordinator_call(self, key: str, kind: CoordinatorKind, rpc: Callable[[str], Awaitable[T]]) -> T:
        address = await self._metadata.find_coordinator(key, kind)
        try:
            return await rpc(address)
        except OncelogError as err:
            if retry_of(err) is Retry.LOCATE:
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
        return self._on_cluster(
            lambda cluster, address, timeout_s: cluster.create_topics(
                address, specs, validate_only=validate_only, timeout_s=timeout_s
            ),
            timeout,
        )

    def delete_topics(self, names: Iterable[str], *, timeout: float | None = None) -> list[str]:
        """Delete topics; storage nodes drop their data afterwards. Returns the names deleted.

        Raises:
            UnknownTopicOrPartition: a topic does not exist.
        """
        wanted = list(names)
        return self._on_cluster(
            lambda cluster, address, timeout_s: cluster.delete_topics(address, wanted, timeout_s=timeout_s),
            timeout,
        )

    def describe_topics(
        self, names: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, TopicInfo]:
        """Partitions, leaders and configs of ``names`` (default every topic), by name.

        Raises:
            UnknownTopicOrPartition: a named topic does not exist.
        """
        wanted = list(names or ())
        topics = self._on_cluster(
            lambda cluster, address, timeout_s: cluster.metadata(address, wanted, timeout_s=timeout_s), timeout
        )
        return {t.name: t for t in topics}

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
        counts = dict(new_counts)
        topics = self._on_cluster(
            lambda cluster, address, timeout_s: cluster.create_partitions(
                address, counts, validate_only=validate_only, timeout_s=timeout_s
            ),
            timeout,
        )
        return {t.name: t for t in topics}

    def alter_partition_replicas(
        self,
        topic: str,
        partition: int,
        replicas: Sequence[str],
        *,
        partition_epoch: int = 0,
        timeout: float | None = None,
    ) -> PartitionInfo:
        """Give one partition these replicas, preferred leader first: one step of a reassignment (``oncelog
        partitions reassign``). Raises InvalidRequest for a node that is not a live storage node, no listed replica
        in sync, an offline partition, or one changed since ``partition_epoch`` (> 0)."""
        wanted = list(replicas)
        return self._on_cluster(
            lambda cluster, address, timeout_s: cluster.alter_partition_replicas(
                address, topic, partition, wanted, partition_epoch=partition_epoch, timeout_s=timeout_s
            ),
            timeout,
        )

    def describe_configs(
        self, topics: Iterable[str] | None = None, *, timeout: float | None = None
    ) -> dict[str, list[ConfigEntry]]:
        """Every setting of ``topics`` (default every topic) with its value and source, by topic.

        Raises:
            UnknownTopicOrPartition: a named topic does not exist.
        """
        wanted = list(topics or ())
        return self._on_cluster(
            lambda cluster, address, timeout_s: cluster.describe_configs(address, wanted, timeout_s=timeout_s),
            timeout,
        )

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
        wanted = {topic: dict(ops) for topic, ops in changes.items()}
        return self._on_cluster(
            lambda cluster, address, timeout_s: cluster.incremental_alter_configs(
                address, wanted, validate_only=validate_only, timeout_s=timeout_s
            ),
            timeout,
        )

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
        try:
            isolation = IsolationLevel(isolation_level)
        except ValueError:
            raise ValueError(
                f"isolation_level={isolation_level!r}; use 'read_committed' or 'read_uncommitted'"
            ) from None
        queries: dict[TopicPartition, OffsetQuery] = {}
        for tp, spec in specs.items():
            try:
                queries[TopicPartition(*tp)] = OffsetQuery.of(spec)
            except ValueError as exc:
                raise ValueError(f"{exc} (for {TopicPartition(*tp)})") from None

        async def resolve(deadline: Deadline) -> dict[TopicPartition, tuple[int, int]]:
            listed = await self._from_leaders(
                queries,
                deadline,
                lambda address, tps, timeout_s: self._storage.list_offsets(
                    address, {tp: queries[tp] for tp in tps}, isolation=isolation, timeout_s=timeout_s
                ),
            )
            return {tp: (answer.offset, answer.timestamp_ms) for tp, answer in listed.items()}

        return self._run(resolve, timeout)

    # -------------------------------------------------------------------------------- producers and transactions

    def describe_producers(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], *, timeout: float | None = None
    ) -> dict[TopicPartition, list[ProducerStateDescription]]:
        """Producer state of each partition, from its leader: who wrote, with which epoch, and which
        transactions are open there (a hanging one keeps ``current_transaction_start_offset`` set)."""
        wanted = [TopicPartition(*tp) for tp in partitions]

        async def describe(deadline: Deadline) -> dict[TopicPartition, list[ProducerStateDescription]]:
            return await self._from_leaders(
                wanted,
                deadline,
                lambda address, tps, timeout_s: self._storage.describe_producers(address, tps, timeout_s=timeout_s),
            )

        return self._run(describe, timeout)

    def describe_replicas(
        self, partitions: Iterable[TopicPartition | tuple[str, int]], *, timeout: float | None = None
    ) -> dict[TopicPartition, list[ReplicaDescription]]:
        """Each partition's replicas as its leader sees them, leader first (log end, lag, in sync, last caught up)."""
        wanted = [TopicPartition(*tp) for tp in partitions]

        async def describe(deadline: Deadline) -> dict[TopicPartition, list[ReplicaDescription]]:
            return await self._from_leaders(
                wanted,
                deadline,
                lambda address, tps, timeout_s: self._storage.describe_replicas(address, tps, timeout_s=timeout_s),
            )

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

        Raises:
            ValueError: a state name is unknown; the message lists the states.
        """
        wanted_states, wanted_ids = list(states or ()), list(producer_ids or ())
        check_transaction_states(wanted_states)  # a bad name fails here, before any call

        async def listing(deadline: Deadline) -> list[TransactionListing]:
            found: dict[str, TransactionListing] = {}
            for address in await self._txn_coordinators():
                for t in await self._txn.list_transactions(
                    address,
                    states=wanted_states,
                    producer_ids=wanted_ids,
                    older_than_ms=older_than_ms or 0,
                    timeout_s=self._rpc_timeout(deadline),
                ):
                    found[t.transactional_id] = t
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
            described = await self._coordinator_call(
                transactional_id,
                CoordinatorKind.TRANSACTION,
                lambda address: self._txn.describe_transactions(
                    address, [transactional_id], timeout_s=self._rpc_timeout(deadline)
                ),
            )
            return described[0]

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

        async def abort(deadline: Deadline) -> tuple[int, int]:
            fenced = await self._coordinator_call(
                transactional_id,
                CoordinatorKind.TRANSACTION,
                lambda address: self._txn.abort_transaction(
                    address, transactional_id, timeout_s=self._rpc_timeout(deadline)
                ),
            )
            return fenced.producer_id, fenced.epoch

        return self._run(abort, timeout)

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
        skipped_partitions, skipped_groups = [TopicPartition(*tp) for tp in partitions], list(groups)
        return self._run(
            lambda deadline: self._coordinator_call(
                transactional_id,
                CoordinatorKind.TRANSACTION,
                lambda address: self._txn.skip_txn_markers(
                    address,
                    transactional_id,
                    skipped_partitions,
                    skipped_groups,
                    timeout_s=self._rpc_timeout(deadline),
                ),
            ),
            timeout,
        )

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
        marker = fencing_abort_marker(tp, producer_id, producer_epoch, coordinator_epoch)  # refuses epoch 32767

        async def abort(deadline: Deadline) -> None:
            leader = await self._metadata.wait_for_leader(tp, deadline)
            results = await self._leader_call(
                [tp],
                self._storage.write_txn_markers(leader.leader_address, [marker], timeout_s=self._rpc_timeout(deadline)),
            )
            for result in results:
                for failure in result.partition_errors.values():
                    if failure is not None:
                        self._raise_failure(tp, failure)

        self._run(abort, timeout)

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
        wanted = [TopicPartition(*tp) for tp in partitions or ()]

        async def fetch(deadline: Deadline) -> dict[TopicPartition, OffsetAndMetadata]:
            committed = await self._coordinator_call(
                group_id,
                CoordinatorKind.GROUP,
                lambda address: self._offsets.fetch_offsets(
                    address, group_id, wanted, require_stable=require_stable, timeout_s=self._rpc_timeout(deadline)
                ),
            )
            return {tp: om for tp, om in committed.items() if om is not None}

        return self._run(fetch, timeout)

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], *, timeout: float | None = None
    ) -> None:
        """Set committed offsets of ``group_id`` (stop its consumers first, as with Kafka)."""
        normalized = {
            TopicPartition(*tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            for tp, om in offsets.items()
        }
        self._run(
            lambda deadline: self._coordinator_call(
                group_id,
                CoordinatorKind.GROUP,
                lambda address: self._offsets.commit_offsets(
                    address, group_id, normalized, timeout_s=self._rpc_timeout(deadline)
                ),
            ),
            timeout,
        )

    # -------------------------------------------------------------------------------- consumer groups

    def list_consumer_groups(self, *, timeout: float | None = None) -> list[ConsumerGroupListing]:
        """Every consumer group with its state, sorted by id (any group-offsets replica answers from SQL)."""
        return self._run(
            lambda deadline: self._coordinator_call(
                _LISTING_KEY,
                CoordinatorKind.GROUP,
                lambda address: self._offsets.list_consumer_groups(address, timeout_s=self._rpc_timeout(deadline)),
            ),
            timeout,
        )

    def describe_consumer_group(self, group_id: str, *, timeout: float | None = None) -> ConsumerGroupDescription:
        """A consumer group's state, epochs, members and their assignments.

        Raises:
            GroupIdNotFound: no consumer group of that id.
        """

        async def fetch(deadline: Deadline) -> ConsumerGroupDescription:
            [found] = (
                await self._coordinator_call(
                    group_id,
                    CoordinatorKind.GROUP,
                    lambda address: self._offsets.describe_consumer_groups(
                        address, [group_id], timeout_s=self._rpc_timeout(deadline)
                    ),
                )
            ).values()
            if isinstance(found, OncelogError):
                raise found
            return found

        return self._run(fetch, timeout)

    def delete_consumer_group(self, group_id: str, *, timeout: float | None = None) -> None:
        """Delete a group that has no members, with its committed offsets.

        Raises:
            NonEmptyGroup: the group has members (stop its consumers first).
            GroupIdNotFound: no consumer group of that id.
        """
        self._run(
            lambda deadline: self._coordinator_call(
                group_id,
                CoordinatorKind.GROUP,
                lambda address: self._offsets.delete_consumer_group(
                    address, group_id, timeout_s=self._rpc_timeout(deadline)
                ),
            ),
            timeout,
        )

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
        self._io.close(release=self._channels.close)

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
