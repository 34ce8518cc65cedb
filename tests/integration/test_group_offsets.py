"""group-offsets as real processes: transactional offsets, markers, fencing, crashes and shard failover.

Most scenarios share one small cluster (partition-storage for topic metadata, one group-offsets process) and
use their own group ids. Crash, failover and cache scenarios start their own cluster, on SQLite and PostgreSQL
where the SQL matters.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.offsets import v1 as pb
from oncelog.errors import OncelogError, Reason
from oncelog.group_offsets.app import cache_key_prefix
from oncelog.rpc import from_error_info, from_rpc_error, sync_channel
from oncelog.testing import LocalCluster

SERVICES = ("partition-storage", "group-offsets")
TOPICS = {"orders": 2, "refunds": 1}
PID = 7001
TXN_ID = "enricher-1"


# ---------------------------------------------------------------------------------------------- helpers


def create_topics(cluster: LocalCluster) -> None:
    stub = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    stub.CreateTopics(
        cluster_pb.CreateTopicsRequest(
            topics=[cluster_pb.TopicSpec(name=name, partitions=count) for name, count in TOPICS.items()]
        )
    )


def stub_for(address: str) -> pb.GroupOffsetsServiceStub:
    return pb.GroupOffsetsServiceStub(sync_channel(address))


def po(topic: str, partition: int, offset: int, metadata: str = "") -> common.PartitionOffset:
    return common.PartitionOffset(
        topic_partition=common.TopicPartition(topic=topic, partition=partition),
        offset=offset,
        leader_epoch=-1,
        metadata=metadata,
    )


def commit(stub, group: str, *offsets: common.PartitionOffset, member: pb.GroupMember | None = None) -> None:
    stub.CommitOffsets(pb.CommitOffsetsRequest(group_id=group, member=member, offsets=offsets), timeout=10)


def txn_commit(stub, group: str, *offsets: common.PartitionOffset, pid: int = PID, epoch: int = 0, member=None) -> None:
    stub.TxnOffsetCommit(
        pb.TxnOffsetCommitRequest(
            transactional_id=TXN_ID,
            producer=common.ProducerIdentity(producer_id=pid, producer_epoch=epoch),
            group_id=group,
            member=member,
            offsets=offsets,
        ),
        timeout=10,
    )


def marker(commit_: bool, *groups: str, pid: int = PID, epoch: int = 1, coordinator_epoch: int = 0) -> common.TxnMarker:
    return common.TxnMarker(
        producer=common.ProducerIdentity(producer_id=pid, producer_epoch=epoch),
        coordinator_epoch=coordinator_epoch,
        result=common.TRANSACTION_RESULT_COMMIT if commit_ else common.TRANSACTION_RESULT_ABORT,
        groups=groups,
        transactional_id=TXN_ID,
    )


def write_markers(stub, *markers: common.TxnMarker) -> list[dict[str, OncelogError | None]]:
    response = stub.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=markers), timeout=10)
    assert [r.producer_id for r in response.results] == [m.producer.producer_id for m in markers]
    return [
        {e.group_id: (from_error_info(e.error) if e.HasField("error") else None) for e in r.group_errors}
        for r in response.results
    ]


def fetch(stub, group: str, *tps: tuple[str, int], stable: bool = False) -> dict[tuple[str, int], int]:
    request = pb.FetchOffsetsRequest(
        group_id=group,
        partitions=[common.TopicPartition(topic=t, partition=p) for t, p in tps],
        require_stable=stable,
    )
    response = stub.FetchOffsets(request, timeout=10)
    return {(o.topic_partition.topic, o.topic_partition.partition): o.offset for o in response.offsets}


def failure(call: Callable[[], object]) -> tuple[grpc.StatusCode, OncelogError]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), from_rpc_error(info.value)


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fails with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def serves(stub, group: str) -> bool:
    try:
        fetch(stub, group)
        return True
    except grpc.RpcError as exc:
        # not the owner, or the owner still loading the shard it just took (retry there)
        if from_rpc_error(exc).reason in (
            Reason.NOT_COORDINATOR,
            Reason.COORDINATOR_LOAD_IN_PROGRESS,
            Reason.NETWORK_EXCEPTION,
        ):
            return False
        raise


# ---------------------------------------------------------------------------------------------- shared cluster


@pytest.fixture(scope="module")
def offsets_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("group-offsets"), services=SERVICES) as cluster:
        create_topics(cluster)
        yield cluster


@pytest.fixture
def stub(offsets_cluster: LocalCluster) -> pb.GroupOffsetsServiceStub:
    return stub_for(offsets_cluster.addresses("group-offsets")[0])


def test_txn_offsets_invisible_until_commit_marker(stub) -> None:
    group = "invisible-until-commit"
    commit(stub, group, po("orders", 0, 3))
    txn_commit(stub, group, po("orders", 0, 10, "batch-7"), po("orders", 1, 20))
    assert fetch(stub, group, ("orders", 0), ("orders", 1)) == {("orders", 0): 3, ("orders", 1): -1}
    assert fetch(stub, group) == {("orders", 0): 3}
    assert write_markers(stub, marker(True, group)) == [{group: None}]
    assert fetch(stub, group, stable=True) == {("orders", 0): 10, ("orders", 1): 20}
    request = pb.FetchOffsetsRequest(group_id=group, partitions=[common.TopicPartition(topic="orders", partition=0)])
    response = stub.FetchOffsets(request)
    assert response.offsets[0].metadata == "batch-7"


def test_abort_marker_drops_pending_offsets(stub) -> None:
    group = "abort-drops"
    commit(stub, group, po("orders", 0, 3))
    txn_commit(stub, group, po("orders", 0, 10), po("refunds", 0, 20))
    assert write_markers(stub, marker(False, group)) == [{group: None}]
    assert fetch(stub, group, ("orders", 0), ("refunds", 0), stable=True) == {("orders", 0): 3, ("refunds", 0): -1}


def test_require_stable_reports_unstable_offset_commit(stub) -> None:
    group = "require-stable"
    commit(stub, group, po("orders", 0, 3), po("orders", 1, 4))
    txn_commit(stub, group, po("orders", 0, 10))
    code, err = failure(lambda: fetch(stub, group, ("orders", 0), stable=True))
    assert code == grpc.StatusCode.UNAVAILABLE
    assert err.reason is Reason.UNSTABLE_OFFSET_COMMIT and err.retriable and err.definite
    assert "orders-0" in err.message
    assert failure(lambda: fetch(stub, group, stable=True))[1].reason is Reason.UNSTABLE_OFFSET_COMMIT
    assert fetch(stub, group, ("orders", 1), stable=True) == {("orders", 1): 4}
    assert fetch(stub, group, ("orders", 0)) == {("orders", 0): 3}, "without require_stable: the last commit"
    write_markers(stub, marker(True, group))
    assert fetch(stub, group, ("orders", 0), stable=True) == {("orders", 0): 10}


def test_marker_is_idempotent(stub) -> None:
    group = "idempotent-marker"
    txn_commit(stub, group, po("orders", 0, 10))
    again = marker(True, group)
    assert write_markers(stub, again) == [{group: None}]
    commit(stub, group, po("orders", 0, 11))
    assert write_markers(stub, again, again) == [{group: None}, {group: None}]
    assert fetch(stub, group, stable=True) == {("orders", 0): 11}


def test_stale_coordinator_epoch_marker_rejected(stub) -> None:
    group, other = "coordinator-fence-a", "coordinator-fence-b"
    txn_commit(stub, group, po("orders", 0, 10))
    txn_commit(stub, other, po("orders", 0, 20))
    assert write_markers(stub, marker(False, other, coordinator_epoch=4)) == [{other: None}]
    [outcome] = write_markers(stub, marker(True, group, other, coordinator_epoch=3))
    assert outcome[group] is None
    fenced = outcome[other]
    assert fenced is not None and fenced.reason is Reason.TRANSACTION_COORDINATOR_FENCED and not fenced.retriable
    assert fetch(stub, group, stable=True) == {("orders", 0): 10}
    assert fetch(stub, other, ("orders", 0), stable=True) == {("orders", 0): -1}


def test_zombie_producer_epoch_fenced(stub) -> None:
    group = "zombie-producer"
    txn_commit(stub, group, po("orders", 0, 10), epoch=2)
    write_markers(stub, marker(False, group, epoch=3))  # InitProducerId fenced epoch 2 and aborted its transaction
    txn_commit(stub, group, po("orders", 0, 20), epoch=3)
    code, err = failure(lambda: txn_commit(stub, group, po("orders", 0, 666), po("orders", 1, 666), epoch=2))
    assert code == grpc.StatusCode.FAILED_PRECONDITION
    assert err.reason is Reason.INVALID_PRODUCER_EPOCH and not err.retriable
    write_markers(stub, marker(True, group, epoch=4))
    assert fetch(stub, group, ("orders", 0), ("orders", 1), stable=True) == {("orders", 0): 20, ("orders", 1): -1}
    # the zombie's late retry after the commit is fenced too, so it cannot leave a pending offset behind
    late = failure(lambda: txn_commit(stub, group, po("orders", 1, 5), epoch=3))[1]
    assert late.reason is Reason.INVALID_PRODUCER_EPOCH
    assert fetch(stub, group, ("orders", 1), stable=True) == {("orders", 1): -1}


def test_illegal_generation_rejected(stub) -> None:
    group = "generations"
    commit(stub, group, po("orders", 0, 5), member=pb.GroupMember(generation_id=4, member_id="consumer-a"))
    code, err = failure(
        lambda: commit(stub, group, po("orders", 0, 99), member=pb.GroupMember(generation_id=3, member_id="old"))
    )
    assert code == grpc.StatusCode.FAILED_PRECONDITION and err.reason is Reason.ILLEGAL_GENERATION
    err = failure(
        lambda: txn_commit(stub, group, po("orders", 0, 99), member=pb.GroupMember(generation_id=3, member_id="old"))
    )[1]
    assert err.reason is Reason.ILLEGAL_GENERATION
    err = failure(lambda: commit(stub, group, po("orders", 0, 99), member=pb.GroupMember(generation_id=4)))[1]
    assert err.reason is Reason.UNKNOWN_MEMBER_ID
    assert fetch(stub, group, stable=True) == {("orders", 0): 5}


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda s: commit(s, "", po("orders", 0, 1)), "group_id is empty"),
        (lambda s: commit(s, "bad-input", po("orders", 0, -5)), "offset=-5"),
        (lambda s: commit(s, "bad-input"), "offsets is empty"),
        (lambda s: commit(s, "bad-input", po("", 0, 1)), "empty topic"),
        (
            lambda s: s.TxnOffsetCommit(
                pb.TxnOffsetCommitRequest(transactional_id=TXN_ID, group_id="bad-input", offsets=[po("orders", 0, 1)])
            ),
            "producer is required",
        ),
        (lambda s: fetch(s, ""), "group_id is empty"),
    ],
)
def test_bad_input_gets_invalid_argument_and_the_server_stays_up(stub, call, fragment) -> None:
    txn_commit(stub, "bad-input", po("orders", 0, 10))
    code, err = failure(lambda: call(stub))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.reason is Reason.INVALID_REQUEST and fragment in err.message
    # nothing was applied, and the server keeps serving
    assert failure(lambda: fetch(stub, "bad-input", stable=True))[1].reason is Reason.UNSTABLE_OFFSET_COMMIT
    commit(stub, "bad-input-ok", po("orders", 0, 1))
    assert fetch(stub, "bad-input-ok") == {("orders", 0): 1}


def test_one_bad_marker_entry_does_not_poison_the_request(stub) -> None:
    """Issue 25 item 2: a group id over 255 characters, or a marker without a result, is refused on its own
    entry; the other markers of the same request apply (the coordinator retries only what failed)."""
    txn_commit(stub, "poison-ok", po("orders", 0, 10))
    too_long = "g" * 300
    unspecified = common.TxnMarker(producer=common.ProducerIdentity(producer_id=PID + 1), groups=["poison-other"])
    bad_group, no_result, good = write_markers(stub, marker(True, too_long), unspecified, marker(True, "poison-ok"))
    assert bad_group[too_long].reason is Reason.INVALID_REQUEST and "300 characters" in bad_group[too_long].message
    assert no_result["poison-other"].reason is Reason.INVALID_REQUEST
    assert "markers[1]: result is unspecified" in no_result["poison-other"].message
    assert good == {"poison-ok": None}
    assert fetch(stub, "poison-ok", stable=True) == {("orders", 0): 10}


def test_offsets_for_unknown_partitions_are_rejected(stub) -> None:
    code, err = failure(lambda: commit(stub, "unknown-partitions", po("orders", 2, 1)))
    assert code == grpc.StatusCode.NOT_FOUND and err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION
    assert "orders-2" in err.message
    err = failure(lambda: txn_commit(stub, "unknown-partitions", po("no-such-topic", 0, 1)))[1]
    assert err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION
    assert fetch(stub, "unknown-partitions") == {}


# ---------------------------------------------------------------------------------------------- crashes


def test_offsets_survive_kill_9(database_url: str, tmp_path: Path) -> None:
    group = "survives-kill-9"
    with LocalCluster(tmp_path, services=SERVICES, database_url=database_url) as cluster:
        create_topics(cluster)
        stub = stub_for(cluster.addresses("group-offsets")[0])
        commit(stub, group, po("orders", 0, 5), member=pb.GroupMember(generation_id=2, member_id="a"))
        txn_commit(stub, group, po("orders", 1, 50), epoch=1)
        write_markers(stub, marker(False, "fenced-elsewhere", epoch=1, coordinator_epoch=6))
        cluster.kill("group-offsets-0")
        cluster.restart("group-offsets-0")
        stub = stub_for(cluster.addresses("group-offsets")[0])
        assert fetch(stub, group) == {("orders", 0): 5}
        assert failure(lambda: fetch(stub, group, stable=True))[1].reason is Reason.UNSTABLE_OFFSET_COMMIT
        # fencing state survived as well: generation, producer epoch, coordinator epoch
        old_member = pb.GroupMember(generation_id=1, member_id="z")
        assert failure(lambda: commit(stub, group, po("orders", 0, 9), member=old_member))[1].reason is (
            Reason.ILLEGAL_GENERATION
        )
        assert failure(lambda: txn_commit(stub, group, po("orders", 1, 9), epoch=0))[1].reason is (
            Reason.INVALID_PRODUCER_EPOCH
        )
        [outcome] = write_markers(stub, marker(True, "fenced-elsewhere", epoch=1, coordinator_epoch=5))
        assert outcome["fenced-elsewhere"].reason is Reason.TRANSACTION_COORDINATOR_FENCED
        assert write_markers(stub, marker(True, group, epoch=2)) == [{group: None}]
        assert fetch(stub, group, stable=True) == {("orders", 0): 5, ("orders", 1): 50}


# ---------------------------------------------------------------------------------------------- failover


def _owner_and_other(cluster: LocalCluster, group: str) -> tuple[str, str]:
    """Node ids of the replica that serves ``group`` and of the other one."""
    first, second = (n for n in cluster.nodes if n.service == "group-offsets")
    if serves(stub_for(first.address), group):
        return first.node_id, second.node_id
    return second.node_id, first.node_id


def _coordinator(cluster: LocalCluster, group: str) -> cluster_pb.FindCoordinatorResponse:
    stub = cluster_pb.ClusterServiceStub(sync_channel(cluster.addresses("partition-storage")[0]))
    return stub.FindCoordinator(cluster_pb.FindCoordinatorRequest(key=group, type=cluster_pb.COORDINATOR_TYPE_GROUP))


def test_second_replica_takes_over_after_lease_expiry(database_url: str, tmp_path: Path) -> None:
    group = "failover"
    with LocalCluster(
        tmp_path,
        services=SERVICES,
        replicas={"group-offsets": 2},
        database_url=database_url,
        env={"ONCELOG_GROUP_OFFSETS_SHARD_LEASE_MS": "1500"},
    ) as cluster:
        create_topics(cluster)
        owner_id, survivor_id = _owner_and_other(cluster, group)
        owner, survivor = cluster.node(owner_id), cluster.node(survivor_id)
        code, err = failure(lambda: commit(stub_for(survivor.address), group, po("orders", 0, 1)))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and err.reason is Reason.NOT_COORDINATOR
        assert err.metadata["coordinator"] == owner.address and err.metadata["coordinator_node_id"] == owner_id
        before = _coordinator(cluster, group)
        assert (before.node_id, before.address) == (owner_id, owner.address)

        commit(stub_for(owner.address), group, po("orders", 0, 5))
        txn_commit(stub_for(owner.address), group, po("orders", 1, 50))
        cluster.kill(owner_id)
        survivor_stub = stub_for(survivor.address)
        wait_until(lambda: serves(survivor_stub, group), "the surviving replica to take the shard over")
        after = _coordinator(cluster, group)
        assert (after.node_id, after.address) == (survivor_id, survivor.address)
        assert after.coordinator_epoch > before.coordinator_epoch
        assert fetch(survivor_stub, group) == {("orders", 0): 5}
        assert failure(lambda: fetch(survivor_stub, group, stable=True))[1].reason is Reason.UNSTABLE_OFFSET_COMMIT
        assert write_markers(survivor_stub, marker(True, group)) == [{group: None}]
        assert fetch(survivor_stub, group, stable=True) == {("orders", 0): 5, ("orders", 1): 50}

        # the old owner comes back but does not take the shard from a live owner
        cluster.restart(owner_id)
        err = failure(lambda: commit(stub_for(cluster.node(owner_id).address), group, po("orders", 0, 9)))[1]
        assert err.reason is Reason.NOT_COORDINATOR and err.metadata["coordinator_node_id"] == survivor_id


def test_paused_owner_cannot_write_after_takeover(tmp_path: Path) -> None:
    group = "paused-owner"
    with LocalCluster(
        tmp_path,
        services=SERVICES,
        replicas={"group-offsets": 2},
        env={"ONCELOG_GROUP_OFFSETS_SHARD_LEASE_MS": "1500"},
    ) as cluster:
        create_topics(cluster)
        owner_id, survivor_id = _owner_and_other(cluster, group)
        owner, survivor = cluster.node(owner_id), cluster.node(survivor_id)
        owner_stub, survivor_stub = stub_for(owner.address), stub_for(survivor.address)
        commit(owner_stub, group, po("orders", 0, 5))
        assert owner.process is not None
        os.kill(owner.process.pid, signal.SIGSTOP)  # a long GC pause or a frozen VM, not a crash
        try:
            wait_until(lambda: serves(survivor_stub, group), "the other replica to take the shard over")
            commit(survivor_stub, group, po("orders", 0, 7))
        finally:
            os.kill(owner.process.pid, signal.SIGCONT)
        code, err = failure(lambda: commit(owner_stub, group, po("orders", 0, 666)))
        assert err.reason is Reason.NOT_COORDINATOR, (code, err)
        assert fetch(survivor_stub, group) == {("orders", 0): 7}


def test_clean_stop_releases_shards_for_an_immediate_takeover(tmp_path: Path) -> None:
    group = "clean-stop"
    lease_s = 30
    with LocalCluster(
        tmp_path,
        services=SERVICES,
        replicas={"group-offsets": 2},
        env={"ONCELOG_GROUP_OFFSETS_SHARD_LEASE_MS": str(lease_s * 1000)},
    ) as cluster:
        create_topics(cluster)
        owner_id, survivor_id = _owner_and_other(cluster, group)
        commit(stub_for(cluster.node(owner_id).address), group, po("orders", 0, 5))
        process = cluster.node(owner_id).process
        assert process is not None
        stopped_at = time.monotonic()
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
        survivor_stub = stub_for(cluster.node(survivor_id).address)
        # without the release the survivor would have to wait for the whole lease to lapse
        wait_until(lambda: serves(survivor_stub, group), "the released shard to be taken over", timeout=lease_s - 5)
        assert time.monotonic() - stopped_at < lease_s
        assert fetch(survivor_stub, group) == {("orders", 0): 5}


# ---------------------------------------------------------------------------------------------- Redis cache


@pytest.mark.redis
def test_redis_cache_never_returns_wrong_offsets(redis_url: str, tmp_path: Path) -> None:
    import redis

    group = "cached"
    client = redis.Redis.from_url(redis_url)
    with LocalCluster(tmp_path, services=SERVICES, env={"ONCELOG_REDIS_URL": redis_url}) as cluster:
        create_topics(cluster)
        cluster_id = (
            cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
            .DescribeCluster(cluster_pb.DescribeClusterRequest())
            .cluster_id
        )
        key = cache_key_prefix(cluster_id) + group
        stub = stub_for(cluster.addresses("group-offsets")[0])
        commit(stub, group, po("orders", 0, 10))
        assert fetch(stub, group) == {("orders", 0): 10}
        assert client.exists(key) == 1, "the fetch filled the cache"
        commit(stub, group, po("orders", 0, 20))
        assert fetch(stub, group) == {("orders", 0): 20}
        txn_commit(stub, group, po("orders", 0, 30))
        assert failure(lambda: fetch(stub, group, stable=True))[1].reason is Reason.UNSTABLE_OFFSET_COMMIT
        write_markers(stub, marker(True, group))
        assert fetch(stub, group, stable=True) == {("orders", 0): 30}
        client.flushall()
        assert fetch(stub, group, stable=True) == {("orders", 0): 30}
        commit(stub, group, po("orders", 0, 40))
        assert fetch(stub, group) == {("orders", 0): 40}
        assert client.exists(key) == 1

        # A crash leaves the old process's entry (offset 40) in Redis. The restarted process keeps the shard's
        # coordinator epoch and makes as many writes as its predecessor did, so only the process incarnation in
        # the entry's tag tells the stale entry apart.
        cluster.kill("group-offsets-0")
        cluster.restart("group-offsets-0")
        stub = stub_for(cluster.addresses("group-offsets")[0])
        for offset in range(41, 46):
            commit(stub, group, po("orders", 0, offset))
        assert fetch(stub, group) == {("orders", 0): 45}
    client.close()
