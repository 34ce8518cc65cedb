"""The client library under real faults of the services: a slow disk, a moved leader, a restarted node.

Each test starts a cluster of its own (the faults would disturb other tests) and proves that its fault landed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from oncelog.client import AdminClient, Consumer, NewTopic, Producer, RetriableError, TopicPartition
from oncelog.errors import MessageTooLarge
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all

pytestmark = pytest.mark.timeout(180)

SLOW_DISK = Path(__file__).parent / "slow_disk"


def wait_until(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll ``condition`` until it holds; fails with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def new_topic(bootstrap: str, partitions: int = 1, **configs: str) -> str:
    name = f"faults-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions, configs=configs)])
    return name


@pytest.fixture
def slow_disk(tmp_path: Path) -> Iterator[tuple[LocalCluster, Path]]:
    """A cluster whose storage node's fsyncs wait while ``<control>/hold`` exists (see slow_disk/sitecustomize.py)."""
    control = tmp_path / "disk"
    control.mkdir()
    cluster = LocalCluster(tmp_path / "cluster", storage_nodes=1)
    env = cluster.node("partition-storage-0").env
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(SLOW_DISK), env.get("PYTHONPATH", "")) if p)
    env["ONCELOG_TEST_SLOW_DISK"] = str(control)
    with cluster:
        yield cluster, control


def test_batch_written_before_its_answer_timed_out_is_not_written_again_after_an_epoch_bump(
    slow_disk: tuple[LocalCluster, Path],
) -> None:
    """The answer to a written batch times out on a slow disk; a later batch is refused for good, which bumps the
    idempotent producer's epoch. The first batch keeps its original stamp until the partition answers for it, so it
    is written once (Kafka's client re-stamps it under the new epoch and writes it twice)."""
    cluster, control = slow_disk
    topic = new_topic(cluster.bootstrap, 1, max_message_bytes="1024")
    with Producer(cluster.bootstrap, linger_ms=0, request_timeout_ms=1000, retry_backoff_ms=50) as producer:
        assert producer.send(topic, b"before").result(timeout=30).offset == 0
        (control / "hold").touch()
        first = producer.send(topic, b"first")
        wait_until((control / "held").exists, "the partition to wait for the disk")
        wait_until(lambda: producer.metrics()["batch_retries"] >= 1, "the first batch's answer to time out")
        refused = producer.send(topic, b"x" * 4000)
        with pytest.raises(MessageTooLarge):
            refused.result(timeout=60)
        (control / "hold").unlink()
        assert first.result(timeout=60).offset == 1
        identity = producer.producer_id_and_epoch
        assert identity is not None and identity.epoch == 1, "the refused batch left a gap: the epoch was bumped"
        assert producer.send(topic, b"after").result(timeout=30).offset == 2
    assert [r.value for r in read_all(cluster.bootstrap, topic, "read_uncommitted")] == [b"before", b"first", b"after"]


def test_commit_after_a_failed_offset_commit_carries_the_offsets(tmp_path: Path) -> None:
    """send_offsets_to_transaction() times out (the group's offsets service is down); the caller goes on and
    commits. The commit must carry the offsets (or fail): output without its input offsets would make a restarted
    copier process the input again."""
    group = f"copier-{uuid.uuid4().hex[:6]}"
    with LocalCluster(tmp_path, storage_nodes=1) as cluster:
        source, sink = new_topic(cluster.bootstrap), new_topic(cluster.bootstrap)
        tp = TopicPartition(source, 0)
        producer = Producer(
            cluster.bootstrap, transactional_id=f"copier-{group}", request_timeout_ms=1000, retry_backoff_ms=50
        )
        with producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(sink, b"output of input 0..9").result(timeout=30)
            cluster.kill("group-offsets-0")
            with pytest.raises(RetriableError):
                producer.send_offsets_to_transaction({tp: 10}, group, timeout=2)
            cluster.restart("group-offsets-0")
            producer.commit_transaction(timeout=60)
        with Consumer(cluster.bootstrap, group_id=group) as consumer:
            committed = consumer.committed([tp], timeout=30)[tp]
        assert committed is not None and committed.offset == 10
        assert [r.value for r in read_all(cluster.bootstrap, sink)] == [b"output of input 0..9"]


def produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    with Producer(bootstrap) as producer:
        for value in values:
            producer.send(topic, value)


def restart_on_a_new_port(cluster: LocalCluster, node_id: str) -> str:
    """Kill ``node_id`` and start it again; it binds a new free port (the fault: its old address is dead)."""
    old = cluster.node(node_id).address
    cluster.kill(node_id)
    new = cluster.restart(node_id)
    assert new != old, "the node came back on its old port: the fault did not land"
    return new


def test_end_and_beginning_offsets_retry_within_their_timeout_after_the_leader_moved(tmp_path: Path) -> None:
    with LocalCluster(tmp_path, storage_nodes=1) as cluster:
        topic = new_topic(cluster.bootstrap)
        tp = TopicPartition(topic, 0)
        produce(cluster.bootstrap, topic, [b"a", b"b", b"c"])
        with Consumer(cluster.bootstrap) as consumer:
            assert consumer.end_offsets([tp]) == {tp: 3}  # the leader's address is cached now
            restart_on_a_new_port(cluster, "partition-storage-0")
            assert consumer.end_offsets([tp], timeout=60) == {tp: 3}
            restart_on_a_new_port(cluster, "partition-storage-0")
            assert consumer.beginning_offsets([tp], timeout=60) == {tp: 0}


def test_consumer_without_a_group_reaches_the_cluster_after_its_bootstrap_node_moved(tmp_path: Path) -> None:
    """The consumer's only bootstrap address is the storage node that leads its partition; the node restarts on
    a new port while every other process stays up. The consumer finds it again through the nodes it learned."""
    with LocalCluster(tmp_path, storage_nodes=1) as cluster:
        topic = new_topic(cluster.bootstrap)
        tp = TopicPartition(topic, 0)
        produce(cluster.bootstrap, topic, [b"before"])
        storage = cluster.node("partition-storage-0")
        with Consumer(storage.address) as consumer:
            consumer.assign([tp])
            assert [r.value for r in poll_until(consumer, 1)] == [b"before"]
            wait_until(lambda: len(consumer._metadata._addresses()) > 1, "the consumer to learn the cluster's nodes")
            restart_on_a_new_port(cluster, storage.node_id)
            produce(cluster.bootstrap, topic, [b"after"])
            assert [r.value for r in poll_until(consumer, 1)] == [b"after"]


def poll_until(consumer: Consumer, count: int, timeout_s: float = 60) -> list:
    records: list = []
    deadline = time.monotonic() + timeout_s
    while len(records) < count:
        assert time.monotonic() < deadline, f"{len(records)} of {count} records arrived"
        records.extend(consumer.poll(timeout_ms=200, max_records=count - len(records)))
    return records


def test_commit_whose_decision_is_durable_is_not_reported_as_definitely_failed(tmp_path: Path) -> None:
    """EndTxn reached the coordinator, which wrote PrepareCommit and held the answer for the markers (the storage
    node is paused); the coordinator dies; later attempts find no coordinator (a definite answer). The commit will
    happen, so the commit's RetriableError must be indeterminate, whatever the last attempt answered."""
    tid = f"indeterminate-{uuid.uuid4().hex[:6]}"
    cluster = LocalCluster(tmp_path, storage_nodes=1)
    # short leases: once the coordinator is dead, FindCoordinator soon answers "no coordinator" (definite)
    cluster.node("txn-coordinator-0").env.update(
        ONCELOG_TXN_COORDINATOR_LEASE_MS="1500", ONCELOG_TXN_COORDINATOR_NODE_LEASE_MS="1500"
    )
    with cluster:
        topic = new_topic(cluster.bootstrap)
        storage = cluster.node("partition-storage-0").process
        assert storage is not None
        producer = Producer(cluster.bootstrap, transactional_id=tid, request_timeout_ms=3000, retry_backoff_ms=50)
        outcome: list[BaseException | None] = []
        try:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, b"decided").result(timeout=30)
            storage.send_signal(signal.SIGSTOP)  # markers cannot be written: a waiting commit is held
            commit = lambda: producer.commit_transaction(10, wait_for_completion=True)  # noqa: E731
            committing = threading.Thread(target=lambda: outcome.append(_raised(commit)))
            committing.start()
            with AdminClient(cluster.bootstrap) as admin:
                wait_until(
                    lambda: admin.describe_transactions([tid])[tid].state == "prepare_commit",
                    "the coordinator to make the commit durable",
                )
            cluster.kill("txn-coordinator-0")
            committing.join(timeout=60)
            assert not committing.is_alive()
        finally:
            storage.send_signal(signal.SIGCONT)
        [error] = outcome
        assert isinstance(error, RetriableError), error
        assert error.definite is False, f"a durable commit decision reported as definitely failed: {error}"
        cluster.restart("txn-coordinator-0")
        producer.commit_transaction(60)  # the same decision, completed
        producer.close()
        assert [r.value for r in read_all(cluster.bootstrap, topic)] == [b"decided"]


def _raised(action: Callable[[], object]) -> BaseException | None:
    try:
        action()
    except BaseException as err:  # handed to the test thread
        return err
    return None
