"""Consumer group membership, client side (design/consumer-groups.md §7): the heartbeat loop and reconciliation.

The heartbeat loop runs on the consumer's I/O thread. It sends the member's subscription and the partitions the
consumer owns, and records the assignment the coordinator answers. The consumer's caller thread applies the
difference inside ``poll()`` through :meth:`GroupMembership.reconcile`: it calls the listener's
``on_partitions_revoked`` (the application commits there), drops those partitions, then adds the new ones and
calls ``on_partitions_assigned``. Only then does the next heartbeat report the revoked partitions released,
which is what lets the coordinator give them to another member (design/consumer-groups.md §3.1). A member the
coordinator fenced or removed
calls ``on_partitions_lost`` (no commit is possible any more) and joins again with epoch 0.

``max_poll_interval_ms`` without a ``poll()`` makes the loop leave the group, as Kafka's consumer does.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from oncelog.client.records import TopicPartition
from oncelog.client.services import HeartbeatAnswer, MemberHeartbeat
from oncelog.errors import OncelogError, Reason

log = logging.getLogger("oncelog.client.group_membership")

_REJOIN_REASONS = frozenset({Reason.UNKNOWN_MEMBER_ID, Reason.FENCED_MEMBER_EPOCH})
_DEFAULT_INTERVAL_MS = 5_000


class ConsumerRebalanceListener(Protocol):
    """Callbacks around assignment changes; they run on the thread that calls ``poll()``."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        """Called before ``revoked`` are given up: commit their offsets here."""
        ...

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        """Called after ``assigned`` were added."""
        ...

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        """Called when the member was fenced or removed: ``lost`` may already belong to others; do not commit."""
        ...


HeartbeatCall = Callable[[MemberHeartbeat, float], Awaitable[HeartbeatAnswer]]


class GroupMembership:
    """One consumer's membership in one group.

    Args:
        group_id: the consumer group.
        heartbeat: sends one ConsumerGroupHeartbeat to the group's coordinator (finding it, retrying coordinator
            moves) within the given seconds; runs on the I/O loop.
        topics, pattern: the subscription (exactly one of them).
        group_instance_id: makes the member static.
        server_assignor: "uniform" or "range"; None lets the group decide.
        max_poll_interval_ms: leave the group when ``poll()`` was not called for this long.
        client_id: the client's name, shown by ``oncelog groups describe``.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        group_id: str,
        heartbeat: HeartbeatCall,
        *,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        group_instance_id: str | None = None,
        server_assignor: str | None = None,
        max_poll_interval_ms: int = 300_000,
        client_id: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.group_id = group_id
        self._heartbeat = heartbeat
        self._topics = tuple(dict.fromkeys(topics))
        self._pattern = pattern or ""
        self._instance_id = group_instance_id or ""
        self._assignor = server_assignor or ""
        self._max_poll_interval_s = max_poll_interval_ms / 1000
        self._client_id = client_id
        self._clock = clock
        self._lock = threading.Lock()
        self.member_id = uuid.uuid4().hex
        self.member_epoch = 0
        self._assignment: frozenset[TopicPartition] | None = None  # the coordinator's last answer
        self._owned: frozenset[TopicPartition] = frozenset()  # what the consumer holds (caller thread decides)
        self._lost = False
        self._failure: OncelogError | None = None
        self._interval_s = _DEFAULT_INTERVAL_MS / 1000
        self._last_poll = clock()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._left = False

    # ------------------------------------------------------------------------------ I/O thread

    def start(self) -> None:
        """Start the heartbeat loop; call on the I/O loop."""
        self._wake = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"heartbeat-{self.group_id}")

    async def join(self, timeout_s: float) -> None:
        """Send the joining heartbeat now (on the I/O loop) so the first assignment is known at once."""
        await self._beat(timeout_s)

    async def _run(self) -> None:
        assert self._wake is not None
        while not self._left:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._interval_s)
            except TimeoutError:
                pass
            self._wake.clear()
            if self._left:
                return
            if self._lost:
                continue  # nothing to send until poll() has handled the loss
            if self._clock() - self._last_poll > self._max_poll_interval_s:
                log.warning(
                    "group %s: poll() was not called for %.1fs (max_poll_interval_ms); leaving the group",
                    self.group_id,
                    self._clock() - self._last_poll,
                )
                await self._send_leave(timeout_s=self._interval_s)
                with self._lock:
                    self._lost = True
                    self.member_epoch = 0
                continue
            try:
                await self._beat(self._interval_s)
            except OncelogError as err:
                log.warning("group %s: heartbeat failed: %s", self.group_id, err)
            except Exception:  # the loop must outlive any surprise, or the member silently times out
                log.exception("group %s: heartbeat failed unexpectedly", self.group_id)

    async def _beat(self, timeout_s: float) -> None:
        with self._lock:
            if self._lost:
                return  # the caller thread must call on_partitions_lost before this member joins again
            request = MemberHeartbeat(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self.member_epoch,
                group_instance_id=self._instance_id,
                topics=self._topics,
                pattern=self._pattern,
                server_assignor=self._assignor,
                owned=tuple(sorted(self._owned)),
                client_id=self._client_id,
            )
        try:
            response = await self._heartbeat(request, timeout_s)
        except OncelogError as err:
            with self._lock:
                if err.reason in _REJOIN_REASONS:
                    self._lost = True
                    self.member_epoch = 0
                elif not err.retriable:
                    self._failure = err
            raise
        with self._lock:
            self.member_id = response.member_id
            self.member_epoch = response.member_epoch
            self._assignment = response.assignment
            if response.heartbeat_interval_ms > 0:
                self._interval_s = response.heartbeat_interval_ms / 1000

    async def leave(self, timeout_s: float) -> None:
        """Stop heartbeating and leave the group at once (static members leave with epoch -2)."""
        self._left = True
        if self._wake is not None:
            self._wake.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.member_epoch > 0:
            await self._send_leave(timeout_s)

    async def _send_leave(self, timeout_s: float) -> None:
        request = MemberHeartbeat(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=-2 if self._instance_id else -1,
            group_instance_id=self._instance_id,
        )
        try:
            await self._heartbeat(request, timeout_s)
        except OncelogError as err:
            log.info("group %s: leave request failed (the session timeout removes the member): %s", self.group_id, err)

    def _wake_up(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # ------------------------------------------------------------------------------ caller thread

    def reconcile(
        self,
        listener: ConsumerRebalanceListener | None,
        add: Callable[[set[TopicPartition]], None],
        remove: Callable[[set[TopicPartition]], None],
    ) -> Callable[[], None] | None:
        """Apply the coordinator's latest answer on the caller's thread.

        ``add``/``remove`` change the consumer's partitions; the listener is called around them. Returns a
        function that wakes the heartbeat loop (to run on the I/O loop) when ownership changed, else None.

        Raises:
            OncelogError: the coordinator refused the membership for good (bad regex, unknown assignor...).
        """
        self._last_poll = self._clock()
        with self._lock:
            failure, lost, assignment, owned = self._failure, self._lost, self._assignment, self._owned
        if failure is not None:
            raise failure
        if lost:
            if owned:
                if listener is not None:
                    listener.on_partitions_lost(set(owned))
                remove(set(owned))
            with self._lock:
                self._owned = frozenset()
                self._assignment = None
                self._lost = False
                self.member_epoch = 0
            return self._wake_up
        if assignment is None:
            return None
        revoked = owned - assignment
        added = assignment - owned
        if not revoked and not added:
            return None
        if revoked:
            if listener is not None:
                listener.on_partitions_revoked(set(revoked))
            remove(set(revoked))
        if added:
            add(set(added))
        with self._lock:
            self._owned = (owned - revoked) | added
        if added and listener is not None:
            listener.on_partitions_assigned(set(added))
        return self._wake_up

    def owned(self) -> frozenset[TopicPartition]:
        """The partitions the consumer holds as a member."""
        with self._lock:
            return self._owned


def validate_pattern(pattern: str) -> None:
    """Fail early, on the client, for a subscription regex that does not compile."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"subscription pattern {pattern!r} does not compile: {exc}") from exc


__all__ = ["ConsumerRebalanceListener", "GroupMembership", "validate_pattern"]
