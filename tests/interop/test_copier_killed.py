"""Exactly once through unmodified Kafka clients: a librdkafka consume-transform-produce copier (a static member of
a consumer group, committing its input offsets in each transaction) is SIGKILLed three times at random points and
restarted; a read_committed reader then finds every input record copied exactly once. Against Apache Kafka 4.4 and
against the kafka-gateway."""

from __future__ import annotations

import queue
import random
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(400)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

COPIER = Path(__file__).parent / "kafka_copier.py"
PARTITIONS, RECORDS, KILLS = 3, 300, 3


def _start(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(COPIER), *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )


def _wait_for_commits(copier: subprocess.Popen[str], at_least: int, timeout_s: float = 120.0) -> int:
    """Read the copier's progress lines until it has copied ``at_least`` records; returns the count it reported."""
    assert copier.stdout is not None
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert copier.stdout is not None
        for line in copier.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    deadline = time.monotonic() + timeout_s
    copied = 0
    while copied < at_least:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"the copier copied only {copied} records in {timeout_s}s") from None
        if line is None:
            raise AssertionError(f"the copier exited with {copier.wait()} after copying {copied} records")
        copied = int(line.split()[1])
    return copied


def test_a_copier_killed_three_times_copies_every_record_exactly_once(kafka_bootstrap: str) -> None:
    rng = random.Random(19)
    suffix = uuid.uuid4().hex[:8]
    source, target = f"copy-in-{suffix}", f"copy-out-{suffix}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in (source, target)]).values():
        future.result(60)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(source, f"r{i}".encode(), key=f"k{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(60) == 0
    args = [kafka_bootstrap, source, target, f"copiers-{suffix}", f"copier-{suffix}", "copier-0"]
    for _ in range(KILLS):
        copier = _start(args)
        try:
            # a random point after this run copied something (at most 40 records a run, so input is left)
            _wait_for_commits(copier, at_least=rng.randrange(1, 40))
        finally:
            copier.kill()  # SIGKILL: no close, no abort, no LeaveGroup
            copier.wait(30)
    copier = _start(args)
    try:
        reader = Consumer(
            {"bootstrap.servers": kafka_bootstrap, "group.id": f"check-{suffix}", "isolation.level": "read_committed",
             "enable.auto.commit": False}
        )  # fmt: skip
        reader.assign([TopicPartition(target, p, 0) for p in range(PARTITIONS)])
        out: list[bytes] = []
        deadline = time.monotonic() + 180
        while len(out) < RECORDS and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is not None and message.error() is None:
                out.append(message.value())
        extra = [m for m in reader.consume(num_messages=100, timeout=3.0) if m.error() is None]
        reader.close()
    finally:
        copier.kill()
        copier.wait(30)
    expected = sorted(f"R{i}".encode() for i in range(RECORDS))
    assert sorted(out) == expected, f"{len(out)} records out, {len(set(out))} distinct, {RECORDS} in"
    assert extra == [], f"{len(extra)} records copied twice"
