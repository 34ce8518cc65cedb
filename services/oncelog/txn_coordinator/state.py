"""Transaction states of one transactional id and the table of legal transitions (design/kafka-semantics.md §2.2).

Legal transitions (target <- legal previous states), Kafka's ``TransactionState`` including the
transaction-version-2 additions, because this coordinator bumps the epoch on every EndTxn (KIP-890):

* ``EMPTY``               <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT   (InitProducerId: bump or rotate)
* ``ONGOING``             <- ONGOING, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT   (AddPartitions/AddOffsets)
* ``PREPARED``            <- ONGOING, PREPARED   (PrepareTransaction; InitProducerId keeping it bumps the owner's epoch)
* ``PREPARE_COMMIT``      <- ONGOING, PREPARED   (EndTxn(commit) or CompleteTransaction; durable decision from here)
* ``PREPARE_ABORT``       <- ONGOING, PREPARED, PREPARE_EPOCH_FENCE, EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT
  (EndTxn(abort), CompleteTransaction, fencing by InitProducerId or timeout; the last three are "abort when unsure")
* ``COMPLETE_COMMIT``     <- PREPARE_COMMIT   (every commit marker acknowledged)
* ``COMPLETE_ABORT``      <- PREPARE_ABORT    (every abort marker acknowledged)
* ``DEAD``                <- EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT   (expiration; stored as a tombstone)
* ``PREPARE_EPOCH_FENCE`` <- ONGOING, PREPARED   (transient: the epoch bump that precedes a coordinator-initiated
  abort; a PREPARED transaction is fenced only by InitProducerId without keep_prepared)

``PREPARED`` is not Kafka's: it is the participant state of an external two-phase commit (KIP-939,
design/kafka-semantics.md §5.7). The transaction timeout does not apply to it; ``max_prepared_ms`` and the
check-back do.

``DEAD`` and ``PREPARE_EPOCH_FENCE`` are never stored as a row's state: the first becomes a deletion,
the second is only the intermediate step of a fence-and-abort transition whose stored state is
``PREPARE_ABORT``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class TransactionState(enum.Enum):
    """State of a transactional id; values are Kafka's state ids as written in its transaction log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7
    PREPARED = 8

    @property
    def is_prepare(self) -> bool:
        """The commit or abort decision is durable and markers are being written."""
        return self in _PREPARE

    @property
    def is_complete(self) -> bool:
        """Every marker of the last transaction was acknowledged."""
        return self in _COMPLETE

    @property
    def is_expirable(self) -> bool:
        """The id may be removed by transactional-id expiration (no transaction is open,
        design/kafka-semantics.md §2.8)."""
        return self in _EXPIRABLE

    @property
    def has_open_transaction(self) -> bool:
        """A transaction exists whose outcome has not reached every participant yet."""
        return self in _OPEN

    @property
    def is_transient(self) -> bool:
        """The state is never stored as a row's value (design/kafka-semantics.md §2.2)."""
        return self in _TRANSIENT

    def can_follow(self, previous: TransactionState) -> bool:
        """Whether ``previous -> self`` is a legal transition according to :data:`VALID_PREVIOUS_STATES`."""
        return previous in VALID_PREVIOUS_STATES[self]


class TransactionResult(enum.Enum):
    """Outcome carried by EndTxn and by the markers written to every participant."""

    COMMIT = "COMMIT"
    ABORT = "ABORT"

    @property
    def prepare_state(self) -> TransactionState:
        """The state that records this decision durably before markers are sent."""
        return TransactionState.PREPARE_COMMIT if self is TransactionResult.COMMIT else TransactionState.PREPARE_ABORT

    @property
    def complete_state(self) -> TransactionState:
        """The state written once every participant acknowledged its marker."""
        return TransactionState.COMPLETE_COMMIT if self is TransactionResult.COMMIT else TransactionState.COMPLETE_ABORT


_S = TransactionState
_PREPARE = frozenset({_S.PREPARE_COMMIT, _S.PREPARE_ABORT})
_COMPLETE = frozenset({_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_EXPIRABLE = frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT})
_TRANSIENT = frozenset({_S.DEAD, _S.PREPARE_EPOCH_FENCE})
_OPEN = frozenset({_S.ONGOING, _S.PREPARED}) | _PREPARE

VALID_PREVIOUS_STATES: Mapping[TransactionState, frozenset[TransactionState]] = MappingProxyType(
    {
        _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        _S.PREPARED: frozenset({_S.ONGOING, _S.PREPARED}),
        _S.PREPARE_COMMIT: frozenset({_S.ONGOING, _S.PREPARED}),
        _S.PREPARE_ABORT: frozenset(
            {_S.ONGOING, _S.PREPARED, _S.PREPARE_EPOCH_FENCE, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}
        ),
        _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
        _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
        _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
        _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING, _S.PREPARED}),
    }
)
"""Target state -> the states it may be entered from (design/kafka-semantics.md §2.2, with the TV2 column)."""

__all__ = ["VALID_PREVIOUS_STATES", "TransactionResult", "TransactionState"]
