"""Kafka's own command-line tools (the kafka-tools jar run with ``java -cp``, as ``bin/kafka-*.sh`` run them) give
the same results on Apache Kafka 4.4 and on the kafka-gateway: kafka-topics creates and describes a topic,
kafka-console-producer writes keyed records, kafka-transactions aborts a hanging transaction, and
kafka-console-consumer at read_committed reads what is committed, past the aborted transaction."""

from __future__ import annotations

import shutil
import subprocess
import uuid

import pytest

from oncelog.testing.kafka import kafka_libs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Message, Producer  # noqa: E402

TOPICS = "org.apache.kafka.tools.TopicCommand"
CONSOLE_PRODUCER = "org.apache.kafka.tools.ConsoleProducer"
CONSOLE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleConsumer"
TRANSACTIONS = "org.apache.kafka.tools.TransactionsCommand"


def _command(main: str, bootstrap: str, *args: str) -> list[str]:
    libs = kafka_libs()
    if shutil.which("java") is None or libs is None:
        pytest.skip("needs java and the fetched Kafka jars (scripts/kafka/fetch.sh)")
    return ["java", "-XX:TieredStopAtLevel=1", "-cp", f"{libs}/*", main, "--bootstrap-server", bootstrap, *args]


def _tool(main: str, bootstrap: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        _command(main, bootstrap, *args), input=stdin, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, f"{main} {args}: {done.stdout}{done.stderr[-3000:]}"
    return done.stdout


def _offset_of(producer: Producer, topic: str, value: bytes) -> int:
    """Produce ``value`` to partition 0 and return its offset from the delivery report."""
    delivered: list[Message] = []
    producer.produce(topic, value, partition=0, on_delivery=lambda err, msg: delivered.append(err or msg))
    assert producer.flush(60) == 0
    (message,) = delivered
    assert isinstance(message, Message), message
    return int(message.offset())


def test_kafka_topics_console_clients_and_transactions_abort(kafka_bootstrap: str) -> None:
    topic = f"cli-{uuid.uuid4().hex[:8]}"
    created = _tool(
        TOPICS, kafka_bootstrap, "--create", "--topic", topic, "--partitions", "1", "--replication-factor", "1",
        "--config", "retention.ms=3600000",
    )  # fmt: skip
    assert created.strip() == f"Created topic {topic}."
    # --describe and the console producer run side by side: both only need the topic
    describing = subprocess.Popen(
        _command(TOPICS, kafka_bootstrap, "--describe", "--topic", topic), stdout=subprocess.PIPE, text=True
    )
    _tool(
        CONSOLE_PRODUCER, kafka_bootstrap, "--topic", topic, "--reader-property", "parse.key=true",
        "--reader-property", "key.separator=:", stdin="a:one\nb:two\n",
    )  # fmt: skip
    described, _ = describing.communicate(timeout=120)
    assert describing.returncode == 0, described
    header, partition = (line.strip().split("\t") for line in described.strip().splitlines())
    assert header[0] == f"Topic: {topic}" and header[2:4] == ["PartitionCount: 1", "ReplicationFactor: 1"]
    assert "retention.ms=3600000" in header[4].removeprefix("Configs: ").split(","), header
    fields = dict(cell.split(": ", 1) for cell in partition[1:5])
    assert fields["Partition"] == "0" and fields["Leader"] == fields["Replicas"] == fields["Isr"], partition
    # the tool reads the partitions with DescribeTopicPartitions (it prints N/A for the eligible leader replicas
    # when it had to fall back to Metadata); no replica is an eligible leader replica here
    elr = {name: value.strip() for name, value in (cell.split(":", 1) for cell in partition[5:])}
    assert elr == {"Elr": "", "LastKnownElr": ""}, partition

    # a committed transaction, then one left open: it holds the last stable offset until the tool aborts it
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"cli-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    producer.begin_transaction()
    assert _offset_of(producer, topic, b"committed") == 2
    producer.commit_transaction(60)
    producer.begin_transaction()
    hanging = _offset_of(producer, topic, b"hanging")
    assert hanging == 4  # after the commit marker
    _tool(TRANSACTIONS, kafka_bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", str(hanging))
    after = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    assert _offset_of(after, topic, b"after") == 6  # after the abort marker the tool wrote

    read = _tool(
        CONSOLE_CONSUMER, kafka_bootstrap, "--topic", topic, "--from-beginning", "--isolation-level", "read_committed",
        "--max-messages", "4", "--timeout-ms", "60000", "--formatter-property", "print.offset=true",
        "--formatter-property", "print.key=true",
    )  # fmt: skip
    # the consumer reaches "after" only because the abort moved the last stable offset past the hanging record
    assert [line.split("\t") for line in read.strip().splitlines()] == [
        ["Offset:0", "a", "one"], ["Offset:1", "b", "two"], ["Offset:2", "null", "committed"],
        ["Offset:6", "null", "after"],
    ]  # fmt: skip
