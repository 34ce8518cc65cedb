"""TransactionMarkerChannelManager over fake routes and transport.

Ports the marker cases of Kafka's ``TransactionMarkerChannelManagerTest`` and
``TransactionMarkerRequestCompletionHandlerTest`` (design/kafka-semantics.md §8 S7): one request per destination per
round,
batching across transactions, retries on NOT_LEADER and disconnects, drop on a fenced coordinator epoch or
an unloaded shard, completion exactly once and only after every participant acknowledged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import pytest

from oncelog.errors import (
    InvalidProducerEpoch,
    InvalidRequest,
    NetworkException,
    NotCoordinator,
    NotLeader,
    OncelogError,
    StorageUnavailable,
    TransactionCoordinatorFenced,
)
from oncelog.txn_coordinator.marker_channel import (
    DestinationService,
    MarkerDestination,
    Route,
    TransactionMarkerChannelManager,
    TxnMarkerEntry,
    TxnMarkerOutcome,
    Unroutable,
)
from oncelog.txn_coordinator.metadata import TopicPartition
from oncelog.txn_coordinator.state import TransactionResult

pytestmark = pytest.mark.timeout(20)

A = MarkerDestination(DestinationService.PARTITION_STORAGE, "storage-a", "127.0.0.1:1001")
B = MarkerDestination(DestinationService.PARTITION_STORAGE, "storage-b", "127.0.0.1:1002")
G = MarkerDestination(DestinationService.GROUP_OFFSETS, "offsets-g", "127.0.0.1:1003")
ON_A: TopicPartition = ("orders", 0)
ON_B: TopicPartition = ("orders", 1)
GROUP = "billing"
SHARD_OF = {"tx-1": 0, "tx-2": 0, "tx-3": 1, "tx-4": 1}


class FakeResolver:
    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, Route] = {ON_A: A, ON_B: B}
        self.groups: dict[str, Route] = {GROUP: G}
        self.invalidated: list[tuple[tuple[TopicPartition, ...], tuple[str, ...], MarkerDestination | None]] = []
        self.resolved: list[TopicPartition] = []
        """Every partition asked for, in order (a partition retried later appears again)."""

    async def resolve(
        self, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[dict[TopicPartition, Route], dict[str, Route]]:
        self.resolved.extend(partitions)
        await asyncio.sleep(0)
        return (
            {tp: self.partitions.get(tp, Unroutable.OFFLINE) for tp in partitions},
            {g: self.groups.get(g, Unroutable.OFFLINE) for g in groups},
        )

    def invalidate(
        self,
        partitions: Collection[TopicPartition] = (),
        groups: Collection[str] = (),
        destination: MarkerDestination | None = None,
    ) -> None:
        self.invalidated.append((tuple(partitions), tuple(groups), destination))


Responder = Callable[[MarkerDestination, Sequence[TxnMarkerEntry]], Sequence[TxnMarkerOutcome]]


def ack_all(_destination: MarkerDestination, entries: Sequence[TxnMarkerEntry]) -> list[TxnMarkerOutcome]:
    return [TxnMarkerOutcome({tp: None for tp in e.partitions}, {g: None for g in e.groups}) for e in entries]


class FakeTransport:
    def __init__(self) -> None:
        self.requests: list[tuple[MarkerDestination, tuple[TxnMarkerEntry, ...]]] = []
        self.responders: dict[MarkerDestination, list[Responder]] = {}
        """Scripted answers per destination, used in order; afterwards every marker is acknowledged."""
        self.gates: dict[MarkerDestination, asyncio.Event] = {}
        self.answered: list[MarkerDestination] = []
        """Destinations whose answer the manager has applied (it does so in the same step as the return)."""
        self.closed = False

    def hold(self, destination: MarkerDestination) -> None:
        self.gates[destination] = asyncio.Event()

    def release(self, destination: MarkerDestination) -> None:
        self.gates.pop(destination).set()

    def script(self, destination: MarkerDestination, *answers: Responder) -> None:
        self.responders.setdefault(destination, []).extend(answers)

    def sent_to(self, destination: MarkerDestination) -> list[tuple[TxnMarkerEntry, ...]]:
        return [entries for d, entries in self.requests if d == destination]

    async def write_markers(
        self, destination: MarkerDestination, markers: Sequence[TxnMarkerEntry]
    ) -> Sequence[TxnMarkerOutcome]:
        self.requests.append((destination, tuple(markers)))
        gate = self.gates.get(destination)
        if gate is not None:
            await gate.wait()
        scripted = self.responders.get(destination)
        responder = scripted.pop(0) if scripted else ack_all
        try:
            return responder(destination, markers)
        finally:
            self.answered.append(destination)

    async def close(self) -> None:
        self.closed = True


def fail_with(error: OncelogError, *, only: TopicPartition | str | None = None) -> Responder:
    """Answer every participant (or only ``only``) with ``error``; the others are acknowledged."""

    def answer(_destination: MarkerDestination, entries: Sequence[TxnMarkerEntry]) -> list[TxnMarkerOutcome]:
        return [
            TxnMarkerOutcome(
                {tp: error if only in (None, tp) else None for tp in e.partitions},
                {g: error if only in (None, g) else None for g in e.groups},
            )
            for e in entries
        ]

    return answer


def raise_error(error: OncelogError) -> Responder:
    def answer(_destination: MarkerDestination, _entries: Sequence[TxnMarkerEntry]) -> list[TxnMarkerOutcome]:
        raise error

    return answer


@dataclass
class Completion:
    """An ``on_complete`` that counts calls and can fail a given number of times first."""

    failures: list[BaseException] = field(default_factory=list)
    calls: int = 0

    async def __call__(self) -> None:
        self.calls += 1
        if self.failures:
            raise self.failures.pop(0)


class Harness:
    def __init__(self, **options: int) -> None:
        self.resolver = FakeResolver()
        self.transport = FakeTransport()
        self.held: dict[int, int] = {0: 1, 1: 1}
        """shard -> coordinator epoch held by the fake coordinator."""
        self.manager = TransactionMarkerChannelManager(
            resolver=self.resolver,
            transport=self.transport,
            shard_for=SHARD_OF.__getitem__,
            is_current=lambda shard, epoch: self.held.get(shard) == epoch,
            retry_backoff_ms=1,
            retry_backoff_max_ms=4,
            **options,
        )

    def enqueue(
        self,
        transactional_id: str,
        *,
        partitions: Collection[TopicPartition] = (ON_A, ON_B),
        groups: Collection[str] = (),
        epoch: int = 1,
        result: TransactionResult = TransactionResult.COMMIT,
        completion: Completion | None = None,
    ) -> Completion:
        completion = completion or Completion()
        self.manager.enqueue(
            transactional_id=transactional_id,
            producer_id=100 + int(transactional_id.rsplit("-", 1)[1]),
            producer_epoch=5,
            result=result,
            partitions=frozenset(partitions),
            groups=frozenset(groups),
            coordinator_epoch=epoch,
            on_complete=completion,
        )
        return completion


async def until(condition: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.001)


async def settle(manager: TransactionMarkerChannelManager) -> None:
    await until(lambda: manager.pending_transactions == 0, "every job finished or was dropped")


async def probe_round(h: Harness) -> list[str]:
    """Send a probe transaction to A and B and wait for it to complete; returns the ids its request to A carried.

    One request per destination carries every marker queued for it, so anything of an earlier job still being
    (re)sent to A after the probe was enqueued rides along: an explicit signal instead of waiting some time.
    """
    probe = h.enqueue("tx-4")  # shard 1, which every test here keeps
    await until(lambda: probe.calls == 1, "the probe transaction completed")
    return [e.transactional_id for e in h.transport.sent_to(A)[-1]]


@pytest.fixture
async def h():
    harness = Harness()
    yield harness
    await harness.manager.close()
    assert harness.transport.closed


# ------------------------------------------------------------------------------------------ batching


async def test_one_request_per_destination_carries_every_pending_marker(h: Harness) -> None:
    completions = [h.enqueue(f"tx-{i}", groups=[GROUP]) for i in (1, 2, 3)]
    h.manager.start()
    await settle(h.manager)

    assert sorted(d.node_id for d, _ in h.transport.requests) == ["offsets-g", "storage-a", "storage-b"]
    assert h.manager.requests_sent == 3
    (to_a,) = h.transport.sent_to(A)
    assert [(e.transactional_id, e.partitions, e.groups) for e in to_a] == [
        ("tx-1", (ON_A,), ()),
        ("tx-2", (ON_A,), ()),
        ("tx-3", (ON_A,), ()),
    ]
    (to_g,) = h.transport.sent_to(G)
    assert [(e.transactional_id, e.partitions, e.groups) for e in to_g] == [
        (f"tx-{i}", (), (GROUP,)) for i in (1, 2, 3)
    ]
    entry = to_a[0]
    assert (entry.producer_id, entry.producer_epoch, entry.coordinator_epoch, entry.result) == (
        101,
        5,
        1,
        TransactionResult.COMMIT,
    )
    assert [c.calls for c in completions] == [1, 1, 1]


async def test_markers_queued_while_a_request_is_in_flight_go_out_together(h: Harness) -> None:
    h.transport.hold(A)
    h.manager.start()
    first = h.enqueue("tx-1")
    await until(lambda: len(h.transport.sent_to(A)) == 1, "the first request to A is in flight")
    later = [h.enqueue("tx-2"), h.enqueue("tx-3")]
    await until(lambda: len(h.transport.sent_to(B)) >= 2, "B received the later markers")
    assert len(h.transport.sent_to(A)) == 1, "a second request to A was sent while one was in flight"

    h.transport.release(A)
    await settle(h.manager)
    first_batch, second_batch = h.transport.sent_to(A)
    assert [e.transactional_id for e in first_batch] == ["tx-1"]
    assert [e.transactional_id for e in second_batch] == ["tx-2", "tx-3"]
    assert [c.calls for c in (first, *later)] == [1, 1, 1]


async def test_a_request_carries_at_most_the_configured_number_of_participants() -> None:
    """Issue 25 item 12: a burst is split over several requests instead of one of unbounded size."""
    h = Harness(max_participants_per_request=3)
    extra = [("orders", p) for p in range(2, 8)]
    h.resolver.partitions.update(dict.fromkeys(extra, A))
    h.transport.hold(A)
    first = h.enqueue("tx-1", partitions=[ON_A])
    h.manager.start()
    await until(lambda: h.transport.sent_to(A), "the first request is in flight")
    burst = [h.enqueue("tx-2", partitions=extra[:4]), h.enqueue("tx-3", partitions=extra[4:])]
    await until(lambda: len(h.manager._queues.get(A, ())) == 6, "the burst is queued behind the request")
    h.transport.release(A)
    await settle(h.manager)
    assert [len({tp for entry in batch for tp in entry.partitions}) for batch in h.transport.sent_to(A)] == [1, 3, 3]
    assert [c.calls for c in (first, *burst)] == [1, 1, 1]
    await h.manager.close()


async def test_completion_waits_for_every_participant(h: Harness) -> None:
    h.transport.hold(G)
    completion = h.enqueue("tx-1", groups=[GROUP])
    h.manager.start()
    await until(lambda: {A, B} <= set(h.transport.answered), "A and B answered; the group's marker is held")
    assert h.transport.sent_to(G), "the group's marker is out, unanswered"
    assert completion.calls == 0
    h.transport.release(G)
    await settle(h.manager)
    assert completion.calls == 1


async def test_transaction_without_participants_completes_immediately(h: Harness) -> None:
    completion = h.enqueue("tx-1", partitions=())
    await settle(h.manager)
    assert completion.calls == 1
    assert h.transport.requests == []


async def test_a_group_id_no_group_can_have_is_dropped_without_holding_back_the_batch(h: Harness) -> None:
    """Issue 25 item 2: a transaction admitted with a group id over 255 characters (before the rule held at
    AddOffsetsToTxn) completes without sending that group a marker, and the transaction batched with it too."""
    too_long = "g" * 256
    h.resolver.groups[too_long] = G
    wedged = h.enqueue("tx-1", groups=[too_long, GROUP])
    other = h.enqueue("tx-2", groups=[GROUP])
    h.manager.start()
    await settle(h.manager)
    assert (wedged.calls, other.calls) == (1, 1)
    sent_groups = {g for batch in h.transport.sent_to(G) for entry in batch for g in entry.groups}
    assert sent_groups == {GROUP}


async def test_an_operator_can_skip_a_marker_that_is_never_accepted(h: Harness) -> None:
    """Issue 25 item 2: the operator's way out for a participant that refuses its marker for good."""
    never = InvalidRequest("this destination will never accept it")
    h.transport.script(B, *[fail_with(never)] * 10_000)
    stuck = h.enqueue("tx-1", partitions=(ON_A, ON_B))
    h.manager.start()
    await until(lambda: len(h.transport.sent_to(B)) >= 3, "the refused marker is retried")
    assert stuck.calls == 0 and h.manager.pending_transactions == 1
    assert h.manager.skip("tx-1", [ON_A, ON_B], []) == ({ON_B}, set()), "ON_A had acknowledged already"
    await settle(h.manager)
    assert stuck.calls == 1, "completed exactly once"
    sent = len(h.transport.sent_to(B))
    other = h.enqueue("tx-2", partitions=(ON_A,))
    await settle(h.manager)
    assert other.calls == 1 and len(h.transport.sent_to(B)) == sent, "the skipped marker is not sent again"
    assert h.manager.skip("tx-1", [ON_B], []) == (set(), set()), "nothing left to skip"


# ------------------------------------------------------------------------------------------ retries


async def test_not_leader_re_resolves_the_leader_and_retries_there(h: Harness) -> None:
    def leader_moved(destination: MarkerDestination, entries: Sequence[TxnMarkerEntry]) -> Sequence[TxnMarkerOutcome]:
        h.resolver.partitions[ON_A] = B  # the catalog now names B as the leader
        return fail_with(NotLeader("not the leader of orders-0"))(destination, entries)

    h.transport.script(A, leader_moved)
    completion = h.enqueue("tx-1")
    h.manager.start()
    await settle(h.manager)

    assert ((ON_A,), (), None) in h.resolver.invalidated
    assert [e.partitions for batch in h.transport.sent_to(B) for e in batch].count((ON_A,)) == 1
    assert completion.calls == 1


async def test_disconnects_are_retried_until_acknowledged(h: Harness) -> None:
    h.transport.script(A, raise_error(NetworkException("connection refused")), raise_error(NetworkException("reset")))
    completion = h.enqueue("tx-1")
    h.manager.start()
    await settle(h.manager)
    assert len(h.transport.sent_to(A)) == 3
    assert len({batch for batch in h.transport.sent_to(A)}) == 1, "every retry carries the same marker"
    assert (tuple(), tuple(), A) in h.resolver.invalidated
    assert completion.calls == 1


async def test_partial_failure_retries_only_the_failed_partition(h: Harness) -> None:
    h.resolver.partitions[("orders", 2)] = A
    h.transport.script(A, fail_with(StorageUnavailable("disk busy"), only=("orders", 2)))
    completion = h.enqueue("tx-1", partitions=[ON_A, ("orders", 2)])
    h.manager.start()
    await settle(h.manager)
    first, retry = h.transport.sent_to(A)
    assert first[0].partitions == (ON_A, ("orders", 2))
    assert retry[0].partitions == (("orders", 2),)
    assert completion.calls == 1


@pytest.mark.parametrize("error", [TransactionCoordinatorFenced("epoch 2 seen"), InvalidProducerEpoch("epoch 9 seen")])
async def test_fenced_marker_drops_the_job(h: Harness, error: OncelogError) -> None:
    h.transport.script(A, fail_with(error))
    completion = h.enqueue("tx-1")
    h.manager.start()
    await settle(h.manager)
    assert await probe_round(h) == ["tx-4"], "the dropped job's marker was sent again"
    assert len(h.transport.sent_to(A)) == 2
    assert completion.calls == 0


async def test_offline_leader_is_retried_and_a_deleted_topic_is_dropped(h: Harness) -> None:
    h.resolver.partitions[ON_B] = Unroutable.OFFLINE
    h.resolver.partitions[("gone", 0)] = Unroutable.DELETED
    completion = h.enqueue("tx-1", partitions=[ON_A, ON_B, ("gone", 0)])
    h.manager.start()
    await until(lambda: A in h.transport.answered, "A acknowledged")
    await until(lambda: h.resolver.resolved.count(ON_B) >= 3, "the offline leader was looked up again, twice")
    assert completion.calls == 0, "an offline leader must not be taken for a deleted topic"

    h.resolver.partitions[ON_B] = B
    await settle(h.manager)
    assert [batch[0].partitions for batch in h.transport.sent_to(B)] == [(ON_B,)]
    assert all(("gone", 0) not in e.partitions for _, batch in h.transport.requests for e in batch)
    assert completion.calls == 1


# ------------------------------------------------------------------------------------------ ownership


async def test_markers_stop_when_the_shard_is_no_longer_held(h: Harness) -> None:
    def lost_lease(destination: MarkerDestination, entries: Sequence[TxnMarkerEntry]) -> Sequence[TxnMarkerOutcome]:
        h.held[0] = 2  # another coordinator took shard 0 while this request was out
        return fail_with(NotLeader("moved"))(destination, entries)

    h.transport.script(A, lost_lease)
    completion = h.enqueue("tx-1")
    h.manager.start()
    await settle(h.manager)
    assert await probe_round(h) == ["tx-4"], "a marker of the lost shard was sent again"
    assert len(h.transport.sent_to(A)) == 2
    assert completion.calls == 0


async def test_unloaded_shard_jobs_are_dropped_before_sending(h: Harness) -> None:
    on_shard_0 = h.enqueue("tx-1")
    on_shard_1 = h.enqueue("tx-3")
    h.manager.drop_shard(0)
    h.manager.start()
    await settle(h.manager)
    assert {e.transactional_id for _, batch in h.transport.requests for e in batch} == {"tx-3"}
    assert (on_shard_0.calls, on_shard_1.calls) == (0, 1)


async def test_a_new_job_for_the_same_id_supersedes_the_queued_one(h: Harness) -> None:
    h.transport.hold(A)
    h.manager.start()
    old = h.enqueue("tx-1", epoch=1)
    await until(lambda: len(h.transport.sent_to(A)) == 1, "the old job's request is in flight")
    h.held[0] = 2  # reloaded at a newer coordinator epoch, which resends the markers
    new = h.enqueue("tx-1", epoch=2)
    h.transport.release(A)
    await settle(h.manager)
    assert (old.calls, new.calls) == (0, 1)
    assert [batch[0].coordinator_epoch for batch in h.transport.sent_to(A)] == [1, 2]


# ------------------------------------------------------------------------------------------ completion


async def test_completion_is_retried_until_durable(h: Harness) -> None:
    completion = Completion(failures=[StorageUnavailable("db down"), StorageUnavailable("db down")])
    h.enqueue("tx-1", completion=completion)
    h.manager.start()
    await settle(h.manager)
    assert completion.calls == 3


async def test_completion_is_abandoned_on_not_coordinator(h: Harness) -> None:
    completion = Completion(failures=[NotCoordinator("shard moved")])
    h.enqueue("tx-1", completion=completion)
    h.manager.start()
    await settle(h.manager)  # the job leaves the manager only when its completion task has ended: no call can follow
    assert completion.calls == 1
