"""``oncelog torture`` refuses bad options with what to use, before it starts any process."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncelog.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("option", "value", "names"),
    [
        ("--nemesis", "kill,explode", "explode unknown; choose from kill, pause, partition"),
        ("--workloads", "append,typo", "typo unknown; choose from append, idem"),
        ("--mutant", "nope", "nope unknown; choose from skip-dedup"),
        ("--catalog", "oracle", "oracle unknown; choose from sqlite, postgres"),
    ],
)
def test_bad_option_is_refused_naming_the_choices(option: str, value: str, names: str, tmp_path: Path) -> None:
    result = runner.invoke(app, ["torture", "--data-dir", str(tmp_path / "t"), option, value])
    assert result.exit_code == 2, result.output
    assert names in " ".join(result.output.replace("│", " ").split())
    assert not (tmp_path / "t").exists(), "nothing was started"


def test_help_names_the_fault_kinds_and_the_seed() -> None:
    result = runner.invoke(app, ["torture", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "--seed" in text and "lag-kill" in text and "--minutes" in text
