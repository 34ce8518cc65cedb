"""ShardLeaseManager: which transaction-coordinator shards this process serves (DESIGN §2, ref §2.10).

Kafka's coordinator serves the ``__transaction_state`` partitions its broker leads, at that partition's
leader epoch. Here shards are leased in the catalog instead: ``CatalogStore.acquire_shard`` takes a free or
expired lease with a conditional update that bumps the coordinator epoch (renewing keeps it). Every third
of a lease this manager renews the shards it holds and takes any shard whose lease is free, so replicas
are hot standbys: a shard moves when its owner stops, crashes or cannot renew.

On acquisition (Kafka ``onElection``): claim the shard in the transaction table at the lease's
coordinator epoch, then ``TransactionCoordinator.load`` replays its rows and resumes the markers of every
Prepare* transaction. Requests for the shard get COORDINATOR_LOAD_IN_PROGRESS until that finished and
NOT_COORDINATOR while another process owns it. On loss (Kafka ``onResignation``): unload the shard and drop
its queued markers; a write racing the loss fails in the table's epoch check. On a clean stop the leases
are released so another replica takes over without waiting for them to lapse.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from oncelog.catalog.store import CatalogStore, ShardLease
from oncelog.errors import OncelogError

from .coordinator import TransactionCoordinator

log = logging.getLogger(__name__)

ROLE = "txn-coordinator"


class ShardTable(Protocol):
    """The part of the transaction table a takeover needs (``TransactionStateManager``)."""

    def begin_takeover(self, shard: int, coordinator_epoch: int) -> None:
        """Make the next load of ``shard`` claim it at ``coordinator_epoch``."""
        ...


class ShardMarkers(Protocol):
    """The part of the marker channel a resignation needs (``TransactionMarkerChannelManager``)."""

    def drop_shard(self, shard: int) -> None:
        """Forget queued markers of ``shard``."""
        ...


class ShardLeaseManager:
    """Acquires, renews, loads and gives up this process's coordinator shards.

    Args:
        catalog: where leases live.
        coordinator: loads and unloads shards.
        table: claims a shard in the transaction table before it is loaded.
        markers: drops queued markers of a shard that was lost.
        node_id: this process's node id (the lease owner FindCoordinator resolves).
        shard_count: the cluster's fixed number of txn-coordinator shards.
        lease_ms: lease lifetime; renewed every third of it.
        clock: Unix milliseconds, the clock the catalog's lease expiries are written with.
    """

    def __init__(
        self,
        *,
        catalog: CatalogStore,
        coordinator: TransactionCoordinator,
        table: ShardTable,
        markers: ShardMarkers,
        node_id: str,
        shard_count: int,
        lease_ms: int,
        clock: Callable[[], int],
    ) -> None:
        self._catalog = catalog
        self._coordinator = coordinator
        self._table = table
        self._markers = markers
        self._node_id = node_id
        self._shard_count = shard_count
        self._lease_ms = lease_ms
        self._clock = clock
        self._leases: dict[int, ShardLease] = {}
        self._loaded: set[int] = set()
        self._task: asyncio.Task[None] | None = None
        self._round_lock = asyncio.Lock()

    @property
    def leases(self) -> dict[int, ShardLease]:
        """Leases held right now, loaded or not, by shard."""
        return dict(self._leases)

    async def start(self) -> None:
        """Take what is free now, then keep renewing in the background (an ``on_start`` hook)."""
        await self.run_once()
        self._task = asyncio.create_task(self._renew_forever(), name="txn-shard-leases")

    async def stop(self) -> None:
        """Stop renewing, unload every shard and release its lease (clean shutdown)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        async with self._round_lock:
            held = list(self._leases.values())
            for lease in held:
                self._lose(lease.shard, "stopping", quiet=True)
            if held:
                log.info("releasing txn-coordinator shards %s", sorted(lease.shard for lease in held))
            for lease in held:
                try:
                    await asyncio.to_thread(
                        self._catalog.release_shard, ROLE, lease.shard, self._node_id, lease.coordinator_epoch
                    )
                except OncelogError as exc:
                    log.warning("could not release shard %d (%s); its lease will lapse", lease.shard, exc)

    def fenced(self, shard: int, coordinator_epoch: int) -> None:
        """A write found ``shard`` claimed by a newer coordinator: stop serving it now (ref §2.10)."""
        lease = self._leases.get(shard)
        if lease is not None and lease.coordinator_epoch == coordinator_epoch:
            self._lose(shard, "a newer coordinator claimed it in the transaction table")

    async def run_once(self) -> None:
        """One round: renew held leases, take free ones, load what was taken, drop what was lost."""
        async with self._round_lock:
            to_load: list[ShardLease] = []
            for shard in range(self._shard_count):
                lease = await self._acquire(shard)
                if lease is not None and shard not in self._loaded:
                    to_load.append(lease)
            await asyncio.gather(*(self._load(lease) for lease in to_load))

    async def _acquire(self, shard: int) -> ShardLease | None:
        held = self._leases.get(shard)
        now = self._clock()
        try:
            lease = await asyncio.to_thread(
                self._catalog.acquire_shard, ROLE, shard, self._node_id, self._lease_ms, now
            )
        except OncelogError as exc:
            if held is None:
                return None
            left_ms = held.lease_expires_at_ms - self._clock()
            # Stop serving while a third of the lease is left: another replica may take it at expiry.
            if left_ms <= self._lease_ms // 3:
                self._lose(shard, f"lease could not be renewed ({exc})")
            else:
                log.warning("renewing shard %d failed (%s); lease valid for %d ms more", shard, exc, left_ms)
            return None
        if lease is None:
            if held is not None:
                self._lose(shard, "another coordinator took the lease")
            return None
        if held is not None and held.coordinator_epoch != lease.coordinator_epoch:
            # Lost and taken back between two rounds: the cache of the old epoch must not survive.
            self._lose(shard, f"coordinator epoch moved from {held.coordinator_epoch} to {lease.coordinator_epoch}")
        if held is None or held.coordinator_epoch != lease.coordinator_epoch:
            log.debug("acquired txn-coordinator shard %d at coordinator epoch %d", shard, lease.coordinator_epoch)
        self._leases[shard] = lease
        return lease

    async def _load(self, lease: ShardLease) -> None:
        try:
            self._table.begin_takeover(lease.shard, lease.coordinator_epoch)
            await self._coordinator.load(lease.shard, lease.coordinator_epoch)
        except OncelogError as exc:
            # Keep the lease: the next round loads again (requests meanwhile get NOT_COORDINATOR).
            self._coordinator.unload(lease.shard, lease.coordinator_epoch)
            log.warning("loading shard %d failed: %s; retrying next round", lease.shard, exc)
            return
        current = self._leases.get(lease.shard)
        if current is not None and current.coordinator_epoch == lease.coordinator_epoch:
            self._loaded.add(lease.shard)

    def _lose(self, shard: int, why: str, *, quiet: bool = False) -> None:
        lease = self._leases.pop(shard, None)
        self._loaded.discard(shard)
        if lease is None:
            return
        self._coordinator.unload(shard, lease.coordinator_epoch)
        self._markers.drop_shard(shard)
        if not quiet:
            log.info(
                "gave up txn-coordinator shard %d (coordinator epoch %d): %s", shard, lease.coordinator_epoch, why
            )

    async def _renew_forever(self) -> None:
        interval_s = self._lease_ms / 3000
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.run_once()
            except Exception:
                log.exception("shard lease round failed; retrying")


__all__ = ["ROLE", "ShardLeaseManager", "ShardMarkers", "ShardTable"]
