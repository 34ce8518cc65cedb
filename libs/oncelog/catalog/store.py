"""CatalogStore: every catalog read and write, as short SQL transactions with conditional updates.

All methods are synchronous (SQLAlchemy Core); async callers run them with ``asyncio.to_thread``. Times are
passed in as Unix milliseconds so tests control the clock. Anything that fences (node epochs, shard
ownership and coordinator epochs, the producer-id counter, requester epochs) changes only through an
``UPDATE … WHERE <the value we saw>`` whose row count says whether we won.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from oncelog.catalog import schema as t
from oncelog.catalog.topics import (
    TopicConfig,
    assign_partitions,
    java_string_hash,
    shard_for,
    validate_partitions,
    validate_topic_name,
)
from oncelog.errors import (
    InvalidRequest,
    StaleRequesterEpoch,
    StorageUnavailable,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from oncelog.storage.sql import migrate

ROLES = ("pid-allocator", "txn-coordinator", "partition-storage", "group-offsets")


@dataclass(frozen=True)
class ClusterInfo:
    """Cluster-wide settings fixed at creation."""

    cluster_id: str
    txn_coordinator_shards: int
    group_offsets_shards: int


@dataclass(frozen=True)
class NodeRecord:
    """One registered process."""

    node_id: str
    role: str
    address: str
    node_epoch: int
    lease_expires_at_ms: int

    def alive(self, now_ms: int) -> bool:
        """True while the registration lease holds."""
        return self.lease_expires_at_ms > now_ms


@dataclass(frozen=True)
class PartitionRecord:
    """One partition's leadership."""

    partition: int
    leader_node_id: str
    leader_epoch: int
    replicas: tuple[str, ...]


@dataclass(frozen=True)
class TopicRecord:
    """One topic with its partitions in index order."""

    name: str
    topic_id: str
    config: TopicConfig
    partitions: tuple[PartitionRecord, ...]


@dataclass(frozen=True)
class ShardLease:
    """Ownership of one coordinator shard; ``coordinator_epoch`` grows on every change of owner."""

    role: str
    shard: int
    owner_node_id: str | None
    coordinator_epoch: int
    lease_expires_at_ms: int


class CatalogStore:
    """Reads and conditional writes of the catalog tables."""

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
        with self._begin() as conn:
            row = conn.execute(sa.select(t.cluster).where(t.cluster.c.id == 1)).first()
        if row is None:
            raise StorageUnavailable("the catalog has no cluster yet; start a service against it first")
        self._cluster = ClusterInfo(row.cluster_id, row.txn_coordinator_shards, row.group_offsets_shards)
        return self._cluster

    # -- nodes ---------------------------------------------------------------------------------------

    def register_node(self, node_id: str, role: str, address: str, lease_ms: int, now_ms: int) -> int:
        """Register (or re-register) a node; returns its new node epoch, one above any earlier registration."""
        if role not in ROLES:
            raise InvalidRequest(f"unknown role {role!r}; one of {', '.join(ROLES)}")
        with self._begin() as conn:
            current = conn.execute(sa.select(t.nodes.c.node_epoch).where(t.nodes.c.node_id == node_id)).scalar()
            epoch = 1 if current is None else current + 1
            values = {"role": role, "address": address, "node_epoch": epoch, "lease_expires_at_ms": now_ms + lease_ms}
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
        """Extend the node's lease; False if a newer registration of the same node id replaced this one."""
        with self._begin() as conn:
            result = conn.execute(
                sa.update(t.nodes)
                .where(t.nodes.c.node_id == node_id, t.nodes.c.node_epoch == node_epoch)
                .values(lease_expires_at_ms=now_ms + lease_ms)
            )
            return result.rowcount == 1

    def deregister_node(self, node_id: str, node_epoch: int) -> None:
        """End the node's lease now (clean shutdown), unless a newer registration exists."""
        with self._begin() as conn:
            conn.execute(
                sa.update(t.nodes)
                .where(t.nodes.c.node_id == node_id, t.nodes.c.node_epoch == node_epoch)
                .values(lease_expires_at_ms=0)
            )

    def list_nodes(self, now_ms: int, *, include_expired: bool = False, role: str | None = None) -> list[NodeRecord]:
        """Registered nodes, live ones only unless ``include_expired``."""
        query = sa.select(t.nodes).order_by(t.nodes.c.role, t.nodes.c.node_id)
        if not include_expired:
            query = query.where(t.nodes.c.lease_expires_at_ms > now_ms)
        if role is not None:
            query = query.where(t.nodes.c.role == role)
        with self._begin() as conn:
            rows = conn.execute(query).all()
        return [NodeRecord(r.node_id, r.role, r.address, r.node_epoch, r.lease_expires_at_ms) for r in rows]

    def node_epoch(self, node_id: str) -> int | None:
        """The node's current registration epoch, or None if it never registered."""
        with self._begin() as conn:
            return conn.execute(sa.select(t.nodes.c.node_epoch).where(t.nodes.c.node_id == node_id)).scalar()

    # -- topics --------------------------------------------------------------------------------------

    def create_topics(
        self, specs: Iterable[tuple[str, int, Mapping[str, str]]], now_ms: int, *, validate_only: bool = False
    ) -> list[TopicRecord]:
        """Validate every spec first, then create all topics in one transaction (all or nothing).

        Partitions are led by live partition-storage nodes, round-robin from a per-topic starting point.
        """
        parsed = []
        seen: set[str] = set()
        for name, count, configs in specs:
            validate_topic_name(name)
            validate_partitions(count)
            if name in seen:
                raise InvalidRequest(f"topic {name!r} appears twice in the request")
            seen.add(name)
            parsed.append((name, count, TopicConfig.parse(configs)))
        if not parsed:
            raise InvalidRequest("no topics to create; give at least one TopicSpec")
        with self._begin() as conn:
            storage = [
                r.node_id
                for r in conn.execute(
                    sa.select(t.nodes.c.node_id).where(
                        t.nodes.c.role == "partition-storage", t.nodes.c.lease_expires_at_ms > now_ms
                    )
                )
            ]
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
            created = []
            for name, count, config in parsed:
                topic_id = str(uuid.uuid4())
                leaders = assign_partitions(count, storage, java_string_hash(name))
                epoch = first_epochs.get(name, 0)
                partitions = tuple(PartitionRecord(p, leader, epoch, (leader,)) for p, leader in enumerate(leaders))
                created.append(TopicRecord(name, topic_id, config, partitions))
                if validate_only:
                    continue
                conn.execute(
                    sa.insert(t.topics).values(
                        name=name,
                        topic_id=topic_id,
                        partition_count=count,
                        configs=config.to_map(),
                        created_at_ms=now_ms,
                    )
                )
                conn.execute(
                    sa.insert(t.partitions),
                    [
                        {
                            "topic": name,
                            "partition": p.partition,
                            "leader_node_id": p.leader_node_id,
                            "leader_epoch": p.leader_epoch,
                            "replicas": list(p.replicas),
                        }
                        for p in partitions
                    ],
                )
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
        with self._begin() as conn:
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
                by_topic.setdefault(r.topic, []).append(
                    PartitionRecord(r.partition, r.leader_node_id, r.leader_epoch, tuple(r.replicas))
                )
        return [
            TopicRecord(r.name, r.topic_id, TopicConfig.parse(r.configs), tuple(by_topic.get(r.name, ())))
            for r in topic_rows
        ]

    # -- coordinator shards --------------------------------------------------------------------------

    def shard_for(self, role: str, key: str) -> int:
        """Shard of ``key`` for a coordinator role, from the cluster's fixed shard counts."""
        info = self.cluster_info()
        count = info.txn_coordinator_shards if role == "txn-coordinator" else info.group_offsets_shards
        return shard_for(key, count)

    def shard_lease(self, role: str, shard: int) -> ShardLease | None:
        """Current lease of a shard, or None if it was never acquired."""
        with self._begin() as conn:
            row = conn.execute(
                sa.select(t.coordinator_shards).where(
                    t.coordinator_shards.c.role == role, t.coordinator_shards.c.shard == shard
                )
            ).first()
        if row is None:
            return None
        return ShardLease(row.role, row.shard, row.owner_node_id, row.coordinator_epoch, row.lease_expires_at_ms)

    def acquire_shard(self, role: str, shard: int, node_id: str, lease_ms: int, now_ms: int) -> ShardLease | None:
        """Take or renew a shard. A new owner may take it only once the old lease expired; taking it bumps
        the coordinator epoch (fencing the old owner's writes), renewing keeps it. Returns None if held.
        """
        try:
            return self._acquire_shard(role, shard, node_id, lease_ms, now_ms)
        except sa.exc.IntegrityError:
            return None  # a racing replica inserted the first lease row: it won

    def _acquire_shard(self, role: str, shard: int, node_id: str, lease_ms: int, now_ms: int) -> ShardLease | None:
        with self._begin() as conn:
            row = conn.execute(
                sa.select(t.coordinator_shards).where(
                    t.coordinator_shards.c.role == role, t.coordinator_shards.c.shard == shard
                )
            ).first()
            expires = now_ms + lease_ms
            if row is None:
                conn.execute(
                    sa.insert(t.coordinator_shards).values(
                        role=role, shard=shard, owner_node_id=node_id, coordinator_epoch=1, lease_expires_at_ms=expires
                    )
                )
                return ShardLease(role, shard, node_id, 1, expires)
            if row.owner_node_id != node_id and row.lease_expires_at_ms > now_ms:
                return None
            epoch = row.coordinator_epoch if row.owner_node_id == node_id else row.coordinator_epoch + 1
            result = conn.execute(
                sa.update(t.coordinator_shards)
                .where(
                    t.coordinator_shards.c.role == role,
                    t.coordinator_shards.c.shard == shard,
                    t.coordinator_shards.c.coordinator_epoch == row.coordinator_epoch,
                    t.coordinator_shards.c.owner_node_id == row.owner_node_id,
                )
                .values(owner_node_id=node_id, coordinator_epoch=epoch, lease_expires_at_ms=expires)
            )
            if result.rowcount != 1:
                return None
            return ShardLease(role, shard, node_id, epoch, expires)

    def release_shard(self, role: str, shard: int, node_id: str, coordinator_epoch: int) -> None:
        """Give a shard up early (clean shutdown) so another replica need not wait for the lease to lapse."""
        with self._begin() as conn:
            conn.execute(
                sa.update(t.coordinator_shards)
                .where(
                    t.coordinator_shards.c.role == role,
                    t.coordinator_shards.c.shard == shard,
                    t.coordinator_shards.c.owner_node_id == node_id,
                    t.coordinator_shards.c.coordinator_epoch == coordinator_epoch,
                )
                .values(lease_expires_at_ms=0)
            )

    # -- helpers -------------------------------------------------------------------------------------

    def _begin(self) -> Transaction:
        return Transaction(self.engine)


class Transaction:
    """``engine.begin()`` that reports an unreachable database as StorageUnavailable."""

    def __init__(self, engine: Engine) -> None:
        self._cm = engine.begin()

    def __enter__(self) -> Connection:
        try:
            return self._cm.__enter__()
        except sa.exc.OperationalError as exc:
            raise StorageUnavailable(f"cannot reach the catalog database: {exc.orig}") from exc

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._cm.__exit__(exc_type, exc, tb)  # commits, or rolls back when the body raised
        except sa.exc.OperationalError as err:
            raise StorageUnavailable(f"catalog write failed: {err.orig}", definite=False) from err
        if isinstance(exc, sa.exc.OperationalError):
            raise StorageUnavailable(f"catalog database error: {exc.orig}") from exc
