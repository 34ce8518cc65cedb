"""Arrow in and out against the local cluster: Producer.send_arrow lands columns as the records they hold, in
transactions; Consumer.poll_arrow reads back exactly what poll() reads, from the same positions."""

from __future__ import annotations

import uuid

import pyarrow as pa
import pytest

from oncelog.client import AdminClient, Consumer, NewTopic, Producer
from oncelog.client.partitioner import partition_for_key
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all as read_records

pytestmark = pytest.mark.timeout(120)


def new_topic(bootstrap: str, partitions: int) -> str:
    name = f"arrow-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def read_all(bootstrap: str, topic: str) -> dict[tuple[int, int], tuple[bytes | None, bytes | None]]:
    """(partition, offset) -> (key, value) of every committed record, once no transaction is open on ``topic``."""
    return {(r.partition, r.offset): (r.key, r.value) for r in read_records(bootstrap, topic)}


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


def _polled(consumer: Consumer, as_arrow: bool) -> list[tuple[int, int, bytes | None, bytes | None, tuple]]:
    if not as_arrow:
        return [
            (r.partition, r.offset, r.key, r.value, r.headers) for r in consumer.poll(timeout_ms=500, max_records=97)
        ]
    table = consumer.poll_arrow(timeout_ms=500, max_records=97)
    assert table.schema.names == ["topic", "partition", "offset", "timestamp", "key", "value", "headers"]
    return [
        (
            row["partition"],
            row["offset"],
            row["key"],
            row["value"],
            tuple((h["key"], h["value"]) for h in row["headers"]),
        )
        for row in table.to_pylist()
    ]


def test_poll_arrow_reads_what_poll_reads_aborted_data_and_markers_left_out(cluster: LocalCluster) -> None:
    """Committed, aborted and header-carrying records in two partitions, read by poll(), by poll_arrow() and by
    the two in turn: the same records in the same order, and the same positions at the end."""
    topic = new_topic(cluster.bootstrap, 2)
    with Producer(cluster.bootstrap, batch_size=4096, transactional_id=f"arrow-read-{uuid.uuid4().hex[:6]}") as p:
        p.init_transactions()
        for round_ in range(3):
            p.begin_transaction()
            p.send_arrow(topic, pa.array([f"r{round_}-{i}" for i in range(700)]), keys=pa.array([b"a", b"b"] * 350))
            p.send(topic, b"with-headers", key=b"a", headers=[("trace", b"t1"), ("empty", None)])
            p.commit_transaction()
            p.begin_transaction()
            p.send_arrow(topic, pa.array([b"aborted"] * 50), keys=pa.array([b"a", b"b"] * 25))
            p.flush()
            p.abort_transaction()
    results = {}
    for mode in ("rows", "arrow", "both"):
        # small answers: the records come through many Fetches, each fetched ahead of the one being read
        with Consumer(cluster.bootstrap, isolation_level="read_committed", max_partition_fetch_bytes=4096) as consumer:
            partitions = consumer.partitions_for(topic)
            consumer.assign(partitions)
            consumer.seek_to_beginning()
            end = consumer.end_offsets(partitions)
            got: list = []
            calls = 0
            while any(consumer.position(tp) < end[tp] for tp in partitions):
                calls += 1
                got.extend(_polled(consumer, mode == "arrow" or (mode == "both" and calls % 2 == 0)))
            results[mode] = (got, {tp.partition: consumer.position(tp) for tp in partitions})
    assert results["arrow"] == results["rows"] == results["both"]
    got, _ = results["rows"]
    assert len(got) == 3 * 701
    assert b"aborted" not in {value for *_, value, _ in got}
    assert (b"a", b"with-headers", (("trace", b"t1"), ("empty", None))) in {(k, v, h) for _, _, k, v, h in got}


def _headers(pairs: list[dict[str, object]]) -> tuple:
    return tuple((pair["key"], pair["value"]) for pair in pairs)
