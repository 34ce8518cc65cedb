"""The same scenarios, through unmodified Kafka clients, against Apache Kafka 4.4 and against oncelog's gateway.

Each test runs once per target (``kafka_bootstrap``) and asserts the observable results a Kafka user relies on —
visible records and their offsets, committed offsets, error codes, fencing — against one expectation, so both
targets must give the same answer.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncelog.testing.kafka_wire import kafka_call

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"conformance-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept alive until the result is in
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(60)
    return name


def _read(
    bootstrap: str, tps: Iterable[TopicPartition], count: int, isolation: str, timeout_s: float = 60.0
) -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of ``count`` records, in arrival order per partition."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
         "enable.auto.commit": False, "enable.partition.eof": False}
    )  # fmt: skip
    consumer.assign(list(tps))
    out: list[tuple[int, int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            out.append((message.partition(), message.offset(), message.key(), message.value()))
    finally:
        consumer.close()
    return sorted(out)


def _end_offsets(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets", "isolation.level": isolation})
    try:
        return [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)]
    finally:
        consumer.close()


def test_an_idempotent_producer_writes_each_record_once_in_order(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap, partitions=2)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True, "linger.ms": 5,
         "max.in.flight.requests.per.connection": 5}
    )  # fmt: skip
    for i in range(200):
        producer.produce(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2)
    assert producer.flush(60) == 0
    records = _read(kafka_bootstrap, [TopicPartition(topic, p, 0) for p in range(2)], 200, "read_committed")
    assert [(p, o, v) for p, o, _, v in records] == sorted((i % 2, i // 2, f"v{i}".encode()) for i in range(200))
    assert _end_offsets(kafka_bootstrap, topic, 2, "read_committed") == [100, 100]


def test_an_aborted_transaction_is_hidden_from_read_committed_and_shown_to_read_uncommitted(
    kafka_bootstrap: str,
) -> None:
    topic = _topic(kafka_bootstrap)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    for outcome in ("commit", "abort", "commit"):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, f"{outcome}-{i}".encode(), partition=0)
        assert producer.flush(60) == 0  # written before the end, so the abort has data to hide
        if outcome == "commit":
            producer.commit_transaction(60)
        else:
            producer.abort_transaction(60)
    tp = TopicPartition(topic, 0, 0)
    # each transaction: three records and one marker, so offsets agree between Kafka and oncelog
    committed = _read(kafka_bootstrap, [tp], 6, "read_committed")
    assert [(o, v) for _, o, _, v in committed] == [
        (0, b"commit-0"), (1, b"commit-1"), (2, b"commit-2"), (8, b"commit-0"), (9, b"commit-1"), (10, b"commit-2")
    ]  # fmt: skip
    everything = _read(kafka_bootstrap, [tp], 9, "read_uncommitted")
    assert [o for _, o, _, _ in everything] == [0, 1, 2, 4, 5, 6, 8, 9, 10]
    assert [v for _, _, _, v in everything][3:6] == [b"abort-0", b"abort-1", b"abort-2"]
    assert _end_offsets(kafka_bootstrap, topic, 1, "read_committed") == [12]


def test_offsets_sent_in_a_transaction_are_committed_with_it_and_only_then(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    group = f"copier-{uuid.uuid4().hex[:6]}"
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group, "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"txn-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    tp = TopicPartition(topic, 0)
    try:
        for offset, commit in ((5, True), (9, False)):
            producer.begin_transaction()
            producer.produce(topic, b"out", partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, offset)], consumer.consumer_group_metadata(), 60
            )
            producer.commit_transaction(60) if commit else producer.abort_transaction(60)
        (committed,) = consumer.committed([tp], timeout=60)
    finally:
        consumer.close()
    assert committed.offset == 5


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    transactional_id = f"txn-{uuid.uuid4().hex[:8]}"
    first = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id})
    first.init_transactions(60)
    first.begin_transaction()
    first.produce(topic, b"zombie", partition=0)
    assert first.flush(60) == 0
    second = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id})
    second.init_transactions(60)  # aborts the first one's open transaction
    second.begin_transaction()
    second.produce(topic, b"live", partition=0)
    second.commit_transaction(60)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(60)
    error: KafkaError = raised.value.args[0]
    assert error.fatal() and error.code() == KafkaError._FENCED, error
    values = [v for _, _, _, v in _read(kafka_bootstrap, [TopicPartition(topic, 0, 0)], 1, "read_committed")]
    assert values == [b"live"]


def test_a_topic_created_with_a_setting_describes_it_back(kafka_bootstrap: str) -> None:
    name = f"configs-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    settings = {"retention.ms": "3600000", "max.message.bytes": "65536"}
    admin.create_topics([NewTopic(name, 1, 1, config=settings)])[name].result(60)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = admin.describe_configs([resource])[resource].result(60)
    assert {k: entries[k].value for k in settings} == settings
    assert not entries["retention.ms"].is_default


def test_partitions_are_added_and_settings_altered_and_bad_changes_refused(kafka_bootstrap: str) -> None:
    name = _topic(kafka_bootstrap)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_partitions([NewPartitions(name, 3)])[name].result(60)
    assert len(admin.list_topics(name, timeout=30).topics[name].partitions) == 3
    with pytest.raises(KafkaException) as shrunk:
        admin.create_partitions([NewPartitions(name, 2)])[name].result(60)
    assert shrunk.value.args[0].code() == KafkaError.INVALID_PARTITIONS, shrunk.value

    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[ConfigEntry("retention.ms", "7200000", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(60)
    described = ConfigResource(ConfigResource.Type.TOPIC, name)
    entries = admin.describe_configs([described])[described].result(60)
    assert entries["retention.ms"].value == "7200000" and not entries["retention.ms"].is_default
    deleted = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[ConfigEntry("retention.ms", None, incremental_operation=AlterConfigOpType.DELETE)],
    )
    admin.incremental_alter_configs([deleted])[deleted].result(60)
    assert admin.describe_configs([described])[described].result(60)["retention.ms"].is_default
    appended = ConfigResource(
        ConfigResource.Type.TOPIC,
        name,
        incremental_configs=[ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)],
    )
    with pytest.raises(KafkaException) as refused:
        admin.incremental_alter_configs([appended])[appended].result(60)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG, refused.value


def test_topic_partitions_are_described_a_page_at_a_time(kafka_bootstrap: str) -> None:
    """DescribeTopicPartitions (what kafka-topics --describe asks): topics in name order, at most the limit's count
    of partitions, and a cursor that names the first partition left out."""
    first, second = sorted(_topic(kafka_bootstrap, partitions=3) for _ in range(2))
    missing = f"missing-{uuid.uuid4().hex[:8]}"

    def page(names: list[str], limit: int, cursor: tuple[str, int] | None = None) -> Any:
        answer = kafka_call(
            kafka_bootstrap,
            75,
            0,
            {"topics": [{"name": n} for n in names], "response_partition_limit": limit,
             "cursor": None if cursor is None else {"topic_name": cursor[0], "partition_index": cursor[1]}},
        )  # fmt: skip
        topics = [
            (
                t.name,
                t.error_code,
                [(p.partition_index, p.leader_epoch, p.eligible_leader_replicas) for p in t.partitions],
            )
            for t in answer.topics
        ]
        after = answer.next_cursor
        return topics, None if after is None else (after.topic_name, after.partition_index)

    def shown(*indexes: int) -> list[tuple[int, int, tuple[int, ...]]]:
        return [(i, 0, ()) for i in indexes]

    ok = ErrorCode.none
    assert page([second, first], 4) == ([(first, ok, shown(0, 1, 2)), (second, ok, shown(0))], (second, 1))
    assert page([second, first], 4, (second, 1)) == ([(second, ok, shown(1, 2))], None)
    assert page([first, second], 3) == ([(first, ok, shown(0, 1, 2))], (second, 0)), "a full page ends at a topic"
    assert page([first, missing], 10) == (
        [(first, ok, shown(0, 1, 2)), (missing, ErrorCode.unknown_topic_or_partition, [])], None,
    )  # fmt: skip
    refused = ErrorCode.invalid_request
    assert page([first], 10, (second, 0)) == ([(first, refused, [])], None), "the cursor's topic was not asked for"


@pytest.mark.parametrize("acks", ["0", "1"])
def test_a_producer_without_acknowledgements_or_with_the_leaders_writes_every_record(
    kafka_bootstrap: str, acks: str
) -> None:
    topic = _topic(kafka_bootstrap)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "acks": acks, "enable.idempotence": False})
    for i in range(50):
        producer.produce(topic, f"a{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    records = _read(kafka_bootstrap, [TopicPartition(topic, 0, 0)], 50, "read_uncommitted")
    assert [(o, v) for _, o, _, v in records] == [(i, f"a{i}".encode()) for i in range(50)]
