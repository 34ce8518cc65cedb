"""The workloads: client threads that drive the real client library and write the history (design/torture.md §3.3).

Each worker is one logical process of the history (``append-0``, ``idem-1``, ``bank-0``, ``copy-in-0``,
``rc-0``, ...), with at most one operation in flight. Values are unique integers across the run (their decimal
text is the record value), so a value names its writer. On any error a worker completes its operation as
``info`` (unknown: it may or may not have happened) and rebuilds its clients, as a crashed client would; a
transactional worker's new producer fences its old incarnation with InitProducerId.

* ``append``: transactions of 1-4 sends to the partitions of ``append``; 1 in 32 is aborted on purpose, and 1 in
  4 is held open 50-250 ms after its sends are written (so readers meet open transactions below the HW).
* ``idem``: idempotent, non-transactional producers (retries under dropped replies must not duplicate).
* ``bank``: transfers, a debit and a credit on two account partitions of ``bank`` in one transaction; the
  amounts of the visible records must sum to zero.
* ``ctp``: a consume-transform-produce chain ``in → mid → out``: a source writes ``in``; the copier group
  ``copy-in`` copies it to ``mid`` and ``copy-mid`` copies that to ``out``, each record with its origin, the
  consumed offsets sent to the same transaction; 1 in 16 copies is aborted on purpose and the copier rewinds.
* ``abandon``: a client that dies inside its transaction (a new transactional id every few seconds, dropped with
  a forced close that sends no EndTxn): only the coordinator's transaction timeout lets ``abandoned``'s last
  stable offset move on.
* readers: read_committed and read_uncommitted consumers polling the append, idem and bank topics.
* probes: a white-box reader that sends Fetch to the partition leaders itself (no consumer), at read_committed and
  read_uncommitted in turn, and records with each read the high watermark and last stable offset that the same
  Fetch answered: the checker's read-above-watermark and lso-stuck rules judge these (design/torture.md §3.3).
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from oncelog.client import Consumer, Producer
from oncelog.client.fetch_filter import CompletedFetch
from oncelog.client.records import TopicPartition
from oncelog.client.services import BlockingClient, FetchPosition
from oncelog.errors import OncelogError
from oncelog.rpc import ChannelFactory
from oncelog.torture.history import HistoryWriter
from oncelog.vocabulary import IsolationLevel

TOPICS: dict[str, int] = {"append": 3, "idem": 2, "bank": 4, "in": 2, "mid": 2, "out": 2, "abandoned": 1}
"""Topic → partitions of the workloads' topics."""
WORKLOADS = ("append", "idem", "bank", "ctp", "abandon", "readers", "probes")
TXN_TIMEOUT_MS = 10_000
CALL_TIMEOUT_S = 10.0
ABORT_P = 1 / 32
COPIER_ABORT_P = 1 / 16
HOLD_P = 1 / 4
"""Share of the append transactions held open 50-250 ms after their sends are written."""
ABANDON_EVERY_S = 4.0
PROBE_EVERY_S = 0.3
PROBE_PARTITION_BYTES = 256 * 1024


def record_value(raw: bytes | None) -> int:
    """A record's value as the history's integer (every workload writes decimal text)."""
    return int(raw or b"-1")


def pname(topic: str, partition: int) -> str:
    """The history's partition name."""
    return f"{topic}-{partition}"


class History:
    """A thread-safe HistoryWriter with the per-kind counters the live display shows."""

    def __init__(self, writer: HistoryWriter) -> None:
        self._writer = writer
        self.lock = threading.Lock()
        self.drain_incomplete: list[str] = []
        self.counts: Counter[str] = Counter()
        self.completions: list[tuple[int, str]] = []  # (time_ns, kind) of every completion, for the timeline
        self.bank: dict[int, int] = {}  # value → amount

    def append(self, process: str, kind: str, f: str, value: dict[str, Any] | None = None, **fields: Any) -> None:
        with self.lock:
            op = self._writer.append(process, kind, f, value, **fields)
            if kind != "invoke" and f not in ("nemesis", "config", "log", "watermarks"):
                self.counts[kind] += 1
                self.completions.append((op.time_ns, kind))


class Worker(threading.Thread):
    """One logical client: repeats :meth:`step` until the run stops; rebuilds its clients after errors."""

    def __init__(self, name: str, bootstrap: str, history: History, values: Callable[[], int], seed: int) -> None:
        super().__init__(name=name, daemon=True)
        self.process = name
        self.bootstrap = bootstrap
        self.h = history
        self.next_value = values
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.failures: list[str] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.step()
            except Exception as failure:  # a client error outside an op: rebuild and go on
                self.failures.append(repr(failure))
                self.reset()
                self.stopping.wait(0.2)
        self.reset()

    def step(self) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """Close the clients (they are rebuilt on the next step)."""

    def close_quietly(self, client: Producer | Consumer, timeout: float = 3) -> None:
        """Close ``client``; a failure to close is kept in ``failures`` for the report, not raised."""
        try:
            client.close(timeout=timeout)
        except Exception as failure:
            self.failures.append(f"close: {failure!r}")


class Transactional(Worker):
    """A worker with one transactional producer, recreated (and so fencing its predecessor) after errors."""

    txn_id = ""
    producer: Producer | None = None

    def ensure_producer(self) -> Producer:
        if self.producer is None:
            self.h.append(self.process, "invoke", "init-producer", {}, txn_id=self.txn_id)
            producer = Producer(
                self.bootstrap,
                transactional_id=self.txn_id,
                transaction_timeout_ms=TXN_TIMEOUT_MS,
                request_timeout_ms=5_000,
                delivery_timeout_ms=20_000,
                max_block_ms=15_000,
                linger_ms=0,
            )
            try:
                producer.init_transactions(timeout=CALL_TIMEOUT_S)
            except Exception as failure:
                self.h.append(self.process, "info", "init-producer", {}, txn_id=self.txn_id, error=repr(failure))
                producer.close(timeout=2)
                raise
            ident = producer.producer_id_and_epoch
            assert ident is not None
            value = {"producer_id": ident.producer_id, "epoch": ident.epoch}
            self.h.append(self.process, "ok", "init-producer", value, txn_id=self.txn_id, **value)
            self.producer = producer
        return self.producer

    def reset(self) -> None:
        if self.producer is not None:
            producer, self.producer = self.producer, None
            self.close_quietly(producer)

    def transaction(
        self,
        sends: Sequence[tuple[str, int, int, list[Any] | None]],
        *,
        abort: bool = False,
        reads: dict[str, list[list[int]]] | None = None,
        offsets: tuple[Consumer, dict[TopicPartition, int]] | None = None,
        hold_s: float = 0.0,
    ) -> bool:
        """One transaction of ``sends`` (topic, partition, value, origin); True when it committed. With ``hold_s``
        the sends are flushed (written and replicated) and the transaction stays open that long before its
        commit: data of an open transaction sits below the high watermark, which the last stable offset must not
        pass."""
        producer = self.ensure_producer()
        f = "txn-abort" if abort else "txn-commit"
        entries = [[pname(t, p), v, None, *([o] if o is not None else [])] for t, p, v, o in sends]
        value: dict[str, Any] = {"sends": entries}
        if reads is not None:
            value["reads"] = reads
        if offsets is not None:
            group = offsets[0].group_metadata().group_id
            value["offsets"] = {
                "group": group,
                "offsets": {pname(tp.topic, tp.partition): o for tp, o in offsets[1].items()},
            }
        ident = producer.producer_id_and_epoch
        fields: dict[str, Any] = {"txn_id": self.txn_id}
        if ident is not None:
            fields.update(producer_id=ident.producer_id, epoch=ident.epoch)
        self.h.append(self.process, "invoke", f, value, **fields)
        try:
            producer.begin_transaction()
            futures = [producer.send(t, str(v).encode(), partition=p) for t, p, v, _ in sends]
            if offsets is not None:
                producer.send_offsets_to_transaction(offsets[1], offsets[0].group_metadata(), timeout=CALL_TIMEOUT_S)
            if hold_s:
                producer.flush(timeout=CALL_TIMEOUT_S)
                self.stopping.wait(hold_s)
            if abort:
                producer.abort_transaction(timeout=CALL_TIMEOUT_S)
                self.h.append(self.process, "ok", f, value, **fields)
                return False
            value["commit_invoke_ns"] = time.monotonic_ns()
            producer.commit_transaction(timeout=CALL_TIMEOUT_S)
            for entry, future in zip(entries, futures, strict=True):
                entry[2] = future.result(timeout=CALL_TIMEOUT_S).offset
            self.h.append(self.process, "ok", f, value, **fields)
            return True
        except Exception as failure:
            self.h.append(self.process, "info", f, value, error=repr(failure)[:300], **fields)
            self.reset()
            return False


class AppendWorker(Transactional):
    def __init__(self, *args: Any, topic: str = "append") -> None:
        super().__init__(*args)
        self.txn_id = f"torture-{self.process}"
        self.topic = topic

    def step(self) -> None:
        sends = [
            (self.topic, self.rng.randrange(TOPICS[self.topic]), self.next_value(), None)
            for _ in range(self.rng.randint(1, 4))
        ]
        hold_s = self.rng.uniform(0.05, 0.25) if self.rng.random() < HOLD_P else 0.0
        self.transaction(sends, abort=self.rng.random() < ABORT_P, hold_s=hold_s)


class BankWorker(Transactional):
    """Transfers between the accounts (partitions) of ``bank``: a debit and a credit in one transaction."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.txn_id = f"torture-{self.process}"

    def step(self) -> None:
        source, target = self.rng.sample(range(TOPICS["bank"]), 2)
        amount = self.rng.randint(1, 100)
        debit, credit = self.next_value(), self.next_value()
        self.h.bank[debit], self.h.bank[credit] = -amount, amount
        sends = [("bank", source, debit, None), ("bank", target, credit, None)]
        self.transaction(sends, abort=self.rng.random() < ABORT_P)


class IdempotentWorker(Worker):
    """An idempotent producer: each op sends 1-5 values and waits for their acknowledgements."""

    producer: Producer | None = None

    def __init__(self, *args: Any, topic: str = "idem") -> None:
        super().__init__(*args)
        self.topic = topic

    def step(self) -> None:
        if self.producer is None:
            self.producer = Producer(
                self.bootstrap, request_timeout_ms=3_000, delivery_timeout_ms=20_000, max_block_ms=15_000, linger_ms=2
            )
        chosen = [(self.rng.randrange(TOPICS[self.topic]), self.next_value()) for _ in range(self.rng.randint(1, 5))]
        sends: list[list[Any]] = [[pname(self.topic, p), v, None] for p, v in chosen]
        self.h.append(self.process, "invoke", "produce", {"sends": sends})
        try:
            futures = [self.producer.send(self.topic, str(v).encode(), partition=p) for p, v in chosen]
            for entry, future in zip(sends, futures, strict=True):
                entry[2] = future.result(timeout=25).offset
            self.h.append(self.process, "ok", "produce", {"sends": sends})
        except Exception as failure:
            self.h.append(self.process, "info", "produce", {"sends": sends}, error=repr(failure)[:300])
            self.reset()

    def reset(self) -> None:
        if self.producer is not None:
            producer, self.producer = self.producer, None
            self.close_quietly(producer)


class Reader(Worker):
    """A consumer assigned every partition of ``topics``, at one isolation level; each poll is a ``read`` op."""

    consumer: Consumer | None = None

    def __init__(self, *args: Any, topics: Sequence[str] = ("append", "idem", "bank"), isolation: str) -> None:
        super().__init__(*args)
        self.topics, self.isolation = list(topics), isolation
        self.positions: dict[TopicPartition, int] = {}

    def step(self) -> None:
        if self.consumer is None:
            self.consumer = Consumer(
                self.bootstrap, isolation_level=self.isolation, request_timeout_ms=5_000, fetch_max_wait_ms=200
            )
            parts = [TopicPartition(t, p) for t in self.topics for p in range(TOPICS[t])]
            self.consumer.assign(parts)
            for tp, position in self.positions.items():
                self.consumer.seek(tp, position)
        self.h.append(self.process, "invoke", "read", {"isolation": self.isolation})
        try:
            records = self.consumer.poll(timeout_ms=500, max_records=200)
        except Exception as failure:
            self.h.append(self.process, "info", "read", {"isolation": self.isolation}, error=repr(failure)[:300])
            self.reset()
            return
        reads: dict[str, list[list[int]]] = {}
        for record in records:
            reads.setdefault(pname(record.topic, record.partition), []).append(
                [record.offset, record_value(record.value)]
            )
            self.positions[TopicPartition(record.topic, record.partition)] = record.offset + 1
        self.h.append(self.process, "ok", "read", {"isolation": self.isolation, "reads": reads})

    def reset(self) -> None:
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            self.close_quietly(consumer)


class Copier(Transactional):
    """One member of a copier group: polls ``source`` read_committed and copies each record to ``target`` with
    its origin in one transaction with the consumed offsets; after any error it rebuilds both clients and goes
    on from the group's committed offsets."""

    consumer: Consumer | None = None

    def __init__(self, *args: Any, source: str, target: str, group: str, slot: int) -> None:
        super().__init__(*args)
        self.source, self.target, self.group = source, target, group
        self.txn_id = f"torture-{group}-{slot}"

    def step(self) -> None:
        if self.consumer is None:
            self.consumer = Consumer(
                self.bootstrap,
                group_id=self.group,
                request_timeout_ms=5_000,
                fetch_max_wait_ms=200,
                max_poll_interval_ms=60_000,
            )
            self.consumer.subscribe([self.source])
        self.ensure_producer()
        records = self.consumer.poll(timeout_ms=500, max_records=20)
        if not records:
            return
        reads: dict[str, list[list[int]]] = {}
        sends: list[tuple[str, int, int, list[Any] | None]] = []
        next_offsets: dict[TopicPartition, int] = {}
        for record in records:
            name = pname(record.topic, record.partition)
            reads.setdefault(name, []).append([record.offset, record_value(record.value)])
            out = self.next_value()
            sends.append((self.target, record.partition % TOPICS[self.target], out, [name, record.offset]))
            next_offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
        abort = self.rng.random() < COPIER_ABORT_P
        if not self.transaction(sends, abort=abort, reads=reads, offsets=(self.consumer, next_offsets)):
            self.reset()  # rewind: the next consumer starts at the group's committed offsets

    def reset(self) -> None:
        super().reset()
        if self.consumer is not None:
            consumer, self.consumer = self.consumer, None
            self.close_quietly(consumer)


class Abandoner(Worker):
    """A client that dies inside its transaction: every few seconds a new transactional id writes 1-2 records
    to ``abandoned`` and is never heard of again. Only the coordinator's transaction timeout can abort the
    transaction and let the partition's last stable offset move on; its sends must never become visible."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.generation = 0

    def step(self) -> None:
        if self.stopping.wait(ABANDON_EVERY_S * self.rng.uniform(0.5, 1.5)):
            return
        self.generation += 1
        txn_id = f"torture-{self.process}-{self.generation}"
        partition, value = self.rng.randrange(TOPICS["abandoned"]), self.next_value()
        sends: list[list[Any]] = [[pname("abandoned", partition), value, None]]
        self.h.append(self.process, "invoke", "txn-abort", {"sends": sends}, txn_id=txn_id)
        producer = Producer(self.bootstrap, transactional_id=txn_id, transaction_timeout_ms=TXN_TIMEOUT_MS, linger_ms=0)
        try:
            producer.init_transactions(timeout=CALL_TIMEOUT_S)
            producer.begin_transaction()
            producer.send("abandoned", str(value).encode(), partition=partition)
            producer.flush(timeout=CALL_TIMEOUT_S)
            self.h.append(self.process, "info", "txn-abort", {"sends": sends}, txn_id=txn_id, error="abandoned")
        except Exception as failure:
            self.h.append(self.process, "info", "txn-abort", {"sends": sends}, txn_id=txn_id, error=repr(failure)[:300])
        finally:
            # the forced close sends no EndTxn, as a crashed client would not; a graceful close would abort the
            # transaction itself, and keeping the producer open instead would pile up one I/O thread and its
            # channels every few seconds for the whole run
            self.close_quietly(producer, timeout=0)


class Probe(Worker):
    """A white-box reader: Fetch sent to each partition leader by hand (one call per leader, no long poll), the
    records decoded with the consumer's own filter (:class:`CompletedFetch`, so aborted data and markers are
    dropped at read_committed), and each ``read`` op carrying per partition the ``hw`` and ``lso`` that the same
    Fetch answered. The consumer keeps those to itself; here the checker gets them for every read."""

    def __init__(self, *args: Any, topics: Sequence[str], isolations: Sequence[str]) -> None:
        super().__init__(*args)
        self.isolations = list(isolations)
        self.isolation = self.isolations[0]
        self.parts = [TopicPartition(t, p) for t in topics for p in range(TOPICS[t])]
        self.at: dict[str, dict[TopicPartition, int]] = {i: dict.fromkeys(self.parts, 0) for i in self.isolations}
        self.positions = self.at[self.isolation]
        self.turn = 0
        self.factory = ChannelFactory()
        self.channels: dict[str, Any] = {}
        self.leaders: dict[TopicPartition, tuple[str, int]] = {}

    def channel(self, address: str) -> Any:
        if address not in self.channels:
            self.channels[address] = self.factory.sync(address)
        return self.channels[address]

    def step(self) -> None:
        if self.stopping.wait(PROBE_EVERY_S):
            return
        self.isolation = self.isolations[self.turn % len(self.isolations)]  # one isolation level per read, in turn
        self.positions = self.at[self.isolation]
        self.turn += 1
        self.h.append(self.process, "invoke", "read", {"isolation": self.isolation})
        try:
            value = self.fetch_all()
        except Exception as failure:
            self.h.append(self.process, "info", "read", {"isolation": self.isolation}, error=repr(failure)[:300])
            self.reset()
            return
        self.h.append(self.process, "ok", "read", value)

    def fetch_all(self) -> dict[str, Any]:
        """One Fetch per leader for every partition; partitions whose leader is unknown or answers an error are
        left out of this read (and their leaders looked up again)."""
        calls = BlockingClient(self.channel, timeout_s=5.0)
        if not self.leaders:
            self.refresh(calls)
        isolation = IsolationLevel(self.isolation)
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in self.parts:
            if tp in self.leaders:
                by_leader.setdefault(self.leaders[tp][0], []).append(tp)
        reads: dict[str, list[list[int]]] = {}
        hws: dict[str, int] = {}
        lsos: dict[str, int] = {}
        stale = False
        lagging = False
        for address, tps in by_leader.items():
            positions = [
                FetchPosition(tp, self.positions[tp], self.leaders[tp][1], PROBE_PARTITION_BYTES) for tp in tps
            ]
            try:
                answers = calls.fetch(
                    address, positions, isolation=isolation, max_bytes=len(tps) * PROBE_PARTITION_BYTES
                )
            except OncelogError:
                stale = True
                continue
            for tp, answer in zip(tps, answers, strict=True):
                if answer.error is not None:
                    stale = True
                    continue
                name = pname(tp.topic, tp.partition)
                fetched = CompletedFetch(
                    tp,
                    answer.records,
                    fetch_offset=self.positions[tp],
                    isolation_level=isolation,
                    aborted_transactions=answer.aborted_transactions,
                )
                records = fetched.fetch_records(1 << 30)
                reads[name] = [[r.offset, record_value(r.value)] for r in records]
                hws[name], lsos[name] = answer.high_watermark, answer.last_stable_offset
                self.positions[tp] = max(self.positions[tp], fetched.next_fetch_offset)
                end = answer.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else answer.high_watermark
                lagging = lagging or self.positions[tp] < end
        if stale or len(hws) < len(self.parts):
            self.refresh(calls)
        value: dict[str, Any] = {"isolation": self.isolation, "reads": reads, "hw": hws, "lso": lsos}
        if len(hws) == len(self.parts) and not lagging:
            value["caught_up"] = True
        return value

    def refresh(self, calls: BlockingClient) -> None:
        topics = sorted({tp.topic for tp in self.parts})
        infos = calls.metadata(self.bootstrap.split(",")[0], topics)
        self.leaders = {
            TopicPartition(info.name, p.partition): (p.leader_address, p.leader_epoch)
            for info in infos
            for p in info.partitions
            if p.leader_address
        }

    def reset(self) -> None:
        channels, self.channels, self.leaders = self.channels, {}, {}
        for channel in channels.values():
            channel.close()


def build(workloads: Sequence[str], bootstrap: str, history: History, seed: int) -> list[Worker]:
    """The workers of the chosen workloads, each seeded from ``seed``."""
    unknown = set(workloads) - set(WORKLOADS)
    if unknown:
        raise ValueError(f"unknown workloads {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    counter = itertools.count(1)
    values = counter.__next__
    seeds = random.Random(seed)
    workers: list[Worker] = []

    def add(cls: Callable[..., Worker], name: str, **kwargs: Any) -> None:
        workers.append(cls(name, bootstrap, history, values, seeds.randrange(2**32), **kwargs))

    if "append" in workloads:
        for i in range(2):
            add(AppendWorker, f"append-{i}")
    if "idem" in workloads:
        for i in range(2):
            add(IdempotentWorker, f"idem-{i}")
    if "bank" in workloads:
        add(BankWorker, "bank-0")
    if "ctp" in workloads:
        add(IdempotentWorker, "source-0", topic="in")
        for i in range(2):
            add(Copier, f"copy-in-{i}", source="in", target="mid", group="copy-in", slot=i)
            add(Copier, f"copy-mid-{i}", source="mid", target="out", group="copy-mid", slot=i)
    if "abandon" in workloads:
        add(Abandoner, "abandon-0")
    if "readers" in workloads:
        add(Reader, "rc-0", isolation="read_committed")
        add(Reader, "ru-0", isolation="read_uncommitted")
    if "probes" in workloads:
        probed = [t for t in TOPICS if (t not in ("in", "mid", "out") or "ctp" in workloads)]
        probed = [t for t in probed if t != "abandoned" or "abandon" in workloads]
        add(Probe, "probe-0", topics=probed, isolations=("read_committed", "read_uncommitted"))
    return workers
