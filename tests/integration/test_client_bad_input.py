"""Client misuse against the local cluster: each mistake raises a clear exception naming the problem and the fix.

Covers the "Bad input" list of the client: an unknown topic, a record above ``max_request_size``, the
transactional API out of order (design/kafka-semantics.md §1.1: InitProducerId before any transaction, BeginTxn before
EndTxn), a closed producer, and a bootstrap address that is malformed or where nothing listens.
"""

from __future__ import annotations

import socket
import time
import uuid

import pytest

from oncelog.client import (
    AdminClient,
    BootstrapError,
    Consumer,
    IllegalStateError,
    NewTopic,
    Producer,
    TopicPartition,
    TransactionState,
)
from oncelog.errors import MessageTooLarge, Reason, UnknownTopicOrPartition
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(120)


def new_topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"bad-input-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def unused_address() -> str:
    """A loopback address on which nothing listens (the port was free a moment ago)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def committed_values(bootstrap: str, topic: str) -> list[bytes | None]:
    """Committed values of partition 0, read once the commit markers landed (they follow the commit's return)."""
    tp = TopicPartition(topic, 0)
    deadline = time.monotonic() + 30
    with Consumer(bootstrap, isolation_level="read_committed") as consumer:
        consumer.assign([tp])
        consumer.seek_to_beginning()
        with Consumer(bootstrap, isolation_level="read_uncommitted") as uncommitted:
            while consumer.end_offsets([tp]) != uncommitted.end_offsets([tp]):
                assert time.monotonic() < deadline, f"a transaction on {topic} stayed open"
                time.sleep(0.02)
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes | None] = []
        while consumer.position(tp) < end:
            values.extend(record.value for record in consumer.poll(timeout_ms=200))
        return values


# ---------------------------------------------------------------------------------------------- topics


def test_send_to_unknown_topic_names_the_topic_and_says_to_create_it(cluster: LocalCluster) -> None:
    missing = f"never-created-{uuid.uuid4().hex[:6]}"
    with Producer(cluster.bootstrap) as producer:
        with pytest.raises(UnknownTopicOrPartition) as info:
            producer.send(missing, b"x")
        assert missing in info.value.message
        assert "create it first" in info.value.message
        assert info.value.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(UnknownTopicOrPartition, match=missing):
            producer.partitions_for(missing)


def test_unknown_topic_inside_a_transaction_leaves_the_transaction_committable(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    with Producer(cluster.bootstrap, transactional_id=f"bad-topic-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"kept")
        with pytest.raises(UnknownTopicOrPartition, match="create it first"):
            producer.send(f"never-created-{uuid.uuid4().hex[:6]}", b"lost")
        assert producer.transaction_state is TransactionState.IN_TRANSACTION
        producer.commit_transaction()
    assert committed_values(cluster.bootstrap, topic) == [b"kept"]


def test_send_to_a_partition_the_topic_does_not_have_gives_the_partition_count(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap, partitions=3)
    with Producer(cluster.bootstrap) as producer, pytest.raises(UnknownTopicOrPartition) as info:
        producer.send(topic, b"x", partition=3)
    assert "partition 3" in info.value.message and "has 3 partition(s)" in info.value.message


# ---------------------------------------------------------------------------------------------- record size


def test_value_above_max_request_size_is_refused_at_send_with_the_limit_and_the_fix(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    limit = 32 * 1024
    with Producer(cluster.bootstrap, max_request_size=limit, batch_size=8 * 1024) as producer:
        with pytest.raises(MessageTooLarge) as info:
            producer.send(topic, b"z" * (limit + 1))
        assert f"max_request_size={limit}" in info.value.message
        assert "raise max_request_size" in info.value.message
        # the refusal is local and leaves the producer usable for records that fit
        assert producer.send(topic, b"fits").result(timeout=30).offset == 0


# ---------------------------------------------------------------------------------------------- transactions


def test_transactional_calls_before_init_transactions_say_to_call_it(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    tid = f"no-init-{uuid.uuid4().hex[:6]}"
    with Producer(cluster.bootstrap, transactional_id=tid) as producer:
        for call in (
            producer.begin_transaction,
            lambda: producer.send(topic, b"x"),
            producer.commit_transaction,
            producer.abort_transaction,
        ):
            with pytest.raises(IllegalStateError) as info:
                call()
            assert "init_transactions() first" in info.value.message
            assert tid in info.value.message
        assert producer.transaction_state is TransactionState.UNINITIALIZED


def test_commit_without_begin_transaction_says_to_begin_one(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    with Producer(cluster.bootstrap, transactional_id=f"no-begin-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        with pytest.raises(IllegalStateError, match=r"commit_transaction\(\) needs an open transaction"):
            producer.commit_transaction()
        with pytest.raises(IllegalStateError, match=r"call begin_transaction\(\) first"):
            producer.send(topic, b"x")
        # the refusals changed nothing: a transaction can still run to completion
        assert producer.transaction_state is TransactionState.READY
        producer.begin_transaction()
        producer.send(topic, b"after")
        producer.commit_transaction()
    assert committed_values(cluster.bootstrap, topic) == [b"after"]


def test_transactional_api_on_a_producer_without_transactional_id_says_to_pass_one(cluster: LocalCluster) -> None:
    with Producer(cluster.bootstrap) as producer:
        for name, call in (
            ("init_transactions()", producer.init_transactions),
            ("begin_transaction()", producer.begin_transaction),
            ("commit_transaction()", producer.commit_transaction),
        ):
            with pytest.raises(IllegalStateError) as info:
                call()
            assert name in info.value.message and "pass transactional_id=" in info.value.message


# ---------------------------------------------------------------------------------------------- closed producer


def test_closed_producer_refuses_every_call_and_says_to_create_a_new_one(cluster: LocalCluster) -> None:
    topic = new_topic(cluster.bootstrap)
    producer = Producer(cluster.bootstrap, transactional_id=f"closed-{uuid.uuid4().hex[:6]}")
    producer.init_transactions()
    producer.close()
    producer.close()  # a second close is a no-op, not an error
    for call in (
        lambda: producer.send(topic, b"late"),
        producer.begin_transaction,
        producer.commit_transaction,
        lambda: producer.partitions_for(topic),
    ):
        with pytest.raises(IllegalStateError) as info:
            call()
        assert "the producer is closed" in info.value.message
        assert "create a new Producer" in info.value.message


# ---------------------------------------------------------------------------------------------- bootstrap


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("localhost", "'localhost' is not host:port"),
        ("127.0.0.1:http", "'127.0.0.1:http' is not host:port"),
        ("127.0.0.1:70000", "'127.0.0.1:70000' has an invalid port 70000: a port is 1-65535"),
        (":7101", "':7101' is not host:port"),
        (" , ", "bootstrap is empty"),
    ],
)
def test_malformed_bootstrap_is_refused_at_construction_by_every_client(address: str, fragment: str) -> None:
    for client in (Producer, Consumer, AdminClient):
        with pytest.raises(BootstrapError) as info:
            client(address)
        assert fragment in info.value.message, client
        assert "host:port" in info.value.message


def test_bootstrap_where_nothing_listens_names_the_address_and_says_to_start_the_cluster() -> None:
    address = unused_address()
    producer = Producer(address, max_block_ms=500, request_timeout_ms=300)
    with producer, pytest.raises(BootstrapError) as info:
        producer.send("orders", b"x")
    assert address in info.value.message
    assert "oncelog dev" in info.value.message and "bootstrap" in info.value.message
    assert info.value.reason is Reason.NETWORK_EXCEPTION


def test_admin_and_consumer_where_nothing_listens_raise_bootstrap_error() -> None:
    address = unused_address()
    with AdminClient(address, request_timeout_ms=300) as admin, pytest.raises(BootstrapError, match=address):
        admin.describe_cluster()
    consumer = Consumer(address, default_api_timeout_ms=500, request_timeout_ms=300)
    with consumer, pytest.raises(BootstrapError, match=address):
        consumer.partitions_for("orders")
