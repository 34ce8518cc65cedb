"""PySpark connector: exactly-once sink micro-batch time against Spark's ``noop`` sink, and batch-reader rows/s.

    python -m bench.spark [--runs 5] [--rows 10000]

Needs the ``spark`` extra and Java 17/21. Everything runs in one process: a LocalCluster (one storage node),
one SparkSession ``local[2]`` (design/spark-connector.md §8 settings, default JVM flags), and these
measurements:

1. **Sink ratio.** Four streaming queries run the same pipeline (``key = offset``, ``value = upper(value)``)
   from a 2-partition source topic of their own, each into its own sink: Spark's ``noop`` sink, a Python
   sink that only drains its rows (:class:`DrainDataSource`: the floor of any Python Data Source sink), the
   oncelog sink with ``atomicity=task`` (one transaction per Spark task) and with ``atomicity=batch`` (one
   driver transaction per micro-batch). The queries run side by side and take turns: each round commits
   ``rows`` small records to each query's source in one transaction (so a micro-batch holds exactly
   ``rows``) and waits until that query has processed them, rotating the order every round. Every batch
   thus runs while the other queries only poll, and a drift of the machine's load reaches all sinks alike.
   Round 0 is cold (Python workers start, pyarrow is imported) and is dropped; the figure is the median
   ``triggerExecution`` time of the ``runs`` warm batches, and the ratio sink ÷ noop is the cost of
   exactly-once delivery (target <= 1.5).
2. **Batch reader.** ``spark.read.format("oncelog")`` of one whole source topic into the ``noop`` sink
   (every column materialized), ``runs`` times after one cold read; rows per second.
3. **Where the sink's time goes.** Without Spark: one task's rows (``rows / 2``, one Arrow batch) through
   :class:`~oncelog.spark.writer.TaskWriter`, and a batch through :class:`~oncelog.spark.atomic.OutputStager`
   and :class:`~oncelog.spark.atomic.DriverCommitter`, with the producer's calls timed by a wrapper. The
   rows are ready at once here, so the task's InitProducerId and marker read, which in Spark overlap with
   computing the rows, show up as waiting time.

4. **The orders pipeline beyond one process.** ``examples/spark_orders_pipeline.py`` (parse, stream-static join,
   exactly-once sink) over ``orders`` JSON orders already in a 4-partition topic, ``--per-trigger`` rows a
   micro-batch, run as its own driver: on ``local[2]`` (two task threads in the driver's JVM) and submitted with
   ``spark-submit`` to a Spark standalone master with two one-core workers (one executor JVM each), the same two
   cores. Runs alternate between the two, the first of each pair swapping every run. The figure is orders per
   second over the warm micro-batches (every batch after the first, which starts the Python workers); the
   wall time from launching the driver to its last batch (JVM, executors and the first batch included) is shown
   beside it.
5. **Source read rate by ``minPartitions``.** ``spark.read`` of a one-partition topic into ``noop`` on ``local[2]``
   with ``minPartitions`` 1 (one Spark partition, one task) and 4 (its range split over four tasks), alternating.

Figures are medians with their spread ((max - min) / median); the machine is shared, so compare ratios
taken in the same run. ``--only sinks`` runs 1-3, ``--only cluster`` runs 4 and 5.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, DataSourceStreamWriter, WriterCommitMessage

from bench.common import Series, report
from oncelog.client import AdminClient, NewTopic, Producer
from oncelog.testing import LocalCluster
from oncelog.testing.spark import local_spark_session

VALUE_BYTES = 64
SOURCE_PARTITIONS = 2
_PROFILE_GAP_S = 0.3


def _topic(bootstrap: str, prefix: str, partitions: int) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def _values(indexes: range) -> list[bytes]:
    return [f"order-{i:08d}-".encode().ljust(VALUE_BYTES, b"x") for i in indexes]


@dataclass(frozen=True)
class Sink:
    """A sink the pipeline writes into: its row label, Spark format and options (bootstrap and topic added)."""

    label: str
    format: str
    options: dict[str, str] = field(default_factory=dict)


class _DrainWriter(DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        for _ in iterator:
            pass
        return WriterCommitMessage()

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class DrainDataSource(DataSource):
    """A Python streaming sink that reads its rows and does nothing else: what any Python Data Source sink costs.

    Its distance to ``noop`` is the price of the Python Data Source API itself (an extra Python worker per task,
    the rows shipped to it as Arrow batches, the commit messages), which the oncelog sink pays too.
    """

    @classmethod
    def name(cls) -> str:
        """The format name."""
        return "oncelog-bench-drain"

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:
        """A writer that drains every task's rows."""
        return _DrainWriter()


class SourceFeeder:
    """Appends one micro-batch worth of records to a source topic per call, in one transaction.

    The streaming reader reads up to the last stable offset, so a query sees all of a round's records at
    once or none of them: every micro-batch holds exactly ``rows`` records.
    """

    def __init__(self, bootstrap: str, rows: int) -> None:
        self.rows = rows
        self._producer = Producer(
            bootstrap, transactional_id=f"bench-feed-{uuid.uuid4().hex[:8]}", batch_size=256 * 1024, linger_ms=20
        )
        self._producer.init_transactions()
        self._next: dict[str, int] = defaultdict(int)

    def feed(self, topic: str) -> None:
        """Commit the next ``rows`` records of ``topic``, spread evenly over its partitions."""
        first = self._next[topic]
        self._next[topic] += self.rows
        self._producer.begin_transaction()
        for partition in range(SOURCE_PARTITIONS):
            indexes = range(first + partition, first + self.rows, SOURCE_PARTITIONS)
            self._producer.send_batch(topic, _values(indexes), partition=partition)
        self._producer.commit_transaction()

    def close(self) -> None:
        """Release the producer."""
        self._producer.close()


@contextmanager
def spark_session(tmp: Path) -> Iterator[Any]:
    """``local[2]`` (one attempt per task) with the settings of design/spark-connector.md §7 and Spark's default JVM
    flags."""
    with local_spark_session(tmp, master="local[2]", app_name="oncelog-bench", java_options="") as session:
        session.dataSource.register(DrainDataSource)
        yield session


# ------------------------------------------------------------------------------------------ micro-batches


def start_query(spark: Any, bootstrap: str, source: str, rows: int, checkpoint: Path, sink: Sink) -> Any:
    """The pipeline from oncelog topic ``source`` into ``sink``, running until stopped."""
    return start_pipeline(spark, "oncelog", {"bootstrap": bootstrap, "topic": source}, rows, checkpoint, sink)


def start_pipeline(
    spark: Any, source_format: str, source_options: dict[str, str], rows: int, checkpoint: Path, sink: Sink
) -> Any:
    """The benchmark's query: ``rows`` records per micro-batch (``maxOffsetsPerTrigger``, a name both oncelog's and
    Spark's Kafka source take) read from the start of a ``source_format`` source, upper-cased into ``sink``."""
    reader = spark.readStream.format(source_format)
    for key, value in source_options.items():
        reader = reader.option(key, value)
    frame = (
        reader.option("startingOffsets", "earliest")
        # a round's transaction adds one commit marker per partition, which takes an offset of its own
        .option("maxOffsetsPerTrigger", str(rows + SOURCE_PARTITIONS))
        .load()
        .selectExpr("CAST(offset AS STRING) AS key", "upper(CAST(value AS STRING)) AS value")
    )
    writer = frame.writeStream.option("checkpointLocation", str(checkpoint)).format(sink.format)
    for key, value in sink.options.items():
        writer = writer.option(key, value)
    # an idle query polls its source at every trigger; 100 ms instead of back to back keeps the two idle
    # queries' polls from loading the machine while the third one runs its batch
    return writer.trigger(processingTime="100 milliseconds").start()


def interleaved_batches(
    spark: Any, bootstrap: str, rows: int, runs: int, sinks: list[Sink], tmp: Path
) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Warm micro-batches of every sink, taken in turns: each round feeds one batch to each query in a rotated order.

    Each query reads its own source topic, so a batch runs while the other queries only poll for data:
    all sinks are measured under the same background load, and drift of the machine's load over the run
    reaches every sink alike instead of whichever ran last. Round 0 (Python workers start, pyarrow is
    imported, channels open) is dropped.

    Returns:
        The progress of each sink's warm batches, and the source topics (each holding ``(runs + 1) * rows``).
    """
    feeder = SourceFeeder(bootstrap, rows)
    sources = {sink.label: _topic(bootstrap, "bench-spark-in", SOURCE_PARTITIONS) for sink in sinks}
    queries = {}
    for index, sink in enumerate(sinks):
        if sink.format == "oncelog":
            out = _topic(bootstrap, "bench-spark-out", SOURCE_PARTITIONS)
            sink = Sink(sink.label, sink.format, {"bootstrap": bootstrap, "topic": out, **sink.options})
        queries[sink.label] = start_query(
            spark, bootstrap, sources[sink.label], rows, tmp / f"checkpoint-{index}", sink
        )
    progress: dict[str, list[dict[str, Any]]] = {sink.label: [] for sink in sinks}
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
                    print(f"{label}: round {round_} split into {[p['numInputRows'] for p in batches]} rows; dropped")
                elif round_:
                    progress[label].extend(batches)
            print(
                f"round {round_}: " + ", ".join(f"{label} {_last_ms(queries[label])} ms" for label in order), flush=True
            )
    finally:
        for query in queries.values():
            query.stop()
        feeder.close()
    return progress, list(sources.values())


def _progress_id(progress: Any) -> tuple[int, str]:
    # an idle query reports the id of the batch it will run next, so the id alone does not tell reports apart
    return progress["batchId"], progress["timestamp"]


def _wait_for_rows(query: Any, seen: set[tuple[int, str]], rows: int, label: str) -> list[dict[str, Any]]:
    """The progress reports not in ``seen``, once their batches hold ``rows`` input rows.

    A commit returns before its markers move the last stable offset, so the query may first find nothing
    new; ``processAllAvailable`` then returns at once and is called again.
    """
    deadline = time.monotonic() + 120
    while True:
        query.processAllAvailable()
        if query.exception() is not None:
            raise RuntimeError(f"the {label} query failed: {query.exception()}")
        batches = [p for p in query.recentProgress if p["numInputRows"] and _progress_id(p) not in seen]
        if sum(p["numInputRows"] for p in batches) >= rows:
            return batches
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the {label} query did not process {rows} new rows within 120 s: status {query.status}, "
                f"batches {[(p['batchId'], p['numInputRows']) for p in batches]}, last {query.lastProgress}"
            )
        time.sleep(0.01)


def _last_ms(query: Any) -> int:
    return int(query.lastProgress["durationMs"]["triggerExecution"]) if query.lastProgress else -1


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
    {
        "init_transactions",
        "begin_transaction",
        "send",
        "send_batch",
        "send_offsets_to_transaction",
        "flush",
        "commit_transaction",
        "close",
    }
)


def profile_sink(bootstrap: str, rows: int, runs: int) -> list[tuple[str, float, dict[str, float]]]:
    """Median share of each producer call in the sink's time, for one task (atomicity=task) and one batch."""
    import pyarrow as pa
    from pyspark.sql.types import StringType, StructField, StructType

    from oncelog.spark.atomic import DriverCommitter, OutputStager
    from oncelog.spark.options import parse_sink_options
    from oncelog.spark.writer import RowEncoder, TaskIdentity, TaskWriter

    schema = StructType([StructField("key", StringType()), StructField("value", StringType())])
    out = _topic(bootstrap, "bench-spark-profile", SOURCE_PARTITIONS)
    task_rows = rows // SOURCE_PARTITIONS
    # what Spark hands a task of the pipeline: one Arrow batch of (key, upper(value)) strings
    data = pa.RecordBatch.from_arrays(
        [
            pa.array([str(i) for i in range(task_rows)]),
            pa.array([f"ORDER-{i:08d}-".ljust(VALUE_BYTES, "X") for i in range(task_rows)]),
        ],
        names=["key", "value"],
    )
    results = []
    for mode in ("task", "batch"):
        options = parse_sink_options({"bootstrap": bootstrap, "topic": out, "atomicity": mode})
        encoder = RowEncoder(schema, out)
        query = f"profile-{mode}"  # a query of its own per mode: the sink refuses batch 0 after a batch 1 it wrote
        totals: list[float] = []
        shares: defaultdict[str, list[float]] = defaultdict(list)
        for batch in range(runs + 1):
            timer = PhaseTimer()
            # Spark runs a partition's next batch only after the driver's commit and the next trigger; back to
            # back, InitProducerId would meet the previous commit's markers still being written and retry
            time.sleep(_PROFILE_GAP_S)
            started = time.perf_counter()
            if mode == "task":
                TaskWriter(options, encoder, producer_factory=timer.producer_factory()).write_columns(
                    encoder.encode_arrow([data]), TaskIdentity(query, batch, 0, 0)
                )
            else:
                stager = OutputStager(options, encoder)
                staged = [
                    stager.stage_columns(encoder.encode_arrow([data]), TaskIdentity(query, batch, p, 0))
                    for p in range(SOURCE_PARTITIONS)
                ]
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


# ------------------------------------------------------------------------- the pipeline beyond one process


def fill_orders(bootstrap: str, topic: str, count: int) -> None:
    """``count`` JSON orders of the pipeline's input schema into ``topic`` (idempotent producer)."""
    with Producer(bootstrap, batch_size=256 * 1024, linger_ms=20) as producer:
        for first in range(0, count, 1000):
            for i in range(first, min(count, first + 1000)):
                order = {
                    "order_id": f"o-{i:07d}",
                    "customer": f"c-{i % 50:03d}",
                    "sku": f"sku-{i % 40}",
                    "quantity": 1 + i % 9,
                    "unit_price_cents": 99 + (i * 37) % 4_900,
                }
                producer.send(topic, json.dumps(order, separators=(",", ":")).encode(), key=order["customer"].encode())
            producer.flush()


@dataclass(frozen=True)
class PipelineRun:
    """One run of the orders pipeline: its warm rate (orders/s after the first micro-batch) and its wall time."""

    warm_rate: float
    wall_s: float
    batches: int


def run_pipeline(runner: Any, bootstrap: str, orders: int, per_trigger: int, tmp: Path) -> PipelineRun:
    """Run the pipeline over a fresh topic of ``orders`` orders until it has read them all; its progress lines
    (one per micro-batch, with rows and duration) give the rates."""
    name = uuid.uuid4().hex[:8]
    source, sink = f"bench-orders-{name}", f"bench-enriched-{name}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(source, num_partitions=4), NewTopic(sink, num_partitions=4)])
    fill_orders(bootstrap, source, orders)
    log, stop = tmp / f"driver-{name}.log", tmp / f"stop-{name}"
    args = ["--bootstrap", bootstrap, "--checkpoint", str(tmp / f"checkpoint-{name}"), "--source", source]
    args += ["--sink", sink, "--max-records-per-trigger", str(per_trigger), "--stop-file", str(stop)]
    started = time.monotonic()
    driver = runner.start_driver(args, log)
    try:
        deadline = started + 900
        while True:
            batches = [json.loads(line) for line in log.read_text().splitlines() if line.startswith('{"batch"')]
            if sum(b["rows"] for b in batches) >= orders:
                break
            if driver.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the pipeline stopped at {batches[-1:]} of {orders} orders; see {log}")
            time.sleep(0.2)
        wall = time.monotonic() - started
        stop.touch()
        driver.wait(120)
    finally:
        runner.kill_driver(driver)
    warm = batches[1:]
    return PipelineRun(sum(b["rows"] for b in warm) / (sum(b["ms"] for b in warm) / 1000), wall, len(batches))


def interleaved_pipelines(
    bootstrap: str, runs: int, orders: int, per_trigger: int, tmp: Path
) -> dict[str, list[PipelineRun]]:
    """``runs`` pipeline runs on each of local[2] and the standalone cluster, alternating which goes first."""
    from oncelog.cli.spark_demo import PIPELINE
    from oncelog.cli.spark_runners import LocalRunner, StandaloneRunner

    local = LocalRunner(PIPELINE, tmp / "local", master="local[2]")
    standalone = StandaloneRunner(PIPELINE, tmp / "standalone")
    results: dict[str, list[PipelineRun]] = {"local[2]": [], "standalone": []}
    standalone.start()
    try:
        for run in range(runs):
            order = [("local[2]", local), ("standalone", standalone)]
            for label, runner in order if run % 2 == 0 else order[::-1]:
                scratch = tmp / f"{label}-{run}"
                scratch.mkdir(parents=True)
                results[label].append(run_pipeline(runner, bootstrap, orders, per_trigger, scratch))
                done = results[label][-1]
                print(
                    f"run {run} {label}: {done.warm_rate:,.0f} orders/s warm, {done.wall_s:.0f} s wall, "
                    f"{done.batches} batches",
                    flush=True,
                )
    finally:
        standalone.stop()
    return results


def interleaved_min_partitions(spark: Any, bootstrap: str, records: int, runs: int) -> dict[int, list[float]]:
    """Batch read rows/s of a one-partition topic with minPartitions 1 and 4, alternating (one cold read each
    first)."""
    topic = _topic(bootstrap, "bench-spark-split", 1)
    with Producer(bootstrap, batch_size=256 * 1024, linger_ms=20) as producer:
        for first in range(0, records, 10_000):
            producer.send_batch(topic, _values(range(first, min(records, first + 10_000))), partition=0)
        producer.flush()
    rates: dict[int, list[float]] = {1: [], 4: []}
    for run in range(runs + 1):
        for splits in (1, 4) if run % 2 == 0 else (4, 1):
            started = time.perf_counter()
            frame = (
                spark.read.format("oncelog")
                .option("bootstrap", bootstrap)
                .option("topic", topic)
                .option("minPartitions", str(splits))
                .load()
            )
            frame.write.format("noop").mode("overwrite").save()
            if run:
                rates[splits].append(records / (time.perf_counter() - started))
    return rates


def cluster_main(args: argparse.Namespace) -> None:
    """Sections 4 and 5: the pipeline on the standalone cluster against local[2], and minPartitions 1 against 4."""
    with (
        tempfile.TemporaryDirectory(prefix="bench-spark-cluster-") as tmp,
        LocalCluster(Path(tmp, "cluster"), storage_nodes=1) as cluster,
    ):
        pipelines = interleaved_pipelines(cluster.bootstrap, args.runs, args.orders, args.per_trigger, Path(tmp))
        with spark_session(Path(tmp, "session")) as spark:
            splits = interleaved_min_partitions(spark, cluster.bootstrap, args.split_records, args.runs)
    local = Series("local[2]", [r.warm_rate for r in pipelines["local[2]"]])
    standalone = Series("standalone", [r.warm_rate for r in pipelines["standalone"]])
    print()
    print(
        report(
            f"orders pipeline, {args.orders:,} orders, {args.per_trigger:,} per micro-batch: warm orders/s",
            [("local[2]", local, None), ("standalone: master + 2 one-core workers", standalone, local)],
        )
    )
    for label, runs in pipelines.items():
        walls = Series(label, [r.wall_s for r in runs])
        print(f"- {label}: launch to last batch, median {walls.median:.0f} s, spread {walls.spread:.0%}")
    one, four = Series("minPartitions 1", splits[1]), Series("minPartitions 4", splits[4])
    print()
    print(
        report(
            f"batch read of a one-partition topic, {args.split_records:,} rows, local[2]: rows/s",
            [("minPartitions 1", one, None), ("minPartitions 4", four, one)],
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="warm micro-batches (and batch reads) measured")
    parser.add_argument("--rows", type=int, default=10_000, help="rows per micro-batch")
    parser.add_argument("--only", choices=("sinks", "cluster"), default=None, help="run sections 1-3 or 4-5 only")
    parser.add_argument("--orders", type=int, default=20_000, help="orders per pipeline run (section 4)")
    parser.add_argument("--per-trigger", type=int, default=2_000, help="orders per pipeline micro-batch (section 4)")
    parser.add_argument("--split-records", type=int, default=200_000, help="rows of the minPartitions topic")
    args = parser.parse_args()
    if args.only != "sinks":
        cluster_main(args)
    if args.only == "cluster":
        return

    records = (args.runs + 1) * args.rows
    sinks = [
        Sink("noop", "noop"),
        Sink("Python sink that only drains its rows", DrainDataSource.name()),
        Sink("oncelog, atomicity=task", "oncelog"),
        Sink("oncelog, atomicity=batch", "oncelog", {"atomicity": "batch"}),
    ]
    trigger: dict[str, Series] = {}
    add_batch: dict[str, Series] = {}
    with (
        tempfile.TemporaryDirectory(prefix="bench-spark-") as tmp,
        LocalCluster(Path(tmp, "cluster"), storage_nodes=1) as cluster,
    ):
        bootstrap = cluster.bootstrap
        with spark_session(Path(tmp)) as spark:
            progress, sources = interleaved_batches(spark, bootstrap, args.rows, args.runs, sinks, Path(tmp))
            for sink in sinks:
                runs = progress[sink.label]
                trigger[sink.label] = Series(sink.label, [float(p["durationMs"]["triggerExecution"]) for p in runs])
                add_batch[sink.label] = Series(sink.label, [float(p["durationMs"].get("addBatch", 0)) for p in runs])
            reads = [batch_read_rate(spark, bootstrap, sources[0], records) for _ in range(args.runs + 1)][1:]
        profile = profile_sink(bootstrap, args.rows, args.runs)

    noop = trigger["noop"]
    print()
    print(
        _ms_table(
            f"warm micro-batch of {args.rows:,} rows, {SOURCE_PARTITIONS} source partitions, local[2]"
            " (triggerExecution; target <= 1.5x noop)",
            [(s.label, trigger[s.label], add_batch[s.label], None if s is sinks[0] else noop) for s in sinks],
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
