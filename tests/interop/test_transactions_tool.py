"""Kafka's own ``kafka-transactions.sh`` (TransactionsCommand from the kafka-tools jar) lists and describes an open
transaction and its producer alike on Apache Kafka 4.4 and on the kafka-gateway."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from oncelog.testing.kafka import kafka_libs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def _tool(bootstrap: str, *args: str) -> str:
    libs = kafka_libs()
    if shutil.which("java") is None or libs is None:
        pytest.skip("needs java and the fetched Kafka jars (scripts/kafka/fetch.sh)")
    done = subprocess.run(
        ["java", "-XX:TieredStopAtLevel=1", "-cp", f"{libs}/*", "org.apache.kafka.tools.TransactionsCommand",
         "--bootstrap-server", bootstrap, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    return done.stdout


def test_kafka_transactions_lists_and_describes_an_open_transaction_and_its_producer(kafka_bootstrap: str) -> None:
    topic, tid = f"tools-{uuid.uuid4().hex[:8]}", f"tools-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(60)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": tid})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"open", partition=0)
    assert producer.flush(60) == 0
    try:
        listed = [line.split() for line in _tool(kafka_bootstrap, "list").splitlines()]
        (row,) = [cells for cells in listed if cells and cells[0] == tid]
        assert row[-1] == "Ongoing", listed
        producer_id = row[2]
        described = _tool(kafka_bootstrap, "describe", "--transactional-id", tid).splitlines()
        assert described[0].split()[:2] == ["CoordinatorId", "TransactionalId"], described
        cells = described[1].split()
        assert cells[1] == tid and producer_id in cells and "Ongoing" in cells and f"{topic}-0" in described[1]
        producers = _tool(kafka_bootstrap, "describe-producers", "--topic", topic, "--partition", "0").splitlines()
        (mine,) = [line.split() for line in producers[1:] if line.split() and line.split()[0] == producer_id]
        assert mine[-1] == "0", producers  # CurrentTransactionStartOffset: the open transaction's first record
    finally:
        producer.abort_transaction(60)
