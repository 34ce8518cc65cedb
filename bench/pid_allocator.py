"""Producer-id allocation rate on SQLite and PostgreSQL, against raw gRPC and raw SQL baselines.

    python -m bench.pid_allocator [--runs 5] [--seconds 1.0]

For each backend it starts a real pid-allocator process (LocalCluster) and measures, run after run:
* baseline ``grpc``: a unary health Check round trip to the same process (the floor of any RPC);
* baseline ``sql``: the same conditional ``UPDATE pid_counter … WHERE next_id = :seen`` transaction, issued
  directly from the benchmark process (the floor of a durable compare-and-set on that backend);
* ``blocks``: AllocateProducerIdBlock round trips (one RPC + one SQL transaction each);
* ``ids``: ``ProducerIdSource.next_id()`` with 1000-id blocks (what a coordinator sees).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from contextlib import ExitStack
from pathlib import Path

import sqlalchemy as sa
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.common import Series, rate, report, sync_rate
from oncelog.api.pid import v1 as pb
from oncelog.catalog import schema as t
from oncelog.client.pid_allocator import ProducerIdSource, grpc_block_fetcher
from oncelog.rpc import aio_channel
from oncelog.storage.sql import create_engine
from oncelog.testing import LocalCluster
from oncelog.testing.postgres import find_postgres_bin, postgres_instance


def _sql_cas(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        seen = conn.execute(sa.select(t.pid_counter.c.next_id).where(t.pid_counter.c.id == 1)).scalar_one()
        conn.execute(
            sa.update(t.pid_counter)
            .where(t.pid_counter.c.id == 1, t.pid_counter.c.next_id == seen)
            .values(next_id=seen + 1000)
        )


async def _measure(address: str, database_url: str, runs: int, seconds: float) -> dict[str, Series]:
    channel = aio_channel(address)
    health = health_pb2_grpc.HealthStub(channel)
    stub = pb.PidAllocatorServiceStub(channel)
    engine = create_engine(database_url)
    series = {name: Series(name, []) for name in ("grpc", "sql", "blocks", "ids")}
    request = pb.AllocateProducerIdBlockRequest(requester_id="bench", requester_epoch=1)
    for run in range(runs):
        series["grpc"].rates.append(await rate(lambda: health.Check(health_pb2.HealthCheckRequest()), seconds))
        series["sql"].rates.append(await asyncio.to_thread(sync_rate, lambda: _sql_cas(engine), seconds))
        series["blocks"].rates.append(await rate(lambda: stub.AllocateProducerIdBlock(request), seconds))
        source = ProducerIdSource(grpc_block_fetcher(stub, f"bench-src-{run}", 1))
        await source.next_id()  # first block: measure the steady state
        series["ids"].rates.append(await rate(source.next_id, seconds))
        await source.close()
    engine.dispose()
    await channel.close()
    return series


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.0)
    args = parser.parse_args()
    backends: list[str] = ["sqlite"]
    if find_postgres_bin() is not None:
        backends.append("postgres")
    for backend in backends:
        with ExitStack() as stack:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="oncelog-bench-")))
            url = ""
            if backend == "postgres":
                url = stack.enter_context(postgres_instance(find_postgres_bin())).url  # type: ignore[arg-type]
            cluster = stack.enter_context(LocalCluster(tmp, services=("pid-allocator",), database_url=url))
            series = asyncio.run(_measure(cluster.bootstrap, cluster.database_url, args.runs, args.seconds))
        print(
            report(
                f"pid allocation on {backend} ({args.runs} runs x {args.seconds}s)",
                [
                    ("raw gRPC unary (health Check)", series["grpc"], None),
                    ("raw SQL compare-and-set txn", series["sql"], None),
                    ("AllocateProducerIdBlock (blocks/s)", series["blocks"], series["grpc"]),
                    ("AllocateProducerIdBlock vs SQL floor", series["blocks"], series["sql"]),
                    ("ProducerIdSource.next_id (ids/s)", series["ids"], None),
                ],
            )
        )
        print()


if __name__ == "__main__":
    main()
