"""Replicated partitions between real storage processes: acks=all, follower copies, ISR shrink and expand, disk loss.

Each test runs its own three-node cluster (storage only) so it may kill nodes. Followers are observed through
their partition files: a follower's log is the leader's bytes at the same offsets (docs/design/replication.md §3).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from typer.testing import CliRunner

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.catalog import CatalogStore
from oncelog.cli import app as cli
from oncelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from oncelog.records import Record, build_batch, iter_batches
from oncelog.rpc import from_error_info, sync_channel
from oncelog.storage.sql import create_engine
from oncelog.testing import LocalCluster
from oncelog.testing.cluster import scheduler_state
from oncelog.testing.reading import read_all

TOPIC = "replicated"
LAG_MS = 6_000  # long enough that a loaded machine does not drop a live follower, short enough to wait out
pytestmark = pytest.mark.timeout(240)


@contextmanager
def replicated_cluster(tmp_path: Path, **env: str) -> Iterator[LocalCluster]:
    """Three storage processes and the topic ``TOPIC`` (one partition, replication factor 3); ``env`` adds
    settings."""
    env = {"ONCELOG_PARTITION_STORAGE_REPLICA_LAG_TIME_MAX_MS": str(LAG_MS), **env}
    with LocalCluster(tmp_path, storage_nodes=3, services=("partition-storage",), env=env) as running:
        admin = cluster_pb.ClusterServiceStub(sync_channel(running.bootstrap))
        spec = cluster_pb.TopicSpec(name=TOPIC, partitions=1, replication_factor=3)
        admin.CreateTopics(cluster_pb.CreateTopicsRequest(topics=[spec]), timeout=30)
        yield running


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with replicated_cluster(tmp_path, ONCELOG_METRICS_LISTEN="127.0.0.1:0") as running:
        yield running


def partition(cluster: LocalCluster, topic: str = TOPIC) -> cluster_pb.PartitionMetadata:
    """The partition's catalog row, asked of any live node."""
    live = next(node.address for node in cluster.nodes if node.alive())
    admin = cluster_pb.ClusterServiceStub(sync_channel(live))
    return admin.Metadata(cluster_pb.MetadataRequest(topics=[topic]), timeout=30).topics[0].partitions[0]


def batch(seq: int, *, pid: int = 4242, n: int = 5) -> bytes:
    records = [Record(key=None, value=b"%d-%d" % (seq, i) + b"." * 200, timestamp=1) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq * n)


def produce(cluster: LocalCluster, leader: str, seq: int, *, pid: int = 4242, topic: str = TOPIC) -> int:
    """Produce with acks=all to the leader; returns the acknowledged base offset."""
    result = produce_result(cluster, leader, seq, pid=pid, topic=topic)
    assert not result.HasField("error"), from_error_info(result.error)
    return result.base_offset


def produce_result(
    cluster: LocalCluster, leader: str, seq: int, *, pid: int = 4242, topic: str = TOPIC
) -> pb.PartitionProduceResult:
    """Produce with acks=all to the leader; the partition's result, error or not."""
    stub = pb.PartitionStorageServiceStub(sync_channel(cluster.node(leader).address))
    tp = common.TopicPartition(topic=topic, partition=0)
    batches = pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=batch(seq, pid=pid))
    request = pb.ProduceRequest(acks=pb.ACKS_ALL, partitions=[batches])
    [result] = stub.Produce(request, timeout=60).results
    return result


def logged_batches(cluster: LocalCluster, node_id: str, topic: str = TOPIC) -> dict[int, bytes]:
    """Base offset -> batch bytes, as stored in the node's files of the partition."""
    directory = cluster.data_dir / node_id / f"{topic}-0"
    data = b"".join(p.read_bytes() for p in sorted(directory.glob("*.log")))
    return {header.base_offset: bytes(view) for header, view in iter_batches(data)}


def wait_for_isr(cluster: LocalCluster, expected: set[str], timeout_s: float = 60, topic: str = TOPIC) -> None:
    """Poll the catalog until the ISR is ``expected`` (the leader changes it with a conditional update)."""
    wait_for(cluster, lambda p: set(p.isr_node_ids) == expected, f"ISR {sorted(expected)}", timeout_s, topic)


def wait_for(
    cluster: LocalCluster,
    condition: Callable[[cluster_pb.PartitionMetadata], bool],
    what: str,
    timeout_s: float = 60,
    topic: str = TOPIC,
) -> cluster_pb.PartitionMetadata:
    """Poll the catalog row until ``condition`` holds (leaders and the controller change it)."""
    deadline = time.monotonic() + timeout_s
    while not condition(meta := partition(cluster, topic)):
        assert time.monotonic() < deadline, f"waited {timeout_s} s for {what}; the partition is {meta}"
        time.sleep(0.1)
    return meta


def test_acks_all_answers_only_once_every_in_sync_replica_has_the_batch(cluster: LocalCluster) -> None:
    meta = partition(cluster)
    leader, followers = meta.leader_node_id, [n for n in meta.replica_node_ids if n != meta.leader_node_id]
    assert set(meta.isr_node_ids) == set(meta.replica_node_ids) and len(followers) == 2
    checked = 0
    for seq in range(15):
        offset = produce(cluster, leader, seq)
        expected = logged_batches(cluster, leader)[offset]
        # no waiting: the acknowledgement says every follower in the ISR has the batch durably (a follower the
        # leader dropped meanwhile, or re-added since, at least had the HW, which is past the batch)
        in_sync = set(partition(cluster).isr_node_ids) - {leader}
        for follower in in_sync:
            assert logged_batches(cluster, follower).get(offset) == expected, (follower, offset)
        checked += len(in_sync)
    assert checked > 0, "no follower was ever in sync"
    wait_for_isr(cluster, set(meta.replica_node_ids))
    produce(cluster, leader, 15)
    final = logged_batches(cluster, leader)
    assert all(logged_batches(cluster, f) == final for f in followers), "byte-identical, same offsets"


def scraped(cluster: LocalCluster, node_id: str, name: str, **labels: str) -> float:
    """The value of a series on the node's Prometheus endpoint (summed over series carrying ``labels``)."""
    address = json.loads(cluster.node(node_id).ready_file.read_text())["metrics_address"]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        body = response.read().decode()
    wanted = [f'{key}="{value}"' for key, value in {"topic": TOPIC, **labels}.items()]
    values = [
        float(line.rsplit(" ", 1)[1])
        for line in body.splitlines()
        if line.startswith(name + "{") and all(label in line for label in wanted)
    ]
    return sum(values)


def described(cluster: LocalCluster, *args: str) -> list[dict[str, object]]:
    """``oncelog partitions describe -o json`` of the test topic."""
    live = next(node.address for node in cluster.nodes if node.alive())
    result = CliRunner().invoke(cli, ["partitions", "describe", TOPIC, "-o", "json", "-b", live, *args])
    assert result.exit_code == 0, result.output
    rows: list[dict[str, object]] = json.loads(result.stdout)
    return rows


def test_dead_follower_leaves_the_isr_and_acks_all_continues_then_it_rejoins(cluster: LocalCluster) -> None:
    """Also what operators see: `oncelog partitions describe` and the leader's replication metrics (under-replicated
    while the ISR is short, ISR shrinks and expands, the lag of each follower)."""
    meta = partition(cluster)
    leader = meta.leader_node_id
    victim, survivor = [n for n in meta.replica_node_ids if n != leader]
    produce(cluster, leader, 0)
    wait_for_isr(cluster, set(meta.replica_node_ids))
    assert scraped(cluster, leader, "oncelog_partition_under_replicated") == 0
    [row] = described(cluster)
    assert (row["leader"], row["status"], len(row["in_sync"])) == (leader, "ok", 3)  # type: ignore[arg-type]
    assert row["replica_lag"] == {leader: 0, victim: 0, survivor: 0}, "leader first, every follower caught up"
    assert described(cluster, "--under-replicated") == []
    cluster.kill(victim)
    offset = produce(cluster, leader, 1)  # completes once the leader drops the dead follower from the ISR
    assert set(partition(cluster).isr_node_ids) == {leader, survivor}
    assert logged_batches(cluster, survivor)[offset] == logged_batches(cluster, leader)[offset]
    assert offset not in logged_batches(cluster, victim)
    assert scraped(cluster, leader, "oncelog_partition_under_replicated") == 1
    assert scraped(cluster, leader, "oncelog_partition_isr_shrinks_total") >= 1
    assert scraped(cluster, leader, "oncelog_partition_replica_lag", replica=victim) > 0, "the dead one lags"
    [row] = described(cluster, "--under-replicated")
    assert (row["status"], row["replicas"], row["in_sync"]) == (
        "UNDER-REPLICATED",
        list(meta.replica_node_ids),
        [n for n in meta.replica_node_ids if n != victim],
    )
    assert row["high_watermark"] == row["last_stable"] == offset + 5, "both past the acknowledged batch"
    assert row["replica_lag"] == {leader: 0, survivor: 0, victim: 5}, "the dead follower lacks the last batch"
    cluster.restart(victim)
    wait_for_isr(cluster, {leader, survivor, victim})
    offset = produce(cluster, leader, 2)
    assert logged_batches(cluster, victim) == logged_batches(cluster, leader)
    assert described(cluster)[0]["replica_lag"] == {leader: 0, survivor: 0, victim: 0}
    assert scraped(cluster, leader, "oncelog_partition_under_replicated") == 0
    assert scraped(cluster, leader, "oncelog_partition_isr_expands_total") >= 1


def test_follower_whose_disk_was_wiped_copies_everything_again(cluster: LocalCluster) -> None:
    """Disk loss of a follower: kill -9, delete its data directory, start it empty; it re-replicates the log."""
    meta = partition(cluster)
    leader = meta.leader_node_id
    victim = next(n for n in meta.replica_node_ids if n != leader)
    acked = [produce(cluster, leader, seq) for seq in range(10)]
    cluster.kill(victim)
    shutil.rmtree(cluster.data_dir / victim)
    cluster.restart(victim)
    acked += [produce(cluster, leader, seq) for seq in range(10, 20)]
    wait_for_isr(cluster, set(meta.replica_node_ids))
    acked.append(produce(cluster, leader, 20))
    copied, original = logged_batches(cluster, victim), logged_batches(cluster, leader)
    assert copied == original and all(offset in copied for offset in acked)


def test_node_whose_disk_was_wiped_leaves_the_isr_before_it_can_be_elected(cluster: LocalCluster) -> None:
    """Disk loss of an in-sync replica, then the loss of every other node: the wiped node restarts first and
    alone. Still in the ISR, it would be elected with an empty log and the others would truncate to it when they
    return, losing every acknowledged record. It leaves the ISR as it starts, so the partition waits offline for
    an in-sync replica (design/replication.md §6, "Disk loss")."""
    meta = partition(cluster)
    leader = meta.leader_node_id
    victim = next(n for n in meta.replica_node_ids if n != leader)
    acked = [produce(cluster, leader, seq) for seq in range(10)]
    assert set(partition(cluster).isr_node_ids) == set(meta.replica_node_ids), "the victim is in sync"
    for node_id in meta.replica_node_ids:
        cluster.kill(node_id)
    shutil.rmtree(cluster.data_dir / victim)
    cluster.restart(victim)
    assert victim not in partition(cluster).isr_node_ids
    offline = wait_for(cluster, lambda p: not p.leader_node_id, "the controller to find no live in-sync replica")
    # it keeps the others as its ISR (fewer if the controller saw one of them die before the last one did)
    assert offline.isr_node_ids and set(offline.isr_node_ids) <= set(meta.replica_node_ids) - {victim}
    for node_id in meta.replica_node_ids:
        if node_id != victim:
            cluster.restart(node_id)
    wait_for_isr(cluster, set(meta.replica_node_ids))
    new_leader = partition(cluster).leader_node_id
    assert new_leader != victim
    acked.append(produce(cluster, new_leader, 10))
    copied, original = logged_batches(cluster, victim), logged_batches(cluster, new_leader)
    assert copied == original and all(offset in original for offset in acked)


def test_divergent_tail_is_cut_at_the_new_leaders_epoch_start_not_kept(cluster: LocalCluster) -> None:
    """design/replication.md §5 case 2: the old leader's unacknowledged tail (epoch 0) is cut where the new leader's
    epoch 1
    starts, and the replicas end byte-identical. Leadership moves by the conditional catalog update an election
    makes (the controller's job, standing in here)."""
    meta = partition(cluster)
    old_leader = meta.leader_node_id
    new_leader, other = [n for n in meta.replica_node_ids if n != old_leader]
    acked = [produce(cluster, old_leader, seq) for seq in range(5)]
    cluster.kill(new_leader)
    cluster.kill(other)
    stub = pb.PartitionStorageServiceStub(sync_channel(cluster.node(old_leader).address))
    tp = common.TopicPartition(topic=TOPIC, partition=0)
    tail = pb.ProduceRequest(
        acks=pb.ACKS_ALL,
        timeout_ms=300,
        partitions=[pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=batch(5, pid=777))],
    )
    [result] = stub.Produce(tail, timeout=30).results
    assert from_error_info(result.error).reason.name == "REQUEST_TIMED_OUT", "appended, never acknowledged"
    diverged_at = max(logged_batches(cluster, old_leader))
    assert diverged_at not in logged_batches(cluster, new_leader)
    cluster.kill(old_leader)
    store = CatalogStore(create_engine(cluster.database_url))
    moved = store.alter_partition(TOPIC, store.partition(TOPIC, 0), leader_node_id=new_leader, isr=[new_leader, other])
    assert moved is not None and moved.leader_epoch == 1
    cluster.restart(new_leader)
    cluster.restart(other)
    # the new leader rebuilt producer 4242's state from the copy: its next sequence continues, as acknowledged
    acked += [produce(cluster, new_leader, seq) for seq in range(5, 10)]
    assert logged_batches(cluster, new_leader)[diverged_at] != logged_batches(cluster, old_leader)[diverged_at]
    cluster.restart(old_leader)
    wait_for_isr(cluster, set(meta.replica_node_ids))
    acked.append(produce(cluster, new_leader, 10))
    for node in (old_leader, other):
        assert logged_batches(cluster, node) == logged_batches(cluster, new_leader), node


def test_acked_record_survives_leader_kill_when_follower_restarts_first(cluster: LocalCluster) -> None:
    """design/replication.md §5 case 1 (HW lag): with acks=all, the leader is killed right after the acknowledgements,
    the
    follower too, and the follower restarts first. It must not cut its log to its (lagging) HW: it is elected and
    serves every acknowledged record."""
    admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    spec = cluster_pb.TopicSpec(name="case1", partitions=1, replication_factor=2)
    admin.CreateTopics(cluster_pb.CreateTopicsRequest(topics=[spec]), timeout=30)
    meta = partition(cluster, "case1")
    leader, follower = meta.leader_node_id, next(n for n in meta.replica_node_ids if n != meta.leader_node_id)
    acked = [produce(cluster, leader, seq, topic="case1") for seq in range(5)]
    # the premise of the case: the follower was in sync when the records were acknowledged
    assert set(partition(cluster, "case1").isr_node_ids) == {leader, follower}
    cluster.kill(leader)
    cluster.kill(follower)
    cluster.restart(follower)
    elected = wait_for(cluster, lambda p: p.leader_node_id == follower, f"{follower} elected", topic="case1")
    # one election, or two if the controller saw both down first (offline, then the returning ISR member)
    assert elected.leader_epoch > meta.leader_epoch and list(elected.isr_node_ids) == [follower]
    stub = pb.PartitionStorageServiceStub(sync_channel(cluster.node(follower).address))
    tp = common.TopicPartition(topic="case1", partition=0)
    fetch = pb.FetchRequest(
        isolation_level=pb.ISOLATION_LEVEL_READ_COMMITTED,
        partitions=[pb.FetchPartition(topic_partition=tp, fetch_offset=0, max_bytes=1 << 20, leader_epoch=-1)],
    )
    [result] = stub.Fetch(fetch, timeout=30).results
    assert not result.HasField("error"), from_error_info(result.error)
    served = {header.base_offset for header, _ in iter_batches(result.records)}
    assert set(acked) <= served, f"acknowledged {acked}, the new leader serves {sorted(served)}"
    # the old leader comes back as a follower of the new epoch and converges
    cluster.restart(leader)
    wait_for_isr(cluster, {leader, follower}, topic="case1")
    produce(cluster, follower, 0, pid=99, topic="case1")
    assert logged_batches(cluster, leader, "case1") == logged_batches(cluster, follower, "case1")


def test_unclean_election_off_the_partition_waits_offline_for_its_last_in_sync_replica(cluster: LocalCluster) -> None:
    """Issue 15 (unclean election off, the default): the followers die one after the other, so the leader is the
    last in-sync replica and acknowledges alone; then it dies too. The partition goes OFFLINE (shown by `oncelog
    partitions describe`) and stays so while a stale replica, which lacks acknowledged batches, is live and the
    controller runs rounds: the stale replica is never elected and serves nothing. When the last in-sync replica
    returns it is elected and every acknowledged batch is there."""
    meta = partition(cluster)
    leader = meta.leader_node_id
    stale, other = [n for n in meta.replica_node_ids if n != leader]
    acked = [produce(cluster, leader, 0)]
    cluster.kill(stale)
    acked.append(produce(cluster, leader, 1))  # acknowledged once the leader dropped the dead follower
    cluster.kill(other)
    acked.append(produce(cluster, leader, 2))
    wait_for_isr(cluster, {leader})
    assert acked[-1] not in logged_batches(cluster, stale), "the premise: the stale replica lacks acknowledged data"
    cluster.kill(leader)
    cluster.restart(stale)
    offline = wait_for(cluster, lambda p: not p.leader_node_id, "the partition offline")
    assert list(offline.isr_node_ids) == [leader], "the ISR keeps the last in-sync replica"
    # two controller rounds (lease renewals) that saw the stale replica live and declined to elect it
    store = CatalogStore(create_engine(cluster.database_url))
    deadline = time.monotonic() + 60
    while stale not in {n.node_id for n in store.list_nodes(int(time.time() * 1000))}:
        assert time.monotonic() < deadline, f"{stale} did not register"
        time.sleep(0.05)
    renewals: set[int] = set()
    while len(renewals) < 3:
        lease = store.shard_lease("controller", 0)
        assert lease is not None and time.monotonic() < deadline, "no controller rounds"
        renewals.add(lease.lease_expires_at_ms)
        time.sleep(0.05)
    still = partition(cluster)
    assert (still.leader_node_id, still.leader_epoch) == ("", offline.leader_epoch), "no unclean election"
    [row] = described(cluster)
    assert row["status"] == "OFFLINE"
    refused = from_error_info(produce_result(cluster, stale, 3).error)
    assert refused.reason.name == "NOT_LEADER", refused
    cluster.restart(leader)
    back = wait_for(cluster, lambda p: p.leader_node_id == leader, f"{leader} elected again")
    assert back.leader_epoch > offline.leader_epoch
    assert set(acked) <= set(logged_batches(cluster, leader))


def test_below_min_insync_replicas_nothing_is_acknowledged_and_producing_resumes(cluster: LocalCluster) -> None:
    """min_insync_replicas=2 with two of three replicas killed: NOT_ENOUGH_REPLICAS (retriable), nothing
    acknowledged is lost, and the same batch is acknowledged once one replica is back."""
    admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    configs = {"min_insync_replicas": "2"}
    spec = cluster_pb.TopicSpec(name="guarded", partitions=1, replication_factor=3, configs=configs)
    admin.CreateTopics(cluster_pb.CreateTopicsRequest(topics=[spec]), timeout=30)
    meta = partition(cluster, "guarded")
    leader = meta.leader_node_id
    back, gone = [n for n in meta.replica_node_ids if n != leader]
    first = produce(cluster, leader, 0, topic="guarded")
    cluster.kill(back)
    cluster.kill(gone)
    # written, then refused once the ISR shrank below 2 (or refused outright if it had already shrunk)
    refused = from_error_info(produce_result(cluster, leader, 1, topic="guarded").error)
    assert refused.reason.name == "NOT_ENOUGH_REPLICAS" and refused.retriable, refused
    assert list(partition(cluster, "guarded").isr_node_ids) == [leader]
    again = from_error_info(produce_result(cluster, leader, 1, topic="guarded").error)
    assert again.reason.name == "NOT_ENOUGH_REPLICAS" and again.definite, "refused before writing"
    cluster.restart(back)
    wait_for_isr(cluster, {leader, back}, topic="guarded")
    retried = produce(cluster, leader, 1, topic="guarded")  # the same batch: written once, now acknowledged
    original = logged_batches(cluster, leader, "guarded")
    assert first in original and retried in original and len(original) == 2
    assert logged_batches(cluster, back, "guarded") == original


def test_sigterm_hands_leadership_over_while_the_node_still_drains(tmp_path: Path) -> None:
    """Controlled shutdown (design/replication.md §6): SIGTERM to a leader moves the leadership to an in-sync
    follower and takes the leader out of the ISR at the start of its drain, while it still answers (here a 5 s
    drain): the catalog names the new leader before the process exits (nothing waits for a lease to lapse), a
    produce sent to the draining node is redirected with NOT_LEADER, and every acknowledged record is on the new
    leader."""
    with replicated_cluster(tmp_path, ONCELOG_PARTITION_STORAGE_DRAIN_DELAY_S="5") as cluster:
        meta = partition(cluster)
        leader = meta.leader_node_id
        acked = [produce(cluster, leader, seq) for seq in range(3)]
        wait_for_isr(cluster, set(meta.replica_node_ids))
        process = cluster.node(leader).process
        assert process is not None
        process.send_signal(signal.SIGTERM)
        after = wait_for(cluster, lambda p: p.leader_node_id not in ("", leader), "a new leader")
        redirected = from_error_info(produce_result(cluster, leader, 3).error)
        assert process.poll() is None, "handed over while the old leader still drains"
        assert leader not in after.isr_node_ids and after.leader_epoch == meta.leader_epoch + 1
        assert redirected.reason.name == "NOT_LEADER", redirected
        assert redirected.metadata.get("leader_node_id") == after.leader_node_id
        assert process.wait(timeout=60) == 0
        acked.append(produce(cluster, after.leader_node_id, 3))
        assert set(acked) <= set(logged_batches(cluster, after.leader_node_id))


def process_state(cluster: LocalCluster, node_id: str) -> str:
    """The process's scheduler state from /proc (``T``: stopped by a signal)."""
    process = cluster.node(node_id).process
    assert process is not None
    return scheduler_state(process.pid)


def test_zombie_leader_paused_past_its_lease_acknowledges_nothing_after_it_resumes(tmp_path: Path) -> None:
    """design/replication.md §9: a leader stopped (SIGSTOP) until the controller replaced it finds, when it
    resumes, that its own lease may have lapsed: it re-reads the catalog, steps down and fails the produce that
    waited for it with NOT_LEADER / FENCED_LEADER_EPOCH, writing nothing. Nothing acknowledged is lost and the
    replicas end byte-identical."""
    with replicated_cluster(tmp_path, ONCELOG_PARTITION_STORAGE_NODE_LEASE_MS="3000") as cluster:
        meta = partition(cluster)
        zombie = meta.leader_node_id
        acked = [produce(cluster, zombie, seq) for seq in range(3)]
        wait_for_isr(cluster, set(meta.replica_node_ids))
        # a connection to the old leader opened while it ran, as a client that knew it would hold
        stub = pb.PartitionStorageServiceStub(sync_channel(cluster.node(zombie).address))
        tp = common.TopicPartition(topic=TOPIC, partition=0)

        def request(seq: int) -> pb.ProduceRequest:
            batches = pb.PartitionBatches(topic_partition=tp, leader_epoch=meta.leader_epoch, records=batch(seq))
            return pb.ProduceRequest(acks=pb.ACKS_ALL, partitions=[batches])

        [warm] = stub.Produce(request(3), timeout=60).results
        assert not warm.HasField("error"), from_error_info(warm.error)
        acked.append(warm.base_offset)

        process = cluster.node(zombie).process
        assert process is not None
        cluster.freeze([process.pid])  # never while it holds the catalog's write lock: the election needs it
        elected = wait_for(
            cluster,
            lambda p: p.leader_epoch > meta.leader_epoch and p.leader_node_id not in ("", zombie),
            "a new leader elected while the old one is stopped",
        )
        assert process_state(cluster, zombie) == "T", "the old leader stayed stopped through the election"
        parked = stub.Produce.future(request(4), timeout=60)  # queued at the stopped process
        cluster.thaw([process.pid])
        [result] = parked.result().results
        assert result.HasField("error"), f"the zombie acknowledged offset {result.base_offset} after resuming"
        refused = from_error_info(result.error)
        assert refused.reason.name in ("NOT_LEADER", "FENCED_LEADER_EPOCH"), refused
        assert b"4-0" not in b"".join(logged_batches(cluster, zombie).values()), "the zombie wrote the parked batch"

        # nothing acknowledged is lost; the old leader follows the new epoch and converges
        new_leader = elected.leader_node_id
        acked.append(produce(cluster, new_leader, 4))
        wait_for_isr(cluster, set(meta.replica_node_ids))
        acked.append(produce(cluster, new_leader, 5))
        logs = {node: logged_batches(cluster, node) for node in meta.replica_node_ids}
        assert set(acked) <= set(logs[new_leader]), (
            f"acknowledged {acked}, the new leader holds {sorted(logs[new_leader])}"
        )
        assert all(log == logs[new_leader] for log in logs.values()), {n: sorted(b) for n, b in logs.items()}


COPIER = Path(__file__).resolve().parents[2] / "examples" / "consume_transform_produce.py"


def committed_total(log: Path) -> int:
    """Records the copier committed so far (it prints ``{"committed": n, "total": t}`` per transaction)."""
    totals = [json.loads(line).get("total", 0) for line in log.read_text().splitlines() if line.startswith("{")]
    return max(totals, default=0)


@pytest.mark.parametrize("disk", ["kept", "lost"])
def test_leader_killed_during_a_transactional_copy_the_copy_ends_exactly_once(tmp_path: Path, disk: str) -> None:
    """Issue 15 (transactions over replicas, disk loss): a transactional copier (read_committed input, output and
    input offsets in one transaction) runs between two topics of replication factor 3; the node leading the output
    is killed -9 mid-copy. A new leader is elected, the copier's produces, commits and the coordinator's markers
    follow it, and the output holds every transformed input exactly once with the group's offsets at the end. The
    killed node then returns, with its data directory (``kept``) or with an empty one (``lost``): it rejoins the
    ISR and every replica of the output ends byte-identical."""
    env = {"ONCELOG_PARTITION_STORAGE_REPLICA_LAG_TIME_MAX_MS": str(LAG_MS)}
    with LocalCluster(tmp_path / "cluster", storage_nodes=3, env=env) as cluster:
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(t, num_partitions=1, replication_factor=3) for t in ("copy-in", "copy-out")])
        inputs = [b"in-%04d" % i for i in range(600)]
        with Producer(cluster.bootstrap) as producer:
            for value in inputs:
                producer.send("copy-in", value)
        before = partition(cluster, "copy-out")
        victim = before.leader_node_id
        log = tmp_path / "copier.log"
        with log.open("ab") as out:
            copier = subprocess.Popen(
                [
                    *(sys.executable, str(COPIER), "copy-in", "copy-out", "--bootstrap", cluster.bootstrap),
                    *("--group", "copy", "--transactional-id", "copy-0", "--batch-size", "50"),
                    *("--max-rate", "200", "--idle-exit", "5"),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + 60
            while committed_total(log) < 100:
                assert copier.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            cluster.kill(victim)
            at_kill = committed_total(log)
            assert copier.poll() is None and at_kill < len(inputs), "the kill landed while the copy ran"
            after = wait_for(
                cluster, lambda p: p.leader_node_id not in ("", victim), "a new leader of copy-out", topic="copy-out"
            )
            assert after.leader_epoch > before.leader_epoch
            assert copier.wait(timeout=180) == 0, log.read_text()
        finally:
            if copier.poll() is None:
                copier.kill()
                copier.wait()
        assert committed_total(log) == len(inputs) > at_kill, "transactions committed after the kill"
        output = [r.value or b"" for r in read_all(cluster.bootstrap, "copy-out")]
        duplicated = [v for v, n in Counter(output).items() if n > 1]
        assert not duplicated, f"{len(duplicated)} output record(s) twice, e.g. {duplicated[:3]}"
        assert sorted(output) == [v.upper() for v in inputs], "every input copied exactly once"
        with Consumer(cluster.bootstrap, group_id="copy") as consumer:
            tp = TopicPartition("copy-in", 0)
            committed = consumer.committed([tp])[tp]
            assert committed is not None and committed.offset == len(inputs), "input offsets committed with the output"
        if disk == "lost":
            shutil.rmtree(cluster.data_dir / victim)
        cluster.restart(victim)
        wait_for_isr(cluster, set(after.replica_node_ids), timeout_s=120, topic="copy-out")
        logs = {node: logged_batches(cluster, node, "copy-out") for node in after.replica_node_ids}
        leader_log = logs[after.leader_node_id]
        assert all(replica == leader_log for replica in logs.values()), "replicas byte-identical after quiescence"


# ------------------------------------------------------------------------------------------------ property test

PROPERTY_SEEDS = [int(s) for s in os.environ.get("ONCELOG_REPLICATION_PROPERTY_SEEDS", "1127").split(",")]
PROPERTY_FAULTS = int(os.environ.get("ONCELOG_REPLICATION_PROPERTY_FAULTS", "4"))


class LeaderView:
    """The partition's leader as the catalog names it, re-read after a failed call (thread-safe enough: a stale
    read only costs a retry)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.address = ""

    def stub(self) -> pb.PartitionStorageServiceStub:
        if not self.address:
            meta = partition(self.cluster)
            live = {node.node_id: node.address for node in self.cluster.nodes if node.alive()}
            self.address = live.get(meta.leader_node_id, "")
            if not self.address:
                raise ConnectionError(f"no live leader yet ({meta.leader_node_id or 'offline'})")
        return pb.PartitionStorageServiceStub(sync_channel(self.address))

    def failed(self) -> None:
        self.address = ""


def _until_done(
    view: LeaderView, stop: threading.Event, call: Callable[[pb.PartitionStorageServiceStub], object]
) -> Any:
    """Retry ``call`` on the current leader until it returns something other than None (the answer), re-reading the
    leader after each failure; None once ``stop`` is set and the call keeps failing for 60 s."""
    deadline = None
    while True:
        try:
            answer = call(view.stub())
            if answer is not None:
                return answer
        except (grpc.RpcError, ConnectionError):
            pass
        view.failed()
        if stop.is_set():
            deadline = deadline or time.monotonic() + 60
            if time.monotonic() > deadline:
                return None
        time.sleep(0.05)  # pacing of the retry loop against a partition that is electing, not a race


class TransactionWriter(threading.Thread):
    """Writes transactions of 1-3 batches, each by a fresh producer id, then commits or aborts them (the choices
    drawn from the seed), retrying every call on the current leader until it is acknowledged: a retried batch is
    deduplicated, a repeated marker acknowledged without a second write. Records what was acknowledged."""

    def __init__(self, cluster: LocalCluster, seed: int, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.view = LeaderView(cluster)
        self.rng = random.Random(seed)
        self.stop_event = stop
        self.acked: list[tuple[int, int, int]] = []  # (base offset, producer id, base sequence)
        self.ended: dict[int, bool] = {}  # producer id -> committed
        self.progress = threading.Condition()
        self.error: BaseException | None = None

    def transactions(self) -> int:
        with self.progress:
            return len(self.ended)

    def wait_for(self, count: int, timeout_s: float = 60) -> None:
        with self.progress:
            assert self.progress.wait_for(lambda: len(self.ended) >= count or self.error, timeout_s), (
                f"waited {timeout_s} s for {count} transactions; {len(self.ended)} ended"
            )
        assert self.error is None, self.error

    def run(self) -> None:
        try:
            pid = 50_000
            tp = common.TopicPartition(topic=TOPIC, partition=0)
            while not self.stop_event.is_set():
                pid += 1
                for seq in range(self.rng.randint(1, 3)):
                    records = [Record(key=None, value=b"%d-%d-%d" % (pid, seq, i), timestamp=1) for i in range(3)]
                    data = build_batch(
                        records, producer_id=pid, producer_epoch=0, base_sequence=seq * 3, transactional=True
                    )
                    request = pb.ProduceRequest(
                        acks=pb.ACKS_ALL,
                        timeout_ms=5_000,
                        partitions=[pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=data)],
                    )

                    def send(stub: pb.PartitionStorageServiceStub, request: pb.ProduceRequest = request) -> int | None:
                        [result] = stub.Produce(request, timeout=10).results
                        return None if result.HasField("error") else result.base_offset

                    offset = _until_done(self.view, threading.Event(), send)
                    self.acked.append((offset, pid, seq * 3))
                commit = self.rng.random() < 0.7
                marker = common.TxnMarker(
                    producer=common.ProducerIdentity(producer_id=pid, producer_epoch=1),
                    coordinator_epoch=1,
                    result=common.TRANSACTION_RESULT_COMMIT if commit else common.TRANSACTION_RESULT_ABORT,
                    partitions=[tp],
                )

                def end(stub: pb.PartitionStorageServiceStub, marker: common.TxnMarker = marker) -> bool | None:
                    response = stub.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=[marker]), timeout=10)
                    [outcome] = response.results[0].partition_errors
                    return None if outcome.HasField("error") else True

                _until_done(self.view, threading.Event(), end)
                with self.progress:
                    self.ended[pid] = commit
                    self.progress.notify_all()
        except BaseException as err:  # reported by wait_for and the test's final check
            self.error = err
            with self.progress:
                self.progress.notify_all()


class BoundChecker(threading.Thread):
    """Fetches from the leader without pause, alternating read_committed and read_uncommitted, and notes every
    batch returned at or above the bound the answer itself names (the LSO, the high watermark), and what was read."""

    def __init__(self, cluster: LocalCluster, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.view = LeaderView(cluster)
        self.stop_event = stop
        self.read: dict[int, bytes] = {}  # base offset -> batch bytes
        self.violations: list[str] = []
        self.answers = 0

    def run(self) -> None:
        tp = common.TopicPartition(topic=TOPIC, partition=0)
        positions = {pb.ISOLATION_LEVEL_READ_COMMITTED: 0, pb.ISOLATION_LEVEL_READ_UNCOMMITTED: 0}
        while not self.stop_event.is_set():
            for isolation, position in positions.items():
                request = pb.FetchRequest(
                    isolation_level=isolation,
                    max_wait_ms=200,
                    min_bytes=1,
                    partitions=[pb.FetchPartition(topic_partition=tp, fetch_offset=position, max_bytes=1 << 16)],
                )
                try:
                    [result] = self.view.stub().Fetch(request, timeout=10).results
                except (grpc.RpcError, ConnectionError):
                    self.view.failed()
                    time.sleep(0.05)  # pacing while the partition is electing
                    continue
                if result.HasField("error"):
                    self.view.failed()
                    continue
                self.answers += 1
                committed = isolation == pb.ISOLATION_LEVEL_READ_COMMITTED
                bound = result.last_stable_offset if committed else result.high_watermark
                if result.last_stable_offset > result.high_watermark:
                    self.violations.append(f"LSO {result.last_stable_offset} above HW {result.high_watermark}")
                for header, view in iter_batches(result.records):
                    if header.last_offset >= bound:
                        kind = "read_committed" if committed else "read_uncommitted"
                        self.violations.append(
                            f"{kind} returned [{header.base_offset}, {header.last_offset}] at bound {bound}"
                        )
                    self.read[header.base_offset] = bytes(view)
                    positions[isolation] = header.last_offset + 1


@pytest.mark.parametrize("seed", PROPERTY_SEEDS)
def test_property_read_committed_never_above_the_hw_and_in_sync_replicas_end_identical(
    tmp_path: Path, seed: int
) -> None:
    """Issue 15's property, over real processes in a seeded run: transactions are written and read without pause
    while nodes are killed -9 (the leader first, then drawn from the seed), some started again with a wiped disk.
    No read_committed (or read_uncommitted) answer holds a batch at or above its own LSO (HW); no batch that was
    read or acknowledged is later missing or changed; after quiescence every replica of the ISR is byte-identical
    below the HW. More seeds and faults: ONCELOG_REPLICATION_PROPERTY_SEEDS=1,2,3
    ONCELOG_REPLICATION_PROPERTY_FAULTS=8."""
    rng = random.Random(seed)
    with replicated_cluster(tmp_path) as cluster:
        stop = threading.Event()
        writer, checker = TransactionWriter(cluster, seed, stop), BoundChecker(cluster, stop)
        writer.start()
        checker.start()
        faults: list[str] = []
        try:
            nodes = [node.node_id for node in cluster.nodes]
            for step in range(PROPERTY_FAULTS):
                wait_for_isr(cluster, set(nodes))  # each fault lands on a healthy partition, so none goes offline
                writer.wait_for(writer.transactions() + rng.randint(2, 6))
                meta = partition(cluster)
                victim = meta.leader_node_id if step == 0 else rng.choice(nodes)
                wipe = rng.random() < 0.3
                cluster.kill(victim)
                assert not cluster.node(victim).alive()
                faults.append(
                    f"kill -9 {victim}{' (leader)' if victim == meta.leader_node_id else ''}"
                    f"{' + wiped disk' if wipe else ''}"
                )
                if wipe:
                    shutil.rmtree(cluster.data_dir / victim)
                writer.wait_for(writer.transactions() + 2)  # the survivors keep acknowledging without it
                cluster.restart(victim)
            writer.wait_for(writer.transactions() + 2)
        finally:
            stop.set()
            writer.join(120)
            checker.join(60)
        assert writer.error is None, writer.error
        assert not writer.is_alive() and not checker.is_alive()
        assert partition(cluster).leader_epoch > 0, f"the leader kill moved leadership ({faults})"
        wait_for_isr(cluster, set(nodes))
        meta = partition(cluster)
        stub = pb.PartitionStorageServiceStub(sync_channel(cluster.node(meta.leader_node_id).address))
        tp = common.TopicPartition(topic=TOPIC, partition=0)
        listed = pb.ListOffsetsRequest(
            partitions=[pb.ListOffsetsPartition(topic_partition=tp, spec=pb.OFFSET_SPEC_LATEST)],
            isolation_level=pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
        )
        high_watermark = stub.ListOffsets(listed, timeout=30).results[0].offset

        def below_hw(node_id: str) -> dict[int, bytes]:
            return {
                offset: data for offset, data in logged_batches(cluster, node_id).items() if offset < high_watermark
            }

        deadline = time.monotonic() + 60
        while len({tuple(below_hw(n).items()) for n in nodes}) > 1:  # followers finish copying the last batches
            assert time.monotonic() < deadline, f"replicas still differ below HW {high_watermark} after 60 s ({faults})"
            time.sleep(0.2)
        final = below_hw(meta.leader_node_id)
        assert checker.answers > 0 and checker.read, "the reader read during the faults"
        assert checker.violations == [], f"seed {seed}, faults {faults}: {checker.violations[:5]}"
        lost = {offset for offset, data in checker.read.items() if final.get(offset) != data}
        assert not lost, f"seed {seed}, faults {faults}: batches read and later gone or changed at {sorted(lost)}"
        headers = {h.base_offset: (h.producer_id, h.base_sequence) for h, _ in iter_batches(b"".join(final.values()))}
        missing = [(o, p, s) for o, p, s in writer.acked if headers.get(o) != (p, s)]
        assert not missing, f"seed {seed}, faults {faults}: acknowledged batches lost {missing[:5]}"
        assert len(writer.acked) >= PROPERTY_FAULTS * 4 and len(final) >= len(writer.acked)


def test_reassign_moves_a_partition_off_its_leaders_node_and_loses_no_acknowledged_write(tmp_path: Path) -> None:
    """Decommissioning a node (`oncelog partitions reassign`): four storage nodes, a partition on three of them;
    its leader's node is replaced by the spare one. The spare copies the log and joins the ISR before the old node
    is dropped, leadership moves to a listed in-sync replica, the old node can then die without holding up an
    acks=all write, and every acknowledged batch is on the new node, byte-identical to the new leader's log."""
    env = {"ONCELOG_PARTITION_STORAGE_REPLICA_LAG_TIME_MAX_MS": str(LAG_MS)}
    with LocalCluster(tmp_path, storage_nodes=4, services=("partition-storage",), env=env) as cluster:
        admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
        spec = cluster_pb.TopicSpec(name="moved", partitions=1, replication_factor=3)
        admin.CreateTopics(cluster_pb.CreateTopicsRequest(topics=[spec]), timeout=30)
        before = partition(cluster, "moved")
        leaving = before.leader_node_id
        [spare] = [node.node_id for node in cluster.nodes if node.node_id not in before.replica_node_ids]
        acked = [produce(cluster, leaving, seq, topic="moved") for seq in range(10)]
        target = [n for n in before.replica_node_ids if n != leaving] + [spare]

        def reassign(*replicas: str) -> Any:
            live = next(node.address for node in cluster.nodes if node.alive())
            return CliRunner().invoke(
                cli, ["partitions", "reassign", "moved", "0", "--replicas", ",".join(replicas), "-b", live]
            )

        refused = reassign(target[0], "storage-node-that-does-not-exist")
        assert (
            refused.exit_code == 1 and "storage-node-that-does-not-exist is not a live storage node" in refused.output
        )
        assert list(partition(cluster, "moved").replica_node_ids) == list(before.replica_node_ids), "nothing changed"
        moved = reassign(*target)
        assert moved.exit_code == 0, moved.output
        after = partition(cluster, "moved")
        assert (list(after.replica_node_ids), set(after.isr_node_ids)) == (target, set(target))
        assert after.leader_node_id in target and after.leader_epoch > before.leader_epoch
        acked += [produce(cluster, after.leader_node_id, seq, topic="moved") for seq in range(10, 15)]
        cluster.kill(leaving)  # decommissioned: no longer a replica, so no acks=all write waits for it
        acked.append(produce(cluster, after.leader_node_id, 15, topic="moved"))
        copied = logged_batches(cluster, spare, "moved")
        assert all(offset in copied for offset in acked), f"acknowledged {acked}, the new node has {sorted(copied)}"
        deadline = time.monotonic() + 30
        while copied != logged_batches(cluster, after.leader_node_id, "moved"):  # its last fetch may be in flight
            assert time.monotonic() < deadline, "the new replica never matched the leader's log"
            time.sleep(0.1)
            copied = logged_batches(cluster, spare, "moved")


def test_acks_leader_answers_without_the_followers_while_acks_all_waits_for_them(tmp_path: Path) -> None:
    """acks=1 (Kafka parity, lossy): with both followers dead but still in the ISR (a long lag time keeps them
    there), a leader-only produce is acknowledged by the leader alone; an acks=all one times out waiting for them."""
    with replicated_cluster(tmp_path, ONCELOG_PARTITION_STORAGE_REPLICA_LAG_TIME_MAX_MS="600000") as cluster:
        meta = partition(cluster)
        leader = meta.leader_node_id
        produce(cluster, leader, 0)
        for follower in meta.replica_node_ids:
            if follower != leader:
                cluster.kill(follower)
        stub = pb.PartitionStorageServiceStub(sync_channel(cluster.node(leader).address))
        tp = common.TopicPartition(topic=TOPIC, partition=0)

        def send(seq: int, acks: pb.Acks.ValueType) -> pb.PartitionProduceResult:
            batches = pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=batch(seq))
            request = pb.ProduceRequest(acks=acks, timeout_ms=1_000, partitions=[batches])
            [result] = stub.Produce(request, timeout=30).results
            return result

        waited = send(1, pb.ACKS_ALL)
        assert from_error_info(waited.error).reason.name == "REQUEST_TIMED_OUT", "acks=all waits for the ISR"
        answered = send(2, pb.ACKS_LEADER)
        assert not answered.HasField("error"), from_error_info(answered.error)
        assert answered.base_offset in logged_batches(cluster, leader)
        assert set(partition(cluster).isr_node_ids) == set(meta.replica_node_ids), "the dead followers stayed in sync"
