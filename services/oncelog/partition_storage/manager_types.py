"""The values the partition manager works with: node-wide storage settings, a partition as the catalog
describes it, one partition of a fetch, and this node's lease."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from oncelog.catalog.topics import TopicConfig
from oncelog.partition_storage.engine import EngineConfig

__all__ = [
    "NO_EPOCH_CHECK",
    "FetchSpec",
    "NodeLease",
    "PartitionAssignment",
    "PartitionKey",
    "PartitionReplicas",
    "ReplicaPosition",
    "StorageNodeConfig",
]

NO_EPOCH_CHECK = -1
"""A request's leader epoch that asks for no check."""


@dataclass(frozen=True, slots=True)
class StorageNodeConfig:
    """Node-wide storage settings (the topic's own settings come from the catalog).

    Attributes:
        data_dir: root of the partition directories.
        index_interval_bytes, producer_id_expiration_ms, validate_records, strict_marker_epoch: passed to
            every :class:`EngineConfig`.
        metadata_refresh_interval_ms: period of the catalog refresh.
        producer_id_expiration_check_interval_ms, retention_check_interval_ms, flush_interval_ms,
            checkpoint_interval_ms: periods of the maintenance loops.
        partition_fetch_bytes: a partition's fetch budget when the request leaves it 0 (Kafka's
            ``max.partition.fetch.bytes``).
        fetch_max_bytes: the largest fetch response; also the default when the request leaves it 0.
        fetch_max_wait_ms: the longest a fetch long-polls, whatever the request asks.
    """

    data_dir: Path
    index_interval_bytes: int = 4096
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    validate_records: bool = False
    strict_marker_epoch: bool = True
    metadata_refresh_interval_ms: int = 2_000
    producer_id_expiration_check_interval_ms: int = 600_000
    retention_check_interval_ms: int = 300_000
    flush_interval_ms: int = 1_000
    checkpoint_interval_ms: int = 60_000
    partition_fetch_bytes: int = 1024 * 1024
    fetch_max_bytes: int = 50 * 1024 * 1024
    fetch_max_wait_ms: int = 30_000
    replica_lag_time_max_ms: int = 10_000
    replica_fetch_wait_ms: int = 500

    def engine_config(self, topic: TopicConfig) -> EngineConfig:
        """The engine settings of a partition of a topic with ``topic`` configs."""
        return EngineConfig(
            segment_bytes=topic.segment_bytes,
            segment_ms=topic.segment_ms,
            retention_bytes=topic.retention_bytes,
            retention_ms=topic.retention_ms,
            max_message_bytes=topic.max_message_bytes,
            flush_sync=topic.flush != "async",
            follower_fsync=topic.flush == "sync",
            index_interval_bytes=self.index_interval_bytes,
            producer_id_expiration_ms=self.producer_id_expiration_ms,
            validate_records=self.validate_records,
            strict_marker_epoch=self.strict_marker_epoch,
        )


@dataclass(frozen=True, slots=True)
class PartitionAssignment:
    """One partition as the catalog describes it."""

    topic: str
    partition: int
    topic_id: str
    leader_node_id: str
    leader_epoch: int
    config: TopicConfig
    replicas: tuple[str, ...] = ()
    isr: tuple[str, ...] = ()
    partition_epoch: int = 0

    @property
    def replicated(self) -> bool:
        """True when the partition has more than one replica (docs/design/replication.md)."""
        return len(self.replicas) > 1


@dataclass(frozen=True, slots=True)
class FetchSpec:
    """One partition of a fetch: where to read from and how much (0 bytes: the node's default)."""

    topic: str
    partition: int
    offset: int
    max_bytes: int = 0
    leader_epoch: int = NO_EPOCH_CHECK


PartitionKey = tuple[str, int]


class NodeLease(Protocol):
    """This node's catalog lease as its own process last renewed it (``NodeMembership`` implements it)."""

    lease_ms: int

    def monotonic_ms(self) -> int: ...

    def lease_valid_since(self) -> int: ...

    def lease_valid_until(self) -> int: ...


@dataclass(frozen=True, slots=True)
class ReplicaPosition:
    """One replica of a partition as its leader sees it (DescribeReplicas).

    Attributes:
        node_id: the storage node holding the replica.
        log_end_offset: the leader's own log end, or the offset of the follower's latest fetch (-1: none since
            this leader's epoch began).
        lag: the leader's log end minus the replica's (the whole log when it has not fetched).
        in_sync: the replica is in the ISR.
        caught_up_ms_ago: how long ago the follower last reached the leader's log end (-1: not in this epoch;
            0 for the leader).
    """

    node_id: str
    log_end_offset: int
    lag: int
    in_sync: bool
    caught_up_ms_ago: int


@dataclass(frozen=True, slots=True)
class PartitionReplicas:
    """A partition's replicas, leader first, as its leader sees them."""

    leader_epoch: int
    high_watermark: int
    replicas: tuple[ReplicaPosition, ...]
