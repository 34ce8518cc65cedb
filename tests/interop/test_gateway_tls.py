"""The kafka-gateway's Kafka listener over TLS (``ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_*``): librdkafka with
``security.protocol=SSL`` produces and consumes through it; with a CA bundle a client must present a certificate
that CA signed (mutual TLS); a plaintext connection or one without a certificate gets nothing. (Bad certificate
settings: tests/unit/kafka_gateway/test_kafka_tls_settings.py.)
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator

import pytest

from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import KafkaGatewayProcess

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

confluent_kafka = pytest.importorskip("confluent_kafka")
pytest.importorskip("cryptography.x509", reason="certificates are made with cryptography (pip install)")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from oncelog.testing.pki import Issued, Pki  # noqa: E402


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("kafka-pki"))


@pytest.fixture(scope="module")
def listener_cert(pki: Pki) -> Issued:
    return pki.issue("kafka-listener", ips=("127.0.0.1",))


@pytest.fixture(scope="module")
def mtls_gateway(oncelog_cluster: LocalCluster, pki: Pki, listener_cert: Issued) -> Iterator[KafkaGatewayProcess]:
    """A gateway whose Kafka listener serves TLS and requires a client certificate signed by ``pki``."""
    env = {
        "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_CERT": str(listener_cert.cert),
        "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_KEY": str(listener_cert.key),
        "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_CA": str(pki.ca),
    }
    with KafkaGatewayProcess(oncelog_cluster.bootstrap, oncelog_cluster.data_dir / "tls-gateway", env=env) as gateway:
        yield gateway


def _ssl_config(pki: Pki, client: Issued | None) -> dict[str, str]:
    config = {"security.protocol": "SSL", "ssl.ca.location": str(pki.ca)}
    if client is not None:
        config |= {"ssl.certificate.location": str(client.cert), "ssl.key.location": str(client.key)}
    return config


def _api_versions_over(sock: socket.socket) -> bytes:
    """Send ApiVersions v0 and return the first bytes of the answer (b"" when the gateway closed)."""
    body = struct.pack(">hhih", 18, 0, 1, -1)
    sock.sendall(struct.pack(">i", len(body)) + body)
    return sock.recv(8)


def test_librdkafka_produces_and_consumes_over_mutual_tls(mtls_gateway: KafkaGatewayProcess, pki: Pki) -> None:
    client = pki.issue(f"client-{uuid.uuid4().hex[:6]}", server=False)
    config = {"bootstrap.servers": mtls_gateway.address, **_ssl_config(pki, client)}
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    producer = Producer({**config, "enable.idempotence": True})
    for i in range(3):
        producer.produce(topic, f"secret-{i}".encode(), partition=0)
    assert producer.flush(60) == 0
    consumer = Consumer({**config, "group.id": f"tls-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    values: list[bytes] = []
    deadline = time.monotonic() + 60
    try:
        while len(values) < 3 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"secret-0", b"secret-1", b"secret-2"]


def _answered(address: str, context: ssl.SSLContext | None) -> bool:
    """Whether an ApiVersions request over a new connection (TLS with ``context``, else plaintext) is answered."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as raw:
        try:
            if context is None:
                return _api_versions_over(raw) != b""
            with context.wrap_socket(raw, server_hostname=host) as tls:
                return _api_versions_over(tls) != b""
        except (ssl.SSLError, ConnectionError):  # TLS 1.3 reports a refused client certificate at the first read
            return False


def test_a_client_without_a_certificate_or_without_tls_gets_no_answer(
    mtls_gateway: KafkaGatewayProcess, pki: Pki
) -> None:
    assert not _answered(mtls_gateway.address, None)
    assert not _answered(mtls_gateway.address, ssl.create_default_context(cafile=str(pki.ca)))
    # a client with a certificate of this CA is answered on the same listener, which is still up
    client = pki.issue(f"client-{uuid.uuid4().hex[:6]}", server=False)
    with_cert = ssl.create_default_context(cafile=str(pki.ca))
    with_cert.load_cert_chain(str(client.cert), str(client.key))
    assert _answered(mtls_gateway.address, with_cert)
