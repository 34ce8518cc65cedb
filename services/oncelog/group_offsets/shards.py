"""Group-offsets' side of its shard leases: the claim before serving, and the fences the offset manager asks for.

Leasing itself (acquire, renew, safety margin, fencing, release on stop) is the catalog library's
:class:`~oncelog.catalog.leases.ShardLeaseManager`. Before serving a shard, its load hook *claims* the lease's
coordinator epoch in the group-offsets state database (``OffsetStore.claim_shard``). Every state write is
conditional on the claimed epoch, so a replica that lost its lease (paused, partitioned, slow) cannot write any
more, whatever it believes (design/architecture.md §2). Nothing is cached per shard that would need dropping on loss:
Redis
entries are tagged with the coordinator epoch they were read under, so a new epoch never matches an old entry.

:class:`GroupShardOwnership` turns the lease manager into the offset manager's ``ShardOwnership``: the fence of
a group's shard, or NOT_COORDINATOR naming the owner (learned from the catalog) so clients can redirect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from oncelog.catalog import CatalogStore, shard_for
from oncelog.catalog.leases import ShardLeaseManager
from oncelog.errors import CoordinatorLoadInProgress, NotCoordinator
from oncelog.group_offsets.offset_manager import ShardFence
from oncelog.vocabulary import Role

ROLE = Role.GROUP_OFFSETS


def group_shard_leases(
    catalog: CatalogStore,
    *,
    node_id: str,
    shard_count: int,
    lease_ms: int,
    clock: Callable[[], int],
    claim: Callable[[int, int], bool],
    role: str = ROLE,
    deadline_clock: Callable[[], int] | None = None,
    database_clock: bool = False,
) -> ShardLeaseManager:
    """The lease manager of this replica's group-offsets shards, learning the owners of the others.

    Args:
        catalog: the cluster catalog.
        node_id: this replica's node id (the lease owner name).
        shard_count: the cluster's fixed group-offsets shard count.
        lease_ms: lease length; leases are renewed every ``lease_ms / 3``.
        clock: Unix milliseconds.
        claim: ``OffsetStore.claim_shard`` (blocking); a shard is served only after its epoch was claimed.
        role: the catalog role whose shards are leased.
        deadline_clock, database_clock: see :class:`~oncelog.catalog.leases.ShardLeaseManager`.
    """

    async def claim_before_serving(shard: int, coordinator_epoch: int) -> bool:
        return await asyncio.to_thread(claim, shard, coordinator_epoch)

    return ShardLeaseManager(
        catalog,
        role=role,
        node_id=node_id,
        shard_count=shard_count,
        lease_ms=lease_ms,
        clock=clock,
        deadline_clock=deadline_clock,
        database_clock=database_clock,
        on_acquired=claim_before_serving,
        track_owners=True,
    )


class GroupShardOwnership:
    """The offset manager's ``ShardOwnership``, answered from this replica's shard leases (thread-safe).

    Args:
        leases: this replica's group-offsets shard leases.
    """

    def __init__(self, leases: ShardLeaseManager) -> None:
        self.leases = leases

    def shard_of(self, group_id: str) -> int:
        """The group's shard (Kafka's ``partitionFor``, the same mapping FindCoordinator uses)."""
        return shard_for(group_id, self.leases.shard_count)

    def fence_for(self, group_id: str) -> ShardFence:
        """The fence for writing ``group_id``.

        Raises:
            CoordinatorLoadInProgress: the shard is leased here but not served yet (retry here).
            NotCoordinator: the shard is not leased here (with the owner when known).
        """
        shard = self.shard_of(group_id)
        epoch = self.leases.epoch_of(shard)
        if epoch is not None:
            return ShardFence(shard, epoch)
        if self.leases.holds(shard):  # FindCoordinator names this replica already: retry here, not elsewhere
            raise CoordinatorLoadInProgress(f"group-offsets shard {shard} is leased here and still loading; retry")
        owner = self.leases.owner_of(shard)
        metadata = {"shard": str(shard)}
        where = "has no live owner right now"
        if owner is not None:
            metadata |= {"coordinator": owner.address, "coordinator_node_id": owner.node_id}
            where = f"is owned by {owner.node_id} at {owner.address or 'an unknown address'}"
        raise NotCoordinator(
            f"group {group_id!r} belongs to group-offsets shard {shard}, which {where}, not {self.leases.node_id}; "
            "find the coordinator (FindCoordinator type GROUP) and retry there",
            metadata=metadata,
        )

    def fenced(self, fence: ShardFence) -> None:
        """Stop serving a shard whose claimed epoch was superseded in the state database."""
        self.leases.fenced(fence.shard, fence.coordinator_epoch)

    def owned_shards(self) -> dict[int, int]:
        """Shards served right now and their coordinator epochs."""
        return self.leases.owned_shards()


__all__ = ["ROLE", "GroupShardOwnership", "group_shard_leases"]
