"""RecordAccumulator: batching by size and linger, stamping at drain time, futures, retries, abort and memory."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client.accumulator import MAX_BATCH_SIZE, RecordAccumulator
from oncelog.client.bulk_records import ColumnRecords
from oncelog.client.errors import AbortableError, BufferExhaustedError, IllegalStateError, RetriableError
from oncelog.client.producer_batch import ProducerBatch, check_record_size, estimate_record_size
from oncelog.client.records import RecordMetadata, TopicPartition
from oncelog.client.sequences import ProducerSequences
from oncelog.errors import MessageTooLarge, NotLeader, Reason
from oncelog.records import BATCH_OVERHEAD, Compression, TimestampType, decode_records, read_header, validate_batch
from oncelog.vocabulary import ProducerIdAndEpoch

TP = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)
IDENTITY = ProducerIdAndEpoch(4242, 3)


class Clock:
    """Unix milliseconds the test moves by hand."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make(
    clock: Clock | None = None,
    *,
    transactional: bool | None = False,
    identity: ProducerIdAndEpoch = IDENTITY,
    **config: Any,
) -> tuple[RecordAccumulator, ProducerSequences | None]:
    """An accumulator; ``transactional=None`` means a producer that is not idempotent."""
    sequences = None
    if transactional is not None:
        sequences = ProducerSequences(transactional=transactional)
        sequences.set_identity(identity)
    settings_ = {"linger_ms": 5, **config}
    return RecordAccumulator(sequences=sequences, clock=clock or Clock(), **settings_), sequences


def test_records_share_a_batch_until_batch_size() -> None:
    five_records = BATCH_OVERHEAD + 5 * estimate_record_size(b"k0", b"x" * 40, offset_delta=4)
    accumulator, _ = make(batch_size=five_records)
    results = [accumulator.append(TP, b"k%d" % i, b"x" * 40) for i in range(5)]
    assert [r.new_batch_created for r in results] == [True, False, False, False, False]
    assert [r.batch_is_full for r in results] == [False, False, False, False, True]
    assert [r.open_batch_is_full for r in results] == [False, False, False, False, True]
    overflow = [accumulator.append(TP, b"k", b"x" * 40) for _ in range(3)]
    assert overflow[0].new_batch_created  # the sixth record did not fit
    assert overflow[0].batch_is_full  # a second batch queues behind the first: send it
    assert not overflow[0].open_batch_is_full  # but the batch that took the record has room
    (first,) = accumulator.drain([TP])
    assert first.record_count == 5
    assert first.size_in_bytes == five_records
    assert len(first.payload) == first.size_in_bytes  # the size estimate is the encoded size


def test_a_record_larger_than_batch_size_gets_a_batch_of_its_own() -> None:
    accumulator, _ = make(batch_size=100)
    result = accumulator.append(TP, None, b"x" * 500)
    assert result.new_batch_created and result.batch_is_full
    assert accumulator.append(TP, None, b"y").new_batch_created


def test_linger_ms_holds_a_batch_that_is_not_full() -> None:
    clock = Clock()
    accumulator, _ = make(clock, linger_ms=20)
    accumulator.append(TP, None, b"a")
    clock.now += 5
    check = accumulator.ready()
    assert check.partitions == []
    assert check.next_ready_check_ms == 15
    clock.now += 15
    assert accumulator.ready().partitions == [TP]
    assert accumulator.ready().next_ready_check_ms is None


def test_flush_and_close_make_lingering_batches_ready() -> None:
    clock = Clock()
    accumulator, _ = make(clock, linger_ms=10_000)
    accumulator.append(TP, None, b"a")
    assert accumulator.ready().partitions == []
    accumulator.begin_flush()
    assert accumulator.ready().partitions == [TP]
    accumulator.end_flush()
    assert accumulator.ready().partitions == []
    accumulator.close()
    assert accumulator.ready().partitions == [TP]
    with pytest.raises(IllegalStateError, match="the producer is closed"):
        accumulator.append(TP, None, b"b")


def test_drain_stamps_producer_id_epoch_sequence_and_transactional_flag() -> None:
    clock = Clock()
    accumulator, sequences = make(clock, transactional=True)
    for i in range(3):
        accumulator.append(TP, b"k%d" % i, b"v%d" % i, headers=[("trace", b"t%d" % i)])
    accumulator.append(TP1, b"other", b"x")
    batches = accumulator.drain([TP, TP1])
    assert [b.topic_partition for b in batches] == [TP, TP1]
    header = validate_batch(batches[0].payload)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, 0)
    assert header.is_transactional and header.record_count == 3
    records = decode_records(batches[0].payload)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == [
        (b"k%d" % i, b"v%d" % i, (("trace", b"t%d" % i),), clock.now) for i in range(3)
    ]
    # the next batch of the partition continues the sequence
    accumulator.append(TP, None, b"more")
    (next_batch,) = accumulator.drain([TP])
    assert read_header(next_batch.payload).base_sequence == 3
    assert sequences is not None and sequences.in_flight(TP) == [batches[0], next_batch]


def test_batches_of_a_producer_that_is_not_idempotent_carry_no_producer_id() -> None:
    accumulator, _ = make(transactional=None)
    accumulator.append(TP, None, b"a")
    (batch,) = accumulator.drain([TP])
    header = validate_batch(batch.payload)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (-1, -1, -1)
    assert not header.is_transactional


def test_idempotent_batches_are_not_transactional() -> None:
    accumulator, _ = make(transactional=False)
    accumulator.append(TP, None, b"a")
    (batch,) = accumulator.drain([TP])
    header = read_header(batch.payload)
    assert header.producer_id == 4242 and not header.is_transactional


def test_future_resolves_to_record_metadata() -> None:
    clock = Clock()
    accumulator, _ = make(clock)
    first = accumulator.append(TP, None, b"a", timestamp=1_000).future
    second = accumulator.append(TP, None, b"b").future
    (batch,) = accumulator.drain([TP])
    assert not first.done()
    assert accumulator.complete(batch, base_offset=70)
    assert first.result(timeout=0) == RecordMetadata("orders", 0, 70, 1_000)
    assert second.result(timeout=0) == RecordMetadata("orders", 0, 71, clock.now)
    assert not accumulator.complete(batch, base_offset=99)  # a second answer changes nothing
    assert first.result(timeout=0).offset == 70
    assert accumulator.used_bytes == 0


def test_log_append_time_and_unknown_offset() -> None:
    accumulator, _ = make()
    future = accumulator.append(TP, None, b"a", timestamp=5).future
    (batch,) = accumulator.drain([TP])
    accumulator.complete(batch, base_offset=-1, log_append_time_ms=123)
    assert future.result(timeout=0) == RecordMetadata("orders", 0, -1, 123)


def test_futures_cannot_be_cancelled() -> None:
    accumulator, _ = make()
    future = accumulator.append(TP, None, b"a").future
    assert not future.cancel()
    (batch,) = accumulator.drain([TP])
    accumulator.complete(batch, 0)
    assert future.result(timeout=0).offset == 0


def test_a_callback_may_send_again_without_deadlock() -> None:
    accumulator, _ = make()
    sent_from_callback: list[Future[RecordMetadata]] = []
    future = accumulator.append(TP, None, b"a").future
    future.add_done_callback(lambda _: sent_from_callback.append(accumulator.append(TP, None, b"b").future))
    (batch,) = accumulator.drain([TP])
    accumulator.complete(batch, 0)
    assert len(sent_from_callback) == 1
    (follow_up,) = accumulator.drain([TP])
    assert decode_records(follow_up.payload)[0].value == b"b"


def test_retry_goes_ahead_of_new_batches_after_backoff_and_keeps_its_bytes() -> None:
    clock = Clock()
    accumulator, sequences = make(clock, retry_backoff_ms=100)
    accumulator.append(TP, None, b"first")
    (first,) = accumulator.drain([TP])
    sent_bytes = first.payload
    accumulator.append(TP, None, b"second")
    assert sequences is not None and sequences.can_retry(first, NotLeader("moved"))
    accumulator.reenqueue(first)
    assert first.attempts == 1
    assert accumulator.drain([TP]) == []  # backing off; the new batch may not overtake it
    assert accumulator.ready().next_ready_check_ms == 100
    clock.now += 100
    assert accumulator.ready().partitions == [TP]
    (again,) = accumulator.drain([TP])
    assert again is first and again.payload == sent_bytes  # same sequence, same bytes
    (second,) = accumulator.drain([TP])
    assert read_header(second.payload).base_sequence == 1


def test_retried_batches_keep_their_original_order() -> None:
    clock = Clock()
    accumulator, sequences = make(clock, retry_backoff_ms=0)
    for value in (b"a", b"b", b"c"):
        accumulator.append(TP, None, value)
        accumulator.drain([TP])
    a, b, c = sequences.in_flight(TP) if sequences else []
    accumulator.append(TP, None, b"new")
    for batch in (c, a, b):  # answers arrive in any order
        accumulator.reenqueue(batch)  # type: ignore[arg-type]
    order = []
    while drained := accumulator.drain([TP]):
        order.extend(drained)
        accumulator.complete(drained[0], 0)
    assert [decode_records(batch.payload)[0].value for batch in order] == [b"a", b"b", b"c", b"new"]


def test_ready_leaves_out_a_partition_with_five_batches_in_flight() -> None:
    accumulator, _ = make(linger_ms=0)
    for _ in range(5):
        accumulator.append(TP, None, b"x")
        assert len(accumulator.drain([TP])) == 1
    accumulator.append(TP, None, b"sixth")
    accumulator.append(TP1, None, b"elsewhere")
    assert accumulator.ready().partitions == [TP1]
    assert accumulator.drain([TP, TP1])[0].topic_partition == TP1


def test_abort_discards_unsent_batches_with_an_abortable_error() -> None:
    accumulator, _ = make()
    sent = accumulator.append(TP, None, b"sent").future
    (in_flight,) = accumulator.drain([TP])
    unsent = [accumulator.append(tp, None, b"unsent").future for tp in (TP, TP1, TP1)]
    assert accumulator.abort_undrained() == 2
    for future in unsent:
        error = future.exception(timeout=0)
        assert isinstance(error, AbortableError)
    assert not sent.done()  # a sent batch finishes on its own; the abort waits for it
    assert not accumulator.has_undrained()
    accumulator.complete(in_flight, 10)
    assert sent.result(timeout=0).offset == 10
    assert accumulator.used_bytes == 0


def test_abort_all_fails_sent_and_unsent_batches() -> None:
    accumulator, _ = make()
    futures = [accumulator.append(TP, None, b"a").future]
    accumulator.drain([TP])
    futures.append(accumulator.append(TP, None, b"b").future)
    fatal = RuntimeError("producer closed by force")
    assert accumulator.abort_all(fatal) == 2
    assert all(f.exception(timeout=0) is fatal for f in futures)
    assert accumulator.incomplete() == []


def test_buffer_memory_bound_raises_a_clear_error_and_frees_on_completion() -> None:
    accumulator, _ = make(batch_size=1024, buffer_memory=2048, max_request_size=2048)
    accumulator.append(TP, None, b"x" * 900)
    accumulator.append(TP1, None, b"y" * 900)
    with pytest.raises(BufferExhaustedError, match="buffer_memory=2048 bytes is full") as raised:
        accumulator.append(TP, None, b"z" * 900)
    assert raised.value.retriable and raised.value.definite
    assert accumulator.ready().partitions == [TP, TP1]  # memory pressure sends everything at once
    (batch,) = accumulator.drain([TP])
    accumulator.complete(batch, 0)
    assert accumulator.append(TP, None, b"z" * 900).new_batch_created


def _until_waiting_for_memory(accumulator: RecordAccumulator) -> None:
    """Return once a caller blocks on memory (polled: the accumulator has no hook for it), within 3 s."""
    for _ in range(3000):
        if accumulator.waiting_for_memory:
            break
        threading.Event().wait(0.001)
    assert accumulator.waiting_for_memory == 1


def test_append_waits_for_memory_released_by_another_thread() -> None:
    accumulator, _ = make(batch_size=1024, buffer_memory=1024, max_request_size=1024)
    accumulator.append(TP, None, b"x" * 900)
    (batch,) = accumulator.drain([TP])
    outcome: list[object] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(accumulator.append(TP, None, b"y" * 900, max_block_s=30).future)
    )
    waiter.start()
    _until_waiting_for_memory(accumulator)
    accumulator.complete(batch, 0)
    waiter.join(timeout=30)
    assert len(outcome) == 1 and isinstance(outcome[0], Future)


def test_append_gives_up_after_max_block() -> None:
    accumulator, _ = make(batch_size=1024, buffer_memory=1024, max_request_size=1024)
    accumulator.append(TP, None, b"x" * 900)
    with pytest.raises(BufferExhaustedError):
        accumulator.append(TP, None, b"y" * 900, max_block_s=0.01)


def test_record_above_max_request_size_is_refused() -> None:
    accumulator, _ = make(batch_size=1024, max_request_size=2048)
    with pytest.raises(MessageTooLarge, match="exceeds max_request_size=2048") as raised:
        accumulator.append(TP, None, b"x" * 2048)
    assert raised.value.reason is Reason.MESSAGE_TOO_LARGE
    assert accumulator.used_bytes == 0


def test_expired_batches_fail_definitely_if_never_sent_and_indeterminately_if_sent() -> None:
    clock = Clock()
    accumulator, sequences = make(clock, delivery_timeout_ms=1_000, retry_backoff_ms=0)
    sent = accumulator.append(TP, None, b"sent").future
    (batch,) = accumulator.drain([TP])
    accumulator.reenqueue(batch)
    never_sent = accumulator.append(TP1, None, b"never").future
    clock.now += 999
    assert accumulator.expire() == []
    clock.now += 1
    assert len(accumulator.expire()) == 2
    unsent_error = never_sent.exception(timeout=0)
    sent_error = sent.exception(timeout=0)
    assert isinstance(unsent_error, RetriableError) and unsent_error.definite
    assert isinstance(sent_error, RetriableError) and not sent_error.definite
    assert "may have been written" in sent_error.message
    assert sequences is not None and sequences.is_unresolved(TP) and not sequences.is_unresolved(TP1)


def test_drain_respects_max_bytes_but_always_takes_one_batch() -> None:
    accumulator, _ = make()
    for tp in (TP, TP1):
        accumulator.append(tp, None, b"x" * 500)
    assert len(accumulator.drain([TP, TP1], max_bytes=100)) == 1
    assert len(accumulator.drain([TP, TP1], max_bytes=100)) == 1


def _queue_full_batches(accumulator: RecordAccumulator, tp: TopicPartition, count: int) -> list[bytes]:
    """Append ``count`` records of 300 bytes to ``tp`` with ``batch_size=300``: one full batch each."""
    values = [b"%03d" % i + b"x" * 297 for i in range(count)]
    for value in values:
        assert accumulator.append(tp, None, value).new_batch_created
    return values


def test_an_idempotent_partition_sends_up_to_three_queued_batches_per_request_in_sequence_order() -> None:
    accumulator, sequences = make(batch_size=300)
    values = _queue_full_batches(accumulator, TP, 7)
    first = accumulator.drain([TP])
    assert [decode_records(b.payload)[0].value for b in first] == values[:3]
    assert [read_header(b.payload).base_sequence for b in first] == [0, 1, 2]
    second = accumulator.drain([TP])  # two more fill the partition's five in flight: two requests on the wire
    assert [decode_records(b.payload)[0].value for b in second] == values[3:5]
    assert accumulator.drain([TP]) == []
    assert sequences is not None and len(sequences.in_flight(TP)) == 5
    accumulator.complete(first[0], 0)
    (third,) = accumulator.drain([TP])  # one slot came free
    assert read_header(third.payload).base_sequence == 5


def test_every_partition_gets_its_first_batch_before_any_gets_a_follower() -> None:
    accumulator, _ = make(batch_size=300)
    _queue_full_batches(accumulator, TP, 3)
    _queue_full_batches(accumulator, TP1, 3)
    size = accumulator.incomplete()[0].size_in_bytes  # every batch here has the same size
    drained = accumulator.drain([TP1, TP], max_bytes=3 * size)
    assert [b.topic_partition for b in drained] == [TP1, TP, TP1]  # room for three: TP gets its first too
    assert [read_header(b.payload).base_sequence for b in drained] == [0, 0, 1]


def test_a_retry_goes_alone_and_a_batch_open_to_records_is_not_taken_along() -> None:
    clock = Clock()
    accumulator, sequences = make(clock, batch_size=300, retry_backoff_ms=0)
    _queue_full_batches(accumulator, TP, 1)
    (sent,) = accumulator.drain([TP])
    _queue_full_batches(accumulator, TP, 2)
    assert sequences is not None and sequences.can_retry(sent, NotLeader("moved"))
    accumulator.reenqueue(sent)
    assert accumulator.drain([TP]) == [sent]  # the retry, without the two new batches behind it
    accumulator.append(TP, None, b"small")  # a batch with room left
    drained = accumulator.drain([TP])
    assert len(drained) == 2 and all(b.is_full for b in drained)  # the open batch stays for its linger
    assert accumulator.ready().next_ready_check_ms == 5


def test_a_producer_that_is_not_idempotent_sends_one_batch_of_a_partition_per_request() -> None:
    accumulator, _ = make(transactional=None, batch_size=300)
    _queue_full_batches(accumulator, TP, 3)
    assert len(accumulator.drain([TP])) == 1


def test_compressed_payload_decodes_to_the_records() -> None:
    accumulator = RecordAccumulator(compression=Compression.ZSTD, clock=Clock())
    for i in range(50):
        accumulator.append(TP, b"key", b"value-%d" % i)
    (batch,) = accumulator.drain([TP])
    header = validate_batch(batch.payload)
    assert header.compression is Compression.ZSTD and header.timestamp_type is TimestampType.CREATE_TIME
    assert [r.value for r in decode_records(batch.payload)] == [b"value-%d" % i for i in range(50)]


def test_bad_input_and_configuration_are_rejected() -> None:
    accumulator, _ = make()
    with pytest.raises(TypeError, match="value must be bytes or None, not str"):
        accumulator.append(TP, None, "text")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="header name must be str"):
        accumulator.append(TP, None, b"v", headers=[(b"name", b"v")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="timestamp must be >= 0"):
        accumulator.append(TP, None, b"v", timestamp=-5)
    with pytest.raises(ValueError, match="batch_size must be between 1 and 1048576"):
        RecordAccumulator(batch_size=MAX_BATCH_SIZE + 1, max_request_size=4 * MAX_BATCH_SIZE)
    with pytest.raises(ValueError, match="buffer_memory"):
        RecordAccumulator(buffer_memory=1000)


def test_headers_may_be_pairs_or_a_mapping() -> None:
    accumulator, _ = make()
    accumulator.append(TP, None, b"a", headers=[("h", b"1"), ("h", None)])
    accumulator.append(TP, None, b"b", headers={"trace": b"2"})
    (batch,) = accumulator.drain([TP])
    assert [r.headers for r in decode_records(batch.payload)] == [(("h", b"1"), ("h", None)), (("trace", b"2"),)]


def test_user_buffers_are_copied_at_send_time() -> None:
    accumulator, _ = make()
    buffer = bytearray(b"before")
    accumulator.append(TP, None, buffer)  # type: ignore[arg-type]
    buffer[:] = b"after!"
    (batch,) = accumulator.drain([TP])
    assert decode_records(batch.payload)[0].value == b"before"


header_names = st.text(max_size=8)
nullable = st.none() | st.binary(max_size=300)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(nullable, nullable, st.lists(st.tuples(header_names, nullable), max_size=3), st.integers(0, 10**6)),
        min_size=1,
        max_size=30,
    )
)
def test_size_estimate_is_the_encoded_size(records: list[tuple[bytes | None, bytes | None, list, int]]) -> None:
    accumulator = RecordAccumulator(batch_size=MAX_BATCH_SIZE, clock=Clock())
    for key, value, headers, timestamp in records:
        accumulator.append(TP, key, value, headers, timestamp)
    (batch,) = accumulator.drain([TP])
    assert isinstance(batch, ProducerBatch)
    assert len(batch.payload) == batch.size_in_bytes
    assert batch.size_in_bytes == BATCH_OVERHEAD + sum(
        estimate_record_size(
            r.key,
            r.value,
            [(name.encode(), v) for name, v in r.headers],
            offset_delta=i,
            timestamp_delta=(r.timestamp or 0) - records[0][3],
        )
        for i, r in enumerate(batch.records)
    )


@pytest.mark.parametrize("key_len", [0, 1, 200])
def test_size_check_shortcut_refuses_exactly_what_the_exact_size_refuses(key_len: int) -> None:
    limit = 4096
    key = b"k" * key_len if key_len else None
    for value_len in range(limit - key_len - 140, limit - key_len + 4):
        value = b"v" * value_len
        exact = BATCH_OVERHEAD + estimate_record_size(key, value)
        if exact > limit:
            with pytest.raises(MessageTooLarge):
                check_record_size(key, value, (), limit)
        else:
            check_record_size(key, value, (), limit)


# ------------------------------------------------------------------------------------------ the bulk path


def _drain_all(accumulator: RecordAccumulator, tp: TopicPartition) -> list[ProducerBatch]:
    batches = []
    while drained := accumulator.drain([tp]):
        batches.extend(drained)
    return batches


@settings(max_examples=300, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300)), min_size=1, max_size=40
    ),
    keyed=st.booleans(),
    prefix=st.integers(0, 5),
    batch_size=st.integers(BATCH_OVERHEAD + 1, 2_000),
    earlier_ms=st.integers(0, 10**6),
    large=st.booleans(),
)
def test_append_many_encodes_exactly_what_appending_one_by_one_would(
    records: list[tuple[bytes | None, bytes | None]],
    keyed: bool,
    prefix: int,
    batch_size: int,
    earlier_ms: int,
    large: bool,
) -> None:
    """Same batches, same bytes, same memory held: the bulk paths, Python rows and Arrow columns (either offset
    width), are only faster ways to the same result."""
    if not keyed:
        records = [(None, value) for _, value in records]
    prefix = min(prefix, len(records) - 1)
    clock = Clock()
    results = []
    for bulk in ("one by one", "rows", "columns"):
        accumulator, _ = make(clock, transactional=None, batch_size=batch_size)
        clock.now = 1_700_000_000_000
        for key, value in records[:prefix]:  # an open batch with older records, so deltas are not all 0
            accumulator.append(TP, key, value)
        clock.now += earlier_ms
        rest = records[prefix:]
        keys = [key for key, _ in rest] if keyed else None
        values = [value for _, value in rest]
        if bulk == "rows":
            runs, _ = accumulator.append_many(TP, keys, values)
            assert sum(run.count for run in runs) == len(rest)
        elif bulk == "columns":
            kind = pa.large_binary() if large else pa.binary()
            columns = ColumnRecords.from_arrow(pa.array(values, kind), None if keys is None else pa.array(keys, kind))
            [runs], _ = accumulator.append_groups([(TP, columns)])
            assert sum(run.count for run in runs) == len(rest)
        else:
            for key, value in rest:
                accumulator.append(TP, key, value)
        used = accumulator.used_bytes
        batches = _drain_all(accumulator, TP)
        results.append(([batch.payload for batch in batches], used))
        assert used == sum(batch.size_in_bytes for batch in batches)
    assert results[0] == results[1] == results[2]


def test_append_many_fills_the_open_batch_then_opens_new_ones_and_wakes_the_sender() -> None:
    accumulator, _ = make(transactional=None, batch_size=BATCH_OVERHEAD + 100)
    first = accumulator.append(TP, None, b"a" * 40)
    assert first.new_batch_created
    runs, wake = accumulator.append_many(TP, None, [b"b" * 40] * 5)
    assert wake
    assert [(run.first_index, run.count) for run in runs] == [(1, 1), (0, 2), (0, 2)]
    assert [batch.record_count for batch in _drain_all(accumulator, TP)] == [2, 2, 2]


def test_append_many_into_a_batch_without_room_starts_a_new_one() -> None:
    accumulator, _ = make(transactional=None, batch_size=BATCH_OVERHEAD + 100)
    accumulator.append(TP, None, b"a" * 80)  # open, not full, but the next 40-byte record does not fit
    runs, _ = accumulator.append_many(TP, None, [b"b" * 40])
    assert [(run.first_index, run.count) for run in runs] == [(0, 1)]
    assert [batch.record_count for batch in _drain_all(accumulator, TP)] == [1, 1]


def test_append_many_adds_nothing_when_memory_for_all_records_is_missing() -> None:
    accumulator, _ = make(transactional=None, batch_size=1024, buffer_memory=4096, max_request_size=1024)
    accumulator.append(TP, None, b"x" * 900)
    held = accumulator.used_bytes
    with pytest.raises(BufferExhaustedError, match="buffer_memory=4096 bytes is full"):
        accumulator.append_many(TP1, None, [b"y" * 900] * 4, max_block_s=0.01)
    assert accumulator.used_bytes == held
    assert accumulator.drain([TP1]) == []
    with pytest.raises(BufferExhaustedError, match="send them in smaller groups"):
        accumulator.append_many(TP1, None, [b"y" * 900] * 5)  # could never fit, so no wait either
    runs, _ = accumulator.append_many(TP1, None, [b"y" * 900] * 3)
    assert sum(run.count for run in runs) == 3
    assert accumulator.used_bytes == held + sum(batch.size_in_bytes for batch in _drain_all(accumulator, TP1))


def test_append_many_waits_for_memory_released_by_another_thread() -> None:
    accumulator, _ = make(transactional=None, batch_size=1024, buffer_memory=2048, max_request_size=1024)
    accumulator.append(TP, None, b"x" * 900)
    (batch,) = accumulator.drain([TP])
    outcome: list[object] = []
    waiter = threading.Thread(
        target=lambda: outcome.append(accumulator.append_many(TP, None, [b"y" * 400] * 3, max_block_s=30))
    )
    waiter.start()
    _until_waiting_for_memory(accumulator)
    assert accumulator.drain([TP]) == []  # nothing was added while it waits
    accumulator.complete(batch, 0)
    waiter.join(timeout=30)
    assert len(outcome) == 1
    assert sum(b.record_count for b in _drain_all(accumulator, TP)) == 3


@pytest.mark.parametrize(("spare", "per_batch"), [(0, 2), (-1, 1)])
def test_append_many_fills_a_batch_to_exactly_batch_size_and_not_one_byte_more(spare: int, per_batch: int) -> None:
    record = estimate_record_size(None, b"v" * 10)
    accumulator, _ = make(transactional=None, batch_size=BATCH_OVERHEAD + 2 * record + spare)
    accumulator.append_many(TP, None, [b"v" * 10] * 4)
    batches = _drain_all(accumulator, TP)
    assert [batch.record_count for batch in batches] == [per_batch] * (4 // per_batch)
    assert all(batch.size_in_bytes <= BATCH_OVERHEAD + 2 * record + spare for batch in batches)
