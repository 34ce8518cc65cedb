"""ShardLeaseManager against a real catalog (SQLite) with a controlled clock."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.catalog import CatalogStore, shard_for
from oncelog.errors import NotCoordinator, Reason
from oncelog.group_offsets.offset_manager import ShardFence, ShardFenced
from oncelog.group_offsets.offset_store import MemoryOffsetStore
from oncelog.group_offsets.shards import ShardLeaseManager
from oncelog.storage.sql import create_engine

SHARDS = 4
LEASE_MS = 3_000
MARGIN_MS = 300  # a tenth of the lease
GROUP = "payments"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[CatalogStore]:
    store = CatalogStore(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    store.migrate()
    store.ensure_cluster(16, SHARDS, 0)
    yield store
    store.engine.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def offsets() -> MemoryOffsetStore:
    return MemoryOffsetStore()


def replica(catalog: CatalogStore, clock: Clock, offsets: MemoryOffsetStore, node_id: str) -> ShardLeaseManager:
    catalog.register_node(node_id, "group-offsets", f"10.0.0.{node_id[-1]}:9000", 3_600_000, clock())
    return ShardLeaseManager(
        catalog, node_id=node_id, shard_count=SHARDS, lease_ms=LEASE_MS, clock=clock, claim=offsets.claim_shard
    )


def write(offsets: MemoryOffsetStore, fence: ShardFence) -> None:
    offsets.write({GROUP: fence}, lambda tx: tx.put_group(GROUP, tx.group(GROUP)))


def test_acquires_every_free_shard_and_claims_its_epoch(catalog, clock, offsets) -> None:
    a = replica(catalog, clock, offsets, "go-1")
    a.renew()
    assert a.owned_shards() == dict.fromkeys(range(SHARDS), 1)
    fence = a.fence_for(GROUP)
    assert fence == ShardFence(shard_for(GROUP, SHARDS), 1)
    write(offsets, fence)  # the claim reached the state store, so the fenced write is accepted


def test_other_replica_answers_not_coordinator_naming_the_owner(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    a.renew()
    b.renew()
    assert b.owned_shards() == {}
    with pytest.raises(NotCoordinator) as info:
        b.fence_for(GROUP)
    assert info.value.reason is Reason.NOT_COORDINATOR and info.value.retriable
    assert info.value.metadata == {
        "shard": str(shard_for(GROUP, SHARDS)),
        "coordinator": "10.0.0.1:9000",
        "coordinator_node_id": "go-1",
    }


def test_takes_over_only_after_the_lease_expired_and_with_a_higher_epoch(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    a.renew()
    old_fence = a.fence_for(GROUP)
    clock.now += LEASE_MS - 1
    b.renew()
    assert b.owned_shards() == {}, "the lease has not expired yet"
    clock.now += 1
    b.renew()
    assert b.owned_shards() == dict.fromkeys(range(SHARDS), 2)
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    with pytest.raises(ShardFenced):
        write(offsets, old_fence)  # even a replica that missed the change cannot write any more
    write(offsets, b.fence_for(GROUP))
    a.renew()
    assert a.owned_shards() == {}
    with pytest.raises(NotCoordinator) as info:
        a.fence_for(GROUP)
    assert info.value.metadata["coordinator_node_id"] == "go-2"


def test_renewal_keeps_the_shards_and_the_epoch(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    for _ in range(5):
        a.renew()
        clock.now += LEASE_MS // 3
        b.renew()
    assert a.owned_shards() == dict.fromkeys(range(SHARDS), 1)
    assert b.owned_shards() == {}


def test_stops_serving_before_its_catalog_lease_expires(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    a.renew()
    clock.now += LEASE_MS - MARGIN_MS - 1
    a.fence_for(GROUP)
    clock.now += 1
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    b.renew()
    assert b.owned_shards() == {}, "nobody may serve the shard while the old lease is still valid in the catalog"


def test_release_lets_another_replica_take_over_at_once(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    a.renew()
    a.release_all()
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    b.renew()
    assert b.owned_shards() == dict.fromkeys(range(SHARDS), 2)


def test_refused_claim_means_the_shard_is_not_served(catalog, clock, offsets) -> None:
    shard = shard_for(GROUP, SHARDS)
    assert offsets.claim_shard(shard, 7)  # the state store has seen a newer owner than the catalog reports
    a = replica(catalog, clock, offsets, "go-1")
    a.renew()
    assert shard not in a.owned_shards()
    assert len(a.owned_shards()) == SHARDS - 1
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)


def test_fenced_report_stops_serving_that_shard_until_a_renewal_confirms_it(catalog, clock, offsets) -> None:
    a = replica(catalog, clock, offsets, "go-1")
    a.renew()
    fence = a.fence_for(GROUP)
    a.fenced(ShardFence(fence.shard, fence.coordinator_epoch - 1))  # a report about an older epoch is ignored
    assert a.fence_for(GROUP) == fence
    a.fenced(fence)
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    a.renew()  # the catalog still says the shard is ours at the same epoch, and the claim holds
    assert a.fence_for(GROUP) == fence


async def test_start_acquires_before_serving_and_stop_releases(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    await a.start("10.0.0.1:9000")
    assert a.owned_shards() == dict.fromkeys(range(SHARDS), 1)
    await a.stop()
    assert a.owned_shards() == {}
    b.renew()
    assert b.owned_shards() == dict.fromkeys(range(SHARDS), 2)
