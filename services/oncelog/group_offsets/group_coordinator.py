"""GroupCoordinator: KIP-848 consumer groups, server side (design/consumer-groups.md §3, §5).

Pure domain: the clock, the store, shard ownership and the topic directory come through the constructor;
nothing here imports grpc. The transitions themselves are pure functions (:mod:`.group_transitions`); the
coordinator adds what needs time and storage. It keeps each group in memory with the shard fence it was loaded
under and keeps session and revocation deadlines on a monotonic clock (not stored: a new shard owner starts them
afresh, design/consumer-groups.md §3.2).

Writes are group-committed (design/consumer-groups.md §5.1): a heartbeat that changes a group applies the change in
memory and *stages* it; :meth:`GroupCoordinator.flush` writes every staged change of a shard in one fenced store
transaction, and only then are the heartbeats that staged (or read) those changes answered. While one flush runs,
the next heartbeats' changes collect for the following one, so a join storm of many members costs a few
transactions per tick instead of one per member. A failed flush answers its heartbeats with the error and drops the
groups from memory: they are read again from the store, which never saw an epoch a member was told.
"""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol

from oncelog.catalog.topics import validate_group_id
from oncelog.errors import (
    CoordinatorLoadInProgress,
    GroupIdNotFound,
    InvalidRegularExpression,
    InvalidRequest,
    NonEmptyGroup,
    NotCoordinator,
    UnsupportedAssignor,
)
from oncelog.group_offsets.assignors import assignor_named
from oncelog.group_offsets.group_state import JOIN_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroupState
from oncelog.group_offsets.group_transitions import (
    HeartbeatRequest,
    HeartbeatResponse,
    OwnershipChange,
    apply_heartbeat,
    ownership_changes,
    reconcile,
    remove_member,
    steady_member,
)
from oncelog.group_offsets.offset_manager import (
    OffsetStore,
    OffsetTransaction,
    ShardFence,
    ShardFenced,
    ShardOwnership,
)
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics

MAX_MEMBER_ID_LENGTH = 255
MAX_REGEX_LENGTH = 1000


class TopicDirectory(Protocol):
    """Topic names and partition counts (the catalog, cached, in production)."""

    def partition_counts(self, wanted: Collection[str] = ()) -> Mapping[str, int]:
        """Every topic and its partition count; ``wanted`` names topics a member subscribes to by name."""
        ...

    def cached_partition_counts(self, wanted: Collection[str] = ()) -> Mapping[str, int] | None:
        """What :meth:`partition_counts` would return when that needs no read; None otherwise. Never blocks."""
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
        """Per group, the topic-size mapping its last full evaluation used: while the directory hands out the same
        object, a steady member's heartbeat needs no evaluation."""
        self._reported_shards: set[int] = set()
        self._staged: dict[str, _Staged] = {}
        """Per group, its changes applied in memory and not written yet (design/consumer-groups.md §5.1)."""
        self._flush_lock = threading.Lock()
        """Taken before a group lock, never after: flushes run one at a time and in order."""

    # ------------------------------------------------------------------------------ heartbeat

    def heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse:
        """Apply one heartbeat and answer it once its change is written (design/consumer-groups.md §3, §5.1).

        The synchronous form of :meth:`handle_heartbeat`: it flushes itself when the answer has to wait.

        Raises:
            InvalidRequest, InvalidRegularExpression, UnsupportedAssignor: malformed request; nothing changed.
            NotCoordinator: this process does not own the group's shard (or lost it before the write).
            UnknownMemberId, FencedMemberEpoch, UnreleasedInstanceId: the member must rejoin or stop.
        """
        answer, durable = self.handle_heartbeat(request)
        if durable is not None:
            self.flush()
            durable.result()
        return answer

    def handle_heartbeat(self, request: HeartbeatRequest) -> tuple[HeartbeatResponse, Future[None] | None]:
        """Apply one heartbeat in memory; the answer may be sent once ``durable`` (when not None) has resolved.

        ``durable`` resolves when the next :meth:`flush` has written every change the answer depends on, or raises
        that write's error (then the answer must not be sent). A heartbeat of a member whose group has nothing
        staged needs no wait (None): the common steady heartbeat. Raises as :meth:`heartbeat`.
        """
        request = self._validated(request)
        group_id = request.group_id
        fence = self._ownership.fence_for(group_id)
        with self._group_lock(group_id):
            group = self._load(group_id, fence)
            counts = self._topics.partition_counts(request.topics)
            known = self._evaluated_with.get(group_id) is counts
            member = steady_member(group, request) if known else None
            if member is not None:
                after = group  # the common heartbeat: nothing to change, nothing to write (O(1))
            else:
                after, member = apply_heartbeat(
                    group, request, counts, new_member_id=self._new_member_id(), sizes_checked=known
                )
                self._stage(fence, group, after)
                self._evaluated_with[group_id] = counts
            now = self._clock()
            with self._lock:
                sessions = self._session_deadlines.setdefault(group_id, {})
                revocations = self._revocation_deadlines.setdefault(group_id, {})
                if member is None:
                    sessions.pop(request.member_id, None)
                    revocations.pop(request.member_id, None)
                    if request.member_id in after.members:  # a static member's leave: kept for one session timeout
                        sessions[request.member_id] = now + self.session_timeout_ms
                    answer = HeartbeatResponse(
                        request.member_id,
                        request.member_epoch,
                        frozenset(),
                        self.heartbeat_interval_ms,
                        self.session_timeout_ms,
                    )
                else:
                    sessions[member.member_id] = now + self.session_timeout_ms
                    if member.pending_revocation:
                        timeout = member.rebalance_timeout_ms or self.rebalance_timeout_ms
                        revocations.setdefault(member.member_id, now + timeout)
                    else:
                        revocations.pop(member.member_id, None)
                    answer = HeartbeatResponse(
                        member.member_id,
                        member.member_epoch,
                        member.assigned,
                        self.heartbeat_interval_ms,
                        self.session_timeout_ms,
                    )
                staged = self._staged.get(group_id)
                if staged is None:
                    return answer, None
                durable: Future[None] = Future()
                staged.waiters.append(durable)
        return answer, durable

    def steady_heartbeat(self, request: HeartbeatRequest) -> HeartbeatResponse | None:
        """Answer a heartbeat that changes nothing without blocking, or None when it needs :meth:`handle_heartbeat`.

        For callers on an event loop: it takes no lock that a slow operation may hold, reads no store and writes
        nothing, so the common heartbeat costs no thread hop (design/consumer-groups.md §5.1).

        Raises:
            InvalidRequest, InvalidRegularExpression, UnsupportedAssignor: as :meth:`heartbeat`.
        """
        request = self._validated(request)  # bad input gets the same precise error on the fast path
        group_id = request.group_id
        if request.member_epoch <= JOIN_EPOCH or request.regex or group_id in self._staged:
            return None
        held = self._loaded.get(group_id)
        counts = self._topics.cached_partition_counts(request.topics)
        if held is None or counts is None or self._evaluated_with.get(group_id) is not counts:
            return None
        fence, group = held
        if self._ownership.fence_for(group_id) != fence:
            return None
        lock = self._group_lock(group_id)
        if not lock.acquire(blocking=False):
            return None
        try:
            if self._loaded.get(group_id) is not held or group_id in self._staged:
                return None
            member = steady_member(group, request)
            if member is None:
                return None
            deadline = self._clock() + self.session_timeout_ms
            with self._lock:
                self._session_deadlines.setdefault(group_id, {})[member.member_id] = deadline
        finally:
            lock.release()
        return HeartbeatResponse(
            member.member_id, member.member_epoch, member.assigned, self.heartbeat_interval_ms, self.session_timeout_ms
        )

    # ------------------------------------------------------------------------------ group commit

    def flush(self) -> int:
        """Write every staged change: one fenced store transaction per shard (design/consumer-groups.md §5.1).

        Resolves the waiting heartbeats of each written group; a failed write fails them with its error and drops
        the shard's groups from memory (they are read again from the store). One flush runs at a time; changes
        staged meanwhile go into the next. Returns how many groups were written.
        """
        with self._flush_lock:
            with self._lock:
                staged, self._staged = self._staged, {}
                batch = {g: (s, self._loaded[g][1]) for g, s in staged.items()}
            by_fence: dict[ShardFence, list[str]] = {}
            for group_id, (entry, _) in batch.items():
                by_fence.setdefault(entry.fence, []).append(group_id)
            written = 0
            for fence, group_ids in sorted(by_fence.items(), key=lambda item: item[0].shard):

                def work(tx: GroupTransaction, group_ids: list[str] = group_ids) -> None:
                    for group_id in group_ids:
                        entry, current = batch[group_id]
                        tx.put_consumer_group(current, entry.stored)
                        if entry.changes:
                            tx.add_ownership_changes(group_id, entry.changes)

                try:
                    self._store.write(dict.fromkeys(group_ids, fence), work)  # type: ignore[arg-type]
                except Exception as err:  # indeterminate or fenced: the store is the truth, read it again
                    self._discard_after_failure(fence, group_ids, err)
                    for group_id in group_ids:
                        _settle(batch[group_id][0].waiters, err)
                    continue
                written += len(group_ids)
                self._metrics.record_group_state_write(sum(len(batch[g][0].waiters) for g in group_ids))
                for group_id in group_ids:
                    entry = batch[group_id][0]
                    if entry.rebalances:
                        self._metrics.record_group_rebalances(entry.rebalances)
                    _settle(entry.waiters, None)
            return written

    def _stage(self, fence: ShardFence, before: ConsumerGroupState, after: ConsumerGroupState) -> None:
        """Make ``after`` the group's state in memory and queue its write (the caller holds the group lock)."""
        if after == before:
            return
        changes = ownership_changes(before, after)
        with self._lock:
            entry = self._staged.get(after.group_id)
            if entry is None:
                stored = before if before.group_epoch or before.members else None
                entry = self._staged[after.group_id] = _Staged(fence, stored)
            entry.changes.extend(changes)
            entry.rebalances += max(0, after.group_epoch - before.group_epoch)
            self._loaded[after.group_id] = (fence, after)

    def _discard_after_failure(self, fence: ShardFence, group_ids: list[str], err: Exception) -> None:
        """Forget what a failed write held (and what was staged on top of it); a fenced shard loses every group."""
        if isinstance(err, ShardFenced):
            self._ownership.fenced(err.fence)
            with self._lock:
                group_ids = sorted(set(group_ids) | {g for g, (f, _) in self._loaded.items() if f == fence})
        for group_id in group_ids:
            with self._group_lock(group_id):
                self._drop(group_id, err, fence=fence)

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
            except (NotCoordinator, CoordinatorLoadInProgress) as err:  # its new owner expires the members
                with self._group_lock(group_id):
                    self._drop(group_id, err)
                continue
            with self._group_lock(group_id):
                group = self._load(group_id, fence)
                after = group
                counts = self._topics.partition_counts()
                for member_id in due:
                    if member_id in after.members:
                        after = remove_member(after, member_id, counts)
                        removed.append((group_id, member_id))
                self._stage(fence, group, after)
                for member_id in due:
                    self._forget(group_id, member_id)
        self.flush()
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
        # under the flush lock: no staged write of this group can land after the delete and bring it back
        with self._flush_lock, self._group_lock(group_id):
            group = self._load(group_id, fence, create=False)
            if group.members:
                raise NonEmptyGroup(
                    f"group {group_id!r} has {len(group.members)} member(s); stop its consumers (or wait for their "
                    "session timeout) before deleting it"
                )
            with self._lock:
                staged = self._staged.pop(group_id, None)
            waiters = [] if staged is None else staged.waiters

            def work(tx: GroupTransaction) -> None:
                tx.delete_consumer_group(group_id)

            try:
                self._store.write({group_id: fence}, work)  # type: ignore[arg-type]
            except Exception as err:
                _settle(waiters, err)
                self._drop(group_id, err)
                if isinstance(err, ShardFenced):
                    self._ownership.fenced(err.fence)
                raise
            _settle(waiters, None)  # the members' leaves are durable: their group is gone
            self._drop(group_id, None)

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
        if held is not None:  # held under an older fence: what it staged can never be written
            self._drop(group_id, ShardFenced(held[0], fence.coordinator_epoch))
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

    def _forget(self, group_id: str, member_id: str) -> None:
        with self._lock:
            self._session_deadlines.get(group_id, {}).pop(member_id, None)
            self._revocation_deadlines.get(group_id, {}).pop(member_id, None)

    def _drop(self, group_id: str, err: Exception | None, *, fence: ShardFence | None = None) -> None:
        """Forget a group held in memory (only when held under ``fence``, if given), failing its staged heartbeats
        with ``err``. The caller holds the group lock."""
        with self._lock:
            held = self._loaded.get(group_id)
            if fence is not None and (held is None or held[0] != fence):
                return
            staged = self._staged.pop(group_id, None)
            self._loaded.pop(group_id, None)
            self._session_deadlines.pop(group_id, None)
            self._revocation_deadlines.pop(group_id, None)
            self._evaluated_with.pop(group_id, None)
        if staged is not None:
            lost = err or NotCoordinator(f"group {group_id!r} is no longer served here; find the coordinator again")
            _settle(staged.waiters, lost)


@dataclass
class _Staged:
    """A group's changes applied in memory and not written yet (design/consumer-groups.md §5.1)."""

    fence: ShardFence
    stored: ConsumerGroupState | None
    """The group as the store holds it (None: not stored yet, write it whole)."""
    changes: list[OwnershipChange] = field(default_factory=list)
    rebalances: int = 0
    waiters: list[Future[None]] = field(default_factory=list)
    """Heartbeats whose answers depend on these changes."""


def _settle(waiters: Iterable[Future[None]], err: BaseException | None) -> None:
    for waiter in waiters:
        if not waiter.done():
            if err is None:
                waiter.set_result(None)
            else:
                waiter.set_exception(err)


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
