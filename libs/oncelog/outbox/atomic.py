"""``atomic_send``: database rows and oncelog records commit together or not at all.

The order of the steps (design/kafka-semantics.md §5.7)::

    producer.begin_transaction()
    ... the block: rows added to the session, records sent ...
    token = producer.prepare_transaction()           # records durable, outcome undecided
    INSERT the token's outbox row; session.commit()  # the database decides
    producer.complete_transaction(token, commit=True)

A crash anywhere leaves a state :func:`recover` (the restarted application) or the check-back
(:mod:`oncelog.outbox.check_service`) finishes the same way: the token's outbox row is claimed
(:func:`~oncelog.outbox.table.claim`) and the transaction committed exactly when the database committed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from oncelog.client.futures import RecordFuture
from oncelog.client.producer import Producer
from oncelog.client.records import PreparedTransaction
from oncelog.errors import OncelogError

from .table import claim, record_commit

log = logging.getLogger("oncelog.outbox")

Send = Callable[..., RecordFuture]
"""``send(topic, value, key=None, ...)``: :meth:`Producer.send` inside the atomic block."""


@contextmanager
def atomic_send(
    session: Session,
    producer: Producer,
    *,
    check_back_address: str = "",
    wait_for_completion: bool = False,
) -> Iterator[Send]:
    """Run the block's database writes and sends as one unit.

    Example::

        with atomic_send(session, producer) as send:
            session.add(Order(id=7, total=30))
            send("orders", b'{"id": 7}', key=b"7")

    Args:
        session: the application's session; the block's rows must go through it. It is committed here.
        producer: a transactional producer after :func:`recover` (or ``init_transactions``), with no open
            transaction.
        check_back_address: the application's TransactionCheckService (:func:`~oncelog.outbox.serve_check_back`),
            asked by the coordinator when this process dies before completing.
        wait_for_completion: return only once the records are readable (see ``commit_transaction``).

    Raises:
        Whatever the block (or the prepare) raises, after the database rolled back and the transaction aborted; if
        the abort itself fails (the prepare's outcome is unknown), the producer is left for a new instance's
        :func:`recover`, which aborts it as the database has no row for it. A failure of the
        database commit is resolved by claiming the token (:func:`~oncelog.outbox.table.claim`), so the records
        follow what the database really did, and then re-raised.
    """
    producer.begin_transaction()
    try:
        yield producer.send
        token = producer.prepare_transaction(check_back_address=check_back_address)
        record_commit(session.connection(), token)
    except BaseException:
        session.rollback()
        try:
            if producer.prepared_transaction is not None:
                producer.complete_transaction(producer.prepared_transaction, commit=False)
            else:
                producer.abort_transaction()
        except OncelogError as cleanup:
            # e.g. a prepare whose outcome is unknown: its token has no row, so recover() or the check-back
            # aborts it; this producer cannot go on, the application starts a new one (and calls recover())
            log.warning("could not end the transaction after a failure in atomic_send: %s", cleanup)
        raise
    try:
        session.commit()
    except BaseException:
        # the commit may or may not have happened: ask the database, and follow it
        session.rollback()
        engine = session.get_bind()
        assert isinstance(engine, Engine)
        committed = claim(engine, token)
        log.warning("database commit of %s failed; the database says %s", token.to_text(), committed)
        producer.complete_transaction(token, commit=committed, wait_for_completion=wait_for_completion)
        raise
    producer.complete_transaction(token, commit=True, wait_for_completion=wait_for_completion)


def recover(producer: Producer, engine: Engine, timeout: float | None = None) -> bool | None:
    """Initialise ``producer`` keeping a prepared transaction, and finish it as the database says.

    Call it once at start-up instead of ``init_transactions()``.

    Returns:
        None when no prepared transaction was pending, else whether it was committed.
    """
    token = producer.init_transactions(timeout, keep_prepared=True)
    if token is None:
        return None
    committed = claim(engine, token)
    log.info("finishing prepared transaction %s left by an earlier instance: commit=%s", token.to_text(), committed)
    producer.complete_transaction(token, commit=committed, timeout=timeout)
    return committed


def outcome_of(engine: Engine, token: PreparedTransaction) -> bool:
    """Whether the database committed ``token`` (fixing it as rolled back if nothing did); see
    :func:`~oncelog.outbox.table.claim`."""
    return claim(engine, token)


__all__ = ["Send", "atomic_send", "outcome_of", "recover"]
