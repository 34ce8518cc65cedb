"""The nemesis schedule: seeded (a seed replays the same faults), every enabled kind each cycle, each fault
started and healed, on a recording stand-in for the cluster and the proxy (no process is started here)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from oncelog.torture.nemesis import Nemesis
from oncelog.torture.proxy import Rule


@dataclass
class _Node:
    node_id: str
    service: str
    env: dict[str, str] = field(default_factory=dict)
    process: None = None

    def alive(self) -> bool:
        return True


class _Cluster:
    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.nodes = [
            _Node("pid-allocator-0", "pid-allocator"),
            _Node("txn-coordinator-0", "txn-coordinator", {"ONCELOG_TXN_COORDINATOR_LEASE_MS": "20"}),
            *(_Node(f"partition-storage-{i}", "partition-storage") for i in range(3)),
        ]
        self.calls: list[tuple[str, str]] = []

    def node(self, node_id: str) -> _Node:
        return next(n for n in self.nodes if n.node_id == node_id)

    def kill(self, node_id: str) -> None:
        self.calls.append(("kill", node_id))

    def restart(self, node_id: str, timeout: float = 0) -> str:
        self.calls.append(("restart", node_id))
        return ""


class _Proxy:
    def __init__(self) -> None:
        self.rules: dict[tuple[str, str], Rule] = {}
        self.lock = threading.Lock()

    def set_rule(self, source: str, destination: str, rule: Rule) -> None:
        with self.lock:
            self.rules[(source, destination)] = rule

    def clear(self, source: str | None = None, destination: str | None = None) -> None:
        with self.lock:
            for link in list(self.rules):
                if (source is None or link[0] == source) and (destination is None or link[1] == destination):
                    del self.rules[link]


def _schedule(tmp_path: Path, seed: int, kinds: tuple[str, ...], episodes: int) -> tuple[list[Any], _Proxy]:
    events: list[tuple[str, str, list[str], dict[str, Any]]] = []
    done = threading.Event()

    def record(action: str, fault: str, targets: list[str], detail: dict[str, Any]) -> None:
        events.append((action, fault, targets, detail))
        if sum(1 for e in events if e[0] == "stop") >= episodes:
            done.set()

    proxy = _Proxy()
    nemesis = Nemesis(
        _Cluster(tmp_path),
        proxy,
        kinds,
        seed,
        record,
        quiet_s=0,
        gap_s=0.001,
        hold_s=0.005,  # type: ignore[arg-type]
    )
    nemesis.start()
    assert done.wait(30), f"only {events} in 30 s"
    nemesis.stop()
    return events[: 2 * episodes], proxy


def test_same_seed_replays_the_same_faults_on_the_same_targets(tmp_path: Path) -> None:
    kinds = ("kill", "partition", "flaky", "lag-kill", "zombie")
    first, _ = _schedule(tmp_path, 11, kinds, 8)
    again, _ = _schedule(tmp_path, 11, kinds, 8)
    other, _ = _schedule(tmp_path, 12, kinds, 8)
    assert first == again
    assert first != other


def test_every_kind_strikes_once_per_cycle_and_each_fault_is_healed(tmp_path: Path) -> None:
    kinds = ("kill", "partition", "flaky", "disk", "fsync")
    events, proxy = _schedule(tmp_path, 3, kinds, 10)
    starts = [e[1] for e in events if e[0] == "start"]
    assert sorted(starts[:5]) == sorted(kinds) and sorted(starts[5:10]) == sorted(kinds)
    for start, stop in zip(events[::2], events[1::2], strict=True):
        assert (start[0], stop[0], start[1:]) == ("start", "stop", stop[1:]), "each fault stops before the next"
    assert proxy.rules == {}, "no rule outlives its episode"


def test_unknown_kind_and_catalog_without_postgres_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown nemesis kinds"):
        Nemesis(_Cluster(tmp_path), _Proxy(), ["explode"], 1, lambda *a: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="PostgreSQL"):
        Nemesis(_Cluster(tmp_path), _Proxy(), ["catalog"], 1, lambda *a: None)  # type: ignore[arg-type]


def test_lease_pause_stops_a_transaction_coordinator_for_longer_than_its_lease(tmp_path: Path) -> None:
    """The fault aimed at a coordinator that wakes up after another took its shards: held 1.3-2 leases."""
    events, _ = _schedule(tmp_path, 7, ("lease-pause",), 3)
    for start, stop in zip(events[::2], events[1::2], strict=True):
        assert start[:3] == ("start", "lease-pause", ["txn-coordinator-0"]) and stop[0] == "stop"
        assert 0.026 <= start[3]["hold_s"] <= 0.04, start
