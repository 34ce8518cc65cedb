"""Consumer group transitions (design/consumer-groups.md §3): pure functions of a group's state.

:func:`apply_heartbeat` and :func:`remove_member` take a :class:`ConsumerGroupState` and return the next one; the
:class:`~oncelog.group_offsets.group_coordinator.GroupCoordinator` adds time, storage and the shard fence. Modelled on
Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``, ``ConsumerGroup`` and ``CurrentAssignmentBuilder``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from oncelog.errors import FencedMemberEpoch, UnknownMemberId, UnreleasedInstanceId
from oncelog.group_offsets.assignors import DEFAULT_ASSIGNOR, AssignmentSpec, assignor_named
from oncelog.group_offsets.group_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroupState,
    MemberState,
)
from oncelog.vocabulary import TopicPartition


@dataclass(frozen=True)
class HeartbeatRequest:
    """One ConsumerGroupHeartbeat (design/consumer-groups.md §3)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str = ""
    rebalance_timeout_ms: int = 0
    topics: tuple[str, ...] = ()
    regex: str = ""
    assignor: str = ""
    owned: frozenset[TopicPartition] = frozenset()
    client_id: str = ""


@dataclass(frozen=True)
class HeartbeatResponse:
    """The member's id, epoch and the partitions it may own now."""

    member_id: str
    member_epoch: int
    assignment: frozenset[TopicPartition]
    heartbeat_interval_ms: int
    session_timeout_ms: int


@dataclass(frozen=True)
class OwnershipChange:
    """What a member may hold from this change on (design/consumer-groups.md §5); epoch -1 means removed."""

    member_id: str
    member_epoch: int
    owned: frozenset[TopicPartition]
    seq: int = 0


def subscribed_topics(member: MemberState, counts: Mapping[str, int]) -> frozenset[str]:
    """The existing topics a member's names or regex select."""
    if member.subscribed_regex:
        pattern = re.compile(member.subscribed_regex)
        return frozenset(t for t in counts if pattern.fullmatch(t))
    return frozenset(t for t in member.subscribed_topics if t in counts)


def refresh_target(
    group: ConsumerGroupState, counts: Mapping[str, int], *, sizes_checked: bool = False
) -> ConsumerGroupState:
    """Bump the group epoch when the subscribed topics' sizes changed, and compute the target when it is behind.

    ``sizes_checked``: the caller knows ``counts`` is what the group's last evaluation used, so with no epoch to
    catch up nothing can have changed (this skips an O(members) scan on every reconciling heartbeat).
    """
    if sizes_checked and group.assignment_epoch >= group.group_epoch:
        return group
    subscriptions = {m: subscribed_topics(s, counts) for m, s in group.members.items()}
    used = {t: counts[t] for topics in subscriptions.values() for t in topics}
    if used != dict(group.partition_counts):
        # one change, one epoch: a group already ahead of its assignment is not bumped twice
        behind = group.assignment_epoch < group.group_epoch
        group = replace(group, group_epoch=group.group_epoch + (0 if behind else 1), partition_counts=used)
    if group.assignment_epoch >= group.group_epoch:
        return group
    assignor = assignor_named(group.assignor)
    assert assignor is not None  # validated when the group's assignor was chosen
    target = assignor.assign(AssignmentSpec(subscriptions, used, dict(group.target)))
    return replace(group, target=target, assignment_epoch=group.group_epoch)


def reconcile(group: ConsumerGroupState, member: MemberState, owned: frozenset[TopicPartition]) -> MemberState:
    """Move one member towards its target without letting two members own one partition
    (design/consumer-groups.md §3.1)."""
    if member.left_static:
        return member
    target = group.target.get(member.member_id, frozenset())
    pending = member.pending_revocation
    if pending & owned:
        return member  # still revoking: nothing else changes until it has released them
    assigned = member.assigned
    revoke = assigned - target
    if revoke:
        return replace(member, assigned=assigned - revoke, pending_revocation=revoke)
    wanted = target - assigned
    held_by_others: set[TopicPartition] = set()
    if wanted:  # most reconciliations only move the epoch: skip the O(members) scan
        for other_id, other in group.members.items():
            if other_id != member.member_id:
                held_by_others |= other.owned & wanted
    epoch = group.assignment_epoch
    previous = member.member_epoch if epoch != member.member_epoch else member.previous_epoch
    return replace(
        member,
        member_epoch=epoch,
        previous_epoch=previous,
        assigned=assigned | (wanted - held_by_others),
        pending_revocation=frozenset(),
    )


def remove_member(group: ConsumerGroupState, member_id: str, counts: Mapping[str, int]) -> ConsumerGroupState:
    """Drop a member (leave, session or rebalance timeout): the group epoch moves and a new target is computed."""
    members = {k: v for k, v in group.members.items() if k != member_id}
    target = {k: v for k, v in group.target.items() if k != member_id}
    bumped = replace(group, members=members, target=target, group_epoch=group.group_epoch + 1)
    return refresh_target(bumped, counts)


def apply_heartbeat(
    group: ConsumerGroupState,
    request: HeartbeatRequest,
    counts: Mapping[str, int],
    *,
    new_member_id: str,
    sizes_checked: bool = False,
) -> tuple[ConsumerGroupState, MemberState | None]:
    """The group after ``request`` and the member as answered (None when it left).

    ``sizes_checked``: ``counts`` is the mapping the group was last evaluated with (see :func:`refresh_target`).

    Raises:
        UnknownMemberId, FencedMemberEpoch, UnreleasedInstanceId: see design/consumer-groups.md §3.
    """
    members = dict(group.members)
    target = dict(group.target)
    epoch = request.member_epoch
    if epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
        member = members.get(request.member_id)
        if member is None:
            return group, None  # leaving twice is not an error: close() must never fail on it
        if epoch == STATIC_LEAVE_EPOCH and member.instance_id:
            members[member.member_id] = replace(member, left_static=True)
            return replace(group, members=members), None
        return remove_member(group, member.member_id, counts), None

    took_over = False
    if epoch == JOIN_EPOCH:
        member_id = request.member_id or new_member_id
        member = members.get(member_id)
        holder = group.member_by_instance(request.instance_id)
        if holder is not None and holder.member_id != member_id:
            if not holder.left_static:
                raise UnreleasedInstanceId(
                    f"group {group.group_id!r}: static instance {request.instance_id!r} is held by active member "
                    f"{holder.member_id!r}; stop that instance first (or wait for its session timeout)"
                )
            # The same static instance is back: it takes the old member's place, epoch and assignment.
            del members[holder.member_id]
            member = replace(holder, member_id=member_id, left_static=False)
            took_over = True
            if holder.member_id in target:
                target[member_id] = target.pop(holder.member_id)
        elif member is not None:
            # A known member rejoining with epoch 0 has lost its partitions: it starts again from nothing.
            member = replace(member, member_epoch=JOIN_EPOCH, assigned=frozenset(), pending_revocation=frozenset())
        else:
            member = MemberState(member_id=member_id)
    else:
        found = members.get(request.member_id)
        if found is None or found.left_static:
            raise UnknownMemberId(
                f"member {request.member_id!r} is not in group {group.group_id!r} (removed after its session or "
                "rebalance timeout, or it left): rejoin with member epoch 0"
            )
        lost_response = epoch == found.previous_epoch and request.owned <= found.assigned
        if epoch != found.member_epoch and not lost_response:
            raise FencedMemberEpoch(
                f"group {group.group_id!r}: member {request.member_id!r} sent epoch {epoch}, its epoch is "
                f"{found.member_epoch}: release its partitions and rejoin with member epoch 0"
            )
        member = found

    updated = replace(
        member,
        instance_id=request.instance_id,
        client_id=request.client_id or member.client_id,
        subscribed_topics=() if request.regex else tuple(sorted(set(request.topics))),
        subscribed_regex=request.regex,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
    )
    joined = member.member_id not in group.members and not took_over
    subscription_changed = (updated.subscribed_topics, updated.subscribed_regex) != (
        member.subscribed_topics,
        member.subscribed_regex,
    )
    members[updated.member_id] = updated
    assignor = group.assignor
    if not assignor or not any(k != updated.member_id for k in members):
        assignor = request.assignor or DEFAULT_ASSIGNOR
    group = replace(group, members=members, target=target, assignor=assignor)
    if joined or subscription_changed:
        group = replace(group, group_epoch=group.group_epoch + 1)
    group = refresh_target(group, counts, sizes_checked=sizes_checked)
    reconciled = reconcile(group, group.members[updated.member_id], request.owned)
    members = dict(group.members)
    members[reconciled.member_id] = reconciled
    return replace(group, members=members), reconciled


def steady_member(group: ConsumerGroupState, request: HeartbeatRequest) -> MemberState | None:
    """The member, when ``request`` changes nothing: same epoch and subscription, reconciled to a current target,
    nothing to revoke. Such a heartbeat only renews the session (Kafka's fast path)."""
    member = group.members.get(request.member_id)
    if member is None or member.left_static or request.member_epoch != member.member_epoch:
        return None
    if not (member.member_epoch == group.assignment_epoch == group.group_epoch):
        return None
    if member.pending_revocation or member.assigned != group.target.get(member.member_id, frozenset()):
        return None
    topics = () if request.regex else tuple(sorted(set(request.topics)))
    if (topics, request.regex, request.instance_id, request.rebalance_timeout_ms) != (
        member.subscribed_topics,
        member.subscribed_regex,
        member.instance_id,
        member.rebalance_timeout_ms,
    ):
        return None
    if request.client_id and request.client_id != member.client_id:
        return None
    return member


def ownership_changes(before: ConsumerGroupState, after: ConsumerGroupState) -> list[OwnershipChange]:
    """Members whose owned partitions changed from ``before`` to ``after`` (joined ones too), removed ones with epoch
    -1. A member that only moved its epoch is not recorded: in a large group every join moves every member's epoch."""
    changes = []
    for member_id in sorted(set(before.members) | set(after.members)):
        old, new = before.members.get(member_id), after.members.get(member_id)
        if old is new:
            continue
        if new is None:
            changes.append(OwnershipChange(member_id, LEAVE_EPOCH, frozenset()))
        elif old is None or old.owned != new.owned:
            changes.append(OwnershipChange(member_id, new.member_epoch, new.owned))
    # Releases first, so a replay never sees a partition granted before its previous holder let go.
    return sorted(changes, key=lambda c: len(c.owned))


__all__ = [
    "HeartbeatRequest",
    "HeartbeatResponse",
    "OwnershipChange",
    "apply_heartbeat",
    "ownership_changes",
    "reconcile",
    "refresh_target",
    "remove_member",
    "steady_member",
    "subscribed_topics",
]
