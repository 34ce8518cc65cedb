"""A real oncelog server process with one slow method, for the graceful-shutdown test.

``/oncelog.test.v1.SlowService/Wait`` writes ``<dir>/inflight`` when it starts and returns only once
``<dir>/release`` exists, so the test controls exactly when the in-flight call may finish.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import grpc

from oncelog.rpc import GrpcServer, ServiceSpec

SERVICE = "oncelog.test.v1.SlowService"


def build(control: Path) -> ServiceSpec:
    async def wait(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        (control / "inflight").write_text("1")
        while not (control / "release").exists():
            await asyncio.sleep(0.01)
        return b"done:" + request

    handler = grpc.method_handlers_generic_handler(SERVICE, {"Wait": grpc.unary_unary_rpc_method_handler(wait)})
    spec = ServiceSpec(name="slow-service", service_names=[SERVICE])
    spec.registrations.append(lambda server: server.add_generic_rpc_handlers((handler,)))

    async def mark_stopped() -> None:
        (control / "stop-hook-ran").write_text("1")

    async def mark_draining() -> None:  # records whether the in-flight call was still running at the time
        (control / "drain-hook-ran").write_text("released" if (control / "release").exists() else "in flight")

    spec.on_drain.append(mark_draining)
    spec.on_stop.append(mark_stopped)
    return spec


async def main(control: Path) -> None:
    server = GrpcServer(
        build(control), "127.0.0.1:0", drain_delay_s=0.5, shutdown_grace_s=30, ready_file=str(control / "ready.json")
    )
    await server.start()
    await server.run_until_signal()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
