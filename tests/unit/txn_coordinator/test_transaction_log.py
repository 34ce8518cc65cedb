"""TransactionLog against real SQLite and PostgreSQL: rows, tombstones and coordinator-epoch fencing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from oncelog.errors import NotCoordinator
from oncelog.storage.sql import create_engine
from oncelog.txn_coordinator.metadata import PreparedInfo, TxnTransition
from oncelog.txn_coordinator.state import TransactionState
from oncelog.txn_coordinator.transaction_log import TransactionLog, transactions

from .rows import row, shard_of

pytestmark = pytest.mark.timeout(60)

S = TransactionState


async def open_store(url: str) -> TransactionLog:
    """A store on its own engine, as a separate coordinator process would have."""
    store = TransactionLog(create_engine(url), shard_of)
    await asyncio.to_thread(store.migrate)
    return store


async def take_over(store: TransactionLog, shard: int, epoch: int) -> dict[str, TxnTransition | None]:
    store.begin_takeover(shard, epoch)
    return dict(await store.load_shard(shard))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[TransactionLog]:
    opened = await open_store(database_url)
    yield opened
    await opened.close()
    opened.engine.dispose()


async def test_every_field_survives_a_reload(store: TransactionLog, database_url: str) -> None:
    await take_over(store, 0, 1)
    stored = row(
        S.PREPARE_COMMIT,
        producer_id=9_000_000_000,
        epoch=32_766,
        previous_producer_id=8,
        next_producer_id=9_000_000_001,
        last_producer_epoch=32_765,
        txn_timeout_ms=900_000,
        partitions=frozenset({("orders", 3), ("orders", 0), ("audit", 1)}),
        groups=frozenset({"billing", "shipping"}),
        txn_start_timestamp=1_700_000_000_000,
        txn_last_update_timestamp=1_700_000_000_500,
    )
    await store.write("0-full", stored, 1)
    other = await open_store(database_url)
    loaded = await take_over(other, 0, 2)
    assert loaded == {"0-full": stored}
    other.engine.dispose()


async def test_a_prepared_transaction_survives_a_reload_and_its_completion_clears_it(
    store: TransactionLog, database_url: str
) -> None:
    await take_over(store, 0, 1)
    prepared = row(
        S.PREPARED,
        epoch=5,
        partitions=frozenset({("orders", 0)}),
        txn_start_timestamp=1_000,
        prepared=PreparedInfo(4, 1_700_000_000_000, "orders-app:7000"),
    )
    await store.write("0-prepared", prepared, 1)
    other = await open_store(database_url)
    assert await take_over(other, 0, 2) == {"0-prepared": prepared}
    completed = row(S.COMPLETE_COMMIT, epoch=6, txn_start_timestamp=1_000)
    await other.write("0-prepared", completed, 2)
    assert (await take_over(other, 0, 3))["0-prepared"] == completed
    other.engine.dispose()


async def test_migration_adds_the_prepared_column_to_a_table_made_before_it(database_url: str) -> None:
    engine = create_engine(database_url)
    old = sa.MetaData()
    sa.Table(
        "transactions",
        old,
        *(
            sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
            for c in transactions.columns
            if c.name != "prepared"
        ),
    )
    old.create_all(engine)
    with engine.begin() as conn:
        sa.Table(
            "schema_version",
            old,
            sa.Column("schema_name", sa.String(64), primary_key=True),
            sa.Column("version", sa.Integer, nullable=False),
        ).create(conn)
        conn.execute(sa.text("INSERT INTO schema_version (schema_name, version) VALUES ('txn_coordinator', 0)"))
    engine.dispose()
    store = await open_store(database_url)
    await take_over(store, 0, 1)
    stored = row(S.PREPARED, partitions=frozenset({("orders", 0)}), prepared=PreparedInfo(0, 5, ""))
    await store.write("0-t", stored, 1)
    assert (await take_over(store, 0, 2))["0-t"] == stored
    await store.close()
    store.engine.dispose()


async def test_a_later_write_replaces_the_row(store: TransactionLog) -> None:
    await take_over(store, 0, 1)
    await store.write("0-a", row(S.EMPTY, epoch=0), 1)
    ongoing = row(S.ONGOING, epoch=0, partitions=frozenset({("t", 0)}), txn_start_timestamp=5)
    await store.write("0-a", ongoing, 1)
    assert await take_over(store, 0, 1) == {"0-a": ongoing}


async def test_dead_deletes_the_row(store: TransactionLog) -> None:
    await take_over(store, 0, 1)
    await store.write("0-gone", row(S.COMPLETE_ABORT, txn_start_timestamp=5), 1)
    await store.write("0-kept", row(S.EMPTY), 1)
    await store.write("0-gone", row(S.DEAD), 1)
    assert set(await take_over(store, 0, 1)) == {"0-kept"}


async def test_load_returns_only_the_shards_rows(store: TransactionLog) -> None:
    await take_over(store, 0, 1)
    await take_over(store, 1, 1)
    await store.write("0-a", row(), 1)
    await store.write("1-b", row(), 1)
    await store.write("1-c", row(), 1)
    assert set(await take_over(store, 1, 1)) == {"1-b", "1-c"}


async def test_load_without_a_takeover_is_refused(store: TransactionLog) -> None:
    with pytest.raises(NotCoordinator):
        await store.load_shard(3)


async def test_write_without_a_claimed_shard_is_refused(store: TransactionLog) -> None:
    with pytest.raises(NotCoordinator):
        await store.write("4-a", row(), 1)
    assert await take_over(store, 4, 1) == {}


async def test_takeover_fences_the_previous_owner(database_url: str) -> None:
    fenced: list[tuple[int, int]] = []
    store = TransactionLog(create_engine(database_url), shard_of, on_fenced=lambda *f: fenced.append(f))
    await asyncio.to_thread(store.migrate)
    await take_over(store, 0, 1)
    await store.write("0-a", row(S.EMPTY, epoch=0), 1)
    successor = await open_store(database_url)
    assert set(await take_over(successor, 0, 2)) == {"0-a"}

    with pytest.raises(NotCoordinator, match="coordinator epoch 1"):
        await store.write("0-a", row(S.EMPTY, epoch=1), 1)
    with pytest.raises(NotCoordinator):
        await store.write("0-new", row(), 1)
    assert fenced == [(0, 1), (0, 1)], "the old owner hears of each refused write"
    await successor.write("0-a", row(S.EMPTY, epoch=5), 2)
    assert await take_over(successor, 0, 2) == {"0-a": row(S.EMPTY, epoch=5)}
    assert await successor.coordinator_epoch(0) == 2
    successor.engine.dispose()
    store.engine.dispose()


async def test_takeover_at_an_older_epoch_is_refused(store: TransactionLog) -> None:
    await take_over(store, 0, 3)
    with pytest.raises(NotCoordinator, match="epoch 3"):
        await take_over(store, 0, 2)
    assert await store.coordinator_epoch(0) == 3


async def test_concurrent_writes_are_committed_together(store: TransactionLog) -> None:
    await take_over(store, 0, 1)
    commits = 0

    def count(_conn: object) -> None:
        nonlocal commits
        commits += 1

    sa.event.listen(store.engine, "commit", count)
    await asyncio.gather(*(store.write(f"0-{i}", row(producer_id=i), 1) for i in range(50)))
    sa.event.remove(store.engine, "commit", count)
    assert commits == 1
    assert len(await take_over(store, 0, 1)) == 50


async def test_a_shared_commit_uses_one_statement_per_kind_of_write(store: TransactionLog) -> None:
    """Group commit at the SQL level: 50 rows and tombstones cost a handful of statements, not 50."""
    await take_over(store, 0, 1)
    await asyncio.gather(*(store.write(f"0-{i}", row(producer_id=i), 1) for i in range(10)))
    statements: list[tuple[str, bool]] = []

    def record(_conn: object, _cursor: object, sql: str, _params: object, _context: object, many: bool) -> None:
        statements.append((sql.split()[0].upper(), many))

    sa.event.listen(store.engine, "before_cursor_execute", record)
    writes = [store.write(f"0-{i}", row(S.DEAD), 1) for i in range(5)]
    writes += [store.write(f"0-{i}", row(S.EMPTY, producer_id=i, epoch=1), 1) for i in range(5, 50)]
    await asyncio.gather(*writes)
    sa.event.remove(store.engine, "before_cursor_execute", record)
    assert statements.count(("UPDATE", False)) == 1, "one epoch check for the one (shard, epoch)"
    assert ("INSERT", True) in statements and ("DELETE", True) in statements
    assert len(statements) <= 4, statements
    loaded = await take_over(store, 0, 1)
    assert sorted(loaded, key=lambda t: int(t.split("-")[1])) == [f"0-{i}" for i in range(5, 50)]
    assert all(transition is not None and transition.producer_epoch == 1 for transition in loaded.values())


async def test_repeated_id_in_one_commit_keeps_write_order(store: TransactionLog) -> None:
    await take_over(store, 0, 1)
    await store.write("0-c", row(S.EMPTY), 1)
    ongoing = row(S.ONGOING, epoch=1, partitions=frozenset({("t", 0)}), txn_start_timestamp=5)
    await asyncio.gather(
        store.write("0-a", row(S.EMPTY), 1),
        store.write("0-a", row(S.DEAD), 1),
        store.write("0-c", row(S.DEAD), 1),
        store.write("0-a", ongoing, 1),
        store.write("0-b", row(S.EMPTY, producer_id=8), 1),
    )
    assert await take_over(store, 0, 1) == {"0-a": ongoing, "0-b": row(S.EMPTY, producer_id=8)}


async def test_a_stale_shard_fails_only_its_own_writes_in_a_shared_commit(
    store: TransactionLog, database_url: str
) -> None:
    await take_over(store, 0, 1)
    await take_over(store, 1, 1)
    successor = await open_store(database_url)
    await take_over(successor, 1, 2)
    outcomes = await asyncio.gather(
        store.write("0-mine", row(), 1), store.write("1-lost", row(), 1), return_exceptions=True
    )
    assert outcomes[0] is None
    assert isinstance(outcomes[1], NotCoordinator)
    assert set(await take_over(store, 0, 1)) == {"0-mine"}
    assert await take_over(successor, 1, 2) == {}
    successor.engine.dispose()


async def test_takeover_sees_every_write_acknowledged_to_the_old_owner(
    store: TransactionLog, database_url: str
) -> None:
    """A takeover racing a stream of writes: whatever the old owner was told is durable, the new one loads."""
    await take_over(store, 0, 1)
    acknowledged: list[str] = []
    refused_after_takeover = asyncio.Event()

    async def old_owner(writer: int) -> None:
        for i in range(10_000):
            transactional_id = f"0-w{writer}-{i}"
            try:
                await store.write(transactional_id, row(producer_id=i), 1)
            except NotCoordinator:
                refused_after_takeover.set()
                return
            acknowledged.append(transactional_id)

    writers = [asyncio.create_task(old_owner(w)) for w in range(4)]
    while len(acknowledged) < 20:
        await asyncio.sleep(0.001)
    successor = await open_store(database_url)
    loaded = await take_over(successor, 0, 2)
    await asyncio.gather(*writers)
    assert refused_after_takeover.is_set()
    missing = set(acknowledged) - set(loaded)
    assert not missing, f"writes acknowledged to the old owner but not loaded by the new one: {sorted(missing)[:5]}"
    successor.engine.dispose()


async def test_cancelled_write_not_yet_started_is_not_written(store: TransactionLog) -> None:
    await take_over(store, 0, 1)
    first = asyncio.create_task(store.write("0-first", row(), 1))
    cancelled = asyncio.create_task(store.write("0-cancelled", row(), 1))
    await asyncio.sleep(0)  # both are queued; the writer has not taken them yet
    cancelled.cancel()
    await first
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert set(await take_over(store, 0, 1)) == {"0-first"}
