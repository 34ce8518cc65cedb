"""The mutant switch: a deliberate bug is on only with the environment variable AND the interpreter flag."""

from __future__ import annotations

import logging
import sys

import pytest

from oncelog.torture import mutants
from oncelog.torture.campaign import PLANS


def test_environment_variable_alone_is_ignored_and_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(mutants.ENV, "skip-dedup")
    monkeypatch.delitem(sys._xoptions, mutants.XOPTION, raising=False)
    with caplog.at_level(logging.ERROR, "oncelog.mutants"):
        assert mutants._load() == ""
    assert "is ignored" in caplog.text


def test_flag_naming_another_mutant_turns_nothing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mutants.ENV, "skip-dedup")
    monkeypatch.setitem(sys._xoptions, mutants.XOPTION, "no-epoch-check")
    assert mutants._load() == ""


def test_flag_and_variable_together_turn_the_mutant_on_loudly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(mutants.ENV, "skip-dedup")
    monkeypatch.setitem(sys._xoptions, mutants.XOPTION, "skip-dedup")
    assert mutants._load() == "skip-dedup"
    assert "MUTANT skip-dedup IS ON" in capsys.readouterr().err


def test_unknown_mutant_name_stops_the_process_with_the_names_to_use(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(mutants.ENV, "typo")
    monkeypatch.setitem(sys._xoptions, mutants.XOPTION, "typo")
    with pytest.raises(SystemExit, match="choose from skip-dedup"):
        mutants._load()
    with pytest.raises(ValueError, match="unknown mutant"):
        mutants.interpreter_options("typo")


def test_the_test_process_itself_runs_no_mutant() -> None:
    assert not any(mutants.active(name) for name in mutants.MUTANTS)
    assert mutants.interpreter_options("") == ()
    assert mutants.service_env("") == {}


def test_every_mutant_has_a_campaign_plan_naming_the_classes_it_must_trip() -> None:
    assert set(PLANS) == set(mutants.MUTANTS)
    assert len(mutants.MUTANTS) >= 8
    assert all(plan.expect for plan in PLANS.values())
