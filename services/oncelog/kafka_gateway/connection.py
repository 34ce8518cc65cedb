"""The gateway's TCP server: Kafka framing, in-order answers, back-pressure, bad frames closing one connection.

Each connection has a reader and a worker. The reader takes frames off the socket, decodes them
(:func:`~oncelog.kafka_gateway.protocol.parse_request`) and queues them; the worker handles them one at a time in
arrival order and writes each answer before it takes the next. A client may pipeline requests (librdkafka sends
up to five produce requests per partition without waiting): they are answered in order and, as on a Kafka broker,
a request is not started before the previous one on the same connection has finished, so an idempotent producer's
batches reach a partition in sequence order. When ``max_queued_requests`` wait, the reader stops reading and TCP
pushes back on the client. A frame larger than ``max_frame_bytes``, one that does not decode, or a request the
gateway does not serve closes that connection with a log line; every other connection goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections.abc import Awaitable, Callable

from oncelog.kafka_gateway.protocol import (
    MalformedRequest,
    Request,
    UnsupportedApiVersions,
    api_versions_error,
    parse_request,
)

log = logging.getLogger("oncelog.kafka_gateway")

Handler = Callable[[Request], Awaitable[bytes | None]]
"""Answers one request with a framed response, or None when the request wants none (Produce with acks=0)."""

_SIZE = struct.Struct(">i")


class KafkaServer:
    """Accepts Kafka clients on ``host:port`` (0 picks a free port) and hands each request to ``handler``.

    Args:
        handler: called once per request, in order per connection.
        max_frame_bytes: largest request frame accepted (Kafka's ``socket.request.max.bytes``).
        max_queued_requests: decoded requests a connection may have waiting before its socket is no longer read.
        ssl_context: serve TLS with it (Kafka's SSL listener); None for plaintext.
    """

    def __init__(
        self,
        handler: Handler,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        max_frame_bytes: int = 100 * 1024 * 1024,
        max_queued_requests: int = 16,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._handler = handler
        self._ssl = ssl_context
        self._host, self._port = host, port
        self.max_frame_bytes = max_frame_bytes
        self.max_queued_requests = max_queued_requests
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self.closed_for_bad_input = 0
        """How many connections were closed because of a bad frame (the tests read it)."""

    @property
    def address(self) -> str:
        """``host:port`` actually bound."""
        assert self._server is not None, "start() first"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def start(self) -> str:
        """Bind and start accepting; returns the bound address."""
        tls: dict[str, object] = {} if self._ssl is None else {"ssl": self._ssl, "ssl_handshake_timeout": 30.0}
        self._server = await asyncio.start_server(
            self._accept,
            self._host,
            self._port,
            limit=1 << 20,
            **tls,  # type: ignore[arg-type]
        )
        return self.address

    async def stop(self) -> None:
        """Stop accepting and close every connection (a request being handled is cancelled)."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        for task in list(self._connections):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        try:
            await self._serve(reader, writer, f"{peer[0]}:{peer[1]}" if peer else "?")
        except asyncio.CancelledError:
            pass  # stop() ends the connection; the stream's own callback must not see a cancelled task
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        queue: asyncio.Queue[Request | UnsupportedApiVersions | None] = asyncio.Queue(self.max_queued_requests)
        worker = asyncio.create_task(self._work(queue, writer, peer))
        reading = asyncio.create_task(self._read_all(reader, queue, peer))
        try:
            done, _ = await asyncio.wait({worker, reading}, return_when=asyncio.FIRST_COMPLETED)
            if worker not in done:
                await worker  # the reader ended (end of stream or a bad frame): answer what was queued before it
        finally:
            for task in (reading, worker):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _read_all(
        self, reader: asyncio.StreamReader, queue: asyncio.Queue[Request | UnsupportedApiVersions | None], peer: str
    ) -> None:
        while True:
            item = await self._read_one(reader, peer)
            await queue.put(item)  # blocks while max_queued_requests wait: the socket is not read (back-pressure)
            if item is None:
                return

    async def _read_one(self, reader: asyncio.StreamReader, peer: str) -> Request | UnsupportedApiVersions | None:
        """The next request, or None when the connection is to end (closed by the client, or a bad frame)."""
        try:
            (size,) = _SIZE.unpack(await reader.readexactly(4))
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        if not 0 < size <= self.max_frame_bytes:
            self._bad_input(peer, f"a request frame of {size} bytes (largest accepted: {self.max_frame_bytes})")
            return None
        try:
            frame = await reader.readexactly(size)
        except (asyncio.IncompleteReadError, ConnectionError):
            return None
        try:
            return parse_request(frame)
        except MalformedRequest as exc:
            self._bad_input(peer, str(exc))
            return None

    def _bad_input(self, peer: str, what: str) -> None:
        self.closed_for_bad_input += 1
        log.warning("closing the Kafka connection from %s: %s", peer, what)

    async def _work(
        self, queue: asyncio.Queue[Request | UnsupportedApiVersions | None], writer: asyncio.StreamWriter, peer: str
    ) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            if isinstance(item, UnsupportedApiVersions):
                response: bytes | None = api_versions_error(item.correlation_id)
            else:
                try:
                    response = await self._handler(item)
                except Exception:
                    log.exception("closing the Kafka connection from %s: %s v%d failed", peer, item.name, item.version)
                    return
            if response is not None:
                writer.write(response)
                try:
                    await writer.drain()
                except ConnectionError:
                    return
