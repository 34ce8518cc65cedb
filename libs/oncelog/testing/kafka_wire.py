"""One Kafka request over a plain socket, encoded and decoded with kio, for tests that compare wire answers.

Kafka clients hide some answers (leader epochs, OffsetForLeaderEpoch, error codes of a fenced fetch); these tests
send the request themselves to Apache Kafka and to the gateway and compare what comes back.
"""

from __future__ import annotations

import io
import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from oncelog.kafka_gateway.protocol import build


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"the broker closed the connection after {len(data)} of {n} bytes")
        data += chunk
    return data


def kafka_call(address: str, api_key: int, version: int, body: dict[str, Any], *, timeout_s: float = 30.0) -> Any:
    """Send one request of ``api_key`` at ``version`` built from ``body`` (a dict, as the gateway's handlers
    answer) to the broker at ``address`` and return the decoded kio response."""
    schema = load_request_schema(api_key, version)
    header_schema = schema.__header_schema__
    header = build(
        header_schema,
        {"request_api_key": api_key, "request_api_version": version, "correlation_id": 7, "client_id": "wire-test"},
    )
    out = io.BytesIO()
    entity_writer(header_schema)(out, header)
    entity_writer(schema)(out, build(schema, body))
    payload = out.getvalue()
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        sock.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _exactly(sock, 4))
        frame = _exactly(sock, size)
    (correlation_id,) = struct.unpack_from(">i", frame)
    assert correlation_id == 7, f"answer to correlation id {correlation_id}, sent 7"
    response_schema = load_response_schema(api_key, version)
    offset = 4 + (1 if response_schema.__flexible__ else 0)  # response header v1 adds empty tagged fields
    response, _ = entity_reader(response_schema)(frame, offset)
    return response
