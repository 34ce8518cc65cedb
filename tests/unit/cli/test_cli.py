"""The ``oncelog`` command line through typer's CliRunner, without a cluster (tests/integration/test_cli.py runs
the commands against one)."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncelog.cli import app
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

runner = CliRunner()

COMMANDS = [
    ["dev"],
    ["topics", "create"],
    ["topics", "list"],
    ["topics", "describe"],
    ["topics", "alter"],
    ["topics", "delete"],
    ["configs", "describe"],
    ["configs", "alter"],
    ["produce"],
    ["consume"],
    ["transactions", "list"],
    ["transactions", "describe"],
    ["transactions", "abort"],
    ["transactions", "find-hanging"],
    ["transactions", "skip-markers"],
    ["producers", "describe"],
    ["groups", "offsets"],
    ["partitions", "describe"],
]


def invoke(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def test_dev_refuses_more_copies_than_storage_nodes_before_starting_anything(tmp_path: Path) -> None:
    code, _, stderr = invoke("dev", "--data-dir", str(tmp_path / "c"), "--storage-nodes", "1", "-r", "2")
    assert code == 2 and "--replication-factor 2 needs at least 2 storage nodes; pass --storage-nodes 2" in stderr
    assert not (tmp_path / "c").exists(), "nothing started"


def test_local_cluster_sets_the_default_replication_factor_of_every_process(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, storage_nodes=3, replication_factor=3)
    assert {n.env["ONCELOG_DEFAULT_REPLICATION_FACTOR"] for n in cluster.nodes} == {"3"}
    with pytest.raises(ValueError, match=r"replication_factor=2 must be 0 .* at most storage_nodes=1"):
        LocalCluster(tmp_path, storage_nodes=1, replication_factor=2)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.mark.parametrize("command", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_every_command_help_shows_an_example(command: list[str]) -> None:
    code, stdout, _ = invoke(*command, "--help")
    assert code == 0
    assert re.search(r"Example: oncelog " + re.escape(command[0]), stdout) or (
        command[0] == "produce" and "| oncelog produce" in stdout
    ), stdout


def test_replica_table_highlights_partitions_missing_in_sync_replicas() -> None:
    from rich.console import Console

    from oncelog.cli.topics import replica_table
    from oncelog.client import PartitionInfo, TopicInfo

    def part(index: int, isr: tuple[str, ...]) -> PartitionInfo:
        return PartitionInfo("t", index, "a", "h:1", 0, replicas=("a", "b", "c"), isr=isr)

    topic = TopicInfo("t", "id", (part(0, ("a", "b", "c")), part(1, ("a",))), {})
    console = Console(width=80, record=True, color_system="truecolor")
    console.print(replica_table(topic))
    plain, styled = console.export_text(clear=False), console.export_text(styles=True)
    assert all(node in plain for node in ("a", "b", "c")) and "in sync" in plain
    highlighted = [line for line in styled.splitlines() if "\x1b[33m" in line]
    assert len(highlighted) == 1 and "│         1 │" in highlighted[0], styled


def test_missing_cluster_file_tells_how_to_fix_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ONCELOG_BOOTSTRAP", raising=False)
    for command in (["topics", "list"], ["consume", "t"], ["produce", "t"]):
        code, _, stderr = invoke(*command, input="")
        flat = " ".join(stderr.split())
        assert code == 1 and "oncelog dev" in flat and "--bootstrap" in flat, stderr
