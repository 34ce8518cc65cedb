"""Spark tier: one SparkSession for the whole test session (design/spark-connector.md §8) and a cluster.

Skipped with the reason when pyspark or Java is missing. Session start costs several seconds, so every
Spark test shares it; each test gets its own topics and checkpoint directory.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.records import Record, build_batch
from oncelog.rpc import from_error_info, sync_channel
from oncelog.testing import LocalCluster
from oncelog.testing.spark import QUICK_JVM, local_spark_session, spark_unavailable


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test here ``spark`` and skip them all, with the reason, when Spark cannot run."""
    reason = spark_unavailable()
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.spark)
            if reason:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``local[2,2]``: two task threads, two attempts per task (retries need the second number,
    design/spark-connector.md §3.4)."""
    java_options = os.environ.get("SPARK_TEST_JOPTS", QUICK_JVM)
    with local_spark_session(
        tmp_path_factory.mktemp("spark"), app_name="oncelog-tests", java_options=java_options
    ) as session:
        yield session


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The local cluster the Spark queries read from and write to."""
    with LocalCluster(tmp_path_factory.mktemp("spark-cluster"), storage_nodes=2) as running:
        yield running


class Topic:
    """A fresh topic, filled with idempotent batches and transactions through the storage stubs."""

    def __init__(self, cluster: LocalCluster, partitions: int = 2, *, name: str | None = None) -> None:
        admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
        if name is None:
            self.name = f"spark-{uuid.uuid4().hex[:10]}"
            described = admin.CreateTopics(
                cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=self.name, partitions=partitions)]),
                timeout=30,
            ).topics[0]
        else:
            self.name = name
            described = admin.Metadata(cluster_pb.MetadataRequest(topics=[name]), timeout=30).topics[0]
        self._stubs = {
            p.partition: pb.PartitionStorageServiceStub(sync_channel(p.leader_address)) for p in described.partitions
        }
        self._pid = 90_000 + uuid.uuid4().int % 1_000_000
        self._next_pid = self._pid + 1
        self._seq: dict[int, int] = {}

    @classmethod
    def existing(cls, cluster: LocalCluster, name: str) -> Topic:
        """An existing topic (created by the test), to be filled like a fresh one."""
        return cls(cluster, name=name)

    def append(
        self,
        partition: int,
        values: Sequence[str],
        *,
        txn: str | None = None,
        timestamp: int = 1_700_000_000_000,
        headers: tuple[tuple[str, bytes | None], ...] = (),
    ) -> None:
        """One batch of ``values``: plain, or a whole transaction ending with ``txn`` ("commit"/"abort")."""
        pid, seq = self._pid, self._seq.get(partition, 0)
        if txn is not None:
            pid, seq = self._next_pid, 0
            self._next_pid += 1
        else:
            self._seq[partition] = seq + len(values)
        records = [Record(key=None, value=v.encode(), timestamp=timestamp, headers=headers) for v in values]
        batch = build_batch(
            records, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=txn is not None
        )
        tp = common.TopicPartition(topic=self.name, partition=partition)
        request = pb.ProduceRequest(
            partitions=[pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=batch)]
        )
        [result] = self._stubs[partition].Produce(request, timeout=30).results
        assert not result.HasField("error"), from_error_info(result.error)
        if txn is not None:
            marker = common.TxnMarker(
                producer=common.ProducerIdentity(producer_id=pid, producer_epoch=1),
                coordinator_epoch=0,
                result=common.TRANSACTION_RESULT_COMMIT if txn == "commit" else common.TRANSACTION_RESULT_ABORT,
                partitions=[tp],
            )
            [answer] = (
                self._stubs[partition].WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=[marker]), timeout=30).results
            )
            assert not answer.partition_errors[0].HasField("error"), answer

    def values(self, cluster: LocalCluster, isolation: str = "read_committed") -> list[str]:
        """Every value a consumer with ``isolation`` reads, once ended transactions have their markers.

        Commits return when the decision is durable and markers follow asynchronously (design/architecture.md §5), so
        this waits until every partition's last stable offset reaches its high watermark.
        """
        from oncelog.spark import OncelogDataSource
        from oncelog.spark.channels import LogClient
        from oncelog.vocabulary import IsolationLevel

        client = LogClient([cluster.bootstrap])
        tps = client.topic_partitions([self.name])
        deadline = time.monotonic() + 30
        while client.list_offsets(tps, "latest", IsolationLevel.READ_COMMITTED) != client.list_offsets(
            tps, "latest", IsolationLevel.READ_UNCOMMITTED
        ):
            assert time.monotonic() < deadline, f"a transaction on {self.name} stayed open"
            time.sleep(0.02)
        reader = OncelogDataSource(
            {"bootstrap": cluster.bootstrap, "topic": self.name, "isolationLevel": isolation}
        ).reader(None)
        return sorted(r["value"].decode() for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist())


DemoResult = tuple[dict[str, str], str]
"""The rows of ``oncelog spark-demo``'s closing table (measure -> value) and its whole stdout."""


@pytest.fixture
def run_spark_demo(tmp_path: Path) -> Callable[..., DemoResult]:
    """Run ``oncelog spark-demo`` with the given arguments in a fresh process (data under ``tmp_path``); returns
    its closing table and stdout, after asserting it exited 0 (else the output tails are the failure message).
    ``timeout_s`` bounds the run, so a slow one fails with the demo's own output, not the test's timeout."""

    def run(*args: str, timeout_s: float) -> DemoResult:
        demo = str(tmp_path / "demo")
        env = {key: value for key, value in os.environ.items() if key in ("PATH", "JAVA_HOME", "HOME", "LANG")}
        with subprocess.Popen(
            [sys.executable, "-c", "from oncelog.cli import main; main()", "spark-demo", *args, "--data-dir", demo],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, "COLUMNS": "160"},
        ) as process:
            try:
                stdout, stderr = process.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                # Ctrl-C: the demo's cleanup stops the Spark and oncelog processes it started in their own sessions
                process.send_signal(signal.SIGINT)
                stdout, stderr = process.communicate(timeout=90)
                pytest.fail(f"the demo did not finish in {timeout_s:.0f} s:\n{stdout[-3000:]}{stderr[-3000:]}")
        assert process.returncode == 0, stdout[-3000:] + stderr[-3000:]
        rows = {
            line.split("│")[1].strip(): line.split("│")[2].strip()
            for line in stdout.splitlines()
            if line.count("│") == 3
        }
        return rows, stdout

    return run
