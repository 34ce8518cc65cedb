"""The checker's fencing rules (design/torture.md §2.1): a fenced producer epoch neither commits nor becomes
visible (``zombie-write``), and InitProducerId never hands an epoch out twice (``epoch-regression``)."""

from __future__ import annotations

from collections import defaultdict

from oncelog.torture.history import Op
from oncelog.torture.model import CheckResult, History

__all__ = ["epoch_regressions", "zombies"]


def zombies(h: History, result: CheckResult) -> None:
    """A write of an epoch that a finished InitProducerId fenced must not commit, nor become visible.

    Which reads count depends on when the fence came. A transaction begun after the fence wrote every record after
    it: any reader of them saw a zombie's write. A transaction begun before the fence and asked to commit after it
    may have written its records before the fence; the fence aborts it, so read_uncommitted readers may see those
    records (aborted data is in the log, as on Kafka) and only a read_committed reader, or an ``ok`` commit, is a
    zombie's write."""
    fences: dict[int, list[Op]] = defaultdict(list)
    for call in h.calls:
        if call.invoke.f == "init-producer" and call.done is not None and call.done.kind == "ok":
            fences[int(call.done.value["producer_id"])].append(call.done)
    for call in h.calls:
        writer = call.done
        if call.invoke.f not in ("produce", "txn-commit") or writer is None or writer.producer_id is None:
            continue
        began = call.invoke.time_ns
        asked = int(call.value().get("commit_invoke_ns", began))
        fence = next(
            (
                f
                for f in fences.get(writer.producer_id, [])
                if int(f.value["epoch"]) > (writer.epoch or 0) and f.time_ns < asked
            ),
            None,
        )
        if fence is None:
            continue
        fenced_from_start = fence.time_ns < began
        readers = sorted(
            {
                r.call.op.index
                for s in call.value().get("sends", [])
                for r in h.readers.get(s[1], [])
                if fenced_from_start or r.committed_isolation
            }
            - {writer.index}
        )
        if writer.kind == "ok" or readers:
            what = "committed" if writer.kind == "ok" else f"was read by ops {', '.join(map(str, readers))}"
            when = "before it began" if fenced_from_start else "before it asked to commit"
            result.add(
                "zombie-write",
                f"{call.name()} of producer {writer.producer_id} epoch {writer.epoch} {what}, though "
                f"{fence.describe()} had fenced that epoch with epoch {fence.value['epoch']} {when}",
                [fence.index, writer.index, *readers],
            )


def epoch_regressions(h: History, result: CheckResult) -> None:
    """Every InitProducerId fences what came before: one invoked after another returned epoch E for producer id P
    must answer another producer id, or P with an epoch above E (a coordinator that lost track of a bump, e.g. by
    loading a row a deposed coordinator overwrote, would hand an epoch out twice and could no longer fence)."""
    inits = [
        c
        for c in h.calls
        if c.invoke.f == "init-producer"
        and c.done is not None
        and c.done.kind == "ok"
        and c.done.producer_id is not None
    ]
    for later in inits:
        assert later.done is not None
        for earlier in inits:
            assert earlier.done is not None
            if (
                earlier.done.time_ns < later.invoke.time_ns
                and earlier.done.producer_id == later.done.producer_id
                and (later.done.epoch or 0) <= (earlier.done.epoch or 0)
            ):
                result.add(
                    "epoch-regression",
                    f"{later.name()} returned producer {later.done.producer_id} epoch {later.done.epoch}, though "
                    f"{earlier.name()} had returned epoch {earlier.done.epoch} for it before the call began",
                    [earlier.op.index, later.op.index],
                )
                break
