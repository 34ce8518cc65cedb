"""Fixtures of the connector tests: a real local cluster and topics filled through the storage stubs.

Data is written the way a producer and the transaction coordinator would write it — batches built with
the records codec, COMMIT/ABORT markers through WriteTxnMarkers — so the reader meets real offsets,
gaps left by markers and aborted data, and a real last stable offset, without depending on the
high-level producer.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.records import Record, build_batch
from oncelog.rpc import from_error_info, sync_channel
from oncelog.testing import LocalCluster

COMMIT = common.TRANSACTION_RESULT_COMMIT
ABORT = common.TRANSACTION_RESULT_ABORT
_pids = itertools.count(50_000)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, cluster_database: Callable[[], str]) -> Iterator[LocalCluster]:
    """Every service as a process, with two storage nodes so a topic's partitions have different leaders; on the
    database ``--cluster`` selects."""
    with LocalCluster(
        tmp_path_factory.mktemp("spark-cluster"), storage_nodes=2, database_url=cluster_database()
    ) as running:
        yield running


class Txn:
    """An open transaction of a fresh producer id on some partitions of a :class:`Topic`."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self.pid = next(_pids)
        self.sequences: dict[int, int] = {}

    def send(self, partition: int, *values: str) -> int:
        """Append ``values`` as one transactional batch; returns the batch's base offset."""
        seq = self.sequences.get(partition, 0)
        self.sequences[partition] = seq + len(values)
        return self.topic.append(partition, values, pid=self.pid, seq=seq, transactional=True)

    def commit(self) -> None:
        """Write COMMIT markers on every partition written (what the coordinator does after EndTxn)."""
        self._end(COMMIT)

    def abort(self) -> None:
        """Write ABORT markers on every partition written."""
        self._end(ABORT)

    def _end(self, result: int) -> None:
        for partition in self.sequences:
            self.topic.marker(partition, self.pid, result)


class Topic:
    """A fresh topic with a storage stub per partition leader."""

    def __init__(self, cluster: LocalCluster, partitions: int = 1, configs: dict[str, str] | None = None) -> None:
        self.cluster = cluster
        self.name = f"spark-{uuid.uuid4().hex[:10]}"
        admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
        spec = cluster_pb.TopicSpec(name=self.name, partitions=partitions, configs=configs or {})
        created = admin.CreateTopics(cluster_pb.CreateTopicsRequest(topics=[spec]), timeout=30)
        self.leaders = {p.partition: p.leader_address for p in created.topics[0].partitions}
        self._stubs = {
            address: pb.PartitionStorageServiceStub(sync_channel(address)) for address in self.leaders.values()
        }
        self._plain_seq: dict[int, int] = {}
        self._plain_pid = next(_pids)

    def _tp(self, partition: int) -> common.TopicPartition:
        return common.TopicPartition(topic=self.name, partition=partition)

    def append(
        self,
        partition: int,
        values: Sequence[str],
        *,
        pid: int | None = None,
        seq: int | None = None,
        transactional: bool = False,
        key: str | None = None,
        headers: tuple[tuple[str, bytes | None], ...] = (),
    ) -> int:
        """Append one batch of ``values``; idempotent non-transactional writes by default."""
        if pid is None:
            pid, seq = self._plain_pid, self._plain_seq.get(partition, 0)
            self._plain_seq[partition] = seq + len(values)
        records = [
            Record(
                key=None if key is None else key.encode(),
                value=v.encode(),
                headers=headers,
                timestamp=1_700_000_000_000 + i,
            )
            for i, v in enumerate(values)
        ]
        batch = build_batch(
            records, producer_id=pid, producer_epoch=0, base_sequence=seq or 0, transactional=transactional
        )
        request = pb.ProduceRequest(
            partitions=[pb.PartitionBatches(topic_partition=self._tp(partition), leader_epoch=-1, records=batch)]
        )
        [result] = self._stubs[self.leaders[partition]].Produce(request, timeout=30).results
        assert not result.HasField("error"), from_error_info(result.error)
        return result.base_offset

    def marker(self, partition: int, pid: int, result: int) -> None:
        """One COMMIT or ABORT marker of ``pid`` on ``partition``."""
        request = pb.WriteTxnMarkersRequest(
            markers=[
                common.TxnMarker(
                    producer=common.ProducerIdentity(producer_id=pid, producer_epoch=1),  # bumped at EndTxn (KIP-890)
                    coordinator_epoch=0,
                    result=result,
                    partitions=[self._tp(partition)],
                )
            ]
        )
        [answer] = self._stubs[self.leaders[partition]].WriteTxnMarkers(request, timeout=30).results
        assert not answer.partition_errors[0].HasField("error"), answer

    def txn(self) -> Txn:
        """Start a transaction of a new producer id."""
        return Txn(self)

    def log_end(self, partition: int) -> int:
        """The high watermark (read_uncommitted LATEST)."""
        request = pb.ListOffsetsRequest(
            partitions=[pb.ListOffsetsPartition(topic_partition=self._tp(partition), spec=pb.OFFSET_SPEC_LATEST)],
            isolation_level=pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
        )
        return self._stubs[self.leaders[partition]].ListOffsets(request, timeout=30).results[0].offset


@pytest.fixture
def topic(cluster: LocalCluster) -> Topic:
    """A fresh one-partition topic."""
    return Topic(cluster)


@pytest.fixture
def topic3(cluster: LocalCluster) -> Topic:
    """A fresh three-partition topic (leaders spread over both storage nodes)."""
    return Topic(cluster, partitions=3)
