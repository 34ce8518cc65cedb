"""GroupOffsetsService client."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.client.group_admin import ConsumerGroupDescription, ConsumerGroupListing, description, listing
from oncelog.client.records import (
    OffsetAndMetadata,
)
from oncelog.client.services.retry import call
from oncelog.client.services.transactions import TxnMarker, TxnMarkerResult, _marker_results, _markers_pb
from oncelog.client.services.wire import (
    _Client,
    _error,
    _identity_pb,
    _offsets_pb,
    _tp,
    _tp_pb,
)
from oncelog.errors import OncelogError
from oncelog.vocabulary import ProducerIdAndEpoch, TopicPartition

# --------------------------------------------------------------------------------------- GroupOffsetsService


@dataclass(frozen=True, slots=True)
class GroupMember:
    """The member a commit comes from; the defaults skip the generation and member checks."""

    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str = ""


@dataclass(frozen=True, slots=True)
class MemberHeartbeat:
    """One member's ConsumerGroupHeartbeat (KIP-848, design/consumer-groups.md §7).

    Attributes:
        group_id: the consumer group.
        member_id: the member's id (client-generated on joining).
        member_epoch: 0 to join, -1 to leave, -2 for a static member's temporary leave, else its current epoch.
        group_instance_id: makes the member static ("" for none).
        topics: the subscribed topic names (ignored when ``pattern`` is set).
        pattern: a subscription regex over whole topic names ("" for none).
        server_assignor: "uniform" or "range" ("" lets the group decide).
        owned: the partitions the member holds now.
        client_id: the client's name, shown by ``oncelog groups describe``.
    """

    group_id: str
    member_id: str
    member_epoch: int
    group_instance_id: str = ""
    topics: tuple[str, ...] = ()
    pattern: str = ""
    server_assignor: str = ""
    owned: tuple[TopicPartition, ...] = ()
    client_id: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """The coordinator's answer to a heartbeat: the member's id and epoch, and the partitions it may own now."""

    member_id: str
    member_epoch: int
    assignment: frozenset[TopicPartition]
    heartbeat_interval_ms: int = 0
    session_timeout_ms: int = 0


def _member_pb(member: GroupMember | None) -> offsets_pb.GroupMember | None:
    if member is None:
        return None
    return offsets_pb.GroupMember(
        generation_id=member.generation_id, member_id=member.member_id, group_instance_id=member.group_instance_id
    )


def _committed(offsets: Iterable[common_pb.PartitionOffset]) -> dict[TopicPartition, OffsetAndMetadata | None]:
    return {
        _tp(o.topic_partition): (
            OffsetAndMetadata(o.offset, o.metadata, None if o.leader_epoch < 0 else o.leader_epoch)
            if o.offset >= 0
            else None
        )
        for o in offsets
    }


def fetch_offsets_request(
    group_id: str, partitions: Iterable[TopicPartition], require_stable: bool
) -> offsets_pb.FetchOffsetsRequest:
    """The FetchOffsets request (shared by the asyncio and the blocking client)."""
    return offsets_pb.FetchOffsetsRequest(
        group_id=group_id, partitions=[_tp_pb(tp) for tp in partitions], require_stable=require_stable
    )


def committed(response: offsets_pb.FetchOffsetsResponse) -> dict[TopicPartition, OffsetAndMetadata | None]:
    """The committed offsets of a FetchOffsets answer (None where nothing is committed)."""
    return _committed(response.offsets)


class GroupOffsetsClient(_Client):
    """GroupOffsetsService on the process owning a group's shard: committed offsets, inside and outside
    transactions (design/architecture.md §6)."""

    def _stub(self, address: str) -> offsets_pb.GroupOffsetsServiceStub:
        return offsets_pb.GroupOffsetsServiceStub(self._channel_for(address))

    async def commit_offsets(
        self,
        address: str,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        member: GroupMember | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Commit offsets outside any transaction."""
        await call(
            self._stub(address).CommitOffsets,
            offsets_pb.CommitOffsetsRequest(
                group_id=group_id,
                member=_member_pb(member),
                offsets=_offsets_pb(offsets),
            ),
            timeout_s=self._timeout(timeout_s),
        )

    async def fetch_offsets(
        self,
        address: str,
        group_id: str,
        partitions: Iterable[TopicPartition] = (),
        *,
        require_stable: bool = False,
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The committed offsets (None where nothing is committed); every partition of the group when none is
        named. ``require_stable`` answers UNSTABLE_OFFSET_COMMIT while a transactional commit is pending."""
        request = fetch_offsets_request(group_id, partitions, require_stable)
        response = await call(self._stub(address).FetchOffsets, request, timeout_s=self._timeout(timeout_s))
        return _committed(response.offsets)

    async def txn_offset_commit(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        group_id: str,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        member: GroupMember | None = None,
        timeout_s: float | None = None,
    ) -> None:
        """Stage offsets in the open transaction; they become visible with its COMMIT marker."""
        await call(
            self._stub(address).TxnOffsetCommit,
            offsets_pb.TxnOffsetCommitRequest(
                transactional_id=transactional_id,
                producer=_identity_pb(producer),
                group_id=group_id,
                member=_member_pb(member),
                offsets=_offsets_pb(offsets),
            ),
            timeout_s=self._timeout(timeout_s),
        )

    async def consumer_group_heartbeat(
        self, address: str, heartbeat: MemberHeartbeat, *, timeout_s: float | None = None
    ) -> HeartbeatAnswer:
        """One member's heartbeat (KIP-848): its subscription and owned partitions in, its assignment out."""
        request = offsets_pb.ConsumerGroupHeartbeatRequest(
            group_id=heartbeat.group_id,
            member_id=heartbeat.member_id,
            member_epoch=heartbeat.member_epoch,
            group_instance_id=heartbeat.group_instance_id,
            subscribed_topic_names=list(heartbeat.topics),
            subscribed_topic_regex=heartbeat.pattern,
            server_assignor=heartbeat.server_assignor,
            owned_partitions=[_tp_pb(tp) for tp in heartbeat.owned],
            client_id=heartbeat.client_id,
        )
        response = await call(self._stub(address).ConsumerGroupHeartbeat, request, timeout_s=self._timeout(timeout_s))
        return HeartbeatAnswer(
            member_id=response.member_id,
            member_epoch=response.member_epoch,
            assignment=frozenset(_tp(tp) for tp in response.assignment),
            heartbeat_interval_ms=response.heartbeat_interval_ms,
            session_timeout_ms=response.session_timeout_ms,
        )

    async def list_consumer_groups(self, address: str, *, timeout_s: float | None = None) -> list[ConsumerGroupListing]:
        """Every consumer group with its state (any group-offsets replica answers from SQL)."""
        response = await call(
            self._stub(address).ListConsumerGroups,
            offsets_pb.ListConsumerGroupsRequest(),
            timeout_s=self._timeout(timeout_s),
        )
        return [listing(g) for g in response.groups]

    async def describe_consumer_groups(
        self, address: str, group_ids: Iterable[str], *, timeout_s: float | None = None
    ) -> dict[str, ConsumerGroupDescription | OncelogError]:
        """Each group's state, epochs, members and assignments, or its error (GroupIdNotFound)."""
        response = await call(
            self._stub(address).DescribeConsumerGroups,
            offsets_pb.DescribeConsumerGroupsRequest(group_ids=list(group_ids)),
            timeout_s=self._timeout(timeout_s),
        )
        return {g.group_id: _error(g) or description(g) for g in response.groups}

    async def delete_consumer_group(self, address: str, group_id: str, *, timeout_s: float | None = None) -> None:
        """Delete a group that has no members, with its committed offsets."""
        await call(
            self._stub(address).DeleteConsumerGroup,
            offsets_pb.DeleteConsumerGroupRequest(group_id=group_id),
            timeout_s=self._timeout(timeout_s),
        )

    async def write_txn_markers(
        self, address: str, markers: Iterable[TxnMarker], *, timeout_s: float | None = None
    ) -> list[TxnMarkerResult]:
        """Apply COMMIT/ABORT markers to the pending offsets of the groups this process owns."""
        response = await call(
            self._stub(address).WriteTxnMarkers,
            offsets_pb.WriteTxnMarkersRequest(markers=_markers_pb(markers)),
            timeout_s=self._timeout(timeout_s),
        )
        return _marker_results(response.results)
