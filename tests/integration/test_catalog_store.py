"""CatalogStore on SQLite and PostgreSQL: fencing changes are conditional, leases and epochs behave."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from oncelog.catalog import CatalogStore, PartitionRecord
from oncelog.catalog.replicas import StorageNode, place_replicas
from oncelog.catalog.topics import TopicConfig, java_string_hash
from oncelog.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidReplicationFactor,
    InvalidRequest,
    StaleRequesterEpoch,
    StorageUnavailable,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from oncelog.storage.sql import create_engine


@pytest.fixture
def store(database_url: str) -> CatalogStore:
    s = CatalogStore(create_engine(database_url))
    s.migrate()
    s.ensure_cluster(8, 4, now_ms=0)
    return s


def test_concurrent_first_start_creates_one_cluster(database_url: str) -> None:
    stores = [CatalogStore(create_engine(database_url)) for _ in range(4)]
    stores[0].migrate()
    ids: list[str] = []
    errors: list[BaseException] = []

    def start(s: CatalogStore) -> None:
        try:
            ids.append(s.ensure_cluster(8, 4, now_ms=0).cluster_id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(s,)) for s in stores]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == [] and len(set(ids)) == 1


def test_cluster_shard_counts_are_fixed_at_creation(store: CatalogStore) -> None:
    again = store.ensure_cluster(99, 99, now_ms=1)
    assert (again.txn_coordinator_shards, again.group_offsets_shards) == (8, 4)


def test_migrate_is_idempotent_and_safe_concurrently(database_url: str) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            CatalogStore(create_engine(database_url)).migrate()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_services_opening_a_fresh_sqlite_catalog_together_all_start(tmp_path: Path) -> None:
    """Switching a new SQLite file to WAL takes an exclusive lock that SQLite refuses at once, busy timeout or
    not; every process opening the catalog at the same moment must still get through (40 fresh files)."""
    errors: list[BaseException] = []

    def run(url: str) -> None:
        try:
            CatalogStore(create_engine(url)).migrate()
        except BaseException as exc:
            errors.append(exc)

    for attempt in range(40):
        url = f"sqlite:///{tmp_path / f'catalog-{attempt}.db'}"
        threads = [threading.Thread(target=run, args=(url,)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


def test_node_epoch_grows_and_fences_old_heartbeats(store: CatalogStore) -> None:
    e1 = store.register_node("s-0", "partition-storage", "h:1", 1000, now_ms=0)
    e2 = store.register_node("s-0", "partition-storage", "h:2", 1000, now_ms=10)
    assert e2 == e1 + 1
    assert not store.heartbeat("s-0", e1, 1000, now_ms=20), "the replaced instance must not extend the lease"
    assert store.heartbeat("s-0", e2, 1000, now_ms=20)
    [node] = store.list_nodes(now_ms=500)
    assert (node.address, node.lease_expires_at_ms) == ("h:2", 1020)
    assert store.list_nodes(now_ms=2000) == []
    with pytest.raises(InvalidRequest):
        store.register_node("x", "broker", "h:3", 1000, now_ms=0)


def test_a_heartbeat_that_arrives_after_the_deregistration_does_not_revive_the_node(store: CatalogStore) -> None:
    """A stopping node cancels its heartbeat task and deregisters, but the renewal already running on a worker
    thread can still commit after the deregistration: the stopped node must stay not live."""
    epoch = store.register_node("s-0", "partition-storage", "h:1", 2000, now_ms=0)
    assert [n.node_id for n in store.list_nodes(now_ms=100)] == ["s-0"]
    store.deregister_node("s-0", epoch)
    assert store.list_nodes(now_ms=100) == []
    assert not store.heartbeat("s-0", epoch, 2000, now_ms=100), "the late renewal was accepted"
    assert store.list_nodes(now_ms=200) == [], "the stopped node is live again"
    again = store.register_node("s-0", "partition-storage", "h:1", 2000, now_ms=300)
    assert store.heartbeat("s-0", again, 2000, now_ms=400), "a new registration of the node renews as before"
    assert [n.lease_expires_at_ms for n in store.list_nodes(now_ms=500)] == [2400]


def test_reads_go_on_while_a_paused_process_holds_the_sqlite_write_lock(tmp_path: Path) -> None:
    """A process stopped (SIGSTOP, a VM freeze) inside a catalog write keeps SQLite's write lock; metadata reads of
    every other process must not wait for it (they did: every transaction began with BEGIN IMMEDIATE)."""
    url = f"sqlite:///{tmp_path / 'catalog.db'}"
    store = CatalogStore(create_engine(url))
    store.migrate()
    store.ensure_cluster(8, 4, now_ms=0)
    epoch = store.register_node("s-0", "partition-storage", "h:1", 60_000, now_ms=0)
    store.create_topics([("t", 1, {})], now_ms=0)
    store.acquire_shard("txn-coordinator", 3, "c-a", 60_000, now_ms=0)
    paused = sqlite3.connect(tmp_path / "catalog.db", isolation_level=None)
    paused.execute("BEGIN IMMEDIATE")
    paused.execute("UPDATE nodes SET lease_expires_at_ms = lease_expires_at_ms + 1")  # mid-write when it stopped
    try:
        other = sqlite3.connect(tmp_path / "catalog.db", isolation_level=None, timeout=0)
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            other.execute("BEGIN IMMEDIATE")  # the lock is held: a write would wait
        other.close()
        fresh = CatalogStore(create_engine(url))  # no cached cluster row
        assert [n.node_id for n in fresh.list_nodes(now_ms=1)] == ["s-0"]
        assert fresh.node_epoch("s-0") == epoch
        assert [topic.name for topic in fresh.describe_topics()] == ["t"]
        assert fresh.shard_for("txn-coordinator", "some-transactional-id") in range(8)
        lease = fresh.shard_lease("txn-coordinator", 3)
        assert lease is not None and lease.owner_node_id == "c-a"
    finally:
        paused.rollback()
        paused.close()


def test_shard_lease_acquire_renew_expire_and_fence(store: CatalogStore) -> None:
    a = store.acquire_shard("txn-coordinator", 3, "c-a", 1000, now_ms=0)
    assert a is not None and a.coordinator_epoch == 1
    assert store.acquire_shard("txn-coordinator", 3, "c-b", 1000, now_ms=500) is None, "held by c-a"
    renewed = store.acquire_shard("txn-coordinator", 3, "c-a", 1000, now_ms=600)
    assert renewed is not None and renewed.coordinator_epoch == 1 and renewed.lease_expires_at_ms == 1600
    b = store.acquire_shard("txn-coordinator", 3, "c-b", 1000, now_ms=1700)
    assert b is not None and b.coordinator_epoch == 2, "a new owner bumps the coordinator epoch"
    assert store.acquire_shard("txn-coordinator", 3, "c-a", 1000, now_ms=1800) is None
    store.release_shard("txn-coordinator", 3, "c-a", 1)  # stale release is a no-op
    assert store.shard_lease("txn-coordinator", 3).owner_node_id == "c-b"
    store.release_shard("txn-coordinator", 3, "c-b", 2)
    c = store.acquire_shard("txn-coordinator", 3, "c-a", 1000, now_ms=1900)
    assert c is not None and c.coordinator_epoch == 3


def test_racing_acquirers_get_one_owner(store: CatalogStore) -> None:
    winners: list[str] = []
    errors: list[BaseException] = []

    def grab(node: str) -> None:
        try:
            if store.acquire_shard("group-offsets", 1, node, 60_000, now_ms=0) is not None:
                winners.append(node)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=grab, args=(f"g-{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(winners) == 1


def test_one_round_renews_held_shards_and_takes_free_ones_in_one_transaction(store: CatalogStore) -> None:
    role = "txn-coordinator"
    first = store.acquire_shards(role, [0, 1, 2], "c-a", 1000, now_ms=0)
    assert {s: (lease.coordinator_epoch, lease.lease_expires_at_ms) for s, lease in first.held.items()} == {
        0: (1, 1000),
        1: (1, 1000),
        2: (1, 1000),
    }
    written: list[list[int]] = []
    held = store.acquire_shards(role, [0, 1, 2, 3], "c-b", 1000, now_ms=500, before_write=written.append)
    assert set(held.held) == {3} and written == [[3]], "only the never-leased shard is free"
    assert {s: lease.owner_node_id for s, lease in held.elsewhere.items()} == {0: "c-a", 1: "c-a", 2: "c-a"}
    renewed = store.acquire_shards(role, [0, 1, 2, 3], "c-a", 1000, now_ms=600)
    assert {s: (lease.coordinator_epoch, lease.lease_expires_at_ms) for s, lease in renewed.held.items()} == {
        0: (1, 1600),
        1: (1, 1600),
        2: (1, 1600),
    }, "renewing keeps the epoch; c-b's live lease stays c-b's"
    store.release_shard(role, 1, "c-a", 1)
    taken = store.acquire_shards(role, [0, 1, 2, 3], "c-b", 1000, now_ms=700)
    assert {s: lease.coordinator_epoch for s, lease in taken.held.items()} == {1: 2, 3: 1}, "a takeover bumps the epoch"
    lapsed = store.acquire_shards(role, [0, 1, 2, 3], "c-b", 1000, now_ms=1600)
    assert {s: lease.coordinator_epoch for s, lease in lapsed.held.items()} == {0: 2, 1: 2, 2: 2, 3: 1}
    assert store.acquire_shards(role, [0, 1, 2, 3], "c-a", 1000, now_ms=1700).held == {}
    assert store.shard_lease(role, 0).owner_node_id == "c-b"


def test_racing_rounds_get_one_owner_per_shard(store: CatalogStore) -> None:
    owners: dict[int, list[str]] = {}
    errors: list[BaseException] = []

    def grab(node: str) -> None:
        try:
            for shard in store.acquire_shards("group-offsets", range(4), node, 60_000, now_ms=0).held:
                owners.setdefault(shard, []).append(node)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=grab, args=(f"g-{i}",)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(isinstance(e, StorageUnavailable) for e in errors), errors  # SQLite may refuse a concurrent writer
    assert all(len(nodes) == 1 for nodes in owners.values()), owners
    for shard, [node] in owners.items():
        assert store.shard_lease("group-offsets", shard).owner_node_id == node


def test_topics_need_a_live_storage_node_and_unique_names(store: CatalogStore) -> None:
    with pytest.raises(StorageUnavailable):
        store.create_topics([("t", 1, {})], now_ms=0)
    store.register_node("s-0", "partition-storage", "h:1", 10_000, now_ms=0)
    [topic] = store.create_topics([("t", 3, {"flush": "async"})], now_ms=1)
    assert [p.leader_node_id for p in topic.partitions] == ["s-0"] * 3
    with pytest.raises(TopicAlreadyExists):
        store.create_topics([("t", 1, {})], now_ms=2)
    assert store.create_topics([("u", 1, {})], now_ms=2, validate_only=True)[0].name == "u"
    assert [t.name for t in store.describe_topics()] == ["t"]


def test_a_topic_created_again_starts_above_every_earlier_leader_epoch(store: CatalogStore) -> None:
    """Issue 25 item 11: a storage node still serving the deleted incarnation sees a newer epoch and refreshes."""
    store.register_node("s-0", "partition-storage", "h:1", 10_000, now_ms=0)
    [first] = store.create_topics([("t", 2, {})], now_ms=1)
    assert {p.leader_epoch for p in first.partitions} == {0}
    store.delete_topics(["t"])
    [second] = store.create_topics([("t", 3, {})], now_ms=2)
    assert {p.leader_epoch for p in second.partitions} == {1}
    assert second.topic_id != first.topic_id
    store.delete_topics(["t"])
    [third] = store.create_topics([("t", 1, {})], now_ms=3)
    assert [p.leader_epoch for p in third.partitions] == [2]
    [other] = store.create_topics([("u", 1, {})], now_ms=3)
    assert [p.leader_epoch for p in other.partitions] == [0]


def _storage_nodes(store: CatalogStore, count: int, *, racks: str = "") -> None:
    for i in range(count):
        store.register_node(f"s-{i}", "partition-storage", f"h:{i}", 10_000, now_ms=0, rack=racks[i] if racks else None)


def test_replicated_topic_records_replicas_isr_and_epochs(store: CatalogStore) -> None:
    _storage_nodes(store, 3)
    [created] = store.create_topics([("r3", 4, {}, 3), ("r1", 2, {})], now_ms=1)[:1]
    [described] = store.describe_topics(["r3"])
    assert described.partitions == created.partitions
    for p in described.partitions:
        assert sorted(p.replicas) == ["s-0", "s-1", "s-2"]
        assert p.isr == p.replicas and p.leader_node_id == p.replicas[0]
        assert (p.leader_epoch, p.partition_epoch) == (0, 0)
    assert {p.leader_node_id for p in described.partitions} == {"s-0", "s-1", "s-2"}
    [default] = store.describe_topics(["r1"])
    assert all(len(p.replicas) == 1 and p.isr == p.replicas for p in default.partitions)


def test_default_replication_factor_applies_when_the_spec_has_none(store: CatalogStore) -> None:
    _storage_nodes(store, 2)
    [topic] = store.create_topics([("d", 2, {}, None)], now_ms=1, default_replication_factor=2)
    assert all(len(p.replicas) == 2 for p in topic.partitions)


@pytest.mark.parametrize("factor", [0, -1, 4])
def test_bad_replication_factor_creates_nothing_and_names_the_node_count(store: CatalogStore, factor: int) -> None:
    _storage_nodes(store, 3)
    with pytest.raises(InvalidReplicationFactor) as info:
        store.create_topics([("fine", 1, {}), ("bad", 1, {}, factor)], now_ms=1)
    assert "topic 'bad'" in info.value.message and "3 live storage nodes" in info.value.message
    assert store.describe_topics() == []


def test_replicas_spread_over_racks(store: CatalogStore) -> None:
    _storage_nodes(store, 4, racks="aabb")
    racks = {n.node_id: n.rack for n in store.list_nodes(now_ms=1)}
    assert set(racks.values()) == {"a", "b"}
    [topic] = store.create_topics([("racked", 8, {}, 2)], now_ms=1)
    assert all({racks[n] for n in p.replicas} == {"a", "b"} for p in topic.partitions)


def test_alter_partition_is_conditional_on_the_epochs_it_saw(store: CatalogStore) -> None:
    _storage_nodes(store, 3)
    store.create_topics([("alt", 1, {}, 3)], now_ms=1)
    seen = store.partition("alt", 0)
    leader, *followers = seen.replicas
    shrunk = store.alter_partition("alt", seen, isr=[leader, followers[0]])
    assert shrunk is not None and shrunk.isr == (leader, followers[0])
    assert (shrunk.leader_epoch, shrunk.partition_epoch) == (0, 1)
    assert store.partition("alt", 0) == shrunk
    # a second writer holding the old view loses, and changes nothing
    assert store.alter_partition("alt", seen, isr=[leader]) is None
    assert store.partition("alt", 0) == shrunk
    # a change of leader bumps the leader epoch too
    moved = store.alter_partition("alt", shrunk, leader_node_id=followers[0], isr=[followers[0]])
    assert moved is not None and (moved.leader_node_id, moved.leader_epoch, moved.partition_epoch) == (
        followers[0],
        1,
        2,
    )
    # going offline keeps the ISR (its last member is elected cleanly when it returns)
    offline = store.alter_partition("alt", moved, leader_node_id="")
    assert offline is not None and offline.leader_node_id == "" and offline.isr == (followers[0],)


def test_an_isr_expansion_counts_only_fetches_of_the_current_registration(store: CatalogStore) -> None:
    """KIP-903: what an earlier incarnation of a node reported does not bring the node back into an ISR."""
    _storage_nodes(store, 3)
    store.create_topics([("kip903", 1, {}, 3)], now_ms=1)
    seen = store.partition("kip903", 0)
    leader, follower, other = seen.replicas
    shrunk = store.alter_partition("kip903", seen, isr=[leader, other])
    assert shrunk is not None
    old_epoch = store.node_epoch(follower)
    assert old_epoch is not None
    new_epoch = store.register_node(follower, "partition-storage", "127.0.0.1:1", 2_000, 2)  # restarted
    with pytest.raises(StaleRequesterEpoch, match=f"registered as {new_epoch}"):
        store.alter_partition("kip903", shrunk, isr=[leader, follower, other], joining_epochs={follower: old_epoch})
    assert store.partition("kip903", 0) == shrunk, "nothing changed"
    grown = store.alter_partition("kip903", shrunk, isr=[leader, follower, other], joining_epochs={follower: new_epoch})
    assert grown is not None and grown.isr == (leader, follower, other)


def test_a_reassignment_adds_replicas_then_drops_the_unlisted_ones_moving_the_leader(store: CatalogStore) -> None:
    _storage_nodes(store, 4)
    store.create_topics([("moving", 1, {}, 3)], now_ms=1)
    seen = store.partition("moving", 0)
    [spare] = [n.node_id for n in store.list_nodes(1) if n.node_id not in seen.replicas]
    grown = store.reassign_replicas("moving", 0, [*seen.replicas, spare], now_ms=1)
    assert (grown.replicas, grown.isr, grown.leader_node_id) == ((*seen.replicas, spare), seen.isr, seen.leader_node_id)
    assert grown.partition_epoch == seen.partition_epoch + 1 and grown.leader_epoch == seen.leader_epoch
    with pytest.raises(InvalidRequest, match="changed since partition epoch"):
        store.reassign_replicas("moving", 0, [spare], now_ms=1, partition_epoch=grown.partition_epoch + 1)
    caught_up = store.alter_partition("moving", grown, isr=[*seen.isr, spare])
    assert caught_up is not None
    target = [*seen.replicas[1:], spare]
    moved = store.reassign_replicas("moving", 0, target, now_ms=1, partition_epoch=caught_up.partition_epoch)
    assert (list(moved.replicas), list(moved.isr)) == (target, target)
    assert moved.leader_node_id == seen.replicas[1] and moved.leader_epoch == seen.leader_epoch + 1
    assert store.partition("moving", 0) == moved


def test_racing_alter_partitions_have_one_winner(store: CatalogStore) -> None:
    _storage_nodes(store, 3)
    store.create_topics([("race", 1, {}, 3)], now_ms=1)
    seen = store.partition("race", 0)
    results: list[object] = []
    errors: list[BaseException] = []

    def shrink(member: str) -> None:
        try:
            results.append(store.alter_partition("race", seen, isr=[seen.leader_node_id, member]))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=shrink, args=(m,)) for m in seen.replicas[1:]]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and store.partition("race", 0) == winners[0]


@pytest.mark.parametrize(
    ("isr", "leader", "fragment"),
    [(["s-9"], None, "distinct members of the replicas"), (["s-0", "s-0"], None, "distinct"), ([], None, "must be in")],
)
def test_alter_partition_rejects_an_impossible_isr(store: CatalogStore, isr, leader, fragment) -> None:
    _storage_nodes(store, 3)
    store.create_topics([("bad-isr", 1, {}, 3)], now_ms=1)
    seen = store.partition("bad-isr", 0)
    with pytest.raises(InvalidRequest) as info:
        store.alter_partition("bad-isr", seen, isr=isr, leader_node_id=leader)
    assert fragment in info.value.message
    assert store.partition("bad-isr", 0) == seen


def test_catalog_from_before_replication_is_upgraded(tmp_path: Path) -> None:
    """A catalog whose partitions table predates ISR and partition epochs gets them, ISR = its one replica."""
    url = f"sqlite:///{tmp_path / 'old.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE schema_version (schema_name VARCHAR(64) PRIMARY KEY, version INTEGER)"))
        conn.execute(sa.text("INSERT INTO schema_version VALUES ('catalog', 0)"))
        conn.execute(
            sa.text(
                "CREATE TABLE nodes (node_id VARCHAR(255) PRIMARY KEY, role VARCHAR(32) NOT NULL, address VARCHAR(255) "
                "NOT NULL, node_epoch BIGINT NOT NULL, lease_expires_at_ms BIGINT NOT NULL, registered_at_ms BIGINT "
                "NOT NULL)"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TABLE topics (name VARCHAR(249) PRIMARY KEY, topic_id VARCHAR(36) NOT NULL UNIQUE, "
                "partition_count INTEGER NOT NULL, configs JSON NOT NULL, created_at_ms BIGINT NOT NULL)"
            )
        )
        conn.execute(
            sa.text(
                "CREATE TABLE partitions (topic VARCHAR(249) REFERENCES topics(name) ON DELETE CASCADE, partition "
                "INTEGER, leader_node_id VARCHAR(255) NOT NULL, leader_epoch INTEGER NOT NULL, replicas JSON NOT "
                "NULL, PRIMARY KEY (topic, partition))"
            )
        )
        conn.execute(sa.text("INSERT INTO topics VALUES ('old', 'id-old', 1, '{}', 0)"))
        conn.execute(sa.text("INSERT INTO partitions VALUES ('old', 0, 's-0', 3, '[\"s-0\"]')"))
    store = CatalogStore(engine)
    store.migrate()
    assert store.partition("old", 0) == PartitionRecord(0, "s-0", 3, ("s-0",), ("s-0",), 0)
    store.ensure_cluster(8, 4, now_ms=0)
    store.register_node("s-0", "partition-storage", "h:0", 10_000, now_ms=0, rack="r1")
    assert store.list_nodes(now_ms=1)[0].rack == "r1"


def _fresh_postgres_catalog(postgres_url: str) -> tuple[sa.Engine, str, CatalogStore]:
    """A catalog in a new PostgreSQL database: the admin engine, the database's URL and the store."""
    import uuid

    name = "t_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = postgres_url.rsplit("/", 1)[0] + "/" + name
    store = CatalogStore(create_engine(url))
    store.migrate()
    store.ensure_cluster(8, 4, now_ms=0)
    return admin, url, store


def _wait_until_blocked_by(engine: sa.Engine, pid: int, failure: str) -> None:
    """Wait until some session waits for a lock held by the backend ``pid`` (polled from pg_stat_activity)."""
    with engine.connect() as watch:
        for _ in range(2_000):
            blocked = watch.execute(
                sa.text("SELECT count(*) FROM pg_stat_activity WHERE :pid = ANY(pg_blocking_pids(pid))"),
                {"pid": pid},
            ).scalar_one()
            if blocked:
                return
            threading.Event().wait(0.01)
    raise AssertionError(failure)


@pytest.mark.parametrize("whole_round", [False, True], ids=["one-shard", "whole-round"])
def test_takeover_never_overwrites_a_renewal_that_committed_first(postgres_url: str, whole_round: bool) -> None:
    """Issue 25 item 5: a takeover that read the lease as lapsed must not overwrite the owner's concurrent renewal.

    The owner's renewal holds the row lock while the taker has read the old, lapsed expiry; when the renewal
    commits, PostgreSQL re-checks the taker's conditional UPDATE against the renewed row.
    """
    admin, url, store = _fresh_postgres_catalog(postgres_url)
    assert store.acquire_shard("group-offsets", 0, "owner", 1_000, now_ms=0) is not None  # expires at 1_000

    engine = sa.create_engine(url)
    renewal = engine.connect()
    renewal_tx = renewal.begin()
    renewal.execute(  # the owner's renewal at 900, still uncommitted: expires at 1_900
        sa.text("UPDATE coordinator_shards SET lease_expires_at_ms = 1900 WHERE role = 'group-offsets' AND shard = 0")
    )
    renewal_pid = renewal.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    taken: list[object] = []

    def take() -> None:
        if whole_round:
            taken.append(store.acquire_shards("group-offsets", [0], "taker", 1_000, now_ms=1_100).held.get(0))
        else:
            taken.append(store.acquire_shard("group-offsets", 0, "taker", 1_000, now_ms=1_100))

    taker = threading.Thread(target=take)
    taker.start()
    # wait until the taker's UPDATE waits for the renewal's row lock
    _wait_until_blocked_by(engine, renewal_pid, "the takeover never reached its conditional UPDATE")
    renewal_tx.commit()
    renewal.close()
    taker.join(timeout=30)
    assert taken == [None], "the takeover overwrote a renewal that committed before it"
    lease = store.shard_lease("group-offsets", 0)
    assert lease is not None and (lease.owner_node_id, lease.coordinator_epoch) == ("owner", 1)
    engine.dispose()
    admin.dispose()


def test_min_insync_replicas_above_the_replication_factor_is_refused(store: CatalogStore) -> None:
    _storage_nodes(store, 3)
    with pytest.raises(InvalidConfig) as info:
        store.create_topics([("strict", 1, {"min_insync_replicas": "3"}, 2)], now_ms=1)
    assert "min_insync_replicas=3 is above its replication factor 2" in info.value.message
    [topic] = store.create_topics([("strict", 1, {"min_insync_replicas": "2"}, 2)], now_ms=1)
    assert topic.config.min_insync_replicas == 2


def test_a_round_that_loses_a_first_insert_race_learns_the_winner(postgres_url: str) -> None:
    """Two replicas starting at once both find no lease row and insert one: the loser must still learn who won,
    or it answers NOT_COORDINATOR without naming the coordinator until its next round."""
    admin, url, store = _fresh_postgres_catalog(postgres_url)

    engine = sa.create_engine(url)
    winner = engine.connect()
    winner_tx = winner.begin()
    winner.execute(
        sa.text(
            "INSERT INTO coordinator_shards (role, shard, owner_node_id, coordinator_epoch, lease_expires_at_ms) "
            "VALUES ('group-offsets', 0, 'winner', 1, 1000)"
        )
    )
    winner_pid = winner.execute(sa.text("SELECT pg_backend_pid()")).scalar_one()
    rounds: list[object] = []
    loser = threading.Thread(
        target=lambda: rounds.append(store.acquire_shards("group-offsets", [0, 1], "loser", 1_000, 0))
    )
    loser.start()
    # wait until the loser's INSERT waits for the winner's uncommitted row
    _wait_until_blocked_by(engine, winner_pid, "the loser's insert never waited for the winner's")
    winner_tx.commit()
    winner.close()
    loser.join(timeout=30)
    [result] = rounds
    assert set(result.held) == {1}
    assert result.elsewhere[0].owner_node_id == "winner"
    engine.dispose()
    admin.dispose()


# ------------------------------------------------------------------------------------------ adding partitions


def test_partitions_are_added_keeping_the_existing_ones_and_the_replication_factor(store: CatalogStore) -> None:
    _storage_nodes(store, 3)
    [before] = store.create_topics([("grow", 2, {}, 2)], now_ms=1)
    [grown] = store.create_partitions([("grow", 5)], now_ms=2)
    assert grown.partitions[:2] == before.partitions  # data, replicas, leaders and epochs untouched
    added = grown.partitions[2:]
    assert [p.partition for p in added] == [2, 3, 4]
    assert all(len(p.replicas) == 2 and p.isr == p.replicas and p.leader_node_id == p.replicas[0] for p in added)
    # placed as creation places a topic of the new count
    nodes = [StorageNode(f"s-{i}") for i in range(3)]
    assert [p.replicas for p in added] == place_replicas(5, nodes, 2, java_string_hash("grow"))[2:]
    [described] = store.describe_topics(["grow"])
    assert described.partitions == grown.partitions


@pytest.mark.parametrize(("count", "change"), [(2, "already has"), (1, "cannot shrink to")])
def test_a_partition_count_that_does_not_grow_is_refused(store: CatalogStore, count: int, change: str) -> None:
    _storage_nodes(store, 1)
    store.create_topics([("fixed", 2, {})], now_ms=1)
    with pytest.raises(InvalidPartitions) as info:
        store.create_partitions([("fixed", count)], now_ms=2)
    assert info.value.message == (
        f"topic 'fixed' has 2 partition(s) and {change} {count}: the count can only grow (partitions are never "
        "removed, so keyed records keep their partition); ask for more than 2"
    )
    assert len(store.describe_topics(["fixed"])[0].partitions) == 2


def test_adding_partitions_is_all_or_nothing_and_honours_the_replication_factor(store: CatalogStore) -> None:
    _storage_nodes(store, 2)
    store.create_topics([("a", 1, {}), ("b", 1, {}, 2)], now_ms=1)
    with pytest.raises(UnknownTopicOrPartition):
        store.create_partitions([("a", 3), ("missing", 2)], now_ms=2)
    store.deregister_node("s-1", 1)  # one live node left: b's factor 2 cannot be placed
    with pytest.raises(InvalidReplicationFactor) as info:
        store.create_partitions([("a", 3), ("b", 2)], now_ms=3)
    assert info.value.message.startswith("topic 'b': replication_factor=2 is larger than the 1 live storage node")
    assert [len(t.partitions) for t in store.describe_topics(["a", "b"])] == [1, 1]
    assert [p.partition for p in store.create_partitions([("a", 2)], now_ms=3, validate_only=True)[0].partitions] == [
        0,
        1,
    ]
    assert len(store.describe_topics(["a"])[0].partitions) == 1


# ------------------------------------------------------------------------------------------ topic configs


def test_configs_are_set_and_deleted_by_either_name_and_only_set_ones_are_overrides(store: CatalogStore) -> None:
    _storage_nodes(store, 2)
    [created] = store.create_topics([("c", 1, {"retention.ms": "1000"}, 2)], now_ms=1)
    assert (created.config.retention_ms, created.overrides) == (1000, frozenset({"retention_ms"}))
    [altered] = store.alter_configs([("c", [("min.insync.replicas", "2"), ("retention_ms", None)])])
    assert altered.config.min_insync_replicas == 2 and altered.config.retention_ms == TopicConfig().retention_ms
    assert altered.overrides == frozenset({"min_insync_replicas"})
    [described] = store.describe_topics(["c"])
    assert (described.config, described.overrides) == (altered.config, altered.overrides)
    store.alter_configs([("c", [("segment_ms", None)])])  # deleting a setting that is not set changes nothing
    assert store.describe_topics(["c"])[0].overrides == frozenset({"min_insync_replicas"})


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        (
            [("retention.mss", "1")],
            "topic 'c': unknown topic config 'retention.mss'; known: flush, max_message_bytes, retention_ms, "
            "retention_bytes, segment_bytes, segment_ms, min_insync_replicas, unclean_leader_election (or Kafka's "
            "retention.ms, retention.bytes, segment.ms, segment.bytes, max.message.bytes, min.insync.replicas, "
            "unclean.leader.election.enable)",
        ),
        (
            [("retention_ms", "soon"), ("flush", "never")],
            "topic 'c': retention_ms='soon' is not an integer; flush='never'; use 'sync' (fsync before ack), 'leader' "
            "(only the leader fsyncs before ack) or 'async'",
        ),
        (
            [("retention.ms", "1"), ("retention_ms", "2")],
            "topic 'c': retention_ms is changed twice; change each setting once",
        ),
        (
            [("min_insync_replicas", "2")],
            "topic 'c': min_insync_replicas=2 is above its replication factor 1, so no "
            "write could ever be acknowledged; use at most 1",
        ),
    ],
)
def test_bad_config_changes_are_refused_naming_each_problem_and_change_nothing(
    store: CatalogStore, ops: list[tuple[str, str | None]], message: str
) -> None:
    _storage_nodes(store, 1)
    store.create_topics([("c", 1, {"retention_ms": "5000"})], now_ms=1)
    with pytest.raises(InvalidConfig) as info:
        store.alter_configs([("c", ops)])
    assert info.value.message == message
    [topic] = store.describe_topics(["c"])
    assert (topic.config.retention_ms, topic.overrides) == (5000, frozenset({"retention_ms"}))
