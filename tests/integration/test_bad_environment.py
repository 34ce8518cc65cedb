"""Malformed configuration and an unreachable database: clear errors, and a running server stays up."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from oncelog.api.pid import v1 as pb
from oncelog.errors import Reason
from oncelog.rpc import from_rpc_error, sync_channel
from oncelog.testing import LocalCluster
from oncelog.testing.postgres import find_postgres_bin, postgres_instance


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "oncelog.pid_allocator"],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_every_bad_variable_is_reported_at_once(tmp_path: Path) -> None:
    result = _run(
        {
            "ONCELOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
            "ONCELOG_PID_ALLOCATOR_BLOCK_SIZE": "lots",
            "ONCELOG_PID_ALLOCATOR_NODE_LEASE_MS": "12.5",
            "ONCELOG_PID_ALLOCATOR_SHUTDOWN_GRACE_S": "soon",
        }
    )
    assert result.returncode == 2
    for name in ("BLOCK_SIZE='lots'", "NODE_LEASE_MS='12.5'", "SHUTDOWN_GRACE_S='soon'"):
        assert f"ONCELOG_PID_ALLOCATOR_{name}" in result.stderr


def test_cross_field_problems_are_reported_too(tmp_path: Path) -> None:
    result = _run(
        {
            "ONCELOG_DATABASE_URL": f"sqlite:///{tmp_path / 'c.db'}",
            "ONCELOG_PID_ALLOCATOR_LISTEN": "no-port",
            "ONCELOG_PID_ALLOCATOR_BLOCK_SIZE": "0",
        }
    )
    assert result.returncode == 2
    assert "listen='no-port' must be host:port" in result.stderr
    assert "block_size=0" in result.stderr


def test_unreachable_database_at_start_fails_with_a_clear_message() -> None:
    result = _run({"ONCELOG_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"})
    assert result.returncode == 1
    assert "cannot reach the database" in result.stderr


def test_database_lost_while_serving_gives_unavailable_and_the_server_stays_up(tmp_path: Path) -> None:
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    with (
        postgres_instance(bin_dir) as pg,
        LocalCluster(tmp_path, services=("pid-allocator",), database_url=pg.url) as c,
    ):
        channel = sync_channel(c.bootstrap)
        stub = pb.PidAllocatorServiceStub(channel)
        stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(requester_id="r", requester_epoch=1))
        pg.stop()
        with pytest.raises(grpc.RpcError) as info:
            stub.AllocateProducerIdBlock(pb.AllocateProducerIdBlockRequest(requester_id="r", requester_epoch=1))
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        err = from_rpc_error(info.value)
        assert err.reason == Reason.STORAGE_UNAVAILABLE and err.retriable
        assert c.node("pid-allocator-0").alive()
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
        assert health.status == health_pb2.HealthCheckResponse.SERVING
