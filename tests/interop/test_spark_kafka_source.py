"""Spark's own Kafka source (``format("kafka")``, spark-sql-kafka-0-10 from Maven Central) reads a transactional
topic through oncelog's kafka-gateway and through Apache Kafka 4.4 alike.

One topic per system, written by confluent-kafka's transactional producer: a committed transaction, an aborted
one, a committed one, then a non-transactional record, over two partitions. Spark reads it as a batch
(``spark.read``) and as a stream (``readStream`` with ``trigger(availableNow=True)`` into a memory sink), with
``kafka.isolation.level=read_committed``: both systems must give the same (partition, offset, value) rows, every
committed record and no aborted one. The same batch read at ``read_uncommitted`` does show the aborted records,
which proves the isolation option reached the Kafka consumer inside Spark.

The connector's jars come from ``scripts/spark/fetch-kafka-connector.sh`` (cached outside git); they are skipped
where not fetched, and fetched (a failed fetch fails the test) with ``ONCELOG_REQUIRE_KAFKA=1``, as in CI.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing.kafka import ApacheKafka, KafkaGatewayProcess
from oncelog.testing.spark import (
    fetch_kafka_connector,
    kafka_connector_jars,
    local_spark_session,
    spark_unavailable,
)

# the timeout covers the fixtures too (broker, cluster, gateway and SparkSession start), slow on a loaded machine
pytestmark = [pytest.mark.kafka, pytest.mark.spark, pytest.mark.timeout(600)]

PARTITIONS = 2
# what each step writes to each partition; the aborted values must never be read at read_committed
STEPS = (("commit", "first"), ("abort", "aborted"), ("commit", "second"), ("plain", "plain"))
PER_STEP = 3


@pytest.fixture(scope="module")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local SparkSession with Spark's Kafka connector on its class path."""
    reason = spark_unavailable()
    if reason:
        pytest.skip(reason)
    jars = kafka_connector_jars()
    if jars is None:
        if os.environ.get("ONCELOG_REQUIRE_KAFKA") != "1":
            pytest.skip(
                "Spark's Kafka connector is not fetched: run scripts/spark/fetch-kafka-connector.sh "
                "(or set ONCELOG_REQUIRE_KAFKA=1)"
            )
        jars = fetch_kafka_connector()
    with local_spark_session(tmp_path_factory.mktemp("spark-kafka"), master="local[2]", jars=jars) as session:
        yield session


def _write_transactions(bootstrap: str) -> tuple[str, list[tuple[int, str]], list[str]]:
    """The scenario's topic on ``bootstrap``; returns its name, the visible (partition, value) records in
    partition order, and the aborted values."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"spark-src-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[topic].result(60)
    transactional = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"spark-src-{uuid.uuid4().hex[:8]}", "linger.ms": 5}
    )
    transactional.init_transactions(60)
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    visible: list[tuple[int, str]] = []
    aborted: list[str] = []
    for outcome, label in STEPS:
        producer = plain if outcome == "plain" else transactional
        if outcome != "plain":
            transactional.begin_transaction()
        for partition in range(PARTITIONS):
            for i in range(PER_STEP):
                value = f"{label}-{partition}-{i}"
                producer.produce(topic, value=value.encode(), partition=partition)
                (aborted.append(value) if outcome == "abort" else visible.append((partition, value)))
        if outcome == "commit":
            transactional.commit_transaction(60)
            _await_markers(bootstrap, topic)
        elif outcome == "abort":
            # flushed first: librdkafka's abort would otherwise purge the records before they reach the log
            assert transactional.flush(60) == 0
            transactional.abort_transaction(60)
        else:
            assert plain.flush(60) == 0
    return topic, sorted(visible, key=lambda record: record[0]), aborted  # stable: write order


def _await_markers(bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
    """Wait until every partition's last stable offset reached its log end: the committed transaction's markers
    are written. commit_transaction() returns once the commit is decided and the markers follow (Kafka's contract
    and oncelog's, design/read-after-commit.md §2), so a plain record written right after it can land before the
    marker on one system and after it on the other, and the two would disagree on offsets."""
    from confluent_kafka import Consumer, TopicPartition

    def reader(isolation: str) -> Any:
        return Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"markers-{uuid.uuid4().hex[:6]}",
                "isolation.level": isolation,
            }
        )

    committed, uncommitted = reader("read_committed"), reader("read_uncommitted")
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ends = [
                (c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for c in (committed, uncommitted))
                for p in range(PARTITIONS)
            ]
            if all(stable == end for stable, end in ends):
                return
            assert time.monotonic() < deadline, f"the commit markers of {topic} were not written in {timeout_s} s"
            time.sleep(0.05)
    finally:
        committed.close()
        uncommitted.close()


def _batch_rows(spark: Any, bootstrap: str, topic: str, isolation: str) -> list[tuple[int, int, str]]:
    frame = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", isolation)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    rows = frame.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect()
    return sorted((row.partition, row.offset, row.value) for row in rows)


def _stream_rows(spark: Any, bootstrap: str, topic: str, checkpoint: Path) -> list[tuple[int, int, str]]:
    name = f"kafka_source_{uuid.uuid4().hex[:8]}"
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("kafka.isolation.level", "read_committed")
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(120), "the availableNow query did not finish within 120 s"
        assert query.exception() is None, query.exception()
        rows = spark.sql(f"SELECT partition, offset, value FROM {name}").collect()
    finally:
        query.stop()
    return sorted((row.partition, row.offset, row.value) for row in rows)


def test_spark_kafka_source_reads_committed_records_alike_from_the_gateway_and_apache_kafka(
    spark: Any, apache_kafka: ApacheKafka, kafka_gateway: KafkaGatewayProcess, tmp_path: Path
) -> None:
    seen: dict[str, dict[str, list[tuple[int, int, str]]]] = {}
    for system, bootstrap in (("apache-kafka", apache_kafka.bootstrap), ("oncelog", kafka_gateway.address)):
        topic, visible, aborted = _write_transactions(bootstrap)
        committed = _batch_rows(spark, bootstrap, topic, "read_committed")
        uncommitted = _batch_rows(spark, bootstrap, topic, "read_uncommitted")
        streamed = _stream_rows(spark, bootstrap, topic, tmp_path / f"checkpoint-{system}")

        # every committed and plain record, in offset order within its partition, and no aborted one
        assert [(p, v) for p, _, v in committed] == visible, system
        assert streamed == committed, system
        # read_uncommitted shows the aborted records: the isolation option reached the consumer
        assert sorted(v for _, _, v in uncommitted) == sorted([v for _, v in visible] + aborted), system
        seen[system] = {"read_committed": committed, "read_uncommitted": uncommitted}

    # the same offsets too: commit markers take one offset each, aborted records keep theirs
    assert seen["oncelog"] == seen["apache-kafka"]
