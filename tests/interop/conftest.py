"""Fixtures of the Kafka-wire tests: Apache Kafka itself (the reference) and the oncelog kafka-gateway.

Apache Kafka's jars come from Maven Central (``scripts/kafka/fetch.sh``, cached outside git). Where they are not
fetched the tests skip with the command to run; ``ONCELOG_REQUIRE_KAFKA=1`` (CI) fetches them instead, and a
failed fetch fails the tests.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.testing.kafka import ApacheKafka, fetch_kafka, kafka_libs


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
