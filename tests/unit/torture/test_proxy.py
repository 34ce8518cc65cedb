"""The fault proxy against a loopback echo server: each action acts on the link it names and on no other."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from oncelog.torture.proxy import CLIENT, FaultProxy, Rule


@pytest.fixture
def echo() -> Iterator[tuple[str, int]]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield ("127.0.0.1", server.getsockname()[1])
    stop.set()
    server.close()


def _echo(conn: socket.socket) -> None:
    with conn:
        try:
            while data := conn.recv(4096):
                conn.sendall(data)
        except OSError:
            return


@pytest.fixture
def proxy() -> Iterator[FaultProxy]:
    with FaultProxy(seed=7) as running:
        yield running


def _connect(proxy: FaultProxy, destination: str) -> socket.socket:
    host, port = proxy.address(destination).split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    return sock


def _roundtrip(sock: socket.socket, data: bytes, timeout: float = 5.0) -> bytes:
    sock.settimeout(timeout)
    sock.sendall(data)
    received = b""
    while len(received) < len(data):
        chunk = sock.recv(4096)
        if not chunk:
            break
        received += chunk
    return received


def test_proxy_forwards_both_ways_and_names_this_process_client(proxy: FaultProxy, echo: tuple[str, int]) -> None:
    proxy.listen("svc", echo)
    with _connect(proxy, "svc") as sock:
        assert _roundtrip(sock, b"hello") == b"hello"
        assert [c.source for c in proxy._conns] == [CLIENT]


def test_blackhole_holds_bytes_until_cleared_then_delivers_them(proxy: FaultProxy, echo: tuple[str, int]) -> None:
    proxy.listen("svc", echo)
    with _connect(proxy, "svc") as sock:
        assert _roundtrip(sock, b"a") == b"a"
        proxy.set_rule(CLIENT, "svc", Rule("blackhole"))
        sock.sendall(b"held")
        deadline = time.monotonic() + 10  # the proxy's thread reads the chunk when the machine lets it
        while proxy.stats["held_chunks"] < 1:
            assert time.monotonic() < deadline, f"the chunk was never held: {proxy.stats}"
            time.sleep(0.01)
        sock.settimeout(0.3)
        with pytest.raises(TimeoutError):
            sock.recv(10)  # held, not forwarded
        proxy.clear()
        sock.settimeout(5)
        assert sock.recv(10) == b"held"


def test_one_way_blackhole_on_responses_lets_requests_through(proxy: FaultProxy, echo: tuple[str, int]) -> None:
    proxy.listen("svc", echo)
    with _connect(proxy, "svc") as sock:
        assert _roundtrip(sock, b"a") == b"a"
        proxy.set_rule(CLIENT, "svc", Rule("blackhole", ("response",)))
        sock.settimeout(0.3)
        sock.sendall(b"x")
        with pytest.raises(TimeoutError):
            sock.recv(10)
        proxy.clear()
        sock.settimeout(5)
        assert sock.recv(10) == b"x"  # the request had reached the server; only its answer was held


def test_rule_on_another_link_leaves_this_one_alone(proxy: FaultProxy, echo: tuple[str, int]) -> None:
    proxy.listen("svc", echo)
    proxy.listen("other", echo)
    proxy.set_rule(CLIENT, "other", Rule("blackhole"))
    proxy.set_rule("storage-0", "svc", Rule("blackhole"))
    with _connect(proxy, "svc") as sock:
        assert _roundtrip(sock, b"free") == b"free"


def test_reset_breaks_open_connections_and_refuses_new_ones(proxy: FaultProxy, echo: tuple[str, int]) -> None:
    proxy.listen("svc", echo)
    with _connect(proxy, "svc") as sock:
        assert _roundtrip(sock, b"a") == b"a"
        proxy.set_rule(CLIENT, "svc", Rule("reset"))
        sock.settimeout(5)
        with pytest.raises(ConnectionResetError):
            sock.recv(10)
    with _connect(proxy, "svc") as again, pytest.raises((ConnectionResetError, BrokenPipeError)):
        again.settimeout(5)
        again.sendall(b"x")
        if again.recv(10) == b"":
            raise ConnectionResetError("closed")
    assert proxy.stats["resets"] >= 2


def test_drop_with_probability_one_cuts_the_connection_and_loses_the_chunk(
    proxy: FaultProxy, echo: tuple[str, int]
) -> None:
    proxy.listen("svc", echo)
    with _connect(proxy, "svc") as sock:
        assert _roundtrip(sock, b"a") == b"a"
        proxy.set_rule(CLIENT, "svc", Rule("drop", ("response",), probability=1.0))
        sock.settimeout(5)
        sock.sendall(b"lost")
        with pytest.raises(ConnectionResetError):
            sock.recv(10)
    assert proxy.stats["dropped"] == 1


def test_delay_holds_each_chunk_for_the_delay(proxy: FaultProxy, echo: tuple[str, int]) -> None:
    import time

    proxy.listen("svc", echo)
    with _connect(proxy, "svc") as sock:
        assert _roundtrip(sock, b"a") == b"a"
        proxy.set_rule(CLIENT, "svc", Rule("delay", ("request",), delay_s=0.3))
        started = time.monotonic()
        assert _roundtrip(sock, b"slow") == b"slow"
        assert time.monotonic() - started >= 0.3


def test_bad_rules_are_refused_with_what_to_use() -> None:
    with pytest.raises(ValueError, match="use one of delay, blackhole, drop, reset"):
        Rule("explode")
    with pytest.raises(ValueError, match="request and/or response"):
        Rule("delay", ("sideways",))
