"""The coordinator's shard leases over a real SQLite catalog: claim, load, takeover, loss and release
(design/kafka-semantics.md §2.10).

The lease mechanics are tested in tests/unit/catalog/test_leases.py; these tests check the coordinator's hooks:
claim before load, unload plus dropped markers on loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from oncelog.catalog.store import CatalogStore, ShardRound
from oncelog.errors import StorageUnavailable
from oncelog.storage.sql import create_engine
from oncelog.txn_coordinator.shards import ROLE, txn_shard_leases

pytestmark = pytest.mark.timeout(20)

SHARDS = 4
LEASE_MS = 3_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class FlakyCatalog(CatalogStore):
    """The real catalog, whose lease writes can be made to fail."""

    unavailable = False

    def acquire_shards(
        self,
        role: str,
        shards: Iterable[int],
        node_id: str,
        lease_ms: int,
        now_ms: int | None,
        *,
        before_write: Callable[[list[int]], None] | None = None,
    ) -> ShardRound:
        if self.unavailable:
            raise StorageUnavailable("catalog unreachable")
        return super().acquire_shards(role, shards, node_id, lease_ms, now_ms, before_write=before_write)


class FakeCoordinator:
    """Records load/unload like TransactionCoordinator; loads can be made to fail."""

    def __init__(self, events: list[tuple[str, int, int]]) -> None:
        self.events = events
        self.loaded: dict[int, int] = {}
        self.fail_loads = 0

    async def load(self, shard: int, coordinator_epoch: int) -> list[object]:
        self.events.append(("load", shard, coordinator_epoch))
        if self.fail_loads:
            self.fail_loads -= 1
            raise StorageUnavailable("state database unreachable")
        self.loaded[shard] = coordinator_epoch
        return []

    def unload(self, shard: int, coordinator_epoch: int | None = None) -> None:
        if shard in self.loaded and (coordinator_epoch is None or self.loaded[shard] <= coordinator_epoch):
            self.events.append(("unload", shard, self.loaded.pop(shard)))


class Node:
    def __init__(
        self, catalog: CatalogStore, node_id: str, clock: Clock, events: list[tuple[str, int, int]] | None = None
    ) -> None:
        self.events: list[tuple[str, int, int]] = [] if events is None else events
        self.coordinator = FakeCoordinator(self.events)
        self.manager = txn_shard_leases(
            catalog=catalog,
            coordinator=self.coordinator,  # type: ignore[arg-type]
            table=self,
            markers=self,
            node_id=node_id,
            shard_count=SHARDS,
            lease_ms=LEASE_MS,
            clock=clock,
        )

    def begin_takeover(self, shard: int, coordinator_epoch: int) -> None:
        self.events.append(("takeover", shard, coordinator_epoch))

    def drop_shard(self, shard: int) -> None:
        self.events.append(("drop-markers", shard, -1))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def catalog(tmp_path: Path, clock: Clock) -> FlakyCatalog:
    store = FlakyCatalog(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    store.migrate()
    store.ensure_cluster(SHARDS, SHARDS, clock.now)
    return store


async def test_first_node_takes_every_free_shard_claims_then_loads_it(catalog: FlakyCatalog, clock: Clock) -> None:
    a = Node(catalog, "a", clock)
    await a.manager.run_once()
    assert a.coordinator.loaded == dict.fromkeys(range(SHARDS), 1)
    for shard in range(SHARDS):
        assert a.events.index(("takeover", shard, 1)) < a.events.index(("load", shard, 1))
    renewed_before = a.events[:]
    clock.now += LEASE_MS // 3
    await a.manager.run_once()
    assert a.events == renewed_before, "renewing loads nothing again"
    assert catalog.shard_lease(ROLE, 0).lease_expires_at_ms == clock.now + LEASE_MS  # type: ignore[union-attr]


async def test_a_held_shard_moves_only_after_its_lease_expired_with_a_higher_epoch(
    catalog: FlakyCatalog, clock: Clock
) -> None:
    a, b = Node(catalog, "a", clock), Node(catalog, "b", clock)
    await a.manager.run_once()
    await b.manager.run_once()
    assert b.coordinator.loaded == {}

    clock.now += LEASE_MS + 1  # a stopped renewing (crashed)
    await b.manager.run_once()
    assert b.coordinator.loaded == dict.fromkeys(range(SHARDS), 2)

    await a.manager.run_once()  # a comes back: it sees the lease gone and stops serving
    assert a.coordinator.loaded == {}
    assert {e for e in a.events if e[0] in ("unload", "drop-markers")} == {
        *(("unload", s, 1) for s in range(SHARDS)),
        *(("drop-markers", s, -1) for s in range(SHARDS)),
    }


async def test_stop_releases_every_lease_for_an_immediate_takeover(catalog: FlakyCatalog, clock: Clock) -> None:
    a, b = Node(catalog, "a", clock), Node(catalog, "b", clock)
    await a.manager.run_once()
    await a.manager.stop()
    assert a.coordinator.loaded == {} and a.manager.leases == {}
    await b.manager.run_once()  # same instant: no waiting for the lease to lapse
    assert b.coordinator.loaded == dict.fromkeys(range(SHARDS), 2)


async def test_a_failed_load_keeps_the_lease_and_is_retried(catalog: FlakyCatalog, clock: Clock) -> None:
    a = Node(catalog, "a", clock)
    a.coordinator.fail_loads = SHARDS
    await a.manager.run_once()
    assert a.coordinator.loaded == {}
    assert set(a.manager.leases) == set(range(SHARDS))
    await a.manager.run_once()
    assert a.coordinator.loaded == dict.fromkeys(range(SHARDS), 1)


async def test_renewal_failures_give_the_shard_up_before_the_lease_expires(catalog: FlakyCatalog, clock: Clock) -> None:
    a = Node(catalog, "a", clock)
    await a.manager.run_once()
    catalog.unavailable = True
    clock.now += LEASE_MS // 3
    await a.manager.run_once()
    assert a.coordinator.loaded == dict.fromkeys(range(SHARDS), 1), "two thirds of the lease are left"
    clock.now += LEASE_MS // 3 + 1
    await a.manager.run_once()
    assert a.coordinator.loaded == {}, "less than a third left: another replica may soon take over"
    assert clock.now < catalog.shard_lease(ROLE, 0).lease_expires_at_ms  # type: ignore[union-attr]

    catalog.unavailable = False
    await a.manager.run_once()
    assert a.coordinator.loaded == dict.fromkeys(range(SHARDS), 1), "the same lease is renewed and loaded again"


async def test_a_fenced_write_stops_serving_the_shard_at_once(catalog: FlakyCatalog, clock: Clock) -> None:
    a = Node(catalog, "a", clock)
    await a.manager.run_once()
    a.manager.fenced(2, coordinator_epoch=7)  # an epoch this node never held: ignored
    assert 2 in a.coordinator.loaded
    a.manager.fenced(2, coordinator_epoch=1)
    assert 2 not in a.coordinator.loaded
    assert ("drop-markers", 2, -1) in a.events


async def test_lease_lost_unloads_and_drops_markers_before_another_coordinator_loads(
    catalog: FlakyCatalog, clock: Clock
) -> None:
    timeline: list[tuple[str, int, int]] = []
    a, b = Node(catalog, "a", clock, timeline), Node(catalog, "b", clock, timeline)
    await a.manager.run_once()
    catalog.unavailable = True  # a cannot renew any more
    for _ in range(3):
        clock.now += LEASE_MS // 3
        await a.manager.run_once()
    assert a.coordinator.loaded == {}
    catalog.unavailable = False
    clock.now = catalog.shard_lease(ROLE, 0).lease_expires_at_ms  # type: ignore[union-attr]
    await b.manager.run_once()
    assert b.coordinator.loaded == dict.fromkeys(range(SHARDS), 2)
    for shard in range(SHARDS):
        assert timeline.index(("unload", shard, 1)) < timeline.index(("drop-markers", shard, -1))
        assert timeline.index(("drop-markers", shard, -1)) < timeline.index(("takeover", shard, 2))
