"""The read-after-commit contract (docs/design/read-after-commit.md) against the local cluster.

``commit_transaction()`` returns once the commit is decided; its markers land moments later. With
``wait_for_completion`` (a keyword, or the ``commit_wait_for_completion`` producer setting) it returns only once
every marker is written, so a read_committed read started afterwards sees every record. The storage nodes are
frozen with SIGSTOP between the flush and the commit, so the markers cannot land until the test lets them.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import oncelog.aio
from oncelog.client import AdminClient, NewTopic, Producer, RetriableError
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 2
VALUES = [f"v{i}".encode() for i in range(20)]


def new_topic(bootstrap: str) -> str:
    name = f"read-after-commit-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=PARTITIONS)])
    return name


@contextmanager
def storage_frozen(cluster: LocalCluster) -> Iterator[None]:
    """Every storage node stopped (a long pause, not a crash): nothing can write the markers meanwhile."""
    pids = [n.process.pid for n in cluster.nodes if n.service == "partition-storage" and n.process is not None]
    assert pids, "the cluster has no storage node"
    cluster.freeze(pids)
    try:
        yield
    finally:
        cluster.thaw(pids)


def state_of(bootstrap: str, transactional_id: str) -> str:
    with AdminClient(bootstrap) as admin:
        return admin.describe_transactions([transactional_id])[transactional_id].state


def decided_not_complete(bootstrap: str, transactional_id: str) -> None:
    """The commit is decided (PrepareCommit) and, with the storage nodes frozen, cannot be complete."""
    deadline = time.monotonic() + 30
    while (state := state_of(bootstrap, transactional_id)) == "ongoing":  # an EndTxn cut by its deadline may land
        assert time.monotonic() < deadline, "the commit was never decided"
        time.sleep(0.05)
    assert state == "prepare_commit", state


def committed_values(bootstrap: str, topic: str) -> list[bytes]:
    """What a read_committed read started now returns, without waiting for open transactions to settle."""
    return sorted(r.value for r in read_all(bootstrap, topic, settle=False) if r.value is not None)


@pytest.mark.parametrize("how", ["keyword", "setting"])
def test_commit_waiting_for_completion_returns_only_once_every_marker_is_written(
    cluster: LocalCluster, how: str
) -> None:
    topic, tid = new_topic(cluster.bootstrap), f"rac-{uuid.uuid4().hex[:8]}"
    wait = {"wait_for_completion": True} if how == "keyword" else {}
    setting = {"commit_wait_for_completion": True} if how == "setting" else {}
    with Producer(cluster.bootstrap, transactional_id=tid, **setting) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i, value in enumerate(VALUES):
            producer.send(topic, value, partition=i % PARTITIONS)
        producer.flush()
        with storage_frozen(cluster):
            # "decided, but not every marker was written in time", or, when the machine is slow enough that the
            # held EndTxn's answer misses the deadline, "did not complete in time": never a return
            with pytest.raises(RetriableError):
                producer.commit_transaction(timeout=2, **wait)  # type: ignore[arg-type]
            decided_not_complete(cluster.bootstrap, tid)
        producer.commit_transaction(**wait)  # type: ignore[arg-type]  # the same commit again: waits for them
        assert committed_values(cluster.bootstrap, topic) == sorted(VALUES)
        assert state_of(cluster.bootstrap, tid) == "complete_commit"

        producer.begin_transaction()  # the epoch the completed call returned is in use: the next commit works
        producer.send(topic, b"next", partition=0)
        producer.commit_transaction(**wait)  # type: ignore[arg-type]
        assert committed_values(cluster.bootstrap, topic) == sorted([*VALUES, b"next"])


def test_commit_without_waiting_returns_once_the_decision_is_durable(cluster: LocalCluster) -> None:
    """Kafka's contract, kept as the default: the decision is durable, the markers follow."""
    topic, tid = new_topic(cluster.bootstrap), f"rac-{uuid.uuid4().hex[:8]}"
    with Producer(cluster.bootstrap, transactional_id=tid) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"x", partition=0)
        producer.flush()
        with storage_frozen(cluster):
            producer.commit_transaction(timeout=30)
            assert state_of(cluster.bootstrap, tid) == "prepare_commit"
    assert sorted(r.value for r in read_all(cluster.bootstrap, topic)) == [b"x"]


def test_asyncio_producer_commit_waits_for_completion(cluster: LocalCluster) -> None:
    topic, tid = new_topic(cluster.bootstrap), f"rac-{uuid.uuid4().hex[:8]}"

    async def run() -> None:
        async with oncelog.aio.Producer(cluster.bootstrap, transactional_id=tid) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await asyncio.gather(*(producer.send(topic, v, partition=i % PARTITIONS) for i, v in enumerate(VALUES)))
            with storage_frozen(cluster):
                with pytest.raises(RetriableError):
                    await producer.commit_transaction(timeout=2, wait_for_completion=True)
                decided_not_complete(cluster.bootstrap, tid)
            await producer.commit_transaction(wait_for_completion=True)
            assert committed_values(cluster.bootstrap, topic) == sorted(VALUES)

    asyncio.run(run())
