"""SQLAlchemy engines for SQLite (embedded default) and PostgreSQL (production), and schema migration.

SQLite is opened in WAL mode with a busy timeout, and every transaction starts with ``BEGIN IMMEDIATE``
(SQLAlchemy's documented pysqlite recipe): several processes then serialise their writes on the database
lock instead of failing with "database is locked" when a reader tries to upgrade. A transaction that only
reads may say so (:data:`READ_ONLY` in the connection's execution options) and starts with a plain ``BEGIN``:
in WAL mode it reads the last committed snapshot and waits for no writer, so one process paused while it held
the write lock (a stop signal, a VM freeze) does not stall every other process's reads. Fencing stays in the
SQL itself (conditional ``UPDATE … WHERE epoch = :seen``), so correctness never depends on the lock mode.

Migrations: each schema is a SQLAlchemy ``MetaData`` plus an ordered list of migration steps recorded in a
``schema_version`` table. We chose this over Alembic because every service creates its own small schema
on start, possibly several processes at once: one locked transaction per start (``BEGIN IMMEDIATE`` on
SQLite, ``pg_advisory_xact_lock`` on PostgreSQL) is all that is needed, with no migration environment
to ship in the image.
"""

from __future__ import annotations

import sqlite3
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from oncelog.errors import StorageUnavailable

Migration = Callable[[Connection], None]


def create_engine(url: str, *, echo: bool = False) -> Engine:
    """Create an engine for ``url`` with oncelog's settings for the backend."""
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError as exc:
        raise StorageUnavailable(f"ONCELOG_DATABASE_URL={url!r} is not a SQLAlchemy URL: {exc}") from exc
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, echo=echo)
    return sa.create_engine(parsed, echo=echo, pool_pre_ping=True, future=True)


_SQLITE_BUSY_TIMEOUT_MS = 30_000

READ_ONLY = "oncelog_read_only"
"""Execution option of a connection whose transactions only read: on SQLite they take no lock (see above)."""


def _enable_wal(cursor: Any, timeout_ms: int = _SQLITE_BUSY_TIMEOUT_MS) -> None:
    """Switch the database to write-ahead logging, waiting out other connections as a busy handler would.

    Switching a new database's journal mode takes an exclusive lock, and SQLite answers "database is
    locked" at once when another connection holds one, without calling the busy handler (several
    services opening a fresh catalog together hit it). The mode is stored in the file, so once any
    connection switched it the others find it set.
    """
    deadline = time.monotonic() + timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(pause)  # what SQLite's own busy handler does between attempts
        pause = min(pause * 2, 0.05)


def _sqlite_engine(url: sa.URL, *, echo: bool) -> Engine:
    if url.database and url.database != ":memory:":
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    engine = sa.create_engine(
        url, echo=echo, connect_args={"timeout": _SQLITE_BUSY_TIMEOUT_MS / 1000, "check_same_thread": False}
    )

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        # take transaction control away from pysqlite so BEGIN IMMEDIATE below is the only BEGIN
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={_SQLITE_BUSY_TIMEOUT_MS}")
        _enable_wal(cursor)
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        # a read-only transaction takes no lock (WAL: it reads the last committed snapshot), so a process paused
        # inside a write cannot stall the reads of every other process
        conn.exec_driver_sql("BEGIN" if conn.get_execution_options().get(READ_ONLY) else "BEGIN IMMEDIATE")

    return engine


def is_sqlite(engine: Engine) -> bool:
    """True for the embedded SQLite backend."""
    return engine.dialect.name == "sqlite"


def migrate(engine: Engine, name: str, metadata: sa.MetaData, migrations: Sequence[Migration] = ()) -> int:
    """Create ``metadata``'s tables and apply pending ``migrations`` for schema ``name``; returns the version.

    Safe when several processes start at once: the whole step runs in one locked transaction.
    """
    version_table = sa.Table(
        "schema_version",
        sa.MetaData(),
        sa.Column("schema_name", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
    )
    try:
        with engine.begin() as conn:
            if engine.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": zlib.crc32(name.encode())})
            version_table.create(conn, checkfirst=True)
            metadata.create_all(conn, checkfirst=True)
            row = conn.execute(
                sa.select(version_table.c.version).where(version_table.c.schema_name == name)
            ).scalar_one_or_none()
            current = row or 0
            for index, step in enumerate(migrations, start=1):
                if index > current:
                    step(conn)
            target = len(migrations)
            if row is None:
                conn.execute(sa.insert(version_table).values(schema_name=name, version=target))
            elif target > current:
                conn.execute(sa.update(version_table).where(version_table.c.schema_name == name).values(version=target))
            return target
    except sa.exc.OperationalError as exc:
        raise StorageUnavailable(f"cannot reach the database at {engine.url!r}: {exc.orig}") from exc
