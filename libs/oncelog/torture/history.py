"""The torture history: one JSON object per operation event, appended as JSON Lines.

Format and the meaning of each field: design/torture.md §1.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

KINDS = ("invoke", "ok", "fail", "info")
"""invoke starts an operation; ok, fail (proved not to have happened) or info (unknown) completes it."""

OP_TYPES = (
    "produce",  # idempotent, non-transactional sends
    "txn-commit",  # a transaction that ends in a commit request (sends, reads, offsets)
    "txn-abort",  # a transaction the client aborted: none of its sends may become visible
    "read",  # one poll, or a final drain of whole partitions
    "init-producer",  # InitProducerId: the producer id and the epoch it returned (fences older epochs)
    "commit-offsets",  # a plain (non-transactional) offset commit
    "fetch-offsets",  # the committed offsets of a group, as read back
    "watermarks",  # a partition's high watermark and last stable offset, as observed
    "log",  # a dump of one partition's whole log: data and control records
    "config",  # timeouts the liveness checks use
    "nemesis",  # a fault starting or healing
)


@dataclass(frozen=True)
class Op:
    """One event of the history (design/torture.md §1)."""

    index: int
    process: str
    kind: str
    f: str
    value: dict[str, Any] = field(default_factory=dict)
    time_ns: int = 0
    wall_time: float = 0.0
    txn_id: str | None = None
    producer_id: int | None = None
    epoch: int | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"op {self.index}: kind {self.kind!r} is not one of {KINDS}")
        if self.f not in OP_TYPES:
            raise ValueError(f"op {self.index}: op type {self.f!r} is not one of {OP_TYPES}")

    def to_json(self) -> str:
        record: dict[str, Any] = {
            "index": self.index,
            "process": self.process,
            "type": self.kind,
            "f": self.f,
            "value": self.value,
            "time_ns": self.time_ns,
            "wall_time": self.wall_time,
        }
        for name in ("txn_id", "producer_id", "epoch", "error"):
            if getattr(self, name) is not None:
                record[name] = getattr(self, name)
        return json.dumps(record, sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> Op:
        record = json.loads(line)
        try:
            return cls(
                index=int(record["index"]),
                process=str(record["process"]),
                kind=str(record["type"]),
                f=str(record["f"]),
                value=dict(record.get("value") or {}),
                time_ns=int(record.get("time_ns", 0)),
                wall_time=float(record.get("wall_time", 0.0)),
                txn_id=record.get("txn_id"),
                producer_id=record.get("producer_id"),
                epoch=record.get("epoch"),
                error=record.get("error"),
            )
        except KeyError as missing:
            raise ValueError(f"history record without {missing}: {line.strip()}") from None

    def describe(self) -> str:
        """A short human name: `op 12 (p3 ok txn-commit)`."""
        return f"op {self.index} ({self.process} {self.kind} {self.f})"


class HistoryWriter:
    """Appends ops with increasing indices, stamping monotonic and wall time; fsyncs on close."""

    def __init__(self, path: Path | str) -> None:
        self._file: IO[str] = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._next_index = 0

    def append(self, process: str, kind: str, f: str, value: dict[str, Any] | None = None, **fields: Any) -> Op:
        op = Op(
            index=self._next_index,
            process=process,
            kind=kind,
            f=f,
            value=value or {},
            time_ns=time.monotonic_ns(),
            wall_time=time.time(),
            **fields,
        )
        self._file.write(op.to_json() + "\n")
        self._next_index += 1
        return op

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()

    def __enter__(self) -> HistoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_history(path: Path | str, ops: Iterable[Op]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for op in ops:
            out.write(op.to_json() + "\n")


def read_history(path: Path | str) -> list[Op]:
    with open(path, encoding="utf-8") as lines:
        return list(parse_lines(lines))


def parse_lines(lines: Iterable[str]) -> Iterator[Op]:
    for line in lines:
        if line.strip():
            yield Op.from_json(line)
