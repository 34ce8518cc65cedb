"""TransactionManager against in-memory coordinators: every event in every state of the transition table, fatal vs
abortable errors, the epoch bump after an abortable error (KIP-360), retries with the same identity."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.errors import AbortableError, IllegalStateError, ProducerFencedError, RetriableError
from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, PreparedTransaction, TopicPartition
from oncelog.client.sequences import ProducerIdAndEpoch, ProducerSequences
from oncelog.client.transaction_manager import (
    TRANSITIONS,
    CoordinatorKind,
    TransactionEvent,
    TransactionState,
    next_state,
)
from oncelog.client.transport import Deadline
from oncelog.client.two_phase import TwoPhaseTransactionManager
from oncelog.errors import (
    ConcurrentTransactions,
    CoordinatorNotAvailable,
    IllegalGeneration,
    InvalidProducerIdMapping,
    NotCoordinator,
    OncelogError,
    ProducerFenced,
    RequestTimedOut,
)

from .fake_services import FakeServices

S = TransactionState
E = TransactionEvent
TID = "copier-0"
TP = TopicPartition("out", 0)
GROUP = ConsumerGroupMetadata("copiers", generation_id=3, member_id="m-1")


class Harness:
    """A transaction manager over :class:`FakeServices`; a fatal error ends it as the producer would."""

    def __init__(self) -> None:
        self.services = FakeServices()
        self.sequences = ProducerSequences(transactional=True)
        self.accumulator = RecordAccumulator(linger_ms=0, sequences=self.sequences)
        self.fatal: list[OncelogError] = []
        self.flushes = 0
        self.manager = TwoPhaseTransactionManager(
            transactional_id=TID,
            sequences=self.sequences,
            accumulator=self.accumulator,
            client=self.services,
            wake=lambda: None,
            enter_fatal=self._enter_fatal,
            request_timeout_ms=1_000,
            retry_backoff_ms=1,
            retry_backoff_max_ms=2,
        )

    def _enter_fatal(self, error: OncelogError) -> None:
        self.fatal.append(error)
        self.manager.set_fatal(error)

    async def flush(self, deadline: Deadline) -> None:
        self.flushes += 1

    @property
    def state(self) -> TransactionState:
        return self.manager.state

    async def init(self, timeout: float = 5) -> None:
        await self.manager.init_transactions(Deadline(timeout))

    async def commit(self, timeout: float = 5) -> None:
        await self.manager.commit_transaction(self.flush, Deadline(timeout))

    async def abort(self, timeout: float = 5) -> None:
        await self.manager.abort_transaction(self.flush, Deadline(timeout))

    async def prepare(self, timeout: float = 5) -> None:
        await self.manager.prepare_transaction(self.flush, Deadline(timeout), "")

    async def complete(self, timeout: float = 5) -> None:
        token = self.manager.prepared or PreparedTransaction(TID, 1, 0)
        await self.manager.complete_transaction(token, True, Deadline(timeout), False)

    async def begin_with_offsets(self) -> None:
        """Open a transaction that the coordinator knows of (its group was added), so ending it calls EndTxn."""
        self.manager.begin_transaction()
        await self.manager.send_offsets({TopicPartition("in", 0): OffsetAndMetadata(7)}, GROUP, Deadline(5))


async def reach(state: TransactionState) -> Harness:
    """A manager brought into ``state`` through its own calls, as an application and the sender would."""
    h = Harness()
    if state is S.UNINITIALIZED:
        return h
    if state is S.INITIALIZING:
        h.services.fail("InitProducerId", CoordinatorNotAvailable("loading"))
        with pytest.raises(RetriableError):
            await h.init(timeout=0)
    elif state is S.FATAL_ERROR:
        h.services.fail("InitProducerId", ProducerFenced("a newer instance took over"))
        with pytest.raises(ProducerFencedError):
            await h.init()
    else:
        await h.init()
    if state in (S.IN_TRANSACTION, S.ABORTABLE_ERROR):
        h.manager.begin_transaction()
    if state is S.ABORTABLE_ERROR:
        h.manager.set_abortable(AbortableError("a batch failed"), epoch_bump=False)
    if state in (S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION):
        await h.begin_with_offsets()
        h.services.fail("EndTxn", RequestTimedOut("no answer", definite=False))
        with pytest.raises(RetriableError):
            await (h.commit(timeout=0) if state is S.COMMITTING_TRANSACTION else h.abort(timeout=0))
    if state in (S.PREPARING_TRANSACTION, S.PREPARED_TRANSACTION, S.COMPLETING_TRANSACTION):
        await h.begin_with_offsets()
        if state is S.PREPARING_TRANSACTION:
            h.services.fail("PrepareTransaction", RequestTimedOut("no answer", definite=False))
            with pytest.raises(RetriableError):
                await h.prepare(timeout=0)
        else:
            await h.prepare()
        if state is S.COMPLETING_TRANSACTION:
            h.services.fail("CompleteTransaction", RequestTimedOut("no answer", definite=False))
            with pytest.raises(RetriableError):
                await h.complete(timeout=0)
    assert h.state is state
    return h


def _init(h: Harness) -> Coroutine[Any, Any, None]:
    return h.init()


async def _begin(h: Harness) -> None:
    h.manager.begin_transaction()


async def _abortable(h: Harness) -> None:
    h.manager.set_abortable(AbortableError("a batch failed"), epoch_bump=False)


async def _fatal(h: Harness) -> None:
    h.manager.set_fatal(ProducerFencedError("fenced by the test"))


OPERATIONS: dict[str, Callable[[Harness], Coroutine[Any, Any, None]]] = {
    "init": _init,
    "begin": _begin,
    "commit": lambda h: h.commit(),
    "abort": lambda h: h.abort(),
    "prepare": lambda h: h.prepare(),
    "complete": lambda h: h.complete(),
    "abortable_error": _abortable,
    "fatal_error": _fatal,
}

ISE, ABORTABLE, FENCED = IllegalStateError, AbortableError, ProducerFencedError
# what each operation does in each state: the state it leads to, or the exception it raises (state unchanged)
EXPECTED: dict[TransactionState, dict[str, TransactionState | type[Exception]]] = {
    S.UNINITIALIZED: {"init": S.READY, "begin": ISE, "commit": ISE, "abort": ISE, "abortable_error": S.UNINITIALIZED},
    S.INITIALIZING: {"init": S.READY, "begin": ISE, "commit": ISE, "abort": ISE, "abortable_error": S.INITIALIZING},
    S.READY: {"init": ISE, "begin": S.IN_TRANSACTION, "commit": ISE, "abort": ISE, "abortable_error": S.READY},
    S.IN_TRANSACTION: {
        "init": ISE,
        "begin": ISE,
        "commit": S.READY,
        "abort": S.READY,
        "abortable_error": S.ABORTABLE_ERROR,
    },
    S.COMMITTING_TRANSACTION: {
        "init": ISE,
        "begin": ISE,
        "commit": S.READY,  # the retry of a commit whose outcome was unknown
        "abort": ISE,  # never turned into an abort
        "abortable_error": S.ABORTABLE_ERROR,
    },
    S.ABORTING_TRANSACTION: {
        "init": ISE,
        "begin": ISE,
        "commit": ISE,
        "abort": S.READY,
        "abortable_error": S.ABORTING_TRANSACTION,
    },
    S.ABORTABLE_ERROR: {
        "init": ABORTABLE,
        "begin": ABORTABLE,
        "commit": ABORTABLE,
        "abort": S.READY,
        "abortable_error": S.ABORTABLE_ERROR,
    },
    S.FATAL_ERROR: {
        "init": FENCED,
        "begin": FENCED,
        "commit": FENCED,
        "abort": FENCED,
        "abortable_error": S.FATAL_ERROR,
    },
}
EXPECTED[S.PREPARING_TRANSACTION] = {
    "init": ISE,
    "begin": ISE,
    "commit": ISE,
    "abort": ISE,  # the prepare may have happened: retry it, then complete
    "abortable_error": S.ABORTABLE_ERROR,
    "prepare": S.PREPARED_TRANSACTION,  # the retry of a prepare whose outcome was unknown
}
EXPECTED[S.PREPARED_TRANSACTION] = {
    "init": ISE,
    "begin": ISE,
    "commit": ISE,  # only complete_transaction(token) ends a prepared transaction
    "abort": ISE,
    "abortable_error": S.PREPARED_TRANSACTION,  # its records are all written: nothing left to fail
    "prepare": ISE,
    "complete": S.READY,
}
EXPECTED[S.COMPLETING_TRANSACTION] = {
    "init": ISE,
    "begin": ISE,
    "commit": ISE,
    "abort": ISE,
    "abortable_error": S.COMPLETING_TRANSACTION,
    "prepare": ISE,
    "complete": S.READY,  # the retry of a completion whose outcome was unknown
}
for _state, _row in EXPECTED.items():
    _row["fatal_error"] = S.FATAL_ERROR
    # prepare needs something sent (the harness's IN_TRANSACTION sent nothing); a failed transaction says so
    _failed = {S.ABORTABLE_ERROR: ABORTABLE, S.FATAL_ERROR: FENCED}.get(_state, ISE)
    _row.setdefault("prepare", _failed)
    _row.setdefault("complete", _failed)


@pytest.mark.parametrize("operation", list(OPERATIONS))
@pytest.mark.parametrize("state", list(TransactionState), ids=lambda s: s.value)
async def test_every_operation_in_every_state(state: TransactionState, operation: str) -> None:
    """Each call of the application or the sender, in each state: the state it leads to or the error it raises."""
    h = await reach(state)
    expected = EXPECTED[state][operation]
    if isinstance(expected, TransactionState):
        await OPERATIONS[operation](h)
        assert h.state is expected
    else:
        with pytest.raises(expected) as raised:
            await OPERATIONS[operation](h)
        assert type(raised.value) is expected  # an AbortableError or a fencing, not a bare IllegalStateError
        assert h.state is state


def test_table_is_total_for_failures_and_final_in_fatal_error() -> None:
    """Failures may arrive in any state (from the sender); FATAL_ERROR leaves for no state."""
    for state in TransactionState:
        assert next_state(state, E.FATAL_ERROR) is S.FATAL_ERROR
        assert next_state(state, E.ABORTABLE_ERROR) is not None
    assert {target for (source, _), target in TRANSITIONS.items() if source is S.FATAL_ERROR} == {S.FATAL_ERROR}


def test_illegal_event_raises_and_keeps_the_state() -> None:
    h = Harness()
    with pytest.raises(IllegalStateError, match="begin_transaction\\(\\) needs init_transactions\\(\\) first"):
        h.manager.begin_transaction()
    assert h.state is S.UNINITIALIZED


def test_send_is_refused_outside_a_transaction_with_what_to_do() -> None:
    h = Harness()
    with pytest.raises(IllegalStateError, match="init_transactions"):
        h.manager.check_send()


# ------------------------------------------------------------------------------------------------ fatal vs abortable


async def test_fencing_from_the_coordinator_is_fatal_and_every_later_call_raises_it() -> None:
    h = await reach(S.IN_TRANSACTION)
    h.services.fail("AddOffsetsToTxn", ProducerFenced("epoch 1 is older than 2"))
    with pytest.raises(ProducerFencedError):
        await h.manager.add_offsets("copiers", Deadline(5))
    assert h.state is S.FATAL_ERROR
    assert len(h.fatal) == 1
    for operation in ("begin", "commit", "abort"):
        with pytest.raises(ProducerFencedError):
            await OPERATIONS[operation](h)


async def test_rejected_group_commit_is_abortable_and_abort_makes_the_producer_usable_again() -> None:
    h = await reach(S.IN_TRANSACTION)
    h.services.fail("TxnOffsetCommit", IllegalGeneration("generation 3 is stale"))
    with pytest.raises(AbortableError):
        await h.manager.send_offsets({TopicPartition("in", 0): OffsetAndMetadata(7)}, GROUP, Deadline(5))
    assert h.state is S.ABORTABLE_ERROR
    assert not h.fatal
    with pytest.raises(AbortableError):
        await h.commit()
    await h.abort()
    assert h.state is S.READY
    assert h.services.names()[-1] == "EndTxn"
    assert h.services.calls[-1][3] is False  # an abort, not a commit
    h.manager.begin_transaction()
    assert h.state is S.IN_TRANSACTION


# ------------------------------------------------------------------------------------------------ epochs


async def test_abort_after_a_sequence_error_bumps_the_epoch_and_restarts_sequences() -> None:
    """KIP-360: the abort adopts the epoch EndTxn returns and every partition starts again at sequence 0."""
    h = await reach(S.IN_TRANSACTION)
    before = h.sequences.identity
    h.accumulator.append(TP, None, b"v")
    (drained,) = h.accumulator.drain([TP])
    assert drained.base_sequence == 0
    h.accumulator.complete(drained, 0)
    assert h.sequences.next_sequence(TP) == 1
    h.manager.set_abortable(AbortableError("OUT_OF_ORDER_SEQUENCE"), epoch_bump=True)
    with pytest.raises(AbortableError) as raised:
        await h.commit()
    assert raised.value.epoch_bump_required
    await h.abort()
    after = h.sequences.identity
    assert after == ProducerIdAndEpoch(before.producer_id, before.epoch + 1) == h.services.identity(TID)
    assert h.sequences.next_sequence(TP) == 0


async def test_abort_with_a_bump_but_no_call_made_still_asks_the_coordinator_for_the_epoch() -> None:
    """A transaction that never reached the coordinator still ends with EndTxn when it must bump the epoch."""
    h = await reach(S.IN_TRANSACTION)
    h.manager.set_abortable(AbortableError("a batch's outcome is unknown"), epoch_bump=True)
    await h.abort()
    assert h.services.names()[-1] == "EndTxn"
    assert h.sequences.identity.epoch == 1


async def test_abort_after_a_lost_producer_id_mapping_reinitialises_with_the_current_identity() -> None:
    h = await reach(S.IN_TRANSACTION)
    identity = h.sequences.identity
    h.services.fail("AddOffsetsToTxn", InvalidProducerIdMapping("the coordinator lost the mapping"))
    with pytest.raises(AbortableError):
        await h.manager.add_offsets("copiers", Deadline(5))
    await h.abort()
    assert h.services.calls[-1] == ("InitProducerId", TID, identity)
    assert h.sequences.identity.epoch == identity.epoch + 1


async def test_commit_adopts_the_epoch_endtxn_returns() -> None:
    h = await reach(S.IN_TRANSACTION)
    await h.manager.add_offsets("copiers", Deadline(5))
    await h.commit()
    assert h.sequences.identity == h.services.identity(TID)
    assert h.sequences.identity.epoch == 1


async def test_commit_of_an_empty_transaction_makes_no_call() -> None:
    h = await reach(S.IN_TRANSACTION)
    calls = len(h.services.calls)
    await h.commit()
    assert h.state is S.READY
    assert len(h.services.calls) == calls
    assert h.flushes == 1


# ------------------------------------------------------------------------------------------------ retries


async def test_retriable_coordinator_errors_are_retried_with_the_same_identity() -> None:
    h = await reach(S.IN_TRANSACTION)
    await h.manager.add_offsets("copiers", Deadline(5))
    identity = h.sequences.identity
    h.services.fail("EndTxn", ConcurrentTransactions("markers pending"), NotCoordinator("moved"))
    await h.commit()
    end_calls = [call for call in h.services.calls if call[0] == "EndTxn"]
    assert [call[2] for call in end_calls] == [identity] * 3
    assert ("InvalidateCoordinator", TID, CoordinatorKind.TRANSACTION) in h.services.calls


async def test_commit_with_unknown_outcome_stays_committing_and_is_never_turned_into_an_abort() -> None:
    h = await reach(S.COMMITTING_TRANSACTION)
    with pytest.raises(IllegalStateError, match="call commit_transaction\\(\\) again"):
        await h.abort()
    await h.commit()
    assert [call[3] for call in h.services.calls if call[0] == "EndTxn"] == [True, True]


async def test_timed_out_commit_says_whether_an_attempt_may_have_taken_effect() -> None:
    """Definite only while every attempt was refused by the id's coordinator (design/architecture.md §1.7)."""
    h = await reach(S.IN_TRANSACTION)
    await h.manager.add_offsets("copiers", Deadline(5))
    h.services.fail("EndTxn", ConcurrentTransactions("markers pending"))
    with pytest.raises(RetriableError) as refused:
        await h.commit(timeout=0)
    assert refused.value.definite
    doubtful_errors = [CoordinatorNotAvailable("moved after writing?"), RequestTimedOut("no answer", definite=False)]
    for doubtful_error in doubtful_errors:
        h.services.fail("EndTxn", doubtful_error)
        with pytest.raises(RetriableError) as doubtful:
            await h.commit(timeout=0)
        assert not doubtful.value.definite, doubtful_error
    assert h.state is S.COMMITTING_TRANSACTION


async def test_offsets_of_a_failed_send_offsets_are_committed_before_endtxn() -> None:
    h = await reach(S.IN_TRANSACTION)
    h.services.fail("TxnOffsetCommit", CoordinatorNotAvailable("loading"))
    offsets = {TopicPartition("in", 0): OffsetAndMetadata(7)}
    with pytest.raises(RetriableError):
        await h.manager.send_offsets(offsets, GROUP, Deadline(0))
    assert "copiers" not in h.services.committed_offsets
    await h.commit()
    assert h.services.committed_offsets["copiers"] == offsets
    names = h.services.names()
    assert names.index("EndTxn") > max(i for i, name in enumerate(names) if name == "TxnOffsetCommit")


async def test_group_is_added_once_per_transaction() -> None:
    h = await reach(S.IN_TRANSACTION)
    await h.manager.add_offsets("copiers", Deadline(5))
    await h.manager.add_offsets("copiers", Deadline(5))
    assert h.services.names().count("AddOffsetsToTxn") == 1


async def _add_partition(h: Harness, tp: TopicPartition) -> None:
    """What the sender does before a transaction's first batch to ``tp``: add it, and wait for the answer."""
    h.manager.maybe_add_partition(tp)
    h.manager.before_send()
    assert h.manager._add_task is not None
    await h.manager._add_task


async def test_the_groups_of_the_last_transactions_offsets_are_added_with_the_next_ones_first_partitions() -> None:
    """A consume-transform-produce loop spends AddOffsetsToTxn once: the next transaction names the group in its
    AddPartitionsToTxn, and sending its offsets goes straight to TxnOffsetCommit."""
    h = await reach(S.IN_TRANSACTION)
    offsets = {TopicPartition("in", 0): OffsetAndMetadata(7)}
    await _add_partition(h, TP)
    await h.manager.send_offsets(offsets, GROUP, Deadline(5))
    await h.commit()
    assert h.services.names().count("AddOffsetsToTxn") == 1

    h.manager.begin_transaction()
    await _add_partition(h, TP)
    assert h.services.calls[-1] == ("AddPartitionsToTxn", TID, h.sequences.identity, (TP,), ("copiers",))
    await h.manager.send_offsets({TopicPartition("in", 0): OffsetAndMetadata(8)}, GROUP, Deadline(5))
    await h.commit()
    assert h.services.names().count("AddOffsetsToTxn") == 1, "the group came with the partitions"
    assert h.services.committed_offsets["copiers"] == {TopicPartition("in", 0): OffsetAndMetadata(8)}

    # a transaction that sends no offsets still gets the group (it costs the group a marker), the next one no more
    h.manager.begin_transaction()
    await _add_partition(h, TP)
    assert h.services.calls[-1][-1] == ("copiers",)
    await h.commit()
    h.manager.begin_transaction()
    await _add_partition(h, TP)
    assert h.services.calls[-1] == ("AddPartitionsToTxn", TID, h.sequences.identity, (TP,))


async def test_offsets_sent_before_the_sender_added_the_first_partitions_add_them_with_the_group() -> None:
    """send_offsets_to_transaction() right after the first send(): the partitions go first, carrying the group, so
    the carried group still costs no AddOffsetsToTxn (the order the loop's threads happen to take)."""
    h = await reach(S.IN_TRANSACTION)
    await _add_partition(h, TP)
    await h.manager.send_offsets({TopicPartition("in", 0): OffsetAndMetadata(7)}, GROUP, Deadline(5))
    await h.commit()
    h.manager.begin_transaction()
    h.manager.maybe_add_partition(TP)  # the sender has not run yet
    await h.manager.send_offsets({TopicPartition("in", 0): OffsetAndMetadata(8)}, GROUP, Deadline(5))
    second = [n for n in h.services.names()[h.services.names().index("EndTxn") + 1 :] if n != "FindCoordinator"]
    assert second == ["AddPartitionsToTxn", "TxnOffsetCommit"], second
    assert [c for c in h.services.calls if c[0] == "AddPartitionsToTxn"][-1][-1] == ("copiers",)
    h.manager.before_send()  # the sender finds nothing left to add
    assert h.manager._add_task is None or not h.manager._pending_partitions
