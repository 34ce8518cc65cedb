"""The reference broker itself: scripts/kafka and ``oncelog.testing.kafka`` give a working Apache Kafka."""

from __future__ import annotations

import pytest

from oncelog.testing.kafka import ApacheKafka

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def test_the_reference_broker_serves_an_idempotent_produce_and_a_read_committed_read(apache_kafka: ApacheKafka) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": apache_kafka.bootstrap})
    admin.create_topics([NewTopic("reference-smoke", 1, 1)])["reference-smoke"].result(60)
    producer = Producer({"bootstrap.servers": apache_kafka.bootstrap, "enable.idempotence": True})
    for i in range(3):
        producer.produce("reference-smoke", f"v{i}".encode())
    assert producer.flush(60) == 0
    consumer = Consumer(
        {"bootstrap.servers": apache_kafka.bootstrap, "group.id": "g", "isolation.level": "read_committed",
         "enable.auto.commit": False}
    )  # fmt: skip
    consumer.assign([TopicPartition("reference-smoke", 0, 0)])
    values: list[bytes] = []
    while len(values) < 3:
        message = consumer.poll(30)
        assert message is not None, f"only {values} arrived"
        assert message.error() is None, message.error()
        values.append(message.value())
    consumer.close()
    assert values == [b"v0", b"v1", b"v2"]
