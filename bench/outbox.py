"""The outbox's price: ``atomic_send`` against a plain database commit plus a plain oncelog transaction, and what
10,000 idle prepared transactions cost the coordinator.

    python -m bench.outbox [--runs 7] [--ops 40] [--databases sqlite,postgres] [--idle 10000]

**Latency.** One operation is one order row and one record. ``atomic_send`` (prepare, outbox row in the database
commit, complete) is measured against its baseline, the dual write it replaces: the database commit of the same row,
then ``begin_transaction`` / ``send`` / ``commit_transaction``. Both on the same producer, cluster and database;
neither waits for the markers (``wait_for_completion=False``). Each run times ``--ops`` operations of each kind,
alternating baseline and ``atomic_send`` operation by operation, so both see the same machine load; the figure per
run is the median latency of each kind, and the ratio atomic / baseline. Reported: the median of the runs and the
spread ((max - min) / median). The cluster: LocalCluster on SQLite files (one storage node, one coordinator); the
application database: a SQLite file, or the test PostgreSQL server (fsync off, as in the tests).

**Idle prepared transactions.** ``--idle`` transactional ids each open a transaction (InitProducerId,
AddPartitionsToTxn) and prepare it (raw stubs, 64 at a time). Measured on the coordinator process: resident memory
before and after (/proc), and its CPU use over 10 s windows (a) with nothing prepared, (b) with every transaction
prepared and no check-back registered (the sweep alone), (c) again with each naming a check-back service that answers
UNKNOWN, asked every ``--check-interval-ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import sqlalchemy as sa
from sqlalchemy.orm import Session

from oncelog.api.txn import v1 as pb
from oncelog.client import AdminClient, Producer
from oncelog.client.records import TopicPartition
from oncelog.outbox import CheckBackServer, atomic_send, create_outbox_table, recover
from oncelog.testing import LocalCluster
from oncelog.testing.postgres import find_postgres_bin, postgres_server
from oncelog.testing.txn_driver import ClusterView, TransactionalDriver

VALUE = b"v" * 100


def _median_spread(values: list[float]) -> tuple[float, float]:
    median = statistics.median(values)
    return median, (max(values) - min(values)) / median if median else 0.0


# ---------------------------------------------------------------------------------------------- latency


def latency_runs(cluster: LocalCluster, database_url: str, runs: int, ops: int) -> list[tuple[float, float]]:
    """Per run: (median baseline latency, median atomic_send latency) in milliseconds."""
    engine = sa.create_engine(database_url)
    orders = sa.Table(
        "bench_orders", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True), sa.Column("v", sa.Integer)
    )
    orders.metadata.create_all(engine)
    create_outbox_table(engine)
    topic = "bench-outbox-" + uuid.uuid4().hex[:6]
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([topic])
    next_id = iter(range(1, 10**9))
    results: list[tuple[float, float]] = []
    with Producer(cluster.bootstrap, transactional_id="bench-outbox-" + uuid.uuid4().hex[:6]) as producer:
        recover(producer, engine)

        def baseline() -> None:
            with Session(engine) as session:
                session.execute(sa.insert(orders).values(id=next(next_id), v=1))
                session.commit()
            producer.begin_transaction()
            producer.send(topic, VALUE)
            producer.commit_transaction(wait_for_completion=False)

        def atomic() -> None:
            with Session(engine) as session, atomic_send(session, producer) as send:
                session.execute(sa.insert(orders).values(id=next(next_id), v=1))
                send(topic, VALUE)

        for op in (baseline, atomic, baseline, atomic):  # warm-up
            op()
        for _ in range(runs):
            timings: dict[Callable[[], None], list[float]] = {baseline: [], atomic: []}
            for _ in range(ops):
                for op in (baseline, atomic):
                    start = time.perf_counter()
                    op()
                    timings[op].append((time.perf_counter() - start) * 1000)
            results.append((statistics.median(timings[baseline]), statistics.median(timings[atomic])))
    engine.dispose()
    return results


# ---------------------------------------------------------------------------------------------- idle prepared


class _Printed(dict[str, float]):
    def __setitem__(self, name: str, value: float) -> None:
        print(f"- {name}: {value:,.3f}", flush=True)
        super().__setitem__(name, value)


class _Unknown(pb.TransactionCheckServiceServicer):
    def __init__(self) -> None:
        self.calls = 0

    async def CheckTransaction(
        self, request: pb.CheckTransactionRequest, context: object
    ) -> pb.CheckTransactionResponse:
        self.calls += 1
        return pb.CheckTransactionResponse(result=pb.TRANSACTION_CHECK_RESULT_UNKNOWN)


async def prepare_many(bootstrap: str, topic: str, count: int, check_back: str, prefix: str) -> float:
    """Open and prepare ``count`` transactions, 64 at a time; returns the seconds it took."""
    view = ClusterView([bootstrap])
    limit = asyncio.Semaphore(64)
    tp = TopicPartition(topic, 0)
    start = time.perf_counter()

    async def one(i: int) -> None:
        async with limit:
            driver = TransactionalDriver(view, f"{prefix}-{i}")
            await driver.init_producer_id()
            await driver.add_partitions(tp)
            identity = driver._identity()
            await driver._coordinator_call(
                lambda address: view.coordinators.prepare_transaction(
                    address, driver.transactional_id, identity, check_back_address=check_back
                )
            )

    await asyncio.gather(*(one(i) for i in range(count)))
    elapsed = time.perf_counter() - start
    await view.close()
    return elapsed


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_share(pid: int, seconds: float) -> float:
    """The process's CPU time over ``seconds`` of wall time, as a share of one core."""
    before, start = _cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (_cpu_seconds(pid) - before) / (time.monotonic() - start)


def idle_prepared(data_dir: Path, count: int, check_interval_ms: int) -> dict[str, float]:
    """Memory and CPU of the coordinator with ``count`` idle prepared transactions (see the module doc); each figure
    is printed as soon as it is measured."""
    env = {
        "ONCELOG_TXN_COORDINATOR_CHECK_BACK_AFTER_MS": "0",
        "ONCELOG_TXN_COORDINATOR_CHECK_BACK_INTERVAL_MS": str(check_interval_ms),
        "ONCELOG_TXN_COORDINATOR_CHECK_BACK_MAX_ATTEMPTS": "1000000",
    }
    out: dict[str, float] = _Printed()
    with LocalCluster(data_dir, env=env) as cluster, CheckBackServer(None, servicer=_Unknown()) as check_back:
        [coordinator] = [n for n in cluster.nodes if n.service == "txn-coordinator"]
        assert coordinator.process is not None
        pid = coordinator.process.pid
        topic = "bench-idle"
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topics([topic])
        out["cpu_idle_empty"] = cpu_share(pid, 10)
        rss_before = _rss_bytes(pid)
        out["prepare_seconds"] = asyncio.run(prepare_many(cluster.bootstrap, topic, count, "", "idle"))
        out["rss_per_prepared_bytes"] = (_rss_bytes(pid) - rss_before) / count
        out["rss_after_mib"] = _rss_bytes(pid) / 2**20
        out["cpu_idle_prepared"] = cpu_share(pid, 10)
        # the same number again, each with a check-back answering UNKNOWN (the first ones are then aborted
        # by nobody: max attempts is out of reach)
        asyncio.run(prepare_many(cluster.bootstrap, topic, count, check_back.address, "checked"))
        servicer = check_back.servicer
        assert isinstance(servicer, _Unknown)
        time.sleep(check_interval_ms / 1000)  # one interval for the first round of calls to start
        calls_before = servicer.calls
        out["cpu_idle_checked"] = cpu_share(pid, 10)
        out["check_backs_per_second"] = (servicer.calls - calls_before) / 10
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--ops", type=int, default=40)
    parser.add_argument("--databases", default="sqlite,postgres")
    parser.add_argument("--idle", type=int, default=10_000, help="idle prepared transactions (0 skips)")
    parser.add_argument("--check-interval-ms", type=int, default=10_000)
    args = parser.parse_args()
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-outbox-")))
        cluster = stack.enter_context(LocalCluster(tmp / "cluster"))
        print(f"### atomic_send vs database commit + oncelog transaction ({args.runs} runs x {args.ops} ops each)")
        print("\n| database | baseline ms (median) | atomic_send ms (median) | ratio (median) | ratio spread |")
        print("|---|---|---|---|---|")
        for database in filter(None, args.databases.split(",")):
            if database == "postgres":
                bin_dir = find_postgres_bin()
                if bin_dir is None:
                    print("| postgres | PostgreSQL not installed | | | |")
                    continue
                url = stack.enter_context(postgres_server(bin_dir))
            else:
                url = f"sqlite:///{tmp / 'app.db'}"
            runs = latency_runs(cluster, url, args.runs, args.ops)
            base, _ = _median_spread([b for b, _ in runs])
            atomic, _ = _median_spread([a for _, a in runs])
            ratio, spread = _median_spread([a / b for b, a in runs])
            print(f"| {database} | {base:.2f} | {atomic:.2f} | {ratio:.3f} | {spread:.0%} |", flush=True)
        cluster.stop()
        if args.idle:
            print(f"\n### {args.idle} idle prepared transactions on one coordinator\n", flush=True)
            idle_prepared(tmp / "idle", args.idle, args.check_interval_ms)


if __name__ == "__main__":
    main()
