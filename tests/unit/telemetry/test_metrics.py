"""The metrics catalog: unique names, Prometheus names as Prometheus' OTLP receiver builds them, helpers record."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from oncelog.telemetry.metrics import (
    CATALOG,
    FETCH_BYTES,
    PRODUCE_RECORDS,
    InstrumentKind,
    OncelogMetrics,
    prometheus_label,
    prometheus_name,
)


def test_every_metric_is_defined_once_under_the_oncelog_namespace() -> None:
    names = [d.name for d in CATALOG]
    assert len(names) == len(set(names))
    assert all(name.startswith("oncelog.") for name in names)
    series = [s for d in CATALOG for s in d.prometheus_series]
    assert len(series) == len(set(series)), "two metrics would collide in Prometheus"
    assert all(d.description.endswith(".") and d.recorded_by for d in CATALOG)


@pytest.mark.parametrize(
    ("name", "unit", "kind", "expected"),
    [
        ("oncelog.produce.records", "{record}", InstrumentKind.COUNTER, "oncelog_produce_records_total"),
        ("oncelog.produce.bytes", "By", InstrumentKind.COUNTER, "oncelog_produce_bytes_total"),
        ("oncelog.rpc.server.duration", "s", InstrumentKind.HISTOGRAM, "oncelog_rpc_server_duration_seconds"),
        ("oncelog.partition.lso_lag", "{offset}", InstrumentKind.GAUGE, "oncelog_partition_lso_lag"),
        ("oncelog.cache.hit", "1", InstrumentKind.GAUGE, "oncelog_cache_hit_ratio"),
        ("oncelog.queue.depth", "{item}", InstrumentKind.UP_DOWN_COUNTER, "oncelog_queue_depth"),
        ("oncelog.requests.total", "{request}", InstrumentKind.COUNTER, "oncelog_requests_total"),
    ],
)
def test_prometheus_names_follow_the_otlp_translation(
    name: str, unit: str, kind: InstrumentKind, expected: str
) -> None:
    assert prometheus_name(name, unit, kind) == expected


def test_replication_metrics_have_the_prometheus_names_alerts_and_dashboards_use() -> None:
    names = {d.name: d.prometheus_name for d in CATALOG}
    assert names["oncelog.partition.under_replicated"] == "oncelog_partition_under_replicated"
    assert names["oncelog.partition.isr.shrinks"] == "oncelog_partition_isr_shrinks_total"
    assert names["oncelog.partition.isr.expands"] == "oncelog_partition_isr_expands_total"
    assert names["oncelog.partition.replica_lag"] == "oncelog_partition_replica_lag"


def test_histograms_are_queried_through_bucket_sum_and_count() -> None:
    (histogram,) = [d for d in CATALOG if d.name == "oncelog.txn.marker.duration"]
    assert histogram.prometheus_series == (
        "oncelog_txn_marker_duration_seconds_bucket",
        "oncelog_txn_marker_duration_seconds_sum",
        "oncelog_txn_marker_duration_seconds_count",
    )
    assert prometheus_label("rpc.grpc.status_code") == "rpc_grpc_status_code"


def test_helpers_record_on_the_given_provider() -> None:
    reader = InMemoryMetricReader()
    recorder = OncelogMetrics(MeterProvider(metric_readers=[reader]))
    recorder.record_produce("orders", 3, records=5, size_bytes=700)
    recorder.record_produce("orders", 3, records=2, size_bytes=300)
    recorder.record_fetch("orders", 3, "read_committed", records=4, size_bytes=512)
    recorder.set_transactions_open(shard=1, count=7)
    recorder.set_transactions_open(shard=1, count=2)
    values = {
        (metric.name, tuple(sorted(point.attributes.items()))): point.value
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }
    assert values[(PRODUCE_RECORDS.name, (("partition", 3), ("topic", "orders")))] == 7
    assert values[(FETCH_BYTES.name, (("isolation", "read_committed"), ("partition", 3), ("topic", "orders")))] == 512
    assert values[("oncelog.transactions.open", (("shard", 1),))] == 2, "a gauge keeps the last value"
