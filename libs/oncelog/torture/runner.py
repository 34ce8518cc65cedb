"""One torture run: a LocalCluster behind a FaultProxy, the workloads, the nemesis, the final drain, the check.

``run(TortureConfig(...))`` returns a :class:`TortureResult`; ``on_tick`` sees a :class:`Snapshot` twice a
second (the live display). Everything random comes from ``seed``; the history (``history.jsonl``), the service
logs and the report land in ``data_dir`` (design/torture.md §3).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog.client import AdminClient, Consumer, NewTopic, Producer
from oncelog.client.records import TopicPartition
from oncelog.testing import LocalCluster
from oncelog.testing.postgres import PostgresInstance, find_postgres_bin, postgres_instance
from oncelog.torture import mutants
from oncelog.torture.checker import check
from oncelog.torture.history import HistoryWriter, read_history
from oncelog.torture.model import CheckResult
from oncelog.torture.nemesis import FSYNC_CONTROL, Nemesis
from oncelog.torture.proxy import FaultProxy
from oncelog.torture.workloads import (
    TOPICS,
    TXN_TIMEOUT_MS,
    WORKLOADS,
    History,
    Probe,
    Transactional,
    Worker,
    build,
    pname,
    record_value,
)

SERVICE_ENV = {
    "ONCELOG_GROUP_OFFSETS_SESSION_TIMEOUT_MS": "4000",
    "ONCELOG_GROUP_OFFSETS_HEARTBEAT_INTERVAL_MS": "400",
    "ONCELOG_TXN_COORDINATOR_ABORT_CHECK_INTERVAL_MS": "500",
    "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MS": "20",
    "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MAX_MS": "500",
    "ONCELOG_TXN_COORDINATOR_LEASE_MS": "3000",
    "ONCELOG_TXN_COORDINATOR_NODE_LEASE_MS": "3000",
    "ONCELOG_PARTITION_STORAGE_NODE_LEASE_MS": "3000",
    "ONCELOG_PARTITION_STORAGE_REPLICA_LAG_TIME_MAX_MS": "3000",
    "ONCELOG_PID_ALLOCATOR_NODE_LEASE_MS": "3000",
    "ONCELOG_GROUP_OFFSETS_NODE_LEASE_MS": "3000",
}
"""Short leases and timeouts, so a killed or paused process is replaced within seconds."""
GROUPS = ("copy-in", "copy-mid")
NOT_LIVE = frozenset(
    {
        "lost-write",
        "torn-transaction",
        "offsets-without-outputs",
        "outputs-without-offsets",
        "transaction-hang",
        "consumer-stuck",
        "lso-stuck",
    }
)
"""Classes that need the final drain: in a history still being written a committed write may just not be read
yet (a read_uncommitted reader passed it, the read_committed one is behind); the live count leaves them out."""


@dataclass
class TortureConfig:
    data_dir: Path
    seconds: float = 60.0
    seed: int = 1
    nemesis: Sequence[str] = ("kill", "pause")
    workloads: Sequence[str] = WORKLOADS
    storage_nodes: int = 3
    replication_factor: int = 3
    coordinators: int = 2
    mutant: str = ""
    quiet_s: float = 3.0
    gap_s: float = 2.0
    hold_s: float = 3.0
    drain_timeout_s: float = 90.0
    catalog: str = "sqlite"
    """sqlite (a file, not behind the proxy) or postgres (a server behind the proxy: partitions can cut it, the
    catalog fault restarts it); the catalog fault picks postgres."""


@dataclass
class Snapshot:
    elapsed_s: float
    counts: Counter[str]
    ops_per_s: float
    faults: Counter[str]
    active: list[str]
    anomalies: int
    phase: str


@dataclass
class TortureResult:
    config: TortureConfig
    history: Path
    check: CheckResult
    episodes: list[dict[str, Any]]
    counts: dict[str, int]
    nemesis_errors: list[str]
    started_ns: int
    completions: list[tuple[int, str]] = field(default_factory=list)
    duration_s: float = 0.0
    proxy_stats: dict[str, int] = field(default_factory=dict)
    links: dict[str, int] = field(default_factory=dict)
    """Connections the proxy accepted per link, ``"source -> destination"``."""

    @property
    def valid(self) -> bool:
        return self.check.valid

    def fault_counts(self) -> dict[str, int]:
        return dict(Counter(e["kind"] for e in self.episodes))


def run(config: TortureConfig, on_tick: Callable[[Snapshot], None] | None = None) -> TortureResult:
    data_dir = Path(config.data_dir).resolve()
    shutil.rmtree(data_dir, ignore_errors=True)
    data_dir.mkdir(parents=True)
    holder: list[LocalCluster] = []
    proxy = FaultProxy(lambda: holder[0].pids() if holder else {}, seed=config.seed)

    def front(node_id: str, port: int) -> str:
        proxy.listen(node_id, ("127.0.0.1", port))
        return proxy.address(node_id)

    env = {**SERVICE_ENV, **mutants.service_env(config.mutant)}
    if "fsync" in config.nemesis:  # the slow/failing fsync switch of torture/fsync_hook, per storage node
        hook = str(Path(__file__).parent / "fsync_hook")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (hook, os.environ.get("PYTHONPATH", "")) if p)
        env["ONCELOG_TORTURE_FSYNC"] = str(data_dir / "cluster" / FSYNC_CONTROL)
    stack = contextlib.ExitStack()
    catalog = _catalog(config, proxy, stack)
    cluster = LocalCluster(
        data_dir / "cluster",
        storage_nodes=config.storage_nodes,
        replication_factor=config.replication_factor,
        database_url=proxy_url(catalog, proxy) if catalog is not None else "",
        replicas={"txn-coordinator": config.coordinators, "group-offsets": config.coordinators, "pid-allocator": 2},
        env=env,
        front=front,
        interpreter_options=mutants.interpreter_options(config.mutant),
    )
    holder.append(cluster)
    history_path = data_dir / "history.jsonl"
    writer = HistoryWriter(history_path)
    history = History(writer)
    started = time.monotonic_ns()
    nemesis: Nemesis | None = None
    workers: list[Worker] = []
    live = _LiveCheck(history_path, writer, history)
    try:
        cluster.start(timeout=120)
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topics(
                [NewTopic(t, num_partitions=n, replication_factor=config.replication_factor) for t, n in TOPICS.items()]
            )
        history.append(
            "harness",
            "info",
            "config",
            {
                "txn_timeout_ms": TXN_TIMEOUT_MS,
                "margin_ms": 30_000,
                "consumer_progress_ms": 60_000,
                "seed": config.seed,
            },
        )
        workers = build(config.workloads, cluster.bootstrap, history, config.seed)

        def record(action: str, fault: str, targets: list[str], detail: dict[str, Any]) -> None:
            history.append(
                "nemesis", "info", "nemesis", {"action": action, "fault": fault, "targets": targets, **detail}
            )

        hijacker = random.Random(config.seed)
        targets = sorted(w.txn_id for w in workers if isinstance(w, Transactional))

        def hijack() -> None:
            if targets:
                _hijack(cluster.bootstrap, history, hijacker.choice(targets))

        nemesis = Nemesis(
            cluster,
            proxy,
            config.nemesis,
            config.seed,
            record,
            quiet_s=config.quiet_s,
            gap_s=config.gap_s,
            hold_s=config.hold_s,
            hijack=hijack,
            catalog_restart=catalog.restart if catalog is not None else None,
        )
        for worker in workers:
            worker.start()
        nemesis.start()
        deadline = time.monotonic() + config.seconds
        while time.monotonic() < deadline:
            if on_tick is not None:
                on_tick(_snapshot(started, history, nemesis, live, "running"))
            live.maybe_check()
            time.sleep(0.5)
        if on_tick is not None:
            on_tick(_snapshot(started, history, nemesis, live, "healing"))
        nemesis.stop()
        for worker in workers:
            worker.stopping.set()
        for worker in workers:
            worker.join(30)
        if on_tick is not None:
            on_tick(_snapshot(started, history, nemesis, live, "draining"))
        _drain(cluster.bootstrap, history, config.drain_timeout_s, config.workloads)
    finally:
        for worker in workers:
            worker.stopping.set()
        if nemesis is not None:
            nemesis.stop()
        cluster.stop()
        proxy.close()
        stack.close()
        writer.close()
    result = check(read_history(history_path))
    _check_bank(result, history, history_path)
    episodes = [
        {
            "kind": e.kind,
            "targets": e.targets,
            "start_s": (e.start_ns - started) / 1e9,
            "stop_s": None if e.stop_ns is None else (e.stop_ns - started) / 1e9,
            **e.detail,
        }
        for e in (nemesis.episodes if nemesis else [])
    ]
    return TortureResult(
        config=config,
        history=history_path,
        check=result,
        episodes=episodes,
        counts=dict(history.counts),
        nemesis_errors=list(nemesis.errors if nemesis else []),
        started_ns=started,
        completions=list(history.completions),
        duration_s=(time.monotonic_ns() - started) / 1e9,
        proxy_stats=dict(proxy.stats),
        links={f"{s} -> {d}": n for (s, d), n in sorted(proxy.links.items())},
    )


def _catalog(config: TortureConfig, proxy: FaultProxy, stack: contextlib.ExitStack) -> PostgresInstance | None:
    """A PostgreSQL catalog behind the proxy (``catalog`` listener) when the run asks for one."""
    if config.catalog != "postgres" and "catalog" not in config.nemesis:
        return None
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        raise RuntimeError("a PostgreSQL catalog needs PostgreSQL installed (apt-get install -y postgresql)")
    instance = stack.enter_context(postgres_instance(bin_dir))
    proxy.listen("catalog", ("127.0.0.1", _port(instance.url)))
    return instance


def _port(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


def proxy_url(catalog: PostgresInstance, proxy: FaultProxy) -> str:
    """The catalog URL with the proxy's listener in place of the server's port."""
    return catalog.url.replace(f":{_port(catalog.url)}/", f":{proxy.address('catalog').rsplit(':', 1)[1]}/")


def _hijack(bootstrap: str, history: History, txn_id: str) -> None:
    """Another instance of ``txn_id`` runs InitProducerId: the workload's instance becomes a zombie."""
    history.append("hijack", "invoke", "init-producer", {}, txn_id=txn_id)
    try:
        with Producer(bootstrap, transactional_id=txn_id, transaction_timeout_ms=TXN_TIMEOUT_MS) as producer:
            producer.init_transactions(timeout=10)
            ident = producer.producer_id_and_epoch
            assert ident is not None
            value = {"producer_id": ident.producer_id, "epoch": ident.epoch}
            history.append("hijack", "ok", "init-producer", value, txn_id=txn_id, **value)
    except Exception as failure:
        history.append("hijack", "info", "init-producer", {}, txn_id=txn_id, error=repr(failure)[:300])


class _LiveCheck:
    """Checks the history so far, for the live display's anomaly count: in a checker process of its own (a check in
    this process would hold the interpreter the workloads run in), at most every 10 s and never more than a quarter
    of the time (a check of a long run's history takes seconds)."""

    def __init__(self, path: Path, writer: HistoryWriter, history: History) -> None:
        self.path, self.writer, self.history = path, writer, history
        self.anomalies = 0
        self._thread: threading.Thread | None = None
        self._next = time.monotonic() + 10

    def maybe_check(self) -> None:
        if time.monotonic() < self._next or (self._thread is not None and self._thread.is_alive()):
            return
        with self.history.lock:
            self.writer.flush()
        self._thread = threading.Thread(target=self._check, daemon=True)
        self._thread.start()

    def _check(self) -> None:
        started = time.monotonic()
        try:
            done = subprocess.run(
                [sys.executable, "-m", "oncelog.torture.checker", "--json", str(self.path)],
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            anomalies = json.loads(done.stdout).get("anomalies", {})
        except (subprocess.TimeoutExpired, ValueError):  # a line written while it was read: next time
            return
        finally:
            self._next = time.monotonic() + max(10.0, 3 * (time.monotonic() - started))
        self.anomalies = sum(len(v) for k, v in anomalies.items() if k not in NOT_LIVE)


def _snapshot(started: int, history: History, nemesis: Nemesis | None, live: _LiveCheck, phase: str) -> Snapshot:
    now = time.monotonic_ns()
    recent = sum(1 for t, kind in history.completions[-2000:] if kind == "ok" and now - t < 5e9)
    return Snapshot(
        elapsed_s=(now - started) / 1e9,
        counts=Counter(history.counts),
        ops_per_s=recent / 5.0,
        faults=nemesis.counts() if nemesis else Counter(),
        active=[f"{e.kind} {','.join(e.targets)}" for e in nemesis.active()] if nemesis else [],
        anomalies=live.anomalies,
        phase=phase,
    )


def _drain(bootstrap: str, history: History, timeout_s: float, workloads: Sequence[str]) -> None:
    """Read every partition from the start to its end at read_committed (the history's final drain), then the
    copier groups' committed offsets."""
    topics = [
        t
        for t in TOPICS
        if (t not in ("in", "mid", "out") or "ctp" in workloads) and (t != "abandoned" or "abandon" in workloads)
    ]
    parts = [TopicPartition(t, p) for t in topics for p in range(TOPICS[t])]
    deadline = time.monotonic() + timeout_s
    ends: dict[TopicPartition, int] = {}
    with Consumer(bootstrap, isolation_level="read_uncommitted") as probe:
        while not ends and time.monotonic() < deadline:
            try:
                ends = probe.end_offsets(parts, timeout=10)
            except Exception:
                time.sleep(0.5)
    history.append("drain", "invoke", "read", {"isolation": "read_committed", "final": True})
    reads: dict[str, list[list[int]]] = {pname(tp.topic, tp.partition): [] for tp in parts}
    done: set[TopicPartition] = set()
    with Consumer(bootstrap, isolation_level="read_committed", fetch_max_wait_ms=200) as consumer:
        consumer.assign(parts)
        consumer.seek_to_beginning(parts)
        while len(done) < len(parts) and time.monotonic() < deadline:
            try:
                for record in consumer.poll(timeout_ms=500, max_records=2000):
                    reads[pname(record.topic, record.partition)].append([record.offset, record_value(record.value)])
                for tp in parts:
                    if tp not in done and consumer.position(tp, timeout=5) >= ends.get(tp, 0):
                        done.add(tp)
            except Exception:
                time.sleep(0.2)
    finished = {k: v for k, v in reads.items() if any(pname(tp.topic, tp.partition) == k for tp in done)}
    history.append("drain", "ok", "read", {"isolation": "read_committed", "final": True, "reads": finished})
    missing = sorted(set(reads) - set(finished))
    if missing:
        history.append("drain-partial", "invoke", "read", {"isolation": "read_committed"})
        history.append(
            "drain-partial", "ok", "read", {"isolation": "read_committed", "reads": {k: reads[k] for k in missing}}
        )
        history.drain_incomplete = missing
    _final_watermarks(bootstrap, history, ends)
    if "ctp" not in workloads:
        return
    for group in GROUPS:
        source = "in" if group == "copy-in" else "mid"
        tps = [TopicPartition(source, p) for p in range(TOPICS[source])]
        history.append(group, "invoke", "fetch-offsets", {"group": group})
        try:
            with Consumer(bootstrap, group_id=group) as reader:
                committed = reader.committed(tps, timeout=30)
            offsets = {pname(tp.topic, tp.partition): m.offset for tp, m in committed.items() if m is not None}
            history.append(group, "ok", "fetch-offsets", {"group": group, "offsets": offsets})
        except Exception as failure:
            history.append(group, "info", "fetch-offsets", {"group": group}, error=repr(failure)[:300])


def _final_watermarks(bootstrap: str, history: History, ends: dict[TopicPartition, int]) -> None:
    """A ``watermarks`` event per partition after the drain (the HW and LSO one Fetch answered), so a last stable
    offset that never moved again is judged over the whole run (the lso-stuck check)."""
    probe = Probe("watermarks", bootstrap, history, lambda: 0, 0, topics=(), isolations=("read_committed",))
    probe.parts = sorted(ends)
    probe.positions = probe.at["read_committed"] = dict(ends)
    try:
        for _ in range(3):
            value = probe.fetch_all()
            for partition in sorted(value["hw"]):
                history.append(
                    "watermarks",
                    "info",
                    "watermarks",
                    {"partition": partition, "hw": value["hw"][partition], "lso": value["lso"][partition]},
                )
            if len(value["hw"]) == len(probe.parts):
                return
            probe.parts = [tp for tp in probe.parts if pname(tp.topic, tp.partition) not in value["hw"]]
    except Exception as failure:
        history.append("watermarks", "info", "watermarks", {}, error=repr(failure)[:300])
    finally:
        probe.reset()


def _check_bank(result: CheckResult, history: History, path: Path) -> None:
    """The amounts of the bank records a final drain read must sum to zero; a drain that could not finish is an
    anomaly too (nothing else would notice the writes it did not read)."""
    if history.drain_incomplete:
        result.add(
            "drain-incomplete", f"the final drain did not reach the end of {', '.join(history.drain_incomplete)}", []
        )
    if not history.bank:
        return
    visible: list[tuple[int, int]] = []
    for op in read_history(path):
        if op.process == "drain" and op.kind == "ok":
            for partition, records in op.value.get("reads", {}).items():
                if partition.startswith("bank-"):
                    visible.extend((op.index, v) for _, v in records)
    total = sum(history.bank.get(v, 0) for _, v in visible)
    if total != 0:
        result.add(
            "bank-imbalance",
            f"the visible bank records sum to {total}, not 0: a transfer is partly visible",
            sorted({i for i, _ in visible})[:1],
        )
