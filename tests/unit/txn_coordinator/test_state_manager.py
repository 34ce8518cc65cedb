"""TransactionStateManager over an in-memory store: loading, ownership checks, appends and expiry of the cache.

The coordinator's tests exercise the same paths through requests; these pin the state manager's own contract
(Kafka's ``TransactionStateManagerTest``: load, remove, append failing or racing an unload, expiry).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import pytest

from oncelog.errors import (
    CoordinatorLoadInProgress,
    InvalidProducerIdMapping,
    NotCoordinator,
    StorageUnavailable,
)
from oncelog.txn_coordinator.metadata import TransactionMetadata, TxnTransition
from oncelog.txn_coordinator.state import TransactionState
from oncelog.txn_coordinator.state_manager import TransactionStateManager

from .rows import row, shard_of

pytestmark = pytest.mark.timeout(20)

S = TransactionState
TP = ("orders", 0)


class MemoryStore:
    """Rows per shard; ``fail_writes`` makes writes raise; ``read_gate`` holds a load until it is set."""

    def __init__(self) -> None:
        self.rows: dict[int, list[tuple[str, TxnTransition | None]]] = {}
        self.written: list[tuple[str, TxnTransition, int]] = []
        self.fail_writes = False
        self.read_gate: asyncio.Event | None = None
        self.reading = asyncio.Event()

    async def load_shard(self, shard: int) -> Iterable[tuple[str, TxnTransition | None]]:
        self.reading.set()
        if self.read_gate is not None:
            await self.read_gate.wait()
        return list(self.rows.get(shard, []))

    async def write(self, transactional_id: str, transition: TxnTransition, expected_coordinator_epoch: int) -> None:
        if self.fail_writes:
            raise StorageUnavailable("the database is down")
        self.written.append((transactional_id, transition, expected_coordinator_epoch))


async def loaded(store: MemoryStore, *shards: int, leased: set[int] | None = None) -> TransactionStateManager:
    state = TransactionStateManager(store, shard_for=shard_of, leased=None if leased is None else leased.__contains__)
    for shard in shards:
        assert await state.load(state.begin_loading(shard, 1))
    return state


async def test_load_replays_the_shards_rows_last_row_wins_and_tombstones_remove() -> None:
    store = MemoryStore()
    store.rows[0] = [
        ("0-a", row(S.ONGOING, partitions=frozenset({TP}), txn_start_timestamp=500)),
        ("0-a", row(S.COMPLETE_COMMIT, epoch=1)),
        ("0-gone", row()),
        ("0-gone", None),
        ("1-stray", row()),  # a row of another shard is skipped, not served
    ]
    state = await loaded(store, 0)

    entry = state.entry_for("0-a")
    assert set(entry.txns) == {"0-a"}
    assert (entry.txns["0-a"].state, entry.txns["0-a"].producer_epoch) == (S.COMPLETE_COMMIT, 1)
    assert state.owned_shards == {0: 1}


async def test_a_shard_not_loaded_here_is_not_coordinator_or_load_in_progress_when_leased() -> None:
    store = MemoryStore()
    state = await loaded(store, 0, leased={1})
    with pytest.raises(NotCoordinator):
        state.entry_for("2-a")
    with pytest.raises(CoordinatorLoadInProgress):
        state.entry_for("1-a")

    store.read_gate = asyncio.Event()
    loading = asyncio.create_task(state.load(state.begin_loading(2, 1)))
    await store.reading.wait()
    with pytest.raises(CoordinatorLoadInProgress):
        state.entry_for("2-a")
    store.read_gate.set()
    assert await loading
    assert state.entry_for("2-a").shard == 2


async def test_a_load_overtaken_by_a_newer_epoch_leaves_the_newer_cache() -> None:
    store = MemoryStore()
    store.rows[0] = [("0-a", row())]
    state = TransactionStateManager(store, shard_for=shard_of)
    store.read_gate = asyncio.Event()
    old = state.begin_loading(0, 1)
    first = asyncio.create_task(state.load(old))
    await store.reading.wait()
    newer = state.begin_loading(0, 2)
    store.read_gate.set()

    assert await first is False
    assert await state.load(newer) is True
    assert state.owned_shards == {0: 2}
    with pytest.raises(NotCoordinator):
        state.begin_loading(0, 1)


async def test_unload_keeps_a_cache_loaded_at_a_newer_epoch() -> None:
    state = await loaded(MemoryStore(), 0)
    assert state.unload(0, coordinator_epoch=0) is False
    assert state.owned_shards == {0: 1}
    assert state.unload(0, coordinator_epoch=1) is True
    assert state.owned_shards == {}
    with pytest.raises(NotCoordinator):
        state.entry_for("0-a")


async def test_a_failed_append_keeps_the_previous_state_and_forgets_an_id_never_written() -> None:
    store = MemoryStore()
    store.rows[0] = [("0-known", row(S.EMPTY, epoch=3))]
    state = await loaded(store, 0)
    entry = state.entry_for("0-known")
    known = entry.txns["0-known"]
    fresh = TransactionMetadata.new("0-fresh", 9, 60_000, 1_000)
    entry.txns["0-fresh"] = fresh
    store.fail_writes = True

    with pytest.raises(StorageUnavailable):
        await state.append(entry, known, known.prepare_increment_epoch(60_000, 3, 2_000))
    with pytest.raises(StorageUnavailable):
        await state.append(entry, fresh, fresh.prepare_increment_epoch(60_000, None, 2_000))

    assert (known.state, known.producer_epoch, known.pending_state) == (S.EMPTY, 3, None)
    assert "0-fresh" not in entry.txns
    with pytest.raises(InvalidProducerIdMapping):
        state.known(entry, "0-fresh")


async def test_an_append_that_lands_after_the_shard_was_reloaded_is_not_applied() -> None:
    store = MemoryStore()
    store.rows[0] = [("0-a", row(S.EMPTY, epoch=3))]
    state = await loaded(store, 0)
    entry = state.entry_for("0-a")
    md = entry.txns["0-a"]
    transition = md.prepare_increment_epoch(60_000, 3, 2_000)
    assert await state.load(state.begin_loading(0, 2))

    with pytest.raises(NotCoordinator):
        await state.append(entry, md, transition)
    assert store.written == [("0-a", transition, 1)], "the write carried the old epoch; the store refuses it"
    assert state.entry_for("0-a").txns["0-a"].producer_epoch == 3


async def test_appends_keep_the_count_of_open_transactions() -> None:
    store = MemoryStore()
    store.rows[0] = [("0-a", row(S.EMPTY, epoch=0)), ("0-b", row(S.ONGOING, partitions=frozenset({TP})))]
    state = await loaded(store, 0)
    entry = state.entry_for("0-a")
    assert entry.open_transactions == 1
    md = entry.txns["0-a"]
    await state.append(entry, md, md.prepare_add_participants(frozenset({TP}), frozenset(), 2_000))
    assert (md.state, entry.open_transactions) == (S.ONGOING, 2)


async def test_expiry_writes_a_tombstone_then_drops_only_idle_ids_without_an_open_transaction() -> None:
    store = MemoryStore()
    store.rows[0] = [
        ("0-idle", row(S.COMPLETE_COMMIT, txn_last_update_timestamp=1_000)),
        ("0-recent", row(S.COMPLETE_COMMIT, txn_last_update_timestamp=9_000)),
        ("0-open", row(S.ONGOING, partitions=frozenset({TP}), txn_last_update_timestamp=1_000)),
    ]
    state = await loaded(store, 0)

    expired = await state.remove_expired_transactional_ids(now_ms=10_000, expiration_ms=5_000)

    assert expired == ["0-idle"]
    assert [(tid, t.state) for tid, t, _ in store.written] == [("0-idle", S.DEAD)]
    assert set(state.entry_for("0-a").txns) == {"0-recent", "0-open"}
