"""The catalog's SQL transactions: ``engine.begin()`` with unreachable databases reported as StorageUnavailable, the
database's own clock, and inserts that let a racing transaction's row win.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from oncelog.errors import StorageUnavailable
from oncelog.storage.sql import READ_ONLY


class Transaction:
    """``engine.begin()`` that reports an unreachable database as StorageUnavailable.

    ``read_only``: the transaction only reads, so on SQLite it takes no lock and waits for no writer
    (:data:`oncelog.storage.sql.READ_ONLY`); it must not write (on SQLite the write would have to upgrade the
    lock, and could fail with "database is locked" where a normal transaction waits its turn).
    """

    def __init__(self, engine: Engine, *, read_only: bool = False) -> None:
        self._cm: AbstractContextManager[Connection] = _read_only(engine) if read_only else engine.begin()

    def __enter__(self) -> Connection:
        try:
            return self._cm.__enter__()
        except sa.exc.OperationalError as exc:
            raise StorageUnavailable(f"cannot reach the catalog database: {exc.orig}") from exc

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            self._cm.__exit__(exc_type, exc, tb)  # commits, or rolls back when the body raised
        except sa.exc.OperationalError as err:
            raise StorageUnavailable(f"catalog write failed: {err.orig}", definite=False) from err
        if isinstance(exc, sa.exc.OperationalError):
            raise StorageUnavailable(f"catalog database error: {exc.orig}") from exc


@contextmanager
def _read_only(engine: Engine) -> Iterator[Connection]:
    with engine.connect() as conn:
        conn.execution_options(**{READ_ONLY: True})
        with conn.begin():
            yield conn


def database_now_ms(conn: Connection) -> int:
    """The database server's clock, in Unix milliseconds (the time of the call, not of the transaction start)."""
    if conn.dialect.name == "postgresql":
        query = "SELECT CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)"
    else:  # SQLite runs in this process: its clock is the host's
        query = "SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)"
    return int(conn.execute(sa.text(query)).scalar_one())


def insert_ignoring_conflicts(conn: Connection, table: sa.Table) -> sa.Insert:
    """``INSERT … ON CONFLICT DO NOTHING``: a row a racing transaction inserted first is skipped, not an error."""
    if conn.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table).on_conflict_do_nothing()
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table).on_conflict_do_nothing()


__all__ = ["Transaction", "database_now_ms", "insert_ignoring_conflicts"]
