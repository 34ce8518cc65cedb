"""oncelog.aio.Producer against the local cluster: ordered acknowledgements, bulk sends, transactions, close."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections import Counter

import pytest

from oncelog import aio
from oncelog.client import AdminClient, Consumer, IllegalStateError, NewTopic, TopicPartition, TransactionState
from oncelog.client.partitioner import partition_for_key
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all

pytestmark = pytest.mark.timeout(120)


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"aio-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def committed_values(bootstrap: str, topic: str, expected: int) -> list[bytes | None]:
    tp = TopicPartition(topic, 0)
    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes | None] = []
        while consumer.position(tp) < end or len(values) < expected:
            values.extend(r.value for r in consumer.poll(timeout_ms=500))
            end = consumer.end_offsets([tp])[tp]
        return values


async def test_concurrent_sends_are_acknowledged_in_call_order(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    async with aio.Producer(cluster.bootstrap, linger_ms=2) as producer:
        first = await producer.send(topic, b"first")
        results = await asyncio.gather(*(producer.send(topic, f"v{i}".encode()) for i in range(200)))
    assert first.offset == 0
    assert [m.offset for m in results] == list(range(1, 201))
    assert committed_values(cluster.bootstrap, topic, 201) == [b"first"] + [f"v{i}".encode() for i in range(200)]


async def test_send_batch_returns_one_metadata_per_value_in_order(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, partitions=3)
    keys = [f"k{i}".encode() for i in range(30)]
    async with aio.Producer(cluster.bootstrap) as producer:
        metadata = await producer.send_batch(topic, [b"v" + k for k in keys], keys=keys)
    assert len(metadata) == 30
    by_partition: dict[int, list[int]] = {}
    for m in metadata:
        by_partition.setdefault(m.partition, []).append(m.offset)
    # within each partition the records kept the order of the values
    assert all(offsets == sorted(offsets) for offsets in by_partition.values())
    assert sum(len(o) for o in by_partition.values()) == 30


async def test_send_arrow_awaits_every_records_metadata_in_the_order_of_the_calls(cluster: LocalCluster) -> None:
    pa = pytest.importorskip("pyarrow")
    topic = new_topic(cluster.bootstrap)
    async with aio.Producer(cluster.bootstrap, batch_size=1024) as producer:
        columns, single = await asyncio.gather(
            producer.send_arrow(topic, pa.array([f"a{i}" for i in range(300)])),
            producer.send(topic, b"after"),
        )
    assert [m.offset for m in columns] == list(range(300))
    assert single.offset == 300
    expected = [f"a{i}".encode() for i in range(300)] + [b"after"]
    assert committed_values(cluster.bootstrap, topic, 301) == expected


async def test_committed_transaction_is_visible_and_aborted_one_is_hidden(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    async with aio.Producer(cluster.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await asyncio.gather(*(producer.send(topic, f"c{i}".encode()) for i in range(5)))
        await producer.commit_transaction()
        producer.begin_transaction()
        await producer.send(topic, b"aborted")
        await producer.abort_transaction()
        producer.begin_transaction()
        await producer.send_batch(topic, [b"c5", b"c6"])
        await producer.commit_transaction()
        assert producer.transaction_state is TransactionState.READY
    assert committed_values(cluster.bootstrap, topic, 7) == [f"c{i}".encode() for i in range(7)]


async def test_commit_does_not_block_the_event_loop(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    async with aio.Producer(cluster.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}") as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        producer_task = asyncio.ensure_future(producer.send(topic, b"x"))
        ticking = asyncio.ensure_future(ticker())
        await producer_task
        await producer.commit_transaction()
        ticking.cancel()
    # a blocking commit would have kept the ticker from running while the coordinator answered
    assert ticks > 10


async def test_closed_producer_refuses_sends(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    producer = aio.Producer(cluster.bootstrap)
    await producer.send(topic, b"x")
    await producer.close()
    await producer.close()  # idempotent
    with pytest.raises(IllegalStateError, match="closed"):
        await producer.send(topic, b"y")


# Buffer-pressure set-up: one 64 KiB batch can hold the pre-fill, so it lingers (unsent, holding memory) until
# a send finds the buffer full and makes the sender hurry; the next appends then wait for that memory.
_TIGHT = {"buffer_memory": 65536, "max_request_size": 65536, "batch_size": 65536, "linger_ms": 10_000}


def keys_per_partition(partitions: int, per_partition: int) -> list[bytes]:
    """``per_partition`` keys for each partition in turn (partition 0's first), by the default partitioner."""
    chosen: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in itertools.count():
        key = f"key-{i}".encode()
        bucket = chosen[partition_for_key(key, partitions)]
        if len(bucket) < per_partition:
            bucket.append(key)
        if all(len(b) == per_partition for b in chosen.values()):
            return [key for p in range(partitions) for key in chosen[p]]
    raise AssertionError("unreachable")


async def test_send_batch_under_buffer_pressure_writes_each_record_once(cluster: LocalCluster) -> None:
    """A bulk send across partitions that does not fit yet waits for memory and then appends each record once."""
    topic = new_topic(cluster.bootstrap, partitions=4)
    keys = keys_per_partition(4, 6)
    values = [b"v-" + key + b"-" + b"x" * 1000 for key in keys]
    async with aio.Producer(cluster.bootstrap, **_TIGHT) as producer:
        await producer.partitions_for(topic)
        prefill = asyncio.ensure_future(producer.send_batch(topic, [b"p" * 1000] * 40, partition=0))
        bulk = asyncio.ensure_future(producer.send_batch(topic, values, keys=keys))
        await asyncio.sleep(0)  # both tasks take their first step: the pre-fill appends, the bulk send tries
        # the fault landed: the bulk send did not fit next to the lingering pre-fill, so it had to wait
        assert producer._core._accumulator.used_bytes < 40 * 1000 + sum(map(len, values))
        await asyncio.gather(prefill, bulk)
    written = Counter(record.value for record in read_all(cluster.bootstrap, topic, "read_uncommitted"))
    assert {value: written[value] for value in values} == dict.fromkeys(values, 1)
    assert sum(written.values()) == 40 + len(values)


async def test_sends_to_a_new_topic_started_together_are_written_in_call_order(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    async with aio.Producer(cluster.bootstrap, linger_ms=2) as producer:
        results = await asyncio.gather(*(producer.send(topic, f"v{i}".encode()) for i in range(100)))
    assert [m.offset for m in results] == list(range(100))
    assert committed_values(cluster.bootstrap, topic, 100) == [f"v{i}".encode() for i in range(100)]


async def test_send_waiting_for_memory_is_not_overtaken_by_a_later_small_send(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    async with aio.Producer(cluster.bootstrap, **_TIGHT) as producer:
        await producer.partitions_for(topic)
        prefill = asyncio.ensure_future(producer.send_batch(topic, [b"p" * 1000] * 40, partition=0))
        large = asyncio.ensure_future(producer.send(topic, b"L" * 40_000, partition=0))
        small = asyncio.ensure_future(producer.send(topic, b"small", partition=0))
        await asyncio.sleep(0)  # the three tasks take their first step
        # the fault landed: the large record did not fit next to the lingering pre-fill
        assert producer._core._accumulator.used_bytes < 40 * 1000 + 40_000
        await asyncio.gather(prefill, large, small)
    assert large.result().offset == 40
    assert small.result().offset == 41
