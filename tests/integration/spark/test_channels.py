"""Per-process gRPC channels and the picklable log client of the Spark connector
(design/spark-connector.md §3.1, §5)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
from typing import TYPE_CHECKING

import pytest

from oncelog.client.records import TopicPartition
from oncelog.errors import UnknownTopicOrPartition
from oncelog.spark import channels
from oncelog.spark.channels import LogClient, channel
from oncelog.testing import LocalCluster
from oncelog.vocabulary import IsolationLevel

if TYPE_CHECKING:
    from tests.integration.spark.conftest import Topic

pytestmark = pytest.mark.timeout(60)


def test_one_channel_per_server_per_process() -> None:
    assert channel("127.0.0.1:1") is channel("127.0.0.1:1")
    assert channel("127.0.0.1:1") is not channel("127.0.0.1:2")


def _child_reuses_parent_channel(target: str, parent: int) -> bool:
    return channel(target) is channels._channels[(parent, target)]


def test_forked_child_opens_its_own_channel() -> None:
    """gRPC channels do not survive fork; Spark's daemon forks the Python workers."""
    target = "127.0.0.1:3"
    channel(target)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(_child_reuses_parent_channel, (target, os.getpid())) is False


def test_log_client_pickles_after_use_and_knows_leaders(cluster: LocalCluster, topic3: Topic) -> None:
    client = LogClient([cluster.bootstrap])
    assert client.topic_partitions([topic3.name]) == [TopicPartition(topic3.name, p) for p in range(3)]
    leaders = client.partitions(topic3.name)
    assert {p: leader.address for p, leader in leaders.items()} == topic3.leaders
    copy = pickle.loads(pickle.dumps(client))
    assert copy.bootstrap == client.bootstrap and copy.partitions(topic3.name) == leaders


def test_unknown_topic_fails_without_waiting_for_the_timeout(cluster: LocalCluster) -> None:
    client = LogClient([cluster.bootstrap], request_timeout_s=30)
    with pytest.raises(UnknownTopicOrPartition, match="no-such-topic"):
        client.topic_partitions(["no-such-topic"])


def test_unknown_partition_is_not_retried(cluster: LocalCluster, topic: Topic) -> None:
    client = LogClient([cluster.bootstrap], request_timeout_s=30)
    with pytest.raises(UnknownTopicOrPartition, match="has 1 partition"):
        client.list_offsets([TopicPartition(topic.name, 5)], "latest", IsolationLevel.READ_COMMITTED)


def test_an_unreachable_bootstrap_moves_on_to_the_next(cluster: LocalCluster, topic: Topic) -> None:
    client = LogClient(["127.0.0.1:9", cluster.bootstrap])
    assert client.topic_partitions([topic.name]) == [TopicPartition(topic.name, 0)]
