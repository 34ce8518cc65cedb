"""The orders pipeline beyond one process: `oncelog spark-demo --cluster standalone` submits it with spark-submit to a
Spark standalone master and two workers (oncelog.testing.spark_cluster), kills an executor JVM, a worker and the
driver while orders flow, and `--cluster connect` runs it through a Spark Connect server killed mid-stream; each
checks every order is in the output exactly once. Marked spark_cluster: `make test-spark-cluster` (CI runs it)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

DEMO = ("--orders", "1500", "--rate", "300", "--max-records-per-trigger", "300", "--seed", "7")


def _assert_exactly_once(rows: dict[str, str], stdout: str) -> None:
    assert "every order is in the output exactly once" in stdout
    assert rows["orders produced"] == rows["enriched orders (read_committed)"] == "1,500"
    assert rows["duplicates"] == rows["missing"] == rows["not matching the reference function"] == "0"
    assert rows["Spark"] == "Spark standalone (master + 2 workers)"


def _assert_cluster_faults_landed(rows: dict[str, str], stdout: str) -> None:
    # the executor's pid was gone and a new executor of the application (an id not seen before) ran in its place
    killed = re.search(r"executor (\d+) \(pid \d+\) SIGKILLed; executor (\d+) replaced it", stdout)
    assert killed, stdout[-3000:]
    assert killed.group(1) != killed.group(2)
    # the worker JVM died of the SIGKILL, the master dropped it, and it registered again
    assert "worker 1 SIGKILLed (exit -9), restarted and registered again" in stdout
    assert rows["executor JVM SIGKILLs / replaced"] == "1 / 1"
    assert rows["worker SIGKILLs / restarted"] == "1 / 1"


# several JVMs on 2 cores: minutes on a quiet machine, far more under load; the demo's own deadline comes first so a
# slow run fails with its output
@pytest.mark.spark_cluster
@pytest.mark.timeout(1500)
def test_standalone_pipeline_exactly_once_through_executor_worker_and_driver_sigkill(
    run_spark_demo: Callable[..., tuple[dict[str, str], str]],
) -> None:
    rows, stdout = run_spark_demo(*DEMO, "--cluster", "standalone", "--kills", "1", timeout_s=1440)
    _assert_exactly_once(rows, stdout)
    _assert_cluster_faults_landed(rows, stdout)
    # the driver (spark-submit's JVM and its Python) was SIGKILLed and a new one resumed from the checkpoint
    assert rows["driver SIGKILLs / restarts from checkpoint"] == "1 / 1"


@pytest.mark.spark_cluster
@pytest.mark.timeout(1500)
def test_connect_pipeline_exactly_once_through_server_sigkill(
    run_spark_demo: Callable[..., tuple[dict[str, str], str]],
) -> None:
    """The pipeline as a Spark Connect client: the data source registered over Connect runs in the server, which is
    the query's driver; SIGKILLing the server (and the client) mid-stream and starting both again resumes from the
    checkpoint without a duplicate."""
    rows, stdout = run_spark_demo(*DEMO, "--cluster", "connect", "--kills", "1", timeout_s=1440)
    assert "every order is in the output exactly once" in stdout
    assert rows["orders produced"] == rows["enriched orders (read_committed)"] == "1,500"
    assert rows["duplicates"] == rows["missing"] == rows["not matching the reference function"] == "0"
    assert rows["Spark"] == "Spark Connect (server on local[2,2])"
    assert rows["driver SIGKILLs / restarts from checkpoint"] == "1 / 1"
    assert rows["Connect server SIGKILLs / starts"] == "1 / 2"
