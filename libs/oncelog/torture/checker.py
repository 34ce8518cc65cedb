"""The torture history checker: safety anomalies, dependency cycles and liveness (design/torture.md §2).

Run `python -m oncelog.torture.checker history.jsonl` for a report; it exits 1 when an anomaly is found.
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from oncelog.torture.checker_fencing import epoch_regressions, zombies
from oncelog.torture.history import Op, read_history
from oncelog.torture.model import (
    ALLOWED_CLASSES,
    LIVENESS_CLASSES,
    SAFETY_CLASSES,
    Anomaly,
    Call,
    CheckResult,
    History,
    Send,
    op_name,
    ranges,
)

__all__ = ["ALLOWED_CLASSES", "LIVENESS_CLASSES", "SAFETY_CLASSES", "Anomaly", "CheckResult", "check", "main", "render"]


def check(ops: Sequence[Op]) -> CheckResult:
    history = History(ops)
    result = CheckResult(ops_checked=len(history.ops))
    for rule in (
        _lost_writes,
        _duplicates,
        _aborted_reads,
        _torn_transactions,
        _above_watermarks,
        _order,
        _gaps,
        _offsets_and_outputs,
        _offset_regressions,
        _early_reads,
        _realtime_order,
        zombies,
        epoch_regressions,
        _cycles,
        _liveness,
    ):
        rule(history, result)
    return result


def _lost_writes(h: History, result: CheckResult) -> None:
    for send in h.sends:
        if send.call.outcome != "committed" or h.readers.get(send.value):
            continue
        reason = h.should_have_seen(send)
        if reason is not None:
            proof = h.drained.get(send.partition) or h.max_read[send.partition].call
            result.add(
                "lost-write",
                f"value {send.value} acknowledged by {send.call.name()} on {send.partition}"
                f"{'' if send.offset is None else f' at offset {send.offset}'} was never read, yet {reason}",
                [send.call.op.index, proof.op.index],
            )


def _duplicates(h: History, result: CheckResult) -> None:
    places: dict[Any, dict[tuple[str, int], int]] = defaultdict(dict)
    at: dict[tuple[str, int], dict[Any, int]] = defaultdict(dict)
    for send in h.sends:
        if send.offset is not None and send.call.done is not None and send.call.done.kind == "ok":
            places[send.value].setdefault((send.partition, send.offset), send.call.op.index)
            at[(send.partition, send.offset)].setdefault(send.value, send.call.op.index)
    for seen in h.seen:
        places[seen.value].setdefault((seen.partition, seen.offset), seen.call.op.index)
        at[(seen.partition, seen.offset)].setdefault(seen.value, seen.call.op.index)
    for value, where in places.items():
        if len(where) > 1:
            spots = ", ".join(f"{p}@{o} ({op_name(h, i)})" for (p, o), i in sorted(where.items()))
            result.add("duplicate", f"value {value} is at {len(where)} offsets: {spots}", sorted(set(where.values())))
    for (partition, offset), values in at.items():
        if len(values) > 1:
            which = ", ".join(f"{v} ({op_name(h, i)})" for v, i in values.items())
            result.add(
                "inconsistent-offset",
                f"{partition}@{offset} holds different values: {which}",
                sorted(set(values.values())),
            )


def _aborted_reads(h: History, result: CheckResult) -> None:
    for seen in h.seen:
        send = h.writer.get(seen.value)
        if not seen.committed_isolation or send is None or send.call.outcome != "aborted":
            continue
        how = (
            "aborted by the client"
            if send.call.invoke.f == "txn-abort"
            else f"failed ({send.call.op.error or 'definite'})"
        )
        result.add(
            "aborted-read",
            f"{seen.call.name()} read value {seen.value} at {seen.partition}@{seen.offset} in read_committed, "
            f"but its writer {send.call.name()} was {how}",
            [seen.call.op.index, send.call.op.index],
        )


def _torn_transactions(h: History, result: CheckResult) -> None:
    by_call: dict[int, list[Send]] = defaultdict(list)
    for send in h.sends:
        if send.call.invoke.f == "txn-commit" and send.call.outcome != "aborted":
            by_call[send.call.invoke.index].append(send)
    for sends in by_call.values():
        visible = [s for s in sends if any(r.committed_isolation for r in h.readers.get(s.value, []))]
        missing = [s for s in sends if s not in visible and h.should_have_seen(s) is not None]
        if visible and missing:
            call = sends[0].call
            shown = ", ".join(f"{s.value}@{s.partition}" for s in visible)
            hidden = "; ".join(f"{s.value}@{s.partition}: {h.should_have_seen(s)}" for s in missing)
            readers = sorted({r.call.op.index for s in visible for r in h.readers[s.value]})
            result.add(
                "torn-transaction",
                f"{call.name()} is partly visible: {shown} were read, but not {hidden}",
                [call.op.index, *readers],
            )


class Mark:
    """One observation of a partition's high watermark and last stable offset: a ``watermarks`` event, or a
    ``read`` op whose Fetch answered them (``hw``/``lso``); the fetch ran between ``invoked_ns`` and
    ``done_ns``."""

    __slots__ = ("done_ns", "hw", "invoked_ns", "lso", "op")

    def __init__(self, op: Op, invoked_ns: int, hw: int, lso: int) -> None:
        self.op, self.invoked_ns, self.done_ns, self.hw, self.lso = op, invoked_ns, op.time_ns, hw, lso


def _marks(h: History) -> dict[str, list[Mark]]:
    """Every watermark observation per partition, in order of completion."""
    marks: dict[str, list[Mark]] = defaultdict(list)
    for op in h.events:
        if op.f == "watermarks" and "hw" in op.value and "lso" in op.value:
            marks[op.value["partition"]].append(Mark(op, op.time_ns, int(op.value["hw"]), int(op.value["lso"])))
    for call in h.calls:
        if call.invoke.f != "read" or call.done is None or call.done.kind != "ok":
            continue
        hws, lsos = call.done.value.get("hw", {}), call.done.value.get("lso", {})
        for partition in hws.keys() & lsos.keys():
            marks[partition].append(Mark(call.done, call.invoke.time_ns, int(hws[partition]), int(lsos[partition])))
    for seen in marks.values():
        seen.sort(key=lambda m: (m.done_ns, m.op.index))
    return marks


def _above_watermarks(h: History, result: CheckResult) -> None:
    for call in h.calls:
        if call.invoke.f != "read" or call.done is None or call.done.kind != "ok":
            continue
        value = call.value()
        committed = value.get("isolation", "read_committed") == "read_committed"
        for partition, records in value.get("reads", {}).items():
            hw = value.get("hw", {}).get(partition)
            lso = value.get("lso", {}).get(partition)
            for offset, record_value in records:
                if hw is not None and offset >= hw:
                    result.add(
                        "read-above-watermark",
                        f"{call.name()} returned value {record_value} at {partition}@{offset}, at or above "
                        f"the high watermark {hw} the same fetch reported",
                        [call.op.index],
                    )
                elif committed and lso is not None and offset >= lso:
                    result.add(
                        "read-above-watermark",
                        f"{call.name()} (read_committed) returned value {record_value} at {partition}@{offset}, "
                        f"at or above the last stable offset {lso} the same fetch reported",
                        [call.op.index],
                    )
    marks = _marks(h)
    for partition, seen in marks.items():
        for mark in seen:
            if mark.lso > mark.hw:
                result.add(
                    "read-above-watermark",
                    f"{mark.op.describe()}: {partition} has last stable offset {mark.lso} above its high "
                    f"watermark {mark.hw}",
                    [mark.op.index],
                )
    _lso_past_open_transactions(h, marks, result)


def _lso_past_open_transactions(h: History, marks: dict[str, list[Mark]], result: CheckResult) -> None:
    """The LSO is at most the first offset of the earliest open transaction. A transaction that later committed
    at offset O was open (or had not written O yet, so the log ended at or below O) until its client asked to
    commit; an LSO above O observed before that was past an open transaction's data."""
    for partition, seen in marks.items():
        times = [m.done_ns for m in seen]
        best: list[Mark] = []  # best[i]: the mark of the highest LSO among seen[: i + 1]
        for mark in seen:
            best.append(mark if not best or mark.lso > best[-1].lso else best[-1])
        reported: set[int] = set()
        for send in sorted(h.sends_to.get(partition, []), key=lambda s: s.offset if s.offset is not None else -1):
            call = send.call
            if call.invoke.f != "txn-commit" or call.outcome != "committed" or send.offset is None:
                continue
            if call.invoke.index in reported:
                continue
            commit_invoke_ns = call.value().get("commit_invoke_ns")
            if commit_invoke_ns is None:
                continue
            before = bisect.bisect_left(times, int(commit_invoke_ns))
            if before and best[before - 1].lso > send.offset:
                mark = best[before - 1]
                reported.add(call.invoke.index)
                result.add(
                    "read-above-watermark",
                    f"{mark.op.describe()} reported last stable offset {mark.lso} for {partition}, past "
                    f"{send.value}@{partition}:{send.offset} of {call.name()}, an open transaction: its client asked "
                    f"to commit {(int(commit_invoke_ns) - mark.done_ns) / 1e6:.1f} ms later",
                    [mark.op.index, call.op.index],
                )


def _order(h: History, result: CheckResult) -> None:
    last: dict[tuple[str, str], tuple[int, Send]] = {}
    for send in h.sends:
        call = send.call
        if send.offset is None or call.done is None or call.done.kind != "ok":
            continue
        key = (call.invoke.process, send.partition)
        previous = last.get(key)
        if previous is not None and send.offset <= previous[0]:
            earlier = previous[1]
            result.add(
                "order-violation",
                f"producer {call.invoke.process} sent {earlier.value} ({earlier.call.name()}) before "
                f"{send.value} ({call.name()}) to {send.partition}, but they landed at offsets "
                f"{earlier.offset} and {send.offset}",
                sorted({earlier.call.op.index, call.op.index}),
            )
        last[key] = (send.offset, send)
    for call in h.calls:
        if call.done is None or call.done.kind != "ok" or call.invoke.f not in ("read", "txn-commit"):
            continue
        for partition, records in call.value().get("reads", {}).items():
            offsets = [o for o, _ in records]
            for a, b in itertools.pairwise(offsets):
                if b <= a:
                    result.add(
                        "order-violation",
                        f"{call.name()} returned {partition}@{b} after {partition}@{a} within one read",
                        [call.op.index],
                    )


def _gaps(h: History, result: CheckResult) -> None:
    log_kind: dict[str, dict[int, str]] = {}
    for op in h.events:
        if op.f != "log":
            continue
        partition = op.value["partition"]
        entries = {int(e[0]): e[1] for e in op.value.get("records", [])}
        log_kind[partition] = entries
        start = int(op.value.get("start", 0))
        end = max(entries, default=start - 1)
        holes = [o for o in range(start, end + 1) if o not in entries]
        if holes:
            result.add(
                "offset-gap",
                f"{op.describe()}: {partition} has no record, data or control, at offsets {ranges(holes)}",
                [op.index],
            )
    committed_at: dict[tuple[str, int], Send] = {}
    for send in h.sends:
        if send.offset is not None and send.call.outcome == "committed":
            committed_at[(send.partition, send.offset)] = send
    for call in h.calls:
        value = call.value()
        if call.done is None or call.done.kind != "ok" or value.get("isolation", "read_committed") != "read_committed":
            continue
        for partition, records in value.get("reads", {}).items():
            offsets = [o for o, _ in records]
            for a, b in itertools.pairwise(offsets):
                for missing in range(a + 1, b):
                    skipped = committed_at.get((partition, missing))
                    if skipped is not None and log_kind.get(partition, {}).get(missing) != "control":
                        result.add(
                            "offset-gap",
                            f"{call.name()} skipped {partition}@{missing}, which holds value {skipped.value} "
                            f"committed by {skipped.call.name()}; only control records may be skipped there",
                            [call.op.index, skipped.call.op.index],
                        )


def _offsets_and_outputs(h: History, result: CheckResult) -> None:
    final: dict[str, Op] = {}
    for call in h.calls:
        if call.invoke.f == "fetch-offsets" and call.done is not None and call.done.kind == "ok":
            final[call.value()["group"]] = call.done
    for op in h.events:
        if op.f == "fetch-offsets" and op.kind == "ok":
            final[op.value["group"]] = op
    outputs = [s for s in h.sends if s.origin is not None]
    if not final or not outputs:
        return
    output_partitions = {s.partition for s in outputs}
    all_drained = output_partitions <= set(h.drained)
    visible_outputs: dict[tuple[str, int], list[Send]] = defaultdict(list)
    for send in outputs:
        if any(r.committed_isolation for r in h.readers.get(send.value, [])):
            visible_outputs[send.origin].append(send)  # type: ignore[index]
    consumed_by: dict[tuple[str, int], Call] = {}
    for seen in h.seen:
        if seen.call.invoke.f == "txn-commit" and "offsets" in seen.call.value():
            consumed_by.setdefault((seen.partition, seen.offset), seen.call)
    for group, fetched in final.items():
        committed = fetched.value.get("offsets", {})
        for partition, next_offset in committed.items():
            inputs = sorted(o for o in h.visible.get(partition, {}) if o < next_offset)
            for offset in inputs:
                made = visible_outputs.get((partition, offset), [])
                if not made and all_drained:
                    consumer = consumed_by.get((partition, offset))
                    ops = [fetched.index] + ([consumer.op.index] if consumer else [])
                    result.add(
                        "offsets-without-outputs",
                        f"group {group} committed {partition} up to {next_offset} ({fetched.describe()}), but input "
                        f"{partition}@{offset} has no visible output"
                        + (f"; {consumer.name()} consumed it" if consumer else ""),
                        ops,
                    )
                elif len(made) > 1:
                    result.add(
                        "duplicate",
                        f"input {partition}@{offset} of group {group} was processed {len(made)} times: "
                        + ", ".join(f"{s.value}@{s.partition} ({s.call.name()})" for s in made),
                        sorted({s.call.op.index for s in made}),
                    )
            for (origin_partition, origin_offset), made in visible_outputs.items():
                if origin_partition == partition and origin_offset >= next_offset:
                    for send in made:
                        result.add(
                            "outputs-without-offsets",
                            f"output {send.value}@{send.partition} of input {partition}@{origin_offset} is visible "
                            f"({send.call.name()}), but group {group} committed {partition} only up to {next_offset} "
                            f"({fetched.describe()})",
                            [send.call.op.index, fetched.index],
                        )


def _offset_regressions(h: History, result: CheckResult) -> None:
    fetched = [c.done for c in h.calls if c.invoke.f == "fetch-offsets" and c.done is not None and c.done.kind == "ok"]
    fetched += [op for op in h.events if op.f == "fetch-offsets" and op.kind == "ok"]
    highest: dict[tuple[str, str], tuple[int, Op]] = {}
    for op in sorted(fetched, key=lambda o: (o.time_ns, o.index)):
        group = op.value["group"]
        for partition, offset in op.value.get("offsets", {}).items():
            before = highest.get((group, partition))
            if before is not None and offset < before[0]:
                result.add(
                    "offset-regression",
                    f"group {group} had committed {partition} up to {before[0]} ({before[1].describe()}), "
                    f"later only up to {offset} ({op.describe()})",
                    [before[1].index, op.index],
                )
            if before is None or offset > before[0]:
                highest[(group, partition)] = (offset, op)


def _early_reads(h: History, result: CheckResult) -> None:
    for seen in h.seen:
        send = h.writer.get(seen.value)
        if send is None or not seen.committed_isolation or send.call.invoke.f != "txn-commit":
            continue
        if seen.call is send.call:
            result.add(
                "early-read",
                f"{seen.call.name()} read its own send {seen.value} at {seen.partition}@{seen.offset} "
                f"before committing",
                [seen.call.op.index],
            )
            continue
        commit_invoke_ns = send.call.value().get("commit_invoke_ns")
        if commit_invoke_ns is not None and seen.call.op.time_ns < commit_invoke_ns:
            result.add(
                "early-read",
                f"{seen.call.name()} returned value {seen.value} at {seen.partition}@{seen.offset} "
                f"{(commit_invoke_ns - seen.call.op.time_ns) / 1e6:.1f} ms before its writer {send.call.name()} "
                f"even asked to commit",
                [seen.call.op.index, send.call.op.index],
            )


def _realtime_order(h: History, result: CheckResult) -> None:
    """A send invoked after offset O of its partition was known (acknowledged or read) lands above O."""
    known: dict[str, list[tuple[int, int, Call]]] = defaultdict(list)  # time known, offset, by which call
    for send in h.sends:
        if send.offset is not None and send.call.done is not None and send.call.done.kind == "ok":
            known[send.partition].append((send.call.done.time_ns, send.offset, send.call))
    for seen in h.seen:
        known[seen.partition].append((seen.call.op.time_ns, seen.offset, seen.call))
    highest: dict[str, tuple[list[int], list[tuple[int, Call]]]] = {}
    for partition, entries in known.items():
        times: list[int] = []
        running: list[tuple[int, Call]] = []
        for time_ns, offset, call in sorted(entries, key=lambda e: e[0]):
            best = running[-1] if running and running[-1][0] >= offset else (offset, call)
            times.append(time_ns)
            running.append(best)
        highest[partition] = (times, running)
    for send in h.sends:
        if send.offset is None or send.call.done is None or send.call.done.kind != "ok":
            continue
        times, running = highest.get(send.partition, ([], []))
        before = bisect.bisect_left(times, send.call.invoke.time_ns)
        if before and running[before - 1][0] >= send.offset:
            offset, witness = running[before - 1]
            result.add(
                "realtime-order",
                f"{send.call.name()} was invoked after {witness.name()} knew {send.partition}@{offset}, "
                f"yet its value {send.value} landed at offset {send.offset}",
                [witness.op.index, send.call.op.index],
            )


def _cycles(h: History, result: CheckResult) -> None:
    import networkx as nx

    graph = nx.MultiDiGraph()
    nodes = [
        c
        for c in h.calls
        if c.done is not None and c.outcome != "aborted" and c.invoke.f in ("produce", "txn-commit", "read")
    ]
    node_ids = {c.invoke.index for c in nodes}
    for c in nodes:
        graph.add_node(c.invoke.index, call=c)
    order: dict[str, dict[int, int]] = defaultdict(dict)
    for send in h.sends:
        if send.offset is not None and send.call.invoke.index in node_ids:
            order[send.partition][send.offset] = send.call.invoke.index
    for seen in h.seen:
        source = h.writer.get(seen.value)
        if source is not None and source.call.invoke.index in node_ids:
            order[seen.partition].setdefault(seen.offset, source.call.invoke.index)
            if source.call.invoke.index != seen.call.invoke.index:
                graph.add_edge(source.call.invoke.index, seen.call.invoke.index, kind="wr", why=f"read {seen.value}")
    for partition, by_offset in order.items():
        writers = [by_offset[o] for o in sorted(by_offset)]
        for a, b in itertools.pairwise(writers):
            if a != b:
                graph.add_edge(a, b, kind="ww", why=f"wrote {partition} before")
    last: dict[str, int] = {}
    for c in nodes:
        process = c.invoke.process
        if process in last:
            graph.add_edge(last[process], c.invoke.index, kind="process", why="came next in process")
        last[process] = c.invoke.index

    def cycles_of(kinds: set[str]) -> list[list[tuple[int, int, str, str]]]:
        sub = nx.MultiDiGraph()
        sub.add_nodes_from(graph.nodes)
        sub.add_edges_from((a, b, d) for a, b, d in graph.edges(data=True) if d["kind"] in kinds)
        found = []
        for component in nx.strongly_connected_components(sub):
            if len(component) > 1:
                cycle = nx.find_cycle(sub.subgraph(component))
                found.append([(a, b, sub[a][b][k]["kind"], sub[a][b][k]["why"]) for a, b, k in cycle])
        return found

    def explain(cycle: list[tuple[int, int, str, str]]) -> str:
        steps = "; ".join(
            f"{graph.nodes[a]['call'].name()} {why} -> {graph.nodes[b]['call'].name()} [{kind}]"
            for a, b, kind, why in cycle
        )
        return f"dependency cycle: {steps}"

    def indices(cycle: list[tuple[int, int, str, str]]) -> list[int]:
        return sorted({graph.nodes[a]["call"].op.index for a, _, _, _ in cycle})

    for cycle in cycles_of({"ww"}):
        result.add("G0", explain(cycle), indices(cycle))
    strict = cycles_of({"wr", "process"})
    for cycle in strict:
        result.add("G1c", explain(cycle), indices(cycle))
    strict_nodes = {a for cycle in strict for a, _, _, _ in cycle}
    for cycle in cycles_of({"ww", "wr", "process"}):
        if any(kind == "wr" for _, _, kind, _ in cycle) and not {a for a, _, _, _ in cycle} & strict_nodes:
            result.add("G1c-ww", explain(cycle), indices(cycle))


def _liveness(h: History, result: CheckResult) -> None:
    timeout_ns = (int(h.config["txn_timeout_ms"]) + int(h.config["margin_ms"])) * 1_000_000
    for call in h.calls:
        if call.invoke.f not in ("txn-commit", "txn-abort"):
            continue
        end = call.done.time_ns if call.done is not None else h.end_ns
        if end - call.invoke.time_ns > timeout_ns:
            state = "never completed" if call.done is None else f"completed {call.done.kind}"
            result.add(
                "transaction-hang",
                f"{call.name()} stayed open {(end - call.invoke.time_ns) / 1e9:.1f} s ({state}), past the "
                f"transaction timeout + margin of {timeout_ns / 1e9:.1f} s",
                [call.op.index],
            )
    heal = _heal_time(h)
    if heal is None:
        return
    for partition, all_marks in _marks(h).items():
        seen = [m for m in all_marks if m.invoked_ns >= heal]
        # lowest[i]: the mark of the lowest LSO among seen[i:], by the time each fetch was sent
        seen.sort(key=lambda m: (m.invoked_ns, m.op.index))
        starts = [m.invoked_ns for m in seen]
        lowest: list[Mark] = list(seen)
        for i in range(len(seen) - 2, -1, -1):
            if lowest[i + 1].lso <= lowest[i].lso:
                lowest[i] = lowest[i + 1]
        for first in seen:
            if first.lso >= first.hw:
                continue
            after = bisect.bisect_right(starts, first.done_ns + timeout_ns)
            if after < len(seen) and lowest[after].lso <= first.lso:
                late = lowest[after]
                result.add(
                    "lso-stuck",
                    f"{partition}: last stable offset {first.lso} below high watermark {first.hw} at "
                    f"{first.op.describe()} had not moved by {late.op.describe()}, "
                    f"{(late.invoked_ns - first.done_ns) / 1e9:.1f} s later and after the faults healed",
                    [first.op.index, late.op.index],
                )
                break
    progress_ns = int(h.config["consumer_progress_ms"]) * 1_000_000
    if h.end_ns - heal <= progress_ns:
        return
    consumers: dict[str, list[Call]] = defaultdict(list)
    for call in h.calls:
        if call.invoke.f == "read" and not call.value().get("final"):
            consumers[call.invoke.process].append(call)
    for process, calls in consumers.items():
        if not any(heal <= c.invoke.time_ns <= heal + progress_ns for c in calls):
            continue  # not polling in that window (e.g. a read made only after the drain): nothing to judge
        progressed = [
            c
            for c in calls
            if c.done is not None
            and c.done.kind == "ok"
            and heal <= c.done.time_ns <= heal + progress_ns
            and (any(c.value().get("reads", {}).values()) or c.value().get("caught_up"))
        ]
        if not progressed:
            tried = [c.op.index for c in calls if c.invoke.time_ns >= heal][:5]
            result.add(
                "consumer-stuck",
                f"consumer {process} read nothing and never caught up in the {progress_ns / 1e9:.0f} s after "
                f"the faults healed",
                tried,
            )


def _heal_time(h: History) -> int | None:
    """When the last fault healed (the history's start when none ever started); None if a fault is still active
    at the end."""
    active: dict[str, int] = {}
    healed: int | None = min((op.time_ns for op in h.ops), default=None)
    for op in h.events:
        if op.f != "nemesis":
            continue
        fault = str(op.value.get("fault"))
        if op.value.get("action") == "start":
            active[fault] = active.get(fault, 0) + 1
        elif op.value.get("action") == "stop" and active.get(fault):
            active[fault] -= 1
            healed = op.time_ns
    if healed is None or any(active.values()):
        return None
    return healed


def render(result: CheckResult) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"torture history: {result.ops_checked} ops checked")
    table.add_column("class")
    table.add_column("count", justify="right")
    table.add_column("fails")
    table.add_column("first example")
    for cls in (*SAFETY_CLASSES, *LIVENESS_CLASSES, *ALLOWED_CLASSES):
        found = result.anomalies.get(cls) or result.allowed.get(cls) or []
        fails = "allowed" if cls in ALLOWED_CLASSES else ("yes" if found else "")
        table.add_row(cls, str(len(found)), fails, found[0].explanation if found else "")
    console.print(table)
    for cls, found in result.anomalies.items():
        for anomaly in found:
            console.print(f"[bold red]{cls}[/]: {anomaly.explanation} (ops {', '.join(map(str, anomaly.ops))})")
    console.print("[bold green]valid[/]" if result.valid else "[bold red]INVALID[/]")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m oncelog.torture.checker",
        description=(
            "Check a torture history (JSON Lines, one op event a line; format in docs/design/torture.md) for "
            "exactly-once anomalies: lost acknowledged writes, duplicates, aborted reads, torn transactions, "
            "reads above the high watermark or last stable offset, order violations within a producer, offset "
            "gaps that are not control records, group offsets committed without their outputs (or the reverse), "
            "committed offsets going backwards, reads returned before their writer asked to commit, sends landing "
            "below an offset known before they were invoked, writes of a fenced producer epoch, InitProducerId epochs "
            "that do not grow, "
            "G1c dependency cycles, and liveness (hanging transactions, a stuck LSO, a consumer without progress "
            "after the faults heal). G0 and ww-dependent G1c cycles are reported but allowed. Prints a table of "
            "every class with an example and exits 1 when any anomaly is found, 0 otherwise."
        ),
    )
    parser.add_argument("history", help="path of the history file (JSONL)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON instead of a table")
    args = parser.parse_args(argv)
    result = check(read_history(args.history))
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        render(result)
    return 0 if result.valid else 1


if __name__ == "__main__":
    sys.exit(main())
