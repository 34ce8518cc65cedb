"""Helpers shared by benchmarks: repeated timed runs, median and spread, a small table."""

from __future__ import annotations

import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass
class Series:
    """Rates of repeated runs of one measurement (operations per second)."""

    name: str
    rates: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.rates)

    @property
    def spread(self) -> float:
        """(max - min) / median: how much the shared 2-core machine moved the figure."""
        return (max(self.rates) - min(self.rates)) / self.median if self.median else 0.0


async def rate(op: Callable[[], Awaitable[object]], seconds: float) -> float:
    """Run ``op`` back to back for ``seconds``; returns operations per second."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        await op()
        count += 1
    return count / (time.perf_counter() - start)


def sync_rate(op: Callable[[], object], seconds: float) -> float:
    """Blocking twin of :func:`rate`."""
    count = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        op()
        count += 1
    return count / (time.perf_counter() - start)


def report(title: str, rows: list[tuple[str, Series, Series | None]]) -> str:
    """Markdown table: measurement, median rate, spread, and ratio to its baseline."""
    lines = [f"### {title}", "", "| measurement | median /s | spread | runs | ratio to baseline |"]
    lines.append("|---|---|---|---|---|")
    for label, series, baseline in rows:
        ratio = f"{series.median / baseline.median:.3f} of {baseline.name}" if baseline else "baseline"
        lines.append(f"| {label} | {series.median:,.0f} | {series.spread:.0%} | {len(series.rates)} | {ratio} |")
    return "\n".join(lines)
