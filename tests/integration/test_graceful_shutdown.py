"""SIGTERM drains: health turns NOT_SERVING, drain hooks run while calls are still served, the in-flight call
completes, stop hooks run, exit 0."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

HERE = Path(__file__).parent


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"server exited early with {proc.returncode}"
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.01)


def test_sigterm_lets_the_in_flight_call_finish_and_reports_not_serving(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(HERE / "slow_service.py"), str(tmp_path)])
    try:
        _wait_for(tmp_path / "ready.json", proc)
        address = json.loads((tmp_path / "ready.json").read_text())["address"]
        channel = grpc.insecure_channel(address)
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING
        watch = health.Watch(health_pb2.HealthCheckRequest(service="oncelog.test.v1.SlowService"))
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        wait = channel.unary_unary("/oncelog.test.v1.SlowService/Wait")
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(wait, b"payload", timeout=60)
            _wait_for(tmp_path / "inflight", proc)
            proc.send_signal(signal.SIGTERM)
            assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
            watch.cancel()  # a watch is itself an in-flight call the drain would wait for
            assert not call.done(), "the in-flight call must not be cut off by the drain"
            _wait_for(tmp_path / "drain-hook-ran", proc)
            assert (tmp_path / "drain-hook-ran").read_text() == "in flight", "drain hooks run while still serving"
            (tmp_path / "release").write_text("1")
            assert call.result(timeout=30) == b"done:payload"
        assert proc.wait(30) == 0
        assert (tmp_path / "stop-hook-ran").exists()
    finally:
        if proc.poll() is None:
            proc.kill()
