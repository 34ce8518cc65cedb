"""An in-process OTLP/gRPC receiver that keeps every span it is sent, for tracing tests."""

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


class _Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, sink: OtlpReceiver) -> None:
        self.sink = sink

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = next(
                (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"), ""
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attrs = {a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes}
                    self.sink._add(
                        ReceivedSpan(
                            service=service,
                            name=span.name,
                            kind=span.kind,
                            trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(),
                            parent_span_id=span.parent_span_id.hex(),
                            attributes=attrs,
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()


class _Metrics(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, sink: OtlpReceiver) -> None:
        self.sink = sink

    def Export(self, request, context):
        for rm in request.resource_metrics:
            for scope in rm.scope_metrics:
                for metric in scope.metrics:
                    self.sink.metric_names.add(metric.name)
        return metrics_service_pb2.ExportMetricsServiceResponse()


class OtlpReceiver:
    """Start with ``with OtlpReceiver() as rx:``; point ``OTEL_EXPORTER_OTLP_ENDPOINT`` at ``rx.endpoint``."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.metric_names: set[str] = set()
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
