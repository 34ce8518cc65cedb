"""TransactionStateManager: the transaction metadata of the loaded shards and the store that makes it durable
(Kafka's ``TransactionStateManager``, design/kafka-semantics.md §2.9-2.10).

Kafka's state manager owns the ``transactionMetadataCache`` (per transaction-log partition: the coordinator epoch
and the metadata of each transactional id) and appends every transition to the log before the cache reveals it.
This one does the same over a :class:`TransactionStore` (the SQL table, :class:`~.transaction_log.TransactionLog`):

* :meth:`TransactionStateManager.begin_loading` / :meth:`~TransactionStateManager.load` take a shard over at a
  coordinator epoch and replay its rows through :meth:`TransactionMetadata.replay`, the function completions use as
  well (Kafka ``loadTransactionsForTxnTopicPartition``); :meth:`~TransactionStateManager.unload` drops it
  (``removeTransactionsForTxnTopicPartition``);
* :meth:`~TransactionStateManager.append` writes a prepared transition, conditional on the shard's coordinator
  epoch, and applies it to the cache only if the shard is still loaded at that epoch (``appendTransactionToLog``);
* lookups answer NOT_COORDINATOR for a shard owned elsewhere and COORDINATOR_LOAD_IN_PROGRESS for one loading
  (``getTransactionState``), and the listing serves ListTransactions (``listTransactionStates``).

Decisions (what a request may do, which transition to prepare) stay in :class:`~.coordinator.TransactionCoordinator`.

Metrics: ``oncelog.transactions.open`` per shard is kept as a running count, changed only where a durable
transition is applied to the cache and reset on load and unload.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from oncelog.errors import (
    CoordinatorLoadInProgress,
    InvalidProducerIdMapping,
    InvalidRequest,
    NotCoordinator,
    OncelogError,
    TransactionalIdNotFound,
)
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics
from oncelog.vocabulary import TopicPartition

from .metadata import IllegalTransitionError, TransactionMetadata, TxnTransition
from .state import TransactionState
from .validation import is_expirable

log = logging.getLogger(__name__)


class TransactionStore(Protocol):
    """Durable transaction table: one row per transactional id (the transaction log, design/kafka-semantics.md §2.9)."""

    async def load_shard(self, shard: int) -> Iterable[tuple[str, TxnTransition | None]]:
        """Rows of every transactional id of ``shard``, oldest first when several exist for one id.

        A ``None`` row (or a ``DEAD`` one) is a tombstone: the id was expired.
        """
        ...

    async def write(self, transactional_id: str, transition: TxnTransition, expected_coordinator_epoch: int) -> None:
        """Persist ``transition`` as the id's row, or delete the row when its state is ``DEAD``.

        The write must be conditional on the shard still being leased at ``expected_coordinator_epoch``.

        Raises:
            NotCoordinator: the conditional update failed (another coordinator owns the shard).
            OncelogError: any other failure; the row may or may not have been written.
        """
        ...


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """What DescribeTransactions / ListTransactions report about one transactional id (KIP-664)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: TransactionState
    txn_timeout_ms: int
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    partitions: frozenset[TopicPartition]
    groups: frozenset[str]
    prepared_at: int = -1
    """When the transaction was prepared (two-phase commit), -1 unless it is or was prepared."""
    check_back_address: str = ""

    @classmethod
    def of(cls, metadata: TransactionMetadata) -> TransactionDescription:
        """Describe the cached metadata as it is now."""
        return cls(
            transactional_id=metadata.transactional_id,
            producer_id=metadata.producer_id,
            producer_epoch=metadata.producer_epoch,
            state=metadata.state,
            txn_timeout_ms=metadata.txn_timeout_ms,
            txn_start_timestamp=metadata.txn_start_timestamp,
            txn_last_update_timestamp=metadata.txn_last_update_timestamp,
            partitions=frozenset(metadata.partitions),
            groups=frozenset(metadata.groups),
            prepared_at=-1 if metadata.prepared is None else metadata.prepared.prepared_at,
            check_back_address="" if metadata.prepared is None else metadata.prepared.check_back_address,
        )


@dataclass(eq=False, slots=True)
class TxnMetadataCacheEntry:
    """Cache of one shard at one coordinator epoch; replaced, never reused, on reload (Kafka's entry of the same
    name)."""

    shard: int
    coordinator_epoch: int
    loading: bool = True
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)
    open_transactions: int = 0
    """Cached ids whose state has an open transaction (Ongoing or Prepare*)."""


@dataclass(eq=False, slots=True)
class _LockEntry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class TransactionStateManager:
    """The metadata cache of the loaded shards over the durable store.

    Args:
        store: the durable transaction table.
        shard_for: maps a transactional id to its shard (must match FindCoordinator).
        metrics: where open transactions are reported; the process-wide instruments by default.
        leased: whether this process holds (or is taking) a shard's lease (``ShardLeaseManager.holds``); a shard
            leased here but not loaded yet answers COORDINATOR_LOAD_IN_PROGRESS instead of NOT_COORDINATOR, since
            FindCoordinator already names this process. Without it every unloaded shard is NOT_COORDINATOR.
    """

    def __init__(
        self,
        store: TransactionStore,
        *,
        shard_for: Callable[[str], int],
        metrics: OncelogMetrics | None = None,
        leased: Callable[[int], bool] | None = None,
    ) -> None:
        self._store = store
        self.shard_for = shard_for
        self._metrics = default_metrics() if metrics is None else metrics
        self._leased = leased
        self._shards: dict[int, TxnMetadataCacheEntry] = {}
        self._locks: dict[str, _LockEntry] = {}

    @asynccontextmanager
    async def lock(self, transactional_id: str) -> AsyncIterator[None]:
        """Hold the id's lock (Kafka's ``txnMetadata.inLock``): one asyncio lock per transactional id, dropped when
        nobody holds or waits for it. Decisions are prepared under it; writes run outside it."""
        entry = self._locks.setdefault(transactional_id, _LockEntry())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._locks[transactional_id]

    # ------------------------------------------------------------------------------ shard ownership

    @property
    def owned_shards(self) -> Mapping[int, int]:
        """Loaded shards and their coordinator epochs (shards still loading excluded)."""
        return {s.shard: s.coordinator_epoch for s in self._shards.values() if not s.loading}

    def begin_loading(self, shard: int, coordinator_epoch: int) -> TxnMetadataCacheEntry:
        """Replace the cache of ``shard`` by an empty one, loading at ``coordinator_epoch``.

        Requests for the shard get COORDINATOR_LOAD_IN_PROGRESS until :meth:`load` replayed its rows.

        Raises:
            NotCoordinator: the shard is already loaded at a newer coordinator epoch.
        """
        current = self._shards.get(shard)
        if current is not None and current.coordinator_epoch > coordinator_epoch:
            raise NotCoordinator(f"shard {shard} is loaded at coordinator epoch {current.coordinator_epoch}")
        entry = TxnMetadataCacheEntry(shard, coordinator_epoch)
        self._shards[shard] = entry
        return entry

    async def load(self, entry: TxnMetadataCacheEntry) -> bool:
        """Read the rows of ``entry``'s shard and replay them into it; False if the load was superseded.

        Every row goes through :meth:`TransactionMetadata.replay`. On failure the entry is removed (if it is still
        the shard's) and the error raised.
        """
        try:
            rows = await self._store.load_shard(entry.shard)
        except BaseException:
            if self._shards.get(entry.shard) is entry:
                del self._shards[entry.shard]
            raise
        if self._shards.get(entry.shard) is not entry:
            # Unloaded or reloaded at another epoch while reading: that newer decision wins.
            return False
        for transactional_id, row in rows:
            self._replay_row(entry, transactional_id, row)
        entry.open_transactions = sum(1 for md in entry.txns.values() if md.state.has_open_transaction)
        self._metrics.set_transactions_open(entry.shard, entry.open_transactions)
        entry.loading = False
        return True

    def unload(self, shard: int, coordinator_epoch: int | None = None) -> bool:
        """Drop the cache of ``shard``; with ``coordinator_epoch`` given, a cache loaded at a newer epoch is kept.

        Returns whether a cache was dropped.
        """
        entry = self._shards.get(shard)
        if entry is None:
            return False
        if coordinator_epoch is not None and entry.coordinator_epoch > coordinator_epoch:
            return False
        del self._shards[shard]
        # the next owner reports the shard; a stale value here would count its transactions twice
        self._metrics.set_transactions_open(shard, 0)
        return True

    def loaded(self) -> list[TxnMetadataCacheEntry]:
        """The caches of the shards loaded here (loading ones excluded), for the sweepers."""
        return [entry for entry in self._shards.values() if not entry.loading]

    def is_current(self, entry: TxnMetadataCacheEntry) -> bool:
        """Whether ``entry`` is still the cache of its shard (not unloaded, not reloaded)."""
        return self._shards.get(entry.shard) is entry

    # ------------------------------------------------------------------------------ lookups

    def entry_for(self, transactional_id: str) -> TxnMetadataCacheEntry:
        """The cache of ``transactional_id``'s shard.

        Raises:
            NotCoordinator: the shard is not owned here.
            CoordinatorLoadInProgress: the shard is loading, or leased here and not loaded yet.
        """
        shard = self.shard_for(transactional_id)
        entry = self._shards.get(shard)
        if entry is None:
            if self._leased is not None and self._leased(shard):
                raise CoordinatorLoadInProgress(f"shard {shard} is leased here and not loaded yet")
            raise NotCoordinator(f"shard {shard} of transactional id {transactional_id!r} is not owned here")
        if entry.loading:
            raise CoordinatorLoadInProgress(f"shard {shard} is loading")
        return entry

    def check_still_owned(self, entry: TxnMetadataCacheEntry) -> None:
        """Raise NotCoordinator if ``entry`` is no longer its shard's cache."""
        if not self.is_current(entry):
            raise NotCoordinator(f"shard {entry.shard} was unloaded or reloaded")

    @staticmethod
    def known(entry: TxnMetadataCacheEntry, transactional_id: str) -> TransactionMetadata:
        """The durable metadata of an id a producer names.

        Raises:
            InvalidProducerIdMapping: the id is unknown (InitProducerId was never called).
        """
        md = entry.txns.get(transactional_id)
        if md is None or not md.is_persisted:
            raise InvalidProducerIdMapping(f"transactional id {transactional_id!r} is unknown; call InitProducerId")
        return md

    def persisted(self, entry: TxnMetadataCacheEntry, transactional_id: str) -> TransactionMetadata:
        """The durable metadata of ``transactional_id`` on a shard still owned (call under the id's lock).

        Raises:
            TransactionalIdNotFound: the id is unknown.
        """
        self.check_still_owned(entry)
        md = entry.txns.get(transactional_id)
        if md is None or not md.is_persisted:
            raise TransactionalIdNotFound(f"transactional id {transactional_id!r} is unknown")
        return md

    # ------------------------------------------------------------------------------ writes

    async def append(
        self,
        entry: TxnMetadataCacheEntry,
        md: TransactionMetadata,
        transition: TxnTransition,
        *,
        follow: TxnTransition | None = None,
    ) -> None:
        """Write ``transition`` and apply it to the cache, or leave the cache as it was.

        With ``follow`` (an Ongoing row prepared on top of ``transition``), only ``follow`` is written: it supersedes
        ``transition`` in the same write. Both are then applied in order, each through the state table's checks.

        Raises:
            NotCoordinator: the write was refused, or the shard changed owner while it was made.
            OncelogError: the store failed; the cache keeps the previous state.
        """
        try:
            await self._store.write(md.transactional_id, follow or transition, entry.coordinator_epoch)
        except BaseException:
            # Cancellation included: nothing was revealed, so the cache keeps the previous state and any
            # later write supersedes a row that may have landed.
            md.abort_pending()
            self.forget_if_unpersisted(entry, md)
            raise
        if not self.is_current(entry) or entry.txns.get(md.transactional_id) is not md:
            raise NotCoordinator(f"shard {entry.shard} changed owner while writing {md.transactional_id!r}")
        was_open = md.state.has_open_transaction
        md.complete_transition(transition)
        if follow is not None:
            again = md.prepare_add_participants(follow.partitions, follow.groups, follow.txn_start_timestamp)
            if again != follow:
                raise IllegalTransitionError(f"{md.transactional_id!r}: written {follow}, cache prepared {again}")
            md.complete_transition(follow)
        if md.state.has_open_transaction != was_open:
            entry.open_transactions += 1 if md.state.has_open_transaction else -1
            self._metrics.set_transactions_open(entry.shard, entry.open_transactions)

    async def remove_expired_transactional_ids(self, now_ms: int, expiration_ms: int) -> list[str]:
        """Remove ids idle for ``expiration_ms`` with no open transaction (design/kafka-semantics.md §2.8).

        A tombstone is written first (under the id's lock, Kafka's ``removeExpiredTransactionalIds``); the cache entry
        goes only once it is durable and nothing changed. A failed write is logged and tried again by the next sweep.

        Returns:
            The transactional ids removed.
        """
        expired: list[str] = []
        for entry in self.loaded():
            for candidate in list(entry.txns.values()):
                if not is_expirable(candidate, now_ms, expiration_ms):
                    continue
                transactional_id = candidate.transactional_id
                async with self.lock(transactional_id):
                    if not self.is_current(entry):
                        break
                    md = entry.txns.get(transactional_id)
                    if md is None or not is_expirable(md, now_ms, expiration_ms):
                        continue
                    transition = md.prepare_dead()
                try:
                    await self.append(entry, md, transition)
                except OncelogError as error:
                    log.warning("expiration of %r failed: %r", transactional_id, error)
                    continue
                del entry.txns[transactional_id]
                expired.append(transactional_id)
        return expired

    @staticmethod
    def forget_if_unpersisted(entry: TxnMetadataCacheEntry, md: TransactionMetadata) -> None:
        """Drop a new id's metadata whose first write never happened (published only for its pending latch)."""
        if not md.is_persisted and md.pending_state is None and entry.txns.get(md.transactional_id) is md:
            del entry.txns[md.transactional_id]

    def _replay_row(self, entry: TxnMetadataCacheEntry, transactional_id: str, row: TxnTransition | None) -> None:
        if self.shard_for(transactional_id) != entry.shard:
            log.warning("skipping row of %r: it does not belong to shard %d", transactional_id, entry.shard)
            return
        if row is None or row.state is TransactionState.DEAD:
            entry.txns.pop(transactional_id, None)
            return
        if row.state.is_transient:
            raise IllegalTransitionError(f"stored row of {transactional_id!r} has transient state {row.state.name}")
        md = entry.txns.get(transactional_id)
        if md is None:
            entry.txns[transactional_id] = TransactionMetadata.from_transition(transactional_id, row)
        else:
            md.replay(row)

    # ------------------------------------------------------------------------------ describe / list

    def describe(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription | OncelogError]:
        """DescribeTransactions: per id, its description or the error explaining why there is none."""
        out: dict[str, TransactionDescription | OncelogError] = {}
        for transactional_id in transactional_ids:
            if not transactional_id:
                out[transactional_id] = InvalidRequest("transactional id must not be empty")
                continue
            try:
                entry = self.entry_for(transactional_id)
            except OncelogError as error:
                out[transactional_id] = error
                continue
            md = entry.txns.get(transactional_id)
            if md is None or not md.is_persisted or md.state is TransactionState.DEAD:
                out[transactional_id] = TransactionalIdNotFound(f"transactional id {transactional_id!r} is unknown")
            else:
                out[transactional_id] = TransactionDescription.of(md)
        return out

    def list_transactions(
        self,
        now_ms: int,
        states: Collection[TransactionState] | None = None,
        producer_ids: Collection[int] | None = None,
        older_than_ms: int | None = None,
    ) -> list[TransactionDescription]:
        """ListTransactions (KIP-664, duration filter of KIP-994), sorted by transactional id.

        Empty filters match everything. ``older_than_ms`` keeps only transactions that are open
        (Ongoing or Prepare*) and started at least that long before ``now_ms``.

        Raises:
            CoordinatorLoadInProgress: a shard is still loading, so the answer would be incomplete.
        """
        if any(entry.loading for entry in self._shards.values()):
            raise CoordinatorLoadInProgress("a shard is loading; the listing would be incomplete")
        found = []
        for entry in self._shards.values():
            for md in entry.txns.values():
                if not md.is_persisted or md.state is TransactionState.DEAD:
                    continue
                if states and md.state not in states:
                    continue
                if producer_ids and md.producer_id not in producer_ids:
                    continue
                if older_than_ms is not None and not (
                    md.state.has_open_transaction and now_ms - md.txn_start_timestamp >= older_than_ms
                ):
                    continue
                found.append(TransactionDescription.of(md))
        return sorted(found, key=lambda d: d.transactional_id)


__all__ = [
    "TransactionDescription",
    "TransactionStateManager",
    "TransactionStore",
    "TxnMetadataCacheEntry",
]
