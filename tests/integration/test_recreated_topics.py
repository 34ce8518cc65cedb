"""A topic deleted and created again under its name, through the client library on real processes (issue 25).

The coordinator must route the markers of the new topic's transactions to it (no "deleted" remembered from
the old one), and the storage nodes must keep every write acknowledged on the new topic.
"""

from __future__ import annotations

import time
import uuid

import pytest

from oncelog.client import AdminClient, NewTopic, Producer, TopicPartition
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all

pytestmark = pytest.mark.timeout(180)


def stable_ends(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30) -> dict[TopicPartition, int]:
    """The LSO of every partition once it equals the HW; fails naming both if it never does."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    deadline = time.monotonic() + timeout_s
    with AdminClient(bootstrap) as admin:
        while True:
            lso, hw = (
                {
                    tp: o
                    for tp, (o, _) in admin.list_offsets(dict.fromkeys(tps, "latest"), isolation_level=level).items()
                }
                for level in ("read_committed", "read_uncommitted")
            )
            if lso == hw:
                return hw
            if time.monotonic() > deadline:
                raise AssertionError(f"the LSO of {topic} stays below its HW: LSO {lso}, HW {hw}")
            time.sleep(0.05)


def commit(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    with Producer(bootstrap, transactional_id=f"recreate-{uuid.uuid4().hex[:8]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i, value in enumerate(values):
            producer.send(topic, value, partition=i % partitions)
        producer.commit_transaction()


@pytest.mark.parametrize("second_partitions", [2, 4])
def test_commit_on_a_topic_deleted_and_created_again_is_visible(cluster: LocalCluster, second_partitions: int) -> None:
    """Issue 25 item 1: create, commit, delete while a commit is on its way, create again, commit again.

    The transaction committed on the new topic (with as many partitions, or more) must be readable at
    read_committed, and its LSO must reach its HW.
    """
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=2)])
        commit(cluster.bootstrap, topic, [b"old-0", b"old-1"], 2)
        with Producer(cluster.bootstrap, transactional_id=f"recreate-{uuid.uuid4().hex[:8]}") as doomed:
            doomed.init_transactions()
            doomed.begin_transaction()
            doomed.send(topic, b"doomed-0", partition=0)
            doomed.send(topic, b"doomed-1", partition=1)
            doomed.flush()
            admin.delete_topics([topic])
            doomed.commit_transaction()  # its markers find the topic gone: dropped from the transaction
        admin.create_topics([NewTopic(topic, num_partitions=second_partitions)])

    fresh = [f"new-{i}".encode() for i in range(2 * second_partitions)]
    commit(cluster.bootstrap, topic, fresh, second_partitions)

    ends = stable_ends(cluster.bootstrap, topic, second_partitions)
    assert all(end > 0 for end in ends.values()), ends
    assert sorted(r.value for r in read_all(cluster.bootstrap, topic)) == sorted(fresh)


def wait_old_incarnation_gone(cluster: LocalCluster, topic: str, topic_id: str, timeout_s: float = 30) -> None:
    """Wait until no storage node keeps a directory of ``topic`` made for another topic id than ``topic_id``.

    That is the signal that every node has applied the deletion of the earlier incarnation (its catalog
    refresh removed the directory); reading earlier could still be served from the old partition.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        stale = [
            path
            for path in cluster.data_dir.glob(f"partition-storage-*/{topic}-*/partition.metadata")
            if f"topic_id: {topic_id}" not in path.read_text(errors="replace")
        ]
        if not stale:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"storage nodes still hold the deleted incarnation of {topic}: {stale}")
        time.sleep(0.05)


def test_acknowledged_writes_to_a_topic_created_again_are_kept(cluster: LocalCluster) -> None:
    """Issue 25 item 11: delete + create + produce in a loop; every round reads back what it acknowledged.

    A storage node that had not yet seen the deletion used to write into the old incarnation's partition,
    and removed it (with the acknowledged records) at its next catalog refresh.
    """
    topic = f"recreated-{uuid.uuid4().hex[:8]}"
    with AdminClient(cluster.bootstrap) as admin:
        for round_ in range(3):
            (created,) = admin.create_topics([NewTopic(topic, num_partitions=2)])
            written = [f"round-{round_}-{i}".encode() for i in range(3)]
            with Producer(cluster.bootstrap) as producer:
                for i, value in enumerate(written):
                    producer.send(topic, value, partition=i % 2).result()
            wait_old_incarnation_gone(cluster, topic, created.topic_id)
            kept = sorted(r.value for r in read_all(cluster.bootstrap, topic, "read_uncommitted"))
            assert kept == sorted(written), f"round {round_}: acknowledged writes vanished"
            admin.delete_topics([topic])
