"""The mutation campaign (design/torture.md §4): a service with a deliberate bug makes the torture run fail.

The default suite runs one mutant; ``make mutants`` (marker ``campaign``) hunts every mutant with up to 5 runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.torture.campaign import PLANS, hunt
from oncelog.torture.runner import TortureResult


def _hunt(mutant: str, tmp_path: Path, runs: int) -> None:
    seen: list[TortureResult] = []
    outcome = hunt(mutant, tmp_path, runs=runs, on_result=seen.append)
    print(f"{mutant}: caught={outcome.caught} at run {outcome.runs} (seed {outcome.seed}) by {outcome.caught_by}")
    assert outcome.caught, f"mutant {mutant} survived {outcome.runs} runs: {[r.counts for r in seen]}"
    assert set(outcome.caught_by) & set(PLANS[mutant].expect), (
        f"mutant {mutant} was caught, but not by the classes its bug must trip {PLANS[mutant].expect}: "
        f"{outcome.caught_by}"
    )
    assert any("MUTANT" in log.read_text(errors="replace") for log in (tmp_path / mutant).glob("cluster/logs/*.log"))


@pytest.mark.timeout(300)
def test_read_committed_reading_past_open_transactions_is_caught_in_one_run(tmp_path: Path) -> None:
    _hunt("lso-ignores-open", tmp_path, runs=1)


@pytest.mark.campaign
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("mutant", sorted(PLANS))
def test_mutant_is_caught_within_five_runs(mutant: str, tmp_path: Path) -> None:
    _hunt(mutant, tmp_path, runs=5)
