"""``oncelog spark-demo``: the orders pipeline on Spark, exactly once through driver crashes (``make run``).

It starts the local cluster, streams JSON orders into ``orders`` from a background producer, and runs the
Structured Streaming job of ``examples/spark_orders_pipeline.py`` (parse, enrich, write through the
exactly-once ``oncelog`` sink) as its own driver process. While orders still flow, it kills the whole driver
(JVM and Python workers) with SIGKILL at random points — often in the middle of a micro-batch, sometimes
between the sink's commit and the checkpoint's — and restarts it from the same checkpoint. A last run stops
when the input is drained. A read_committed consumer then checks that every order appears in
``orders-enriched`` exactly once and that each output equals the pipeline's reference function.

``--cluster standalone`` and ``--cluster connect`` run the same job on a Spark standalone cluster or through a Spark
Connect server instead (:mod:`oncelog.cli.spark_runners`, docs/spark.md).
"""

from __future__ import annotations

import importlib.util
import json
import random
import shutil
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.cli.spark_runners import DRIVER, ConnectRunner, LocalRunner, StandaloneRunner, kill_group
from oncelog.client import AdminClient, Consumer, NewTopic, Producer
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all
from oncelog.testing.spark import spark_unavailable

console = Console()
PIPELINE = Path(__file__).resolve().parents[3] / "examples" / "spark_orders_pipeline.py"
SOURCE, SINK = "orders", "orders-enriched"
PARTITIONS = 4
PROGRESS_DEADLINE_S = 600
"""Longest wait for the next fault's output target: a driver submitted to a standalone cluster first waits for its
executors and their Python workers, which took 5 minutes on a loaded 2-core machine."""


def _load_pipeline() -> ModuleType:
    """The example module itself, so the verification uses the pipeline's own reference function."""
    spec = importlib.util.spec_from_file_location("spark_orders_pipeline", PIPELINE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _OrderFeed(threading.Thread):
    """Produces ``count`` orders at ``rate`` per second; remembers where each one was written."""

    def __init__(self, bootstrap: str, count: int, rate: float, customers: int, seed: int) -> None:
        super().__init__(name="order-feed", daemon=True)
        self._address, self._count, self._rate = bootstrap, count, rate
        self._rng = random.Random(seed)
        self._customers = customers
        self.orders: dict[str, tuple[dict[str, Any], int, int]] = {}
        self.produced = 0
        self.error: BaseException | None = None

    def order(self, i: int) -> dict[str, Any]:
        """Order number ``i``: a random customer, SKU, quantity and price."""
        return {
            "order_id": f"o-{i:07d}",
            "customer": f"c-{self._rng.randrange(self._customers):03d}",
            "sku": f"sku-{self._rng.randrange(40)}",
            "quantity": self._rng.randint(1, 9),
            "unit_price_cents": self._rng.randint(99, 4_999),
        }

    def run(self) -> None:
        try:
            with Producer(self._address, linger_ms=20) as producer:
                pending = []
                started = time.monotonic()
                for i in range(self._count):
                    order = self.order(i)
                    value = json.dumps(order, separators=(",", ":")).encode()
                    pending.append((order, producer.send(SOURCE, value, key=order["customer"].encode())))
                    ahead = (i + 1) / self._rate - (time.monotonic() - started)
                    if ahead > 0.05 or i + 1 == self._count:
                        producer.flush()
                        for sent, future in pending:
                            meta = future.result()
                            self.orders[sent["order_id"]] = (sent, meta.partition, meta.offset)
                        self.produced += len(pending)
                        pending.clear()
                        time.sleep(max(0.0, ahead))
        except BaseException as exc:  # reported by the demo, which stops
            self.error = exc


class _OutputTally(threading.Thread):
    """A read_committed consumer of the output topic counting what the pipeline has committed so far."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(name="output-tally", daemon=True)
        self._address = bootstrap
        self._halt = threading.Event()
        self.count = 0

    def run(self) -> None:
        with Consumer(self._address, isolation_level="read_committed") as consumer:
            consumer.assign(consumer.partitions_for(SINK))
            consumer.seek_to_beginning()
            while not self._halt.is_set():
                self.count += len(consumer.poll(timeout_ms=200))

    def stop(self) -> None:
        """Stop polling and wait for the thread."""
        self._halt.set()
        if self.is_alive():
            self.join(10)


def _batch_ids(checkpoint: Path, kind: str) -> list[int]:
    """Batch ids Spark logged under ``checkpoint/<kind>`` (``offsets``: planned, ``commits``: finished)."""
    folder = checkpoint / kind
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def _cut_by_kill(checkpoint: Path) -> bool:
    """True when the last planned micro-batch has no commit: the restart replays it (the sink must skip it)."""
    planned, finished = _batch_ids(checkpoint, "offsets"), _batch_ids(checkpoint, "commits")
    return bool(planned) and (not finished or planned[-1] > finished[-1])


def _log_tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


RUNNERS: dict[str, type[LocalRunner]] = {"local": LocalRunner, "standalone": StandaloneRunner, "connect": ConnectRunner}


def spark_demo(
    orders: int = typer.Option(20_000, "--orders", min=100, max=2_000_000, help="orders to stream in"),
    rate: float = typer.Option(1_000, "--rate", min=10, help="orders produced per second"),
    kills: int = typer.Option(2, "--kills", min=0, max=10, help="SIGKILLs of the Spark driver while orders flow"),
    per_trigger: int = typer.Option(2_000, "--max-records-per-trigger", min=10, help="input rows per micro-batch"),
    data_dir: Path = typer.Option(Path(".oncelog-spark-demo"), "--data-dir", help="recreated on every run"),
    seed: int = typer.Option(0, "--seed", help="random seed for orders and kill points (0 = random)"),
    storage_nodes: int = typer.Option(3, "--storage-nodes", min=1, max=16, help="partition-storage processes"),
    replication_factor: int = typer.Option(
        3, "--replication-factor", "-r", min=1, help="copies of each partition (1 is lighter, and lost with its disk)"
    ),
    cluster_mode: str = typer.Option(
        "local",
        "--cluster",
        help="where Spark runs: local (local[2,2] in the driver), standalone (a master and two workers, the "
        "driver submitted with spark-submit; an executor and a worker are killed too) or connect (the pipeline a "
        "client of a Spark Connect server; a driver kill kills the server)",
    ),
) -> None:
    """Run the Spark orders pipeline, kill its driver with SIGKILL, restart it, and prove exactly-once.

    Needs the spark extra and Java. The pipeline is examples/spark_orders_pipeline.py; the same file runs
    on a real cluster with spark-submit (see docs/spark.md). With --cluster standalone it is submitted to a Spark
    standalone master with two workers, and an executor JVM and a worker are SIGKILLed as well (the worker
    comes back) before the driver kills; with --cluster connect it runs as a client of a local Spark Connect
    server, and a driver kill SIGKILLs the server.

    Example: oncelog spark-demo --orders 50000 --kills 3
    """
    reason = spark_unavailable()
    if reason:
        console.print(f"[red]cannot run the Spark demo:[/red] {reason}")
        raise typer.Exit(2)
    if cluster_mode not in RUNNERS:
        console.print(f"[red]--cluster {cluster_mode!r} is not one of {', '.join(RUNNERS)}[/red]")
        raise typer.Exit(2)
    if not PIPELINE.exists():
        console.print(f"[red]the pipeline {PIPELINE} is missing[/red]; run the demo from a source checkout")
        raise typer.Exit(2)
    pipeline = _load_pipeline()
    seed = seed or random.SystemRandom().randrange(1, 2**31)
    rng = random.Random(seed)
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    data_dir = data_dir.resolve()
    factor = replication_factor
    if factor > storage_nodes:
        console.print(f"[red]--replication-factor {factor} needs at least {factor} storage nodes[/red]")
        raise typer.Exit(2)
    runner = RUNNERS[cluster_mode](PIPELINE, data_dir)
    with console.status(f"starting the local cluster (4 services, {storage_nodes} storage nodes, RF {factor})…"):
        cluster = LocalCluster(data_dir, storage_nodes=storage_nodes, replication_factor=factor).start()
    tally: _OutputTally | None = None
    driver: subprocess.Popen[bytes] | None = None
    try:
        with console.status(f"starting Spark: {runner.name}…"):
            runner.start()
        bootstrap = cluster.bootstrap
        console.print(f"cluster up, bootstrap [bold]{bootstrap}[/bold]; logs in {data_dir}/logs, seed {seed}")
        with AdminClient(bootstrap) as admin:
            admin.create_topics(
                [NewTopic(SOURCE, num_partitions=PARTITIONS), NewTopic(SINK, num_partitions=PARTITIONS)]
            )
        checkpoint = data_dir / "checkpoint"
        # the final run stops once every order has an output (read_committed), not after a quiet spell: a
        # driver still starting its JVM on a busy machine is quiet too, and stopping it then left input unread
        stop_file = data_dir / "stop-final-run"
        driver_args = ["--bootstrap", bootstrap, "--checkpoint", str(checkpoint)]
        driver_args += ["--max-records-per-trigger", str(per_trigger), "--stop-file", str(stop_file)]
        feed = _OrderFeed(bootstrap, orders, rate, pipeline.CUSTOMERS, rng.randrange(2**31))
        tally = _OutputTally(bootstrap)
        progress = Progress(
            TextColumn("{task.description:<40}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        replayed = 0
        started = time.monotonic()
        # the cluster's faults first (they need a running driver), then the driver kills
        faults = [*runner.faults, *[DRIVER] * kills]
        with progress:
            fed = progress.add_task("orders produced (idempotent)", total=orders)
            out = progress.add_task("enriched orders committed (read_committed)", total=orders)

            def tick() -> None:
                if feed.error is not None:
                    raise RuntimeError(f"producing orders failed: {feed.error!r}")
                progress.update(fed, completed=feed.produced)
                progress.update(out, completed=min(orders, tally.count))

            feed.start()
            tally.start()
            # fault points: spread over the stream, each after some output is committed
            targets = sorted(
                rng.randint(orders * k // (len(faults) + 1) + 1, orders * (2 * k + 1) // (2 * len(faults) + 2))
                for k in range(len(faults))
            )
            runs = 0
            log = data_dir / f"driver-{runs}.log"
            driver = runner.start_driver(driver_args, log)
            for fault, target in zip(faults, targets, strict=True):
                deadline = time.monotonic() + PROGRESS_DEADLINE_S
                while tally.count < target:
                    tick()
                    if driver.poll() is not None:
                        raise RuntimeError(f"the Spark driver exited with {driver.returncode}:\n{_log_tail(log)}")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the pipeline made no progress in {PROGRESS_DEADLINE_S} s; see {log}")
                    time.sleep(0.1)
                time.sleep(rng.uniform(0, 1.5))  # land anywhere: mid-batch, or between sink and checkpoint commit
                if fault == DRIVER:
                    runner.kill_driver(driver)
                    replayed += _cut_by_kill(checkpoint)
                    runs += 1
                    progress.update(out, description=f"enriched orders committed ({runs} driver kills)")
                    log = data_dir / f"driver-{runs}.log"
                    driver = runner.start_driver(driver_args, log)
                else:
                    progress.console.print(runner.inject(fault, driver))
            while feed.is_alive():
                tick()
                time.sleep(0.1)
            tick()
            deadline = time.monotonic() + 600
            while driver.poll() is None:
                tick()
                if tally.count >= orders:
                    stop_file.touch()
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the final pipeline run drained {tally.count:,} of {orders:,} orders in 600 s; see {log}"
                    )
                time.sleep(0.2)
            if driver.returncode != 0:
                raise RuntimeError(f"the Spark driver exited with {driver.returncode}:\n{_log_tail(log)}")
            driver = None
            elapsed = time.monotonic() - started
            output = read_all(bootstrap, SINK, timeout_s=120)
            progress.update(out, completed=min(orders, len(output)))
        committed_batches = len(_batch_ids(checkpoint, "commits"))
        faults_row = [("driver SIGKILLs / restarts from checkpoint", f"{kills} / {runs}")]
        if isinstance(runner, StandaloneRunner):
            faults_row += [
                ("executor JVM SIGKILLs / replaced", f"{runner.executor_kills} / {runner.executor_replacements}"),
                ("worker SIGKILLs / restarted", f"{runner.worker_kills} / {runner.worker_restarts}"),
            ]
        if isinstance(runner, ConnectRunner):
            faults_row.append(("Connect server SIGKILLs / starts", f"{runner.server_kills} / {runner.server.starts}"))
        _verdict(
            pipeline, feed.orders, output, orders, (runner.name, faults_row), (committed_batches, replayed), elapsed
        )
    finally:
        if driver is not None:
            kill_group(driver)
        if tally is not None:
            tally.stop()
        with console.status("stopping the cluster…"):
            runner.stop()
            cluster.stop()


def _verdict(
    pipeline: ModuleType,
    produced: dict[str, tuple[dict[str, Any], int, int]],
    output: list[Any],
    orders: int,
    spark: tuple[str, list[tuple[str, str]]],
    batches: tuple[int, int],
    elapsed: float,
) -> None:
    """Compare the output with the reference function; print the table; exit 1 unless exactly once."""
    seen: Counter[str] = Counter()
    wrong = unexpected = 0
    for record in output:
        value = json.loads(record.value or b"{}")
        order_id = value.get("order_id")
        if order_id not in produced:
            unexpected += 1
            continue
        seen[order_id] += 1
        order, partition, offset = produced[order_id]
        wrong += value != pipeline.enrich(order, partition, offset)
    duplicates = sum(n - 1 for n in seen.values())
    missing = sum(1 for order_id in produced if order_id not in seen)
    table = Table(title="Spark orders pipeline: exactly-once under SIGKILL")
    table.add_column("measure")
    table.add_column("value", justify="right")
    for name, value in (
        ("orders produced", f"{len(produced):,}"),
        ("enriched orders (read_committed)", f"{len(output):,}"),
        ("duplicates", duplicates),
        ("missing", missing),
        ("not matching the reference function", wrong),
        ("unexpected", unexpected),
        ("Spark", spark[0]),
        *spark[1],
        ("micro-batches committed / cut by a kill and replayed", f"{batches[0]} / {batches[1]}"),
        ("end-to-end rate incl. restarts", f"{len(output) / elapsed:,.0f} orders/s"),
    ):
        table.add_row(name, str(value))
    console.print(table)
    if duplicates or missing or wrong or unexpected or len(produced) != orders:
        console.print("[red bold]FAILED: the output is not every order exactly once[/red bold]")
        raise typer.Exit(1)
    console.print(
        "[green bold]every order is in the output exactly once[/green bold] (batches cut by a kill were replayed "
        "from the checkpoint; the sink's batch markers skipped what had already been committed)"
    )
