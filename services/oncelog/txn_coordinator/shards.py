"""What taking and losing a transaction-coordinator shard means for this service (design/architecture.md §5,
design/kafka-semantics.md §2.10).

Leasing itself (acquire, renew, safety margin, fencing, release on stop) is the catalog library's
:class:`~oncelog.catalog.leases.ShardLeaseManager`. This module gives it the coordinator's two hooks:

* load (Kafka ``onElection``): claim the shard in the transaction table at the lease's coordinator epoch, then
  ``TransactionCoordinator.load`` replays its rows and resumes the markers of every Prepare* transaction.
  Requests for the shard get COORDINATOR_LOAD_IN_PROGRESS until that finished and NOT_COORDINATOR while another
  process owns it.
* drop (Kafka ``onResignation``): unload the shard and forget its queued markers; a write racing the loss fails
  in the table's epoch check and reports it through ``ShardLeaseManager.fenced``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from oncelog.catalog.leases import ShardLeaseManager
from oncelog.catalog.store import CatalogStore
from oncelog.vocabulary import Role

from .coordinator import TransactionCoordinator

ROLE = Role.TXN_COORDINATOR


class ShardTable(Protocol):
    """The part of the transaction table a takeover needs (``TransactionLog``)."""

    def begin_takeover(self, shard: int, coordinator_epoch: int) -> None:
        """Make the next load of ``shard`` claim it at ``coordinator_epoch``."""
        ...


class ShardMarkers(Protocol):
    """The part of the marker channel a resignation needs (``TransactionMarkerChannelManager``)."""

    def drop_shard(self, shard: int) -> None:
        """Forget queued markers of ``shard``."""
        ...


class CoordinatorShardHooks:
    """The load and drop hooks of the coordinator's shard leases.

    Args:
        coordinator: loads and unloads shards.
        table: claims a shard in the transaction table before it is loaded.
        markers: drops queued markers of a shard that was lost.
    """

    def __init__(self, coordinator: TransactionCoordinator, table: ShardTable, markers: ShardMarkers) -> None:
        self._coordinator = coordinator
        self._table = table
        self._markers = markers

    async def load(self, shard: int, coordinator_epoch: int) -> bool:
        """Claim ``shard`` at ``coordinator_epoch`` and load it; raises (leaving nothing loaded) on failure."""
        try:
            self._table.begin_takeover(shard, coordinator_epoch)
            await self._coordinator.load(shard, coordinator_epoch)
        except Exception:
            # Requests meanwhile get NOT_COORDINATOR; the lease manager keeps the lease and loads again next round.
            self._coordinator.unload(shard, coordinator_epoch)
            raise
        return True

    def drop(self, shard: int, coordinator_epoch: int) -> None:
        """Unload ``shard`` (unless loaded at a newer epoch) and forget its queued markers."""
        self._coordinator.unload(shard, coordinator_epoch)
        self._markers.drop_shard(shard)


def txn_shard_leases(
    *,
    catalog: CatalogStore,
    coordinator: TransactionCoordinator,
    table: ShardTable,
    markers: ShardMarkers,
    node_id: str,
    shard_count: int,
    lease_ms: int,
    clock: Callable[[], int],
    deadline_clock: Callable[[], int] | None = None,
    database_clock: bool = False,
) -> ShardLeaseManager:
    """The lease manager of this process's transaction-coordinator shards.

    Args:
        catalog: where leases live.
        coordinator: loads and unloads shards.
        table: claims a shard in the transaction table before it is loaded.
        markers: drops queued markers of a shard that was lost.
        node_id: this process's node id (the lease owner FindCoordinator resolves).
        shard_count: the cluster's fixed number of txn-coordinator shards.
        lease_ms: lease lifetime; renewed every third of it.
        clock: Unix milliseconds, the clock the catalog's lease expiries are written with.
        deadline_clock, database_clock: see :class:`~oncelog.catalog.leases.ShardLeaseManager`.
    """
    hooks = CoordinatorShardHooks(coordinator, table, markers)
    return ShardLeaseManager(
        catalog,
        role=ROLE,
        node_id=node_id,
        shard_count=shard_count,
        lease_ms=lease_ms,
        clock=clock,
        deadline_clock=deadline_clock,
        database_clock=database_clock,
        on_acquired=hooks.load,
        on_lost=hooks.drop,
    )


__all__ = ["ROLE", "CoordinatorShardHooks", "ShardMarkers", "ShardTable", "txn_shard_leases"]
