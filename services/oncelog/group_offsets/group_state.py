"""Consumer group state (design/consumer-groups.md §2, §5): immutable values, their JSON form, and commit fencing.

Pure: no clocks, no store. :mod:`oncelog.group_offsets.group_coordinator` changes these values;
the offset manager checks commits against them (design/consumer-groups.md §6).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from oncelog.errors import FencedMemberEpoch, StaleMemberEpoch, UnknownMemberId
from oncelog.vocabulary import TopicPartition

JOIN_EPOCH = 0
"""Member epoch of a heartbeat that joins the group."""

LEAVE_EPOCH = -1
"""Member epoch of a heartbeat that leaves the group."""

STATIC_LEAVE_EPOCH = -2
"""Member epoch of a static member's temporary leave: its assignment is kept for the session timeout."""


@dataclass(frozen=True)
class MemberState:
    """One member as the coordinator holds it.

    ``assigned`` are the partitions it may own now; ``pending_revocation`` those it owns but must give up
    before anyone else gets them. ``left_static``: a static member that left with epoch -2 and may come back.
    """

    member_id: str
    member_epoch: int = JOIN_EPOCH
    previous_epoch: int = JOIN_EPOCH
    instance_id: str = ""
    client_id: str = ""
    subscribed_topics: tuple[str, ...] = ()
    subscribed_regex: str = ""
    rebalance_timeout_ms: int = 0
    assigned: frozenset[TopicPartition] = frozenset()
    pending_revocation: frozenset[TopicPartition] = frozenset()
    left_static: bool = False

    @property
    def owned(self) -> frozenset[TopicPartition]:
        """Every partition this member may still hold: assigned or pending revocation."""
        return self.assigned | self.pending_revocation


@dataclass(frozen=True)
class ConsumerGroupState:
    """A consumer group: epochs, members, the target assignment and the topic sizes it was computed for."""

    group_id: str
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor: str = ""
    members: Mapping[str, MemberState] = field(default_factory=dict)
    target: Mapping[str, frozenset[TopicPartition]] = field(default_factory=dict)
    partition_counts: Mapping[str, int] = field(default_factory=dict)

    @property
    def state(self) -> str:
        """Kafka's consumer group states: EMPTY, ASSIGNING, RECONCILING or STABLE."""
        if not self.members:
            return "EMPTY"
        if self.assignment_epoch < self.group_epoch:
            return "ASSIGNING"
        if any(
            m.member_epoch != self.assignment_epoch or m.pending_revocation or m.assigned != self.target.get(k)
            for k, m in self.members.items()
        ):
            return "RECONCILING"
        return "STABLE"

    def member_by_instance(self, instance_id: str) -> MemberState | None:
        """The member holding a static instance id, if any."""
        return next((m for m in self.members.values() if instance_id and m.instance_id == instance_id), None)

    def check_commit(
        self, member_id: str, member_epoch: int, partitions: Collection[TopicPartition], *, transactional: bool
    ) -> None:
        """Member-epoch fencing of CommitOffsets and TxnOffsetCommit (design/consumer-groups.md §6).

        Raises:
            UnknownMemberId, FencedMemberEpoch, StaleMemberEpoch: the committer is not entitled to commit these.
        """
        given = member_epoch >= 0 or bool(member_id)
        if not given:
            if transactional or not any(not m.left_static for m in self.members.values()):
                return
            raise UnknownMemberId(
                f"group {self.group_id!r} has {len(self.members)} active member(s); a commit without a member id "
                "and member epoch is accepted only while the group is empty: commit through a member of the group"
            )
        member = self.members.get(member_id)
        if member is None or member.left_static:
            raise UnknownMemberId(
                f"member {member_id!r} is not in group {self.group_id!r} (it left or was removed after its session "
                "timeout): rejoin the group and process its new assignment"
            )
        if member_epoch > member.member_epoch:
            raise FencedMemberEpoch(
                f"group {self.group_id!r}: member {member_id!r} committed with epoch {member_epoch}, newer than its "
                f"epoch {member.member_epoch} here: rejoin the group"
            )
        foreign = sorted(tp for tp in partitions if tp not in member.owned)
        if foreign or (member_epoch < member.member_epoch and any(tp not in member.assigned for tp in partitions)):
            shown = ", ".join(str(tp) for tp in foreign[:10]) or "partitions being revoked"
            raise StaleMemberEpoch(
                f"group {self.group_id!r}: member {member_id!r} at epoch {member_epoch} "
                f"(current {member.member_epoch}) does not own {shown}: "
                "heartbeat for the current assignment and commit only partitions it holds"
            )


# ------------------------------------------------------------------------------------------------ JSON


def _tps(items: Collection[TopicPartition]) -> list[list[object]]:
    return [[tp.topic, tp.partition] for tp in sorted(items)]


def _from_tps(items: list[list[object]]) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(str(t), int(p)) for t, p in items)  # type: ignore[call-overload]


def encode_header(group: ConsumerGroupState) -> str:
    """Everything but the members, as compact JSON (the ``consumer_groups.state`` column)."""
    return json.dumps(
        {
            "group_epoch": group.group_epoch,
            "assignment_epoch": group.assignment_epoch,
            "assignor": group.assignor,
            "partition_counts": dict(sorted(group.partition_counts.items())),
            "target": {m: _tps(ps) for m, ps in sorted(group.target.items())},
        },
        separators=(",", ":"),
    )


def encode_member(m: MemberState) -> str:
    """One member as compact JSON (a ``consumer_group_members.state`` cell): a heartbeat rewrites one row."""
    return json.dumps(
        {
            "member_id": m.member_id,
            "member_epoch": m.member_epoch,
            "previous_epoch": m.previous_epoch,
            "instance_id": m.instance_id,
            "client_id": m.client_id,
            "subscribed_topics": list(m.subscribed_topics),
            "subscribed_regex": m.subscribed_regex,
            "rebalance_timeout_ms": m.rebalance_timeout_ms,
            "assigned": _tps(m.assigned),
            "pending_revocation": _tps(m.pending_revocation),
            "left_static": m.left_static,
        },
        separators=(",", ":"),
    )


def _member(m: dict[str, Any]) -> MemberState:
    return MemberState(
        member_id=m["member_id"],
        member_epoch=m["member_epoch"],
        previous_epoch=m["previous_epoch"],
        instance_id=m["instance_id"],
        client_id=m["client_id"],
        subscribed_topics=tuple(m["subscribed_topics"]),
        subscribed_regex=m["subscribed_regex"],
        rebalance_timeout_ms=m["rebalance_timeout_ms"],
        assigned=_from_tps(m["assigned"]),
        pending_revocation=_from_tps(m["pending_revocation"]),
        left_static=m["left_static"],
    )


def decode_group(group_id: str, header: str, members: Iterable[str]) -> ConsumerGroupState:
    """Inverse of :func:`encode_header` and :func:`encode_member`."""
    data = json.loads(header)
    decoded = [_member(json.loads(raw)) for raw in members]
    return ConsumerGroupState(
        group_id=group_id,
        group_epoch=data["group_epoch"],
        assignment_epoch=data["assignment_epoch"],
        assignor=data["assignor"],
        members={m.member_id: m for m in decoded},
        target={k: _from_tps(v) for k, v in data["target"].items()},
        partition_counts=dict(data["partition_counts"]),
    )


__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "STATIC_LEAVE_EPOCH",
    "ConsumerGroupState",
    "MemberState",
    "decode_group",
    "encode_header",
    "encode_member",
]
