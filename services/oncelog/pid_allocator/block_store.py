"""SqlBlockStore: the durable producer-id counter, advanced only by a conditional UPDATE.

The counter row lives in the catalog database (``pid_counter``), next to ``pid_requesters`` which remembers
the newest epoch of each requester so a stale instance (a coordinator that was replaced) cannot take ids.
"""

from __future__ import annotations

from typing import Protocol

import sqlalchemy as sa

from oncelog.catalog import schema as t
from oncelog.catalog.store import Transaction
from oncelog.errors import ProducerIdSpaceExhausted, StaleRequesterEpoch, StorageUnavailable

MAX_PRODUCER_ID = 2**63 - 1


class BlockStore(Protocol):
    """Where blocks come from; the allocator's only dependency."""

    def reserve(self, requester_id: str, requester_epoch: int, block_size: int) -> tuple[int, int]:
        """Durably reserve ``block_size`` ids for the requester; returns the inclusive ``(first, last)``."""
        ...


class SqlBlockStore:
    """BlockStore over SQL (SQLite or PostgreSQL) using compare-and-set on ``pid_counter.next_id``."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine

    def reserve(self, requester_id: str, requester_epoch: int, block_size: int) -> tuple[int, int]:
        """Reserve a block (KIP-730's controller role).

        The reservation commits before the caller hears of it, so a crash after the commit only leaves a gap;
        ids are never handed out twice. Losing the compare-and-set to another allocator means reading again.
        """
        while True:
            with Transaction(self.engine) as conn:
                self._check_requester(conn, requester_id, requester_epoch)
                seen = conn.execute(sa.select(t.pid_counter.c.next_id).where(t.pid_counter.c.id == 1)).scalar()
                if seen is None:
                    raise StorageUnavailable("the producer-id counter row is missing; the catalog was not initialised")
                if seen + block_size - 1 > MAX_PRODUCER_ID:
                    raise ProducerIdSpaceExhausted("the 63-bit producer-id space is exhausted")
                won = conn.execute(
                    sa.update(t.pid_counter)
                    .where(t.pid_counter.c.id == 1, t.pid_counter.c.next_id == seen)
                    .values(next_id=seen + block_size)
                ).rowcount
                if won == 1:
                    return seen, seen + block_size - 1

    @staticmethod
    def _check_requester(conn: sa.Connection, requester_id: str, requester_epoch: int) -> None:
        stored = conn.execute(
            sa.select(t.pid_requesters.c.requester_epoch).where(t.pid_requesters.c.requester_id == requester_id)
        ).scalar()
        if stored is not None and requester_epoch < stored:
            raise StaleRequesterEpoch(
                f"requester {requester_id!r} sent epoch {requester_epoch} but epoch {stored} was already seen; "
                "a newer instance of this requester exists"
            )
        if stored is None:
            conn.execute(sa.insert(t.pid_requesters).values(requester_id=requester_id, requester_epoch=requester_epoch))
        elif requester_epoch > stored:
            conn.execute(
                sa.update(t.pid_requesters)
                .where(t.pid_requesters.c.requester_id == requester_id, t.pid_requesters.c.requester_epoch == stored)
                .values(requester_epoch=requester_epoch)
            )
