"""Controller: one storage node at a time elects new leaders for replicated partitions whose leader is gone.

Design: docs/design/replication.md §6. Every storage node runs a :class:`Controller`; the one holding the
controller lease in the catalog (``coordinator_shards`` row ``("controller", 0)``, the same conditional
acquire/renew as coordinator shards) acts, and the lease's epoch is the *controller epoch*. Each round the holder
renews the lease and, for every partition with more than one replica whose leader's node
lease lapsed (or that is offline), applies :func:`~oncelog.catalog.replicas.elect_leader`: the first live ISR
member in replica order leads at ``leader_epoch + 1`` with the live ISR members as ISR; with none the partition
goes offline (leader ``""``) keeping its ISR, so nothing from an out-of-sync replica is ever served (unclean
election is off). Each change is one conditional catalog update that also requires this node to still hold the
controller lease at its epoch, so a controller that lost its lease cannot elect.

**When rounds run** (failover within a few seconds): every third of the lease (to renew it), and in between at the
exact moment something may need doing: the holder wakes just after the earliest lease of a live storage node
expires (the moment that node may be dead and its partitions need a leader), and a node that does not hold the
controller lease wakes just after the holder's lease expires (the moment it may take over). A node lease renewed
meanwhile only costs a round that finds nothing to do.

Partitions with one replica are never touched: their behaviour is exactly what it was before replication.

A topic with ``unclean_leader_election=true`` instead elects the first live out-of-sync replica alone (logged as
an UNCLEAN election: records it lacks are lost). Every ``rebalance_interval_ms`` (Kafka's
``leader.imbalance.check.interval``), leadership of each partition whose preferred replica (``replicas[0]``) is live
and in sync moves back to it (preferred-leader restore), as a conditional update that does not wait for the old
leader's lease: the old leader steps down when it reads the new epoch.

Not yet here (see the design's slice list): removal of dead nodes from the ISR of partitions whose leader lives
(the leader shrinks it after ``replica_lag_time_max_ms``).

Domain code: the catalog and the clock come in through the constructor; nothing here imports grpc.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from oncelog.catalog.replicas import elect_leader
from oncelog.catalog.store import CONTROLLER_ROLE, CatalogStore, PartitionRecord
from oncelog.errors import OncelogError
from oncelog.vocabulary import Role

__all__ = ["Controller"]

log = logging.getLogger(__name__)


class Controller:
    """Controller lease and election rounds of one storage node; see the module docstring.

    Args:
        catalog: the cluster catalog (synchronous; called from a worker thread).
        node_id: this storage node.
        clock: milliseconds.
        lease_ms: the controller lease; renewed every third of it (see "When rounds run").
        on_change: called (on the loop) after this controller changed any partition, so the node re-reads the
            catalog at once instead of at its next periodic refresh.
        rebalance_interval_ms: how often leadership goes back to preferred replicas (Kafka's
            ``leader.imbalance.check.interval``); 0 never.
    """

    def __init__(
        self,
        catalog: CatalogStore,
        node_id: str,
        *,
        clock: Callable[[], int],
        lease_ms: int,
        on_change: Callable[[], None] = lambda: None,
        rebalance_interval_ms: int = 0,
    ) -> None:
        self._catalog = catalog
        self._node_id = node_id
        self._clock = clock
        self._lease_ms = lease_ms
        self._on_change = on_change
        self._rebalance_interval_ms = rebalance_interval_ms
        self._next_rebalance_at = 0
        self._epoch: int | None = None
        self._next_round_at = 0
        self._task: asyncio.Task[None] | None = None
        self._round: asyncio.Future[bool] | None = None
        """The round running on a worker thread, if any: cancelling the task does not stop the thread."""

    @property
    def controller_epoch(self) -> int | None:
        """The controller epoch while this node holds the lease, else None."""
        return self._epoch

    @property
    def next_round_at(self) -> int:
        """When (on ``clock``) the next round should run, as the last :meth:`run_once` found."""
        return self._next_round_at

    async def start(self) -> None:
        """Start the rounds."""
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"controller {self._node_id}")

    async def stop(self) -> None:
        """Stop the rounds and give the lease up, so another node takes over without waiting for it to lapse.

        A round already on its worker thread finishes first: released before that round's renewal committed, the
        lease would be renewed for a stopped controller, and the next controller would wait a whole lease.
        """
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        round_, self._round = self._round, None
        if round_ is not None:
            with contextlib.suppress(Exception):
                await round_
        if self._epoch is not None:
            epoch, self._epoch = self._epoch, None
            with contextlib.suppress(OncelogError):
                await asyncio.to_thread(self._catalog.release_shard, CONTROLLER_ROLE, 0, self._node_id, epoch)

    async def _run(self) -> None:
        while True:
            try:
                self._round = asyncio.ensure_future(asyncio.to_thread(self.run_once))
                changed = await asyncio.shield(self._round)
                self._round = None
                if changed:
                    self._on_change()
            except OncelogError as err:
                log.warning("controller round failed: %s", err)
            except Exception:
                log.exception("controller round failed")
            await asyncio.sleep(max(self._next_round_at - self._clock(), 0) / 1000)

    def _wake_after(self, expires_at_ms: int, now: int) -> None:
        """Run the next round as soon as a lease expiring at ``expires_at_ms`` has lapsed (expiry is exclusive)."""
        if expires_at_ms >= now:
            self._next_round_at = min(self._next_round_at, expires_at_ms + 1)

    def run_once(self) -> bool:
        """One round (blocking): renew or take the lease, then elect where needed; True if anything changed."""
        now = self._clock()
        self._next_round_at = now + self._lease_ms // 3  # renewal; an earlier lease expiry below moves it up
        lease = self._catalog.acquire_shard(CONTROLLER_ROLE, 0, self._node_id, self._lease_ms, now)
        if lease is None:
            if self._epoch is not None:
                log.info("%s is no longer the controller", self._node_id)
            self._epoch = None
            holder = self._catalog.shard_lease(CONTROLLER_ROLE, 0)
            if holder is not None:
                self._wake_after(holder.lease_expires_at_ms, now)
            return False
        if lease.coordinator_epoch != self._epoch:
            log.info("%s is the controller at controller epoch %d", self._node_id, lease.coordinator_epoch)
        self._epoch = lease.coordinator_epoch
        nodes = self._catalog.list_nodes(now, role=Role.PARTITION_STORAGE)
        live = {n.node_id for n in nodes}
        for node in nodes:
            self._wake_after(node.lease_expires_at_ms, now)
        fence = (self._node_id, lease.coordinator_epoch, now)
        rebalance = self._rebalance_interval_ms > 0 and now >= self._next_rebalance_at
        if rebalance:
            self._next_rebalance_at = now + self._rebalance_interval_ms
        if self._rebalance_interval_ms > 0:
            self._next_round_at = min(self._next_round_at, self._next_rebalance_at)
        changed = False
        for topic in self._catalog.describe_topics():
            for p in topic.partitions:
                if len(p.replicas) < 2:
                    continue
                if p.leader_node_id not in live:
                    changed |= self._elect(topic.name, p, live, fence, topic.config.unclean_leader_election)
                elif rebalance:
                    changed |= self._restore_preferred(topic.name, p, live, fence)
        return changed

    def _elect(
        self, topic: str, p: PartitionRecord, live: set[str], fence: tuple[str, int, int], unclean: bool
    ) -> bool:
        """Replace a gone leader (or bring an offline partition back); True if the catalog changed."""
        decision = elect_leader(p.replicas, p.isr, live, unclean=unclean)
        if decision.leader_node_id == p.leader_node_id:
            return False  # offline, and still no eligible replica
        updated = self._catalog.alter_partition(
            topic, p, isr=decision.isr, leader_node_id=decision.leader_node_id, controller=fence
        )
        if updated is None:
            log.info("election of %s-%d lost to another change; next round", topic, p.partition)
            return False
        if not updated.leader_node_id:
            log.error(
                "%s-%d is OFFLINE: leader %s is gone and no in-sync replica is live (ISR %s)",
                topic,
                p.partition,
                p.leader_node_id,
                list(updated.isr),
            )
        elif updated.leader_node_id not in p.isr:
            log.error(
                "%s-%d: UNCLEAN election (unclean_leader_election=true): no in-sync replica of %s is live, so "
                "out-of-sync %s leads at leader epoch %d; records it lacks are lost",
                topic,
                p.partition,
                list(p.isr),
                updated.leader_node_id,
                updated.leader_epoch,
            )
        else:
            log.warning(
                "%s-%d: leader %s is gone; elected %s at leader epoch %d, ISR %s",
                topic,
                p.partition,
                p.leader_node_id,
                updated.leader_node_id,
                updated.leader_epoch,
                list(updated.isr),
            )
        return True

    def _restore_preferred(self, topic: str, p: PartitionRecord, live: set[str], fence: tuple[str, int, int]) -> bool:
        """Move leadership back to the preferred replica (``replicas[0]``) once it is live and in sync again."""
        preferred = p.replicas[0]
        if p.leader_node_id == preferred or preferred not in live or preferred not in p.isr:
            return False
        updated = self._catalog.alter_partition(
            topic, p, leader_node_id=preferred, controller=fence, move_live_leader=True
        )
        if updated is None:
            return False
        log.info(
            "%s-%d: leadership back to preferred replica %s at leader epoch %d (was %s)",
            topic,
            p.partition,
            preferred,
            updated.leader_epoch,
            p.leader_node_id,
        )
        return True
