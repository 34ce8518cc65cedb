"""kafka-python (a pure-Python client with its own protocol versions) against Apache Kafka 4.4 and the gateway:
topic creation, a transactional produce with an abort, and read_committed reads with the same offsets."""

from __future__ import annotations

import uuid

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

kafka = pytest.importorskip("kafka")


def test_kafka_python_commits_and_aborts_and_reads_committed_alike(kafka_bootstrap: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = f"kpy-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, transactional_id=f"kpy-{uuid.uuid4().hex[:8]}")
    producer.init_transactions()
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(2):
            producer.send(topic, f"{outcome}-{i}".encode(), partition=0).get(timeout=60)
        if outcome == "commit":
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    producer.close()
    seen = {}
    for isolation, count in (("read_committed", 4), ("read_uncommitted", 6)):
        consumer = KafkaConsumer(
            bootstrap_servers=kafka_bootstrap, isolation_level=isolation, enable_auto_commit=False,
            consumer_timeout_ms=30_000,
        )  # fmt: skip
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        records = []
        for record in consumer:
            records.append((record.offset, record.value))
            if len(records) == count:
                break
        consumer.close()
        seen[isolation] = records
    assert seen["read_committed"] == [(0, b"commit-0"), (1, b"commit-1"), (6, b"commit-0"), (7, b"commit-1")]
    assert [o for o, _ in seen["read_uncommitted"]] == [0, 1, 3, 4, 6, 7]
