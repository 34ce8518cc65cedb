"""Where ``oncelog spark-demo`` runs the orders pipeline's driver, and the faults each place can inject.

* ``local``: the driver is ``python examples/spark_orders_pipeline.py --master local[2,2]`` (executors are threads
  of the driver's JVM); the only fault is a SIGKILL of the whole driver.
* ``standalone``: a Spark standalone master and two workers (:class:`oncelog.testing.spark_cluster.StandaloneCluster`)
  and the driver submitted with ``spark-submit --master spark://…``; the faults are an executor JVM's SIGKILL, a
  worker's SIGKILL and restart, and the driver's SIGKILL and restart from the checkpoint.
* ``connect``: a Spark Connect server (:class:`oncelog.testing.spark_cluster.ConnectServer`, ``local[2,2]``) is
  the driver, and the pipeline runs as its client (``--remote sc://…``), registering the data source over
  Connect; a driver kill SIGKILLs the server and the client, then starts both again from the checkpoint.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from oncelog.testing.spark_cluster import ConnectServer, Executor, SparkClusterError, StandaloneCluster, wait_for

DRIVER = "driver"
EXECUTOR = "executor"
WORKER = "worker"


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``process``'s whole process group (a driver's JVM and every Python process under it) and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


class LocalRunner:
    """The driver as a plain Python process on ``local[2,2]``."""

    faults: tuple[str, ...] = ()

    def __init__(self, pipeline: Path, data_dir: Path, *, master: str = "local[2,2]") -> None:
        self.pipeline, self.data_dir, self.master = pipeline, data_dir, master
        self.name = master

    def start(self) -> None:
        """Nothing to start: the driver's JVM is its own Spark."""

    def start_driver(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        """The pipeline as a Python process in its own process group."""
        with log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, str(self.pipeline), *args, "--master", self.master],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def kill_driver(self, driver: subprocess.Popen[bytes]) -> None:
        """SIGKILL the driver: its JVM and every Python process under it."""
        kill_group(driver)

    def inject(self, fault: str, driver: subprocess.Popen[bytes]) -> str:
        """Only driver kills happen in local mode (the caller does those)."""
        raise ValueError(f"{self.name} has no {fault} to kill")

    def stop(self) -> None:
        """Nothing to stop."""


class StandaloneRunner(LocalRunner):
    """The driver submitted to a Spark standalone cluster of a master and two one-core workers on loopback."""

    faults = (EXECUTOR, WORKER)

    def __init__(self, pipeline: Path, data_dir: Path) -> None:
        super().__init__(pipeline, data_dir)
        self.name = "Spark standalone (master + 2 workers)"
        self.cluster = StandaloneCluster(data_dir / "spark", workers=2)
        self.executor_kills = self.executor_replacements = self.worker_kills = self.worker_restarts = 0

    def start(self) -> None:
        """Start the master and both workers; return once both are registered."""
        self.cluster.start()

    def start_driver(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        """``spark-submit --master spark://…`` of the pipeline (client mode: the driver runs here)."""
        return self.cluster.submit(self.pipeline, args, log)

    def _executors(self) -> list[Executor] | None:
        return self.cluster.executors() or None

    def inject(self, fault: str, driver: subprocess.Popen[bytes]) -> str:
        """Kill an executor of the running application, or a worker (then start it again); say what happened."""

        def driver_alive() -> str | None:
            return None if driver.poll() is None else f"the driver exited with {driver.returncode}"

        if fault == EXECUTOR:
            # the application's executors, once both workers run one (just after a restart they may not yet)
            victim = wait_for("an executor of the pipeline", self._executors, 120, alive=driver_alive)[0]
            self.executor_kills += 1
            replacement = self.cluster.kill_executor(victim)
            self.executor_replacements += 1
            return f"executor {victim.executor_id} (pid {victim.pid}) SIGKILLed; executor {replacement} replaced it"
        if fault == WORKER:
            index = 1
            code = self.cluster.kill_worker(index)
            self.worker_kills += 1
            self.cluster.restart_worker(index)
            self.worker_restarts += 1
            return f"worker {index} SIGKILLed (exit {code}), restarted and registered again"
        raise SparkClusterError(f"unknown fault {fault!r}")

    def stop(self) -> None:
        """Stop the workers and the master."""
        self.cluster.stop()


class ConnectRunner(LocalRunner):
    """The pipeline as a Spark Connect client of a local Connect server, which is the query's driver."""

    def __init__(self, pipeline: Path, data_dir: Path) -> None:
        super().__init__(pipeline, data_dir)
        self.name = "Spark Connect (server on local[2,2])"
        self.server = ConnectServer(data_dir / "spark-connect")
        self.server_kills = 0

    def start(self) -> None:
        """Start the Connect server; return once its gRPC port accepts connections."""
        self.server.start()

    def start_driver(self, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        """The pipeline as a client of the server (``--remote``), in its own process group."""
        with log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, str(self.pipeline), *args, "--remote", self.server.url],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def kill_driver(self, driver: subprocess.Popen[bytes]) -> None:
        """SIGKILL the server (the query's driver) and the client, then start the server again (a new port)."""
        code = self.server.kill()
        if code != -signal.SIGKILL:
            raise SparkClusterError(f"the Spark Connect server had exited with {code} before it was killed")
        self.server_kills += 1
        kill_group(driver)
        self.server.start()

    def stop(self) -> None:
        """Stop the server."""
        self.server.stop()
