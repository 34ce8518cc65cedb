"""CatalogStore: every catalog read and write, as short SQL transactions with conditional updates.

All methods are synchronous (SQLAlchemy Core); async callers run them with ``asyncio.to_thread``. Times are
passed in as Unix milliseconds so tests control the clock. Anything that fences (node epochs, shard
ownership and coordinator epochs, the producer-id counter, requester epochs) changes only through an
``UPDATE … WHERE <the value we saw>`` whose row count says whether we won.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from oncelog.catalog import schema as t
from oncelog.catalog.partition_guards import (
    CONTROLLER_ROLE,
    check_registrations,
    holds_controller_lease,
    node_lease_holds,
)
from oncelog.catalog.records import (
    ClusterInfo,
    NodeRecord,
    PartitionRecord,
    ShardLease,
    ShardRound,
    TopicRecord,
)
from oncelog.catalog.replicas import StorageNode, place_replicas, reassignment_step, validate_replication_factor
from oncelog.catalog.shard_table import CoordinatorShardTable
from oncelog.catalog.topics import (
    KAFKA_CONFIG_NAMES,
    MAX_PARTITIONS,
    TopicConfig,
    config_name,
    java_string_hash,
    validate_partitions,
    validate_topic_name,
)
from oncelog.catalog.transaction import Transaction
from oncelog.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    StaleRequesterEpoch,
    StorageUnavailable,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from oncelog.storage.sql import migrate
from oncelog.vocabulary import ROLES, Role

DEREGISTERED = 0
"""``lease_expires_at_ms`` of a node that deregistered (a clean stop): lapsed, and never renewed again."""


class CatalogStore(CoordinatorShardTable):
    """Reads and conditional writes of the catalog tables; the coordinator shard leases are inherited from
    :class:`~oncelog.catalog.shard_table.CoordinatorShardTable`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._cluster: ClusterInfo | None = None  # fixed at creation, so read once

    # -- schema and cluster -------------------------------------------------------------------------

    def migrate(self) -> None:
        """Create or upgrade the catalog schema (safe with several processes starting at once)."""
        migrate(self.engine, t.SCHEMA_NAME, t.metadata, t.MIGRATIONS)

    def ensure_cluster(self, txn_coordinator_shards: int, group_offsets_shards: int, now_ms: int) -> ClusterInfo:
        """Create the cluster row on first start; later starts keep the stored shard counts (they never change)."""
        try:
            return self._ensure_cluster(txn_coordinator_shards, group_offsets_shards, now_ms)
        except sa.exc.IntegrityError:
            # another process created it between our read and our insert (PostgreSQL, read committed)
            return self.cluster_info()

    def _ensure_cluster(self, txn_coordinator_shards: int, group_offsets_shards: int, now_ms: int) -> ClusterInfo:
        with self._begin() as conn:
            row = conn.execute(sa.select(t.cluster).where(t.cluster.c.id == 1)).first()
            if row is None:
                conn.execute(
                    sa.insert(t.cluster).values(
                        id=1,
                        cluster_id=str(uuid.uuid4()),
                        txn_coordinator_shards=txn_coordinator_shards,
                        group_offsets_shards=group_offsets_shards,
                        created_at_ms=now_ms,
                    )
                )
                conn.execute(sa.insert(t.pid_counter).values(id=1, next_id=0))  # the pid-allocator's counter
                row = conn.execute(sa.select(t.cluster).where(t.cluster.c.id == 1)).one()
            return ClusterInfo(row.cluster_id, row.txn_coordinator_shards, row.group_offsets_shards)

    def cluster_info(self) -> ClusterInfo:
        """The cluster row; raises StorageUnavailable if the cluster was never created."""
        if self._cluster is not None:
            return self._cluster
        with self._read() as conn:
            row = conn.execute(sa.select(t.cluster).where(t.cluster.c.id == 1)).first()
        if row is None:
            raise StorageUnavailable("the catalog has no cluster yet; start a service against it first")
        self._cluster = ClusterInfo(row.cluster_id, row.txn_coordinator_shards, row.group_offsets_shards)
        return self._cluster

    # -- nodes ---------------------------------------------------------------------------------------

    def register_node(
        self,
        node_id: str,
        role: str,
        address: str,
        lease_ms: int,
        now_ms: int,
        *,
        rack: str | None = None,
        external_address: str | None = None,
    ) -> int:
        """Register (or re-register) a node; returns its new node epoch, one above any earlier registration.

        ``rack`` is the node's rack or zone label (None: no label); replica placement spreads over racks.
        ``external_address`` is where clients outside the services' network reach it (None: nowhere).
        """
        if role not in ROLES:
            raise InvalidRequest(f"unknown role {role!r}; one of {', '.join(ROLES)}")
        with self._begin() as conn:
            current = conn.execute(sa.select(t.nodes.c.node_epoch).where(t.nodes.c.node_id == node_id)).scalar()
            epoch = 1 if current is None else current + 1
            values = {
                "role": role,
                "address": address,
                "node_epoch": epoch,
                "lease_expires_at_ms": now_ms + lease_ms,
                "rack": rack or None,
                "external_address": external_address or None,
            }
            if current is None:
                conn.execute(sa.insert(t.nodes).values(node_id=node_id, registered_at_ms=now_ms, **values))
            else:
                result = conn.execute(
                    sa.update(t.nodes)
                    .where(t.nodes.c.node_id == node_id, t.nodes.c.node_epoch == current)
                    .values(**values)
                )
                if result.rowcount != 1:
                    raise StaleRequesterEpoch(f"node {node_id} re-registered concurrently; retry")
            return epoch

    def heartbeat(self, node_id: str, node_epoch: int, lease_ms: int, now_ms: int) -> bool:
        """Extend the node's lease; False if a newer registration of the same node id replaced this one, or if
        this one was deregistered: a renewal that was already on its way when the node stopped must not bring
        the stopped node back to life for a lease (its leaders would look live, nothing would fail over)."""
        with self._begin() as conn:
            result = conn.execute(
                sa.update(t.nodes)
                .where(
                    t.nodes.c.node_id == node_id,
                    t.nodes.c.node_epoch == node_epoch,
                    t.nodes.c.lease_expires_at_ms != DEREGISTERED,
                )
                .values(lease_expires_at_ms=now_ms + lease_ms)
            )
            return result.rowcount == 1

    def deregister_node(self, node_id: str, node_epoch: int) -> None:
        """End the node's lease now (clean shutdown), unless a newer registration exists; for good: a later
        :meth:`heartbeat` of the same registration does not renew it."""
        with self._begin() as conn:
            conn.execute(
                sa.update(t.nodes)
                .where(t.nodes.c.node_id == node_id, t.nodes.c.node_epoch == node_epoch)
                .values(lease_expires_at_ms=DEREGISTERED)
            )

    def list_nodes(self, now_ms: int, *, include_expired: bool = False, role: str | None = None) -> list[NodeRecord]:
        """Registered nodes, live ones only unless ``include_expired``."""
        query = sa.select(t.nodes).order_by(t.nodes.c.role, t.nodes.c.node_id)
        if not include_expired:
            query = query.where(t.nodes.c.lease_expires_at_ms > now_ms)
        if role is not None:
            query = query.where(t.nodes.c.role == role)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [
            NodeRecord(r.node_id, r.role, r.address, r.node_epoch, r.lease_expires_at_ms, r.rack, r.external_address)
            for r in rows
        ]

    def node_epoch(self, node_id: str) -> int | None:
        """The node's current registration epoch, or None if it never registered."""
        with self._read() as conn:
            return conn.execute(sa.select(t.nodes.c.node_epoch).where(t.nodes.c.node_id == node_id)).scalar()

    # -- topics --------------------------------------------------------------------------------------

    def create_topics(
        self,
        specs: Iterable[tuple[str, int, Mapping[str, str]] | tuple[str, int, Mapping[str, str], int | None]],
        now_ms: int,
        *,
        validate_only: bool = False,
        default_replication_factor: int = 1,
    ) -> list[TopicRecord]:
        """Validate every spec first, then create all topics in one transaction (all or nothing).

        A spec is ``(name, partitions, configs)`` or ``(name, partitions, configs, replication_factor)``; a
        missing or None replication factor means ``default_replication_factor``. Replicas are placed over the live
        partition-storage nodes (:func:`~oncelog.catalog.replicas.place_replicas`); the first replica leads,
        and every replica starts in the ISR (the partition is empty).

        Raises:
            InvalidReplicationFactor: a factor below 1 or above the number of live storage nodes.
        """
        parsed = []
        seen: set[str] = set()
        for spec in specs:
            name, count, configs = spec[0], spec[1], spec[2]
            factor = spec[3] if len(spec) > 3 else None  # type: ignore[misc]
            validate_topic_name(name)
            validate_partitions(count)
            if name in seen:
                raise InvalidRequest(f"topic {name!r} appears twice in the request")
            seen.add(name)
            named = {config_name(key): value for key, value in configs.items()}
            parsed.append(
                (name, count, TopicConfig.parse(named), default_replication_factor if factor is None else factor, named)
            )
        if not parsed:
            raise InvalidRequest("no topics to create; give at least one TopicSpec")
        with self._begin() as conn:
            storage = _live_storage_nodes(conn, now_ms)
            if not storage:
                raise StorageUnavailable(
                    "no live partition-storage node to place partitions on; start one and retry", definite=True
                )
            existing = set(
                conn.execute(sa.select(t.topics.c.name).where(t.topics.c.name.in_([p[0] for p in parsed]))).scalars()
            )
            if existing:
                raise TopicAlreadyExists(f"topic(s) already exist: {', '.join(sorted(existing))}")
            first_epochs = {
                row.name: row.next_leader_epoch
                for row in conn.execute(
                    sa.select(t.deleted_topics).where(t.deleted_topics.c.name.in_([p[0] for p in parsed]))
                )
            }
            for name, _, config, factor, _ in parsed:
                try:
                    validate_replication_factor(factor, len(storage))
                except InvalidReplicationFactor as err:
                    raise InvalidReplicationFactor(f"topic {name!r}: {err.message}") from None
                if config.min_insync_replicas > factor:
                    raise InvalidConfig(
                        f"topic {name!r}: min_insync_replicas={config.min_insync_replicas} is above its replication "
                        f"factor {factor}, so no write could ever be acknowledged; lower it or add replicas"
                    )
            created = []
            for name, count, config, factor, named in parsed:
                topic_id = str(uuid.uuid4())
                placement = place_replicas(count, storage, factor, java_string_hash(name))
                epoch = first_epochs.get(name, 0)
                partitions = tuple(
                    PartitionRecord(p, replicas[0], epoch, replicas, replicas, 0)
                    for p, replicas in enumerate(placement)
                )
                created.append(TopicRecord(name, topic_id, config, partitions, frozenset(named)))
                if validate_only:
                    continue
                conn.execute(
                    sa.insert(t.topics).values(
                        name=name,
                        topic_id=topic_id,
                        partition_count=count,
                        configs=config.overrides(named),
                        created_at_ms=now_ms,
                    )
                )
                _insert_partitions(conn, name, partitions)
            return created

    def delete_topics(self, names: Iterable[str]) -> list[str]:
        """Delete topics and their partitions; unknown names fail the whole call."""
        names = list(names)
        if not names:
            raise InvalidRequest("no topics to delete")
        with self._begin() as conn:
            found = set(conn.execute(sa.select(t.topics.c.name).where(t.topics.c.name.in_(names))).scalars())
            missing = [n for n in names if n not in found]
            if missing:
                raise UnknownTopicOrPartition(f"unknown topic(s): {', '.join(missing)}")
            # Remember where leader epochs stop, so a topic created again under a name starts above them.
            next_epochs = {
                row.topic: row.last + 1
                for row in conn.execute(
                    sa.select(t.partitions.c.topic, sa.func.max(t.partitions.c.leader_epoch).label("last"))
                    .where(t.partitions.c.topic.in_(names))
                    .group_by(t.partitions.c.topic)
                )
            }
            conn.execute(sa.delete(t.deleted_topics).where(t.deleted_topics.c.name.in_(names)))
            conn.execute(
                sa.insert(t.deleted_topics),
                [{"name": name, "next_leader_epoch": next_epochs.get(name, 0)} for name in names],
            )
            conn.execute(sa.delete(t.partitions).where(t.partitions.c.topic.in_(names)))
            conn.execute(sa.delete(t.topics).where(t.topics.c.name.in_(names)))
        return names

    def describe_topics(self, names: Iterable[str] | None = None) -> list[TopicRecord]:
        """Topics with partitions; ``None`` or empty means all. Unknown names raise UnknownTopicOrPartition."""
        wanted = list(names or [])
        with self._read() as conn:
            query = sa.select(t.topics).order_by(t.topics.c.name)
            if wanted:
                query = query.where(t.topics.c.name.in_(wanted))
            topic_rows = conn.execute(query).all()
            found = {r.name for r in topic_rows}
            missing = [n for n in wanted if n not in found]
            if missing:
                raise UnknownTopicOrPartition(f"unknown topic(s): {', '.join(missing)}; create them first")
            part_query = sa.select(t.partitions).order_by(t.partitions.c.topic, t.partitions.c.partition)
            if wanted:
                part_query = part_query.where(t.partitions.c.topic.in_(wanted))
            by_topic: dict[str, list[PartitionRecord]] = {}
            for r in conn.execute(part_query):
                by_topic.setdefault(r.topic, []).append(_partition(r))
        return [
            TopicRecord(
                r.name, r.topic_id, TopicConfig.parse(r.configs), tuple(by_topic.get(r.name, ())), frozenset(r.configs)
            )
            for r in topic_rows
        ]

    def create_partitions(
        self, specs: Iterable[tuple[str, int]], now_ms: int, *, validate_only: bool = False
    ) -> list[TopicRecord]:
        """Grow topics to new partition counts in one transaction, all or nothing (Kafka's CreatePartitions).

        Existing partitions keep their data, replicas and leaders. A new partition gets the topic's replication
        factor (its first partition's replica count) and is placed over the live storage nodes as creation would
        place it in a topic of the new count (:func:`~oncelog.catalog.replicas.place_replicas` from the topic's
        starting point); its first replica leads and every replica starts in the ISR (it is empty).

        Raises:
            InvalidPartitions: a count is not above the topic's current one (partitions are never removed), or is
                above :data:`~oncelog.catalog.topics.MAX_PARTITIONS`.
            InvalidReplicationFactor: fewer live storage nodes than the topic's replication factor.
            UnknownTopicOrPartition: a topic does not exist.
        """
        wanted = dict[str, int]()
        for name, count in specs:
            if name in wanted:
                raise InvalidRequest(f"topic {name!r} appears twice in the request")
            wanted[name] = count
        if not wanted:
            raise InvalidRequest("no topics to grow; give at least one topic and its new partition count")
        with self._begin() as conn:
            rows = _locked_topic_rows(conn, list(wanted))
            for name, count in wanted.items():
                current = rows[name].partition_count
                if count <= current:
                    change = "already has" if count == current else "cannot shrink to"
                    raise InvalidPartitions(
                        f"topic {name!r} has {current} partition(s) and {change} {count}: the count can only grow "
                        f"(partitions are never removed, so keyed records keep their partition); ask for more than "
                        f"{current}"
                    )
                if count > MAX_PARTITIONS:
                    raise InvalidPartitions(f"topic {name!r}: partitions={count}; the limit is {MAX_PARTITIONS}")
            storage = _live_storage_nodes(conn, now_ms)
            existing: dict[str, list[PartitionRecord]] = {}
            for r in conn.execute(
                sa.select(t.partitions)
                .where(t.partitions.c.topic.in_(list(wanted)))
                .order_by(t.partitions.c.topic, t.partitions.c.partition)
            ):
                existing.setdefault(r.topic, []).append(_partition(r))
            first_epochs = {
                row.name: row.next_leader_epoch
                for row in conn.execute(sa.select(t.deleted_topics).where(t.deleted_topics.c.name.in_(list(wanted))))
            }
            grown = []
            for name, count in wanted.items():
                row, old = rows[name], existing.get(name, [])
                factor = len(old[0].replicas) if old else 1
                try:
                    validate_replication_factor(factor, len(storage))
                except InvalidReplicationFactor as err:
                    raise InvalidReplicationFactor(f"topic {name!r}: {err.message}") from None
                placement = place_replicas(count, storage, factor, java_string_hash(name))
                epoch = first_epochs.get(name, 0)
                added = tuple(
                    PartitionRecord(p, placement[p][0], epoch, placement[p], placement[p], 0)
                    for p in range(row.partition_count, count)
                )
                grown.append(
                    TopicRecord(
                        name, row.topic_id, TopicConfig.parse(row.configs), (*old, *added), frozenset(row.configs)
                    )
                )
                if validate_only:
                    continue
                conn.execute(sa.update(t.topics).where(t.topics.c.name == name).values(partition_count=count))
                _insert_partitions(conn, name, added)
            return grown

    def alter_configs(
        self,
        alterations: Iterable[tuple[str, Iterable[tuple[str, str | None]]]],
        *,
        validate_only: bool = False,
    ) -> list[TopicRecord]:
        """Set or delete topic settings in one transaction, all or nothing (Kafka's IncrementalAlterConfigs).

        Each alteration is ``(topic, [(name, value), ...])``: a value sets the setting, None deletes the topic's
        value so the default applies again (deleting one that is not set changes nothing). Names may be Kafka's
        dotted ones (``retention.ms``). Storage nodes apply the result on their next catalog refresh.

        Raises:
            InvalidConfig: an unknown name, a value that does not parse or is out of range, a name given twice,
                or min_insync_replicas above the topic's replication factor (every problem of a topic is named).
            UnknownTopicOrPartition: a topic does not exist.
        """
        changes: dict[str, dict[str, str | None]] = {}
        for name, ops in alterations:
            if name in changes:
                raise InvalidRequest(f"topic {name!r} appears twice in the request")
            topic_changes: dict[str, str | None] = {}
            for key, value in ops:
                canonical = config_name(key)
                if canonical not in TopicConfig.KEYS:
                    raise InvalidConfig(
                        f"topic {name!r}: unknown topic config {key!r}; known: {', '.join(TopicConfig.KEYS)} "
                        f"(or Kafka's {', '.join(KAFKA_CONFIG_NAMES)})"
                    )
                if canonical in topic_changes:
                    raise InvalidConfig(f"topic {name!r}: {canonical} is changed twice; change each setting once")
                topic_changes[canonical] = value
            changes[name] = topic_changes
        if not changes:
            raise InvalidRequest("no topics to alter; give at least one topic and a setting to change")
        with self._begin() as conn:
            rows = _locked_topic_rows(conn, list(changes))
            factors = {
                r.topic: len(r.replicas)
                for r in conn.execute(
                    sa.select(t.partitions.c.topic, t.partitions.c.replicas).where(
                        t.partitions.c.topic.in_(list(changes)), t.partitions.c.partition == 0
                    )
                )
            }
            altered = []
            for name, topic_changes in changes.items():
                stored = {key: value for key, value in rows[name].configs.items() if key in TopicConfig.KEYS}
                for key, value in topic_changes.items():
                    if value is None:
                        stored.pop(key, None)
                    else:
                        stored[key] = value
                try:
                    config = TopicConfig.parse(stored)
                except InvalidConfig as err:
                    raise InvalidConfig(f"topic {name!r}: {err.message}") from None
                factor = factors.get(name, 1)
                if config.min_insync_replicas > factor:
                    raise InvalidConfig(
                        f"topic {name!r}: min_insync_replicas={config.min_insync_replicas} is above its replication "
                        f"factor {factor}, so no write could ever be acknowledged; use at most {factor}"
                    )
                record = self._topic_record(conn, rows[name], config, frozenset(stored))
                altered.append(record)
                if not validate_only:
                    conn.execute(
                        sa.update(t.topics).where(t.topics.c.name == name).values(configs=config.overrides(stored))
                    )
            return altered

    def _topic_record(
        self,
        conn: Connection,
        row: sa.Row,
        config: TopicConfig,
        overrides: frozenset[str],  # type: ignore[type-arg]
    ) -> TopicRecord:
        partitions = conn.execute(
            sa.select(t.partitions).where(t.partitions.c.topic == row.name).order_by(t.partitions.c.partition)
        )
        return TopicRecord(row.name, row.topic_id, config, tuple(_partition(r) for r in partitions), overrides)

    def partition(self, topic: str, partition: int) -> PartitionRecord:
        """One partition's current row; raises UnknownTopicOrPartition if it does not exist."""
        with self._begin() as conn:
            row = conn.execute(
                sa.select(t.partitions).where(t.partitions.c.topic == topic, t.partitions.c.partition == partition)
            ).first()
        if row is None:
            raise UnknownTopicOrPartition(f"{topic}-{partition} does not exist; check the topic and partition count")
        return _partition(row)

    def alter_partition(
        self,
        topic: str,
        seen: PartitionRecord,
        *,
        isr: Iterable[str] | None = None,
        leader_node_id: str | None = None,
        controller: tuple[str, int, int] | None = None,
        move_live_leader: bool = False,
        replicas: Iterable[str] | None = None,
        joining_epochs: Mapping[str, int] | None = None,
    ) -> PartitionRecord | None:
        """Change a partition's ISR and/or leader (and, for a reassignment, its replicas) if it is still exactly as
        ``seen`` (Kafka's AlterPartition; AlterPartitionReassignments for ``replicas``).

        The update is conditional on the leader, leader epoch and partition epoch of ``seen``; the partition
        epoch grows by one, and the leader epoch too when the leader changes. Returns the new record, or None
        when someone else changed the partition first: the caller must re-read it (a leader that loses this
        race stops acting as leader).

        ``controller`` = ``(node_id, controller_epoch, now_ms)`` makes the change also conditional, in the same
        transaction, on that node still holding the controller lease at that epoch (a deposed controller's late
        election never lands; design/replication.md §6) and, when it replaces the leader, on the old leader's node lease
        having lapsed (a leader that renewed between the controller's look and its write keeps leading), unless
        ``move_live_leader`` (preferred-leader restore: the live old leader steps down when it reads the new epoch;
        the new leader is in the ISR, so the old one can acknowledge nothing it lacks).

        ``joining_epochs`` maps each node the change adds to the ISR to the node epoch of the fetches that showed
        it caught up; the change is also conditional on those being the nodes' current registrations (Kafka's
        KIP-903), so what an earlier incarnation of a node reported, before it restarted with an empty disk, never
        brings the new one into the ISR (design/replication.md §6, "Disk loss").

        Raises:
            InvalidRequest: the ISR is not a subset of the replicas, or is empty while a leader is named, or the
                leader is not an ISR member.
            StaleRequesterEpoch: a joining node registered again since the fetches ``joining_epochs`` names.
            UnknownTopicOrPartition: the partition does not exist.
        """
        new_isr = tuple(seen.isr if isr is None else isr)
        new_replicas = tuple(seen.replicas if replicas is None else replicas)
        leader = seen.leader_node_id if leader_node_id is None else leader_node_id
        if not new_replicas or len(set(new_replicas)) != len(new_replicas):
            raise InvalidRequest(
                f"replicas {list(new_replicas)} of {topic}-{seen.partition} must be distinct, at least one"
            )
        strangers = [n for n in new_isr if n not in new_replicas]
        if strangers or len(set(new_isr)) != len(new_isr):
            raise InvalidRequest(
                f"ISR {list(new_isr)} of {topic}-{seen.partition} must list distinct members of the replicas "
                f"{list(new_replicas)}"
            )
        if leader and leader not in new_isr:
            raise InvalidRequest(f"leader {leader!r} of {topic}-{seen.partition} must be in the ISR {list(new_isr)}")
        leader_epoch = seen.leader_epoch + (1 if leader != seen.leader_node_id else 0)
        updated = PartitionRecord(seen.partition, leader, leader_epoch, new_replicas, new_isr, seen.partition_epoch + 1)
        with self._begin() as conn:
            if controller is not None and not holds_controller_lease(conn, *controller):
                return None
            replaces_leader = (
                controller is not None
                and not move_live_leader
                and bool(seen.leader_node_id)
                and leader != seen.leader_node_id
            )
            if replaces_leader and node_lease_holds(conn, seen.leader_node_id, controller[2]):  # type: ignore[index]
                return None  # the leader renewed its lease after the controller looked: no election
            check_registrations(conn, f"{topic}-{seen.partition}", joining_epochs or {})
            result = conn.execute(
                sa.update(t.partitions)
                .where(
                    t.partitions.c.topic == topic,
                    t.partitions.c.partition == seen.partition,
                    t.partitions.c.leader_node_id == seen.leader_node_id,
                    t.partitions.c.leader_epoch == seen.leader_epoch,
                    t.partitions.c.partition_epoch == seen.partition_epoch,
                )
                .values(
                    leader_node_id=leader,
                    leader_epoch=leader_epoch,
                    replicas=list(new_replicas),
                    isr=list(new_isr),
                    partition_epoch=updated.partition_epoch,
                )
            )
            if result.rowcount == 1:
                return updated
            exists = conn.execute(
                sa.select(t.partitions.c.partition).where(
                    t.partitions.c.topic == topic, t.partitions.c.partition == seen.partition
                )
            ).first()
        if exists is None:
            raise UnknownTopicOrPartition(f"{topic}-{seen.partition} does not exist (deleted?)")
        return None

    def reassign_replicas(
        self, topic: str, partition: int, replicas: Sequence[str], now_ms: int, *, partition_epoch: int = 0
    ) -> PartitionRecord:
        """One step of a reassignment (Kafka's AlterPartitionReassignments): give the partition ``replicas``.

        The ISR keeps the listed members only; a leader that is not listed hands over to the first listed in-sync
        replica (a new leader epoch). A reassignment adds the new replicas next to the current ones first, waits
        until they are in the ISR, then lists the target replicas alone. Conditional as :meth:`alter_partition`
        (re-read and retried when a leader changed the ISR meanwhile); ``partition_epoch`` > 0 also requires the
        row to be still at that epoch.

        Raises:
            InvalidRequest: no replicas, duplicates, a node that is not a live storage node, the partition is
                offline or changed since ``partition_epoch``, or no listed replica is in sync.
            UnknownTopicOrPartition: the partition does not exist.
        """
        wanted = tuple(replicas)
        live = {n.node_id for n in self.list_nodes(now_ms, role=Role.PARTITION_STORAGE)}
        for _ in range(10):
            seen = self.partition(topic, partition)
            if partition_epoch and seen.partition_epoch != partition_epoch:
                raise InvalidRequest(
                    f"{topic}-{partition} changed since partition epoch {partition_epoch} (now "
                    f"{seen.partition_epoch}): describe it again and retry"
                )
            isr, leader = reassignment_step(f"{topic}-{partition}", seen, wanted, live)
            updated = self.alter_partition(topic, seen, isr=isr, leader_node_id=leader, replicas=wanted)
            if updated is not None:
                return updated
        raise InvalidRequest(f"{topic}-{partition} kept changing while being reassigned; retry")


"""The catalog lease row (``coordinator_shards``, shard 0) whose holder is the controller; its epoch fences it."""


def _locked_topic_rows(conn: Connection, names: list[str]) -> dict[str, sa.Row]:  # type: ignore[type-arg]
    """The topics rows of ``names``, locked for update; raises UnknownTopicOrPartition naming any missing one."""
    rows = {r.name: r for r in conn.execute(sa.select(t.topics).where(t.topics.c.name.in_(names)).with_for_update())}
    missing = [n for n in names if n not in rows]
    if missing:
        raise UnknownTopicOrPartition(f"unknown topic(s): {', '.join(missing)}; create them first")
    return rows


def _live_storage_nodes(conn: Connection, now_ms: int) -> list[StorageNode]:
    """The partition-storage nodes whose lease holds at ``now_ms``: where partitions may be placed."""
    return [
        StorageNode(r.node_id, r.rack)
        for r in conn.execute(
            sa.select(t.nodes.c.node_id, t.nodes.c.rack).where(
                t.nodes.c.role == Role.PARTITION_STORAGE, t.nodes.c.lease_expires_at_ms > now_ms
            )
        )
    ]


def _insert_partitions(conn: Connection, topic: str, partitions: Iterable[PartitionRecord]) -> None:
    conn.execute(
        sa.insert(t.partitions),
        [
            {
                "topic": topic,
                "partition": p.partition,
                "leader_node_id": p.leader_node_id,
                "leader_epoch": p.leader_epoch,
                "replicas": list(p.replicas),
                "isr": list(p.isr),
                "partition_epoch": p.partition_epoch,
            }
            for p in partitions
        ],
    )


def _partition(row: sa.Row) -> PartitionRecord:  # type: ignore[type-arg]
    replicas = tuple(row.replicas)
    isr = replicas if row.isr is None else tuple(row.isr)
    return PartitionRecord(row.partition, row.leader_node_id, row.leader_epoch, replicas, isr, row.partition_epoch)


# the records are re-exported: callers have imported them from here since before records.py
__all__ = [
    "CONTROLLER_ROLE",
    "CatalogStore",
    "ClusterInfo",
    "NodeRecord",
    "PartitionRecord",
    "ShardLease",
    "ShardRound",
    "TopicRecord",
    "Transaction",
]
