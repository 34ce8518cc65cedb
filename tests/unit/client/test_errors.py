"""Error classification (design/kafka-semantics.md §2.11, §4.2, §5.1 to §5.3) and the exception classes users catch."""

from __future__ import annotations

import pytest

from oncelog.client.errors import (
    AbortableError,
    Action,
    BufferExhaustedError,
    Disposition,
    FatalError,
    IllegalStateError,
    InvalidProducerEpochError,
    ProducerFencedError,
    Refresh,
    RetriableError,
    classify,
    may_have_taken_effect,
)
from oncelog.errors import (
    ConcurrentTransactions,
    InvalidTxnState,
    NetworkException,
    NotCoordinator,
    NotLeader,
    OncelogError,
    OutOfOrderSequence,
    ProducerFenced,
    Reason,
    StorageUnavailable,
    UnknownServerError,
    error_for,
)

# Column order of the table: the six calling contexts the client distinguishes.
CONTEXTS = (
    ("produce", False),  # idempotent producer's batch
    ("produce", True),  # transactional producer's batch
    ("coordinator", True),  # InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn
    ("group", False),  # consumer CommitOffsets / FetchOffsets
    ("group", True),  # TxnOffsetCommit
    ("fetch", False),  # Fetch, ListOffsets
)

# Shorthand: action[:refresh][+bump]
DEFINITE_FAILURE = ("fail+bump", "abort+bump", "fatal", "fail", "fatal", "fail")
RETRY_ALL = ("retry",) * 6
RETRY_METADATA = ("retry:metadata",) * 6
RETRY_COORDINATOR = ("retry:coordinator",) * 6
GROUP_MEMBERSHIP = ("fail+bump", "abort+bump", "fatal", "fail", "abort", "fail")

# The expected client reaction to each reason, written from the reference tables (not from the code).
# Every reason the wire can carry must appear here; test_table_covers_every_reason enforces it.
EXPECTED: dict[Reason, tuple[str, ...]] = {
    Reason.UNKNOWN_SERVER_ERROR: RETRY_ALL,  # indeterminate by default
    Reason.INVALID_REQUEST: DEFINITE_FAILURE,
    Reason.CORRUPT_MESSAGE: RETRY_ALL,
    Reason.INVALID_RECORD: DEFINITE_FAILURE,
    Reason.MESSAGE_TOO_LARGE: DEFINITE_FAILURE,
    Reason.UNKNOWN_TOPIC_OR_PARTITION: RETRY_METADATA,
    Reason.TOPIC_ALREADY_EXISTS: DEFINITE_FAILURE,
    Reason.INVALID_TOPIC: DEFINITE_FAILURE,
    Reason.INVALID_PARTITIONS: DEFINITE_FAILURE,
    Reason.INVALID_CONFIG: DEFINITE_FAILURE,
    Reason.INVALID_REPLICATION_FACTOR: DEFINITE_FAILURE,
    Reason.NOT_ENOUGH_REPLICAS: RETRY_ALL,
    Reason.NOT_LEADER: RETRY_METADATA,
    Reason.FENCED_LEADER_EPOCH: RETRY_METADATA,
    Reason.UNKNOWN_LEADER_EPOCH: RETRY_METADATA,
    Reason.OFFSET_OUT_OF_RANGE: ("fail+bump", "abort+bump", "fatal", "fail", "fatal", "reset"),
    Reason.NOT_COORDINATOR: RETRY_COORDINATOR,
    Reason.COORDINATOR_NOT_AVAILABLE: RETRY_COORDINATOR,
    Reason.COORDINATOR_LOAD_IN_PROGRESS: RETRY_ALL,
    Reason.PRODUCER_FENCED: ("fatal",) * 6,
    # KIP-588: abortable on produce, fencing from the coordinator and the group offsets service
    Reason.INVALID_PRODUCER_EPOCH: ("fail+bump", "abort+bump", "fatal", "fatal", "fatal", "fatal"),
    Reason.INVALID_PRODUCER_ID_MAPPING: ("fail+bump", "abort+bump", "abort+bump", "fail", "abort+bump", "fail"),
    Reason.UNKNOWN_PRODUCER_ID: ("retry+bump", "abort+bump", "abort+bump", "retry", "retry", "retry"),
    # KIP-360: local epoch bump for an idempotent producer, abort + bump for a transactional one
    Reason.OUT_OF_ORDER_SEQUENCE: ("retry+bump", "abort+bump", "fatal", "fail", "fatal", "fail"),
    Reason.DUPLICATE_SEQUENCE: ("complete", "complete", "fatal", "fail", "fatal", "fail"),
    # fatal from coordinator RPCs, abortable on produce
    Reason.INVALID_TXN_STATE: DEFINITE_FAILURE,
    Reason.INVALID_TRANSACTION_TIMEOUT: DEFINITE_FAILURE,
    Reason.CONCURRENT_TRANSACTIONS: RETRY_ALL,
    Reason.TRANSACTION_COORDINATOR_FENCED: DEFINITE_FAILURE,
    Reason.TRANSACTIONAL_ID_NOT_FOUND: DEFINITE_FAILURE,
    Reason.TRANSACTION_ABORTABLE: ("fail+bump", "abort+bump", "abort", "fail", "abort", "fail"),
    Reason.UNSTABLE_OFFSET_COMMIT: RETRY_ALL,
    # KIP-447: a stale generation fails a consumer commit and makes a transactional one abortable
    Reason.ILLEGAL_GENERATION: GROUP_MEMBERSHIP,
    Reason.UNKNOWN_MEMBER_ID: GROUP_MEMBERSHIP,
    # KIP-848 member epochs fence the same way (design/consumer-groups.md §6)
    Reason.STALE_MEMBER_EPOCH: GROUP_MEMBERSHIP,
    Reason.FENCED_MEMBER_EPOCH: GROUP_MEMBERSHIP,
    Reason.UNRELEASED_INSTANCE_ID: DEFINITE_FAILURE,
    Reason.UNSUPPORTED_ASSIGNOR: DEFINITE_FAILURE,
    Reason.INVALID_REGULAR_EXPRESSION: DEFINITE_FAILURE,
    Reason.GROUP_ID_NOT_FOUND: DEFINITE_FAILURE,
    Reason.NON_EMPTY_GROUP: DEFINITE_FAILURE,
    Reason.STALE_REQUESTER_EPOCH: DEFINITE_FAILURE,
    Reason.PRODUCER_ID_SPACE_EXHAUSTED: DEFINITE_FAILURE,
    Reason.REQUEST_TIMED_OUT: ("retry", "retry", "retry", "retry:coordinator", "retry:coordinator", "retry"),
    Reason.STORAGE_UNAVAILABLE: RETRY_ALL,
    Reason.NETWORK_EXCEPTION: (
        "retry:metadata",
        "retry:metadata",
        "retry:coordinator",
        "retry:coordinator",
        "retry:coordinator",
        "retry:metadata",
    ),
}

_ACTIONS = {
    "retry": Action.RETRY,
    "abort": Action.ABORTABLE,
    "fatal": Action.FATAL,
    "fail": Action.FAIL,
    "complete": Action.COMPLETE,
    "reset": Action.RESET_POSITION,
}


def parse(code: str) -> Disposition:
    bump = code.endswith("+bump")
    code = code.removesuffix("+bump")
    name, _, refresh = code.partition(":")
    return Disposition(_ACTIONS[name], Refresh(refresh) if refresh else Refresh.NONE, bump)


def test_table_covers_every_reason() -> None:
    assert set(EXPECTED) == set(Reason)
    assert all(len(row) == len(CONTEXTS) for row in EXPECTED.values())


@pytest.mark.parametrize("reason", list(Reason), ids=lambda reason: reason.name)
def test_classification_of_every_reason(reason: Reason) -> None:
    err = error_for(reason, "from the server")
    got = [classify(err, source=source, transactional=txn) for source, txn in CONTEXTS]  # type: ignore[arg-type]
    assert got == [parse(code) for code in EXPECTED[reason]]


def test_indeterminate_commit_is_retried_not_aborted() -> None:
    # EndTxn(commit) whose answer was lost: the commit may have happened, so only a retry of the
    # same commit is correct; an abort would contradict a commit the coordinator already decided.
    for reason in Reason:
        if reason in (Reason.PRODUCER_FENCED, Reason.INVALID_PRODUCER_EPOCH):
            continue
        err = error_for(reason, "EndTxn answer lost", definite=False)
        disposition = classify(err, source="coordinator", transactional=True)
        assert disposition.action is Action.RETRY, reason
        user_error = disposition.user_error(err)
        assert isinstance(user_error, RetriableError)
        assert not isinstance(user_error, AbortableError)
        assert user_error.definite is False


def test_indeterminate_produce_is_retried_with_the_same_identity() -> None:
    for err in (UnknownServerError("boom"), StorageUnavailable("disk"), NetworkException("reset")):
        for transactional in (False, True):
            disposition = classify(err, source="produce", transactional=transactional)
            assert disposition.action is Action.RETRY
            assert disposition.epoch_bump is False  # never "repaired" by resetting sequences
            # (design/architecture.md §1.7)


def test_invalid_txn_state_is_fatal_from_coordinator_but_abortable_on_produce() -> None:
    err = InvalidTxnState("partition not in transaction")
    assert classify(err, source="coordinator").action is Action.FATAL
    on_produce = classify(err, source="produce", transactional=True)
    assert on_produce == Disposition(Action.ABORTABLE, epoch_bump=True)
    assert isinstance(on_produce.user_error(err), AbortableError)


def test_out_of_order_on_transactional_producer_requires_epoch_bump() -> None:
    err = OutOfOrderSequence("expected 5, got 9")
    user_error = classify(err, source="produce", transactional=True).user_error(err)
    assert isinstance(user_error, AbortableError)
    assert user_error.epoch_bump_required is True
    assert user_error.reason is Reason.OUT_OF_ORDER_SEQUENCE


def test_invalid_producer_epoch_from_coordinator_is_producer_fenced() -> None:
    err = error_for(Reason.INVALID_PRODUCER_EPOCH, "epoch 3 < 4")
    user_error = classify(err, source="coordinator").user_error(err)
    assert isinstance(user_error, InvalidProducerEpochError)
    assert isinstance(user_error, ProducerFencedError)
    assert isinstance(user_error, FatalError)
    on_produce = classify(err, source="produce", transactional=True).user_error(err)
    assert isinstance(on_produce, AbortableError) and not isinstance(on_produce, FatalError)


def test_producer_fenced_user_error_keeps_reason_flags_metadata_and_cause() -> None:
    err = ProducerFenced("a newer instance owns txn-1", metadata={"transactional_id": "txn-1"})
    user_error = classify(err, source="coordinator").user_error(err)
    assert type(user_error) is ProducerFencedError
    assert user_error.reason is Reason.PRODUCER_FENCED
    assert user_error.metadata == {"transactional_id": "txn-1"}
    assert user_error.cause is err and user_error.__cause__ is err
    assert user_error.retriable is False and user_error.definite is True
    assert "close this producer" in user_error.message


def test_fail_returns_the_domain_error_itself() -> None:
    err = error_for(Reason.MESSAGE_TOO_LARGE, "batch of 2 MiB")
    assert classify(err, source="produce").user_error(err) is err


def test_flags_sent_by_the_server_override_the_reason_defaults() -> None:
    definite_unknown = UnknownServerError("failed before writing", definite=True)
    assert classify(definite_unknown, source="coordinator").action is Action.FATAL
    assert classify(definite_unknown, source="produce") == Disposition(Action.FAIL, epoch_bump=True)
    not_retriable = NotLeader("moved")
    not_retriable.retriable = False
    assert classify(not_retriable, source="produce", transactional=True).action is Action.ABORTABLE


def test_a_retriable_flag_on_a_reason_the_retry_table_does_not_retry_is_no_retry() -> None:
    """classify reads retries from the one table (design/client.md §2): the server's flag can only veto one."""
    flagged = error_for(Reason.MESSAGE_TOO_LARGE, "batch of 2 MiB")
    flagged.retriable = True
    assert classify(flagged, source="fetch").action is Action.FAIL
    assert classify(flagged, source="produce") == Disposition(Action.FAIL, epoch_bump=True)
    assert classify(flagged, source="coordinator").action is Action.FATAL


def test_unknown_source_is_rejected() -> None:
    with pytest.raises(ValueError, match="unknown error source 'admin'"):
        classify(NotLeader("x"), source="admin")  # type: ignore[arg-type]


def test_client_errors_are_oncelog_errors_with_sensible_flags() -> None:
    exhausted = BufferExhaustedError("buffer_memory is full")
    assert isinstance(exhausted, RetriableError) and isinstance(exhausted, OncelogError)
    assert exhausted.retriable is True and exhausted.definite is True
    illegal = IllegalStateError("commit_transaction() before begin_transaction()")
    assert illegal.reason is Reason.INVALID_REQUEST and illegal.definite is True and illegal.retriable is False
    fatal = FatalError("the producer is closed")
    assert fatal.cause is None and fatal.retriable is False


def test_a_commit_attempt_is_unproven_unless_a_coordinator_said_it_did_nothing() -> None:
    # NOT_COORDINATOR can come from a coordinator that lost its shard after PrepareCommit was durable
    assert may_have_taken_effect(NotCoordinator("shard changed owner while writing", definite=True), sent=True)
    assert may_have_taken_effect(NetworkException("stream reset", definite=False), sent=True)
    assert not may_have_taken_effect(ConcurrentTransactions("previous one completing", definite=True), sent=True)
    assert not may_have_taken_effect(NetworkException("no coordinator found", definite=False), sent=False)
