"""TransactionLog: the SQL transaction table, durable home of every transition (design/kafka-semantics.md §2.9).

It is the store under :class:`~.state_manager.TransactionStateManager`, which keeps the cache of the loaded shards
on top of it, as Kafka's ``TransactionStateManager`` keeps its metadata cache on top of the log it appends to.

Kafka keeps a compacted ``__transaction_state`` topic whose last record per key is the id's state; here the
table ``transactions`` holds exactly that last record, one row per transactional id, and a deletion plays
the tombstone. Previous/next producer id and the last epoch are columns, so a retried InitProducerId or
EndTxn is still recognised after a failover (the KAFKA-20357 gap, design/kafka-semantics.md §2.6).

Fencing (design/kafka-semantics.md §2.10). Kafka guards its appends with the partition leader epoch of the log; our
equivalent
is the row ``txn_shard_epochs(shard, coordinator_epoch)``:

* a coordinator that takes a shard over raises the row to its lease's coordinator epoch and reads the
  shard's rows in the same SQL transaction (:meth:`TransactionLog.load_shard`);
* every write first runs ``UPDATE txn_shard_epochs … WHERE shard = :s AND coordinator_epoch = :mine`` in
  the SQL transaction that writes the row. A row count of 0 means a newer owner took the shard and the
  write is refused with NOT_COORDINATOR. The update also locks the epoch row until commit, so a takeover
  waits for a write in flight and then reads it: no write acknowledged to the old owner can be missed by
  the new one, and none can land after the new owner read the shard.

Group commit: writes issued while a SQL transaction is running are queued and written together in the
next one (each with its own epoch check and outcome), so concurrent transactions share one commit. Kafka
gets the same effect from appending many transaction-log records with one ``acks=-1`` produce.

Write path cost: the statements of a write are driver-level SQL rendered once per engine (:class:`_Statements`)
and run with ``executemany``: one epoch check per (shard, epoch) in the batch, one upsert
(``INSERT … ON CONFLICT (transactional_id) DO UPDATE``, SQLite >= 3.24 and PostgreSQL) for every row written
and one delete for every tombstone. Building SQLAlchemy constructs per write cost more CPU than the database.

Tracing (design/architecture.md §9): every write is an ``oncelog.txn.persist`` span in its caller's trace (the EndTxn
that
prepares a commit, the marker completion that writes Complete*), with the transactional id, the state written
and the fencing tokens as attributes. The SQL transaction that carries it is an ``oncelog.txn.sql_transaction``
span under the first write it carries, linked to the others, as a shared group commit belongs to several traces.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from opentelemetry import trace
from sqlalchemy.engine import Connection, Dialect, Engine

from oncelog.errors import NotCoordinator, OncelogError, StorageUnavailable
from oncelog.storage.sql import migrate
from oncelog.vocabulary import TopicPartition

from .metadata import PreparedInfo, TxnTransition
from .state import TransactionState

log = logging.getLogger(__name__)

SCHEMA_NAME = "txn_coordinator"
MAX_TRANSACTIONAL_ID_BYTES = 1024
"""Longest transactional id accepted, in UTF-8 bytes (fits a PostgreSQL b-tree key with room to spare)."""
MAX_WRITES_PER_COMMIT = 512
"""Upper bound of the writes grouped into one SQL transaction."""

metadata = sa.MetaData()

transactions = sa.Table(
    "transactions",
    metadata,
    sa.Column("transactional_id", sa.String(MAX_TRANSACTIONAL_ID_BYTES), primary_key=True),
    sa.Column("shard", sa.Integer, nullable=False, index=True),
    sa.Column("state", sa.SmallInteger, nullable=False),  # TransactionState value = Kafka's state id
    sa.Column("producer_id", sa.BigInteger, nullable=False),
    sa.Column("previous_producer_id", sa.BigInteger, nullable=False),
    sa.Column("next_producer_id", sa.BigInteger, nullable=False),
    sa.Column("producer_epoch", sa.Integer, nullable=False),
    sa.Column("last_producer_epoch", sa.Integer, nullable=False),
    sa.Column("txn_timeout_ms", sa.Integer, nullable=False),
    sa.Column("partitions", sa.JSON, nullable=False),  # sorted [[topic, partition], ...]
    sa.Column("group_ids", sa.JSON, nullable=False),  # sorted [group, ...]
    sa.Column("txn_start_timestamp", sa.BigInteger, nullable=False),
    sa.Column("txn_last_update_timestamp", sa.BigInteger, nullable=False),
    # {"epoch", "prepared_at", "check_back_address"} of a prepared transaction, else NULL
    # (design/kafka-semantics.md §5.7)
    sa.Column("prepared", sa.JSON, nullable=True),
)

shard_epochs = sa.Table(
    "txn_shard_epochs",
    metadata,
    sa.Column("shard", sa.Integer, primary_key=True),
    sa.Column("coordinator_epoch", sa.Integer, nullable=False),
)


def _add_prepared_column(conn: Connection) -> None:
    """Version 1: the prepared-transaction column (a table created before two-phase commit has none)."""
    if "prepared" not in {c["name"] for c in sa.inspect(conn).get_columns("transactions")}:
        conn.execute(sa.text("ALTER TABLE transactions ADD COLUMN prepared JSON"))


MIGRATIONS: list[Callable[[Connection], None]] = [_add_prepared_column]

_ROW_COLUMNS = tuple(c.name for c in transactions.columns if c.name != "transactional_id")
_PARAMETER = re.compile(r"\{(\w+)\}")


@dataclass(frozen=True, slots=True)
class _DriverStatement:
    """One SQL string in the driver's parameter style and how to lay out its parameters."""

    sql: str
    names: tuple[str, ...] | None
    """Parameter names in placeholder order for positional styles; None for named styles (pass dicts)."""

    def parameters(self, values: dict[str, Any]) -> dict[str, Any] | tuple[Any, ...]:
        """``values`` in the form the driver expects for this statement."""
        return values if self.names is None else tuple(values[name] for name in self.names)


def _render(template: str, dialect: Dialect) -> _DriverStatement:
    """Replace ``{name}`` placeholders with the dialect's DBAPI parameter style."""
    style = dialect.paramstyle
    names: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        name = match.group(1)
        names.append(name)
        if style == "qmark":
            return "?"
        if style == "format":
            return "%s"
        if style == "numeric":
            return f":{len(names)}"
        if style == "named":
            return f":{name}"
        if style == "pyformat":
            return f"%({name})s"
        raise ValueError(f"unsupported DBAPI parameter style {style!r}")

    sql = _PARAMETER.sub(placeholder, template)
    return _DriverStatement(sql, None if style in ("named", "pyformat") else tuple(names))


@dataclass(frozen=True, slots=True)
class _Statements:
    """The write path's SQL, rendered once per engine; executed with ``exec_driver_sql`` (no per-write compile)."""

    check_epoch: _DriverStatement
    upsert: _DriverStatement
    delete: _DriverStatement

    @classmethod
    def for_dialect(cls, dialect: Dialect) -> _Statements:
        """Render the statements for ``dialect`` (identifiers quoted by its preparer)."""
        q = dialect.identifier_preparer.quote
        epochs, txns = q(shard_epochs.name), q(transactions.name)
        shard, epoch, tid = q("shard"), q("coordinator_epoch"), q("transactional_id")
        columns = ("transactional_id", *_ROW_COLUMNS)
        # A self-assignment: checks the epoch and holds the row lock until commit (see module doc).
        check_epoch = f"UPDATE {epochs} SET {epoch} = {epoch} WHERE {shard} = {{shard}} AND {epoch} = {{epoch}}"
        upsert = (
            f"INSERT INTO {txns} ({', '.join(q(c) for c in columns)}) "
            f"VALUES ({', '.join(f'{{{c}}}' for c in columns)}) "
            f"ON CONFLICT ({tid}) DO UPDATE SET {', '.join(f'{q(c)} = excluded.{q(c)}' for c in _ROW_COLUMNS)}"
        )
        delete = f"DELETE FROM {txns} WHERE {tid} = {{transactional_id}}"
        return cls(_render(check_epoch, dialect), _render(upsert, dialect), _render(delete, dialect))


@dataclass(eq=False, slots=True)
class _Write:
    transactional_id: str
    shard: int
    transition: TxnTransition
    coordinator_epoch: int
    done: asyncio.Future[None]
    span: trace.Span
    """The caller's ``oncelog.txn.persist`` span."""


class TransactionLog:
    """SQL implementation of the state manager's ``TransactionStore`` port (SQLite or PostgreSQL).

    Args:
        engine: engine of the coordinator's state database (``state_database_url``).
        shard_for: the cluster-wide transactional id -> shard mapping (as FindCoordinator uses it).
        on_fenced: called with ``(shard, coordinator_epoch)`` when a write finds the shard claimed by a
            newer coordinator, so this process stops serving it at once instead of at its next lease renewal.
        tracer_provider: provider of the write spans; the global one by default.
    """

    def __init__(
        self,
        engine: Engine,
        shard_for: Callable[[str], int],
        *,
        on_fenced: Callable[[int, int], None] | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self.engine = engine
        # the scope keeps the name it had when this table was the state manager module, so dashboards still match
        self._tracer = trace.get_tracer("oncelog.txn_coordinator.state_manager", tracer_provider=tracer_provider)
        self._shard_for = shard_for
        self._on_fenced = on_fenced
        self._takeover_epochs: dict[int, int] = {}
        self._queue: list[_Write] = []
        self._writer: asyncio.Task[None] | None = None
        self._statements = _Statements.for_dialect(engine.dialect)

    def migrate(self) -> None:
        """Create or upgrade the tables (safe with several replicas starting at once)."""
        migrate(self.engine, SCHEMA_NAME, metadata, MIGRATIONS)

    # ------------------------------------------------------------------------------ takeover and load

    def begin_takeover(self, shard: int, coordinator_epoch: int) -> None:
        """Announce that the next :meth:`load_shard` of ``shard`` claims it at ``coordinator_epoch``.

        The shard lease manager calls this with the epoch of the lease it just acquired, right before
        ``TransactionCoordinator.load``, whose only store call is ``load_shard(shard)``.
        """
        self._takeover_epochs[shard] = coordinator_epoch

    async def load_shard(self, shard: int) -> list[tuple[str, TxnTransition | None]]:
        """Claim ``shard`` at the announced coordinator epoch and return its rows (one per id).

        Raises:
            NotCoordinator: no takeover was announced, or the table was claimed at a newer epoch.
            StorageUnavailable: the database could not be reached.
        """
        epoch = self._takeover_epochs.get(shard)
        if epoch is None:
            raise NotCoordinator(f"shard {shard} is loaded without a lease; call begin_takeover first")
        return await asyncio.to_thread(self._claim_and_read, shard, epoch)

    def _claim_and_read(self, shard: int, epoch: int) -> list[tuple[str, TxnTransition | None]]:
        for _attempt in range(3):
            try:
                with _transaction(self.engine) as conn:
                    self._claim(conn, shard, epoch)
                    rows = conn.execute(
                        sa.select(transactions)
                        .where(transactions.c.shard == shard)
                        .order_by(transactions.c.transactional_id)
                    ).all()
                    return [(row.transactional_id, _transition_of(row)) for row in rows]
            except sa.exc.IntegrityError:
                # Two first-time claims of the shard raced on the insert; the next attempt sees the winner's row.
                continue
        raise StorageUnavailable(f"could not claim shard {shard} in the transaction table; retry")

    @staticmethod
    def _claim(conn: Connection, shard: int, epoch: int) -> None:
        raised = conn.execute(
            sa.update(shard_epochs)
            .where(shard_epochs.c.shard == shard, shard_epochs.c.coordinator_epoch <= epoch)
            .values(coordinator_epoch=epoch)
        ).rowcount
        if raised == 1:
            return
        stored = conn.execute(sa.select(shard_epochs.c.coordinator_epoch).where(shard_epochs.c.shard == shard)).scalar()
        if stored is not None:
            raise NotCoordinator(f"shard {shard} was taken over at coordinator epoch {stored} > {epoch}")
        conn.execute(sa.insert(shard_epochs).values(shard=shard, coordinator_epoch=epoch))

    async def coordinator_epoch(self, shard: int) -> int | None:
        """The epoch the table is claimed at for ``shard`` (None if never claimed); for operators and tests."""

        def read() -> int | None:
            with _transaction(self.engine) as conn:
                return conn.execute(
                    sa.select(shard_epochs.c.coordinator_epoch).where(shard_epochs.c.shard == shard)
                ).scalar()

        return await asyncio.to_thread(read)

    # ------------------------------------------------------------------------------ writes

    async def write(self, transactional_id: str, transition: TxnTransition, expected_coordinator_epoch: int) -> None:
        """Persist ``transition`` as the id's row (delete it for ``DEAD``) if the shard is still ours.

        Raises:
            NotCoordinator: the table was claimed at another coordinator epoch; nothing was written.
            StorageUnavailable: the database failed; the row may or may not have been written.
        """
        shard = self._shard_for(transactional_id)
        attributes: dict[str, str | int] = {
            "oncelog.transactional_id": transactional_id,
            "oncelog.txn.state": transition.state.name,
            "oncelog.producer_id": transition.producer_id,
            "oncelog.producer_epoch": transition.producer_epoch,
            "oncelog.txn.shard": shard,
            "oncelog.coordinator_epoch": expected_coordinator_epoch,
            "db.system": self.engine.dialect.name,
        }
        with self._tracer.start_as_current_span("oncelog.txn.persist", attributes=attributes) as span:
            write = _Write(
                transactional_id,
                shard,
                transition,
                expected_coordinator_epoch,
                asyncio.get_running_loop().create_future(),
                span,
            )
            self._queue.append(write)
            if self._writer is None or self._writer.done():
                self._writer = asyncio.create_task(self._drain(), name="txn-state-writer")
            await write.done

    async def _drain(self) -> None:
        """Write queued rows, as many per SQL transaction as have accumulated while the last one ran."""
        while self._queue:
            taken = self._queue[:MAX_WRITES_PER_COMMIT]
            del self._queue[:MAX_WRITES_PER_COMMIT]
            # A caller cancelled before its turn already forgot the transition: do not write it at all.
            batch = [write for write in taken if not write.done.done()]
            if not batch:
                continue
            try:
                outcomes = await asyncio.to_thread(self._write_batch, batch)
            except Exception as exc:  # the whole SQL transaction failed: every write in it is indeterminate
                for write in batch:
                    _settle(write, _copy_error(exc))
                continue
            for write, outcome in zip(batch, outcomes, strict=True):
                _settle(write, outcome)
            fenced = {
                (w.shard, w.coordinator_epoch)
                for w, outcome in zip(batch, outcomes, strict=True)
                if isinstance(outcome, NotCoordinator)
            }
            for shard, epoch in sorted(fenced):
                if self._on_fenced is None:
                    break
                try:
                    self._on_fenced(shard, epoch)
                except Exception:
                    log.exception("fencing listener failed for shard %d", shard)

    def _write_batch(self, batch: Sequence[_Write]) -> list[OncelogError | None]:
        with self._tracer.start_as_current_span(
            "oncelog.txn.sql_transaction",
            context=trace.set_span_in_context(batch[0].span),
            links=[trace.Link(write.span.get_span_context()) for write in batch[1:]],
            attributes={
                "db.system": self.engine.dialect.name,
                "db.collection.name": transactions.name,
                "oncelog.txn.writes": len(batch),
            },
        ):
            return self._write_batch_in_transaction(batch)

    def _write_batch_in_transaction(self, batch: Sequence[_Write]) -> list[OncelogError | None]:
        statements = self._statements
        with _transaction(self.engine) as conn:
            # Lock the epoch rows in shard order so two writers can never wait on each other in a cycle.
            owned: dict[tuple[int, int], bool] = {}
            for shard, epoch in sorted({(w.shard, w.coordinator_epoch) for w in batch}):
                check = statements.check_epoch
                owned[(shard, epoch)] = (
                    conn.exec_driver_sql(check.sql, check.parameters({"shard": shard, "epoch": epoch})).rowcount == 1
                )
            outcomes: list[OncelogError | None] = []
            accepted: list[_Write] = []
            for write in batch:
                if owned[(write.shard, write.coordinator_epoch)]:
                    accepted.append(write)
                    outcomes.append(None)
                else:
                    outcomes.append(
                        NotCoordinator(
                            f"shard {write.shard} is no longer held at coordinator epoch {write.coordinator_epoch}; "
                            f"{write.transactional_id!r} was not written"
                        )
                    )
            for statement, parameters in _runs(statements, accepted):
                conn.exec_driver_sql(statement.sql, parameters)
            return outcomes

    async def close(self) -> None:
        """Wait for queued writes to finish (clean shutdown, after the server stopped taking calls)."""
        if self._writer is not None:
            await asyncio.gather(self._writer, return_exceptions=True)


# ---------------------------------------------------------------------------------------------- helpers


@contextmanager
def _transaction(engine: Engine) -> Iterator[Connection]:
    try:
        with engine.begin() as conn:
            yield conn
    except sa.exc.OperationalError as exc:
        raise StorageUnavailable(f"transaction state database failed: {exc.orig}", definite=False) from exc


def _settle(write: _Write, outcome: BaseException | None) -> None:
    if write.done.done():  # the caller was cancelled; the coordinator already forgot the transition
        return
    if outcome is None:
        write.done.set_result(None)
    else:
        write.done.set_exception(outcome)


def _copy_error(exc: Exception) -> Exception:
    """One exception object per waiting caller, so their tracebacks do not pile onto a shared instance."""
    if isinstance(exc, OncelogError):
        return type(exc)(exc.message, definite=exc.definite, metadata=exc.metadata, reason=exc.reason)
    if isinstance(exc, sa.exc.SQLAlchemyError):
        return StorageUnavailable(f"transaction state database failed: {exc}", definite=False)
    return exc


def _runs(
    statements: _Statements, writes: Sequence[_Write]
) -> Iterator[tuple[_DriverStatement, list[dict[str, Any] | tuple[Any, ...]]]]:
    """Group ``writes`` into executemany runs of one statement, keeping the order of writes to the same id.

    The coordinator never has two writes of one id in flight, so a batch is normally one upsert run and at
    most one delete run; a repeated id or a switch between upsert and delete starts a new run.
    """
    current: _DriverStatement | None = None
    rows: list[dict[str, Any] | tuple[Any, ...]] = []
    ids: set[str] = set()
    for write in writes:
        dead = write.transition.state is TransactionState.DEAD
        statement = statements.delete if dead else statements.upsert
        if statement is not current or write.transactional_id in ids:
            if current is not None:
                yield current, rows
            current, rows, ids = statement, [], set()
        values = {"transactional_id": write.transactional_id}
        if not dead:
            values.update(_row_of(write.shard, write.transition))
        rows.append(statement.parameters(values))
        ids.add(write.transactional_id)
    if current is not None:
        yield current, rows


def _row_of(shard: int, t: TxnTransition) -> dict[str, Any]:
    """Column values of ``t``'s row as driver parameters (JSON columns as text, as SQLAlchemy's JSON type writes)."""
    return {
        "shard": shard,
        "state": t.state.value,
        "producer_id": t.producer_id,
        "previous_producer_id": t.previous_producer_id,
        "next_producer_id": t.next_producer_id,
        "producer_epoch": t.producer_epoch,
        "last_producer_epoch": t.last_producer_epoch,
        "txn_timeout_ms": t.txn_timeout_ms,
        "partitions": json.dumps([[topic, partition] for topic, partition in sorted(t.partitions)]),
        "group_ids": json.dumps(sorted(t.groups)),
        "txn_start_timestamp": t.txn_start_timestamp,
        "txn_last_update_timestamp": t.txn_last_update_timestamp,
        "prepared": None
        if t.prepared is None
        else json.dumps(
            {
                "epoch": t.prepared.epoch,
                "prepared_at": t.prepared.prepared_at,
                "check_back_address": t.prepared.check_back_address,
            }
        ),
    }


def _transition_of(row: Any) -> TxnTransition:
    partitions: frozenset[TopicPartition] = frozenset(TopicPartition(str(topic), int(p)) for topic, p in row.partitions)
    return TxnTransition(
        state=TransactionState(row.state),
        producer_id=row.producer_id,
        previous_producer_id=row.previous_producer_id,
        next_producer_id=row.next_producer_id,
        producer_epoch=row.producer_epoch,
        last_producer_epoch=row.last_producer_epoch,
        txn_timeout_ms=row.txn_timeout_ms,
        partitions=partitions,
        groups=frozenset(row.group_ids),
        txn_start_timestamp=row.txn_start_timestamp,
        txn_last_update_timestamp=row.txn_last_update_timestamp,
        prepared=None
        if row.prepared is None
        else PreparedInfo(
            int(row.prepared["epoch"]), int(row.prepared["prepared_at"]), str(row.prepared["check_back_address"])
        ),
    )


__all__ = ["MAX_TRANSACTIONAL_ID_BYTES", "SCHEMA_NAME", "TransactionLog", "metadata"]
