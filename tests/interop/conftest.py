"""Fixtures of the Kafka-wire tests: Apache Kafka itself (the reference) and the oncelog kafka-gateway.

Apache Kafka's jars come from Maven Central (``scripts/kafka/fetch.sh``, cached outside git). Where they are not
fetched the tests skip with the command to run; ``ONCELOG_REQUIRE_KAFKA=1`` (CI) fetches them instead, and a
failed fetch fails the tests.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import ApacheKafka, KafkaGatewayProcess, fetch_kafka, kafka_libs


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApacheKafka]:
    """One Apache Kafka broker for the session."""
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")
    libs = kafka_libs()
    if libs is None:
        if os.environ.get("ONCELOG_REQUIRE_KAFKA") != "1":
            pytest.skip("Apache Kafka is not fetched: run scripts/kafka/fetch.sh (or set ONCELOG_REQUIRE_KAFKA=1)")
        libs = fetch_kafka()
    broker = ApacheKafka(Path(tmp_path_factory.mktemp("apache-kafka")), libs=libs)
    with broker:
        yield broker


@pytest.fixture(scope="session")
def oncelog_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A local oncelog cluster (one process per service) for the gateway."""
    with LocalCluster(Path(tmp_path_factory.mktemp("oncelog"))) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def kafka_gateway(oncelog_cluster: LocalCluster) -> Iterator[KafkaGatewayProcess]:
    """``python -m oncelog.kafka_gateway`` in front of the local cluster."""
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")
    with KafkaGatewayProcess(oncelog_cluster.bootstrap, oncelog_cluster.data_dir / "gateway") as gateway:
        yield gateway


@pytest.fixture(params=["apache-kafka", "oncelog"])
def kafka_bootstrap(request: pytest.FixtureRequest) -> str:
    """The bootstrap address of Apache Kafka, then of the oncelog gateway: each scenario runs against both."""
    if request.param == "apache-kafka":
        return str(request.getfixturevalue("apache_kafka").bootstrap)
    return str(request.getfixturevalue("kafka_gateway").address)


@pytest.fixture(autouse=True)
def _destroy_kafka_clients() -> Iterator[None]:
    """Collect a test's Kafka client objects while the brokers still run (a client left to interpreter exit keeps
    dialling the stopped brokers and prints after pytest's summary)."""
    yield
    gc.collect()
