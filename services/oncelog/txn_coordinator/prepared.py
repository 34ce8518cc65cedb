"""Prepared transactions: the coordinator as one participant of an external two-phase commit
(KIP-939, design/kafka-semantics.md §5.7).

PrepareTransaction moves an Ongoing transaction to PREPARED: its records are written, its outcome is not decided,
and it is named by a token, the (producer id, epoch) its records carry. From there:

* the transaction timeout no longer applies; ``max_prepared_ms`` and the check-back do (:mod:`.check_back`);
* InitProducerId with ``keep_prepared`` hands the id to a new instance with a bumped epoch and leaves the
  transaction PREPARED under the same token (the new owner learns the token from the answer); without it the
  transaction is fenced and aborted like an Ongoing one;
* CompleteTransaction commits or aborts it: the caller must own the id (its current epoch) *and* name the token,
  so neither a zombie that lost the id nor an owner holding a stale token can finish it;
* the coordinator itself decides it when the check-back answers or the attempts run out (:meth:`resolve_prepared`).

Every decision is EndTxn's (Prepare* with the epoch bumped, markers, Complete*), so retries, markers, completion
waits and failover work as for any transaction; only the checks differ.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from oncelog.errors import ConcurrentTransactions, InvalidRequest, InvalidTxnState, ProducerFenced
from oncelog.telemetry.metrics import OncelogMetrics
from oncelog.vocabulary import ProducerIdAndEpoch

from .metadata import NO_PRODUCER_ID, PreparedInfo, TransactionMetadata, TxnTransition
from .ports import Clock, ProducerIdSource
from .state import TransactionResult, TransactionState
from .state_manager import TransactionStateManager, TxnMetadataCacheEntry
from .validation import foreign_producer_id

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PreparedToken:
    """Names one prepared transaction: the transactional id and the identity its records were written with."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


@dataclass(frozen=True, slots=True)
class PreparedListing:
    """A PREPARED transaction as the check-back sweep sees it."""

    token: PreparedToken
    info: PreparedInfo


def prepare_keep_prepared(
    md: TransactionMetadata, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int
) -> TxnTransition:
    """InitProducerId with ``keep_prepared`` on a PREPARED id: the caller becomes the owner (epoch bump), the
    transaction stays prepared under its token.

    Raises:
        InvalidTxnState: the epoch cannot be bumped on this producer id any more; the prepared records carry it, so
            the id cannot move to a new producer id before the transaction completes.
        ProducerFenced: ``expected_epoch`` belongs to a replaced instance (KIP-360).
    """
    if md.is_epoch_exhausted:
        raise InvalidTxnState(
            f"transactional id {md.transactional_id!r}: epoch {md.producer_epoch} is the last one of producer id "
            f"{md.producer_id}; complete the prepared transaction with this instance, or abort it (admin)"
        )
    return md.prepare_increment_epoch(txn_timeout_ms, expected_epoch, now_ms)


class _Coordinator(Protocol):
    """What the mixin needs of :class:`~.coordinator.TransactionCoordinator`."""

    _state: TransactionStateManager
    _clock: Clock
    _metrics: OncelogMetrics
    _producer_ids: ProducerIdSource

    async def _persist(
        self,
        entry: TxnMetadataCacheEntry,
        md: TransactionMetadata,
        transition: TxnTransition,
        *,
        follow: TxnTransition | None = None,
    ) -> None: ...

    def _send_markers(self, entry: TxnMetadataCacheEntry, md: TransactionMetadata) -> None: ...


class PreparedTransactionsMixin:
    """PrepareTransaction, the token after InitProducerId, and the coordinator's own decision of a prepared
    transaction; CompleteTransaction is EndTxn with the token (``end_txn_and_wait(..., token=...)``)."""

    async def prepare_transaction(
        self: _Coordinator, transactional_id: str, producer_id: int, producer_epoch: int, check_back_address: str = ""
    ) -> PreparedToken:
        """PrepareTransaction: make the Ongoing transaction PREPARED and return its token.

        A retry (the transaction is already PREPARED under the caller's identity) returns the same token.

        Raises:
            InvalidRequest: empty transactional id.
            InvalidProducerIdMapping: unknown id or another producer id.
            ProducerFenced: not the owner's current epoch.
            InvalidTxnState: no open transaction (nothing was sent), or it is already being decided.
            ConcurrentTransactions: a transition is in flight.
        """
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        entry = self._state.entry_for(transactional_id)
        async with self._state.lock(transactional_id):
            self._state.check_still_owned(entry)
            md = self._state.known(entry, transactional_id)
            if md.producer_id != producer_id:
                raise foreign_producer_id(md, producer_id, producer_epoch)
            if md.producer_epoch != producer_epoch:
                raise ProducerFenced(
                    f"transactional id {transactional_id!r}: epoch {producer_epoch} is not the current epoch "
                    f"{md.producer_epoch}"
                )
            if md.pending_state is not None:
                raise ConcurrentTransactions(f"transactional id {transactional_id!r} has a transition in flight")
            prepared = md.prepared
            if md.state is TransactionState.PREPARED and prepared is not None and prepared.epoch == producer_epoch:
                return PreparedToken(transactional_id, producer_id, prepared.epoch)
            if md.state is not TransactionState.ONGOING:
                raise InvalidTxnState(
                    f"transactional id {transactional_id!r} has no open transaction to prepare (state "
                    f"{md.state.name}): send a record or offsets in the transaction first"
                )
            transition = md.prepare_prepared(self._clock(), check_back_address)
        await self._persist(entry, md, transition)
        log.info("prepared transaction of %r, producer id %d epoch %d", transactional_id, producer_id, producer_epoch)
        return PreparedToken(transactional_id, producer_id, producer_epoch)

    def prepared_token(self: _Coordinator, transactional_id: str, owner: ProducerIdAndEpoch) -> PreparedToken | None:
        """The token of the id's PREPARED transaction if ``owner`` (just returned by InitProducerId) owns it."""
        md = self._state.entry_for(transactional_id).txns.get(transactional_id)
        if md is None or md.state is not TransactionState.PREPARED or md.prepared is None:
            return None
        if (md.producer_id, md.producer_epoch) != tuple(owner):
            return None
        return PreparedToken(transactional_id, md.producer_id, md.prepared.epoch)

    def prepared_transactions(self: _Coordinator) -> list[PreparedListing]:
        """Every PREPARED transaction of the loaded shards with no write in flight (in no particular order)."""
        return [
            PreparedListing(PreparedToken(md.transactional_id, md.producer_id, md.prepared.epoch), md.prepared)
            for entry in self._state.loaded()
            for md in entry.txns.values()
            if md.state is TransactionState.PREPARED and md.prepared is not None and md.pending_state is None
        ]

    async def resolve_prepared(self: _Coordinator, token: PreparedToken, commit: bool, why: str) -> bool:
        """The coordinator decides a PREPARED transaction itself (check-back answer, attempts exhausted,
        ``max_prepared_ms``): Prepare* exactly as the owner's CompleteTransaction would write it.

        Returns:
            Whether the decision was made durable here; False when the transaction moved on meanwhile (the owner
            completed it, or another token is prepared now).
        """
        tid = token.transactional_id
        entry = self._state.entry_for(tid)
        async with self._state.lock(tid):
            self._state.check_still_owned(entry)
            md = entry.txns.get(tid)
            if (
                md is None
                or md.state is not TransactionState.PREPARED
                or md.prepared is None
                or md.pending_state is not None
                or (md.producer_id, md.prepared.epoch) != (token.producer_id, token.producer_epoch)
            ):
                return False
            next_producer_id = await self._producer_ids.next_id() if md.is_epoch_exhausted else NO_PRODUCER_ID
            self._state.check_still_owned(entry)
            result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
            transition = md.prepare_end_transaction(result, self._clock(), next_producer_id=next_producer_id)
        await self._persist(entry, md, transition)
        self._send_markers(entry, md)
        log.warning(
            "%s prepared transaction of %r (producer id %d epoch %d): %s",
            "committed" if commit else "aborted",
            tid,
            token.producer_id,
            token.producer_epoch,
            why,
        )
        return True


__all__ = ["PreparedListing", "PreparedToken", "PreparedTransactionsMixin", "prepare_keep_prepared"]
