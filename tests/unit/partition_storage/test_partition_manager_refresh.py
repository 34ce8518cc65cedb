"""PartitionManager catalog refreshes: single-flight, and a request waiting for a newer one always gets it."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from oncelog.catalog import CatalogStore
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
