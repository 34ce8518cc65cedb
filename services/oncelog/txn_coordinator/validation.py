"""The coordinator's checks of a request against an id's cached metadata, as pure functions.

Which caller may re-initialise a transactional id (KIP-360, Kafka ``isValidProducerId``), what an EndTxn is
(current, a retry of a decision already durable, or fenced: Kafka's transaction-version-2 ``endTransaction``
checks), which identity a client gets after a decision, and which transactions the sweepers may touch. The
coordinator calls them under the id's lock; they read the metadata and never change it.
"""

from __future__ import annotations

from oncelog.errors import (
    ConcurrentTransactions,
    InvalidProducerIdMapping,
    InvalidTxnState,
    OncelogError,
    ProducerFenced,
)
from oncelog.vocabulary import ProducerIdAndEpoch

from .metadata import (
    LAST_USABLE_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TransactionMetadata,
    is_epoch_exhausted,
)
from .state import TransactionResult, TransactionState


def end_txn_reply(
    md: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    *,
    token: tuple[int, int] | None = None,
) -> ProducerIdAndEpoch | None:
    """Kafka's TV2 ``endTransaction`` validation: the reply to a retry, or None to prepare a decision.

    ``token`` is the (producer id, epoch) of a prepared transaction a CompleteTransaction names; only such a
    call may end a PREPARED transaction, and it may end nothing else (design/kafka-semantics.md §5.7).

    Raises:
        InvalidProducerIdMapping: another producer id.
        ConcurrentTransactions: a transition is in flight, or the previous transaction is completing.
        ProducerFenced: an epoch that is neither current nor a retry of the last EndTxn.
        InvalidTxnState: the request contradicts the state.
    """
    state = md.state
    # A retry names the epoch the decision was taken with: the stored epoch is one higher and the
    # stored last epoch is exactly the one named (a fence stores -1 there, so a fenced producer never qualifies).
    retry_on_bump = (
        md.producer_id == producer_id
        and md.producer_epoch == producer_epoch + 1
        and md.last_producer_epoch == producer_epoch
    )
    # The decision exhausted the epochs and Complete* already moved to the next producer id.
    retry_on_overflow = (
        state.is_complete
        and md.previous_producer_id == producer_id
        and producer_epoch == LAST_USABLE_EPOCH
        and md.last_producer_epoch == LAST_USABLE_EPOCH
        and md.producer_epoch == 0
    )
    if md.producer_id != producer_id and not retry_on_overflow:
        raise foreign_producer_id(md, producer_id, producer_epoch)
    current = (
        md.producer_id == producer_id
        and producer_epoch == md.producer_epoch
        and producer_epoch <= LAST_USABLE_EPOCH  # the reserved epoch was never handed to a client
    )
    is_retry = retry_on_bump or retry_on_overflow
    if not (current or is_retry) or (is_retry and not (state.is_prepare or state.is_complete)):
        raise ProducerFenced(
            f"transactional id {md.transactional_id!r}: epoch {producer_epoch} is not current "
            f"({md.producer_epoch}) in state {state.name}"
        )
    if md.pending_state is not None:
        raise ConcurrentTransactions(f"transactional id {md.transactional_id!r} has a transition in flight")
    if token is not None:
        check_prepared_token(md, token, is_retry)
    elif state is TransactionState.PREPARED:
        raise InvalidTxnState(
            f"transactional id {md.transactional_id!r} is prepared (two-phase commit): finish it with "
            "complete_transaction(token), not commit/abort_transaction()"
        )

    if state in (TransactionState.ONGOING, TransactionState.PREPARED):
        return None
    if state.is_prepare:
        if not is_retry:
            # The owner already uses the epoch returned by the previous EndTxn; that one is still completing.
            raise ConcurrentTransactions(previous_completing(md))
        if state is result.prepare_state:
            return client_identity(md)
        raise _contradicts(md, result)
    if state.is_complete:
        if is_retry:
            if state is result.complete_state:
                return ProducerIdAndEpoch(md.producer_id, md.producer_epoch)
            raise _contradicts(md, result)
        if result is TransactionResult.ABORT:
            return None  # abort when unsure: bumps the epoch, no participants
        raise _contradicts(md, result)
    if state is TransactionState.EMPTY:
        if result is TransactionResult.ABORT:
            return None
        raise _contradicts(md, result)
    raise IllegalTransitionError(f"transactional id {md.transactional_id!r} is cached in state {state.name}")


def check_prepared_token(md: TransactionMetadata, token: tuple[int, int], is_retry: bool) -> None:
    """Whether a CompleteTransaction's token names the id's prepared transaction (or one it already decided).

    Raises:
        InvalidTxnState: the token names another transaction than the one prepared, or none is prepared.
    """
    prepared = md.prepared
    if prepared is not None and token == (md.producer_id, prepared.epoch):
        return
    tid = md.transactional_id
    if prepared is not None:
        raise InvalidTxnState(
            f"transactional id {tid!r}: the token (producer id {token[0]}, epoch {token[1]}) does not name its "
            f"prepared transaction, which is (producer id {md.producer_id}, epoch {prepared.epoch})"
        )
    if is_retry:
        return  # a retried CompleteTransaction whose decision is already complete
    raise InvalidTxnState(
        f"transactional id {tid!r} has no prepared transaction (state {md.state.name}): the token (producer id "
        f"{token[0]}, epoch {token[1]}) was completed already, or prepare_transaction() was never called"
    )


def holds_next_identity(md: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """Whether the caller already holds the identity the running completion will switch to (epochs ran out)."""
    return md.state.is_prepare and producer_id == md.next_producer_id and producer_epoch == 0


def foreign_producer_id(md: TransactionMetadata, producer_id: int, producer_epoch: int) -> OncelogError:
    """The error for a request naming a producer id the transactional id is not mapped to."""
    if holds_next_identity(md, producer_id, producer_epoch):
        return ConcurrentTransactions(previous_completing(md))
    return InvalidProducerIdMapping(
        f"transactional id {md.transactional_id!r} is mapped to producer id {md.producer_id}, not {producer_id}"
    )


def previous_completing(md: TransactionMetadata) -> str:
    """The message of CONCURRENT_TRANSACTIONS while the id's previous transaction completes."""
    return f"transactional id {md.transactional_id!r}: the previous transaction is completing"


def may_claim(md: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """KIP-360: whether a caller naming this identity may re-initialise the id (Kafka ``isValidProducerId``)."""
    return (
        md.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == md.producer_id
        or (producer_id == md.previous_producer_id and is_epoch_exhausted(producer_epoch))
        or (md.state.is_prepare and producer_id == md.next_producer_id)
    )


def client_identity(md: TransactionMetadata) -> ProducerIdAndEpoch:
    """Identity to hand out after a decision: the next producer id with epoch 0 when the epochs ran out."""
    if md.state.is_prepare and md.next_producer_id != NO_PRODUCER_ID:
        return ProducerIdAndEpoch(md.next_producer_id, 0)
    return ProducerIdAndEpoch(md.producer_id, md.producer_epoch)


def is_timed_out(md: TransactionMetadata, now_ms: int) -> bool:
    """Whether the timeout sweep aborts ``md``: Ongoing for longer than its timeout, no write in flight."""
    return (
        md.state is TransactionState.ONGOING
        and md.pending_state is None
        and md.txn_start_timestamp + md.txn_timeout_ms < now_ms
    )


def is_expirable(md: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    """Whether the expiry sweep removes ``md``: durable, no open transaction, idle for ``expiration_ms``."""
    return (
        md.state.is_expirable
        and md.pending_state is None
        and md.is_persisted
        and md.txn_last_update_timestamp <= now_ms - expiration_ms
    )


def _contradicts(md: TransactionMetadata, result: TransactionResult) -> OncelogError:
    return InvalidTxnState(
        f"transactional id {md.transactional_id!r}: cannot {result.value.lower()} in state {md.state.name}"
    )


__all__ = [
    "check_prepared_token",
    "client_identity",
    "end_txn_reply",
    "foreign_producer_id",
    "holds_next_identity",
    "is_expirable",
    "is_timed_out",
    "may_claim",
    "previous_completing",
]
