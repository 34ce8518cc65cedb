"""Configure the OpenTelemetry SDK from the standard ``OTEL_*`` variables and ``ONCELOG_METRICS_LISTEN``.

OTLP push is on when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces-specific variable) is set; a Prometheus scrape
endpoint (``GET /metrics`` over HTTP, OTel's Prometheus exporter) is on when ``ONCELOG_METRICS_LISTEN`` names a
``host:port`` (port 0 picks a free one). Both can run together: one meter provider feeds both readers. With
neither, the global no-op providers stay in place and instrumentation costs next to nothing. The OTLP exporters
read the remaining standard variables (headers, insecure, timeout) themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider

from oncelog.config import ConfigError

METRICS_LISTEN_ENV = "ONCELOG_METRICS_LISTEN"
"""``host:port`` of the Prometheus scrape endpoint (``/metrics``); empty disables it."""


@dataclass
class Telemetry:
    """Handle to the providers this process installed; ``shutdown()`` flushes pending spans and metrics."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    enabled: bool = False
    metrics_address: str = ""
    """host:port of the Prometheus scrape endpoint; empty when there is none."""
    _scrape_server: Any = field(default=None, repr=False)
    _closed: bool = field(default=False, repr=False)

    def shutdown(self) -> None:
        """Flush and stop the exporters and the scrape endpoint; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._scrape_server is not None:
            self._scrape_server.shutdown()
            self._scrape_server.server_close()
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _endpoint(environ: Mapping[str, str]) -> str:
    return environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")


def _scrape_listen(raw: str) -> tuple[str, int] | None:
    raw = raw.strip()
    if not raw:
        return None
    host, sep, port = raw.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        example = "for example 0.0.0.0:9464; port 0 picks one"
        raise ConfigError([f"{METRICS_LISTEN_ENV}={raw!r} must be host:port ({example})"])
    return host, int(port)


def configure_telemetry(
    service_name: str, environ: Mapping[str, str] | None = None, *, metrics_listen: str | None = None
) -> Telemetry:
    """Install tracer and meter providers: OTLP/gRPC export when an endpoint is configured, and a Prometheus
    scrape endpoint when ``ONCELOG_METRICS_LISTEN`` is set.

    Args:
        service_name: used when ``OTEL_SERVICE_NAME`` is unset (``oncelog-<service>``).
        environ: the environment to read; ``os.environ`` by default.
        metrics_listen: the scrape endpoint's host:port (a service passes its settings' value); None reads
            ``ONCELOG_METRICS_LISTEN`` from ``environ``.

    Raises:
        ConfigError: ``ONCELOG_METRICS_LISTEN`` is not host:port, or its address cannot be bound.
    """
    environ = os.environ if environ is None else environ
    endpoint = _endpoint(environ)
    scrape = _scrape_listen(environ.get(METRICS_LISTEN_ENV, "") if metrics_listen is None else metrics_listen)
    if (not endpoint and scrape is None) or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return Telemetry()
    from opentelemetry.sdk.metrics.export import MetricReader

    resource = Resource.create({SERVICE_NAME: environ.get("OTEL_SERVICE_NAME") or service_name})
    readers: list[MetricReader] = []
    telemetry = Telemetry(enabled=True)
    if scrape is not None:
        telemetry.metrics_address, telemetry._scrape_server, reader = _start_scrape_endpoint(*scrape)
        readers.append(reader)
    if endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        insecure = endpoint.startswith("http://") or "://" not in endpoint
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=insecure)))
        trace.set_tracer_provider(tracer_provider)
        telemetry.tracer_provider = tracer_provider
        readers.append(PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, insecure=insecure)))
    telemetry.meter_provider = MeterProvider(resource=resource, metric_readers=readers)
    metrics.set_meter_provider(telemetry.meter_provider)
    return telemetry


def _start_scrape_endpoint(host: str, port: int) -> tuple[str, Any, Any]:
    """Serve ``/metrics`` on ``host:port`` from a registry of its own; returns (address, server, reader)."""
    from opentelemetry.exporter.prometheus import PrometheusMetricReader
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    reader = PrometheusMetricReader(registry=registry)
    try:
        server, _ = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise ConfigError([f"{METRICS_LISTEN_ENV}={host}:{port} cannot be bound: {exc.strerror or exc}"]) from None
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "::1" if host == "::" else host
    return f"{shown}:{server.server_port}", server, reader
