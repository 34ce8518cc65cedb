"""CatalogMarkerDestinations over a real SQLite catalog: partition leaders, group shard owners, deleted topics."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.catalog.store import CatalogStore
from oncelog.catalog.topics import shard_for
from oncelog.storage.sql import create_engine
from oncelog.txn_coordinator.marker_channel import DestinationService, MarkerDestination, Unroutable
from oncelog.txn_coordinator.marker_destinations import CatalogMarkerDestinations

pytestmark = pytest.mark.timeout(20)

GROUP = "billing"


@pytest.fixture
def catalog(tmp_path: Path) -> CatalogStore:
    store = CatalogStore(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    store.migrate()
    store.ensure_cluster(txn_coordinator_shards=4, group_offsets_shards=4, now_ms=0)
    return store


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


async def test_catalog_routes_partitions_to_leaders_and_groups_to_shard_owners(catalog: CatalogStore) -> None:
    clock = Clock(1_000)
    catalog.register_node("storage-0", "partition-storage", "10.0.0.1:9000", 60_000, clock.now)
    catalog.register_node("storage-1", "partition-storage", "10.0.0.2:9000", 60_000, clock.now)
    catalog.register_node("offsets-0", "group-offsets", "10.0.0.3:9000", 60_000, clock.now)
    (topic,) = catalog.create_topics([("orders", 2, {})], clock.now)
    catalog.acquire_shard("group-offsets", shard_for(GROUP, 4), "offsets-0", 60_000, clock.now)
    resolver = CatalogMarkerDestinations(catalog, clock)

    partitions, groups = await resolver.resolve({("orders", 0), ("orders", 1), ("orders", 7), ("nope", 0)}, {GROUP})

    addresses = {"storage-0": "10.0.0.1:9000", "storage-1": "10.0.0.2:9000"}
    for p in (0, 1):
        leader = topic.partitions[p].leader_node_id
        assert partitions[("orders", p)] == MarkerDestination(
            DestinationService.PARTITION_STORAGE, leader, addresses[leader]
        )
    assert partitions[("orders", 7)] is Unroutable.DELETED
    assert partitions[("nope", 0)] is Unroutable.DELETED
    assert groups[GROUP] == MarkerDestination(DestinationService.GROUP_OFFSETS, "offsets-0", "10.0.0.3:9000")


async def test_catalog_reports_a_dead_leader_as_offline_and_finds_its_new_address(catalog: CatalogStore) -> None:
    clock = Clock(1_000)
    catalog.register_node("storage-0", "partition-storage", "10.0.0.1:9000", 5_000, clock.now)
    catalog.create_topics([("orders", 1, {})], clock.now)
    resolver = CatalogMarkerDestinations(catalog, clock)
    first, _ = await resolver.resolve({("orders", 0)}, ())
    assert isinstance(first[("orders", 0)], MarkerDestination)

    clock.now = 10_000  # the node's lease lapsed: offline, which is not a deletion
    resolver.invalidate(destination=first[("orders", 0)])  # type: ignore[arg-type]
    offline, _ = await resolver.resolve({("orders", 0)}, ())
    assert offline[("orders", 0)] is Unroutable.OFFLINE

    catalog.register_node("storage-0", "partition-storage", "10.0.0.9:9000", 5_000, clock.now)
    moved, _ = await resolver.resolve({("orders", 0)}, ())
    assert moved[("orders", 0)] == MarkerDestination(DestinationService.PARTITION_STORAGE, "storage-0", "10.0.0.9:9000")


async def test_catalog_group_without_a_live_owner_is_offline(catalog: CatalogStore) -> None:
    clock = Clock(1_000)
    catalog.register_node("offsets-0", "group-offsets", "10.0.0.3:9000", 600_000, clock.now)
    resolver = CatalogMarkerDestinations(catalog, clock)
    _, groups = await resolver.resolve((), {GROUP})
    assert groups[GROUP] is Unroutable.OFFLINE
    catalog.acquire_shard("group-offsets", shard_for(GROUP, 4), "offsets-0", 60_000, clock.now)
    _, groups = await resolver.resolve((), {GROUP})
    assert groups[GROUP] == MarkerDestination(DestinationService.GROUP_OFFSETS, "offsets-0", "10.0.0.3:9000")


STORAGE_0 = MarkerDestination(DestinationService.PARTITION_STORAGE, "storage-0", "10.0.0.1:9000")


async def routed_orders(catalog: CatalogStore) -> tuple[Clock, CatalogMarkerDestinations]:
    """A resolver that has routed ``orders-0`` (one partition, on storage-0) once, so the topic is cached."""
    clock = Clock(1_000)
    catalog.register_node("storage-0", "partition-storage", "10.0.0.1:9000", 60_000, clock.now)
    catalog.create_topics([("orders", 1, {})], clock.now)
    resolver = CatalogMarkerDestinations(catalog, clock)
    first, _ = await resolver.resolve({("orders", 0)}, ())
    assert first[("orders", 0)] == STORAGE_0
    return clock, resolver


async def test_catalog_routes_a_topic_deleted_and_created_again(catalog: CatalogStore) -> None:
    """Issue 25 item 1: "topic missing" is never remembered, so the re-created topic is routed again."""
    clock, resolver = await routed_orders(catalog)
    catalog.delete_topics(["orders"])
    resolver.invalidate(partitions=[("orders", 0)])  # as after the old leader answered UNKNOWN_TOPIC_OR_PARTITION
    deleted, _ = await resolver.resolve({("orders", 0)}, ())
    assert deleted[("orders", 0)] is Unroutable.DELETED

    catalog.create_topics([("orders", 1, {})], clock.now)
    again, _ = await resolver.resolve({("orders", 0)}, ())
    assert again[("orders", 0)] == STORAGE_0


async def test_catalog_routes_the_new_partitions_of_a_topic_created_again_with_more(catalog: CatalogStore) -> None:
    """Issue 25 item 1: an old partition count is never taken from the cache as proof of a deletion."""
    clock, resolver = await routed_orders(catalog)
    catalog.delete_topics(["orders"])
    catalog.create_topics([("orders", 3, {})], clock.now)
    routes, _ = await resolver.resolve({("orders", 0), ("orders", 2)}, ())
    assert routes[("orders", 2)] == STORAGE_0
    assert routes[("orders", 0)] == STORAGE_0
    gone, _ = await resolver.resolve({("orders", 3)}, ())
    assert gone[("orders", 3)] is Unroutable.DELETED
