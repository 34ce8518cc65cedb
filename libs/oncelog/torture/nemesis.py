"""The nemesis: seeded faults against a LocalCluster behind a FaultProxy, each logged with its timestamps.

Kinds (design/torture.md §3.2): ``kill`` (SIGKILL one process, restart it after a pause), ``pause``
(SIGSTOP, then SIGCONT: a process that wakes up believing it still leads), ``partition`` (isolate one process
through the proxies, both ways or one way), ``flaky`` (drop a share of the chunks on the clients' links to
storage: replies lost after the write applied, so producers retry), ``disk`` (SIGKILL a storage node, delete its
data directory, restart it empty: it must copy everything back from its replicas), ``catalog``
(restart the PostgreSQL catalog, when the cluster runs on one), ``zombie`` (the clients' writes to storage arrive
late while another instance takes over a live transactional id: the old instance is a zombie whose late writes
must be refused), ``fsync`` (a storage node's fsyncs become slow, or fail with EIO and the node is restarted) and
``lag-kill`` (replication between storage nodes slowed, then a storage node killed: whatever
it acknowledged must already be on the survivors), ``lease-pause`` (SIGSTOP a transaction coordinator for two to
three of its leases, so the other takes its shards over, then SIGCONT: it wakes up believing it still serves
them). Every fault start and stop is a ``nemesis``
event of the history (``action``, ``fault``, ``targets``), so a report can draw them and a seed replays them.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.testing import LocalCluster
from oncelog.torture.proxy import CLIENT, FaultProxy, Rule
from oncelog.vocabulary import Role

KINDS = ("kill", "pause", "partition", "flaky", "disk", "fsync", "catalog", "zombie", "lag-kill", "lease-pause")
FSYNC_CONTROL = "fsync-faults"
"""Folder (under the cluster's data directory) of the slow/failing fsync switches (torture/fsync_hook)."""


@dataclass
class Episode:
    kind: str
    targets: list[str]
    start_ns: int
    stop_ns: int | None = None
    detail: dict[str, Any] = field(default_factory=dict)


class Nemesis:
    """Runs one fault at a time until :meth:`stop`: every kind of ``kinds`` once per cycle, in an order, on
    targets and for durations chosen by ``seed``.

    Args:
        cluster: the cluster under test (its processes are the targets).
        proxy: the proxy in front of it (partitions and drops).
        kinds: the enabled fault kinds.
        seed: every choice (kind, target, durations) comes from it.
        record: called with ``(action, fault, targets, detail)`` at each start and stop (the history writer).
        quiet_s: no fault in the first seconds; gap_s / hold_s: mean pause between faults and how long one lasts.
        catalog_restart: restarts the catalog database (``catalog`` kind); None disables that kind.
        hijack: runs InitProducerId for a live transactional id of the workloads (``zombie`` kind).
    """

    def __init__(
        self,
        cluster: LocalCluster,
        proxy: FaultProxy,
        kinds: Sequence[str],
        seed: int,
        record: Callable[[str, str, list[str], dict[str, Any]], None],
        *,
        quiet_s: float = 3.0,
        gap_s: float = 2.0,
        hold_s: float = 3.0,
        catalog_restart: Callable[[], None] | None = None,
        hijack: Callable[[], None] | None = None,
    ) -> None:
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown nemesis kinds {sorted(unknown)}; choose from {', '.join(KINDS)}")
        if "catalog" in kinds and catalog_restart is None:
            raise ValueError("the catalog fault restarts the catalog database: run the cluster on PostgreSQL")
        self.cluster, self.proxy, self.kinds = cluster, proxy, list(kinds)
        self.rng = random.Random(seed)
        self.record = record
        self.quiet_s, self.gap_s, self.hold_s = quiet_s, gap_s, hold_s
        self.catalog_restart = catalog_restart
        self.hijack = hijack
        self.episodes: list[Episode] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="nemesis", daemon=True)
        self._paused: set[str] = set()

    # -- public ----------------------------------------------------------------------------------------

    def start(self) -> Nemesis:
        if self.kinds:
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop injecting, heal everything (resume, restart, clear the proxies) and wait for it."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(120)
        self.heal()

    def counts(self) -> Counter[str]:
        return Counter(e.kind for e in self.episodes)

    def active(self) -> list[Episode]:
        return [e for e in self.episodes if e.stop_ns is None]

    def heal(self) -> None:
        for node_id in list(self._paused):
            self._signal(node_id, signal.SIGCONT)
        self._paused.clear()
        self.proxy.clear()
        for node in self.cluster.nodes:
            if not node.alive():
                self._restart(node.node_id)

    # -- loop ------------------------------------------------------------------------------------------

    def _run(self) -> None:
        if self._stop.wait(self.quiet_s):
            return
        cycle: list[str] = []
        while not self._stop.is_set():
            if not cycle:  # every enabled kind once per cycle, in a seeded order
                cycle = self.rng.sample(self.kinds, len(self.kinds))
            kind = cycle.pop()
            hold = self.rng.uniform(0.5, 2.0) * self.hold_s
            try:
                self._episode(kind, hold)
            except Exception as failure:  # a fault that could not be applied is reported, the run goes on
                self.errors.append(f"{kind}: {failure!r}")
            if self._stop.wait(self.rng.expovariate(1.0 / self.gap_s)):
                return

    def _episode(self, kind: str, hold: float) -> None:
        nodes = [n.node_id for n in self.cluster.nodes]
        storage = [n.node_id for n in self.cluster.nodes if n.service == Role.PARTITION_STORAGE]
        if kind == "kill":
            target = self.rng.choice(nodes)
            episode = self._begin(kind, [target], {})
            self.cluster.kill(target)
            self._stop.wait(hold)
            self._restart(target)
        elif kind == "pause":
            target = self.rng.choice(nodes)
            episode = self._begin(kind, [target], {})
            self._paused.add(target)
            self._signal(target, signal.SIGSTOP)
            self._stop.wait(hold)
            self._signal(target, signal.SIGCONT)
            self._paused.discard(target)
        elif kind == "lease-pause":
            coordinators = [n.node_id for n in self.cluster.nodes if n.service == Role.TXN_COORDINATOR]
            target = self.rng.choice(coordinators)
            lease_s = int(self.cluster.node(target).env.get("ONCELOG_TXN_COORDINATOR_LEASE_MS", "10000")) / 1000
            held = self.rng.uniform(1.3, 2.0) * lease_s
            episode = self._begin(kind, [target], {"hold_s": round(held, 2)})
            self._paused.add(target)
            self._signal(target, signal.SIGSTOP)
            self._stop.wait(held)
            self._signal(target, signal.SIGCONT)
            self._paused.discard(target)
        elif kind == "partition":
            target = self.rng.choice(nodes + (["catalog"] if self.catalog_restart is not None else []))
            way = "inbound" if target == "catalog" else self.rng.choice(["both", "inbound", "outbound"])
            episode = self._begin(kind, [target], {"way": way})
            self._isolate(target, way, nodes)
            self._stop.wait(hold)
            self.proxy.clear(destination=target)
            self.proxy.clear(source=target)
        elif kind == "flaky":
            probability = self.rng.choice([0.02, 0.05, 0.1])
            episode = self._begin(kind, list(storage), {"drop": probability})
            for target in storage:
                self.proxy.set_rule(CLIENT, target, Rule("drop", ("response",), probability=probability))
            self._stop.wait(hold)
            for target in storage:
                self.proxy.clear(CLIENT, target)
        elif kind == "disk":
            target = self.rng.choice(storage)
            episode = self._begin(kind, [target], {})
            self.cluster.kill(target)
            data_dir = self.cluster.node(target).env.get("ONCELOG_PARTITION_STORAGE_DATA_DIR", "")
            if data_dir:
                shutil.rmtree(data_dir, ignore_errors=True)
            self._stop.wait(hold)
            self._restart(target)
        elif kind == "zombie":
            delay = self.rng.choice([0.3, 0.6, 1.0])
            episode = self._begin(kind, list(storage), {"produce_delay_s": delay})
            for target in storage:
                self.proxy.set_rule(CLIENT, target, Rule("delay", ("request",), delay_s=delay))
            deadline = time.monotonic() + hold
            pauses = random.Random(self.rng.random())  # how many hijacks fit depends on time: not from self.rng
            while time.monotonic() < deadline and not self._stop.is_set():
                if self.hijack is not None:
                    self.hijack()
                self._stop.wait(pauses.uniform(0.2, 0.8))
            for target in storage:
                self.proxy.clear(CLIENT, target)
        elif kind == "lag-kill":
            target = self.rng.choice(storage)
            delay = self.rng.choice([0.5, 1.0])
            episode = self._begin(kind, [target], {"replication_delay_s": delay})
            for source in storage:
                for destination in storage:
                    if source != destination:
                        self.proxy.set_rule(source, destination, Rule("delay", delay_s=delay))
            self._stop.wait(min(hold, 2 * delay))
            self.cluster.kill(target)
            for source in storage:
                self.proxy.clear(source=source, destination=None)
            self._stop.wait(hold)
            self._restart(target)
        elif kind == "fsync":
            target = self.rng.choice(storage)
            mode = self.rng.choice(["slow", "fail"])
            seconds = self.rng.choice([0.05, 0.2, 0.5])
            episode = self._begin(kind, [target], {"mode": mode, **({"seconds": seconds} if mode == "slow" else {})})
            switch = self.cluster.data_dir / FSYNC_CONTROL / target / mode
            switch.parent.mkdir(parents=True, exist_ok=True)
            switch.write_text(str(seconds))
            self._stop.wait(hold)
            switch.unlink(missing_ok=True)
            if mode == "fail":  # after a failed fsync the page cache is unknown: the node must restart
                self.cluster.kill(target)
                self._restart(target)
        elif kind == "catalog":
            assert self.catalog_restart is not None
            episode = self._begin(kind, ["catalog"], {})
            self.catalog_restart()
        else:  # pragma: no cover - checked in __init__
            raise ValueError(kind)
        self._end(episode)

    def _isolate(self, target: str, way: str, nodes: list[str]) -> None:
        others = [n for n in nodes if n != target] + [CLIENT]
        blackhole = Rule("blackhole")
        for other in others:
            if way in ("both", "inbound"):
                self.proxy.set_rule(other, target, blackhole)  # nobody reaches the target
            if way in ("both", "outbound") and other != CLIENT:
                self.proxy.set_rule(target, other, blackhole)  # the target reaches nobody

    def _begin(self, kind: str, targets: list[str], detail: dict[str, Any]) -> Episode:
        episode = Episode(kind, targets, time.monotonic_ns(), detail=detail)
        self.episodes.append(episode)
        self.record("start", kind, targets, detail)
        return episode

    def _end(self, episode: Episode) -> None:
        episode.stop_ns = time.monotonic_ns()
        self.record("stop", episode.kind, episode.targets, episode.detail)

    def _signal(self, node_id: str, sig: signal.Signals) -> None:
        node = self.cluster.node(node_id)
        if node.process is not None and node.alive():
            os.kill(node.process.pid, sig)  # our own child, by its pid

    def _restart(self, node_id: str) -> None:
        for attempt in range(3):
            try:
                self.cluster.restart(node_id, timeout=90)
                return
            except Exception as failure:
                if attempt == 2:
                    self.errors.append(f"restart {node_id}: {failure!r}")
                self.cluster.kill(node_id)
