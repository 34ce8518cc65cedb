"""Controller over a real SQLite catalog with a controlled clock: one controller, clean elections, fencing."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from oncelog.catalog.store import CONTROLLER_ROLE, CatalogStore
from oncelog.partition_storage.controller import Controller
from oncelog.storage.sql import create_engine

LEASE_MS = 3_000
NODES = ("s-0", "s-1", "s-2")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def catalog(tmp_path: Path) -> CatalogStore:
    store = CatalogStore(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    store.migrate()
    store.ensure_cluster(4, 4, now_ms=0)
    return store


def register(catalog: CatalogStore, clock: Clock, *nodes: str) -> None:
    for node in nodes:
        catalog.register_node(node, "partition-storage", f"h:{node}", LEASE_MS, clock.now)


def controllers(catalog: CatalogStore, clock: Clock) -> list[Controller]:
    return [Controller(catalog, node, clock=clock, lease_ms=LEASE_MS) for node in NODES]


def test_only_the_lease_holder_acts_and_a_dead_leader_is_replaced_from_the_isr(catalog: CatalogStore) -> None:
    clock = Clock()
    register(catalog, clock, *NODES)
    catalog.create_topics([("r", 1, {}, 3), ("single", 1, {}, 1)], now_ms=clock.now)
    first, second, _ = controllers(catalog, clock)
    assert not first.run_once() and first.controller_epoch == 1
    assert not second.run_once() and second.controller_epoch is None, "the lease is held"
    before = catalog.partition("r", 0)
    single = catalog.partition("single", 0)
    clock.now += LEASE_MS // 2
    register(catalog, clock, *(n for n in NODES if n != before.leader_node_id))  # the leader stops heartbeating
    clock.now += LEASE_MS // 2 + 1
    assert first.run_once()
    after = catalog.partition("r", 0)
    survivors = tuple(n for n in before.replicas if n != before.leader_node_id)
    assert (after.leader_node_id, after.isr) == (survivors[0], survivors)
    assert (after.leader_epoch, after.partition_epoch) == (before.leader_epoch + 1, before.partition_epoch + 1)
    assert catalog.partition("single", 0) == single, "a partition with one replica is never touched"
    assert not first.run_once(), "nothing more to do"


def test_no_live_in_sync_replica_leaves_the_partition_offline_until_one_returns(catalog: CatalogStore) -> None:
    clock = Clock()
    register(catalog, clock, *NODES)
    catalog.create_topics([("r", 1, {}, 3)], now_ms=clock.now)
    seen = catalog.partition("r", 0)
    leader = seen.leader_node_id
    shrunk = catalog.alter_partition("r", seen, isr=[leader])
    assert shrunk is not None
    controller = controllers(catalog, clock)[0]
    clock.now += LEASE_MS + 1
    register(catalog, clock, *(n for n in NODES if n != leader))
    assert controller.run_once()
    offline = catalog.partition("r", 0)
    assert offline.leader_node_id == "" and offline.isr == (leader,), "an out-of-sync replica is never elected"
    assert not controller.run_once()
    register(catalog, clock, leader)
    assert controller.run_once()
    back = catalog.partition("r", 0)
    assert (back.leader_node_id, back.isr, back.leader_epoch) == (leader, (leader,), offline.leader_epoch + 1)


def test_a_deposed_controller_cannot_elect(catalog: CatalogStore) -> None:
    clock = Clock()
    register(catalog, clock, *NODES)
    catalog.create_topics([("r", 1, {}, 3)], now_ms=clock.now)
    first, second, _ = controllers(catalog, clock)
    first.run_once()
    clock.now += LEASE_MS + 1
    register(catalog, clock, *NODES)
    second.run_once()
    assert second.controller_epoch == 2
    seen = catalog.partition("r", 0)
    stale = ("s-0", 1, clock.now)
    assert catalog.alter_partition("r", seen, leader_node_id=seen.isr[1], controller=stale) is None
    assert catalog.partition("r", 0) == seen
    assert not first.run_once() and first.controller_epoch is None


def test_an_election_does_not_land_if_the_leader_renewed_its_lease_meanwhile(catalog: CatalogStore) -> None:
    """The controller saw the leader's lease lapsed, but the leader heartbeat before the election's write: the
    conditional update refuses, so two leaders never serve one epoch-old partition side by side."""
    clock = Clock()
    register(catalog, clock, *NODES)
    catalog.create_topics([("r", 1, {}, 3)], now_ms=clock.now)
    controller = controllers(catalog, clock)[0]
    controller.run_once()
    seen = catalog.partition("r", 0)
    clock.now += LEASE_MS + 1
    register(catalog, clock, *NODES)  # everyone, the leader included, renewed
    epoch = controller.controller_epoch
    assert epoch is not None
    fence = (NODES[0], epoch, clock.now)
    catalog.acquire_shard("controller", 0, NODES[0], LEASE_MS, clock.now)
    assert catalog.alter_partition("r", seen, leader_node_id=seen.isr[1], controller=fence) is None
    assert catalog.partition("r", 0) == seen


def test_the_controller_wakes_just_after_the_earliest_node_lease_lapses_and_elects_then(
    catalog: CatalogStore,
) -> None:
    """Failover does not wait for a periodic round: the next round is due when a leader's lease may have lapsed."""
    clock = Clock()
    register(catalog, clock, *NODES)
    catalog.create_topics([("r", 1, {}, 3)], now_ms=clock.now)
    controller = controllers(catalog, clock)[0]
    leader_expiry = clock.now + LEASE_MS  # the leader heartbeats no more after registering
    clock.now += LEASE_MS * 5 // 6
    before = catalog.partition("r", 0)
    register(catalog, clock, *(n for n in NODES if n != before.leader_node_id))
    controller.run_once()
    assert controller.next_round_at == leader_expiry + 1, "due the moment the leader's lease lapses"
    assert controller.next_round_at < clock.now + LEASE_MS // 3, "sooner than the periodic renewal"
    clock.now = controller.next_round_at
    assert controller.run_once(), "the round at that moment elects"
    assert catalog.partition("r", 0).leader_node_id != before.leader_node_id
    assert controller.next_round_at == clock.now + LEASE_MS // 3, "the live leases run later than the renewal"


def test_a_standby_controller_wakes_just_after_the_holders_lease_lapses(catalog: CatalogStore) -> None:
    clock = Clock()
    register(catalog, clock, *NODES)
    first, second, _ = controllers(catalog, clock)
    first.run_once()
    holder_expiry = clock.now + LEASE_MS  # the holder renews no more
    clock.now += LEASE_MS * 5 // 6
    register(catalog, clock, *NODES)
    assert not second.run_once() and second.controller_epoch is None
    assert second.next_round_at == holder_expiry + 1, "when the holder's lease lapses, before a periodic round"
    clock.now = second.next_round_at
    register(catalog, clock, *NODES)
    second.run_once()
    assert second.controller_epoch == 2, "took over at once"


def test_unclean_election_is_off_by_default_and_elects_an_out_of_sync_replica_where_a_topic_allows_it(
    catalog: CatalogStore,
) -> None:
    clock = Clock()
    register(catalog, clock, *NODES)
    catalog.create_topics(
        [("clean", 1, {}, 3), ("unclean", 1, {"unclean_leader_election": "true"}, 3)], now_ms=clock.now
    )
    assert catalog.describe_topics(["unclean"])[0].config.unclean_leader_election
    seen = {t: catalog.partition(t, 0) for t in ("clean", "unclean")}
    for topic, p in seen.items():  # only the leader is in sync, then it dies
        assert catalog.alter_partition(topic, p, isr=[p.leader_node_id]) is not None
    controller = controllers(catalog, clock)[0]
    clock.now += LEASE_MS + 1
    dead = {p.leader_node_id for p in seen.values()}
    register(catalog, clock, *(n for n in NODES if n not in dead))
    assert controller.run_once()
    clean = catalog.partition("clean", 0)
    assert clean.leader_node_id == "", "no live in-sync replica: offline, a stale replica never serves"
    unclean = catalog.partition("unclean", 0)
    stale = next(r for r in seen["unclean"].replicas if r not in dead)
    assert (unclean.leader_node_id, unclean.isr) == (stale, (stale,))
    assert unclean.leader_epoch == seen["unclean"].leader_epoch + 1


def test_leadership_returns_to_the_preferred_replica_once_it_is_in_sync_at_the_rebalance_interval(
    catalog: CatalogStore,
) -> None:
    clock = Clock()
    register(catalog, clock, *NODES)
    catalog.create_topics([("r", 1, {}, 3)], now_ms=clock.now)
    preferred = catalog.partition("r", 0).replicas[0]
    assert catalog.partition("r", 0).leader_node_id == preferred
    controller = Controller(catalog, NODES[2], clock=clock, lease_ms=LEASE_MS, rebalance_interval_ms=10 * LEASE_MS)
    controller.run_once()  # a rebalance round with nothing to move; the next is due in 10 leases
    clock.now += LEASE_MS + 1
    register(catalog, clock, *(n for n in NODES if n != preferred))
    assert controller.run_once()
    failed_over = catalog.partition("r", 0)
    assert failed_over.leader_node_id != preferred and preferred not in failed_over.isr
    register(catalog, clock, preferred)  # it returns, and catches up: its leader adds it back
    back_in_sync = catalog.alter_partition("r", failed_over, isr=[*failed_over.isr, preferred])
    assert back_in_sync is not None
    assert not controller.run_once(), "not before the rebalance interval"
    assert controller.next_round_at <= 1_000_000 + 10 * LEASE_MS, "a round is due at the interval"
    clock.now = 1_000_000 + 10 * LEASE_MS
    register(catalog, clock, *NODES)  # every lease live, the current leader's included
    assert controller.run_once()
    restored = catalog.partition("r", 0)
    assert restored.leader_node_id == preferred and restored.leader_epoch == back_in_sync.leader_epoch + 1
    assert restored.isr == back_in_sync.isr


class _HeldAcquire(CatalogStore):
    """A catalog whose controller-lease acquire waits, once, until the test lets it go."""

    def __init__(self, engine: object) -> None:
        super().__init__(engine)  # type: ignore[arg-type]
        self.entered = threading.Event()
        self.go = threading.Event()
        self.returned = threading.Event()

    def acquire_shard(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        if not self.entered.is_set():
            self.entered.set()
            self.go.wait(30)
            try:
                return super().acquire_shard(*args, **kwargs)  # type: ignore[arg-type]
            finally:
                self.returned.set()
        return super().acquire_shard(*args, **kwargs)  # type: ignore[arg-type]


async def test_stop_waits_for_the_round_on_its_thread_then_gives_the_lease_up(tmp_path: Path) -> None:
    held = _HeldAcquire(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    held.migrate()
    held.ensure_cluster(4, 4, now_ms=0)
    clock = Clock()
    controller = Controller(held, "s-0", clock=clock, lease_ms=LEASE_MS)
    await controller.start()
    assert await asyncio.to_thread(held.entered.wait, 30), "the first round reached the lease acquire"
    stopping = asyncio.create_task(controller.stop())
    await asyncio.sleep(0)  # stop() has cancelled the rounds' task; the round's thread is still in the acquire
    assert not stopping.done()
    held.go.set()  # the round now takes the lease, after stop() began
    await asyncio.wait_for(stopping, 30)
    assert await asyncio.to_thread(held.returned.wait, 30)
    lease = held.shard_lease(CONTROLLER_ROLE, 0)
    assert lease is not None and lease.owner_node_id == "s-0", "the round did take the lease"
    assert lease.lease_expires_at_ms <= clock.now, "a stopped controller holds the lease: the next one waits it out"
    assert controller.controller_epoch is None
