"""The Java client in clients/java against a real cluster: grpc-java, code generated from proto/ at build time.

``mvn test`` runs the JUnit 5 tests with ONCELOG_BOOTSTRAP pointing at the session's LocalCluster: the shared
RecordBatch vectors, the example (an idempotent produce, a committed and an aborted transaction, a
read_committed fetch that keeps exactly the committed records) and the ErrorInfo decoding. The cluster tests
skip without ONCELOG_BOOTSTRAP, so this module reads Surefire's reports and insists that every test ran.
"""

from __future__ import annotations

import shutil
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(1800)

JAVA_CLIENT = Path(__file__).resolve().parents[3] / "clients" / "java"


REPORTS = JAVA_CLIENT / "target" / "surefire-reports"


def _results() -> dict[str, str]:
    """``Class.test`` -> passed / failed / skipped, from target/surefire-reports."""
    out: dict[str, str] = {}
    for report in sorted(REPORTS.glob("TEST-*.xml")):
        for case in ET.parse(report).getroot().iter("testcase"):
            name = f"{case.get('classname', '').rsplit('.', 1)[-1]}.{case.get('name')}"
            outcome = "passed"
            for tag in ("failure", "error", "skipped"):
                if case.find(tag) is not None:
                    outcome = "skipped" if tag == "skipped" else "failed"
            out[name] = outcome
    return out


def test_java_tests_pass_against_the_cluster(mvn: str, cluster: LocalCluster, run_command: Callable[..., Any]) -> None:
    shutil.rmtree(REPORTS, ignore_errors=True)  # only this run's reports count
    run_command(
        mvn,
        "-B",
        "-q",
        "-T1",
        "surefire:test",
        cwd=JAVA_CLIENT,
        timeout=900,
        env={"ONCELOG_BOOTSTRAP": cluster.bootstrap},
    )
    results = _results()
    assert results, "Surefire wrote no reports"
    assert {name for name, outcome in results.items() if outcome != "passed"} == set(), results
    for name in (
        "ExampleTest.readCommittedSeesExactlyTheCommittedRecords",
        "ExampleTest.aFatalErrorCarriesItsErrorInfoAndIsNotRetried",
        "ExampleTest.retriableFollowsTheErrorInfoElseOnlyUnavailable",
        "RecordBatchVectorsTest.crc32cCheckValue",
        "RecordBatchVectorsTest.readCommittedDropsAbortedDataAndMarkers",
    ):
        assert results.get(name) == "passed", (name, results)
    vectors = [name for name in results if name.startswith("RecordBatchVectorsTest.encodesAndDecodesEveryVector")]
    assert len(vectors) == 6, results
