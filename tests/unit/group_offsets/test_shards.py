"""Group-offsets shard ownership (claim before serving, fences, owner redirects) over a real SQLite catalog.

The lease mechanics are tested in tests/unit/catalog/test_leases.py; these tests check what group-offsets adds:
the claim in the state store, the fences the offset manager writes under, NOT_COORDINATOR naming the owner.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.catalog import CatalogStore, shard_for
from oncelog.errors import NotCoordinator, Reason
from oncelog.group_offsets.offset_manager import ShardFence, ShardFenced
from oncelog.group_offsets.offset_store import MemoryOffsetStore
from oncelog.group_offsets.shards import GroupShardOwnership, group_shard_leases
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


def replica(catalog: CatalogStore, clock: Clock, offsets: MemoryOffsetStore, node_id: str) -> GroupShardOwnership:
    catalog.register_node(node_id, "group-offsets", f"10.0.0.{node_id[-1]}:9000", 3_600_000, clock())
    return GroupShardOwnership(
        group_shard_leases(
            catalog, node_id=node_id, shard_count=SHARDS, lease_ms=LEASE_MS, clock=clock, claim=offsets.claim_shard
        )
    )


def write(offsets: MemoryOffsetStore, fence: ShardFence) -> None:
    offsets.write({GROUP: fence}, lambda tx: tx.put_group(GROUP, tx.group(GROUP)))


async def test_acquires_every_free_shard_and_claims_its_epoch(catalog, clock, offsets) -> None:
    a = replica(catalog, clock, offsets, "go-1")
    await a.leases.run_once()
    assert a.owned_shards() == dict.fromkeys(range(SHARDS), 1)
    fence = a.fence_for(GROUP)
    assert fence == ShardFence(shard_for(GROUP, SHARDS), 1)
    write(offsets, fence)  # the claim reached the state store, so the fenced write is accepted


async def test_other_replica_answers_not_coordinator_naming_the_owner(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    await a.leases.run_once()
    await b.leases.run_once()
    assert b.owned_shards() == {}
    with pytest.raises(NotCoordinator) as info:
        b.fence_for(GROUP)
    assert info.value.reason is Reason.NOT_COORDINATOR and info.value.retriable
    assert info.value.metadata == {
        "shard": str(shard_for(GROUP, SHARDS)),
        "coordinator": "10.0.0.1:9000",
        "coordinator_node_id": "go-1",
    }


async def test_takes_over_only_after_the_lease_expired_and_with_a_higher_epoch(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    await a.leases.run_once()
    old_fence = a.fence_for(GROUP)
    clock.now += LEASE_MS - 1
    await b.leases.run_once()
    assert b.owned_shards() == {}, "the lease has not expired yet"
    clock.now += 1
    await b.leases.run_once()
    assert b.owned_shards() == dict.fromkeys(range(SHARDS), 2)
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    with pytest.raises(ShardFenced):
        write(offsets, old_fence)  # even a replica that missed the change cannot write any more
    write(offsets, b.fence_for(GROUP))
    await a.leases.run_once()
    assert a.owned_shards() == {}
    with pytest.raises(NotCoordinator) as info:
        a.fence_for(GROUP)
    assert info.value.metadata["coordinator_node_id"] == "go-2"


async def test_renewal_keeps_the_shards_and_the_epoch(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    for _ in range(5):
        await a.leases.run_once()
        clock.now += LEASE_MS // 3
        await b.leases.run_once()
    assert a.owned_shards() == dict.fromkeys(range(SHARDS), 1)
    assert b.owned_shards() == {}


async def test_stops_serving_before_its_catalog_lease_expires(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    await a.leases.run_once()
    clock.now += LEASE_MS - MARGIN_MS - 1
    a.fence_for(GROUP)
    clock.now += 1
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    await b.leases.run_once()
    assert b.owned_shards() == {}, "nobody may serve the shard while the old lease is still valid in the catalog"


async def test_release_lets_another_replica_take_over_at_once(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    await a.leases.run_once()
    await a.leases.stop()
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    await b.leases.run_once()
    assert b.owned_shards() == dict.fromkeys(range(SHARDS), 2)


async def test_refused_claim_means_the_shard_is_not_served(catalog, clock, offsets) -> None:
    shard = shard_for(GROUP, SHARDS)
    assert offsets.claim_shard(shard, 7)  # the state store has seen a newer owner than the catalog reports
    a = replica(catalog, clock, offsets, "go-1")
    await a.leases.run_once()
    assert shard not in a.owned_shards()
    assert len(a.owned_shards()) == SHARDS - 1
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)


async def test_fenced_report_stops_serving_that_shard_until_a_renewal_confirms_it(catalog, clock, offsets) -> None:
    a = replica(catalog, clock, offsets, "go-1")
    await a.leases.run_once()
    fence = a.fence_for(GROUP)
    a.fenced(ShardFence(fence.shard, fence.coordinator_epoch - 1))  # a report about an older epoch is ignored
    assert a.fence_for(GROUP) == fence
    a.fenced(fence)
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
    await a.leases.run_once()  # the catalog still says the shard is ours at the same epoch, and the claim holds
    assert a.fence_for(GROUP) == fence


async def test_start_acquires_before_serving_and_stop_releases(catalog, clock, offsets) -> None:
    a, b = replica(catalog, clock, offsets, "go-1"), replica(catalog, clock, offsets, "go-2")
    await a.leases.start()
    assert a.owned_shards() == dict.fromkeys(range(SHARDS), 1)
    await a.leases.stop()
    assert a.owned_shards() == {}
    await b.leases.run_once()
    assert b.owned_shards() == dict.fromkeys(range(SHARDS), 2)


async def test_fenced_write_from_a_request_thread_stops_serving_the_shard_at_once(catalog, clock, offsets) -> None:
    a = replica(catalog, clock, offsets, "go-1")
    await a.leases.run_once()
    fence = a.fence_for(GROUP)
    assert offsets.claim_shard(fence.shard, fence.coordinator_epoch + 1)  # a newer owner claimed the shard

    def write_as_a_request_does() -> None:
        try:
            write(offsets, a.fence_for(GROUP))
        except ShardFenced as err:
            a.fenced(err.fence)  # what OffsetMetadataManager does on a refused write
        with pytest.raises(NotCoordinator):
            a.fence_for(GROUP)

    await asyncio.to_thread(write_as_a_request_does)
    await a.leases.run_once()  # the catalog still names go-1 at the old epoch, but the claim is refused now
    with pytest.raises(NotCoordinator):
        a.fence_for(GROUP)
