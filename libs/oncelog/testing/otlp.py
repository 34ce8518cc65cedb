"""An in-process OTLP/gRPC receiver that keeps every span and the latest value of every metric series it is sent."""

from __future__ import annotations

import threading
import time
from concurrent import futures
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2, metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass(frozen=True)
class ReceivedSpan:
    """The fields of an exported span that tests look at."""

    service: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, object]
    start_ns: int = 0
    """Start time, Unix nanoseconds."""
    end_ns: int = 0
    """End time, Unix nanoseconds."""
    links: tuple[str, ...] = ()
    """Span ids of the linked spans."""


@dataclass(frozen=True)
class ReceivedPoint:
    """The latest data point of one metric series (service, metric, attributes) as last exported.

    ``value`` is the sum or gauge value, or the count of a histogram; exporters send cumulative values, so
    a counter's point is its total since the process started.
    """

    service: str
    name: str
    attributes: dict[str, object]
    value: float


def _value(any_value) -> object:
    kind = any_value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return tuple(_value(v) for v in any_value.array_value.values)
    return getattr(any_value, kind)


def _attributes(key_values) -> dict[str, object]:
    return {a.key: _value(a.value) for a in key_values}


def _service(resource) -> str:
    return next((a.value.string_value for a in resource.attributes if a.key == "service.name"), "")


def _points(metric) -> list[tuple[dict[str, object], float]]:
    """(attributes, value) of each data point: sums and gauges by value, histograms by count."""
    kind = metric.WhichOneof("data")
    if kind is None:
        return []
    out = []
    for point in getattr(metric, kind).data_points:
        if kind in ("histogram", "exponential_histogram", "summary"):
            value: float = point.count
        else:
            value = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
        out.append((_attributes(point.attributes), value))
    return out


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: OtlpReceiver) -> None:
        self.sink = sink

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = _service(resource_spans.resource)
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    self.sink._add(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes=_attributes(span.attributes),
                            start_ns=span.start_time_unix_nano,
                            end_ns=span.end_time_unix_nano,
                            links=tuple(link.span_id.hex() for link in span.links),
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, sink: OtlpReceiver) -> None:
        self.sink = sink

    def Export(self, request, context):
        for rm in request.resource_metrics:
            service = _service(rm.resource)
            for scope in rm.scope_metrics:
                for metric in scope.metrics:
                    self.sink._add_metric(
                        metric.name, [ReceivedPoint(service, metric.name, *p) for p in _points(metric)]
                    )
        return metrics_service_pb2.ExportMetricsServiceResponse()


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as rx:``; point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``rx.endpoint``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.metric_names: set[str] = set()
        self.metric_points: dict[tuple[str, str, tuple[tuple[str, object], ...]], ReceivedPoint] = {}
        """Latest point per (service, metric name, sorted attributes)."""
        self._cond = threading.Condition()
        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Traces(self), self._server)
        metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(_Metrics(self), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _add(self, span: ReceivedSpan) -> None:
        with self._cond:
            self.spans.append(span)
            self._cond.notify_all()

    def _add_metric(self, name: str, points: list[ReceivedPoint]) -> None:
        with self._cond:
            self.metric_names.add(name)
            for point in points:
                key = (point.service, point.name, tuple(sorted(point.attributes.items())))
                self.metric_points[key] = point
            self._cond.notify_all()

    def points(self, name: str, service: str | None = None) -> list[ReceivedPoint]:
        """The latest point of every series of metric ``name`` (of one service when given)."""
        with self._cond:
            return [
                p for p in self.metric_points.values() if p.name == name and (service is None or p.service == service)
            ]

    def wait_for_metrics(self, predicate, timeout: float = 30.0) -> None:
        """Block until ``predicate(receiver)`` is true (it may call :meth:`points`), or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"metrics received so far: {sorted(self.metric_names)}")
                self._cond.wait(remaining)

    def wait_for(self, predicate, timeout: float = 30.0) -> list[ReceivedSpan]:
        """Block until ``predicate(spans)`` is true; returns the spans, or raises TimeoutError."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate(self.spans):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"spans received so far: {[(s.service, s.name) for s in self.spans]}")
                self._cond.wait(remaining)
            return list(self.spans)

    def __enter__(self) -> OtlpReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(0)
