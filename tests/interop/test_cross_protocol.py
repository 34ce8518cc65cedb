"""What is written over gRPC is read by librdkafka through the kafka-gateway byte for byte, and the reverse:
one log, two protocols."""

from __future__ import annotations

import time
import uuid

import pytest

from oncelog.client import AdminClient, Consumer, NewTopic, Producer
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import KafkaGatewayProcess
from oncelog.vocabulary import TopicPartition

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

confluent_kafka = pytest.importorskip("confluent_kafka")

RECORDS = [
    (b"k0", b"plain", [("h", b"1")], 1_700_000_000_000),
    (None, b"\x00\xff binary \x80", [], 1_700_000_000_001),
    (b"k2", None, [("a", b"x"), ("b", None)], 1_700_000_000_002),  # a tombstone with two headers
    (b"k3", "unicode \u00e9\u4e2d".encode(), [("h", b"")], 1_700_000_000_003),
]


def _topic(cluster: LocalCluster) -> str:
    name = f"cross-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap=cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=1)])
    return name


def test_records_written_over_grpc_are_read_by_librdkafka_byte_for_byte(
    oncelog_cluster: LocalCluster, kafka_gateway: KafkaGatewayProcess
) -> None:
    topic = _topic(oncelog_cluster)
    with Producer(bootstrap=oncelog_cluster.bootstrap, transactional_id=f"grpc-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for key, value, headers, timestamp in RECORDS:
            producer.send(topic, value, key=key, headers=headers, partition=0, timestamp_ms=timestamp)
        producer.commit_transaction(wait_for_completion=True)
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": kafka_gateway.address, "group.id": "cross", "isolation.level": "read_committed",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen = []
    deadline = time.monotonic() + 60
    try:
        while len(seen) < len(RECORDS) and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            seen.append((message.key(), message.value(), message.headers() or [], message.timestamp()[1]))
    finally:
        consumer.close()
    assert seen == RECORDS


def test_records_written_by_librdkafka_through_the_gateway_are_read_over_grpc_byte_for_byte(
    oncelog_cluster: LocalCluster, kafka_gateway: KafkaGatewayProcess
) -> None:
    topic = _topic(oncelog_cluster)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": kafka_gateway.address, "transactional.id": f"rd-{uuid.uuid4().hex[:6]}"}
    )
    producer.init_transactions(60)
    for round_ in range(2):  # the second transaction runs on the coordinator's bumped epoch
        producer.begin_transaction()
        for key, value, headers, timestamp in RECORDS:
            producer.produce(topic, value, key=key, headers=headers, partition=0, timestamp=timestamp + round_)
        producer.commit_transaction(60)
    with Consumer(bootstrap=oncelog_cluster.bootstrap, group_id=None) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek(TopicPartition(topic, 0), 0)
        seen = []
        deadline = time.monotonic() + 60
        while len(seen) < 2 * len(RECORDS) and time.monotonic() < deadline:
            for record in consumer.poll(timeout_ms=1000):
                seen.append((record.key, record.value, [tuple(h) for h in record.headers], record.timestamp))
    expected = [(k, v, h, t + round_) for round_ in range(2) for k, v, h, t in RECORDS]
    assert seen == expected
