"""AdminClient against the local cluster: topics, cluster, producers, transactions and group offsets."""

from __future__ import annotations

import time
import uuid

import pytest

from oncelog.client import (
    AdminClient,
    Consumer,
    NewTopic,
    OffsetAndMetadata,
    Producer,
    ProducerFencedError,
    TopicPartition,
)
from oncelog.errors import InvalidConfig, TopicAlreadyExists, TransactionalIdNotFound, UnknownTopicOrPartition
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_topic_lifecycle(cluster: LocalCluster) -> None:
    name = unique("admin-topic")
    with AdminClient(cluster.bootstrap) as admin:
        created = admin.create_topics([NewTopic(name, num_partitions=3, configs={"flush": "async"})])
        assert [(t.name, len(t.partitions)) for t in created] == [(name, 3)]
        described = admin.describe_topics([name])[name]
        assert described.configs["flush"] == "async"
        assert {p.leader_node_id for p in described.partitions} == {"partition-storage-0", "partition-storage-1"}
        assert all(p.leader_address for p in described.partitions)
        assert name in admin.list_topics()
        with pytest.raises(TopicAlreadyExists):
            admin.create_topics([name])
        with pytest.raises(InvalidConfig, match="flsh"):
            admin.create_topics([NewTopic(unique("bad"), configs={"flsh": "sync"})])
        assert admin.delete_topics([name]) == [name]
        assert name not in admin.list_topics()
        with pytest.raises(UnknownTopicOrPartition):
            admin.describe_topics([name])


def test_describe_cluster_lists_every_role(cluster: LocalCluster) -> None:
    with AdminClient(cluster.bootstrap) as admin:
        description = admin.describe_cluster()
    assert description.cluster_id
    assert sorted(description.addresses("partition-storage")) == sorted(cluster.addresses("partition-storage"))
    for role in ("pid-allocator", "txn-coordinator", "group-offsets"):
        assert description.addresses(role) == cluster.addresses(role)
    assert description.txn_coordinator_shards >= 1 and description.group_offsets_shards >= 1


def test_list_offsets_by_isolation(cluster: LocalCluster) -> None:
    topic = unique("admin-offsets")
    tp = TopicPartition(topic, 0)
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([topic])
        with Producer(cluster.bootstrap) as producer:
            producer.send(topic, b"a", timestamp_ms=1_000)
            producer.send(topic, b"b", timestamp_ms=2_000)
        assert admin.list_offsets({tp: "earliest"})[tp][0] == 0
        assert admin.list_offsets({tp: "latest"})[tp][0] == 2
        assert admin.list_offsets({tp: 1_500})[tp] == (1, 2_000)
        with Producer(cluster.bootstrap, transactional_id=unique("admin-lso")) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"open")
            producer.flush()
            assert admin.list_offsets({tp: "latest"}, isolation_level="read_committed")[tp][0] == 2
            assert admin.list_offsets({tp: "latest"}, isolation_level="read_uncommitted")[tp][0] == 3
            producer.abort_transaction()


def test_hanging_transaction_is_found_and_aborted(cluster: LocalCluster) -> None:
    """KIP-664 drill (design/kafka-semantics.md §8 S8): find the open transaction pinning the LSO, abort it, the LSO
    moves on."""
    topic = unique("admin-hanging")
    tid = unique("hanging")
    tp = TopicPartition(topic, 0)
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([topic])
        hanging = Producer(cluster.bootstrap, transactional_id=tid)
        try:
            hanging.init_transactions()
            hanging.begin_transaction()
            hanging.send(topic, b"stuck")
            hanging.flush()
            producers = admin.describe_producers([tp])[tp]
            assert [p.current_transaction_start_offset for p in producers] == [0]
            started_ms = admin.describe_transactions([tid])[tid].transaction_start_time_ms
            while time.time() * 1000 < started_ms + 1:  # 1 ms old by the coordinator's clock (this host's)
                time.sleep(0.001)
            listed = admin.list_transactions(states=["ongoing"], older_than_ms=1)
            assert tid in {t.transactional_id for t in listed}
            described = admin.describe_transactions([tid])[tid]
            assert (described.state, described.partitions) == ("ongoing", (tp,))
            assert described.producer_id == producers[0].producer_id

            fenced_pid, fenced_epoch = admin.abort_transaction(tid)
            assert fenced_pid == described.producer_id and fenced_epoch > described.producer_epoch
            deadline = time.monotonic() + 20
            while admin.list_offsets({tp: "latest"}, isolation_level="read_committed")[tp][0] < 2:
                assert time.monotonic() < deadline, "the abort marker never moved the last stable offset"
                time.sleep(0.05)
            assert admin.describe_producers([tp])[tp][0].current_transaction_start_offset is None
            with pytest.raises(ProducerFencedError):
                hanging.commit_transaction()
        finally:
            hanging.close()
        with pytest.raises(TransactionalIdNotFound):
            admin.describe_transactions([unique("never-used")])


def test_group_offsets_list_and_alter(cluster: LocalCluster) -> None:
    topic = unique("admin-group")
    group = unique("group")
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=2)])
        assert admin.list_group_offsets(group) == {}
        admin.alter_group_offsets(
            group, {TopicPartition(topic, 0): 4, TopicPartition(topic, 1): OffsetAndMetadata(9, "m")}
        )
        assert admin.list_group_offsets(group) == {
            TopicPartition(topic, 0): OffsetAndMetadata(4),
            TopicPartition(topic, 1): OffsetAndMetadata(9, "m"),
        }
        with Consumer(cluster.bootstrap, group_id=group) as consumer:
            consumer.subscribe([topic])
            assert consumer.position(TopicPartition(topic, 1)) == 9, "a consumer starts at the altered offset"
