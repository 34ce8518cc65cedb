"""Throwaway local servers for tests and benchmarks: a free loopback port, a ``redis-server``, and how every
server process of the test helpers is stopped and its log quoted."""

from __future__ import annotations

import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

_LOCAL_PORT_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_CHOSEN_PORT = 20000
_handed_out: set[int] = set()
_handed_out_lock = threading.Lock()


def _ephemeral_ports() -> range:
    """The ports the kernel picks from for a bind to port 0 and for every outgoing connection."""
    try:
        low, high = (int(part) for part in _LOCAL_PORT_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    return range(low, high + 1)


def _unclaimed_ports() -> range:
    """Ports outside the ephemeral range (the wider side of it), which the kernel never hands out by itself."""
    ephemeral = _ephemeral_ports()
    below = range(min(_LOWEST_CHOSEN_PORT, ephemeral.start), ephemeral.start)
    above = range(ephemeral.stop, 65536)
    return max(below, above, key=len)


def _binds(host: str, port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing is bound to right now, for a server that is told its port up front.

    The port comes from outside the kernel's ephemeral range (``ip_local_port_range``). Between this call and the
    server's own bind, or while a killed server restarts on its old port, a port of that range can be taken by any
    process's outgoing connection or bind to port 0; a port outside it can only be taken by someone who chose it,
    and this process never hands out the same port twice. Where the range leaves fewer than 4,096 other ports,
    the kernel's own choice is returned instead.
    """
    candidates = _unclaimed_ports()
    if len(candidates) >= 4096:
        pick = random.SystemRandom()
        with _handed_out_lock:
            for _ in range(256):
                port = pick.choice(candidates)
                if port not in _handed_out and _binds(host, port):
                    _handed_out.add(port)
                    return port
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class StartedProcesses:
    """``with`` support for a helper that starts processes: ``start()`` on entry (``stop()`` when it fails halfway,
    so nothing is left running), ``stop()`` on exit."""

    def start(self, *args: Any, **kwargs: Any) -> Self:
        raise NotImplementedError

    def stop(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(
    process: subprocess.Popen[bytes] | None, timeout_s: float, *, sig: signal.Signals = signal.SIGTERM
) -> int | None:
    """Send ``sig`` (a graceful stop), SIGKILL after ``timeout_s``, and reap; returns the exit code (None when
    nothing was started)."""
    if process is None:
        return None
    if process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a log file, for error messages; ``(no log)`` when it cannot be read."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def find_redis_server() -> str | None:
    """Path of the ``redis-server`` binary, or None when Redis is not installed."""
    return shutil.which("redis-server")


@contextmanager
def redis_server(*, fsync_always: bool = False, timeout_s: float = 10.0) -> Iterator[str]:
    """Run ``redis-server`` on a free loopback port for the block; yields its ``redis://`` URL.

    Args:
        fsync_always: AOF with ``appendfsync always`` (the durability of an fsync-per-write log);
            otherwise no persistence at all.
        timeout_s: how long the server may take to answer PING.

    Raises:
        RuntimeError: Redis is not installed, or the server did not come up.
    """
    import redis

    binary = find_redis_server()
    if binary is None:
        raise RuntimeError("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    persistence = ["--appendonly", "yes", "--appendfsync", "always"] if fsync_always else ["--appendonly", "no"]
    with tempfile.TemporaryDirectory(prefix="oncelog-redis-") as directory:
        args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--dir", directory, *persistence]
        process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url)
        try:
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start on port {port}") from None
                    time.sleep(0.02)
            yield url
        finally:
            client.close()
            process.terminate()
            process.wait(timeout=10)
