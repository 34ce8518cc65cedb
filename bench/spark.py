"""PySpark connector: exactly-once sink micro-batch time against Spark's ``noop`` sink, and batch-reader rows/s.

    python -m bench.spark [--runs 5] [--rows 10000]

Needs the ``spark`` extra and Java 17/21. Everything runs in one process: a LocalCluster (one storage node),
one SparkSession ``local[2]`` (reference pyspark-connector §8 settings, default JVM flags), and these
measurements:

1. **Sink ratio.** A 2-partition source topic holds ``(runs + 1) * rows`` small records. Three streaming
   queries read it from the start with ``maxRecordsPerTrigger=rows`` and the same transform
   (``key = offset``, ``value = upper(value)``), each into its own sink: Spark's ``noop`` sink, the oncelog
   sink with ``atomicity=task`` (one transaction per Spark task) and with ``atomicity=batch`` (one driver
   transaction per micro-batch). The first batch of each query is cold (Python workers start, pyarrow is
   imported) and is dropped; the figure is the median ``triggerExecution`` time of the ``runs`` warm
   batches, and the ratio sink ÷ noop is the cost of exactly-once delivery (target <= 1.5). The queries
   run one after another, so the ratio carries the machine's load drift between them; the spread column
   shows how large it was.
2. **Batch reader.** ``spark.read.format("oncelog")`` of the whole source topic into the ``noop`` sink
   (every column materialized), ``runs`` times after one cold read; rows per second.
3. **Where the sink's time goes.** Without Spark: one task's rows (``rows / 2``) through
   :class:`~oncelog.spark.writer.TaskWriter`, and a batch through :class:`~oncelog.spark.atomic.OutputStager`
   and :class:`~oncelog.spark.atomic.DriverCommitter`, with the producer's calls timed by a wrapper.

Figures are medians with their spread ((max - min) / median); the machine is shared, so compare ratios
taken in the same run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.common import Series
from oncelog.client import AdminClient, NewTopic, Producer
from oncelog.testing import LocalCluster

VALUE_BYTES = 64
SOURCE_PARTITIONS = 2


def _topic(bootstrap: str, prefix: str, partitions: int) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def fill_source(bootstrap: str, records: int) -> str:
    """A 2-partition topic with ``records`` small records spread evenly (idempotent producer)."""
    name = _topic(bootstrap, "bench-spark-in", SOURCE_PARTITIONS)
    with Producer(bootstrap, batch_size=256 * 1024, linger_ms=20) as producer:
        last = None
        for i in range(records):
            value = f"order-{i:08d}-".encode().ljust(VALUE_BYTES, b"x")
            last = producer.send(name, value, partition=i % SOURCE_PARTITIONS)
        producer.flush()
        assert last is not None
        last.result()
    return name


@contextmanager
def spark_session(tmp: Path) -> Iterator[Any]:
    """``local[2]`` with the loopback, logging and temp-dir settings of reference §7."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from oncelog.spark import OncelogDataSource

    log4j = tmp / "log4j2.properties"
    log4j.write_text(
        "rootLogger.level = error\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\nappender.console.layout.pattern = %p %c{1}: %m%n\n"
    )
    session = (
        SparkSession.builder.master("local[2]")
        .appName("oncelog-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.local.dir", str(tmp))
        .config("spark.sql.warehouse.dir", str(tmp / "warehouse"))
        .config("spark.sql.streaming.noDataMicroBatches.enabled", "false")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(OncelogDataSource)
    try:
        yield session
    finally:
        session.stop()


# ------------------------------------------------------------------------------------------ micro-batches


def micro_batches(
    spark: Any, bootstrap: str, source: str, rows: int, checkpoint: Path, sink: dict[str, str] | None
) -> list[dict[str, Any]]:
    """Run the pipeline over the whole source into ``sink`` (None: Spark's noop); the progress of each batch."""
    frame = (
        spark.readStream.format("oncelog")
        .option("bootstrap", bootstrap)
        .option("topic", source)
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", str(rows))
        .load()
        .selectExpr("CAST(offset AS STRING) AS key", "upper(CAST(value AS STRING)) AS value")
    )
    writer = frame.writeStream.option("checkpointLocation", str(checkpoint))
    if sink is None:
        writer = writer.format("noop")
    else:
        writer = writer.format("oncelog")
        for key, value in sink.items():
            writer = writer.option(key, value)
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"the benchmark query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    assert all(p["numInputRows"] == rows for p in progress), [p["numInputRows"] for p in progress]
    return progress


def batch_read_rate(spark: Any, bootstrap: str, source: str, records: int) -> float:
    """Rows per second of one batch read of the whole topic, every column materialized."""
    started = time.perf_counter()
    frame = spark.read.format("oncelog").option("bootstrap", bootstrap).option("topic", source).load()
    frame.write.format("noop").mode("overwrite").save()
    return records / (time.perf_counter() - started)


# ------------------------------------------------------------------------------------------------ profile


class PhaseTimer:
    """Wall time spent in the wrapped producer calls, by call name."""

    def __init__(self) -> None:
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def producer_factory(self) -> Callable[..., Producer]:
        """A ``producer_factory`` for the sink classes whose producers report into this timer."""
        timer = self

        class TimedProducer(Producer):
            def __getattribute__(self, name: str) -> Any:
                attribute = super().__getattribute__(name)
                if name not in _TIMED:
                    return attribute

                def timed(*args: Any, **kwargs: Any) -> Any:
                    started = time.perf_counter()
                    try:
                        return attribute(*args, **kwargs)
                    finally:
                        timer.seconds[name] += time.perf_counter() - started

                return timed

        def build(*args: Any, **kwargs: Any) -> Producer:
            started = time.perf_counter()
            producer = TimedProducer(*args, **kwargs)
            timer.seconds["Producer()"] += time.perf_counter() - started
            return producer

        return build


_TIMED = frozenset(
    {"init_transactions", "begin_transaction", "send", "send_offsets_to_transaction", "commit_transaction", "close"}
)


def profile_sink(bootstrap: str, rows: int, runs: int) -> list[tuple[str, float, dict[str, float]]]:
    """Median share of each producer call in the sink's time, for one task (atomicity=task) and one batch."""
    from pyspark.sql.types import StringType, StructField, StructType

    from oncelog.spark.atomic import DriverCommitter, OutputStager
    from oncelog.spark.options import parse_sink_options
    from oncelog.spark.writer import RowEncoder, TaskIdentity, TaskWriter

    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    out = _topic(bootstrap, "bench-spark-profile", SOURCE_PARTITIONS)
    task_rows = rows // SOURCE_PARTITIONS
    data = [(str(i), f"ORDER-{i:08d}-".ljust(VALUE_BYTES, "X")) for i in range(task_rows)]
    results = []
    for mode in ("task", "batch"):
        options = parse_sink_options({"bootstrap": bootstrap, "topic": out, "atomicity": mode})
        encoder = RowEncoder(schema, out)
        totals: list[float] = []
        shares: defaultdict[str, list[float]] = defaultdict(list)
        for batch in range(runs + 1):
            timer = PhaseTimer()
            started = time.perf_counter()
            if mode == "task":
                TaskWriter(options, encoder, producer_factory=timer.producer_factory()).write(
                    data, TaskIdentity("profile", batch, 0, 0)
                )
            else:
                stager = OutputStager(options, encoder)
                staged = [stager.stage(data, TaskIdentity("profile", batch, p, 0)) for p in range(SOURCE_PARTITIONS)]
                stage_done = time.perf_counter()
                timer.seconds["tasks: stage"] = stage_done - started
                DriverCommitter(options, producer_factory=timer.producer_factory()).commit(staged, batch)
            total = time.perf_counter() - started
            if batch == 0:
                continue  # the first one opens channels and loads the topic's metadata
            totals.append(total)
            other = total - sum(timer.seconds.values())
            for name, seconds in [*timer.seconds.items(), ("other (encode, digest, marker read)", other)]:
                shares[name].append(seconds / total)
        label = f"atomicity={mode}: " + ("one task, " if mode == "task" else "whole batch, ")
        label += f"{task_rows if mode == 'task' else rows} rows"
        results.append((label, statistics.median(totals), {k: statistics.median(v) for k, v in shares.items()}))
    return results


# ------------------------------------------------------------------------------------------------- report


def _ms_table(title: str, rows: list[tuple[str, Series, Series, Series | None]]) -> str:
    lines = [
        f"### {title}",
        "",
        "| sink | median batch ms | spread | median addBatch ms | batches | ratio to baseline |",
        "|---|---|---|---|---|---|",
    ]
    for label, trigger, add_batch, baseline in rows:
        ratio = f"{trigger.median / baseline.median:.2f}x {baseline.name}" if baseline else "baseline"
        lines.append(
            f"| {label} | {trigger.median:.0f} | {trigger.spread:.0%} | {add_batch.median:.0f} | "
            f"{len(trigger.rates)} | {ratio} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="warm micro-batches (and batch reads) measured")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per micro-batch")
    args = parser.parse_args()

    records = (args.runs + 1) * args.rows
    sinks: list[tuple[str, dict[str, str] | None]] = [("noop", None), ("oncelog, atomicity=task", {})]
    sinks.append(("oncelog, atomicity=batch", {"atomicity": "batch"}))
    trigger: dict[str, Series] = {}
    add_batch: dict[str, Series] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp,
        LocalCluster(Path(tmp, "cluster"), storage_nodes=1) as cluster,
    ):
        bootstrap = cluster.bootstrap
        source = fill_source(bootstrap, records)
        print(f"source: {records} records in {SOURCE_PARTITIONS} partitions", flush=True)
        with spark_session(Path(tmp)) as spark:
            for label, sink in sinks:
                options = None
                if sink is not None:
                    out = _topic(bootstrap, "bench-spark-out", SOURCE_PARTITIONS)
                    options = {"bootstrap": bootstrap, "topic": out, **sink}
                checkpoint = Path(tmp, f"checkpoint-{len(trigger)}")
                progress = micro_batches(spark, bootstrap, source, args.rows, checkpoint, options)[1:]
                name = label.split(",")[-1].strip()
                trigger[label] = Series(name, [float(p["durationMs"]["triggerExecution"]) for p in progress])
                add_batch[label] = Series(name, [float(p["durationMs"].get("addBatch", 0)) for p in progress])
                print(f"{label}: {len(progress)} warm batches, median {trigger[label].median:.0f} ms", flush=True)
            reads = [batch_read_rate(spark, bootstrap, source, records) for _ in range(args.runs + 1)][1:]
        profile = profile_sink(bootstrap, args.rows, args.runs)

    noop = trigger["noop"]
    print()
    print(
        _ms_table(
            f"warm micro-batch of {args.rows:,} rows, {SOURCE_PARTITIONS} source partitions, local[2]"
            " (triggerExecution; target <= 1.5x noop)",
            [(label, trigger[label], add_batch[label], None if label == "noop" else noop) for label, _ in sinks],
        )
    )
    read = Series("batch read", reads)
    print()
    print(f"### batch reader: {records:,} rows into the noop sink")
    print()
    print("| measurement | median rows/s | spread | runs |\n|---|---|---|---|")
    print(f"| spark.read.format('oncelog') | {read.median:,.0f} | {read.spread:.0%} | {len(reads)} |")
    print()
    print("### where the sink's time goes (no Spark; producer calls timed)")
    print()
    print("| writer | median ms | share of time |\n|---|---|---|")
    for label, total, shares in profile:
        parts = ", ".join(f"{name} {share:.0%}" for name, share in sorted(shares.items(), key=lambda kv: -kv[1]))
        print(f"| {label} | {total * 1000:.0f} | {parts} |")


if __name__ == "__main__":
    main()
