"""``oncelog demo``: exactly-once under crashes, shown end to end on a local cluster.

It starts the local cluster, writes N input records, and runs the transactional consume-transform-produce
copier of ``examples/consume_transform_produce.py`` as a separate process that is killed with SIGKILL
several times at random points and restarted. Finally a read_committed consumer compares the output with
the transformed input: every input must appear exactly once (no duplicates, nothing missing).
"""

from __future__ import annotations

import json
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.client import AdminClient, NewTopic, Producer
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all

console = Console()
COPY_SECONDS = 4.0
"""The copier is paced to copy the input in about this long, so the kills land while it works."""
COPIER = Path(__file__).resolve().parents[3] / "examples" / "consume_transform_produce.py"


def _log_events(log: Path) -> tuple[int, int]:
    """(records committed so far, aborted transactions) from the copier's JSON lines."""
    total = aborted = 0
    for line in log.read_text(errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            total = max(total, int(event.get("total", 0)))
            aborted += "aborted" in event
    return total, aborted


def _start_copier(
    bootstrap: str, group: str, log: Path, max_rate: float, idle_exit: float | None = None
) -> subprocess.Popen[bytes]:
    args = [
        sys.executable,
        str(COPIER),
        "demo-in",
        "demo-out",
        "--bootstrap",
        bootstrap,
        "--group",
        group,
        "--transactional-id",
        f"{group}-0",
        "--batch-size",
        "100",
        "--max-rate",
        str(max_rate),
    ]
    if idle_exit is not None:
        args += ["--idle-exit", str(idle_exit)]
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def demo(
    records: int = typer.Option(5000, "--records", min=1, max=1_000_000, help="input records to copy"),
    kills: int = typer.Option(3, "--kills", min=0, max=20, help="SIGKILLs of the copier at random points"),
    data_dir: Path = typer.Option(Path(".oncelog-demo"), "--data-dir", help="recreated on every run"),
    seed: int = typer.Option(0, "--seed", help="random seed for the kill points (0 = random)"),
) -> None:
    """Show exactly-once delivery surviving crashes: copy a topic while killing the copier with SIGKILL.

    Example: oncelog demo --records 20000 --kills 5
    """
    if not COPIER.exists():
        console.print(f"[red]the demo copier {COPIER} is missing[/red]; run the demo from a source checkout")
        raise typer.Exit(2)
    rng = random.Random(seed or None)
    shutil.rmtree(data_dir, ignore_errors=True)
    with console.status("starting the local cluster (4 services, 2 storage nodes)…"):
        cluster = LocalCluster(data_dir, storage_nodes=2).start()
    try:
        bootstrap = cluster.bootstrap
        console.print(f"cluster up, bootstrap [bold]{bootstrap}[/bold]; logs in {data_dir}/logs")
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic("demo-in", num_partitions=3), NewTopic("demo-out", num_partitions=3)])
        inputs = [f"order-{i:07d}".encode() for i in range(records)]
        progress = Progress(
            TextColumn("{task.description:<28}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
        )
        with progress:
            task = progress.add_task("produce inputs (idempotent)", total=records)
            with Producer(bootstrap) as producer:
                for i, value in enumerate(inputs, 1):
                    producer.send("demo-in", value, key=value[-3:])
                    if i % 500 == 0 or i == records:
                        progress.update(task, completed=i)
                producer.flush()
            copy = progress.add_task("copy with crashes", total=records)
            started = time.monotonic()
            group = "demo-copier"
            aborted = committed_before = 0
            # paced so the whole copy takes about COPY_SECONDS: the kills land mid-stream, often mid-transaction
            rate = max(50.0, records / COPY_SECONDS)
            for kill in range(kills):
                log = data_dir / f"copier-{kill}.log"
                copier = _start_copier(bootstrap, group, log, rate)
                target = rng.randint(records * kill // (kills + 1) + 1, records * (kill + 1) // (kills + 1))
                deadline = time.monotonic() + 120
                while committed_before + _log_events(log)[0] < target and copier.poll() is None:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the copier made no progress; see {log}")
                    time.sleep(0.05)
                time.sleep(rng.uniform(0, 100 / rate))  # somewhere inside the next transaction of 100 records
                copier.send_signal(signal.SIGKILL)
                copier.wait()
                progress.update(copy, description=f"copy with crashes ({kill + 1} killed)")
                committed, aborted_here = _log_events(log)
                committed_before += committed
                aborted += aborted_here
                progress.update(copy, completed=min(records, committed_before))
            log = data_dir / "copier-final.log"
            final = _start_copier(bootstrap, group, log, rate, idle_exit=3.0)
            while final.poll() is None:
                progress.update(copy, completed=min(records, committed_before + _log_events(log)[0]))
                time.sleep(0.2)
            aborted += _log_events(log)[1]
            elapsed = time.monotonic() - started
            output = [r.value or b"" for r in read_all(bootstrap, "demo-out", timeout_s=120)]
            progress.update(copy, completed=min(records, len(output)))
        expected = Counter(v.upper() for v in inputs)
        got = Counter(output)
        duplicates = sum(n - 1 for n in got.values() if n > 1)
        missing = sum(1 for v in expected if v not in got)
        unexpected = sum(1 for v in got if v not in expected)
        table = Table(title="exactly-once under SIGKILL")
        table.add_column("measure")
        table.add_column("value", justify="right")
        for name, figure in (
            ("inputs", records),
            ("outputs (read_committed)", len(output)),
            ("duplicates", duplicates),
            ("missing", missing),
            ("unexpected", unexpected),
            ("copier SIGKILLs", kills),
            ("aborted transactions reported", aborted),
            ("copy time incl. restarts", f"{elapsed:.1f} s (copier paced at {rate:,.0f} records/s)"),
        ):
            table.add_row(name, str(figure))
        console.print(table)
        if duplicates or missing or unexpected:
            console.print("[red bold]FAILED: the output is not the input exactly once[/red bold]")
            raise typer.Exit(1)
        console.print(
            "[green bold]every input is in the output exactly once[/green bold] "
            "(kills that hit an open transaction were aborted by the next copier's init_transactions)"
        )
    finally:
        with console.status("stopping the cluster…"):
            cluster.stop()
