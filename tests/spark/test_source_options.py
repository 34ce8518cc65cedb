"""Options users bring from Spark's Kafka source, against the local cluster.

The readers are driven as Spark drives them (``partitions``, ``read``, ``initialOffset``, ``latestOffset``) but
in this process, without a SparkSession: what is checked here is what the source plans and reads, which does
not depend on the JVM (design/spark-connector.md §8). ``test_datasource.py`` runs the source through Spark.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from oncelog.client import AdminClient, NewTopic
from oncelog.spark import OncelogDataSource
from oncelog.spark.options import OptionError
from oncelog.spark.reader import SCHEMA, SCHEMA_WITH_HEADERS
from oncelog.testing import LocalCluster

from .conftest import Topic

T0 = 1_700_000_000_000


def batch_rows(options: dict[str, str]) -> list[dict[str, Any]]:
    reader = OncelogDataSource(options).reader(None)
    return [row for p in reader.partitions() for b in reader.read(p) for row in b.to_pylist()]


def test_starting_and_ending_offsets_by_timestamp(cluster: LocalCluster) -> None:
    topic = Topic(cluster)
    for p in (0, 1):
        for step in range(3):  # offsets 2*step, 2*step + 1 at T0 + step seconds
            topic.append(p, [f"{p}-{step}a", f"{p}-{step}b"], timestamp=T0 + step * 1000)
    base = {"bootstrap": cluster.bootstrap, "topic": topic.name}

    rows = batch_rows({**base, "startingTimestamp": str(T0 + 1000)})
    assert sorted(r["value"].decode() for r in rows) == ["0-1a", "0-1b", "0-2a", "0-2b", "1-1a", "1-1b", "1-2a", "1-2b"]

    stamps = json.dumps({topic.name: {"0": T0 + 2000, "1": T0 + 500}})  # 500 ms after T0: the next record is T0+1s
    ends = json.dumps({topic.name: {"0": T0 + 60_000, "1": T0 + 2000}})
    rows = batch_rows({**base, "startingOffsetsByTimestamp": stamps, "endingOffsetsByTimestamp": ends})
    assert sorted((r["partition"], r["offset"]) for r in rows) == [(0, 4), (0, 5), (1, 2), (1, 3)]

    # no record at or after the time: Spark's default strategy fails, naming the partition; 'latest' starts there
    late = str(T0 + 3_600_000)
    with pytest.raises(OptionError, match=rf"startingTimestamp: {topic.name}-0 has no record at or after timestamp"):
        batch_rows({**base, "startingTimestamp": late})
    assert batch_rows({**base, "startingTimestamp": late, "startingOffsetsByTimestampStrategy": "latest"}) == []

    stream = OncelogDataSource({**base, "startingTimestamp": str(T0 + 2000)}).streamReader(None)
    start = stream.initialOffset()
    assert start == {topic.name: {"0": 4, "1": 4}}
    assert stream.latestOffset(start, ReadAllAvailable()) == {topic.name: {"0": 6, "1": 6}}


def test_starting_offsets_naming_a_partition_that_does_not_exist(cluster: LocalCluster) -> None:
    topic = Topic(cluster)
    topic.append(0, ["a"])
    starting = json.dumps({topic.name: {"0": 0, "5": 0}})
    options = {"bootstrap": cluster.bootstrap, "topic": topic.name, "startingOffsets": starting}
    with pytest.raises(OptionError) as batch:
        OncelogDataSource(options).reader(None).partitions()
    assert batch.value.problems == [
        f"startingOffsets: partition 5 of topic {topic.name!r} does not exist (the topic has partitions 0-1)"
    ]
    with pytest.raises(OptionError) as stream:
        OncelogDataSource(options).streamReader(None).initialOffset()
    assert stream.value.problems == batch.value.problems


def test_subscribe_pattern_picks_up_a_matching_topic_created_while_the_query_runs(cluster: LocalCluster) -> None:
    prefix = f"pat-{uuid.uuid4().hex[:8]}"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(f"{prefix}-a", num_partitions=1), NewTopic(f"other-{prefix}", num_partitions=1)])
    first = Topic.existing(cluster, f"{prefix}-a")
    first.append(0, ["a0", "a1"])
    Topic.existing(cluster, f"other-{prefix}").append(0, ["not matched"])
    options = {"bootstrap": cluster.bootstrap, "subscribePattern": f"{prefix}-.*", "startingOffsets": "earliest"}
    stream = OncelogDataSource(options).streamReader(None)

    start = stream.initialOffset()
    assert start == {f"{prefix}-a": {"0": 0}}
    end = stream.latestOffset(start, ReadAllAvailable())
    assert end == {f"{prefix}-a": {"0": 2}}

    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(f"{prefix}-b", num_partitions=2)])
    later = Topic.existing(cluster, f"{prefix}-b")
    later.append(1, ["b0", "b1", "b2"])
    following = stream.latestOffset(end, ReadAllAvailable())
    assert following == {f"{prefix}-a": {"0": 2}, f"{prefix}-b": {"0": 0, "1": 3}}
    read = [
        row["value"].decode()
        for p in stream.partitions(end, following)
        for b in stream.read(p)
        for row in b.to_pylist()
    ]
    assert sorted(read) == ["b0", "b1", "b2"], "a new matching topic is read from its start"


def test_max_offsets_per_trigger_is_spark_admission_control(cluster: LocalCluster) -> None:
    topic = Topic(cluster)
    for p in (0, 1):
        topic.append(p, [f"{p}-{i}" for i in range(30)])
    options = {
        "bootstrap": cluster.bootstrap,
        "topic": topic.name,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "20",
    }
    stream = OncelogDataSource(options).streamReader(None)
    limit = stream.getDefaultReadLimit()
    assert limit == ReadMaxRows(20), "Spark's admission control gets the limit"
    start = stream.initialOffset()
    ends = []
    while (end := stream.latestOffset(start, limit)) != start:
        ends.append(end)
        start = end
    admitted = [sum(e[topic.name].values()) for e in ends]
    assert admitted == [20, 40, 60], "20 offsets per micro-batch over both partitions"
    # Trigger.Once-style reads pass ReadAllAvailable, which admits everything
    fresh = OncelogDataSource(options).streamReader(None)
    assert fresh.latestOffset(fresh.initialOffset(), ReadAllAvailable()) == {topic.name: {"0": 30, "1": 30}}


def test_include_headers_adds_sparks_headers_column(cluster: LocalCluster) -> None:
    topic = Topic(cluster)
    topic.append(0, ["with"], headers=(("trace", b"t1"), ("trace", b"t2"), ("empty", None)))
    base = {"bootstrap": cluster.bootstrap, "topic": topic.name}
    assert OncelogDataSource(base).schema() == SCHEMA
    assert "headers" not in batch_rows(base)[0]
    assert OncelogDataSource({**base, "includeHeaders": "true"}).schema() == SCHEMA_WITH_HEADERS
    [row] = batch_rows({**base, "includeHeaders": "true"})
    assert row["headers"] == [
        {"key": "trace", "value": b"t1"},
        {"key": "trace", "value": b"t2"},
        {"key": "empty", "value": None},
    ], "every pair in the producer's order, repeated names included"
    assert row["timestampType"] == 0 and row["value"] == b"with"
