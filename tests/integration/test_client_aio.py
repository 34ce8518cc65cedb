"""oncelog.aio.Producer against the local cluster: ordered acknowledgements, bulk sends, transactions, close."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from oncelog import aio
from oncelog.client import AdminClient, Consumer, IllegalStateError, NewTopic, TopicPartition, TransactionState
from oncelog.testing import LocalCluster

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
