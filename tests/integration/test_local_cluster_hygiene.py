"""One local cluster per data directory, fenced nodes withdraw, and `oncelog dev` explains a crashed child."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from oncelog.testing import DataDirInUseError, LocalCluster

pytestmark = pytest.mark.timeout(180)


def test_a_second_cluster_on_the_same_data_directory_is_refused_naming_the_holder(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, services=("pid-allocator",)) as first:
        cluster_file = (tmp_path / "cluster.json").read_text()
        second = LocalCluster(tmp_path, services=("pid-allocator",))
        with pytest.raises(DataDirInUseError) as info:
            second.start()
        assert info.value.pid == str(os.getpid())
        assert str(info.value) == (
            f"{tmp_path} is in use by another local cluster (pid {os.getpid()} holds {tmp_path / 'cluster.lock'}); "
            f"stop that one first (Ctrl-C where it runs, or kill {os.getpid()}), or pass another --data-dir"
        )
        assert second.nodes[0].process is None, "nothing of the second cluster was started"
        assert first.nodes[0].alive() and (tmp_path / "cluster.json").read_text() == cluster_file
    with LocalCluster(tmp_path, services=("pid-allocator",)):  # the lock went with the first cluster
        pass


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        return health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def test_a_node_registered_again_elsewhere_reports_not_serving(tmp_path: Path) -> None:
    lease = {"ONCELOG_PID_ALLOCATOR_NODE_LEASE_MS": "600"}  # heartbeats every 200 ms
    with LocalCluster(tmp_path / "a", services=("pid-allocator",), env=lease) as first:
        node = first.nodes[0]
        assert health(node.address) == health_pb2.HealthCheckResponse.SERVING
        ready = tmp_path / "usurper.json"
        usurper = subprocess.Popen(
            [sys.executable, "-m", node.module],
            env={**node.env, "ONCELOG_READY_FILE": str(ready), "ONCELOG_PARENT_PID": str(os.getpid())},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not ready.exists():  # the same node id registered again: the first node's epoch is stale
                assert usurper.poll() is None, "the second process exited"
                time.sleep(0.05)
            usurper_address = json.loads(ready.read_text())["address"]
            deadline = time.monotonic() + 30  # 150 heartbeats: a fenced node that keeps SERVING fails here
            while health(node.address) != health_pb2.HealthCheckResponse.NOT_SERVING:
                assert time.monotonic() < deadline, "the fenced node still reports SERVING"
                time.sleep(0.1)
            assert health(usurper_address) == health_pb2.HealthCheckResponse.SERVING
            assert "is fenced and reports NOT_SERVING" in node.log_file.read_text()
        finally:
            usurper.terminate()
            usurper.wait(30)


def test_oncelog_dev_refuses_a_second_run_and_explains_a_crashed_child(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    command = [sys.executable, "-m", "oncelog", "dev", "--data-dir", str(data_dir), "--port-base", "0"]
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"}
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert first.stdout is not None
        banner = []
        for line in first.stdout:  # the banner's last lines say the cluster serves
            banner.append(line)
            if line.startswith("try:"):
                break
        bootstrap = json.loads((data_dir / "cluster.json").read_text())["bootstrap"]
        assert f"other shells: export ONCELOG_BOOTSTRAP={bootstrap}\n" in banner, banner
        assert any(str(data_dir / "logs" / "partition-storage-0.log") in line for line in banner), "log path not cut"

        second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
        assert second.returncode == 1
        assert second.stderr.endswith(
            f"error: failed to start: {data_dir.resolve()} is in use by another local cluster (pid {first.pid} holds "
            f"{data_dir.resolve() / 'cluster.lock'}); stop that one first (Ctrl-C where it runs, or kill "
            f"{first.pid}), or pass another --data-dir\n"
        ), second.stderr

        storage_pid = json.loads((data_dir / "run" / "partition-storage-0.json").read_text())["pid"]
        os.kill(storage_pid, signal.SIGKILL)
        _, stderr = first.communicate(timeout=60)
        assert first.returncode == 1
        [crash] = [line for line in stderr.splitlines() if line.startswith("error: partition-storage-0")]
        expected = "error: partition-storage-0 was killed by SIGKILL; stopping the cluster. Last log line: "
        assert crash.startswith(expected)
        assert crash.endswith(f"(full log: {data_dir.resolve() / 'logs' / 'partition-storage-0.log'})")
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGINT)
            first.wait(60)


_WRITER = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
db.execute("PRAGMA journal_mode=WAL")
db.execute("CREATE TABLE IF NOT EXISTS beats (n INTEGER)")
print("ready", flush=True)
while True:  # a catalog writer that holds the write lock about half of the time
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT INTO beats VALUES (1)")
    time.sleep(0.005)
    db.execute("DELETE FROM beats")
    db.execute("COMMIT")
    time.sleep(0.005)
"""


def test_freeze_never_stops_a_process_that_holds_the_sqlite_catalog_lock(tmp_path: Path) -> None:
    """A process frozen inside a catalog write would hold SQLite's write lock for as long as it is frozen;
    LocalCluster.freeze stops processes only while it holds that lock itself. Ten freezes of a process that
    writes in a loop: after each, another writer must get the lock at once."""
    catalog = tmp_path / "catalog.db"
    cluster = LocalCluster(tmp_path / "cluster", database_url=f"sqlite:///{catalog}")  # never started
    writer = subprocess.Popen([sys.executable, "-c", _WRITER, str(catalog)], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "ready\n"
        for _ in range(10):
            cluster.freeze([writer.pid])
            try:
                other = sqlite3.connect(catalog, isolation_level=None, timeout=0)
                other.execute("BEGIN IMMEDIATE")  # raises "database is locked" if the frozen writer holds it
                other.execute("ROLLBACK")
                other.close()
            finally:
                cluster.thaw([writer.pid])
    finally:
        writer.kill()
        writer.wait(10)
