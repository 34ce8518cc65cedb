"""GroupOffsetsServicer: protobuf ↔ OffsetMetadataManager and GroupCoordinator."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from oncelog.api.common import v1 as common
from oncelog.api.offsets import v1 as pb
from oncelog.errors import OncelogError
from oncelog.group_offsets.group_coordinator import GroupCoordinator, HeartbeatRequest, OwnershipChange
from oncelog.group_offsets.group_flusher import GroupFlusher
from oncelog.group_offsets.group_state import ConsumerGroupState
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
from oncelog.torture import mutants

_RESULTS = {common.TRANSACTION_RESULT_COMMIT: TxnResult.COMMIT, common.TRANSACTION_RESULT_ABORT: TxnResult.ABORT}


class GroupOffsetsServicer(pb.GroupOffsetsServiceServicer):
    """Serve GroupOffsetsService; every store round trip runs off the event loop."""

    def __init__(self, manager: OffsetMetadataManager, groups: GroupCoordinator, flusher: GroupFlusher) -> None:
        self.manager = manager
        self.groups = groups
        self.flusher = flusher

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
        if mutants.active("offsets-outside-txn"):  # test builds only (design/torture.md §4)
            self.manager.commit_offsets(
                request.group_id, _member(request.member if request.HasField("member") else None), stored
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

    async def ConsumerGroupHeartbeat(
        self, request: pb.ConsumerGroupHeartbeatRequest, context: object
    ) -> pb.ConsumerGroupHeartbeatResponse:
        heartbeat = HeartbeatRequest(
            group_id=request.group_id,
            member_id=request.member_id,
            member_epoch=request.member_epoch,
            instance_id=request.group_instance_id,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            topics=tuple(request.subscribed_topic_names),
            regex=request.subscribed_topic_regex,
            assignor=request.server_assignor,
            owned=frozenset(_tps(request.owned_partitions)),
            client_id=request.client_id,
        )
        steady = self.groups.steady_heartbeat(heartbeat)  # the common case, answered on the loop
        if steady is not None:
            answer = steady
        else:
            answer, durable = await asyncio.to_thread(self.groups.handle_heartbeat, heartbeat)
            if durable is not None:  # answered only once the change it reports is written
                self.flusher.request()
                await asyncio.wrap_future(durable)
        return pb.ConsumerGroupHeartbeatResponse(
            member_id=answer.member_id,
            member_epoch=answer.member_epoch,
            heartbeat_interval_ms=answer.heartbeat_interval_ms,
            session_timeout_ms=answer.session_timeout_ms,
            assignment=_pb_tps(answer.assignment),
        )

    async def DescribeConsumerGroups(
        self, request: pb.DescribeConsumerGroupsRequest, context: object
    ) -> pb.DescribeConsumerGroupsResponse:
        def describe() -> list[pb.ConsumerGroupDescription]:
            out = []
            for group_id in request.group_ids:
                try:
                    group = self.groups.describe(group_id)
                except OncelogError as err:
                    out.append(pb.ConsumerGroupDescription(group_id=group_id, error=to_error_info(err)))
                    continue
                history = self.groups.history(group_id) if request.include_history else []
                out.append(_description(group, history))
            return out

        return pb.DescribeConsumerGroupsResponse(groups=await asyncio.to_thread(describe))

    async def ListConsumerGroups(
        self, request: pb.ListConsumerGroupsRequest, context: object
    ) -> pb.ListConsumerGroupsResponse:
        groups = await asyncio.to_thread(self.groups.list_groups)
        return pb.ListConsumerGroupsResponse(
            groups=[
                pb.ConsumerGroupListing(
                    group_id=g.group_id, state=g.state, group_epoch=g.group_epoch, member_count=len(g.members)
                )
                for g in groups
            ]
        )

    async def DeleteConsumerGroup(
        self, request: pb.DeleteConsumerGroupRequest, context: object
    ) -> pb.DeleteConsumerGroupResponse:
        await asyncio.to_thread(self.groups.delete, request.group_id)
        return pb.DeleteConsumerGroupResponse()


def _tps(items: Iterable[common.TopicPartition]) -> list[TopicPartition]:
    return [TopicPartition(tp.topic, tp.partition) for tp in items]


def _pb_tps(items: Iterable[TopicPartition]) -> list[common.TopicPartition]:
    return [common.TopicPartition(topic=tp.topic, partition=tp.partition) for tp in sorted(items)]


def _description(group: ConsumerGroupState, history: list[OwnershipChange]) -> pb.ConsumerGroupDescription:
    return pb.ConsumerGroupDescription(
        group_id=group.group_id,
        state=group.state,
        group_epoch=group.group_epoch,
        assignment_epoch=group.assignment_epoch,
        assignor=group.assignor,
        members=[
            pb.ConsumerGroupMemberDescription(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                client_id=m.client_id,
                member_epoch=m.member_epoch,
                subscribed_topic_names=list(m.subscribed_topics),
                subscribed_topic_regex=m.subscribed_regex,
                assignment=_pb_tps(m.assigned),
                pending_revocation=_pb_tps(m.pending_revocation),
                target_assignment=_pb_tps(group.target.get(m.member_id, frozenset())),
            )
            for _, m in sorted(group.members.items())
        ],
        history=[
            pb.OwnershipChange(seq=c.seq, member_id=c.member_id, member_epoch=c.member_epoch, owned=_pb_tps(c.owned))
            for c in history
        ],
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
