"""The catalog's records: what :class:`~oncelog.catalog.store.CatalogStore` returns, as frozen values.

Nodes and their registration leases, topics with their partitions' replicas and leadership, coordinator shard
leases, and the cluster-wide settings fixed at creation. Readers hold them without a database session; every
change goes back through the store's conditional updates.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.catalog.topics import TopicConfig


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
    rack: str | None = None
    external_address: str | None = None
    """host:port of the node's external listener, for clients outside the services' network; None: none."""

    def alive(self, now_ms: int) -> bool:
        """True while the registration lease holds."""
        return self.lease_expires_at_ms > now_ms


@dataclass(frozen=True)
class PartitionRecord:
    """One partition's replicas and leadership (docs/design/replication.md §1).

    ``replicas`` lists the nodes holding a copy, the preferred leader first; ``isr`` the in-sync ones;
    ``leader_node_id`` is empty while the partition is offline. ``partition_epoch`` grows on every change of the
    row, and every change is conditional on it (:meth:`CatalogStore.alter_partition`).
    """

    partition: int
    leader_node_id: str
    leader_epoch: int
    replicas: tuple[str, ...]
    isr: tuple[str, ...] = ()
    partition_epoch: int = 0


@dataclass(frozen=True)
class TopicRecord:
    """One topic with its partitions in index order."""

    name: str
    topic_id: str
    config: TopicConfig
    partitions: tuple[PartitionRecord, ...]
    overrides: frozenset[str] = frozenset()
    """The settings set on the topic (the others are defaults)."""


@dataclass(frozen=True)
class ShardLease:
    """Ownership of one coordinator shard; ``coordinator_epoch`` grows on every change of owner."""

    role: str
    shard: int
    owner_node_id: str | None
    coordinator_epoch: int
    lease_expires_at_ms: int


@dataclass(frozen=True)
class ShardRound:
    """Outcome of :meth:`CatalogStore.acquire_shards`: one node's renewals and takeovers in one transaction."""

    now_ms: int
    """The time expiry was judged at and the new expiries were written from (the database's clock if asked)."""
    held: dict[int, ShardLease]
    """The leases the node holds after the write, renewed or taken, by shard."""
    elsewhere: dict[int, ShardLease]
    """The other shards' leases as read in the transaction (their owners' leases may have lapsed), by shard; a
    shard whose first lease a racing replica inserted first is read after that insert committed."""


__all__ = ["ClusterInfo", "NodeRecord", "PartitionRecord", "ShardLease", "ShardRound", "TopicRecord"]
