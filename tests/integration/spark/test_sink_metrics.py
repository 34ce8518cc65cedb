"""The sink's per-batch metrics, from real commits and replays, into OpenTelemetry counters (oncelog.spark.metrics)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from oncelog.spark.atomic import DriverCommitter
from oncelog.spark.metrics import SinkBatchMetrics, record_sink_batch
from oncelog.spark.writer import RowEncoder, TaskWriter, task_batch_metrics
from oncelog.telemetry.metrics import OncelogMetrics
from oncelog.testing import LocalCluster

from .conftest import Topic
from .test_atomic import batch_of, batch_options
from .test_writer import KV, rows, sink_options, task

pytestmark = pytest.mark.timeout(120)


def counters(reader: InMemoryMetricReader) -> dict[tuple[str, str], int]:
    data = reader.get_metrics_data()
    assert data is not None
    return {
        (metric.name, dict(point.attributes or {})["atomicity"]): int(point.value)
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name.startswith("oncelog.spark.sink.")
        for point in metric.data.data_points
    }


def test_task_commits_and_replay_skips_are_counted(cluster: LocalCluster, topic: Topic) -> None:
    options = sink_options(cluster, topic)
    writer = TaskWriter(options, RowEncoder(KV, options.topic))
    first = [writer.write(rows("a", "bb"), task(0, partition=0)), writer.write([], task(0, partition=1))]
    assert task_batch_metrics(first) == SinkBatchMetrics(
        rows=2, size_bytes=len(b"kaa" + b"kbbbb"), transactions=1, replays_skipped=0
    )
    # the batch replayed after a crash, with the same rows: partition 0 finds its marker and skips
    replay = [writer.write(rows("a", "bb"), task(0, partition=0, attempt=1)), writer.write([], task(0, partition=1))]
    assert task_batch_metrics(replay) == SinkBatchMetrics(rows=0, size_bytes=0, transactions=0, replays_skipped=1)

    reader = InMemoryMetricReader()
    metrics = OncelogMetrics(MeterProvider(metric_readers=[reader]))
    for batch in (task_batch_metrics(first), task_batch_metrics(replay)):
        record_sink_batch(options.atomicity, batch, metrics=metrics)
    assert counters(reader) == {
        ("oncelog.spark.sink.rows", "task"): 2,
        ("oncelog.spark.sink.bytes", "task"): 8,
        ("oncelog.spark.sink.transactions", "task"): 1,
        ("oncelog.spark.sink.replays_skipped", "task"): 1,
    }


def test_batch_atomicity_commit_counts_one_transaction_and_its_replay_skips(
    cluster: LocalCluster, topic: Topic
) -> None:
    options = batch_options(cluster, topic)
    messages = batch_of(options, 3, p0=("a", "b"), p1=("ccc",))
    outcome = DriverCommitter(options).commit(messages, 3)
    assert outcome.metrics == SinkBatchMetrics(
        rows=3, size_bytes=len(b"kaa" + b"kbb" + b"kcccccc"), transactions=1, replays_skipped=0
    )
    replay = DriverCommitter(options).commit(batch_of(options, 3, p0=("a", "b"), p1=("ccc",)), 3)
    assert replay.metrics == SinkBatchMetrics(rows=0, size_bytes=0, transactions=0, replays_skipped=2)
