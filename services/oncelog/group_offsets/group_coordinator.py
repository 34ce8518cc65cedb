"""GroupCoordinator: KIP-848 consumer groups, server side (design/consumer-groups.md §3).

Pure domain: the clock, the store, shard ownership and the topic directory come through the constructor;
nothing here imports grpc. Modelled on Kafka's ``GroupMetadataManager.consumerGroupHeartbeat``,
``ConsumerGroup`` and ``CurrentAssignmentBuilder``.

:func:`apply_heartbeat` and :func:`remove_member` are pure functions of the group's state; the
:class:`GroupCoordinator` adds what needs time and storage: it keeps each group in memory with the shard fence it
was loaded under, writes the new state (and the ownership changes) in one fenced store transaction whenever it
changes, and keeps session and revocation deadlines on a monotonic clock. Deadlines are not stored: a new shard
owner starts them afresh (design/consumer-groups.md §3.2).
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from oncelog.catalog.topics import validate_group_id
from oncelog.errors import (
    CoordinatorLoadInProgress,
    FencedMemberEpoch,
    GroupIdNotFound,
    InvalidRegularExpression,
    InvalidRequest,
    NonEmptyGroup,
    NotCoordinator,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)
from oncelog.group_offsets.assignors import DEFAULT_ASSIGNOR, AssignmentSpec, assignor_named
from oncelog.group_offsets.group_state import (
    JOIN_EPOCH,
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroupState,
    MemberState,
)
from oncelog.group_offsets.offset_manager import (
    OffsetStore,
    OffsetTransaction,
    ShardFence,
    ShardFenced,
    ShardOwnership,
    TopicPartition,
)
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics

MAX_MEMBER_ID_LENGTH = 255
MAX_REGEX_LENGTH = 1000


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


class TopicDirectory(Protocol):
    """Topic names and partition counts (the catalog, cached, in production)."""

    def partition_counts(self, wanted: Collection[str] = ()) -> Mapping[str, int]:
        """Every topic and its partition count; ``wanted`` names topics a member subscribes to by name."""
        ...


class GroupTransaction(OffsetTransaction, Protocol):
    """The offset store transaction, with the consumer group tables."""

    def consumer_group(self, group_id: str) -> ConsumerGroupState | None: ...

    def put_consumer_group(self, group: ConsumerGroupState, previous: ConsumerGroupState | None = None) -> None:
        """Store ``group``; ``previous`` (the stored state) lets the store write only what changed."""
        ...

    def delete_consumer_group(self, group_id: str) -> None: ...

    def add_ownership_changes(self, group_id: str, changes: Iterable[OwnershipChange]) -> None: ...


class GroupOwnership(ShardOwnership, Protocol):
    """Shard ownership, with the shards served right now (to load a newly acquired shard's groups)."""

    def owned_shards(self) -> dict[int, int]: ...


class GroupStore(OffsetStore, Protocol):
    """Reads of consumer groups outside the owner's write path (any replica may serve them)."""

    def read_consumer_group(self, group_id: str) -> ConsumerGroupState | None: ...

    def list_consumer_groups(self) -> list[ConsumerGroupState]: ...

    def ownership_history(self, group_id: str) -> list[OwnershipChange]: ...


# ---------------------------------------------------------------------------------------------- pure transitions


def subscribed_topics(member: MemberState, counts: Mapping[str, int]) -> frozenset[str]:
    """The existing topics a member's names or regex select."""
    if member.subscribed_regex:
        pattern = re.compile(member.subscribed_regex)
        return frozenset(t for t in counts if pattern.fullmatch(t))
    return frozenset(t for t in member.subscribed_topics if t in counts)


def refresh_target(group: ConsumerGroupState, counts: Mapping[str, int]) -> ConsumerGroupState:
    """Bump the group epoch when the subscribed topics' sizes changed, and compute the target when it is behind."""
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
    held_by_others: set[TopicPartition] = set()
    for other_id, other in group.members.items():
        if other_id != member.member_id:
            held_by_others |= other.owned
    epoch = group.assignment_epoch
    previous = member.member_epoch if epoch != member.member_epoch else member.previous_epoch
    return replace(
        member,
        member_epoch=epoch,
        previous_epoch=previous,
        assigned=assigned | (target - held_by_others),
        pending_revocation=frozenset(),
    )


def remove_member(group: ConsumerGroupState, member_id: str, counts: Mapping[str, int]) -> ConsumerGroupState:
    """Drop a member (leave, session or rebalance timeout): the group epoch moves and a new target is computed."""
    members = {k: v for k, v in group.members.items() if k != member_id}
    target = {k: v for k, v in group.target.items() if k != member_id}
    bumped = replace(group, members=members, target=target, group_epoch=group.group_epoch + 1)
    return refresh_target(bumped, counts)


def apply_heartbeat(
    group: ConsumerGroupState, request: HeartbeatRequest, counts: Mapping[str, int], *, new_member_id: str
) -> tuple[ConsumerGroupState, MemberState | None]:
    """The group after ``request`` and the member as answered (None when it left).

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
    group = refresh_target(group, counts)
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
    """Members whose owned partitions (or epoch) changed from ``before`` to ``after``, removed ones with epoch -1."""
    changes = []
    for member_id in sorted(set(before.members) | set(after.members)):
        old, new = before.members.get(member_id), after.members.get(member_id)
        if new is None:
            changes.append(OwnershipChange(member_id, LEAVE_EPOCH, frozenset()))
        elif old is None or old.owned != new.owned or old.member_epoch != new.member_epoch:
            changes.append(OwnershipChange(member_id, new.member_epoch, new.owned))
    # Releases first, so a replay never sees a partition granted before its previous holder let go.
    return sorted(changes, key=lambda c: len(c.owned))


# ---------------------------------------------------------------------------------------------- coordinator


class GroupCoordinator:
    """Serves ConsumerGroupHeartbeat and the group admin calls for the groups of the shards this process owns.

    Args:
        store: the group-offsets store (offsets and groups share its fenced transactions).
        ownership: shard ownership and fences.
        topics: topic names and partition counts.
        clock: monotonic milliseconds, for deadlines.
        session_timeout_ms: a member that does not heartbeat for this long is removed.
        heartbeat_interval_ms: how often members are told to heartbeat.
        rebalance_timeout_ms: default bound on a revocation, when the member sends none.
        new_member_id: generates member ids for members that join without one.
        metrics: where rebalances and members are counted; the process-wide instruments by default.
    """

    def __init__(
        self,
        store: GroupStore,
        ownership: GroupOwnership,
        topics: TopicDirectory,
        clock: Callable[[], int],
        *,
        session_timeout_ms: int = 45_000,
        heartbeat_interval_ms: int = 5_000,
        rebalance_timeout_ms: int = 300_000,
        new_member_id: Callable[[], str] = lambda: uuid.uuid4().hex,
        metrics: OncelogMetrics | None = None,
    ) -> None:
        self._metrics = default_metrics() if metrics is None else metrics
        self._store = store
        self._ownership = ownership
        self._topics = topics
        self._clock = clock
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self._new_member_id = new_member_id
        self._lock = threading.Lock()
        self._group_locks: dict[str, threading.Lock] = {}
        self._loaded: dict[str, tuple[ShardFence, ConsumerGroupState]] = {}
        self._session_deadlines: dict[str, dict[str, int]] = {}
        self._revocation_deadlines: dict[str, dict[str, int]] = {}
        self._seen_shards: dict[int, int] = {}
        self._evaluated_with: dict[str, Mapping[str, int]] = {}
        self._reported_shards: set[int] = set()
        """Per group, the topic-size mapping its last full evaluation used: while the directory hands out the same
        object, a steady member's heartbeat needs no evaluation."""

    # ------------------------------------------------------------------------------ heartbeat

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """Apply one heartbeat (design/consumer-groups.md §3).

        Raises:
            InvalidRequest, InvalidRegularExpression, UnsupportedAssignor: malformed request; nothing changed.
            NotCoordinator: this process does not own the group's shard.
            UnknownMemberId, FencedMemberEpoch, UnreleasedInstanceId: the member must rejoin or stop.
        """
        request = self._validated(request)
        fence = self._ownership.fence_for(request.group_id)
        with self._group_lock(request.group_id):
            group = self._load(request.group_id, fence)
            counts = self._topics.partition_counts(request.topics)
            member = steady_member(group, request) if self._evaluated_with.get(request.group_id) is counts else None
            if member is not None:
                after = group  # the common heartbeat: nothing to change, nothing to write (O(1))
            else:
                after, member = apply_heartbeat(group, request, counts, new_member_id=self._new_member_id())
                self._save(fence, group, after)
                self._evaluated_with[request.group_id] = counts
            now = self._clock()
            if member is None:
                self._forget(request.group_id, request.member_id)
                if request.member_id in after.members:  # a static member's leave: kept for one session timeout
                    with self._lock:
                        sessions = self._session_deadlines.setdefault(request.group_id, {})
                        sessions[request.member_id] = now + self.session_timeout_ms
                return HeartbeatResponse(
                    request.member_id,
                    request.member_epoch,
                    frozenset(),
                    self.heartbeat_interval_ms,
                    self.session_timeout_ms,
                )
            with self._lock:
                sessions = self._session_deadlines.setdefault(request.group_id, {})
                sessions[member.member_id] = now + self.session_timeout_ms
                revocations = self._revocation_deadlines.setdefault(request.group_id, {})
                if member.pending_revocation:
                    timeout = member.rebalance_timeout_ms or self.rebalance_timeout_ms
                    revocations.setdefault(member.member_id, now + timeout)
                else:
                    revocations.pop(member.member_id, None)
        return HeartbeatResponse(
            member.member_id, member.member_epoch, member.assigned, self.heartbeat_interval_ms, self.session_timeout_ms
        )

    # ------------------------------------------------------------------------------ timeouts

    def expire(self) -> list[tuple[str, str]]:
        """Remove members past their session or revocation deadline; returns (group, member) pairs removed.

        Groups of shards this process has just acquired are loaded first, so their members' deadlines start.
        """
        self._load_new_shards()
        now = self._clock()
        removed: list[tuple[str, str]] = []
        with self._lock:
            groups = list(self._loaded)
        for group_id in groups:
            with self._lock:
                sessions = dict(self._session_deadlines.get(group_id, {}))
                revocations = dict(self._revocation_deadlines.get(group_id, {}))
            due = sorted({m for m, d in sessions.items() if d <= now} | {m for m, d in revocations.items() if d <= now})
            if not due:
                continue
            try:
                fence = self._ownership.fence_for(group_id)
            except (NotCoordinator, CoordinatorLoadInProgress):  # its new owner expires the members
                self._drop(group_id)
                continue
            with self._group_lock(group_id):
                group = self._load(group_id, fence)
                after = group
                counts = self._topics.partition_counts()
                for member_id in due:
                    if member_id in after.members:
                        after = remove_member(after, member_id, counts)
                        removed.append((group_id, member_id))
                self._save(fence, group, after)
                for member_id in due:
                    self._forget(group_id, member_id)
        self._report_members()
        return removed

    def _report_members(self) -> None:
        served = self._ownership.owned_shards()
        counts = dict.fromkeys(set(served) | set(self._reported_shards), 0)
        with self._lock:
            for fence, group in self._loaded.values():
                if served.get(fence.shard) == fence.coordinator_epoch:
                    counts[fence.shard] += len(group.members)
        for shard, count in counts.items():
            self._metrics.set_group_members(shard, count)
        self._reported_shards = set(served)

    def _load_new_shards(self) -> None:
        owned = self._ownership.owned_shards()
        if owned == self._seen_shards:
            return
        fresh = {s for s, e in owned.items() if self._seen_shards.get(s) != e}
        self._seen_shards = owned
        for group in self._store.list_consumer_groups():
            try:
                fence = self._ownership.fence_for(group.group_id)
            except (NotCoordinator, CoordinatorLoadInProgress):  # not ours
                continue
            if fence.shard in fresh:
                with self._group_lock(group.group_id):
                    self._load(group.group_id, fence)

    # ------------------------------------------------------------------------------ admin

    def describe(self, group_id: str) -> ConsumerGroupState:
        """The group as stored (any replica answers). Raises GroupIdNotFound."""
        validate_group_id(group_id)
        group = self._store.read_consumer_group(group_id)
        if group is None:
            raise GroupIdNotFound(f"no consumer group {group_id!r}; `oncelog groups list` shows the groups")
        return group

    def history(self, group_id: str) -> list[OwnershipChange]:
        """The group's ownership changes, oldest first."""
        return self._store.ownership_history(group_id)

    def list_groups(self) -> list[ConsumerGroupState]:
        """Every consumer group, sorted by id."""
        return sorted(self._store.list_consumer_groups(), key=lambda g: g.group_id)

    def delete(self, group_id: str) -> None:
        """Delete a group without members, and its committed offsets.

        Raises:
            GroupIdNotFound: no such group. NonEmptyGroup: it has members. NotCoordinator: not our shard.
        """
        validate_group_id(group_id)
        fence = self._ownership.fence_for(group_id)
        with self._group_lock(group_id):
            group = self._load(group_id, fence, create=False)
            if group.members:
                raise NonEmptyGroup(
                    f"group {group_id!r} has {len(group.members)} member(s); stop its consumers (or wait for their "
                    "session timeout) before deleting it"
                )

            def work(tx: GroupTransaction) -> None:
                tx.delete_consumer_group(group_id)

            self._write(group_id, fence, work)
            self._drop(group_id)

    def active_members(self, group_id: str) -> int:
        """Members of a group as stored (0 for a group that does not exist): reset-offsets refuses active groups."""
        group = self._store.read_consumer_group(group_id)
        return 0 if group is None else sum(1 for m in group.members.values() if not m.left_static)

    # ------------------------------------------------------------------------------ internals

    def _validated(self, request: HeartbeatRequest) -> HeartbeatRequest:
        validate_group_id(request.group_id)
        if request.member_epoch < STATIC_LEAVE_EPOCH:
            raise InvalidRequest(
                f"member_epoch={request.member_epoch}; send 0 to join, -1 to leave, -2 for a static leave, or the "
                "epoch the group returned"
            )
        if request.member_epoch != JOIN_EPOCH and not request.member_id:
            raise InvalidRequest(f"member_id is empty with member_epoch={request.member_epoch}; send the member id")
        if len(request.member_id) > MAX_MEMBER_ID_LENGTH:
            raise InvalidRequest(
                f"member_id is {len(request.member_id)} characters; the limit is {MAX_MEMBER_ID_LENGTH}"
            )
        if request.rebalance_timeout_ms < 0:
            raise InvalidRequest(f"rebalance_timeout_ms={request.rebalance_timeout_ms}; use 0 for the default")
        if request.member_epoch == JOIN_EPOCH and not request.topics and not request.regex:
            raise InvalidRequest("a joining member subscribes to nothing; give topic names or a regex")
        if any(not t for t in request.topics):
            raise InvalidRequest("subscribed_topic_names contains an empty name")
        if request.regex:
            if len(request.regex) > MAX_REGEX_LENGTH:
                raise InvalidRegularExpression(
                    f"subscribed_topic_regex is {len(request.regex)} characters; the limit is {MAX_REGEX_LENGTH}"
                )
            try:
                re.compile(request.regex)
            except re.error as exc:
                raise InvalidRegularExpression(
                    f"subscribed_topic_regex {request.regex!r} does not compile: {exc}; fix the pattern"
                ) from exc
        if request.assignor and assignor_named(request.assignor) is None:
            raise UnsupportedAssignor(
                f"server_assignor {request.assignor!r} does not exist; use one of: uniform (default), range"
            )
        for tp in request.owned:
            if not tp.topic or tp.partition < 0:
                raise InvalidRequest(f"owned partition {tp} is malformed; name its topic and a partition from 0")
        return request

    def _group_lock(self, group_id: str) -> threading.Lock:
        with self._lock:
            return self._group_locks.setdefault(group_id, threading.Lock())

    def _load(self, group_id: str, fence: ShardFence, *, create: bool = True) -> ConsumerGroupState:
        with self._lock:
            held = self._loaded.get(group_id)
        if held is not None and held[0] == fence:
            return held[1]
        group = self._store.read_consumer_group(group_id)
        if group is None:
            if not create:
                raise GroupIdNotFound(f"no consumer group {group_id!r}; `oncelog groups list` shows the groups")
            group = ConsumerGroupState(group_id)
        now = self._clock()
        with self._lock:
            # A new owner starts every member's session afresh (design/consumer-groups.md §3.2).
            self._session_deadlines[group_id] = {m: now + self.session_timeout_ms for m in group.members}
            self._revocation_deadlines[group_id] = {
                m: now + (s.rebalance_timeout_ms or self.rebalance_timeout_ms)
                for m, s in group.members.items()
                if s.pending_revocation
            }
            self._loaded[group_id] = (fence, group)
        return group

    def _save(self, fence: ShardFence, before: ConsumerGroupState, after: ConsumerGroupState) -> None:
        if after == before:
            return
        changes = ownership_changes(before, after)

        def work(tx: GroupTransaction) -> None:
            tx.put_consumer_group(after, before if before.group_epoch or before.members else None)
            if changes:
                tx.add_ownership_changes(after.group_id, changes)

        self._write(after.group_id, fence, work)
        with self._lock:
            self._loaded[after.group_id] = (fence, after)
        if after.group_epoch > before.group_epoch:
            self._metrics.record_group_rebalances(after.group_epoch - before.group_epoch)

    def _write(self, group_id: str, fence: ShardFence, work: Callable[[GroupTransaction], None]) -> None:
        try:
            self._store.write({group_id: fence}, work)  # type: ignore[arg-type]
        except Exception as err:
            with self._lock:  # an indeterminate failure may have written: read the group again next time
                self._loaded.pop(group_id, None)
            if not isinstance(err, ShardFenced):
                raise
            self._ownership.fenced(err.fence)
            with self._lock:
                for other in [g for g, (f, _) in self._loaded.items() if f == fence]:
                    del self._loaded[other]
            raise

    def _forget(self, group_id: str, member_id: str) -> None:
        with self._lock:
            self._session_deadlines.get(group_id, {}).pop(member_id, None)
            self._revocation_deadlines.get(group_id, {}).pop(member_id, None)

    def _drop(self, group_id: str) -> None:
        with self._lock:
            self._loaded.pop(group_id, None)
            self._session_deadlines.pop(group_id, None)
            self._revocation_deadlines.pop(group_id, None)
            self._evaluated_with.pop(group_id, None)


__all__ = [
    "GroupCoordinator",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "OwnershipChange",
    "TopicDirectory",
    "apply_heartbeat",
    "reconcile",
    "remove_member",
]
