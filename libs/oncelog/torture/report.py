"""The final report of a torture run: a rich table, ``report.json`` and ``timeline.png`` (faults vs throughput)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.table import Table

from oncelog.torture.runner import TortureResult


def to_dict(result: TortureResult) -> dict[str, Any]:
    config = result.config
    return {
        "valid": result.valid,
        "seed": config.seed,
        "seconds": config.seconds,
        "nemesis": list(config.nemesis),
        "workloads": list(config.workloads),
        "mutant": config.mutant or None,
        "duration_s": round(result.duration_s, 1),
        "ops": result.counts,
        "ops_checked": result.check.ops_checked,
        "fault_episodes": result.fault_counts(),
        "episodes": result.episodes,
        "nemesis_errors": result.nemesis_errors,
        "proxy": {"stats": result.proxy_stats, "links": result.links},
        "history": str(result.history),
        "reproduce": reproduce_command(result),
        **{k: v for k, v in result.check.to_dict().items() if k in ("anomalies", "allowed")},
    }


def reproduce_command(result: TortureResult) -> str:
    config = result.config
    parts = [
        "oncelog torture",
        f"--minutes {config.seconds / 60:g}",
        f"--seed {config.seed}",
        f"--nemesis {','.join(config.nemesis) or 'none'}",
        f"--workloads {','.join(config.workloads)}",
    ]
    if config.mutant:
        parts.append(f"--mutant {config.mutant}")
    if config.catalog != "sqlite":
        parts.append(f"--catalog {config.catalog}")
    return " ".join(parts)


def table(result: TortureResult) -> Table:
    out = Table(
        title=f"oncelog torture, seed {result.config.seed}"
        + (f", mutant {result.config.mutant}" if result.config.mutant else "")
    )
    out.add_column("measure")
    out.add_column("value", justify="right")
    out.add_row("duration", f"{result.duration_s:.0f} s")
    for kind in ("ok", "fail", "info"):
        out.add_row(f"ops {kind}", str(result.counts.get(kind, 0)))
    out.add_row("ops checked", str(result.check.ops_checked))
    for kind, count in sorted(result.fault_counts().items()):
        out.add_row(f"fault episodes: {kind}", str(count))
    total = sum(len(v) for v in result.check.anomalies.values())
    for cls, items in sorted(result.check.anomalies.items()):
        out.add_row(f"[red]anomaly: {cls}[/red]", f"[red]{len(items)}[/red]")
    for cls, items in sorted(result.check.allowed.items()):
        out.add_row(f"allowed: {cls}", str(len(items)))
    out.add_row("anomalies", f"[{'red' if total else 'green'}]{total}[/{'red' if total else 'green'}]")
    return out


def write(result: TortureResult, directory: Path) -> tuple[Path, Path | None]:
    """``report.json`` and ``timeline.png`` in ``directory``; the PNG is None when matplotlib is missing."""
    directory.mkdir(parents=True, exist_ok=True)
    report = directory / "report.json"
    report.write_text(json.dumps(to_dict(result), indent=2, sort_keys=True) + "\n")
    return report, timeline(result, directory / "timeline.png")


COLOURS = {
    "kill": "#d62728",
    "pause": "#ff7f0e",
    "partition": "#9467bd",
    "flaky": "#8c564b",
    "disk": "#e377c2",
    "catalog": "#17becf",
    "fsync": "#2ca02c",
    "zombie": "#7f7f7f",
    "lag-kill": "#bcbd22",
}


def timeline(result: TortureResult, path: Path) -> Path | None:
    """Completed ok ops per second over the run, with each fault episode as a coloured band."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    start = result.started_ns
    seconds = max(1, int(result.duration_s) + 1)
    ok = [0] * seconds
    failed = [0] * seconds
    for time_ns, kind in result.completions:
        second = min(seconds - 1, max(0, int((time_ns - start) / 1e9)))
        (ok if kind == "ok" else failed)[second] += 1
    figure, axis = plt.subplots(figsize=(12, 4))
    axis.plot(range(seconds), ok, label="ok ops/s", color="#1f77b4")
    axis.plot(range(seconds), failed, label="info/fail ops/s", color="#7f7f7f", linewidth=0.8)
    seen: set[str] = set()
    for episode in result.episodes:
        stop = episode["stop_s"] if episode["stop_s"] is not None else result.duration_s
        kind = episode["kind"]
        axis.axvspan(
            episode["start_s"],
            stop,
            color=COLOURS.get(kind, "#000000"),
            alpha=0.25,
            label=None if kind in seen else kind,
        )
        seen.add(kind)
    axis.set_xlabel("seconds since start")
    axis.set_ylabel("operations per second")
    axis.set_title(f"oncelog torture, seed {result.config.seed}: throughput and faults")
    axis.legend(loc="upper right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
