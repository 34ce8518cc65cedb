"""The server interceptor records oncelog.rpc.server.duration for every call a real GrpcServer serves."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader

from oncelog.errors import InvalidRequest
from oncelog.rpc import GrpcServer, ServiceSpec, aio_channel
from oncelog.telemetry.metrics import LATENCY_BUCKETS_S, RPC_SERVER_DURATION
from oncelog.testing.servers import free_port

SERVICE = "oncelog.test.v1.EchoService"


def _spec() -> ServiceSpec:
    async def echo(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        return request

    async def refuse(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        raise InvalidRequest("refused on purpose")

    async def abort(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        await context.abort(grpc.StatusCode.NOT_FOUND, "aborted by the servicer itself")

    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Echo": grpc.unary_unary_rpc_method_handler(echo),
            "Refuse": grpc.unary_unary_rpc_method_handler(refuse),
            "Abort": grpc.unary_unary_rpc_method_handler(abort),
        },
    )
    spec = ServiceSpec(name="echo", service_names=[SERVICE])
    spec.registrations.append(lambda server: server.add_generic_rpc_handlers((handler,)))
    return spec


def _points(reader: InMemoryMetricReader, name: str) -> list[HistogramDataPoint]:
    data = reader.get_metrics_data()
    return [
        point
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
        for point in metric.data.data_points
    ]


def _by_method(points: list[HistogramDataPoint]) -> dict[tuple[Any, Any], HistogramDataPoint]:
    return {(p.attributes["rpc.method"], p.attributes["rpc.grpc.status_code"]): p for p in points}


@pytest.mark.timeout(30)
async def test_served_calls_record_duration_by_method_and_status() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    server = GrpcServer(_spec(), "127.0.0.1:0", drain_delay_s=0, meter_provider=provider)
    async with server, aio_channel(server.address) as channel:
        echo = channel.unary_unary(f"/{SERVICE}/Echo")
        assert await echo(b"a") == b"a"
        assert await echo(b"b") == b"b"
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await channel.unary_unary(f"/{SERVICE}/Refuse")(b"c")
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await channel.unary_unary(f"/{SERVICE}/Abort")(b"d")
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())

    points = _by_method(_points(reader, RPC_SERVER_DURATION.name))
    ok_code, refused_code = grpc.StatusCode.OK.value[0], grpc.StatusCode.INVALID_ARGUMENT.value[0]
    aborted_code = grpc.StatusCode.NOT_FOUND.value[0]
    assert set(points) == {("Echo", ok_code), ("Refuse", refused_code), ("Abort", aborted_code)}, (
        "one series per method and status; health checks are not measured"
    )
    echo_point = points[("Echo", ok_code)]
    assert echo_point.count == 2
    assert dict(echo_point.attributes) == {
        "rpc.system": "grpc",
        "rpc.service": SERVICE,
        "rpc.method": "Echo",
        "rpc.grpc.status_code": ok_code,
    }
    assert 0 < echo_point.sum < 10, "seconds, not milliseconds"
    assert tuple(echo_point.explicit_bounds) == LATENCY_BUCKETS_S
    assert points[("Refuse", refused_code)].count == 1


@pytest.mark.timeout(30)
async def test_a_server_with_an_advertised_address_still_listens_on_its_listen_address() -> None:
    """ONCELOG_<SERVICE>_ADVERTISE (a proxy, a pod DNS name) names the address others use; the server must
    still bind its listen address, or nothing reaches it behind that name."""
    port = free_port()
    server = GrpcServer(_spec(), f"127.0.0.1:{port}", advertise="proxy.example:7100", drain_delay_s=0)
    async with server, aio_channel(f"127.0.0.1:{port}") as channel:
        assert server.address == "proxy.example:7100"
        assert await channel.unary_unary(f"/{SERVICE}/Echo")(b"reached", timeout=10) == b"reached"
