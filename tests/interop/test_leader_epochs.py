"""Leader epochs over the Kafka protocol (KIP-320): Metadata, Fetch and OffsetForLeaderEpoch carry the storage
leader's epoch, so Kafka clients fence stale metadata and detect a position beyond where its epoch ends.

The first test sends the same requests to Apache Kafka 4.4 and to the gateway and expects the same answers; a
single Kafka node never changes leader, so the second runs the gateway alone in front of two storage nodes and
moves a partition's leadership (a new leader epoch) while a librdkafka consumer reads it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from oncelog.client import AdminClient as OncelogAdmin
from oncelog.client.records import PartitionInfo
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import KafkaGatewayProcess
from oncelog.testing.kafka_wire import kafka_call

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Message, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

ZERO_UUID = uuid.UUID(int=0)


def _topic(bootstrap: str, replication_factor: int = 1) -> str:
    name = f"epochs-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, replication_factor)])[name].result(60)
    return name


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for value in values:
        producer.produce(topic, value=value)
    assert producer.flush(60) == 0


def _metadata_epoch(bootstrap: str, topic: str) -> int:
    answer = kafka_call(
        bootstrap,
        3,
        12,
        {"topics": [{"topic_id": ZERO_UUID, "name": topic}], "allow_auto_topic_creation": False,
         "include_topic_authorized_operations": False},
    )  # fmt: skip
    return int(answer.topics[0].partitions[0].leader_epoch)


def _epoch_end(bootstrap: str, topic: str, leader_epoch: int, current: int) -> tuple[ErrorCode, int, int]:
    answer = kafka_call(
        bootstrap,
        23,
        4,
        {"replica_id": -1, "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "current_leader_epoch": current, "leader_epoch": leader_epoch}]}]},
    )  # fmt: skip
    end = answer.topics[0].partitions[0]
    return end.error_code, int(end.leader_epoch), int(end.end_offset)


def _fetch(bootstrap: str, topic: str, offset: int, *, current: int, last_fetched: int = -1) -> Any:
    """Fetch v12 of one partition: its answer (error code, diverging epoch, records)."""
    answer = kafka_call(
        bootstrap,
        1,
        12,
        {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
         "session_id": 0, "session_epoch": -1, "forgotten_topics_data": [], "rack_id": "",
         "topics": [{"topic": topic, "partitions": [
             {"partition": 0, "current_leader_epoch": current, "fetch_offset": offset,
              "last_fetched_epoch": last_fetched, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]},
    )  # fmt: skip
    return answer.responses[0].partitions[0]


def _listed(bootstrap: str, topic: str, timestamp: int) -> tuple[ErrorCode, int, int]:
    """ListOffsets v7 of partition 0 at ``timestamp`` (-1 latest, -2 earliest): error code, offset, leader epoch."""
    answer = kafka_call(
        bootstrap,
        2,
        7,
        {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": timestamp}]}]},
    )  # fmt: skip
    listed = answer.topics[0].partitions[0]
    return listed.error_code, int(listed.offset), int(listed.leader_epoch)


def _consume(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> list[Message]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"epochs-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    out: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                out.append(message)
    finally:
        consumer.close()
    return out


def _first_error(bootstrap: str, topic: str, position: TopicPartition, timeout_s: float = 60.0) -> Any:
    """The first thing a consumer assigned at ``position`` (offset and leader epoch) gets: a message or error."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"epochs-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False,
         "auto.offset.reset": "error"}
    )  # fmt: skip
    consumer.assign([position])
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                return message.error() or message.offset()
    finally:
        consumer.close()
    raise AssertionError(f"the consumer assigned at {position} got nothing in {timeout_s} s")


def test_leader_epochs_and_where_they_end_alike(kafka_bootstrap: str) -> None:
    topic = _topic(kafka_bootstrap)
    _produce(kafka_bootstrap, topic, [b"a", b"b", b"c"])

    assert _metadata_epoch(kafka_bootstrap, topic) == 0
    assert [m.leader_epoch() for m in _consume(kafka_bootstrap, topic, 3)] == [0, 0, 0]
    # OffsetForLeaderEpoch: the current epoch ends at the log end; an epoch above every known one is undefined;
    # a current epoch the leader has not reached is UNKNOWN_LEADER_EPOCH
    assert _epoch_end(kafka_bootstrap, topic, 0, current=0) == (ErrorCode.none, 0, 3)
    assert _epoch_end(kafka_bootstrap, topic, 0, current=-1) == (ErrorCode.none, 0, 3)
    assert _epoch_end(kafka_bootstrap, topic, 5, current=0) == (ErrorCode.none, -1, -1)
    assert _epoch_end(kafka_bootstrap, topic, 0, current=1) == (ErrorCode.unknown_leader_epoch, -1, -1)
    # Fetch: a future current epoch is refused; a last fetched epoch the leader never had is out of range; a fetch
    # offset beyond where the last fetched epoch ends diverges (the client truncates to the end given)
    assert _fetch(kafka_bootstrap, topic, 0, current=1).error_code == ErrorCode.unknown_leader_epoch
    assert _fetch(kafka_bootstrap, topic, 3, current=0, last_fetched=5).error_code == ErrorCode.offset_out_of_range
    diverged = _fetch(kafka_bootstrap, topic, 5, current=0, last_fetched=0)
    assert (diverged.error_code, diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (
        ErrorCode.none, 0, 3,
    )  # fmt: skip
    assert not diverged.records
    assert (diverged.high_watermark, diverged.log_start_offset) == (3, 0), "a diverging answer has the watermarks"
    caught_up = _fetch(kafka_bootstrap, topic, 1, current=0, last_fetched=0)
    assert (caught_up.error_code, caught_up.diverging_epoch.epoch, caught_up.high_watermark) == (ErrorCode.none, -1, 3)
    assert caught_up.records
    # ListOffsets answers with the epoch of the leader that appended the offset found (its own for latest)
    assert _listed(kafka_bootstrap, topic, -2) == (ErrorCode.none, 0, 0)
    assert _listed(kafka_bootstrap, topic, -1) == (ErrorCode.none, 3, 0)
    assert _listed(kafka_bootstrap, topic, 0) == (ErrorCode.none, 0, 0)
    # librdkafka validates a position that carries a leader epoch (OffsetForLeaderEpoch) before fetching: offset 5
    # of epoch 0 lies beyond that epoch's end (3), which it reports as log truncation
    error = _first_error(kafka_bootstrap, topic, TopicPartition(topic, 0, 5, leader_epoch=0))
    assert "truncation detected at offset 5 (leader epoch 0): broker end offset is 3" in error.str(), error
    assert _first_error(kafka_bootstrap, topic, TopicPartition(topic, 0, 2, leader_epoch=0)) == 2


@pytest.fixture(scope="module")
def two_node_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str]]:
    """A gateway in front of a cluster of two storage nodes, so a partition's leadership can move."""
    data_dir = Path(tmp_path_factory.mktemp("two-nodes"))
    with (
        LocalCluster(data_dir, storage_nodes=2) as cluster,
        KafkaGatewayProcess(cluster.bootstrap, data_dir / "gateway") as gateway,
    ):
        yield cluster, gateway.address


def _wait(condition: Any, what: str, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"{what} within {timeout_s} s")


def test_a_consumer_validates_its_position_across_a_leader_change(
    two_node_gateway: tuple[LocalCluster, str],
) -> None:
    cluster, bootstrap = two_node_gateway
    topic = _topic(bootstrap, replication_factor=2)
    _produce(bootstrap, topic, [b"a", b"b", b"c"])
    with OncelogAdmin(cluster.bootstrap) as admin:

        def in_sync() -> PartitionInfo | None:
            partition = admin.describe_topics([topic])[topic].partitions[0]
            return partition if len(partition.isr) == 2 else None

        before = _wait(in_sync, "both replicas in sync")
        follower = next(n for n in before.replicas if n != before.leader_node_id)
        moved = admin.alter_partition_replicas(topic, 0, [follower])  # the old leader leaves: the follower leads
    assert (moved.leader_node_id, moved.leader_epoch) == (follower, before.leader_epoch + 1)
    old, new = before.leader_epoch, moved.leader_epoch
    _wait(lambda: _metadata_epoch(bootstrap, topic) == new, f"the gateway's Metadata giving epoch {new}")
    _produce(bootstrap, topic, [b"d", b"e"])

    # the records carry the epoch of the leader that appended them, and ListOffsets answers it
    consumed = _consume(bootstrap, topic, 5)
    assert [m.leader_epoch() for m in consumed] == [old, old, old, new, new]
    assert _listed(bootstrap, topic, -2) == (ErrorCode.none, 0, old)
    assert _listed(bootstrap, topic, -1) == (ErrorCode.none, 5, new)
    assert _listed(bootstrap, topic, consumed[0].timestamp()[1]) == (ErrorCode.none, 0, old)
    assert _listed(bootstrap, topic, consumed[3].timestamp()[1]) == (ErrorCode.none, 3, new)
    # the old epoch ends where the new leader took over; a fetch with the old epoch as current is fenced
    assert _epoch_end(bootstrap, topic, old, current=new) == (ErrorCode.none, old, 3)
    assert _epoch_end(bootstrap, topic, old, current=old) == (ErrorCode.fenced_leader_epoch, -1, -1)
    assert _fetch(bootstrap, topic, 0, current=old).error_code == ErrorCode.fenced_leader_epoch
    # Fetch v12 with the old epoch as the last fetched one: no divergence at its end, divergence beyond it
    assert _fetch(bootstrap, topic, 3, current=new, last_fetched=old).diverging_epoch.epoch == -1
    beyond = _fetch(bootstrap, topic, 4, current=new, last_fetched=old)
    assert (beyond.diverging_epoch.epoch, beyond.diverging_epoch.end_offset, beyond.high_watermark) == (old, 3, 5)
    # librdkafka: a position at the end of the old epoch validates and reads on; one beyond it is a truncation
    assert _first_error(bootstrap, topic, TopicPartition(topic, 0, 3, leader_epoch=old)) == 3
    error = _first_error(bootstrap, topic, TopicPartition(topic, 0, 4, leader_epoch=old))
    assert f"truncation detected at offset 4 (leader epoch {old}): broker end offset is 3" in error.str(), error
