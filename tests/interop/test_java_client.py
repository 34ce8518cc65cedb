"""Kafka's Java client 4.4 (kafka-clients from Maven Central; the program in tests/interop/java built with mvn) runs
the same transactional produce and read_committed / read_uncommitted reads against Apache Kafka 4.4 and against the
kafka-gateway."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from oncelog.testing.kafka import kafka_libs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PROJECT = Path(__file__).parent / "java" / "pom.xml"


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The program built once with mvn (tests/interop/java/pom.xml: kafka-clients 4.4 from Maven Central) into a
    temporary directory; its class path."""
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None or kafka_libs() is None:
        if os.environ.get("ONCELOG_REQUIRE_KAFKA") == "1":
            pytest.fail("ONCELOG_REQUIRE_KAFKA=1 but mvn, java or the fetched Kafka jars are missing")
        pytest.skip("needs mvn, a JDK and the fetched Kafka jars (scripts/kafka/fetch.sh)")
    out = tmp_path_factory.mktemp("java-build")
    done = subprocess.run(
        [mvn, "-q", "-B", "-f", str(PROJECT), "compile", "dependency:build-classpath", f"-Doncelog.build.dir={out}",
         f"-Dmdep.outputFile={out / 'classpath.txt'}"],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return f"{out / 'classes'}:{(out / 'classpath.txt').read_text().strip()}"


def test_the_java_client_commits_and_aborts_and_reads_committed_alike(
    kafka_bootstrap: str, java_classpath: str
) -> None:
    topic = f"java-{uuid.uuid4().hex[:8]}"
    program = ["java", "-XX:TieredStopAtLevel=1", "-cp", java_classpath, "TransactionalCopy"]
    done = subprocess.run(
        [*program, kafka_bootstrap, topic, f"java-{uuid.uuid4().hex[:8]}"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1] == "done", done.stdout
    # two records and one marker per transaction: the same offsets on Kafka and on oncelog
    assert lines[:-1] == [
        "read_committed 0 commit-0", "read_committed 1 commit-1", "read_committed 6 commit-0",
        "read_committed 7 commit-1",
        "read_uncommitted 0 commit-0", "read_uncommitted 1 commit-1", "read_uncommitted 3 abort-0",
        "read_uncommitted 4 abort-1", "read_uncommitted 6 commit-0", "read_uncommitted 7 commit-1",
    ]  # fmt: skip
