"""TransactionalRelay: which requests go to another gateway, and the pipelined connection that carries them (to a
real loopback server standing in for the home gateway's Kafka listener)."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import SimpleNamespace
from typing import Any

import pytest

from oncelog.kafka_gateway.protocol import Request
from oncelog.kafka_gateway.relay import RelayFailed, TransactionalRelay, transactional_id_of

_SIZE = struct.Struct(">i")
HOMES = {"transaction:mine": (0, "127.0.0.1", 1), "transaction:theirs": (1, "127.0.0.1", 2)}


def request(api_key: int, frame: bytes = b"", **body: Any) -> Request:
    return Request(api_key, 9, 1, "test", SimpleNamespace(**body), frame)


def test_only_requests_naming_a_transactional_id_of_another_home_are_relayed() -> None:
    relay = TransactionalRelay(0, HOMES.__getitem__)
    assert relay.home(request(0, transactional_id="theirs", acks=-1)) == (1, "127.0.0.1", 2)
    assert relay.home(request(26, transactional_id="theirs")) == (1, "127.0.0.1", 2)
    assert relay.home(request(24, v3_and_below_transactional_id="theirs")) == (1, "127.0.0.1", 2), "its own name"
    assert relay.home(request(0, transactional_id="mine", acks=-1)) is None, "this gateway is the home"
    assert relay.home(request(0, transactional_id=None, acks=-1)) is None, "an idempotent producer's Produce"
    assert relay.home(request(22, transactional_id=None)) is None, "an idempotent InitProducerId"
    assert transactional_id_of(request(3, transactional_id="theirs")) is None, "Metadata names no transaction"


Answer = Callable[[bytes], bytes | None]


@asynccontextmanager
async def home_listener(answer: Answer) -> AsyncIterator[tuple[int, list[bytes]]]:
    """A loopback server answering each frame, in order, with ``answer(frame)`` (None: close the connection)."""
    received: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                (size,) = _SIZE.unpack(await reader.readexactly(4))
                frame = await reader.readexactly(size)
                received.append(frame)
                reply = answer(frame)
                if reply is None:
                    return
                if reply:
                    writer.write(_SIZE.pack(len(reply)) + reply)
                    await writer.drain()
        except asyncio.IncompleteReadError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], received
    finally:
        server.close()
        await server.wait_closed()


async def test_pipelined_requests_get_their_own_answers_in_order() -> None:
    async with home_listener(lambda frame: b"answer-to-" + frame) as (port, received):
        relay = TransactionalRelay(0, lambda key: (1, "127.0.0.1", port))
        frames = [f"request-{i}".encode() for i in range(5)]
        home = relay.home(request(0, transactional_id="theirs", acks=-1))
        assert home is not None
        answers = await asyncio.gather(
            *(relay.relay(home, request(0, frame, transactional_id="theirs", acks=-1)) for frame in frames)
        )
        await relay.close()
    assert received == frames
    assert answers == [_SIZE.pack(10 + len(f)) + b"answer-to-" + f for f in frames], "framed, byte for byte"
    assert relay.relayed == 5


async def test_a_produce_without_acknowledgement_is_sent_and_not_waited_for() -> None:
    async with home_listener(lambda frame: b"" if frame == b"acks-0" else b"ok") as (port, received):
        relay = TransactionalRelay(0, lambda key: (1, "127.0.0.1", port))
        home = (1, "127.0.0.1", port)
        assert await relay.relay(home, request(0, b"acks-0", transactional_id="t", acks=0)) is None
        assert await relay.relay(home, request(0, b"next", transactional_id="t", acks=-1)) == _SIZE.pack(2) + b"ok"
        await relay.close()
    assert received == [b"acks-0", b"next"]


async def test_a_home_that_drops_the_connection_fails_the_request_and_the_next_one_reconnects() -> None:
    async with home_listener(lambda frame: None if frame == b"dropped" else b"ok") as (port, received):
        relay = TransactionalRelay(0, lambda key: (1, "127.0.0.1", port), timeout_s=10)
        home = (1, "127.0.0.1", port)
        with pytest.raises(RelayFailed, match="broke"):
            await relay.relay(home, request(26, b"dropped", transactional_id="t"))
        assert await relay.relay(home, request(26, b"again", transactional_id="t")) == _SIZE.pack(2) + b"ok"
        await relay.close()
    assert received == [b"dropped", b"again"]


async def test_an_unreachable_home_fails_the_request() -> None:
    async with home_listener(lambda frame: b"ok") as (port, _):
        pass  # closed: nothing listens on the port any more
    relay = TransactionalRelay(0, lambda key: (1, "127.0.0.1", port), timeout_s=5)
    with pytest.raises(RelayFailed, match="cannot reach the home gateway"):
        await relay.relay((1, "127.0.0.1", port), request(26, b"x", transactional_id="t"))
    await relay.close()
