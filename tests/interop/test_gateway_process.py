"""The kafka-gateway process: bad input closes one connection and nothing else; bad settings stop it at start."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys

import pytest
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader

from oncelog.kafka_gateway.protocol import SUPPORTED
from oncelog.testing.kafka import KafkaGatewayProcess

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(120)]


def _connect(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _api_versions(version: int, correlation_id: int) -> bytes:
    body = struct.pack(">hhi", 18, version, correlation_id) + struct.pack(">h", -1)  # null client id
    return struct.pack(">i", len(body)) + body


def test_a_garbage_frame_closes_only_its_connection(kafka_gateway: KafkaGatewayProcess) -> None:
    with _connect(kafka_gateway.address) as bystander, _connect(kafka_gateway.address) as sender:
        sender.sendall(struct.pack(">i", 12) + b"\x00\x01\x00\x0c" + b"\xff" * 8)  # Fetch v12 that does not decode
        assert sender.recv(1) == b"", "the gateway closes a connection that sent a malformed request"
        sender.close()
        bystander.sendall(_api_versions(0, 5))
        frame = _read_frame(bystander)
    assert struct.unpack_from(">i", frame)[0] == 5
    assert "closing the Kafka connection" in kafka_gateway.log_file.read_text()


def test_an_api_versions_request_of_an_unknown_version_gets_the_served_table_in_v0(
    kafka_gateway: KafkaGatewayProcess,
) -> None:
    with _connect(kafka_gateway.address) as sock:
        sock.sendall(_api_versions(127, 9))
        frame = _read_frame(sock)
    assert struct.unpack_from(">i", frame)[0] == 9
    response, _ = entity_reader(ApiVersionsResponse)(frame, 4)
    assert response.error_code == ErrorCode.unsupported_version
    assert {k.api_key: (k.min_version, k.max_version) for k in response.api_keys} == SUPPORTED


def test_a_gateway_without_a_bootstrap_address_exits_2_naming_the_variable() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    done = subprocess.run(
        [sys.executable, "-m", "oncelog.kafka_gateway"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "ONCELOG_BOOTSTRAP is required" in done.stderr
