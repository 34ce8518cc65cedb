"""Closing clients leaves nothing for the interpreter to complain about (no "Event loop is closed")."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, sys, uuid
    from oncelog import aio
    from oncelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition

    bootstrap = sys.argv[1]
    topic = "shutdown-" + uuid.uuid4().hex[:8]
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1)])
    tp = TopicPartition(topic, 0)
    producer = Producer(bootstrap, linger_ms=50)
    producer.send(topic, b"acked").result()
    for _ in range(200):
        producer.send(topic, b"in flight at close")
    producer.close()
    txn = Producer(bootstrap, transactional_id="shutdown-" + topic)
    txn.init_transactions()
    txn.begin_transaction()
    txn.send(topic, b"open at close")
    txn.close()
    consumer = Consumer(bootstrap, group_id="g-" + topic, isolation_level="read_committed")
    consumer.assign([tp])
    consumer.seek(tp, 0)
    consumer.poll(timeout_ms=2000)
    consumer.close()

    async def main():
        async with aio.Producer(bootstrap) as async_producer:
            await async_producer.send(topic, b"async")
    asyncio.run(main())
    del producer, txn, consumer
    gc.collect()
    print("clients closed")
    """
)


def test_client_shutdown_prints_no_event_loop_warnings(cluster: LocalCluster, tmp_path: Path) -> None:
    script = tmp_path / "clients.py"
    script.write_text(_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "libs"), str(root / "services")])}
    done = subprocess.run(
        [sys.executable, "-X", "dev", str(script), cluster.bootstrap],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "clients closed" in done.stdout
    for complaint in ("Event loop is closed", "Task was destroyed but it is pending", "Exception ignored"):
        assert complaint not in done.stderr, done.stderr
