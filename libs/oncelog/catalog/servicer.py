"""ClusterServicer: the ClusterService every oncelog process serves, over the shared catalog."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from oncelog.api.cluster import v1 as pb
from oncelog.catalog.store import CatalogStore, NodeRecord, PartitionRecord, TopicRecord
from oncelog.errors import CoordinatorNotAvailable, InvalidRequest
from oncelog.vocabulary import Role

_ROLE_TO_PB: dict[str, pb.ServiceRole.ValueType] = {
    Role.PID_ALLOCATOR: pb.SERVICE_ROLE_PID_ALLOCATOR,
    Role.TXN_COORDINATOR: pb.SERVICE_ROLE_TXN_COORDINATOR,
    Role.PARTITION_STORAGE: pb.SERVICE_ROLE_PARTITION_STORAGE,
    Role.GROUP_OFFSETS: pb.SERVICE_ROLE_GROUP_OFFSETS,
}
_COORDINATOR_ROLE = {
    pb.COORDINATOR_TYPE_TRANSACTION: Role.TXN_COORDINATOR,
    pb.COORDINATOR_TYPE_GROUP: Role.GROUP_OFFSETS,
}


class ClusterServicer(pb.ClusterServiceServicer):
    """Translate ClusterService calls to :class:`CatalogStore` operations; nothing else.

    ``external=True`` is the servicer of the external listener (docs/design/external-listener.md): every address it
    answers with is a node's external address, and a node without one has none there (its partitions read as
    offline, its coordinator shards as unavailable), as a Kafka broker answers with the listener it was asked on.
    """

    def __init__(
        self,
        store: CatalogStore,
        clock: Callable[[], int],
        *,
        default_replication_factor: int = 1,
        external: bool = False,
    ) -> None:
        self.store = store
        self.clock = clock
        self.default_replication_factor = default_replication_factor
        self.external = external

    async def DescribeCluster(self, request: pb.DescribeClusterRequest, context: object) -> pb.DescribeClusterResponse:
        info = await asyncio.to_thread(self.store.cluster_info)
        nodes = await asyncio.to_thread(self.store.list_nodes, self.clock(), include_expired=request.include_expired)
        return pb.DescribeClusterResponse(
            cluster_id=info.cluster_id,
            nodes=[_node(n, self.external) for n in nodes],
            txn_coordinator_shards=info.txn_coordinator_shards,
            group_offsets_shards=info.group_offsets_shards,
        )

    async def Metadata(self, request: pb.MetadataRequest, context: object) -> pb.MetadataResponse:
        topics = await asyncio.to_thread(self.store.describe_topics, list(request.topics))
        addresses = await self._live_addresses()
        return pb.MetadataResponse(topics=[_topic(t, addresses) for t in topics])

    async def FindCoordinator(self, request: pb.FindCoordinatorRequest, context: object) -> pb.FindCoordinatorResponse:
        role = _COORDINATOR_ROLE.get(request.type)
        if role is None:
            raise InvalidRequest("type must be COORDINATOR_TYPE_TRANSACTION or COORDINATOR_TYPE_GROUP")
        if not request.key:
            raise InvalidRequest("key is required: the transactional id or group id to resolve")
        shard = await asyncio.to_thread(self.store.shard_for, role, request.key)
        lease = await asyncio.to_thread(self.store.shard_lease, role, shard)
        now = self.clock()
        if lease is None or lease.owner_node_id is None or lease.lease_expires_at_ms <= now:
            raise CoordinatorNotAvailable(f"{role} shard {shard} has no owner right now; retry shortly")
        addresses = await self._live_addresses()
        address = addresses.get(lease.owner_node_id)
        if address is None:
            if self.external and lease.owner_node_id in await self._live_addresses(external=False):
                raise CoordinatorNotAvailable(
                    f"{role} shard {shard} owner {lease.owner_node_id} has no external address: set its "
                    f"ONCELOG_{role.upper().replace('-', '_')}_EXTERNAL_LISTEN (and _EXTERNAL_ADVERTISE)"
                )
            raise CoordinatorNotAvailable(f"{role} shard {shard} owner {lease.owner_node_id} is not live; retry")
        return pb.FindCoordinatorResponse(
            shard=shard, node_id=lease.owner_node_id, address=address, coordinator_epoch=lease.coordinator_epoch
        )

    async def CreateTopics(self, request: pb.CreateTopicsRequest, context: object) -> pb.CreateTopicsResponse:
        specs = [
            (s.name, s.partitions, dict(s.configs), s.replication_factor if s.HasField("replication_factor") else None)
            for s in request.topics
        ]
        created = await asyncio.to_thread(
            self.store.create_topics,
            specs,
            self.clock(),
            validate_only=request.validate_only,
            default_replication_factor=self.default_replication_factor,
        )
        addresses = await self._live_addresses()
        return pb.CreateTopicsResponse(topics=[_topic(t, addresses) for t in created])

    async def DeleteTopics(self, request: pb.DeleteTopicsRequest, context: object) -> pb.DeleteTopicsResponse:
        deleted = await asyncio.to_thread(self.store.delete_topics, list(request.topics))
        return pb.DeleteTopicsResponse(deleted=deleted)

    async def CreatePartitions(
        self, request: pb.CreatePartitionsRequest, context: object
    ) -> pb.CreatePartitionsResponse:
        grown = await asyncio.to_thread(
            self.store.create_partitions,
            [(s.topic, s.count) for s in request.topics],
            self.clock(),
            validate_only=request.validate_only,
        )
        addresses = await self._live_addresses()
        return pb.CreatePartitionsResponse(topics=[_topic(t, addresses) for t in grown])

    async def DescribeConfigs(self, request: pb.DescribeConfigsRequest, context: object) -> pb.DescribeConfigsResponse:
        topics = await asyncio.to_thread(self.store.describe_topics, list(request.topics))
        return pb.DescribeConfigsResponse(topics=[_configs(t) for t in topics])

    async def IncrementalAlterConfigs(
        self, request: pb.IncrementalAlterConfigsRequest, context: object
    ) -> pb.IncrementalAlterConfigsResponse:
        alterations = [(a.topic, [_config_change(a.topic, op) for op in a.ops]) for a in request.topics]
        altered = await asyncio.to_thread(self.store.alter_configs, alterations, validate_only=request.validate_only)
        return pb.IncrementalAlterConfigsResponse(topics=[_configs(t) for t in altered])

    async def AlterPartitionReplicas(
        self, request: pb.AlterPartitionReplicasRequest, context: object
    ) -> pb.AlterPartitionReplicasResponse:
        updated = await asyncio.to_thread(
            self.store.reassign_replicas,
            request.topic,
            request.partition,
            list(request.replica_node_ids),
            self.clock(),
            partition_epoch=request.partition_epoch,
        )
        addresses = await self._live_addresses()
        return pb.AlterPartitionReplicasResponse(partition=_partition_metadata(updated, addresses))

    async def _live_addresses(self, *, external: bool | None = None) -> dict[str, str]:
        """Live nodes' addresses on this servicer's listener (or on the one ``external`` names)."""
        nodes = await asyncio.to_thread(self.store.list_nodes, self.clock())
        if self.external if external is None else external:
            return {n.node_id: n.external_address for n in nodes if n.external_address}
        return {n.node_id: n.address for n in nodes}


def _node(n: NodeRecord, external: bool) -> pb.Node:
    return pb.Node(
        node_id=n.node_id,
        role=_ROLE_TO_PB[n.role],
        address=(n.external_address or "") if external else n.address,
        lease_expires_at_ms=n.lease_expires_at_ms,
        node_epoch=n.node_epoch,
        rack=n.rack or "",
    )


def _topic(t: TopicRecord, addresses: dict[str, str]) -> pb.TopicMetadata:
    return pb.TopicMetadata(
        name=t.name,
        topic_id=t.topic_id,
        configs=t.config.to_map(),
        partitions=[_partition_metadata(p, addresses) for p in t.partitions],
    )


def _partition_metadata(p: PartitionRecord, addresses: dict[str, str]) -> pb.PartitionMetadata:
    return pb.PartitionMetadata(
        partition=p.partition,
        leader_node_id=p.leader_node_id,
        leader_address=addresses.get(p.leader_node_id, ""),
        leader_epoch=p.leader_epoch,
        replica_node_ids=list(p.replicas),
        isr_node_ids=list(p.isr),
        partition_epoch=p.partition_epoch,
    )


def _configs(t: TopicRecord) -> pb.TopicConfigs:
    return pb.TopicConfigs(
        topic=t.name,
        entries=[
            pb.ConfigEntry(
                name=name,
                value=value,
                source=pb.CONFIG_SOURCE_TOPIC if name in t.overrides else pb.CONFIG_SOURCE_DEFAULT,
            )
            for name, value in sorted(t.config.to_map().items())
        ],
    )


def _config_change(topic: str, op: pb.AlterConfigOp) -> tuple[str, str | None]:
    if op.op == pb.ALTER_CONFIG_OP_TYPE_SET:
        return op.name, op.value
    if op.op == pb.ALTER_CONFIG_OP_TYPE_DELETE:
        return op.name, None
    raise InvalidRequest(
        f"topic {topic!r}, config {op.name!r}: op must be ALTER_CONFIG_OP_TYPE_SET or ALTER_CONFIG_OP_TYPE_DELETE"
    )
