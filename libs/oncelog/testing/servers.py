"""Throwaway local servers for tests and benchmarks: a free loopback port and a ``redis-server``."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    """A loopback TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
