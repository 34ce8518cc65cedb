"""What the client does with each error, and the exception classes a user catches.

Servers answer with a domain error (:mod:`oncelog.errors`: a :class:`~oncelog.errors.Reason` plus
the ``retriable`` and ``definite`` flags). :func:`classify` turns one into a :class:`Disposition`
— retry (after refreshing metadata or the coordinator), abort the transaction, give up on the
producer, or fail just this request — following the Java client's ``Sender`` and
``TransactionManager`` handlers (design/kafka-semantics.md §2.11, §4.2, §5.1 to §5.3). The table lives in this one
function so the producer, the consumer and their tests agree on it.

The exception classes extend :class:`~oncelog.errors.OncelogError` and keep the server's reason,
flags and metadata, so ``except OncelogError`` catches everything the library raises:

* :class:`FatalError` — the producer can no longer be used; close it and create a new one.
  :class:`ProducerFencedError` (a newer instance owns the transactional id) and
  :class:`InvalidProducerEpochError` (a coordinator saw a stale epoch) are its kinds.
* :class:`AbortableError` — the current transaction cannot commit; call
  ``abort_transaction()`` and run the transaction again.
* :class:`RetriableError` — a retriable failure outlasted the client's retry budget; the
  operation may be called again. When ``definite`` is False the outcome is unknown (an
  indeterminate commit may have committed) and the call must be repeated, never replaced by
  an abort (design/architecture.md §1.7).

Any other domain error reaches the caller unchanged (for example ``MessageTooLarge`` on one
record of an idempotent producer, which keeps running).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal, get_args

from oncelog.client.services.retry import RETRY_TABLE, Retry, retry_of
from oncelog.errors import OncelogError, Reason

__all__ = [
    "AbortableError",
    "Action",
    "BufferExhaustedError",
    "Disposition",
    "FatalError",
    "IllegalStateError",
    "InvalidProducerEpochError",
    "ProducerFencedError",
    "Refresh",
    "RetriableError",
    "Source",
    "classify",
    "may_have_taken_effect",
]

Source = Literal["produce", "coordinator", "group", "fetch"]
"""Which kind of call returned the error.

* ``produce`` — a partition's answer to Produce.
* ``coordinator`` — a transaction coordinator RPC: InitProducerId, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn.
* ``group`` — a group offsets RPC: CommitOffsets, FetchOffsets, TxnOffsetCommit.
* ``fetch`` — a partition's answer to Fetch or ListOffsets.
"""

_SOURCES: frozenset[str] = frozenset(get_args(Source))


class Action(enum.Enum):
    """What the client does next with a failed call."""

    RETRY = "retry"
    """Send the same request again after a backoff, with the same producer id, epoch and
    sequence, within the client's retry budget (``delivery_timeout_ms`` for batches)."""
    ABORTABLE = "abortable"
    """The transaction cannot commit: fail the call with :class:`AbortableError`; the user aborts."""
    FATAL = "fatal"
    """The producer cannot continue: fail every pending call with :class:`FatalError`."""
    FAIL = "fail"
    """Fail only this call with the domain error; the client stays usable."""
    COMPLETE = "complete"
    """Treat as success without an offset (a duplicate older than the server's cache,
    design/kafka-semantics.md §4.2)."""
    RESET_POSITION = "reset_position"
    """The fetch position left the log: apply ``auto_offset_reset`` or raise the error."""


class Refresh(enum.Enum):
    """What to look up again before retrying."""

    NONE = "none"
    METADATA = "metadata"
    """Partition leaders moved or are unknown: refresh cluster metadata."""
    COORDINATOR = "coordinator"
    """The coordinator moved or is unreachable: find the coordinator again."""


class FatalError(OncelogError):
    """The producer cannot continue and must be closed; a new instance may start over.

    Args:
        message: what happened and what to do about it.
        cause: the server's error, whose reason, flags and metadata are kept.
    """

    reason = Reason.UNKNOWN_SERVER_ERROR
    cause: OncelogError | None = None

    def __init__(self, message: str, *, cause: OncelogError | None = None) -> None:
        _init_from_cause(self, message, cause)
        self.retriable = False


class ProducerFencedError(FatalError):
    """A newer producer instance owns the transactional id (design/kafka-semantics.md §2.3); this one is a zombie.

    Raised for PRODUCER_FENCED from any call. Close the producer: anything it would still
    write is rejected, which is what keeps the newer instance's output exactly-once.
    """

    reason = Reason.PRODUCER_FENCED


class InvalidProducerEpochError(ProducerFencedError):
    """A coordinator or the group offsets service saw an epoch older than the current one.

    Kafka treats INVALID_PRODUCER_EPOCH from these calls as fencing (design/kafka-semantics.md §2.11, §5.2), so this is
    a :class:`ProducerFencedError` that keeps the server's exact reason. On Produce the same
    reason is abortable instead (:func:`classify`).
    """

    reason = Reason.INVALID_PRODUCER_EPOCH


class AbortableError(OncelogError):
    """The current transaction cannot commit; call ``abort_transaction()`` and start it again.

    Args:
        message: what happened and what to do about it.
        cause: the server's error, whose reason, flags and metadata are kept.
        epoch_bump_required: the abort must obtain a new epoch through InitProducerId with the
            current producer id and epoch (KIP-360, design/kafka-semantics.md §5.1) because the partitions'
            sequence state for this producer is no longer trustworthy.
    """

    reason = Reason.TRANSACTION_ABORTABLE
    cause: OncelogError | None = None

    def __init__(self, message: str, *, cause: OncelogError | None = None, epoch_bump_required: bool = False) -> None:
        _init_from_cause(self, message, cause)
        self.retriable = False
        self.epoch_bump_required = epoch_bump_required


class RetriableError(OncelogError):
    """A retriable failure outlasted the client's retry budget; the call may be made again.

    ``definite`` tells whether anything happened: when False (for example a commit whose
    answer never arrived) the outcome is unknown, and the same call must be repeated rather
    than compensated.

    Args:
        message: what happened and what to do about it.
        cause: the last error seen, whose reason, flags and metadata are kept.
    """

    reason = Reason.REQUEST_TIMED_OUT
    cause: OncelogError | None = None

    def __init__(self, message: str, *, cause: OncelogError | None = None) -> None:
        _init_from_cause(self, message, cause)
        self.retriable = True


class BufferExhaustedError(RetriableError):
    """The producer's ``buffer_memory`` is full of unsent records (Kafka's ``BufferExhaustedException``).

    Nothing was appended. Wait for in-flight batches to complete (``flush()``), lower the send
    rate, or raise ``buffer_memory``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.definite = True


class IllegalStateError(OncelogError):
    """A call that the client's current state does not allow (Kafka's ``IllegalStateException``).

    The message names the state and the call that would make this one valid, for example
    ``commit_transaction()`` before ``begin_transaction()``. Nothing was sent.
    """

    reason = Reason.INVALID_REQUEST

    def __init__(self, message: str) -> None:
        super().__init__(message, definite=True)


def _init_from_cause(
    err: FatalError | AbortableError | RetriableError, message: str, cause: OncelogError | None
) -> None:
    if cause is None:
        OncelogError.__init__(err, message)
    else:
        OncelogError.__init__(err, message, reason=cause.reason, definite=cause.definite, metadata=cause.metadata)
        err.__cause__ = cause
    err.cause = cause


@dataclass(frozen=True, slots=True)
class Disposition:
    """The client's reaction to one error.

    Attributes:
        action: what to do next.
        refresh: what to look up again before a retry.
        epoch_bump: the producer's epoch must change before it writes to the partition again.
            With ``ABORTABLE`` the abort goes through InitProducerId with the current id and
            epoch (KIP-360); for an idempotent producer (``RETRY``/``FAIL`` on produce) the
            epoch is bumped locally and in-flight sequences are rewritten from 0 (design/kafka-semantics.md §4.2).
    """

    action: Action
    refresh: Refresh = Refresh.NONE
    epoch_bump: bool = False

    def user_error(self, err: OncelogError, message: str | None = None) -> OncelogError:
        """The exception to raise to the user once the client acts on ``err``.

        ``RETRY`` maps to :class:`RetriableError` (raised when the retry budget runs out),
        ``ABORTABLE`` to :class:`AbortableError`, ``FATAL`` to :class:`ProducerFencedError`,
        :class:`InvalidProducerEpochError` or :class:`FatalError`; the others return ``err``.
        """
        text = message or err.message
        if self.action is Action.RETRY:
            return RetriableError(text, cause=err)
        if self.action is Action.ABORTABLE:
            return AbortableError(
                f"{text}; abort the transaction and retry it", cause=err, epoch_bump_required=self.epoch_bump
            )
        if self.action is Action.FATAL:
            if err.reason is Reason.PRODUCER_FENCED:
                return ProducerFencedError(f"{text}; close this producer", cause=err)
            if err.reason is Reason.INVALID_PRODUCER_EPOCH:
                return InvalidProducerEpochError(f"{text}; close this producer", cause=err)
            return FatalError(f"{text}; close this producer", cause=err)
        return err


_RETRY = Disposition(Action.RETRY)
_FATAL = Disposition(Action.FATAL)
_FAIL = Disposition(Action.FAIL)
_ABORT_AND_BUMP = Disposition(Action.ABORTABLE, epoch_bump=True)

# Which reasons are retried, and which send the client to look a server up again, come from the one retry table
# (design/client.md §2): of the reasons it retries with Retry.LOCATE, the coordinator ones find the coordinator
# again, a broken connection looks up whatever the call addresses (_refresh), and the rest are a partition leader's.
_COORDINATOR_REASONS = frozenset({Reason.NOT_COORDINATOR, Reason.COORDINATOR_NOT_AVAILABLE})
_METADATA_REASONS = (
    frozenset(reason for reason, how in RETRY_TABLE.items() if how is Retry.LOCATE)
    - _COORDINATOR_REASONS
    - {Reason.NETWORK_EXCEPTION}
)
_GROUP_MEMBERSHIP_REASONS = frozenset(
    {Reason.ILLEGAL_GENERATION, Reason.UNKNOWN_MEMBER_ID, Reason.STALE_MEMBER_EPOCH, Reason.FENCED_MEMBER_EPOCH}
)


def _refresh(reason: Reason, source: str) -> Refresh:
    if reason in _METADATA_REASONS:
        return Refresh.METADATA
    if reason in _COORDINATOR_REASONS:
        return Refresh.COORDINATOR
    if reason is Reason.NETWORK_EXCEPTION:
        # a broken connection may mean the server moved (Kafka's NetworkException is an
        # InvalidMetadataException; a disconnected coordinator request looks the coordinator up)
        return Refresh.COORDINATOR if source in ("coordinator", "group") else Refresh.METADATA
    if reason is Reason.REQUEST_TIMED_OUT and source == "group":
        # TxnOffsetCommitHandler looks the group coordinator up again on a timeout
        return Refresh.COORDINATOR
    return Refresh.NONE


def classify(err: OncelogError, *, source: Source, transactional: bool = False) -> Disposition:
    """Decide what the client does with ``err`` (design/kafka-semantics.md §2.11 table, design/kafka-semantics.md §4.2
    client-side reaction).

    Args:
        err: the domain error returned by the server (its ``definite`` and ``retriable``
            flags are honoured as sent).
        source: which kind of call failed (see :data:`Source`).
        transactional: the call belongs to a transaction: Produce from a transactional
            producer, or TxnOffsetCommit on ``group``. Coordinator calls always are.

    Rules, first match wins:

    1. Fencing. PRODUCER_FENCED is fatal everywhere. INVALID_PRODUCER_EPOCH is fatal from
       the coordinator and group offsets (Kafka treats it like PRODUCER_FENCED there); on
       Produce it is abortable with an epoch bump (KIP-588), or a failed batch plus a local
       epoch bump for an idempotent producer.
    2. An indeterminate error (``definite=False``) is retried with the same identity, never
       turned into an abort or a sequence reset: an indeterminate commit may have committed
       (design/architecture.md §1.7).
    3. Per-call rules. Produce: DUPLICATE_SEQUENCE completes; OUT_OF_ORDER_SEQUENCE and
       UNKNOWN_PRODUCER_ID are retried after a local epoch bump (idempotent) or abortable with
       an epoch bump (transactional, KIP-360). The caller first asks
       :meth:`~oncelog.client.sequences.ProducerSequences.can_retry` whether an out-of-order
       answer only reflects an earlier batch's failure, which is retried as is. Coordinator:
       INVALID_PRODUCER_ID_MAPPING and UNKNOWN_PRODUCER_ID are abortable with an epoch bump,
       TRANSACTION_ABORTABLE is abortable. Group: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
       STALE_MEMBER_EPOCH and FENCED_MEMBER_EPOCH fail a consumer's commit and make a transactional one
       abortable (KIP-447, design/consumer-groups.md §6).
       Fetch: OFFSET_OUT_OF_RANGE resets the position.
    4. Any other retriable error is retried, after refreshing metadata (leader errors,
       unknown partition, broken connection) or the coordinator (NOT_COORDINATOR,
       COORDINATOR_NOT_AVAILABLE).
    5. Anything else: on Produce, abortable with an epoch bump for a transactional producer
       (any failed batch leaves its partition's sequences in doubt) and a failed batch plus a
       local epoch bump for an idempotent one; fatal from the coordinator and from a
       transactional offset commit (Kafka's "unexpected error"); a failed call on the group
       offsets and fetch paths otherwise. INVALID_TXN_STATE thus ends the producer when the
       coordinator returns it but only the transaction when a partition does.

    Raises:
        ValueError: ``source`` is not one of :data:`Source`.
    """
    if source not in _SOURCES:
        raise ValueError(f"unknown error source {source!r}; expected one of {sorted(_SOURCES)}")
    reason = err.reason
    produce = source == "produce"

    if reason is Reason.PRODUCER_FENCED:
        return _FATAL
    if reason is Reason.INVALID_PRODUCER_EPOCH:
        if not produce:
            return _FATAL
        return _ABORT_AND_BUMP if transactional else Disposition(Action.FAIL, epoch_bump=True)

    if not err.definite:
        return Disposition(Action.RETRY, _refresh(reason, source))

    if produce:
        if reason is Reason.DUPLICATE_SEQUENCE:
            return Disposition(Action.COMPLETE)
        if reason in (Reason.OUT_OF_ORDER_SEQUENCE, Reason.UNKNOWN_PRODUCER_ID):
            return _ABORT_AND_BUMP if transactional else Disposition(Action.RETRY, epoch_bump=True)
    elif source == "coordinator":
        if reason in (Reason.INVALID_PRODUCER_ID_MAPPING, Reason.UNKNOWN_PRODUCER_ID):
            return _ABORT_AND_BUMP
        if reason is Reason.TRANSACTION_ABORTABLE:
            return Disposition(Action.ABORTABLE)
    elif source == "group":
        if reason in _GROUP_MEMBERSHIP_REASONS or reason is Reason.TRANSACTION_ABORTABLE:
            return Disposition(Action.ABORTABLE) if transactional else _FAIL
        if reason is Reason.INVALID_PRODUCER_ID_MAPPING and transactional:
            return _ABORT_AND_BUMP
    elif reason is Reason.OFFSET_OUT_OF_RANGE:  # source == "fetch"
        return Disposition(Action.RESET_POSITION)

    if retry_of(err) is not None:
        refresh = _refresh(reason, source)
        return _RETRY if refresh is Refresh.NONE else Disposition(Action.RETRY, refresh)

    if produce:
        return _ABORT_AND_BUMP if transactional else Disposition(Action.FAIL, epoch_bump=True)
    if source == "coordinator" or (source == "group" and transactional):
        return _FATAL
    return _FAIL


# Answers that do not prove a coordinator request had no effect: a coordinator that loses its shard after writing
# the change (say PrepareCommit) answers NOT_COORDINATOR, though the change stands.
_UNPROVEN_BY_COORDINATOR = frozenset({Reason.NOT_COORDINATOR, Reason.COORDINATOR_NOT_AVAILABLE})


def may_have_taken_effect(err: OncelogError, *, sent: bool) -> bool:
    """Whether a failed attempt of a state-changing coordinator request (EndTxn) may still have taken effect.

    An attempt that was never sent (the coordinator lookup failed) did nothing. A sent one did nothing only
    when a coordinator said so: a definite answer other than NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE.
    Once any attempt may have taken effect, the request's outcome is unknown until an answer settles it,
    whatever later attempts answer.
    """
    return sent and (not err.definite or err.reason in _UNPROVEN_BY_COORDINATOR)
