"""`oncelog demo` (`make demo`, the copier proof without Spark) proves its claim on a small run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_demo_copies_exactly_once_through_sigkills(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "from oncelog.cli import main; main()",
            "demo",
            "--records",
            "400",
            "--kills",
            "2",
            "--seed",
            "3",
            "--data-dir",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={"COLUMNS": "120", "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every input is in the output exactly once" in result.stdout
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in result.stdout.splitlines()
        if line.count("│") == 3
    }
    assert rows["inputs"] == rows["outputs (read_committed)"] == "400"
    assert rows["duplicates"] == rows["missing"] == "0"
