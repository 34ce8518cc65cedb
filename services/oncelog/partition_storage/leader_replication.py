"""The replication half of the partition manager (docs/design/replication.md): each replicated partition's role,
the leader's side of follower fetches, ISR upkeep, the checks before acknowledging, and controlled shutdown.

:class:`LeaderReplication` is a base of :class:`~oncelog.partition_storage.partition_manager.PartitionManager` and
works on its state (the catalog view, the open engines, the leader states); the manager owns the lifecycle,
the catalog refresh and the client request paths.

* Role: a replicated partition led here gets a :class:`LeaderReplicaState` and the engine's HW limit, its
  acknowledgement check and its leadership check; one followed here is copied by the replica fetchers.
* Follower fetches (:meth:`LeaderReplication.replica_fetch`) record the followers' positions, which moves the HW
  (min LEO over the ISR), and long-poll for appends and HW moves.
* ISR upkeep (design/replication.md §7): every ``replica_lag_time_max_ms / 4`` the leader shrinks the ISR by
  followers out of sync and expands it by caught-up ones with a conditional catalog update; losing that update
  makes it hold the HW and re-read the catalog.
* Lease-bounded leadership (design/replication.md §9): the leader acknowledges (moves the HW, answers a produce
  or a follower's fetch) only while this node's lease, as last renewed, holds beyond a safety margin (a fifth of
  the lease) on its own monotonic clock and the catalog was read since the lease last started an unbroken
  stretch. Otherwise it holds the HW, re-reads the catalog and, when the leader epoch moved (a paused leader
  replaced by the controller), answers ``NOT_LEADER``; a request it parked meanwhile never completes an
  acknowledgement.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from oncelog.catalog.replicas import leave_isr_after_disk_loss
from oncelog.catalog.store import CatalogStore, PartitionRecord
from oncelog.errors import (
    InvalidRequest,
    NotEnoughReplicas,
    NotLeader,
    OncelogError,
    StaleRequesterEpoch,
    StorageUnavailable,
)
from oncelog.partition_storage.engine import PartitionEngine
from oncelog.partition_storage.manager_types import (
    NO_EPOCH_CHECK,
    PartitionAssignment,
    PartitionKey,
    PartitionReplicas,
    ReplicaPosition,
    StorageNodeConfig,
)
from oncelog.partition_storage.replica_fetcher import (
    CopyPosition,
    CopyResult,
    FollowedPartition,
    ReplicaFetcherManager,
)
from oncelog.partition_storage.replica_state import LeaderReplicaState
from oncelog.telemetry.metrics import OncelogMetrics
from oncelog.vocabulary import Role

__all__ = ["LeaderReplication", "hold_high_watermark", "wait_any"]

log = logging.getLogger(__name__)


class LeaderReplication:
    """Replication methods of :class:`~oncelog.partition_storage.partition_manager.PartitionManager`; see the
    module docstring. The attributes below are the manager's, set by its constructor."""

    _node_id: str
    _config: StorageNodeConfig
    _clock: Callable[[], int]
    _catalog: CatalogStore
    _metrics: OncelogMetrics
    _assignments: dict[PartitionKey, PartitionAssignment]
    _addresses: dict[str, str]
    _engines: dict[PartitionKey, PartitionEngine]
    _leaders: dict[PartitionKey, LeaderReplicaState]
    _fetchers: ReplicaFetcherManager | None
    _handing_over: bool

    if TYPE_CHECKING:  # the manager's own methods, used here

        async def leader_engine(
            self, topic: str, partition: int, leader_epoch: int = NO_EPOCH_CHECK
        ) -> PartitionEngine: ...

        def lease_holds(self) -> bool: ...

        async def refresh(self) -> None: ...

        async def _refresh_since(self, arrived: float) -> None: ...

    def _attach_replication(self, key: PartitionKey, assignment: PartitionAssignment, engine: PartitionEngine) -> None:
        """Give an open engine of a replicated partition its role: leader state, or a fetcher copying it."""
        if self._fetchers is None:
            return
        if not assignment.replicated:
            if self._stop_leading(key):  # reassigned down to one replica: acknowledge on this node alone again
                engine.high_watermark_limit = engine.acknowledge_check = engine.leadership_check = None
                engine.refresh_high_watermark()
            self._fetchers.unfollow(*key)
            return
        if assignment.leader_node_id == self._node_id:
            self._fetchers.unfollow(*key)
            state = self._leaders.get(key)
            if state is None or state.leader_epoch != assignment.leader_epoch:
                state = LeaderReplicaState(
                    self._node_id,
                    assignment.replicas,
                    assignment.isr,
                    epoch_start_offset=engine.log_end_offset,
                    high_watermark=engine.high_watermark,
                    lag_time_max_ms=self._config.replica_lag_time_max_ms,
                    clock=self._clock,
                    leader_epoch=assignment.leader_epoch,
                )
                self._leaders[key] = state
                engine.high_watermark_limit = functools.partial(self._lease_bounded_high_watermark, state)
                engine.acknowledge_check = functools.partial(self._check_acknowledge, key)
                engine.leadership_check = functools.partial(self._check_leading, key)
                log.info("%s-%d: leading at epoch %d with ISR %s", *key, assignment.leader_epoch, list(assignment.isr))
            else:
                for removed in state.set_replicas(assignment.replicas):  # a reassignment step moved replicas
                    self._metrics.set_replica_lag(*key, removed, 0)
                state.set_isr(assignment.isr)
            self._metrics.set_under_replicated(*key, len(state.isr) < len(assignment.replicas))
            engine.refresh_high_watermark()
            return
        if self._stop_leading(key):
            engine.wake_waiters()  # writes waiting for the HW here fail NOT_LEADER now, not at their timeout
        address = self._addresses.get(assignment.leader_node_id)
        if not assignment.leader_node_id or not address or self._handing_over:
            self._fetchers.unfollow(*key)
            if engine.high_watermark_limit is not None:
                engine.high_watermark_limit = hold_high_watermark  # no leader to learn it from
            return
        followed = self._fetchers.following(*key)
        if followed is None or followed.leader_epoch != assignment.leader_epoch or followed.engine is not engine:
            self._fetchers.follow(
                assignment.leader_node_id,
                address,
                FollowedPartition(assignment.topic, assignment.partition, engine, assignment.leader_epoch),
            )

    def _stop_leading(self, key: PartitionKey) -> bool:
        """Drop the leader state of a partition (if any); its replication gauges are the new leader's to report."""
        state = self._leaders.pop(key, None)
        if state is None:
            return False
        self._metrics.set_under_replicated(*key, False)
        for follower in state.followers():
            self._metrics.set_replica_lag(*key, follower.node_id, 0)
        return True

    def _lease_bounded_high_watermark(self, state: LeaderReplicaState, candidate: int) -> int:
        """The replica state's HW limit while the lease holds; held once the lease may have lapsed
        (design/replication.md §9)."""
        if not self.lease_holds():
            return -1  # the periodic refresh or the next request re-reads the catalog
        return state.update_high_watermark(candidate)

    def _check_acknowledge(self, key: PartitionKey) -> None:
        """After the HW passed a write: refuse the acknowledgement if this node no longer leads the partition
        (it stepped down meanwhile), or if the ISR is below min_insync_replicas."""
        self._check_leading(key)
        self._check_min_insync(key, definite=False)

    def _check_leading(self, key: PartitionKey) -> None:
        """Raise NOT_LEADER for a write this node can no longer acknowledge: it stepped down meanwhile."""
        if key not in self._leaders:
            assignment = self._assignments.get(key)
            raise NotLeader(
                f"{key[0]}-{key[1]}: {self._node_id} stepped down before the batch was acknowledged (the batch "
                "may or may not survive); refresh metadata and retry on the new leader",
                metadata={} if assignment is None else {"leader_epoch": str(assignment.leader_epoch)},
            )

    def _check_min_insync(self, key: PartitionKey, *, definite: bool) -> None:
        """Refuse (before writing) or fail to acknowledge (after) while the ISR is below min_insync_replicas
        (design/kafka-semantics.md §8)."""
        state = self._leaders.get(key)
        assignment = self._assignments.get(key)
        if state is None or assignment is None:
            return
        required = assignment.config.min_insync_replicas
        if len(state.isr) < required:
            what = "nothing was written" if definite else "the batch was written but is not acknowledged"
            raise NotEnoughReplicas(
                f"{key[0]}-{key[1]} has {len(state.isr)} in-sync replica(s) ({', '.join(sorted(state.isr))}), "
                f"min_insync_replicas is {required}: {what}; retry once replicas are back",
                definite=definite,
            )

    async def hand_over_leadership(self) -> None:
        """Controlled shutdown (design/replication.md §6): before this node drains, move the leadership of every
        replicated partition it leads to the first other live in-sync replica and leave those ISRs, with the
        conditional catalog update a leader makes (leader, leader epoch and partition epoch as seen). Clients
        then get ``NOT_LEADER`` naming the new leader while this node still answers, writes waiting here for
        their HW fail ``NOT_LEADER`` (retriable; an idempotent retry is deduplicated by the new leader, which
        has everything this node acknowledged), and no acks=all write waits for this node to leave an ISR after
        it exits. A partition with no other live in-sync replica stays here until the lease lapses."""
        if self._fetchers is None:
            return
        self._handing_over = True  # from here on this node copies nothing, so no leader re-adds it to an ISR
        with contextlib.suppress(OncelogError):
            await self._refresh_since(asyncio.get_running_loop().time())
        moved = []
        for key in list(self._leaders):
            assignment = self._assignments.get(key)
            if assignment is None or assignment.leader_node_id != self._node_id:
                continue
            others = [r for r in assignment.replicas if r != self._node_id and r in assignment.isr]
            live = [r for r in others if r in self._addresses]
            if not live:
                log.warning("%s-%d: no other live in-sync replica; it stays here until this lease lapses", *key)
                continue
            seen = PartitionRecord(
                assignment.partition,
                self._node_id,
                assignment.leader_epoch,
                assignment.replicas,
                assignment.isr,
                assignment.partition_epoch,
            )
            try:
                updated = await asyncio.to_thread(
                    self._catalog.alter_partition, assignment.topic, seen, leader_node_id=live[0], isr=others
                )
            except OncelogError as err:
                log.warning("%s-%d: leadership hand-over failed (%s); the controller elects after the lease", *key, err)
                continue
            if updated is not None:
                moved.append(f"{key[0]}-{key[1]} -> {live[0]} (epoch {updated.leader_epoch})")
        log.info("controlled shutdown: leadership handed over: %s", ", ".join(moved) or "none")
        with contextlib.suppress(OncelogError):
            await self.refresh()  # step down: parked writes fail NOT_LEADER, requests are redirected

    async def leave_isrs_after_disk_loss_retrying(self, attempts: int = 60) -> None:
        """:meth:`leave_isrs_after_disk_loss`, retried once a second while the catalog is unavailable (a database
        restart): the node serves nothing until it is done, so waiting costs only this node's start."""
        for attempt in range(1, attempts + 1):
            try:
                await asyncio.to_thread(self.leave_isrs_after_disk_loss)
                return
            except StorageUnavailable as err:
                if attempt == attempts:
                    raise
                log.warning("leaving the ISRs failed (%s); retrying (%d of %d)", err, attempt, attempts)
                await asyncio.sleep(1)

    def leave_isrs_after_disk_loss(self) -> None:
        """Leave every ISR this node is in, handing leadership on where it led (worker thread; design/replication.md
        §6, "Disk loss"). Called once at start when the data directory was unbound: this node lost its disk (or
        never had one), so the catalog's ISRs that name it promise records it no longer holds. Until it leaves
        them, a controller could elect it (the preferred-leader restore moves leadership to ``replicas[0]`` while
        it is live and in sync) and the other replicas would truncate to its empty log. The node registered first,
        so a leader's ISR expansion counts only fetches of this incarnation (``joining_epochs``).

        Raises:
            StorageUnavailable: a partition kept changing under the conditional update; the process exits and
                starts over (its data directory stays unbound).
        """
        storage = Role.PARTITION_STORAGE
        live = {n.node_id for n in self._catalog.list_nodes(self._clock(), role=storage)}
        left: list[str] = []
        for topic in self._catalog.describe_topics():
            for record in topic.partitions:
                name = f"{topic.name}-{record.partition}"
                for _attempt in range(50):
                    decision = leave_isr_after_disk_loss(record, self._node_id, live)
                    if decision is None:
                        if record.isr == (self._node_id,):
                            log.error(
                                "%s: this node lost its disk and is the partition's only in-sync replica: the records "
                                "it held are gone (no other replica has them all); it starts over empty",
                                name,
                            )
                        break
                    updated = self._catalog.alter_partition(
                        topic.name, record, leader_node_id=decision.leader_node_id, isr=decision.isr
                    )
                    if updated is not None:
                        led = record.leader_node_id == self._node_id
                        to = (decision.leader_node_id or "offline") if led else ""
                        left.append(f"{name}{f' (leader -> {to})' if to else ''}")
                        break
                    record = self._catalog.partition(topic.name, record.partition)
                    live = {n.node_id for n in self._catalog.list_nodes(self._clock(), role=storage)}
                else:
                    raise StorageUnavailable(f"{name} kept changing while this node left its ISR; restart the node")
        if left:
            log.warning(
                "data directory was empty (the disk was lost or replaced): left the ISRs of %s; the replicas copy "
                "back from the leaders and rejoin once caught up",
                ", ".join(left),
            )
        else:
            log.info("data directory was empty: a first start, this node is in no ISR")

    async def replica_fetch(
        self,
        follower_id: str,
        follower_epoch: int,
        positions: Sequence[CopyPosition],
        *,
        max_wait_ms: int,
        max_bytes: int,
    ) -> list[CopyResult | OncelogError]:
        """Serve a follower's replica fetch (Kafka's follower ``fetchMessages`` path), long-polling.

        For each partition: check this node leads it at the follower's epoch, record the follower's position
        (moving the HW), and return batches from its fetch offset up to the log end. Answers at once when a
        partition has data, an error, or a HW the follower does not know yet; otherwise waits for an append or
        a HW move, up to ``max_wait_ms``.

        Raises:
            InvalidRequest: a negative wait or byte limit.
        """
        if max_wait_ms < 0 or max_bytes < 0:
            raise InvalidRequest(f"max_wait_ms and max_bytes must be >= 0, got {max_wait_ms}, {max_bytes}")
        budget = min(max_bytes or self._config.fetch_max_bytes, self._config.fetch_max_bytes)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max_wait_ms, self._config.fetch_max_wait_ms) / 1000
        while True:
            events: list[asyncio.Event] = []
            results: list[CopyResult | OncelogError] = []
            urgent = False
            remaining_bytes = budget
            for position in positions:
                try:
                    result = await self._copy_once(follower_id, follower_epoch, position, remaining_bytes, events)
                    remaining_bytes -= len(result.records)
                    urgent |= bool(result.records) or result.high_watermark != position.high_watermark
                except OncelogError as err:
                    result, urgent = err, True  # type: ignore[assignment]
                results.append(result)
            remaining = deadline - loop.time()
            if urgent or remaining <= 0 or not events:
                return results
            await wait_any(events, remaining)

    async def _copy_once(
        self, follower_id: str, follower_epoch: int, position: CopyPosition, budget: int, events: list[asyncio.Event]
    ) -> CopyResult:
        key = (position.topic, position.partition)
        engine = await self.leader_engine(position.topic, position.partition, position.current_leader_epoch)
        state = self._leaders.get(key)
        if state is None:
            raise InvalidRequest(f"{position.topic}-{position.partition} is not replicated; nothing to copy")
        try:
            state.record_fetch(follower_id, follower_epoch, position.fetch_offset, engine.log_end_offset)
            self._metrics.set_replica_lag(*key, follower_id, max(engine.log_end_offset - position.fetch_offset, 0))
        except KeyError:
            raise InvalidRequest(
                f"{follower_id} is not a replica of {position.topic}-{position.partition}; its replicas are "
                f"{sorted([state.leader_id, *(f.node_id for f in state.followers())])}"
            ) from None
        high_watermark = engine.refresh_high_watermark()
        events.append(engine.appended())
        events.append(engine.changed())
        if position.last_fetched_epoch >= 0:
            # KIP-320: does the follower's last epoch end, here, where its log ends? If not, say where it does
            epoch, end = engine.epochs.end_offset_for(position.last_fetched_epoch, engine.log_end_offset)
            if epoch < position.last_fetched_epoch or end < position.fetch_offset:
                return CopyResult(b"", high_watermark, engine.log_start_offset, (epoch, end))
        records = engine.read_copy(position.fetch_offset, max(budget, 0)) if budget > 0 else b""
        return CopyResult(records, high_watermark, engine.log_start_offset)

    async def describe_replicas(self, topic: str, partition: int) -> PartitionReplicas:
        """Where each replica of a partition led here stands: the leader's log end, then each follower's latest
        fetch offset, its lag behind the leader's log end and how long ago it was last caught up (Kafka shows the
        same through DescribeLogDirs' offset lag and the leader's replica state).

        Raises:
            OncelogError: leadership errors of :meth:`leader_engine` (NOT_LEADER names the leader).
        """
        engine = await self.leader_engine(topic, partition)
        key = (topic, partition)
        assignment = self._assignments[key]
        end = engine.log_end_offset
        rows = [ReplicaPosition(self._node_id, end, 0, True, 0)]
        state = self._leaders.get(key)
        if state is not None:
            now = self._clock()
            for node_id in assignment.replicas:
                follower = state.follower(node_id)
                if follower is None:  # the leader itself
                    continue
                position = follower.log_end_offset
                lag = end - (position if position >= 0 else engine.log_start_offset)
                caught_up = now - follower.last_caught_up_ms if follower.last_caught_up_ms >= 0 else -1
                rows.append(ReplicaPosition(node_id, position, max(lag, 0), node_id in state.isr, max(caught_up, -1)))
        return PartitionReplicas(assignment.leader_epoch, engine.high_watermark, tuple(rows))

    async def _maintain_isr(self) -> None:
        """Shrink the ISR of led partitions by followers out of sync, expand it by those caught up
        (design/replication.md §7)."""
        for key, state in list(self._leaders.items()):
            engine = self._engines.get(key)
            assignment = self._assignments.get(key)
            if engine is None or assignment is None or not engine.online:
                continue
            end = engine.log_end_offset
            for follower in state.followers():  # a follower that stopped fetching lags more and more
                self._metrics.set_replica_lag(*key, follower.node_id, max(end - max(follower.log_end_offset, 0), 0))
            isr = (set(state.isr) - state.out_of_sync(end)) | state.ready_to_join()
            if isr == set(state.isr):
                continue
            ordered = [n for n in assignment.replicas if n in isr]
            seen = PartitionRecord(
                assignment.partition,
                assignment.leader_node_id,
                assignment.leader_epoch,
                assignment.replicas,
                tuple(sorted(state.isr, key=assignment.replicas.index)),
                assignment.partition_epoch,
            )
            joining = {n: joiner.node_epoch for n in isr - set(state.isr) if (joiner := state.follower(n)) is not None}
            try:
                updated = await asyncio.to_thread(
                    self._catalog.alter_partition, assignment.topic, seen, isr=ordered, joining_epochs=joining
                )
            except StaleRequesterEpoch as err:
                # a follower restarted (perhaps with an empty disk) since the fetches that showed it caught up:
                # forget them; its new incarnation's fetches count from scratch (design/replication.md §6)
                log.info("%s-%d: ISR expansion refused: %s", *key, err)
                for node_id in joining:
                    if (joiner := state.follower(node_id)) is not None:
                        joiner.reset(-1)
                continue
            if updated is None:
                log.warning("%s-%d: ISR update lost to another change; re-reading the catalog", *key)
                self._stop_leading(key)
                engine.high_watermark_limit = hold_high_watermark  # until the catalog is re-read
                await self.refresh()
                continue
            log.info("%s-%d: ISR %s -> %s", *key, sorted(state.isr), ordered)
            self._metrics.record_isr_change(*key, shrinks=len(set(state.isr) - isr), expands=len(isr - set(state.isr)))
            self._metrics.set_under_replicated(*key, len(updated.isr) < len(assignment.replicas))
            self._assignments[key] = dataclasses.replace(
                assignment, isr=updated.isr, partition_epoch=updated.partition_epoch
            )
            state.set_isr(updated.isr)
            engine.refresh_high_watermark()


def hold_high_watermark(candidate: int) -> int:
    """An HW limit that keeps the high watermark where it is (it only ever moves up)."""
    return -1


async def wait_any(events: Sequence[asyncio.Event], timeout: float) -> None:
    waiters = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
