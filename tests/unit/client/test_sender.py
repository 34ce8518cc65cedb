"""Sender against in-memory partitions and coordinators: producer ids, sequences, retries that never duplicate,
the idempotent producer's local epoch bump, and how produce errors reach a transaction."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from concurrent.futures import Future
from contextlib import asynccontextmanager
from typing import Any

import pytest

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.errors import AbortableError, ProducerFencedError
from oncelog.client.records import TopicPartition
from oncelog.client.sender import NodeStream, ProduceSettings, Sender, SenderConfig
from oncelog.client.sequences import MAX_PRODUCER_EPOCH, ProducerIdAndEpoch, ProducerSequences
from oncelog.client.transaction_manager import TransactionManager, TransactionState
from oncelog.client.transport import Deadline
from oncelog.errors import (
    CoordinatorNotAvailable,
    InvalidRecord,
    NetworkException,
    NotLeader,
    OncelogError,
    ProducerFenced,
)
from oncelog.records import decode_records

from .fake_services import ANSWER, LOSE_ANSWER, SILENT, STORAGE, FakeServices

TP = TopicPartition("out", 0)
TP1 = TopicPartition("out", 1)
TID = "copier-0"


class CountingAccumulator(RecordAccumulator):
    """Counts the sender's iterations: each asks :meth:`ready` once."""

    ready_calls = 0

    def ready(self) -> Any:
        self.ready_calls += 1
        return super().ready()


class Harness:
    """A sender (and, with ``transactional``, a transaction manager) over :class:`FakeServices`."""

    def __init__(self, *, transactional: bool = False, batch_size: int = 16384) -> None:
        self.services = FakeServices({"out": 2})
        self.sequences = ProducerSequences(transactional=transactional)
        self.accumulator = CountingAccumulator(
            batch_size=batch_size, linger_ms=0, retry_backoff_ms=0, sequences=self.sequences
        )
        self.metrics: Counter[str] = Counter()
        self.fatal: list[OncelogError] = []
        self.txn: TransactionManager | None = None
        if transactional:
            self.txn = TransactionManager(
                transactional_id=TID,
                sequences=self.sequences,
                accumulator=self.accumulator,
                client=self.services,
                wake=self._wake,
                enter_fatal=self._enter_fatal,
                retry_backoff_ms=1,
                retry_backoff_max_ms=2,
            )
        self.sender: Sender | None = None

    def _wake(self) -> None:
        assert self.sender is not None
        self.sender.wakeup()

    def _enter_fatal(self, error: OncelogError) -> None:
        """What the producer does with a fatal error: remember it, stop the sender, fail everything."""
        assert self.sender is not None
        self.fatal.append(error)
        self.sender.fatal = error
        if self.txn is not None:
            self.txn.set_fatal(error)
        self.accumulator.abort_all(error)
        self.sender.stop()

    def send(self, value: bytes, tp: TopicPartition = TP) -> Future[Any]:
        if self.txn is not None:
            self.txn.check_send()
            self.txn.maybe_add_partition(tp)
        future = self.accumulator.append(tp, None, value).future
        if self.sender is not None:
            self.sender.wakeup()
        return future

    async def iterations(self, count: int) -> None:
        """Return once the sender has run ``count`` more iterations (it runs on this loop: yield to it)."""
        assert self.sender is not None
        target = self.accumulator.ready_calls + count
        async with asyncio.timeout(5):
            while self.accumulator.ready_calls < target:
                self.sender.wakeup()
                await asyncio.sleep(0)

    @asynccontextmanager
    async def running(self) -> AsyncIterator[Sender]:
        config = SenderConfig(
            produce=ProduceSettings(TID if self.txn else "", True, 1_000), retry_backoff_ms=1, retry_backoff_max_ms=2
        )
        self.sender = Sender(
            config=config,
            accumulator=self.accumulator,
            sequences=self.sequences,
            metadata=self.services,
            transport=self.services,
            transactions=self.txn,
            enter_fatal=self._enter_fatal,
            metrics=self.metrics,
        )
        task = asyncio.get_running_loop().create_task(self.sender.run())
        try:
            yield self.sender
        finally:
            self.sender.stop()
            await asyncio.wait_for(task, 5)


async def settled(futures: Sequence[Future[Any]]) -> None:
    """Wait until every future is settled (failed or not)."""
    waiters = [asyncio.wrap_future(f) for f in futures]
    await asyncio.wait_for(asyncio.wait(waiters), 10)
    for waiter in waiters:
        waiter.exception()  # read here; the tests look at the futures themselves


def values_of(batches: list[tuple[int, int, int, bytes]]) -> list[list[bytes | None]]:
    return [[record.value for record in decode_records(payload)] for *_, payload in batches]


# ------------------------------------------------------------------------------------------------ idempotence


async def test_idempotent_sender_gets_a_producer_id_and_stamps_consecutive_sequences() -> None:
    h = Harness(batch_size=120)  # a few records per batch, so each partition gets several batches
    async with h.running():
        futures = [h.send(b"v%02d" % i, TP if i % 2 else TP1) for i in range(20)]
        await settled(futures)
    assert h.services.calls[0] == ("InitProducerId", "", None)
    assert [f.result().offset for f in futures[1::2]] == list(range(10))
    assert h.services.partitions[TP].values == [b"v%02d" % i for i in range(1, 20, 2)]
    for tp in (TP, TP1):
        batches = h.services.produced(tp)
        assert {(pid, epoch) for pid, epoch, _, _ in batches} == {(h.sequences.identity.producer_id, 0)}
        counts = [len(values) for values in values_of(batches)]
        assert [seq for _, _, seq, _ in batches] == [sum(counts[:i]) for i in range(len(counts))]
        assert len(batches) > 1


async def test_lost_answer_is_resent_with_the_same_sequence_and_the_partition_keeps_one_copy() -> None:
    h = Harness()
    h.services.fail("produce", LOSE_ANSWER)
    async with h.running() as sender:
        future = h.send(b"once")
        await settled([future])
        assert sender.stream_breaks() == 1
    first, retry = h.services.produced(TP)
    assert retry == first  # same producer id, epoch, sequence and bytes
    assert h.services.partitions[TP].values == [b"once"]
    assert h.services.partitions[TP].received[-1].result.duplicate
    assert future.result().offset == 0
    assert h.metrics["duplicate_batches"] == 1
    assert h.services.streams[0].cancelled


async def test_batches_in_flight_on_a_broken_stream_are_retried_in_order_without_duplicates() -> None:
    h = Harness(batch_size=80)  # one record per batch: up to five batches of the partition in flight
    h.services.fail("produce", ANSWER, LOSE_ANSWER)  # the second request's answer is lost
    async with h.running():
        futures = [h.send(b"record-%02d" % i) for i in range(12)]
        await settled(futures)
    expected = [b"record-%02d" % i for i in range(12)]
    assert h.services.partitions[TP].values == expected
    assert [f.result().offset for f in futures] == list(range(12))
    sent = h.services.produced(TP)
    assert len(sent) > 12  # retries happened
    by_sequence: dict[int, set[bytes]] = {}
    for _, _, sequence, payload in sent:
        by_sequence.setdefault(sequence, set()).add(payload)
    assert all(len(payloads) == 1 for payloads in by_sequence.values())  # a retry resends the same bytes


async def test_queued_batches_share_a_request_and_each_gets_its_own_offsets() -> None:
    h = Harness(batch_size=80)  # one record per batch
    values = [b"record-%02d" % i for i in range(12)]
    futures = [h.send(value) for value in values]  # queued before the sender runs: a backlog
    async with h.running():
        await settled(futures)
    assert h.services.partitions[TP].values == values
    assert [f.result().offset for f in futures] == list(range(12))
    assert h.metrics["batches_sent"] == 12
    assert h.metrics["produce_requests"] < 12  # the backlog went out several batches a request
    (stream,) = h.services.streams
    assert max(len(stream_entries) for stream_entries in stream.batches_per_entry) == 3


async def test_a_refused_request_of_several_batches_is_retried_batch_by_batch_and_lands_once_in_order() -> None:
    h = Harness(batch_size=80)
    h.services.fail("produce", NotLeader("the leader moved"))  # the first request, three batches, is refused whole
    values = [b"record-%02d" % i for i in range(6)]
    futures = [h.send(value) for value in values]
    async with h.running():
        await settled(futures)
    assert h.services.partitions[TP].values == values
    assert [f.result().offset for f in futures] == list(range(6))
    assert h.metrics["batch_retries"] == 3
    sequences = [sequence for _, _, sequence, _ in h.services.produced(TP)]
    assert sequences[:3] == [0, 1, 2]  # refused together
    assert sequences[3:6] == [0, 1, 2]  # each resent with its sequence


async def test_retriable_answer_is_retried_with_the_same_sequence_after_a_metadata_refresh() -> None:
    h = Harness()
    h.services.fail("produce", NotLeader("the leader moved"))
    async with h.running():
        future = h.send(b"v")
        await settled([future])
    refused, accepted = h.services.produced(TP)
    assert refused == accepted
    assert future.result().offset == 0
    assert "out" in h.services.metadata_updates
    assert h.metrics["batch_retries"] == 1


async def first_refused_later(h: Harness) -> tuple[Future[Any], Future[Any]]:
    """Send b"first", then b"refused" (which the partition refuses for good), then b"later", each once settled."""
    async with h.running():
        await settled([h.send(b"first")])
        h.services.fail("produce", InvalidRecord("refused by the topic's rules"))
        refused = h.send(b"refused")
        await settled([refused])
        later = h.send(b"later")
        await settled([later])
    return refused, later


async def test_failed_batch_makes_an_idempotent_producer_bump_its_epoch_and_restart_at_sequence_zero() -> None:
    """A batch refused for good leaves a hole in the partition's sequences: the next batch needs a new epoch."""
    h = Harness()
    refused, later = await first_refused_later(h)
    assert isinstance(refused.exception(), InvalidRecord)
    assert later.result().offset == 1
    (_, epoch0, seq0, _), (_, _, seq1, _), (_, epoch1, seq2, _) = h.services.produced(TP)
    assert (epoch0, seq0, seq1) == (0, 0, 1)
    assert (epoch1, seq2) == (1, 0)
    assert h.metrics["epoch_bumps"] == 1
    assert h.services.partitions[TP].values == [b"first", b"later"]


async def test_producer_id_request_is_retried_until_a_coordinator_answers() -> None:
    h = Harness()
    h.services.fail("InitProducerId", CoordinatorNotAvailable("loading"), CoordinatorNotAvailable("loading"))
    async with h.running():
        future = h.send(b"v")
        await settled([future])
    assert future.result().offset == 0
    assert h.services.names()[:4] == ["InitProducerId"] * 3 + ["Produce"]


async def test_exhausted_epoch_takes_a_new_producer_id_instead_of_a_bump() -> None:
    h = Harness()
    h.services.first_epoch = MAX_PRODUCER_EPOCH
    _, later = await first_refused_later(h)
    assert later.result().offset == 1
    (pid0, epoch0, _, _), _, (pid1, epoch1, seq1, _) = h.services.produced(TP)
    assert epoch0 == MAX_PRODUCER_EPOCH
    assert pid1 != pid0 and (epoch1, seq1) == (MAX_PRODUCER_EPOCH, 0)
    assert h.services.names().count("InitProducerId") == 2
    assert h.services.partitions[TP].values == [b"first", b"later"]


async def test_fencing_answer_is_fatal_and_fails_every_pending_record() -> None:
    h = Harness()
    h.services.fail("produce", ProducerFenced("a newer instance took over"))
    async with h.running():
        futures = [h.send(b"a"), h.send(b"b", TP1)]
        await settled(futures)
    assert len(h.fatal) == 1 and isinstance(h.fatal[0], ProducerFencedError)
    assert all(isinstance(f.exception(), ProducerFencedError) for f in futures)


# ------------------------------------------------------------------------------------------------ transactions


async def begun(h: Harness) -> TransactionManager:
    assert h.txn is not None
    await h.txn.init_transactions(Deadline(5))
    h.txn.begin_transaction()
    return h.txn


async def test_partition_is_added_to_the_transaction_before_its_first_batch() -> None:
    h = Harness(transactional=True)
    async with h.running() as sender:
        txn = await begun(h)
        entered, released = h.services.hold("AddPartitionsToTxn")
        futures = [h.send(b"a"), h.send(b"b", TP1), h.send(b"c")]
        await asyncio.wait_for(entered.wait(), 5)
        await h.iterations(3)  # the sender looked at the ready batches while the partitions were being added
        assert "Produce" not in h.services.names()
        assert h.metrics["batches_sent"] == 0
        released.set()
        await settled(futures)
        await txn.commit_transaction(sender.flush, Deadline(5))
    names = h.services.names()
    assert names.index("AddPartitionsToTxn") < names.index("Produce")
    added = {tp for call in h.services.calls if call[0] == "AddPartitionsToTxn" for tp in call[3]}
    assert added == {TP, TP1}
    assert names[-1] == "EndTxn"
    assert all(pid == h.services.identity(TID).producer_id for pid, _, _, _ in h.services.produced(TP))


async def test_produce_error_makes_the_transaction_abortable_and_the_abort_bumps_the_epoch() -> None:
    """KIP-360 for a transactional producer: a refused batch dooms the transaction; the abort bumps the epoch and
    the next transaction writes the partition from sequence 0."""
    h = Harness(transactional=True)
    async with h.running() as sender:
        txn = await begun(h)
        h.services.fail("produce", InvalidRecord("refused by the topic's rules"))
        refused = h.send(b"refused")
        await settled([refused])
        assert txn.state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(AbortableError) as raised:
            txn.check_send()
        assert raised.value.epoch_bump_required
        epoch_before = h.sequences.identity.epoch
        await txn.abort_transaction(sender.flush, Deadline(5))
        assert h.sequences.identity.epoch == epoch_before + 1 == h.services.identity(TID).epoch
        txn.begin_transaction()
        accepted = h.send(b"accepted")
        await settled([accepted])
        await txn.commit_transaction(sender.flush, Deadline(5))
    (_, e0, s0, _), (_, e1, s1, _) = h.services.produced(TP)
    assert (e0, s0) == (epoch_before, 0)
    assert (e1, s1) == (epoch_before + 1, 0)
    assert h.services.partitions[TP].values == [b"accepted"]
    assert [c[3] for c in h.services.calls if c[0] == "EndTxn"] == [False, True]


# ------------------------------------------------------------------------------------------------ streams


async def test_request_unanswered_past_the_request_timeout_breaks_the_stream_as_indeterminate() -> None:
    """The client gives up on a silent node after request_timeout plus the server's margin, never before."""
    h = Harness()
    h.services.fail("produce", SILENT)
    results: list[tuple[Any, OncelogError | None]] = []
    idle: list[bool] = []
    config = SenderConfig(produce=ProduceSettings("", True, 1_000), request_timeout_ms=1_000)
    stream = NodeStream(
        STORAGE, h.services, lambda b, r, e: results.append((b, e)), lambda: idle.append(True), config=config
    )
    h.sequences.set_identity(ProducerIdAndEpoch(7, 0))
    h.accumulator.append(TP, None, b"v")
    batches = h.accumulator.drain([TP])
    before = time.monotonic()
    stream.send(batches, {TP: 0})
    after = time.monotonic()
    await h.services.produce_written.wait()
    stream.check_timeout(before + 1 + 5 - 0.01)  # request timeout (1 s) plus the 5 s margin not yet over
    assert stream.in_flight == 1 and not results
    stream.check_timeout(after + 1 + 5 + 0.01)
    assert stream.in_flight == 0 and stream.breaks == 1
    ((batch, error),) = results
    assert batch is batches[0]
    assert isinstance(error, NetworkException) and not error.definite
    assert idle == [True]
    assert h.services.streams[0].cancelled
    await stream.close()
