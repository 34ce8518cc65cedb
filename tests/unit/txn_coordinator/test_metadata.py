"""Tests of TransactionMetadata transitions: prepare -> complete, invariants, epochs
(design/kafka-semantics.md §2.1-2.6)."""

from __future__ import annotations

import dataclasses

import pytest

from oncelog.errors import ProducerFenced
from oncelog.txn_coordinator.metadata import (
    LAST_USABLE_EPOCH,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    IllegalTransitionError,
    TransactionMetadata,
    TxnTransition,
    is_epoch_exhausted,
)
from oncelog.txn_coordinator.state import TransactionResult, TransactionState

S = TransactionState
TIMEOUT = 60_000
TP0 = ("orders", 0)
TP1 = ("orders", 1)


def fresh(producer_id: int = 7) -> TransactionMetadata:
    return TransactionMetadata.new("txn", producer_id, TIMEOUT, now_ms=100)


def at(state: S, *, epoch: int = 3, last_epoch: int = 2, producer_id: int = 7, **fields: object) -> TransactionMetadata:
    """Metadata as loaded from a row in ``state``."""
    values: dict[str, object] = {
        "state": state,
        "producer_id": producer_id,
        "previous_producer_id": producer_id,
        "next_producer_id": NO_PRODUCER_ID,
        "producer_epoch": epoch,
        "last_producer_epoch": last_epoch,
        "txn_timeout_ms": TIMEOUT,
        "txn_last_update_timestamp": 100,
    }
    if state in (S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT):
        values.update(partitions=frozenset({TP0}), txn_start_timestamp=50)
    if state.is_complete:
        values.update(txn_start_timestamp=50)
    values.update(fields)
    return TransactionMetadata.from_transition("txn", TxnTransition(**values))  # type: ignore[arg-type]


def apply(md: TransactionMetadata, transition: TxnTransition) -> TransactionMetadata:
    md.complete_transition(transition)
    return md


# --------------------------------------------------------------------------------- discipline


def test_new_metadata_is_empty_unpersisted_with_no_epoch() -> None:
    md = fresh()
    assert md.state is S.EMPTY
    assert md.producer_epoch == NO_PRODUCER_EPOCH
    assert not md.is_persisted
    assert md.pending_state is None


def test_prepare_marks_pending_without_changing_state() -> None:
    md = at(S.EMPTY)
    before = md.snapshot()
    transition = md.prepare_add_participants({TP0}, (), now_ms=200)
    assert md.pending_state is S.ONGOING
    assert transition.state is S.ONGOING
    assert md.snapshot() == before


def test_complete_transition_applies_row_and_clears_pending() -> None:
    md = at(S.EMPTY)
    transition = md.prepare_add_participants({TP0}, {"g"}, now_ms=200)
    md.complete_transition(transition)
    assert md.pending_state is None
    assert md.snapshot() == transition
    assert md.partitions == {TP0}
    assert md.groups == {"g"}


def test_second_prepare_while_pending_is_a_bug() -> None:
    md = at(S.EMPTY)
    md.prepare_add_participants({TP0}, (), now_ms=200)
    with pytest.raises(IllegalTransitionError):
        md.prepare_increment_epoch(TIMEOUT, None, now_ms=200)
    assert md.pending_state is S.ONGOING


def test_illegal_transition_is_rejected_and_leaves_no_pending_state() -> None:
    md = at(S.EMPTY)
    with pytest.raises(IllegalTransitionError):
        md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200)
    assert md.pending_state is None
    assert md.state is S.EMPTY


def test_abort_pending_after_failed_write_leaves_metadata_unchanged() -> None:
    md = at(S.ONGOING)
    before = md.snapshot()
    md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200)
    md.abort_pending()
    assert md.pending_state is None
    assert md.snapshot() == before


def test_completing_a_transition_that_is_not_pending_is_a_bug() -> None:
    md = at(S.ONGOING)
    commit = md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200)
    md.abort_pending()
    with pytest.raises(IllegalTransitionError):
        md.complete_transition(commit)


def test_completing_a_tampered_transition_is_a_bug_and_changes_nothing() -> None:
    md = at(S.ONGOING, epoch=3)
    before = md.snapshot()
    commit = md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200)
    with pytest.raises(IllegalTransitionError):
        md.complete_transition(dataclasses.replace(commit, producer_epoch=5))
    assert md.snapshot() == before


def test_ongoing_may_not_lose_partitions() -> None:
    md = at(S.ONGOING, partitions=frozenset({TP0, TP1}))
    add = md.prepare_add_participants((), {"g"}, now_ms=200)
    with pytest.raises(IllegalTransitionError):
        md.complete_transition(dataclasses.replace(add, partitions=frozenset({TP0})))


def test_transition_is_immutable() -> None:
    transition = at(S.EMPTY).prepare_add_participants({TP0}, (), now_ms=200)
    with pytest.raises(dataclasses.FrozenInstanceError):
        transition.producer_epoch = 9  # type: ignore[misc]


def test_replay_restores_every_persisted_field() -> None:
    md = at(S.PREPARE_COMMIT, epoch=LAST_USABLE_EPOCH + 1, last_epoch=LAST_USABLE_EPOCH, next_producer_id=99)
    restored = TransactionMetadata.from_transition("txn", md.snapshot())
    assert restored.snapshot() == md.snapshot()
    assert (restored.next_producer_id, restored.last_producer_epoch) == (99, LAST_USABLE_EPOCH)


# --------------------------------------------------------------------------------- InitProducerId epochs


def test_first_init_gives_epoch_zero() -> None:
    md = fresh()
    t = apply(md, md.prepare_increment_epoch(TIMEOUT, None, now_ms=200)).snapshot()
    assert (t.state, t.producer_id, t.producer_epoch, t.last_producer_epoch) == (S.EMPTY, 7, 0, NO_PRODUCER_EPOCH)
    assert md.is_persisted


def test_new_instance_bumps_epoch_and_forgets_last_epoch() -> None:
    md = at(S.COMPLETE_COMMIT, epoch=4, last_epoch=3)
    t = md.prepare_increment_epoch(TIMEOUT, None, now_ms=200)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, NO_PRODUCER_EPOCH)
    assert t.txn_start_timestamp == NO_TIMESTAMP
    assert not t.partitions


def test_kip360_owner_recovering_bumps_and_records_last_epoch() -> None:
    md = at(S.EMPTY, epoch=4, last_epoch=NO_PRODUCER_EPOCH)
    t = md.prepare_increment_epoch(TIMEOUT, 4, now_ms=200)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)


def test_kip360_retry_of_a_successful_bump_keeps_the_epoch() -> None:
    md = at(S.EMPTY, epoch=5, last_epoch=4)
    t = md.prepare_increment_epoch(TIMEOUT, 4, now_ms=200)
    assert (t.producer_epoch, t.last_producer_epoch) == (5, 4)
    apply(md, t)


def test_kip360_stale_epoch_is_fenced_without_pending_state() -> None:
    md = at(S.EMPTY, epoch=5, last_epoch=NO_PRODUCER_EPOCH)
    with pytest.raises(ProducerFenced):
        md.prepare_increment_epoch(TIMEOUT, 4, now_ms=200)
    assert md.pending_state is None


def test_kip360_caller_epoch_on_fresh_metadata_starts_at_zero() -> None:
    md = fresh()
    t = md.prepare_increment_epoch(TIMEOUT, 10, now_ms=200)
    assert (t.producer_epoch, t.last_producer_epoch) == (0, NO_PRODUCER_EPOCH)


def test_epoch_exhaustion_boundary() -> None:
    assert not is_epoch_exhausted(LAST_USABLE_EPOCH - 1)
    assert is_epoch_exhausted(LAST_USABLE_EPOCH)
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH)


def test_exhausted_epoch_cannot_be_bumped() -> None:
    md = at(S.EMPTY, epoch=LAST_USABLE_EPOCH, last_epoch=LAST_USABLE_EPOCH - 1)
    with pytest.raises(IllegalTransitionError):
        md.prepare_increment_epoch(TIMEOUT, None, now_ms=200)
    assert md.pending_state is None


def test_producer_id_rotation_moves_to_epoch_zero_and_remembers_previous_id() -> None:
    md = at(S.COMPLETE_ABORT, epoch=LAST_USABLE_EPOCH, last_epoch=LAST_USABLE_EPOCH - 1)
    t = apply(md, md.prepare_producer_id_rotation(42, TIMEOUT, now_ms=200, record_last_epoch=True)).snapshot()
    assert (t.producer_id, t.producer_epoch, t.previous_producer_id) == (42, 0, 7)
    assert t.last_producer_epoch == LAST_USABLE_EPOCH


def test_producer_id_rotation_for_new_instance_does_not_record_last_epoch() -> None:
    md = at(S.EMPTY, epoch=LAST_USABLE_EPOCH)
    t = md.prepare_producer_id_rotation(42, TIMEOUT, now_ms=200, record_last_epoch=False)
    assert t.last_producer_epoch == NO_PRODUCER_EPOCH


def test_producer_id_rotation_is_illegal_with_open_transaction() -> None:
    md = at(S.ONGOING, epoch=LAST_USABLE_EPOCH)
    with pytest.raises(IllegalTransitionError):
        md.prepare_producer_id_rotation(42, TIMEOUT, now_ms=200, record_last_epoch=False)


# --------------------------------------------------------------------------------- participants


def test_first_addition_starts_the_transaction_clock() -> None:
    md = at(S.COMPLETE_COMMIT)
    t = apply(md, md.prepare_add_participants({TP0}, (), now_ms=500)).snapshot()
    assert t.txn_start_timestamp == 500
    t = apply(md, md.prepare_add_participants({TP1}, {"g"}, now_ms=900)).snapshot()
    assert t.txn_start_timestamp == 500
    assert t.partitions == {TP0, TP1}
    assert t.groups == {"g"}
    assert t.txn_last_update_timestamp == 900


# --------------------------------------------------------------------------------- EndTxn, fence, complete


@pytest.mark.parametrize("result", list(TransactionResult))
def test_end_transaction_bumps_epoch_and_keeps_participants(result: TransactionResult) -> None:
    md = at(S.ONGOING, epoch=3, last_epoch=NO_PRODUCER_EPOCH, groups=frozenset({"g"}))
    t = apply(md, md.prepare_end_transaction(result, now_ms=200)).snapshot()
    assert t.state is result.prepare_state
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch) == (7, 4, 3)
    assert t.partitions == {TP0}
    assert t.groups == {"g"}
    assert t.txn_start_timestamp == 50


def test_end_transaction_at_last_usable_epoch_requires_next_producer_id() -> None:
    md = at(S.ONGOING, epoch=LAST_USABLE_EPOCH)
    with pytest.raises(IllegalTransitionError):
        md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200)
    t = md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200, next_producer_id=42)
    assert (t.producer_epoch, t.next_producer_id) == (MAX_PRODUCER_EPOCH, 42)


def test_next_producer_id_before_exhaustion_is_a_bug() -> None:
    md = at(S.ONGOING, epoch=3)
    with pytest.raises(IllegalTransitionError):
        md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200, next_producer_id=42)


def test_complete_after_epoch_overflow_rotates_to_next_producer_id() -> None:
    md = at(S.ONGOING, epoch=LAST_USABLE_EPOCH)
    apply(md, md.prepare_end_transaction(TransactionResult.COMMIT, now_ms=200, next_producer_id=42))
    t = apply(md, md.prepare_complete(now_ms=300)).snapshot()
    assert t.state is S.COMPLETE_COMMIT
    assert (t.producer_id, t.producer_epoch, t.previous_producer_id) == (42, 0, 7)
    assert t.last_producer_epoch == LAST_USABLE_EPOCH
    assert t.next_producer_id == NO_PRODUCER_ID


@pytest.mark.parametrize("result", list(TransactionResult))
def test_complete_clears_participants_and_keeps_identity(result: TransactionResult) -> None:
    md = at(S.ONGOING, epoch=3, groups=frozenset({"g"}))
    apply(md, md.prepare_end_transaction(result, now_ms=200))
    t = apply(md, md.prepare_complete(now_ms=300)).snapshot()
    assert t.state is result.complete_state
    assert (t.producer_id, t.producer_epoch) == (7, 4)
    assert not t.partitions
    assert not t.groups


def test_complete_is_illegal_without_decision() -> None:
    md = at(S.ONGOING)
    with pytest.raises(IllegalTransitionError):
        md.prepare_complete(now_ms=300)


def test_fence_and_abort_bumps_once_and_forgets_last_epoch() -> None:
    md = at(S.ONGOING, epoch=3, last_epoch=2)
    t = md.prepare_fence_and_abort(now_ms=200)
    assert md.pending_state is S.PREPARE_ABORT
    assert (t.state, t.producer_epoch, t.last_producer_epoch) == (S.PREPARE_ABORT, 4, NO_PRODUCER_EPOCH)
    assert t.partitions == {TP0}
    apply(md, t)


def test_fence_from_last_usable_epoch_reaches_reserved_epoch() -> None:
    md = at(S.ONGOING, epoch=LAST_USABLE_EPOCH)
    assert md.prepare_fence_and_abort(now_ms=200).producer_epoch == MAX_PRODUCER_EPOCH


@pytest.mark.parametrize("state", [S.EMPTY, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.COMPLETE_COMMIT])
def test_fence_only_applies_to_ongoing_transactions(state: S) -> None:
    md = at(state)
    with pytest.raises(IllegalTransitionError):
        md.prepare_fence_and_abort(now_ms=200)
    assert md.pending_state is None


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_abort_when_unsure_has_no_participants_and_starts_now(state: S) -> None:
    md = at(state, epoch=3)
    t = apply(md, md.prepare_end_transaction(TransactionResult.ABORT, now_ms=700)).snapshot()
    assert (t.state, t.producer_epoch, t.txn_start_timestamp) == (S.PREPARE_ABORT, 4, 700)
    assert not t.partitions


@pytest.mark.parametrize("state", [S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT])
def test_dead_transition_for_expirable_states(state: S) -> None:
    md = at(state)
    t = md.prepare_dead()
    assert t.state is S.DEAD
    apply(md, t)
    assert md.state is S.DEAD


@pytest.mark.parametrize("state", [S.ONGOING, S.PREPARE_COMMIT, S.PREPARE_ABORT])
def test_open_transactions_cannot_die(state: S) -> None:
    with pytest.raises(IllegalTransitionError):
        at(state).prepare_dead()


def test_every_transition_persists_kip360_fields() -> None:
    """KAFKA-20357: previous/next producer id and last epoch are part of the stored row."""
    md = at(S.EMPTY, epoch=5, last_epoch=NO_PRODUCER_EPOCH)
    t = md.prepare_increment_epoch(TIMEOUT, 5, now_ms=200)
    row_fields = {f.name for f in dataclasses.fields(TxnTransition)}
    assert {"previous_producer_id", "next_producer_id", "last_producer_epoch"} <= row_fields
    assert (t.previous_producer_id, t.last_producer_epoch) == (7, 5)
