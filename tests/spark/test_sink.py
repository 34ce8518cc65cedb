"""The exactly-once sink inside a real Spark session: task retries and batch replays leave one copy.

The pipeline is the consume-transform-produce shape of a user job: an ``oncelog`` topic, a transform,
and the ``oncelog`` sink into another topic. The protocol itself (fencing, markers, digests) is tested
without a JVM in ``tests/integration/spark/test_writer.py``; here Spark supplies the failures.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing import LocalCluster

from .conftest import Topic

pytestmark = pytest.mark.timeout(300)


def pipeline(spark: Any, cluster: LocalCluster, source: Topic, **read_options: object) -> Any:
    """``source`` → upper-cased values, keyed by the source offset (deterministic per Spark partition)."""
    reader = spark.readStream.format("oncelog").option("bootstrap", cluster.bootstrap).option("topic", source.name)
    reader = reader.option("startingOffsets", "earliest")
    for key, value in read_options.items():
        reader = reader.option(key, str(value))
    return reader.load().selectExpr("CAST(offset AS STRING) AS key", "upper(CAST(value AS STRING)) AS value")


def run_to_end(frame: Any, cluster: LocalCluster, sink: Topic, checkpoint: Path, **sink_options: str) -> Any:
    writer = (
        frame.writeStream.format("oncelog")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", sink.name)
        .option("checkpointLocation", str(checkpoint))
    )
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(180)
    assert query.exception() is None, query.exception()
    return query


def fill(topic: Topic, per_partition: int) -> list[str]:
    for p in (0, 1):
        topic.append(p, [f"p{p}-{i}" for i in range(per_partition)])
    return sorted(f"P{p}-{i}" for p in (0, 1) for i in range(per_partition))


def fail_first_attempt(frame: Any, suffix: str) -> Any:
    """``frame`` whose first attempt of Spark partition 1 fails at the row whose value ends with ``suffix``."""
    from pyspark import TaskContext
    from pyspark.sql.functions import col, udf

    @udf(returnType="string")
    def fail(value):  # type: ignore[no-untyped-def]  # hints would make Spark guess a pandas UDF
        context = TaskContext.get()
        if context.partitionId() == 1 and context.attemptNumber() == 0 and value.endswith(suffix):
            raise RuntimeError("injected task failure")
        return value

    return frame.withColumn("value", fail(col("value")))


def test_stream_writes_each_row_once_through_a_task_failure(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    """Partition 1's first attempt dies in the middle of its rows; the retry (attempt 1) fences it and commits.

    Whether the failed attempt had produced anything depends on Spark's buffering between the UDF worker and
    the writer worker (here it usually had not); ``tests/integration/spark/test_writer.py`` covers the attempt that
    had, with the open transaction aborted by the retry's InitProducerId.
    """
    source, sink = Topic(cluster), Topic(cluster)
    expected = fill(source, 60)
    frame = fail_first_attempt(pipeline(spark, cluster, source), "-50")
    started = time.monotonic()
    query = run_to_end(frame, cluster, sink, tmp_path / "checkpoint")
    assert sum(p["numInputRows"] for p in query.recentProgress) == len(expected)
    assert sink.values(cluster) == expected, "every row exactly once"
    raw = sink.values(cluster, "read_uncommitted")
    assert sorted(set(raw)) == expected, "whatever the failed attempt sent was aborted, never committed twice"
    print(f"stream with a task retry: {time.monotonic() - started:.1f}s, {len(raw) - len(expected)} aborted rows")


def test_replay_of_a_committed_batch_writes_no_duplicate(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    """The driver died after the tasks committed batch N but before Spark recorded ``commits/N``.

    Removing ``commits/N`` recreates exactly that checkpoint: the restart replays batch N with the same
    offsets, every task finds its marker at N and skips.
    """
    source, sink = Topic(cluster), Topic(cluster)
    expected = fill(source, 40)
    checkpoint = tmp_path / "checkpoint"
    frame = pipeline(spark, cluster, source, maxRecordsPerTrigger=30)
    started = time.monotonic()
    first = run_to_end(frame, cluster, sink, checkpoint)
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert last >= 2 and first.recentProgress[-1]["batchId"] == last
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)  # Hadoop's checksum of the file
    replay = run_to_end(frame, cluster, sink, checkpoint)
    assert [p["batchId"] for p in replay.recentProgress] == [last], "Spark replayed exactly the last batch"
    assert replay.recentProgress[0]["numInputRows"] > 0
    assert sink.values(cluster) == expected
    assert sink.values(cluster, "read_uncommitted") == expected, "the replay sent nothing, not even aborted data"
    print(f"{last + 1} batches, then a replay of batch {last}: {time.monotonic() - started:.1f}s")


def test_bad_sink_columns_fail_at_query_start(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    source, sink = Topic(cluster), Topic(cluster)
    frame = spark.readStream.format("oncelog").option("bootstrap", cluster.bootstrap).option("topic", source.name)
    frame = frame.load().selectExpr("offset AS value")
    query = (
        frame.writeStream.format("oncelog")
        .option("bootstrap", cluster.bootstrap)
        .option("topic", sink.name)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )
    with pytest.raises(Exception, match="value: column of type bigint; cast it to binary or string"):
        query.awaitTermination(120)


def test_driver_killed_mid_stream_restarts_without_loss_or_duplicates(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """SIGKILL of a whole driver (JVM and Python workers) inside a batch, then a restart from its checkpoint.

    The kill lands while batch N is logged in ``offsets/N`` but not yet in ``commits/N`` (the window where
    some of its tasks may have committed), so the restart replays N: committed tasks skip, the others write.
    The restart runs in this test session's Spark, as a new driver would: all it shares with the killed one
    is the checkpoint.
    """
    source, sink = Topic(cluster), Topic(cluster)
    expected = fill(source, 60)
    checkpoint = tmp_path / "checkpoint"
    started = time.monotonic()
    killed_in = _kill_driver_in_a_batch(cluster, source, sink, checkpoint, tmp_path / "driver.log")
    killed_at = time.monotonic()
    restart = run_to_end(pipeline(spark, cluster, source, maxRecordsPerTrigger=30), cluster, sink, checkpoint)
    assert restart.recentProgress[0]["batchId"] == killed_in, "the restart replayed the batch in flight"
    assert sink.values(cluster) == expected, "every input row is in the output exactly once"
    print(
        f"killed in batch {killed_in} after {killed_at - started:.1f}s; "
        f"restart drained in {time.monotonic() - killed_at:.1f}s"
    )


def _kill_driver_in_a_batch(
    cluster: LocalCluster, source: Topic, sink: Topic, checkpoint: Path, log_file: Path, *driver_args: str
) -> int:
    """Run ``pipeline_driver.py`` until a batch from 1 on is in flight, SIGKILL it there; returns that batch."""
    driver = Path(__file__).with_name("pipeline_driver.py")
    command = [sys.executable, str(driver), cluster.bootstrap, source.name, sink.name, str(checkpoint), *driver_args]
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            killed_in = _wait_for_batch_in_flight(checkpoint, process, at_least=1, timeout=180)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)
    assert killed_in is not None, f"the driver never reached batch 1:\n{log_file.read_text()[-3000:]}"
    assert not (checkpoint / "commits" / str(killed_in)).exists()
    return killed_in


@pytest.mark.timeout(900)
def test_restart_on_another_core_count_keeps_every_row_once(spark: Any, cluster: LocalCluster, tmp_path: Path) -> None:
    """A ``repartition(key)`` pipeline run on 4 cores, its last batch replayed on 2.

    Under Spark's defaults adaptive execution merges the shuffle's partitions by core count, so the replayed
    batch would give rows to other Spark partitions than the ones whose markers recorded them (duplicates
    and losses, or NonDeterministicBatchError on every run): the sink refuses to start that way, before
    writing anything, and says how to turn it off. Turned off, and with the session's shuffle partitions kept,
    the replay gives every Spark partition the rows it had.
    """
    from oncelog.spark.writer import STATELESS_AQE

    source, sink = Topic(cluster), Topic(cluster)
    expected = fill(source, 60)
    started = time.monotonic()
    spark.conf.set(STATELESS_AQE, "true")  # Spark 4.3's default
    try:
        refused = (
            pipeline(spark, cluster, source)
            .repartition("key")
            .writeStream.format("oncelog")
            .option("bootstrap", cluster.bootstrap)
            .option("topic", sink.name)
            .option("checkpointLocation", str(tmp_path / "refused"))
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(Exception, match=f'spark.conf.set\\("{STATELESS_AQE}", "false"\\)'):
            refused.awaitTermination(180)
    finally:
        spark.conf.set(STATELESS_AQE, "false")
    assert sink.values(cluster, "read_uncommitted") == [], "refused before any task wrote"
    refused_at = time.monotonic()
    checkpoint = tmp_path / "checkpoint"
    driver = Path(__file__).with_name("pipeline_driver.py")
    command = [sys.executable, str(driver), cluster.bootstrap, source.name, sink.name, str(checkpoint)]
    log_file = tmp_path / "driver.log"
    with log_file.open("wb") as log:
        # 4 cores, 8 shuffle partitions (pinned in the checkpoint), to the end of the input, then exit
        finished = subprocess.run([*command, "local[4,2]", "8", "once"], stdout=log, stderr=subprocess.STDOUT)
    assert finished.returncode == 0, log_file.read_text()[-3000:]
    last = max(_batch_ids(checkpoint / "commits"))
    assert last >= 2 and sink.values(cluster) == expected
    # the driver died after the sink committed the last batch, before Spark logged its commit
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    replayed_at = time.monotonic()
    # the session keeps its spark.sql.shuffle.partitions (repartition(col) takes it from the running session),
    # only the cores change
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    try:
        restart = run_to_end(pipeline(spark, cluster, source).repartition("key"), cluster, sink, checkpoint)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")
    assert [p["batchId"] for p in restart.recentProgress] == [last], "the restart replayed the last batch"
    assert sink.values(cluster) == expected, "every input row is in the output exactly once"
    assert sink.values(cluster, "read_uncommitted") == expected, "every task of the replay found its marker"
    print(
        f"refused in {refused_at - started:.1f}s; 4-core run of {last + 1} batches {replayed_at - refused_at:.1f}s; "
        f"2-core replay {time.monotonic() - replayed_at:.1f}s"
    )


def _wait_for_batch_in_flight(
    checkpoint: Path, process: subprocess.Popen[bytes], *, at_least: int, timeout: float
) -> int | None:
    """The id of a batch logged in ``offsets/`` but not yet in ``commits/``, once one reaches ``at_least``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        offsets = _batch_ids(checkpoint / "offsets")
        if offsets and max(offsets) >= at_least and max(offsets) not in _batch_ids(checkpoint / "commits"):
            return max(offsets)
        time.sleep(0.01)
    return None


def _batch_ids(directory: Path) -> set[int]:
    try:
        return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}
    except FileNotFoundError:
        return set()


def test_batch_atomicity_stream_survives_task_retry_and_replay(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """``atomicity=batch``: a task retry, then a replay of the last batch after its driver commit.

    Tasks only stage their rows, so neither the failed attempt nor the replay leaves anything in the log,
    not even aborted data: the raw log equals the expected output.
    """
    source, sink = Topic(cluster), Topic(cluster)
    expected = fill(source, 30)
    frame = fail_first_attempt(pipeline(spark, cluster, source, maxRecordsPerTrigger=30), "-25")
    checkpoint = tmp_path / "checkpoint"
    started = time.monotonic()
    first = run_to_end(frame, cluster, sink, checkpoint, atomicity="batch")
    last = first.recentProgress[-1]["batchId"]
    assert last >= 1
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    replay = run_to_end(frame, cluster, sink, checkpoint, atomicity="batch")
    assert [p["batchId"] for p in replay.recentProgress] == [last], "Spark replayed exactly the last batch"
    assert sink.values(cluster) == expected, "every row exactly once"
    assert sink.values(cluster, "read_uncommitted") == expected, "no attempt or replay wrote anything of its own"
    print(f"atomicity=batch, {last + 1} batches with a task retry and a replay: {time.monotonic() - started:.1f}s")


def test_partition_and_header_columns_keep_each_partitions_row_order(
    spark: Any, cluster: LocalCluster, tmp_path: Path
) -> None:
    """Explicit partitions, some rows with headers: Spark's own Arrow types through the sink's bulk path.

    Rows without headers go out in bulk and rows with headers one by one; a consumer must still read each
    output partition in the order of the Spark partition that wrote it.
    """
    from oncelog.spark import OncelogDataSource

    source, sink = Topic(cluster), Topic(cluster, partitions=2)
    fill(source, 40)
    frame = (
        pipeline(spark, cluster, source)
        .selectExpr("key", "value", "CAST(key AS INT) % 2 AS partition")
        .selectExpr(
            "key",
            "value",
            "partition",
            "IF(CAST(key AS INT) % 3 = 0, map('offset', CAST(key AS BINARY)), NULL) AS headers",
        )
    )
    run_to_end(frame, cluster, sink, tmp_path / "checkpoint")
    options = {"bootstrap": cluster.bootstrap, "topic": sink.name, "includeHeaders": "true"}
    reader = OncelogDataSource(options).reader(None)
    read = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert sorted(r["value"].decode() for r in read) == sorted(f"P{p}-{i}" for p in (0, 1) for i in range(40))
    for record in read:
        offset = int(record["key"])
        assert record["partition"] == offset % 2
        headers = [(h["key"], h["value"]) for h in record["headers"] or []]  # Spark's array<struct<key,value>>
        assert headers == ([("offset", record["key"])] if offset % 3 == 0 else [])
    for partition in (0, 1):
        for source_partition in ("P0", "P1"):
            # rows of one source partition reach one Spark task, which wrote them in offset order
            offsets = [
                int(r["key"])
                for r in read
                if r["partition"] == partition and r["value"].decode().startswith(source_partition)
            ]
            assert offsets == sorted(offsets), f"partition {partition} reordered {source_partition}'s rows"
