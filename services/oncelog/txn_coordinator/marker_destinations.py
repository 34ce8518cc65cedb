"""CatalogMarkerDestinations: where each participant's marker goes, read from the cluster catalog.

The :class:`~.marker_channel.DestinationResolver` of the marker channel: a partition's marker goes to the
partition-storage node leading it, a group's to the group-offsets node holding the lease of the group's shard.
Kafka's ``TransactionMarkerChannelManager`` reads the same from its metadata cache (``getPartitionLeaderEndpoint``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from oncelog.catalog.store import CatalogStore, NodeRecord, TopicRecord
from oncelog.catalog.topics import shard_for
from oncelog.errors import UnknownTopicOrPartition
from oncelog.vocabulary import Role, TopicPartition

from .marker_channel import DestinationService, MarkerDestination, Route, Unroutable

GROUP_OFFSETS_ROLE = Role.GROUP_OFFSETS


class CatalogMarkerDestinations:
    """Routes from the cluster catalog: partition leaders, group-offsets shard owners, node addresses.

    Results are cached and refreshed only for what :meth:`invalidate` names, as Kafka's metadata cache
    is refreshed on NOT_LEADER. Participants found offline are invalidated right away, so they are
    looked up afresh on their next attempt.
    """

    def __init__(self, catalog: CatalogStore, clock: Callable[[], int]) -> None:
        self._catalog = catalog
        self._clock = clock
        self._topics: dict[str, TopicRecord | None] = {}
        """Topic name -> record as last read; None when it did not exist then (kept only until routed)."""
        self._group_shards: int | None = None
        self._group_owners: dict[int, str | None] = {}
        """group-offsets shard -> owner node id; None when no live lease exists."""
        self._nodes: dict[str, NodeRecord] | None = None
        """Live nodes by id, as last read."""

    async def resolve(
        self, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[dict[TopicPartition, Route], dict[str, Route]]:
        """Current route of every partition and group (see :class:`DestinationResolver`)."""
        # A cached record only ever routes; "deleted" is concluded from a fresh read alone, so a topic that
        # was deleted and created again (with as many partitions or more) is found again (Kafka re-reads
        # its metadata each time it enqueues a marker).
        unknown = {topic for topic, p in partitions if not self._has_partition(topic, p)}
        if unknown:
            self._topics.update(await asyncio.to_thread(self._read_topics, unknown))
        if groups and self._group_shards is None:
            self._group_shards = (await asyncio.to_thread(self._catalog.cluster_info)).group_offsets_shards
        group_shard = {g: shard_for(g, self._group_shards) for g in groups} if self._group_shards else {}
        missing_shards = {s for s in group_shard.values() if s not in self._group_owners}
        if missing_shards:
            self._group_owners.update(await asyncio.to_thread(self._read_group_owners, missing_shards))
        wanted = {self._leader(tp) for tp in partitions} | {self._group_owners.get(s) for s in group_shard.values()}
        wanted.discard(None)
        if self._nodes is None or not wanted <= self._nodes.keys():
            self._nodes = await asyncio.to_thread(self._read_live_nodes)

        partition_routes = {tp: self._partition_route(tp) for tp in partitions}
        group_routes = {
            group: self._node_route(DestinationService.GROUP_OFFSETS, self._group_owners.get(shard))
            for group, shard in group_shard.items()
        }
        # Whatever was found offline or missing is read afresh on its next attempt: leaders and owners move,
        # and a deleted topic can be created again under its name.
        for tp, route in partition_routes.items():
            if not isinstance(route, MarkerDestination):
                self._topics.pop(tp[0], None)
        for group, route in group_routes.items():
            if route is Unroutable.OFFLINE:
                self._group_owners.pop(group_shard[group], None)
        return partition_routes, group_routes

    def invalidate(
        self,
        partitions: Collection[TopicPartition] = (),
        groups: Collection[str] = (),
        destination: MarkerDestination | None = None,
    ) -> None:
        """Forget the named routes (see :class:`DestinationResolver`)."""
        for topic, _ in partitions:
            self._topics.pop(topic, None)
        if groups and self._group_shards:
            for group in groups:
                self._group_owners.pop(shard_for(group, self._group_shards), None)
        if destination is not None or partitions or groups:
            self._nodes = None

    def _has_partition(self, topic: str, partition: int) -> bool:
        record = self._topics.get(topic)
        return record is not None and 0 <= partition < len(record.partitions)

    def _leader(self, tp: TopicPartition) -> str | None:
        record = self._topics.get(tp[0])
        if record is None or not 0 <= tp[1] < len(record.partitions):
            return None
        return record.partitions[tp[1]].leader_node_id

    def _partition_route(self, tp: TopicPartition) -> Route:
        if tp[0] not in self._topics:
            return Unroutable.OFFLINE  # not read (a concurrent invalidation); resolved next time
        record = self._topics[tp[0]]
        if record is None or not 0 <= tp[1] < len(record.partitions):
            return Unroutable.DELETED
        return self._node_route(DestinationService.PARTITION_STORAGE, record.partitions[tp[1]].leader_node_id)

    def _node_route(self, service: DestinationService, node_id: str | None) -> Route:
        node = None if node_id is None or self._nodes is None else self._nodes.get(node_id)
        if node is None:
            return Unroutable.OFFLINE
        return MarkerDestination(service, node.node_id, node.address)

    def _read_topics(self, names: set[str]) -> dict[str, TopicRecord | None]:
        try:
            found = {t.name: t for t in self._catalog.describe_topics(sorted(names))}
        except UnknownTopicOrPartition:
            # Some of them are gone; ask one by one to tell which (rare: only after a topic deletion).
            found = {}
            for name in names:
                try:
                    found.update({t.name: t for t in self._catalog.describe_topics([name])})
                except UnknownTopicOrPartition:
                    pass
        return {name: found.get(name) for name in names}

    def _read_group_owners(self, shards: set[int]) -> dict[int, str | None]:
        now = self._clock()
        owners: dict[int, str | None] = {}
        for shard in shards:
            lease = self._catalog.shard_lease(GROUP_OFFSETS_ROLE, shard)
            alive = lease is not None and lease.owner_node_id is not None and lease.lease_expires_at_ms > now
            owners[shard] = lease.owner_node_id if alive and lease is not None else None
        return owners

    def _read_live_nodes(self) -> dict[str, NodeRecord]:
        return {n.node_id: n for n in self._catalog.list_nodes(self._clock())}


__all__ = ["GROUP_OFFSETS_ROLE", "CatalogMarkerDestinations"]
