"""Two kafka-gateway replicas in front of one oncelog cluster, as a Deployment of two would run.

Metadata spreads the partition leaders and the coordinators over both gateways, so an unmodified Kafka client
talks to each. A transactional producer's InitProducerId, AddPartitionsToTxn and EndTxn go to its transactional
id's home gateway (FindCoordinator), its Produce requests to every partition's leader gateway, and its
TxnOffsetCommit to the group's gateway: the other gateway relays those to the home, which holds the producer's
identity map (``relay.py``). Without the relay the second transaction's batches reach storage under the client's
stale identity and are fenced.
"""

from __future__ import annotations

import time
import uuid
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import KafkaGatewayProcess
from oncelog.testing.kafka_wire import kafka_call
from oncelog.testing.servers import free_port

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

PARTITIONS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(Path(tmp_path_factory.mktemp("gateway-replicas"))) as cluster:
        yield cluster


@contextmanager
def gateway_pair(cluster: LocalCluster, name: str, env: dict[str, str] | None = None) -> Iterator[list[str]]:
    """Gateways 0 and 1 (each knowing both) in front of ``cluster``; their Kafka addresses by broker id."""
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    brokers = ",".join(f"{i}@{a}" for i, a in enumerate(addresses))
    gateways = [
        KafkaGatewayProcess(
            cluster.bootstrap,
            cluster.data_dir / f"{name}-{i}",
            env={
                "ONCELOG_KAFKA_GATEWAY_KAFKA_LISTEN": address,
                "ONCELOG_KAFKA_GATEWAY_BROKER_ID": str(i),
                "ONCELOG_KAFKA_GATEWAY_BROKERS": brokers,
                **(env or {}),
            },
        )
        for i, address in enumerate(addresses)
    ]
    with gateways[0], gateways[1]:
        assert [g.address for g in gateways] == addresses
        yield addresses


@pytest.fixture(scope="module")
def two_gateways(cluster: LocalCluster) -> Iterator[list[str]]:
    with gateway_pair(cluster, "plain") as addresses:
        yield addresses


def _home(key: str) -> int:
    """The gateway a coordinator key lands on (the gateway's own hash of ``transaction:<id>`` / ``group:<id>``)."""
    return zlib.crc32(key.encode()) % 2


def _spread_topic() -> str:
    """A topic name whose partitions the gateways' hash puts on both of them (so Produce goes to each)."""
    while True:
        name = f"replicas-{uuid.uuid4().hex[:8]}"
        if {_home(f"{name}-{p}") for p in range(PARTITIONS)} == {0, 1}:
            return name


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    answer = kafka_call(
        bootstrap,
        3,
        9,
        {"topics": [{"name": topic}], "allow_auto_topic_creation": False,
         "include_cluster_authorized_operations": False, "include_topic_authorized_operations": False},
    )  # fmt: skip
    return {int(p.partition_index): int(p.leader_id) for p in answer.topics[0].partitions}


def _read_committed(
    bootstrap: str, topic: str, count: int, security: dict[str, str] | None = None, timeout_s: float = 90.0
) -> list[tuple[int, int, bytes]]:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:6]}", "isolation.level":
         "read_committed", "enable.auto.commit": False, "enable.partition.eof": False, **(security or {})}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(out) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                out.append((message.partition(), message.offset(), message.value()))
        # anything past the count would be a duplicate or an aborted record shown
        extra = consumer.poll(2.0)
        assert extra is None or extra.error() is not None, (extra.partition(), extra.offset(), extra.value())
    finally:
        consumer.close()
    return out


def test_a_transactional_producer_commits_and_aborts_through_two_gateways(two_gateways: list[str]) -> None:
    _transactions_through(two_gateways, {})


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mutual-tls"])
def test_relayed_requests_travel_over_tls_between_gateways(cluster: LocalCluster, tmp_path: Path, mutual: bool) -> None:
    """Listeners serving TLS (one certificate for both replicas, from a private CA): the relay trusts the other
    gateway through the shared certificate, or the CA bundle, and shows its own where client certificates are
    required."""
    pytest.importorskip("cryptography.x509", reason="certificates are made with cryptography (pip install)")
    from oncelog.testing.pki import Pki

    pki = Pki(tmp_path)
    listener = pki.issue("gateways", ips=("127.0.0.1",))
    env = {
        "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_CERT": str(listener.cert),
        "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_KEY": str(listener.key),
    }
    client = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    if mutual:
        env["ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_CA"] = str(pki.ca)
        issued = pki.issue(f"client-{uuid.uuid4().hex[:6]}", server=False)
        client |= {"ssl.certificate.location": str(issued.cert), "ssl.key.location": str(issued.key)}
    with gateway_pair(cluster, "mtls" if mutual else "tls", env) as addresses:
        _transactions_through(addresses, client)


def _transactions_through(two_gateways: list[str], security: dict[str, str]) -> None:
    bootstrap = ",".join(two_gateways)
    topic = _spread_topic()
    admin = AdminClient({"bootstrap.servers": bootstrap, **security})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    tid = f"replicas-{uuid.uuid4().hex[:8]}"
    home = _home(f"transaction:{tid}")
    # a group whose coordinator gateway is not the transactional id's home: its TxnOffsetCommit is relayed too
    group = next(g for g in (f"copier-{uuid.uuid4().hex[:6]}" for _ in range(64)) if _home(f"group:{g}") != home)
    if not security:  # kafka_call speaks plaintext
        leaders = _leaders(two_gateways[0], topic)
        assert set(leaders.values()) == {0, 1}, f"both gateways lead partitions: {leaders}"

    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **security})
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **security})
    producer.init_transactions(60)
    committed: list[tuple[int, bytes]] = []
    try:
        for txn in range(4):
            producer.begin_transaction()
            values = [(p, f"t{txn}-p{p}-{i}".encode()) for p in range(PARTITIONS) for i in range(3)]
            for partition, value in values:
                producer.produce(topic, value, partition=partition)
            offsets = [TopicPartition(topic, 0, txn + 1)]
            producer.send_offsets_to_transaction(offsets, member.consumer_group_metadata(), 60)
            if txn == 2:
                producer.abort_transaction(60)
            else:
                producer.commit_transaction(60)
                committed += values
    finally:
        member.close()

    read = _read_committed(two_gateways[1 - home], topic, len(committed), security)
    assert sorted((p, v) for p, _, v in read) == sorted(committed), "each committed record once, no aborted one"
    for partition in range(PARTITIONS):
        offsets = [o for p, o, _ in read if p == partition]
        values = [v for p, _, v in read if p == partition]
        assert values == [v for p, v in committed if p == partition], f"partition {partition} keeps produce order"
        assert offsets == sorted(offsets)
    # the offsets of the last committed transaction, sent through the group's gateway
    check = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, **security})
    try:
        [position] = check.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        check.close()
    assert position.offset == 4, "the aborted transaction's offsets are not committed; the last committed ones are"


def test_idempotent_producers_and_consumers_use_both_gateways(two_gateways: list[str]) -> None:
    bootstrap = ",".join(two_gateways)
    topic = f"replicas-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": two_gateways[0], "enable.idempotence": True})
    sent = [(p, f"v{p}-{i}".encode()) for i in range(20) for p in range(PARTITIONS)]
    for partition, value in sent:
        producer.produce(topic, value, partition=partition)
    assert producer.flush(60) == 0
    read = _read_committed(two_gateways[1], topic, len(sent))
    assert sorted((p, v) for p, _, v in read) == sorted(sent)
