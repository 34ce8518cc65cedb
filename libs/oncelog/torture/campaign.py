"""The mutation campaign (design/torture.md §4): each deliberate bug must make a torture run fail within 5 runs.

``python -m oncelog.torture.campaign [NAME ...] [--runs 5]`` runs each mutant's plan (the faults and the length
that expose it) with seeds 1, 2, ... until the checker reports an anomaly, prints a table and exits 1 when a mutant
survived all its runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from oncelog.torture.mutants import MUTANTS
from oncelog.torture.runner import TortureConfig, TortureResult, run


@dataclass(frozen=True)
class Plan:
    """How a mutant's run looks: the faults that expose it, how long, which anomaly classes it should trip."""

    nemesis: tuple[str, ...] = ()
    seconds: float = 20.0
    expect: tuple[str, ...] = ()
    overrides: dict[str, object] = field(default_factory=dict)


PLANS: dict[str, Plan] = {
    "abort-as-commit": Plan(expect=("aborted-read", "early-read")),
    "marker-one-partition": Plan(expect=("drain-incomplete", "torn-transaction", "lost-write", "bank-imbalance")),
    "no-txn-timeout": Plan(expect=("lso-stuck", "drain-incomplete")),
    "offsets-outside-txn": Plan(seconds=25, expect=("offsets-without-outputs",)),
    "lso-ignores-open": Plan(
        seconds=15, expect=("read-above-watermark", "aborted-read", "early-read"), overrides={"coordinators": 1}
    ),
    "skip-dedup": Plan(nemesis=("flaky",), seconds=30, expect=("duplicate",)),
    "no-epoch-check": Plan(nemesis=("zombie",), seconds=30, expect=("drain-incomplete", "zombie-write")),
    "ack-before-durable": Plan(nemesis=("lag-kill",), seconds=40, expect=("lost-write",)),
    "serve-above-hw": Plan(expect=("read-above-watermark", "duplicate", "inconsistent-offset")),
}
"""Mutant → its plan; every mutant of :data:`MUTANTS` that has a hook has a plan."""


@dataclass
class Outcome:
    mutant: str
    runs: int = 0
    caught_by: list[str] = field(default_factory=list)
    seed: int | None = None

    @property
    def caught(self) -> bool:
        return bool(self.caught_by)


def hunt(
    mutant: str, data_dir: Path, runs: int = 5, on_result: Callable[[TortureResult], None] | None = None
) -> Outcome:
    """Run ``mutant``'s plan with seeds 1..runs until a run finds an anomaly."""
    plan = PLANS[mutant]
    outcome = Outcome(mutant)
    for seed in range(1, runs + 1):
        config = TortureConfig(
            data_dir=data_dir / mutant,
            seconds=plan.seconds,
            seed=seed,
            nemesis=plan.nemesis,
            mutant=mutant,
            quiet_s=1.0,
            drain_timeout_s=40.0,
            **plan.overrides,  # type: ignore[arg-type]
        )
        result = run(config)
        outcome.runs = seed
        if on_result is not None:
            on_result(result)
        if not result.valid:
            outcome.caught_by = sorted(result.check.anomalies)
            outcome.seed = seed
            break
    return outcome


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m oncelog.torture.campaign", description=__doc__)
    parser.add_argument("mutants", nargs="*", help=f"default: all ({', '.join(PLANS)})")
    parser.add_argument("--runs", type=int, default=5, help="runs per mutant before it counts as surviving")
    parser.add_argument("--data-dir", type=Path, default=Path(".oncelog-mutants"))
    args = parser.parse_args(argv)
    names = args.mutants or list(PLANS)
    unknown = [n for n in names if n not in PLANS]
    if unknown:
        parser.error(f"no plan for {unknown}; mutants with a plan: {', '.join(PLANS)}")
    outcomes = [hunt(name, args.data_dir, args.runs) for name in names]
    print(f"{'mutant':<24} {'caught':<7} {'run':>3}  anomaly classes")
    for o in outcomes:
        print(f"{o.mutant:<24} {'yes' if o.caught else 'NO':<7} {o.runs:>3}  {', '.join(o.caught_by)}")
    print(f"{sum(o.caught for o in outcomes)} of {len(outcomes)} mutants caught ({len(MUTANTS)} defined)")
    return 0 if all(o.caught for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
