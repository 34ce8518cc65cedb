"""oncelog.aio.Consumer against the local cluster: reading and committing, group membership with coroutine
callbacks, and an exactly-once copy with oncelog.aio.Producer."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import pytest

from oncelog import aio
from oncelog.client import AdminClient, NewTopic, Producer, TopicPartition
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all

pytestmark = pytest.mark.timeout(180)


def new_topic(bootstrap: str, partitions: int, values: list[bytes]) -> str:
    """A topic holding ``values``, spread round-robin over its partitions."""
    name = f"aioc-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    if values:
        with Producer(bootstrap) as producer:
            for i, value in enumerate(values):
                producer.send(name, value, partition=i % partitions)
    return name


async def until(condition: object, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


async def test_assign_poll_commit_and_committed(cluster: LocalCluster) -> None:
    values = [f"v{i}".encode() for i in range(20)]
    topic = new_topic(cluster.bootstrap, 2, values)
    partitions = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    async with aio.Consumer(cluster.bootstrap, group_id=f"g-{topic}") as consumer:
        await consumer.assign(partitions)
        assert consumer.assignment() == set(partitions)
        read: list[bytes | None] = []

        async def all_read() -> bool:
            read.extend(r.value for r in await consumer.poll(timeout_ms=200))
            return len(read) >= len(values)

        await until(all_read, "every record")
        assert sorted(read) == sorted(values)  # type: ignore[type-var]
        assert await consumer.end_offsets(partitions) == {partitions[0]: 10, partitions[1]: 10}
        await consumer.commit()
        committed = await consumer.committed(partitions)
        assert {tp: om.offset for tp, om in committed.items() if om} == {partitions[0]: 10, partitions[1]: 10}


class AsyncListener:
    """Coroutine callbacks; the revoke callback commits through the consumer it belongs to."""

    def __init__(self) -> None:
        self.consumer: aio.Consumer | None = None
        self.events: list[tuple[str, set[TopicPartition]]] = []
        self.loop_thread: set[int] = set()

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.loop_thread.add(threading.get_ident())
        assert self.consumer is not None
        await self.consumer.commit()  # awaiting the consumer's own call inside its callback must not deadlock
        self.events.append(("revoked", revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:  # a plain function works too
        self.events.append(("lost", lost))


async def test_members_split_the_topic_with_coroutine_callbacks_and_close_hands_partitions_back(
    cluster: LocalCluster,
) -> None:
    topic = new_topic(cluster.bootstrap, 4, [f"x{i}".encode() for i in range(40)])
    group, wanted = f"g-{topic}", {TopicPartition(topic, p) for p in range(4)}
    listeners = [AsyncListener(), AsyncListener()]
    first = aio.Consumer(cluster.bootstrap, group_id=group)
    second = aio.Consumer(cluster.bootstrap, group_id=group)
    listeners[0].consumer, listeners[1].consumer = first, second
    try:
        await first.subscribe([topic], listener=listeners[0])
        assert first.assignment() == wanted, "alone in the group, it owns every partition"
        assert listeners[0].events == [("assigned", wanted)]
        # positions resolved before the second member joins: the revoke callback's commit has one for every
        # partition it gives up (a position a poll had not resolved yet, under load, would not be committed)
        assert [await first.position(tp) for tp in sorted(wanted)] == [0] * 4
        await second.subscribe([topic], listener=listeners[1])

        async def split() -> bool:
            await asyncio.gather(first.poll(timeout_ms=50), second.poll(timeout_ms=50))
            a, b = first.assignment(), second.assignment()
            return not (a & b) and a | b == wanted and len(a) == len(b) == 2

        await until(split, "a two-way split")
        revoked = [parts for kind, parts in listeners[0].events if kind == "revoked"]
        assert revoked and set().union(*revoked) == wanted - first.assignment()
        assert listeners[0].loop_thread == {threading.get_ident()}, "callbacks run on the application's loop"
        committed = await first.committed(list(wanted))
        assert all(committed[tp] is not None for tp in set().union(*revoked)), "committed in on_partitions_revoked"
        metadata = first.group_metadata()
        assert metadata.group_id == group and metadata.member_id and metadata.generation_id > 0

        await second.close()  # leaves at once: the first member gets everything back without a session timeout
        left = time.monotonic()

        async def all_back() -> bool:
            await first.poll(timeout_ms=50)
            return first.assignment() == wanted

        await until(all_back, "the partitions back with the first member")
        assert time.monotonic() - left < 4.0, "a closed member does not wait out the 4 s session timeout"
    finally:
        await first.close()
        await second.close()


async def test_a_cancelled_poll_loses_no_record(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 1, [])
    tp = TopicPartition(topic, 0)
    async with aio.Consumer(cluster.bootstrap, group_id=f"g-{topic}", fetch_max_wait_ms=100) as consumer:
        await consumer.assign([tp])
        assert await consumer.poll(timeout_ms=100) == []
        waiting = asyncio.create_task(consumer.poll(timeout_ms=10_000))

        async def polling_on_the_worker() -> bool:
            await asyncio.sleep(0.01)
            running = consumer._unclaimed_poll  # the synchronous poll the task started
            return running is not None and running.running()

        await until(polling_on_the_worker, "the poll to wait for records")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        # the record arrives while the cancelled poll still waits: that poll takes it and moves the position on
        with Producer(cluster.bootstrap) as producer:
            producer.send(topic, b"late", partition=0)
        records = await consumer.poll(timeout_ms=10_000)
        assert [r.value for r in records] == [b"late"], "the cancelled poll's records come with the next poll"
        assert await consumer.position(tp) == 1


async def test_transactional_copy_with_the_async_producer_is_exactly_once(cluster: LocalCluster) -> None:
    values = [f"in-{i}".encode() for i in range(60)]
    source = new_topic(cluster.bootstrap, 3, values)
    sink = new_topic(cluster.bootstrap, 2, [])
    group = f"copy-{source}"
    async with (
        aio.Consumer(cluster.bootstrap, group_id=group, isolation_level="read_committed") as consumer,
        aio.Producer(cluster.bootstrap, transactional_id=f"copier-{source}") as producer,
    ):
        await producer.init_transactions()
        await consumer.subscribe([source])
        copied = 0
        aborted_once = False
        deadline = time.monotonic() + 90
        while copied < len(values):
            assert time.monotonic() < deadline, f"copied {copied} of {len(values)}"
            records = await consumer.poll(timeout_ms=200, max_records=7)
            if not records:
                continue
            producer.begin_transaction()
            await asyncio.gather(*(producer.send(sink, r.value) for r in records))
            positions = {tp: await consumer.position(tp) for tp in consumer.assignment()}
            await producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            if not aborted_once:  # one aborted attempt: its output stays invisible and its input is read again
                aborted_once = True
                await producer.abort_transaction()
                await consumer.rewind_to_committed()
                continue
            await producer.commit_transaction()
            copied += len(records)
    output = sorted(r.value for r in read_all(cluster.bootstrap, sink))  # type: ignore[type-var]
    assert output == sorted(values), "every input exactly once, nothing of the aborted attempt"
    with AdminClient(cluster.bootstrap) as admin:
        offsets = admin.list_group_offsets(group)
    assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 20, 1: 20, 2: 20}
