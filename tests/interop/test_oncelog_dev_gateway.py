"""``oncelog dev`` starts the kafka-gateway with the cluster: its banner and cluster.json give Kafka clients their
bootstrap address, and a Kafka client works against it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

confluent_kafka = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402


def test_oncelog_dev_serves_kafka_clients_through_its_gateway(tmp_path: Path) -> None:
    data_dir = tmp_path / "dev"
    command = [sys.executable, "-m", "oncelog", "dev", "--data-dir", str(data_dir), "--port-base", "0",
               "--storage-nodes", "1"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"}
    dev = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert dev.stdout is not None
        banner = []
        for line in dev.stdout:
            banner.append(line)
            if line.startswith("try:"):
                break
        kafka_bootstrap = json.loads((data_dir / "cluster.json").read_text())["kafka_bootstrap"]
        assert f"Kafka clients: bootstrap.servers={kafka_bootstrap}\n" in banner, banner
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        admin.create_topics([NewTopic("dev-topic", 1, 1)])["dev-topic"].result(60)
        producer = confluent_kafka.Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce("dev-topic", b"hello", partition=0)
        assert producer.flush(60) == 0
        offsets = confluent_kafka.Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": "g"})
        assert offsets.get_watermark_offsets(confluent_kafka.TopicPartition("dev-topic", 0), timeout=30) == (0, 1)
        offsets.close()
    finally:
        dev.send_signal(signal.SIGINT)
        dev.wait(60)
    assert dev.returncode == 0
