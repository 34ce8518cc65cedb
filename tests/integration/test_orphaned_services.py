"""Services of a local cluster drain and exit when the process that started them dies without stopping them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STARTER = """
import json, sys, time
from pathlib import Path
from oncelog.testing import LocalCluster
cluster = LocalCluster(Path(sys.argv[1]), storage_nodes=1).start()
print(json.dumps([n.process.pid for n in cluster.nodes]), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); it has exited, its parent has just not reaped it yet
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][0] != "Z"


def test_services_exit_when_their_starter_is_killed(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path / "cluster")], stdout=subprocess.PIPE, text=True
    )
    try:
        line = starter.stdout.readline() if starter.stdout else ""
        pids = json.loads(line)
        assert len(pids) == 4 and all(_alive(pid) for pid in pids)
    finally:
        starter.send_signal(signal.SIGKILL)
        starter.wait()
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"still running after their starter died: {[p for p in pids if _alive(p)]}"
        time.sleep(0.1)
