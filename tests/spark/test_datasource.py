"""The ``oncelog`` format inside a real Spark session: batch reads, micro-batches, restarts, bad options.

Connector logic is tested without a JVM in ``tests/unit/spark``; these few tests check what only Spark
can show: the pickling between driver and executors, Arrow batches matching the declared schema, the
checkpoint round trip of our offsets, and how errors surface to the user.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing import LocalCluster

from .conftest import Topic

pytestmark = pytest.mark.timeout(300)


def read_stream(spark: Any, cluster: LocalCluster, topic: Topic, **options: object) -> Any:
    reader = spark.readStream.format("oncelog").option("bootstrap", cluster.bootstrap).option("topic", topic.name)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load()


def run_available_now(frame: Any, output: Path, checkpoint: Path) -> Any:
    """Run the query to the data available now, into Parquet files under ``output``; returns the query."""
    query = (
        frame.writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    return query


def test_batch_read_returns_committed_rows_in_the_kafka_schema(spark: Any, cluster: LocalCluster) -> None:
    topic = Topic(cluster)
    topic.append(0, ["a", "b"])
    topic.append(1, ["aborted"], txn="abort")
    topic.append(1, ["c"], txn="commit")
    started = time.monotonic()
    frame = spark.read.format("oncelog").option("bootstrap", cluster.bootstrap).option("topic", topic.name).load()
    assert frame.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,"
        "headers:map<string,binary>>"
    )
    found = sorted((r.partition, r.offset, bytes(r.value).decode()) for r in frame.collect())
    assert found == [(0, 0, "a"), (0, 1, "b"), (1, 2, "c")], "aborted data and markers are not rows"
    print(f"batch read through Spark: {time.monotonic() - started:.1f}s")


def test_stream_reads_every_committed_row_once_across_batches_and_restart(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    topic = Topic(cluster)
    for p in (0, 1):
        topic.append(p, [f"{p}-{i}" for i in range(30)])
        topic.append(p, [f"{p}-aborted"], txn="abort")
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    frame = read_stream(spark, cluster, topic, startingOffsets="earliest", maxRecordsPerTrigger=20)
    frame = frame.selectExpr("CAST(value AS STRING) AS v", "partition", "offset")
    started = time.monotonic()
    first = run_available_now(frame, output, checkpoint)
    batches = first.recentProgress
    assert len([b for b in batches if b["numInputRows"] > 0]) >= 3, "maxRecordsPerTrigger split the backlog"
    end = json.loads(batches[-1]["sources"][0]["endOffset"])
    assert end == {topic.name: {"0": 32, "1": 32}}, "offsets in the checkpoint are ours, past the aborted data"
    for p in (0, 1):
        topic.append(p, [f"{p}-late"], txn="commit")
    second = run_available_now(frame, output, checkpoint)
    elapsed = time.monotonic() - started
    assert [json.loads(b["sources"][0]["startOffset"]) for b in second.recentProgress][:1] == [end]
    written = sorted(r.v for r in spark.read.parquet(str(output)).collect())
    expected = sorted([f"{p}-{i}" for p in (0, 1) for i in range(30)] + ["0-late", "1-late"])
    assert written == expected, "every committed row once: no aborted row, no replay after the restart"
    print(f"two availableNow runs ({len(batches)} + 1 batches): {elapsed:.1f}s")


def test_bad_options_are_reported_with_the_option_name(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="startingOffsets:"):
        spark.read.format("oncelog").option("bootstrap", cluster.bootstrap).option("topic", "t").option(
            "startingOffsets", "{broken"
        ).load()
    with pytest.raises(Exception, match=r"topic: .*no-such-topic"):
        spark.read.format("oncelog").option("bootstrap", cluster.bootstrap).option(
            "topic", "no-such-topic"
        ).load().count()
    frame = (
        spark.readStream.format("oncelog")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", "no-such-topic")
        .load()
    )
    query = frame.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "c")).start()
    with pytest.raises(Exception, match=r"topic: .*no-such-topic"):
        query.awaitTermination(120)
