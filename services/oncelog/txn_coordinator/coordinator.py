"""Decision logic of the transaction coordinator (Kafka's ``TransactionCoordinator``,
design/kafka-semantics.md §2.3-2.10).

Each request runs prepare -> persist -> complete -> reply:

1. under the transactional id's lock, validate the request against the cached metadata and prepare a
   :class:`~.metadata.TxnTransition` (this marks ``pending_state``);
2. release the lock and write the row through :class:`~.state_manager.TransactionStateManager`, conditional on the
   shard's coordinator epoch;
3. if the shard is still loaded at the same epoch, the state manager applies the row to its cache;
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
* Parking instead of rejecting. A request that Kafka answers CONCURRENT_TRANSACTIONS because the id's previous
  transaction is in Prepare* waits server-side for its completion instead (:mod:`.completion_waits`), at most
  ``completion_wait_ms`` and never past the caller's deadline. A pending write of another transition (not Prepare*)
  is still answered CONCURRENT_TRANSACTIONS at once: it can only come from a second concurrent request of the same
  producer, which Kafka's client never sends.
* Completion carries the next transaction. When the markers are acknowledged while the producer's first
  AddPartitions/AddOffsets of its next transaction is parked (with the identity Complete* hands out, and no
  InitProducerId parked before it), the completion writes that transaction's Ongoing row instead of Complete*:
  the table keeps one row per id, so Complete* followed by Ongoing and Ongoing alone leave the same durable
  state, and each commit cycle saves one database commit. Nothing is written before every marker is
  acknowledged, and the Ongoing row passes the same state-table checks as the request's own write would.
* A producer fenced by the transaction timeout gets PRODUCER_FENCED, as in Kafka; the KIP-588 idea of
  letting it claim the bumped epoch is not implemented (design/kafka-semantics.md §5.2).
* Transactional ids map to shards through the state manager's ``shard_for`` (the cluster-wide mapping that
  FindCoordinator uses); each loaded shard has one coordinator epoch.

Metrics: ``oncelog.transactions.open`` is kept by the state manager; ``oncelog.transactions.completed`` counts each
completed transaction by result, when its Complete* row (or the Ongoing row carrying it) is written.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Collection, Iterable, Mapping

from oncelog.catalog.topics import validate_group_id
from oncelog.errors import (
    ConcurrentTransactions,
    InvalidRequest,
    InvalidTransactionTimeout,
    InvalidTxnState,
    OncelogError,
    ProducerFenced,
)
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics
from oncelog.vocabulary import ProducerIdAndEpoch, TopicPartition

from .admin import skip_markers
from .completion_waits import CompletionWaits, ParkedRequest, PreviousTransactionCompleting
from .metadata import (
    LAST_USABLE_EPOCH,
    NO_PRODUCER_ID,
    IllegalTransitionError,
    TransactionMetadata,
    TxnTransition,
)
from .ports import Clock, EndTxnOutcome, MarkerCompletion, MarkerSink, ProducerIdSource
from .prepared import PreparedTransactionsMixin, prepare_keep_prepared
from .state import TransactionResult, TransactionState
from .state_manager import TransactionDescription, TransactionStateManager, TransactionStore, TxnMetadataCacheEntry
from .validation import (
    client_identity,
    end_txn_reply,
    foreign_producer_id,
    holds_next_identity,
    is_timed_out,
    may_claim,
    previous_completing,
)

log = logging.getLogger(__name__)

_PendingCompletion = tuple[TxnMetadataCacheEntry, TransactionMetadata, TransactionState, int, int]
"""What identifies the Prepare* an EndTxn waits to see completed: cache entry, metadata, state, producer id, epoch."""

DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
"""Kafka's ``transaction.max.timeout.ms`` default (15 minutes)."""
DEFAULT_COMPLETION_WAIT_MS = 5_000
"""How long a request arriving while the previous transaction completes is parked (see the module doc)."""
MAX_END_TXN_WAIT_MS = 60_000
"""Longest an EndTxn that waits for completion holds its reply when the call names no deadline."""

# ---------------------------------------------------------------------------------------------- coordinator


class TransactionCoordinator(PreparedTransactionsMixin):
    """Handles InitProducerId, AddPartitions/AddOffsets, EndTxn, the sweepers and admin requests.

    Args:
        state: the metadata cache of the loaded shards over the durable transaction table.
        producer_ids: source of fresh producer ids.
        markers: delivers markers and calls back when they are acknowledged.
        clock: milliseconds since the epoch.
        max_transaction_timeout_ms: upper bound for a producer's transaction timeout.
        completion_wait_ms: how long AddPartitions, AddOffsets and InitProducerId are parked while the id's
            previous transaction completes before they answer CONCURRENT_TRANSACTIONS; 0 answers at once,
            as Kafka does.
        metrics: where completed transactions are counted; the process-wide instruments by default.
    """

    def __init__(
        self,
        *,
        state: TransactionStateManager,
        producer_ids: ProducerIdSource,
        markers: MarkerSink,
        clock: Clock,
        max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
        completion_wait_ms: int = DEFAULT_COMPLETION_WAIT_MS,
        metrics: OncelogMetrics | None = None,
    ) -> None:
        self._waits = CompletionWaits(completion_wait_ms, state.shard_for)
        self._metrics = default_metrics() if metrics is None else metrics
        self._state = state
        self._producer_ids = producer_ids
        self._markers = markers
        self._clock = clock
        self._max_timeout_ms = max_transaction_timeout_ms

    # ------------------------------------------------------------------------------ shard ownership

    @property
    def owned_shards(self) -> Mapping[int, int]:
        """Loaded shards and their coordinator epochs (shards still loading excluded)."""
        return self._state.owned_shards

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
        entry = self._state.begin_loading(shard, coordinator_epoch)
        self._waits.wake_shard(shard)
        if not await self._state.load(entry):
            return []
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
        if self._state.unload(shard, coordinator_epoch):
            self._waits.wake_shard(shard)

    # ------------------------------------------------------------------------------ InitProducerId

    async def init_producer_id(
        self,
        transactional_id: str | None,
        txn_timeout_ms: int,
        expected_pid: int | None = None,
        expected_epoch: int | None = None,
        *,
        max_wait_ms: int | None = None,
        keep_prepared: bool = False,
    ) -> ProducerIdAndEpoch:
        """InitProducerId (design/kafka-semantics.md §2.3): give the caller the identity it must use, fencing older
        instances.

        ``expected_pid``/``expected_epoch`` are the caller's current identity (KIP-360); both or neither.
        Without a transactional id (idempotent producer) a fresh producer id with epoch 0 is returned.
        While the previous transaction's markers are being written the call is parked (module doc), at most
        ``completion_wait_ms`` and ``max_wait_ms`` (the caller's remaining deadline). A PREPARED transaction is
        fenced and aborted like an Ongoing one, unless ``keep_prepared``: then it stays prepared for the new owner
        (design/kafka-semantics.md §5.7).

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
        return await self._waits.run_parked(
            functools.partial(self._init_transactional, transactional_id, txn_timeout_ms, expected, keep_prepared),
            max_wait_ms,
        )

    async def _init_transactional(
        self, transactional_id: str, txn_timeout_ms: int, expected: tuple[int, int] | None, keep_prepared: bool
    ) -> ProducerIdAndEpoch:
        entry = self._state.entry_for(transactional_id)
        async with self._state.lock(transactional_id):
            self._state.check_still_owned(entry)
            md = entry.txns.get(transactional_id)
            if md is None:
                producer_id = await self._producer_ids.next_id()
                self._state.check_still_owned(entry)
                md = TransactionMetadata.new(transactional_id, producer_id, txn_timeout_ms, self._clock())
                # Published before the write so a concurrent InitProducerId sees the pending latch.
                entry.txns[transactional_id] = md
            try:
                transition = await self._prepare_init(entry, md, txn_timeout_ms, expected, keep_prepared)
            except BaseException:
                self._state.forget_if_unpersisted(entry, md)
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
        entry: TxnMetadataCacheEntry,
        md: TransactionMetadata,
        txn_timeout_ms: int,
        expected: tuple[int, int] | None,
        keep_prepared: bool = False,
    ) -> TxnTransition:
        if md.pending_state is not None:
            raise ConcurrentTransactions(f"transactional id {md.transactional_id!r} has a transition in flight")
        if expected is not None and not may_claim(md, *expected):
            raise ProducerFenced(
                f"transactional id {md.transactional_id!r} is owned by producer id {md.producer_id}, not {expected[0]}"
            )
        state = md.state
        if state.is_prepare:
            raise self._completing(
                md, f"transactional id {md.transactional_id!r}: markers of the last transaction are being written"
            )
        if state is TransactionState.ONGOING or (state is TransactionState.PREPARED and not keep_prepared):
            return md.prepare_fence_and_abort(self._clock())
        if state is TransactionState.PREPARED:
            return prepare_keep_prepared(md, txn_timeout_ms, None if expected is None else expected[1], self._clock())
        if state is TransactionState.EMPTY or state.is_complete:
            expected_epoch = None if expected is None else expected[1]
            if md.is_epoch_exhausted and (expected_epoch is None or expected_epoch == md.producer_epoch):
                new_producer_id = await self._producer_ids.next_id()
                self._state.check_still_owned(entry)
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
        groups: Collection[str] = (),
        max_wait_ms: int | None = None,
    ) -> None:
        """AddPartitionsToTxn (design/kafka-semantics.md §2.4): make ``partitions`` participants of the open
        transaction, and ``groups`` too (each as AddOffsetsToTxn would add it) in the same write.

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
        for group in groups:
            validate_group_id(group, "AddPartitionsToTxn group id")
        add = functools.partial(
            self._add_participants,
            transactional_id,
            producer_id,
            producer_epoch,
            frozenset(partitions),
            frozenset(groups),
        )
        await self._waits.run_parked(add, max_wait_ms)

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
        await self._waits.run_parked(add, max_wait_ms)

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
        entry = self._state.entry_for(transactional_id)
        request = ParkedRequest(transactional_id, producer_id, producer_epoch, partitions, groups)
        async with self._state.lock(transactional_id):
            self._state.check_still_owned(entry)
            md = self._state.known(entry, transactional_id)
            if md.producer_id != producer_id:
                if holds_next_identity(md, producer_id, producer_epoch):
                    raise self._completing(md, previous_completing(md), request)
                raise foreign_producer_id(md, producer_id, producer_epoch)
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
            if md.state is TransactionState.PREPARED:
                raise InvalidTxnState(f"transactional id {transactional_id!r} is prepared: nothing may be added to it")
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
        identity, _ = await self._end_txn(transactional_id, producer_id, producer_epoch, commit, None)
        return identity

    async def end_txn_and_wait(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        max_wait_ms: int | None = None,
        *,
        token: tuple[int, int] | None = None,
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
        identity, pending = await self._end_txn(transactional_id, producer_id, producer_epoch, commit, token)
        completed = True
        if pending is not None:
            entry, md, prepared, producer_id, producer_epoch = pending
            wait_ms = MAX_END_TXN_WAIT_MS if max_wait_ms is None else min(max_wait_ms, MAX_END_TXN_WAIT_MS)
            completed = await self._waits.wait_until_left(
                md, (prepared, producer_id, producer_epoch), wait_ms, still_loaded=lambda: self._state.is_current(entry)
            )
        return EndTxnOutcome(identity, completed)

    async def _end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, token: tuple[int, int] | None
    ) -> tuple[ProducerIdAndEpoch, _PendingCompletion | None]:
        """EndTxn's decision; also returns what completion to wait for, None when the transaction is complete."""
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
        entry = self._state.entry_for(transactional_id)
        async with self._state.lock(transactional_id):
            self._state.check_still_owned(entry)
            md = self._state.known(entry, transactional_id)
            reply = end_txn_reply(md, producer_id, producer_epoch, result, token=token)
            if reply is not None:
                return reply, self._pending_completion(entry, md)
            next_producer_id = NO_PRODUCER_ID
            if md.is_epoch_exhausted:
                next_producer_id = await self._producer_ids.next_id()
                self._state.check_still_owned(entry)
            transition = md.prepare_end_transaction(result, self._clock(), next_producer_id=next_producer_id)
        await self._persist(entry, md, transition)
        self._send_markers(entry, md)
        return client_identity(md), self._pending_completion(entry, md)

    @staticmethod
    def _pending_completion(entry: TxnMetadataCacheEntry, md: TransactionMetadata) -> _PendingCompletion | None:
        """What identifies the Prepare* ``md`` is in, so a waiter can tell when it is over (None: not Prepare*)."""
        if not md.state.is_prepare:
            return None
        return entry, md, md.state, md.producer_id, md.producer_epoch

    # ------------------------------------------------------------------------------ marker completion

    async def _complete_transaction(
        self,
        entry: TxnMetadataCacheEntry,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
    ) -> None:
        """Marker sink callback: write Complete* for the Prepare* the markers were sent for.

        When the producer's next AddPartitions/AddOffsets is already parked, the row written is the next
        transaction's Ongoing instead (see :meth:`CompletionWaits.carried_transaction`). A duplicate call, or one for a
        transaction that has moved on, does nothing.
        """
        async with self._state.lock(transactional_id):
            self._state.check_still_owned(entry)
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
            follow = self._waits.carried_transaction(transactional_id, transition, now_ms)
        await self._persist(entry, md, transition, follow=follow)
        self._metrics.record_transaction_completed(result.value.lower())

    def _send_markers(self, entry: TxnMetadataCacheEntry, md: TransactionMetadata) -> None:
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
        for entry in self._state.loaded():
            for md in list(entry.txns.values()):
                if not is_timed_out(md, now_ms):
                    continue
                try:
                    fenced = await self._abort_ifis_timed_out(
                        entry, md.transactional_id, (md.producer_id, md.producer_epoch), now_ms
                    )
                except OncelogError as error:
                    log.warning("timeout abort of %r failed: %r", md.transactional_id, error)
                    continue
                if fenced:
                    aborted.append(md.transactional_id)
        return aborted

    async def expire_transactional_ids(self, now_ms: int, expiration_ms: int) -> list[str]:
        """Remove ids idle for ``expiration_ms`` with no open transaction (design/kafka-semantics.md §2.8), through
        :meth:`TransactionStateManager.remove_expired_transactional_ids`.

        Returns:
            The transactional ids removed.
        """
        expired = await self._state.remove_expired_transactional_ids(now_ms, expiration_ms)
        for transactional_id in expired:
            self._waits.wake(transactional_id)
        return expired

    # ------------------------------------------------------------------------------ admin (KIP-664)

    async def abort_transaction(self, transactional_id: str) -> TransactionDescription:
        """Abort the open transaction of ``transactional_id`` on an operator's request (KIP-664).

        An Ongoing or PREPARED transaction is fenced and aborted exactly like a timed-out one. Nothing is done when no
        transaction is open or an abort is already under way. Hanging transactions that have no
        coordinator state at all are aborted on the storage node instead (design/kafka-semantics.md §5.4).

        Raises:
            TransactionalIdNotFound: the id is unknown.
            InvalidTxnState: the transaction is committing; a durable commit is never turned into an abort.
            ConcurrentTransactions: a transition is in flight.
        """
        if not transactional_id:
            raise InvalidRequest("transactional id must not be empty")
        entry = self._state.entry_for(transactional_id)
        async with self._state.lock(transactional_id):
            md = self._state.persisted(entry, transactional_id)
            if md.pending_state is not None:
                raise ConcurrentTransactions(f"transactional id {transactional_id!r} has a transition in flight")
            if md.state is TransactionState.PREPARE_COMMIT:
                raise InvalidTxnState(f"transactional id {transactional_id!r} is committing; it cannot be aborted")
            if md.state not in (TransactionState.ONGOING, TransactionState.PREPARED):
                return TransactionDescription.of(md)
            transition = md.prepare_fence_and_abort(self._clock())
        await self._persist(entry, md, transition)
        self._send_markers(entry, md)
        log.info("aborted transaction of %r on request, producer %d epoch %d", transactional_id, *client_identity(md))
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
        return await skip_markers(self._state, self._markers, transactional_id, partitions, groups)

    async def _abort_ifis_timed_out(
        self, entry: TxnMetadataCacheEntry, transactional_id: str, identity: tuple[int, int], now_ms: int
    ) -> bool:
        """PrepareEpochFence + PrepareAbort for a timed-out transaction, then markers (design/kafka-semantics.md §2.7).

        Skipped when a client request got there first (other identity, state or a pending write).
        """
        async with self._state.lock(transactional_id):
            self._state.check_still_owned(entry)
            md = entry.txns.get(transactional_id)
            if md is None or not is_timed_out(md, now_ms) or (md.producer_id, md.producer_epoch) != identity:
                return False
            transition = md.prepare_fence_and_abort(now_ms)
        await self._persist(entry, md, transition)
        self._send_markers(entry, md)
        return True

    # ------------------------------------------------------------------------------ describe / list

    def describe(self, transactional_ids: Iterable[str]) -> dict[str, TransactionDescription | OncelogError]:
        """DescribeTransactions: per id, its description or the error explaining why there is none."""
        return self._state.describe(transactional_ids)

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
        return self._state.list_transactions(self._clock(), states, producer_ids, older_than_ms)

    # ------------------------------------------------------------------------------ plumbing

    async def _persist(
        self,
        entry: TxnMetadataCacheEntry,
        md: TransactionMetadata,
        transition: TxnTransition,
        *,
        follow: TxnTransition | None = None,
    ) -> None:
        """Write ``transition`` and apply it to the cache through the state manager (``follow``: see
        :meth:`CompletionWaits.carried_transaction`); whatever the outcome, wake the requests waiting on the id."""
        try:
            await self._state.append(entry, md, transition, follow=follow)
        finally:
            self._waits.wake(md.transactional_id)

    def _completing(
        self, md: TransactionMetadata, message: str, request: ParkedRequest | None = None
    ) -> PreviousTransactionCompleting:
        """The parkable CONCURRENT_TRANSACTIONS for ``md`` (see :meth:`CompletionWaits.completing`)."""
        return self._waits.completing(md.transactional_id, message, request)


__all__ = [
    # the ports and answers are re-exported: callers import the coordinator's vocabulary from here
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
