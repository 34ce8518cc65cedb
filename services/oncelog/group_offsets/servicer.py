"""GroupOffsetsServicer: protobuf ↔ OffsetMetadataManager."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from oncelog.api.common import v1 as common
from oncelog.api.offsets import v1 as pb
from oncelog.group_offsets.offset_manager import (
    NO_MEMBER,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    GroupMember,
    GroupResult,
    OffsetMetadataManager,
    PartitionOffset,
    TopicPartition,
    TxnMarker,
    TxnResult,
)
from oncelog.rpc import to_error_info

_RESULTS = {common.TRANSACTION_RESULT_COMMIT: TxnResult.COMMIT, common.TRANSACTION_RESULT_ABORT: TxnResult.ABORT}


class GroupOffsetsServicer(pb.GroupOffsetsServiceServicer):
    """Serve GroupOffsetsService; every store round trip runs off the event loop."""

    def __init__(self, manager: OffsetMetadataManager) -> None:
        self.manager = manager

    async def CommitOffsets(self, request: pb.CommitOffsetsRequest, context: object) -> pb.CommitOffsetsResponse:
        stored = await asyncio.to_thread(
            self.manager.commit_offsets,
            request.group_id,
            _member(request.member if request.HasField("member") else None),
            _offsets(request.offsets),
        )
        return pb.CommitOffsetsResponse(offsets=_pb_offsets(stored))

    async def FetchOffsets(self, request: pb.FetchOffsetsRequest, context: object) -> pb.FetchOffsetsResponse:
        partitions = [TopicPartition(p.topic, p.partition) for p in request.partitions]
        offsets = await asyncio.to_thread(
            self.manager.fetch_offsets, request.group_id, partitions, request.require_stable
        )
        return pb.FetchOffsetsResponse(offsets=_pb_offsets(offsets))

    async def TxnOffsetCommit(self, request: pb.TxnOffsetCommitRequest, context: object) -> pb.TxnOffsetCommitResponse:
        pid, epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        if request.HasField("producer"):
            pid, epoch = request.producer.producer_id, request.producer.producer_epoch
        stored = await asyncio.to_thread(
            self.manager.commit_transactional_offsets,
            request.transactional_id,
            pid,
            epoch,
            request.group_id,
            _member(request.member if request.HasField("member") else None),
            _offsets(request.offsets),
        )
        return pb.TxnOffsetCommitResponse(offsets=_pb_offsets(stored))

    async def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest, context: object) -> pb.WriteTxnMarkersResponse:
        markers = [_marker(m) for m in request.markers]
        results = await asyncio.to_thread(self.manager.write_txn_markers, markers)
        return pb.WriteTxnMarkersResponse(
            results=[
                common.TxnMarkerResult(producer_id=m.producer_id, group_errors=[_group_error(r) for r in rs])
                for m, rs in zip(markers, results, strict=True)
            ]
        )


def _member(member: pb.GroupMember | None) -> GroupMember:
    if member is None:
        return NO_MEMBER
    return GroupMember(member.generation_id, member.member_id, member.group_instance_id)


def _offsets(items: Iterable[common.PartitionOffset]) -> list[PartitionOffset]:
    return [
        PartitionOffset(
            TopicPartition(o.topic_partition.topic, o.topic_partition.partition), o.offset, o.leader_epoch, o.metadata
        )
        for o in items
    ]


def _pb_offsets(items: Iterable[PartitionOffset]) -> list[common.PartitionOffset]:
    return [
        common.PartitionOffset(
            topic_partition=common.TopicPartition(topic=o.topic_partition.topic, partition=o.topic_partition.partition),
            offset=o.offset,
            leader_epoch=o.leader_epoch,
            metadata=o.metadata,
        )
        for o in items
    ]


def _marker(m: common.TxnMarker) -> TxnMarker:
    pid, epoch = NO_PRODUCER_ID, NO_PRODUCER_EPOCH
    if m.HasField("producer"):
        pid, epoch = m.producer.producer_id, m.producer.producer_epoch
    return TxnMarker(
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=m.coordinator_epoch,
        result=_RESULTS.get(m.result),
        groups=tuple(m.groups),
        transactional_id=m.transactional_id,
    )


def _group_error(result: GroupResult) -> common.GroupError:
    if result.error is None:
        return common.GroupError(group_id=result.group_id)
    return common.GroupError(group_id=result.group_id, error=to_error_info(result.error))
