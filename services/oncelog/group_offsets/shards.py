"""ShardLeaseManager: which group-offsets shards this replica owns, at which coordinator epoch.

Each replica tries to lease every shard through the catalog (``CatalogStore.acquire_shard``) and renews its
leases every third of the lease time, so with several replicas every shard has one owner and a dead owner's
shards move to a survivor once its leases lapse. Taking a shard from another node bumps the shard's coordinator
epoch in the catalog; before serving the shard, the new owner *claims* that epoch in the group-offsets state
database (``OffsetStore.claim_shard``). Every state write is conditional on the claimed epoch, so a replica that
lost its lease (paused, partitioned, slow) cannot write any more, whatever it believes (DESIGN §2).

A replica stops serving a shard on its own a little before its lease would expire in the catalog, and a new
owner can take it only after expiry; that keeps reads from two owners apart as long as clocks agree within the
margin. Writes never depend on clocks.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from oncelog.catalog import CatalogStore, shard_for
from oncelog.errors import NotCoordinator
from oncelog.group_offsets.offset_manager import ShardFence

log = logging.getLogger(__name__)

ROLE = "group-offsets"
MAX_SAFETY_MARGIN_MS = 1_000
"""Upper bound of how long before catalog expiry a replica stops serving a shard it could not renew."""


@dataclass(frozen=True)
class _Owned:
    coordinator_epoch: int
    serve_until_ms: int


@dataclass(frozen=True)
class _Owner:
    node_id: str
    address: str


class ShardLeaseManager:
    """Acquires, renews and releases shard leases, and answers :meth:`fence_for` for the offset manager.

    Args:
        catalog: the cluster catalog.
        node_id: this replica's node id (the lease owner name).
        shard_count: the cluster's fixed group-offsets shard count.
        lease_ms: lease length; leases are renewed every ``lease_ms / 3``.
        clock: Unix milliseconds.
        claim: ``OffsetStore.claim_shard``; a shard is served only after its epoch was claimed.
        role: the catalog role whose shards are leased.
    """

    def __init__(
        self,
        catalog: CatalogStore,
        *,
        node_id: str,
        shard_count: int,
        lease_ms: int,
        clock: Callable[[], int],
        claim: Callable[[int, int], bool],
        role: str = ROLE,
    ) -> None:
        if shard_count <= 0 or lease_ms <= 0:
            raise ValueError("shard_count and lease_ms must be positive")
        self.catalog = catalog
        self.node_id = node_id
        self.shard_count = shard_count
        self.lease_ms = lease_ms
        self.role = role
        self._clock = clock
        self._claim = claim
        self._margin_ms = min(lease_ms // 10, MAX_SAFETY_MARGIN_MS)
        self._lock = threading.Lock()
        self._owned: dict[int, _Owned] = {}
        self._owners: dict[int, _Owner] = {}
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None

    # ------------------------------------------------------------------------------ ownership (ShardOwnership)

    def shard_of(self, group_id: str) -> int:
        """The group's shard (Kafka's ``partitionFor``, the same mapping FindCoordinator uses)."""
        return shard_for(group_id, self.shard_count)

    def fence_for(self, group_id: str) -> ShardFence:
        """The fence for writing ``group_id``; NotCoordinator (with the owner when known) if not ours."""
        shard = self.shard_of(group_id)
        now = self._clock()
        with self._lock:
            owned = self._owned.get(shard)
            owner = self._owners.get(shard)
        if owned is not None and now < owned.serve_until_ms:
            return ShardFence(shard, owned.coordinator_epoch)
        metadata = {"shard": str(shard)}
        where = "has no live owner right now"
        if owner is not None:
            metadata |= {"coordinator": owner.address, "coordinator_node_id": owner.node_id}
            where = f"is owned by {owner.node_id} at {owner.address or 'an unknown address'}"
        raise NotCoordinator(
            f"group {group_id!r} belongs to group-offsets shard {shard}, which {where}, not {self.node_id}; "
            "find the coordinator (FindCoordinator type GROUP) and retry there",
            metadata=metadata,
        )

    def fenced(self, fence: ShardFence) -> None:
        """Stop serving a shard whose claimed epoch was superseded in the state database."""
        with self._lock:
            owned = self._owned.get(fence.shard)
            if owned is not None and owned.coordinator_epoch == fence.coordinator_epoch:
                del self._owned[fence.shard]
                log.warning(
                    "shard %d was taken over past epoch %d; not serving it", fence.shard, fence.coordinator_epoch
                )

    def owned_shards(self) -> dict[int, int]:
        """Shards served right now and their coordinator epochs."""
        now = self._clock()
        with self._lock:
            return {s: o.coordinator_epoch for s, o in self._owned.items() if now < o.serve_until_ms}

    # ------------------------------------------------------------------------------ leasing

    def renew(self) -> None:
        """One pass over every shard: renew ours, take free ones, remember the owners of the others.

        Synchronous (catalog and state-database round trips); the background task runs it in a thread.
        """
        foreign: list[int] = []
        for shard in range(self.shard_count):
            now = self._clock()
            try:
                lease = self.catalog.acquire_shard(self.role, shard, self.node_id, self.lease_ms, now)
            except Exception:
                # keep serving until the current lease runs out; the next pass tries again
                log.exception("could not renew the lease of shard %d", shard)
                continue
            if lease is None:
                self._drop(shard, "another replica holds its lease")
                foreign.append(shard)
                continue
            with self._lock:
                current = self._owned.get(shard)
            if current is None or current.coordinator_epoch != lease.coordinator_epoch:
                try:
                    claimed = self._claim(shard, lease.coordinator_epoch)
                except Exception:
                    log.exception("could not claim shard %d at epoch %d", shard, lease.coordinator_epoch)
                    self._drop(shard, "its claim failed")
                    continue
                if not claimed:
                    log.error(
                        "shard %d: catalog epoch %d is older than the state database's; not serving it",
                        shard,
                        lease.coordinator_epoch,
                    )
                    self._drop(shard, "its epoch is stale")
                    continue
                log.info("serving group-offsets shard %d at coordinator epoch %d", shard, lease.coordinator_epoch)
            with self._lock:
                self._owned[shard] = _Owned(lease.coordinator_epoch, now + self.lease_ms - self._margin_ms)
                self._owners.pop(shard, None)
        if foreign:
            self._learn_owners(foreign)

    def _learn_owners(self, shards: list[int]) -> None:
        try:
            now = self._clock()
            addresses = {n.node_id: n.address for n in self.catalog.list_nodes(now, role=self.role)}
            owners = {}
            for shard in shards:
                lease = self.catalog.shard_lease(self.role, shard)
                if lease is not None and lease.owner_node_id and lease.lease_expires_at_ms > now:
                    owners[shard] = _Owner(lease.owner_node_id, addresses.get(lease.owner_node_id, ""))
        except Exception:
            log.exception("could not read the owners of shards %s", shards)
            return
        with self._lock:
            for shard in shards:
                if shard in owners:
                    self._owners[shard] = owners[shard]
                else:
                    self._owners.pop(shard, None)

    def _drop(self, shard: int, why: str) -> None:
        with self._lock:
            owned = self._owned.pop(shard, None)
        if owned is not None:
            log.warning("stopped serving shard %d (epoch %d): %s", shard, owned.coordinator_epoch, why)

    def release_all(self) -> None:
        """Give every owned shard back (clean shutdown), so another replica can take it without waiting."""
        with self._lock:
            owned, self._owned = self._owned, {}
        for shard, lease in sorted(owned.items()):
            try:
                self.catalog.release_shard(self.role, shard, self.node_id, lease.coordinator_epoch)
            except Exception:
                log.exception("could not release shard %d; its lease will lapse on its own", shard)

    # ------------------------------------------------------------------------------ lifecycle hooks

    async def start(self, address: str) -> None:
        """Acquire what is free, then keep renewing in the background (an ``on_start`` hook)."""
        self._stopping = asyncio.Event()
        await asyncio.to_thread(self.renew)
        self._task = asyncio.create_task(self._renew_forever(self._stopping), name=f"shard-leases-{self.node_id}")

    async def _renew_forever(self, stopping: asyncio.Event) -> None:
        interval = self.lease_ms / 3000
        while True:
            try:
                await asyncio.wait_for(stopping.wait(), interval)
                return
            except TimeoutError:
                pass
            try:
                await asyncio.to_thread(self.renew)
            except Exception:
                log.exception("shard lease pass failed; retrying")

    async def stop(self) -> None:
        """Stop renewing and release the shards (an ``on_stop`` hook, run after the server stopped).

        A pass already running finishes first, so it cannot take a shard back after the release.
        """
        if self._task is not None and self._stopping is not None:
            self._stopping.set()
            await self._task
            self._task = None
        await asyncio.to_thread(self.release_all)
