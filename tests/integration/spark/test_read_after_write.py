"""Read-after-write of the sink (docs/design/read-after-commit.md §2, item 4): once a task's or the driver's commit
returns, every COMMIT marker is written, so a read_committed read started afterwards sees every row.

``df.write.format("oncelog").save()`` returns after every task's commit (``atomicity=task``) or the driver's
(``atomicity=batch``) returned. The storage nodes are frozen with SIGSTOP when the commit starts and let go only
once the coordinator has decided it and the commit has still not returned within two seconds: a sink whose
commit returned on the decision alone (Kafka's default) returns while the markers cannot be written, and the
test says so. Without Spark: the classes Spark calls, with the identity Spark gives them.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

from oncelog.client import AdminClient
from oncelog.client.producer import Producer
from oncelog.spark.atomic import DriverCommitter
from oncelog.spark.writer import JobSinkWriter, RowEncoder, TaskIdentity, TaskWriter
from oncelog.testing import LocalCluster

from .conftest import Topic
from .test_atomic import batch_of, batch_options
from .test_writer import KV, rows, sink_options, visible

pytestmark = pytest.mark.timeout(120)

GRACE_S = 2.0
"""How long a commit that waits for its markers is given to (wrongly) return while they cannot be written."""


def frozen_until_decided(cluster: LocalCluster, base: type[Producer] = Producer) -> tuple[type[Producer], dict]:
    """A producer class whose commits run with every storage node stopped until the commit is decided and has
    not returned for :data:`GRACE_S`; ``seen["returned_while_frozen"]`` says whether it returned before."""
    seen: dict[str, Any] = {"commits": 0, "returned_while_frozen": False}
    pids = [n.process.pid for n in cluster.nodes if n.service == "partition-storage" and n.process is not None]
    assert pids, "the cluster has no storage node"

    class FrozenMarkers(base):  # type: ignore[misc,valid-type]
        def commit_transaction(self, *args: Any, **kwargs: Any) -> None:
            tid = self._config.transactional_id
            returned = threading.Event()
            succeeded: list[bool] = []
            failure: list[BaseException] = []

            def release() -> None:
                try:
                    deadline = time.monotonic() + 60
                    with AdminClient(cluster.bootstrap) as admin:
                        while admin.describe_transactions([tid])[tid].state == "ongoing":
                            assert time.monotonic() < deadline, "the commit was never decided"
                            time.sleep(0.02)
                    # decided, markers blocked: a commit that waits for them cannot return now (a call that
                    # raised, to be retried by the sink, is no return)
                    if returned.wait(GRACE_S) and succeeded:
                        seen["returned_while_frozen"] = True
                except BaseException as exc:  # reported by the test thread
                    failure.append(exc)
                finally:
                    cluster.thaw(pids)

            cluster.freeze(pids)  # never while one holds the catalog's write lock (LocalCluster.freeze)
            releaser = threading.Thread(target=release, name="release-storage", daemon=True)
            releaser.start()
            try:
                super().commit_transaction(*args, **kwargs)
                succeeded.append(True)
            finally:
                returned.set()
                releaser.join(60)
            assert not failure, failure
            seen["commits"] += 1

    return FrozenMarkers, seen


def test_batch_write_task_commit_returns_only_once_its_rows_are_readable(cluster: LocalCluster, topic: Topic) -> None:
    options = sink_options(cluster, topic)
    job = JobSinkWriter(options, RowEncoder(KV, options.topic))  # what df.write builds on the driver
    producer, seen = frozen_until_decided(cluster)
    identity = TaskIdentity(query_id=job.job_id, batch_id=0, partition_id=0, attempt=0)
    message = TaskWriter(options, job.encoder, producer_factory=producer).write(rows("a", "b", "c"), identity)
    assert (message.rows, message.skipped, seen["commits"]) == (3, False, 1)
    assert not seen["returned_while_frozen"], "the task's commit returned before its markers could be written"
    assert visible(cluster, topic, settle=False) == ["a", "b", "c"], "read right away, without waiting"


def test_batch_atomicity_driver_commit_returns_only_once_the_batch_is_readable(
    cluster: LocalCluster, topic3: Topic
) -> None:
    options = batch_options(cluster, topic3)
    messages = batch_of(options, 0, p0=("a", "b"), p1=("c", "d", "e"))
    producer, seen = frozen_until_decided(cluster)
    outcome = DriverCommitter(options, producer_factory=producer).commit(messages, 0)
    assert (outcome.rows, seen["commits"]) == (5, 1)
    assert not seen["returned_while_frozen"], "the driver's commit returned before its markers could be written"
    assert visible(cluster, topic3, settle=False) == ["a", "b", "c", "d", "e"]
