"""aiokafka (asyncio; its own hand-written protocol structs, transactional APIs at v0) against Apache Kafka 4.4 and
the kafka-gateway: a transactional producer commits, aborts and commits, and read_committed and read_uncommitted
consumers see the same offsets."""

from __future__ import annotations

import asyncio
import uuid

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

aiokafka = pytest.importorskip("aiokafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


async def _scenario(bootstrap: str, topic: str) -> dict[str, list[tuple[int, bytes]]]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}")
    await producer.start()
    try:
        for outcome in ("commit", "abort", "commit"):
            await producer.begin_transaction()
            for i in range(2):
                await producer.send_and_wait(topic, f"{outcome}-{i}".encode(), partition=0)
            if outcome == "commit":
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()
    seen: dict[str, list[tuple[int, bytes]]] = {}
    for isolation, count in (("read_committed", 4), ("read_uncommitted", 6)):
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            records: list[tuple[int, bytes]] = []
            while len(records) < count:
                message = await asyncio.wait_for(consumer.getone(), timeout=60)
                records.append((message.offset, message.value))
            seen[isolation] = records
        finally:
            await consumer.stop()
    return seen


def test_aiokafka_commits_and_aborts_and_reads_committed_alike(kafka_bootstrap: str) -> None:
    topic = f"aio-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    seen = asyncio.run(_scenario(kafka_bootstrap, topic))
    assert seen["read_committed"] == [(0, b"commit-0"), (1, b"commit-1"), (6, b"commit-0"), (7, b"commit-1")]
    assert [o for o, _ in seen["read_uncommitted"]] == [0, 1, 3, 4, 6, 7]
