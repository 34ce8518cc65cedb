"""LocalCluster: every oncelog service as its own OS process on this machine.

It is what ``oncelog dev`` runs and what integration tests use as a fixture, so "it works in tests" means
"it works in dev". Each process gets its configuration through the same ``ONCELOG_*`` variables a
deployment uses, binds the port it is given (0 picks a free one), and reports its address through a ready
file. Logs go to ``<data_dir>/logs/<node>.log``.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.testing.servers import StartedProcesses, free_port, log_tail
from oncelog.vocabulary import Role

# start order: the pid-allocator first, so coordinators find ids ready; storage before coordinators' markers
SERVICES = (Role.PID_ALLOCATOR, Role.PARTITION_STORAGE, Role.GROUP_OFFSETS, Role.TXN_COORDINATOR)

KAFKA_GATEWAY = "kafka-gateway"
"""The optional fifth process (``kafka_gateway=True``): Kafka's protocol in front of the others, started last."""
KAFKA_PORT_OFFSET = 1992
"""The gateway's Kafka port is ``base_port + 1992``: 9092, Kafka's own, with the default base 7100."""


class ClusterStartError(RuntimeError):
    """A process of the local cluster exited or did not become ready in time; the message has its log tail."""


class DataDirInUseError(ClusterStartError):
    """Another local cluster runs on the same data directory; ``pid`` is the process holding its lock."""

    def __init__(self, data_dir: Path, pid: str) -> None:
        self.pid = pid
        super().__init__(
            f"{data_dir} is in use by another local cluster (pid {pid} holds {data_dir / LOCK_FILE}); stop that "
            "one first (Ctrl-C where it runs, or kill " + pid + "), or pass another --data-dir"
        )


DATABASE_SERVER_ENV = "ONCELOG_LOCAL_CLUSTER_DATABASE_SERVER"
"""A PostgreSQL server URL: every LocalCluster built without a ``database_url`` then gets a fresh database there
instead of a SQLite file (what ``pytest --cluster=postgres`` sets for the whole test run, subprocesses included)."""

LOCK_FILE = "cluster.lock"
"""Held (flock) by the process running a local cluster on a data directory, and naming its pid."""


@dataclass
class NodeProcess:
    """One running (or stopped) service process."""

    service: str
    index: int
    node_id: str
    env: dict[str, str]
    ready_file: Path
    log_file: Path
    process: subprocess.Popen[bytes] | None = None
    address: str = ""
    kafka_address: str = ""
    """The Kafka listener of a kafka-gateway node; empty for the other services."""

    @property
    def module(self) -> str:
        """The module run with ``python -m``."""
        return "oncelog." + self.service.replace("-", "_")

    def alive(self) -> bool:
        """True while the OS process runs."""
        return self.process is not None and self.process.poll() is None


@dataclass
class LocalCluster(StartedProcesses):
    """Start, stop, kill and restart the services of one cluster under ``data_dir``.

    Args:
        data_dir: catalog database, storage segments, logs and ``cluster.json`` live here.
        storage_nodes: number of partition-storage processes.
        host: interface to bind; loopback by default.
        base_port: 0 gives every process a free port; otherwise pid-allocator gets ``base_port + 1``,
            txn-coordinator ``+2``, group-offsets ``+3`` and storage node i ``+10 + i``.
        database_url: catalog URL; defaults to a SQLite file in ``data_dir``, or to a fresh database on the
            PostgreSQL server that ``ONCELOG_LOCAL_CLUSTER_DATABASE_SERVER`` names.
        env: extra environment for every process (``OTEL_*``, ``ONCELOG_*`` overrides).
        services: which services to run.
        replicas: processes per service other than partition-storage (default 1 each); replicas after the
            first always bind free ports.
        replication_factor: ``ONCELOG_DEFAULT_REPLICATION_FACTOR`` of every process (the replication factor of
            topics created without one); 0 leaves it to the environment (1 unless set).
        front: puts something in front of every process (a fault proxy): called with the node id and the free
            port the process will bind (kept across restarts), it returns the address the process advertises.
        interpreter_options: extra ``python`` options of every process (``-X`` flags of test builds).
        kafka_gateway: also run the kafka-gateway, once the others serve (bootstrapped from them); Kafka clients
            use ``kafka_bootstrap``: ``base_port + 1992`` (9092 with the default base), gRPC health on ``+4``.
    """

    data_dir: Path
    storage_nodes: int = 1
    host: str = "127.0.0.1"
    base_port: int = 0
    database_url: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    services: tuple[str, ...] = SERVICES
    replicas: Mapping[str, int] = field(default_factory=dict)
    replication_factor: int = 0
    front: Callable[[str, int], str] | None = None
    interpreter_options: tuple[str, ...] = ()
    kafka_gateway: bool = False
    nodes: list[NodeProcess] = field(default_factory=list, init=False)
    _lock_fd: int | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.data_dir = Path(self.data_dir).resolve()
        unknown = set(self.services) - set(SERVICES)
        if unknown:
            raise ValueError(f"unknown services {sorted(unknown)}; choose from {', '.join(SERVICES)}")
        if self.storage_nodes < 1 and Role.PARTITION_STORAGE in self.services:
            raise ValueError("storage_nodes must be at least 1")
        if not 0 <= self.replication_factor <= self.storage_nodes:
            raise ValueError(
                f"replication_factor={self.replication_factor} must be 0 (the default) or at most storage_nodes="
                f"{self.storage_nodes}: each copy of a partition lives on its own storage node"
            )
        if not self.database_url:
            server = os.environ.get(DATABASE_SERVER_ENV, "")
            if server:
                from oncelog.testing.postgres import new_database  # sqlalchemy only where a server is named

                self.database_url = new_database(server)
            else:
                self.database_url = f"sqlite:///{self.data_dir / 'catalog.db'}"
        for service in self.services:
            count = self.storage_nodes if service == Role.PARTITION_STORAGE else self.replicas.get(service, 1)
            for index in range(count):
                self.nodes.append(self._node(service, index))
        if self.kafka_gateway:
            self.nodes.append(self._node(KAFKA_GATEWAY, 0))

    def _port(self, service: str, index: int) -> int:
        if self.base_port == 0 or (index > 0 and service != Role.PARTITION_STORAGE):
            return 0
        offsets: dict[str, int] = {
            Role.PID_ALLOCATOR: 1,
            Role.TXN_COORDINATOR: 2,
            Role.GROUP_OFFSETS: 3,
            KAFKA_GATEWAY: 4,
            Role.PARTITION_STORAGE: 10 + index,
        }
        return self.base_port + offsets[service]

    def _node(self, service: str, index: int) -> NodeProcess:
        node_id = f"{service}-{index}"
        prefix = "ONCELOG_" + service.upper().replace("-", "_") + "_"
        run_dir = self.data_dir / "run"
        port = self._port(service, index)
        state_env = {}
        if self.front is not None:
            port = port or free_port()
            state_env[f"{prefix}ADVERTISE"] = self.front(node_id, port)
        if service == Role.TXN_COORDINATOR:  # replicas share one transaction table (design/architecture.md §2)
            state_env[f"{prefix}STATE_DATABASE_URL"] = (
                f"sqlite:///{self.data_dir / 'txn-coordinator.db'}"
                if self.database_url.startswith("sqlite")
                else self.database_url
            )
        env = {
            **os.environ,
            "ONCELOG_DATABASE_URL": self.database_url,
            "ONCELOG_READY_FILE": str(run_dir / f"{node_id}.json"),
            "ONCELOG_PARENT_PID": str(os.getpid()),
            f"{prefix}LISTEN": f"{self.host}:{port}",
            f"{prefix}NODE_ID": node_id,
            f"{prefix}DATA_DIR": str(self.data_dir / node_id),
            "OTEL_SERVICE_NAME": f"oncelog-{service}",
            "PYTHONUNBUFFERED": "1",
            **state_env,
            **({"ONCELOG_DEFAULT_REPLICATION_FACTOR": str(self.replication_factor)} if self.replication_factor else {}),
            **self.env,
        }
        if service == KAFKA_GATEWAY:
            kafka_port = self.base_port + KAFKA_PORT_OFFSET if self.base_port else 0
            env[f"{prefix}KAFKA_LISTEN"] = f"{self.host}:{kafka_port}"
        if service == Role.GROUP_OFFSETS and f"{prefix}STATE_DATABASE_URL" not in self.env:
            sqlite = self.database_url.startswith("sqlite")
            env[f"{prefix}STATE_DATABASE_URL"] = (
                f"sqlite:///{self.data_dir / 'group-offsets.db'}" if sqlite else self.database_url
            )
        return NodeProcess(
            service=service,
            index=index,
            node_id=node_id,
            env=env,
            ready_file=run_dir / f"{node_id}.json",
            log_file=self.data_dir / "logs" / f"{node_id}.log",
        )

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> LocalCluster:
        """Start every process and wait until each one serves; raises ClusterStartError with the log tail.

        Raises:
            DataDirInUseError: another cluster runs on ``data_dir`` (nothing was started).
        """
        self._lock()
        (self.data_dir / "logs").mkdir(parents=True, exist_ok=True)
        (self.data_dir / "run").mkdir(parents=True, exist_ok=True)
        services = [n for n in self.nodes if n.service != KAFKA_GATEWAY]
        for node in services:
            self._spawn(node)
        deadline = time.monotonic() + timeout
        for node in services:
            self._wait_ready(node, deadline)
        for node in self.nodes:
            if node.service == KAFKA_GATEWAY:  # it needs the others' addresses to bootstrap from
                node.env["ONCELOG_BOOTSTRAP"] = ",".join(n.address for n in services)
                self._spawn(node)
                self._wait_ready(node, deadline)
        self.write_cluster_json()
        return self

    def _spawn(self, node: NodeProcess) -> None:
        node.ready_file.unlink(missing_ok=True)
        node.address = ""
        log = open(node.log_file, "ab")  # noqa: SIM115 - owned by the child process from here on
        try:
            node.process = subprocess.Popen(
                [sys.executable, *self.interpreter_options, "-m", node.module],
                env=node.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C in a terminal reaches oncelog dev, which drains the children
            )
        finally:
            log.close()

    def _wait_ready(self, node: NodeProcess, deadline: float) -> None:
        while time.monotonic() < deadline:
            if node.ready_file.exists():
                try:
                    ready = json.loads(node.ready_file.read_text())
                    node.address, node.kafka_address = ready["address"], ready.get("kafka_address", "")
                    return
                except (ValueError, KeyError):
                    pass  # written atomically, so this is a stale partial file from a crash: keep waiting
            if not node.alive():
                raise ClusterStartError(
                    f"{node.node_id} exited with {node.process.returncode if node.process else '?'}"
                    f" before serving:\n{self.log_tail(node)}"
                )
            time.sleep(0.05)
        raise ClusterStartError(f"{node.node_id} did not become ready in time:\n{self.log_tail(node)}")

    def _lock(self) -> None:
        """Hold ``data_dir/cluster.lock`` until :meth:`stop`, so a second cluster cannot share the directory."""
        if self._lock_fd is not None:
            return
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)  # not inherited by the children
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirInUseError(self.data_dir, holder) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def stop(self, timeout: float = 30.0) -> dict[str, int | None]:
        """SIGTERM every process (graceful drain), SIGKILL what is left after ``timeout``; returns exit codes."""
        for node in self.nodes:
            if node.alive():
                assert node.process is not None
                node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes: dict[str, int | None] = {}
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                codes[node.node_id] = node.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                codes[node.node_id] = node.process.wait()
        self._unlock()
        return codes

    def kill(self, node_id: str) -> None:
        """SIGKILL one process (crash simulation) and reap it."""
        node = self.node(node_id)
        if node.process is not None and node.alive():
            node.process.kill()
            node.process.wait()

    def restart(self, node_id: str, timeout: float = 60.0, *, same_address: bool = False) -> str:
        """Start a stopped or killed process again with the same configuration; returns its address.

        With ``same_address`` it listens on the address it had (as a restarted server does in a deployment, so
        clients that knew only the old addresses find it again); otherwise on a new port when the cluster's ports
        are chosen by the kernel.
        """
        node = self.node(node_id)
        if node.alive():
            raise RuntimeError(f"{node_id} is still running; stop or kill it first")
        if same_address and node.address:
            node.env["ONCELOG_" + node.service.upper().replace("-", "_") + "_LISTEN"] = node.address
        self._spawn(node)
        self._wait_ready(node, time.monotonic() + timeout)
        self.write_cluster_json()
        return node.address

    # -- addresses -------------------------------------------------------------------------------------

    def node(self, node_id: str) -> NodeProcess:
        """The node with that id (``<service>-<index>``)."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(f"no node {node_id!r}; nodes: {', '.join(n.node_id for n in self.nodes)}")

    def freeze(self, pids: list[int], timeout: float = 30.0) -> None:
        """SIGSTOP ``pids`` (a long pause, not a crash) and return once each is stopped; undo with :meth:`thaw`.

        On a SQLite catalog the signals are sent while this process holds the catalog's write lock, so no frozen
        process can hold it: a process stopped inside a catalog write would otherwise keep the lock, and every
        other process's catalog writes (heartbeats, elections) would wait for it (design/architecture.md §2.2).
        That stall is real, but a test that freezes a process to hold back its data path means to measure
        something else. With PostgreSQL nothing is taken (it locks rows).
        """
        lock = None
        if self.database_url.startswith("sqlite:///"):
            import sqlite3

            lock = sqlite3.connect(self.database_url.removeprefix("sqlite:///"), timeout=timeout, isolation_level=None)
            lock.execute("BEGIN IMMEDIATE")
        try:
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            deadline = time.monotonic() + timeout
            for pid in pids:  # the signal is delivered asynchronously
                while scheduler_state(pid) != "T":
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"process {pid} did not stop within {timeout} s")
                    time.sleep(0.005)
        finally:
            if lock is not None:
                lock.rollback()
                lock.close()

    def thaw(self, pids: list[int]) -> None:
        """SIGCONT what :meth:`freeze` stopped."""
        for pid in pids:
            os.kill(pid, signal.SIGCONT)

    def pids(self) -> dict[int, str]:
        """``{pid: node id}`` of the running processes."""
        return {n.process.pid: n.node_id for n in self.nodes if n.process is not None and n.alive()}

    def addresses(self, service: str) -> list[str]:
        """Addresses of a service's processes, in index order."""
        return [n.address for n in self.nodes if n.service == service]

    @property
    def bootstrap(self) -> str:
        """Any service address works as a bootstrap address; the first ready one is used (not the kafka-gateway's,
        whose gRPC address serves health only)."""
        return next(n.address for n in self.nodes if n.address and n.service != KAFKA_GATEWAY)

    @property
    def kafka_bootstrap(self) -> str:
        """``bootstrap.servers`` of Kafka clients: the kafka-gateway's Kafka address (empty without a gateway)."""
        return next((n.kafka_address for n in self.nodes if n.kafka_address), "")

    def describe(self) -> dict[str, object]:
        """The content of ``cluster.json``."""
        return {
            "bootstrap": self.bootstrap,
            "services": {s: self.addresses(s) for s in self.services},
            **({"kafka_bootstrap": self.kafka_bootstrap} if self.kafka_bootstrap else {}),
            "database_url": self.database_url,
            "data_dir": str(self.data_dir),
        }

    def write_cluster_json(self) -> Path:
        """Write ``<data_dir>/cluster.json`` for clients and the CLI (``--bootstrap`` default)."""
        path = self.data_dir / "cluster.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.describe(), indent=2) + "\n")
        os.replace(tmp, path)
        return path

    def log_tail(self, node: NodeProcess, lines: int = 30) -> str:
        """The last lines of a node's log, for error messages."""
        return log_tail(node.log_file, lines)


def scheduler_state(pid: int) -> str:
    """The process's scheduler state from /proc (``T``: stopped by a signal)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]
