"""PartitionStorageService against real storage processes: exactly-once appends, markers, LSO, fetch, leadership.

Clients here are what a producer or the coordinator would send: batches built with the records codec, markers
through the generated stubs. What a consumer shows its user is computed with Kafka's read_committed filter
(``CompletedFetch``, design/kafka-semantics.md §4.5), so the tests check exactly what the server promises: the bytes,
the LSO and the
aborted-transaction list.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator, Sequence

import grpc
import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.errors import Reason
from oncelog.records import (
    ControlType,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    read_control_record,
    read_header,
)
from oncelog.rpc import from_error_info, from_rpc_error, sync_channel
from oncelog.testing import LocalCluster

RC = pb.ISOLATION_LEVEL_READ_COMMITTED
RU = pb.ISOLATION_LEVEL_READ_UNCOMMITTED
COMMIT = common.TRANSACTION_RESULT_COMMIT
ABORT = common.TRANSACTION_RESULT_ABORT
pytestmark = pytest.mark.timeout(120)


# ------------------------------------------------------------------------------------------------ helpers


class Partition:
    """One partition of a fresh topic, with a stub on its leader."""

    def __init__(self, cluster: LocalCluster, partitions: int = 1, index: int = 0, **configs: str) -> None:
        self.topic = f"t-{uuid.uuid4().hex[:12]}"
        admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
        created = admin.CreateTopics(
            cluster_pb.CreateTopicsRequest(
                topics=[cluster_pb.TopicSpec(name=self.topic, partitions=partitions, configs=configs)]
            )
        )
        self.metadata = created.topics[0].partitions[index]
        deadline = time.monotonic() + 30
        while not self.metadata.leader_address:
            # the answer names no address when the leader's lease lapsed between the placement and the answer (a
            # heartbeat held up behind other catalog writes); a client asks again until the leader is live
            assert time.monotonic() < deadline, f"partition {index} of {self.topic} never got a live leader"
            time.sleep(0.05)
            answer = admin.Metadata(cluster_pb.MetadataRequest(topics=[self.topic]), timeout=10)
            self.metadata = answer.topics[0].partitions[index]
        self.index = index
        self.leader = self.metadata.leader_address
        self.stub = pb.PartitionStorageServiceStub(sync_channel(self.leader))
        self.tp = common.TopicPartition(topic=self.topic, partition=index)

    def produce(self, *batches: bytes, leader_epoch: int = -1) -> pb.PartitionProduceResult:
        request = pb.ProduceRequest(
            partitions=[
                pb.PartitionBatches(topic_partition=self.tp, leader_epoch=leader_epoch, records=b"".join(batches))
            ]
        )
        [result] = self.stub.Produce(request, timeout=30).results
        return result

    def fetch(self, offset: int = 0, isolation: int = RC, **kwargs: int) -> pb.FetchPartitionResult:
        request = pb.FetchRequest(
            partitions=[
                pb.FetchPartition(topic_partition=self.tp, fetch_offset=offset, max_bytes=1 << 20, leader_epoch=-1)
            ],
            isolation_level=isolation,
            **kwargs,
        )
        [result] = self.stub.Fetch(request, timeout=30).results
        return result

    def markers(self, *markers: tuple[int, int, int, int]) -> list[common.PartitionError]:
        """Send ``(pid, epoch, coordinator_epoch, result)`` markers for this partition in one request."""
        request = pb.WriteTxnMarkersRequest(
            markers=[
                common.TxnMarker(
                    producer=common.ProducerIdentity(producer_id=pid, producer_epoch=epoch),
                    coordinator_epoch=coordinator_epoch,
                    result=result,
                    partitions=[self.tp],
                )
                for pid, epoch, coordinator_epoch, result in markers
            ]
        )
        return [r.partition_errors[0] for r in self.stub.WriteTxnMarkers(request, timeout=30).results]

    def list_offset(self, spec: int, isolation: int = RC, timestamp_ms: int = 0) -> pb.ListOffsetsPartitionResult:
        request = pb.ListOffsetsRequest(
            partitions=[pb.ListOffsetsPartition(topic_partition=self.tp, spec=spec, timestamp_ms=timestamp_ms)],
            isolation_level=isolation,
        )
        [result] = self.stub.ListOffsets(request, timeout=30).results
        return result

    def log_end(self) -> int:
        return self.list_offset(pb.OFFSET_SPEC_LATEST, RU).offset


def batch(pid: int = -1, epoch: int = -1, seq: int = -1, *, n: int = 1, txn: bool = False, tag: str = "v") -> bytes:
    records = [Record(key=None, value=f"{tag}-{i}".encode(), timestamp=1_000 + i) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def reason(result: pb.PartitionProduceResult | pb.FetchPartitionResult | common.PartitionError) -> Reason | None:
    if not result.HasField("error"):
        return None
    return from_error_info(result.error).reason


def read_committed(result: pb.FetchPartitionResult) -> list[bytes]:
    """What a read_committed consumer hands to its user (design/kafka-semantics.md §4.5): aborted data and markers
    dropped."""
    pending = sorted(result.aborted_transactions, key=lambda t: t.first_offset)
    aborted: set[int] = set()
    values = []
    for header, data in iter_batches(result.records, verify_crc=True):
        while pending and pending[0].first_offset <= header.last_offset:
            aborted.add(pending.pop(0).producer_id)
        if header.is_control:
            if read_control_record(data)[0] is ControlType.ABORT:
                aborted.discard(header.producer_id)
            continue
        if not (header.is_transactional and header.producer_id in aborted):
            values += [r.value for r in decode_records(data)]
    return values


def read_uncommitted(result: pb.FetchPartitionResult) -> list[bytes]:
    """What a read_uncommitted consumer hands to its user: all data records, never a control record."""
    values = []
    for header, data in iter_batches(result.records, verify_crc=True):
        if not header.is_control:
            values += [r.value for r in decode_records(data)]
    return values


def controls(result: pb.FetchPartitionResult) -> list[tuple[int, ControlType]]:
    return [(h.base_offset, read_control_record(d)[0]) for h, d in iter_batches(result.records) if h.is_control]


def _produce_stream(stub: pb.PartitionStorageServiceStub, requests: Sequence[pb.ProduceStreamRequest]) -> list:
    return list(stub.ProduceStream(iter(requests), timeout=30))


def _stream_request(correlation_id: int, part: Partition, data: bytes) -> pb.ProduceStreamRequest:
    return pb.ProduceStreamRequest(
        correlation_id=correlation_id,
        request=pb.ProduceRequest(
            partitions=[pb.PartitionBatches(topic_partition=part.tp, leader_epoch=-1, records=data)]
        ),
    )


@pytest.fixture
def part(cluster: LocalCluster) -> Iterator[Partition]:
    yield Partition(cluster)


# ---------------------------------------------------------------------------------------- idempotent produce


def test_duplicate_batch_returns_original_offsets(part: Partition) -> None:
    first = part.produce(batch(1001, 0, 0, n=3))
    second = part.produce(batch(1001, 0, 3, n=2))
    retried = part.produce(batch(1001, 0, 0, n=3))
    assert reason(first) is reason(second) is reason(retried) is None
    assert (first.base_offset, first.duplicate, second.base_offset) == (0, False, 3)
    assert (retried.base_offset, retried.duplicate) == (0, True)
    assert part.log_end() == 5, "the duplicate was not appended"
    assert read_uncommitted(part.fetch(isolation=RU)) == [b"v-0", b"v-1", b"v-2", b"v-0", b"v-1"]


def test_out_of_order_sequence_is_rejected_and_nothing_appended(part: Partition) -> None:
    part.produce(batch(1002, 0, 0))
    gap = part.produce(batch(1002, 0, 5))
    assert reason(gap) is Reason.OUT_OF_ORDER_SEQUENCE
    assert not gap.error.retriable and gap.error.definite
    assert "expected 1" in gap.error.message
    assert part.log_end() == 1
    assert reason(part.produce(batch(1002, 0, 1))) is None


def test_zombie_epoch_is_fenced(part: Partition) -> None:
    part.produce(batch(1003, 0, 0, txn=True))
    assert part.markers((1003, 1, 0, ABORT)) == [common.PartitionError(topic_partition=part.tp)]
    zombie = part.produce(batch(1003, 0, 1, txn=True, tag="zombie"))
    assert reason(zombie) is Reason.INVALID_PRODUCER_EPOCH
    new_instance = part.produce(batch(1003, 1, 0, txn=True, tag="new"))
    assert reason(new_instance) is None
    assert b"zombie-0" not in read_uncommitted(part.fetch(isolation=RU))


def test_five_in_flight_with_one_retried_keeps_order(part: Partition) -> None:
    """Seed 000's pipelining: batch 1 is lost on the way, 2-4 arrive before its retry; then a lost response."""
    pid = 1004
    sent = _produce_stream(
        part.stub,
        [_stream_request(cid, part, batch(pid, 0, seq, tag=f"s{seq}")) for cid, seq in enumerate((0, 2, 3, 4))],
    )
    assert [r.correlation_id for r in sent] == [0, 1, 2, 3], "responses come back in request order"
    outcomes = [reason(r.response.results[0]) for r in sent]
    assert outcomes == [None] + [Reason.OUT_OF_ORDER_SEQUENCE] * 3
    retried = _produce_stream(
        part.stub, [_stream_request(10 + seq, part, batch(pid, 0, seq, tag=f"s{seq}")) for seq in (1, 2, 3, 4, 2)]
    )
    results = [r.response.results[0] for r in retried]
    assert [reason(r) for r in results] == [None] * 5
    assert [r.base_offset for r in results] == [1, 2, 3, 4, 2]
    assert [r.duplicate for r in results] == [False, False, False, False, True]
    assert read_uncommitted(part.fetch(isolation=RU)) == [b"s0-0", b"s1-0", b"s2-0", b"s3-0", b"s4-0"]


def test_stream_carries_many_partitions_and_keeps_each_in_order(cluster: LocalCluster) -> None:
    topic = Partition(cluster, partitions=3)  # two storage nodes: partitions 0 and 2 share a leader
    leaders = {p.partition: p.leader_address for p in _metadata(cluster, topic.topic)}
    assert leaders[0] == leaders[2]
    targets = [common.TopicPartition(topic=topic.topic, partition=p) for p in (0, 2)]
    requests = [
        pb.ProduceStreamRequest(
            correlation_id=100 + i,
            request=pb.ProduceRequest(
                partitions=[
                    pb.PartitionBatches(
                        topic_partition=targets[i % 2], leader_epoch=-1, records=batch(2000 + i % 2, 0, i // 2)
                    )
                ]
            ),
        )
        for i in range(10)
    ]
    responses = _produce_stream(topic.stub, requests)
    assert [r.correlation_id for r in responses] == [100 + i for i in range(10)]
    for i, response in enumerate(responses):
        [result] = response.response.results
        assert reason(result) is None
        assert (result.topic_partition.partition, result.base_offset) == (targets[i % 2].partition, i // 2)


# ------------------------------------------------------------------------------------------------ transactions


def test_aborted_data_never_returned_by_read_committed(part: Partition) -> None:
    part.produce(batch(1005, 0, 0, n=2, txn=True, tag="doomed"))  # 0-1
    part.produce(batch(1006, 0, 0, tag="plain"))  # 2
    assert reason(part.markers((1005, 1, 0, ABORT))[0]) is None  # 3
    part.produce(batch(1005, 1, 0, txn=True, tag="kept"))  # 4
    part.markers((1005, 2, 0, COMMIT))  # 5
    fetched = part.fetch(isolation=RC)
    assert [(t.producer_id, t.first_offset) for t in fetched.aborted_transactions] == [(1005, 0)]
    assert read_committed(fetched) == [b"plain-0", b"kept-0"]
    assert not part.fetch(offset=4, isolation=RC).aborted_transactions, "the abort lies before offset 4"


def test_lso_stops_at_first_open_transaction_and_advances_on_its_marker(part: Partition) -> None:
    part.produce(batch(1007, 0, 0, tag="before"))  # 0
    part.produce(batch(1008, 0, 0, txn=True, tag="a"))  # 1: the first open transaction
    part.produce(batch(1009, 0, 0, txn=True, tag="b"))  # 2
    fetched = part.fetch(isolation=RC)
    assert (fetched.high_watermark, fetched.last_stable_offset) == (3, 1)
    assert read_committed(fetched) == [b"before-0"]
    assert part.list_offset(pb.OFFSET_SPEC_LATEST, RC).offset == 1
    part.markers((1009, 1, 0, COMMIT))  # 3: a later transaction's commit leaves the LSO where it is
    assert part.fetch(isolation=RC).last_stable_offset == 1
    part.markers((1008, 1, 0, COMMIT))  # 4
    fetched = part.fetch(isolation=RC)
    assert fetched.last_stable_offset == fetched.high_watermark == 5
    assert read_committed(fetched) == [b"before-0", b"a-0", b"b-0"]


def test_read_uncommitted_sees_open_data_but_never_control_records(part: Partition) -> None:
    part.produce(batch(1010, 0, 0, txn=True, tag="open"))
    part.produce(batch(1011, 0, 0, txn=True, tag="aborted"))
    part.markers((1011, 1, 0, ABORT))
    fetched = part.fetch(isolation=RU)
    assert fetched.last_stable_offset == 0 and fetched.high_watermark == 3
    assert not fetched.aborted_transactions, "read_uncommitted readers get no aborted list"
    assert controls(fetched) == [(2, ControlType.ABORT)], "markers are in the bytes, for the reader to skip"
    assert read_uncommitted(fetched) == [b"open-0", b"aborted-0"]
    assert part.fetch(isolation=RC).records == b"", "read_committed stops at the open transaction"


def test_interleaved_transactional_and_plain_producers(part: Partition) -> None:
    """design/replication.md §10 (交织): plain and transactional producers share a partition.

    Plain messages are decided when appended; a transaction's are decided at its marker. read_committed
    returns records in offset order, never past the first undecided transaction (the LSO), so a plain message
    that arrived after an open transaction's first batch waits for that transaction, and a transaction that
    committed first waits behind an older open one (design/architecture.md §1.4, design/kafka-semantics.md §4.3).
    """
    part.produce(batch(1100, 0, 0, tag="n1"))  # 0: plain, before any transaction: visible at once
    part.produce(batch(1101, 0, 0, txn=True, tag="x1"))  # 1: X1
    part.produce(batch(1102, 0, 0, txn=True, tag="x2"))  # 2: X2
    part.produce(batch(1100, 0, 1, tag="n2"))  # 3: plain, after both transactions started
    part.produce(batch(1101, 0, 1, txn=True, tag="x1b"))  # 4: X1 again
    assert read_committed(part.fetch()) == [b"n1-0"]
    part.markers((1102, 1, 0, COMMIT))  # 5: X2 commits first
    assert read_committed(part.fetch()) == [b"n1-0"], "X1 is older and still open"
    part.markers((1101, 1, 0, ABORT))  # 6: X1 aborts
    assert read_committed(part.fetch()) == [b"n1-0", b"x2-0", b"n2-0"]
    assert read_uncommitted(part.fetch(isolation=RU)) == [b"n1-0", b"x1-0", b"x2-0", b"n2-0", b"x1b-0"]


def test_marker_retried_twice_is_applied_once(part: Partition) -> None:
    part.produce(batch(1012, 0, 0, txn=True))
    for _ in range(3):
        [outcome] = part.markers((1012, 1, 7, COMMIT))
        assert reason(outcome) is None
    assert controls(part.fetch(isolation=RU)) == [(1, ControlType.COMMIT)]
    assert part.log_end() == 2


def test_old_coordinator_epoch_marker_is_rejected(part: Partition) -> None:
    part.produce(batch(1013, 0, 0, txn=True))
    part.markers((1013, 1, 5, COMMIT))
    part.produce(batch(1013, 1, 0, txn=True))
    [fenced] = part.markers((1013, 2, 4, ABORT))
    assert reason(fenced) is Reason.TRANSACTION_COORDINATOR_FENCED
    assert part.log_end() == 3
    assert part.fetch().last_stable_offset == 2, "the fenced marker ended nothing"


def test_markers_for_many_transactions_in_one_request(part: Partition) -> None:
    for pid in (1014, 1015, 1016):
        part.produce(batch(pid, 0, 0, txn=True, tag=str(pid)))
    outcomes = part.markers((1014, 1, 0, COMMIT), (1015, 0, 0, COMMIT), (1016, 1, 0, ABORT))
    assert [reason(o) for o in outcomes] == [None, Reason.INVALID_PRODUCER_EPOCH, None]
    assert controls(part.fetch(isolation=RU)) == [(3, ControlType.COMMIT), (4, ControlType.ABORT)]


def test_non_transactional_write_inside_open_transaction_is_rejected(part: Partition) -> None:
    part.produce(batch(1017, 0, 0, txn=True))
    assert reason(part.produce(batch(1017, 0, 1))) is Reason.INVALID_TXN_STATE
    assert part.log_end() == 1


def test_describe_producers_shows_the_open_transaction(part: Partition) -> None:
    part.produce(batch(1018, 0, 0, n=4))
    part.produce(batch(1019, 3, 0, txn=True))
    response = part.stub.DescribeProducers(pb.DescribeProducersRequest(partitions=[part.tp]), timeout=30)
    producers = {p.producer.producer_id: p for p in response.partitions[0].producers}
    assert (producers[1018].last_sequence, producers[1018].current_txn_start_offset) == (3, -1)
    assert (producers[1019].producer.producer_epoch, producers[1019].current_txn_start_offset) == (3, 4)


# ---------------------------------------------------------------------------------------------------- fetch


def test_list_offsets(part: Partition) -> None:
    part.produce(batch(1020, 0, 0, n=2))  # timestamps 1000, 1001
    part.produce(batch(1021, 0, 0, txn=True))
    assert part.list_offset(pb.OFFSET_SPEC_EARLIEST).offset == 0
    assert part.list_offset(pb.OFFSET_SPEC_LATEST, RU).offset == 3
    assert part.list_offset(pb.OFFSET_SPEC_LATEST, RC).offset == 2
    found = part.list_offset(pb.OFFSET_SPEC_TIMESTAMP, RU, timestamp_ms=1_001)
    assert (found.offset, found.timestamp_ms) == (1, 1_001)
    # the leader epoch Kafka answers: the epoch the leader stamped on the batch holding the offset, its own for
    # latest, and -1 when no record has the timestamp
    stamped = read_header(part.fetch(isolation=RU).records).partition_leader_epoch
    assert stamped >= 0
    epochs = [part.list_offset(spec, RU).leader_epoch for spec in (pb.OFFSET_SPEC_EARLIEST, pb.OFFSET_SPEC_LATEST)]
    assert [*epochs, found.leader_epoch] == [stamped] * 3
    too_late = part.list_offset(pb.OFFSET_SPEC_TIMESTAMP, RU, timestamp_ms=10**13)
    assert (too_late.offset, too_late.leader_epoch) == (-1, -1)
    unspecified = part.list_offset(pb.OFFSET_SPEC_UNSPECIFIED)
    assert reason(unspecified) is Reason.INVALID_REQUEST


def test_long_poll_returns_as_soon_as_data_arrives(part: Partition) -> None:
    import threading

    answer: list[pb.FetchPartitionResult] = []
    waiter = threading.Thread(target=lambda: answer.append(part.fetch(isolation=RU, max_wait_ms=20_000, min_bytes=1)))
    started = time.monotonic()
    waiter.start()
    part.produce(batch(1022, 0, 0, tag="late"))
    waiter.join(15)
    assert not waiter.is_alive(), "the fetch must end when data arrives, well before max_wait_ms"
    assert time.monotonic() - started < 15
    assert read_uncommitted(answer[0]) == [b"late-0"]


def test_long_poll_gives_up_after_max_wait(part: Partition) -> None:
    started = time.monotonic()
    fetched = part.fetch(isolation=RU, max_wait_ms=300, min_bytes=1)
    assert fetched.records == b"" and not fetched.HasField("error")
    assert time.monotonic() - started >= 0.29


def test_fetch_response_budget_returns_at_least_one_batch(part: Partition) -> None:
    for seq in range(4):
        part.produce(batch(1023, 0, seq, n=50, tag=f"b{seq}"))
    request = pb.FetchRequest(
        partitions=[pb.FetchPartition(topic_partition=part.tp, fetch_offset=0, max_bytes=1 << 20, leader_epoch=-1)],
        isolation_level=RU,
        max_bytes=10,
    )
    [result] = part.stub.Fetch(request, timeout=30).results
    assert [h.base_offset for h, _ in iter_batches(result.records)] == [0]


# ----------------------------------------------------------------------------------------- leadership, input


def test_not_leader_names_the_leader_address(cluster: LocalCluster) -> None:
    topic = Partition(cluster, partitions=2)
    leaders = {p.partition: p.leader_address for p in _metadata(cluster, topic.topic)}
    assert len(set(leaders.values())) == 2, "two storage nodes lead one partition each"
    wrong = next(a for a in cluster.addresses("partition-storage") if a != leaders[0])
    stub = pb.PartitionStorageServiceStub(sync_channel(wrong))
    request = pb.ProduceRequest(
        partitions=[pb.PartitionBatches(topic_partition=topic.tp, leader_epoch=-1, records=batch(1024, 0, 0))]
    )
    [result] = stub.Produce(request, timeout=30).results
    assert reason(result) is Reason.NOT_LEADER and result.error.retriable
    assert result.error.metadata["leader"] == leaders[0]
    assert topic.log_end() == 0


def _metadata(cluster: LocalCluster, topic: str) -> Sequence[cluster_pb.PartitionMetadata]:
    admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    return admin.Metadata(cluster_pb.MetadataRequest(topics=[topic]), timeout=30).topics[0].partitions


def _corrupt_crc(data: bytes) -> bytes:
    return data[:-1] + bytes([data[-1] ^ 0xFF])


@pytest.mark.parametrize(
    ("make", "leader_epoch", "expected", "fragment"),
    [
        (lambda: _corrupt_crc(batch(1025, 0, 0)), -1, Reason.CORRUPT_MESSAGE, "CRC32C"),
        (lambda: batch(1025, 0, 0)[:-7], -1, Reason.CORRUPT_MESSAGE, "truncated"),
        (lambda: batch(1025, 0, 0, n=1, tag="x" * 2_000_000), -1, Reason.MESSAGE_TOO_LARGE, "max_message_bytes"),
        (lambda: batch(1025, 0, 0), 1, Reason.UNKNOWN_LEADER_EPOCH, "newer"),
        (lambda: batch(1025, 0, 0), -7, Reason.INVALID_REQUEST, "leader_epoch"),
    ],
    ids=["corrupt-crc", "truncated", "oversize", "future-leader-epoch", "negative-leader-epoch"],
)
def test_bad_produce_input_is_rejected_precisely_and_the_partition_keeps_serving(
    part: Partition, make, leader_epoch: int, expected: Reason, fragment: str
) -> None:
    part.produce(batch(1025, 0, 0, tag="good"))
    rejected = part.produce(make(), leader_epoch=leader_epoch)
    assert reason(rejected) is expected
    assert fragment in rejected.error.message
    assert rejected.error.definite, "nothing was appended, and the client is told so"
    assert part.log_end() == 1
    assert reason(part.produce(batch(1025, 0, 1, tag="after"))) is None
    assert read_uncommitted(part.fetch(isolation=RU)) == [b"good-0", b"after-0"]


def test_stale_leader_epoch_is_fenced(cluster: LocalCluster, part: Partition) -> None:
    import sqlalchemy as sa

    from oncelog.catalog import schema as t

    engine = sa.create_engine(cluster.database_url)
    with engine.begin() as conn:
        conn.execute(
            sa.update(t.partitions)
            .where(t.partitions.c.topic == part.topic, t.partitions.c.partition == 0)
            .values(leader_epoch=3)
        )
    engine.dispose()
    fenced = part.produce(batch(1026, 0, 0), leader_epoch=2)
    assert reason(fenced) is Reason.FENCED_LEADER_EPOCH
    assert fenced.error.metadata["leader_epoch"] == "3"
    assert reason(part.produce(batch(1026, 0, 0), leader_epoch=3)) is None
    [(header, _)] = list(iter_batches(part.fetch(isolation=RU).records))
    assert header.partition_leader_epoch == 3, "the leader stamps its epoch into the batch"


def test_unknown_partition_and_negative_offsets(part: Partition) -> None:
    missing = common.TopicPartition(topic=part.topic, partition=9)
    request = pb.ProduceRequest(
        partitions=[pb.PartitionBatches(topic_partition=missing, leader_epoch=-1, records=batch())]
    )
    [result] = part.stub.Produce(request, timeout=30).results
    assert reason(result) is Reason.UNKNOWN_TOPIC_OR_PARTITION
    assert reason(part.fetch(offset=-1)) is Reason.OFFSET_OUT_OF_RANGE
    assert reason(part.fetch(offset=5)) is Reason.OFFSET_OUT_OF_RANGE
    assert reason(part.list_offset(pb.OFFSET_SPEC_TIMESTAMP, timestamp_ms=-5)) is Reason.INVALID_REQUEST
    [bad_marker] = part.markers((-3, 0, 0, COMMIT))
    assert reason(bad_marker) is Reason.INVALID_REQUEST


def test_malformed_requests_fail_as_a_whole(part: Partition) -> None:
    with pytest.raises(grpc.RpcError) as raised:
        part.stub.Produce(pb.ProduceRequest(acks=9), timeout=30)
    assert from_rpc_error(raised.value).reason is Reason.INVALID_REQUEST
    with pytest.raises(grpc.RpcError) as raised:
        part.stub.Fetch(pb.FetchRequest(isolation_level=RC, max_wait_ms=-1), timeout=30)
    assert from_rpc_error(raised.value).reason is Reason.INVALID_REQUEST


def test_deleted_topic_data_is_removed(cluster: LocalCluster, part: Partition) -> None:
    part.produce(batch(1027, 0, 0))
    node = next(n for n in cluster.nodes if n.address == part.leader)
    directory = cluster.data_dir / node.node_id / f"{part.topic}-0"
    assert (directory / "partition.metadata").is_file()
    admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    admin.DeleteTopics(cluster_pb.DeleteTopicsRequest(topics=[part.topic]), timeout=30)
    deadline = time.monotonic() + 20  # the periodic leadership refresh (2 s) notices the deletion
    while directory.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not directory.exists(), "a deleted topic's partition directory is removed"
    assert reason(part.fetch()) is Reason.UNKNOWN_TOPIC_OR_PARTITION
