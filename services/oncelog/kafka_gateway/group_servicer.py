"""Kafka's classic group APIs on oncelog's group coordinator: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, and
ListGroups and DescribeGroups (``kafka-consumer-groups.sh``), which show oncelog's groups in the classic shape.

How the classic protocol maps onto the KIP-848 heartbeat is in ``classic_groups.py``; this module sends the
heartbeats (through the typed GroupOffsetsClient, on the group's coordinator) and builds the answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from oncelog.client.services import GroupOffsetsClient, HeartbeatAnswer, MemberHeartbeat
from oncelog.errors import OncelogError, Reason
from oncelog.kafka_gateway.classic_groups import (
    ClassicMember,
    ClassicMembers,
    assignment_bytes,
    subscribed_topics,
    subscription_bytes,
)
from oncelog.kafka_gateway.error_codes import error_code_of
from oncelog.kafka_gateway.protocol import Request
from oncelog.kafka_gateway.routing import ClusterRoutes
from oncelog.vocabulary import CoordinatorKind, Role, TopicPartition

SERVER_ASSIGNED = "oncelog-server-assignor"
"""The leader id JoinGroup answers with: no member, so every client is a follower and runs no assignor."""
_JOIN, _LEAVE, _STATIC_LEAVE = 0, -1, -2
_MEMBER_GONE = frozenset({Reason.UNKNOWN_MEMBER_ID, Reason.FENCED_MEMBER_EPOCH, Reason.STALE_MEMBER_EPOCH})
_CLASSIC_STATE = {"empty": "Empty", "stable": "Stable", "assigning": "PreparingRebalance",
                  "reconciling": "PreparingRebalance", "dead": "Dead"}  # fmt: skip
"""oncelog's (KIP-848) group states as the classic states Kafka's group tools know."""


class GroupServicer:
    """The handlers of the classic group APIs (module docstring)."""

    def __init__(
        self, *, routes: ClusterRoutes, groups: GroupOffsetsClient, members: ClassicMembers, timeout_s: float
    ) -> None:
        self._routes = routes
        self._groups = groups
        self._members = members
        self._timeout_s = timeout_s

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any] | None]]]:
        """API key -> handler."""
        return {
            11: self.join_group,
            14: self.sync_group,
            12: self.heartbeat,
            13: self.leave_group,
            16: self.list_groups,
            15: self.describe_groups,
        }

    async def list_groups(self, request: Request) -> dict[str, Any]:
        wanted = set(getattr(request.body, "states_filter", ()) or ())
        try:
            cluster = await self._routes.ask(lambda a: self._routes.cluster.describe_cluster(a))
            (address, *_) = cluster.addresses(Role.GROUP_OFFSETS) or [""]
            listed = await self._groups.list_consumer_groups(address, timeout_s=self._timeout_s) if address else []
        except OncelogError as exc:
            return {"throttle_time": 0, "error_code": error_code_of(exc), "groups": []}
        groups = [
            {"group_id": g.group_id, "protocol_type": "consumer", "group_type": "classic",
             "group_state": _CLASSIC_STATE.get(g.state.lower(), "Unknown")}
            for g in listed
        ]  # fmt: skip
        if wanted:
            groups = [g for g in groups if g["group_state"] in wanted]
        return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}

    async def describe_groups(self, request: Request) -> dict[str, Any]:
        described = []
        for group_id in request.body.groups:
            entry: dict[str, Any] = {
                "group_id": group_id, "group_state": "Dead", "protocol_type": "consumer", "protocol_data": "",
                "members": [], "error_code": ErrorCode.none,
            }  # fmt: skip
            try:
                address = await self._routes.coordinator(group_id, CoordinatorKind.GROUP)
                found = (await self._groups.describe_consumer_groups(address, [group_id], timeout_s=self._timeout_s))[
                    group_id
                ]
            except OncelogError as exc:
                found = exc
            if isinstance(found, OncelogError):
                # Kafka describes an unknown group as Dead with no error
                if found.reason is not Reason.GROUP_ID_NOT_FOUND:
                    entry["error_code"] = error_code_of(found)
                described.append(entry)
                continue
            entry["group_state"] = _CLASSIC_STATE.get(found.state.lower(), "Unknown")
            entry["protocol_data"] = found.assignor
            entry["members"] = [
                {"member_id": m.member_id, "group_instance_id": m.group_instance_id or None, "client_id": m.client_id,
                 "client_host": "", "member_metadata": subscription_bytes(m.subscription),
                 "member_assignment": assignment_bytes(m.assignment)}
                for m in found.members
            ]  # fmt: skip
            described.append(entry)
        return {"throttle_time": 0, "groups": described}

    async def _heartbeat(
        self,
        group_id: str,
        member_id: str,
        epoch: int,
        *,
        topics: Iterable[str] = (),
        owned: Iterable[TopicPartition] = (),
        instance_id: str = "",
        client_id: str = "",
    ) -> HeartbeatAnswer:
        request = MemberHeartbeat(
            group_id=group_id,
            member_id=member_id,
            member_epoch=epoch,
            group_instance_id=instance_id,
            topics=tuple(topics),
            owned=tuple(sorted(owned)),
            client_id=client_id,
        )
        key = (group_id, CoordinatorKind.GROUP)
        try:
            address = await self._routes.coordinator(group_id, CoordinatorKind.GROUP)
            return await self._groups.consumer_group_heartbeat(address, request, timeout_s=self._timeout_s)
        except OncelogError as exc:
            self._routes.failed(exc, key=key)
            raise

    async def join_group(self, request: Request) -> dict[str, Any]:
        body = request.body
        protocol = body.protocols[0].name if body.protocols else ""
        answer: dict[str, Any] = {
            "throttle_time": 0, "generation_id": -1, "protocol_type": "consumer", "protocol_name": protocol,
            "leader": SERVER_ASSIGNED, "member_id": body.member_id, "members": [],
        }  # fmt: skip
        if body.protocol_type != "consumer" or not body.protocols:
            return {**answer, "error_code": ErrorCode.inconsistent_group_protocol}
        try:
            topics = subscribed_topics(body.protocols[0].metadata)
        except ValueError:
            return {**answer, "error_code": ErrorCode.inconsistent_group_protocol}
        known = self._members.get(body.group_id, body.member_id) if body.member_id else None
        instance_id = getattr(body, "group_instance_id", None) or ""
        try:
            # a known member rejoining has revoked everything (eager): it keeps its epoch and owns nothing now
            response = await self._heartbeat(
                body.group_id,
                body.member_id,
                known.epoch if known is not None else _JOIN,
                topics=topics,
                instance_id=instance_id,
                client_id=request.client_id or "",
            )
        except OncelogError as exc:
            if known is not None and exc.reason in _MEMBER_GONE:
                self._members.drop(body.group_id, body.member_id)
                return {**answer, "member_id": "", "error_code": ErrorCode.unknown_member_id}
            if exc.reason is not Reason.UNRELEASED_INSTANCE_ID or not await self._release(body.group_id, instance_id):
                return {**answer, "error_code": error_code_of(exc)}
            try:
                response = await self._heartbeat(
                    body.group_id, body.member_id, _JOIN, topics=topics, instance_id=instance_id,
                    client_id=request.client_id or "",
                )  # fmt: skip
            except OncelogError as again:
                return {**answer, "error_code": error_code_of(again)}
        self._members.put(
            ClassicMember(
                group_id=body.group_id,
                member_id=response.member_id,
                topics=topics,
                epoch=response.member_epoch,
                generation=response.member_epoch,
                instance_id=instance_id,
                client_id=request.client_id or "",
            )
        )
        return {
            **answer,
            "error_code": ErrorCode.none,
            "generation_id": response.member_epoch,
            "member_id": response.member_id,
        }

    async def _release(self, group_id: str, instance_id: str) -> bool:
        """KIP-345's rule for a classic static member that starts again under a new member id: it replaces the
        member holding its instance id (which a crash left behind), so that one leaves as a static member and the
        new one takes its place and assignment. Returns whether a holder was released."""
        try:
            address = await self._routes.coordinator(group_id, CoordinatorKind.GROUP)
            described = (await self._groups.describe_consumer_groups(address, [group_id])).get(group_id)
            if described is None or isinstance(described, OncelogError):
                return False
            holders = [m.member_id for m in described.members if m.group_instance_id == instance_id]
            for holder in holders:
                await self._heartbeat(group_id, holder, _STATIC_LEAVE, instance_id=instance_id)
                self._members.drop(group_id, holder)
        except OncelogError:
            return False
        return bool(holders)

    async def sync_group(self, request: Request) -> dict[str, Any]:
        body = request.body
        answer = {
            "throttle_time": 0,
            "protocol_type": "consumer",
            "protocol_name": getattr(body, "protocol_name", None),
        }
        member = self._members.get(body.group_id, body.member_id)
        if member is None:
            return {**answer, "error_code": ErrorCode.unknown_member_id, "assignment": b""}
        if body.generation_id != member.generation:
            return {**answer, "error_code": ErrorCode.illegal_generation, "assignment": b""}
        code = await self._refresh(member, owned=())
        if code != ErrorCode.none:
            return {**answer, "error_code": code, "assignment": b""}
        return {**answer, "error_code": ErrorCode.none, "assignment": assignment_bytes(member.owned)}

    async def _refresh(self, member: ClassicMember, *, owned: Iterable[TopicPartition]) -> ErrorCode:
        """Heartbeat for ``member`` holding ``owned``; on success ``member.owned`` is the coordinator's assignment."""
        try:
            response = await self._heartbeat(
                member.group_id,
                member.member_id,
                member.epoch,
                topics=member.topics,
                owned=owned,
                instance_id=member.instance_id,
                client_id=member.client_id,
            )
        except OncelogError as exc:
            if exc.reason in _MEMBER_GONE:
                self._members.drop(member.group_id, member.member_id)
                return ErrorCode.unknown_member_id
            return error_code_of(exc)
        member.epoch = response.member_epoch
        member.owned = response.assignment
        return ErrorCode.none

    async def heartbeat(self, request: Request) -> dict[str, Any]:
        body = request.body
        member = self._members.get(body.group_id, body.member_id)
        if member is None:
            return {"throttle_time": 0, "error_code": ErrorCode.unknown_member_id}
        if body.generation_id != member.generation:
            return {"throttle_time": 0, "error_code": ErrorCode.illegal_generation}
        held = member.owned
        code = await self._refresh(member, owned=held)
        if code == ErrorCode.none and member.owned != held:
            # the coordinator moved partitions to or from this member: the client rejoins to take the new set
            member.owned = held
            code = ErrorCode.rebalance_in_progress
        return {"throttle_time": 0, "error_code": code}

    async def leave_group(self, request: Request) -> dict[str, Any]:
        body = request.body
        if request.version >= 3:
            leaving = [(m.member_id, m.group_instance_id or "") for m in body.members]
        else:
            leaving = [(body.member_id, "")]
        results = []
        for member_id, instance_id in leaving:
            member = self._members.get(body.group_id, member_id)
            code = ErrorCode.none
            try:
                await self._heartbeat(
                    body.group_id, member_id, _LEAVE, instance_id=instance_id or (member.instance_id if member else "")
                )
            except OncelogError as exc:
                code = error_code_of(exc)
            self._members.drop(body.group_id, member_id)
            results.append({"member_id": member_id, "group_instance_id": instance_id or None, "error_code": code})
        top = results[0]["error_code"] if request.version < 3 and results else ErrorCode.none
        return {"throttle_time": 0, "error_code": top, "members": results}
