"""Decision logic of the transaction coordinator (Kafka's ``TransactionCoordinator``,
design/kafka-semantics.md §2.3-2.10).

Each request runs prepare -> persist -> complete -> reply:

1. under the transactional id's lock, validate the request against the cached metadata and prepare a
   :class:`~.metadata.TxnTransition` (this marks ``pending_state``);
2. release the lock and write the row through :class:`TransactionStore`, conditional on the shard's
   coordinator epoch;
3. if the shard is still loaded at the same epoch, apply the row to the cache;
4. reply, and for Prepare* hand the markers to :class:`MarkerSink`, whose completion writes Complete*.

The lock covers only step 1, including the producer-id allocations it may await. The write runs
outside it with ``pending_state`` set, so while a write is in flight a concurrent request for the same
id is answered with CONCURRENT_TRANSACTIONS (retriable) instead of queueing behind a slow store.
Step 3 needs no lock: it contains no await and no other transition can be prepared while one is pending.

Choices where Kafka leaves room or where this coordinator differs (documented for reviewers):

* The epoch is bumped on every EndTxn (KIP-890 / transaction version 2) and the new identity is
  returned; when the epoch is exhausted, EndTxn returns the next producer id with epoch 0.
* A retried EndTxn whose decision is already durable (Prepare* or Complete* of the same outcome) gets
  the same success answer as the original call. Kafka answers CONCURRENT_TRANSACTIONS while in
  Prepare*; success is equally true there, because the outcome can no longer change.
* A retry is recognised by ``stored epoch == request epoch + 1`` *and* ``last epoch == request
  epoch``. A fence writes last epoch -1, so a fenced producer's EndTxn can never pass as a retry of
  the fencing abort. Kafka reaches the same result by bumping twice when fencing under TV2.
* InitProducerId on an Ongoing transaction fences it (one epoch bump, PrepareAbort, markers) and
  answers CONCURRENT_TRANSACTIONS; the caller retries and then receives a further bump. This is Kafka's
  behaviour; the retry is parked as described next, so it usually answers as soon as the abort completed.
* Parking instead of rejecting. Kafka answers AddPartitionsToTxn, AddOffsetsToTxn and InitProducerId with
  CONCURRENT_TRANSACTIONS while the id's previous transaction is in PrepareCommit/PrepareAbort, and its
  client retries after ``retry.backoff.ms`` (20 ms for AddPartitions, design/kafka-semantics.md §2.4). With KIP-890 the
  next
  transaction's first AddPartitions arrives right after EndTxn answered, so nearly every transaction of a
  busy producer paid one or more such round trips plus the backoff. Here such a request waits server-side
  for the Complete* write (any transition of the id wakes it, and it re-validates from scratch), at most
  ``completion_wait_ms`` and never past the caller's own deadline; only then does it answer
  CONCURRENT_TRANSACTIONS as Kafka would. The wait holds no lock, so the markers' completion, the sweepers
  and other ids proceed; a shard unload wakes every waiter, which then answers NOT_COORDINATOR. A pending
  write of another transition (not Prepare*) is still answered CONCURRENT_TRANSACTIONS at once: it can only
  come from a second concurrent request of the same producer, which Kafka's client never sends.
* Completion carries the next transaction. When the markers are acknowledged while the producer's first
  AddPartitions/AddOffsets of its next transaction is parked (with the identity Complete* hands out, and no
  InitProducerId parked before it), the completion writes that transaction's Ongoing row instead of Complete*:
  the table keeps one row per id, so Complete* followed by Ongoing and Ongoing alone leave the same durable
  state, and each commit cycle saves one database commit. Nothing is written before every marker is
  acknowledged, and the Ongoing row passes the same state-table checks as the request's own write would.
* A producer fenced by the transaction timeout gets PRODUCER_FENCED, as in Kafka; the KIP-588 idea of
  letting it claim the bumped epoch is not implemented (design/kafka-semantics.md §5.2).
* Transactional ids map to shards through the injected ``shard_for`` (the cluster-wide mapping that
  FindCoordinator uses); each loaded shard has one coordinator epoch.

Metrics: ``oncelog.transactions.open`` per shard is kept as a running count, changed only where a durable
transition is applied to the cache (step 3) and reset on load and unload; ``oncelog.transactions.completed``
counts each completed transaction by result, when its Complete* row (or the Ongoing row carrying it) is written.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol, TypeVar

from oncelog.catalog.topics import validate_group_id
from oncelog.errors import (
    ConcurrentTransactions,
    CoordinatorLoadInProgress,
    InvalidProducerIdMapping,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    NotCoordinator,
    OncelogError,
    ProducerFenced,
    TransactionalIdNotFound,
)
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics

from .metadata import (
    LAST_USABLE_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TopicPartition,
    TransactionMetadata,
    TxnTransition,
    is_epoch_exhausted,
)
from .state import TransactionResult, TransactionState

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""Kafka's ``transaction.max.timeout.ms`` default (15 minutes)."""
DEFAULT_COMPLETION_WAIT_MS = 5_000
"""How long a request arriving while the previous transaction completes is parked (see the module doc)."""
MAX_END_TXN_WAIT_MS = 60_000
"""Longest an EndTxn that waits for completion holds its reply when the call names no deadline."""

Clock = Callable[[], int]
"""Wall-clock time in milliseconds."""

MarkerCompletion = Callable[[], Awaitable[None]]
"""Called by the marker sink once every participant acknowledged its marker."""


# ---------------------------------------------------------------------------------------------- ports


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


class ProducerIdSource(Protocol):
    """Hands out producer ids that are never reused (the pid-allocator's prefetched blocks)."""

    async def next_id(self) -> int:
        """Return a fresh producer id.

        Raises:
            CoordinatorLoadInProgress: no block is available yet (retriable, design/kafka-semantics.md §5.5).
        """
        ...


class MarkerSink(Protocol):
    """Delivers COMMIT/ABORT markers to every participant (``TransactionMarkerChannelManager``,
    design/kafka-semantics.md §3.2)."""

    def enqueue(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        partitions: frozenset[TopicPartition],
        groups: frozenset[str],
        coordinator_epoch: int,
        on_complete: MarkerCompletion,
    ) -> None:
        """Queue markers without blocking; retry them until acknowledged while the epoch holds.

        Once every partition and group acknowledged (immediately when there are none), await
        ``on_complete``. If it raises NotCoordinator, drop the transaction: the next owner resumes it.
        Any other error means Complete* could not be written yet; call it again later.
        """
        ...

    def skip(
        self, transactional_id: str, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[set[TopicPartition], set[str]]:
        """Treat the named participants of a queued transaction as acknowledged; returns those still waiting."""
        ...


# ---------------------------------------------------------------------------------------------- results


class ProducerIdAndEpoch(NamedTuple):
    """The identity a producer must use next."""

    producer_id: int
    producer_epoch: int


class EndTxnOutcome(NamedTuple):
    """The answer of an EndTxn that waits for completion (:meth:`TransactionCoordinator.end_txn_and_wait`)."""

    producer: ProducerIdAndEpoch
    """The identity for the next transaction, as :meth:`TransactionCoordinator.end_txn` returns it."""
    completed: bool
    """Complete* was durable before the reply: every participant has its marker."""


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
        )


# ---------------------------------------------------------------------------------------------- internals


@dataclass(eq=False, slots=True)
class _Shard:
    """Cache of one shard at one coordinator epoch; replaced, never reused, on reload."""

    shard: int
    coordinator_epoch: int
    loading: bool = True
    txns: dict[str, TransactionMetadata] = field(default_factory=dict)
    open_transactions: int = 0
    """Cached ids whose state has an open transaction (Ongoing or Prepare*)."""


@dataclass(eq=False, slots=True)
class _ParkedRequest:
    """What a request parked behind the completion of the previous transaction asks for.

    AddPartitions/AddOffsets name an identity and participants; the completion may carry them (see
    :meth:`TransactionCoordinator._next_transaction`). InitProducerId names neither and is never carried, but
    holds its place in the arrival order: requests parked after it are not carried ahead of it.
    """

    transactional_id: str
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()

    def fits(self, complete: TxnTransition) -> bool:
        """Whether the request asks to join the transaction that follows ``complete`` with its identity."""
        return (
            bool(self.partitions or self.groups)
            and (self.producer_id, self.producer_epoch) == (complete.producer_id, complete.producer_epoch)
            and self.producer_epoch <= LAST_USABLE_EPOCH
        )


class _PreviousTransactionCompleting(Exception):
    """The id's last transaction is in Prepare*: the request may be parked until ``settled`` resolves.

    Not an OncelogError on purpose: it never leaves the coordinator. The parking loop either retries the
    request once the id settled or raises :attr:`error` (CONCURRENT_TRANSACTIONS) when the wait is over.
    ``request`` stays registered while the request is parked, so the completion sees it.
    """

    def __init__(self, error: OncelogError, settled: asyncio.Future[None], request: _ParkedRequest) -> None:
        super().__init__(error.message)
        self.error = error
        self.settled = settled
        self.request = request


@dataclass(eq=False, slots=True)
class _LockEntry:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class _KeyedLocks:
    """One asyncio lock per transactional id, dropped when nobody holds or waits for it."""

    def __init__(self) -> None:
        self._entries: dict[str, _LockEntry] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        entry = self._entries.setdefault(key, _LockEntry())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                del self._entries[key]


# ---------------------------------------------------------------------------------------------- coordinator


class TransactionCoordinator:
    """Handles InitProducerId, AddPartitions/AddOffsets, EndTxn, the sweepers and admin requests.

    Args:
        store: the durable transaction table.
        producer_ids: source of fresh producer ids.
        markers: delivers markers and calls back when they are acknowledged.
        clock: milliseconds since the epoch.
        shard_for: maps a transactional id to its shard (must match FindCoordinator).
        max_transaction_timeout_ms: upper bound for a producer's transaction timeout.
        completion_wait_ms: how long AddPartitions, AddOffsets and InitProducerId are parked while the id's
            previous transaction completes before they answer CONCURRENT_TRANSACTIONS; 0 answers at once,
            as Kafka does.
        metrics: where open and completed transactions are reported; the process-wide instruments by default.
        leased: whether this process holds (or is taking) a shard's lease (``ShardLeaseManager.holds``); a shard
            leased here but not loaded yet answers COORDINATOR_LOAD_IN_PROGRESS instead of NOT_COORDINATOR, since
            FindCoordinator already names this process. Without it every unloaded shard is NOT_COORDINATOR.
    """

    def __init__(
        self,
        *,
        store: TransactionStore,
        producer_ids: ProducerIdSource,
        markers: MarkerSink,
        clock: Clock,
        shard_for: Callable[[str], int],
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        completion_wait_ms: int = DEFAULT_COMPLETION_WAIT_MS,
        metrics: OncelogMetrics | None = None,
        leased: Callable[[int], bool] | None = None,
    ) -> None:
        if completion_wait_ms < 0:
            raise ValueError(f"completion_wait_ms must not be negative, got {completion_wait_ms}")
        self._metrics = default_metrics() if metrics is None else metrics
        self._store = store
        self._producer_ids = producer_ids
        self._markers = markers
        self._clock = clock
        self._shard_for = shard_for
        self._leased = leased
        self._max_timeout_ms = max_transaction_timeout_ms
        self._shards: dict[int, _Shard] = {}
        self._locks = _KeyedLocks()
        self._completion_wait_s = completion_wait_ms / 1000
        self._settled: dict[str, asyncio.Future[None]] = {}
        """Per transactional id, resolved at its next applied or abandoned transition (parked requests wait on it)."""
        self._parked_requests: dict[str, list[_ParkedRequest]] = {}
        """Per transactional id, its parked requests in arrival order (the completion may carry some)."""

    # ------------------------------------------------------------------------------ shard ownership

    @property
    def owned_shards(self) -> Mapping[int, int]:
        """Loaded shards and their coordinator epochs (shards still loading excluded)."""
        return {s.shard: s.coordinator_epoch for s in self._shards.values() if not s.loading}

    async def load(self, shard: int, coordinator_epoch: int) -> list[TransactionDescription]:
        """Take over ``shard`` at ``coordinator_epoch``: replay its rows and resume pending markers
        (design/kafka-semantics.md §2.10).

        Requests for the shard get COORDINATOR_LOAD_IN_PROGRESS until the rows are replayed. Every row
        goes through :meth:`TransactionMetadata.replay`, the function completions use as well. Markers of
        every Prepare* transaction are enqueued again with the new coordinator epoch; Ongoing ones are
        left to their producer or to the timeout.

        Returns:
            The Prepare* transactions whose markers were resumed (empty if the load was superseded).

        Raises:
            NotCoordinator: the shard is already loaded at a newer coordinator epoch.
        """
        current = self._shards.get(shard)
        if current is not None and current.coordinator_epoch > coordinator_epoch:
            raise NotCoordinator(f"shard {shard} is loaded at coordinator epoch {current.coordinator_epoch}")
        entry = _Shard(shard, coordinator_epoch)
        self._shards[shard] = entry
        self._wake_parked(shard)
        try:
            rows = await self._store.load_shard(shard)
        except BaseException:
            if self._shards.get(shard) is entry:
                del self._shards[shard]
            raise
        if self._shards.get(shard) is not entry:
            # Unloaded or reloaded at another epoch while reading: that newer decision wins.
            return []
        for transactional_id, row in rows:
            self._replay_row(entry, transactional_id, row)
        entry.open_transactions = sum(1 for md in entry.txns.values() if md.state.has_open_transaction)
        self._metrics.set_transactions_open(shard, entry.open_transactions)
        entry.loading = False
        resumed = [md for md in entry.txns.values() if md.state.is_prepare]
        for md in resumed:
            self._send_markers(entry, md)
        log.info(
            "loaded shard %d at coordinator epoch %d: %d ids, %d with markers resumed",
            shard,
            coordinator_epoch,
            len(entry.txns),
            len(resumed),
        )
        return [TransactionDescription.of(md) for md in resumed]

    def unload(self, shard: int, coordinator_epoch: int | None = None) -> None:
        """Give up ``shard`` (lease lost or handed over); in-flight writes then answer NOT_COORDINATOR.

        With ``coordinator_epoch`` given, a cache loaded at a newer epoch is kept.
        """
        entry = self._shards.get(shard)
        if entry is None:
            return
        if coordinator_epoch is not None and entry.coordinator_epoch > coordinator_epoch:
            return
        del self._shards[shard]
        # the next owner reports the shard; a stale value here would count its transactions twice
        self._metrics.set_transactions_open(shard, 0)
        self._wake_parked(shard)

    # ------------------------------------------------------------------------------ InitProducerId

    async def init_producer_id(
        self,
        transactional_id: str | None,
        txn_timeout_ms: int,
        expected_pid: int | None = None,
        expected_epoch: int | None = None,
        *,
        max_wait_ms: int | None = None,
    ) -> ProducerIdAndEpoch:
        """InitProducerId (design/kafka-semantics.md §2.3): give the caller the identity it must use, fencing older
        instances.

        ``expected_pid``/``expected_epoch`` are the caller's current identity (KIP-360); both or neither.
        Without a transactional id (idempotent producer) a fresh producer id with epoch 0 is returned.
        While the previous transaction's markers are being written the call is parked (module doc), at most
        ``completion_wait_ms`` and ``max_wait_ms`` (the caller's remaining deadline).

        Raises:
            InvalidRequest: empty transactional id, or only one of the expected fields given.
            InvalidTransactionTimeout: timeout <= 0 or above the maximum.
            ConcurrentTransactions: a transition is in flight, the previous transaction's markers were
                still being written when the wait ended, or an Ongoing transaction was just fenced and is
                being aborted.
            ProducerFenced: the expected identity belongs to an instance that was replaced.
        """
        if transactional_id is None:
            return ProducerIdAndEpoch(await self._producer_ids.next_id(), 0)
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        if (expected_pid is None) != (expected_epoch is None):
            raise InvalidRequest("expected producer id and epoch must be given together")
        if not 0 < txn_timeout_ms <= self._max_timeout_ms:
            raise InvalidTransactionTimeout(
                f"transaction timeout {txn_timeout_ms} ms is outside (0, {self._max_timeout_ms}]"
            )
        expected = None if expected_pid is None or expected_epoch is None else (expected_pid, expected_epoch)
        return await self._parked(
            functools.partial(self._init_transactional, transactional_id, txn_timeout_ms, expected), max_wait_ms
        )

    async def _init_transactional(
        self, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None
    ) -> ProducerIdAndEpoch:
        entry = self._shard_of(transactional_id)
        async with self._locks.hold(transactional_id):
            self._check_still_owned(entry)
            md = entry.txns.get(transactional_id)
            if md is None:
                producer_id = await self._producer_ids.next_id()
                self._check_still_owned(entry)
                md = TransactionMetadata.new(transactional_id, producer_id, txn_timeout_ms, self._clock())
                # Published before the write so a concurrent InitProducerId sees the pending latch.
                entry.txns[transactional_id] = md
            try:
                transition = await self._prepare_init(entry, md, txn_timeout_ms, expected)
            except BaseException:
                self._forget_if_unpersisted(entry, md)
                raise
        await self._persist(entry, md, transition)
        if transition.state is TransactionState.PREPARE_ABORT:
            self._send_markers(entry, md)
            raise ConcurrentTransactions(
                f"transactional id {transactional_id!r}: aborting the previous instance's transaction; retry"
            )
        return ProducerIdAndEpoch(transition.producer_id, transition.producer_epoch)

    async def _prepare_init(
        self,
        entry: _Shard,
        md: TransactionMetadata,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
    ) -> TxnTransition:
        if md.pending_state is not None:
            raise ConcurrentTransactions(f"transactional id {md.transactional_id!r} has a transition in flight")
        if expected is not None and not _may_claim(md, *expected):
            raise ProducerFenced(
                f"transactional id {md.transactional_id!r} is owned by producer id {md.producer_id}, not {expected[0]}"
            )
        state = md.state
        if state.is_prepare:
            raise self._completing(
                md, f"transactional id {md.transactional_id!r}: markers of the last transaction are being written"
            )
        if state is TransactionState.ONGOING:
            return md.prepare_fence_and_abort(self._clock())
        if state is TransactionState.EMPTY or state.is_complete:
            expected_epoch = None if expected is None else expected[1]
            if md.is_epoch_exhausted and (expected_epoch is None or expected_epoch == md.producer_epoch):
                new_producer_id = await self._producer_ids.next_id()
                self._check_still_owned(entry)
                return md.prepare_producer_id_rotation(
                    new_producer_id, txn_timeout_ms, self._clock(), record_last_epoch=expected is not None
                )
            return md.prepare_increment_epoch(txn_timeout_ms, expected_epoch, self._clock())
        raise IllegalTransitionError(f"transactional id {md.transactional_id!r} is cached in state {state.name}")

    # ------------------------------------------------------------------------------ AddPartitions / AddOffsets

    async def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Collection[TopicPartition],
        *,
        max_wait_ms: int | None = None,
    ) -> None:
        """AddPartitionsToTxn (design/kafka-semantics.md §2.4): make ``partitions`` participants of the open
        transaction.

        Arriving while the previous transaction completes (the usual case right after EndTxn under KIP-890),
        the call is parked until Complete* is durable, at most ``completion_wait_ms`` and ``max_wait_ms``.

        Raises:
            InvalidRequest: empty id or no partitions.
            InvalidProducerIdMapping: unknown id or another producer id.
            ProducerFenced: another epoch.
            ConcurrentTransactions: a transition is in flight, or the last transaction was still completing
                when the wait ended.
        """
        if not partitions:
            raise InvalidRequest("AddPartitionsToTxn needs at least one partition")
        add = functools.partial(
            self._add_participants, transactional_id, producer_id, producer_epoch, frozenset(partitions), frozenset()
        )
        await self._parked(add, max_wait_ms)

    async def add_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group: str,
        *,
        max_wait_ms: int | None = None,
    ) -> None:
        """AddOffsetsToTxn (design/kafka-semantics.md §2.4): make ``group``'s offsets part of the transaction.

        The group-offsets shard then receives a marker like any partition. Parking and errors as
        :meth:`add_partitions`.
        """
        validate_group_id(group, "AddOffsetsToTxn group id")
        add = functools.partial(
            self._add_participants, transactional_id, producer_id, producer_epoch, frozenset(), frozenset({group})
        )
        await self._parked(add, max_wait_ms)

    async def _add_participants(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: frozenset[TopicPartition],
        groups: frozenset[str],
    ) -> None:
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        entry = self._shard_of(transactional_id)
        request = _ParkedRequest(transactional_id, producer_id, producer_epoch, partitions, groups)
        async with self._locks.hold(transactional_id):
            self._check_still_owned(entry)
            md = self._known(entry, transactional_id)
            if md.producer_id != producer_id:
                self._raise_foreign_producer_id(md, producer_id, producer_epoch, parkable=True, request=request)
            if md.producer_epoch != producer_epoch or producer_epoch > LAST_USABLE_EPOCH:
                # The reserved epoch only ever ends a fenced transaction; nobody may open one with it.
                raise ProducerFenced(
                    f"transactional id {transactional_id!r}: epoch {producer_epoch} is not the current "
                    f"epoch {md.producer_epoch}"
                )
            if md.state.is_prepare:
                raise self._completing(
                    md, f"transactional id {transactional_id!r}: the previous transaction has not completed", request
                )
            if md.pending_state is not None:
                raise ConcurrentTransactions(
                    f"transactional id {transactional_id!r}: the previous transition has not completed"
                )
            if md.state is TransactionState.ONGOING and partitions <= md.partitions and groups <= md.groups:
                return  # already participants: nothing to write (Kafka's shortcut)
            transition = md.prepare_add_participants(partitions, groups, self._clock())
        await self._persist(entry, md, transition)

    # ------------------------------------------------------------------------------ EndTxn

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ProducerIdAndEpoch:
        """EndTxn (design/kafka-semantics.md §2.5 with KIP-890): durably decide, enqueue markers, reply with the next
        identity.

        The reply comes once Prepare* is written, before markers are acknowledged; Complete* follows
        when the marker sink reports completion. A retry of a call whose decision is already durable
        gets the same answer again.

        Raises:
            InvalidRequest: empty transactional id.
            InvalidProducerIdMapping: unknown id or another producer id.
            ProducerFenced: an epoch that is neither current nor a retry of the last EndTxn.
            InvalidTxnState: the request contradicts the state (commit after abort, commit with nothing open).
            ConcurrentTransactions: a transition is in flight or the previous transaction is completing.
        """
        identity, _ = await self._end_txn(transactional_id, producer_id, producer_epoch, commit)
        return identity

    async def end_txn_and_wait(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, max_wait_ms: int | None = None
    ) -> EndTxnOutcome:
        """EndTxn whose reply also waits until the transaction completed: markers acknowledged, Complete* durable.

        The decision is taken (or its retry recognised) exactly as :meth:`end_txn` does; then the call waits, without
        polling, for the id's next transition, at most ``max_wait_ms`` (the caller's remaining deadline) or
        :data:`MAX_END_TXN_WAIT_MS`. ``completed`` is False when that ran out first; the decision stands, and the
        same call again (naming the same epoch, a retry) waits again. A read_committed read started after a
        completed commit sees every record of the transaction.

        Raises:
            NotCoordinator: the shard was lost while waiting; the new owner resumes the markers, and the retry
                there waits again.
            OncelogError: as :meth:`end_txn`.
        """
        identity, pending = await self._end_txn(transactional_id, producer_id, producer_epoch, commit)
        completed = True
        if pending is not None:
            completed = await self._wait_until_complete(transactional_id, *pending, max_wait_ms)
        return EndTxnOutcome(identity, completed)

    async def _end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> tuple[ProducerIdAndEpoch, tuple[_Shard, TransactionMetadata, TransactionState, int, int] | None]:
        """EndTxn's decision; also returns what completion to wait for, None when the transaction is complete."""
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
        entry = self._shard_of(transactional_id)
        async with self._locks.hold(transactional_id):
            self._check_still_owned(entry)
            md = self._known(entry, transactional_id)
            reply = self._validate_end_txn(md, producer_id, producer_epoch, result)
            if reply is not None:
                return reply, self._pending_completion(entry, md)
            next_producer_id = NO_PRODUCER_ID
            if md.is_epoch_exhausted:
                next_producer_id = await self._producer_ids.next_id()
                self._check_still_owned(entry)
            transition = md.prepare_end_transaction(result, self._clock(), next_producer_id=next_producer_id)
        await self._persist(entry, md, transition)
        self._send_markers(entry, md)
        return _client_identity(md), self._pending_completion(entry, md)

    @staticmethod
    def _pending_completion(
        entry: _Shard, md: TransactionMetadata
    ) -> tuple[_Shard, TransactionMetadata, TransactionState, int, int] | None:
        """What identifies the Prepare* ``md`` is in, so a waiter can tell when it is over (None: not Prepare*)."""
        if not md.state.is_prepare:
            return None
        return entry, md, md.state, md.producer_id, md.producer_epoch

    async def _wait_until_complete(
        self,
        transactional_id: str,
        entry: _Shard,
        md: TransactionMetadata,
        prepared: TransactionState,
        producer_id: int,
        producer_epoch: int,
        max_wait_ms: int | None,
    ) -> bool:
        """Wait until ``md`` left the Prepare* it was in; False if ``max_wait_ms`` ran out first.

        Every applied transition and every reload of the shard wakes the id's waiters (``_wake``); no polling.
        """
        loop = asyncio.get_running_loop()
        wait_ms = MAX_END_TXN_WAIT_MS if max_wait_ms is None else min(max_wait_ms, MAX_END_TXN_WAIT_MS)
        deadline = loop.time() + wait_ms / 1000
        while True:
            if (md.state, md.producer_id, md.producer_epoch) != (prepared, producer_id, producer_epoch):
                return True
            if self._shards.get(entry.shard) is not entry:
                raise NotCoordinator(
                    f"shard {entry.shard} changed owner while {transactional_id!r} was completing; retry EndTxn "
                    "at the new owner, which resumes its markers"
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            # Taken without an await since the check above, so no transition can slip in between.
            settled = self._settled.get(transactional_id)
            if settled is None or settled.done():
                settled = self._settled[transactional_id] = loop.create_future()
            try:
                # shielded: the signal is shared by every request waiting on the id
                await asyncio.wait_for(asyncio.shield(settled), remaining)
            except TimeoutError:
                return False

    def _validate_end_txn(
        self, md: TransactionMetadata, producer_id: int, producer_epoch: int, result: TransactionResult
    ) -> ProducerIdAndEpoch | None:
        """Kafka's TV2 ``endTransaction`` validation: the reply to a retry, or None to prepare a decision."""
        state = md.state
        # A retry names the epoch the decision was taken with: the stored epoch is one higher and the
        # stored last epoch is exactly the one named (a fence stores -1 there, so a fenced producer never qualifies).
        retry_on_bump = (
            md.producer_id == producer_id
            and md.producer_epoch == producer_epoch + 1
            and md.last_producer_epoch == producer_epoch
        )
        # The decision exhausted the epochs and Complete* already moved to the next producer id.
        retry_on_overflow = (
            state.is_complete
            and md.previous_producer_id == producer_id
            and producer_epoch == LAST_USABLE_EPOCH
            and md.last_producer_epoch == LAST_USABLE_EPOCH
            and md.producer_epoch == 0
        )
        if md.producer_id != producer_id and not retry_on_overflow:
            self._raise_foreign_producer_id(md, producer_id, producer_epoch)
        current = (
            md.producer_id == producer_id
            and producer_epoch == md.producer_epoch
            and producer_epoch <= LAST_USABLE_EPOCH  # the reserved epoch was never handed to a client
        )
        is_retry = retry_on_bump or retry_on_overflow
        if not (current or is_retry) or (is_retry and not (state.is_prepare or state.is_complete)):
            raise ProducerFenced(
                f"transactional id {md.transactional_id!r}: epoch {producer_epoch} is not current "
                f"({md.producer_epoch}) in state {state.name}"
            )
        if md.pending_state is not None:
            raise ConcurrentTransactions(f"transactional id {md.transactional_id!r} has a transition in flight")

        if state is TransactionState.ONGOING:
            return None
        if state.is_prepare:
            if not is_retry:
                # The owner already uses the epoch returned by the previous EndTxn; that one is still completing.
                raise ConcurrentTransactions(
                    f"transactional id {md.transactional_id!r}: the previous transaction is completing"
                )
            if state is result.prepare_state:
                return _client_identity(md)
            raise self._contradicts(md, result)
        if state.is_complete:
            if is_retry:
                if state is result.complete_state:
                    return ProducerIdAndEpoch(md.producer_id, md.producer_epoch)
                raise self._contradicts(md, result)
            if result is TransactionResult.ABORT:
                return None  # abort when unsure: bumps the epoch, no participants
            raise self._contradicts(md, result)
        if state is TransactionState.EMPTY:
            if result is TransactionResult.ABORT:
                return None
            raise self._contradicts(md, result)
        raise IllegalTransitionError(f"transactional id {md.transactional_id!r} is cached in state {state.name}")

    @staticmethod
    def _contradicts(md: TransactionMetadata, result: TransactionResult) -> OncelogError:
        return InvalidTxnState(
            f"transactional id {md.transactional_id!r}: cannot {result.value.lower()} in state {md.state.name}"
        )

    # ------------------------------------------------------------------------------ marker completion

    async def _complete_transaction(
        self, entry: _Shard, transactional_id: str, producer_id: int, producer_epoch: int, result: TransactionResult
    ) -> None:
        """Marker sink callback: write Complete* for the Prepare* the markers were sent for.

        When the producer's next AddPartitions/AddOffsets is already parked, the row written is the next
        transaction's Ongoing instead (see :meth:`_next_transaction`). A duplicate call, or one for a
        transaction that has moved on, does nothing.
        """
        async with self._locks.hold(transactional_id):
            self._check_still_owned(entry)
            md = entry.txns.get(transactional_id)
            if (
                md is None
                or md.state is not result.prepare_state
                or md.producer_id != producer_id
                or md.producer_epoch != producer_epoch
            ):
                return
            if md.pending_state is not None:
                raise ConcurrentTransactions(f"transactional id {transactional_id!r} has a transition in flight")
            now_ms = self._clock()
            transition = md.prepare_complete(now_ms)
            follow = self._next_transaction(transactional_id, transition, now_ms)
        await self._persist(entry, md, transition, follow=follow)
        self._metrics.record_transaction_completed(result.value.lower())

    def _next_transaction(self, transactional_id: str, complete: TxnTransition, now_ms: int) -> TxnTransition | None:
        """The Ongoing row of the next transaction if parked requests already ask for it, else None.

        Kafka appends Complete* and, one round trip later, the next Ongoing; the table keeps only an id's last
        record, so when the producer's first AddPartitions/AddOffsets of its next transaction is parked behind
        the completion, both transitions are made durable by one write of the Ongoing row: one SQL commit
        instead of two, and the parked request answers as soon as it lands. The row is prepared on a copy of
        the completed state with the producer's own identity check (the one the request would face after
        Complete*), so it is exactly the row the request would have written next; requests naming another
        identity are left to re-validate after the write, as before. Called under the id's lock.
        """
        carried: list[_ParkedRequest] = []
        for request in self._parked_requests.get(transactional_id, ()):
            if not request.fits(complete):
                break  # an earlier request (a new instance's InitProducerId, say) goes first
            carried.append(request)
        if not carried:
            return None
        completed = TransactionMetadata.from_transition(transactional_id, complete)
        return completed.prepare_add_participants(
            frozenset().union(*(request.partitions for request in carried)),
            frozenset().union(*(request.groups for request in carried)),
            now_ms,
        )

    def _send_markers(self, entry: _Shard, md: TransactionMetadata) -> None:
        result = TransactionResult.COMMIT if md.state is TransactionState.PREPARE_COMMIT else TransactionResult.ABORT
        self._markers.enqueue(
            transactional_id=md.transactional_id,
            producer_id=md.producer_id,
            producer_epoch=md.producer_epoch,
            result=result,
            partitions=frozenset(md.partitions),
            groups=frozenset(md.groups),
            coordinator_epoch=entry.coordinator_epoch,
            on_complete=functools.partial(
                self._complete_transaction, entry, md.transactional_id, md.producer_id, md.producer_epoch, result
            ),
        )

    # ------------------------------------------------------------------------------ sweepers

    async def abort_timed_out_transactions(self, now_ms: int) -> list[str]:
        """Fence and abort every Ongoing transaction open longer than its timeout (design/kafka-semantics.md §2.7).

        The timeout counts from the first AddPartitions. Candidates racing a client request are
        skipped; a failed write is logged and retried by the next sweep.

        Returns:
            The transactional ids whose abort was made durable.
        """
        aborted: list[str] = []
        for entry in list(self._shards.values()):
            if entry.loading:
                continue
            for md in list(entry.txns.values()):
                if not _timed_out(md, now_ms):
                    continue
                try:
                    fenced = await self._abort_if_timed_out(
                        entry, md.transactional_id, (md.producer_id, md.producer_epoch), now_ms
                    )
                except OncelogError as error:
                    log.warning("timeout abort of %r failed: %r", md.transactional_id, error)
                    continue
                if fenced:
                    aborted.append(md.transactional_id)
        return aborted

    async def expire_transactional_ids(self, now_ms: int, expiration_ms: int) -> list[str]:
        """Remove ids idle for ``expiration_ms`` with no open transaction (design/kafka-semantics.md §2.8).

        A tombstone is written first; the cache entry goes only once it is durable and nothing changed.

        Returns:
            The transactional ids removed.
        """
        expired: list[str] = []
        for entry in list(self._shards.values()):
            if entry.loading:
                continue
            for candidate in list(entry.txns.values()):
                if not _expirable(candidate, now_ms, expiration_ms):
                    continue
                transactional_id = candidate.transactional_id
                async with self._locks.hold(transactional_id):
                    if self._shards.get(entry.shard) is not entry:
                        break
                    md = entry.txns.get(transactional_id)
                    if md is None or not _expirable(md, now_ms, expiration_ms):
                        continue
                    transition = md.prepare_dead()
                try:
                    await self._persist(entry, md, transition)
                except OncelogError as error:
                    log.warning("expiration of %r failed: %r", transactional_id, error)
                    continue
                del entry.txns[transactional_id]
                expired.append(transactional_id)
        return expired

    # ------------------------------------------------------------------------------ admin (KIP-664)

    async def abort_transaction(self, transactional_id: str) -> TransactionDescription:
        """Abort the open transaction of ``transactional_id`` on an operator's request (KIP-664).

        An Ongoing transaction is fenced and aborted exactly like a timed-out one. Nothing is done when no
        transaction is open or an abort is already under way. Hanging transactions that have no
        coordinator state at all are aborted on the storage node instead (design/kafka-semantics.md §5.4).

        Raises:
            TransactionalIdNotFound: the id is unknown.
            InvalidTxnState: the transaction is committing; a durable commit is never turned into an abort.
            ConcurrentTransactions: a transition is in flight.
        """
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        entry = self._shard_of(transactional_id)
        async with self._locks.hold(transactional_id):
            md = self._persisted(entry, transactional_id)
            if md.pending_state is not None:
                raise ConcurrentTransactions(f"transactional id {transactional_id!r} has a transition in flight")
            if md.state is TransactionState.PREPARE_COMMIT:
                raise InvalidTxnState(f"transactional id {transactional_id!r} is committing; it cannot be aborted")
            if md.state is not TransactionState.ONGOING:
                return TransactionDescription.of(md)
            transition = md.prepare_fence_and_abort(self._clock())
        await self._persist(entry, md, transition)
        self._send_markers(entry, md)
        log.info(
            "aborted transaction of %r on request, producer id %d epoch %d",
            transactional_id,
            md.producer_id,
            md.producer_epoch,
        )
        return TransactionDescription.of(md)

    async def skip_markers(
        self, transactional_id: str, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[set[TopicPartition], set[str]]:
        """Give up on markers that can never be delivered, on an operator's request (the escape of a stuck commit).

        The transaction must be completing (PrepareCommit or PrepareAbort) and every name one of its
        participants. The skipped participants are treated as acknowledged, so Complete* follows once the
        others acknowledged: a skipped partition keeps the transaction open until aborted on the storage
        node (DescribeProducers + the storage abort), a skipped group never sees the offsets.

        Returns:
            The named participants that were still waiting, now skipped.

        Raises:
            InvalidRequest: empty id, nothing named, or a name that is not a participant.
            TransactionalIdNotFound: the id is unknown.
            InvalidTxnState: the transaction is not completing.
        """
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        if not partitions and not groups:
            raise InvalidRequest("name at least one partition or group whose marker to skip")
        entry = self._shard_of(transactional_id)
        async with self._locks.hold(transactional_id):
            md = self._persisted(entry, transactional_id)
            if not md.state.is_prepare:
                raise InvalidTxnState(
                    f"transactional id {transactional_id!r} is {md.state.name}, not completing: no marker to skip"
                )
            strangers = sorted(f"{t}-{p}" for t, p in set(partitions) - md.partitions)
            strangers += sorted(repr(g) for g in set(groups) - md.groups)
            if strangers:
                raise InvalidRequest(
                    f"{', '.join(strangers)} not a participant of {transactional_id!r}; describe the transaction "
                    "for its partitions and groups"
                )
            skipped = self._markers.skip(transactional_id, partitions, groups)
        log.warning("skipped markers of %r on request: %s", transactional_id, skipped)
        return skipped

    def _persisted(self, entry: _Shard, transactional_id: str) -> TransactionMetadata:
        """The durable metadata of ``transactional_id`` on a shard still owned (call under the id's lock).

        Raises:
            TransactionalIdNotFound: the id is unknown.
        """
        self._check_still_owned(entry)
        md = entry.txns.get(transactional_id)
        if md is None or not md.is_persisted:
            raise TransactionalIdNotFound(f"transactional id {transactional_id!r} is unknown")
        return md

    async def _abort_if_timed_out(
        self, entry: _Shard, transactional_id: str, identity: tuple[int, int], now_ms: int
    ) -> bool:
        """PrepareEpochFence + PrepareAbort for a timed-out transaction, then markers (design/kafka-semantics.md §2.7).

        Skipped when a client request got there first (other identity, state or a pending write).
        """
        async with self._locks.hold(transactional_id):
            self._check_still_owned(entry)
            md = entry.txns.get(transactional_id)
            if md is None or not _timed_out(md, now_ms) or (md.producer_id, md.producer_epoch) != identity:
                return False
            transition = md.prepare_fence_and_abort(now_ms)
        await self._persist(entry, md, transition)
        self._send_markers(entry, md)
        return True

    # ------------------------------------------------------------------------------ describe / list

    def describe(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription | OncelogError]:
        """DescribeTransactions: per id, its description or the error explaining why there is none."""
        out: dict[str, TransactionDescription | OncelogError] = {}
        for transactional_id in transactional_ids:
            if not transactional_id:
                out[transactional_id] = InvalidRequest("transactional id must not be empty")
                continue
            try:
                entry = self._shard_of(transactional_id)
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
        states: Collection[TransactionState] | None = None,
        producer_ids: Collection[int] | None = None,
        older_than_ms: int | None = None,
    ) -> list[TransactionDescription]:
        """ListTransactions (KIP-664, duration filter of KIP-994), sorted by transactional id.

        Empty filters match everything. ``older_than_ms`` keeps only transactions that are open
        (Ongoing or Prepare*) and started at least that long ago, which is what hunting for hanging
        transactions needs.

        Raises:
            CoordinatorLoadInProgress: a shard is still loading, so the answer would be incomplete.
        """
        if any(entry.loading for entry in self._shards.values()):
            raise CoordinatorLoadInProgress("a shard is loading; the listing would be incomplete")
        now_ms = self._clock()
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

    # ------------------------------------------------------------------------------ plumbing

    def _shard_of(self, transactional_id: str) -> _Shard:
        shard = self._shard_for(transactional_id)
        entry = self._shards.get(shard)
        if entry is None:
            if self._leased is not None and self._leased(shard):
                raise CoordinatorLoadInProgress(f"shard {shard} is leased here and not loaded yet")
            raise NotCoordinator(f"shard {shard} of transactional id {transactional_id!r} is not owned here")
        if entry.loading:
            raise CoordinatorLoadInProgress(f"shard {shard} is loading")
        return entry

    def _check_still_owned(self, entry: _Shard) -> None:
        if self._shards.get(entry.shard) is not entry:
            raise NotCoordinator(f"shard {entry.shard} was unloaded or reloaded")

    @staticmethod
    def _known(entry: _Shard, transactional_id: str) -> TransactionMetadata:
        md = entry.txns.get(transactional_id)
        if md is None or not md.is_persisted:
            raise InvalidProducerIdMapping(f"transactional id {transactional_id!r} is unknown; call InitProducerId")
        return md

    def _raise_foreign_producer_id(
        self,
        md: TransactionMetadata,
        producer_id: int,
        producer_epoch: int,
        *,
        parkable: bool = False,
        request: _ParkedRequest | None = None,
    ) -> None:
        if md.state.is_prepare and producer_id == md.next_producer_id and producer_epoch == 0:
            # The caller already holds the identity the running completion will switch to.
            message = f"transactional id {md.transactional_id!r}: the previous transaction is completing"
            if parkable:
                raise self._completing(md, message, request)
            raise ConcurrentTransactions(message)
        raise InvalidProducerIdMapping(
            f"transactional id {md.transactional_id!r} is mapped to producer id {md.producer_id}, not {producer_id}"
        )

    def _replay_row(self, entry: _Shard, transactional_id: str, row: TxnTransition | None) -> None:
        if self._shard_for(transactional_id) != entry.shard:
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

    async def _persist(
        self, entry: _Shard, md: TransactionMetadata, transition: TxnTransition, *, follow: TxnTransition | None = None
    ) -> None:
        """Write ``transition`` and apply it to the cache, or leave the cache as it was.

        With ``follow`` (an Ongoing row prepared on top of ``transition``, see :meth:`_next_transaction`), only
        ``follow`` is written: it supersedes ``transition`` in the same write. Both are then applied in order,
        each through the state table's checks.
        """
        try:
            await self._store.write(md.transactional_id, follow or transition, entry.coordinator_epoch)
        except BaseException:
            # Cancellation included: nothing was revealed, so the cache keeps the previous state and any
            # later write supersedes a row that may have landed.
            md.abort_pending()
            self._forget_if_unpersisted(entry, md)
            self._wake(md.transactional_id)
            raise
        if self._shards.get(entry.shard) is not entry or entry.txns.get(md.transactional_id) is not md:
            self._wake(md.transactional_id)
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
        self._wake(md.transactional_id)

    # ------------------------------------------------------------------------------ parking

    def _completing(
        self, md: TransactionMetadata, message: str, request: _ParkedRequest | None = None
    ) -> _PreviousTransactionCompleting:
        """The parkable form of CONCURRENT_TRANSACTIONS for ``md`` (called under the id's lock).

        The signal is taken and the request registered here, before the lock is released, so neither a
        transition applied between this refusal and the wait nor a completion starting meanwhile can miss it.
        """
        settled = self._settled.get(md.transactional_id)
        if settled is None or settled.done():
            settled = self._settled[md.transactional_id] = asyncio.get_running_loop().create_future()
        if request is None:
            request = _ParkedRequest(md.transactional_id)
        self._parked_requests.setdefault(md.transactional_id, []).append(request)
        return _PreviousTransactionCompleting(ConcurrentTransactions(message), settled, request)

    def _unregister(self, request: _ParkedRequest) -> None:
        parked = self._parked_requests.get(request.transactional_id)
        if parked is not None and request in parked:
            parked.remove(request)
            if not parked:
                del self._parked_requests[request.transactional_id]

    def _wake(self, transactional_id: str) -> None:
        settled = self._settled.pop(transactional_id, None)
        if settled is not None and not settled.done():
            settled.set_result(None)

    def _wake_parked(self, shard: int) -> None:
        """Wake every request parked on ``shard``: its cache was replaced, they re-validate against the new one."""
        for transactional_id in [t for t in self._settled if self._shard_for(t) == shard]:
            self._wake(transactional_id)

    async def _parked(self, attempt: Callable[[], Awaitable[T]], max_wait_ms: int | None) -> T:
        """Run ``attempt``; while it finds the previous transaction completing, wait for that and run it again.

        The wait ends after ``completion_wait_ms`` or ``max_wait_ms``, whichever is shorter; the request is
        then answered CONCURRENT_TRANSACTIONS, exactly what it got before waiting.
        """
        loop = asyncio.get_running_loop()
        budget_s = self._completion_wait_s if max_wait_ms is None else min(self._completion_wait_s, max_wait_ms / 1000)
        deadline = loop.time() + budget_s
        while True:
            try:
                return await attempt()
            except _PreviousTransactionCompleting as busy:
                try:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise busy.error from None
                    try:
                        # shielded: the signal is shared by every request parked on the id
                        await asyncio.wait_for(asyncio.shield(busy.settled), remaining)
                    except TimeoutError:
                        raise busy.error from None
                finally:
                    # Woken, timed out or cancelled: the next attempt registers afresh if it must wait again.
                    # A completion that carried this request wrote its participants; the attempt that follows
                    # finds them present and answers without writing.
                    self._unregister(busy.request)

    @staticmethod
    def _forget_if_unpersisted(entry: _Shard, md: TransactionMetadata) -> None:
        if not md.is_persisted and md.pending_state is None and entry.txns.get(md.transactional_id) is md:
            del entry.txns[md.transactional_id]


# ---------------------------------------------------------------------------------------------- helpers


def _may_claim(md: TransactionMetadata, producer_id: int, producer_epoch: int) -> bool:
    """KIP-360: whether a caller naming this identity may re-initialise the id (Kafka ``isValidProducerId``)."""
    return (
        md.producer_epoch == NO_PRODUCER_EPOCH
        or producer_id == md.producer_id
        or (producer_id == md.previous_producer_id and is_epoch_exhausted(producer_epoch))
        or (md.state.is_prepare and producer_id == md.next_producer_id)
    )


def _client_identity(md: TransactionMetadata) -> ProducerIdAndEpoch:
    """Identity to hand out after a decision: the next producer id with epoch 0 when the epochs ran out."""
    if md.state.is_prepare and md.next_producer_id != NO_PRODUCER_ID:
        return ProducerIdAndEpoch(md.next_producer_id, 0)
    return ProducerIdAndEpoch(md.producer_id, md.producer_epoch)


def _timed_out(md: TransactionMetadata, now_ms: int) -> bool:
    return (
        md.state is TransactionState.ONGOING
        and md.pending_state is None
        and md.txn_start_timestamp + md.txn_timeout_ms < now_ms
    )


def _expirable(md: TransactionMetadata, now_ms: int, expiration_ms: int) -> bool:
    return (
        md.state.is_expirable
        and md.pending_state is None
        and md.is_persisted
        and md.txn_last_update_timestamp <= now_ms - expiration_ms
    )


__all__ = [
    "DEFAULT_COMPLETION_WAIT_MS",
    "DEFAULT_MAX_TRANSACTION_TIMEOUT_MS",
    "MAX_END_TXN_WAIT_MS",
    "Clock",
    "EndTxnOutcome",
    "MarkerCompletion",
    "MarkerSink",
    "ProducerIdAndEpoch",
    "ProducerIdSource",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionStore",
]
