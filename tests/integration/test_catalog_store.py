"""CatalogStore on SQLite and PostgreSQL: fencing changes are conditional, leases and epochs behave."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from oncelog.catalog import CatalogStore
from oncelog.errors import InvalidRequest, StorageUnavailable, TopicAlreadyExists
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
