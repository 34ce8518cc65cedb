"""Kafka's Java client 4.4 (kafka-clients from Maven Central, fetched with the broker) runs the same transactional
produce and read_committed / read_uncommitted reads against Apache Kafka 4.4 and against the kafka-gateway."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from oncelog.testing.kafka import kafka_libs

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PROGRAM = Path(__file__).parent / "java" / "TransactionalCopy.java"


@pytest.fixture(scope="module")
def java_classpath(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The program compiled once (javac) against the fetched Kafka jars; its class path."""
    javac = shutil.which("javac")
    libs = kafka_libs()
    if javac is None or libs is None:
        pytest.skip("needs a JDK and the fetched Kafka jars (scripts/kafka/fetch.sh)")
    classes = tmp_path_factory.mktemp("java-classes")
    done = subprocess.run(
        [javac, "-cp", f"{libs}/*", "-d", str(classes), str(PROGRAM)], capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, done.stderr
    return f"{classes}:{libs}/*"


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
