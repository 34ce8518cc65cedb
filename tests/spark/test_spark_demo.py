"""`oncelog spark-demo` (the main job behind `make run`): the orders pipeline survives driver SIGKILLs."""

from __future__ import annotations

from collections.abc import Callable

import pytest

DEMO = ("--orders", "1500", "--rate", "500", "--max-records-per-trigger", "300", "--seed", "5")


# the demo runs two Spark drivers one after another (about 100 s on an idle 2-core machine); the subprocess
# deadline comes first (then 90 s for its Ctrl-C cleanup) so a slow run fails with the demo's own output
@pytest.mark.timeout(420)
def test_orders_pipeline_exactly_once_through_driver_sigkill(run_spark_demo: Callable[..., tuple]) -> None:
    rows, stdout = run_spark_demo(*DEMO, "--kills", "1", timeout_s=300)
    assert "every order is in the output exactly once" in stdout
    assert rows["orders produced"] == rows["enriched orders (read_committed)"] == "1,500"
    assert rows["duplicates"] == rows["missing"] == rows["not matching the reference function"] == "0"
    assert rows["driver SIGKILLs / restarts from checkpoint"] == "1 / 1"
