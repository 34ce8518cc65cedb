"""Per-batch metrics of the sink: what each committed micro-batch (or write job) wrote and skipped, in OpenTelemetry.

The driver's ``commit`` sees every task's report, so it counts, per batch: rows and bytes (keys, values,
headers) committed, transactions committed (one per task with rows under ``atomicity=task``, one per batch under
``atomicity=batch``) and Spark partitions a replay skipped because an earlier run had committed them. They go to
the ``oncelog.spark.sink.*`` counters of :mod:`oncelog.telemetry.metrics` (attribute ``atomicity``) and to the
driver's log.

What the Python Data Source API of pyspark 4.3 lets a source or sink put into ``query.lastProgress``: nothing of
its own. The JVM side of a Python sink (``PythonStreamingWrite``) does not implement ``ReportsSinkMetrics``, so
``lastProgress["sink"]["metrics"]`` stays empty; the Python stream reader does not implement
``ReportsSourceMetrics``; and a Python data source's ``supportedCustomMetrics`` are Spark's fixed set about moving
rows between the JVM and Python (``PythonCustomMetric``), with no way to add one. What progress does show is
Spark's own fields: per source ``startOffset``, ``endOffset``, ``latestOffset`` (the readable end, from
``reportLatestOffset``) and ``numInputRows``, and the sink's description.

Export. Spark runs the driver's ``commit`` in a Python process of its own (reused across batches), not in the
application's process, so a meter provider the application installed does not reach it. The first commit in such
a process therefore calls :func:`oncelog.telemetry.configure_telemetry` when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is
set in the environment Spark passes on (service name ``oncelog-spark-sink`` unless ``OTEL_SERVICE_NAME``), with
no Prometheus scrape endpoint (several such processes would contend for its port).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from oncelog.telemetry.metrics import OncelogMetrics, default_metrics

__all__ = ["SinkBatchMetrics", "record_sink_batch"]

log = logging.getLogger(__name__)

_configured = threading.Lock()
_telemetry_started = False


@dataclass(frozen=True, slots=True)
class SinkBatchMetrics:
    """What one committed micro-batch (or write job) of the sink did.

    Attributes:
        rows: rows committed by this run of the batch.
        size_bytes: bytes of their keys, values and headers.
        transactions: transactions committed.
        replays_skipped: Spark partitions skipped because an earlier run had committed them.
    """

    rows: int
    size_bytes: int
    transactions: int
    replays_skipped: int


def record_sink_batch(
    atomicity: str,
    batch: SinkBatchMetrics,
    *,
    metrics: OncelogMetrics | None = None,
    environ: Mapping[str, str] | None = None,
) -> None:
    """Count ``batch`` in the ``oncelog.spark.sink.*`` counters.

    Args:
        atomicity: the sink's ``atomicity`` option (the metrics' attribute).
        batch: what the batch did.
        metrics: where to record; the global meter provider by default, set up from the environment on first use.
        environ: where the OTLP endpoint is looked up; ``os.environ`` by default.
    """
    if metrics is None:
        _start_telemetry(os.environ if environ is None else environ)
        metrics = default_metrics()
    metrics.record_spark_sink_batch(
        atomicity,
        rows=batch.rows,
        size_bytes=batch.size_bytes,
        transactions=batch.transactions,
        replays_skipped=batch.replays_skipped,
    )


def _start_telemetry(environ: Mapping[str, str]) -> None:
    global _telemetry_started
    with _configured:
        if _telemetry_started:
            return
        _telemetry_started = True
        if not environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
            return
        from oncelog.telemetry import configure_telemetry

        try:
            configure_telemetry("oncelog-spark-sink", environ, metrics_listen="")
        except Exception:  # metrics must never fail a commit that succeeded
            log.exception("could not set up OpenTelemetry export for the sink's metrics")
