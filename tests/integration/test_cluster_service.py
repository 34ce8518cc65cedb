"""ClusterService as served by every process: topics, metadata, coordinators, bad input."""

from __future__ import annotations

import grpc
import pytest
import sqlalchemy as sa

from oncelog.api.cluster import v1 as pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.catalog import CatalogStore, shard_for
from oncelog.errors import Reason
from oncelog.rpc import from_rpc_error, sync_channel
from oncelog.testing import LocalCluster


@pytest.fixture(scope="module")
def stubs(cluster: LocalCluster) -> list[pb.ClusterServiceStub]:
    """One ClusterService stub per process: any of them is a bootstrap address."""
    return [pb.ClusterServiceStub(sync_channel(node.address)) for node in cluster.nodes]


def _error(call, *args):
    with pytest.raises(grpc.RpcError) as info:
        call(*args)
    return info.value.code(), from_rpc_error(info.value)


def test_every_process_describes_the_same_cluster(cluster: LocalCluster, stubs) -> None:
    answers = [s.DescribeCluster(pb.DescribeClusterRequest()) for s in stubs]
    assert len({a.cluster_id for a in answers}) == 1
    roles = sorted(pb.ServiceRole.Name(n.role) for n in answers[0].nodes)
    assert roles == sorted(
        ["SERVICE_ROLE_PID_ALLOCATOR", "SERVICE_ROLE_TXN_COORDINATOR", "SERVICE_ROLE_GROUP_OFFSETS"]
        + ["SERVICE_ROLE_PARTITION_STORAGE"] * 2
    )
    assert {n.address for n in answers[0].nodes} == {n.address for n in cluster.nodes}


def test_create_describe_delete_topic(cluster: LocalCluster, stubs) -> None:
    created = stubs[0].CreateTopics(
        pb.CreateTopicsRequest(topics=[pb.TopicSpec(name="orders.v1", partitions=4, configs={"flush": "async"})])
    )
    topic = created.topics[0]
    assert [p.partition for p in topic.partitions] == [0, 1, 2, 3]
    storage = set(cluster.addresses("partition-storage"))
    assert {p.leader_address for p in topic.partitions} == storage, "partitions spread over both storage nodes"
    assert topic.configs["flush"] == "async"
    # another process sees the same metadata
    meta = stubs[-1].Metadata(pb.MetadataRequest(topics=["orders.v1"]))
    assert meta.topics[0] == topic
    code, err = _error(
        stubs[1].CreateTopics, pb.CreateTopicsRequest(topics=[pb.TopicSpec(name="orders.v1", partitions=1)])
    )
    assert code == grpc.StatusCode.ALREADY_EXISTS and err.reason == Reason.TOPIC_ALREADY_EXISTS
    assert stubs[2].DeleteTopics(pb.DeleteTopicsRequest(topics=["orders.v1"])).deleted == ["orders.v1"]
    code, err = _error(stubs[0].Metadata, pb.MetadataRequest(topics=["orders.v1"]))
    assert code == grpc.StatusCode.NOT_FOUND and err.reason == Reason.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(
    ("spec", "reason", "fragment"),
    [
        (pb.TopicSpec(name="bad name", partitions=1), Reason.INVALID_TOPIC, "[' ']"),
        (pb.TopicSpec(name="..", partitions=1), Reason.INVALID_TOPIC, "reserved"),
        (pb.TopicSpec(name="x" * 250, partitions=1), Reason.INVALID_TOPIC, "limit is 249"),
        (pb.TopicSpec(name="", partitions=1), Reason.INVALID_TOPIC, "empty"),
        (pb.TopicSpec(name="zero", partitions=0), Reason.INVALID_PARTITIONS, "at least 1"),
        (
            pb.TopicSpec(name="cfg", partitions=1, configs={"flsh": "sync"}),
            Reason.INVALID_CONFIG,
            "unknown topic config",
        ),
        (pb.TopicSpec(name="cfg", partitions=1, configs={"flush": "never"}), Reason.INVALID_CONFIG, "flush='never'"),
    ],
)
def test_invalid_topics_are_rejected_precisely(stubs, spec, reason, fragment) -> None:
    code, err = _error(stubs[0].CreateTopics, pb.CreateTopicsRequest(topics=[spec]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.reason == reason and fragment in err.message
    assert not err.retriable and err.definite
    # nothing was created and the server still answers
    names = {t.name for t in stubs[0].Metadata(pb.MetadataRequest()).topics}
    assert spec.name not in names


@pytest.mark.parametrize("factor", [3, 0, -1])
def test_bad_replication_factor_is_rejected_naming_the_storage_node_count(stubs, factor: int) -> None:
    spec = pb.TopicSpec(name=f"rf{factor}", partitions=1, replication_factor=factor)
    code, err = _error(stubs[0].CreateTopics, pb.CreateTopicsRequest(topics=[spec]))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and err.reason == Reason.INVALID_REPLICATION_FACTOR
    assert f"replication_factor={factor}" in err.message and "2 live storage nodes" in err.message
    assert not err.retriable and err.definite
    assert spec.name not in {t.name for t in stubs[1].Metadata(pb.MetadataRequest()).topics}


def test_replicated_topic_lists_replicas_and_isr(cluster: LocalCluster, stubs) -> None:
    created = stubs[0].CreateTopics(
        pb.CreateTopicsRequest(
            topics=[
                pb.TopicSpec(name="replicated", partitions=4, replication_factor=2),
                pb.TopicSpec(name="single", partitions=1),
            ]
        )
    )
    storage_ids = {n.node_id for n in cluster.nodes if n.service == "partition-storage"}
    replicated, single = created.topics
    for p in replicated.partitions:
        assert set(p.replica_node_ids) == storage_ids and list(p.isr_node_ids) == list(p.replica_node_ids)
        assert p.leader_node_id == p.replica_node_ids[0] and p.partition_epoch == 0
    assert all(len(p.replica_node_ids) == 1 for p in single.partitions), "unset factor uses the default, 1"
    assert stubs[-1].Metadata(pb.MetadataRequest(topics=["replicated"])).topics[0] == replicated
    stubs[0].DeleteTopics(pb.DeleteTopicsRequest(topics=["replicated", "single"]))


def test_create_topics_is_all_or_nothing(stubs) -> None:
    _, err = _error(
        stubs[0].CreateTopics,
        pb.CreateTopicsRequest(
            topics=[pb.TopicSpec(name="good", partitions=1), pb.TopicSpec(name="b@d", partitions=1)]
        ),
    )
    assert err.reason == Reason.INVALID_TOPIC
    assert "good" not in {t.name for t in stubs[0].Metadata(pb.MetadataRequest()).topics}


def test_partitions_and_configs_are_changed_through_any_process(stubs) -> None:
    stubs[0].CreateTopics(pb.CreateTopicsRequest(topics=[pb.TopicSpec(name="altered", partitions=1)]))
    grown = stubs[1].CreatePartitions(pb.CreatePartitionsRequest(topics=[pb.PartitionsSpec(topic="altered", count=2)]))
    assert [p.partition for p in grown.topics[0].partitions] == [0, 1]
    code, err = _error(
        stubs[2].CreatePartitions, pb.CreatePartitionsRequest(topics=[pb.PartitionsSpec(topic="altered", count=1)])
    )
    assert (code, err.reason) == (grpc.StatusCode.INVALID_ARGUMENT, Reason.INVALID_PARTITIONS)
    set_op = pb.AlterConfigOp(name="retention.ms", value="1000", op=pb.ALTER_CONFIG_OP_TYPE_SET)
    altered = stubs[0].IncrementalAlterConfigs(
        pb.IncrementalAlterConfigsRequest(topics=[pb.TopicConfigAlteration(topic="altered", ops=[set_op])])
    )
    [entry] = [e for e in altered.topics[0].entries if e.name == "retention_ms"]
    assert (entry.value, entry.source) == ("1000", pb.CONFIG_SOURCE_TOPIC)
    described = stubs[-1].DescribeConfigs(pb.DescribeConfigsRequest(topics=["altered"]))
    assert described.topics[0] == altered.topics[0]
    no_op = pb.AlterConfigOp(name="retention_ms", value="5")
    code, err = _error(
        stubs[0].IncrementalAlterConfigs,
        pb.IncrementalAlterConfigsRequest(topics=[pb.TopicConfigAlteration(topic="altered", ops=[no_op])]),
    )
    assert err.reason == Reason.INVALID_REQUEST
    assert err.message == (
        "topic 'altered', config 'retention_ms': op must be ALTER_CONFIG_OP_TYPE_SET or ALTER_CONFIG_OP_TYPE_DELETE"
    )
    stubs[0].DeleteTopics(pb.DeleteTopicsRequest(topics=["altered"]))


def test_find_coordinator_maps_keys_to_stable_shards(cluster: LocalCluster, stubs) -> None:
    store = CatalogStore(sa.create_engine(cluster.database_url))
    info = store.cluster_info()
    request = pb.FindCoordinatorRequest(key="payments-writer-1", type=pb.COORDINATOR_TYPE_TRANSACTION)
    shard = shard_for("payments-writer-1", info.txn_coordinator_shards)
    # the running txn-coordinator leased every shard when it started
    lease = store.shard_lease("txn-coordinator", shard)
    assert lease is not None and lease.owner_node_id == "txn-coordinator-0"
    answers = [s.FindCoordinator(request) for s in stubs]
    assert {(a.shard, a.node_id, a.address, a.coordinator_epoch) for a in answers} == {
        (shard, "txn-coordinator-0", cluster.addresses("txn-coordinator")[0], lease.coordinator_epoch)
    }
    # the named owner really serves the key
    coordinator = txn_pb.TransactionCoordinatorServiceStub(sync_channel(answers[0].address))
    coordinator.InitProducerId(
        txn_pb.InitProducerIdRequest(transactional_id="payments-writer-1", transaction_timeout_ms=60_000)
    )
    (described,) = coordinator.DescribeTransactions(
        txn_pb.DescribeTransactionsRequest(transactional_ids=["payments-writer-1"])
    ).transactions
    assert described.coordinator_node_id == "txn-coordinator-0"
    assert described.coordinator_epoch == lease.coordinator_epoch
    code, err = _error(stubs[0].FindCoordinator, pb.FindCoordinatorRequest(key="k"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "COORDINATOR_TYPE" in err.message
    store.engine.dispose()


def test_oversize_message_is_rejected_and_the_server_stays_up(cluster: LocalCluster, stubs) -> None:
    small = pb.ClusterServiceStub(sync_channel(cluster.bootstrap, max_message_bytes=128 * 1024 * 1024))
    huge = pb.CreateTopicsRequest(
        topics=[pb.TopicSpec(name="x", partitions=1, configs={"k": "v" * (65 * 1024 * 1024)})]
    )
    with pytest.raises(grpc.RpcError) as info:
        small.CreateTopics(huge)
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert stubs[0].DescribeCluster(pb.DescribeClusterRequest()).cluster_id
