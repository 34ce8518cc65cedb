"""Group-offset stores: SQL fencing and atomicity on SQLite and PostgreSQL, and the Redis read cache.

The cache tests run a real ``redis-server`` (skipped with the reason when it is not installed; CI installs it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.group_offsets.offset_cache import CachedOffsetStore
from oncelog.group_offsets.offset_manager import (
    CommittedOffset,
    GroupRecord,
    GroupView,
    OffsetTransaction,
    PartitionOffset,
    PendingOffset,
    ProducerRecord,
    ShardFence,
    ShardFenced,
    TopicPartition,
)
from oncelog.group_offsets.offset_store import SqlOffsetStore
from oncelog.storage.sql import create_engine
from oncelog.testing.servers import free_port

GROUP = "payments"
T0, T1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
FENCE = ShardFence(shard=3, coordinator_epoch=1)


@pytest.fixture
def sql_store(database_url: str) -> Iterator[SqlOffsetStore]:
    store = SqlOffsetStore(create_engine(database_url))
    store.migrate()
    yield store
    store.engine.dispose()


def commit(store, offset: int, tp: TopicPartition = T0, fence: ShardFence = FENCE, seq: int | None = None) -> None:
    def work(tx: OffsetTransaction) -> None:
        tx.put_committed(GROUP, [CommittedOffset(PartitionOffset(tp, offset), offset if seq is None else seq)])

    store.write({GROUP: fence}, work)


def offsets(store, fence: ShardFence = FENCE) -> dict[TopicPartition, int]:
    return {tp: c.value.offset for tp, c in store.read_group(GROUP, fence).committed.items()}


# ---------------------------------------------------------------------------------------------- SQL


def test_claim_only_ever_raises_the_shard_epoch(sql_store: SqlOffsetStore) -> None:
    assert sql_store.claim_shard(3, 2)
    assert sql_store.claim_shard(3, 2), "claiming the current epoch again is a no-op"
    assert not sql_store.claim_shard(3, 1), "an older epoch must not serve"
    assert sql_store.claim_shard(3, 5)
    assert not sql_store.claim_shard(3, 2)


def test_write_before_the_shard_was_claimed_is_rejected(sql_store: SqlOffsetStore) -> None:
    with pytest.raises(ShardFenced) as info:
        commit(sql_store, 1)
    assert "never claimed" in info.value.message


def test_write_under_a_superseded_epoch_is_rejected_and_writes_nothing(sql_store: SqlOffsetStore) -> None:
    assert sql_store.claim_shard(FENCE.shard, 1)
    commit(sql_store, 10)
    assert sql_store.claim_shard(FENCE.shard, 2)  # a new owner took the shard
    with pytest.raises(ShardFenced) as info:
        commit(sql_store, 99)
    assert info.value.fence == FENCE and "coordinator epoch 2" in info.value.message
    assert offsets(sql_store) == {T0: 10}
    commit(sql_store, 20, fence=ShardFence(FENCE.shard, 2))
    assert offsets(sql_store) == {T0: 20}


def test_failed_unit_of_work_rolls_everything_back(sql_store: SqlOffsetStore) -> None:
    assert sql_store.claim_shard(FENCE.shard, 1)

    def work(tx: OffsetTransaction) -> None:
        tx.put_committed(GROUP, [CommittedOffset(PartitionOffset(T0, 5), 1)])
        tx.put_pending(GROUP, 7, [PendingOffset(PartitionOffset(T1, 6), 0, 2)])
        tx.put_producer(GROUP, 7, ProducerRecord(0, 0))
        raise RuntimeError("crash in the middle of a marker")

    with pytest.raises(RuntimeError):
        sql_store.write({GROUP: FENCE}, work)
    assert sql_store.read_group(GROUP, FENCE) == GroupView({}, frozenset())
    assert sql_store.write({GROUP: FENCE}, lambda tx: tx.producer(GROUP, 7)) is None


def test_a_claim_waits_for_an_in_flight_write_of_the_old_owner(sql_store: SqlOffsetStore) -> None:
    """The old owner's write either commits before the new owner's claim or fails; never after it."""
    assert sql_store.claim_shard(FENCE.shard, 1)
    inside, release = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    def slow_write(tx: OffsetTransaction) -> None:
        inside.set()
        release.wait(10)
        tx.put_committed(GROUP, [CommittedOffset(PartitionOffset(T0, 42), 1)])

    writer = threading.Thread(target=lambda: outcome.setdefault("write", sql_store.write({GROUP: FENCE}, slow_write)))
    writer.start()
    try:
        assert inside.wait(10)
        claimer = threading.Thread(target=lambda: outcome.setdefault("claim", sql_store.claim_shard(FENCE.shard, 2)))
        claimer.start()
        claimer.join(0.5)
        assert claimer.is_alive(), "the claim must wait while the old owner's fenced write is open"
    finally:
        release.set()
        writer.join(10)
    claimer.join(10)
    assert outcome == {"write": None, "claim": True}
    assert offsets(sql_store, ShardFence(FENCE.shard, 2)) == {T0: 42}
    with pytest.raises(ShardFenced):
        commit(sql_store, 43)


def test_concurrent_writers_of_one_shard_never_lose_updates(sql_store: SqlOffsetStore) -> None:
    """The fence update locks the shard row first, so read-modify-write units of one shard are serialised."""
    assert sql_store.claim_shard(FENCE.shard, 1)
    threads, rounds = 8, 25

    def bump(tx: OffsetTransaction) -> None:
        record = tx.group(GROUP)
        tx.put_group(GROUP, GroupRecord(record.generation_id, record.next_commit_seq + 1))

    def worker() -> None:
        for _ in range(rounds):
            sql_store.write({GROUP: FENCE}, bump)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join(60)
    assert sql_store.write({GROUP: FENCE}, lambda tx: tx.group(GROUP).next_commit_seq) == threads * rounds


def test_pending_rows_are_keyed_by_producer_epoch_and_deleted_below_an_epoch(sql_store: SqlOffsetStore) -> None:
    assert sql_store.claim_shard(FENCE.shard, 1)

    def write_pending(tx: OffsetTransaction) -> None:
        tx.put_pending(GROUP, 7, [PendingOffset(PartitionOffset(T0, 1), 0, 1)])
        tx.put_pending(GROUP, 7, [PendingOffset(PartitionOffset(T0, 2), 0, 2)])  # same epoch: replaces
        tx.put_pending(GROUP, 7, [PendingOffset(PartitionOffset(T0, 3), 1, 3)])

    sql_store.write({GROUP: FENCE}, write_pending)
    rows = sql_store.write({GROUP: FENCE}, lambda tx: tx.pending(GROUP, 7))
    assert [(p.producer_epoch, p.value.offset) for p in rows] == [(0, 2), (1, 3)]
    assert sql_store.read_group(GROUP, FENCE).pending == {T0}
    sql_store.write({GROUP: FENCE}, lambda tx: tx.delete_pending(GROUP, 7, below_epoch=1))
    rows = sql_store.write({GROUP: FENCE}, lambda tx: tx.pending(GROUP, 7))
    assert [(p.producer_epoch, p.value.offset) for p in rows] == [(1, 3)]


# ---------------------------------------------------------------------------------------------- Redis cache


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[object]:
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=1)
    client.flushall()
    yield client
    client.close()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SqlOffsetStore]:
    store = SqlOffsetStore(create_engine(f"sqlite:///{tmp_path / 'offsets.db'}"))
    store.migrate()
    assert store.claim_shard(FENCE.shard, 1)
    yield store
    store.engine.dispose()


@pytest.mark.redis
def test_cache_serves_reads_until_a_write_through_it(sqlite_store: SqlOffsetStore, redis_client) -> None:
    cached = CachedOffsetStore(sqlite_store, redis_client, incarnation="a")
    commit(cached, 10)
    assert offsets(cached) == {T0: 10}
    assert redis_client.exists(cached.key(GROUP)) == 1
    commit(sqlite_store, 11)  # behind the cache's back: proves the next read is served from Redis
    assert offsets(cached) == {T0: 10}
    commit(cached, 12)
    assert offsets(cached) == {T0: 12}


@pytest.mark.redis
def test_flushed_cache_never_returns_wrong_offsets(sqlite_store: SqlOffsetStore, redis_client) -> None:
    cached = CachedOffsetStore(sqlite_store, redis_client, incarnation="a")
    commit(cached, 10)
    assert offsets(cached) == {T0: 10}
    redis_client.flushall()
    commit(cached, 20)
    assert offsets(cached) == {T0: 20}
    redis_client.flushall()
    assert offsets(cached) == {T0: 20}


@pytest.mark.redis
def test_entries_of_another_process_or_epoch_are_never_served(sqlite_store: SqlOffsetStore, redis_client) -> None:
    before = CachedOffsetStore(sqlite_store, redis_client, incarnation="before-restart")
    commit(before, 10)
    assert offsets(before) == {T0: 10}  # cached under the old incarnation's version 1
    after = CachedOffsetStore(sqlite_store, redis_client, incarnation="after-restart")
    commit(sqlite_store, 30)  # whatever happened while the entry sat in Redis
    assert offsets(after) == {T0: 30}, "a new process must not trust an entry whose tag it did not write"
    assert sqlite_store.claim_shard(FENCE.shard, 2)
    newer = ShardFence(FENCE.shard, 2)
    commit(sqlite_store, 40, fence=newer)
    assert offsets(after, newer) == {T0: 40}, "an entry cached under an older shard epoch must be ignored"


@pytest.mark.redis
def test_read_during_a_write_is_not_cached(sqlite_store: SqlOffsetStore, redis_client) -> None:
    class PausingWrites:
        """Holds a write open (as a slow database would) until the test lets it commit."""

        def __init__(self) -> None:
            self.entered, self.proceed = threading.Event(), threading.Event()

        def read_group(self, group_id: str, fence: ShardFence) -> GroupView:
            return sqlite_store.read_group(group_id, fence)

        def write(self, fences, work):
            self.entered.set()
            self.proceed.wait(10)
            return sqlite_store.write(fences, work)

        def claim_shard(self, shard: int, epoch: int) -> bool:
            return sqlite_store.claim_shard(shard, epoch)

    inner = PausingWrites()
    cached = CachedOffsetStore(inner, redis_client, incarnation="a")
    inner.proceed.set()
    commit(cached, 10)
    inner.entered.clear()
    inner.proceed.clear()
    writer = threading.Thread(target=lambda: commit(cached, 20))
    writer.start()
    assert inner.entered.wait(10)
    assert offsets(cached) == {T0: 10}  # the write has not committed yet
    inner.proceed.set()
    writer.join(10)
    assert offsets(cached) == {T0: 20}


@pytest.mark.redis
def test_read_racing_a_write_does_not_cache_the_old_view(sqlite_store: SqlOffsetStore, redis_client) -> None:
    class PausingReads:
        """Lets a read return its (old) view only after the test performed a write."""

        def __init__(self) -> None:
            self.read_done, self.proceed = threading.Event(), threading.Event()

        def read_group(self, group_id: str, fence: ShardFence) -> GroupView:
            view = sqlite_store.read_group(group_id, fence)
            self.read_done.set()
            self.proceed.wait(10)
            return view

        def write(self, fences, work):
            return sqlite_store.write(fences, work)

        def claim_shard(self, shard: int, epoch: int) -> bool:
            return sqlite_store.claim_shard(shard, epoch)

    inner = PausingReads()
    cached = CachedOffsetStore(inner, redis_client, incarnation="a")
    commit(cached, 10)
    seen: list[dict[TopicPartition, int]] = []
    reader = threading.Thread(target=lambda: seen.append(offsets(cached)))
    reader.start()
    assert inner.read_done.wait(10)
    commit(cached, 20)  # lands after the reader's SQL read, before it could fill the cache
    inner.proceed.set()
    reader.join(10)
    assert seen == [{T0: 10}]
    inner.proceed.set()
    assert offsets(cached) == {T0: 20}


def test_cache_stays_correct_when_redis_is_unreachable(sqlite_store: SqlOffsetStore) -> None:
    import redis

    dead = redis.Redis(host="127.0.0.1", port=free_port(), socket_timeout=0.2, socket_connect_timeout=0.2)
    cached = CachedOffsetStore(sqlite_store, dead, incarnation="a")
    commit(cached, 10)
    assert offsets(cached) == {T0: 10}
    commit(cached, 11)
    assert offsets(cached) == {T0: 11}
