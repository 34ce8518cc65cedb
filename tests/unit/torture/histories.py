"""Builds synthetic torture histories for the checker's self-tests, and a simple model that generates clean ones."""

from __future__ import annotations

from typing import Any

from oncelog.torture.history import Op


class Builder:
    """Appends ops with consecutive indices; time moves 1 ms per op unless advanced."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.now_ns = 0

    def advance(self, ms: int) -> None:
        self.now_ns += ms * 1_000_000

    def op(self, process: str, kind: str, f: str, value: dict[str, Any] | None = None, **fields: Any) -> Op:
        op = Op(
            index=len(self.ops),
            process=process,
            kind=kind,
            f=f,
            value=value or {},
            time_ns=self.now_ns,
            wall_time=1_700_000_000 + self.now_ns / 1e9,
            **fields,
        )
        self.ops.append(op)
        self.now_ns += 1_000_000
        return op

    def write(
        self,
        process: str,
        sends: list[tuple[Any, ...]],
        kind: str = "ok",
        f: str = "txn-commit",
        error: str | None = None,
        **value: Any,
    ) -> Op:
        """A produce or transaction: sends are (partition, value, offset[, origin]); offsets are known on ok."""
        planned = [[s[0], s[1], None, *(list(s[3:4]))] for s in sends]
        self.op(process, "invoke", f, {"sends": planned, **value})
        done = [[s[0], s[1], s[2], *list(s[3:4])] for s in sends] if kind == "ok" or f == "txn-abort" else planned
        return self.op(process, kind, f, {"sends": done, **value}, error=error)

    def read(self, process: str, reads: dict[str, list[tuple[int, Any]]], kind: str = "ok", **value: Any) -> Op:
        self.op(process, "invoke", "read", {k: v for k, v in value.items() if k == "isolation"})
        return self.op(process, kind, "read", {"reads": {p: [list(r) for r in rs] for p, rs in reads.items()}, **value})

    def fetch_offsets(self, group: str, offsets: dict[str, int]) -> Op:
        self.op("offsets", "invoke", "fetch-offsets", {"group": group})
        return self.op("offsets", "ok", "fetch-offsets", {"group": group, "offsets": offsets})

    def event(self, f: str, value: dict[str, Any], process: str = "harness") -> Op:
        return self.op(process, "info", f, value)


def model_history(steps: list[tuple[str, int, list[int], int]], partitions: int = 2) -> list[Op]:
    """Runs a simple Kafka model: a log per partition, transactions end in a control record.

    A step is (kind, process, partition choices, read-after flag): kind "produce" (idempotent), "commit" or
    "abort" (a transaction). After a step with the flag set, a read_committed consumer polls every partition from
    the start. The history ends with the log of each partition and a final drain.
    """
    names = [f"t-{i}" for i in range(partitions)]
    logs: dict[str, list[tuple[str, Any, bool]]] = {p: [] for p in names}  # kind, value, visible
    b = Builder()
    next_value = 0
    for kind, process, choices, read_after in steps:
        sends = []
        for choice in choices:
            partition = names[choice % partitions]
            logs[partition].append(("data", next_value, kind != "abort"))
            sends.append((partition, next_value, len(logs[partition]) - 1))
            next_value += 1
        if kind == "produce":
            b.write(f"p{process}", sends, f="produce")
        else:
            for partition in sorted({s[0] for s in sends}):
                logs[partition].append(("control", kind, False))
            b.write(f"p{process}", sends, f="txn-commit" if kind == "commit" else "txn-abort")
        if read_after:
            marks = {p: len(log) for p, log in logs.items()}
            b.read("c0", _committed(logs), hw=marks, lso=marks)
    for partition, log in logs.items():
        b.event("log", {"partition": partition, "start": 0, "records": [[o, k, v] for o, (k, v, _) in enumerate(log)]})
    b.read("drain", _committed(logs), final=True, hw={p: len(log) for p, log in logs.items()})
    return b.ops


def _committed(logs: dict[str, list[tuple[str, Any, bool]]]) -> dict[str, list[tuple[int, Any]]]:
    return {p: [(o, v) for o, (k, v, visible) in enumerate(log) if k == "data" and visible] for p, log in logs.items()}
