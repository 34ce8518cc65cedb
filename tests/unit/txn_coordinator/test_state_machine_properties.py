"""Property test: random interleavings against the transaction coordinator, checking design/architecture.md §1's
invariants.

A Hypothesis rule-based machine drives the pure :class:`TransactionCoordinator` over in-memory ports (a
transaction table with conditional, injectable-failure writes; a producer-id source; a marker sink whose
markers reach fake participants that apply storage's marker rules) and a fake clock. Requests are started as
tasks and the event loop is advanced in small random steps, so requests for one id really race each other,
the timeout sweep, marker completions and coordinator restarts (design/kafka-semantics.md §8 S6,
``TransactionCoordinatorConcurrencyTest``).

Writes may fail definitely (nothing written) or indeterminately (written, but the caller hears an error).
Restarts bump the shard's coordinator epoch and load a new coordinator from the table; the old one keeps
delivering the markers it had queued, as a process does until it notices it lost its lease.

Invariants (design/architecture.md §1.2, §1.3, §1.5 and design/kafka-semantics.md §2.2):

* every row the table acknowledges (or a restart loads) is a legal successor of the previous one, and
  ``(producer id, epoch)`` never goes backwards for an id;
* fencing: once InitProducerId returned identity E, no later commit decision (PrepareCommit row) is taken for
  an older identity, and no AddPartitions or EndTxn with an older identity succeeds; a new instance's
  InitProducerId returns an identity above every one handed out before; a commit decision is only ever taken
  for an identity whose owner asked for it;
* markers: all participants of one decision (producer id, marker epoch) receive the same result, and
  Complete* is written only once every participant of the Prepare* row accepted its marker;
* liveness: once markers are acknowledged and the timeout sweep has run, nothing is left in Prepare* or
  Ongoing, not even after one more restart reloads the table, and every partition a transaction added got
  its marker: COMMIT where EndTxn(commit) succeeded, ABORT where EndTxn(abort) succeeded or commit was never
  asked for.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from oncelog.errors import NotCoordinator, OncelogError, StorageUnavailable
from oncelog.txn_coordinator.coordinator import TransactionCoordinator
from oncelog.txn_coordinator.metadata import LAST_USABLE_EPOCH, NO_PRODUCER_EPOCH, TxnTransition
from oncelog.txn_coordinator.state import VALID_PREVIOUS_STATES, TransactionResult, TransactionState
from oncelog.txn_coordinator.state_manager import TransactionStateManager

pytestmark = pytest.mark.timeout(600)

S = TransactionState
SHARDS = 2
TIMEOUT_MS = 10_000
PARK_MS = 0
"""completion_wait_ms of the coordinators under test (no parking, see ``_start_generation``)."""
EXPIRATION_MS = 10 * TIMEOUT_MS
IDS = ("t-a", "t-b", "t-exhausted")
SLOTS = (0, 1)
"""Two producer instances per transactional id: each new InitProducerId of one fences the other."""
PARTITIONS = (("orders", 0), ("orders", 1), ("refunds", 0))
GROUP = "billing"
SEEDED_PRODUCER_ID = 500
"""The seeded id starts three bumps short of exhausting its epochs, so rotation to a new producer id happens."""

Identity = tuple[int, int]
Participant = tuple[str, int] | str

a_tid = st.sampled_from(IDS)
a_slot = st.sampled_from(SLOTS)
loop_steps = st.integers(0, 3)
"""Event-loop iterations run right after a request starts: 0 leaves it racing the next rule's request."""
some_participants = st.frozensets(st.sampled_from((*PARTITIONS, GROUP)), min_size=1)


def shard_for(transactional_id: str) -> int:
    return zlib.crc32(transactional_id.encode()) % SHARDS


# ---------------------------------------------------------------------------------------------- fakes


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class FakeProducerIds:
    """Increasing ids, so ``(producer id, epoch)`` orders every identity an id ever had."""

    def __init__(self) -> None:
        self._next = 1000

    async def next_id(self) -> int:
        await asyncio.sleep(0)
        self._next += 1
        return self._next - 1


class Model:
    """What clients were told and what the table acknowledged; collects every invariant violation."""

    def __init__(self, received: Callable[[Participant, int, int], set[TransactionResult]]) -> None:
        self.received = received
        """Results a participant accepted for (producer id, marker epoch)."""
        self.violations: list[str] = []
        self.last_row: dict[str, TxnTransition | None] = {}
        """Per id, the last row the table acknowledged or a load returned (None: no row)."""
        self.highest_row: dict[str, Identity] = {}
        self.latest_init: dict[str, Identity] = {}
        """Highest identity InitProducerId returned per id."""
        self.handed_out: dict[str, Identity] = {}
        """Highest identity InitProducerId or EndTxn returned per id."""
        self.instances: dict[tuple[str, int], Identity | None] = {(t, s): None for t in IDS for s in SLOTS}
        self.added: dict[tuple[str, Identity], set[Participant]] = {}
        self.commit_asked: set[tuple[str, Identity]] = set()
        self.ended: dict[tuple[str, Identity], TransactionResult] = {}
        """EndTxn successes: the decision the client was told about."""

    def violation(self, message: str) -> None:
        self.violations.append(message)

    # ------------------------------------------------------------------ the table

    def row_acknowledged(self, tid: str, row: TxnTransition) -> None:
        previous = self.last_row.get(tid)
        if row.state is S.DEAD:
            if previous is None or previous.state not in VALID_PREVIOUS_STATES[S.DEAD]:
                self.violation(f"{tid}: expired from {previous and previous.state.name}")
            self.last_row[tid] = None
            return
        if row.state.is_transient:
            self.violation(f"{tid}: transient state {row.state.name} stored")
        if previous is None:
            if row.state is not S.EMPTY:
                self.violation(f"{tid}: first row is {row.state.name}, not EMPTY")
        elif previous.state not in VALID_PREVIOUS_STATES[row.state]:
            self.violation(f"{tid}: illegal transition {previous.state.name} -> {row.state.name}")
        identity = (row.producer_id, row.producer_epoch)
        if identity < self.highest_row.get(tid, (-1, -1)):
            self.violation(f"{tid}: identity went back from {self.highest_row[tid]} to {identity}")
        self.highest_row[tid] = max(identity, self.highest_row.get(tid, identity))
        if row.state.is_complete and previous is not None and previous.state.is_prepare:
            result = TransactionResult.COMMIT if row.state is S.COMPLETE_COMMIT else TransactionResult.ABORT
            everyone: list[Participant] = [*previous.partitions, *previous.groups]
            waiting = [
                p for p in everyone if result not in self.received(p, previous.producer_id, previous.producer_epoch)
            ]
            if waiting:
                self.violation(f"{tid}: {row.state.name} written before {waiting} acknowledged the marker")
        if row.state is S.PREPARE_COMMIT:
            deciding = (row.producer_id, row.producer_epoch - 1)
            if deciding < self.latest_init.get(tid, (-1, -1)):
                self.violation(
                    f"{tid}: commit decided for {deciding} after InitProducerId returned {self.latest_init[tid]}"
                )
            if (tid, deciding) not in self.commit_asked:
                self.violation(f"{tid}: commit decided for {deciding}, which never asked to commit")
        self.last_row[tid] = row

    def row_loaded(self, tid: str, row: TxnTransition | None) -> None:
        self.last_row[tid] = row
        if row is not None:
            identity = (row.producer_id, row.producer_epoch)
            self.highest_row[tid] = max(identity, self.highest_row.get(tid, identity))

    # ------------------------------------------------------------------ client replies

    def init_returned(self, tid: str, slot: int, identity: Identity, new_instance: bool, lost: bool) -> None:
        before = self.handed_out.get(tid, (-1, -1))
        if identity < before or (new_instance and identity == before):
            self.violation(f"{tid}: InitProducerId returned {identity}, not above {before} handed out before")
        self.handed_out[tid] = max(before, identity)
        self.latest_init[tid] = max(self.latest_init.get(tid, identity), identity)
        if not lost:
            self.instances[(tid, slot)] = identity

    def check_not_fenced(self, what: str, tid: str, identity: Identity) -> None:
        latest = self.latest_init.get(tid)
        if latest is not None and identity < latest:
            self.violation(f"{tid}: {what} with {identity} succeeded after InitProducerId returned {latest}")

    def end_returned(self, tid: str, slot: int, used: Identity, result: TransactionResult, reply: Identity) -> None:
        self.check_not_fenced(f"EndTxn({result.value})", tid, used)
        earlier = self.ended.setdefault((tid, used), result)
        if earlier is not result:
            self.violation(f"{tid}: EndTxn for {used} answered both {earlier.value} and {result.value}")
        self.handed_out[tid] = max(self.handed_out.get(tid, reply), reply)


@dataclass
class Job:
    """One enqueued set of markers (the coordinator's ``MarkerSink.enqueue`` call)."""

    tid: str
    producer_id: int
    producer_epoch: int
    result: TransactionResult
    coordinator_epoch: int
    pending: set[Participant]
    on_complete: Callable[[], Awaitable[None]]
    completing: bool = False
    done: bool = False


class FakeSink:
    """Queues jobs like ``TransactionMarkerChannelManager``: a new job for an id supersedes the old one."""

    def __init__(self) -> None:
        self.jobs: dict[str, Job] = {}

    def enqueue(
        self,
        *,
        transactional_id,
        producer_id,
        producer_epoch,
        result,
        partitions,
        groups,
        coordinator_epoch,
        on_complete,
    ) -> None:
        previous = self.jobs.pop(transactional_id, None)
        if previous is not None:
            previous.done = True
        self.jobs[transactional_id] = Job(
            transactional_id,
            producer_id,
            producer_epoch,
            result,
            coordinator_epoch,
            set(partitions) | set(groups),
            on_complete,
        )

    def forget(self, job: Job) -> None:
        job.done = True
        if self.jobs.get(job.tid) is job:
            del self.jobs[job.tid]


class FakeParticipants:
    """Partitions and group shards receiving markers, with storage's rules (design/kafka-semantics.md §3.3,
    design/architecture.md §4).

    A marker older than the newest coordinator epoch or producer epoch seen for the producer is refused;
    a repeat of the last decision is acknowledged without being logged again.
    """

    def __init__(self, model: Model) -> None:
        self.model = model
        self.log: dict[Participant, list[tuple[int, int, TransactionResult]]] = {}
        self._seen: dict[tuple[Participant, int], tuple[int, int]] = {}
        self._decisions: dict[tuple[int, int], TransactionResult] = {}

    def apply(self, participant: Participant, job: Job) -> bool:
        key = (participant, job.producer_id)
        epoch, coordinator_epoch = self._seen.get(key, (-1, -1))
        if job.coordinator_epoch < coordinator_epoch or job.producer_epoch < epoch:
            return False
        self._seen[key] = (job.producer_epoch, max(coordinator_epoch, job.coordinator_epoch))
        decided = self._decisions.setdefault((job.producer_id, job.producer_epoch), job.result)
        if decided is not job.result:
            self.model.violation(
                f"producer {job.producer_id} epoch {job.producer_epoch}: both {decided.value} and "
                f"{job.result.value} markers were written"
            )
        entries = self.log.setdefault(participant, [])
        if (job.producer_id, job.producer_epoch, job.result) not in entries:
            entries.append((job.producer_id, job.producer_epoch, job.result))
        return True

    def received(self, participant: Participant, producer_id: int, epoch: int) -> set[TransactionResult]:
        return {r for p, e, r in self.log.get(participant, []) if (p, e) == (producer_id, epoch)}


class FakeStore:
    """The transaction table: one row per id, writes conditional on the shard's coordinator epoch."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.rows: dict[str, TxnTransition] = {}
        self.lease_epochs: dict[int, int] = {}
        self.failures: list[bool] = []
        """Injected failures, oldest first: True = indeterminate (written, then an error), False = definite."""

    async def load_shard(self, shard: int) -> list[tuple[str, TxnTransition | None]]:
        await asyncio.sleep(0)
        rows: list[tuple[str, TxnTransition | None]] = [
            (tid, row) for tid, row in sorted(self.rows.items()) if shard_for(tid) == shard
        ]
        for tid in IDS:
            if shard_for(tid) == shard:
                self.model.row_loaded(tid, self.rows.get(tid))
        return rows

    async def write(self, tid: str, transition: TxnTransition, expected_coordinator_epoch: int) -> None:
        await asyncio.sleep(0)
        indeterminate = self.failures.pop(0) if self.failures else None
        if indeterminate is False:
            raise StorageUnavailable("injected failure before the write", definite=True)
        if self.lease_epochs.get(shard_for(tid)) != expected_coordinator_epoch:
            raise NotCoordinator(f"shard of {tid} is leased at another coordinator epoch")
        if transition.state is S.DEAD:
            self.rows.pop(tid, None)
        else:
            self.rows[tid] = transition
        if indeterminate:
            raise StorageUnavailable("injected failure after the write", definite=False)
        self.model.row_acknowledged(tid, transition)


@dataclass
class Generation:
    """One coordinator process: its cache and its marker queue, at one coordinator epoch."""

    epoch: int
    coordinator: TransactionCoordinator
    sink: FakeSink = field(default_factory=FakeSink)


# ---------------------------------------------------------------------------------------------- machine


class CoordinatorInterleavings(RuleBasedStateMachine):
    """Random client requests, sweeps, failures, restarts and marker deliveries, interleaved on one loop."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.clock = FakeClock()
        self.pids = FakeProducerIds()
        self.model = Model(lambda *marker: self.participants.received(*marker))
        self.store = FakeStore(self.model)
        self.participants = FakeParticipants(self.model)
        self.generations: list[Generation] = []
        self.tasks: set[asyncio.Task[None]] = set()
        self.store.rows["t-exhausted"] = TxnTransition(
            state=S.EMPTY,
            producer_id=SEEDED_PRODUCER_ID,
            previous_producer_id=SEEDED_PRODUCER_ID,
            next_producer_id=-1,
            producer_epoch=LAST_USABLE_EPOCH - 3,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            txn_timeout_ms=TIMEOUT_MS,
            txn_last_update_timestamp=self.clock.now,
        )
        self._start_generation()

    # ------------------------------------------------------------------ plumbing

    @property
    def current(self) -> Generation:
        return self.generations[-1]

    def _start_generation(self) -> None:
        """Lease every shard at the next coordinator epoch to a new coordinator and load it
        (design/kafka-semantics.md §2.10)."""
        epoch = len(self.generations) + 1
        for shard in range(SHARDS):
            self.store.lease_epochs[shard] = epoch
        sink = FakeSink()
        # Kafka's immediate CONCURRENT_TRANSACTIONS: a parked request's wait is bounded in real time, which
        # would make the machine's steps depend on the wall clock; parking has its own named tests.
        coordinator = TransactionCoordinator(
            state=TransactionStateManager(self.store, shard_for=shard_for),
            producer_ids=self.pids,
            markers=sink,
            clock=self.clock,
            completion_wait_ms=PARK_MS,
        )
        self.generations.append(Generation(epoch, coordinator, sink))

        async def load_all() -> None:
            await asyncio.gather(*(coordinator.load(shard, epoch) for shard in range(SHARDS)))

        self.loop.run_until_complete(load_all())

    def _spawn(self, call: Awaitable[object]) -> None:
        async def run() -> None:
            try:
                await call
            except OncelogError:
                pass  # every domain error is an acceptable answer; the invariants judge the successes
            except Exception as error:  # IllegalTransitionError and the like: a coordinator bug
                self.model.violation(f"unexpected {error!r}")

        task = self.loop.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _spin(self, iterations: int) -> None:
        for _ in range(iterations):
            self.loop.run_until_complete(asyncio.sleep(0))

    def _drain_tasks(self) -> None:
        async def wait(tasks: list[asyncio.Task[None]]) -> None:
            await asyncio.gather(*tasks, return_exceptions=True)

        while self.tasks:
            self.loop.run_until_complete(wait(list(self.tasks)))

    def _complete(self, generation: Generation, job: Job) -> None:
        job.completing = True

        async def run() -> None:
            try:
                await job.on_complete()
            except NotCoordinator:
                generation.sink.forget(job)  # the next owner completes it after loading
            except OncelogError:
                job.completing = False  # retried later, as the marker channel does
            except Exception as error:
                self.model.violation(f"completion of {job.tid} raised {error!r}")
            else:
                generation.sink.forget(job)

        task = self.loop.create_task(run())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _deliver(self, generation: Generation, job: Job, count: int) -> bool:
        """Deliver up to ``count`` of the job's markers; False if a participant refused (the job is dropped)."""
        for participant in sorted(job.pending, key=str)[:count]:
            if not self.participants.apply(participant, job):
                generation.sink.forget(job)
                return False
            job.pending.discard(participant)
        if not job.pending and not job.completing and not job.done:
            self._complete(generation, job)
        return True

    def _all_jobs(self) -> list[tuple[Generation, Job]]:
        return [(g, j) for g in self.generations for j in g.sink.jobs.values()]

    # ------------------------------------------------------------------ client requests

    async def _init(self, tid: str, slot: int, recover: bool, lost: bool) -> None:
        held = self.model.instances[(tid, slot)]
        expected = held if recover else None
        result = await self.current.coordinator.init_producer_id(tid, TIMEOUT_MS, *(expected or (None, None)))
        self.model.init_returned(tid, slot, (result.producer_id, result.epoch), expected is None, lost)

    async def _add(self, tid: str, slot: int, participants: frozenset[Participant]) -> None:
        identity = self.model.instances[(tid, slot)]
        if identity is None:
            return
        partitions = {p for p in participants if isinstance(p, tuple)}
        coordinator = self.current.coordinator
        if partitions:
            await coordinator.add_partitions(tid, *identity, partitions)
        if GROUP in participants:
            await coordinator.add_offsets(tid, *identity, GROUP)
        self.model.check_not_fenced("AddPartitions", tid, identity)
        self.model.added.setdefault((tid, identity), set()).update(participants)

    async def _end(self, tid: str, slot: int, commit: bool, lost: bool) -> None:
        identity = self.model.instances[(tid, slot)]
        if identity is None:
            return
        result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
        if commit:
            self.model.commit_asked.add((tid, identity))
        reply = await self.current.coordinator.end_txn(tid, *identity, commit=commit)
        self.model.end_returned(tid, slot, identity, result, (reply.producer_id, reply.epoch))
        if not lost and self.model.instances[(tid, slot)] == identity:
            self.model.instances[(tid, slot)] = (reply.producer_id, reply.epoch)

    @rule(tid=a_tid, slot=a_slot, recover=st.booleans(), lost=st.booleans(), steps=loop_steps)
    def init_producer_id(self, tid: str, slot: int, recover: bool, lost: bool, steps: int) -> None:
        self._spawn(self._init(tid, slot, recover, lost))
        self._spin(steps)

    @rule(tid=a_tid, slot=a_slot, participants=some_participants, steps=loop_steps)
    def add_participants(self, tid: str, slot: int, participants: frozenset[Participant], steps: int) -> None:
        self._spawn(self._add(tid, slot, participants))
        self._spin(steps)

    @rule(tid=a_tid, slot=a_slot, commit=st.booleans(), lost=st.booleans(), steps=loop_steps)
    def end_txn(self, tid: str, slot: int, commit: bool, lost: bool, steps: int) -> None:
        self._spawn(self._end(tid, slot, commit, lost))
        self._spin(steps)

    @rule(tid=a_tid, slot=a_slot, participants=some_participants, commit=st.booleans(), steps=loop_steps)
    def whole_transaction(
        self, tid: str, slot: int, participants: frozenset[Participant], commit: bool, steps: int
    ) -> None:
        """A client's whole transaction as one task, racing whatever else is in flight."""

        async def flow() -> None:
            if self.model.instances[(tid, slot)] is None:
                await self._init(tid, slot, recover=False, lost=False)
            await self._add(tid, slot, participants)
            await self._end(tid, slot, commit, lost=False)

        self._spawn(flow())
        self._spin(steps)

    @rule(tid=a_tid)
    def admin_abort(self, tid: str) -> None:
        self._spawn(self.current.coordinator.abort_transaction(tid))

    # ------------------------------------------------------------------ time, sweeps, faults

    @rule(iterations=st.integers(1, 6))
    def run_loop(self, iterations: int) -> None:
        self._spin(iterations)

    @rule(ms=st.integers(0, TIMEOUT_MS + TIMEOUT_MS // 2), stale_process=st.booleans())
    def timeout_sweep(self, ms: int, stale_process: bool) -> None:
        self.clock.now += ms
        generation = self.generations[0] if stale_process else self.current
        self._spawn(generation.coordinator.abort_timed_out_transactions(self.clock.now))

    @rule(ms=st.integers(0, EXPIRATION_MS))
    def expiration_sweep(self, ms: int) -> None:
        self.clock.now += ms
        self._spawn(self.current.coordinator.expire_transactional_ids(self.clock.now, EXPIRATION_MS))

    @precondition(lambda self: len(self.store.failures) < 2)
    @rule(indeterminate=st.booleans())
    def fail_next_write(self, indeterminate: bool) -> None:
        self.store.failures.append(indeterminate)

    @precondition(lambda self: len(self.generations) < 5)
    @rule()
    def restart_coordinator(self) -> None:
        self._start_generation()

    @precondition(lambda self: bool(self._all_jobs()))
    @rule(data=st.data(), count=st.integers(1, 4))
    def deliver_markers(self, data: st.DataObject, count: int) -> None:
        jobs = self._all_jobs()
        generation, job = jobs[data.draw(st.integers(0, len(jobs) - 1), label="job")]
        if job.completing:
            return
        self._deliver(generation, job, count)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def nothing_violated(self) -> None:
        assert not self.model.violations, "\n".join(self.model.violations)

    def teardown(self) -> None:
        try:
            self._quiesce()
        finally:
            for task in self.tasks:
                task.cancel()
            if self.tasks:
                self._drain_tasks()
            self.loop.close()

    def _settle_markers(self) -> None:
        """Drive the current coordinator's markers to completion; old processes stop sending (lease lost)."""
        for _ in range(50):
            self._drain_tasks()
            jobs = list(self.current.sink.jobs.values())
            if not jobs:
                return
            for job in jobs:
                if not job.completing and not self._deliver(self.current, job, len(job.pending)):
                    self.model.violation(f"a participant refused the current coordinator's markers of {job.tid}")
        raise AssertionError("markers never completed")

    def _sweep_past_every_timeout(self) -> None:
        self.clock.now += 2 * TIMEOUT_MS
        self._spawn(self.current.coordinator.abort_timed_out_transactions(self.clock.now))
        self._settle_markers()
        assert not self.model.violations, "\n".join(self.model.violations)

    def _quiesce(self) -> None:
        """Let every request finish, deliver everything and sweep past every timeout; then check liveness.

        The coordinator must then hold no open transaction (design/architecture.md §1.5). An indeterminate write may
        have left
        the table a step ahead of the cache (the coordinator's next write supersedes such a row,
        design/kafka-semantics.md §2.9), so
        the table is checked after one more restart has loaded it: a crash at this moment must not leave a
        transaction hanging either.
        """
        self.store.failures.clear()
        self._settle_markers()
        self._sweep_past_every_timeout()
        for tid, cached in self.current.coordinator.describe(IDS).items():
            if not isinstance(cached, OncelogError):
                assert not cached.state.has_open_transaction, f"{tid} left {cached.state.name} open"

        self._start_generation()
        self._settle_markers()
        self._sweep_past_every_timeout()
        for tid, row in self.store.rows.items():
            assert not row.state.has_open_transaction, f"{tid} left {row.state.name} open after a reload"
        for (tid, (producer_id, epoch)), participants in self.model.added.items():
            outcomes = {p: self.participants.received(p, producer_id, epoch + 1) for p in participants}
            results = set().union(*outcomes.values())
            assert all(len(o) == 1 for o in outcomes.values()), f"{tid} {producer_id}/{epoch}: markers {outcomes}"
            assert len(results) == 1, f"{tid} {producer_id}/{epoch}: participants disagree: {outcomes}"
            told = self.model.ended.get((tid, (producer_id, epoch)))
            if told is not None:
                assert results == {told}, f"{tid} {producer_id}/{epoch}: told {told.value}, markers {results}"
            if (tid, (producer_id, epoch)) not in self.model.commit_asked:
                assert results == {TransactionResult.ABORT}, f"{tid} {producer_id}/{epoch}: committed unasked"


TestCoordinatorInterleavings = CoordinatorInterleavings.TestCase
TestCoordinatorInterleavings.settings = settings(
    max_examples=200,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
