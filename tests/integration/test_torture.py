"""A bounded torture run in the default suite: the workloads under kill, pause and partition faults through the
fault proxies, the history checked; a fresh seed each run, printed so a failure replays (design/torture.md §3)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from oncelog.torture import report
from oncelog.torture.history import read_history
from oncelog.torture.runner import TortureConfig, TortureResult, run
from oncelog.torture.workloads import TOPICS, pname

pytestmark = pytest.mark.timeout(400)


def _run(tmp_path: Path, **overrides: object) -> TortureResult:
    seed = int(overrides.pop("seed", 0)) or random.SystemRandom().randrange(1, 2**31)  # type: ignore[call-overload]
    config = TortureConfig(data_dir=tmp_path / "torture", seed=seed, **overrides)  # type: ignore[arg-type]
    print(f"torture seed {seed}: replay with `oncelog torture --seed {seed} ...`")
    result = run(config)
    print(report.to_dict(result))
    return result


def test_bounded_run_under_kill_pause_and_partition_finds_no_anomaly(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        seconds=30,
        nemesis=("kill", "pause", "partition"),
        quiet_s=2,
        gap_s=1,
        hold_s=2,
        storage_nodes=3,
        replication_factor=2,
    )
    faults = result.fault_counts()
    assert {"kill", "pause", "partition"} <= set(faults), f"every fault kind must have struck: {faults}"
    assert all(e["stop_s"] is not None for e in result.episodes), "every fault healed"
    assert not result.nemesis_errors, result.nemesis_errors
    assert result.counts.get("ok", 0) >= 200, f"too little work to check: {result.counts}"
    # every link went through the proxies: clients to services, and services to one another
    sources = {link.split(" -> ")[0] for link in result.links}
    assert "client" in sources, result.links
    assert any(link.startswith("txn-coordinator-") and "partition-storage-" in link for link in result.links)
    assert any(link.count("partition-storage-") == 2 for link in result.links), "replication through the proxy"
    assert result.valid, result.check.to_dict()["anomalies"]
    # the probes recorded the HW and LSO their own fetches answered, for every partition, at both isolation levels
    ops = read_history(result.history)
    for isolation in ("read_committed", "read_uncommitted"):
        marked = {
            p
            for op in ops
            if op.process == "probe-0" and op.kind == "ok" and op.value.get("isolation") == isolation
            for p in op.value.get("hw", {})
        }
        assert marked == {pname(t, i) for t, n in TOPICS.items() for i in range(n)}, (isolation, marked)
    finals = {op.value["partition"] for op in ops if op.f == "watermarks" and "lso" in op.value}
    assert len(finals) == sum(TOPICS.values()), f"a watermarks event per partition after the drain: {finals}"
    assert (result.history.parent / "history.jsonl").stat().st_size > 0
    png = report.timeline(result, tmp_path / "timeline.png")
    assert png is not None and png.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.postgres
@pytest.mark.timeout(120)
def test_postgres_catalog_restart_keeps_its_data_and_port() -> None:
    """The catalog fault's restart: the same server comes back on the same port with what was committed."""
    import os

    import psycopg

    from oncelog.testing.postgres import find_postgres_bin, postgres_instance

    bin_dir = find_postgres_bin()
    if bin_dir is None:
        if os.environ.get("ONCELOG_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required (ONCELOG_REQUIRE_POSTGRES=1) but initdb was not found")
        pytest.skip("PostgreSQL is not installed")
    with postgres_instance(bin_dir) as instance:
        dsn = instance.url.replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        before = instance.process.pid
        instance.restart()
        assert instance.process.pid != before, "a new server process"
        with psycopg.connect(dsn, autocommit=True) as conn:
            assert conn.execute("SELECT v FROM kept").fetchall() == [(42,)]
