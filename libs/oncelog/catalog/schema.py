"""Catalog tables (SQLAlchemy Core). SQL is the single source of truth for everything that fences."""

from __future__ import annotations

import sqlalchemy as sa

from oncelog.storage.sql import Migration

SCHEMA_NAME = "catalog"
metadata = sa.MetaData()

cluster = sa.Table(
    "cluster",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # always 1: one cluster per catalog
    sa.Column("cluster_id", sa.String(36), nullable=False),
    sa.Column("txn_coordinator_shards", sa.Integer, nullable=False),
    sa.Column("group_offsets_shards", sa.Integer, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
)

nodes = sa.Table(
    "nodes",
    metadata,
    sa.Column("node_id", sa.String(255), primary_key=True),
    sa.Column("role", sa.String(32), nullable=False),
    sa.Column("address", sa.String(255), nullable=False),
    sa.Column("node_epoch", sa.BigInteger, nullable=False),
    sa.Column("lease_expires_at_ms", sa.BigInteger, nullable=False),
    sa.Column("registered_at_ms", sa.BigInteger, nullable=False),
    sa.Column("rack", sa.String(255), nullable=True),  # rack or zone label; replica placement spreads over racks
    # host:port clients outside the services' network reach the node at (its external listener); NULL: none
    sa.Column("external_address", sa.String(255), nullable=True),
)

topics = sa.Table(
    "topics",
    metadata,
    sa.Column("name", sa.String(249), primary_key=True),
    sa.Column("topic_id", sa.String(36), nullable=False, unique=True),
    sa.Column("partition_count", sa.Integer, nullable=False),
    sa.Column("configs", sa.JSON, nullable=False),
    sa.Column("created_at_ms", sa.BigInteger, nullable=False),
)

partitions = sa.Table(
    "partitions",
    metadata,
    sa.Column("topic", sa.String(249), sa.ForeignKey("topics.name", ondelete="CASCADE"), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("leader_node_id", sa.String(255), nullable=False),
    sa.Column("leader_epoch", sa.Integer, nullable=False),
    sa.Column("replicas", sa.JSON, nullable=False),  # preferred leader first
    sa.Column("isr", sa.JSON, nullable=True),  # in-sync replicas; NULL only in rows written before replication
    # grows on every change of leader, ISR or replicas; every such change is conditional on it (AlterPartition)
    sa.Column("partition_epoch", sa.Integer, nullable=False, server_default="0"),
)

deleted_topics = sa.Table(
    "deleted_topics",
    metadata,
    # A topic created again under this name starts its leader epochs here, above every epoch its earlier
    # incarnations used: a request carrying the new epoch makes a storage node that still serves the old
    # incarnation re-read the catalog instead of writing into (or reading from) the deleted partition.
    sa.Column("name", sa.String(249), primary_key=True),
    sa.Column("next_leader_epoch", sa.Integer, nullable=False),
)

coordinator_shards = sa.Table(
    "coordinator_shards",
    metadata,
    sa.Column("role", sa.String(32), primary_key=True),
    sa.Column("shard", sa.Integer, primary_key=True),
    sa.Column("owner_node_id", sa.String(255), nullable=True),
    sa.Column("coordinator_epoch", sa.Integer, nullable=False),
    sa.Column("lease_expires_at_ms", sa.BigInteger, nullable=False),
)

pid_counter = sa.Table(
    "pid_counter",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),  # always 1
    sa.Column("next_id", sa.BigInteger, nullable=False),
)

pid_requesters = sa.Table(
    "pid_requesters",
    metadata,
    sa.Column("requester_id", sa.String(255), primary_key=True),
    sa.Column("requester_epoch", sa.BigInteger, nullable=False),
)


def _add_replication_columns(conn: sa.Connection) -> None:
    """Version 1: node racks, and per-partition ISR and partition epoch (a catalog created before replication).

    A fresh catalog already has the columns (``create_all`` runs first), so each one is added only if missing.
    Existing partitions had one replica, which was in sync: their ISR becomes their replica list.
    """
    inspector = sa.inspect(conn)
    node_columns = {c["name"] for c in inspector.get_columns("nodes")}
    partition_columns = {c["name"] for c in inspector.get_columns("partitions")}
    if "rack" not in node_columns:
        conn.execute(sa.text("ALTER TABLE nodes ADD COLUMN rack VARCHAR(255)"))
    if "isr" not in partition_columns:
        conn.execute(sa.text("ALTER TABLE partitions ADD COLUMN isr JSON"))
    if "partition_epoch" not in partition_columns:
        conn.execute(sa.text("ALTER TABLE partitions ADD COLUMN partition_epoch INTEGER NOT NULL DEFAULT 0"))
    conn.execute(sa.update(partitions).where(partitions.c.isr.is_(None)).values(isr=partitions.c.replicas))


def _add_external_address(conn: sa.Connection) -> None:
    """Version 2: each node's external listener address (docs/design/external-listener.md)."""
    if "external_address" not in {c["name"] for c in sa.inspect(conn).get_columns("nodes")}:
        conn.execute(sa.text("ALTER TABLE nodes ADD COLUMN external_address VARCHAR(255)"))


MIGRATIONS: list[Migration] = [_add_replication_columns, _add_external_address]
