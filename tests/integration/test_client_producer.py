"""Producer against the local cluster: acknowledgements, partitioning, error reporting and bad input."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from oncelog.client import (
    AbortableError,
    AdminClient,
    BootstrapError,
    Consumer,
    IllegalStateError,
    NewTopic,
    Producer,
    TopicPartition,
    TransactionState,
)
from oncelog.client.partitioner import partition_for_key
from oncelog.errors import InvalidRecord, MessageTooLarge, Reason, UnknownTopicOrPartition
from oncelog.records import RecordsBuilder
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


def new_topic(bootstrap: str, partitions: int = 1, **configs: str) -> str:
    name = f"producer-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions, configs=configs)])
    return name


def read_values(bootstrap: str, topic: str, isolation: str = "read_committed") -> dict[int, list[bytes | None]]:
    """Values per partition, up to the end for ``isolation``, once every transaction's markers landed."""
    deadline = time.monotonic() + 30
    with Consumer(bootstrap, isolation_level=isolation) as consumer:
        partitions = consumer.partitions_for(topic)
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        with Consumer(bootstrap, isolation_level="read_uncommitted") as uncommitted:
            while consumer.end_offsets(partitions) != uncommitted.end_offsets(partitions):
                assert time.monotonic() < deadline, f"a transaction on {topic} stayed open"
                time.sleep(0.02)
        end = consumer.end_offsets(partitions)
        out: dict[int, list[bytes | None]] = {tp.partition: [] for tp in partitions}
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            for record in consumer.poll(timeout_ms=200):
                out[record.partition].append(record.value)
        return out


def test_send_acknowledges_offsets_in_order_and_keys_follow_murmur2(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 5)
    keys = [f"customer-{i}".encode() for i in range(50)]
    with Producer(cluster.bootstrap) as producer:
        futures = [producer.send(topic, b"v" + key, key=key) for key in keys]
        producer.flush()
        metas = [f.result(timeout=0) for f in futures]
    assert [m.partition for m in metas] == [partition_for_key(key, 5) for key in keys]
    per_partition: dict[int, list[int]] = {}
    for meta in metas:
        per_partition.setdefault(meta.partition, []).append(meta.offset)
    assert all(offsets == list(range(len(offsets))) for offsets in per_partition.values())
    stored = read_values(cluster.bootstrap, topic)
    assert sorted(v for values in stored.values() for v in values) == sorted(b"v" + key for key in keys)


def test_a_backlog_goes_out_several_batches_a_request_and_every_record_is_where_its_future_says(
    cluster: LocalCluster,
) -> None:
    topic = new_topic(cluster.bootstrap, 2)
    values = [b"%05d" % i + b"x" * 995 for i in range(3000)]
    # small batches and a long linger: the records queue up as a backlog of full batches before the first request
    with Producer(cluster.bootstrap, batch_size=4096, linger_ms=200, transactional_id=f"backlog-{uuid.uuid4()}") as p:
        p.init_transactions()
        p.begin_transaction()
        futures = [p.send(topic, value, partition=i % 2) for i, value in enumerate(values)]
        p.commit_transaction()
        metas = [f.result(timeout=0) for f in futures]
        counters = p.metrics()
    assert counters["produce_requests"] < counters["batches_sent"]  # requests did carry several batches
    stored = read_values(cluster.bootstrap, topic)
    for value, meta in zip(values, metas, strict=True):
        assert stored[meta.partition][meta.offset] == value
    assert sum(len(v) for v in stored.values()) == len(values)


def test_idempotent_producer_gets_an_id_and_partitions_track_its_sequence(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 1)
    with Producer(cluster.bootstrap) as producer:
        for i in range(30):
            producer.send(topic, f"{i}".encode())
        producer.flush()
        identity = producer.producer_id_and_epoch
        assert identity is not None and identity.is_valid and identity.epoch == 0
    with AdminClient(cluster.bootstrap) as admin:
        states = admin.describe_producers([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    assert [(s.producer_id, s.producer_epoch, s.last_sequence) for s in states] == [(identity.producer_id, 0, 29)]


def test_rejected_batch_fails_its_records_and_the_producer_carries_on(cluster: LocalCluster) -> None:
    """The topic refuses a too-large batch: only its records fail; the epoch is bumped locally
    (design/kafka-semantics.md §4.2)."""
    topic = new_topic(cluster.bootstrap, 1, max_message_bytes="1024")
    with Producer(cluster.bootstrap, linger_ms=0) as producer:
        assert producer.send(topic, b"small-0").result(timeout=30).offset == 0
        too_big = producer.send(topic, b"x" * 4000)
        with pytest.raises(MessageTooLarge):
            too_big.result(timeout=30)
        assert producer.send(topic, b"small-1").result(timeout=30).offset == 1
        identity = producer.producer_id_and_epoch
        assert identity is not None and identity.epoch == 1, "a failed batch leaves a sequence gap: new epoch"
    assert read_values(cluster.bootstrap, topic) == {0: [b"small-0", b"small-1"]}


def test_failed_batch_makes_the_transaction_abortable(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 1, max_message_bytes="1024")
    with Producer(cluster.bootstrap, transactional_id=f"abortable-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept-out")
        producer.send(topic, b"y" * 4000, partition=0)
        with pytest.raises(AbortableError):
            producer.commit_transaction()
        assert producer.transaction_state is TransactionState.ABORTABLE_ERROR
        with pytest.raises(AbortableError):
            producer.send(topic, b"refused")
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
    assert read_values(cluster.bootstrap, topic) == {0: [b"committed"]}


def _fail_encoding_of(monkeypatch: pytest.MonkeyPatch, poisoned: bytes) -> None:
    """Make the batch encoder raise for any batch holding ``poisoned`` (a codec that fails at drain time)."""
    build = RecordsBuilder.build

    def failing_build(self: RecordsBuilder, **kwargs: object) -> bytes:
        payload = build(self, **kwargs)
        if poisoned in payload:
            raise RuntimeError("codec failed")
        return payload

    monkeypatch.setattr(RecordsBuilder, "build", failing_build)


def test_batch_that_cannot_be_encoded_fails_its_records_instead_of_hanging(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch whose encoding raises fails its records at once; the idempotent producer carries on after it."""
    topic = new_topic(cluster.bootstrap, 1)
    _fail_encoding_of(monkeypatch, b"poisoned")
    with Producer(cluster.bootstrap, linger_ms=0, delivery_timeout_ms=60_000) as producer:
        assert producer.send(topic, b"before").result(timeout=30).offset == 0
        with pytest.raises(InvalidRecord, match="could not be encoded"):
            producer.send(topic, b"poisoned").result(timeout=10)
        assert producer.send(topic, b"after").result(timeout=30).offset == 1
    assert read_values(cluster.bootstrap, topic) == {0: [b"before", b"after"]}


def test_batch_that_cannot_be_encoded_makes_the_transaction_abortable(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit never succeeds without a record that could not be encoded."""
    topic = new_topic(cluster.bootstrap, 1)
    _fail_encoding_of(monkeypatch, b"poisoned")
    with Producer(cluster.bootstrap, transactional_id=f"unencodable-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept-out")
        producer.send(topic, b"poisoned")
        with pytest.raises(AbortableError):
            producer.commit_transaction()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"committed")
        producer.commit_transaction()
    assert read_values(cluster.bootstrap, topic) == {0: [b"committed"]}


def test_close_aborts_an_open_transaction(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 1)
    tid = f"close-{uuid.uuid4().hex[:6]}"
    producer = Producer(cluster.bootstrap, transactional_id=tid)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"never-committed")
    producer.flush()
    producer.close()
    with AdminClient(cluster.bootstrap) as admin:
        assert admin.describe_transactions([tid])[tid].state in ("prepare_abort", "complete_abort")
    assert read_values(cluster.bootstrap, topic) == {0: []}, "the LSO moved past the aborted data"
    assert read_values(cluster.bootstrap, topic, "read_uncommitted") == {0: [b"never-committed"]}


def test_a_forced_close_leaves_the_transaction_to_the_coordinator_timeout(cluster: LocalCluster) -> None:
    """close(timeout=0), Kafka's close(Duration.ZERO): no EndTxn; the transaction stays open until it times out."""
    topic = new_topic(cluster.bootstrap, 1)
    tid = f"forced-{uuid.uuid4().hex[:6]}"
    producer = Producer(cluster.bootstrap, transactional_id=tid, transaction_timeout_ms=3_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"abandoned")
    producer.flush()
    producer.close(timeout=0)
    with AdminClient(cluster.bootstrap) as admin:
        assert admin.describe_transactions([tid])[tid].state == "ongoing", "the forced close ended the transaction"
        deadline = time.monotonic() + 60
        while admin.describe_transactions([tid])[tid].state == "ongoing":
            assert time.monotonic() < deadline, "the coordinator never timed the abandoned transaction out"
            time.sleep(0.1)
        assert admin.describe_transactions([tid])[tid].state in ("prepare_abort", "complete_abort")
    assert read_values(cluster.bootstrap, topic) == {0: []}, "the LSO moved past the aborted data"
    assert read_values(cluster.bootstrap, topic, "read_uncommitted") == {0: [b"abandoned"]}


# ---------------------------------------------------------------------------------------------- bad input


def test_unknown_topic_and_partition_name_the_fix(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, 2)
    with Producer(cluster.bootstrap) as producer:
        with pytest.raises(UnknownTopicOrPartition, match="create it first"):
            producer.send("no-such-topic", b"x")
        with pytest.raises(UnknownTopicOrPartition, match="has 2 partition"):
            producer.send(topic, b"x", partition=7)


def test_record_above_max_request_size_is_refused_at_send(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    with Producer(cluster.bootstrap, max_request_size=64 * 1024, batch_size=16 * 1024) as producer:
        with pytest.raises(MessageTooLarge, match="max_request_size"):
            producer.send(topic, b"z" * 100_000)
        with pytest.raises(TypeError, match="serialize"):
            producer.send(topic, "a str, not bytes")


def test_transactional_calls_out_of_order_are_refused_with_the_fix(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    with Producer(cluster.bootstrap, transactional_id=f"order-{uuid.uuid4().hex[:6]}") as producer:
        with pytest.raises(IllegalStateError, match=r"init_transactions\(\) first"):
            producer.send(topic, b"x")
        with pytest.raises(IllegalStateError, match=r"init_transactions\(\) first"):
            producer.begin_transaction()
        producer.init_transactions()
        with pytest.raises(IllegalStateError, match="already called"):
            producer.init_transactions()
        with pytest.raises(IllegalStateError, match=r"begin_transaction\(\) first"):
            producer.commit_transaction()
        with pytest.raises(IllegalStateError, match=r"begin_transaction\(\) first"):
            producer.abort_transaction()
        with pytest.raises(IllegalStateError, match=r"begin_transaction\(\) first"):
            producer.send(topic, b"x")
        producer.begin_transaction()
        with pytest.raises(IllegalStateError, match="not allowed"):
            producer.begin_transaction()
        producer.abort_transaction()
    with Producer(cluster.bootstrap) as plain, pytest.raises(IllegalStateError, match="transactional_id"):
        plain.init_transactions()


def test_closed_producer_refuses_records(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    producer = Producer(cluster.bootstrap)
    producer.close()
    producer.close()  # idempotent
    with pytest.raises(IllegalStateError, match="closed"):
        producer.send(topic, b"late")


def test_bad_bootstrap_is_reported_with_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BootstrapError, match="host:port"):
        Producer("localhost")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BootstrapError, match="oncelog dev"):
        Producer()
    with Producer("127.0.0.1:1", max_block_ms=300) as producer, pytest.raises(BootstrapError) as info:
        producer.send("orders", b"x")
    assert "127.0.0.1:1" in info.value.message and info.value.reason is Reason.NETWORK_EXCEPTION


def test_invalid_configuration_lists_every_problem(cluster: LocalCluster) -> None:
    with pytest.raises(ValueError) as info:
        Producer(cluster.bootstrap, transactional_id="t", enable_idempotence=False, acks="2", max_in_flight=9)
    message = str(info.value)
    assert "acks='2'" in message and "must be idempotent" in message and "max_in_flight" in message


def test_send_batch_refused_in_a_later_partition_queues_nothing(cluster: LocalCluster) -> None:
    """A bad record refuses the whole bulk send, also the records bound for partitions listed before it."""
    topic = new_topic(cluster.bootstrap, 2)
    first = next(k for k in (f"k{i}".encode() for i in range(100)) if partition_for_key(k, 2) == 0)
    second = next(k for k in (f"k{i}".encode() for i in range(100)) if partition_for_key(k, 2) == 1)
    with Producer(cluster.bootstrap) as producer:
        with pytest.raises(TypeError, match="value must be bytes"):
            producer.send_batch(topic, [b"good", "not bytes"], keys=[first, second])
        producer.flush()
        producer.send(topic, b"after", key=first).result(timeout=30)
    assert read_values(cluster.bootstrap, topic) == {0: [b"after"], 1: []}
