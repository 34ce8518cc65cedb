"""A loopback TCP fault proxy in front of every service address (design/torture.md §3.1).

One listener per service process; the process advertises the listener's address, so clients and the other
services reach it only through the proxy. Each accepted connection is attributed to the process that opened it
(its local port is looked up in ``/proc/net/tcp`` and the socket inode among the fds of the known processes), so a
rule names a *link*: ``(source, destination)``, where a source is a node id or ``client`` (this process).

Rules, per link and direction (``request``: source → destination bytes, ``response``: the way back):

* ``delay``: every chunk waits ``delay_s`` before it is forwarded (order kept);
* ``blackhole``: bytes are held, not forwarded, until the rule is cleared; then they flow again, as TCP would
  deliver them after a partition heals (the peer usually gave up by then: its deadline fires);
* ``drop``: with ``probability`` per chunk the chunk is lost and the connection cut (a request never arriving,
  or a reply lost after the server applied the request: the indeterminate case);
* ``reset``: connections on the link are reset (RST) now, and new ones as soon as they are accepted.

The proxy runs its own asyncio loop in a daemon thread; every method is thread-safe.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import socket
import struct
import threading
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

CLIENT = "client"
"""The source name of connections opened by this process (the torture driver's clients)."""
DIRECTIONS = ("request", "response")
ACTIONS = ("delay", "blackhole", "drop", "reset")
CHUNK = 65536


@dataclass(frozen=True)
class Rule:
    """One fault on a link; see the module docstring for the actions."""

    action: str
    directions: tuple[str, ...] = DIRECTIONS
    delay_s: float = 0.0
    probability: float = 1.0

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"rule action {self.action!r}; use one of {', '.join(ACTIONS)}")
        bad = set(self.directions) - set(DIRECTIONS)
        if bad or not self.directions:
            raise ValueError(f"rule directions {self.directions!r}; use request and/or response")
        if not 0.0 <= self.probability <= 1.0 or self.delay_s < 0:
            raise ValueError("rule probability must be in [0, 1] and delay_s >= 0")


@dataclass(eq=False)
class _Conn:
    source: str
    destination: str
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    def reset(self) -> None:
        for writer in self.writers:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()


def _inode_of_local_port(port: int) -> str | None:
    """The socket inode of the loopback TCP connection whose local port is ``port``."""
    needle = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as rows:
                next(rows, None)
                for row in rows:
                    parts = row.split()
                    # a closed connection that used the same port lingers in TIME_WAIT with inode 0: skip it
                    if len(parts) > 9 and parts[1].endswith(needle) and parts[9] != "0":
                        return parts[9]
        except OSError:
            continue
    return None


def _owner(inode: str, pids: Mapping[int, str]) -> str | None:
    link = f"socket:[{inode}]"
    for pid, name in pids.items():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == link:
                    return name
            except OSError:
                continue
    return None


class FaultProxy:
    """Listeners in front of service processes, with per-link fault rules.

    Args:
        processes: returns ``{pid: node id}`` of the processes whose connections are attributed (services);
            connections from this process are ``client``, from anything else ``unknown``.
        seed: seeds the ``drop`` coin.
        host: the loopback interface.
    """

    def __init__(
        self, processes: Callable[[], Mapping[int, str]] = dict, *, seed: int = 0, host: str = "127.0.0.1"
    ) -> None:
        self._processes = processes
        self._rng = random.Random(seed)
        self._host = host
        self._rules: dict[tuple[str, str], Rule] = {}
        self._upstreams: dict[str, tuple[str, int]] = {}
        self._ports: dict[str, int] = {}
        self._conns: set[_Conn] = set()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._changed = asyncio.Event()
        self._servers: list[asyncio.base_events.Server] = []
        self.stats: dict[str, int] = {"connections": 0, "held_chunks": 0, "dropped": 0, "resets": 0}
        self.links: Counter[tuple[str, str]] = Counter()
        """Connections accepted per link (source, destination)."""
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    # -- listeners -------------------------------------------------------------------------------------

    def listen(self, destination: str, upstream: tuple[str, int], port: int = 0) -> int:
        """Open a listener for ``destination`` forwarding to ``upstream``; returns its port."""

        async def open_server() -> int:
            server = await asyncio.start_server(
                lambda r, w: self._accept(destination, r, w), self._host, port, reuse_address=True
            )
            self._servers.append(server)
            return int(server.sockets[0].getsockname()[1])

        bound = asyncio.run_coroutine_threadsafe(open_server(), self._loop).result(10)
        with self._lock:
            self._upstreams[destination] = upstream
            self._ports[destination] = bound
        return bound

    def address(self, destination: str) -> str:
        return f"{self._host}:{self._ports[destination]}"

    # -- rules -----------------------------------------------------------------------------------------

    def set_rule(self, source: str, destination: str, rule: Rule) -> None:
        """Apply ``rule`` to the link (replacing its previous rule); ``reset`` acts on open connections now."""
        with self._lock:
            self._rules[(source, destination)] = rule
            victims = [c for c in self._conns if (c.source, c.destination) == (source, destination)]
        if rule.action == "reset":
            self._loop.call_soon_threadsafe(self._reset, victims)
        self._loop.call_soon_threadsafe(self._wake)

    def clear(self, source: str | None = None, destination: str | None = None) -> None:
        """Remove the rules of matching links (None matches any); held bytes flow again."""
        with self._lock:
            for link in list(self._rules):
                if (source is None or link[0] == source) and (destination is None or link[1] == destination):
                    del self._rules[link]
        self._loop.call_soon_threadsafe(self._wake)

    def rules(self) -> dict[tuple[str, str], Rule]:
        with self._lock:
            return dict(self._rules)

    def _rule(self, source: str, destination: str, direction: str) -> Rule | None:
        rule = self._rules.get((source, destination))
        return rule if rule is not None and direction in rule.directions else None

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _reset(self, victims: list[_Conn]) -> None:
        for conn in victims:
            self.stats["resets"] += 1
            conn.reset()

    # -- forwarding ------------------------------------------------------------------------------------

    async def _accept(self, destination: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = await self._loop.run_in_executor(None, self._identify, int(peer[1]) if peer else 0)
        conn = _Conn(source, destination, [writer])
        self.stats["connections"] += 1
        self.links[(source, destination)] += 1
        rule = self._rule(source, destination, "request")
        if rule is not None and rule.action == "reset":
            self.stats["resets"] += 1
            conn.reset()
            return
        host, port = self._upstreams[destination]
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError:
            conn.reset()  # the process is down: the client sees the connection refused, as without a proxy
            return
        conn.writers.append(up_writer)
        with self._lock:
            self._conns.add(conn)
        try:
            await asyncio.gather(
                self._pump(conn, reader, up_writer, "request"),
                self._pump(conn, up_reader, writer, "response"),
            )
        finally:
            with self._lock:
                self._conns.discard(conn)
            for w in conn.writers:
                w.close()

    async def _pump(
        self, conn: _Conn, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, direction: str
    ) -> None:
        try:
            while data := await reader.read(CHUNK):
                while True:
                    rule = self._rule(conn.source, conn.destination, direction)
                    if rule is None or rule.action != "blackhole":
                        break
                    self.stats["held_chunks"] += 1
                    await self._changed.wait()
                if rule is not None and rule.action == "drop" and self._rng.random() < rule.probability:
                    self.stats["dropped"] += 1
                    conn.reset()
                    return
                if rule is not None and rule.action == "reset":
                    conn.reset()
                    return
                if rule is not None and rule.action == "delay" and rule.delay_s > 0:
                    await asyncio.sleep(rule.delay_s)
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except (OSError, RuntimeError):
            conn.reset()

    def _identify(self, peer_port: int) -> str:
        inode = _inode_of_local_port(peer_port)
        if inode is None:
            return "unknown"
        known = {os.getpid(): CLIENT, **dict(self._processes())}
        return _owner(inode, known) or "unknown"

    # -- shutdown --------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every listener and connection and stop the loop thread."""

        async def shutdown() -> None:
            for server in self._servers:
                server.close()
            with self._lock:
                conns = list(self._conns)
            for conn in conns:
                conn.reset()
            self._wake()

        if self._loop.is_running():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(shutdown(), self._loop).result(5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
