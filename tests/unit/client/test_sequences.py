"""Per-partition sequence bookkeeping of idempotent and transactional producers
(design/kafka-semantics.md §4.2, §5.1)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.errors import IllegalStateError, classify
from oncelog.client.futures import RecordFuture
from oncelog.client.producer_batch import ProducerBatch
from oncelog.client.records import TopicPartition
from oncelog.client.sequences import (
    MAX_PRODUCER_EPOCH,
    NO_SEQUENCE,
    ProducerSequences,
    decrement_sequence,
    increment_sequence,
)
from oncelog.errors import (
    InvalidProducerEpoch,
    MessageTooLarge,
    NotLeader,
    OncelogError,
    OutOfOrderSequence,
    RequestTimedOut,
    UnknownProducerId,
)
from oncelog.records import decode_records, read_header
from oncelog.vocabulary import NO_PRODUCER_ID_AND_EPOCH, ProducerIdAndEpoch

TP = TopicPartition("orders", 0)
OTHER = TopicPartition("orders", 1)
INT32_MAX = (1 << 31) - 1
PID = ProducerIdAndEpoch(1000, 0)


class FakeBatch:
    """A batch as the sequence book sees it; remembers every stamp."""

    def __init__(self, tp: TopicPartition, record_count: int) -> None:
        self.topic_partition = tp
        self.record_count = record_count
        self.producer_id = -1
        self.producer_epoch = -1
        self.base_sequence = NO_SEQUENCE
        self.stamps: list[tuple[int, int, int]] = []

    def stamp(self, identity: ProducerIdAndEpoch, base_sequence: int) -> None:
        self.producer_id, self.producer_epoch, self.base_sequence = identity.producer_id, identity.epoch, base_sequence
        self.stamps.append((identity.producer_id, identity.epoch, base_sequence))

    @property
    def stamped(self) -> tuple[int, int, int]:
        return self.producer_id, self.producer_epoch, self.base_sequence


def book(
    *, transactional: bool = False, identity: ProducerIdAndEpoch = PID, max_in_flight: int = 5
) -> ProducerSequences:
    sequences = ProducerSequences(transactional=transactional, max_in_flight=max_in_flight)
    sequences.set_identity(identity)
    return sequences


def send(sequences: ProducerSequences, tp: TopicPartition = TP, count: int = 10) -> FakeBatch:
    batch = FakeBatch(tp, count)
    assert sequences.may_send(batch)
    sequences.assign(batch)
    return batch


def test_increment_and_decrement_wrap_like_kafka() -> None:
    # DefaultRecordBatch.incrementSequence: wraps from Integer.MAX_VALUE to 0
    assert increment_sequence(INT32_MAX, 1) == 0
    assert increment_sequence(INT32_MAX - 2, 5) == 2
    assert increment_sequence(7, 3) == 10
    assert decrement_sequence(2, 5) == INT32_MAX - 2
    assert decrement_sequence(10, 3) == 7


def test_sequences_start_at_zero_and_advance_by_record_count() -> None:
    sequences = book()
    first, second = send(sequences, count=10), send(sequences, count=3)
    other = send(sequences, OTHER, count=4)
    assert first.stamped == (1000, 0, 0)
    assert second.stamped == (1000, 0, 10)
    assert other.stamped == (1000, 0, 0)  # sequences are per partition
    assert sequences.next_sequence(TP) == 13


def test_no_batch_goes_out_before_init_producer_id_answers() -> None:
    sequences = ProducerSequences(transactional=False)
    assert sequences.identity == NO_PRODUCER_ID_AND_EPOCH
    assert not sequences.may_send(FakeBatch(TP, 1))
    with pytest.raises(IllegalStateError, match="no batch may be sent"):
        sequences.assign(FakeBatch(TP, 1))


def test_retry_keeps_sequence() -> None:
    sequences = book()
    batch = send(sequences)
    assert sequences.can_retry(batch, NotLeader("leader moved"))
    assert sequences.may_send(batch)  # the oldest unacknowledged batch goes again ...
    assert batch.stamps == [(1000, 0, 0)]  # ... with the stamp it was first sent with
    with pytest.raises(IllegalStateError, match="already has sequence 0"):
        sequences.assign(batch)
    sequences.complete(batch, base_offset=40)
    assert sequences.last_acked_sequence(TP) == 9
    assert sequences.last_acked_offset(TP) == 49
    assert send(sequences).base_sequence == 10


def test_five_in_flight_order_preserved() -> None:
    sequences = book()
    batches = [send(sequences, count=2) for _ in range(5)]
    assert [b.base_sequence for b in batches] == [0, 2, 4, 6, 8]
    assert not sequences.may_send(FakeBatch(TP, 1))  # a partition remembers only 5 batches
    assert sequences.may_send(FakeBatch(OTHER, 1))
    # batch 3 is answered NOT_LEADER: its retry must wait until batches 1 and 2 are settled
    assert sequences.can_retry(batches[2], NotLeader("moved"))
    assert not sequences.may_send(batches[2])
    sequences.complete(batches[0], 0)
    assert not sequences.may_send(batches[2])
    sequences.complete(batches[1], 2)
    assert sequences.may_send(batches[2])
    assert not sequences.may_send(batches[3])
    assert sequences.in_flight(TP) == batches[2:]
    # a free slot takes the next sequence after the last one assigned
    assert send(sequences, count=1).base_sequence == 10


def test_out_of_order_after_an_earlier_batch_failed_is_retried_not_reset() -> None:
    sequences = book()
    first, second, third = send(sequences), send(sequences), send(sequences)
    # the first batch never reached the partition, so the next two arrive out of order
    assert sequences.can_retry(first, RequestTimedOut("no answer"))
    gap = OutOfOrderSequence("expected 0, got 10")
    assert sequences.can_retry(second, gap)
    assert sequences.can_retry(third, gap)
    assert not sequences.epoch_bump_required
    assert [b.stamps for b in (first, second, third)] == [[(1000, 0, 0)], [(1000, 0, 10)], [(1000, 0, 20)]]
    # the same holds for a transactional producer: not the next expected batch, so not a real gap
    txn = book(transactional=True)
    a, b = send(txn), send(txn)
    assert txn.can_retry(a, NotLeader("moved"))
    assert txn.can_retry(b, gap)


def test_idempotent_epoch_bump_rewrites_sequences() -> None:
    sequences = book()
    first, second, third = send(sequences, count=5), send(sequences, count=5), send(sequences, count=5)
    stale = send(sequences, OTHER, count=2)
    sequences.complete(first, 0)
    # the partition lost this producer's data: the next expected batch is out of order, a real gap
    assert sequences.can_retry(second, OutOfOrderSequence("expected 0, got 5"))
    assert sequences.epoch_bump_required
    assert not sequences.may_send(second)  # nothing goes to the partition before the bump
    assert sequences.bump_epoch()
    assert sequences.identity == ProducerIdAndEpoch(1000, 1)
    # the oldest in-flight batch is known not written, so no later one was: all are re-stamped from 0, in order
    assert second.stamped == (1000, 1, 0)
    assert third.stamped == (1000, 1, 5)
    assert sequences.next_sequence(TP) == 10
    # the old stamp's out-of-order answer for the third batch is expected: retried, no second bump
    assert sequences.can_retry(third, OutOfOrderSequence("expected 0, got 10"))
    assert not sequences.epoch_bump_required
    # the other partition still has a batch under epoch 0: no epoch-1 batch may overtake it
    assert not sequences.may_send(FakeBatch(OTHER, 1))
    sequences.complete(stale, 0)
    restarted = send(sequences, OTHER, count=1)
    assert restarted.stamped == (1000, 1, 0)


def test_unknown_producer_id_bumps_an_idempotent_producer_and_aborts_a_transactional_one() -> None:
    idempotent = book()
    batch = send(idempotent)
    assert idempotent.can_retry(batch, UnknownProducerId("state expired"))
    assert idempotent.epoch_bump_required
    txn = book(transactional=True)
    assert not txn.can_retry(send(txn), UnknownProducerId("state expired"))


def test_transactional_out_of_order_on_the_next_batch_is_not_retried() -> None:
    sequences = book(transactional=True)
    batch = send(sequences)
    err = OutOfOrderSequence("expected 3, got 0")
    assert not sequences.can_retry(batch, err)
    assert not sequences.epoch_bump_required  # the epoch changes through InitProducerId at abort
    assert classify(err, source="produce", transactional=True).epoch_bump
    with pytest.raises(IllegalStateError, match="only through InitProducerId"):
        sequences.bump_epoch()


def test_epoch_exhaustion_requires_a_new_producer_id() -> None:
    sequences = book(identity=ProducerIdAndEpoch(7, MAX_PRODUCER_EPOCH))
    batch = send(sequences, count=3)
    assert sequences.can_retry(batch, OutOfOrderSequence("gap"))
    assert not sequences.bump_epoch()
    assert not sequences.identity.is_valid
    assert not sequences.may_send(batch)
    sequences.set_identity(ProducerIdAndEpoch(8, 0))  # from InitProducerId
    assert batch.stamped == (8, 0, 0)
    assert sequences.may_send(batch)


def test_sequence_wraps_at_int32_max() -> None:
    sequences = book()
    huge = send(sequences, count=INT32_MAX - 1)  # sequences 0 .. INT32_MAX - 2
    sequences.complete(huge, 0)
    assert sequences.next_sequence(TP) == INT32_MAX - 1
    wrapping = send(sequences, count=5)  # INT32_MAX - 1, INT32_MAX, 0, 1, 2
    assert wrapping.base_sequence == INT32_MAX - 1
    after = send(sequences, count=2)
    assert after.base_sequence == 3
    sequences.complete(wrapping, INT32_MAX)
    assert sequences.last_acked_sequence(TP) == 2
    # an out-of-order answer for the batch right after the wrap is a real gap, detected across the wrap
    assert sequences.can_retry(after, OutOfOrderSequence("gap"))
    assert sequences.epoch_bump_required


def test_late_acknowledgement_of_an_older_batch_does_not_move_last_acked_back() -> None:
    sequences = book()
    older, newer = send(sequences, count=2), send(sequences, count=2)
    sequences.complete(newer, 2)
    sequences.complete(older, 0)
    assert sequences.last_acked_sequence(TP) == 3


def test_definite_failure_of_an_idempotent_batch_requests_an_epoch_bump() -> None:
    sequences = book()
    failed, later = send(sequences, count=4), send(sequences, count=4)
    sequences.fail(failed, definite=True)  # e.g. MESSAGE_TOO_LARGE: nothing written, sequences 0-3 left a hole
    assert sequences.epoch_bump_required
    assert sequences.bump_epoch()
    assert later.stamped == (1000, 0, 4)  # still on the wire: its answer comes first
    assert sequences.can_retry(later, OutOfOrderSequence("expected 0, got 4"))
    sequences.resolve_sequences()
    assert later.stamped == (1000, 1, 0)


def test_definite_failure_of_a_transactional_batch_shifts_later_sequences_down() -> None:
    sequences = book(transactional=True)
    kept, failed, later, last = send(sequences, count=2), send(sequences, count=3), send(sequences), send(sequences)
    sequences.fail(failed, definite=True)
    assert [b.base_sequence for b in (kept, later, last)] == [0, 2, 12]
    assert sequences.next_sequence(TP) == 22
    assert sequences.in_flight(TP) == [kept, later, last]


def test_timed_out_batch_blocks_its_partition_until_in_flight_batches_settle() -> None:
    sequences = book(transactional=True)
    lost, next_one = send(sequences, count=5), send(sequences, count=5)
    sequences.fail(lost, definite=False)  # sent, never answered: maybe written
    assert sequences.is_unresolved(TP)
    assert not sequences.may_send(FakeBatch(TP, 1))
    assert sequences.resolve_sequences() == []  # a batch is still in flight
    sequences.complete(next_one, 105)  # the partition accepted 5..9, so 0..4 were written too
    assert sequences.resolve_sequences() == []
    assert not sequences.is_unresolved(TP)
    assert send(sequences, count=1).base_sequence == 10


def test_unresolved_gap_makes_the_transaction_abortable_or_bumps_an_idempotent_epoch() -> None:
    txn = book(transactional=True)
    txn.fail(send(txn, count=5), definite=False)
    assert txn.resolve_sequences() == [TP]
    idempotent = book()
    idempotent.fail(send(idempotent, count=5), definite=False)
    assert idempotent.resolve_sequences() == []
    assert idempotent.epoch_bump_required


def test_new_identity_restarts_every_idle_partition_at_zero() -> None:
    sequences = book(transactional=True)
    batch = send(sequences, count=3)
    sequences.complete(batch, 0)
    sequences.set_identity(ProducerIdAndEpoch(1000, 1))  # InitProducerId with the epoch bump at abort
    assert sequences.next_sequence(TP) == 0
    assert send(sequences).stamped == (1000, 1, 0)
    sequences.reset()
    assert sequences.in_flight(TP) == []


def test_max_in_flight_is_bounded_by_the_partition_dedup_window() -> None:
    with pytest.raises(ValueError, match="between 1 and 5"):
        ProducerSequences(transactional=False, max_in_flight=6)
    single = book(max_in_flight=1)
    send(single)
    assert not single.may_send(FakeBatch(TP, 1))


def test_batch_that_may_have_been_written_keeps_its_stamp_through_an_epoch_bump() -> None:
    sequences = book()
    maybe_written, refused = send(sequences, count=3), send(sequences, count=3)
    assert sequences.can_retry(maybe_written, RequestTimedOut("not durable in time", definite=False))
    sequences.fail(refused, definite=True)  # a hole: the epoch must change
    assert sequences.bump_epoch()
    sequences.resolve_sequences()
    # resent under its first stamp, so the partition can answer "duplicate" instead of writing it again
    assert maybe_written.stamped == (1000, 0, 0)
    assert sequences.may_send(maybe_written)
    assert not sequences.may_send(FakeBatch(TP, 1))  # nothing new before the partition is rewritten
    sequences.resending(maybe_written)
    assert sequences.can_retry(maybe_written, RequestTimedOut("still not durable", definite=False))
    sequences.resolve_sequences()
    assert maybe_written.stamps == [(1000, 0, 0)]
    sequences.complete(maybe_written, 7)
    sequences.resolve_sequences()
    assert send(sequences, count=1).stamped == (1000, 1, 0)


def test_no_new_batch_while_a_batch_that_may_have_been_written_awaits_its_answer() -> None:
    """The partition recognises only its last 5 batches as duplicates. A batch answered with a timeout (maybe
    written) while 4 later ones were written is the 5th from the end; a new batch written before its retry would
    push it out, its retry would be refused as out of order, and the producer would write it a second time."""
    sequences = book()
    maybe_written, *later = [send(sequences, count=1) for _ in range(5)]
    assert sequences.can_retry(maybe_written, RequestTimedOut("not durable in time", definite=False))
    for offset, batch in enumerate(later, start=1):
        sequences.complete(batch, offset)
    assert not sequences.may_send(FakeBatch(TP, 1))
    assert sequences.may_send(maybe_written)  # its retry goes first, with its first stamp
    sequences.resending(maybe_written)
    assert not sequences.may_send(FakeBatch(TP, 1))  # on the wire again: still maybe written
    sequences.complete(maybe_written, 0)  # the partition answered (a duplicate of what it had)
    assert send(sequences, count=1).stamped == (1000, 0, 5)


def test_batches_may_follow_one_that_may_have_been_written_while_it_stays_in_the_dedup_window() -> None:
    sequences = book()
    maybe_written = send(sequences, count=1)
    assert sequences.can_retry(maybe_written, RequestTimedOut("not durable in time", definite=False))
    for offset in range(1, 5):  # the 2nd to 5th batch: with it, the partition's last five
        sequences.complete(send(sequences, count=1), offset)
    assert not sequences.may_send(FakeBatch(TP, 1))  # a 6th would push it out


def test_batch_known_unwritten_is_restamped_once_the_partition_answered() -> None:
    sequences = book()
    maybe_written, later = send(sequences, count=2), send(sequences, count=2)
    assert sequences.can_retry(maybe_written, RequestTimedOut("no answer", definite=False))
    assert sequences.can_retry(later, RequestTimedOut("no answer", definite=False))
    sequences.request_epoch_bump(TP)
    assert sequences.bump_epoch()
    sequences.resolve_sequences()
    assert not sequences.may_send(later)  # only the oldest may go, with its first stamp
    sequences.resending(maybe_written)
    # a leader that moved only says this attempt wrote nothing: the first attempt may still be in the log
    assert sequences.can_retry(maybe_written, NotLeader("moved"))
    sequences.resolve_sequences()
    assert maybe_written.stamped == (1000, 0, 0)
    sequences.resending(maybe_written)
    # out of order: the partition does not hold it, so neither the later batch (sequence order)
    assert sequences.can_retry(maybe_written, OutOfOrderSequence("expected 0, got 0 at an old epoch"))
    sequences.resolve_sequences()
    assert (maybe_written.stamped, later.stamped) == ((1000, 1, 0), (1000, 1, 2))


# -- the sequence book, the accumulator and the error table together, against a model partition ----------


class ModelPartition:
    """A partition applying the append rules of design/kafka-semantics.md §4.2 for one producer (dedup window of 5)."""

    def __init__(self) -> None:
        self.log: list[bytes | None] = []
        self.epoch = -1
        self.last_sequence = -1
        self.cache: list[tuple[int, int, int]] = []  # (first_seq, last_seq, base_offset)

    def append(self, payload: bytes) -> tuple[int, OncelogError | None]:
        header = read_header(payload)
        first, last = header.base_sequence, header.last_sequence
        if header.producer_epoch < self.epoch:
            return -1, InvalidProducerEpoch(f"epoch {header.producer_epoch} is older than {self.epoch}")
        if header.producer_epoch == self.epoch:
            for cached_first, cached_last, offset in self.cache:
                if (cached_first, cached_last) == (first, last):
                    return offset, None
            if first != increment_sequence(self.last_sequence, 1):
                return -1, OutOfOrderSequence(f"expected {self.last_sequence + 1}, got {first}")
        elif first != 0:
            return -1, OutOfOrderSequence(f"new epoch must start at 0, got {first}")
        base_offset = len(self.log)
        self.log.extend(record.value for record in decode_records(payload))
        if header.producer_epoch != self.epoch:
            self.cache = []  # the partition remembers the batches of the producer's current epoch only
        self.epoch, self.last_sequence = header.producer_epoch, last
        self.cache = [*self.cache, (first, last, base_offset)][-5:]
        return base_offset, None


def run_lossy_stream(
    data: st.DataObject, records: int, batch_size: int, *, faults: bool
) -> tuple[ModelPartition, list[bytes], list[RecordFuture]]:
    """Send ``records`` one-record appends through the accumulator and the sequence book to a model partition.

    Requests and answers travel in order on one stream; a broken stream loses a suffix of each: the partition
    may have written requests whose answers were lost, or never seen the later requests at all; a leader change
    rejects a batch without writing it. With ``faults`` a slow disk also answers some written batches with a
    timeout (indeterminate), and some batches are refused for good (too large for the topic, every time).
    """
    now = [0]
    sequences = ProducerSequences(transactional=False)
    sequences.set_identity(ProducerIdAndEpoch(5, 0))
    accumulator = RecordAccumulator(
        batch_size=batch_size, linger_ms=0, retry_backoff_ms=10, sequences=sequences, clock=lambda: now[0]
    )
    partition = ModelPartition()
    refused: dict[ProducerBatch, bool] = {}  # the partition refuses the batch every time (a property of the batch)
    values = [b"%d" % i for i in range(records)]
    futures = [accumulator.append(TP, None, value).future for value in values]
    for _round in range(2_000):
        if all(future.done() for future in futures):
            return partition, values, futures
        now[0] += 10
        in_flight: list[ProducerBatch] = []
        while drained := accumulator.drain(accumulator.ready().partitions):
            in_flight.extend(drained)  # up to 5 batches of the partition on the wire, in order
        answered = data.draw(st.sampled_from([len(in_flight), *range(len(in_flight))]), label="answers received")
        delivered = data.draw(st.integers(answered, len(in_flight)), label="requests delivered")
        for index, batch in enumerate(in_flight):
            if faults and batch not in refused:
                refused[batch] = data.draw(st.integers(0, 7), label="refused for good") == 7
            error: OncelogError | None = None
            offset = -1
            if index < delivered:
                if data.draw(st.integers(0, 9), label="leader moved") == 9:
                    error = NotLeader("leader moved")
                elif refused.get(batch, False):
                    error = MessageTooLarge("the batch exceeds the topic's max_message_bytes")
                else:
                    offset, error = partition.append(batch.payload)
                    if faults and error is None and data.draw(st.integers(0, 5), label="slow disk") == 5:
                        # written, but not durable within the request timeout: an indeterminate answer
                        error = RequestTimedOut("not durable in time; retry the same batch", definite=False)
            if index >= answered:
                error = RequestTimedOut("the stream broke before the answer", definite=False)
            if error is None:
                accumulator.complete(batch, offset)
            elif sequences.can_retry(batch, error):
                accumulator.reenqueue(batch)
            elif isinstance(error, MessageTooLarge):
                accumulator.fail(batch, error, definite=True)
            else:
                pytest.fail(f"{error!r} for {batch} would be given up on")
        sequences.resolve_sequences()
        if sequences.epoch_bump_required:
            assert sequences.bump_epoch()
    pytest.fail(f"records still unacknowledged after 2000 rounds; partition has {len(partition.log)}")


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=60), st.integers(min_value=20, max_value=400))
def test_lossy_network_writes_every_record_exactly_once_in_order(
    data: st.DataObject, records: int, batch_size: int
) -> None:
    """Retrying with the same sequences leaves every record in the log exactly once, in send order."""
    partition, values, futures = run_lossy_stream(data, records, batch_size, faults=False)
    assert partition.log == values
    assert [future.result().offset for future in futures] == list(range(records))


@settings(max_examples=150, deadline=None)
@given(st.data(), st.integers(min_value=1, max_value=60), st.integers(min_value=20, max_value=200))
def test_lossy_network_with_refused_batches_writes_every_other_record_exactly_once_in_order(
    data: st.DataObject, records: int, batch_size: int
) -> None:
    """A refusal leaves a sequence gap that bumps the epoch while an earlier batch, written but answered with a
    timeout by the slow disk, waits for its retry: it keeps its stamp, so nothing is written twice; every record
    not refused is written once, in send order."""
    partition, values, futures = run_lossy_stream(data, records, batch_size, faults=True)
    kept = [value for value, future in zip(values, futures, strict=True) if future.exception() is None]
    assert all(isinstance(f.exception(), MessageTooLarge) for f in futures if f.exception() is not None)
    assert partition.log == kept
    assert [f.result().offset for f in futures if f.exception() is None] == list(range(len(kept)))
