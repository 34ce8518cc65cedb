"""Deliberate bugs for the mutation campaign (design/torture.md §4): proof that the torture run can fail.

A service breaks one rule only when BOTH are true:

* the environment variable ``ONCELOG_MUTANT`` names the mutant, and
* the interpreter was started with ``-X oncelog_mutant=<the same name>``.

No deployment starts Python with that ``-X`` flag (the images run ``oncelog-<service>`` entry points, and there is
no environment variable that sets ``-X`` options), so a stray ``ONCELOG_MUTANT`` in a pod spec does nothing but log
an error. A mutant that is on is logged at CRITICAL and printed to stderr at import, so it cannot go unseen.

Each hook in a service is one line, ``if mutants.active("name"): ...``; this module has no other dependency, so the
services can import it.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TypeVar

R = TypeVar("R")
P = TypeVar("P")

ENV = "ONCELOG_MUTANT"
XOPTION = "oncelog_mutant"

MUTANTS: dict[str, str] = {
    "skip-dedup": "partition storage appends a retried idempotent batch again instead of answering its first offset",
    "ack-before-durable": "partition storage acknowledges writes before they are fsynced and on the in-sync replicas",
    "marker-one-partition": "the coordinator writes a transaction's commit marker to only the first partition",
    "lso-ignores-open": "the last stable offset ignores open transactions (read_committed sees uncommitted data)",
    "serve-above-hw": "read_uncommitted fetches return records above the high watermark",
    "offsets-outside-txn": "transactional offset commits become visible at once, not with the commit marker",
    "no-epoch-check": "partition storage accepts produce requests of a fenced (older) producer epoch",
    "abort-as-commit": "the coordinator writes COMMIT markers for aborted transactions",
    "no-txn-timeout": "the coordinator never aborts a transaction its producer abandoned (no transaction timeout)",
}
"""Name → the rule it breaks."""

_log = logging.getLogger("oncelog.mutants")


def _load() -> str:
    wanted = os.environ.get(ENV, "")
    if not wanted:
        return ""
    flag = sys._xoptions.get(XOPTION)
    if flag != wanted:
        _log.error(
            "%s=%s is ignored: mutants run only under python -X %s=%s (test builds)", ENV, wanted, XOPTION, wanted
        )
        return ""
    if wanted not in MUTANTS:
        raise SystemExit(f"{ENV}={wanted!r} is not a mutant; choose from {', '.join(MUTANTS)}")
    message = f"MUTANT {wanted} IS ON: this process deliberately breaks a rule ({MUTANTS[wanted]}); test use only"
    _log.critical(message)
    print(message, file=sys.stderr, flush=True)
    return wanted


_ACTIVE = _load()


def active(name: str) -> bool:
    """True when this process runs mutant ``name`` (see the module docstring)."""
    return name == _ACTIVE


def service_env(name: str) -> dict[str, str]:
    """The environment a LocalCluster passes to run mutant ``name`` (empty: none)."""
    return {ENV: name} if name else {}


def interpreter_options(name: str) -> tuple[str, ...]:
    """The interpreter flag that lets the services honour ``service_env(name)``."""
    if name and name not in MUTANTS:
        raise ValueError(f"unknown mutant {name!r}; choose from {', '.join(MUTANTS)}")
    return ("-X", f"{XOPTION}={name}") if name else ()


# -- the hooks: each service calls one of these in one line ------------------------------------------------------


def markers(result: R, partitions: frozenset[P], commit: R) -> tuple[R, frozenset[P]]:
    """The coordinator's marker job: ``abort-as-commit`` turns an abort into a commit, ``marker-one-partition``
    keeps the first partition only."""
    if _ACTIVE == "abort-as-commit":
        return commit, partitions
    if _ACTIVE == "marker-one-partition" and len(partitions) > 1:
        return result, frozenset(sorted(partitions)[:1])  # type: ignore[type-var]
    return result, partitions
