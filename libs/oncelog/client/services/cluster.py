"""ClusterService and PidAllocatorService clients."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.pid import v1 as pid_pb
from oncelog.client.records import (
    ClusterDescription,
    ConfigEntry,
    NewTopic,
    NodeInfo,
    PartitionInfo,
    TopicInfo,
)
from oncelog.client.services.retry import call
from oncelog.client.services.wire import (
    _ROLE_OF_PB,
    _Client,
    topic_info,
)
from oncelog.vocabulary import CoordinatorKind

# --------------------------------------------------------------------------------------- ClusterService


_COORDINATOR_PB = {
    CoordinatorKind.TRANSACTION: cluster_pb.COORDINATOR_TYPE_TRANSACTION,
    CoordinatorKind.GROUP: cluster_pb.COORDINATOR_TYPE_GROUP,
}


def topics_of(response: cluster_pb.MetadataResponse) -> list[TopicInfo]:
    """The topics of a Metadata answer, sorted by name (shared by the asyncio and the blocking client)."""
    return sorted((topic_info(t) for t in response.topics), key=lambda t: t.name)


def find_coordinator_request(key: str, kind: CoordinatorKind) -> cluster_pb.FindCoordinatorRequest:
    """The FindCoordinator request for ``key``'s shard of ``kind``."""
    return cluster_pb.FindCoordinatorRequest(key=key, type=_COORDINATOR_PB[kind])


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
        return topics_of(response)

    async def find_coordinator(
        self, address: str, key: str, kind: CoordinatorKind, *, timeout_s: float | None = None
    ) -> str:
        """The address of the process owning ``key``'s shard (a transactional id or a group id).

        Raises:
            CoordinatorNotAvailable: no process owns the shard right now (retriable).
        """
        response = await call(
            self._stub(address).FindCoordinator, find_coordinator_request(key, kind), timeout_s=self._timeout(timeout_s)
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

    async def alter_partition_replicas(
        self,
        address: str,
        topic: str,
        partition: int,
        replicas: Sequence[str],
        *,
        partition_epoch: int = 0,
        timeout_s: float | None = None,
    ) -> PartitionInfo:
        """Give one partition these replicas (a step of a reassignment); returns its new catalog row."""
        response = await call(
            self._stub(address).AlterPartitionReplicas,
            cluster_pb.AlterPartitionReplicasRequest(
                topic=topic, partition=partition, replica_node_ids=list(replicas), partition_epoch=partition_epoch
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return topic_info(cluster_pb.TopicMetadata(name=topic, partitions=[response.partition])).partitions[0]

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
