"""Fuzzing a real storage process: random and mutated Produce and WriteTxnMarkers input.

Whatever arrives, the server must answer with a precise error (never an internal one), stay up, and keep its
log valid: whole CRC-valid batches at contiguous offsets, control batches only where markers were accepted,
and every acknowledged append where the answer said it was.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import google_crc32c
import grpc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.errors import Reason
from oncelog.records import Record, build_batch, iter_batches, validate_batch
from oncelog.rpc import from_error_info, from_rpc_error, sync_channel
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(300)

_INTERNAL = {Reason.UNKNOWN_SERVER_ERROR}


@dataclass
class Target:
    """The fuzzed partition and what was acknowledged on it."""

    stub: pb.PartitionStorageServiceStub
    tp: common.TopicPartition
    appended: dict[int, bytes] = field(default_factory=dict)  # base offset -> client bytes
    markers: set[int] = field(default_factory=set)  # producer ids with an accepted marker


@pytest.fixture(scope="module")
def target(cluster: LocalCluster) -> Iterator[Target]:
    name = f"fuzz-{uuid.uuid4().hex[:10]}"
    admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    created = admin.CreateTopics(
        cluster_pb.CreateTopicsRequest(
            topics=[cluster_pb.TopicSpec(name=name, partitions=1, configs={"max_message_bytes": "4096"})]
        ),
        timeout=30,
    )
    leader = created.topics[0].partitions[0].leader_address
    yield Target(pb.PartitionStorageServiceStub(sync_channel(leader)), common.TopicPartition(topic=name, partition=0))


# ---------------------------------------------------------------------------------------------- strategies

records = st.lists(
    st.builds(
        Record,
        key=st.none() | st.binary(max_size=20),
        value=st.none() | st.binary(max_size=200),
        timestamp=st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=8,
)


@st.composite
def valid_batches(draw: st.DrawFn) -> bytes:
    pid = draw(st.sampled_from([-1, 11, 12, 13]))
    idempotent = pid >= 0
    return build_batch(
        draw(records),
        producer_id=pid,
        producer_epoch=draw(st.integers(0, 3)) if idempotent else -1,
        base_sequence=draw(st.integers(0, 40)) if idempotent else -1,
        transactional=idempotent and draw(st.booleans()),
    )


def _with_crc(data: bytearray) -> bytes:
    if len(data) >= 21:
        data[17:21] = struct.pack(">I", google_crc32c.value(bytes(data[21:])))
    return bytes(data)


@st.composite
def mutated_batches(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(valid_batches()))
    kind = draw(st.sampled_from(["flip", "truncate", "extend", "header", "random", "concat"]))
    if kind == "flip":
        for _ in range(draw(st.integers(1, 4))):
            position = draw(st.integers(0, len(data) - 1))
            data[position] ^= 1 << draw(st.integers(0, 7))
    elif kind == "truncate":
        del data[draw(st.integers(0, len(data) - 1)) :]
    elif kind == "extend":
        data += draw(st.binary(min_size=1, max_size=80))
    elif kind == "header":
        # overwrite a header field and fix the CRC, so validation beyond the checksum is exercised
        position = draw(st.integers(8, 60))
        patch = draw(st.binary(min_size=1, max_size=8))
        data[position : position + len(patch)] = patch
        return _with_crc(data) if position >= 21 or draw(st.booleans()) else bytes(data)
    elif kind == "random":
        return draw(st.binary(max_size=300))
    else:
        return bytes(data) + draw(valid_batches())
    return bytes(data)


markers = st.builds(
    lambda pid, epoch, coordinator_epoch, result, groups: common.TxnMarker(
        producer=common.ProducerIdentity(producer_id=pid, producer_epoch=epoch),
        coordinator_epoch=coordinator_epoch,
        result=result,
        groups=groups,
    ),
    pid=st.sampled_from([-5, 11, 12, 13, 2**62]),
    epoch=st.sampled_from([-1, 0, 1, 2, 3, 4, 40_000]),
    coordinator_epoch=st.sampled_from([-2, 0, 1, 5, 2**31 - 1]),
    result=st.integers(0, 4),
    groups=st.lists(st.text(max_size=5), max_size=1),
)


# ------------------------------------------------------------------------------------------------- checks


def _check_errors(results: list, where: str) -> list[Reason | None]:
    reasons = []
    for result in results:
        if result.HasField("error"):
            reason = from_error_info(result.error).reason
            assert reason not in _INTERNAL, f"{where}: internal error {result.error.message}"
            assert result.error.message, f"{where}: an error must say what went wrong"
            reasons.append(reason)
        else:
            reasons.append(None)
    return reasons


@settings(max_examples=150, deadline=None)
@given(
    payload=st.one_of(valid_batches(), mutated_batches()),
    leader_epoch=st.sampled_from([-1, -1, 0, 1, -9]),
    partition=st.sampled_from([0, 0, 0, 7, -1]),
)
def test_random_produce_input_gets_precise_answers(
    target: Target, payload: bytes, leader_epoch: int, partition: int
) -> None:
    tp = common.TopicPartition(topic=target.tp.topic, partition=partition)
    request = pb.ProduceRequest(
        partitions=[pb.PartitionBatches(topic_partition=tp, leader_epoch=leader_epoch, records=payload)]
    )
    [result] = target.stub.Produce(request, timeout=30).results
    [reason] = _check_errors([result], "produce")
    if reason is None:
        assert partition == 0 and leader_epoch in (-1, 0)
        if not result.duplicate:
            target.appended[result.base_offset] = payload


@settings(max_examples=100, deadline=None)
@given(batch=st.lists(markers, min_size=1, max_size=4), strays=st.booleans())
def test_random_markers_get_precise_answers(target: Target, batch: list[common.TxnMarker], strays: bool) -> None:
    for marker in batch:
        marker.partitions.append(target.tp)
        if strays:
            marker.partitions.append(common.TopicPartition(topic=target.tp.topic, partition=3))
    response = target.stub.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=batch), timeout=30)
    assert [r.producer_id for r in response.results] == [m.producer.producer_id for m in batch]
    for marker, result in zip(batch, response.results, strict=True):
        reasons = _check_errors(list(result.partition_errors), "marker")
        _check_errors(list(result.group_errors), "marker group")
        assert len(reasons) == len(marker.partitions)
        if reasons[0] is None:
            target.markers.add(marker.producer.producer_id)
        if strays:  # a malformed marker is refused on every partition, a sound one only where unknown
            malformed = reasons[0] is Reason.INVALID_REQUEST
            assert reasons[1] is (Reason.INVALID_REQUEST if malformed else Reason.UNKNOWN_TOPIC_OR_PARTITION)
        if reasons[0] is None:
            assert marker.result in (common.TRANSACTION_RESULT_COMMIT, common.TRANSACTION_RESULT_ABORT)


def test_malformed_calls_fail_as_a_whole_and_the_server_stays_up(target: Target) -> None:
    for request in (pb.ProduceRequest(acks=77), pb.ProduceRequest(timeout_ms=-1)):
        with pytest.raises(grpc.RpcError) as raised:
            target.stub.Produce(request, timeout=30)
        assert from_rpc_error(raised.value).reason is Reason.INVALID_REQUEST
    assert target.stub.DescribeProducers(pb.DescribeProducersRequest(partitions=[target.tp]), timeout=30).partitions


def test_log_stays_valid_after_the_fuzzing(target: Target) -> None:
    """Runs after the fuzz tests of this module (file order): the log must still be whole and serving."""
    chunks, offset = [], 0
    while True:
        request = pb.FetchRequest(
            partitions=[
                pb.FetchPartition(topic_partition=target.tp, fetch_offset=offset, max_bytes=1 << 20, leader_epoch=-1)
            ],
            isolation_level=pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
        )
        [result] = target.stub.Fetch(request, timeout=30).results
        assert not result.HasField("error")
        if not result.records:
            break
        chunks.append(result.records)
        offset = list(iter_batches(result.records))[-1][0].next_offset
    assert offset == result.high_watermark
    expected = 0
    stored_appends = {}
    for header, view in iter_batches(b"".join(chunks), verify_crc=True):
        assert header.base_offset == expected, "offsets are contiguous"
        validate_batch(view, check_records=False)
        expected = header.next_offset
        if header.is_control:
            assert header.producer_id in target.markers, "a control batch only comes from an accepted marker"
        else:
            stored_appends[header.base_offset] = bytes(view[12:])
    for base_offset, payload in target.appended.items():
        first = next(iter_batches(payload))[1]
        # the stored batch is the client's bytes from the leader epoch on (base offset and length aside)
        assert stored_appends[base_offset][4:] == bytes(first[16:]), f"append at {base_offset} was altered"
    survivor = build_batch([Record(key=None, value=b"after", timestamp=1)])
    request = pb.ProduceRequest(
        partitions=[pb.PartitionBatches(topic_partition=target.tp, leader_epoch=-1, records=survivor)]
    )
    [result] = target.stub.Produce(request, timeout=30).results
    assert not result.HasField("error") and result.base_offset == expected
