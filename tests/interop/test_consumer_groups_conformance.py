"""Classic consumer groups (librdkafka's default protocol) against Apache Kafka 4.4 and against the gateway, where
JoinGroup/SyncGroup/Heartbeat/LeaveGroup run on oncelog's KIP-848 coordinator: the same records reach the group
once, split between its members, and committed offsets carry over to the next member."""

from __future__ import annotations

import time
import uuid

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _topic_with_records(bootstrap: str, partitions: int, records: int) -> str:
    name = f"groups-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(name, f"v{i}".encode(), partition=i % partitions)
    assert producer.flush(60) == 0
    return name


def _consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
         "enable.auto.commit": False, "isolation.level": "read_committed", "session.timeout.ms": 10_000,
         "heartbeat.interval.ms": 500}
    )  # fmt: skip


def _poll_until(consumers: list[Consumer], count: int, timeout_s: float = 90.0) -> list[list[bytes]]:
    """Poll every consumer in turn until ``count`` records arrived in all; the values each one read."""
    seen: list[list[bytes]] = [[] for _ in consumers]
    deadline = time.monotonic() + timeout_s
    while sum(map(len, seen)) < count and time.monotonic() < deadline:
        for i, consumer in enumerate(consumers):
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                seen[i].append(message.value())
    return seen


def test_a_subscribed_consumer_reads_everything_and_the_next_member_resumes_from_its_commit(
    kafka_bootstrap: str,
) -> None:
    topic = _topic_with_records(kafka_bootstrap, partitions=3, records=30)
    group = f"g-{uuid.uuid4().hex[:6]}"
    first = _consumer(kafka_bootstrap, group)
    first.subscribe([topic])
    (values,) = _poll_until([first], 30)
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(30))
    first.commit(asynchronous=False)
    first.close()  # LeaveGroup
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(30, 36):
        producer.produce(topic, f"v{i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0
    second = _consumer(kafka_bootstrap, group)
    second.subscribe([topic])
    (values,) = _poll_until([second], 6)
    extra = second.poll(1.0)
    second.close()
    assert sorted(values) == sorted(f"v{i}".encode() for i in range(30, 36))
    assert extra is None or extra.error() is not None, "a committed record was read again"


def test_two_members_of_a_group_split_the_partitions_and_read_each_record_once(kafka_bootstrap: str) -> None:
    topic = _topic_with_records(kafka_bootstrap, partitions=4, records=40)
    group = f"g-{uuid.uuid4().hex[:6]}"
    members = [_consumer(kafka_bootstrap, group) for _ in range(2)]
    for consumer in members:
        consumer.subscribe([topic])
    # both members must hold partitions before the reads are counted: poll until the group has settled
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        for consumer in members:
            consumer.poll(0.1)
        assignments = [{tp.partition for tp in consumer.assignment()} for consumer in members]
        if all(assignments) and set().union(*assignments) == {0, 1, 2, 3} and not (assignments[0] & assignments[1]):
            break
    assert all(assignments) and not (assignments[0] & assignments[1]), assignments
    # read from the start of every partition, whoever polled what while settling. librdkafka refuses a seek
    # (_STATE) until the new partition's fetcher has started, so poll until each seek is accepted; those polls may
    # hand out records, so a second pass rewinds every partition again once all of them accept
    for _ in range(2):
        for consumer in members:
            for tp in consumer.assignment():
                tp.offset = confluent_kafka.OFFSET_BEGINNING
                while True:
                    try:
                        consumer.seek(tp)
                        break
                    except confluent_kafka.KafkaException as err:
                        if err.args[0].code() != confluent_kafka.KafkaError._STATE:
                            raise
                        assert time.monotonic() < deadline, f"{tp} never accepted a seek"
                        consumer.poll(0.05)
    seen = _poll_until(members, 40)
    for consumer in members:
        consumer.close()
    assert sorted(seen[0] + seen[1]) == sorted(f"v{i}".encode() for i in range(40))
    assert seen[0] and seen[1], "each member read its own partitions"


def test_group_tools_list_and_describe_a_subscribed_member(kafka_bootstrap: str) -> None:
    topic = _topic_with_records(kafka_bootstrap, partitions=2, records=4)
    group = f"g-{uuid.uuid4().hex[:6]}"
    consumer = _consumer(kafka_bootstrap, group)
    consumer.subscribe([topic])
    try:
        (values,) = _poll_until([consumer], 4)
        assert len(values) == 4
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        listed = admin.list_consumer_groups().result(60)
        assert group in {g.group_id for g in listed.valid}
        description = admin.describe_consumer_groups([group])[group].result(60)
        (member,) = description.members
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {(topic, 0), (topic, 1)}
        assert description.state.name == "STABLE"
    finally:
        consumer.close()
