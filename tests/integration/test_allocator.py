"""keep_large_buffers: a service's MiB-sized buffers reuse heap memory instead of faulting in fresh pages.

Each case runs in a fresh interpreter, since the thresholds are process-wide; the page faults are the process's
own count (``ru_minflt``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")

_CHURN = """
import json, resource, sys
from oncelog.rpc.allocator import keep_large_buffers
applied = keep_large_buffers() if sys.argv[1] == "keep" else False
payload = b"x" * (1 << 20)
for _ in range(20):  # warm up: the first buffers fault in whatever the policy
    bytes(bytearray(payload))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(200):  # what a storage node does per Fetch: a MiB copied into a new buffer, then freed
    copy = bytes(bytearray(payload))
    del copy
print(json.dumps({"applied": applied, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _churn(mode: str, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    done = subprocess.run(
        [sys.executable, "-c", _CHURN, mode], capture_output=True, text=True, env={**clean, **env}, check=True
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def test_kept_buffers_fault_in_no_new_pages_where_default_buffers_fault_in_every_one() -> None:
    default, kept = _churn("default"), _churn("keep")
    assert kept["applied"] is True
    # 400 MiB-sized buffers (copy and bytes) of 256 pages each: the default maps fresh pages for every one
    assert isinstance(default["faults"], int) and default["faults"] > 200 * 256
    assert isinstance(kept["faults"], int) and kept["faults"] < 1_000


def test_an_operators_own_allocator_setting_wins() -> None:
    outcome = _churn("keep", MALLOC_TRIM_THRESHOLD_="131072")
    assert outcome["applied"] is False
