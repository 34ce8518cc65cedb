"""Crash recovery of a real storage process: kill -9 mid-stream, torn tails, replayed transaction state.

design/architecture.md §1.6: an acknowledged write survives a kill -9; design/architecture.md §1.1: retries after the
restart are written at
most once. Each test runs its own single-node cluster so it may kill it.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.errors import Reason
from oncelog.records import ControlType, Record, build_batch, decode_records, iter_batches, read_control_record
from oncelog.rpc import from_error_info, sync_channel
from oncelog.testing import LocalCluster
from oncelog.testing.cluster import ClusterStartError

NODE = "partition-storage-0"
RC = pb.ISOLATION_LEVEL_READ_COMMITTED
RU = pb.ISOLATION_LEVEL_READ_UNCOMMITTED
IN_FLIGHT = 5
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path, services=("partition-storage",)) as cluster:
        yield cluster


def create_topic(cluster: LocalCluster, name: str, **configs: str) -> common.TopicPartition:
    admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    admin.CreateTopics(
        cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=name, partitions=1, configs=configs)]),
        timeout=30,
    )
    return common.TopicPartition(topic=name, partition=0)


def stub_of(cluster: LocalCluster) -> pb.PartitionStorageServiceStub:
    return pb.PartitionStorageServiceStub(sync_channel(cluster.node(NODE).address))


def batch(pid: int, epoch: int, seq: int, *, txn: bool = False, n: int = 10) -> bytes:
    """The ``seq``-th batch of a producer that sends ``n`` records per batch (base sequence ``seq * n``)."""
    records = [
        Record(key=str(seq).encode(), value=b"%d:%d:%d" % (pid, seq, i) + b"." * 100, timestamp=1) for i in range(n)
    ]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq * n, transactional=txn)


def produce(stub: pb.PartitionStorageServiceStub, tp: common.TopicPartition, data: bytes) -> pb.PartitionProduceResult:
    request = pb.ProduceRequest(partitions=[pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=data)])
    [result] = stub.Produce(request, timeout=30).results
    assert not result.HasField("error"), from_error_info(result.error)
    return result


def fetch_all(stub: pb.PartitionStorageServiceStub, tp: common.TopicPartition, isolation: int) -> tuple[bytes, list]:
    """Every batch up to the high watermark (or LSO), with the aborted transactions of read_committed."""
    chunks, aborted, offset = [], [], 0
    while True:
        request = pb.FetchRequest(
            partitions=[pb.FetchPartition(topic_partition=tp, fetch_offset=offset, max_bytes=1 << 20, leader_epoch=-1)],
            isolation_level=isolation,
        )
        [result] = stub.Fetch(request, timeout=30).results
        assert not result.HasField("error"), from_error_info(result.error)
        if not result.records:
            return b"".join(chunks), aborted
        chunks.append(result.records)
        aborted += [(t.producer_id, t.first_offset) for t in result.aborted_transactions]
        offset = [h for h, _ in iter_batches(result.records)][-1].next_offset


class StreamingProducer:
    """An idempotent producer with up to 5 batches in flight on one ProduceStream, as the client library runs."""

    def __init__(self, pid: int, tp: common.TopicPartition) -> None:
        self.pid = pid
        self.tp = tp
        self.acked: dict[int, tuple[int, bool]] = {}  # sequence -> (base offset, duplicate)
        self.failures: list[object] = []
        self.broken = threading.Event()

    def next_unacked(self) -> int:
        seq = 0
        while seq in self.acked:
            seq += 1
        return seq

    def run(self, stub: pb.PartitionStorageServiceStub, first: int, count: int) -> None:
        window = threading.Semaphore(IN_FLIGHT)

        def requests() -> Iterator[pb.ProduceStreamRequest]:
            for seq in range(first, first + count):
                while not window.acquire(timeout=0.1):
                    if self.broken.is_set():
                        return
                data = batch(self.pid, 0, seq)
                yield pb.ProduceStreamRequest(
                    correlation_id=seq,
                    request=pb.ProduceRequest(
                        partitions=[pb.PartitionBatches(topic_partition=self.tp, leader_epoch=-1, records=data)]
                    ),
                )

        try:
            for response in stub.ProduceStream(requests(), timeout=60):
                [result] = response.response.results
                if result.HasField("error"):
                    self.failures.append((response.correlation_id, from_error_info(result.error)))
                else:
                    self.acked[response.correlation_id] = (result.base_offset, result.duplicate)
                window.release()
        except grpc.RpcError:
            pass  # the server was killed: whatever was not acknowledged is retried after the restart
        finally:
            self.broken.set()


def test_kill_9_during_a_stream_of_appends_keeps_every_acknowledged_batch_exactly_once(node: LocalCluster) -> None:
    tp = create_topic(node, "crash.stream", segment_bytes="65536")
    producers = [StreamingProducer(pid, tp) for pid in (501, 502, 503)]
    stub = stub_of(node)
    threads = [threading.Thread(target=p.run, args=(stub, 0, 100_000)) for p in producers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while sum(len(p.acked) for p in producers) < 150 and time.monotonic() < deadline:
        time.sleep(0.01)
    node.kill(NODE)  # SIGKILL with batches in flight
    for thread in threads:
        thread.join(30)
    acked_before = {p.pid: dict(p.acked) for p in producers}
    assert all(acked_before.values()), "every producer had acknowledged batches before the kill"
    assert not any(p.failures for p in producers), [p.failures[:3] for p in producers]

    node.restart(NODE)
    stub = stub_of(node)
    for p in producers:  # resend everything unacknowledged with the same sequences, then continue
        p.broken.clear()
        p.run(stub, p.next_unacked(), 20)
        assert not p.failures, p.failures

    data, _ = fetch_all(stub, tp, RU)
    written: dict[tuple[int, int], int] = {}
    for header, view in iter_batches(data, verify_crc=True):
        records = decode_records(view)
        pid, seq, _ = (int(x) for x in records[0].value.split(b".")[0].split(b":"))
        assert (header.producer_id, header.base_sequence) == (pid, seq * 10)
        assert (pid, seq) not in written, f"batch {pid}/{seq} is in the log twice"
        written[(pid, seq)] = header.base_offset
    for p in producers:
        sequences = sorted(seq for pid, seq in written if pid == p.pid)
        assert sequences == list(range(len(sequences))), "each producer's batches are contiguous in order"
        for seq, (offset, _) in acked_before[p.pid].items():
            assert written.get((p.pid, seq)) == offset, f"acknowledged batch {p.pid}/{seq} moved or vanished"
        for seq, (offset, _) in p.acked.items():
            assert written[(p.pid, seq)] == offset, "a retried batch answers with the offset it is stored at"


def test_torn_tail_is_truncated_on_restart(node: LocalCluster) -> None:
    tp = create_topic(node, "crash.torn")
    stub = stub_of(node)
    for seq in range(5):
        produce(stub, tp, batch(601, 0, seq))
    node.kill(NODE)
    [segment] = sorted((node.data_dir / NODE / "crash.torn-0").glob("*.log"))
    size = segment.stat().st_size
    torn = batch(601, 0, 5)
    with segment.open("ab") as f:
        f.write(torn[: len(torn) // 2])  # a write the kill cut in half, never acknowledged
    node.restart(NODE)
    stub = stub_of(node)
    data, _ = fetch_all(stub, tp, RU)
    assert len(data) == size and [h.base_sequence for h, _ in iter_batches(data, verify_crc=True)] == [
        0,
        10,
        20,
        30,
        40,
    ]
    retried = produce(stub, tp, torn)
    assert (retried.base_offset, retried.duplicate) == (50, False)
    assert segment.stat().st_size == size + len(torn)


def test_recovery_after_kill_9_restores_lso_aborted_list_and_dedup(node: LocalCluster) -> None:
    tp = create_topic(node, "crash.txn")
    stub = stub_of(node)

    def markers(pid: int, epoch: int, result: int) -> None:
        request = pb.WriteTxnMarkersRequest(
            markers=[
                common.TxnMarker(
                    producer=common.ProducerIdentity(producer_id=pid, producer_epoch=epoch),
                    coordinator_epoch=2,
                    result=result,
                    partitions=[tp],
                )
            ]
        )
        [outcome] = stub.WriteTxnMarkers(request, timeout=30).results[0].partition_errors
        assert not outcome.HasField("error"), from_error_info(outcome.error)

    produce(stub, tp, batch(701, 0, 0, txn=True, n=1))  # 0: aborted below
    produce(stub, tp, batch(702, 0, 0, n=1))  # 1: plain
    markers(701, 1, common.TRANSACTION_RESULT_ABORT)  # 2
    produce(stub, tp, batch(703, 0, 0, txn=True, n=1))  # 3: still open at the kill
    produce(stub, tp, batch(702, 0, 1, n=1))  # 4: plain, behind the open transaction
    node.kill(NODE)
    node.restart(NODE)
    stub = stub_of(node)

    data, aborted = fetch_all(stub, tp, RC)
    assert aborted == [(701, 0)]
    assert [h.base_offset for h, _ in iter_batches(data)] == [0, 1, 2], "read_committed stops at the open txn"
    described = stub.DescribeProducers(pb.DescribeProducersRequest(partitions=[tp]), timeout=30).partitions[0]
    assert {p.producer.producer_id: p.current_txn_start_offset for p in described.producers} == {
        701: -1,
        702: -1,
        703: 3,
    }
    assert produce(stub, tp, batch(702, 0, 1, n=1)).duplicate, "dedup state was rebuilt by replay"
    request = pb.WriteTxnMarkersRequest(
        markers=[
            common.TxnMarker(
                producer=common.ProducerIdentity(producer_id=701, producer_epoch=1),
                coordinator_epoch=1,
                result=common.TRANSACTION_RESULT_ABORT,
                partitions=[tp],
            )
        ]
    )
    [fenced] = stub.WriteTxnMarkers(request, timeout=30).results[0].partition_errors
    assert from_error_info(fenced.error).reason is Reason.TRANSACTION_COORDINATOR_FENCED
    markers(703, 1, common.TRANSACTION_RESULT_COMMIT)  # 5
    data, _ = fetch_all(stub, tp, RC)
    kinds = [
        (h.base_offset, read_control_record(v)[0] if h.is_control else h.producer_id) for h, v in iter_batches(data)
    ]
    assert kinds == [(0, 701), (1, 702), (2, ControlType.ABORT), (3, 703), (4, 702), (5, ControlType.COMMIT)]


def test_graceful_restart_loads_the_close_snapshot(node: LocalCluster) -> None:
    tp = create_topic(node, "restart.clean")
    stub = stub_of(node)
    for seq in range(3):
        produce(stub, tp, batch(801, 0, seq))
    produce(stub, tp, batch(802, 0, 0, txn=True))
    process = node.node(NODE).process
    assert process is not None
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    directory = node.data_dir / NODE / "restart.clean-0"
    assert (directory / f"{40:020d}.snapshot").is_file(), "a clean shutdown writes a snapshot at the log end"
    node.restart(NODE)
    stub = stub_of(node)
    assert produce(stub, tp, batch(801, 0, 2)).duplicate
    _, aborted = fetch_all(stub, tp, RC)
    data, _ = fetch_all(stub, tp, RC)
    assert [h.producer_id for h, _ in iter_batches(data)] == [801, 801, 801], "the open transaction pins the LSO"
    assert aborted == []


def test_a_data_directory_of_another_cluster_is_refused(tmp_path: Path) -> None:
    foreign = tmp_path / NODE / "meta.properties"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("version: 0\ncluster_id: some-other-cluster\nnode_id: partition-storage-0\n")
    with pytest.raises(ClusterStartError, match="belongs to cluster 'some-other-cluster'"):
        LocalCluster(tmp_path, services=("partition-storage",)).start(timeout=30)
