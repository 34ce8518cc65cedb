"""Tests of the transaction state table (design/kafka-semantics.md §2.2)."""

from __future__ import annotations

import pytest

from oncelog.txn_coordinator.state import VALID_PREVIOUS_STATES, TransactionResult, TransactionState

S = TransactionState

# design/kafka-semantics.md §2.2, written out independently of the implementation: 2024 column plus the TV2 additions,
# plus PREPARED (design/kafka-semantics.md §5.7): entered from Ongoing or kept by a new owner; left by a decision.
REFERENCE_TABLE = {
    S.EMPTY: {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.ONGOING: {S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.PREPARED: {S.ONGOING, S.PREPARED},
    S.PREPARE_COMMIT: {S.ONGOING, S.PREPARED},
    S.PREPARE_ABORT: {S.ONGOING, S.PREPARED, S.PREPARE_EPOCH_FENCE, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT},
    S.COMPLETE_COMMIT: {S.PREPARE_COMMIT},
    S.COMPLETE_ABORT: {S.PREPARE_ABORT},
    S.DEAD: {S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT},
    S.PREPARE_EPOCH_FENCE: {S.ONGOING, S.PREPARED},
}


def test_valid_previous_states_match_reference_table() -> None:
    assert {state: set(previous) for state, previous in VALID_PREVIOUS_STATES.items()} == REFERENCE_TABLE


def test_state_ids_are_kafkas_transaction_log_ids() -> None:
    ids = {state.name: state.value for state in TransactionState}
    assert ids == {
        "EMPTY": 0,
        "ONGOING": 1,
        "PREPARE_COMMIT": 2,
        "PREPARE_ABORT": 3,
        "COMPLETE_COMMIT": 4,
        "COMPLETE_ABORT": 5,
        "DEAD": 6,
        "PREPARE_EPOCH_FENCE": 7,
        "PREPARED": 8,  # not Kafka's: the next free id
    }


def test_table_cannot_be_modified() -> None:
    with pytest.raises(TypeError):
        VALID_PREVIOUS_STATES[S.EMPTY] = frozenset()  # type: ignore[index]


@pytest.mark.parametrize("target", list(TransactionState))
@pytest.mark.parametrize("previous", list(TransactionState))
def test_can_follow_agrees_with_table(previous: TransactionState, target: TransactionState) -> None:
    assert target.can_follow(previous) is (previous in REFERENCE_TABLE[target])


def test_a_commit_decision_can_only_be_completed() -> None:
    followers = {target for target in TransactionState if target.can_follow(S.PREPARE_COMMIT)}
    assert followers == {S.COMPLETE_COMMIT}


def test_an_abort_decision_can_only_be_completed() -> None:
    followers = {target for target in TransactionState if target.can_follow(S.PREPARE_ABORT)}
    assert followers == {S.COMPLETE_ABORT}


def test_epoch_fence_only_leads_to_prepare_abort() -> None:
    followers = {target for target in TransactionState if target.can_follow(S.PREPARE_EPOCH_FENCE)}
    assert followers == {S.PREPARE_ABORT}


def test_prepared_leads_only_to_a_decision_a_new_owner_or_a_fence() -> None:
    followers = {target for target in TransactionState if target.can_follow(S.PREPARED)}
    assert followers == {S.PREPARED, S.PREPARE_COMMIT, S.PREPARE_ABORT, S.PREPARE_EPOCH_FENCE}


def test_dead_is_terminal() -> None:
    assert not any(target.can_follow(S.DEAD) for target in TransactionState)


def test_expirable_states_are_those_without_open_transaction() -> None:
    assert {s for s in TransactionState if s.is_expirable} == {S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert not any(s.is_expirable and s.has_open_transaction for s in TransactionState)


def test_state_predicates() -> None:
    assert {s for s in TransactionState if s.is_prepare} == {S.PREPARE_COMMIT, S.PREPARE_ABORT}
    assert {s for s in TransactionState if s.is_complete} == {S.COMPLETE_COMMIT, S.COMPLETE_ABORT}
    assert {s for s in TransactionState if s.has_open_transaction} == {
        S.ONGOING,
        S.PREPARED,
        S.PREPARE_COMMIT,
        S.PREPARE_ABORT,
    }
    assert {s for s in TransactionState if s.is_transient} == {S.DEAD, S.PREPARE_EPOCH_FENCE}


def test_transaction_result_states() -> None:
    assert TransactionResult.COMMIT.prepare_state is S.PREPARE_COMMIT
    assert TransactionResult.COMMIT.complete_state is S.COMPLETE_COMMIT
    assert TransactionResult.ABORT.prepare_state is S.PREPARE_ABORT
    assert TransactionResult.ABORT.complete_state is S.COMPLETE_ABORT
    for result in TransactionResult:
        assert result.complete_state.can_follow(result.prepare_state)
