"""One client call is one trace: the client span and the service's server span share it, parent-linked."""

from __future__ import annotations

from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from oncelog.api.pid import v1 as pb
from oncelog.rpc import sync_channel
from oncelog.testing import LocalCluster
from oncelog.testing.otlp import OtlpReceiver

SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 2, 3
METHOD = "oncelog.api.pid.v1.PidAllocatorService/AllocateProducerIdBlock"


def test_client_and_server_spans_share_one_trace(tmp_path: Path) -> None:
    with OtlpReceiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        with LocalCluster(tmp_path, services=("pid-allocator",), env=env) as cluster:
            provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "test-client"}))
            provider.add_span_processor(
                SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True))
            )
            stub = pb.PidAllocatorServiceStub(sync_channel(cluster.bootstrap, tracer_provider=provider))
            stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(requester_id="tracer", requester_epoch=1))
            provider.shutdown()

            def both(spans):
                return {(s.service, s.kind) for s in spans if s.name == METHOD} >= {
                    ("test-client", SPAN_KIND_CLIENT),
                    ("oncelog-pid-allocator", SPAN_KIND_SERVER),
                }

            spans = receiver.wait_for(both)
    client = next(s for s in spans if s.name == METHOD and s.kind == SPAN_KIND_CLIENT)
    server = next(s for s in spans if s.name == METHOD and s.kind == SPAN_KIND_SERVER)
    assert server.trace_id == client.trace_id
    assert server.parent_span_id == client.span_id
    assert server.attributes["rpc.system"] == "grpc"
    assert server.attributes["rpc.method"] == "AllocateProducerIdBlock"
    assert server.attributes["rpc.grpc.status_code"] == 0
