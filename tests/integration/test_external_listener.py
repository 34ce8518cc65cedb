"""The external listener (docs/design/external-listener.md): a client that reaches the services only through their
external addresses gets external addresses from every ClusterService answer, and produces and consumes through
them; a client on the services' network keeps the internal ones."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.client import AdminClient, Consumer, NewTopic, OncelogError, Producer, TopicPartition
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

ROLES = ("PID_ALLOCATOR", "TXN_COORDINATOR", "PARTITION_STORAGE", "GROUP_OFFSETS")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {f"ONCELOG_{role}_EXTERNAL_LISTEN": "127.0.0.1:0" for role in ROLES}
    with LocalCluster(tmp_path_factory.mktemp("external"), storage_nodes=2, env=env) as running:
        yield running


def external_addresses(cluster: LocalCluster) -> dict[str, str]:
    """Each node's external address, as its ready file reports it, by internal address."""
    ready = [json.loads(Path(node.ready_file).read_text()) for node in cluster.nodes]
    return {r["address"]: r.get("external_address", "") for r in ready}


def test_clients_outside_get_external_addresses_and_work_through_them(cluster: LocalCluster) -> None:
    outside = external_addresses(cluster)
    assert set(outside) == {n.address for n in cluster.nodes} and not set(outside) & set(outside.values())
    storage = cluster.addresses("partition-storage")
    topic = f"ext-{uuid.uuid4().hex[:8]}"
    with AdminClient(outside[storage[0]]) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=2)])
        leaders = {p.leader_address for p in admin.describe_topics([topic])[topic].partitions}
        described = admin.describe_cluster()
    assert leaders <= {outside[a] for a in storage} and leaders
    assert sorted(described.addresses("partition-storage")) == sorted(outside[a] for a in storage)
    with AdminClient(storage[0]) as inside:  # the services' own network keeps the internal addresses
        assert {p.leader_address for p in inside.describe_topics([topic])[topic].partitions} <= set(storage)
    tid = f"ext-tx-{uuid.uuid4().hex[:8]}"
    with Producer(outside[storage[1]], transactional_id=tid) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for partition in (0, 1):
            producer.send(topic, b"through-the-external-listener", partition=partition)
        producer.commit_transaction()
    with Consumer(outside[storage[0]], isolation_level="read_committed") as consumer:
        tps = [TopicPartition(topic, p) for p in (0, 1)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        seen: list[bytes | None] = []
        while len(seen) < 2:
            seen += [r.value for r in consumer.poll(timeout_ms=1_000)]
    assert seen == [b"through-the-external-listener"] * 2


def test_a_node_without_an_external_listener_has_no_address_there(tmp_path: Path) -> None:
    env = {"ONCELOG_PARTITION_STORAGE_EXTERNAL_LISTEN": "127.0.0.1:0"}  # the coordinators have none
    with LocalCluster(tmp_path, storage_nodes=1, env=env) as running:
        [storage] = running.addresses("partition-storage")
        outside = external_addresses(running)[storage]
        with AdminClient(outside) as admin:
            described = admin.describe_cluster()
            assert described.addresses("partition-storage") == [outside]
            assert described.addresses("txn-coordinator") == []  # no address on this listener
        with (
            Producer(outside, transactional_id="no-external", max_block_ms=3_000) as producer,
            pytest.raises(OncelogError) as info,
        ):
            producer.init_transactions()
    assert "has no external address: set its ONCELOG_TXN_COORDINATOR_EXTERNAL_LISTEN" in str(info.value)
