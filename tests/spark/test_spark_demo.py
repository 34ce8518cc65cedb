"""`oncelog spark-demo` (the main job behind `make run`): the orders pipeline survives driver SIGKILLs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


# the demo runs three Spark drivers one after another (about 100 s on an idle 2-core machine); the subprocess
# deadline comes first so a slow run fails with the demo's own output instead of the suite's 120 s default
@pytest.mark.timeout(330)
def test_orders_pipeline_exactly_once_through_driver_sigkill(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key in ("PATH", "JAVA_HOME", "HOME", "LANG")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from oncelog.cli import main; main()",
            "spark-demo",
            "--orders",
            "1500",
            "--rate",
            "500",
            "--kills",
            "1",
            "--max-records-per-trigger",
            "300",
            "--seed",
            "5",
            "--data-dir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**env, "COLUMNS": "140"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "every order is in the output exactly once" in result.stdout
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.stdout.splitlines()
        if line.count("│") == 3
    }
    assert rows["orders produced"] == rows["enriched orders (read_committed)"] == "1,500"
    assert rows["duplicates"] == rows["missing"] == rows["not matching the reference function"] == "0"
    assert rows["driver SIGKILLs / restarts from checkpoint"] == "1 / 1"
