"""``oncelog torture``: the fault harness (design/torture.md §3): faults against a local cluster, a checked history."""

from __future__ import annotations

import random
import time
from pathlib import Path

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

console = Console()


def _split(value: str) -> list[str]:
    return [] if value in ("", "none") else [v.strip() for v in value.split(",") if v.strip()]


def torture(
    minutes: float = typer.Option(5.0, "--minutes", min=0.05, help="how long the workloads run under faults"),
    seed: int = typer.Option(0, "--seed", help="seed of every random choice (0 picks one and prints it)"),
    nemesis: str = typer.Option(
        "kill,pause,partition,flaky",
        "--nemesis",
        help="faults, comma-separated: kill, pause, partition, flaky, disk, fsync, zombie, lag-kill, lease-pause,"
        " catalog (PostgreSQL only); none",
    ),
    workloads: str = typer.Option(
        "append,idem,bank,ctp,abandon,readers,probes",
        "--workloads",
        help="append, idem, bank, ctp, abandon, readers, probes (comma-separated)",
    ),
    mutant: str = typer.Option(
        "", "--mutant", help="run the services with one deliberate bug (design/torture.md §4); the run must fail"
    ),
    data_dir: Path = typer.Option(Path(".oncelog-torture"), "--data-dir", help="recreated; history, logs, report"),
    storage_nodes: int = typer.Option(3, "--storage-nodes", min=1, max=5),
    replication_factor: int = typer.Option(3, "--replication-factor", min=1, max=5),
    catalog: str = typer.Option(
        "sqlite", "--catalog", help="sqlite, or postgres: a PostgreSQL server behind the fault proxy (needs postgresql)"
    ),
) -> None:
    """Run the workloads against a local cluster behind fault proxies while the nemesis strikes, then check the
    history for exactly-once anomalies. Exit 1 when any is found; the same --seed replays the same choices.

    Example: oncelog torture --minutes 5 --seed 42 --nemesis kill,pause,partition,disk
    """
    from oncelog.torture import report
    from oncelog.torture.mutants import MUTANTS
    from oncelog.torture.nemesis import KINDS
    from oncelog.torture.runner import Snapshot, TortureConfig, run
    from oncelog.torture.workloads import WORKLOADS

    for option, given, allowed in (
        ("--nemesis", _split(nemesis), KINDS),
        ("--workloads", _split(workloads), WORKLOADS),
        ("--mutant", [mutant] if mutant else [], tuple(MUTANTS)),
        ("--catalog", [catalog], ("sqlite", "postgres")),
    ):
        unknown = [g for g in given if g not in allowed]
        if unknown:
            raise typer.BadParameter(
                f"{', '.join(unknown)} unknown; choose from {', '.join(allowed)}", param_hint=option
            )

    seed = seed or random.SystemRandom().randrange(1, 2**31)
    config = TortureConfig(
        data_dir=data_dir,
        seconds=minutes * 60,
        seed=seed,
        nemesis=_split(nemesis),
        workloads=_split(workloads),
        storage_nodes=storage_nodes,
        replication_factor=min(replication_factor, storage_nodes),
        mutant=mutant,
        catalog=catalog,
    )
    console.print(f"torture seed [bold]{seed}[/bold] (replay with --seed {seed}); history in {data_dir}/history.jsonl")

    def render(snap: Snapshot) -> Group:
        grid = Table.grid(padding=(0, 2))
        grid.add_row(
            Text(f"{snap.phase}", style="bold"),
            Text(f"{snap.elapsed_s:6.0f} s"),
            Text(f"{snap.ops_per_s:6.1f} ok ops/s"),
            Text(
                f"ok {snap.counts.get('ok', 0)}  info {snap.counts.get('info', 0)}  fail {snap.counts.get('fail', 0)}"
            ),
            Text(f"anomalies so far {snap.anomalies}", style="red" if snap.anomalies else "green"),
        )
        faults = ", ".join(f"{k} {v}" for k, v in sorted(snap.faults.items())) or "none yet"
        grid.add_row(Text("faults"), Text(faults), Text("active: " + ("; ".join(snap.active) or "none")))
        return Group(grid)

    started = time.monotonic()
    with Live(console=console, refresh_per_second=2, transient=False) as live:
        result = run(config, on_tick=lambda snap: live.update(render(snap)))
    console.print(report.table(result))
    json_path, png = report.write(result, Path(data_dir))
    console.print(f"report {json_path}" + (f", timeline {png}" if png else " (no timeline: install matplotlib)"))
    for cls, items in sorted(result.check.anomalies.items()):
        for item in items[:3]:
            console.print(f"[red]{cls}[/red]: {item.explanation} (ops {list(item.ops)[:8]})")
    if result.nemesis_errors:
        console.print(f"nemesis errors: {result.nemesis_errors[:5]}")
    console.print(f"{time.monotonic() - started:.0f} s; reproduce: {report.reproduce_command(result)}")
    raise typer.Exit(0 if result.valid else 1)
