"""The ``oncelog`` command line, run through typer's CliRunner against a real local cluster (moved from
tests/unit/cli/test_cli.py, which starts no process).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from oncelog.cli import app
from oncelog.client import AdminClient, Consumer, Producer, TopicPartition
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

runner = CliRunner()


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory, cluster_database: Callable[[], str]) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cli"), storage_nodes=1, database_url=cluster_database()) as running:
        yield running


def invoke(*args: str, input: str | None = None) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), input=input)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stdout, result.stderr


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_topics_create_list_describe_delete(local: LocalCluster) -> None:
    topic = unique("cli-topic")
    code, stdout, _ = invoke(
        "topics", "create", topic, "--partitions", "3", "--config", "flush=async", "-b", local.bootstrap
    )
    assert code == 0 and f"created topic {topic} with 3 partition(s)" in stdout
    code, stdout, _ = invoke("topics", "list", "-b", local.bootstrap)
    assert code == 0 and topic in stdout.splitlines()
    code, stdout, _ = invoke("topics", "describe", topic, "-b", local.bootstrap)
    assert code == 0 and "flush=async" in stdout and "partition-storage-0" in stdout
    code, _, stderr = invoke("topics", "create", topic, "-b", local.bootstrap)
    assert code == 1 and "already exist" in stderr
    code, stdout, _ = invoke("topics", "delete", topic, "-b", local.bootstrap)
    assert code == 0 and f"deleted topic {topic}" in stdout
    code, _, stderr = invoke("topics", "create", unique("bad"), "--config", "nonsense", "-b", local.bootstrap)
    assert code == 2 and "key=value" in stderr


def test_topics_create_replication_factor(local: LocalCluster) -> None:
    topic = unique("cli-rf")
    code, _, stderr = invoke("topics", "create", topic, "-r", "2", "-b", local.bootstrap)
    assert code == 1 and "replication_factor=2 is larger than the 1 live storage node;" in " ".join(stderr.split())
    code, stdout, _ = invoke("topics", "create", topic, "-r", "1", "-p", "2", "-b", local.bootstrap)
    assert code == 0 and "replication factor 1" in stdout
    code, stdout, _ = invoke("topics", "describe", topic, "-b", local.bootstrap)
    assert code == 0 and "partition-storage-0" in stdout and "preferred leader" not in stdout, "factor 1: no table"


def test_produce_then_consume_read_committed(local: LocalCluster, tmp_path: Path) -> None:
    topic = unique("cli-data")
    invoke("topics", "create", topic, "-p", "2", "-b", local.bootstrap)
    lines = "\n".join(f"key{i % 3}:value-{i}" for i in range(50)) + "\n"
    args = ["--key-separator", ":", "--transactional-id", unique("cli-loader"), "--transaction-size", "20"]
    code, _, stderr = invoke("produce", topic, *args, "-b", local.bootstrap, input=lines)
    assert code == 0 and "produced 50 record(s)" in stderr and "records/s" in stderr
    source = tmp_path / "more.txt"
    source.write_text("extra-1\nextra-2\n")
    code, _, stderr = invoke("produce", topic, "--file", str(source), "-b", local.bootstrap)
    assert code == 0 and "produced 2 record(s)" in stderr

    args = ["--from-beginning", "--isolation", "read_committed", "--print-key", "--timeout", "1"]
    code, stdout, stderr = invoke("consume", topic, *args, "-b", local.bootstrap)
    assert code == 0 and "consumed 52 record(s)" in stderr
    pairs = [line.split("\t") for line in stdout.splitlines()]
    assert sorted(pairs) == sorted(
        [[f"key{i % 3}", f"value-{i}"] for i in range(50)] + [["", "extra-1"], ["", "extra-2"]]
    )

    code, stdout, _ = invoke("consume", topic, "--from-beginning", "--max-messages", "5", "-b", local.bootstrap)
    assert code == 0 and len(stdout.splitlines()) == 5


def test_consume_with_group_commits_and_resumes(local: LocalCluster) -> None:
    topic = unique("cli-group")
    group = unique("cli-readers")
    invoke("topics", "create", topic, "-b", local.bootstrap)
    invoke("produce", topic, "-b", local.bootstrap, input="".join(f"{i}\n" for i in range(10)))
    code, stdout, _ = invoke(
        "consume", topic, "--group", group, "--from-beginning", "--max-messages", "4", "-b", local.bootstrap
    )
    assert code == 0 and stdout.split() == ["0", "1", "2", "3"]
    code, stdout, _ = invoke("groups", "offsets", group, "-b", local.bootstrap)
    assert code == 0 and re.search(rf"{topic}\s*│\s*0\s*│\s*4", stdout), stdout
    code, stdout, _ = invoke("consume", topic, "--group", group, "--timeout", "1", "-b", local.bootstrap)
    assert code == 0 and stdout.split() == [str(i) for i in range(4, 10)]


def test_read_uncommitted_consume_sees_an_open_transaction(local: LocalCluster) -> None:
    topic = unique("cli-open")
    invoke("topics", "create", topic, "-b", local.bootstrap)
    with Producer(local.bootstrap, transactional_id=unique("cli-open")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"pending")
        producer.flush()
        code, stdout, _ = invoke("consume", topic, "--from-beginning", "--timeout", "0.5", "-b", local.bootstrap)
        assert code == 0 and stdout == ""
        args = ["--from-beginning", "--isolation", "read_uncommitted", "--timeout", "0.5"]
        code, stdout, _ = invoke("consume", topic, *args, "-b", local.bootstrap)
        assert code == 0 and stdout.split() == ["pending"]
        producer.abort_transaction()


def test_transactions_and_producers_tooling(local: LocalCluster) -> None:
    topic = unique("cli-txn")
    tid = unique("cli-hanging")
    invoke("topics", "create", topic, "-b", local.bootstrap)
    hanging = Producer(local.bootstrap, transactional_id=tid)
    try:
        hanging.init_transactions()
        hanging.begin_transaction()
        hanging.send(topic, b"stuck")
        hanging.flush()
        code, stdout, _ = invoke("transactions", "list", "--state", "ongoing", "-b", local.bootstrap)
        assert code == 0 and tid in stdout and "ongoing" in stdout
        code, stdout, _ = invoke("transactions", "describe", tid, "-b", local.bootstrap)
        assert code == 0 and "ongoing" in stdout and f"{topic}-0" in stdout.replace("\n", "")
        code, stdout, _ = invoke("producers", "describe", topic, "-b", local.bootstrap)
        assert code == 0 and "from 0" in stdout
        code, stdout, _ = invoke("transactions", "abort", tid, "-b", local.bootstrap)
        assert code == 0 and f"aborted the transaction of {tid}" in stdout
        code, _, stderr = invoke("transactions", "abort", unique("never-used"), "-b", local.bootstrap)
        assert code == 1 and "error:" in stderr and "never-used" in stderr
    finally:
        hanging.close()
    with Consumer(local.bootstrap) as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        assert consumer.end_offsets([tp])[tp] == 2, "the abort marker moved the last stable offset"
    with AdminClient(local.bootstrap) as admin:
        assert admin.describe_transactions([tid])[tid].state in ("prepare_abort", "complete_abort")


def test_cluster_file_is_the_default_bootstrap(local: LocalCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(local.data_dir.parent)
    link = local.data_dir.parent / ".oncelog"
    if not link.exists():
        link.symlink_to(local.data_dir)
    monkeypatch.delenv("ONCELOG_BOOTSTRAP", raising=False)
    topic = unique("cli-default")
    code, stdout, _ = invoke("topics", "create", topic)
    assert code == 0 and topic in stdout
