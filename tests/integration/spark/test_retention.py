"""failOnDataLoss against a real retention trim: the storage node deletes the segments a planned batch points to.

The cluster sweeps retention every 100 ms; the topic rolls a 1 KiB segment every three records, and once the
query has planned its batch the topic is set to keep no closed segment (``retention.bytes=0``), so the planned
records are really gone from disk, as when a query was down longer than the topic's retention.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from oncelog.client import AdminClient, NewTopic, Producer
from oncelog.client.records import TopicPartition
from oncelog.errors import OffsetOutOfRange
from oncelog.spark import OncelogDataSource
from oncelog.spark.channels import LogClient
from oncelog.testing import LocalCluster
from oncelog.vocabulary import IsolationLevel

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def trimming_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {"ONCELOG_PARTITION_STORAGE_RETENTION_CHECK_INTERVAL_MS": "100"}
    with LocalCluster(Path(tmp_path_factory.mktemp("retention")), storage_nodes=1, env=env) as running:
        yield running


def write(bootstrap: str, topic: str, values: range) -> None:
    with Producer(bootstrap, linger_ms=0) as producer:
        for i in values:
            producer.send(topic, f"v{i}".ljust(300).encode(), partition=0)
            producer.flush()  # one batch per record: the 1 KiB segments roll every three records


def log_start_after(client: LogClient, tp: TopicPartition, offset: int) -> int:
    """Wait for the retention sweep to delete every offset below ``offset`` (the explicit signal: the log start)."""
    deadline = time.monotonic() + 60
    while (start := client.list_offsets([tp], "earliest", IsolationLevel.READ_COMMITTED)[tp]) < offset:
        assert time.monotonic() < deadline, f"retention left {tp} starting at {start}"
        time.sleep(0.05)
    return start


def test_a_batch_whose_offsets_retention_deleted_fails_or_skips_them(trimming_cluster: LocalCluster) -> None:
    bootstrap = trimming_cluster.bootstrap
    topic = f"trimmed-{uuid.uuid4().hex[:8]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, 1, configs={"segment_bytes": "1024"})])
    tp = TopicPartition(topic, 0)
    client = LogClient([bootstrap])
    options = {"bootstrap": bootstrap, "topic": topic, "startingOffsets": "earliest"}

    # the query plans a batch over offsets 0-9 and stops before reading it, as a query that went down
    write(bootstrap, topic, range(10))
    strict = OncelogDataSource(options).streamReader(None)
    start = strict.initialOffset()
    end = strict.latestOffset(start, ReadAllAvailable())
    assert (start, end) == ({topic: {"0": 0}}, {topic: {"0": 10}})

    # meanwhile the topic's retention shrinks and the storage node deletes the closed segments, which hold
    # the planned offsets (storage nodes apply the setting at their next catalog refresh)
    with AdminClient(bootstrap) as admin:
        admin.incremental_alter_configs({topic: {"retention.bytes": "0"}})
    write(bootstrap, topic, range(10, 20))
    log_start = log_start_after(client, tp, 10)

    [task] = strict.partitions(start, end)
    with pytest.raises(OffsetOutOfRange) as lost:
        list(strict.read(task))
    assert f"{tp}: offsets [0, 10) were deleted by retention before they were read" in str(lost.value)
    assert "failOnDataLoss=false" in str(lost.value)

    lenient = OncelogDataSource({**options, "failOnDataLoss": "false"}).streamReader(None)
    [task] = lenient.partitions(start, end)
    assert [row for batch in lenient.read(task) for row in batch.to_pylist()] == []
    # the next batch starts at the end Spark checkpointed and reads what is left
    following = lenient.latestOffset(end, ReadAllAvailable())
    rows = [r for t in lenient.partitions(end, following) for b in lenient.read(t) for r in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(log_start, 20)) and log_start < 20
