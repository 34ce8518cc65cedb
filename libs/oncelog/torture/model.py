"""The model the history checker reasons over (design/torture.md §2): the anomaly classes, the result, and the
history indexed into calls, sends and reads. The rules that find anomalies are in :mod:`oncelog.torture.checker`."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.torture.history import Op

WRITE_OPS = ("produce", "txn-commit", "txn-abort")

SAFETY_CLASSES = (
    "lost-write",
    "duplicate",
    "inconsistent-offset",
    "aborted-read",
    "torn-transaction",
    "read-above-watermark",
    "order-violation",
    "offset-gap",
    "offsets-without-outputs",
    "outputs-without-offsets",
    "offset-regression",
    "early-read",
    "realtime-order",
    "zombie-write",
    "epoch-regression",
    "G1c",
)
LIVENESS_CLASSES = ("transaction-hang", "lso-stuck", "consumer-stuck")
ALLOWED_CLASSES = ("G0", "G1c-ww")
"""Reported, never failing: Kafka orders writes per partition only (design/torture.md §2.3)."""

DEFAULT_CONFIG = {"txn_timeout_ms": 60_000, "margin_ms": 10_000, "consumer_progress_ms": 30_000}


@dataclass(frozen=True)
class Anomaly:
    cls: str
    explanation: str
    ops: tuple[int, ...]


@dataclass
class CheckResult:
    anomalies: dict[str, list[Anomaly]] = field(default_factory=dict)
    allowed: dict[str, list[Anomaly]] = field(default_factory=dict)
    ops_checked: int = 0

    @property
    def valid(self) -> bool:
        return not any(self.anomalies.values())

    def add(self, cls: str, explanation: str, ops: Sequence[int]) -> None:
        target = self.allowed if cls in ALLOWED_CLASSES else self.anomalies
        target.setdefault(cls, []).append(Anomaly(cls, explanation, tuple(ops)))

    def to_dict(self) -> dict[str, Any]:
        def dump(found: dict[str, list[Anomaly]]) -> dict[str, Any]:
            return {
                c: [{"explanation": a.explanation, "ops": list(a.ops)} for a in items] for c, items in found.items()
            }

        return {
            "valid": self.valid,
            "ops_checked": self.ops_checked,
            "anomalies": dump(self.anomalies),
            "allowed": dump(self.allowed),
        }


@dataclass
class Call:
    """An invoke and its completion (None: the history ended first)."""

    invoke: Op
    done: Op | None

    @property
    def op(self) -> Op:
        return self.done or self.invoke

    @property
    def outcome(self) -> str:
        """committed, aborted (proved never visible) or unknown."""
        if self.invoke.f == "txn-abort":
            return "aborted"
        if self.done is None or self.done.kind == "info":
            return "unknown"
        return "committed" if self.done.kind == "ok" else "aborted"

    def name(self) -> str:
        return self.op.describe()

    def value(self) -> dict[str, Any]:
        merged = dict(self.invoke.value)
        if self.done is not None:
            merged.update(self.done.value)
        return merged


@dataclass(frozen=True)
class Send:
    call: Call
    partition: str
    value: Any
    offset: int | None
    origin: tuple[str, int] | None


@dataclass(frozen=True)
class Seen:
    """One record returned by a read (a read op, or the reads inside a transaction)."""

    call: Call
    partition: str
    offset: int
    value: Any
    committed_isolation: bool


class History:
    """The history indexed for the checks."""

    def __init__(self, ops: Sequence[Op]) -> None:
        self.ops = list(ops)
        self.calls: list[Call] = []
        self.events: list[Op] = []  # single ops: watermarks, log, config, nemesis, fetch-offsets without invoke
        open_by_process: dict[str, Call] = {}
        for op in self.ops:
            if op.kind == "invoke":
                call = Call(op, None)
                open_by_process[op.process] = call
                self.calls.append(call)
            elif op.process in open_by_process and open_by_process[op.process].invoke.f == op.f:
                open_by_process.pop(op.process).done = op
            else:
                self.events.append(op)
        self.sends: list[Send] = []
        self.seen: list[Seen] = []
        for call in self.calls:
            value = call.value()
            if call.invoke.f in WRITE_OPS:
                for entry in value.get("sends", []):
                    origin = tuple(entry[3]) if len(entry) > 3 and entry[3] is not None else None
                    self.sends.append(Send(call, entry[0], entry[1], entry[2], origin))  # type: ignore[arg-type]
            if call.done is not None and call.done.kind == "ok" and call.invoke.f in ("read", "txn-commit"):
                isolation = value.get("isolation", "read_committed") == "read_committed"
                for partition, records in value.get("reads", {}).items():
                    for offset, record_value in records:
                        self.seen.append(Seen(call, partition, offset, record_value, isolation))
        self.writer: dict[Any, Send] = {}
        self.sends_to: dict[str, list[Send]] = defaultdict(list)
        for send in self.sends:
            self.writer.setdefault(send.value, send)
            self.sends_to[send.partition].append(send)
        self.drained: dict[str, Call] = {}
        for call in self.calls:
            value = call.value()
            if call.invoke.f == "read" and value.get("final") and call.done is not None and call.done.kind == "ok":
                for partition in value.get("reads", {}):
                    self.drained[partition] = call
        self.max_read: dict[str, Seen] = {}
        for seen in self.seen:
            best = self.max_read.get(seen.partition)
            if best is None or seen.offset > best.offset:
                self.max_read[seen.partition] = seen
        self.visible: dict[str, dict[int, Any]] = defaultdict(dict)
        self.readers: dict[Any, list[Seen]] = defaultdict(list)
        for seen in self.seen:
            self.readers[seen.value].append(seen)
            if seen.committed_isolation:
                self.visible[seen.partition][seen.offset] = seen.value
        self.config = dict(DEFAULT_CONFIG)
        for op in self.events:
            if op.f == "config":
                self.config.update(op.value)
        self.end_ns = max((op.time_ns for op in self.ops), default=0)

    def should_have_seen(self, send: Send) -> str | None:
        """Why `send` must be visible by now, or None when the history cannot tell."""
        drain = self.drained.get(send.partition)
        if drain is not None:
            return f"the final drain {drain.name()} read {send.partition} to its end"
        best = self.max_read.get(send.partition)
        if send.offset is not None and best is not None and best.offset > send.offset:
            return f"{best.call.name()} read {send.partition} up to offset {best.offset}, past offset {send.offset}"
        return None


def op_name(h: History, index: int) -> str:
    return h.ops[index].describe() if 0 <= index < len(h.ops) and h.ops[index].index == index else f"op {index}"


def ranges(offsets: list[int]) -> str:
    spans: list[str] = []
    start = prev = offsets[0]
    for o in [*offsets[1:], None]:  # type: ignore[list-item]
        if o is not None and o == prev + 1:
            prev = o
            continue
        spans.append(str(start) if start == prev else f"{start}-{prev}")
        if o is not None:
            start = prev = o
    return ", ".join(spans)
