"""Several gateway replicas and transactional Kafka clients: every request naming a transactional id is answered by
that id's home gateway.

A transaction-version-1 Kafka client holds one (producer id, epoch) for all its transactions, while oncelog's
coordinator moves to a new one at every EndTxn; the gateway translates between them (``producer_epochs.py``) and
keeps that map in its process. With several gateway replicas, Metadata spreads partition leaders over all of them,
so a transactional producer sends its Produce requests to several gateways while its InitProducerId,
AddPartitionsToTxn and EndTxn go to the one FindCoordinator named: the transactional id's home,
``broker_for("transaction:<id>")``. A gateway that is not the home of a request's transactional id therefore sends
the request's frame, byte for byte, to the home gateway's Kafka listener and hands its answer back unchanged (the
correlation id is the client's own). The client sees one broker answering as usual; the map of each id lives in
exactly one process, as the map of each transactional id lives in one Kafka coordinator.

Each client connection handles one request at a time, so relayed requests keep the client's order. Relayed frames
to one home share one connection, pipelined: the home answers in the order it received them. A home that cannot
be reached fails the request with :class:`RelayFailed`; the client's connection is closed and the client sends the
request again (to this or another gateway), as after any broken connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import struct
from collections import deque
from collections.abc import Callable

from oncelog.kafka_gateway.protocol import Request

log = logging.getLogger("oncelog.kafka_gateway")

Broker = tuple[int, str, int]

_SIZE = struct.Struct(">i")
_ADD_PARTITIONS_TO_TXN = 24

TRANSACTIONAL_APIS = frozenset({0, 22, 24, 25, 26, 28})
"""Produce, InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and TxnOffsetCommit: the requests whose
transactional id the identity map translates (AddPartitionsToTxn up to v3 names one id at the top level)."""


def transactional_id_of(request: Request) -> str | None:
    """The transactional id a request is sent under, or None (an idempotent or plain one, or another API)."""
    if request.api_key not in TRANSACTIONAL_APIS:
        return None
    field = "v3_and_below_transactional_id" if request.api_key == _ADD_PARTITIONS_TO_TXN else "transactional_id"
    tid = getattr(request.body, field, None)
    return tid or None


def expects_answer(request: Request) -> bool:
    """False for a Produce with ``acks=0``, which the home answers with nothing."""
    return not (request.api_key == 0 and getattr(request.body, "acks", -1) == 0)


class RelayFailed(Exception):
    """The home gateway could not be reached or closed the connection before answering."""


class _Link:
    """One pipelined connection to a home gateway's Kafka listener."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None, timeout_s: float) -> None:
        self._host, self._port, self._ssl, self._timeout_s = host, port, ssl_context, timeout_s
        self._writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task[None] | None = None
        self._waiting: deque[asyncio.Future[bytes]] = deque()
        self._connecting = asyncio.Lock()

    async def send(self, frame: bytes, *, answered: bool) -> bytes | None:
        async with self._connecting:
            if self._writer is None or self._writer.is_closing():
                await self._connect()
            writer = self._writer
            assert writer is not None
            answer: asyncio.Future[bytes] | None = None
            if answered:
                answer = asyncio.get_running_loop().create_future()
                self._waiting.append(answer)
            writer.write(_SIZE.pack(len(frame)) + frame)
        try:
            await writer.drain()
        except ConnectionError as exc:
            self._break(exc)
        if answer is None:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(answer), self._timeout_s)
        except TimeoutError as exc:
            self._break(exc)
            raise RelayFailed(f"{self._host}:{self._port} did not answer within {self._timeout_s} s") from exc

    async def _connect(self) -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(
                    self._host, self._port, ssl=self._ssl, server_hostname=self._host if self._ssl else None
                ),
                self._timeout_s,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise RelayFailed(f"cannot reach the home gateway at {self._host}:{self._port}: {exc}") from exc
        self._writer = writer
        self._reading = asyncio.create_task(self._read_answers(reader, writer))

    async def _read_answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                if not self._waiting:
                    raise RelayFailed(f"{self._host}:{self._port} answered a request that was not sent")
                waiter = self._waiting.popleft()
                if not waiter.done():
                    waiter.set_result(_SIZE.pack(size) + frame)
        except (asyncio.IncompleteReadError, ConnectionError, RelayFailed, ssl.SSLError) as exc:
            if self._writer is writer:
                self._break(exc)

    def _break(self, cause: BaseException) -> None:
        """Fail every request waiting on this connection and drop it (the next send connects again)."""
        writer, self._writer = self._writer, None
        waiting, self._waiting = self._waiting, deque()
        for waiter in waiting:
            if not waiter.done():
                waiter.set_exception(RelayFailed(f"the connection to {self._host}:{self._port} broke: {cause}"))
        if writer is not None:
            writer.close()

    async def close(self) -> None:
        self._break(ConnectionAbortedError("the gateway is stopping"))
        if self._reading is not None:
            self._reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reading


class TransactionalRelay:
    """Sends each request of a transactional id whose home is another gateway to that home (module docstring).

    Args:
        own_id: this gateway's broker id.
        home_of: the home gateway of a transactional id (``DataServicer.broker_for("transaction:<id>")``).
        ssl_context: the client side of TLS when the gateways' Kafka listeners serve TLS, else None.
        timeout_s: how long a relayed request may take.
    """

    def __init__(
        self,
        own_id: int,
        home_of: Callable[[str], Broker],
        *,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        self._own_id = own_id
        self._home_of = home_of
        self._ssl = ssl_context
        self._timeout_s = timeout_s
        self._links: dict[tuple[str, int], _Link] = {}
        self.relayed = 0
        """Requests sent to another gateway so far (the tests read it)."""

    def home(self, request: Request) -> Broker | None:
        """The other gateway that must answer ``request``, or None when this one answers it."""
        tid = transactional_id_of(request)
        if tid is None:
            return None
        home: Broker = self._home_of(f"transaction:{tid}")
        return None if home[0] == self._own_id else home

    async def relay(self, home: Broker, request: Request) -> bytes | None:
        """The home gateway's framed answer to ``request`` (None for a Produce with ``acks=0``).

        Raises:
            RelayFailed: the home could not be reached, or broke the connection before answering.
        """
        _, host, port = home
        link = self._links.get((host, port))
        if link is None:
            link = self._links[(host, port)] = _Link(host, port, self._ssl, self._timeout_s)
        self.relayed += 1
        return await link.send(request.frame, answered=expects_answer(request))

    async def close(self) -> None:
        """Close every connection to the other gateways."""
        for link in self._links.values():
            await link.close()
        self._links.clear()
