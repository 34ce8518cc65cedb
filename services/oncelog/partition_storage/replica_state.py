"""LeaderReplicaState: what a partition leader knows of its followers, and the HW and ISR rules built on it.

Pure bookkeeping (Kafka's ``Partition`` + ``Replica`` for the leader side, docs/design/replication.md §4 and §7);
the clock is injected and nothing here does I/O or talks to the catalog. The leader's engine calls
:meth:`LeaderReplicaState.record_fetch` for every replica fetch, asks :meth:`high_watermark` after every append
and fetch, and asks :meth:`out_of_sync` / :meth:`ready_to_join` periodically to decide ISR changes, which it then
makes with a conditional catalog update and reports back with :meth:`set_isr`.

Rules (design/replication.md §7, §4):

* A follower's LEO is the ``fetch_offset`` of its latest fetch: it asks for what it does not have yet.
* **Caught up** (Kafka's ``lastCaughtUpTimeMs``): a fetch at or above the leader's LEO at that moment makes the
  follower caught up *now*; a fetch at or above the LEO the leader had at the follower's previous fetch makes it
  caught up as of that previous fetch. A follower that stops fetching, or cannot keep up, stops being caught up.
* **HW** = min LEO over the ISR (leader included) and over followers outside the ISR that were caught up within
  ``replica_lag_time_max_ms`` (about to join: the HW must not pass them). A member whose LEO is unknown since this
  leader started holds the HW where it is. The HW never goes back.
* **Shrink**: an ISR follower whose LEO differs from the leader's and that was last caught up more than
  ``replica_lag_time_max_ms`` ago is out of sync.
* **Expand**: a follower outside the ISR whose LEO is at or above both the HW and the start offset of the current
  leader epoch may join (Kafka's ``isFollowerInSync``).
* A follower that registered again (its node epoch moved: a restart, perhaps with an empty disk) starts over as
  unknown: nothing its earlier incarnation reported counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["FollowerState", "LeaderReplicaState"]

_UNKNOWN = -1


@dataclass(slots=True)
class FollowerState:
    """One follower as the leader sees it (times in ms from the injected clock, -1 for never)."""

    node_id: str
    node_epoch: int = _UNKNOWN
    log_end_offset: int = _UNKNOWN
    last_fetch_ms: int = _UNKNOWN
    last_caught_up_ms: int = _UNKNOWN
    leader_end_at_last_fetch: int = _UNKNOWN

    def reset(self, node_epoch: int) -> None:
        """Forget everything: a new incarnation of the node."""
        self.node_epoch = node_epoch
        self.log_end_offset = _UNKNOWN
        self.last_fetch_ms = _UNKNOWN
        self.last_caught_up_ms = _UNKNOWN
        self.leader_end_at_last_fetch = _UNKNOWN


class LeaderReplicaState:
    """The leader's view of one partition's replicas; see the module docstring.

    Args:
        leader_id: this node.
        replicas: every replica of the partition (leader included).
        isr: the in-sync replicas as the catalog has them (leader included).
        epoch_start_offset: the log end when this leader's epoch began; followers must reach it to join the ISR.
        leader_epoch: the leader epoch this state belongs to (a new epoch starts a new state).
        high_watermark: the HW the leader starts with (its checkpointed or recovered HW).
        lag_time_max_ms: Kafka's ``replica.lag.time.max.ms``.
        clock: milliseconds.
    """

    def __init__(
        self,
        leader_id: str,
        replicas: Iterable[str],
        isr: Iterable[str],
        *,
        epoch_start_offset: int,
        high_watermark: int,
        lag_time_max_ms: int,
        clock: Callable[[], int],
        leader_epoch: int = 0,
    ) -> None:
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.epoch_start_offset = epoch_start_offset
        self.lag_time_max_ms = lag_time_max_ms
        self._clock = clock
        self._high_watermark = high_watermark
        now = clock()
        self._followers = {n: FollowerState(n) for n in replicas if n != leader_id}
        self._isr: frozenset[str] = frozenset()
        self.set_isr(isr)
        # a new leader gives every ISR follower a full lag window to show up (Kafka: lastCaughtUpTime = now)
        for node_id in self._isr:
            if node_id in self._followers:
                self._followers[node_id].last_caught_up_ms = now

    # ------------------------------------------------------------------------------------------- queries

    @property
    def isr(self) -> frozenset[str]:
        """The ISR as last set (leader included)."""
        return self._isr

    @property
    def high_watermark(self) -> int:
        """The HW as last computed."""
        return self._high_watermark

    def follower(self, node_id: str) -> FollowerState | None:
        """The state of one follower, or None if it is not a replica."""
        return self._followers.get(node_id)

    def followers(self) -> list[FollowerState]:
        """Every follower's state (copies are not made: treat as read-only)."""
        return list(self._followers.values())

    # ------------------------------------------------------------------------------------------- updates

    def record_fetch(self, node_id: str, node_epoch: int, fetch_offset: int, leader_end_offset: int) -> None:
        """A follower fetched from ``fetch_offset`` while the leader's log ended at ``leader_end_offset``.

        Raises:
            KeyError: ``node_id`` is not a follower of this partition (the caller answers NOT_LEADER or similar).
        """
        state = self._followers[node_id]
        if node_epoch != state.node_epoch:
            state.reset(node_epoch)
        now = self._clock()
        if fetch_offset >= leader_end_offset:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now)
        elif state.leader_end_at_last_fetch != _UNKNOWN and fetch_offset >= state.leader_end_at_last_fetch:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.log_end_offset = fetch_offset
        state.leader_end_at_last_fetch = leader_end_offset
        state.last_fetch_ms = now

    def set_replicas(self, replicas: Iterable[str]) -> list[str]:
        """The catalog changed the replicas (a reassignment step): track new followers from scratch, forget removed
        ones (call :meth:`set_isr` with the catalog's ISR next); returns the removed followers."""
        wanted = [n for n in replicas if n != self.leader_id]
        removed = [n for n in self._followers if n not in wanted]
        for node_id in removed:
            del self._followers[node_id]
        for node_id in wanted:
            self._followers.setdefault(node_id, FollowerState(node_id))
        self._isr = self._isr - set(removed)
        return removed

    def set_isr(self, isr: Iterable[str]) -> None:
        """The catalog accepted a new ISR (or the leader just started with one)."""
        members = frozenset(isr)
        strangers = members - set(self._followers) - {self.leader_id}
        if strangers:
            raise ValueError(f"ISR members {sorted(strangers)} are not replicas of this partition")
        self._isr = members

    def update_high_watermark(self, leader_end_offset: int) -> int:
        """Recompute the HW from the leader's own end (its durable end for flush=sync topics); returns it.

        The result never goes below the previous HW.
        """
        now = self._clock()
        ends = [leader_end_offset]
        for state in self._followers.values():
            if state.node_id in self._isr or self._caught_up_recently(state, now):
                ends.append(state.log_end_offset)
        candidate = min(ends)
        if candidate > self._high_watermark:
            self._high_watermark = candidate
        return self._high_watermark

    # ------------------------------------------------------------------------------------------ ISR rules

    def out_of_sync(self, leader_end_offset: int) -> set[str]:
        """ISR followers to remove: not at the leader's end and not caught up within the lag time."""
        now = self._clock()
        return {
            state.node_id
            for state in self._followers.values()
            if state.node_id in self._isr
            and state.log_end_offset != leader_end_offset
            and now - state.last_caught_up_ms > self.lag_time_max_ms
        }

    def ready_to_join(self) -> set[str]:
        """Followers outside the ISR that reached both the HW and the start of the current leader epoch."""
        return {
            state.node_id
            for state in self._followers.values()
            if state.node_id not in self._isr
            and state.log_end_offset != _UNKNOWN
            and state.log_end_offset >= self._high_watermark
            and state.log_end_offset >= self.epoch_start_offset
        }

    def _caught_up_recently(self, state: FollowerState, now: int) -> bool:
        return state.last_caught_up_ms != _UNKNOWN and now - state.last_caught_up_ms <= self.lag_time_max_ms
