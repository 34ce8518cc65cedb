"""Server reflection answers under grpc.reflection.v1 (what current grpcurl asks first) as well as v1alpha."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from google.protobuf import descriptor_pb2
from grpc_reflection.v1alpha import reflection_pb2

from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("package", ["grpc.reflection.v1", "grpc.reflection.v1alpha"])
def test_reflection_lists_services_and_serves_their_files(tmp_path: Path, package: str) -> None:
    with LocalCluster(tmp_path, services=("pid-allocator",)) as cluster, grpc.insecure_channel(cluster.bootstrap) as ch:
        info = ch.stream_stream(
            f"/{package}.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        symbol = "oncelog.api.pid.v1.PidAllocatorService"
        listed, described = info(
            iter(
                [
                    reflection_pb2.ServerReflectionRequest(list_services=""),
                    reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol),
                ]
            ),
            timeout=10,
        )
    names = {s.name for s in listed.list_services_response.service}
    assert {symbol, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection"} <= names
    files = [
        descriptor_pb2.FileDescriptorProto.FromString(b)
        for b in described.file_descriptor_response.file_descriptor_proto
    ]
    assert any(s.name == "PidAllocatorService" for f in files for s in f.service)
