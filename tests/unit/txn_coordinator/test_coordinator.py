"""Tests of TransactionCoordinator over in-memory ports.

Ports Kafka's ``TransactionCoordinatorTest`` / ``TransactionCoordinatorConcurrencyTest`` scenarios
(design/kafka-semantics.md §8
S6, S7) plus the exactly-once properties of design/architecture.md §1 (fencing, idempotent retries, durability order).
"""

from __future__ import annotations

import asyncio
import random
import zlib
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass

import pytest

from oncelog.errors import (
    ConcurrentTransactions,
    CoordinatorLoadInProgress,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotCoordinator,
    OncelogError,
    ProducerFenced,
    StorageUnavailable,
    TransactionalIdNotFound,
)
from oncelog.txn_coordinator.coordinator import (
    MarkerCompletion,
    ProducerIdAndEpoch,
    TransactionCoordinator,
    TransactionDescription,
)
from oncelog.txn_coordinator.metadata import (
    LAST_USABLE_EPOCH,
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_TIMESTAMP,
    TopicPartition,
    TxnTransition,
)
from oncelog.txn_coordinator.state import TransactionResult, TransactionState
from oncelog.txn_coordinator.state_manager import TransactionStateManager

pytestmark = pytest.mark.timeout(20)

S = TransactionState
SHARDS = 4
TIMEOUT = 60_000
TP0: TopicPartition = ("orders", 0)
TP1: TopicPartition = ("orders", 1)


def shard_for(transactional_id: str) -> int:
    return zlib.crc32(transactional_id.encode()) % SHARDS


def ids_on_shard(shard: int, count: int, prefix: str) -> list[str]:
    found: list[str] = []
    n = 0
    while len(found) < count:
        candidate = f"{prefix}-{n}"
        if shard_for(candidate) == shard:
            found.append(candidate)
        n += 1
    return found


# ------------------------------------------------------------------------------------------ fakes


class FakeClock:
    def __init__(self, now: int = 1_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class FakeStore:
    """One row per id; writes are conditional on the shard's lease epoch, like the SQL table."""

    def __init__(self) -> None:
        self.rows: dict[str, TxnTransition] = {}
        self.writes: list[tuple[str, TxnTransition, int]] = []
        self.lease_epochs: dict[int, int] = {}
        self._failures: list[OncelogError] = []
        self._gate: asyncio.Event | None = None
        self.write_waiting = asyncio.Event()
        self.load_gate: asyncio.Event | None = None
        self.log: list[tuple[str, TxnTransition | None]] | None = None
        """When set, loads replay this log (several rows per id, tombstones) instead of ``rows``."""

    def fail_next_write(self, error: OncelogError) -> None:
        self._failures.append(error)

    def hold_writes(self) -> None:
        """Writes block (after being issued) until :meth:`release_writes`."""
        self._gate = asyncio.Event()
        self.write_waiting = asyncio.Event()

    def release_writes(self) -> None:
        assert self._gate is not None
        self._gate.set()
        self._gate = None

    def states_written(self, transactional_id: str) -> list[S]:
        return [t.state for txn, t, _ in self.writes if txn == transactional_id]

    async def load_shard(self, shard: int) -> Iterable[tuple[str, TxnTransition | None]]:
        await asyncio.sleep(0)
        if self.load_gate is not None:
            await self.load_gate.wait()
        source = self.log if self.log is not None else list(self.rows.items())
        return [(txn, row) for txn, row in source if shard_for(txn) == shard]

    async def write(self, transactional_id: str, transition: TxnTransition, expected_coordinator_epoch: int) -> None:
        if self._gate is not None:
            gate = self._gate
            self.write_waiting.set()
            await gate.wait()
        await asyncio.sleep(0)  # a real store yields here, letting other requests interleave
        if self._failures:
            raise self._failures.pop(0)
        shard = shard_for(transactional_id)
        if self.lease_epochs.get(shard) != expected_coordinator_epoch:
            raise NotCoordinator(f"shard {shard} is leased at {self.lease_epochs.get(shard)}")
        self.writes.append((transactional_id, transition, expected_coordinator_epoch))
        if transition.state is S.DEAD:
            self.rows.pop(transactional_id, None)
        else:
            self.rows[transactional_id] = transition


class FakeProducerIds:
    def __init__(self, first: int = 1000) -> None:
        self._next = first
        self.issued: list[int] = []

    async def next_id(self) -> int:
        await asyncio.sleep(0)
        producer_id = self._next
        self._next += 1
        self.issued.append(producer_id)
        return producer_id


@dataclass
class SentMarkers:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    partitions: frozenset[TopicPartition]
    groups: frozenset[str]
    coordinator_epoch: int
    on_complete: MarkerCompletion


class FakeMarkers:
    """Records markers; :meth:`deliver_all` plays every participant acknowledging them."""

    def __init__(self) -> None:
        self.sent: list[SentMarkers] = []
        self.queue: list[SentMarkers] = []
        self.dropped: list[SentMarkers] = []
        self.skipped: list[tuple[str, frozenset[TopicPartition], frozenset[str]]] = []
        self.enqueued = asyncio.Event()

    def enqueue(self, **fields: object) -> None:
        markers = SentMarkers(**fields)  # type: ignore[arg-type]
        self.sent.append(markers)
        self.queue.append(markers)
        self.enqueued.set()

    def skip(self, transactional_id: str, partitions, groups) -> tuple[set[TopicPartition], set[str]]:
        self.skipped.append((transactional_id, frozenset(partitions), frozenset(groups)))
        return set(partitions), set(groups)

    def for_id(self, transactional_id: str) -> list[SentMarkers]:
        return [m for m in self.sent if m.transactional_id == transactional_id]

    async def deliver_all(self) -> None:
        while self.queue:
            markers = self.queue.pop(0)
            try:
                await markers.on_complete()
            except NotCoordinator:
                self.dropped.append(markers)


class Harness:
    """Coordinator over fakes; ``completion_wait_ms=0`` by default so requests behave exactly as Kafka's
    (CONCURRENT_TRANSACTIONS at once while markers are pending); the parking tests pass a positive one."""

    def __init__(self, completion_wait_ms: int = 0) -> None:
        self.completion_wait_ms = completion_wait_ms
        self.clock = FakeClock()
        self.store = FakeStore()
        self.pids = FakeProducerIds()
        self.markers = FakeMarkers()
        self.coordinator = self.new_coordinator()
        self.coordinator_epoch = 0

    def new_coordinator(self, leased: Callable[[int], bool] | None = None, **kwargs: object) -> TransactionCoordinator:
        return TransactionCoordinator(
            state=TransactionStateManager(self.store, shard_for=shard_for, leased=leased),
            producer_ids=self.pids,
            markers=self.markers,
            clock=self.clock,
            completion_wait_ms=self.completion_wait_ms,
            **kwargs,  # type: ignore[arg-type]
        )

    async def load_all(self, coordinator: TransactionCoordinator | None = None) -> None:
        """Lease every shard at the next coordinator epoch and load it."""
        self.coordinator_epoch += 1
        for shard in range(SHARDS):
            self.store.lease_epochs[shard] = self.coordinator_epoch
            await (coordinator or self.coordinator).load(shard, self.coordinator_epoch)

    def seed(self, transactional_id: str, state: S, producer_id: int, epoch: int, **fields: object) -> None:
        """Put a row in the store as an earlier coordinator would have written it."""
        values: dict[str, object] = {
            "state": state,
            "producer_id": producer_id,
            "previous_producer_id": producer_id,
            "next_producer_id": NO_PRODUCER_ID,
            "producer_epoch": epoch,
            "last_producer_epoch": NO_PRODUCER_EPOCH,
            "txn_timeout_ms": TIMEOUT,
            "txn_last_update_timestamp": self.clock.now,
        }
        if state.has_open_transaction:
            values.update(partitions=frozenset({TP0}), txn_start_timestamp=self.clock.now)
        if state.is_complete:
            values.update(txn_start_timestamp=self.clock.now)
        values.update(fields)
        self.store.rows[transactional_id] = TxnTransition(**values)  # type: ignore[arg-type]

    def describe(self, transactional_id: str) -> TransactionDescription:
        found = self.coordinator.describe([transactional_id])[transactional_id]
        assert isinstance(found, TransactionDescription), found
        return found

    async def init(self, transactional_id: str, **kwargs: int) -> ProducerIdAndEpoch:
        return await self.coordinator.init_producer_id(transactional_id, TIMEOUT, **kwargs)

    async def init_until_done(self, transactional_id: str, **kwargs: int) -> ProducerIdAndEpoch:
        """InitProducerId as the client runs it: retry CONCURRENT_TRANSACTIONS while markers complete."""
        for _ in range(5):
            try:
                return await self.init(transactional_id, **kwargs)
            except ConcurrentTransactions:
                await self.markers.deliver_all()
        raise AssertionError(f"InitProducerId for {transactional_id!r} never completed")

    async def begin(self, transactional_id: str, *partitions: TopicPartition) -> ProducerIdAndEpoch:
        identity = await self.init_until_done(transactional_id)
        await self.coordinator.add_partitions(transactional_id, *identity, partitions or {TP0})
        return identity


@pytest.fixture
async def h() -> Harness:
    harness = Harness()
    await harness.load_all()
    return harness


async def expect(error: type[OncelogError], call: Awaitable[object]) -> None:
    with pytest.raises(error):
        await call


# ------------------------------------------------------------------------------------------ InitProducerId


async def test_init_without_transactional_id_returns_fresh_producer_id_at_epoch_zero(h: Harness) -> None:
    first = await h.coordinator.init_producer_id(None, TIMEOUT)
    second = await h.coordinator.init_producer_id(None, TIMEOUT)
    assert first == (h.pids.issued[0], 0)
    assert second == (h.pids.issued[1], 0)
    assert h.store.writes == []


async def test_init_new_transactional_id_persists_empty_at_epoch_zero(h: Harness) -> None:
    identity = await h.init("t")
    assert identity == (h.pids.issued[0], 0)
    row = h.store.rows["t"]
    assert (row.state, row.producer_id, row.producer_epoch, row.txn_timeout_ms) == (S.EMPTY, identity[0], 0, TIMEOUT)


@pytest.mark.parametrize(
    ("transactional_id", "timeout", "expected", "error"),
    [
        ("", TIMEOUT, {}, InvalidRequest),
        ("t", 0, {}, InvalidTransactionTimeout),
        ("t", 900_001, {}, InvalidTransactionTimeout),
        ("t", TIMEOUT, {"expected_pid": 5}, InvalidRequest),
        ("t", TIMEOUT, {"expected_epoch": 5}, InvalidRequest),
    ],
)
async def test_init_rejects_malformed_requests(
    h: Harness, transactional_id: str, timeout: int, expected: dict[str, int], error: type[OncelogError]
) -> None:
    await expect(error, h.coordinator.init_producer_id(transactional_id, timeout, **expected))
    assert h.store.writes == []


async def test_init_by_new_instance_bumps_epoch(h: Harness) -> None:
    pid, epoch = await h.init("t")
    assert await h.init("t") == (pid, epoch + 1)
    assert h.store.rows["t"].last_producer_epoch == NO_PRODUCER_EPOCH


@pytest.mark.parametrize("commit", [True, False])
async def test_init_while_markers_pending_returns_concurrent_transactions(h: Harness, commit: bool) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=commit)
    await expect(ConcurrentTransactions, h.init("t"))
    await h.markers.deliver_all()
    assert await h.init("t") == (pid, epoch + 2)


async def test_init_on_ongoing_transaction_fences_and_aborts_it(h: Harness) -> None:
    pid, epoch = await h.begin("t", TP0, TP1)
    await expect(ConcurrentTransactions, h.init("t"))
    row = h.store.rows["t"]
    assert (row.state, row.producer_epoch, row.last_producer_epoch) == (S.PREPARE_ABORT, epoch + 1, NO_PRODUCER_EPOCH)
    [markers] = h.markers.for_id("t")
    assert (markers.result, markers.producer_id, markers.producer_epoch) == (TransactionResult.ABORT, pid, epoch + 1)
    assert markers.partitions == {TP0, TP1}
    await h.markers.deliver_all()
    assert await h.init("t") == (pid, epoch + 2)


async def test_zombie_fencing_after_init_producer_id_bump(h: Harness) -> None:
    """design/architecture.md §1.3: once a new instance initialised, nothing of the old epoch commits."""
    pid, old_epoch = await h.begin("t")
    await expect(ConcurrentTransactions, h.init("t"))  # new instance arrives; the zombie's txn is being aborted

    await expect(ProducerFenced, h.coordinator.end_txn("t", pid, old_epoch, commit=True))
    await expect(ProducerFenced, h.coordinator.end_txn("t", pid, old_epoch, commit=False))
    await expect(ProducerFenced, h.coordinator.add_partitions("t", pid, old_epoch, {TP1}))
    await expect(ProducerFenced, h.coordinator.add_offsets("t", pid, old_epoch, "group"))

    new_identity = await h.init_until_done("t")
    assert new_identity == (pid, old_epoch + 2)
    await expect(ProducerFenced, h.coordinator.add_partitions("t", pid, old_epoch, {TP1}))
    await expect(ProducerFenced, h.coordinator.end_txn("t", pid, old_epoch, commit=True))
    await expect(ProducerFenced, h.init("t", expected_pid=pid, expected_epoch=old_epoch))
    assert TransactionResult.COMMIT not in {m.result for m in h.markers.for_id("t")}

    await h.coordinator.add_partitions("t", *new_identity, {TP1})
    assert await h.coordinator.end_txn("t", *new_identity, commit=True) == (pid, old_epoch + 3)


async def test_failed_fence_write_does_not_bump_epoch_twice(h: Harness) -> None:
    """Kafka ``testFailureToFenceEpoch``: partitions see the epoch grow by exactly one."""
    pid, epoch = await h.begin("t")
    h.store.fail_next_write(StorageUnavailable("disk gone"))
    await expect(StorageUnavailable, h.init("t"))
    assert (h.describe("t").state, h.describe("t").producer_epoch) == (S.ONGOING, epoch)
    assert h.markers.sent == []

    await expect(ConcurrentTransactions, h.init("t"))
    [markers] = h.markers.for_id("t")
    assert markers.producer_epoch == epoch + 1
    assert await h.init_until_done("t") == (pid, epoch + 2)


async def test_kip360_continuing_producer_bumps_epoch_and_records_last_epoch(h: Harness) -> None:
    pid, epoch = await h.init("t")
    assert await h.init("t", expected_pid=pid, expected_epoch=epoch) == (pid, epoch + 1)
    assert h.store.rows["t"].last_producer_epoch == epoch


async def test_kip360_retry_of_successful_bump_returns_same_epoch(h: Harness) -> None:
    pid, epoch = await h.init("t")
    bumped = await h.init("t", expected_pid=pid, expected_epoch=epoch)
    assert await h.init("t", expected_pid=pid, expected_epoch=epoch) == bumped


async def test_kip360_stale_expected_epoch_is_fenced(h: Harness) -> None:
    pid, epoch = await h.init("t")
    await h.init("t")  # another instance took over: last epoch forgotten
    await expect(ProducerFenced, h.init("t", expected_pid=pid, expected_epoch=epoch))


async def test_kip360_foreign_producer_id_is_fenced(h: Harness) -> None:
    pid, epoch = await h.init("t")
    await expect(ProducerFenced, h.init("t", expected_pid=pid + 77, expected_epoch=epoch))
    assert h.describe("t").producer_epoch == epoch


async def test_kip360_expected_identity_for_unknown_id_gets_new_producer_id(h: Harness) -> None:
    identity = await h.init("t", expected_pid=5, expected_epoch=9)
    assert identity == (h.pids.issued[0], 0)


async def test_kip360_retry_is_recognised_after_coordinator_failover(h: Harness) -> None:
    """KAFKA-20357: the last epoch is persisted, so a retried bump is not fenced by the new owner."""
    pid, epoch = await h.init("t")
    bumped = await h.init("t", expected_pid=pid, expected_epoch=epoch)
    successor = h.new_coordinator()
    await h.load_all(successor)
    assert await successor.init_producer_id("t", TIMEOUT, expected_pid=pid, expected_epoch=epoch) == bumped


async def test_epoch_exhaustion_rotates_producer_id(h: Harness) -> None:
    h.seed("t", S.EMPTY, producer_id=10, epoch=LAST_USABLE_EPOCH, last_producer_epoch=LAST_USABLE_EPOCH - 1)
    await h.load_all()
    rotated = await h.init("t", expected_pid=10, expected_epoch=LAST_USABLE_EPOCH)
    assert rotated == (h.pids.issued[-1], 0)
    assert rotated.producer_id != 10
    row = h.store.rows["t"]
    assert (row.previous_producer_id, row.last_producer_epoch) == (10, LAST_USABLE_EPOCH)
    # A retry whose response was lost names the old identity again and gets the same answer.
    assert await h.init("t", expected_pid=10, expected_epoch=LAST_USABLE_EPOCH) == rotated


async def test_new_instance_on_exhausted_epoch_rotates_producer_id(h: Harness) -> None:
    h.seed("t", S.COMPLETE_ABORT, producer_id=10, epoch=MAX_PRODUCER_EPOCH)  # left by a fence at 32766
    await h.load_all()
    assert await h.init("t") == (h.pids.issued[-1], 0)


async def test_timed_out_producer_is_fenced_on_reinit(h: Harness) -> None:
    """design/kafka-semantics.md §5.2: as in Kafka, a producer whose transaction timed out cannot claim the bumped
    epoch."""
    pid, epoch = await h.begin("t")
    h.clock.now += TIMEOUT + 1
    assert await h.coordinator.abort_timed_out_transactions(h.clock.now) == ["t"]
    await h.markers.deliver_all()
    await expect(ProducerFenced, h.init("t", expected_pid=pid, expected_epoch=epoch))


# ------------------------------------------------------------------------------------------ AddPartitions / AddOffsets


async def test_add_partitions_starts_transaction(h: Harness) -> None:
    pid, epoch = await h.init("t")
    h.clock.now += 5
    await h.coordinator.add_partitions("t", pid, epoch, {TP0, TP1})
    described = h.describe("t")
    assert (described.state, described.partitions, described.txn_start_timestamp) == (
        S.ONGOING,
        {TP0, TP1},
        h.clock.now,
    )


async def test_add_partitions_rejects_unknown_id_and_foreign_identity(h: Harness) -> None:
    await expect(InvalidProducerIdMapping, h.coordinator.add_partitions("unknown", 1, 0, {TP0}))
    pid, epoch = await h.init("t")
    await expect(InvalidProducerIdMapping, h.coordinator.add_partitions("t", pid + 1, epoch, {TP0}))
    await expect(ProducerFenced, h.coordinator.add_partitions("t", pid, epoch + 1, {TP0}))
    await expect(InvalidRequest, h.coordinator.add_partitions("t", pid, epoch, set()))
    await expect(InvalidRequest, h.coordinator.add_offsets("t", pid, epoch, ""))
    assert h.describe("t").state is S.EMPTY


async def test_add_offsets_applies_the_group_id_rule(h: Harness) -> None:
    """Issue 25 item 2: an id group-offsets would refuse never becomes a participant (its marker would wedge)."""
    pid, epoch = await h.begin("t")
    with pytest.raises(InvalidRequest, match="256 characters long; the limit is 255"):
        await h.coordinator.add_offsets("t", pid, epoch, "g" * 256)
    assert h.store.rows["t"].groups == set()
    await h.coordinator.add_offsets("t", pid, epoch, "g" * 255)
    assert h.store.rows["t"].groups == {"g" * 255}


async def test_add_partitions_already_present_writes_nothing(h: Harness) -> None:
    pid, epoch = await h.begin("t", TP0, TP1)
    writes = len(h.store.writes)
    await h.coordinator.add_partitions("t", pid, epoch, {TP1})
    assert len(h.store.writes) == writes


async def test_add_offsets_makes_group_a_marker_participant(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.add_offsets("t", pid, epoch, "copier-group")
    assert h.store.rows["t"].groups == {"copier-group"}
    await h.coordinator.end_txn("t", pid, epoch, commit=True)
    [markers] = h.markers.for_id("t")
    assert (markers.partitions, markers.groups) == ({TP0}, {"copier-group"})


async def test_concurrent_add_partitions_during_pending_write_gets_concurrent_transactions(h: Harness) -> None:
    pid, epoch = await h.init("t")
    h.store.hold_writes()
    first = asyncio.create_task(h.coordinator.add_partitions("t", pid, epoch, {TP0}))
    await h.store.write_waiting.wait()
    await expect(ConcurrentTransactions, h.coordinator.add_partitions("t", pid, epoch, {TP1}))
    await expect(ConcurrentTransactions, h.coordinator.end_txn("t", pid, epoch, commit=True))
    await expect(ConcurrentTransactions, h.init("t"))
    h.store.release_writes()
    await first
    assert h.describe("t").partitions == {TP0}
    await h.coordinator.add_partitions("t", pid, epoch, {TP1})
    assert h.describe("t").partitions == {TP0, TP1}


@pytest.mark.parametrize("commit", [True, False])
async def test_add_partitions_before_markers_complete_gets_concurrent_transactions(h: Harness, commit: bool) -> None:
    pid, epoch = await h.begin("t")
    next_identity = await h.coordinator.end_txn("t", pid, epoch, commit=commit)
    await expect(ConcurrentTransactions, h.coordinator.add_partitions("t", *next_identity, {TP1}))
    await h.markers.deliver_all()
    await h.coordinator.add_partitions("t", *next_identity, {TP1})
    assert h.describe("t").state is S.ONGOING


# ------------------------------------------------------------------------------------------ EndTxn


@pytest.mark.parametrize("commit", [True, False])
async def test_end_txn_writes_prepare_then_replies_with_bumped_epoch(h: Harness, commit: bool) -> None:
    pid, epoch = await h.begin("t")
    h.store.hold_writes()
    ending = asyncio.create_task(h.coordinator.end_txn("t", pid, epoch, commit=commit))
    await h.store.write_waiting.wait()
    assert not ending.done()
    assert h.markers.sent == []  # no marker before the decision is durable
    h.store.release_writes()
    assert await ending == (pid, epoch + 1)
    result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
    assert h.store.rows["t"].state is result.prepare_state
    [markers] = h.markers.for_id("t")
    assert (markers.result, markers.producer_epoch, markers.coordinator_epoch) == (result, epoch + 1, 1)


@pytest.mark.parametrize("commit", [True, False])
async def test_markers_complete_persists_complete_state(h: Harness, commit: bool) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=commit)
    await h.markers.deliver_all()
    result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
    row = h.store.rows["t"]
    assert (row.state, row.producer_epoch, row.partitions) == (result.complete_state, epoch + 1, frozenset())
    assert h.describe("t").state is result.complete_state


async def test_duplicate_marker_completion_writes_complete_once(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=True)
    [markers] = h.markers.for_id("t")
    await markers.on_complete()
    await markers.on_complete()
    assert h.store.states_written("t").count(S.COMPLETE_COMMIT) == 1


@pytest.mark.parametrize("commit", [True, False])
async def test_end_txn_and_wait_replies_once_complete_is_durable(h: Harness, commit: bool) -> None:
    """The read-after-commit option: the reply waits for every marker and the Complete* write, without polling."""
    pid, epoch = await h.begin("t")
    ending = asyncio.create_task(h.coordinator.end_txn_and_wait("t", pid, epoch, commit=commit))
    await h.markers.enqueued.wait()  # decided; the call now waits on the id's next transition
    assert not ending.done(), "replied before the markers were acknowledged"
    result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
    assert h.store.rows["t"].state is result.prepare_state
    await h.markers.deliver_all()
    assert await ending == ((pid, epoch + 1), True)
    assert h.store.rows["t"].state is result.complete_state


async def test_end_txn_and_wait_that_runs_out_reports_not_completed_and_its_retry_waits_again(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    ran_out = await h.coordinator.end_txn_and_wait("t", pid, epoch, commit=True, max_wait_ms=0)
    assert ran_out == ((pid, epoch + 1), False)
    retry = asyncio.create_task(h.coordinator.end_txn_and_wait("t", pid, epoch, commit=True, max_wait_ms=10_000))
    await asyncio.sleep(0)  # one turn: the retry is recognised and starts waiting
    assert not retry.done()
    await h.markers.deliver_all()
    assert await retry == ((pid, epoch + 1), True)
    assert h.store.states_written("t").count(S.PREPARE_COMMIT) == 1, "the retry decided nothing again"
    again = await h.coordinator.end_txn_and_wait("t", pid, epoch, commit=True, max_wait_ms=0)
    assert again == ((pid, epoch + 1), True), "a complete transaction answers at once"


async def test_end_txn_and_wait_on_a_shard_lost_meanwhile_is_not_coordinator(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    ending = asyncio.create_task(h.coordinator.end_txn_and_wait("t", pid, epoch, commit=True))
    await h.markers.enqueued.wait()
    h.coordinator.unload(shard_for("t"))
    await expect(NotCoordinator, ending)
    assert h.store.rows["t"].state is S.PREPARE_COMMIT, "left for the next owner, where the retry waits again"


async def test_commit_retry_is_idempotent(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    first = await h.coordinator.end_txn("t", pid, epoch, commit=True)
    assert await h.coordinator.end_txn("t", pid, epoch, commit=True) == first  # PrepareCommit
    await h.markers.deliver_all()
    assert await h.coordinator.end_txn("t", pid, epoch, commit=True) == first  # CompleteCommit
    assert h.store.states_written("t").count(S.PREPARE_COMMIT) == 1
    assert len(h.markers.for_id("t")) == 1


async def test_abort_retry_is_idempotent(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    first = await h.coordinator.end_txn("t", pid, epoch, commit=False)
    assert await h.coordinator.end_txn("t", pid, epoch, commit=False) == first
    await h.markers.deliver_all()
    assert await h.coordinator.end_txn("t", pid, epoch, commit=False) == first


async def test_commit_while_prepare_abort_is_invalid_txn_state(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=False)
    await expect(InvalidTxnState, h.coordinator.end_txn("t", pid, epoch, commit=True))
    assert h.store.rows["t"].state is S.PREPARE_ABORT


async def test_abort_while_prepare_commit_is_invalid_txn_state(h: Harness) -> None:
    """design/architecture.md §1.7: a durable commit is never turned into an abort."""
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=True)
    await expect(InvalidTxnState, h.coordinator.end_txn("t", pid, epoch, commit=False))
    await h.markers.deliver_all()
    await expect(InvalidTxnState, h.coordinator.end_txn("t", pid, epoch, commit=False))
    assert h.store.rows["t"].state is S.COMPLETE_COMMIT


async def test_commit_after_abort_is_invalid_txn_state(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=False)
    await h.markers.deliver_all()
    await expect(InvalidTxnState, h.coordinator.end_txn("t", pid, epoch, commit=True))


async def test_commit_without_open_transaction_is_invalid_txn_state(h: Harness) -> None:
    pid, epoch = await h.init("t")
    await expect(InvalidTxnState, h.coordinator.end_txn("t", pid, epoch, commit=True))
    assert h.store.states_written("t") == [S.EMPTY]


async def test_abort_without_open_transaction_bumps_epoch(h: Harness) -> None:
    """TV2 "abort when unsure": always allowed, ends nothing but moves the epoch on."""
    pid, epoch = await h.init("t")
    assert await h.coordinator.end_txn("t", pid, epoch, commit=False) == (pid, epoch + 1)
    [markers] = h.markers.for_id("t")
    assert (markers.partitions, markers.groups) == (frozenset(), frozenset())
    await h.markers.deliver_all()
    assert h.describe("t").state is S.COMPLETE_ABORT


async def test_end_txn_with_new_epoch_while_markers_pending_gets_concurrent_transactions(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    next_identity = await h.coordinator.end_txn("t", pid, epoch, commit=True)
    await expect(ConcurrentTransactions, h.coordinator.end_txn("t", *next_identity, commit=False))


async def test_stale_end_txn_cannot_end_next_transaction(h: Harness) -> None:
    """KIP-890: a delayed EndTxn of the previous transaction is fenced by the bumped epoch."""
    pid, epoch = await h.begin("t")
    next_identity = await h.coordinator.end_txn("t", pid, epoch, commit=False)
    await h.markers.deliver_all()
    await h.coordinator.add_partitions("t", *next_identity, {TP1})
    await expect(ProducerFenced, h.coordinator.end_txn("t", pid, epoch, commit=False))
    await expect(ProducerFenced, h.coordinator.end_txn("t", pid, epoch, commit=True))
    assert h.describe("t").state is S.ONGOING


async def test_end_txn_errors_for_unknown_id_and_foreign_producer_id(h: Harness) -> None:
    await expect(InvalidProducerIdMapping, h.coordinator.end_txn("unknown", 1, 0, commit=True))
    await expect(InvalidRequest, h.coordinator.end_txn("", 1, 0, commit=True))
    pid, epoch = await h.begin("t")
    await expect(InvalidProducerIdMapping, h.coordinator.end_txn("t", pid + 1, epoch, commit=True))
    await expect(ProducerFenced, h.coordinator.end_txn("t", pid, epoch + 1, commit=True))


async def test_epoch_exhaustion_on_end_txn_rotates_producer_id(h: Harness) -> None:
    h.seed("t", S.EMPTY, producer_id=10, epoch=LAST_USABLE_EPOCH)
    await h.load_all()
    await h.coordinator.add_partitions("t", 10, LAST_USABLE_EPOCH, {TP0})
    next_identity = await h.coordinator.end_txn("t", 10, LAST_USABLE_EPOCH, commit=True)
    assert next_identity == (h.pids.issued[-1], 0)
    [markers] = h.markers.for_id("t")
    assert (markers.producer_id, markers.producer_epoch) == (10, MAX_PRODUCER_EPOCH)

    assert await h.coordinator.end_txn("t", 10, LAST_USABLE_EPOCH, commit=True) == next_identity
    await expect(ConcurrentTransactions, h.coordinator.add_partitions("t", *next_identity, {TP1}))
    await h.markers.deliver_all()

    row = h.store.rows["t"]
    assert (row.state, row.producer_id, row.producer_epoch, row.previous_producer_id) == (
        S.COMPLETE_COMMIT,
        next_identity.producer_id,
        0,
        10,
    )
    assert await h.coordinator.end_txn("t", 10, LAST_USABLE_EPOCH, commit=True) == next_identity
    await h.coordinator.add_partitions("t", *next_identity, {TP1})
    assert await h.coordinator.end_txn("t", *next_identity, commit=True) == (next_identity.producer_id, 1)


async def test_reserved_epoch_cannot_open_a_transaction(h: Harness) -> None:
    h.seed("t", S.COMPLETE_ABORT, producer_id=10, epoch=MAX_PRODUCER_EPOCH)
    await h.load_all()
    await expect(ProducerFenced, h.coordinator.add_partitions("t", 10, MAX_PRODUCER_EPOCH, {TP0}))
    await expect(ProducerFenced, h.coordinator.end_txn("t", 10, MAX_PRODUCER_EPOCH, commit=False))


# ------------------------------------------------------------------------------------------ durability order


async def test_persist_failure_leaves_cache_unchanged(h: Harness) -> None:
    h.store.fail_next_write(StorageUnavailable("down"))
    await expect(StorageUnavailable, h.init("new"))
    assert isinstance(h.coordinator.describe(["new"])["new"], TransactionalIdNotFound)

    pid, epoch = await h.init("t")
    before = h.describe("t")
    h.store.fail_next_write(StorageUnavailable("down"))
    await expect(StorageUnavailable, h.coordinator.add_partitions("t", pid, epoch, {TP0}))
    assert h.describe("t") == before

    await h.coordinator.add_partitions("t", pid, epoch, {TP0})
    before = h.describe("t")
    h.store.fail_next_write(StorageUnavailable("down"))
    await expect(StorageUnavailable, h.coordinator.end_txn("t", pid, epoch, commit=True))
    assert h.describe("t") == before
    assert h.markers.sent == []
    # The indeterminate commit is retried with the same identity and succeeds (design/architecture.md §1.7).
    assert await h.coordinator.end_txn("t", pid, epoch, commit=True) == (pid, epoch + 1)


async def test_cancelled_write_leaves_cache_unchanged(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    before = h.describe("t")
    h.store.hold_writes()
    ending = asyncio.create_task(h.coordinator.end_txn("t", pid, epoch, commit=True))
    await h.store.write_waiting.wait()
    ending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ending
    h.store.release_writes()
    assert h.describe("t") == before
    assert await h.coordinator.end_txn("t", pid, epoch, commit=True) == (pid, epoch + 1)


async def test_write_with_stale_coordinator_epoch_is_not_coordinator(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    before = h.describe("t")
    h.store.lease_epochs[shard_for("t")] += 1  # another coordinator took the shard's lease
    await expect(NotCoordinator, h.coordinator.end_txn("t", pid, epoch, commit=True))
    assert h.describe("t") == before
    assert h.markers.sent == []


async def test_write_completing_after_unload_answers_not_coordinator(h: Harness) -> None:
    pid, epoch = await h.init("t")
    h.store.hold_writes()
    adding = asyncio.create_task(h.coordinator.add_partitions("t", pid, epoch, {TP0}))
    await h.store.write_waiting.wait()
    h.coordinator.unload(shard_for("t"))
    h.store.release_writes()
    await expect(NotCoordinator, adding)
    await h.load_all()
    assert h.describe("t").state is S.ONGOING  # the durable row wins after reload


# ------------------------------------------------------------------------------------------ load / failover


async def test_requests_for_unowned_or_loading_shards(h: Harness) -> None:
    shard = shard_for("t")
    h.coordinator.unload(shard)
    await expect(NotCoordinator, h.init("t"))
    assert isinstance(h.coordinator.describe(["t"])["t"], NotCoordinator)

    h.store.load_gate = asyncio.Event()
    loading = asyncio.create_task(h.coordinator.load(shard, 5))
    await asyncio.sleep(0)
    await expect(CoordinatorLoadInProgress, h.init("t"))
    with pytest.raises(CoordinatorLoadInProgress):
        h.coordinator.list_transactions()
    h.store.load_gate.set()
    await loading
    h.store.lease_epochs[shard] = 5
    assert (await h.init("t")).epoch == 0


async def test_a_shard_leased_here_but_not_loaded_yet_answers_load_in_progress(h: Harness) -> None:
    """FindCoordinator names this process from the moment its lease is written, before the load starts: a request
    then must hear "retry here" (COORDINATOR_LOAD_IN_PROGRESS), not "look elsewhere" (NOT_COORDINATOR)."""
    leased: set[int] = set()
    coordinator = h.new_coordinator(leased=leased.__contains__)
    shard = shard_for("t")
    leased.add(shard)
    await expect(CoordinatorLoadInProgress, coordinator.init_producer_id("t", TIMEOUT))
    assert isinstance(coordinator.describe(["t"])["t"], CoordinatorLoadInProgress)
    leased.discard(shard)
    await expect(NotCoordinator, coordinator.init_producer_id("t", TIMEOUT))
    assert isinstance(coordinator.describe(["t"])["t"], NotCoordinator)


async def test_load_replays_rows_and_resumes_prepare_markers(h: Harness) -> None:
    h.seed("committing", S.PREPARE_COMMIT, producer_id=1, epoch=4, last_producer_epoch=3)
    h.seed("aborting", S.PREPARE_ABORT, producer_id=2, epoch=7, groups=frozenset({"g"}))
    h.seed("open", S.ONGOING, producer_id=3, epoch=1)
    h.seed("done", S.COMPLETE_COMMIT, producer_id=4, epoch=2)
    h.store.rows.pop("nothing", None)
    successor = h.new_coordinator()
    await h.load_all(successor)
    resumed = {m.transactional_id: m for m in h.markers.sent}
    assert set(resumed) == {"committing", "aborting"}
    assert (resumed["committing"].result, resumed["committing"].producer_epoch) == (TransactionResult.COMMIT, 4)
    assert (resumed["aborting"].result, resumed["aborting"].groups) == (TransactionResult.ABORT, {"g"})
    assert {m.coordinator_epoch for m in resumed.values()} == {h.coordinator_epoch}

    await h.markers.deliver_all()
    assert h.store.rows["committing"].state is S.COMPLETE_COMMIT
    assert h.store.rows["aborting"].state is S.COMPLETE_ABORT
    assert h.store.rows["open"].state is S.ONGOING


async def test_load_returns_transactions_whose_markers_resume(h: Harness) -> None:
    h.seed("committing", S.PREPARE_COMMIT, producer_id=1, epoch=4)
    shard = shard_for("committing")
    h.store.lease_epochs[shard] = 9
    resumed = await h.new_coordinator().load(shard, 9)
    assert [(d.transactional_id, d.state) for d in resumed] == [("committing", S.PREPARE_COMMIT)]


async def test_log_replay_applies_rows_in_order_and_tombstones_delete(h: Harness) -> None:
    h.seed("gone", S.EMPTY, producer_id=1, epoch=0)
    h.seed("kept", S.EMPTY, producer_id=2, epoch=0)
    first_kept = h.store.rows["kept"]
    h.seed("kept", S.ONGOING, producer_id=2, epoch=0)
    h.store.log = [("gone", h.store.rows["gone"]), ("kept", first_kept), ("gone", None), ("kept", h.store.rows["kept"])]
    await h.load_all()
    assert isinstance(h.coordinator.describe(["gone"])["gone"], TransactionalIdNotFound)
    assert h.describe("kept").state is S.ONGOING


async def test_marker_completion_after_unload_is_dropped(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=True)
    h.coordinator.unload(shard_for("t"))
    await h.markers.deliver_all()
    assert [m.transactional_id for m in h.markers.dropped] == ["t"]
    assert h.store.rows["t"].state is S.PREPARE_COMMIT  # left for the next owner to resume


async def test_concurrent_load_and_unload_of_shards(h: Harness) -> None:
    """S6 ``testConcurrentLoadUnloadPartitions``: loaded shards finish Prepare*, unloaded ones vanish."""
    per_shard = {shard: ids_on_shard(shard, 5, "lu") for shard in range(SHARDS)}
    for ids in per_shard.values():
        for txn in ids:
            pid, epoch = await h.begin(txn)
            await h.coordinator.end_txn(txn, pid, epoch, commit=True)
    h.markers.queue.clear()  # those deliveries are lost with the old coordinator epoch

    to_load, to_unload = (0, 1), (2, 3)
    for shard in to_load:
        h.store.lease_epochs[shard] = 2
    await asyncio.gather(
        *(h.coordinator.load(shard, 2) for shard in to_load),
        *(_unload_soon(h.coordinator, shard) for shard in to_unload),
    )
    await h.markers.deliver_all()
    for shard in to_load:
        for txn in per_shard[shard]:
            assert h.describe(txn).state is S.COMPLETE_COMMIT
    for shard in to_unload:
        for txn in per_shard[shard]:
            assert isinstance(h.coordinator.describe([txn])[txn], NotCoordinator)
            assert h.store.rows[txn].state is S.PREPARE_COMMIT


async def _unload_soon(coordinator: TransactionCoordinator, shard: int) -> None:
    await asyncio.sleep(0)
    coordinator.unload(shard)


async def test_unload_with_older_epoch_keeps_newer_cache(h: Harness) -> None:
    await h.init("t")
    shard = shard_for("t")
    h.store.lease_epochs[shard] = 3
    await h.coordinator.load(shard, 3)
    h.coordinator.unload(shard, coordinator_epoch=1)
    assert h.describe("t").producer_epoch == 0
    await expect(NotCoordinator, h.coordinator.load(shard, 2))


# ------------------------------------------------------------------------------------------ sweepers


async def test_timeout_abort_fences_the_epoch(h: Harness) -> None:
    started = h.clock.now
    pid, epoch = await h.begin("slow")
    h.clock.now += 10
    await h.begin("fresh")
    h.clock.now = started + TIMEOUT  # exactly the timeout: not yet expired (strict comparison)
    assert await h.coordinator.abort_timed_out_transactions(h.clock.now) == []
    h.clock.now += 1
    assert await h.coordinator.abort_timed_out_transactions(h.clock.now) == ["slow"]

    row = h.store.rows["slow"]
    assert (row.state, row.producer_epoch, row.last_producer_epoch) == (S.PREPARE_ABORT, epoch + 1, NO_PRODUCER_EPOCH)
    [markers] = h.markers.for_id("slow")
    assert (markers.result, markers.producer_epoch) == (TransactionResult.ABORT, epoch + 1)
    await expect(ProducerFenced, h.coordinator.end_txn("slow", pid, epoch, commit=True))
    assert h.describe("fresh").state is S.ONGOING
    await h.markers.deliver_all()
    assert h.describe("slow").state is S.COMPLETE_ABORT
    assert await h.coordinator.abort_timed_out_transactions(h.clock.now + TIMEOUT) == ["fresh"]


async def test_timeout_abort_ignores_transactions_without_open_work(h: Harness) -> None:
    await h.init("empty")
    pid, epoch = await h.begin("committing")
    await h.coordinator.end_txn("committing", pid, epoch, commit=True)
    assert await h.coordinator.abort_timed_out_transactions(h.clock.now + 10 * TIMEOUT) == []


async def test_timeout_abort_skips_transaction_with_pending_write(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    h.store.hold_writes()
    committing = asyncio.create_task(h.coordinator.end_txn("t", pid, epoch, commit=True))
    await h.store.write_waiting.wait()
    assert await h.coordinator.abort_timed_out_transactions(h.clock.now + 10 * TIMEOUT) == []
    h.store.release_writes()
    assert await committing == (pid, epoch + 1)
    assert h.store.rows["t"].state is S.PREPARE_COMMIT


async def test_timeout_abort_failed_write_does_not_bump_twice(h: Harness) -> None:
    _, epoch = await h.begin("t")
    later = h.clock.now + TIMEOUT + 1
    h.store.fail_next_write(StorageUnavailable("down"))
    assert await h.coordinator.abort_timed_out_transactions(later) == []
    assert h.describe("t").producer_epoch == epoch
    assert await h.coordinator.abort_timed_out_transactions(later) == ["t"]
    assert h.store.rows["t"].producer_epoch == epoch + 1


async def test_expire_transactional_ids_only_idle_ids_without_open_transaction(h: Harness) -> None:
    expiration = 7 * 24 * 3600 * 1000
    await h.init("idle-empty")
    pid, epoch = await h.begin("idle-committed")
    await h.coordinator.end_txn("idle-committed", pid, epoch, commit=True)
    await h.markers.deliver_all()
    await h.begin("idle-open")
    h.clock.now += expiration
    await h.init("recent")

    expired = await h.coordinator.expire_transactional_ids(h.clock.now, expiration)
    assert sorted(expired) == ["idle-committed", "idle-empty"]
    assert "idle-empty" not in h.store.rows
    assert "idle-committed" not in h.store.rows
    assert isinstance(h.coordinator.describe(["idle-empty"])["idle-empty"], TransactionalIdNotFound)
    assert h.describe("idle-open").state is S.ONGOING
    assert h.describe("recent").state is S.EMPTY

    # design/kafka-semantics.md §2.8: the old producer learns through INVALID_PRODUCER_ID_MAPPING and re-initialises.
    await expect(InvalidProducerIdMapping, h.coordinator.add_partitions("idle-committed", pid, epoch + 1, {TP0}))
    fresh = await h.init("idle-committed", expected_pid=pid, expected_epoch=epoch + 1)
    assert fresh.producer_id != pid


async def test_expiration_keeps_id_when_tombstone_write_fails(h: Harness) -> None:
    await h.init("t")
    h.store.fail_next_write(StorageUnavailable("down"))
    assert await h.coordinator.expire_transactional_ids(h.clock.now + 10, 0) == []
    assert h.describe("t").state is S.EMPTY
    assert "t" in h.store.rows
    assert await h.coordinator.expire_transactional_ids(h.clock.now + 10, 0) == ["t"]


async def test_load_unload_and_expiration_run_concurrently(h: Harness) -> None:
    """S6 ``testConcurrentTransactionExpiration``."""
    expiring = ids_on_shard(3, 5, "exp")
    for txn in expiring:
        await h.init(txn)
    kept = ids_on_shard(0, 3, "keep")
    for txn in kept:
        await h.init(txn)
    h.store.lease_epochs[0] = 2
    await asyncio.gather(
        h.coordinator.load(0, 2),
        _unload_soon(h.coordinator, 2),
        h.coordinator.expire_transactional_ids(h.clock.now + 1, 0),
    )
    assert all(txn not in h.store.rows for txn in expiring)
    assert all(h.describe(txn).state is S.EMPTY for txn in kept)


# ------------------------------------------------------------------------------------------ admin


async def test_admin_abort_fences_and_aborts_ongoing_transaction(h: Harness) -> None:
    pid, epoch = await h.begin("hanging")
    described = await h.coordinator.abort_transaction("hanging")
    assert (described.state, described.producer_epoch) == (S.PREPARE_ABORT, epoch + 1)
    await expect(ProducerFenced, h.coordinator.end_txn("hanging", pid, epoch, commit=True))
    await h.markers.deliver_all()
    assert h.describe("hanging").state is S.COMPLETE_ABORT


async def test_admin_abort_never_aborts_a_commit(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=True)
    await expect(InvalidTxnState, h.coordinator.abort_transaction("t"))
    await expect(TransactionalIdNotFound, h.coordinator.abort_transaction("unknown"))


async def test_admin_skip_markers_only_of_a_completing_transaction_and_its_participants(h: Harness) -> None:
    """Issue 25 item 2: the operator's escape for a marker that can never be delivered."""
    pid, epoch = await h.begin("t", TP0, TP1)
    await h.coordinator.add_offsets("t", pid, epoch, "g")
    await expect(InvalidTxnState, h.coordinator.skip_markers("t", [TP0], []))  # still Ongoing: nothing to skip
    await h.coordinator.end_txn("t", pid, epoch, commit=True)
    with pytest.raises(InvalidRequest, match="not a participant"):
        await h.coordinator.skip_markers("t", [("elsewhere", 0)], ["g"])
    await expect(InvalidRequest, h.coordinator.skip_markers("t", [], []))
    await expect(TransactionalIdNotFound, h.coordinator.skip_markers("unknown", [TP0], []))
    assert await h.coordinator.skip_markers("t", [TP1], ["g"]) == ({TP1}, {"g"})
    assert h.markers.skipped == [("t", frozenset({TP1}), frozenset({"g"}))]


async def test_admin_abort_without_open_transaction_changes_nothing(h: Harness) -> None:
    await h.init("t")
    writes = len(h.store.writes)
    assert (await h.coordinator.abort_transaction("t")).state is S.EMPTY
    assert len(h.store.writes) == writes


async def test_describe_and_list_transactions(h: Harness) -> None:
    a = await h.begin("a", TP0, TP1)
    await h.coordinator.add_offsets("a", *a, "g")
    await h.init("b")
    c = await h.begin("c")
    await h.coordinator.end_txn("c", *c, commit=True)

    described = h.coordinator.describe(["a", "missing"])
    assert described["a"] == TransactionDescription(
        transactional_id="a",
        producer_id=a.producer_id,
        producer_epoch=a.epoch,
        state=S.ONGOING,
        txn_timeout_ms=TIMEOUT,
        txn_start_timestamp=h.clock.now,
        txn_last_update_timestamp=h.clock.now,
        partitions=frozenset({TP0, TP1}),
        groups=frozenset({"g"}),
    )
    assert isinstance(described["missing"], TransactionalIdNotFound)

    def listed(**filters: object) -> list[str]:
        return [d.transactional_id for d in h.coordinator.list_transactions(**filters)]  # type: ignore[arg-type]

    assert listed() == ["a", "b", "c"]
    assert listed(states={S.ONGOING, S.PREPARE_COMMIT}) == ["a", "c"]
    assert listed(producer_ids={c.producer_id}) == ["c"]
    h.clock.now += 1000
    assert listed(older_than_ms=1000) == ["a", "c"]
    assert listed(older_than_ms=1001) == []


# ------------------------------------------------------------------------------------------ S6 concurrency


async def test_concurrent_good_path_commits_even_and_aborts_odd(h: Harness) -> None:
    """S6 good path: InitProducerId -> AddPartitions -> EndTxn on many ids at once."""

    async def good_path(i: int) -> tuple[str, bool, ProducerIdAndEpoch, ProducerIdAndEpoch]:
        txn = f"good-{i}"
        identity = await h.init_until_done(txn)
        await h.coordinator.add_partitions(txn, *identity, {("topic", i % 3)})
        commit = i % 2 == 0
        return txn, commit, identity, await h.coordinator.end_txn(txn, *identity, commit=commit)

    results = await asyncio.gather(*(good_path(i) for i in range(50)))
    await h.markers.deliver_all()
    for txn, commit, (pid, epoch), next_identity in results:
        expected = S.COMPLETE_COMMIT if commit else S.COMPLETE_ABORT
        assert h.describe(txn).state is expected
        assert next_identity == (pid, epoch + 1)
        assert await h.coordinator.end_txn(txn, pid, epoch, commit=commit) == next_identity  # retried: same answer
        await expect(InvalidTxnState, h.coordinator.end_txn(txn, *next_identity, commit=True))


async def test_concurrent_random_operation_orders_then_good_path_still_works(h: Harness) -> None:
    """S6 ``testConcurrentRandomSequences``: no interleaving breaks an invariant or wedges an id."""
    rng = random.Random(20240917)
    identities: dict[str, ProducerIdAndEpoch] = {}
    ids = [f"rnd-{i}" for i in range(10)]

    async def random_ops(txn: str) -> None:
        for _ in range(12):
            op = rng.choice(["init", "add", "offsets", "commit", "abort", "deliver"])
            identity = identities.get(txn, ProducerIdAndEpoch(0, 0))
            try:
                if op == "init":
                    identities[txn] = await h.init(txn)
                elif op == "add":
                    await h.coordinator.add_partitions(txn, *identity, {("topic", rng.randrange(4))})
                elif op == "offsets":
                    await h.coordinator.add_offsets(txn, *identity, "group")
                elif op in ("commit", "abort"):
                    identities[txn] = await h.coordinator.end_txn(txn, *identity, commit=op == "commit")
                else:
                    await h.markers.deliver_all()
            except OncelogError:
                pass  # the protocol's answers; invariant violations raise IllegalTransitionError instead

    await asyncio.gather(*(random_ops(txn) for txn in ids for _ in range(3)))
    await h.markers.deliver_all()
    for txn in ids:
        identity = await h.init_until_done(txn)
        await h.coordinator.add_partitions(txn, *identity, {TP0})
        await h.coordinator.end_txn(txn, *identity, commit=True)
    await h.markers.deliver_all()
    assert {h.describe(txn).state for txn in ids} == {S.COMPLETE_COMMIT}


async def test_concurrent_new_init_producer_ids_on_exhausted_epoch(h: Harness) -> None:
    """S6 ``testConcurrentNewInitProducerIdRequests``: one wins with epoch 0 on the new producer id."""
    h.seed("t", S.EMPTY, producer_id=10, epoch=LAST_USABLE_EPOCH)
    await h.load_all()
    outcomes = await asyncio.gather(h.init("t"), h.init("t"), return_exceptions=True)
    winners = [o for o in outcomes if isinstance(o, tuple)]
    assert len(winners) == 1
    assert winners[0].producer_id != 10 and winners[0].epoch == 0
    assert all(isinstance(o, ConcurrentTransactions) for o in outcomes if not isinstance(o, tuple))
    assert await h.init("t") == (winners[0].producer_id, 1)


@pytest.mark.parametrize("continuing_first", [True, False])
async def test_concurrent_continuing_and_new_init_producer_id(h: Harness, continuing_first: bool) -> None:
    """S6 ``testConcurrentInitProducerIdRequestsOneNewOneContinuing``."""
    pid, epoch = await h.init("t")
    continuing = h.init("t", expected_pid=pid, expected_epoch=epoch)
    new = h.init("t")
    calls = (continuing, new) if continuing_first else (new, continuing)
    first, second = await asyncio.gather(*calls, return_exceptions=True)
    assert first == (pid, epoch + 1)
    assert isinstance(second, ConcurrentTransactions)
    if continuing_first:
        assert await h.init("t") == (pid, epoch + 2)  # the new instance, retried, gets the higher epoch
    else:
        await expect(ProducerFenced, h.init("t", expected_pid=pid, expected_epoch=epoch))


async def test_concurrent_continuing_init_with_same_stale_epoch_exactly_one_succeeds(h: Harness) -> None:
    """S6 ``testConcurrentContinuingInitProducerIdRequests`` (no state present)."""
    outcomes = await asyncio.gather(
        h.init("t", expected_pid=11, expected_epoch=10),
        h.init("t", expected_pid=11, expected_epoch=10),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if isinstance(o, tuple)]
    assert len(winners) == 1 and winners[0].epoch == 0
    await expect(ProducerFenced, h.init("t", expected_pid=11, expected_epoch=10))


@pytest.mark.parametrize("retry_first", [True, False])
async def test_retry_of_bump_racing_new_producer(h: Harness, retry_first: bool) -> None:
    """S6 ``testConcurrentInitProducerIdRequestsWithRetry``."""
    pid, epoch = await h.init("t")
    bumped = await h.init("t", expected_pid=pid, expected_epoch=epoch)
    retry = h.init("t", expected_pid=pid, expected_epoch=epoch)
    new = h.init("t")
    first, second = await asyncio.gather(*((retry, new) if retry_first else (new, retry)), return_exceptions=True)
    assert isinstance(second, ConcurrentTransactions)
    if retry_first:
        assert first == bumped
        assert await h.init("t") == (pid, bumped.epoch + 1)
    else:
        assert first == (pid, bumped.epoch + 1)
        await expect(ProducerFenced, h.init("t", expected_pid=pid, expected_epoch=epoch))


@pytest.mark.parametrize("continuing_first", [True, False])
async def test_concurrent_init_at_producer_id_boundary(h: Harness, continuing_first: bool) -> None:
    """S6 ``testConcurrentInitProducerRequestsAtPidBoundary``: epochs 0 and 1 on the new producer id."""
    h.seed("t", S.EMPTY, producer_id=10, epoch=LAST_USABLE_EPOCH)
    await h.load_all()
    continuing = h.init("t", expected_pid=10, expected_epoch=LAST_USABLE_EPOCH)
    new = h.init("t")
    calls = (continuing, new) if continuing_first else (new, continuing)
    first, second = await asyncio.gather(*calls, return_exceptions=True)
    assert isinstance(first, tuple) and first.epoch == 0 and first.producer_id != 10
    assert isinstance(second, ConcurrentTransactions)
    if continuing_first:
        assert await h.init("t") == (first.producer_id, 1)
    else:
        await expect(ProducerFenced, h.init("t", expected_pid=10, expected_epoch=LAST_USABLE_EPOCH))


@pytest.mark.parametrize("retry_first", [True, False])
async def test_retry_racing_new_producer_at_producer_id_boundary(h: Harness, retry_first: bool) -> None:
    """S6 ``testConcurrentInitProducerRequestsWithRetryAtPidBoundary``."""
    h.seed("t", S.EMPTY, producer_id=10, epoch=LAST_USABLE_EPOCH)
    await h.load_all()
    rotated = await h.init("t", expected_pid=10, expected_epoch=LAST_USABLE_EPOCH)
    retry = h.init("t", expected_pid=10, expected_epoch=LAST_USABLE_EPOCH)
    new = h.init("t")
    first, second = await asyncio.gather(*((retry, new) if retry_first else (new, retry)), return_exceptions=True)
    assert isinstance(second, ConcurrentTransactions)
    if retry_first:
        assert first == rotated
        assert await h.init("t") == (rotated.producer_id, 1)
    else:
        assert first == (rotated.producer_id, 1)
        await expect(ProducerFenced, h.init("t", expected_pid=10, expected_epoch=LAST_USABLE_EPOCH))


async def test_start_timestamp_is_unset_after_init(h: Harness) -> None:
    await h.init("t")
    assert h.describe("t").txn_start_timestamp == NO_TIMESTAMP


# ------------------------------------------------------------------------------------- parking (completion_wait_ms)


async def parked(task: asyncio.Task[object]) -> bool:
    """Whether ``task`` is still waiting after everything else runnable ran (it is not spinning or done)."""
    for _ in range(20):
        await asyncio.sleep(0)
    return not task.done()


@pytest.mark.parametrize("commit", [True, False])
async def test_add_partitions_waits_for_previous_markers_instead_of_rejecting(commit: bool) -> None:
    """Parked, not refused: the request succeeds once Complete* is durable, and never writes before it."""
    h = Harness(completion_wait_ms=10_000)
    await h.load_all()
    pid, epoch = await h.begin("t")
    next_identity = await h.coordinator.end_txn("t", pid, epoch, commit=commit)
    add = asyncio.create_task(h.coordinator.add_partitions("t", *next_identity, {TP1}))
    assert await parked(add)
    assert h.store.states_written("t")[-1] is (S.PREPARE_COMMIT if commit else S.PREPARE_ABORT)

    await h.markers.deliver_all()
    await add
    prepare = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
    # the completion wrote the parked request's Ongoing row: it supersedes Complete* in the same write
    assert h.store.states_written("t")[-2:] == [prepare, S.ONGOING], "nothing written before the markers landed"
    described = h.describe("t")
    assert (described.state, described.producer_epoch, described.partitions) == (S.ONGOING, next_identity[1], {TP1})


async def prepared_commit(completion_wait_ms: int) -> tuple[Harness, int, ProducerIdAndEpoch]:
    """A loaded harness whose id "t" ended a transaction with COMMIT: Prepare*, markers not yet delivered.

    Returns the harness, the ended transaction's producer id, and the identity EndTxn handed out
    (KIP-890 bump) for the next transaction.
    """
    h = Harness(completion_wait_ms=completion_wait_ms)
    await h.load_all()
    pid, epoch = await h.begin("t")
    return h, pid, await h.coordinator.end_txn("t", pid, epoch, commit=True)


async def test_add_offsets_waits_for_previous_markers_instead_of_rejecting() -> None:
    h, _pid, next_identity = await prepared_commit(10_000)
    add = asyncio.create_task(h.coordinator.add_offsets("t", *next_identity, "copier-group"))
    assert await parked(add)
    await h.markers.deliver_all()
    await add
    assert (h.describe("t").state, h.describe("t").groups) == (S.ONGOING, {"copier-group"})


async def test_init_producer_id_waits_for_previous_markers_instead_of_rejecting() -> None:
    h = Harness(completion_wait_ms=10_000)
    await h.load_all()
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=True)
    init = asyncio.create_task(h.init("t"))
    assert await parked(init)
    await h.markers.deliver_all()
    assert await init == (pid, epoch + 2), "the commit completed, then the new instance's bump"
    assert h.store.states_written("t")[-2:] == [S.COMPLETE_COMMIT, S.EMPTY]


async def test_add_partitions_after_epoch_overflow_waits_for_rotation() -> None:
    """The caller already holds the next producer id (epoch 0) the completion switches to: parked as well."""
    h = Harness(completion_wait_ms=10_000)
    h.seed("t", S.ONGOING, producer_id=10, epoch=LAST_USABLE_EPOCH)
    await h.load_all()
    next_identity = await h.coordinator.end_txn("t", 10, LAST_USABLE_EPOCH, commit=True)
    assert next_identity.producer_id != 10 and next_identity.epoch == 0
    add = asyncio.create_task(h.coordinator.add_partitions("t", *next_identity, {TP1}))
    assert await parked(add)
    await h.markers.deliver_all()
    await add
    assert (h.describe("t").producer_id, h.describe("t").state) == (next_identity.producer_id, S.ONGOING)


async def test_transaction_stuck_in_prepare_still_gets_concurrent_transactions_after_the_wait() -> None:
    h, _pid, next_identity = await prepared_commit(30)
    writes = len(h.store.writes)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await expect(ConcurrentTransactions, h.coordinator.add_partitions("t", *next_identity, {TP1}))
    assert loop.time() - started >= 0.03, "the request waited for the markers first"
    await expect(ConcurrentTransactions, h.coordinator.add_offsets("t", *next_identity, "group"))
    await expect(ConcurrentTransactions, h.init("t"))
    assert len(h.store.writes) == writes, "nothing was written while the transaction is stuck"
    assert h.describe("t").state is S.PREPARE_COMMIT


async def test_caller_deadline_bounds_the_wait() -> None:
    h, _pid, next_identity = await prepared_commit(60_000)
    call = h.coordinator.add_partitions("t", *next_identity, {TP1}, max_wait_ms=20)
    await asyncio.wait_for(expect(ConcurrentTransactions, call), timeout=5)


async def test_parked_request_revalidates_and_is_fenced_by_a_new_instance() -> None:
    """Woken by any transition: a parked request of an instance replaced meanwhile is refused, not applied."""
    h, pid, next_identity = await prepared_commit(10_000)
    init = asyncio.create_task(h.init("t"))
    add = asyncio.create_task(h.coordinator.add_partitions("t", *next_identity, {TP1}))
    assert await parked(init) and await parked(add)
    await h.markers.deliver_all()
    assert await init == (pid, next_identity.epoch + 1)
    outcome = (await asyncio.gather(add, return_exceptions=True))[0]
    # woken behind the new instance's bump: refused while that write is in flight, fenced after it
    assert isinstance(outcome, ConcurrentTransactions | ProducerFenced), outcome
    await expect(ProducerFenced, h.coordinator.add_partitions("t", *next_identity, {TP1}))
    described = h.describe("t")
    assert (described.state, described.partitions) == (S.EMPTY, frozenset())


async def test_unload_wakes_parked_requests_with_not_coordinator() -> None:
    h, _pid, next_identity = await prepared_commit(10_000)
    add = asyncio.create_task(h.coordinator.add_partitions("t", *next_identity, {TP1}))
    assert await parked(add)
    h.coordinator.unload(shard_for("t"))
    with pytest.raises(NotCoordinator):
        await asyncio.wait_for(add, timeout=5)


async def test_parked_add_partitions_rides_on_the_completion_write() -> None:
    """One durable write completes the previous transaction and opens the next one with the parked partitions."""
    h, _pid, next_identity = await prepared_commit(10_000)
    add = asyncio.create_task(h.coordinator.add_partitions("t", *next_identity, {TP1}))
    offsets = asyncio.create_task(h.coordinator.add_offsets("t", *next_identity, "copier-group"))
    assert await parked(add) and await parked(offsets)
    writes = len(h.store.writes)

    await h.markers.deliver_all()
    await asyncio.gather(add, offsets)
    assert len(h.store.writes) == writes + 1, "Complete* and the next Ongoing share one write"
    _, row, _ = h.store.writes[-1]
    assert (row.state, row.producer_id, row.producer_epoch) == (S.ONGOING, *next_identity)
    assert (row.partitions, row.groups) == ({TP1}, {"copier-group"})
    assert row.txn_start_timestamp == h.clock.now, "the next transaction's timeout counts from its first addition"
    described = h.describe("t")
    assert (described.state, described.partitions, described.groups) == (S.ONGOING, {TP1}, {"copier-group"})
    await h.coordinator.add_partitions("t", *next_identity, {TP1})
    assert len(h.store.writes) == writes + 1, "the partitions are participants already"


async def test_completion_without_parked_request_writes_complete() -> None:
    h = Harness(completion_wait_ms=10_000)
    await h.load_all()
    pid, epoch = await h.begin("t")
    await h.coordinator.end_txn("t", pid, epoch, commit=False)
    await h.markers.deliver_all()
    assert h.store.states_written("t")[-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]
    assert h.describe("t").state is S.COMPLETE_ABORT


async def test_request_that_stopped_waiting_is_not_carried_by_the_completion() -> None:
    """A caller answered CONCURRENT_TRANSACTIONS must not find its partitions added behind its back."""
    h, _pid, next_identity = await prepared_commit(20)
    await expect(ConcurrentTransactions, h.coordinator.add_partitions("t", *next_identity, {TP1}))
    await h.markers.deliver_all()
    assert h.store.states_written("t")[-1] is S.COMPLETE_COMMIT
    assert (h.describe("t").state, h.describe("t").partitions) == (S.COMPLETE_COMMIT, frozenset())


async def test_failed_completion_write_keeps_prepare_and_the_parked_request_waits_for_the_retry() -> None:
    h, _pid, next_identity = await prepared_commit(10_000)
    add = asyncio.create_task(h.coordinator.add_partitions("t", *next_identity, {TP1}))
    assert await parked(add)
    markers = h.markers.for_id("t")[-1]
    h.store.fail_next_write(StorageUnavailable("database is locked", definite=False))
    with pytest.raises(StorageUnavailable):
        await markers.on_complete()
    assert await parked(add), "woken by the failure, the request parks again"
    described = h.describe("t")
    assert (described.state, described.partitions) == (S.PREPARE_COMMIT, {TP0}), "the cache kept Prepare*"

    await markers.on_complete()  # the marker sink retries the completion
    await add
    assert (h.describe("t").state, h.describe("t").partitions) == (S.ONGOING, {TP1})


async def test_new_coordinator_loads_the_combined_row_without_resending_markers() -> None:
    """The Ongoing row implies the previous transaction completed: a failover must not resend its markers."""
    h, _pid, next_identity = await prepared_commit(10_000)
    add = asyncio.create_task(h.coordinator.add_partitions("t", *next_identity, {TP1}))
    assert await parked(add)
    await h.markers.deliver_all()
    await add

    successor = h.new_coordinator()
    await h.load_all(successor)
    assert len(h.markers.for_id("t")) == 1, "only the original markers were ever sent"
    found = successor.describe(["t"])["t"]
    assert isinstance(found, TransactionDescription)
    assert (found.state, found.producer_epoch, found.partitions) == (S.ONGOING, next_identity[1], {TP1})


def test_negative_completion_wait_is_rejected() -> None:
    with pytest.raises(ValueError, match="completion_wait_ms"):
        Harness(completion_wait_ms=-1)
