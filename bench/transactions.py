"""Small transactions committed per second, against PostgreSQL's small-transaction commit rate.

    python -m bench.transactions [--runs 5] [--seconds 3] [--backends postgres,sqlite] [--pg-fsync on|off]

A transaction is Kafka's smallest useful one: AddPartitionsToTxn of 4 partitions, one record produced to each
(one Produce call per storage node), EndTxn(COMMIT). 1, 8 and 32 transactional producers run it back to back,
concurrently, over the raw stubs (:class:`~oncelog.testing.txn_driver.TransactionalDriver`, asyncio); a
producer's next AddPartitions is parked by the coordinator until it wrote CompleteCommit for the previous
transaction (``completion_wait_ms``; a Kafka coordinator answers CONCURRENT_TRANSACTIONS and the client
retries), so the figure includes the marker round trip. The cluster is a
LocalCluster with two storage nodes, one txn-coordinator, group-offsets and the pid-allocator; the topic has
8 partitions and producer i writes to partitions i..i+3 (two on each storage node), ``flush=sync``.

The baseline, measured in the same run and the same process, is PostgreSQL committing transactions of four
single-row INSERTs from 32 concurrent connections with ``synchronous_commit=on``. The benchmark starts its own
PostgreSQL server with ``fsync=on`` (the test fixture's server turns fsync off; ``--pg-fsync off`` uses that
one), so both sides make every acknowledged commit durable, as storage does on ``flush=sync`` topics. The
cluster's catalog and coordinator table live on that server (``postgres`` backend) or on SQLite files
(``sqlite`` backend; the baseline is still PostgreSQL).

A third line puts the target in proportion: empty gRPC calls (health ``Check``) per second from 32 concurrent
callers to the coordinator process, divided by the 4 client calls a transaction needs (AddPartitionsToTxn,
Produce to each of the 2 nodes, EndTxn; markers ride RPCs batched across transactions). That is the rate of
a transaction that did no work at all in this stack on this machine.

Each figure is the median of ``--runs`` runs with its spread ((max - min) / median); runs interleave the
producer counts and the baseline, so the ratios compare figures taken under the same machine load.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import grpc
import psycopg
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bench.common import Series, report
from oncelog.client.records import TopicPartition
from oncelog.testing import LocalCluster
from oncelog.testing.postgres import find_postgres_bin, postgres_instance
from oncelog.testing.servers import free_port
from oncelog.testing.txn_driver import ClusterView, TransactionalDriver

PRODUCER_COUNTS = (1, 8, 32)
BASELINE_CONNECTIONS = 32
TOPIC = "bench-txn"
TOPIC_PARTITIONS = 8
PARTITIONS_PER_TXN = 4
VALUE = b"v" * 100

_run_ids = itertools.count()


# ---------------------------------------------------------------------------------------------- oncelog


def _partitions(index: int) -> list[TopicPartition]:
    return [TopicPartition(TOPIC, (index + k) % TOPIC_PARTITIONS) for k in range(PARTITIONS_PER_TXN)]


async def _one_transaction(producer: TransactionalDriver, partitions: list[TopicPartition]) -> None:
    await producer.add_partitions(*partitions)
    await producer.send({tp: [VALUE] for tp in partitions})
    await producer.commit()


async def transactions_per_second(view: ClusterView, producers: int, seconds: float) -> float:
    """Commits per second of ``producers`` concurrent transactional producers (after one warm-up each)."""
    run = next(_run_ids)
    drivers = [TransactionalDriver(view, f"bench-{run}-{i}") for i in range(producers)]
    await asyncio.gather(*(d.init_producer_id() for d in drivers))
    await asyncio.gather(*(_one_transaction(d, _partitions(i)) for i, d in enumerate(drivers)))
    committed = 0
    start = time.perf_counter()
    deadline = start + seconds

    async def loop(driver: TransactionalDriver, partitions: list[TopicPartition]) -> None:
        nonlocal committed
        while time.perf_counter() < deadline:
            await _one_transaction(driver, partitions)
            if time.perf_counter() <= deadline:
                committed += 1

    await asyncio.gather(*(loop(d, _partitions(i)) for i, d in enumerate(drivers)))
    return committed / seconds


# ---------------------------------------------------------------------------------------------- floor


RPCS_PER_TRANSACTION = 4
"""Client calls of one benchmark transaction: AddPartitionsToTxn, Produce to each of 2 nodes, EndTxn."""


async def empty_calls_per_second(address: str, callers: int, seconds: float) -> float:
    """Health ``Check`` calls per second from ``callers`` concurrent callers to one service process.

    The cheapest call a service answers (through the same server, interceptors included): what the Python
    gRPC stack alone costs on this machine. A transaction needs :data:`RPCS_PER_TRANSACTION` client calls
    (markers ride batched RPCs), so this divided by that is the ceiling of a transaction that did no work.
    """
    async with grpc.aio.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        request = health_pb2.HealthCheckRequest()
        await stub.Check(request, timeout=10)
        calls = 0
        deadline = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal calls
            while time.perf_counter() < deadline:
                await stub.Check(request, timeout=10)
                calls += 1

        await asyncio.gather(*(loop() for _ in range(callers)))
    return calls / seconds


# ---------------------------------------------------------------------------------------------- baseline


def _conninfo(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://", 1)


async def postgres_commits_per_second(url: str, connections: int, seconds: float) -> float:
    """Transactions of 4 single-row INSERTs per second from ``connections`` sessions, synchronous_commit=on."""
    sessions = [await psycopg.AsyncConnection.connect(_conninfo(url), autocommit=True) for _ in range(connections)]
    try:
        await sessions[0].execute(
            "CREATE TABLE IF NOT EXISTS bench_small_txn"
            " (id bigserial PRIMARY KEY, session int NOT NULL, part int NOT NULL, payload bytea NOT NULL)"
        )
        for session in sessions:
            await session.execute("SET synchronous_commit = on")
        committed = 0
        deadline = time.perf_counter() + seconds

        async def loop(index: int, session: psycopg.AsyncConnection) -> None:
            nonlocal committed
            while time.perf_counter() < deadline:
                async with session.transaction():
                    for part in range(PARTITIONS_PER_TXN):
                        await session.execute(
                            "INSERT INTO bench_small_txn (session, part, payload) VALUES (%s, %s, %s)",
                            (index, part, VALUE),
                        )
                if time.perf_counter() <= deadline:
                    committed += 1

        await asyncio.gather(*(loop(i, s) for i, s in enumerate(sessions)))
        return committed / seconds
    finally:
        for session in sessions:
            await session.close()


@contextmanager
def durable_postgres(bin_dir: Path) -> Iterator[str]:
    """A throwaway PostgreSQL server with ``fsync=on``; yields its SQLAlchemy URL.

    The test fixture's server (:func:`~oncelog.testing.postgres.postgres_instance`) runs with ``fsync=off``
    for speed, and a command-line setting cannot be changed afterwards, so the benchmark starts its own.
    """
    user = "postgres" if os.geteuid() == 0 else None  # PostgreSQL refuses to run as root
    base = Path(tempfile.mkdtemp(prefix="oncelog-bench-pg-"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    if user:
        shutil.chown(base, user)
        shutil.chown(sock, user)
    port = free_port()
    subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(data), "-U", "oncelog", "-A", "trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
        user=user,
        cwd=base,
    )
    settings = ["listen_addresses=127.0.0.1", "max_connections=200", "fsync=on", "synchronous_commit=on"]
    server = subprocess.Popen(
        [str(bin_dir / "postgres"), "-D", str(data), "-p", str(port), "-k", str(sock)]
        + [arg for setting in settings for arg in ("-c", setting)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        user=user,
        cwd=base,
    )
    try:
        deadline = time.monotonic() + 30
        ready = [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)]
        while subprocess.run(ready, capture_output=True).returncode != 0:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the benchmark's PostgreSQL server did not start")
            time.sleep(0.05)
        yield f"postgresql+psycopg://oncelog@127.0.0.1:{port}/postgres"
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(base, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- driver


async def _measure(
    cluster: LocalCluster, baseline_url: str, runs: int, seconds: float
) -> tuple[dict[int, Series], Series, Series]:
    view = ClusterView(lambda: cluster.addresses("txn-coordinator") + cluster.addresses("partition-storage"))
    await view.create_topic(TOPIC, TOPIC_PARTITIONS)
    series = {n: Series(f"{n} producers", []) for n in PRODUCER_COUNTS}
    baseline = Series(f"PostgreSQL, {BASELINE_CONNECTIONS} connections", [])
    floor = Series(f"empty gRPC calls / {RPCS_PER_TRANSACTION}", [])
    coordinator = cluster.addresses("txn-coordinator")[0]
    try:
        for run in range(runs):
            for n in PRODUCER_COUNTS:
                series[n].rates.append(await transactions_per_second(view, n, seconds))
            baseline.rates.append(await postgres_commits_per_second(baseline_url, BASELINE_CONNECTIONS, seconds))
            calls = await empty_calls_per_second(coordinator, max(PRODUCER_COUNTS), seconds)
            floor.rates.append(calls / RPCS_PER_TRANSACTION)
            print(
                f"  run {run + 1}/{runs}: "
                + ", ".join(f"{n} producers {series[n].rates[-1]:,.0f}/s" for n in PRODUCER_COUNTS)
                + f"; PostgreSQL {baseline.rates[-1]:,.0f}/s; empty gRPC calls {calls:,.0f}/s",
                flush=True,
            )
    finally:
        await view.close()
    return series, baseline, floor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--backends", default="postgres,sqlite", help="comma-separated: postgres, sqlite")
    parser.add_argument("--pg-fsync", choices=("on", "off"), default="on")
    args = parser.parse_args()
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise SystemExit("PostgreSQL is needed for the baseline (apt-get install -y postgresql)")
    with ExitStack() as stack:
        if args.pg_fsync == "on":
            server_url = stack.enter_context(durable_postgres(bin_dir))
        else:
            server_url = stack.enter_context(postgres_instance(bin_dir)).url
        for backend in args.backends.split(","):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="oncelog-bench-txn-")))
            database_url = server_url if backend == "postgres" else ""
            print(f"{backend}: starting the cluster in {tmp}", flush=True)
            with LocalCluster(tmp, storage_nodes=2, database_url=database_url) as cluster:
                series, baseline, floor = asyncio.run(_measure(cluster, server_url, args.runs, args.seconds))
            title = (
                f"small transactions (4 partitions x 1 record) on {backend}, PostgreSQL fsync={args.pg_fsync} "
                f"({args.runs} runs x {args.seconds}s)"
            )
            rows: list[tuple[str, Series, Series | None]] = [
                ("baseline: " + baseline.name + ", 4 INSERTs/txn", baseline, None)
            ]
            rows += [(f"oncelog, {n} transactional producers", series[n], baseline) for n in PRODUCER_COUNTS]
            rows.append(
                (f"ceiling: {max(PRODUCER_COUNTS)} callers' empty gRPC calls / {RPCS_PER_TRANSACTION}", floor, baseline)
            )
            print(report(title, rows))
            print(flush=True)


if __name__ == "__main__":
    main()
