"""Service binaries take no arguments: ``--help`` prints every setting and exits before anything is opened."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SERVICES = ["pid_allocator", "txn_coordinator", "partition_storage", "group_offsets", "kafka_gateway"]

pytestmark = pytest.mark.timeout(120)


def run(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ONCELOG_")}
    return subprocess.run(
        [sys.executable, "-m", f"oncelog.{module}", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("module", SERVICES)
def test_help_lists_the_settings_and_creates_nothing(module: str, tmp_path: Path) -> None:
    done = run(module, "--help", cwd=tmp_path)
    name = module.replace("_", "-")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: oncelog-{name} [--help]\n")
    assert f"  ONCELOG_{module.upper()}_LISTEN  (default '127.0.0.1:0')\n" in done.stdout
    assert "  ONCELOG_DATABASE_URL  (default 'sqlite:///.oncelog/catalog.db')\n" in done.stdout
    assert list(tmp_path.iterdir()) == [], "no catalog, no data directory"


def test_an_argument_is_refused_pointing_at_help(tmp_path: Path) -> None:
    done = run("pid_allocator", "--listen", "127.0.0.1:0", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "oncelog-pid-allocator: unexpected argument(s) --listen 127.0.0.1:0; settings come from environment "
        "variables (see oncelog-pid-allocator --help)\n"
    )
    assert list(tmp_path.iterdir()) == []
