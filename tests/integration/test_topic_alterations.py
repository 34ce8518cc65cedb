"""Growing a topic and changing its settings on a running cluster: clients use the new partitions, storage nodes
apply the new settings, and a hanging transaction is aborted on its partition by start offset (KIP-664)."""

from __future__ import annotations

import time
import uuid

import pytest

from oncelog.client import AdminClient, Consumer, NewTopic, Producer
from oncelog.errors import MessageTooLarge
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)

# a storage node applies catalog changes at its next refresh (every 2 s); this bounds the wait for it
APPLY_DEADLINE_S = 30.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def test_producers_and_consumers_use_partitions_added_after_they_started(cluster: LocalCluster) -> None:
    topic = unique("grow")
    with (
        AdminClient(cluster.bootstrap) as admin,
        Producer(cluster.bootstrap, linger_ms=0) as producer,
        Consumer(cluster.bootstrap, group_id=unique("g"), metadata_max_age_ms=0) as consumer,
    ):
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=2)])
        assert producer.send(topic, b"before").result().partition == 0  # the producer caches one partition
        consumer.subscribe([topic])
        admin.create_partitions({topic: 3})
        # a record for a partition the cached metadata does not list refreshes it instead of failing
        assert producer.send(topic, b"after", partition=2).result().partition == 2
        seen: dict[bytes | None, int] = {}
        deadline = time.monotonic() + APPLY_DEADLINE_S
        while len(seen) < 2 and time.monotonic() < deadline:
            seen.update((r.value, r.partition) for r in consumer.poll(timeout_ms=500))
    assert seen == {b"before": 0, b"after": 2}


def test_send_batch_to_a_partition_added_after_the_metadata_was_read_refreshes_it(cluster: LocalCluster) -> None:
    topic = unique("grow-bulk")
    with AdminClient(cluster.bootstrap) as admin, Producer(cluster.bootstrap, linger_ms=0) as producer:
        admin.create_topics([NewTopic(topic, num_partitions=1)])
        assert producer.send(topic, b"before").result().partition == 0  # the producer caches one partition
        admin.create_partitions({topic: 2})
        written = producer.send_batch(topic, [b"a", b"b"], partition=1).result()
    assert [(m.partition, m.offset) for m in written] == [(1, 0), (1, 1)]


def test_altered_settings_take_effect_on_the_storage_nodes(cluster: LocalCluster) -> None:
    topic = unique("cfg")
    big = b"x" * 2000
    with AdminClient(cluster.bootstrap) as admin, Producer(cluster.bootstrap, linger_ms=0) as producer:
        admin.create_topics([NewTopic(topic, num_partitions=1)])
        producer.send(topic, big).result()  # the default max_message_bytes takes it
        entries = admin.incremental_alter_configs({topic: {"max.message.bytes": "1024"}})[topic]
        assert ("max_message_bytes", "1024", "topic") in [(e.name, e.value, e.source) for e in entries]
        refused = _first_refusal(producer, topic, big)
        assert "the topic's max_message_bytes is 1024" in refused.message
        admin.incremental_alter_configs({topic: {"max_message_bytes": None}})
        assert _first_acceptance(producer, topic, big) >= 1


def _first_refusal(producer: Producer, topic: str, value: bytes) -> MessageTooLarge:
    """Send ``value`` until the storage node refuses it (it applies the new setting at its next refresh)."""
    deadline = time.monotonic() + APPLY_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            producer.send(topic, value).result()
        except MessageTooLarge as err:
            return err
    raise AssertionError(f"the storage node still accepted {len(value)} bytes after {APPLY_DEADLINE_S} s")


def _first_acceptance(producer: Producer, topic: str, value: bytes) -> int:
    deadline = time.monotonic() + APPLY_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            return producer.send(topic, value).result().offset
        except MessageTooLarge:
            continue
    raise AssertionError(f"the storage node still refused {len(value)} bytes after {APPLY_DEADLINE_S} s")
