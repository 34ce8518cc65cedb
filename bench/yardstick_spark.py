"""The Spark row of ``bench.yardstick``: oncelog's exactly-once sink against Spark's own Kafka sink writing to
Apache Kafka 4.4, warm micro-batch time, in one SparkSession.

Spark's Kafka connector (``spark-sql-kafka-0-10_2.13``) comes from Maven Central through
``scripts/spark/fetch-kafka-connector.sh``: the installed pyspark's release when it is served, else the newest
that is (pyspark 4.3.0: 4.2.0; the jar's ``CONNECTOR_VERSION`` says which, and the JSON records it).

One streaming query per sink and mode, each reading its own source topic on the Kafka broker with Spark's Kafka
source (``read_committed``), through the pipeline of ``bench.spark`` (``key = offset``, ``value = upper(value)``,
64-byte values, two source partitions), into ``format("oncelog")`` (exactly-once, one transaction per task, a
topic of the mode's flush) or ``format("kafka")`` (at-least-once: Spark's cached idempotent producer, acks=all, a
Kafka topic of the mode's flush). The two sinks differ in nothing but the sink, and the source runs in the JVM: a
Python streaming source would start a Python worker per query, which Spark gives 10 s to connect back, too little
under ``nice`` on a loaded machine. Each round commits ``rows`` records to each query's source in one transaction
(so a micro-batch holds exactly ``rows``) and waits for that query to process them, the queries taking turns in an
order rotated every round; round 0 is cold and dropped. The figure is Spark's ``triggerExecution`` time of each
warm batch.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer as KProducer

from bench.spark import SOURCE_PARTITIONS, Sink, _progress_id, _values, _wait_for_rows, start_pipeline
from bench.yardstick_sides import Side
from oncelog.testing.spark import (
    fetch_kafka_connector,
    kafka_connector_jars,
    kafka_connector_version,
    local_spark_session,
)

FIGURE = "spark_sink_ms"


class KafkaFeeder:
    """Commits the next ``rows`` records of a source topic in one transaction (confluent-kafka)."""

    def __init__(self, bootstrap: str, rows: int) -> None:
        self.rows = rows
        self._producer = KProducer(
            {"bootstrap.servers": bootstrap, "transactional.id": f"yard-spark-{uuid.uuid4().hex[:8]}",
             "linger.ms": 20}
        )  # fmt: skip
        self._producer.init_transactions(120)
        self._next: dict[str, int] = {}

    def feed(self, topic: str) -> None:
        first = self._next.get(topic, 0)
        self._next[topic] = first + self.rows
        self._producer.begin_transaction()
        for partition in range(SOURCE_PARTITIONS):
            for value in _values(range(first + partition, first + self.rows, SOURCE_PARTITIONS)):
                self._producer.produce(topic, value, partition=partition)
        self._producer.commit_transaction(120)


def _start(spark: Any, kafka_bootstrap: str, source: str, rows: int, checkpoint: Path, sink: Sink) -> Any:
    options = {
        "kafka.bootstrap.servers": kafka_bootstrap,
        "kafka.isolation.level": "read_committed",
        "subscribe": source,
    }
    return start_pipeline(spark, "kafka", options, rows, checkpoint, sink)


def measure_spark_sinks(
    oncelog: Side, kafka: Side, modes: tuple[str, ...], rows: int, runs: int, tmp: Path
) -> tuple[dict[tuple[str, str], list[float]], str]:
    """Warm micro-batch milliseconds of each (mode, side); and the Kafka connector's version."""
    jars = kafka_connector_jars() or fetch_kafka_connector()
    sinks: list[Sink] = []
    keys: dict[str, tuple[str, str]] = {}
    for mode in modes:
        ours = Sink(
            f"oncelog sink, {mode}", "oncelog", {"bootstrap": oncelog.bootstrap, "topic": oncelog.topic(mode, 2)}
        )
        theirs = Sink(
            f"Spark's Kafka sink, {mode}",
            "kafka",
            {"kafka.bootstrap.servers": kafka.bootstrap, "topic": kafka.topic(mode, partitions=2)},
        )
        sinks += [ours, theirs]
        keys[ours.label], keys[theirs.label] = (mode, oncelog.name), (mode, kafka.name)
    sources = {sink.label: kafka.topic("default", partitions=SOURCE_PARTITIONS) for sink in sinks}
    feeder = KafkaFeeder(kafka.bootstrap, rows)
    milliseconds: dict[tuple[str, str], list[float]] = {key: [] for key in keys.values()}
    # Spark's default JVM flags (no C1-only quick start): warm batches are what is measured
    with local_spark_session(
        tmp / "spark", master="local[2]", app_name="oncelog-yardstick", java_options="", jars=jars
    ) as spark:
        queries = {
            sink.label: _start(spark, kafka.bootstrap, sources[sink.label], rows, tmp / f"ck-{i}", sink)
            for i, sink in enumerate(sinks)
        }
        try:
            for round_ in range(runs + 1):
                order = [sink.label for sink in sinks]
                order = order[round_ % len(order) :] + order[: round_ % len(order)]
                for label in order:
                    query = queries[label]
                    seen = {_progress_id(p) for p in query.recentProgress}
                    feeder.feed(sources[label])
                    batches = _wait_for_rows(query, seen, rows, label)
                    if [p["numInputRows"] for p in batches] != [rows]:
                        # the query polled between the commit markers of the two source partitions
                        print(f"{label}: round {round_} split into {[p['numInputRows'] for p in batches]}; dropped")
                    elif round_:
                        milliseconds[keys[label]].append(float(batches[0]["durationMs"]["triggerExecution"]))
                print(f"Spark round {round_} done", flush=True)
        finally:
            for query in queries.values():
                query.stop()
    return milliseconds, kafka_connector_version(jars)
