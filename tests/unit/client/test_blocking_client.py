"""The blocking twin of the typed clients (the Spark connector's calls) against a real blocking gRPC server.

The servicers are tiny and run on a loopback port the kernel chooses; a domain error is sent the way the production
server interceptor sends it (status code, message and the ``ErrorInfo`` detail, ``rpc.errors.to_status``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.client.records import OffsetAndMetadata
from oncelog.client.services import AbortedTransaction, BlockingClient, FetchPosition, ListedOffset, OffsetQuery
from oncelog.errors import CoordinatorNotAvailable, NotLeader, OncelogError, UnknownTopicOrPartition
from oncelog.rpc.errors import to_error_info, to_status
from oncelog.vocabulary import CoordinatorKind, IsolationLevel, TopicPartition

TP0, TP1 = TopicPartition("orders", 0), TopicPartition("orders", 1)
seen: dict[str, Any] = {}


def refuse(context: grpc.ServicerContext, err: OncelogError) -> None:
    code, message, trailers = to_status(err)
    context.abort_with_status(_Status(code, message, trailers))


class _Status(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: Any) -> None:
        self.code, self.details, self.trailing_metadata = code, details, trailing_metadata


class Cluster(cluster_pb.ClusterServiceServicer):
    def Metadata(self, request: Any, context: Any) -> Any:
        seen["Metadata"] = request
        if list(request.topics) == ["gone"]:
            refuse(context, UnknownTopicOrPartition("topic 'gone' does not exist"))
        partitions = [cluster_pb.PartitionMetadata(partition=0, leader_address="s-0:1", leader_epoch=3)]
        return cluster_pb.MetadataResponse(topics=[cluster_pb.TopicMetadata(name="orders", partitions=partitions)])

    def FindCoordinator(self, request: Any, context: Any) -> Any:
        seen["FindCoordinator"] = request
        if request.key == "nobody":
            refuse(context, CoordinatorNotAvailable("no owner yet"))
        return cluster_pb.FindCoordinatorResponse(address="g-0:1")


class Storage(storage_pb.PartitionStorageServiceServicer):
    def ListOffsets(self, request: Any, context: Any) -> Any:
        seen["ListOffsets"] = request
        first, second = request.partitions
        return storage_pb.ListOffsetsResponse(
            results=[
                storage_pb.ListOffsetsPartitionResult(
                    topic_partition=first.topic_partition, offset=17, timestamp_ms=-1, leader_epoch=4
                ),
                storage_pb.ListOffsetsPartitionResult(
                    topic_partition=second.topic_partition, error=to_error_info(NotLeader("moved"))
                ),
            ]
        )

    def Fetch(self, request: Any, context: Any) -> Any:
        seen["Fetch"] = request
        [wanted] = request.partitions
        aborted = [storage_pb.AbortedTransaction(producer_id=9, first_offset=4)]
        result = storage_pb.FetchPartitionResult(
            topic_partition=wanted.topic_partition,
            high_watermark=20,
            last_stable_offset=18,
            log_start_offset=2,
            records=b"batches",
            aborted_transactions=aborted,
        )
        return storage_pb.FetchResponse(results=[result])


class Offsets(offsets_pb.GroupOffsetsServiceServicer):
    def FetchOffsets(self, request: Any, context: Any) -> Any:
        seen["FetchOffsets"] = request
        first, second = request.partitions
        return offsets_pb.FetchOffsetsResponse(
            offsets=[
                common_pb.PartitionOffset(topic_partition=first, offset=12, metadata="batch-3", leader_epoch=2),
                common_pb.PartitionOffset(topic_partition=second, offset=-1, metadata="", leader_epoch=-1),
            ]
        )


@pytest.fixture
def calls() -> Iterator[Callable[[], BlockingClient]]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    cluster_pb.add_ClusterServiceServicer_to_server(Cluster(), server)
    storage_pb.add_PartitionStorageServiceServicer_to_server(Storage(), server)
    offsets_pb.add_GroupOffsetsServiceServicer_to_server(Offsets(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    seen.clear()
    try:
        yield lambda: BlockingClient(lambda address: channel, timeout_s=5)
    finally:
        channel.close()
        server.stop(None)


def test_metadata_and_find_coordinator_return_domain_values_and_raise_the_servers_errors(calls: Any) -> None:
    [orders] = calls().metadata("any", ["orders"])
    assert orders.name == "orders" and orders.partitions[0].leader_address == "s-0:1"
    assert orders.partitions[0].leader_epoch == 3 and list(seen["Metadata"].topics) == ["orders"]
    with pytest.raises(UnknownTopicOrPartition, match="gone"):
        calls().metadata("any", ["gone"])
    assert calls().find_coordinator("any", "g", CoordinatorKind.GROUP) == "g-0:1"
    assert seen["FindCoordinator"].type == cluster_pb.COORDINATOR_TYPE_GROUP
    with pytest.raises(CoordinatorNotAvailable):
        calls().find_coordinator("any", "nobody", CoordinatorKind.GROUP)


def test_list_offsets_fetch_and_committed_offsets_translate_each_partition(calls: Any) -> None:
    listed = calls().list_offsets(
        "s-0", {TP0: OffsetQuery.of("earliest"), TP1: OffsetQuery.of("latest")}, isolation=IsolationLevel.READ_COMMITTED
    )
    assert listed[TP0] == ListedOffset(17, -1, 4) and isinstance(listed[TP1], NotLeader)
    sent = seen["ListOffsets"]
    assert [p.spec for p in sent.partitions] == [storage_pb.OFFSET_SPEC_EARLIEST, storage_pb.OFFSET_SPEC_LATEST]
    assert sent.isolation_level == storage_pb.ISOLATION_LEVEL_READ_COMMITTED

    [result] = calls().fetch(
        "s-0", [FetchPosition(TP0, 5, 3, 1_000)], isolation=IsolationLevel.READ_UNCOMMITTED, max_bytes=4_000
    )
    assert (result.records, result.high_watermark, result.last_stable_offset) == (b"batches", 20, 18)
    assert result.aborted_transactions == (AbortedTransaction(9, 4),) and result.error is None
    request = seen["Fetch"]
    assert (request.max_wait_ms, request.max_bytes) == (0, 4_000), "the connector never long-polls"
    assert (request.partitions[0].fetch_offset, request.partitions[0].leader_epoch) == (5, 3)

    committed = calls().fetch_offsets("g-0", "sink", [TP0, TP1], require_stable=True)
    assert committed == {TP0: OffsetAndMetadata(12, "batch-3", 2), TP1: None}
    assert seen["FetchOffsets"].require_stable and seen["FetchOffsets"].group_id == "sink"
