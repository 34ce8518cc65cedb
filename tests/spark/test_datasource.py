"""The ``oncelog`` format inside a real Spark session: batch reads, micro-batches, restarts, bad options.

Connector logic is tested without a JVM in ``tests/unit/spark`` and, against a local cluster,
``tests/integration/spark``; these few tests check what only Spark
can show: the pickling between driver and executors, Arrow batches matching the declared schema, the
checkpoint round trip of our offsets, and how errors surface to the user.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from oncelog.spark.channels import LogClient
from oncelog.testing import LocalCluster
from oncelog.vocabulary import IsolationLevel

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
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    )
    found = sorted((r.partition, r.offset, bytes(r.value).decode()) for r in frame.collect())
    assert found == [(0, 0, "a"), (0, 1, "b"), (1, 2, "c")], "aborted data and markers are not rows"
    with_headers = (
        spark.read.format("oncelog")
        .option("bootstrap", cluster.bootstrap)
        .option("subscribe", topic.name)
        .option("includeHeaders", "true")
        .load()
    )
    assert with_headers.schema.simpleString().endswith(
        ",timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    assert {r.offset: r.headers for r in with_headers.collect()} == {0: [], 1: [], 2: []}
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
    with pytest.raises(Exception, match=r"maxoffsetpertrigger: unknown option; did you mean 'maxOffsetsPerTrigger'"):
        spark.readStream.format("oncelog").option("bootstrap", cluster.bootstrap).option("subscribe", "t").option(
            "maxOffsetPerTrigger", "-1"
        ).load()
    with pytest.raises(Exception, match=r"maxOffsetsPerTrigger: must be at least 1, got -5"):
        spark.readStream.format("oncelog").option("bootstrap", cluster.bootstrap).option("subscribe", "t").option(
            "maxOffsetsPerTrigger", "-5"
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


class BackgroundWriter:
    """Appends to every partition of ``topic`` until stopped, as producers do while a query starts."""

    def __init__(self, topic: Topic, partitions: int = 2) -> None:
        self.topic, self.partitions = topic, partitions
        self.stopped = threading.Event()
        self.appended = threading.Semaphore(0)
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="background-writer", daemon=True)

    def __enter__(self) -> BackgroundWriter:
        self.thread.start()
        self.appended.acquire()  # the topic is being written before the query starts
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.thread.join(30)
        assert self.failure is None, self.failure

    def _run(self) -> None:
        try:
            i = 0
            while not self.stopped.is_set():
                for p in range(self.partitions):
                    self.topic.append(p, [f"{p}-{i}"])
                self.appended.release()
                i += 1
                self.stopped.wait(0.02)  # the pace of the producers, not a synchronisation
        except BaseException as exc:  # reported by __exit__
            self.failure = exc


def test_stream_from_latest_on_a_topic_being_written_loses_nothing_through_a_restart(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """``startingOffsets=latest`` (the default) under Trigger.AvailableNow while producers write, then a restart
    that replays batch 0 and two more runs.

    Spark asks the source for batch 0's start when it plans it, when it runs it and when a restart replays
    it; the records written in between must not move that start (the snapshot of AvailableNow then looked
    like a truncated topic, and a replay failed with "end offset … is before start offset …"), and every
    record after it must be read exactly once.
    """
    topic = Topic(cluster)
    checkpoint, output = tmp_path / "checkpoint", tmp_path / "out"
    frame = read_stream(spark, cluster, topic).selectExpr("partition", "offset")
    with BackgroundWriter(topic):
        first = run_available_now(frame, output, checkpoint)
        assert first.recentProgress[0]["batchId"] == 0 and first.recentProgress[0]["numInputRows"] == 0
        pinned = json.loads(first.recentProgress[0]["sources"][0]["endOffset"])[topic.name]
        last = max(b["batchId"] for b in first.recentProgress)
        # as if the driver died after the last batch's offsets were logged but before its commit
        (checkpoint / "commits" / str(last)).unlink()
        (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
        replay = run_available_now(frame, output, checkpoint)
        assert replay.recentProgress[0]["batchId"] == last, "the restart replayed the uncommitted batch"
    run_available_now(frame, output, checkpoint)  # the rest, now that the writer stopped
    client = LogClient([cluster.bootstrap])
    end = client.list_offsets(client.topic_partitions([topic.name]), "latest", IsolationLevel.READ_COMMITTED)
    written = sorted((r.partition, r.offset) for r in spark.read.parquet(str(output)).collect())
    expected = sorted((tp.partition, o) for tp in end for o in range(pinned[str(tp.partition)], end[tp]))
    assert min(end.values()) > max(pinned.values()), "records arrived after the start was pinned"
    assert len(written) == len(set(written)), "no record twice"
    assert written == expected, "every record after the pinned start, none before"
