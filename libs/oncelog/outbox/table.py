"""The outbox table: one row per prepared transaction whose outcome the application's database decided.

The row of a token is written in the same database transaction as the application's rows, with outcome
``committed``; whoever has to learn the outcome later (the check-back service, the restarted application) *claims*
the token: it inserts the row itself with outcome ``rolled_back``.

* If the application's transaction committed, the insert fails on the primary key: the outcome is ``committed``.
* If it is still running, the insert waits for it (PostgreSQL's unique index, SQLite's write lock) and then fails
  or succeeds accordingly; so a slow database commit is never mistaken for a rollback.
* If it never wrote the row (it crashed, or rolled back), the insert succeeds and makes the rollback durable:
  an application transaction still about to write the token fails on the key and rolls back too.

So the answer of a claim never changes once given, whoever asks first.
"""

from __future__ import annotations

import time

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from oncelog.client.records import PreparedTransaction

COMMITTED = "committed"
ROLLED_BACK = "rolled_back"

metadata = sa.MetaData()

outbox = sa.Table(
    "oncelog_outbox",
    metadata,
    sa.Column("transactional_id", sa.String(1024), primary_key=True),
    sa.Column("producer_id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("producer_epoch", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("recorded_at_ms", sa.BigInteger, nullable=False),
)
"""One row per decided prepared transaction (``outcome`` is ``committed`` or ``rolled_back``)."""


def create_outbox_table(engine: Engine) -> None:
    """Create the outbox table if it does not exist (the application may also create it with its migrations)."""
    metadata.create_all(engine, tables=[outbox], checkfirst=True)


def token_row(token: PreparedTransaction, outcome: str) -> dict[str, object]:
    """The row of ``token`` with ``outcome``."""
    return {
        "transactional_id": token.transactional_id,
        "producer_id": token.producer_id,
        "producer_epoch": token.producer_epoch,
        "outcome": outcome,
        "recorded_at_ms": int(time.time() * 1000),
    }


def record_commit(connection: Connection, token: PreparedTransaction) -> None:
    """Write the ``committed`` row of ``token`` in the caller's (the application's) transaction."""
    connection.execute(sa.insert(outbox).values(token_row(token, COMMITTED)))


def claim(engine: Engine, token: PreparedTransaction) -> bool:
    """The outcome of ``token`` (True: the database committed it), fixing it as rolled back if nothing did.

    Waits while an application transaction holding the token is running (see the module doc).
    """
    try:
        with engine.begin() as conn:
            conn.execute(sa.insert(outbox).values(token_row(token, ROLLED_BACK)))
        return False
    except sa.exc.IntegrityError:
        pass
    with engine.connect() as conn:
        outcome = conn.execute(
            sa.select(outbox.c.outcome).where(
                outbox.c.transactional_id == token.transactional_id,
                outbox.c.producer_id == token.producer_id,
                outbox.c.producer_epoch == token.producer_epoch,
            )
        ).scalar_one()
    return bool(outcome == COMMITTED)


def prune(engine: Engine, older_than_ms: int) -> int:
    """Delete rows recorded more than ``older_than_ms`` ago; returns how many. Keep them longer than the
    coordinator's ``max_prepared_ms``: a check-back may still ask about a token until then."""
    cutoff = int(time.time() * 1000) - older_than_ms
    with engine.begin() as conn:
        return conn.execute(sa.delete(outbox).where(outbox.c.recorded_at_ms < cutoff)).rowcount


__all__ = ["COMMITTED", "ROLLED_BACK", "claim", "create_outbox_table", "outbox", "prune", "record_commit"]
