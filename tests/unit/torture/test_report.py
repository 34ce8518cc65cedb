"""The run report: the JSON carries the seed and the command that replays the run; the timeline is a PNG."""

from __future__ import annotations

import json
from pathlib import Path

from oncelog.torture import report
from oncelog.torture.model import CheckResult
from oncelog.torture.runner import TortureConfig, TortureResult


def _result(tmp_path: Path, anomaly: bool) -> TortureResult:
    check = CheckResult(ops_checked=40)
    if anomaly:
        check.add("duplicate", "value 7 at two offsets", [3, 9])
    second = 1_000_000_000
    return TortureResult(
        config=TortureConfig(data_dir=tmp_path, seconds=90, seed=42, nemesis=("kill", "zombie"), mutant="skip-dedup"),
        history=tmp_path / "history.jsonl",
        check=check,
        episodes=[{"kind": "kill", "targets": ["partition-storage-0"], "start_s": 2.0, "stop_s": 5.0}],
        counts={"ok": 30, "info": 2},
        nemesis_errors=[],
        started_ns=0,
        completions=[(i * second // 4, "ok") for i in range(30)],
        duration_s=8.0,
    )


def test_report_json_names_the_seed_the_replay_command_and_the_anomalies(tmp_path: Path) -> None:
    json_path, png = report.write(_result(tmp_path, anomaly=True), tmp_path)
    data = json.loads(json_path.read_text())
    assert data["valid"] is False and data["seed"] == 42 and data["fault_episodes"] == {"kill": 1}
    assert data["anomalies"]["duplicate"][0]["ops"] == [3, 9]
    assert "--seed 42" in data["reproduce"] and "--mutant skip-dedup" in data["reproduce"]
    assert "--minutes 1.5" in data["reproduce"] and "--nemesis kill,zombie" in data["reproduce"]
    assert png is not None and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_clean_run_is_valid_in_the_report(tmp_path: Path) -> None:
    data = report.to_dict(_result(tmp_path, anomaly=False))
    assert data["valid"] is True and data["anomalies"] == {}
