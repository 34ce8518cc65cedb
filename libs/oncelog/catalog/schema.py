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
    sa.Column("replicas", sa.JSON, nullable=False),
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

MIGRATIONS: list[Migration] = []
