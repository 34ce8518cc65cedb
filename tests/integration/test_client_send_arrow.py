"""Producer.send_arrow against the local cluster: Arrow columns land as the records they hold, in transactions."""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pytest

from oncelog.client import AdminClient, Consumer, NewTopic, Producer
from oncelog.client.partitioner import partition_for_key
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


def new_topic(bootstrap: str, partitions: int) -> str:
    name = f"arrow-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def read_all(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple[bytes | None, bytes | None]]:
    """(partition, offset) -> (key, value) of every committed record, once no transaction is open on ``topic``."""
    deadline = time.monotonic() + 30
    out: dict[tuple[int, int], tuple[bytes | None, bytes | None]] = {}
    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        partitions = consumer.partitions_for(topic)
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        with Consumer(bootstrap, isolation_level="read_uncommitted") as uncommitted:
            while consumer.end_offsets(partitions) != uncommitted.end_offsets(partitions):
                assert time.monotonic() < deadline, f"a transaction on {topic} stayed open"
                time.sleep(0.02)
        end = consumer.end_offsets(partitions)
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            for record in consumer.poll(timeout_ms=200):
                out[(record.partition, record.offset)] = (record.key, record.value)
    return out


def test_keyed_columns_land_in_each_keys_partition_at_the_offsets_their_future_reports(cluster: LocalCluster) -> None:
    """Many small batches, keys hashed per record (null keys to the sticky partition), null values, strings."""
    topic = new_topic(cluster.bootstrap, 4)
    count = 6_000
    keys = [None if i % 11 == 0 else f"customer-{i % 97}" for i in range(count)]
    values = [None if i % 13 == 0 else f"{i:06d}-" + "é" * (i % 300) for i in range(count)]
    with Producer(cluster.bootstrap, batch_size=4096, transactional_id=f"arrow-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        first = producer.send_arrow(topic, pa.array(values[:4000]), keys=pa.array(keys[:4000]))
        second = producer.send_arrow(topic, pa.chunked_array([pa.array(values[4000:])]), keys=pa.array(keys[4000:]))
        producer.commit_transaction()
        metas = [*first.result(timeout=0), *second.result(timeout=0)]
        assert producer.metrics()["batches_sent"] > 50
    stored = read_all(cluster.bootstrap, topic)
    assert len(stored) == count
    for key, value, meta in zip(keys, values, metas, strict=True):
        encoded_key = None if key is None else key.encode()
        if encoded_key is not None:
            assert meta.partition == partition_for_key(encoded_key, 4)
        assert stored[(meta.partition, meta.offset)] == (encoded_key, None if value is None else value.encode())


def test_send_and_send_arrow_to_one_partition_keep_the_order_they_were_called_in(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 1)
    with Producer(cluster.bootstrap, batch_size=2048) as producer:
        producer.send(topic, b"first")
        producer.send_arrow(topic, pa.array([f"column-{i}".encode() for i in range(500)], pa.large_binary()))
        producer.send(topic, b"last")
        producer.flush()
    stored = read_all(cluster.bootstrap, topic)
    assert [stored[(0, offset)][1] for offset in range(502)] == [
        b"first",
        *(f"column-{i}".encode() for i in range(500)),
        b"last",
    ]


def test_an_aborted_transactions_columns_stay_invisible(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 2)
    with Producer(cluster.bootstrap, transactional_id=f"arrow-abort-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send_arrow(topic, pa.array([b"aborted"] * 300), partition=1).result(timeout=30)
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send_arrow(topic, pa.array([b"kept"] * 200), partition=1)
        producer.commit_transaction()
    stored = read_all(cluster.bootstrap, topic)
    assert sorted(stored.values()) == [(None, b"kept")] * 200
    assert {partition for partition, _ in stored} == {1}
