"""A throwaway PostgreSQL server for tests, from the distribution's ``initdb``/``postgres`` binaries.

PostgreSQL refuses to run as root, so when the tests run as root the server runs as the ``postgres``
user (``subprocess`` drops privileges itself, so signals reach the server and not a wrapper). The server
listens on a free loopback port with a private socket directory and is stopped (fast shutdown) and deleted
afterwards.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from oncelog.testing.servers import free_port, stop_process


def new_database(server_url: str) -> str:
    """Create a fresh, empty database on the PostgreSQL server at ``server_url``; returns its URL."""
    import uuid

    import sqlalchemy as sa

    name = "t_" + uuid.uuid4().hex[:12]
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    return server_url.rsplit("/", 1)[0] + "/" + name


def find_postgres_bin() -> Path | None:
    """Directory holding ``initdb`` and ``postgres``, newest version first; None if PostgreSQL is absent."""
    for candidate in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.path.exists(os.path.join(candidate, "initdb")):
            return Path(candidate)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@contextmanager
def postgres_server(bin_dir: Path) -> Iterator[str]:
    """Run a PostgreSQL server for the duration of the block; yields a SQLAlchemy URL (psycopg 3)."""
    with postgres_instance(bin_dir) as instance:
        yield instance.url


class PostgresInstance:
    """A running server: ``url`` to connect, ``stop()`` to take it away mid-test (fast shutdown)."""

    def __init__(
        self,
        url: str,
        process: subprocess.Popen[bytes],
        start: Callable[[], subprocess.Popen[bytes]],
        ready: Callable[[], bool],
    ) -> None:
        self.url = url
        self.process = process
        self._start = start
        self._ready = ready

    def restart(self, timeout: float = 30.0) -> None:
        """Stop the server (fast shutdown) and start it again on the same data and port; returns once it accepts
        sessions."""
        self.stop()
        self.process = self._start()
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"postgres did not restart: {self.url}")
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server now (SIGINT = fast shutdown: open sessions are cut); idempotent."""
        stop_process(self.process, 15, sig=signal.SIGINT)


@contextmanager
def postgres_instance(bin_dir: Path) -> Iterator[PostgresInstance]:
    """Run a PostgreSQL server for the duration of the block."""
    as_root = os.geteuid() == 0
    base = Path(tempfile.mkdtemp(prefix="oncelog-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if as_root:
        shutil.chown(base, "postgres")
        shutil.chown(sock, "postgres")
    user = "postgres" if as_root else None
    port = free_port()
    subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "oncelog", "-A", "trust", "--no-sync", "-E", "UTF8"],
        check=True,
        capture_output=True,
        user=user,
        cwd=base,
    )
    log = base / "postgres.log"

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                str(bin_dir / "postgres"),
                "-D",
                str(data),
                "-p",
                str(port),
                "-k",
                str(sock),
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "max_connections=200",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(log, "ab"),  # closed with the process
            user=user,
            cwd=base,
        )

    server = start()
    url = f"postgresql+psycopg://oncelog@127.0.0.1:{port}/postgres"
    ready = bin_dir / "pg_isready"

    def accepting() -> bool:
        return subprocess.run([str(ready), "-h", "127.0.0.1", "-p", str(port)], capture_output=True).returncode == 0

    instance = PostgresInstance(url, server, start, accepting)
    try:
        deadline = time.monotonic() + 30
        while True:
            if server.poll() is not None:
                raise RuntimeError(f"postgres exited: {log.read_text(errors='replace')[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("postgres did not start within 30 s") from None
                time.sleep(0.05)
        # accepting TCP is not yet accepting sessions; wait for the startup to finish
        while not accepting():
            if time.monotonic() > deadline:
                raise RuntimeError("postgres did not become ready within 30 s")
            time.sleep(0.05)
        yield instance
    finally:
        instance.stop()
        shutil.rmtree(base, ignore_errors=True)
