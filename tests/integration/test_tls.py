"""TLS and mutual TLS from ONCELOG_TLS_*: real service processes, certificates made by a throwaway CA per module.

The cluster runs the way the prod overlay configures it: one shared node certificate whose only name is an
internal DNS name (``ONCELOG_TLS_SERVER_NAME``), a cluster CA that servers require client certificates from,
and a plaintext listener for probes that serves nothing but grpc.health.v1.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.pid import v1 as pid_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.config import ConfigError
from oncelog.pid_allocator.config import PidAllocatorSettings
from oncelog.rpc import ChannelFactory, TlsConfig, TlsMode, client_credentials_from_env
from oncelog.testing import LocalCluster

pytest.importorskip("cryptography.x509", reason="certificates are made with cryptography (pip install)")
from oncelog.testing.pki import Issued, Pki

SERVER_NAME = "oncelog.oncelog.svc"
TOPIC = "tls-orders"


# ---------------------------------------------------------------------------------------------- certificates


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def node_cert(pki: Pki) -> Issued:
    """The certificate every node shares, named only by the internal DNS name (as in the prod overlay)."""
    return pki.issue("node", dns=(SERVER_NAME,))


def credentials(pki: Pki, client: Issued | None) -> grpc.ChannelCredentials:
    """Channel credentials trusting ``pki``, presenting ``client`` if given."""
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=client.key.read_bytes() if client else None,
        certificate_chain=client.cert.read_bytes() if client else None,
    )


# ---------------------------------------------------------------------------------------------- cluster under mTLS


@pytest.fixture(scope="module")
def mtls_cluster(tmp_path_factory: pytest.TempPathFactory, pki: Pki, node_cert: Issued) -> Iterator[LocalCluster]:
    """Every service with mutual TLS; the pid-allocator also has a plaintext health-only listener."""
    env = {
        "ONCELOG_TLS_CERT": str(node_cert.cert),
        "ONCELOG_TLS_KEY": str(node_cert.key),
        "ONCELOG_TLS_CA": str(pki.ca),
        "ONCELOG_TLS_SERVER_NAME": SERVER_NAME,
        "ONCELOG_PID_ALLOCATOR_HEALTH_LISTEN": "127.0.0.1:0",
    }
    with LocalCluster(tmp_path_factory.mktemp("mtls"), env=env) as running:
        yield running


@pytest.fixture(scope="module")
def client_cert(pki: Pki) -> Issued:
    """A client-only certificate of the cluster CA (no server usage), as an application would hold."""
    return pki.issue("app-client", server=False)


def _allocate(channel: grpc.Channel) -> pid_pb.AllocateProducerIdBlockResponse:
    stub = pid_pb.PidAllocatorServiceStub(channel)
    return stub.AllocateProducerIdBlock(
        pid_pb.AllocateProducerIdBlockRequest(requester_id="tls-test", requester_epoch=1, block_size=10), timeout=10
    )


def _rejected(channel: grpc.Channel) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        _allocate(channel)
    return info.value


def test_mutual_tls_call_with_a_client_certificate_succeeds(
    mtls_cluster: LocalCluster, pki: Pki, client_cert: Issued
) -> None:
    factory = ChannelFactory(credentials=credentials(pki, client_cert), server_name=SERVER_NAME)
    with factory.sync(mtls_cluster.addresses("pid-allocator")[0]) as channel:
        block = _allocate(channel)
    assert block.last_id - block.first_id + 1 == 10


def test_call_without_a_client_certificate_fails_the_handshake(mtls_cluster: LocalCluster, pki: Pki) -> None:
    factory = ChannelFactory(credentials=credentials(pki, None), server_name=SERVER_NAME)
    with factory.sync(mtls_cluster.addresses("pid-allocator")[0]) as channel:
        assert _rejected(channel).code() == grpc.StatusCode.UNAVAILABLE


def test_client_certificate_of_another_ca_is_rejected(mtls_cluster: LocalCluster, pki: Pki, tmp_path: Path) -> None:
    stranger = Pki(tmp_path, "stranger CA").issue("intruder", server=False)
    channel_credentials = grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=stranger.key.read_bytes(),
        certificate_chain=stranger.cert.read_bytes(),
    )
    factory = ChannelFactory(credentials=channel_credentials, server_name=SERVER_NAME)
    with factory.sync(mtls_cluster.addresses("pid-allocator")[0]) as channel:
        assert _rejected(channel).code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_call_to_the_tls_port_fails(mtls_cluster: LocalCluster) -> None:
    with ChannelFactory().sync(mtls_cluster.addresses("pid-allocator")[0]) as channel:
        assert _rejected(channel).code() == grpc.StatusCode.UNAVAILABLE


def test_server_certificate_is_verified_against_the_server_name(
    mtls_cluster: LocalCluster, pki: Pki, client_cert: Issued
) -> None:
    # the node certificate names only SERVER_NAME, so dialling 127.0.0.1 without the override must fail
    factory = ChannelFactory(credentials=credentials(pki, client_cert))
    with factory.sync(mtls_cluster.addresses("pid-allocator")[0]) as channel:
        assert _rejected(channel).code() == grpc.StatusCode.UNAVAILABLE


def test_plaintext_health_listener_answers_serving_and_nothing_else(mtls_cluster: LocalCluster) -> None:
    node = mtls_cluster.node("pid-allocator-0")
    health_address = json.loads(node.ready_file.read_text())["health_address"]
    assert health_address != node.address
    with grpc.insecure_channel(health_address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        assert (
            health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
        )
        service = "oncelog.api.pid.v1.PidAllocatorService"
        assert (
            health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
            == health_pb2.HealthCheckResponse.SERVING
        )
        with pytest.raises(grpc.RpcError) as info:
            _allocate(channel)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED, "only grpc.health.v1 is served without TLS"


def test_transaction_commits_over_mutual_tls_between_services(
    mtls_cluster: LocalCluster, pki: Pki, client_cert: Issued
) -> None:
    """InitProducerId fetches ids from the pid-allocator and EndTxn writes markers to partition-storage: both
    service-to-service channels must carry the node certificate for the transaction to complete."""
    factory = ChannelFactory(credentials=credentials(pki, client_cert), server_name=SERVER_NAME)
    admin = cluster_pb.ClusterServiceStub(factory.sync(mtls_cluster.bootstrap))
    admin.CreateTopics(
        cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=TOPIC, partitions=2)]), timeout=30
    )
    tid = "tls-txn"
    deadline = time.monotonic() + 30
    while True:
        try:
            found = admin.FindCoordinator(
                cluster_pb.FindCoordinatorRequest(key=tid, type=cluster_pb.COORDINATOR_TYPE_TRANSACTION), timeout=10
            )
            break
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    coordinator = txn_pb.TransactionCoordinatorServiceStub(factory.sync(found.address))
    producer = coordinator.InitProducerId(
        txn_pb.InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000), timeout=30
    ).producer
    coordinator.AddPartitionsToTxn(
        txn_pb.AddPartitionsToTxnRequest(
            transactional_id=tid,
            producer=producer,
            partitions=[common_pb.TopicPartition(topic=TOPIC, partition=p) for p in (0, 1)],
        ),
        timeout=30,
    )
    coordinator.EndTxn(
        txn_pb.EndTxnRequest(transactional_id=tid, producer=producer, result=common_pb.TRANSACTION_RESULT_COMMIT),
        timeout=30,
    )
    deadline = time.monotonic() + 30
    state = None
    while state != txn_pb.TRANSACTION_STATE_COMPLETE_COMMIT and time.monotonic() < deadline:
        described = coordinator.DescribeTransactions(
            txn_pb.DescribeTransactionsRequest(transactional_ids=[tid]), timeout=10
        )
        state = described.transactions[0].state
        time.sleep(0.02)
    assert state == txn_pb.TRANSACTION_STATE_COMPLETE_COMMIT, "markers did not reach partition-storage over mTLS"


# ---------------------------------------------------------------------------------------------- configuration


def test_modes_follow_the_variables(pki: Pki, node_cert: Issued) -> None:
    assert TlsConfig().mode is TlsMode.PLAINTEXT
    assert TlsConfig(cert=str(node_cert.cert), key=str(node_cert.key)).mode is TlsMode.TLS
    assert TlsConfig(cert=str(node_cert.cert), key=str(node_cert.key), ca=str(pki.ca)).mode is TlsMode.MUTUAL_TLS
    assert TlsConfig().server_credentials() is None and TlsConfig().channel_credentials() is None
    assert client_credentials_from_env({}) is None
    assert client_credentials_from_env({"ONCELOG_TLS_CA": str(pki.ca)}) is not None


def _problems(environ: dict[str, str]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        PidAllocatorSettings.from_env(environ)
    return info.value.problems


def test_certificate_without_key_names_the_missing_variable(node_cert: Issued) -> None:
    (problem,) = _problems({"ONCELOG_TLS_CERT": str(node_cert.cert)})
    assert problem.startswith("ONCELOG_TLS_CERT is set but ONCELOG_TLS_KEY is not")
    (problem,) = _problems({"ONCELOG_TLS_KEY": str(node_cert.key)})
    assert problem.startswith("ONCELOG_TLS_KEY is set but ONCELOG_TLS_CERT is not")


def test_ca_alone_is_refused_for_a_server_but_fine_for_a_client(pki: Pki) -> None:
    (problem,) = _problems({"ONCELOG_TLS_CA": str(pki.ca)})
    assert problem.startswith("ONCELOG_TLS_CA is set but ONCELOG_TLS_CERT and ONCELOG_TLS_KEY are not")
    assert TlsConfig(ca=str(pki.ca)).problems(serving=False) == []


def test_unreadable_files_are_named_with_their_variable(pki: Pki, node_cert: Issued, tmp_path: Path) -> None:
    missing = tmp_path / "absent.crt"
    problems = _problems(
        {"ONCELOG_TLS_CERT": str(node_cert.cert), "ONCELOG_TLS_KEY": str(node_cert.key), "ONCELOG_TLS_CA": str(missing)}
    )
    assert problems == [f"ONCELOG_TLS_CA={missing} cannot be read: No such file or directory"]


def test_content_that_is_not_a_certificate_is_rejected(pki: Pki, node_cert: Issued) -> None:
    # the key file where the certificate belongs
    config = TlsConfig(cert=str(node_cert.key), key=str(node_cert.key), ca=str(pki.ca))
    with pytest.raises(ConfigError) as info:
        config.server_credentials()
    (problem,) = info.value.problems
    assert problem.startswith(f"ONCELOG_TLS_CERT={node_cert.key} holds no PEM certificate")


def test_key_of_another_certificate_is_rejected(pki: Pki, node_cert: Issued) -> None:
    other = pki.issue("other-node")
    config = TlsConfig(cert=str(node_cert.cert), key=str(other.key), ca=str(pki.ca))
    with pytest.raises(ConfigError) as info:
        config.channel_credentials()
    (problem,) = info.value.problems
    assert problem.startswith(f"ONCELOG_TLS_KEY={other.key} is not an unencrypted PEM private key of the certificate")


def test_health_listen_must_be_host_and_port() -> None:
    (problem,) = _problems({"ONCELOG_PID_ALLOCATOR_HEALTH_LISTEN": "7199"})
    assert problem.startswith("ONCELOG_PID_ALLOCATOR_HEALTH_LISTEN='7199' must be host:port")


def test_service_with_a_mismatched_key_exits_2_naming_the_variable(pki: Pki, node_cert: Issued, tmp_path: Path) -> None:
    other = pki.issue("mismatch")
    env = {
        "ONCELOG_DATABASE_URL": f"sqlite:///{tmp_path / 'catalog.db'}",
        "ONCELOG_TLS_CERT": str(node_cert.cert),
        "ONCELOG_TLS_KEY": str(other.key),
        "ONCELOG_TLS_CA": str(pki.ca),
        "PATH": "/usr/bin:/bin",
    }
    done = subprocess.run(
        [sys.executable, "-m", "oncelog.pid_allocator"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, done.stderr
    assert f"ONCELOG_TLS_KEY={other.key}" in done.stderr
