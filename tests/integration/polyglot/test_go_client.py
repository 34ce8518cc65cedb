"""The Go client in clients/go against a real cluster: code generated from proto/, RecordBatch v2 built in Go.

``go test ./...`` runs with ONCELOG_BOOTSTRAP pointing at the session's LocalCluster (the Go tests skip
without it, so this module insists they passed, not skipped). The example program's --json report is then
checked from Python: the partitions read back with the Python codec and fetch filter hold exactly the
idempotent and committed records, and the aborted ones were written but filtered (design/architecture.md §1.2, §1.4).
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.rpc import sync_channel
from oncelog.testing import LocalCluster
from oncelog.vocabulary import IsolationLevel

pytestmark = pytest.mark.timeout(1200)

GO_CLIENT = Path(__file__).resolve().parents[3] / "clients" / "go"
Run = Callable[..., Any]


def _passed(output: str) -> set[str]:
    assert "--- FAIL" not in output and "--- SKIP" not in output, output
    return set(re.findall(r"--- PASS: (\S+)", output))


def test_go_record_batch_codec_reproduces_the_shared_vectors(go: str, run_command: Run, go_env: dict[str, str]) -> None:
    done = run_command(go, "test", "-count=1", "-v", "./recordbatch/", cwd=GO_CLIENT, timeout=600, env=go_env)
    passed = _passed(done.stdout)
    for name in ("plain", "idempotent", "transactional", "control-commit", "control-abort", "gzip"):
        assert f"TestSharedVectors/{name}" in passed, done.stdout


def test_go_tests_pass_against_the_cluster(
    go: str, cluster: LocalCluster, run_command: Run, go_env: dict[str, str]
) -> None:
    done = run_command(
        go,
        "test",
        "-count=1",
        "-v",
        "./...",
        cwd=GO_CLIENT,
        timeout=900,
        env={**go_env, "ONCELOG_BOOTSTRAP": cluster.bootstrap},
    )
    assert {
        "TestReadCommittedSeesExactlyTheCommittedRecords",
        "TestFatalErrorCarriesErrorInfo",
        "TestRetriableDecision",
    } <= _passed(done.stdout), done.stdout


def test_go_example_commits_exactly_what_a_read_committed_reader_sees(
    go: str, cluster: LocalCluster, run_command: Run, go_env: dict[str, str], partition_reader: Run
) -> None:
    topic = f"go-{uuid.uuid4().hex[:8]}"
    done = run_command(
        go,
        "run",
        "./cmd/example",
        "--bootstrap",
        cluster.bootstrap,
        "--topic",
        topic,
        "--transactional-id",
        f"{topic}-txn",
        "--json",
        cwd=GO_CLIENT,
        timeout=600,
        env=go_env,
    )
    report = json.loads(done.stdout)
    produced = report["produced"]
    assert report["topic"] == topic
    assert len(produced["idempotent"]) == 3 and len(produced["committed"]) == 4 and len(produced["aborted"]) == 4

    metadata = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap)).Metadata(
        cluster_pb.MetadataRequest(topics=[topic])
    )
    committed: dict[int, list[tuple[int, str]]] = {}
    everything: list[str] = []
    for p in metadata.topics[0].partitions:
        args = (p.leader_address, topic, p.partition, p.leader_epoch)
        committed[p.partition] = partition_reader(*args, IsolationLevel.READ_COMMITTED)
        everything.extend(value for _, value in partition_reader(*args, IsolationLevel.READ_UNCOMMITTED))

    seen = [value for records in committed.values() for _, value in records]
    assert sorted(seen) == sorted(produced["idempotent"] + produced["committed"]), "exactly the committed records"
    assert not set(seen) & set(produced["aborted"]), "no record of the aborted transaction"
    assert sorted(everything) == sorted(produced["idempotent"] + produced["committed"] + produced["aborted"]), (
        "the aborted records were written, so read_committed really filtered them"
    )
    # the Go read_committed filter keeps the same records at the same offsets as the Python one
    by_go = {(r["partition"], r["offset"], r["value"]) for r in report["kept"]}
    assert by_go == {(p, offset, value) for p, records in committed.items() for offset, value in records}
