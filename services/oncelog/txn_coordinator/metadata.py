"""Per-transactional-id metadata and its transitions (Kafka's ``TransactionMetadata``,
design/kafka-semantics.md §2.1-2.2).

Every change follows prepare -> persist -> complete:

1. a ``prepare_*`` method validates the change against :data:`~.state.VALID_PREVIOUS_STATES`, marks
   ``pending_state`` and returns an immutable :class:`TxnTransition` holding the complete target row;
2. the caller persists that row;
3. :meth:`TransactionMetadata.complete_transition` re-checks Kafka's invariants and applies the row, or
   :meth:`TransactionMetadata.abort_pending` forgets it if the write failed.

Nothing but ``pending_state`` changes before the write succeeds, so a failed write leaves the metadata
exactly as it was. Kafka instead mutates the epoch in memory while fencing and then needs its
``hasFailedEpochFence`` flag to avoid bumping twice; that flag has no counterpart here.

Loading replays stored rows through :meth:`TransactionMetadata.replay`, the same apply function
``complete_transition`` ends with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from oncelog.errors import ProducerFenced
from oncelog.vocabulary import TopicPartition

from .state import VALID_PREVIOUS_STATES, TransactionResult, TransactionState

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
MAX_PRODUCER_EPOCH = 32767
"""Kafka's ``Short.MaxValue``: never handed to a client, kept so the coordinator can always fence."""
LAST_USABLE_EPOCH = MAX_PRODUCER_EPOCH - 1
"""The highest epoch a client may hold; reaching it means the next bump moves to a new producer id."""
NO_TIMESTAMP = -1


def is_epoch_exhausted(epoch: int) -> bool:
    """Whether no further epoch may be handed out for this producer id (Kafka ``isEpochExhausted``)."""
    return epoch >= LAST_USABLE_EPOCH


class IllegalTransitionError(RuntimeError):
    """A transition broke the state table or an invariant: a coordinator bug, never a client error.

    Kafka raises ``IllegalStateException`` in the same places; the rpc layer reports it as an internal error.
    """


@dataclass(frozen=True, slots=True)
class PreparedInfo:
    """What a PREPARED transaction keeps besides the row (design/kafka-semantics.md §5.7).

    ``epoch`` is the epoch the transaction's records were written with: with the producer id it is the token that
    names the transaction, and it stays the same when a new instance takes the prepared transaction over (the
    owner's epoch is bumped then, the token's is not).
    """

    epoch: int
    prepared_at: int
    """When PrepareTransaction was made durable (Unix ms); the check-back and ``max_prepared_ms`` count from it."""
    check_back_address: str = ""
    """The application's TransactionCheckService, "" when none was registered."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TxnTransition:
    """The complete target row of one transition; this is exactly what the store persists.

    ``previous_producer_id``, ``next_producer_id`` and ``last_producer_epoch`` are persisted too, so a
    retried InitProducerId or EndTxn is still recognised after a coordinator failover (KAFKA-20357).
    """

    state: TransactionState
    producer_id: int
    previous_producer_id: int
    """Producer id before this transition; differs from ``producer_id`` right after a rotation."""
    next_producer_id: int
    """Producer id to switch to at Complete* when this transaction exhausted the epochs, else -1."""
    producer_epoch: int
    last_producer_epoch: int
    """Epoch the current owner held before its last bump; -1 when a new instance took over."""
    txn_timeout_ms: int
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()
    """Consumer groups whose offsets belong to the transaction (AddOffsetsToTxn)."""
    txn_start_timestamp: int = NO_TIMESTAMP
    txn_last_update_timestamp: int = NO_TIMESTAMP
    prepared: PreparedInfo | None = None
    """Set from PrepareTransaction until the transaction completes."""


@dataclass(slots=True, kw_only=True)
class TransactionMetadata:
    """Cached state of one transactional id (design/kafka-semantics.md §2.1).

    Mutate it only through ``prepare_*`` followed by :meth:`complete_transition` or :meth:`abort_pending`.
    ``pending_state`` is in memory only: while it is set, a write is in flight and every other request
    for the id must be answered with CONCURRENT_TRANSACTIONS.
    """

    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int
    state: TransactionState = TransactionState.EMPTY
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    txn_start_timestamp: int = NO_TIMESTAMP
    txn_last_update_timestamp: int = NO_TIMESTAMP
    prepared: PreparedInfo | None = None
    pending_state: TransactionState | None = None

    @classmethod
    def new(cls, transactional_id: str, producer_id: int, txn_timeout_ms: int, now_ms: int) -> TransactionMetadata:
        """Metadata for an id seen for the first time: ``Empty`` with epoch -1, not yet persisted."""
        return cls(
            transactional_id=transactional_id,
            producer_id=producer_id,
            txn_timeout_ms=txn_timeout_ms,
            txn_last_update_timestamp=now_ms,
        )

    @classmethod
    def from_transition(cls, transactional_id: str, transition: TxnTransition) -> TransactionMetadata:
        """Rebuild metadata from a stored row (loading a shard)."""
        metadata = cls(transactional_id=transactional_id, producer_id=transition.producer_id, txn_timeout_ms=0)
        metadata.replay(transition)
        return metadata

    # ------------------------------------------------------------------ queries

    @property
    def is_epoch_exhausted(self) -> bool:
        """The current epoch cannot be bumped on this producer id any more."""
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def is_persisted(self) -> bool:
        """Whether a row exists for this id (a fresh id has epoch -1 until its first write)."""
        return self.producer_epoch != NO_PRODUCER_EPOCH

    def snapshot(self) -> TxnTransition:
        """The current values as a row, without preparing anything (Kafka ``prepareNoTransit``)."""
        return TxnTransition(
            state=self.state,
            producer_id=self.producer_id,
            previous_producer_id=self.previous_producer_id,
            next_producer_id=self.next_producer_id,
            producer_epoch=self.producer_epoch,
            last_producer_epoch=self.last_producer_epoch,
            txn_timeout_ms=self.txn_timeout_ms,
            partitions=frozenset(self.partitions),
            groups=frozenset(self.groups),
            txn_start_timestamp=self.txn_start_timestamp,
            txn_last_update_timestamp=self.txn_last_update_timestamp,
            prepared=self.prepared,
        )

    # ------------------------------------------------------------------ prepare

    def prepare_increment_epoch(self, txn_timeout_ms: int, expected_epoch: int | None, now_ms: int) -> TxnTransition:
        """InitProducerId on the same producer id: bump the epoch, or repeat a bump a retry asks for again.

        ``expected_epoch`` is the caller's epoch under KIP-360 (None for a new producer instance):

        * None: epoch + 1 and last epoch -1, so no earlier instance can later pass as a retry;
        * equal to the current epoch (or no epoch yet): the owner recovers, epoch + 1, last epoch = current;
        * equal to the last epoch: a retry of a bump that already succeeded, the current epoch is kept;
        * anything else: :class:`ProducerFenced`.

        Raises:
            ProducerFenced: the caller's epoch belongs to an instance that was replaced.
            IllegalTransitionError: the epoch must be bumped but is exhausted (the caller must rotate).
        """
        if expected_epoch is None:
            epoch, last_epoch = self.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif self.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == self.producer_epoch:
            epoch, last_epoch = self.producer_epoch + 1, self.producer_epoch
        elif expected_epoch == self.last_producer_epoch:
            epoch, last_epoch = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFenced(
                f"transactional id {self.transactional_id!r}: epoch {expected_epoch} was replaced "
                f"(current {self.producer_epoch}, previous {self.last_producer_epoch})"
            )
        if epoch != self.producer_epoch and self.is_epoch_exhausted:
            raise IllegalTransitionError(f"{self.transactional_id!r}: epoch {self.producer_epoch} cannot be bumped")
        if self.state is TransactionState.PREPARED:
            # keep_prepared: the new owner gets the epoch, the prepared transaction (and its token) stays
            return self._prepare(
                TransactionState.PREPARED,
                producer_epoch=epoch,
                last_producer_epoch=last_epoch,
                txn_timeout_ms=txn_timeout_ms,
                txn_last_update_timestamp=now_ms,
            )
        return self._prepare(
            TransactionState.EMPTY,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            groups=frozenset(),
            txn_start_timestamp=NO_TIMESTAMP,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_producer_id_rotation(
        self, new_producer_id: int, txn_timeout_ms: int, now_ms: int, *, record_last_epoch: bool
    ) -> TxnTransition:
        """InitProducerId once the epochs are exhausted: move to ``new_producer_id`` with epoch 0.

        ``record_last_epoch`` keeps the exhausted epoch as the last epoch when the caller named it, so that
        a retry of this call (old producer id, exhausted epoch) is answered with the same new identity.
        """
        return self._prepare(
            TransactionState.EMPTY,
            producer_id=new_producer_id,
            producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            partitions=frozenset(),
            groups=frozenset(),
            txn_start_timestamp=NO_TIMESTAMP,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_add_participants(
        self, partitions: Iterable[TopicPartition], groups: Iterable[str], now_ms: int
    ) -> TxnTransition:
        """AddPartitionsToTxn / AddOffsetsToTxn: ``Ongoing`` with the union of participants.

        The transaction's start time is set by the first addition, which is what the timeout counts from.
        """
        starts_transaction = self.state is not TransactionState.ONGOING
        return self._prepare(
            TransactionState.ONGOING,
            partitions=frozenset(self.partitions).union(partitions),
            groups=frozenset(self.groups).union(groups),
            txn_start_timestamp=now_ms if starts_transaction else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_prepared(self, now_ms: int, check_back_address: str) -> TxnTransition:
        """PrepareTransaction: ``Ongoing`` -> ``Prepared`` with the same identity and participants (KIP-939).

        The token is the current producer id and epoch; nothing else changes, so the records already written
        belong to it, and the transaction timeout stops applying (design/kafka-semantics.md §5.7).
        """
        return self._prepare(
            TransactionState.PREPARED,
            txn_last_update_timestamp=now_ms,
            prepared=PreparedInfo(self.producer_epoch, now_ms, check_back_address),
        )

    def prepare_end_transaction(
        self, result: TransactionResult, now_ms: int, *, next_producer_id: int = NO_PRODUCER_ID
    ) -> TxnTransition:
        """EndTxn: Prepare{Commit,Abort} with the epoch bumped (KIP-890, design/kafka-semantics.md §5.6).

        Markers then carry an epoch strictly above every epoch the transaction's data was written with,
        so late data of this transaction and stale markers are rejected by storage. When the current
        epoch is exhausted, ``next_producer_id`` must be given: the Complete* row switches to it with
        epoch 0. An abort from ``Empty``/``Complete*`` (abort when unsure) has no participants and starts now.
        """
        if self.producer_epoch >= MAX_PRODUCER_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id!r}: epoch {self.producer_epoch} cannot be bumped")
        if self.is_epoch_exhausted != (next_producer_id != NO_PRODUCER_ID):
            raise IllegalTransitionError(
                f"{self.transactional_id!r}: next producer id {next_producer_id} given at epoch {self.producer_epoch}"
            )
        starts_transaction = self.state not in (TransactionState.ONGOING, TransactionState.PREPARED)
        return self._prepare(
            result.prepare_state,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=self.producer_epoch,
            next_producer_id=next_producer_id,
            txn_start_timestamp=now_ms if starts_transaction else self.txn_start_timestamp,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_fence_and_abort(self, now_ms: int) -> TxnTransition:
        """Coordinator-initiated abort of an ``Ongoing`` transaction (new instance, timeout, admin).

        Kafka's two steps, PrepareEpochFence then PrepareAbort, are validated as a path through the
        table but prepared as one row: ``PrepareAbort`` with the epoch bumped once and last epoch -1, so the
        fenced producer can neither commit nor pass as a retry. The bumped epoch is not revealed to
        anyone; the new owner gets a further bump when its InitProducerId is retried.
        """
        self._check_legal(self.state, TransactionState.PREPARE_EPOCH_FENCE)
        # Ongoing never holds the reserved epoch; the guard only keeps a corrupt row from overflowing.
        epoch = min(self.producer_epoch + 1, MAX_PRODUCER_EPOCH)
        return self._prepare(
            TransactionState.PREPARE_ABORT,
            via=TransactionState.PREPARE_EPOCH_FENCE,
            producer_epoch=epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            next_producer_id=NO_PRODUCER_ID,
            txn_last_update_timestamp=now_ms,
        )

    def prepare_complete(self, now_ms: int) -> TxnTransition:
        """All markers acknowledged: Complete{Commit,Abort}, participants cleared, rotation applied."""
        target = (
            TransactionState.COMPLETE_COMMIT
            if self.state is TransactionState.PREPARE_COMMIT
            else TransactionState.COMPLETE_ABORT
        )
        rotate = self.next_producer_id != NO_PRODUCER_ID
        return self._prepare(
            target,
            producer_id=self.next_producer_id if rotate else self.producer_id,
            producer_epoch=0 if rotate else self.producer_epoch,
            next_producer_id=NO_PRODUCER_ID,
            partitions=frozenset(),
            groups=frozenset(),
            txn_last_update_timestamp=now_ms,
            prepared=None,
        )

    def prepare_dead(self) -> TxnTransition:
        """Transactional-id expiration: the store deletes the row instead of writing it
        (design/kafka-semantics.md §2.8)."""
        return self._prepare(TransactionState.DEAD, partitions=frozenset(), groups=frozenset())

    # ------------------------------------------------------------------ complete

    def complete_transition(self, transition: TxnTransition) -> None:
        """Apply a persisted transition after re-checking Kafka's ``completeTransitionTo`` invariants.

        Raises:
            IllegalTransitionError: the transition was not the pending one or breaks an invariant.
        """
        if self.pending_state is None or self.pending_state is not transition.state:
            raise IllegalTransitionError(
                f"{self.transactional_id!r}: completing {transition.state.name} while pending {self.pending_state}"
            )
        if not self._invariants_hold(transition):
            raise IllegalTransitionError(f"{self.transactional_id!r}: {self} cannot become {transition}")
        self.replay(transition)

    def abort_pending(self) -> None:
        """Forget the pending transition because its write failed; the cached state is left untouched."""
        self.pending_state = None

    def replay(self, transition: TxnTransition) -> None:
        """Overwrite every field with a row; the one apply function for completion and loading."""
        self.state = transition.state
        self.producer_id = transition.producer_id
        self.previous_producer_id = transition.previous_producer_id
        self.next_producer_id = transition.next_producer_id
        self.producer_epoch = transition.producer_epoch
        self.last_producer_epoch = transition.last_producer_epoch
        self.txn_timeout_ms = transition.txn_timeout_ms
        self.partitions = set(transition.partitions)
        self.groups = set(transition.groups)
        self.txn_start_timestamp = transition.txn_start_timestamp
        self.txn_last_update_timestamp = transition.txn_last_update_timestamp
        self.prepared = transition.prepared
        self.pending_state = None

    # ------------------------------------------------------------------ internals

    def _prepare(
        self, target: TransactionState, *, via: TransactionState | None = None, **changes: Any
    ) -> TxnTransition:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id!r}: preparing {target.name} while {self.pending_state.name} is pending"
            )
        self._check_legal(via or self.state, target)
        transition = dataclasses.replace(
            self.snapshot(), state=target, previous_producer_id=self.producer_id, **changes
        )
        if transition.producer_id < 0:
            raise IllegalTransitionError(f"{self.transactional_id!r}: illegal producer id {transition.producer_id}")
        if target is not TransactionState.DEAD and transition.producer_epoch < 0:
            raise IllegalTransitionError(f"{self.transactional_id!r}: illegal epoch {transition.producer_epoch}")
        self.pending_state = target
        return transition

    def _check_legal(self, previous: TransactionState, target: TransactionState) -> None:
        if previous not in VALID_PREVIOUS_STATES[target]:
            raise IllegalTransitionError(
                f"{self.transactional_id!r}: {previous.name} -> {target.name} is not a legal transition"
            )

    def _invariants_hold(self, t: TxnTransition) -> bool:
        same_identity = t.producer_id == self.producer_id and t.producer_epoch == self.producer_epoch
        same_timeout = t.txn_timeout_ms == self.txn_timeout_ms
        match t.state:
            case TransactionState.EMPTY:
                epoch_ok = (
                    same_identity
                    or (t.producer_id == self.producer_id and t.producer_epoch == self.producer_epoch + 1)
                    or (t.producer_id != self.producer_id and t.producer_epoch == 0)
                )
                return epoch_ok and not t.partitions and not t.groups and t.txn_start_timestamp == NO_TIMESTAMP
            case TransactionState.ONGOING:
                return same_identity and same_timeout and t.partitions >= self.partitions and t.groups >= self.groups
            case TransactionState.PREPARED:
                # prepared from Ongoing (same identity), or taken over by a new owner (the epoch bumped at most once)
                kept = self.state is TransactionState.PREPARED and t.prepared == self.prepared
                made = self.state is TransactionState.ONGOING and same_identity and same_timeout
                return (
                    t.prepared is not None
                    and t.producer_id == self.producer_id
                    and t.producer_epoch in (self.producer_epoch, self.producer_epoch + 1)
                    and t.partitions == self.partitions
                    and t.groups == self.groups
                    and (kept or (made and t.prepared.epoch == self.producer_epoch))
                )
            case TransactionState.PREPARE_COMMIT | TransactionState.PREPARE_ABORT:
                unsure_abort = t.state is TransactionState.PREPARE_ABORT and self.state is not TransactionState.ONGOING
                return (
                    t.producer_id == self.producer_id
                    and t.producer_epoch == min(self.producer_epoch + 1, MAX_PRODUCER_EPOCH)
                    and same_timeout
                    and t.partitions == self.partitions
                    and t.groups == self.groups
                    and (unsure_abort or t.txn_start_timestamp == self.txn_start_timestamp)
                )
            case TransactionState.COMPLETE_COMMIT | TransactionState.COMPLETE_ABORT:
                rotated = (
                    t.producer_id == self.next_producer_id
                    and t.producer_epoch == 0
                    and t.previous_producer_id == self.producer_id
                )
                return (
                    (same_identity or rotated)
                    and same_timeout
                    and t.txn_start_timestamp != NO_TIMESTAMP
                    and not t.partitions
                    and not t.groups
                )
            case TransactionState.DEAD:
                return True
            case _:
                # PrepareEpochFence is only ever a step inside prepare_fence_and_abort.
                return False


__all__ = [
    "LAST_USABLE_EPOCH",
    "MAX_PRODUCER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_TIMESTAMP",
    "IllegalTransitionError",
    "PreparedInfo",
    "TopicPartition",
    "TransactionMetadata",
    "TxnTransition",
    "is_epoch_exhausted",
]
