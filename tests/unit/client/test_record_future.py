"""RecordFuture and gather_runs: per-record views of one future per batch behave like real futures."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading

import pytest

from oncelog.client.accumulator import RecordAccumulator
from oncelog.client.futures import gather_runs
from oncelog.client.records import RecordMetadata, TopicPartition
from oncelog.errors import UnknownTopicOrPartition
from oncelog.records import BATCH_OVERHEAD

TP = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


def accumulator() -> RecordAccumulator:
    return RecordAccumulator(batch_size=1024, linger_ms=0, clock=lambda: 1_000)


def test_records_of_one_batch_resolve_from_the_batch_offset() -> None:
    acc = accumulator()
    futures = [acc.append(TP, None, bytes([i]), timestamp=1_000 + i).future for i in range(3)]
    (batch,) = acc.drain([TP])
    assert not any(f.done() for f in futures)
    acc.complete(batch, 40)
    assert [f.result(timeout=0) for f in futures] == [RecordMetadata("orders", 0, 40 + i, 1_000 + i) for i in range(3)]
    assert all(isinstance(f, concurrent.futures.Future) and f.done() and not f.running() for f in futures)


def test_record_future_raises_the_batch_error() -> None:
    acc = accumulator()
    future = acc.append(TP, None, b"a").future
    (batch,) = acc.drain([TP])
    error = UnknownTopicOrPartition("moved")
    acc.fail(batch, error)
    assert future.exception(timeout=0) is error
    with pytest.raises(UnknownTopicOrPartition):
        future.result(timeout=0)


def test_result_times_out_while_the_batch_is_unanswered() -> None:
    future = accumulator().append(TP, None, b"a").future
    with pytest.raises(concurrent.futures.TimeoutError):
        future.result(timeout=0.01)


def test_callbacks_receive_the_record_future_itself() -> None:
    acc = accumulator()
    future = acc.append(TP, None, b"a").future
    seen: list[concurrent.futures.Future[RecordMetadata]] = []
    future.add_done_callback(seen.append)
    (batch,) = acc.drain([TP])
    acc.complete(batch, 7)
    future.add_done_callback(seen.append)  # already done: runs at once
    assert seen == [future, future]


def test_record_future_cannot_be_settled_or_cancelled_by_the_user() -> None:
    future = accumulator().append(TP, None, b"a").future
    assert not future.cancel() and not future.cancelled()
    with pytest.raises(RuntimeError):
        future.set_result(None)


def test_concurrent_futures_wait_sees_record_futures_complete() -> None:
    acc = accumulator()
    first = acc.append(TP, None, b"a").future
    second = acc.append(TP1, None, b"b").future
    batches = {b.topic_partition: b for b in acc.drain([TP, TP1])}
    timer = threading.Timer(0.05, lambda: acc.complete(batches[TP1], 3))
    timer.start()
    done, not_done = concurrent.futures.wait([first, second], timeout=5, return_when=concurrent.futures.FIRST_COMPLETED)
    timer.join()
    assert done == {second} and not_done == {first}
    acc.complete(batches[TP], 9)
    done, not_done = concurrent.futures.wait([first, second], timeout=5)
    assert done == {first, second} and not not_done
    assert list(concurrent.futures.as_completed([first], timeout=5)) == [first]
    assert first.result(timeout=0).offset == 9


async def test_asyncio_wrap_future_awaits_a_record() -> None:
    acc = accumulator()
    future = acc.append(TP, None, b"a").future
    (batch,) = acc.drain([TP])
    threading.Timer(0.02, lambda: acc.complete(batch, 5)).start()
    assert (await asyncio.wrap_future(future)).offset == 5


def test_gather_runs_keeps_order_across_partitions() -> None:
    acc = accumulator()
    # records 0 and 2 went to TP, 1 and 3 to TP1 (as a keyed send_batch splits them)
    tp_runs, _ = acc.append_many(TP, None, [b"r0", b"r2"])
    tp1_runs, _ = acc.append_many(TP1, None, [b"r1", b"r3"])
    combined = gather_runs([([0, 2], tp_runs), ([1, 3], tp1_runs)], 4)
    batches = {b.topic_partition: b for b in acc.drain([TP, TP1])}
    acc.complete(batches[TP1], 100)
    assert not combined.done()
    acc.complete(batches[TP], 0)
    metadata = combined.result(timeout=0)
    assert [(m.partition, m.offset) for m in metadata] == [(0, 0), (1, 100), (0, 1), (1, 101)]
    assert len(metadata) == 4 and metadata[-1].offset == 101 and metadata == list(metadata)


def test_gather_runs_of_one_partition_spanning_batches() -> None:
    acc = RecordAccumulator(batch_size=BATCH_OVERHEAD + 3 * 20, linger_ms=0, clock=lambda: 1_000)
    runs, _ = acc.append_many(TP, None, [bytes([i]) * 10 for i in range(7)])
    assert len(runs) == 3 and [run.count for run in runs] == [3, 3, 1]
    combined = gather_runs([(None, runs)], 7)
    for base, batch in zip((10, 20, 30), [*acc.drain([TP]), *acc.drain([TP]), *acc.drain([TP])], strict=True):
        acc.complete(batch, base)
    assert [m.offset for m in combined.result(timeout=0)] == [10, 11, 12, 20, 21, 22, 30]


def test_gather_runs_fails_with_the_first_failed_batch() -> None:
    acc = accumulator()
    runs_a, _ = acc.append_many(TP, None, [b"a"])
    runs_b, _ = acc.append_many(TP1, None, [b"b"])
    combined = gather_runs([([0], runs_a), ([1], runs_b)], 2)
    batches = {b.topic_partition: b for b in acc.drain([TP, TP1])}
    error = UnknownTopicOrPartition("moved")
    acc.fail(batches[TP1], error)
    assert combined.exception(timeout=0) is error
    acc.complete(batches[TP], 0)  # a later success does not overwrite the failure
    assert combined.exception(timeout=0) is error


def test_append_many_is_all_or_nothing_on_bad_input() -> None:
    acc = accumulator()
    with pytest.raises(TypeError):
        acc.append_many(TP, None, [b"ok", "not bytes"])  # type: ignore[list-item]
    assert acc.incomplete() == []
    runs, wake = acc.append_many(TP, [b"k1", None], [b"a", b"b"])
    assert wake and [run.count for run in runs] == [2]
    (batch,) = acc.drain([TP])
    assert [(r.key, r.value) for r in batch.records] == [(b"k1", b"a"), (None, b"b")]
