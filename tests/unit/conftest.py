"""The unit tier starts no process: a test under tests/unit that starts one fails, naming what it started.

Tests that need a service process, a local cluster, a Spark JVM or a child Python belong in tests/integration
(or tests/spark). The check watches every process start through Python's audit hooks (``subprocess.Popen``,
``os.fork``, ``os.posix_spawn``, ``os.system``, ``os.exec*``) while a unit test runs, its fixtures included, so
a module- or session-scoped fixture that starts a cluster is caught at the test that first needs it.

Allowed: the database and cache servers of the shared fixtures (``postgres_url``, ``redis_url`` in
tests/conftest.py). They are the real stores the store tests run against, started once per session, not oncelog
services; ``--cluster=local`` runs the unit tier without PostgreSQL at all.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from typing import Any

import pytest

ALLOWED_PROGRAMS = frozenset({"initdb", "pg_isready", "postgres", "redis-server"})
"""Programs a unit test may start: the PostgreSQL and Redis servers of the shared fixtures."""

_PROCESS_EVENTS = frozenset({"os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "os.exec"})


class _ProcessWatch:
    """Records the processes started while ``active`` is set (audit hooks cannot be removed, only muted)."""

    def __init__(self) -> None:
        self.active = False
        self.started: list[str] = []

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event == "subprocess.Popen":
            executable, argv = args[0], args[1]
            argv = [os.fsdecode(a) for a in argv] if isinstance(argv, (list, tuple)) else [os.fsdecode(argv)]
            program = os.path.basename(os.fsdecode(executable) if executable else argv[0].split()[0])
            if program not in ALLOWED_PROGRAMS:
                self.started.append(" ".join(argv))
        elif event in _PROCESS_EVENTS:
            self.started.append(f"{event}{args!r}"[:300])


_watch = _ProcessWatch()
sys.addaudithook(_watch)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, object, object]:
    _watch.active, _watch.started = True, []
    try:
        return (yield)
    finally:
        _watch.active = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    if _watch.started and report.outcome != "failed":
        started, _watch.started = _watch.started, []
        report.outcome = "failed"
        report.longrepr = (
            f"{item.nodeid} started a process during {call.when}, and tests/unit starts none; move the test to "
            "tests/integration (see tests/unit/conftest.py):\n  " + "\n  ".join(started)
        )
    return report
