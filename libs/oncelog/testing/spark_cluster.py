"""A Spark standalone cluster (one master, N workers) and a Spark Connect server, from the installed pyspark.

Used by the Spark cluster tests, ``oncelog spark-demo --cluster standalone|connect`` and ``python -m bench.spark``.
Every process is a JVM started through pyspark's own ``bin/spark-class`` on loopback, with small memory and one
core per worker, and every wait is on an explicit signal with a deadline: the master's ``/json/`` status
(``ALIVE``, and each worker ``ALIVE`` by its port), a worker's ``/json/`` list of executors, the Connect
server's gRPC port answering a query.

What travels to the executors (docs/spark.md, "On a Spark standalone cluster"): :func:`submit_conf` sets the
Python of the workers (``spark.pyspark.python``, this interpreter, which has ``oncelog`` and ``pyarrow``), the
loopback addresses and the memory; the pipeline's options travel inside the query plan.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from oncelog.testing.servers import StartedProcesses, free_port, log_tail, stop_process
from oncelog.testing.spark import QUICK_JVM

T = TypeVar("T")

EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
"""The main class of an executor JVM, which a worker starts as its child process."""
CONNECT_SERVER_MAIN = "org.apache.spark.sql.connect.service.SparkConnectServer"
"""The Spark Connect server's main class; its jar (``spark-connect_2.13``) ships in pyspark's ``jars/``."""


class SparkClusterError(RuntimeError):
    """A Spark process exited, or a readiness signal did not come in time; the message has its log tail."""


def spark_home() -> Path:
    """The installed pyspark package, which is a whole Spark distribution (``bin/``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float, *, alive: Callable[[], str | None]) -> T:
    """Poll ``probe`` until it returns something other than None; raise naming ``what`` after ``timeout_s``.

    ``alive`` returns why the wait is hopeless (a process exited, with its log), or None while it is not.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        found = probe()
        if found is not None:
            return found
        dead = alive()
        if dead:
            raise SparkClusterError(f"{what}: {dead}")
        if time.monotonic() > deadline:
            raise SparkClusterError(f"{what}: not within {timeout_s:.0f} s")
        time.sleep(0.1)


def _get_json(url: str) -> Any | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)
    except (OSError, ValueError, urllib.error.URLError):
        return None  # not listening yet, or mid-restart


def _write_conf(conf_dir: Path, properties: Mapping[str, str]) -> None:
    """``spark-defaults.conf`` for the daemons and a log4j2 config sending INFO to the process's stderr."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    (conf_dir / "spark-defaults.conf").write_text("".join(f"{k} {v}\n" for k, v in properties.items()))
    (conf_dir / "log4j2.properties").write_text(
        "rootLogger.level = info\nrootLogger.appenderRef.stderr.ref = console\n"
        "appender.console.type = Console\nappender.console.name = console\nappender.console.target = SYSTEM_ERR\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n\n"
        # the driver's streaming and scheduler chatter stays out of the demo's driver logs
        "logger.spark.name = org.apache.spark\nlogger.spark.level = warn\n"
        "logger.master.name = org.apache.spark.deploy\nlogger.master.level = info\n"
    )


def spark_env(conf_dir: Path, *, daemon_memory: str = "256m") -> dict[str, str]:
    """The environment of every Spark process started here: this pyspark, loopback, this Python, quick JVMs."""
    env = {key: value for key, value in os.environ.items() if not key.startswith(("SPARK_", "PYSPARK_"))}
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_DAEMON_MEMORY=daemon_memory,
        SPARK_DAEMON_JAVA_OPTS=QUICK_JVM,
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
    )
    return env


def _proc_children(parent: int) -> Iterator[int]:
    """Pids whose parent is ``parent`` (from /proc; Linux)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # exited while listed
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after the last ')'
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent:
            yield int(entry.name)


def _cmdline(pid: int) -> list[str]:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


@dataclass(frozen=True)
class Executor:
    """An executor JVM a worker started for an application."""

    pid: int
    app_id: str
    executor_id: str
    worker: int


@dataclass
class _Daemon:
    name: str
    args: list[str]
    log: Path
    port: int = 0
    ui_port: int = 0
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def exit_reason(self) -> str | None:
        if self.alive():
            return None
        code = self.process.returncode if self.process else "never started"
        return f"{self.name} exited with {code}:\n{log_tail(self.log, 25)}"


@dataclass
class StandaloneCluster(StartedProcesses):
    """A Spark standalone master and ``workers`` workers on loopback, each worker ``worker_cores`` cores and
    ``worker_memory``; work directories and logs under ``work_dir``.

    Start it with ``start()`` or ``with``; :meth:`submit` runs ``spark-submit`` against it; :meth:`executors`,
    :meth:`kill_executor`, :meth:`kill_worker` and :meth:`restart_worker` are the faults the tests inject.
    """

    work_dir: Path
    workers: int = 2
    worker_cores: int = 1
    worker_memory: str = "1g"
    nice: int = 0
    master: _Daemon = field(init=False)
    worker_daemons: list[_Daemon] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir).resolve()
        self.conf_dir = self.work_dir / "conf"
        logs = self.work_dir / "logs"
        self.master = _Daemon("spark master", [], logs / "master.log")
        self.worker_daemons = [_Daemon(f"spark worker {i}", [], logs / f"worker-{i}.log") for i in range(self.workers)]

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self, timeout_s: float = 180) -> StandaloneCluster:
        """Start the master, then every worker; return once the master lists each worker ``ALIVE``."""
        (self.work_dir / "logs").mkdir(parents=True, exist_ok=True)
        _write_conf(
            self.conf_dir,
            {
                # the REST submission server would take the fixed port 6066, shared by every cluster on the host
                "spark.master.rest.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                # a worker gone for this long is dead to the master (a SIGKILLed one is noticed at once through its
                # closed connection; this bounds a hung one)
                "spark.worker.timeout": "30",
            },
        )
        self.master.port, self.master.ui_port = free_port(), free_port()
        self.master.args = [
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1", "--port", str(self.master.port), "--webui-port", str(self.master.ui_port),
        ]  # fmt: skip
        self._spawn(self.master)
        wait_for(
            "the Spark master to be ALIVE",
            lambda: (self.state() or {}).get("status") == "ALIVE" or None,
            timeout_s,
            alive=self.master.exit_reason,
        )
        for index in range(self.workers):
            self._spawn_worker(index)
        for index in range(self.workers):
            self._wait_registered(index, timeout_s)
        return self

    def stop(self, timeout_s: float = 30) -> None:
        """Stop the workers (which stop their executors), then the master."""
        for daemon in [*self.worker_daemons, self.master]:
            stop_process(daemon.process, timeout_s)

    def _spawn(self, daemon: _Daemon) -> None:
        command = [str(spark_home() / "bin" / "spark-class"), *daemon.args]
        if self.nice:
            command = ["nice", "-n", str(self.nice), *command]
        with daemon.log.open("ab") as log:
            # spark-class execs java: the pid is the JVM's; its own session so a Ctrl-C of the caller does not reach it
            daemon.process = subprocess.Popen(
                command,
                env=spark_env(self.conf_dir),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def _spawn_worker(self, index: int) -> None:
        daemon = self.worker_daemons[index]
        # a restarted worker takes a new port: the master may still hold the dead one's address for a moment
        daemon.port, daemon.ui_port = free_port(), free_port()
        work = self.work_dir / f"worker-{index}"
        work.mkdir(parents=True, exist_ok=True)
        daemon.args = [
            "org.apache.spark.deploy.worker.Worker",
            "--host", "127.0.0.1", "--port", str(daemon.port), "--webui-port", str(daemon.ui_port),
            "--cores", str(self.worker_cores), "--memory", self.worker_memory, "--work-dir", str(work),
            self.master_url,
        ]  # fmt: skip
        self._spawn(daemon)

    def _wait_registered(self, index: int, timeout_s: float) -> None:
        daemon = self.worker_daemons[index]
        wait_for(
            f"{daemon.name} to register with the master",
            lambda: self._worker_state(daemon) == "ALIVE" or None,
            timeout_s,
            alive=lambda: daemon.exit_reason() or self.master.exit_reason(),
        )

    # -- state -----------------------------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, what ``spark-submit --master`` takes."""
        return f"spark://127.0.0.1:{self.master.port}"

    def state(self) -> dict[str, Any] | None:
        """The master's ``/json/`` status (workers, applications), or None while it does not answer."""
        return _get_json(f"http://127.0.0.1:{self.master.ui_port}/json/")

    def _worker_state(self, daemon: _Daemon) -> str | None:
        """The master's state of the worker on ``daemon``'s current port (``ALIVE``, ``DEAD``…), None if unlisted."""
        for worker in (self.state() or {}).get("workers", []):
            if worker["port"] == daemon.port:
                return str(worker["state"])
        return None

    def executors(self) -> list[Executor]:
        """Executor JVMs running now, found as child processes of the worker JVMs this cluster started."""
        found = []
        for index, daemon in enumerate(self.worker_daemons):
            if not daemon.alive() or daemon.process is None:
                continue
            for pid in _proc_children(daemon.process.pid):
                argv = _cmdline(pid)
                if EXECUTOR_MAIN in argv:
                    found.append(Executor(pid, _arg(argv, "--app-id"), _arg(argv, "--executor-id"), index))
        return found

    # -- faults ----------------------------------------------------------------------------------------

    def kill_executor(self, executor: Executor, timeout_s: float = 180) -> str:
        """SIGKILL an executor JVM; return the id of the executor its worker starts for the app in its place.

        The kill landed when the pid is gone; the worker reports the exit, the master launches a replacement,
        and it is done when an executor JVM of the app with an id not seen before runs on some worker.
        """
        before = {running.executor_id for running in self.executors() if running.app_id == executor.app_id}
        os.kill(executor.pid, signal.SIGKILL)
        daemon = self.worker_daemons[executor.worker]
        wait_for(
            f"executor {executor.executor_id} (pid {executor.pid}) to exit",
            lambda: not Path(f"/proc/{executor.pid}").exists() or _zombie(executor.pid) or None,
            30,
            alive=daemon.exit_reason,
        )

        def replacement() -> str | None:
            for running in self.executors():
                if running.app_id == executor.app_id and running.executor_id not in before:
                    return running.executor_id
            return None

        return wait_for(
            f"a replacement for executor {executor.executor_id} of {executor.app_id}",
            replacement,
            timeout_s,
            alive=daemon.exit_reason,
        )

    def kill_worker(self, index: int, timeout_s: float = 60) -> int:
        """SIGKILL worker ``index``'s JVM and wait until the master no longer lists it ``ALIVE``; returns the exit
        code (-9). Its executors lose their worker and exit on their own."""
        daemon = self.worker_daemons[index]
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGKILL)
        code = daemon.process.wait(timeout_s)
        wait_for(
            f"the master to drop {daemon.name}",
            lambda: self._worker_state(daemon) != "ALIVE" or None,
            timeout_s,
            alive=self.master.exit_reason,
        )
        return code

    def restart_worker(self, index: int, timeout_s: float = 180) -> None:
        """Start worker ``index`` again (same cores, memory and work directory) and wait until it is ``ALIVE``."""
        self.worker_daemons[index].restarts += 1
        self._spawn_worker(index)
        self._wait_registered(index, timeout_s)

    # -- applications ----------------------------------------------------------------------------------

    def submit_conf(self, local_dir: Path) -> dict[str, str]:
        """Spark properties for an application on this cluster: this Python on the driver and every executor,
        loopback, one small executor per worker, no UI."""
        return {
            "spark.pyspark.python": sys.executable,
            "spark.pyspark.driver.python": sys.executable,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "768m",
            "spark.driver.extraJavaOptions": QUICK_JVM,
            "spark.executor.memory": "640m",
            "spark.executor.cores": str(self.worker_cores),
            "spark.executor.extraJavaOptions": QUICK_JVM,
            "spark.cores.max": str(self.workers * self.worker_cores),
            "spark.local.dir": str(local_dir),
            "spark.ui.enabled": "false",
            "spark.ui.showConsoleProgress": "false",
            "spark.sql.shuffle.partitions": "2",
            # a task lost with its executor is retried; four attempts like any cluster default
            "spark.task.maxFailures": "4",
        }

    def submit(
        self,
        script: Path,
        args: list[str],
        log: Path,
        *,
        conf: Mapping[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """``spark-submit --master spark://… --deploy-mode client`` of a Python ``script`` in its own process group
        (one ``killpg`` reaches the driver JVM and its Python), output appended to ``log``."""
        local_dir = self.work_dir / "driver-scratch"
        local_dir.mkdir(parents=True, exist_ok=True)
        settings = {**self.submit_conf(local_dir), **(conf or {})}
        command = [
            str(spark_home() / "bin" / "spark-submit"), "--master", self.master_url, "--deploy-mode", "client",
            *(item for key, value in settings.items() for item in ("--conf", f"{key}={value}")),
            str(script), *args,
        ]  # fmt: skip
        if self.nice:
            command = ["nice", "-n", str(self.nice), *command]
        with log.open("ab") as out:
            return subprocess.Popen(
                command,
                env=spark_env(self.conf_dir),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )


def _arg(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1] if flag in argv else ""


def _zombie(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


@dataclass
class ConnectServer(StartedProcesses):
    """A Spark Connect server (``SparkConnectServer``, the jar pyspark ships) on loopback, running its queries on
    ``master`` (``local[2,2]`` by default: two task threads, two attempts per task); logs and scratch space under
    ``work_dir``.

    It is the driver of every query its clients start: the data sources they register run in its Python workers
    (this interpreter, so ``oncelog`` is importable there). Ready once its gRPC port accepts connections.
    """

    work_dir: Path
    master: str = "local[2,2]"
    nice: int = 0
    port: int = field(default=0, init=False)
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    starts: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self.work_dir = Path(self.work_dir).resolve()
        self.conf_dir = self.work_dir / "conf"
        self.log = self.work_dir / "logs" / "connect-server.log"

    @property
    def url(self) -> str:
        """``sc://127.0.0.1:<port>``, what ``SparkSession.builder.remote`` takes."""
        return f"sc://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 180) -> ConnectServer:
        """Start the server (a new port each time) and wait until its gRPC port accepts connections."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.work_dir / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        _write_conf(self.conf_dir, {"spark.ui.showConsoleProgress": "false"})
        self.port = free_port()
        settings = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.pyspark.python": sys.executable,
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.driver.memory": "1g",
            "spark.driver.extraJavaOptions": QUICK_JVM,
            "spark.local.dir": str(scratch),
            "spark.sql.warehouse.dir": str(scratch / "warehouse"),
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
        }
        command = [
            str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER_MAIN,
            "--name", "Spark Connect server", "--master", self.master,
            *(item for key, value in settings.items() for item in ("--conf", f"{key}={value}")),
        ]  # fmt: skip
        if self.nice:
            command = ["nice", "-n", str(self.nice), *command]
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                command,
                # spark-submit gives the Connect server (like the thrift server) SPARK_DAEMON_MEMORY as its heap
                env=spark_env(self.conf_dir, daemon_memory="1g"),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.starts += 1
        wait_for(
            "the Spark Connect server to accept connections",
            lambda: _accepts(self.port) or None,
            timeout_s,
            alive=self._exit_reason,
        )
        return self

    def _exit_reason(self) -> str | None:
        if self.process is not None and self.process.poll() is None:
            return None
        code = self.process.returncode if self.process else "never started"
        return f"the Spark Connect server exited with {code}:\n{log_tail(self.log, 25)}"

    def kill(self) -> int:
        """SIGKILL the server's process group (its JVM and Python workers); returns the JVM's exit code (-9)."""
        assert self.process is not None
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return self.process.wait()

    def stop(self, timeout_s: float = 30) -> None:
        """Stop the server gracefully (SIGTERM, then SIGKILL after ``timeout_s``)."""
        stop_process(self.process, timeout_s)
