"""Configure the OpenTelemetry SDK from the standard ``OTEL_*`` variables.

Export is on only when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or the traces-specific variable) is set; otherwise
the global no-op providers stay in place and instrumentation costs next to nothing. The OTLP exporters
read the remaining standard variables (headers, insecure, timeout) themselves.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider


@dataclass
class Telemetry:
    """Handle to the providers this process installed; ``shutdown()`` flushes pending spans and metrics."""

    tracer_provider: TracerProvider | None = None
    meter_provider: MeterProvider | None = None
    enabled: bool = False
    _closed: bool = field(default=False, repr=False)

    def shutdown(self) -> None:
        """Flush and stop the exporters; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.tracer_provider is not None:
            self.tracer_provider.shutdown()
        if self.meter_provider is not None:
            self.meter_provider.shutdown()


def _endpoint(environ: Mapping[str, str]) -> str:
    return environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "")


def configure_telemetry(service_name: str, environ: Mapping[str, str] | None = None) -> Telemetry:
    """Install tracer and meter providers exporting over OTLP/gRPC when an endpoint is configured.

    Args:
        service_name: used when ``OTEL_SERVICE_NAME`` is unset (``oncelog-<service>``).
        environ: the environment to read; ``os.environ`` by default.
    """
    environ = os.environ if environ is None else environ
    endpoint = _endpoint(environ)
    if not endpoint or environ.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return Telemetry()
    from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({SERVICE_NAME: environ.get("OTEL_SERVICE_NAME") or service_name})
    insecure = endpoint.startswith("http://") or "://" not in endpoint
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=insecure)))
    trace.set_tracer_provider(tracer_provider)
    reader = PeriodicExportingMetricReader(OTLPMetricExporter(endpoint=endpoint, insecure=insecure))
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    metrics.set_meter_provider(meter_provider)
    return Telemetry(tracer_provider=tracer_provider, meter_provider=meter_provider, enabled=True)
