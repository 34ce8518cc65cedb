"""PartitionManager catalog refreshes: single-flight, and a request waiting for a newer one always gets it."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from oncelog.catalog import CatalogStore
from oncelog.errors import StorageUnavailable
from oncelog.partition_storage.partition_manager import PartitionManager, StorageNodeConfig
from oncelog.storage.sql import create_engine

pytestmark = pytest.mark.timeout(30)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


async def test_a_request_arriving_as_a_refresh_finishes_gets_a_newer_one_instead_of_spinning(tmp_path: Path) -> None:
    """A refresh task has finished but its completion callback has not run yet (it runs on a later turn of the
    loop) when a request that arrived after that refresh started asks for a newer one. Awaiting the finished task
    returns without yielding, so the request must start a new refresh rather than loop on the old task: looping
    never yields, the callback never runs, and the whole storage node hangs (seen as a node that stopped
    answering while it drained)."""
    catalog = CatalogStore(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    catalog.migrate()
    catalog.ensure_cluster(4, 4, wall_clock_ms())
    manager = PartitionManager(catalog, "storage-0", StorageNodeConfig(data_dir=tmp_path / "data"), clock=wall_clock_ms)
    await manager.start()
    try:
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[None] = loop.create_future()
        finished.set_result(None)
        manager._refreshing = finished  # type: ignore[assignment]  # the state between completion and callback
        arrived = loop.time()
        await asyncio.wait_for(manager._refresh_since(arrived), 10)
        assert manager._fresh_since >= arrived, "a refresh that started after the request arrived ran"
    finally:
        await manager.stop()
        catalog.engine.dispose()


def two_replica_catalog(tmp_path: Path) -> tuple[CatalogStore, str]:
    """A catalog with two live storage nodes and topic ``t`` (one partition on both); returns it and the leader."""
    catalog = CatalogStore(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    catalog.migrate()
    catalog.ensure_cluster(4, 4, wall_clock_ms())
    for node_id in ("storage-0", "storage-1"):
        catalog.register_node(node_id, "partition-storage", f"127.0.0.1:{1 + len(node_id)}", 60_000, wall_clock_ms())
    [topic] = catalog.create_topics([("t", 1, {}, 2)], wall_clock_ms())
    return catalog, topic.partitions[0].leader_node_id


async def test_a_node_back_from_a_lost_disk_applies_no_catalog_view_before_it_left_the_isrs(tmp_path: Path) -> None:
    """Its empty data directory means its ISR memberships are void. A request arriving while start() takes it out
    of them (a follower's fetch, a producer) must not make it apply the catalog as it was: it would open the
    partitions empty and lead the ones its lost incarnation led, and the followers would truncate to it."""
    catalog, me = two_replica_catalog(tmp_path)  # ``me``: the lost incarnation led the partition
    leaving = threading.Event()
    release = threading.Event()
    early = threading.Event()

    class Catalog(CatalogStore):
        def describe_topics(self, names=None):  # type: ignore[no-untyped-def]
            if not leaving.is_set():  # the first call: leave_isrs_after_disk_loss
                leaving.set()
                release.wait(10)
            elif not release.is_set():
                early.set()  # a catalog view read while the node is still in the ISR
            return super().describe_topics(names)

    manager = PartitionManager(
        Catalog(catalog.engine), me, StorageNodeConfig(data_dir=tmp_path / "data"), clock=wall_clock_ms
    )
    starting = asyncio.create_task(manager.start())
    try:
        await asyncio.to_thread(leaving.wait, 10)
        request = asyncio.create_task(manager.refresh())  # a request's refresh while start() runs
        # until the request either read the catalog or waits for start() (the waiter of its event)
        while not (early.is_set() or manager._bound._waiters):  # type: ignore[attr-defined]
            await asyncio.sleep(0.01)
        release.set()
        await asyncio.wait_for(asyncio.gather(starting, request), 20)
        assert not early.is_set(), "a catalog view was read while the node was leaving its ISRs"
        [after] = catalog.describe_topics(["t"])
        assert me not in after.partitions[0].isr and after.partitions[0].leader_node_id != me
        assert not manager._leaders, "it leads nothing"
    finally:
        release.set()
        await manager.stop()
        catalog.engine.dispose()


async def test_a_node_back_from_a_lost_disk_waits_out_a_catalog_outage_before_it_serves(tmp_path: Path) -> None:
    """The catalog database restarting while the node leaves its ISRs delays its start; it does not skip the step
    (the data directory stays unbound until it is done)."""
    catalog, me = two_replica_catalog(tmp_path)
    failures = [StorageUnavailable("cannot reach the catalog database: restarting")]

    class Catalog(CatalogStore):
        def describe_topics(self, names=None):  # type: ignore[no-untyped-def]
            if failures:
                raise failures.pop()
            return super().describe_topics(names)

    data_dir = tmp_path / "data"
    manager = PartitionManager(Catalog(catalog.engine), me, StorageNodeConfig(data_dir=data_dir), clock=wall_clock_ms)
    await manager.start()
    try:
        assert not failures, "the outage happened"
        [after] = catalog.describe_topics(["t"])
        assert me not in after.partitions[0].isr and (data_dir / "meta.properties").exists()
    finally:
        await manager.stop()
        catalog.engine.dispose()
