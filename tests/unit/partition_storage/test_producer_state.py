"""Tests for per-partition producer state: dedup, fencing, transactions, LSO, expiry and snapshots.

The first group ports Kafka's ``ProducerStateManagerTest`` (design/kafka-semantics.md §8 S5) one scenario per test; the
rest cover
the product guarantees of design/architecture.md §1 with named tests, then randomised checks against simple models.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from oncelog.errors import (
    CorruptMessage,
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    OncelogError,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from oncelog.partition_storage.producer_state import (
    MAX_SEQUENCE,
    NO_SEQUENCE,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    OngoingTxn,
    ProducerAppendInfo,
    ProducerDescription,
    ProducerStateEntry,
    ProducerStateManager,
    next_sequence,
)
from oncelog.partition_storage.txn_index import AbortedTxn, TransactionIndex, collect_aborted_txns
from oncelog.vocabulary import ControlType

EXPIRATION_MS = 86_400_000
MAX_TXN_TIMEOUT_MS = 5 * 60 * 1000
LATE_TXN_MS = MAX_TXN_TIMEOUT_MS + 5 * 60 * 1000
PID = 1
EPOCH = 0


class FakeClock:
    """Settable millisecond clock."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def state(clock: FakeClock) -> ProducerStateManager:
    return ProducerStateManager(producer_id_expiration_ms=EXPIRATION_MS, clock=clock)


def reload(state: ProducerStateManager, clock: FakeClock) -> ProducerStateManager:
    """Restart: a fresh manager from the current state's snapshot."""
    return ProducerStateManager.from_snapshot(state.snapshot(), producer_id_expiration_ms=EXPIRATION_MS, clock=clock)


def append_data(
    state: ProducerStateManager,
    pid: int,
    epoch: int,
    seq: int,
    offset: int,
    *,
    last_seq: int | None = None,
    last_offset: int | None = None,
    txn: bool = False,
    origin: AppendOrigin = AppendOrigin.CLIENT,
    timestamp: int = 0,
) -> ProducerAppendInfo:
    """One append request holding one data batch, committed if valid."""
    info = state.prepare_append(origin)
    info.append_data_batch(
        pid,
        epoch,
        seq,
        seq if last_seq is None else last_seq,
        offset,
        offset if last_offset is None else last_offset,
        timestamp,
        txn,
    )
    state.commit(info)
    return info


def append_marker(
    state: ProducerStateManager,
    pid: int,
    epoch: int,
    control: ControlType,
    offset: int,
    *,
    coordinator_epoch: int = 0,
    origin: AppendOrigin = AppendOrigin.COORDINATOR,
    timestamp: int = 0,
    strict: bool = False,
) -> CompletedTxn | None:
    """One append request holding one marker, committed if valid."""
    info = state.prepare_append(origin)
    completed = info.append_marker(pid, epoch, control, coordinator_epoch, offset, timestamp, strict_epoch=strict)
    state.commit(info)
    return completed


def entry(state: ProducerStateManager, pid: int = PID) -> ProducerStateEntry:
    found = state.last_entry(pid)
    assert found is not None, f"producer {pid} should be known"
    return found


@dataclass
class Batch:
    """A batch as the test partition stored it."""

    producer_id: int
    first_offset: int
    last_offset: int
    transactional: bool
    control: ControlType | None = None


@dataclass
class Partition:
    """Drives the state the way the partition log does (module docstring of producer_state), on one segment."""

    state: ProducerStateManager
    leo: int = 0
    hw: int = 0
    index: TransactionIndex = field(default_factory=lambda: TransactionIndex(0))
    batches: list[Batch] = field(default_factory=list)

    def produce(self, pid: int, epoch: int, first_seq: int, count: int = 1, *, txn: bool = False) -> tuple[int, int]:
        """Returns the batch's (first, last) offsets: new ones, or the original ones for a duplicate."""
        last_seq = (first_seq + count - 1) % (MAX_SEQUENCE + 1)
        duplicate = self.state.check_duplicate(pid, epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate.first_offset, duplicate.last_offset
        info = self.state.prepare_append(AppendOrigin.CLIENT)
        first, last = self.leo, self.leo + count - 1
        info.append_data_batch(pid, epoch, first_seq, last_seq, first, last, 0, txn)
        self.batches.append(Batch(pid, first, last, txn))
        self.state.commit(info)
        self.leo = last + 1
        return first, last

    def marker(
        self, pid: int, epoch: int, control: ControlType, coordinator_epoch: int = 0, *, strict: bool = False
    ) -> bool:
        """Returns whether a marker was written (False: acknowledged as already applied)."""
        if self.state.marker_already_applied(pid, epoch, coordinator_epoch):
            return False
        info = self.state.prepare_append(AppendOrigin.COORDINATOR)
        info.append_marker(pid, epoch, control, coordinator_epoch, self.leo, 0, strict_epoch=strict)
        self.batches.append(Batch(pid, self.leo, self.leo, True, control))
        for aborted in info.aborted_txns:
            self.index.append(aborted)
        self.state.commit(info)
        self.leo += 1
        return True

    def flush(self) -> None:
        self.hw = self.leo
        self.state.on_high_watermark_update(self.hw)

    @property
    def lso(self) -> int:
        return self.state.last_stable_offset(self.hw)

    def read_committed(self) -> list[int]:
        """Offsets a read_committed consumer returns: capped at the LSO, aborted data dropped
        (design/kafka-semantics.md §4.5)."""
        lso = self.lso
        pending = [(t.first_offset, t.producer_id) for t in collect_aborted_txns([self.index], 0, lso)]
        heapq.heapify(pending)
        aborted_pids: set[int] = set()
        visible: list[int] = []
        for batch in self.batches:
            if batch.first_offset >= lso:
                break
            while pending and pending[0][0] <= batch.last_offset:
                aborted_pids.add(heapq.heappop(pending)[1])
            if batch.control is not None:
                if batch.control is ControlType.ABORT:
                    aborted_pids.discard(batch.producer_id)
                continue
            if batch.transactional and batch.producer_id in aborted_pids:
                continue
            visible.extend(range(batch.first_offset, batch.last_offset + 1))
        return visible


# ------------------------------------------------------------------------------------------------------------
# Ports of Kafka's ProducerStateManagerTest (design/kafka-semantics.md §8 S5)
# ------------------------------------------------------------------------------------------------------------


def test_basic_id_mapping(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0)
    append_data(state, PID, EPOCH, 1, 1)

    # A duplicate reaching validation (not caught by check_duplicate) is out of order.
    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, EPOCH, 1, 2)
    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, EPOCH, 5, 2)

    append_data(state, PID, EPOCH + 1, 0, 3)
    with pytest.raises(InvalidProducerEpoch):
        append_data(state, PID, EPOCH, 0, 4)
    assert (entry(state).producer_epoch, entry(state).last_seq) == (EPOCH + 1, 0)


def test_append_txn_marker_with_no_producer_state(state: ProducerStateManager) -> None:
    append_marker(state, PID, 2, ControlType.COMMIT, 27)
    first = entry(state)
    assert (first.producer_epoch, first.producer_id, first.last_seq) == (2, PID, NO_SEQUENCE)

    # Fencing holds even when the marker is all that is left of the producer.
    with pytest.raises(InvalidProducerEpoch):
        append_data(state, PID, 0, 0, 28)
    # A marker-only entry knows the epoch, so sequences restart at 0.
    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, 2, 17, 28)
    append_data(state, PID, 2, 0, 28)

    assert (entry(state).producer_epoch, entry(state).last_seq) == (2, 0)


def test_producer_sequence_wrap_around(state: ProducerStateManager) -> None:
    append_data(state, PID, 15, MAX_SEQUENCE, 735, origin=AppendOrigin.REPLICATION)
    append_data(state, PID, 15, 0, 1235)

    assert (entry(state).first_seq, entry(state).last_seq) == (MAX_SEQUENCE, 0)


def test_producer_sequence_invalid_wrap_around(state: ProducerStateManager) -> None:
    append_data(state, PID, 15, MAX_SEQUENCE, 735, origin=AppendOrigin.REPLICATION)

    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, 15, 1, 1235)


def test_producer_sequence_with_wrap_around_batch(state: ProducerStateManager) -> None:
    append_data(state, PID, 15, MAX_SEQUENCE - 10, 2000, last_seq=9, last_offset=2020, origin=AppendOrigin.REPLICATION)
    loaded = entry(state)
    assert (loaded.first_seq, loaded.last_seq, loaded.first_data_offset, loaded.last_data_offset) == (
        MAX_SEQUENCE - 10,
        9,
        2000,
        2020,
    )

    append_data(state, PID, 15, 10, 2021)
    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, 15, 12, 2022)


def test_client_batch_spanning_the_wrap_is_valid(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, MAX_SEQUENCE - 5, 0, origin=AppendOrigin.REPLICATION)

    append_data(state, PID, EPOCH, MAX_SEQUENCE - 4, 1, last_seq=3, last_offset=9)

    assert entry(state).last_seq == 3
    assert next_sequence(MAX_SEQUENCE) == 0


def test_no_validation_on_first_entry_when_loading_log(state: ProducerStateManager) -> None:
    append_data(state, PID, 5, 16, 735, origin=AppendOrigin.REPLICATION)

    loaded = entry(state)
    assert (loaded.producer_epoch, loaded.first_seq, loaded.last_seq) == (5, 16, 16)
    assert (loaded.first_data_offset, loaded.last_data_offset) == (735, 735)


def test_control_record_bumps_producer_epoch(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0)

    append_marker(state, PID, 1, ControlType.ABORT, 1)

    bumped = entry(state)
    assert bumped.producer_epoch == 1
    assert bumped.current_txn_first_offset is None
    assert (bumped.first_seq, bumped.last_seq) == (NO_SEQUENCE, NO_SEQUENCE)
    append_data(state, PID, 1, 0, 2)
    assert entry(state).first_seq == 0


def test_prepare_append_does_not_mutate(state: ProducerStateManager) -> None:
    info = state.prepare_append(AppendOrigin.CLIENT)
    info.append_data_batch(PID, EPOCH, 0, 5, 15, 20, 0, False)
    assert state.last_entry(PID) is None
    state.commit(info)

    following = state.prepare_append(AppendOrigin.CLIENT)
    following.append_data_batch(PID, EPOCH, 6, 10, 26, 30, 0, False)
    assert (entry(state).first_seq, entry(state).last_seq, entry(state).last_data_offset) == (0, 5, 20)

    state.commit(following)
    assert (entry(state).first_seq, entry(state).last_seq, entry(state).last_data_offset) == (0, 10, 30)


def test_update_producer_transaction_state(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 9)
    info = state.prepare_append(AppendOrigin.CLIENT)

    info.append_data_batch(PID, EPOCH, 1, 5, 16, 20, 0, True)
    info.append_data_batch(PID, EPOCH, 6, 10, 26, 30, 0, True)
    staged = info.staged_entry(PID)
    assert staged is not None
    assert (staged.last_seq, staged.last_data_offset, staged.current_txn_first_offset) == (10, 30, 16)
    assert info.started_txns == (OngoingTxn(PID, 16),)

    completed = info.append_marker(PID, EPOCH, ControlType.COMMIT, 15, 40, 0)

    assert completed == CompletedTxn(PID, 16, 40, is_aborted=False)
    after_marker = info.staged_entry(PID)
    assert after_marker is not None
    # The marker leaves the cached batches alone and closes the transaction.
    assert (after_marker.first_seq, after_marker.last_seq, after_marker.last_data_offset) == (0, 10, 30)
    assert after_marker.current_txn_first_offset is None
    assert after_marker.coordinator_epoch == 15


def test_out_of_sequence_after_control_record_epoch_bump(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)
    append_data(state, PID, EPOCH, 1, 1, txn=True)
    append_marker(state, PID, 1, ControlType.ABORT, 2)

    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, 1, 2, 3, txn=True)
    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, 2, 2, 3, txn=True)

    append_data(state, PID, 1, 0, 3, txn=True)
    assert (entry(state).producer_epoch, entry(state).last_seq) == (1, 0)


def test_non_transactional_append_with_ongoing_transaction(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)

    with pytest.raises(InvalidTxnState):
        append_data(state, PID, EPOCH, 1, 1, txn=False)
    assert entry(state).last_seq == 0


def test_old_epoch_for_control_record(state: ProducerStateManager) -> None:
    append_data(state, PID, 5, 0, 99, txn=True)

    with pytest.raises(InvalidProducerEpoch):
        append_marker(state, PID, 3, ControlType.COMMIT, 100)
    assert state.first_undecided_offset() == 99


def test_coordinator_fencing(state: ProducerStateManager) -> None:
    append_data(state, PID, 5, 0, 99, txn=True)
    append_marker(state, PID, 5, ControlType.COMMIT, 100, coordinator_epoch=1)
    assert entry(state).coordinator_epoch == 1

    append_marker(state, PID, 5, ControlType.COMMIT, 101, coordinator_epoch=1)
    append_marker(state, PID, 5, ControlType.COMMIT, 102, coordinator_epoch=2)
    with pytest.raises(TransactionCoordinatorFenced):
        append_marker(state, PID, 5, ControlType.COMMIT, 103, coordinator_epoch=1)
    assert entry(state).coordinator_epoch == 2


def test_coordinator_fenced_after_reload(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, EPOCH, 0, 99, txn=True)
    append_marker(state, PID, EPOCH, ControlType.COMMIT, 100, coordinator_epoch=1)

    recovered = reload(state, clock)

    with pytest.raises(TransactionCoordinatorFenced):
        append_marker(recovered, PID, EPOCH, ControlType.COMMIT, 101, coordinator_epoch=0)


def test_sequence_not_validated_for_coordinator_origin(state: ProducerStateManager) -> None:
    # The group-offsets service writes transactional offset commits without sequences.
    append_data(state, PID, 5, NO_SEQUENCE, 99, txn=True, origin=AppendOrigin.COORDINATOR)
    append_data(state, PID, 5, NO_SEQUENCE, 100, txn=True, origin=AppendOrigin.COORDINATOR)

    assert state.first_undecided_offset() == 99
    with pytest.raises(InvalidProducerEpoch):
        append_data(state, PID, 4, NO_SEQUENCE, 101, txn=True, origin=AppendOrigin.COORDINATOR)


def test_first_unstable_offset(state: ProducerStateManager) -> None:
    other = 2
    assert state.first_undecided_offset() is None

    append_data(state, PID, 5, 0, 99, txn=True)
    assert (state.first_undecided_offset(), state.first_unstable_offset()) == (99, 99)

    append_data(state, other, 5, 0, 105, txn=True)
    assert (state.first_undecided_offset(), state.first_unstable_offset()) == (99, 99)

    append_marker(state, PID, 5, ControlType.COMMIT, 109)
    assert (state.first_undecided_offset(), state.first_unstable_offset()) == (105, 99)

    state.on_high_watermark_update(100)
    assert state.first_unstable_offset() == 99
    state.on_high_watermark_update(109)  # the marker itself is not below the high watermark yet
    assert state.first_unstable_offset() == 99
    state.on_high_watermark_update(110)
    assert state.first_unstable_offset() == 105

    append_marker(state, other, 5, ControlType.ABORT, 112)
    assert state.first_undecided_offset() is None
    assert state.first_unstable_offset() == 105

    state.on_high_watermark_update(113)
    assert state.first_unstable_offset() is None
    assert state.last_stable_offset(113) == 113


def test_last_stable_offset_completed_txn(state: ProducerStateManager) -> None:
    pid1, pid2, pid3 = PID, PID + 1, PID + 2
    start1 = 992_342
    start2, start3 = start1 + 25, start1 + 57
    for pid, start in ((pid1, start1), (pid2, start2), (pid3, start3)):
        append_data(state, pid, EPOCH, 0, start, txn=True)

    def abort(pid: int, marker: int) -> AbortedTxn:
        info = state.prepare_append(AppendOrigin.COORDINATOR)
        info.append_marker(pid, EPOCH, ControlType.ABORT, 0, marker, 0)
        state.commit(info)
        (aborted,) = info.aborted_txns
        state.on_high_watermark_update(marker + 1)
        return aborted

    last1 = start3 + 15
    assert abort(pid1, last1).last_stable_offset == start2
    assert state.first_unstable_offset() == start2

    last3 = last1 + 20
    assert abort(pid3, last3).last_stable_offset == start2
    assert state.first_unstable_offset() == start2

    last2 = last3 + 78
    assert abort(pid2, last2).last_stable_offset == last2 + 1
    assert state.first_unstable_offset() is None


def test_skip_empty_transactions(state: ProducerStateManager) -> None:
    seq = 0

    def data(info: ProducerAppendInfo, first: int, last: int) -> None:
        nonlocal seq
        info.append_data_batch(PID, EPOCH, seq, seq + last - first, first, last, 0, True)
        seq += last - first + 1

    first_append = state.prepare_append(AppendOrigin.CLIENT)
    data(first_append, 16, 20)
    assert first_append.started_txns == (OngoingTxn(PID, 16),)
    state.commit(first_append)
    state.on_high_watermark_update(21)
    assert state.first_unstable_offset() == 16

    # One append completing the open transaction, with empty transactions, one complete non-empty transaction
    # and one left open mixed in.
    second = state.prepare_append(AppendOrigin.REPLICATION)
    assert second.append_marker(PID, EPOCH, ControlType.COMMIT, 27, 21, 0) == CompletedTxn(PID, 16, 21, False)
    assert second.append_marker(PID, EPOCH, ControlType.COMMIT, 27, 22, 0) is None
    assert second.append_marker(PID, EPOCH, ControlType.ABORT, 27, 23, 0) is None
    data(second, 24, 27)
    assert second.append_marker(PID, EPOCH, ControlType.ABORT, 27, 28, 0) == CompletedTxn(PID, 24, 28, True)
    assert second.append_marker(PID, EPOCH, ControlType.ABORT, 27, 29, 0) is None
    data(second, 30, 31)

    assert second.started_txns == (OngoingTxn(PID, 24), OngoingTxn(PID, 30))
    # Only the non-empty aborted transaction is indexed, with the LSO right after its marker.
    assert second.aborted_txns == (AbortedTxn(PID, 24, 28, 29),)
    state.commit(second)
    state.on_high_watermark_update(32)
    assert state.first_unstable_offset() == 30
    assert state.ongoing_txns() == [OngoingTxn(PID, 30)]


def test_pid_expiration_timeout(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, 5, 0, 1)
    clock.advance(EXPIRATION_MS + 1)

    assert state.remove_expired_producers() == [PID]

    # Unknown again, so any sequence is accepted (KIP-360).
    append_data(state, PID, 5, 1, 2)
    assert list(state.active_producers) == [PID]
    assert entry(state).last_seq == 1
    assert state.map_end_offset == 3


def test_producers_with_ongoing_transactions_dont_expire(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, 5, 0, 99, txn=True)
    clock.advance(EXPIRATION_MS + 1)

    assert state.remove_expired_producers() == []

    assert state.last_entry(PID) is not None
    assert state.first_undecided_offset() == 99


def test_producer_state_after_fencing_abort_marker(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)
    append_marker(state, PID, EPOCH + 1, ControlType.ABORT, 1)

    fenced = entry(state)
    assert fenced.current_txn_first_offset is None
    assert (fenced.first_data_offset, fenced.last_data_offset) == (-1, -1)

    # Kept so the fence keeps working...
    state.remove_expired_producers()
    with pytest.raises(InvalidProducerEpoch):
        append_data(state, PID, EPOCH, 1, 2, txn=True)
    # ...until it ages out like any idle producer.
    clock.advance(EXPIRATION_MS)
    assert state.remove_expired_producers() == [PID]


def test_accept_append_with_sequence_gaps_on_replica(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0)

    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, EPOCH, 3, 1)
    assert entry(state).last_seq == 0

    append_data(state, PID, EPOCH, 3, 1, origin=AppendOrigin.REPLICATION)
    assert entry(state).last_seq == 3


def test_remove_expired_pids_on_reload(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, EPOCH, 0, 0)
    append_data(state, PID, EPOCH, 1, 1)
    snapshot = state.snapshot()
    clock.advance(EXPIRATION_MS)

    recovered = ProducerStateManager.from_snapshot(snapshot, producer_id_expiration_ms=EXPIRATION_MS, clock=clock)

    assert recovered.last_entry(PID) is None
    append_data(recovered, PID, EPOCH, 2, 2)
    assert entry(recovered).last_seq == 2
    assert recovered.map_end_offset == 3


def test_replay_never_rejects(state: ProducerStateManager) -> None:
    # Recovery replays what was validated when written; the log is the truth even where state disagrees.
    append_data(state, PID, 5, 0, 0, txn=True)
    append_marker(state, PID, 5, ControlType.COMMIT, 1, coordinator_epoch=7)
    append_data(state, PID, 6, 0, 2, txn=True)

    append_data(state, PID, 4, 9, 3, txn=False, origin=AppendOrigin.REPLICATION)
    completed = append_marker(state, PID, 3, ControlType.ABORT, 4, coordinator_epoch=2, origin=AppendOrigin.REPLICATION)

    assert completed == CompletedTxn(PID, 2, 4, is_aborted=True)
    assert (entry(state).producer_epoch, entry(state).coordinator_epoch) == (3, 2)


def test_accept_append_without_producer_state_on_replica(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, EPOCH, 0, 0)
    clock.advance(EXPIRATION_MS)
    recovered = reload(state, clock)
    assert recovered.last_entry(PID) is None

    append_data(recovered, PID, EPOCH, 2, 2, origin=AppendOrigin.REPLICATION)

    assert (entry(recovered).producer_epoch, entry(recovered).first_seq, entry(recovered).last_seq) == (EPOCH, 2, 2)


def test_recover_from_snapshot_unfinished_transaction(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)
    append_data(state, PID, EPOCH, 1, 1, txn=True)

    recovered = reload(state, clock)

    loaded = entry(recovered)
    # Unlike Kafka (only the newest batch), every cached batch survives the restart.
    assert [(b.first_seq, b.first_offset) for b in loaded.batches] == [(0, 0), (1, 1)]
    assert loaded.current_txn_first_offset == 0
    assert recovered.first_undecided_offset() == 0
    append_data(recovered, PID, EPOCH, 2, 2, txn=True)


def test_recover_from_snapshot_finished_transaction(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)
    append_data(state, PID, EPOCH, 1, 1, txn=True)
    append_marker(state, PID, EPOCH, ControlType.ABORT, 2)

    recovered = reload(state, clock)

    loaded = entry(recovered)
    assert (loaded.first_seq, loaded.last_seq, loaded.last_data_offset) == (0, 1, 1)
    assert loaded.current_txn_first_offset is None
    assert recovered.first_unstable_offset() is None


def test_recover_from_snapshot_empty_transaction(state: ProducerStateManager, clock: FakeClock) -> None:
    append_marker(state, PID, EPOCH, ControlType.ABORT, 0, timestamp=1234)

    recovered = reload(state, clock)

    assert entry(recovered).last_timestamp == 1234
    assert entry(recovered).current_txn_first_offset is None


def _truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _garbage(data: bytes) -> bytes:
    return bytes(37) + data[37:]


def _bit_flip(data: bytes) -> bytes:
    flipped = bytearray(data)
    flipped[-3] ^= 0x10
    return bytes(flipped)


@pytest.mark.parametrize(
    "damage",
    [lambda data: b"", _truncate, _garbage, _bit_flip, lambda data: data + b"\x00"],
    ids=["empty", "truncated", "garbage", "bit-flip", "trailing-byte"],
)
def test_load_from_corrupt_snapshot(
    state: ProducerStateManager, clock: FakeClock, damage: Callable[[bytes], bytes]
) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)
    append_data(state, PID + 1, EPOCH, 0, 1)
    data = state.snapshot()

    with pytest.raises(CorruptMessage):
        ProducerStateManager.from_snapshot(
            damage(data),
            producer_id_expiration_ms=EXPIRATION_MS,
            clock=clock,
        )


def test_snapshot_with_unknown_version_is_corrupt(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, PID, EPOCH, 0, 0)
    data = bytearray(state.snapshot())
    data[0:2] = (2).to_bytes(2, "big")

    with pytest.raises(CorruptMessage):
        ProducerStateManager.from_snapshot(bytes(data), producer_id_expiration_ms=EXPIRATION_MS, clock=clock)


def test_read_write_snapshot(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, 1, 2, 0, 0, last_seq=1, last_offset=1, txn=True, timestamp=77)
    append_data(state, 1, 2, 2, 5, txn=True, timestamp=78)
    append_marker(state, 11, 12, ControlType.ABORT, 6, coordinator_epoch=13, timestamp=123_456)
    state.update_map_end_offset(9)

    recovered = reload(state, clock)

    assert dict(recovered.active_producers) == dict(state.active_producers)
    assert recovered.map_end_offset == 9
    assert entry(recovered, 1).current_txn_first_offset == 0
    assert entry(recovered, 11).coordinator_epoch == 13


def test_has_late_transaction(state: ProducerStateManager, clock: FakeClock) -> None:
    append_data(state, 39, 2, 0, 100, txn=True)
    assert not state.has_late_transaction(MAX_TXN_TIMEOUT_MS)
    clock.advance(500)
    append_data(state, 57, 9, 0, 150, txn=True)
    assert not state.has_late_transaction(MAX_TXN_TIMEOUT_MS)

    clock.advance(LATE_TXN_MS - 500 + 1)
    assert state.has_late_transaction(MAX_TXN_TIMEOUT_MS)
    assert reload(state, clock).has_late_transaction(MAX_TXN_TIMEOUT_MS)

    clock.advance(500)
    append_marker(state, 39, 2, ControlType.COMMIT, 200)
    assert state.has_late_transaction(MAX_TXN_TIMEOUT_MS)
    append_marker(state, 57, 9, ControlType.COMMIT, 250)
    assert not state.has_late_transaction(MAX_TXN_TIMEOUT_MS)


def test_reject_non_zero_sequence_for_direct_epoch_bump(state: ProducerStateManager) -> None:
    for seq in range(3):
        append_data(state, PID, EPOCH, seq, seq)

    with pytest.raises(OutOfOrderSequence, match="must start at 0"):
        append_data(state, PID, EPOCH + 1, 5, 3)

    append_data(state, PID, EPOCH + 1, 0, 3)
    assert (entry(state).producer_epoch, entry(state).last_seq) == (EPOCH + 1, 0)


# ------------------------------------------------------------------------------------------------------------
# Idempotent produce (design/architecture.md §1.1)
# ------------------------------------------------------------------------------------------------------------


def test_duplicate_batch_returns_original_offsets(state: ProducerStateManager) -> None:
    partition = Partition(state)
    partition.produce(9, EPOCH, 0, 3)
    original = partition.produce(PID, EPOCH, 0, 10)
    partition.produce(9, EPOCH, 3, 2)

    retried = partition.produce(PID, EPOCH, 0, 10)

    assert retried == original == (3, 12)
    assert partition.leo == 15  # nothing written for the retry
    assert state.check_duplicate(PID, EPOCH, 0, 9) == BatchMetadata(0, 9, 3, 12, 0)


def test_each_of_the_last_five_batches_is_recognised_as_duplicate(state: ProducerStateManager) -> None:
    partition = Partition(state)
    offsets = [partition.produce(PID, EPOCH, seq * 2, 2) for seq in range(7)]

    for seq in range(2, 7):
        assert partition.produce(PID, EPOCH, seq * 2, 2) == offsets[seq]
    assert partition.leo == 14


def test_duplicate_older_than_cached_batches_is_out_of_order(state: ProducerStateManager) -> None:
    partition = Partition(state)
    for seq in range(6):
        partition.produce(PID, EPOCH, seq, 1)

    with pytest.raises(OutOfOrderSequence):
        partition.produce(PID, EPOCH, 0, 1)  # evicted from the 5 cached batches
    assert partition.leo == 6


def test_duplicate_check_ignores_other_epochs(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0)
    append_data(state, PID, EPOCH + 1, 0, 1)

    assert state.check_duplicate(PID, EPOCH, 0, 0) is None
    assert state.check_duplicate(PID, EPOCH + 1, 0, 0) == BatchMetadata(0, 0, 1, 1, 0)
    assert state.check_duplicate(PID + 1, EPOCH, 0, 0) is None


def test_sequence_gap_is_rejected_and_changes_nothing(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)
    before = (entry(state), state.ongoing_txns(), state.map_end_offset)

    with pytest.raises(OutOfOrderSequence):
        append_data(state, PID, EPOCH, 2, 1, txn=True)

    assert (entry(state), state.ongoing_txns(), state.map_end_offset) == before


def test_unknown_producer_accepts_any_sequence_then_requires_continuity(state: ProducerStateManager) -> None:
    info = state.prepare_append(AppendOrigin.CLIENT)
    info.append_data_batch(PID, 3, 42, 43, 0, 1, 0, False)
    # Within the same request the second batch must already continue the first.
    with pytest.raises(OutOfOrderSequence):
        info.append_data_batch(PID, 3, 50, 50, 2, 2, 0, False)
    info.append_data_batch(PID, 3, 44, 44, 2, 2, 0, False)
    state.commit(info)

    assert entry(state).last_seq == 44


def test_client_batch_without_sequence_is_invalid(state: ProducerStateManager) -> None:
    with pytest.raises(InvalidRecord):
        append_data(state, PID, EPOCH, NO_SEQUENCE, 0)
    assert state.last_entry(PID) is None


def test_five_in_flight_with_lost_request_keeps_order(state: ProducerStateManager) -> None:
    # Batches 0..4 are pipelined; batch 1 never reaches the partition. Batches 2..4 must not overtake it.
    partition = Partition(state)
    sequences = [(i * 10, 10) for i in range(5)]
    partition.produce(PID, EPOCH, *sequences[0])
    for first_seq, count in sequences[2:]:
        with pytest.raises(OutOfOrderSequence):
            partition.produce(PID, EPOCH, first_seq, count)

    # The client retries 1..4 in order.
    offsets = [partition.produce(PID, EPOCH, first_seq, count) for first_seq, count in sequences[1:]]

    assert offsets == [(10, 19), (20, 29), (30, 39), (40, 49)]
    assert entry(state).last_seq == 49


def test_five_in_flight_with_lost_response_is_deduplicated(state: ProducerStateManager) -> None:
    # All five batches are written but the response for batch 1 is lost; its retry must not write it twice.
    partition = Partition(state)
    written = [partition.produce(PID, EPOCH, i * 10, 10) for i in range(5)]

    assert partition.produce(PID, EPOCH, 10, 10) == written[1]
    assert partition.leo == 50
    partition.produce(PID, EPOCH, 50, 10)
    assert partition.leo == 60


def test_failed_multi_batch_append_leaves_no_partial_state(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0)
    append_data(state, PID + 1, EPOCH, 0, 1)
    before_entries = dict(state.active_producers)

    info = state.prepare_append(AppendOrigin.CLIENT)
    info.append_data_batch(PID, EPOCH, 1, 1, 2, 2, 0, False)
    info.append_data_batch(PID + 2, EPOCH, 0, 0, 3, 3, 0, True)  # would open a transaction
    with pytest.raises(OutOfOrderSequence):
        info.append_data_batch(PID + 1, EPOCH, 5, 5, 4, 4, 0, False)
    # The request failed as a whole: the caller discards the info without committing.

    assert dict(state.active_producers) == before_entries
    assert state.ongoing_txns() == []
    assert state.first_unstable_offset() is None
    assert state.map_end_offset == 2
    # The staged batch of PID was not applied, so its sequence 1 is still expected.
    append_data(state, PID, EPOCH, 1, 2)


def test_failed_call_does_not_change_staged_state(state: ProducerStateManager) -> None:
    info = state.prepare_append(AppendOrigin.CLIENT)
    info.append_data_batch(PID, EPOCH, 0, 0, 0, 0, 0, True)
    staged = info.staged_entry(PID)

    with pytest.raises(InvalidTxnState):
        info.append_data_batch(PID, EPOCH, 1, 1, 1, 1, 0, False)

    assert info.staged_entry(PID) == staged
    assert info.next_offset == 1


def test_commit_rejects_stale_append_info(state: ProducerStateManager, clock: FakeClock) -> None:
    stale = state.prepare_append(AppendOrigin.CLIENT)
    stale.append_data_batch(PID, EPOCH, 0, 0, 0, 0, 0, False)
    concurrent = state.prepare_append(AppendOrigin.CLIENT)
    concurrent.append_data_batch(PID, EPOCH, 0, 0, 0, 0, 0, False)
    state.commit(concurrent)

    with pytest.raises(ValueError, match="stale"):
        state.commit(stale)
    prepared_before_expiry = state.prepare_append(AppendOrigin.CLIENT)
    clock.advance(EXPIRATION_MS)
    assert state.remove_expired_producers() == [PID]
    with pytest.raises(ValueError, match="stale"):
        state.commit(prepared_before_expiry)
    other = ProducerStateManager(producer_id_expiration_ms=EXPIRATION_MS, clock=FakeClock())
    with pytest.raises(ValueError, match="stale"):
        other.commit(state.prepare_append(AppendOrigin.CLIENT))


# ------------------------------------------------------------------------------------------------------------
# Zombie fencing (design/architecture.md §1.3) and markers (design/architecture.md §4)
# ------------------------------------------------------------------------------------------------------------


def test_zombie_epoch_is_fenced(state: ProducerStateManager) -> None:
    partition = Partition(state)
    partition.produce(PID, 4, 0, 2, txn=True)
    # A new instance fenced the old one: the coordinator aborts with the bumped epoch.
    partition.marker(PID, 5, ControlType.ABORT, coordinator_epoch=1)
    partition.flush()

    with pytest.raises(InvalidProducerEpoch):
        partition.produce(PID, 4, 2, 1, txn=True)  # the zombie's next batch
    with pytest.raises(InvalidProducerEpoch):
        partition.marker(PID, 4, ControlType.COMMIT, coordinator_epoch=1)  # and its commit
    partition.produce(PID, 5, 0, 1, txn=True)
    partition.marker(PID, 5, ControlType.COMMIT, coordinator_epoch=1)
    partition.flush()

    assert partition.read_committed() == [3]


def test_late_batch_after_bumped_epoch_marker_is_rejected(state: ProducerStateManager) -> None:
    # KIP-890 part 2: the coordinator ends every transaction with epoch + 1, so data of the ended
    # transaction arriving late carries a stale epoch.
    partition = Partition(state)
    partition.produce(PID, 0, 0, 1, txn=True)
    assert partition.marker(PID, 1, ControlType.COMMIT, strict=True)

    with pytest.raises(InvalidProducerEpoch):
        partition.produce(PID, 0, 1, 1, txn=True)
    assert state.first_undecided_offset() is None


def test_strict_epoch_marker_rejects_equal_epoch_while_transaction_open(state: ProducerStateManager) -> None:
    append_data(state, PID, 1, 0, 0, txn=True)

    # A delayed marker of the previous transaction must not end the current one.
    with pytest.raises(InvalidProducerEpoch):
        append_marker(state, PID, 1, ControlType.COMMIT, 1, strict=True)
    assert state.first_undecided_offset() == 0

    assert append_marker(state, PID, 2, ControlType.COMMIT, 1, strict=True) == CompletedTxn(PID, 0, 1, False)
    # Retry of the marker just written: accepted, completes nothing.
    assert append_marker(state, PID, 2, ControlType.COMMIT, 2, strict=True) is None


def test_repeated_marker_is_acknowledged_without_append(state: ProducerStateManager) -> None:
    partition = Partition(state)
    partition.produce(PID, EPOCH, 0, 2, txn=True)
    assert partition.marker(PID, EPOCH, ControlType.ABORT, coordinator_epoch=3)

    assert not partition.marker(PID, EPOCH, ControlType.ABORT, coordinator_epoch=3)

    assert partition.leo == 3
    assert len(partition.index) == 1


def test_marker_that_changes_state_is_not_a_repeat(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)
    assert not state.marker_already_applied(PID, EPOCH, 0)  # a transaction is open
    append_marker(state, PID, EPOCH, ControlType.COMMIT, 1, coordinator_epoch=3)

    assert state.marker_already_applied(PID, EPOCH, 3)
    assert not state.marker_already_applied(PID, EPOCH + 1, 3)  # fences the producer
    assert not state.marker_already_applied(PID, EPOCH, 4)  # a new coordinator took over
    assert not state.marker_already_applied(PID + 1, EPOCH, 3)  # unknown producer
    with pytest.raises(TransactionCoordinatorFenced):
        append_marker(state, PID, EPOCH, ControlType.COMMIT, 2, coordinator_epoch=2)


def test_empty_transaction_marker_completes_nothing(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0)  # idempotent data, no transaction

    info = state.prepare_append(AppendOrigin.COORDINATOR)
    assert info.append_marker(PID, EPOCH, ControlType.ABORT, 0, 1, 0) is None
    assert info.completed_txns == ()
    assert info.aborted_txns == ()
    state.commit(info)

    assert state.last_stable_offset(2) == 2


# ------------------------------------------------------------------------------------------------------------
# LSO and read_committed (design/architecture.md §1.2, §1.4)
# ------------------------------------------------------------------------------------------------------------


def test_lso_stops_at_first_open_txn_and_advances_on_marker(state: ProducerStateManager) -> None:
    partition = Partition(state)
    partition.produce(7, EPOCH, 0, 2)  # 0-1 idempotent
    partition.produce(PID, EPOCH, 0, 3, txn=True)  # 2-4 open
    partition.produce(7, EPOCH, 2, 2)  # 5-6
    partition.flush()
    assert partition.lso == 2
    assert partition.read_committed() == [0, 1]

    partition.marker(PID, EPOCH, ControlType.COMMIT)  # 7
    assert partition.lso == 2  # the marker is not flushed yet
    partition.flush()

    assert partition.lso == 8
    assert partition.read_committed() == [0, 1, 2, 3, 4, 5, 6]


def test_lso_never_exceeds_high_watermark(state: ProducerStateManager) -> None:
    partition = Partition(state)
    partition.produce(PID, EPOCH, 0, 3)
    assert partition.lso == 0
    partition.flush()
    partition.produce(PID, EPOCH, 3, 3, txn=True)
    assert partition.lso == 3


def test_interleaved_transactional_and_non_transactional_producers(state: ProducerStateManager) -> None:
    # design/replication.md §10: a partition takes transactional and plain producers at once; records become visible in
    # offset order once no open transaction precedes them, aborted data never.
    committer, aborter, plain = 1, 2, 3
    partition = Partition(state)
    partition.produce(committer, EPOCH, 0, 2, txn=True)  # 0-1
    partition.produce(plain, EPOCH, 0, 1)  # 2
    partition.produce(aborter, EPOCH, 0, 2, txn=True)  # 3-4
    partition.produce(plain, EPOCH, 1, 1)  # 5
    partition.produce(committer, EPOCH, 2, 1, txn=True)  # 6
    partition.flush()
    assert partition.read_committed() == []

    partition.marker(aborter, EPOCH, ControlType.ABORT)  # 7
    partition.flush()
    assert partition.lso == 0
    partition.marker(committer, EPOCH, ControlType.COMMIT)  # 8
    partition.produce(plain, EPOCH, 2, 1)  # 9
    partition.flush()

    assert partition.lso == 10
    assert partition.read_committed() == [0, 1, 2, 5, 6, 9]
    assert partition.index.entries == (AbortedTxn(aborter, 3, 7, 0),)
    # After its transaction ended, the transactional producer may write plain idempotent data again.
    partition.produce(committer, EPOCH, 3, 1)


def test_aborted_entry_records_lso_of_earlier_open_transaction(state: ProducerStateManager) -> None:
    partition = Partition(state)
    partition.produce(1, EPOCH, 0, 1, txn=True)  # 0, stays open
    partition.produce(2, EPOCH, 0, 1, txn=True)  # 1
    partition.marker(2, EPOCH, ControlType.ABORT)  # 2
    partition.produce(3, EPOCH, 0, 1, txn=True)  # 3
    partition.marker(3, EPOCH, ControlType.ABORT)  # 4
    partition.marker(1, EPOCH, ControlType.ABORT)  # 5

    assert partition.index.entries == (
        AbortedTxn(2, 1, 2, 0),
        AbortedTxn(3, 3, 4, 0),
        AbortedTxn(1, 0, 5, 6),
    )


def test_aborted_entry_lso_ignores_transactions_started_later_in_the_same_append(
    state: ProducerStateManager,
) -> None:
    # A replayed chunk holding several batches: the LSO recorded for the abort at offset 1 is the one at that
    # moment (2), not the start of a transaction that only begins later in the chunk. Recording 3 would let a
    # fetch of [0, 3) stop at this entry and miss producer 1's next transaction if it is aborted too.
    info = state.prepare_append(AppendOrigin.REPLICATION)
    info.append_data_batch(1, EPOCH, 0, 0, 0, 0, 0, True)
    info.append_marker(1, EPOCH, ControlType.ABORT, 0, 1, 0)
    info.append_data_batch(1, EPOCH, 1, 1, 2, 2, 0, True)
    info.append_data_batch(2, EPOCH, 0, 0, 3, 3, 0, True)

    assert info.aborted_txns == (AbortedTxn(1, 0, 1, 2),)
    state.commit(info)
    assert state.ongoing_txns() == [OngoingTxn(1, 2), OngoingTxn(2, 3)]


def test_marker_accepts_plain_int_control_type(state: ProducerStateManager) -> None:
    append_data(state, PID, EPOCH, 0, 0, txn=True)

    completed = append_marker(state, PID, EPOCH, ControlType(0), 1)

    assert completed is not None and completed.is_aborted


# ------------------------------------------------------------------------------------------------------------
# Snapshots, expiry, describe
# ------------------------------------------------------------------------------------------------------------


def test_snapshot_round_trip_preserves_open_transactions_and_lso(state: ProducerStateManager, clock: FakeClock) -> None:
    partition = Partition(state)
    partition.produce(1, EPOCH, 0, 2, txn=True)  # 0-1
    partition.produce(2, 3, 0, 1, txn=True)  # 2
    partition.produce(3, EPOCH, 0, 1)  # 3
    partition.marker(1, EPOCH, ControlType.COMMIT, coordinator_epoch=4)  # 4
    partition.flush()

    recovered = reload(state, clock)

    assert dict(recovered.active_producers) == dict(state.active_producers)
    assert recovered.ongoing_txns() == [OngoingTxn(2, 2)]
    assert recovered.last_stable_offset(partition.hw) == state.last_stable_offset(partition.hw) == 2
    assert recovered.map_end_offset == 5
    assert recovered.snapshot() == state.snapshot()


def test_snapshot_keeps_last_five_batches_for_dedup_after_restart(
    state: ProducerStateManager, clock: FakeClock
) -> None:
    partition = Partition(state)
    written = [partition.produce(PID, EPOCH, seq, 1) for seq in range(6)]

    partition.state = reload(state, clock)

    # Kafka would only recognise the newest batch here (design/kafka-semantics.md §4.6).
    for seq in range(1, 6):
        assert partition.produce(PID, EPOCH, seq, 1) == written[seq]
    assert partition.leo == 6


def test_snapshot_drops_expired_producers_but_keeps_open_transactions(
    state: ProducerStateManager, clock: FakeClock
) -> None:
    append_data(state, 1, EPOCH, 0, 0)
    append_data(state, 2, EPOCH, 0, 1, txn=True)
    clock.advance(EXPIRATION_MS)

    recovered = reload(state, clock)

    assert list(recovered.active_producers) == [2]
    assert recovered.first_undecided_offset() == 1


def test_snapshot_loads_ongoing_transactions_in_offset_order(state: ProducerStateManager, clock: FakeClock) -> None:
    # Snapshot entries are ordered by producer id, not by transaction start.
    append_data(state, 9, EPOCH, 0, 0, txn=True)
    append_data(state, 1, EPOCH, 0, 1, txn=True)

    recovered = reload(state, clock)

    assert recovered.ongoing_txns() == [OngoingTxn(9, 0), OngoingTxn(1, 1)]
    append_marker(recovered, 9, EPOCH, ControlType.COMMIT, 2)
    recovered.on_high_watermark_update(3)
    assert recovered.first_unstable_offset() == 1


def test_smaller_batch_cache_keeps_newest_batches_on_load(state: ProducerStateManager, clock: FakeClock) -> None:
    for seq in range(5):
        append_data(state, PID, EPOCH, seq, seq)

    recovered = ProducerStateManager.from_snapshot(
        state.snapshot(), producer_id_expiration_ms=EXPIRATION_MS, clock=clock, max_batches_per_producer=2
    )

    assert [b.first_seq for b in entry(recovered).batches] == [3, 4]


def test_expiry_uses_server_clock_not_batch_timestamps(state: ProducerStateManager, clock: FakeClock) -> None:
    # A producer whose own clock lags by days still keeps its dedup state while it is active.
    append_data(state, PID, EPOCH, 0, 0, timestamp=clock.now - 10 * EXPIRATION_MS)

    assert state.remove_expired_producers() == []
    clock.advance(EXPIRATION_MS - 1)
    assert state.remove_expired_producers() == []
    clock.advance(1)
    assert state.remove_expired_producers() == [PID]


def test_describe_producers(state: ProducerStateManager) -> None:
    append_data(state, 5, 2, 0, 0, last_seq=9, last_offset=9, timestamp=111)
    append_data(state, 3, 1, 0, 10, txn=True, timestamp=222)
    append_marker(state, 8, 4, ControlType.ABORT, 11, coordinator_epoch=6, timestamp=333)

    assert state.describe_producers() == [
        ProducerDescription(3, 1, 0, 222, -1, 10),
        ProducerDescription(5, 2, 9, 111, -1, None),
        ProducerDescription(8, 4, NO_SEQUENCE, 333, 6, None),
    ]


def test_constructor_rejects_invalid_settings(clock: FakeClock) -> None:
    with pytest.raises(ValueError):
        ProducerStateManager(producer_id_expiration_ms=0, clock=clock)
    with pytest.raises(ValueError):
        ProducerStateManager(producer_id_expiration_ms=1, clock=clock, max_batches_per_producer=0)


# ------------------------------------------------------------------------------------------------------------
# Randomised checks against simple models
# ------------------------------------------------------------------------------------------------------------

MACHINE_PIDS = (1, 2, 3)


@dataclass
class ModelProducer:
    """What a partition must remember of a producer, without any cache limit."""

    epoch: int
    accepted: list[BatchMetadata] = field(default_factory=list)


class IdempotentProduceMachine(RuleBasedStateMachine):
    """Random produce traffic (new batches, retries, gaps, zombies, epoch bumps, restarts, expiry) checked
    against a plain model of design/kafka-semantics.md §4.2; the log itself must stay free of duplicates and gaps."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.state = ProducerStateManager(producer_id_expiration_ms=EXPIRATION_MS, clock=self.clock)
        self.leo = 0
        self.model: dict[int, ModelProducer] = {}
        self.client_epoch = dict.fromkeys(MACHINE_PIDS, 0)
        self.client_next = dict.fromkeys(MACHINE_PIDS, 0)
        self.sent: list[tuple[int, int, int, int]] = []
        self.log: list[tuple[int, int, int, BatchMetadata]] = []
        self.era = 0

    @initialize(starts=st.lists(st.sampled_from([0, 7, MAX_SEQUENCE - 3]), min_size=3, max_size=3))
    def start_sequences(self, starts: list[int]) -> None:
        self.client_next = dict(zip(MACHINE_PIDS, starts, strict=True))

    def expected(self, pid: int, epoch: int, first_seq: int, last_seq: int) -> object:
        known = self.model.get(pid)
        if known is None:
            return "appended"
        if epoch < known.epoch:
            return InvalidProducerEpoch
        if epoch > known.epoch:
            return "appended" if first_seq == 0 else OutOfOrderSequence
        for batch in known.accepted[-5:]:
            if (batch.first_seq, batch.last_seq) == (first_seq, last_seq):
                return (batch.first_offset, batch.last_offset)
        last = known.accepted[-1].last_seq if known.accepted else NO_SEQUENCE
        return "appended" if first_seq == next_sequence(last) else OutOfOrderSequence

    def produce(self, pid: int, epoch: int, first_seq: int, count: int) -> object:
        last_seq = (first_seq + count - 1) % (MAX_SEQUENCE + 1)
        expected = self.expected(pid, epoch, first_seq, last_seq)
        duplicate = self.state.check_duplicate(pid, epoch, first_seq, last_seq)
        if duplicate is not None:
            outcome: object = (duplicate.first_offset, duplicate.last_offset)
        else:
            batch = BatchMetadata(first_seq, last_seq, self.leo, self.leo + count - 1, 0)
            try:
                info = self.state.prepare_append(AppendOrigin.CLIENT)
                info.append_data_batch(pid, epoch, first_seq, last_seq, batch.first_offset, batch.last_offset, 0, False)
            except OncelogError as exc:
                outcome = type(exc)
            else:
                self.state.commit(info)
                self.leo += count
                self.log.append((self.era, pid, epoch, batch))
                self.sent.append((pid, epoch, first_seq, count))
                known = self.model.get(pid)
                if known is None or known.epoch != epoch:
                    known = self.model[pid] = ModelProducer(epoch)
                known.accepted.append(batch)
                outcome = "appended"
        assert outcome == expected, (pid, epoch, first_seq, last_seq)
        return outcome

    @rule(pid=st.sampled_from(MACHINE_PIDS), count=st.integers(1, 4))
    def send_next(self, pid: int, count: int) -> None:
        outcome = self.produce(pid, self.client_epoch[pid], self.client_next[pid], count)
        if outcome == "appended" or isinstance(outcome, tuple):
            self.client_next[pid] = (self.client_next[pid] + count) % (MAX_SEQUENCE + 1)

    @precondition(lambda self: self.sent)
    @rule(data=st.data())
    def retry_sent_batch(self, data: st.DataObject) -> None:
        pid, epoch, first_seq, count = data.draw(st.sampled_from(self.sent))
        self.produce(pid, epoch, first_seq, count)

    @rule(pid=st.sampled_from(MACHINE_PIDS), gap=st.integers(1, 3))
    def send_with_gap(self, pid: int, gap: int) -> None:
        self.produce(pid, self.client_epoch[pid], (self.client_next[pid] + gap) % (MAX_SEQUENCE + 1), 1)

    @rule(pid=st.sampled_from(MACHINE_PIDS))
    def bump_epoch(self, pid: int) -> None:
        self.client_epoch[pid] += 1
        self.client_next[pid] = 0

    @rule(pid=st.sampled_from(MACHINE_PIDS), seq=st.integers(0, 20))
    def zombie_send(self, pid: int, seq: int) -> None:
        if self.client_epoch[pid] > 0:
            self.produce(pid, self.client_epoch[pid] - 1, seq, 1)

    @rule()
    def restart(self) -> None:
        self.state = ProducerStateManager.from_snapshot(
            self.state.snapshot(), producer_id_expiration_ms=EXPIRATION_MS, clock=self.clock
        )

    @rule()
    def expire_everything(self) -> None:
        self.clock.advance(EXPIRATION_MS)
        assert sorted(self.state.remove_expired_producers()) == sorted(self.model)
        self.model.clear()
        self.era += 1

    @invariant()
    def state_matches_model(self) -> None:
        assert set(self.state.active_producers) == set(self.model)
        for pid, known in self.model.items():
            current = entry(self.state, pid)
            assert current.producer_epoch == known.epoch
            assert current.batches == tuple(known.accepted[-5:])

    @invariant()
    def log_has_no_duplicates_or_gaps(self) -> None:
        # Between two expiries (after which KIP-360 accepts any sequence), each producer epoch's batches in the
        # log continue each other exactly.
        last_by_producer: dict[tuple[int, int, int], int] = {}
        for era, pid, epoch, batch in self.log:
            previous = last_by_producer.get((era, pid, epoch))
            if previous is not None:
                assert batch.first_seq == next_sequence(previous)
            last_by_producer[(era, pid, epoch)] = batch.last_seq


IdempotentProduceMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestIdempotentProduce = IdempotentProduceMachine.TestCase


def _segments_of(index: TransactionIndex, cuts: list[int]) -> list[TransactionIndex]:
    """Split one index into per-segment indexes at the given base offsets."""
    bases = sorted({0, *cuts})
    segments = [TransactionIndex(base) for base in bases]
    for txn in index:
        position = max(i for i, base in enumerate(bases) if base <= txn.last_offset)
        segments[position].append(txn)
    return segments


def _indexes_from(segments: list[TransactionIndex], fetch_offset: int) -> Iterator[TransactionIndex]:
    position = max(i for i, segment in enumerate(segments) if segment.base_offset <= fetch_offset)
    yield from segments[position:]


_op = st.one_of(
    st.tuples(st.just("data"), st.integers(1, 4), st.booleans(), st.integers(1, 3)),
    st.tuples(st.just("end"), st.integers(1, 4), st.booleans(), st.just(0)),
    st.tuples(st.just("flush"), st.just(0), st.just(False), st.just(0)),
)


@settings(max_examples=150, deadline=None)
@given(
    ops=st.lists(_op, max_size=40),
    cuts=st.lists(st.integers(1, 80), max_size=4),
    ranges=st.lists(st.tuples(st.integers(0, 80), st.integers(1, 40)), min_size=1, max_size=5),
)
def test_lso_and_aborted_index_agree_with_model(
    ops: list[tuple[str, int, bool, int]], cuts: list[int], ranges: list[tuple[int, int]]
) -> None:
    partition = Partition(ProducerStateManager(producer_id_expiration_ms=EXPIRATION_MS, clock=FakeClock()))
    next_seq: dict[int, int] = {}
    open_txns: dict[int, int] = {}  # pid -> first offset
    completed: list[tuple[int, int, int, bool]] = []  # pid, first offset, marker offset, aborted

    for kind, pid, flag, count in ops:
        if kind == "data":
            transactional = flag or pid in open_txns  # plain writes inside a transaction are rejected
            first, _ = partition.produce(pid, EPOCH, next_seq.get(pid, 0), count, txn=transactional)
            next_seq[pid] = next_seq.get(pid, 0) + count
            if transactional:
                open_txns.setdefault(pid, first)
        elif kind == "end":
            marker_offset = partition.leo
            partition.marker(pid, EPOCH, ControlType.COMMIT if flag else ControlType.ABORT)
            if pid in open_txns:
                completed.append((pid, open_txns.pop(pid), marker_offset, not flag))
        else:
            partition.flush()

        unstable = [*open_txns.values(), *(first for _, first, marker, _ in completed if marker >= partition.hw)]
        assert partition.lso == min([*unstable, partition.hw])

    aborted = [AbortedTxn(pid, first, marker, 0) for pid, first, marker, is_aborted in completed if is_aborted]
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in partition.index] == [
        (t.producer_id, t.first_offset, t.last_offset) for t in aborted
    ]
    segments = _segments_of(partition.index, cuts)
    for fetch_offset, length in ranges:
        upper_bound = fetch_offset + length
        expected = [t for t in partition.index if t.last_offset >= fetch_offset and t.first_offset < upper_bound]
        assert collect_aborted_txns(_indexes_from(segments, fetch_offset), fetch_offset, upper_bound) == expected
