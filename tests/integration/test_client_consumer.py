"""Consumer against the local cluster: positions, committed offsets, isolation and bad input."""

from __future__ import annotations

import time
import uuid

import pytest

from oncelog.client import (
    AdminClient,
    Consumer,
    ConsumerRecord,
    IllegalStateError,
    NewTopic,
    OffsetAndMetadata,
    Producer,
    TopicPartition,
)
from oncelog.errors import OffsetOutOfRange, UnknownTopicOrPartition
from oncelog.records import TimestampType
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"consumer-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def produce(bootstrap: str, topic: str, count: int, partitions: int = 1) -> None:
    with Producer(bootstrap) as producer:
        for i in range(count):
            producer.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % partitions)


def poll_until(consumer: Consumer, count: int, timeout_s: float = 30) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count:
        assert time.monotonic() < deadline, f"{len(records)} of {count} records arrived"
        records.extend(consumer.poll(timeout_ms=200, max_records=count - len(records)))
    return records


def test_poll_returns_records_with_all_their_fields(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    with Producer(cluster.bootstrap) as producer:
        producer.send(topic, b"value", key=b"key", headers=[("trace", b"abc"), ("empty", None)], timestamp_ms=1234)
        producer.send(topic, None, key=b"tombstone")
    with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        first, second = poll_until(consumer, 2)
    assert (first.topic, first.partition, first.offset, first.key, first.value) == (topic, 0, 0, b"key", b"value")
    assert first.headers == (("trace", b"abc"), ("empty", None))
    assert (first.timestamp, first.timestamp_type) == (1234, TimestampType.CREATE_TIME)
    assert (second.offset, second.key, second.value) == (1, b"tombstone", None)


def test_group_consumer_resumes_from_its_committed_offsets(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 2)
    group = f"resume-{uuid.uuid4().hex[:6]}"
    produce(cluster.bootstrap, topic, 20, partitions=2)
    with Consumer(cluster.bootstrap, group_id=group, max_poll_records=6) as consumer:
        consumer.subscribe([topic])
        assert consumer.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
        seen = poll_until(consumer, 6)
        consumer.commit()
        committed = consumer.committed()
        assert {tp: om.offset for tp, om in committed.items() if om} == {
            tp: consumer.position(tp) for tp in consumer.assignment()
        }
        assert sum(om.offset for om in committed.values() if om) == 6
    with Consumer(cluster.bootstrap, group_id=group) as consumer:
        consumer.subscribe([topic])
        rest = poll_until(consumer, 14)
    assert sorted(r.value for r in seen + rest) == sorted(f"v{i}".encode() for i in range(20))
    assert not {(r.partition, r.offset) for r in seen} & {(r.partition, r.offset) for r in rest}


def test_seek_position_and_offsets_lookup(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    tp = TopicPartition(topic, 0)
    produce(cluster.bootstrap, topic, 10)
    with Consumer(cluster.bootstrap) as consumer:
        consumer.assign([tp])
        assert consumer.beginning_offsets([tp]) == {tp: 0}
        assert consumer.end_offsets([tp]) == {tp: 10}
        assert consumer.position(tp) == 0, "no group: auto_offset_reset=earliest"
        consumer.seek(tp, 7)
        assert [r.offset for r in poll_until(consumer, 3)] == [7, 8, 9]
        consumer.seek_to_beginning()
        assert consumer.position(tp) == 0
        consumer.seek_to_end()
        assert consumer.position(tp) == 10
        assert consumer.poll(timeout_ms=100) == []


def test_read_committed_end_is_the_last_stable_offset(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    tp = TopicPartition(topic, 0)
    produce(cluster.bootstrap, topic, 3)
    with Producer(cluster.bootstrap, transactional_id=f"lso-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open")
        producer.flush()
        with (
            Consumer(cluster.bootstrap) as committed,
            Consumer(cluster.bootstrap, isolation_level="read_uncommitted") as uncommitted,
        ):
            committed.assign([tp])
            uncommitted.assign([tp])
            assert committed.end_offsets([tp]) == {tp: 3}
            assert uncommitted.end_offsets([tp]) == {tp: 4}
            assert [r.value for r in poll_until(committed, 3)] == [b"v0", b"v1", b"v2"]
            assert committed.poll(timeout_ms=300) == [], "the open transaction is held back"
            assert [r.value for r in poll_until(uncommitted, 4)][-1] == b"open"
            producer.commit_transaction()
            assert [r.value for r in poll_until(committed, 1)] == [b"open"]
            deadline = time.monotonic() + 10
            while committed.position(tp) < 5:  # the position moves past the commit marker
                assert time.monotonic() < deadline
                committed.poll(timeout_ms=100)


def test_group_offsets_with_metadata_round_trip(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    tp = TopicPartition(topic, 0)
    group = f"meta-{uuid.uuid4().hex[:6]}"
    with Consumer(cluster.bootstrap, group_id=group) as consumer:
        consumer.assign([tp])
        assert consumer.committed([tp]) == {tp: None}
        consumer.commit({tp: OffsetAndMetadata(5, "batch-42", leader_epoch=0)})
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(5, "batch-42", leader_epoch=0)}
        assert consumer.group_metadata().group_id == group


def test_auto_offset_reset_none_without_committed_offset_raises(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    with Consumer(cluster.bootstrap, group_id=f"none-{uuid.uuid4().hex[:6]}", auto_offset_reset="none") as consumer:
        consumer.subscribe([topic])
        with pytest.raises(OffsetOutOfRange, match="seek"):
            consumer.poll(timeout_ms=500)


def test_bad_usage_is_refused_with_the_fix(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    with Consumer(cluster.bootstrap) as consumer:
        with pytest.raises(IllegalStateError, match="assign"):
            consumer.poll(timeout_ms=10)
        with pytest.raises(IllegalStateError, match="group_id"):
            consumer.subscribe([topic])
        with pytest.raises(IllegalStateError, match="group_id"):
            consumer.commit()
        with pytest.raises(IllegalStateError, match="group_id"):
            consumer.group_metadata()
        with pytest.raises(UnknownTopicOrPartition):
            consumer.assign([TopicPartition(topic, 3)])
        with pytest.raises(UnknownTopicOrPartition):
            consumer.assign([TopicPartition("no-such-topic", 0)])
        with pytest.raises(IllegalStateError, match="not assigned"):
            consumer.seek(TopicPartition(topic, 0), 1)
    with pytest.raises(IllegalStateError, match="closed"):
        consumer.poll()
    with pytest.raises(ValueError, match="isolation_level"):
        Consumer(cluster.bootstrap, isolation_level="read_everything")


def test_rewind_without_a_committed_offset_returns_to_the_first_input_of_the_aborted_transaction(
    cluster: LocalCluster,
) -> None:
    source, sink = new_topic(cluster.bootstrap), new_topic(cluster.bootstrap)
    tp = TopicPartition(source, 0)
    produce(cluster.bootstrap, source, 10)
    group = f"rewind-{uuid.uuid4().hex[:6]}"
    with (
        Consumer(cluster.bootstrap, group_id=group, auto_offset_reset="latest") as consumer,
        Producer(cluster.bootstrap, transactional_id=f"rewind-{group}") as producer,
    ):
        consumer.assign([tp])
        assert consumer.position(tp) == 10  # "latest": the group has no committed offset
        produce(cluster.bootstrap, source, 5)
        producer.init_transactions()
        producer.begin_transaction()
        for record in poll_until(consumer, 5):
            producer.send(sink, record.value)
        producer.send_offsets_to_transaction({tp: consumer.position(tp)}, consumer.group_metadata())
        assert consumer.position(tp) == 15
        producer.abort_transaction()
        assert consumer.rewind_to_committed() == {tp: 10}
        assert [r.offset for r in poll_until(consumer, 5)] == list(range(10, 15))


def test_rewind_after_seek_with_auto_offset_reset_none_returns_to_the_seek(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    tp = TopicPartition(topic, 0)
    produce(cluster.bootstrap, topic, 6)
    with Consumer(cluster.bootstrap, group_id=f"seek-{uuid.uuid4().hex[:6]}", auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 3)
        assert [r.offset for r in poll_until(consumer, 3)] == [3, 4, 5]
        assert consumer.rewind_to_committed() == {tp: 3}


def test_assigned_topic_deleted_and_created_again_is_reported_then_read_from_its_beginning(
    cluster: LocalCluster,
) -> None:
    topic = new_topic(cluster.bootstrap)
    tp = TopicPartition(topic, 0)
    produce(cluster.bootstrap, topic, 3)
    with Consumer(cluster.bootstrap, isolation_level="read_uncommitted") as consumer:
        consumer.assign([tp])
        assert [r.offset for r in poll_until(consumer, 3)] == [0, 1, 2]
        with AdminClient(cluster.bootstrap) as admin:
            admin.delete_topics([topic])
        deadline = time.monotonic() + 30
        with pytest.raises(UnknownTopicOrPartition, match="was deleted"):
            while time.monotonic() < deadline:
                assert consumer.poll(timeout_ms=200) == []
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(topic, num_partitions=1)])
        # more records than the old position (3): continuing there would skip the new topic's first three
        with Producer(cluster.bootstrap) as producer:
            for i in range(5):
                producer.send(topic, f"new-{i}".encode()).result(timeout=30)
        records = poll_until(consumer, 5)
    assert [(r.offset, r.value) for r in records] == [(i, f"new-{i}".encode()) for i in range(5)]


def test_topic_created_again_before_the_consumer_noticed_is_read_from_its_beginning(cluster: LocalCluster) -> None:
    """Deleted and created again between two polls: the consumer's old leader epoch is fenced by the new topic's
    partition, the metadata shows a new topic id, and the consumer starts the new topic at its beginning."""
    topic = new_topic(cluster.bootstrap)
    tp = TopicPartition(topic, 0)
    produce(cluster.bootstrap, topic, 3)
    with Consumer(cluster.bootstrap, isolation_level="read_uncommitted") as consumer:
        consumer.assign([tp])
        assert [r.offset for r in poll_until(consumer, 3)] == [0, 1, 2]
        with AdminClient(cluster.bootstrap) as admin:
            admin.delete_topics([topic])
            admin.create_topics([NewTopic(topic, num_partitions=1)])
        produce(cluster.bootstrap, topic, 5)
        records: list[ConsumerRecord] = []
        deadline = time.monotonic() + 30
        while len(records) < 5:
            assert time.monotonic() < deadline, f"{len(records)} of 5 records of the new topic arrived"
            try:
                records.extend(consumer.poll(timeout_ms=200))
            except UnknownTopicOrPartition:
                pass  # a fetch answered between the deletion and the creation: reported once, then followed
    assert [(r.offset, r.value) for r in records] == [(i, f"v{i}".encode()) for i in range(5)]
