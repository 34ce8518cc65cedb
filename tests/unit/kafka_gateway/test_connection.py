"""KafkaServer over loopback: answers in request order, one request at a time; a bad frame closes only its own
connection."""

from __future__ import annotations

import asyncio
import io
import logging
import struct

import pytest
from kio.schema.metadata.v1.request import MetadataRequest
from kio.schema.request_header.v1.header import RequestHeader
from kio.serial import entity_writer

from oncelog.kafka_gateway.connection import KafkaServer
from oncelog.kafka_gateway.protocol import Request

pytestmark = pytest.mark.timeout(30)


def _request(correlation_id: int) -> bytes:
    out = io.BytesIO()
    entity_writer(RequestHeader)(
        out, RequestHeader(request_api_key=3, request_api_version=1, correlation_id=correlation_id, client_id="t")
    )
    entity_writer(MetadataRequest)(out, MetadataRequest(topics=None))
    data = out.getvalue()
    return struct.pack(">i", len(data)) + data


async def _answers(reader: asyncio.StreamReader, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        body = await reader.readexactly(size)
        ids.append(struct.unpack_from(">i", body)[0])
    return ids


class _Recorder:
    """Answers with the correlation id; the first request waits for ``release`` (a slow handler)."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.first_started = asyncio.Event()
        self.started: list[int] = []
        self.running = 0
        self.most_running = 0

    async def __call__(self, request: Request) -> bytes:
        self.started.append(request.correlation_id)
        self.first_started.set()
        self.running += 1
        self.most_running = max(self.most_running, self.running)
        if request.correlation_id == 1:
            await self.release.wait()
        self.running -= 1
        return struct.pack(">ii", 4, request.correlation_id)


async def test_pipelined_requests_are_handled_one_at_a_time_and_answered_in_order() -> None:
    handler = _Recorder()
    server = KafkaServer(handler)
    host, port = (await server.start()).rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"".join(_request(i) for i in (1, 2, 3, 4)))
        await writer.drain()
        await handler.first_started.wait()
        assert handler.started == [1]  # the slow first request holds the others back
        handler.release.set()
        assert await _answers(reader, 4) == [1, 2, 3, 4]
        assert handler.most_running == 1
    finally:
        writer.close()
        await server.stop()


@pytest.mark.parametrize(
    "bad",
    [struct.pack(">i", 200 * 1024 * 1024), struct.pack(">i", -5), struct.pack(">i", 6) + b"\x00\x03\x00\x01\x00\x00"],
    ids=["oversized", "negative size", "unsupported version"],
)
async def test_a_bad_frame_closes_its_connection_with_a_log_line_and_others_go_on(
    bad: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    handler = _Recorder()
    handler.release.set()
    server = KafkaServer(handler, max_frame_bytes=1024 * 1024)
    host, port = (await server.start()).rsplit(":", 1)
    good_reader, good_writer = await asyncio.open_connection(host, int(port))
    bad_reader, bad_writer = await asyncio.open_connection(host, int(port))
    try:
        with caplog.at_level(logging.WARNING, logger="oncelog.kafka_gateway"):
            bad_writer.write(bad)
            await bad_writer.drain()
            assert await bad_reader.read() == b""  # closed by the server, nothing answered
        assert server.closed_for_bad_input == 1
        assert any("closing the Kafka connection" in r.getMessage() for r in caplog.records)
        good_writer.write(_request(7))
        await good_writer.drain()
        assert await _answers(good_reader, 1) == [7]
    finally:
        good_writer.close()
        bad_writer.close()
        await server.stop()


async def test_stop_closes_open_connections() -> None:
    handler = _Recorder()
    server = KafkaServer(handler)
    host, port = (await server.start()).rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(_request(1))  # held by the handler until stop
    await writer.drain()
    await handler.first_started.wait()
    await server.stop()
    assert await reader.read() == b""
    writer.close()
