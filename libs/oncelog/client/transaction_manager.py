"""The client side of transactions (Kafka's ``TransactionManager``): a state machine and the coordinator calls.

The state machine is one table, :data:`TRANSITIONS`, of (state, event) → next state, as in Kafka's
``TransactionManager.State`` and aiokafka's ``transaction_manager.py``; a pair that is not in the table is
illegal and the operation that caused it fails with :class:`~oncelog.client.errors.IllegalStateError` (or
with the error that ended the transaction, when there is one)::

    UNINITIALIZED --init--> INITIALIZING --initialized--> READY --begin--> IN_TRANSACTION
    IN_TRANSACTION --commit--> COMMITTING_TRANSACTION --completed--> READY
    IN_TRANSACTION or ABORTABLE_ERROR --abort--> ABORTING_TRANSACTION --completed--> READY
    IN_TRANSACTION or COMMITTING_TRANSACTION --abortable_error--> ABORTABLE_ERROR
    any state --fatal_error--> FATAL_ERROR (final)
    two-phase commit (:mod:`oncelog.client.two_phase`): IN_TRANSACTION --prepare--> PREPARING_TRANSACTION
    --prepared--> PREPARED_TRANSACTION (or INITIALIZING --initialized_prepared--> it)
    --complete--> COMPLETING_TRANSACTION --completed--> READY

Errors: a *fatal* error (the producer was fenced, the coordinator refused the producer id or epoch) ends the
producer: every later call raises it. An *abortable* error (a batch or an offset commit of the transaction
failed) ends the transaction: only ``abort_transaction()`` leads on, and the application runs the
transaction again. When the failure may have left a partition with a sequence gap (a batch whose outcome is
unknown, an OUT_OF_ORDER_SEQUENCE), the abort bumps the epoch (KIP-360): EndTxn returns a new epoch and every
partition's sequence starts again at 0, so the next transaction never collides with a batch of the failed
one.

The coordinator calls: InitProducerId, AddPartitionsToTxn (before the first batch of each new partition,
batched), AddOffsetsToTxn plus TxnOffsetCommit to the group's owner, and EndTxn, whose answer carries the epoch
for the next transaction (KIP-890: bumped on every EndTxn). They go through the :class:`CoordinatorClient`
given to the manager (:mod:`oncelog.client.producer_rpc` over gRPC; an in-memory fake in the unit tests).
A commit whose outcome is unknown is retried with the same identity, and ``commit_transaction()`` may be called
again; it is never turned into an abort (design/architecture.md §1.7).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.coordinator_client import CoordinatorClient, EndTxnResult, ProducerIdSource
from oncelog.client.errors import (
    AbortableError,
    Action,
    IllegalStateError,
    Refresh,
    RetriableError,
    classify,
    may_have_taken_effect,
)
from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from oncelog.client.sequences import ProducerIdAndEpoch, ProducerSequences
from oncelog.client.transport import Backoff, Deadline
from oncelog.errors import OncelogError, Reason
from oncelog.vocabulary import CoordinatorKind

__all__ = [
    "TRANSITIONS",
    "CoordinatorClient",
    "CoordinatorKind",
    "EndTxnResult",
    "ProducerIdSource",
    "TransactionEvent",
    "TransactionManager",
    "TransactionState",
    "next_state",
]

log = logging.getLogger("oncelog.client.producer")

T = TypeVar("T")

# CONCURRENT_TRANSACTIONS mostly means "the previous transaction is still writing its markers", which takes a
# few milliseconds here: retry fast at first and back off to Kafka's 20 ms (ADD_PARTITIONS_RETRY_BACKOFF_MS)
# only when the coordinator stays busy, instead of the general retry_backoff_ms.
_CONCURRENT_TRANSACTIONS_BACKOFF_MS = 2
_CONCURRENT_TRANSACTIONS_BACKOFF_MAX_MS = 20


# ------------------------------------------------------------------------------------------------ state machine


class TransactionState(enum.Enum):
    """Client-side state of a transactional producer (Kafka's ``TransactionManager.State``)."""

    UNINITIALIZED = "uninitialized"
    INITIALIZING = "initializing"
    READY = "ready"
    IN_TRANSACTION = "in_transaction"
    COMMITTING_TRANSACTION = "committing_transaction"
    ABORTING_TRANSACTION = "aborting_transaction"
    ABORTABLE_ERROR = "abortable_error"
    FATAL_ERROR = "fatal_error"
    PREPARING_TRANSACTION = "preparing_transaction"
    PREPARED_TRANSACTION = "prepared_transaction"
    COMPLETING_TRANSACTION = "completing_transaction"


class TransactionEvent(enum.Enum):
    """What moves the state machine: a call of the application, an answer, or a failure."""

    INIT = "init_transactions"  # init_transactions() (again after a retriable failure)
    INITIALIZED = "initialized"  # InitProducerId answered
    BEGIN = "begin_transaction"  # begin_transaction()
    COMMIT = "commit_transaction"  # commit_transaction() (again while the outcome is unknown)
    ABORT = "abort_transaction"  # abort_transaction() (again after a retriable failure)
    COMPLETED = "completed"  # EndTxn answered, or the transaction had nothing to end
    ABORTABLE_ERROR = "abortable_error"  # a batch or a call of the transaction failed
    FATAL_ERROR = "fatal_error"  # the producer is finished
    PREPARE = "prepare_transaction"  # prepare_transaction() (again after a retriable failure)
    PREPARED = "prepared"  # PrepareTransaction answered
    INITIALIZED_PREPARED = "initialized_prepared"  # InitProducerId kept a prepared transaction for this instance
    COMPLETE = "complete_transaction"  # complete_transaction() (again while the outcome is unknown)


_S = TransactionState
_E = TransactionEvent

TRANSITIONS: Mapping[tuple[TransactionState, TransactionEvent], TransactionState] = {
    (_S.UNINITIALIZED, _E.INIT): _S.INITIALIZING,
    (_S.INITIALIZING, _E.INIT): _S.INITIALIZING,
    (_S.INITIALIZING, _E.INITIALIZED): _S.READY,
    (_S.READY, _E.BEGIN): _S.IN_TRANSACTION,
    (_S.IN_TRANSACTION, _E.COMMIT): _S.COMMITTING_TRANSACTION,
    (_S.COMMITTING_TRANSACTION, _E.COMMIT): _S.COMMITTING_TRANSACTION,
    (_S.COMMITTING_TRANSACTION, _E.COMPLETED): _S.READY,
    (_S.IN_TRANSACTION, _E.ABORT): _S.ABORTING_TRANSACTION,
    (_S.ABORTABLE_ERROR, _E.ABORT): _S.ABORTING_TRANSACTION,
    (_S.ABORTING_TRANSACTION, _E.ABORT): _S.ABORTING_TRANSACTION,
    (_S.ABORTING_TRANSACTION, _E.COMPLETED): _S.READY,
    # a failure dooms an open transaction (or a commit that has not ended); without one there is nothing to fail
    (_S.UNINITIALIZED, _E.ABORTABLE_ERROR): _S.UNINITIALIZED,
    (_S.INITIALIZING, _E.ABORTABLE_ERROR): _S.INITIALIZING,
    (_S.READY, _E.ABORTABLE_ERROR): _S.READY,
    (_S.IN_TRANSACTION, _E.ABORTABLE_ERROR): _S.ABORTABLE_ERROR,
    (_S.COMMITTING_TRANSACTION, _E.ABORTABLE_ERROR): _S.ABORTABLE_ERROR,
    (_S.ABORTING_TRANSACTION, _E.ABORTABLE_ERROR): _S.ABORTING_TRANSACTION,
    (_S.ABORTABLE_ERROR, _E.ABORTABLE_ERROR): _S.ABORTABLE_ERROR,
    (_S.FATAL_ERROR, _E.ABORTABLE_ERROR): _S.FATAL_ERROR,
    (_S.IN_TRANSACTION, _E.PREPARE): _S.PREPARING_TRANSACTION,
    (_S.PREPARING_TRANSACTION, _E.PREPARE): _S.PREPARING_TRANSACTION,
    (_S.PREPARING_TRANSACTION, _E.PREPARED): _S.PREPARED_TRANSACTION,
    (_S.PREPARING_TRANSACTION, _E.ABORTABLE_ERROR): _S.ABORTABLE_ERROR,
    (_S.INITIALIZING, _E.INITIALIZED_PREPARED): _S.PREPARED_TRANSACTION,
    (_S.PREPARED_TRANSACTION, _E.COMPLETE): _S.COMPLETING_TRANSACTION,
    (_S.COMPLETING_TRANSACTION, _E.COMPLETE): _S.COMPLETING_TRANSACTION,
    (_S.COMPLETING_TRANSACTION, _E.COMPLETED): _S.READY,
    # prepared records are all written: nothing left to fail but the decision itself
    (_S.PREPARED_TRANSACTION, _E.ABORTABLE_ERROR): _S.PREPARED_TRANSACTION,
    (_S.COMPLETING_TRANSACTION, _E.ABORTABLE_ERROR): _S.COMPLETING_TRANSACTION,
    **{(state, _E.FATAL_ERROR): _S.FATAL_ERROR for state in TransactionState},
}
"""(state, event) → next state; a pair that is missing is illegal."""


_SENDING = (_S.IN_TRANSACTION, _S.COMMITTING_TRANSACTION, _S.PREPARING_TRANSACTION)
"""States whose flush may still add partitions."""


def next_state(state: TransactionState, event: TransactionEvent) -> TransactionState | None:
    """The state ``event`` leads to from ``state``, or None when the event is illegal there."""
    return TRANSITIONS.get((state, event))


# ------------------------------------------------------------------------------------------------ manager


class TransactionManager:
    """Transactional state and coordinator calls of one producer (Kafka's ``TransactionManager``).

    State changes happen under ``_lock`` because ``send()`` and ``begin_transaction()`` read the state on
    the caller's thread; the coordinator calls run on the I/O loop. Every change goes through :data:`TRANSITIONS`.

    Args:
        transactional_id: the producer's transactional id.
        sequences: the producer's sequence book; the manager sets its identity.
        accumulator: the producer's batches; the manager drops the unsent ones of a doomed transaction.
        client: the coordinator calls.
        wake: make the sender look for work (runs on the loop).
        enter_fatal: end the producer with a fatal error (runs on the loop).
        transaction_timeout_ms: the coordinator aborts a transaction open longer than this.
        request_timeout_ms: deadline of one call.
        retry_backoff_ms: first pause before a retry; doubles up to ``retry_backoff_max_ms``.
    """

    def __init__(
        self,
        *,
        transactional_id: str,
        sequences: ProducerSequences,
        accumulator: RecordAccumulator,
        client: CoordinatorClient,
        wake: Callable[[], None],
        enter_fatal: Callable[[OncelogError], None],
        transaction_timeout_ms: int = 60_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
    ) -> None:
        assert transactional_id
        self._tid = transactional_id
        self._sequences = sequences
        self._accumulator = accumulator
        self._client = client
        self._transaction_timeout_ms = transaction_timeout_ms
        self._request_timeout_s = request_timeout_ms / 1000
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        self._wake = wake
        self._enter_fatal = enter_fatal
        self._lock = threading.Lock()
        self.state = TransactionState.UNINITIALIZED
        self.last_error: OncelogError | None = None
        self._epoch_bump_required = False
        self._started = False
        self._partitions: set[TopicPartition] = set()
        self._pending_partitions: set[TopicPartition] = set()
        # groups whose offsets partition this transaction has (AddOffsetsToTxn answered), with the address of
        # the group's offsets owner from that answer ("" when it named none)
        self._groups: dict[str, str] = {}
        # groups this transaction sent offsets for; at its end they become the groups the next transaction adds with
        # its first partitions (AddPartitionsToTxn's group_ids), so a consume-transform-produce loop spends no
        # AddOffsetsToTxn round trip (a group added and then left without offsets only costs its marker)
        self._offset_groups: set[str] = set()
        self._next_groups: tuple[str, ...] = ()
        # offsets of send_offsets_to_transaction() calls that did not complete (a retriable failure): the commit
        # sends them first, so output and input offsets commit together or not at all (Kafka queues them ahead
        # of EndTxn)
        self._pending_offsets: dict[str, tuple[dict[TopicPartition, OffsetAndMetadata], ConsumerGroupMetadata]] = {}
        self._add_task: asyncio.Task[None] | None = None
        # One transaction-changing request at a time, as Kafka's TransactionManager does: two in flight
        # would make the coordinator answer the second with CONCURRENT_TRANSACTIONS and cost a retry.
        self._coordinator_turn = asyncio.Lock()

    # -------------------------------------------------------------------------------- state

    def _transition(self, event: TransactionEvent) -> None:
        """Apply ``event`` by the table; the caller holds the lock."""
        target = TRANSITIONS.get((self.state, event))
        if target is None:
            raise IllegalStateError(
                f"transactional id {self._tid!r}: {event.value} is not allowed in state {self.state.value}"
            )
        self.state = target

    def _start(self, event: TransactionEvent, what: str) -> None:
        """Apply the event of the application's call ``what``, or raise what the call should raise; holds the lock."""
        if (self.state, event) not in TRANSITIONS:
            self._raise_if_failed()
            raise IllegalStateError(self._hint(what))
        self._transition(event)

    def _raise_if_failed(self) -> None:
        if self.state is TransactionState.FATAL_ERROR and self.last_error is not None:
            raise self.last_error
        if self.state is TransactionState.ABORTABLE_ERROR and self.last_error is not None:
            raise AbortableError(
                f"the transaction cannot commit ({self.last_error.message}); call abort_transaction() and retry it",
                cause=self.last_error,
                epoch_bump_required=self._epoch_bump_required,
            )

    def check_send(self) -> None:
        """Raise unless records may be added to the current transaction (runs on the caller's thread)."""
        with self._lock:
            if self.state is TransactionState.IN_TRANSACTION:
                return
            if self.state in (TransactionState.COMMITTING_TRANSACTION, TransactionState.PREPARING_TRANSACTION):
                raise IllegalStateError("the transaction is committing or preparing; send in the next transaction")
            self._raise_if_failed()
            raise IllegalStateError(self._hint("send()"))

    def _hint(self, what: str) -> str:
        if what == "init_transactions()" and self.state is not TransactionState.UNINITIALIZED:
            return (
                f"init_transactions() was already called for transactional id {self._tid!r}; call it once per producer"
            )
        if self.state in (TransactionState.UNINITIALIZED, TransactionState.INITIALIZING):
            return f"{what} needs init_transactions() first (transactional id {self._tid!r})"
        if self.state is TransactionState.READY:
            return f"{what} needs an open transaction: call begin_transaction() first"
        if self.state is TransactionState.COMMITTING_TRANSACTION:
            return (
                f"{what} is not allowed while a commit is in progress; its outcome is unknown, so call "
                "commit_transaction() again"
            )
        return f"{what} is not allowed in state {self.state.value}"

    def maybe_add_partition(self, tp: TopicPartition) -> None:
        """Note that the transaction writes to ``tp``; the sender adds it before its first batch."""
        with self._lock:
            if tp not in self._partitions:
                self._pending_partitions.add(tp)

    def may_send_to(self, tp: TopicPartition) -> bool:
        """Whether batches of ``tp`` may be sent: it is part of the transaction (design/kafka-semantics.md §1.1 step
        3)."""
        return tp in self._partitions

    def set_abortable(self, error: AbortableError, *, epoch_bump: bool) -> None:
        """A batch or call failed: the transaction can only be aborted now."""
        with self._lock:
            self._epoch_bump_required = self._epoch_bump_required or epoch_bump
            before = self.state
            self._transition(TransactionEvent.ABORTABLE_ERROR)
            if self.state is TransactionState.ABORTABLE_ERROR and before is not TransactionState.ABORTABLE_ERROR:
                log.info("transaction of %r is now abortable: %s", self._tid, error.message)
                self.last_error = error

    def set_fatal(self, error: OncelogError) -> None:
        """The producer is finished."""
        with self._lock:
            self._transition(TransactionEvent.FATAL_ERROR)
            self.last_error = error

    def before_send(self) -> None:
        """Sender hook: drop unsent records of a doomed transaction, and add new partitions in one call."""
        state = self.state
        if state is TransactionState.ABORTABLE_ERROR and self.last_error is not None:
            self._accumulator.abort_undrained(
                AbortableError(f"not sent: the transaction must be aborted ({self.last_error.message})")
            )
            return
        if state not in _SENDING:
            return
        if self._pending_partitions and (self._add_task is None or self._add_task.done()):
            self._add_task = asyncio.get_running_loop().create_task(self._add_partitions())

    async def _add_partitions(self) -> None:
        async with self._coordinator_turn:
            # taken after the wait for our turn, so partitions seen meanwhile join this request
            with self._lock:
                partitions = sorted(self._pending_partitions)
                first = not self._partitions and not self._groups
                groups = tuple(g for g in self._next_groups if g not in self._groups) if first else ()
            if not partitions:
                return
            identity = self._sequences.identity
            self._started = True
            try:
                await self._coordinator_call(
                    "AddPartitionsToTxn",
                    lambda address: self._client.add_partitions_to_txn(
                        address, self._tid, identity, partitions, groups=groups, timeout_s=self._request_timeout_s
                    ),
                    Deadline(self._accumulator.delivery_timeout_ms / 1000),
                )
            except OncelogError as err:
                self._on_call_failed(err, f"adding {', '.join(map(str, partitions))} to the transaction")
                return
            finally:
                self._wake()
        with self._lock:
            self._partitions.update(partitions)
            self._pending_partitions.difference_update(partitions)
            for group in groups:
                self._groups.setdefault(group, "")  # the owner's address is found when offsets are sent

    # -------------------------------------------------------------------------------- coordinator calls

    async def _coordinator_call(
        self,
        name: str,
        rpc: Callable[[str], Awaitable[T]],
        deadline: Deadline,
    ) -> T:
        """Call the transactional id's coordinator, retrying retriable errors until ``deadline``.

        Raises:
            RetriableError: a retriable error outlasted the deadline. ``definite`` is False as soon as any
                attempt may have reached the coordinator and taken effect (no answer, or an answer like
                NOT_COORDINATOR that a coordinator may give after it wrote the change), not only the last.
            OncelogError: a non-retriable answer, for the caller to classify.
        """
        backoff = Backoff(self._retry_backoff_ms, self._retry_backoff_max_ms)
        concurrent = Backoff(_CONCURRENT_TRANSACTIONS_BACKOFF_MS, _CONCURRENT_TRANSACTIONS_BACKOFF_MAX_MS)
        taken_effect_maybe = False
        while True:
            sent = False
            try:
                address = await self._client.find_coordinator(self._tid, CoordinatorKind.TRANSACTION)
                sent = True
                return await rpc(address)
            except OncelogError as err:
                taken_effect_maybe = taken_effect_maybe or may_have_taken_effect(err, sent=sent)
                disposition = classify(err, source="coordinator", transactional=True)
                if disposition.action is not Action.RETRY:
                    raise
                if disposition.refresh is not Refresh.NONE or err.reason is Reason.NOT_COORDINATOR:
                    self._client.invalidate_coordinator(self._tid, CoordinatorKind.TRANSACTION)
                if deadline.expired:
                    timed_out = RetriableError(
                        f"{name} for transactional id {self._tid!r} did not complete in time: {err.message}"
                        + ("; an earlier attempt may have taken effect" if taken_effect_maybe else ""),
                        cause=err,
                    )
                    timed_out.definite = err.definite and not taken_effect_maybe
                    raise timed_out from err
                pause = concurrent.next_s() if err.reason is Reason.CONCURRENT_TRANSACTIONS else backoff.next_s()
                await asyncio.sleep(deadline.cap(pause))

    def _on_call_failed(self, err: OncelogError, doing: str) -> OncelogError:
        """Apply a failed coordinator or group call to the state; return the exception for the user."""
        if isinstance(err, RetriableError):
            return err
        disposition = classify(err, source="coordinator", transactional=True)
        user_error = disposition.user_error(err, f"{doing} failed: {err.message}")
        if disposition.action is Action.FATAL:
            self._enter_fatal(user_error)
        elif disposition.action is Action.ABORTABLE:
            assert isinstance(user_error, AbortableError)
            self.set_abortable(user_error, epoch_bump=disposition.epoch_bump)
        return user_error

    async def _init_producer_id(self, deadline: Deadline, expected: ProducerIdAndEpoch | None) -> ProducerIdAndEpoch:
        return await self._coordinator_call(
            "InitProducerId",
            lambda address: self._client.init_producer_id(
                address, self._tid, self._transaction_timeout_ms, expected=expected, timeout_s=self._request_timeout_s
            ),
            deadline,
        )

    async def _end_txn(self, commit: bool, deadline: Deadline, wait_for_completion: bool = False) -> ProducerIdAndEpoch:
        """EndTxn; with ``wait_for_completion`` also until the coordinator reports the transaction complete.

        Each waiting call is a long poll the coordinator answers at completion or shortly before the request
        timeout; the next one names the same epoch, so it is a retry of the decision, never a second one.

        Raises:
            RetriableError: (waiting only) the transaction is decided but was not complete by ``deadline``.
        """
        identity = self._sequences.identity
        # A waiting call may be held until shortly before its own deadline: keep that within the caller's.
        timeout_s = deadline.cap(self._request_timeout_s) if wait_for_completion else self._request_timeout_s
        while True:
            result = await self._coordinator_call(
                "EndTxn",
                lambda address: self._client.end_txn(
                    address,
                    self._tid,
                    identity,
                    commit=commit,
                    wait_for_completion=wait_for_completion,
                    timeout_s=timeout_s,
                ),
                deadline,
            )
            if result.completed or not wait_for_completion:
                return result.identity
            if deadline.expired:
                raise RetriableError(
                    f"the {'commit' if commit else 'abort'} of transactional id {self._tid!r} is decided, but not "
                    "every marker was written in time; call it again to keep waiting (it will not be undone)"
                )

    # -------------------------------------------------------------------------------- operations (on the loop)

    async def init_transactions(self, deadline: Deadline) -> None:
        """InitProducerId: fence older instances and abort (or complete) their transaction
        (design/kafka-semantics.md §2.3)."""
        with self._lock:
            self._start(TransactionEvent.INIT, "init_transactions()")
        try:
            identity = await self._init_producer_id(deadline, None)
        except OncelogError as err:
            raise self._on_call_failed(err, "init_transactions()") from err
        self._sequences.set_identity(identity)
        with self._lock:
            self._transition(TransactionEvent.INITIALIZED)
        log.info("transactional id %r initialised with %s", self._tid, identity)

    def begin_transaction(self) -> None:
        """Open a transaction locally; nothing is sent until the first record or offsets."""
        with self._lock:
            self._start(TransactionEvent.BEGIN, "begin_transaction()")
            self._reset_transaction()

    def _reset_transaction(self) -> None:
        if self._offset_groups:
            self._next_groups = tuple(sorted(self._offset_groups))
        elif self._started:
            self._next_groups = ()  # a transaction that sent no offsets: the next adds no group unasked
        self._offset_groups.clear()
        self._started = False
        self._partitions.clear()
        self._pending_partitions.clear()
        self._groups.clear()
        self._pending_offsets.clear()

    def _check_in_transaction(self, what: str) -> None:
        with self._lock:
            if self.state is not TransactionState.IN_TRANSACTION:
                self._raise_if_failed()
                raise IllegalStateError(self._hint(what))

    async def add_offsets(self, group_id: str, deadline: Deadline) -> str:
        """AddOffsetsToTxn for ``group_id``, once per transaction; the group's offsets owner (or "")."""
        self._check_in_transaction("send_offsets_to_transaction()")
        return await self._add_offsets(group_id, deadline)

    async def _add_offsets(self, group_id: str, deadline: Deadline) -> str:
        with self._lock:
            carried = group_id in self._next_groups and not self._partitions and bool(self._pending_partitions)
        if carried:
            # send_offsets_to_transaction() right after the first send(), before the sender added the partitions:
            # add them now, with this group (AddPartitionsToTxn's group_ids), rather than the group alone first
            await self._add_partitions()
        async with self._coordinator_turn:
            # checked after the wait for our turn: a call for the same group that held it may have added it
            if group_id in self._groups:
                return self._groups[group_id]
            identity = self._sequences.identity
            self._started = True
            try:
                owner = await self._coordinator_call(
                    "AddOffsetsToTxn",
                    lambda address: self._client.add_offsets_to_txn(
                        address, self._tid, identity, group_id, timeout_s=self._request_timeout_s
                    ),
                    deadline,
                )
            except OncelogError as err:
                raise self._on_call_failed(err, f"adding the offsets of group {group_id!r}") from err
            self._groups[group_id] = owner
            return owner

    async def send_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: ConsumerGroupMetadata, deadline: Deadline
    ) -> None:
        """AddOffsetsToTxn (unless this transaction already added the group), then TxnOffsetCommit to the
        group's owner (design/kafka-semantics.md §1.1 step 4, KIP-447).

        Until the offsets are committed they stay pending, merged with earlier pending offsets of the group:
        when this call fails with a retriable error, ``commit_transaction()`` commits them before EndTxn.
        """
        self._check_in_transaction("send_offsets_to_transaction()")
        self._offset_groups.add(group.group_id)
        earlier = self._pending_offsets.get(group.group_id)
        merged = {**earlier[0], **offsets} if earlier is not None else dict(offsets)
        self._pending_offsets[group.group_id] = (merged, group)
        await self._commit_offsets(merged, group, deadline)
        if self._pending_offsets.get(group.group_id, (None,))[0] is merged:
            del self._pending_offsets[group.group_id]

    async def _commit_offsets(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata], group: ConsumerGroupMetadata, deadline: Deadline
    ) -> None:
        address = await self._add_offsets(group.group_id, deadline)
        identity = self._sequences.identity
        backoff = Backoff(self._retry_backoff_ms, self._retry_backoff_max_ms)
        while True:
            try:
                if not address:
                    address = await self._client.find_coordinator(group.group_id, CoordinatorKind.GROUP)
                await self._client.txn_offset_commit(
                    address, self._tid, identity, group, offsets, timeout_s=self._request_timeout_s
                )
                return
            except OncelogError as err:
                disposition = classify(err, source="group", transactional=True)
                if disposition.action is Action.RETRY and not deadline.expired:
                    if disposition.refresh is not Refresh.NONE or err.reason is Reason.NOT_COORDINATOR:
                        self._client.invalidate_coordinator(group.group_id, CoordinatorKind.GROUP)
                        address = ""
                    await asyncio.sleep(deadline.cap(backoff.next_s()))
                    continue
                if disposition.action is Action.RETRY:
                    raise RetriableError(
                        f"TxnOffsetCommit for group {group.group_id!r} did not complete in time: {err.message}",
                        cause=err,
                    ) from err
                user_error = disposition.user_error(
                    err, f"committing offsets of group {group.group_id!r}: {err.message}"
                )
                if disposition.action is Action.FATAL:
                    self._enter_fatal(user_error)
                elif disposition.action is Action.ABORTABLE:
                    assert isinstance(user_error, AbortableError)
                    self.set_abortable(user_error, epoch_bump=disposition.epoch_bump)
                raise user_error from err

    async def commit_transaction(
        self, flush: Callable[[Deadline], Awaitable[None]], deadline: Deadline, wait_for_completion: bool = False
    ) -> None:
        """Flush, then EndTxn(COMMIT) until it answers (and, if asked, until complete); adopt the epoch it returns.

        A commit that timed out while waiting for completion stays COMMITTING_TRANSACTION with the old epoch, so
        calling it again retries the same decision and waits again (KIP-890 epoch bump on completion of the call).
        """
        with self._lock:
            self._start(TransactionEvent.COMMIT, "commit_transaction()")
        await flush(deadline)
        with self._lock:
            self._raise_if_failed()
            if self._pending_partitions:
                # flush() returns only after every batch was sent, so every partition was added already
                raise IllegalStateError(f"partitions {sorted(self._pending_partitions)} were never added")
        for group_id, (offsets, group) in list(self._pending_offsets.items()):
            # a send_offsets_to_transaction() that failed: the commit carries its offsets or does not happen
            await self._commit_offsets(offsets, group, deadline)
            del self._pending_offsets[group_id]
        with self._lock:
            self._raise_if_failed()
            started = self._started
        if started:
            try:
                identity = await self._end_txn(True, deadline, wait_for_completion)
            except OncelogError as err:
                raise self._on_call_failed(err, "commit_transaction()") from err
            self._sequences.set_identity(identity)
        with self._lock:
            self._transition(TransactionEvent.COMPLETED)
            self._reset_transaction()

    async def abort_transaction(
        self, wait_in_flight: Callable[[Deadline], Awaitable[None]], deadline: Deadline
    ) -> None:
        """Drop unsent records, wait for those on the wire, then EndTxn(ABORT) and adopt the new epoch.

        When the abort follows a sequence error (KIP-360), the epoch EndTxn returns restarts every
        partition's sequences at 0. If the coordinator no longer maps the id to this producer id
        (INVALID_PRODUCER_ID_MAPPING), InitProducerId with the current identity takes its place.
        """
        with self._lock:
            self._start(TransactionEvent.ABORT, "abort_transaction()")
            self._pending_partitions.clear()
            last_error = self.last_error
        self._accumulator.abort_undrained(AbortableError("the transaction was aborted before this record was sent"))
        if self._add_task is not None and not self._add_task.done():
            self._add_task.cancel()
            self._started = True  # the coordinator may have added the partitions before the cancel
        await wait_in_flight(deadline)
        with self._lock:
            bump = self._epoch_bump_required
            started = self._started
        if started or bump:
            try:
                if last_error is not None and last_error.reason is Reason.INVALID_PRODUCER_ID_MAPPING:
                    identity = await self._init_producer_id(deadline, self._sequences.identity)
                else:
                    identity = await self._end_txn(False, deadline)
            except OncelogError as err:
                raise self._on_call_failed(err, "abort_transaction()") from err
            if bump:
                self._sequences.reset()
            self._sequences.set_identity(identity)
        with self._lock:
            self._transition(TransactionEvent.COMPLETED)
            self._reset_transaction()
            self.last_error = None
            self._epoch_bump_required = False
