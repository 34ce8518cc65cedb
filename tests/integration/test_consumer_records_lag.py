"""The consumer's records lag (``oncelog.consumer.records_lag``, design/consumer-groups.md §8) on a real cluster.

A partition holds 10 committed records, their commit marker and 5 records of a transaction still open: high
watermark 16, last stable offset 11. A consumer that has read 4 records reports 11 - 4 = 7 at read_committed (what
it can still read) and 16 - 4 = 12 at read_uncommitted. The series ends when the consumer closes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from oncelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from oncelog.telemetry.metrics import CONSUMER_RECORDS_LAG
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


def lag_points(reader: InMemoryMetricReader, topic: str) -> dict[tuple[str, str, int], int]:
    """(group, client_id, partition) -> value of every records-lag point of ``topic`` in one collection."""
    found: dict[tuple[str, str, int], int] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name != CONSUMER_RECORDS_LAG.name:
                    continue
                for point in metric.data.data_points:
                    a = point.attributes
                    if a["topic"] == topic:
                        found[(str(a["group"]), str(a["client_id"]), int(a["partition"]))] = int(point.value)
    return found


@pytest.fixture
def half_open_topic(cluster: LocalCluster) -> Iterator[str]:
    """A one-partition topic: 10 committed records, then an open transaction holding 5 more."""
    topic = f"lag-{uuid.uuid4().hex[:10]}"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1)])
    with Producer(cluster.bootstrap, transactional_id=f"lag-{topic}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, f"c{i}".encode(), partition=0)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, f"o{i}".encode(), partition=0)
        producer.flush()
        with Consumer(cluster.bootstrap, isolation_level="read_uncommitted") as probe:
            tp = TopicPartition(topic, 0)
            assert probe.end_offsets([tp])[tp] == 16, "the open transaction's records are written"
        yield topic
        producer.abort_transaction()


@pytest.mark.parametrize(("isolation", "expected"), [("read_committed", 11 - 4), ("read_uncommitted", 16 - 4)])
def test_records_lag_is_the_distance_from_the_position_to_the_lso_at_read_committed(
    cluster: LocalCluster, half_open_topic: str, isolation: str, expected: int
) -> None:
    reader = InMemoryMetricReader()
    tp = TopicPartition(half_open_topic, 0)
    consumer = Consumer(
        cluster.bootstrap,
        group_id="lag-readers",
        client_id=f"lag-{isolation}",
        isolation_level=isolation,
        meter_provider=MeterProvider(metric_readers=[reader]),
    )
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        read: list[bytes | None] = []
        while len(read) < 4:
            read.extend(r.value for r in consumer.poll(timeout_ms=500, max_records=4 - len(read)))
        assert consumer.position(tp) == 4
        assert lag_points(reader, half_open_topic) == {("lag-readers", f"lag-{isolation}", 0): expected}
    finally:
        consumer.close()
    assert lag_points(reader, half_open_topic) == {}, "a closed consumer's series ends"
