"""ShardLeaseManager over a real SQLite catalog with a controlled clock: leasing, loading, fencing, dropping.

Each replica's hooks claim the lease's epoch in a shared ``EpochTable`` (the role of a service's state database)
and record every load and drop in one timeline shared by all replicas, so tests can check what happened before
what across replicas.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from oncelog.catalog.leases import MAX_SAFETY_MARGIN_MS, ShardLeaseManager, ShardOwner
from oncelog.catalog.store import CatalogStore, ShardRound
from oncelog.errors import NotCoordinator, StorageUnavailable
from oncelog.storage.sql import create_engine

pytestmark = pytest.mark.timeout(30)

ROLE = "group-offsets"
SHARDS = 3
LEASE_MS = 3_000
MARGIN_MS = 300  # the default: a tenth of the lease
ALL = frozenset(range(SHARDS))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class ControlledCatalog(CatalogStore):
    """The real catalog, whose lease renewals can be made to fail or to hang."""

    unavailable = False
    hang: threading.Event | None = None
    """While set to an unset event, ``acquire_shards`` waits for it (a catalog that stopped answering)."""
    after_acquire: Callable[[str, int], None] | None = None
    """Called with (node, shard) right after a write that leased ``shard`` to ``node`` committed."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.hanging = threading.Event()
        self.rounds = 0
        """How many lease rounds reached the catalog."""

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
        self.rounds += 1
        hang = self.hang
        if hang is not None:
            self.hanging.set()
            hang.wait()
        if self.unavailable:
            raise StorageUnavailable("catalog unreachable")
        result = super().acquire_shards(role, shards, node_id, lease_ms, now_ms, before_write=before_write)
        if self.after_acquire is not None:
            for shard in result.held:
                self.after_acquire(node_id, shard)
        return result


class EpochTable:
    """A state database's per-shard coordinator epoch: a claim raises it, a write must name it."""

    def __init__(self) -> None:
        self.epochs: dict[int, int] = {}
        self.writes: list[tuple[str, int, int]] = []

    def claim(self, shard: int, epoch: int) -> bool:
        if self.epochs.get(shard, 0) > epoch:
            return False
        self.epochs[shard] = epoch
        return True

    def write(self, node: str, shard: int, epoch: int) -> None:
        if self.epochs.get(shard) != epoch:
            raise NotCoordinator(f"shard {shard} is claimed at {self.epochs.get(shard)}, not {epoch}")
        self.writes.append((node, shard, epoch))


class Replica:
    """One process: a ShardLeaseManager whose hooks claim in the shared table and record a shared timeline."""

    def __init__(
        self,
        name: str,
        catalog: CatalogStore,
        clock: Clock,
        table: EpochTable,
        timeline: list[tuple[str, str, int, int]],
        *,
        lease_ms: int = LEASE_MS,
        safety_margin_ms: int | None = None,
        track_owners: bool = False,
    ) -> None:
        self.name = name
        self.table = table
        self.timeline = timeline
        self.fail_loads = 0
        self.load_gate: asyncio.Event | None = None
        self.loading = asyncio.Event()
        self.dropped = asyncio.Event()
        self.served_during_load: list[int | None] = []
        self.held_during_load: list[bool] = []
        self.drop_threads: list[int] = []
        self.on_drop: Callable[[int, int], None] | None = None
        self.leases = ShardLeaseManager(
            catalog,
            role=ROLE,
            node_id=name,
            shard_count=SHARDS,
            lease_ms=lease_ms,
            clock=clock,
            on_acquired=self.load,
            on_lost=self.drop,
            track_owners=track_owners,
            safety_margin_ms=safety_margin_ms,
        )

    async def load(self, shard: int, epoch: int) -> bool:
        self.timeline.append((self.name, "load", shard, epoch))
        self.served_during_load.append(self.leases.epoch_of(shard))
        self.held_during_load.append(self.leases.holds(shard))
        self.loading.set()
        if self.load_gate is not None:
            await self.load_gate.wait()
        if self.fail_loads:
            self.fail_loads -= 1
            raise StorageUnavailable("state database unreachable")
        return self.table.claim(shard, epoch)

    def drop(self, shard: int, epoch: int) -> None:
        if self.on_drop is not None:
            self.on_drop(shard, epoch)
        self.timeline.append((self.name, "drop", shard, epoch))
        self.drop_threads.append(threading.get_ident())
        self.dropped.set()

    def write(self, shard: int) -> None:
        """A write the way a service does it: under the epoch it serves, reporting a refusal as ``fenced``."""
        epoch = self.leases.epoch_of(shard)
        if epoch is None:
            raise NotCoordinator(f"{self.name} does not serve shard {shard}")
        try:
            self.table.write(self.name, shard, epoch)
        except NotCoordinator:
            self.leases.fenced(shard, epoch)
            raise

    def events(self, kind: str) -> list[tuple[int, int]]:
        return [(shard, epoch) for name, k, shard, epoch in self.timeline if name == self.name and k == kind]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def catalog(tmp_path: Path, clock: Clock) -> Iterator[ControlledCatalog]:
    store = ControlledCatalog(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    store.migrate()
    store.ensure_cluster(SHARDS, SHARDS, clock.now)
    yield store
    store.engine.dispose()


@pytest.fixture
def table() -> EpochTable:
    return EpochTable()


@pytest.fixture
def timeline() -> list[tuple[str, str, int, int]]:
    return []


@pytest.fixture
def replicas(catalog, clock, table, timeline):
    def make(name: str, **kwargs: object) -> Replica:
        return Replica(name, catalog, clock, table, timeline, **kwargs)  # type: ignore[arg-type]

    return make


# ---------------------------------------------------------------------------------------------- leasing and loading


async def test_first_replica_takes_every_free_shard_and_serves_it_only_after_its_load(replicas, catalog) -> None:
    a = replicas("a")
    await a.leases.run_once()
    assert a.leases.owned_shards() == dict.fromkeys(ALL, 1)
    assert sorted(a.events("load")) == [(s, 1) for s in sorted(ALL)]
    assert a.served_during_load == [None] * SHARDS, "a shard is never served while its load hook runs"
    assert {s: lease.coordinator_epoch for s, lease in a.leases.leases.items()} == dict.fromkeys(ALL, 1)
    assert catalog.shard_lease(ROLE, 0).owner_node_id == "a"


async def test_renewal_keeps_the_epoch_extends_the_lease_and_loads_nothing_again(replicas, catalog, clock) -> None:
    a, b = replicas("a"), replicas("b")
    for _ in range(5):
        await a.leases.run_once()
        clock.now += LEASE_MS // 3
        await b.leases.run_once()
    await a.leases.run_once()
    assert a.leases.owned_shards() == dict.fromkeys(ALL, 1)
    assert b.leases.owned_shards() == {} and b.leases.leases == {}
    assert len(a.events("load")) == SHARDS, "renewing loads nothing again"
    assert catalog.shard_lease(ROLE, 0).lease_expires_at_ms == clock.now + LEASE_MS


async def test_a_held_shard_moves_only_after_its_lease_expired_and_with_a_higher_epoch(replicas, clock) -> None:
    a, b = replicas("a"), replicas("b")
    await a.leases.run_once()
    clock.now += LEASE_MS - 1
    await b.leases.run_once()
    assert b.leases.owned_shards() == {} and b.events("load") == [], "the lease has not expired yet"
    clock.now += 1  # a stopped renewing (paused or crashed)
    await b.leases.run_once()
    assert b.leases.owned_shards() == dict.fromkeys(ALL, 2)

    await a.leases.run_once()  # a comes back: the renewal finds another owner
    assert a.leases.owned_shards() == {} and a.leases.leases == {}
    assert sorted(a.events("drop")) == [(s, 1) for s in sorted(ALL)]


async def test_epoch_moved_between_rounds_drops_the_old_load_before_loading_the_new(replicas, clock) -> None:
    a, b = replicas("a"), replicas("b")
    await a.leases.run_once()
    clock.now += LEASE_MS
    await b.leases.run_once()  # b takes every shard at epoch 2 and then stops renewing too
    clock.now += LEASE_MS
    await a.leases.run_once()  # a takes them back at epoch 3 without having seen b
    assert a.leases.owned_shards() == dict.fromkeys(ALL, 3)
    for shard in ALL:
        assert a.timeline.index(("a", "drop", shard, 1)) < a.timeline.index(("a", "load", shard, 3))


async def test_a_failed_load_keeps_the_lease_and_is_retried_next_round(replicas) -> None:
    a = replicas("a")
    a.fail_loads = SHARDS
    await a.leases.run_once()
    assert a.leases.owned_shards() == {}
    assert set(a.leases.leases) == ALL
    assert a.events("drop") == [], "nothing was served, so nothing is dropped"
    await a.leases.run_once()
    assert a.leases.owned_shards() == dict.fromkeys(ALL, 1)


async def test_a_refused_load_is_not_served_and_is_asked_again_next_round(replicas, table) -> None:
    table.epochs[1] = 5  # the state database has seen a newer owner than the catalog reports
    a = replicas("a")
    await a.leases.run_once()
    assert a.leases.owned_shards() == {0: 1, 2: 1}
    del table.epochs[1]
    await a.leases.run_once()
    assert a.leases.owned_shards() == dict.fromkeys(ALL, 1)


async def test_a_shard_is_held_from_its_catalog_write_through_its_load_until_it_moves(replicas, catalog, clock) -> None:
    """FindCoordinator names the new owner as soon as the catalog write commits, long before the load ends: from
    that moment the owner must know it holds the shard, so it answers "loading, retry here" and not "not mine"."""
    a, b = replicas("a"), replicas("b")
    by_name = {"a": a, "b": b}
    held_at_write: list[tuple[str, int, bool]] = []
    catalog.after_acquire = lambda node, shard: held_at_write.append((node, shard, by_name[node].leases.holds(shard)))
    await a.leases.run_once()
    assert held_at_write == [("a", shard, True) for shard in sorted(ALL)]
    assert a.held_during_load == [True] * SHARDS
    await b.leases.run_once()
    assert not any(b.leases.holds(shard) for shard in ALL), "b holds nothing while a's leases are valid"

    a.leases.fenced(0, 1)
    assert not a.leases.holds(0), "a newer epoch was claimed: the shard belongs elsewhere"
    assert a.leases.holds(1)

    clock.now += LEASE_MS - MARGIN_MS  # a stopped renewing: its serving deadline passed
    assert not any(a.leases.holds(shard) for shard in ALL)
    clock.now += MARGIN_MS
    held_at_write.clear()
    await b.leases.run_once()
    assert held_at_write == [("b", shard, True) for shard in sorted(ALL)]
    assert b.leases.owned_shards() == dict.fromkeys(ALL, 2)


async def test_a_round_renews_and_takes_every_shard_in_one_catalog_transaction(replicas, catalog, clock) -> None:
    """A transaction per shard made a round of 16 shards outlast a 1.5 s lease on a loaded machine, and leases
    lapsed right after start-up: a round costs one transaction however many shards it renews or takes."""
    began: list[int] = []
    sa.event.listen(catalog.engine, "begin", lambda conn: began.append(1))
    a, b = replicas("a"), replicas("b")
    await a.leases.run_once()  # takes every shard
    assert (len(began), a.leases.owned_shards()) == (1, dict.fromkeys(ALL, 1))
    began.clear()
    clock.now += LEASE_MS // 3
    await a.leases.run_once()  # renews every shard
    await b.leases.run_once()  # finds every shard held
    assert len(began) == 2
    began.clear()
    clock.now += LEASE_MS
    await b.leases.run_once()  # takes every lapsed shard over
    assert (len(began), b.leases.owned_shards()) == (1, dict.fromkeys(ALL, 2))


async def test_the_next_round_is_due_a_third_of_a_lease_after_the_renewals_not_after_the_round(replicas, clock) -> None:
    """A round that took long (a busy catalog, a loaded machine) must not push the next renewal toward the
    serving deadline: counting the pause from the end of the round did, and shards flapped under load."""
    a = replicas("a")
    assert a.leases.next_round_delay_s() == LEASE_MS / 3 / 1000, "nothing held: a third of a lease"
    await a.leases.run_once()  # every lease written at clock.now
    clock.now += 600  # the round itself took this long
    assert a.leases.next_round_delay_s() == pytest.approx((LEASE_MS / 3 - 600) / 1000)
    clock.now += LEASE_MS // 3
    assert a.leases.next_round_delay_s() == pytest.approx(LEASE_MS / 15 / 1000), "overdue: soon, not at once"


async def test_a_failed_load_still_holds_the_shard_but_a_refused_one_does_not(replicas, table) -> None:
    table.epochs[1] = 5  # the state database has seen a newer owner than the catalog reports
    a = replicas("a")
    a.fail_loads = 1  # the first load fails: the state database was unreachable
    await a.leases.run_once()
    served = set(a.leases.owned_shards())
    assert len(served) == 1 and 1 not in served
    assert [a.leases.holds(shard) for shard in sorted(ALL)] == [True, False, True]


# ---------------------------------------------------------------------------------------------- losing a lease


async def test_lease_lost_stops_serving_the_shard_before_another_owner_writes(replicas, catalog, clock, table) -> None:
    a, b = replicas("a"), replicas("b")
    await a.leases.run_once()
    a.write(0)
    catalog.unavailable = True  # a can no longer renew
    clock.now += LEASE_MS // 3
    await a.leases.run_once()
    assert a.leases.owned_shards() == dict.fromkeys(ALL, 1), "two thirds of the lease are left: keep serving"
    clock.now += LEASE_MS // 3 + 1
    await a.leases.run_once()
    assert a.leases.owned_shards() == {}, "a third or less is left: another replica may take over soon"
    assert sorted(a.events("drop")) == [(s, 1) for s in sorted(ALL)]
    with pytest.raises(NotCoordinator):
        a.write(0)

    catalog.unavailable = False
    await b.leases.run_once()
    assert b.leases.owned_shards() == {}, "nobody else may serve while the old lease is valid in the catalog"
    clock.now = catalog.shard_lease(ROLE, 0).lease_expires_at_ms
    await b.leases.run_once()
    b.write(0)
    for shard in ALL:
        assert a.timeline.index(("a", "drop", shard, 1)) < a.timeline.index(("b", "load", shard, 2))
    assert table.writes == [("a", 0, 1), ("b", 0, 2)]


async def test_stops_serving_a_safety_margin_before_the_catalog_expiry(replicas, catalog, clock) -> None:
    a, b = replicas("a"), replicas("b")
    await a.leases.run_once()
    expiry = catalog.shard_lease(ROLE, 0).lease_expires_at_ms
    clock.now = expiry - MARGIN_MS - 1
    assert a.leases.epoch_of(0) == 1
    clock.now += 1
    assert a.leases.epoch_of(0) is None and a.leases.owned_shards() == {}
    await b.leases.run_once()
    assert b.leases.owned_shards() == {}, "the old lease is still valid in the catalog"
    await a.leases.run_once()  # the renewal succeeds, but the shard was not served for a moment: reload it
    assert a.leases.owned_shards() == dict.fromkeys(ALL, 1)
    for shard in ALL:
        assert a.timeline.index(("a", "drop", shard, 1)) < a.timeline.index(("a", "load", shard, 1), SHARDS)


async def test_a_round_stuck_on_the_catalog_still_stops_serving_at_the_safety_margin(
    catalog: ControlledCatalog, table: EpochTable, timeline: list
) -> None:
    def wall_ms() -> int:  # the safety timer sleeps in real time, so this test runs on the wall clock
        return int(time.time() * 1000)

    a = Replica("a", catalog, wall_ms, table, timeline, lease_ms=900, safety_margin_ms=450)  # type: ignore[arg-type]
    await a.leases.start()
    served_until = catalog.shard_lease(ROLE, 0).lease_expires_at_ms - 450
    catalog.hang = threading.Event()  # the next round's renewal never returns
    try:
        await asyncio.to_thread(catalog.hanging.wait, 10)
        assert catalog.hanging.is_set(), "the background round did not run"
        while len(a.events("drop")) < SHARDS:  # each shard at its own deadline (they were renewed one by one)
            await asyncio.wait_for(a.dropped.wait(), 10)
            a.dropped.clear()
        assert not catalog.hang.is_set(), "dropped by the timer while the round is still stuck"
        assert a.leases.owned_shards() == {}
        assert wall_ms() >= served_until, "not dropped before its serving deadline"
    finally:
        catalog.hang.set()
        catalog.hang = None
        await a.leases.stop()


# ---------------------------------------------------------------------------------------------- fencing


async def test_a_write_that_finds_the_epoch_moved_stops_serving_that_shard_at_once(replicas, table) -> None:
    a = replicas("a")
    await a.leases.run_once()
    a.leases.fenced(1, coordinator_epoch=7)  # an epoch this replica never held: ignored
    assert a.leases.epoch_of(1) == 1 and a.events("drop") == []
    table.epochs[1] = 2  # a newer owner claimed the shard in the state database
    with pytest.raises(NotCoordinator):
        a.write(1)
    assert a.leases.epoch_of(1) is None, "not served even before the next round"
    assert a.events("drop") == [(1, 1)]
    assert a.leases.owned_shards() == {0: 1, 2: 1}
    await a.leases.run_once()  # the catalog still names a at epoch 1, but the claim is refused
    assert a.leases.epoch_of(1) is None


async def test_fenced_lifts_once_a_renewal_reloads_the_same_epoch(replicas) -> None:
    a = replicas("a")
    await a.leases.run_once()
    a.leases.fenced(1, coordinator_epoch=1)  # e.g. a report racing a reclaim at the same epoch
    assert a.leases.epoch_of(1) is None
    await a.leases.run_once()
    assert a.leases.epoch_of(1) == 1
    assert a.events("load").count((1, 1)) == 2


async def test_fenced_from_a_request_thread_stops_serving_there_and_drops_on_the_loop(replicas) -> None:
    a = replicas("a")
    await a.leases.run_once()

    def report() -> int | None:
        a.leases.fenced(2, coordinator_epoch=1)
        return a.leases.epoch_of(2)

    assert await asyncio.to_thread(report) is None, "the reporting thread sees the shard gone at once"
    await asyncio.wait_for(a.dropped.wait(), 5)
    assert a.events("drop") == [(2, 1)]
    assert a.drop_threads == [threading.get_ident()], "the drop hook runs on the event loop's thread"


async def test_lost_while_loading_is_never_served_and_its_load_is_undone(replicas) -> None:
    a = replicas("a")
    a.load_gate = asyncio.Event()
    round_ = asyncio.create_task(a.leases.run_once())
    await asyncio.wait_for(a.loading.wait(), 5)
    a.leases.fenced(0, coordinator_epoch=1)
    a.load_gate.set()
    await round_
    assert a.leases.owned_shards() == {1: 1, 2: 1}
    assert a.events("drop") == [(0, 1), (0, 1)], "dropped when lost, and again after the late load finished"


# ---------------------------------------------------------------------------------------------- stop and owners


async def test_stop_drops_then_releases_every_lease_for_an_immediate_takeover(replicas, catalog, clock) -> None:
    a, b = replicas("a"), replicas("b")
    held_at_drop: list[tuple[str | None, bool]] = []

    def look_at_the_catalog(shard: int, epoch: int) -> None:
        lease = catalog.shard_lease(ROLE, shard)
        held_at_drop.append((lease.owner_node_id, lease.lease_expires_at_ms > clock.now))

    a.on_drop = look_at_the_catalog
    await a.leases.start()
    await a.leases.stop()
    assert held_at_drop == [("a", True)] * SHARDS, "serving stops while the lease is still ours"
    assert a.leases.leases == {} and a.leases.owned_shards() == {}
    await b.leases.run_once()  # same instant: no waiting for the lease to lapse
    assert b.leases.owned_shards() == dict.fromkeys(ALL, 2)
    await a.leases.run_once()
    assert a.leases.leases == {}, "a stopped manager takes no shards"


async def test_stop_waits_for_a_running_round_so_nothing_it_took_stays_leased(replicas, catalog) -> None:
    a = replicas("a")
    catalog.hang = threading.Event()
    round_ = asyncio.create_task(a.leases.run_once())
    await asyncio.to_thread(catalog.hanging.wait, 10)
    stopping = asyncio.create_task(a.leases.stop())
    catalog.hang.set()
    catalog.hang = None
    await asyncio.gather(round_, stopping)
    assert a.events("load") == [], "a round finishing after stop began loads nothing"
    assert all(catalog.shard_lease(ROLE, s).lease_expires_at_ms == 0 for s in ALL), "what it took was released"


async def test_learns_the_owners_of_other_shards_for_redirects(replicas, catalog, clock) -> None:
    catalog.register_node("a", ROLE, "10.0.0.1:9000", 3_600_000, clock.now)
    a, b = replicas("a", track_owners=True), replicas("b", track_owners=True)
    await a.leases.run_once()
    await b.leases.run_once()
    assert b.leases.owner_of(0) == ShardOwner("a", "10.0.0.1:9000")
    assert a.leases.owner_of(0) is None, "no owner is reported for a shard held here"
    clock.now += LEASE_MS
    await b.leases.run_once()  # a's leases lapsed: b owns every shard now
    assert b.leases.owned_shards() == dict.fromkeys(ALL, 2)
    assert all(b.leases.owner_of(s) is None for s in ALL)


async def test_owners_are_not_read_unless_asked(replicas, catalog, clock) -> None:
    catalog.register_node("a", ROLE, "10.0.0.1:9000", 3_600_000, clock.now)
    a, b = replicas("a"), replicas("b")
    await a.leases.run_once()
    await b.leases.run_once()
    assert b.leases.owner_of(0) is None


# ---------------------------------------------------------------------------------------------- configuration


def test_the_default_safety_margin_is_a_tenth_of_the_lease_capped(catalog, clock) -> None:
    def margin(lease_ms: int) -> int:
        return ShardLeaseManager(
            catalog, role=ROLE, node_id="a", shard_count=1, lease_ms=lease_ms, clock=clock
        ).safety_margin_ms

    assert margin(3_000) == 300
    assert margin(60_000) == MAX_SAFETY_MARGIN_MS


@pytest.mark.parametrize(
    ("shard_count", "lease_ms", "safety_margin_ms"), [(0, 3_000, None), (4, 0, None), (4, 3_000, 3_000), (4, 3_000, -1)]
)
def test_rejects_impossible_settings(catalog, clock, shard_count, lease_ms, safety_margin_ms) -> None:
    with pytest.raises(ValueError):
        ShardLeaseManager(
            catalog,
            role=ROLE,
            node_id="a",
            shard_count=shard_count,
            lease_ms=lease_ms,
            clock=clock,
            safety_margin_ms=safety_margin_ms,
        )


async def test_serving_deadline_follows_the_monotonic_clock_not_the_wall_clock(catalog, clock) -> None:
    """Issue 25 item 12: a wall clock stepped back must not keep a shard served past its lease."""
    monotonic = Clock()
    leases = ShardLeaseManager(
        catalog, role=ROLE, node_id="a", shard_count=SHARDS, lease_ms=LEASE_MS, clock=clock, deadline_clock=monotonic
    )
    await leases.run_once()
    assert leases.owned_shards() == dict.fromkeys(ALL, 1)
    clock.now -= 3_600_000  # NTP steps the wall clock back an hour
    monotonic.now += LEASE_MS - MARGIN_MS  # no renewal for a whole lease, as the monotonic clock measures
    assert leases.owned_shards() == {}
    assert leases.epoch_of(0) is None


async def test_a_lease_judged_by_the_database_clock_ignores_a_fast_local_clock(catalog, clock) -> None:
    """Issue 25 item 5: with ``database_clock`` the database decides expiry, not the replica's own clock."""
    owner = ShardLeaseManager(
        catalog, role=ROLE, node_id="a", shard_count=SHARDS, lease_ms=60_000, clock=clock, database_clock=True
    )
    await owner.run_once()
    assert owner.owned_shards() == dict.fromkeys(ALL, 1)
    lease = catalog.shard_lease(ROLE, 0)
    assert lease is not None and abs(lease.lease_expires_at_ms - (time.time() * 1000 + 60_000)) < 10_000
    fast = Clock()
    fast.now = int(time.time() * 1000) + 3_600_000  # a replica whose clock runs an hour ahead
    taker = ShardLeaseManager(
        catalog, role=ROLE, node_id="b", shard_count=SHARDS, lease_ms=60_000, clock=fast, database_clock=True
    )
    await taker.run_once()
    assert taker.owned_shards() == {}, "the lease is live at the database's clock"
    await owner.stop()
