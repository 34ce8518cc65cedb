"""The Prometheus scrape endpoint every service serves when ONCELOG_METRICS_LISTEN is set (besides OTLP push)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from oncelog.client import AdminClient
from oncelog.telemetry.metrics import RPC_SERVER_DURATION
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


def test_every_service_serves_metrics_for_prometheus(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, env={"ONCELOG_METRICS_LISTEN": "127.0.0.1:0"}) as cluster:
        with AdminClient(cluster.bootstrap) as admin:
            admin.describe_cluster()  # one ClusterService call served by the bootstrap node
        for node in cluster.nodes:
            scrape = json.loads(node.ready_file.read_text())["metrics_address"]
            with urllib.request.urlopen(f"http://{scrape}/metrics", timeout=10) as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain")
                body = response.read().decode()
            if node.address != cluster.bootstrap:
                continue  # a node that served no call yet has nothing to report
            assert f"# TYPE {RPC_SERVER_DURATION.prometheus_name} histogram" in body
            assert 'rpc_method="DescribeCluster"' in body
            assert f'service_name="oncelog-{node.service}"' in body, "target_info names the service"


def test_a_malformed_metrics_address_is_refused_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "oncelog.pid_allocator"],
        env={
            **os.environ,
            "ONCELOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
            "ONCELOG_METRICS_LISTEN": "9464",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.endswith(
        "oncelog-pid-allocator: invalid configuration:\n  ONCELOG_METRICS_LISTEN='9464' must be host:port "
        "(for example 0.0.0.0:9464; port 0 picks one)\n"
    )
