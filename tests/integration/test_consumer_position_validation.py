"""A consumer checks its position after a leader change (KIP-320, design/replication.md §10), against real storage
processes.

An unclean leader change can cut records a consumer has already read: the new leader's log ends earlier, and it
then writes new records at those offsets. A consumer that kept fetching from its old position would skip the new
records below that position; one that validates asks the new leader where the epoch of its last batch ends and goes
back there.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.catalog import CatalogStore
from oncelog.client import Consumer, TopicPartition
from oncelog.records import Record, build_batch, decode_records, iter_batches
from oncelog.rpc import from_error_info, sync_channel
from oncelog.storage.sql import create_engine
from oncelog.testing import LocalCluster

TOPIC = "validated"
TP = TopicPartition(TOPIC, 0)
pytestmark = pytest.mark.timeout(240)


def partition(cluster: LocalCluster) -> cluster_pb.PartitionMetadata:
    """The partition's catalog row, asked of any live node."""
    live = next(node.address for node in cluster.nodes if node.alive())
    admin = cluster_pb.ClusterServiceStub(sync_channel(live))
    return admin.Metadata(cluster_pb.MetadataRequest(topics=[TOPIC]), timeout=30).topics[0].partitions[0]


def produce(cluster: LocalCluster, leader: str, seq: int, *, pid: int) -> int:
    """One batch of five records with acks=all to ``leader``; returns its acknowledged base offset."""
    records = [Record(key=None, value=b"p%d-%d-%d" % (pid, seq, i), timestamp=1) for i in range(5)]
    raw = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq * 5)
    batches = pb.PartitionBatches(
        topic_partition=common.TopicPartition(topic=TOPIC, partition=0), leader_epoch=-1, records=raw
    )
    stub = pb.PartitionStorageServiceStub(sync_channel(cluster.node(leader).address))
    [result] = stub.Produce(pb.ProduceRequest(acks=pb.ACKS_ALL, partitions=[batches]), timeout=60).results
    assert not result.HasField("error"), (
        f"{from_error_info(result.error)}\n-- the leader's log:\n{cluster.log_tail(cluster.node(leader), 60)}"
    )
    return result.base_offset


def stored_values(cluster: LocalCluster, node_id: str) -> dict[int, bytes]:
    """Offset -> value of every record in the node's files of the partition."""
    data = b"".join(p.read_bytes() for p in sorted((cluster.data_dir / node_id / f"{TOPIC}-0").glob("*.log")))
    return {r.offset: r.value for _, batch in iter_batches(data) for r in decode_records(batch)}  # type: ignore[misc]


def poll_until(
    consumer: Consumer, done: Callable[[list[tuple[int, bytes]]], bool], what: str
) -> list[tuple[int, bytes]]:
    """Poll, collecting (offset, value), until ``done`` says the collection is complete."""
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 90
    while not done(got):
        assert time.monotonic() < deadline, f"waited 90 s for {what}; read {got}"
        got += [(r.offset, r.value) for r in consumer.poll(timeout_ms=500)]  # type: ignore[misc]
    return got


def test_a_consumer_whose_read_tail_was_truncated_by_a_leader_change_reads_the_new_leaders_records_once(
    tmp_path: Path, cluster_database: Callable[[], str]
) -> None:
    env = {"ONCELOG_PARTITION_STORAGE_REPLICA_LAG_TIME_MAX_MS": "2000"}
    with LocalCluster(
        tmp_path, storage_nodes=3, services=("partition-storage",), database_url=cluster_database(), env=env
    ) as cluster:
        admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
        spec = cluster_pb.TopicSpec(name=TOPIC, partitions=1, replication_factor=3)
        admin.CreateTopics(cluster_pb.CreateTopicsRequest(topics=[spec]), timeout=30)
        meta = partition(cluster)
        old_leader = meta.leader_node_id
        new_leader, other = [n for n in meta.replica_node_ids if n != old_leader]
        for seq in range(2):  # copied to every replica before the acknowledgement
            produce(cluster, old_leader, seq, pid=4242)
        cluster.kill(new_leader)
        cluster.kill(other)
        for seq in range(2, 5):  # acknowledged by the old leader alone once it dropped the dead followers
            produce(cluster, old_leader, seq, pid=4242)

        consumer = Consumer([n.address for n in cluster.nodes], client_id="validating")
        try:
            consumer.assign([TP])
            before = poll_until(consumer, lambda got: len(got) >= 25, "the old leader's 25 records")
            assert [offset for offset, _ in before] == list(range(25))
            assert consumer.position(TP) == 25

            # an unclean election: the old leader dies and a replica that lacks its tail leads epoch 1
            cluster.kill(old_leader)
            store = CatalogStore(create_engine(cluster.database_url))
            moved = store.alter_partition(
                TOPIC, store.partition(TOPIC, 0), leader_node_id=new_leader, isr=[new_leader, other]
            )
            assert moved is not None and moved.leader_epoch == meta.leader_epoch + 1
            cluster.restart(new_leader, same_address=True)  # the consumer knows the nodes by their addresses
            cluster.restart(other, same_address=True)
            diverged_at = max(stored_values(cluster, new_leader)) + 1
            assert diverged_at < 25, "the premise: the new leader lacks part of what the consumer read"
            for seq in range(6):  # the new leader writes over the offsets the consumer read from the old one
                produce(cluster, new_leader, seq, pid=99)
            log = stored_values(cluster, new_leader)
            end = max(log) + 1
            assert end > 25 and log[diverged_at] != dict(before)[diverged_at], "the truncated range was rewritten"

            after = poll_until(consumer, lambda got: bool(got) and got[-1][0] == end - 1, "the new leader's end")
            assert after == [(offset, log[offset]) for offset in range(diverged_at, end)], (
                "every record the new leader holds from the divergence point, once, in order"
            )
            assert consumer.position(TP) == end
        finally:
            consumer.close()
