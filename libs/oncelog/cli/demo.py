"""``oncelog demo``: exactly-once under crashes, shown end to end on a local cluster.

It starts the local cluster, writes N input records, and runs three transactional consume-transform-produce
copiers of ``examples/consume_transform_produce.py`` as separate processes in one consumer group: they share the
input partitions, and copiers picked at random are killed with SIGKILL at random points and restarted; the group
rebalances each time (design/consumer-groups.md). Finally a read_committed consumer compares the output with the
transformed input: every input must appear exactly once (no duplicates, nothing missing).
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
"""The copiers are paced to copy the input in about this long together, so the kills land while they work."""
SESSION_TIMEOUT_MS = 3000
"""The demo cluster's group session timeout: a killed copier's partitions move to the others after this long."""
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


def _start_copier(bootstrap: str, group: str, slot: int, log: Path, max_rate: float) -> subprocess.Popen[bytes]:
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
        f"{group}-{slot}",  # stable per slot: a restarted copier fences its killed predecessor
        "--batch-size",
        "100",
        "--max-rate",
        str(max_rate),
    ]
    with log.open("ab") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def demo(
    records: int = typer.Option(5000, "--records", min=1, max=1_000_000, help="input records to copy"),
    kills: int = typer.Option(3, "--kills", min=0, max=20, help="SIGKILLs of copiers at random points"),
    copiers: int = typer.Option(3, "--copiers", min=1, max=8, help="copier processes in the consumer group"),
    data_dir: Path = typer.Option(Path(".oncelog-demo"), "--data-dir", help="recreated on every run"),
    seed: int = typer.Option(0, "--seed", help="random seed for the kill points (0 = random)"),
) -> None:
    """Show exactly-once delivery surviving crashes: copiers in one group copy a topic while being SIGKILLed.

    Example: oncelog demo --records 20000 --kills 5
    """
    if not COPIER.exists():
        console.print(f"[red]the demo copier {COPIER} is missing[/red]; run the demo from a source checkout")
        raise typer.Exit(2)
    rng = random.Random(seed or None)
    shutil.rmtree(data_dir, ignore_errors=True)
    with console.status("starting the local cluster (4 services, 2 storage nodes)…"):
        env = {
            "ONCELOG_GROUP_OFFSETS_SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "ONCELOG_GROUP_OFFSETS_HEARTBEAT_INTERVAL_MS": str(SESSION_TIMEOUT_MS // 10),
        }
        cluster = LocalCluster(data_dir, storage_nodes=2, env=env).start()
    try:
        bootstrap = cluster.bootstrap
        console.print(f"cluster up, bootstrap [bold]{bootstrap}[/bold]; logs in {data_dir}/logs")
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic("demo-in", num_partitions=6), NewTopic("demo-out", num_partitions=3)])
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
            # paced so the whole copy takes about COPY_SECONDS: the kills land mid-stream, often mid-transaction
            rate = max(50.0, records / COPY_SECONDS / copiers)
            logs = [data_dir / f"copier-{slot}.log" for slot in range(copiers)]
            running = [_start_copier(bootstrap, group, slot, logs[slot], rate) for slot in range(copiers)]

            watcher = AdminClient(bootstrap)

            def committed() -> int:
                return sum(om.offset for om in watcher.list_group_offsets(group).values())

            deadline = time.monotonic() + 300
            try:
                for kill in range(kills):
                    target = rng.randint(records * kill // (kills + 1) + 1, records * (kill + 1) // (kills + 1))
                    while committed() < target:
                        if time.monotonic() > deadline:
                            raise RuntimeError(f"the copiers made no progress; see {data_dir}/copier-*.log")
                        progress.update(copy, completed=min(records, committed()))
                        time.sleep(0.05)
                    time.sleep(rng.uniform(0, 100 / rate))  # somewhere inside a transaction of 100 records
                    slot = rng.randrange(copiers)
                    running[slot].send_signal(signal.SIGKILL)
                    running[slot].wait()
                    running[slot] = _start_copier(bootstrap, group, slot, logs[slot], rate)
                    progress.update(copy, description=f"copy with crashes ({kill + 1} killed)")
                while (done := committed()) < records:
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"the copiers stopped short; see {data_dir}/copier-*.log")
                    progress.update(copy, completed=min(records, done))
                    time.sleep(0.1)
                progress.update(copy, completed=records)
            finally:
                for process in running:
                    process.send_signal(signal.SIGTERM)
                for process in running:
                    process.wait()
                watcher.close()
            aborted = sum(_log_events(log)[1] for log in logs)
            elapsed = time.monotonic() - started
            with AdminClient(bootstrap) as admin:
                rebalances = admin.describe_consumer_group(group).group_epoch
            output = [r.value or b"" for r in read_all(bootstrap, "demo-out", timeout_s=120)]
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
            ("copiers in the group", copiers),
            ("copier SIGKILLs", kills),
            ("group rebalances (group epoch)", rebalances),
            ("aborted transactions reported", aborted),
            ("copy time incl. restarts", f"{elapsed:.1f} s (each copier paced at {rate:,.0f} records/s)"),
        ):
            table.add_row(name, str(figure))
        console.print(table)
        if duplicates or missing or unexpected:
            console.print("[red bold]FAILED: the output is not the input exactly once[/red bold]")
            raise typer.Exit(1)
        console.print(
            "[green bold]every input is in the output exactly once[/green bold] "
            "(kills that hit an open transaction were aborted by the restarted copier's init_transactions; a killed "
            "copier's partitions moved to the others after the session timeout)"
        )
    finally:
        with console.status("stopping the cluster…"):
            cluster.stop()
