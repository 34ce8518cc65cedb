"""Apache Kafka 4.4 as the yardstick: oncelog and Kafka measured side by side in one run (``make bench``).

    python -m bench.yardstick [--runs 5] [--quick] [--modes durable,default] [--out bench/results]

One oncelog LocalCluster (one storage node) and one Apache Kafka 4.4 broker (KRaft, one node,
``oncelog.testing.kafka``; the jars are fetched from Maven Central on first use) run on loopback at the same
time. Every figure is measured on both, the two back to back and in alternating order (A/B, then B/A in the next
run), so the load of the shared machine hits both; each figure is the median of ``--runs`` runs with its spread
((max - min) / median), and each ratio is the median of the per-run ratios. Clients: oncelog's Python client
and confluent-kafka (librdkafka), what a Python user would pick.

Two modes, each row labelled: ``durable`` (oncelog ``flush=sync``: fsync before acknowledging; Kafka
``flush.messages=1``: fsync every message) and ``default`` (oncelog ``flush=async``; Kafka's default, which
never fsyncs on the write path).

Figures (issue 20's table): produce records/s at 1 KiB and 100 B with ``send_batch()`` (64 records a call;
confluent-kafka has no bulk call, its row is ``produce()`` per record, batched by librdkafka in C), with
``send_arrow()`` (an Arrow binary column of 10,240 rows a call; Kafka's row takes each value out of the same
column with ``to_pylist()`` and calls ``produce()``) and with per-record ``send()``; transactional ÷ idempotent
records/s at a commit every 100 ms (each system's own ratio);
small transactions/s (4 partitions x 1 record of 100 B, one thread and one client per producer) at 1, 8 and 32
producers; consume-transform-produce latency p50/p99 (one 1 KiB record: poll, produce, offsets in the
transaction, commit, until a read_committed reader sees it); read_committed consume MB/s of the 1 KiB topic, as
records and into Arrow columns (``poll_arrow()``; Kafka's row puts each ``consume()`` batch's topic, partition,
offset, timestamp, key and value into a ``pyarrow`` table);
the servers' CPU seconds per GB produced (1 KiB ``send_batch()``) and per 1,000 small transactions (8
producers); the servers' RSS at the end of each run. After the runs, the Spark row (``bench.yardstick_spark``):
oncelog's exactly-once sink against Spark's own Kafka sink (at-least-once) writing to the Kafka broker, warm
micro-batches of ``--spark-rows`` rows, ``--runs`` per sink and mode, the sinks taking turns (it needs the spark
extra, Java and Spark's Kafka connector, fetched from Maven Central on first use). Last, the RSS row
(``bench.yardstick_rss``) on a fresh storage node and a fresh broker: 1,000 partitions and 10,000 idempotent
producers (``--rss-partitions``, ``--rss-producers``; 100 and 500 with ``--quick``), once. ``--parts`` picks
among the three: ``core`` (every figure above), ``spark`` and ``rss``; all by default.

Output: a Markdown table (rendered with rich on a terminal), ``<out>/<date>.json`` with every run's figures
and the machine's load, and three PNG plots next to it (throughput vs record size, commits/s vs producers, the
consume-transform-produce latency CDF). ``--quick`` is a smoke run: one run, small counts.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.yardstick_sides import (
    MODES,
    KafkaSide,
    OncelogSide,
    Side,
    percentile,
    process_cpu_seconds,
    process_rss_mb,
)
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import KAFKA_VERSION, ApacheKafka, fetch_kafka, kafka_libs

ONCELOG, KAFKA = "oncelog", "kafka"
PRODUCER_COUNTS = (1, 8, 32)
SIZES = (1024, 100)
APIS = ("batch", "arrow", "send")
API_TITLES = {"batch": "send_batch()", "arrow": "send_arrow()", "send": "per-record send()"}
PARTS = ("core", "spark", "rss")
MODE_LABELS = {
    "durable": "fsync on (oncelog flush=sync, Kafka flush.messages=1)",
    "default": "fsync off (oncelog flush=async, Kafka default)",
}


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    goal: str
    higher_is_better: bool = True


FIGURES = [
    Figure("produce_1024_batch", "produce 1 KiB, send_batch()", "records/s", "≥ 1.0"),
    Figure("produce_100_batch", "produce 100 B, send_batch()", "records/s", "≥ 1.0"),
    Figure("produce_1024_arrow", "produce 1 KiB, send_arrow()", "records/s", "≥ 1.0"),
    Figure("produce_100_arrow", "produce 100 B, send_arrow()", "records/s", "≥ 1.0"),
    Figure("produce_1024_send", "produce 1 KiB, per-record send()", "records/s", "≥ 0.5"),
    Figure("produce_100_send", "produce 100 B, per-record send()", "records/s", "≥ 0.5"),
    Figure("txn_ratio", "transactional ÷ idempotent, 100 ms commits", "ratio", "oncelog's own ≥ 0.98"),
    *(
        Figure(f"small_txn_{n}", f"small transactions, {n} producer{'s' if n > 1 else ''}", "txn/s", "≥ 1.0")
        for n in PRODUCER_COUNTS
    ),
    Figure("ctp_p50_ms", "consume-transform-produce p50", "ms", "≤ 1.0", False),
    Figure("ctp_p99_ms", "consume-transform-produce p99", "ms", "≤ 1.0", False),
    Figure("consume_mb_s", "read_committed consume", "MB/s", "≥ 1.0"),
    Figure("consume_arrow_mb_s", "read_committed consume into Arrow, poll_arrow()", "MB/s", "≥ 1.0"),
    Figure("cpu_s_per_gb", "server CPU per GB produced", "CPU s", "≤ 1.0", False),
    Figure("cpu_s_per_1000_txn", "server CPU per 1,000 transactions", "CPU s", "≤ 1.0", False),
    Figure("rss_mb", "server RSS after the run", "MB", "≤ 1.0", False),
]
RSS_FIGURE = Figure("rss_scenario_mb", "", "MB", "≤ 300 MB and ≤ 1.0", False)
SPARK_FIGURE = Figure(
    "spark_sink_ms", "Spark warm micro-batch: oncelog exactly-once sink ÷ Spark's Kafka sink", "ms", "≤ 1.2", False
)


@dataclass
class Settings:
    runs: int
    records: int
    seconds: float
    ctp_samples: int
    modes: tuple[str, ...]
    parts: tuple[str, ...] = PARTS
    spark_rows: int = 10_240
    rss_partitions: int = 1000
    rss_producers: int = 10_000
    rss_partitions_per_producer: int = 4


class Collector:
    """Per-run figures of both sides, their ratios, and the raw CTP latencies for the CDF."""

    def __init__(self) -> None:
        self.values: dict[tuple[str, str, str], list[float]] = {}
        self.latencies: dict[tuple[str, str], list[float]] = {}

    def add(self, key: str, mode: str, side: str, value: float) -> None:
        self.values.setdefault((key, mode, side), []).append(value)

    def row(self, figure: Figure, mode: str) -> dict[str, object]:
        ours, theirs = self.values.get((figure.key, mode, ONCELOG), []), self.values.get((figure.key, mode, KAFKA), [])
        ratios = [a / b for a, b in zip(ours, theirs, strict=False) if b]
        return {
            "figure": figure.key,
            "label": figure.label,
            "unit": figure.unit,
            "mode": mode,
            "goal": figure.goal,
            ONCELOG: _summary(ours),
            KAFKA: _summary(theirs),
            "ratio": statistics.median(ratios) if ratios else None,
        }


def _summary(values: list[float]) -> dict[str, object]:
    if not values:
        return {"median": None, "spread": None, "runs": []}
    median = statistics.median(values)
    return {"median": median, "spread": (max(values) - min(values)) / median if median else 0.0, "runs": values}


def _order(sides: list[Side], run: int, step: int) -> list[Side]:
    return sides if (run + step) % 2 == 0 else sides[::-1]


def measure_run(sides: list[Side], run: int, settings: Settings, out: Collector) -> None:
    """One run: every figure in every mode, both sides back to back, alternating which goes first."""
    step = 0
    for mode in settings.modes:
        for size in SIZES:
            value = b"x" * size
            for api in APIS:
                step += 1
                for side in _order(sides, run, step):
                    topic = side.topic(mode)
                    cpu = process_cpu_seconds(side.pids())
                    rate = side.produce(topic, value, settings.records, api=api)
                    out.add(f"produce_{size}_{api}", mode, side.name, rate)
                    if size == 1024 and api == "batch":
                        gigabytes = settings.records * size / 1e9
                        out.add("cpu_s_per_gb", mode, side.name, (process_cpu_seconds(side.pids()) - cpu) / gigabytes)
                        out.add("consume_mb_s", mode, side.name, side.consume_mb_s(topic, settings.records, size))
                        consumed = side.consume_mb_s(topic, settings.records, size, arrow=True)
                        out.add("consume_arrow_mb_s", mode, side.name, consumed)
        step += 1
        for side in _order(sides, run, step):
            topic = side.topic(mode)
            value = b"x" * 1024
            if run % 2 == 0:  # the two halves of the ratio alternate too, so a load trend favours neither
                idempotent = side.idempotent_rate(topic, value, settings.seconds)
                transactional = side.transactional_rate(topic, value, settings.seconds)
            else:
                transactional = side.transactional_rate(topic, value, settings.seconds)
                idempotent = side.idempotent_rate(topic, value, settings.seconds)
            out.add("txn_ratio", mode, side.name, transactional / idempotent)
        topics = {side.name: side.topic(mode, partitions=4) for side in sides}
        for producers in PRODUCER_COUNTS:
            step += 1
            for side in _order(sides, run, step):
                cpu = process_cpu_seconds(side.pids())
                rate = side.small_transactions(topics[side.name], producers, settings.seconds)
                out.add(f"small_txn_{producers}", mode, side.name, rate)
                if producers == 8 and rate:
                    cpu_per_txn = (process_cpu_seconds(side.pids()) - cpu) / (rate * settings.seconds)
                    out.add("cpu_s_per_1000_txn", mode, side.name, cpu_per_txn * 1000)
        step += 1
        for side in _order(sides, run, step):
            latencies = side.ctp_latencies(mode, settings.ctp_samples)
            out.latencies.setdefault((mode, side.name), []).extend(latencies)
            out.add("ctp_p50_ms", mode, side.name, percentile(latencies, 0.5) * 1000)
            out.add("ctp_p99_ms", mode, side.name, percentile(latencies, 0.99) * 1000)
        for side in sides:
            out.add("rss_mb", mode, side.name, process_rss_mb(side.pids()))


def _fmt(summary: dict[str, object]) -> str:
    median, spread = summary["median"], summary["spread"]
    if median is None:
        return "missing"
    assert isinstance(median, float | int) and isinstance(spread, float | int)
    digits = 0 if median >= 100 else 2 if median < 10 else 1
    return f"{median:,.{digits}f} ({spread:.0%})"


def markdown_table(rows: list[dict[str, object]]) -> str:
    """The results as one Markdown table: a row per figure and mode."""
    lines = [
        "| figure | unit | mode | oncelog median (spread) | Kafka 4.4 median (spread) | oncelog ÷ Kafka | goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ratio = row["ratio"]
        ratio_text = f"{ratio:.2f}" if isinstance(ratio, float) else "missing"
        ours, theirs = row[ONCELOG], row[KAFKA]
        assert isinstance(ours, dict) and isinstance(theirs, dict)
        lines.append(
            f"| {row['label']} | {row['unit']} | {MODE_LABELS[str(row['mode'])]} | {_fmt(ours)} | {_fmt(theirs)} "
            f"| {ratio_text} | {row['goal']} |"
        )
    return "\n".join(lines)


def plot(out: Collector, modes: tuple[str, ...], base: Path) -> list[Path]:
    """Three PNGs next to the JSON: throughput vs record size, commits/s vs producers, the CTP latency CDF."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {(ONCELOG, "durable"): "C0-", (ONCELOG, "default"): "C0--", (KAFKA, "durable"): "C1-",
              (KAFKA, "default"): "C1--"}  # fmt: skip
    paths = []

    def median(key: str, mode: str, side: str) -> float:
        values = out.values.get((key, mode, side), [])
        return statistics.median(values) if values else float("nan")

    fig, axes = plt.subplots(1, len(APIS), figsize=(15, 4.2), sharey=True)
    for ax, api in zip(axes, APIS, strict=True):
        for side in (ONCELOG, KAFKA):
            for mode in modes:
                ys = [median(f"produce_{size}_{api}", mode, side) for size in sorted(SIZES)]
                ax.plot(sorted(SIZES), ys, styles[(side, mode)], marker="o", label=f"{side} {mode}")
        ax.set_xscale("log")
        ax.set_xlabel("record size (bytes)")
        ax.set_title(API_TITLES[api])
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("records/s (median)")
    axes[0].legend()
    paths.append(base.with_name(base.name + "-throughput.png"))
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for side in (ONCELOG, KAFKA):
        for mode in modes:
            ys = [median(f"small_txn_{n}", mode, side) for n in PRODUCER_COUNTS]
            ax.plot(PRODUCER_COUNTS, ys, styles[(side, mode)], marker="o", label=f"{side} {mode}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent transactional producers")
    ax.set_ylabel("commits/s (4 partitions x 1 record)")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(base.with_name(base.name + "-commits.png"))
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(6, 4.2))
    for (mode, side), latencies in sorted(out.latencies.items()):
        xs = sorted(x * 1000 for x in latencies)
        ax.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], styles[(side, mode)], label=f"{side} {mode}")
    ax.set_xscale("log")
    ax.set_xlabel("consume-transform-produce latency (ms)")
    ax.set_ylabel("fraction of transactions")
    ax.grid(alpha=0.3)
    ax.legend()
    paths.append(base.with_name(base.name + "-ctp-cdf.png"))
    fig.tight_layout()
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def run(settings: Settings, out_dir: Path) -> tuple[str, Path]:
    """Start both systems, measure, write the JSON and the plots; returns the Markdown table and the JSON path."""
    import confluent_kafka

    libs = kafka_libs() or fetch_kafka()
    collector = Collector()
    versions: dict[str, str] = {}
    rss: dict[str, dict[str, float]] = {}
    load_before = os.getloadavg()
    started = dt.datetime.now(dt.UTC)
    with tempfile.TemporaryDirectory(prefix="bench-yardstick-") as tmp:
        root = Path(tmp)
        with (
            ApacheKafka(root / "kafka", libs=libs) as kafka,
            LocalCluster(root / "oncelog", storage_nodes=1) as cluster,
        ):
            assert kafka.process is not None
            kafka_pid = kafka.process.pid
            sides: list[Side] = [
                OncelogSide(ONCELOG, cluster.bootstrap, lambda: list(cluster.pids())),
                KafkaSide(KAFKA, kafka.bootstrap, lambda: [kafka_pid]),
            ]
            for index in range(settings.runs if "core" in settings.parts else 0):
                begun = time.perf_counter()
                measure_run(sides, index, settings, collector)
                print(f"run {index + 1}/{settings.runs} done in {time.perf_counter() - begun:.0f} s", flush=True)
            if "spark" in settings.parts:
                from bench.yardstick_spark import measure_spark_sinks

                begun = time.perf_counter()
                batches, versions["spark_sql_kafka"] = measure_spark_sinks(
                    sides[0], sides[1], settings.modes, settings.spark_rows, settings.runs, root
                )
                for (mode, side), values in batches.items():
                    for value in values:
                        collector.add(SPARK_FIGURE.key, mode, side, value)
                print(f"Spark sinks done in {time.perf_counter() - begun:.0f} s", flush=True)
        rss_figure = None
        if "rss" in settings.parts:
            from bench.yardstick_rss import measure_rss

            begun = time.perf_counter()
            rss = measure_rss(
                root, libs, settings.rss_partitions, settings.rss_producers, settings.rss_partitions_per_producer
            )
            for side in (ONCELOG, KAFKA):
                collector.add(RSS_FIGURE.key, "default", side, rss[side]["rss_mb"])
            rss_figure = Figure(
                RSS_FIGURE.key,
                f"RSS of one storage node (Kafka: the broker), {settings.rss_partitions:,} partitions, "
                f"{settings.rss_producers:,} idempotent producers",
                RSS_FIGURE.unit,
                RSS_FIGURE.goal,
                False,
            )
            print(f"RSS scenario done in {time.perf_counter() - begun:.0f} s: {rss}", flush=True)
    figures = [*(FIGURES if "core" in settings.parts else []), *([SPARK_FIGURE] if "spark" in settings.parts else [])]
    rows = [collector.row(figure, mode) for figure in figures for mode in settings.modes]
    if rss_figure is not None:
        rows.append(collector.row(rss_figure, "default"))
    table = markdown_table(rows)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / started.strftime("%Y-%m-%dT%H%M%SZ")
    plots = plot(collector, settings.modes, base)
    document = {
        "started": started.isoformat(),
        "finished": dt.datetime.now(dt.UTC).isoformat(),
        "settings": settings.__dict__ | {"modes": list(settings.modes)},
        "machine": {"cpus": os.cpu_count(), "loadavg_before": load_before, "loadavg_after": os.getloadavg()},
        "versions": {
            "kafka": KAFKA_VERSION,
            "confluent_kafka": confluent_kafka.__version__,
            "librdkafka": confluent_kafka.libversion()[0],
            "python": sys.version.split()[0],
            **versions,
        },
        "mode_labels": MODE_LABELS,
        "rows": rows,
        # the RSS scenario's sides: RSS right after the topic exists (idle_mb), after the producers, and their time
        "rss_scenario": rss,
        "ctp_latencies_s": {f"{side}/{mode}": v for (mode, side), v in collector.latencies.items()},
        "plots": [p.name for p in plots],
        "table": table,
    }
    path = base.with_suffix(".json")
    path.write_text(json.dumps(document, indent=1))
    return table, path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, help="interleaved runs (5; 1 with --quick)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one run, small counts")
    parser.add_argument(
        "--records",
        type=int,
        help="records per produce and consume figure (51,200; 640 with --quick): enough for /proc's 10 ms CPU ticks "
        "to resolve the CPU per GB",
    )
    parser.add_argument("--spark-rows", type=int, help="rows per Spark micro-batch (10,240; --records with --quick)")
    parser.add_argument("--seconds", type=float, help="seconds per timed figure (2; 1 with --quick)")
    parser.add_argument("--ctp-samples", type=int, help="transactions per CTP run (100; 10 with --quick)")
    parser.add_argument("--modes", default=",".join(MODES), help="durable,default (both)")
    parser.add_argument("--parts", default=",".join(PARTS), help="core,spark,rss (all)")
    parser.add_argument("--rss-partitions", type=int, help="partitions of the RSS scenario (1,000; 100 with --quick)")
    parser.add_argument(
        "--rss-producers",
        type=int,
        help="idempotent producers of the RSS scenario (10,000; 500 with --quick)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args(argv)
    modes = tuple(m for m in args.modes.split(",") if m)
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        parser.error(f"--modes takes a comma-separated subset of {','.join(MODES)}; got {args.modes!r}")
    parts = tuple(p for p in args.parts.split(",") if p)
    if not parts or any(p not in PARTS for p in parts):
        parser.error(f"--parts takes a comma-separated subset of {','.join(PARTS)}; got {args.parts!r}")
    settings = Settings(
        runs=args.runs or (1 if args.quick else 5),
        records=max(64, (args.records or (640 if args.quick else 51_200)) // 64 * 64),
        seconds=args.seconds or (1.0 if args.quick else 2.0),
        ctp_samples=args.ctp_samples or (10 if args.quick else 100),
        modes=modes,
        parts=parts,
        spark_rows=args.spark_rows or (max(64, args.records or 640) if args.quick else 10_240),
        rss_partitions=args.rss_partitions or (100 if args.quick else 1000),
        rss_producers=args.rss_producers or (500 if args.quick else 10_000),
    )
    table, path = run(settings, args.out)
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.markdown import Markdown

        Console().print(Markdown(table))
    else:
        print(table)
    print(f"\nwritten: {path} and its plots (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
