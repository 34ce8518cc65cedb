"""Rows of the transaction table as the store tests write and read them: ids ``<shard>-<name>``, a row per call."""

from __future__ import annotations

from oncelog.txn_coordinator.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TxnTransition
from oncelog.txn_coordinator.state import TransactionState


def shard_of(transactional_id: str) -> int:
    """Test ids are ``<shard>-<name>``."""
    return int(transactional_id.split("-", 1)[0])


def row(
    state: TransactionState = TransactionState.EMPTY, producer_id: int = 7, epoch: int = 0, **fields: object
) -> TxnTransition:
    """A stored row of ``producer_id`` at ``epoch`` in ``state``; ``fields`` override the rest."""
    values: dict[str, object] = {
        "state": state,
        "producer_id": producer_id,
        "previous_producer_id": producer_id,
        "next_producer_id": NO_PRODUCER_ID,
        "producer_epoch": epoch,
        "last_producer_epoch": NO_PRODUCER_EPOCH,
        "txn_timeout_ms": 60_000,
        "txn_last_update_timestamp": 1_000,
    }
    values.update(fields)
    return TxnTransition(**values)  # type: ignore[arg-type]
