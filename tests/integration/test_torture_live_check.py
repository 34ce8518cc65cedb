"""The torture run's live anomaly count: the history so far is checked by a checker process of its own, so a long
run's check (seconds of CPU) never holds the interpreter the workloads run in; liveness classes are left out of the
count, as they are judged only once the faults healed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from oncelog.torture.history import HistoryWriter
from oncelog.torture.runner import _LiveCheck
from oncelog.torture.workloads import History


def _write(path: Path, read_offsets: list[tuple[int, Any]]) -> None:
    """A produce of value 7 acknowledged at t-0@0, then a read of ``read_offsets``."""
    writer = HistoryWriter(path)
    writer.append("p1", "invoke", "produce", {"sends": [["t-0", 7, None]]})
    writer.append("p1", "ok", "produce", {"sends": [["t-0", 7, 0]]})
    writer.append("c1", "invoke", "read", {})
    writer.append("c1", "ok", "read", {"reads": {"t-0": [list(r) for r in read_offsets]}, "final": True})
    writer.close()


def _checked(path: Path) -> _LiveCheck:
    writer = HistoryWriter(path)
    live = _LiveCheck(path, writer, History(writer))
    live._next = 0.0  # due now
    live.maybe_check()
    assert live._thread is not None
    live._thread.join(120)
    writer.close()
    return live


def test_a_duplicate_in_the_history_so_far_is_counted(tmp_path: Path) -> None:
    _write(tmp_path / "history.jsonl", [(0, 7), (1, 7)])
    live = _checked(tmp_path / "history.jsonl")
    assert live.anomalies == 1
    assert live._next > 0, "the next check waits at least 10 s"


def test_a_clean_history_counts_nothing(tmp_path: Path) -> None:
    _write(tmp_path / "history.jsonl", [(0, 7)])
    assert _checked(tmp_path / "history.jsonl").anomalies == 0
