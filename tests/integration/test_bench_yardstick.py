"""``make bench`` end to end in its smallest form: oncelog and Apache Kafka 4.4 (a real broker) in one run.

The harness runs as ``python -m bench.yardstick --quick`` in one mode, without the Spark row (``--parts core,rss``:
a SparkSession and four streaming queries would add a minute; ``make bench-quick`` runs it) and with the RSS
scenario at 10 partitions and 20 producers; the test checks the printed Markdown table and the written JSON carry
every other figure of the yardstick for both systems, with a number and a ratio. It checks presence and sanity
(positive figures, a ratio consistent with them), never how fast anything is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from oncelog.testing.kafka import fetch_kafka, kafka_libs

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
ONCELOG, KAFKA = "oncelog", "kafka"
DURABLE = "fsync on (oncelog flush=sync, Kafka flush.messages=1)"
EXPECTED = {
    # the figures of issue 20's table (Spark excepted): key in the JSON -> label of its table row, in the durable mode
    "produce_1024_batch": "produce 1 KiB, send_batch()",
    "produce_100_batch": "produce 100 B, send_batch()",
    "produce_1024_arrow": "produce 1 KiB, send_arrow()",
    "produce_100_arrow": "produce 100 B, send_arrow()",
    "produce_1024_send": "produce 1 KiB, per-record send()",
    "produce_100_send": "produce 100 B, per-record send()",
    "txn_ratio": "transactional ÷ idempotent, 100 ms commits",
    "small_txn_1": "small transactions, 1 producer",
    "small_txn_8": "small transactions, 8 producers",
    "small_txn_32": "small transactions, 32 producers",
    "ctp_p50_ms": "consume-transform-produce p50",
    "ctp_p99_ms": "consume-transform-produce p99",
    "consume_mb_s": "read_committed consume",
    "consume_arrow_mb_s": "read_committed consume into Arrow, poll_arrow()",
    "cpu_s_per_gb": "server CPU per GB produced",
    "cpu_s_per_1000_txn": "server CPU per 1,000 transactions",
    "rss_mb": "server RSS after the run",
}
RSS_SCENARIO = (
    "rss_scenario_mb",
    "RSS of one storage node (Kafka: the broker), 10 partitions, 20 idempotent producers",
)


@pytest.fixture(scope="module")
def kafka_jars() -> Path:
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is in the dev extra")
    libs = kafka_libs()
    if libs is None:
        if os.environ.get("ONCELOG_REQUIRE_KAFKA") != "1":
            pytest.skip("Apache Kafka is not fetched: run scripts/kafka/fetch.sh (or set ONCELOG_REQUIRE_KAFKA=1)")
        libs = fetch_kafka()
    return libs


@pytest.mark.timeout(300)
def test_the_quick_yardstick_prints_and_writes_every_figure_for_oncelog_and_kafka(
    kafka_jars: Path, tmp_path: Path
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.yardstick", "--quick", "--modes", "durable", "--records", "256",
         "--seconds", "0.3", "--ctp-samples", "3", "--parts", "core,rss", "--rss-partitions", "10",
         "--rss-producers", "20", "--out", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]

    (json_path,) = tmp_path.glob("*.json")
    document = json.loads(json_path.read_text())
    rows = {(row["figure"], row["mode"]): row for row in document["rows"]}
    # the RSS scenario runs in the default mode (no fsync per write) whatever --modes says
    assert set(rows) == {(key, "durable") for key in EXPECTED} | {(RSS_SCENARIO[0], "default")}
    for key, row in rows.items():
        for side in (ONCELOG, KAFKA):
            runs = row[side]["runs"]
            assert len(runs) == 1 and runs[0] > 0, f"{key} {side}: {row[side]}"
        assert row["ratio"] == pytest.approx(row[ONCELOG]["runs"][0] / row[KAFKA]["runs"][0]), key
    for plot in document["plots"]:
        assert (tmp_path / plot).stat().st_size > 1000, plot

    table_lines = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    for label in EXPECTED.values():
        (line,) = [x for x in table_lines if x.startswith(f"| {label} |")]
        assert DURABLE in line and "missing" not in line, line
    (line,) = [x for x in table_lines if x.startswith(f"| {RSS_SCENARIO[1]} |")]
    assert "fsync off" in line and "missing" not in line, line
