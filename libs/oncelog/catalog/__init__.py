"""The cluster catalog: nodes, topics, partition leaders, coordinator shards and the producer-id counter."""

from oncelog.catalog.leases import ShardLeaseManager, ShardOwner
from oncelog.catalog.store import CatalogStore, ClusterInfo, NodeRecord, PartitionRecord, ShardLease, TopicRecord
from oncelog.catalog.topics import TopicConfig, shard_for, validate_topic_name

__all__ = [
    "CatalogStore",
    "ClusterInfo",
    "NodeRecord",
    "PartitionRecord",
    "ShardLease",
    "ShardLeaseManager",
    "ShardOwner",
    "TopicConfig",
    "TopicRecord",
    "shard_for",
    "validate_topic_name",
]
