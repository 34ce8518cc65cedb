"""PartitionEngine: one partition's log, producer state and aborted-transaction index behind one lock.

This is the partition half of Kafka's ``UnifiedLog`` + ``ReplicaManager`` for a single-replica partition
(design/architecture.md §4): it validates client batches (design/kafka-semantics.md §4.2), assigns offsets, appends,
writes transaction markers
(design/kafka-semantics.md §3.3), tracks the high watermark and the last stable offset (design/kafka-semantics.md §4.3),
answers fetches with the
aborted transactions a read_committed reader must drop (design/kafka-semantics.md §4.4, §4.5), and rebuilds all of it on
open from
the newest producer-state snapshot plus a replay of the log tail (design/kafka-semantics.md §4.6).

Concurrency model
-----------------
Everything runs on the event loop of the process, and the :class:`PartitionLog` methods other than
``flush`` are only ever called from the loop thread, which is the single thread the log requires:

* **Writes** (data appends, markers, retention, close) hold the engine's ``asyncio.Lock``. The critical
  section itself is synchronous: duplicate check, producer-state validation, one ``writev`` into the page
  cache, transaction-index entries and the producer-state commit run without yielding, so a request's
  validation can never go stale and appends to one partition are strictly ordered. The lock exists for the
  few steps that must wait while excluding writers (close, and waiting for a snapshot to become durable).
* **Durability** is awaited *after* the lock is released. Each write registers the offset it needs durable;
  one pump task per engine runs one fsync at a time in a flush thread (:class:`FlushCoordinator`), and each
  fsync covers every write made before it started, so all appends that arrived during an fsync share the
  next one (group commit). Producer state is committed right after the write, before the fsync, so the next
  request already sees this one's sequences; the acknowledgement waits for the fsync. With ``flush=async``
  topics nothing waits.
* **Reads** (fetch, list offsets, describe) take no lock: they are synchronous on the loop, so they see
  either all or none of an append. They never return data above the high watermark.
* **High watermark.** With one replica, HW is the end of the fsynced log (``flush=sync``) or the log end
  (``flush=async``). A replicated partition sets :attr:`PartitionEngine.high_watermark_limit`, which caps that
  candidate by what the replicas allow (leader: min LEO over the ISR; follower: the leader's HW), and waits for
  it in acknowledgements; :meth:`PartitionEngine.append_copied` appends a leader's batches on a follower.
  Whenever HW or the LSO may have moved, the current :meth:`PartitionEngine.changed` event is set and
  replaced, which wakes long-polling fetches.

If a write or an fsync fails half way, the page cache and the producer state may disagree with the disk, so
the engine goes offline for good (every call raises ``StorageUnavailable``) and the process must be
restarted to recover the partition from its files: the behaviour of Kafka's offline log directory.

Snapshot invariant: a producer-state snapshot at offset S is written only after everything below S (batches
and ``.txnindex`` entries) is durable. Recovery therefore trusts the index entries of markers below S and
rebuilds every entry at or above S by replaying the log from S through the producer state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path

from oncelog.errors import (
    InvalidRequest,
    OffsetOutOfRange,
    OncelogError,
    StorageUnavailable,
)
from oncelog.partition_storage.engine_reads import find_offset, read_fetch
from oncelog.partition_storage.engine_recovery import apply_logged_batch, load_epochs, recover
from oncelog.partition_storage.engine_types import (
    AppendResult,
    EngineConfig,
    FetchResult,
    ListedOffset,
    OffsetSpec,
    PendingAppend,
    TxnMarkerSpec,
)
from oncelog.partition_storage.flush_coordinator import FlushCoordinator, GroupCommit
from oncelog.partition_storage.high_watermark_checkpoint import read_high_watermark, write_high_watermark
from oncelog.partition_storage.leader_epoch_cache import LeaderEpochCache
from oncelog.partition_storage.partition_log import PartitionLog
from oncelog.partition_storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    ProducerAppendInfo,
    ProducerDescription,
    ProducerStateManager,
)
from oncelog.partition_storage.txn_index import AbortedTxn, TransactionIndex
from oncelog.partition_storage.write_validation import ClientBatch, parse_client_batches, stage_markers
from oncelog.records import iter_batches
from oncelog.torture import mutants
from oncelog.vocabulary import IsolationLevel

__all__ = [
    "AppendResult",
    "EngineConfig",
    "FetchResult",
    "OffsetSpec",
    "PartitionEngine",
    "PendingAppend",
    "TxnMarkerSpec",
]

log = logging.getLogger(__name__)


class PartitionEngine:
    """One partition's storage engine; see the module docstring for the concurrency model.

    Create it with :meth:`open`, which runs recovery. ``leader_epoch`` is the partition's current leader
    epoch from the catalog, stamped into every batch written (as Kafka's ``partitionLeaderEpoch``).
    """

    def __init__(
        self,
        log_: PartitionLog,
        producers: ProducerStateManager,
        txn_indexes: dict[int, TransactionIndex],
        config: EngineConfig,
        *,
        clock: Callable[[], int],
        flush_executor: Executor | None = None,
        leader_epoch: int = 0,
        epochs: LeaderEpochCache | None = None,
        replicated: bool = False,
    ) -> None:
        """Use :meth:`open`; this constructor takes already recovered parts."""
        # which leader epoch started at which offset of this log (docs/design/replication.md §5)
        self.epochs = LeaderEpochCache() if epochs is None else epochs
        self._log = log_
        self._producers = producers
        self._txn_indexes = txn_indexes
        self.config = config
        self._clock = clock
        self.leader_epoch = leader_epoch
        self._lock = asyncio.Lock()
        self._group_commit = GroupCommit(
            FlushCoordinator(log_.flush, executor=flush_executor),
            lambda: log_.recovery_point,
            log_.directory.name,
            on_durable=self._on_durable,
            on_failure=self._on_fsync_failure,
        )
        # recovery flushed everything it kept, so the whole log is durable; a replicated partition starts at its
        # checkpointed HW instead (docs/design/replication.md §4): what is above it was never confirmed by followers
        self.replicated = replicated
        self._high_watermark = (
            read_high_watermark(log_.directory, log_.log_start_offset, log_.log_end_offset)
            if replicated
            else log_.log_end_offset
        )
        self._producers.on_high_watermark_update(self._high_watermark)
        self._changed = asyncio.Event()
        self._appended = asyncio.Event()
        # replication (docs/design/replication.md §4): maps the local HW candidate (durable end for flush=sync,
        # log end otherwise) to the HW the replicas allow; None for a partition with one replica
        self.high_watermark_limit: Callable[[int], int] | None = None
        # replication: raises instead of acknowledging a write the HW passed while the ISR was too small
        self.acknowledge_check: Callable[[], None] | None = None
        # replication: raises once this node stopped leading, failing a write still waiting for the HW at once
        self.leadership_check: Callable[[], None] | None = None
        self._snapshot_tasks: set[asyncio.Task[None]] = set()
        self._snapshot_lock = asyncio.Lock()
        self._failure: BaseException | None = None
        self._closed = False

    # ---------------------------------------------------------------------------------------------- opening

    @classmethod
    async def open(
        cls,
        directory: str | Path,
        config: EngineConfig,
        *,
        clock: Callable[[], int],
        flush_executor: Executor | None = None,
        leader_epoch: int = 0,
        replicated: bool = False,
    ) -> PartitionEngine:
        """Open (creating if needed) and recover the partition stored in ``directory``; a ``replicated`` one
        starts at its checkpointed high watermark and writes that checkpoint with the recovery point and on close.

        The file work (segment recovery, snapshot load, replay, index rebuild) runs in a worker thread.

        Raises:
            StorageUnavailable: the directory is held by another engine or cannot be read.
            InvalidConfig: a setting is out of range.
        """
        log_, producers, indexes = await asyncio.to_thread(recover, Path(directory), config, clock)
        epochs = await asyncio.to_thread(load_epochs, log_)
        return cls(
            log_,
            producers,
            indexes,
            config,
            clock=clock,
            flush_executor=flush_executor,
            leader_epoch=leader_epoch,
            epochs=epochs,
            replicated=replicated,
        )

    # -------------------------------------------------------------------------------------------- offsets

    @property
    def directory(self) -> Path:
        """The partition's directory."""
        return self._log.directory

    @property
    def log_start_offset(self) -> int:
        """First offset still stored."""
        return self._log.log_start_offset

    @property
    def log_end_offset(self) -> int:
        """Offset the next record gets (may be above the high watermark until the fsync)."""
        return self._log.log_end_offset

    @property
    def high_watermark(self) -> int:
        """Offset after the last acknowledged-durable record; read_uncommitted reads stop here."""
        return self._high_watermark

    @property
    def last_stable_offset(self) -> int:
        """First offset of the earliest undecided transaction, or the high watermark
        (design/kafka-semantics.md §4.3)."""
        lso = self._producers.last_stable_offset(self._high_watermark)
        # a transaction whose start was deleted by retention must not pin the LSO below the log start
        return max(lso, min(self._log.log_start_offset, self._high_watermark))

    @property
    def flush_count(self) -> int:
        """fsyncs started by group commit so far (appends per fsync = appends / this)."""
        return self._group_commit.flush_count

    @property
    def online(self) -> bool:
        """False once closed or after a write or fsync failure."""
        return not self._closed and self._failure is None

    def changed(self) -> asyncio.Event:
        """An event set the next time the high watermark or the LSO may have moved (or the engine closes).

        Take the event *before* checking the offsets, then wait on it: no change can be missed.
        """
        return self._changed

    def _notify(self) -> None:
        event, self._changed = self._changed, asyncio.Event()
        event.set()

    def wake_waiters(self) -> None:
        """Wake every wait on :meth:`changed` (writes waiting for the HW re-check :attr:`leadership_check`)."""
        self._notify()

    def appended(self) -> asyncio.Event:
        """An event set at the next append or close (the log end moved); replica fetches long-poll on it."""
        return self._appended

    def refresh_high_watermark(self) -> int:
        """Re-apply :attr:`high_watermark_limit` after the replicas moved (a follower fetched, a leader HW
        arrived); returns the high watermark."""
        self._advance_high_watermark(self._log.recovery_point if self.config.flush_sync else self._log.log_end_offset)
        return self._high_watermark

    # --------------------------------------------------------------------------------------------- append

    async def append(self, records: bytes | memoryview) -> AppendResult:
        """Validate and append one or more client batches, then wait until they are acknowledged.

        Equivalent to ``await (await self.write(records)).wait()``.
        """
        pending = await self.write(records)
        return await pending.wait()

    async def write(self, records: bytes | memoryview) -> PendingAppend:
        """Validate and write client batches to the log and the producer state; durability is awaited later.

        Leading batches that repeat one of their producer's last 5 batches are not written again: their
        original offsets are answered (design/kafka-semantics.md §4.2 rule 1). The rest is validated batch by batch
        against the
        producer state; any failure rejects the whole request and nothing is appended.

        Raises:
            CorruptMessage: truncated or trailing bytes, a bad header, or a CRC32C mismatch.
            InvalidRecord: an empty request, a control batch (only the coordinator writes markers), or a
                batch whose content is inconsistent.
            MessageTooLarge: a batch exceeds ``max_message_bytes``.
            InvalidProducerEpoch, OutOfOrderSequence, InvalidTxnState: producer-state validation
            (design/kafka-semantics.md §4.2).
            StorageUnavailable: the partition is offline or closed, or the write failed.
        """
        self._check_online()
        batches = parse_client_batches(records, self.config.max_message_bytes, self.config.validate_records)
        async with self._lock:
            self._check_online()
            return self._write_locked(batches)

    def _write_locked(self, batches: list[ClientBatch]) -> PendingAppend:
        producers = self._producers
        duplicates: list[BatchMetadata] = []
        for batch in batches:
            header = batch.header
            if not header.has_producer_id:
                break
            original = producers.check_duplicate(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence
            )
            if original is None:
                break
            duplicates.append(original)
        fresh = batches[len(duplicates) :]
        if not fresh:
            result = AppendResult(duplicates[0].first_offset, duplicates[-1].last_offset, self.log_start_offset, True)
            return PendingAppend(self, result, duplicates[-1].last_offset + 1)

        info = producers.prepare_append(AppendOrigin.CLIENT)
        offset = self._log.log_end_offset
        for batch in fresh:
            header = batch.header
            last = offset + header.last_offset_delta
            if header.has_producer_id:
                info.append_data_batch(
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                    header.last_sequence,
                    offset,
                    last,
                    header.max_timestamp,
                    header.is_transactional,
                )
            offset = last + 1
        ranges = self._append_to_log([batch.data for batch in fresh], info)
        first = duplicates[0].first_offset if duplicates else ranges[0][0]
        result = AppendResult(
            first,
            ranges[-1][1],
            self.log_start_offset,
            False,
            appended_records=sum(batch.header.record_count for batch in fresh),
            appended_bytes=sum(len(batch.data) for batch in fresh),
        )
        return PendingAppend(self, result, ranges[-1][1] + 1)

    def _append_to_log(
        self, batches: Sequence[bytes | memoryview], info: ProducerAppendInfo, *, copied: bool = False
    ) -> list[tuple[int, int]]:
        """Write, index aborted transactions, commit the producer state; snapshot if the log rolled.

        Called with the lock held and without yielding, so ``info`` cannot go stale. ``copied`` batches come
        from the leader and keep the leader epoch they carry; others are stamped with this engine's epoch.
        """
        log_ = self._log
        expected = log_.log_end_offset
        active_before = log_.active_segment_base
        try:
            epoch = None if copied else self.leader_epoch
            self._assign_epochs(batches, expected, epoch)
            ranges = log_.append(batches, partition_leader_epoch=epoch)  # type: ignore[arg-type]
        except StorageUnavailable as err:
            if not err.definite:
                self._fail(err)
            raise
        if ranges[0][0] != expected:  # pragma: no cover - guarded by the lock and the synchronous section
            self._fail(AssertionError(f"log assigned offset {ranges[0][0]}, producer state expected {expected}"))
            raise StorageUnavailable("offset assignment diverged from the producer state", definite=False)
        if log_.active_segment_base != active_before and self._producers.map_end_offset == expected:
            # the state not yet committed is exactly the state at the new segment's base
            # (design/kafka-semantics.md §4.6)
            self._schedule_snapshot(log_.active_segment_base, self._producers.snapshot())
        try:
            for txn in info.aborted_txns:
                self._index_aborted(txn)
        except (StorageUnavailable, ValueError) as err:
            self._fail(err)
            raise StorageUnavailable(f"cannot index aborted transaction: {err}", definite=False) from err
        self._producers.commit(info)
        self._producers.update_map_end_offset(log_.log_end_offset)
        if not self.config.flush_sync:
            self._advance_high_watermark(log_.log_end_offset)
        event, self._appended = self._appended, asyncio.Event()
        event.set()
        return ranges

    def _assign_epochs(self, batches: Sequence[bytes | memoryview], first_offset: int, stamp: int | None) -> None:
        """Record where a new leader epoch starts before its first batch is written (Kafka assigns it too).

        ``stamp`` is the epoch every batch gets, or None for copied batches, which carry the leader's.
        """
        if stamp is not None:
            if stamp > self.epochs.latest_epoch:
                self.epochs.assign(stamp, first_offset)
            return
        for batch in batches:
            for header, _ in iter_batches(batch):
                if header.partition_leader_epoch > self.epochs.latest_epoch:
                    self.epochs.assign(header.partition_leader_epoch, header.base_offset)

    async def append_copied(self, records: bytes | memoryview) -> int:
        """Append batches copied from the partition's leader exactly as they are; returns the new log end.

        The follower half of replication (docs/design/replication.md §3): offsets and leader epochs stay the
        leader's, and the producer state, transaction index and snapshots are rebuilt from the bytes by the same
        apply step recovery uses (``engine_recovery.apply_logged_batch``), so this replica answers duplicate checks
        and read_committed fetches as the leader does. Nothing is acknowledged here: the caller reports progress to
        the leader, and the high watermark follows :attr:`high_watermark_limit`.

        Raises:
            CorruptMessage: a batch is truncated or fails its CRC (nothing is appended).
            InvalidRequest: the first batch does not start at the log end, or the batches are not contiguous.
            StorageUnavailable: the partition is offline, or the write failed.
        """
        self._check_online()
        batches = list(iter_batches(records, verify_crc=True))
        if not batches:
            return self._log.log_end_offset
        async with self._lock:
            self._check_online()
            expected = self._log.log_end_offset
            for header, _ in batches:
                if header.base_offset != expected:
                    raise InvalidRequest(
                        f"copied batch starts at offset {header.base_offset} but {self._log.directory.name} "
                        f"expects {expected}"
                    )
                expected = header.last_offset + 1
            info = self._producers.prepare_append(AppendOrigin.REPLICATION)
            for header, batch in batches:
                apply_logged_batch(info, header, batch, self._log)
            self._append_to_log([batch for _, batch in batches], info, copied=True)
            return self._log.log_end_offset

    def read_copy(self, offset: int, max_bytes: int) -> bytes:
        """Whole batches from ``offset`` up to the log end (not the HW) for a follower; at least one batch.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or above the log end.
            StorageUnavailable: the partition is offline or closed.
        """
        self._check_online()
        start, end = self._log.log_start_offset, self._log.log_end_offset
        if not start <= offset <= end:
            raise OffsetOutOfRange(
                f"replica fetch offset {offset} is outside [{start}, {end}] of {self._log.directory.name}"
            )
        data, _ = self._log.read(offset, max_bytes, end)
        return data

    def _index_aborted(self, txn: AbortedTxn) -> None:
        base = self._log.segment_base_for(txn.last_offset)
        index = self._txn_indexes.get(base)
        if index is None:
            index = self._txn_indexes[base] = TransactionIndex(base)
        self._log.append_txn_index_entry(base, index.append(txn))

    # -------------------------------------------------------------------------------------------- markers

    async def write_markers(self, markers: Sequence[TxnMarkerSpec]) -> list[OncelogError | None]:
        """Write COMMIT/ABORT markers for this partition and wait until they are fsynced, even on a
        ``flush=async`` topic (design/exactly-once-audit.md §3).

        All markers that pass validation go into one append (one control batch each) and share one fsync.
        A marker that repeats one already applied is acknowledged without being written again. Each marker
        gets its own outcome: ``None`` for success, else the error (``InvalidProducerEpoch``,
        ``TransactionCoordinatorFenced``); a failure of one never affects the others.

        Raises:
            StorageUnavailable: the partition is offline, or the write or its fsync failed; no outcome is
                known for any marker.
        """
        self._check_online()
        async with self._lock:
            self._check_online()
            info = self._producers.prepare_append(AppendOrigin.COORDINATOR)
            offset = self._log.log_end_offset
            strict = self.config.strict_marker_epoch
            batches, outcomes = stage_markers(self._producers, info, markers, offset, self._clock(), strict)
            if batches:
                self._append_to_log(batches, info)
            # a repeated marker is acknowledged once whatever applied it first is durable
            durable_offset = self._log.log_end_offset
        # Markers are fsynced before they are acknowledged whatever the topic's flush setting: the coordinator
        # writes Complete* on the acknowledgement, and a marker lost after that leaves its transaction open on
        # the partition for good (the LSO stuck). Losing flush=async data is the topic's contract; this is not.
        await self._await_durable(durable_offset)
        await self._await_high_watermark(durable_offset)
        return outcomes

    # ----------------------------------------------------------------------------------------- durability

    async def _await_high_watermark(self, offset: int) -> None:
        """Return once the high watermark is at or above ``offset`` (fsyncing through group commit)."""
        self._check_waiting_write()
        if self._high_watermark >= offset or mutants.active("ack-before-durable"):
            return
        await self._await_durable(offset)
        self._advance_high_watermark(self._log.recovery_point)
        while self._high_watermark < offset:  # replicated: the in-sync followers have yet to confirm it
            self._check_online()
            if self.leadership_check is not None:
                self.leadership_check()
            await self._changed.wait()

    async def _await_durable(self, offset: int) -> None:
        """Return once everything below ``offset`` is fsynced, whatever the topic's flush setting."""
        if self._log.recovery_point >= offset:
            return
        self._check_waiting_write()
        await self._group_commit.wait(offset)

    def _on_durable(self, durable: int) -> None:
        if self.config.flush_sync:
            self._advance_high_watermark(durable)

    def _on_fsync_failure(self, err: BaseException) -> None:
        if not self._closed:
            self._fail(err)

    def _advance_high_watermark(self, offset: int) -> None:
        if self.high_watermark_limit is not None:
            offset = self.high_watermark_limit(offset)
        if offset > self._high_watermark:
            self._high_watermark = offset
            self._producers.on_high_watermark_update(offset)
            self._notify()

    async def flush(self) -> None:
        """Make everything written so far durable (the periodic flush of ``flush=async`` topics)."""
        self._check_online()
        await self._await_durable(self._log.log_end_offset)

    async def checkpoint(self) -> None:
        """Persist the recovery point, bounding the rescan after a crash (Kafka does it every 60 s), and the high
        watermark of a replicated partition."""
        self._check_online()
        await asyncio.to_thread(self._log.checkpoint_recovery_point)
        if self.replicated:
            await asyncio.to_thread(write_high_watermark, self._log.directory, self._high_watermark)

    def _check_online(self) -> None:
        if self._failure is not None:
            raise StorageUnavailable(
                f"partition {self._log.directory.name} is offline after an I/O failure: {self._failure}; "
                f"restart the storage node to recover it",
                definite=False,
            )
        if self._closed:
            raise StorageUnavailable(f"partition {self._log.directory.name} is closed", definite=True)

    def _check_waiting_write(self) -> None:
        """:meth:`_check_online` for a wait on data already in the log: closing never makes it definite.

        ``close()`` flushes what was written, so a write waiting for its fsync when the partition closes
        (leadership moved, shutdown) may well survive: reporting it as definitely failed would make an
        idempotent producer that gave up tell its user so, and a re-send would duplicate it.
        """
        if self._closed and self._failure is None:
            raise StorageUnavailable(
                f"partition {self._log.directory.name} closed while a write waited for its fsync; the write is "
                "in the log and may survive, so its outcome is unknown: retry it with the same producer identity "
                "(it is deduplicated) on the new leader",
                definite=False,
            )
        self._check_online()

    def _fail(self, err: BaseException) -> None:
        if self._failure is None:
            self._failure = err
            log.error("partition %s is offline: %s", self._log.directory, err)
            self._notify()

    # ---------------------------------------------------------------------------------------------- reads

    def read(self, offset: int, max_bytes: int, isolation: IsolationLevel) -> FetchResult:
        """Whole batches from the one holding ``offset``, up to the high watermark or the LSO
        (design/kafka-semantics.md §4.5).

        At most ``max_bytes`` unless the first batch alone is larger (it is returned whole). For
        read_committed the aborted transactions overlapping ``[offset, next_offset)`` are listed so the
        reader drops their data; control batches are returned like data and filtered by the reader.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or above the log end.
            InvalidRequest: ``max_bytes`` is negative.
            StorageUnavailable: the partition is offline or closed.
        """
        self._check_online()
        committed = isolation is IsolationLevel.READ_COMMITTED
        hw, lso = self._high_watermark, self.last_stable_offset
        return read_fetch(self._log, self._txn_indexes, offset, max_bytes, hw, lso, committed=committed)

    def list_offset(self, spec: OffsetSpec, isolation: IsolationLevel, timestamp_ms: int = -1) -> ListedOffset:
        """Offset, timestamp and leader epoch for ListOffsets; offset -1 when no readable record has that timestamp.

        EARLIEST is the log start, LATEST the high watermark (read_uncommitted) or the LSO (read_committed),
        and TIMESTAMP the first record with a timestamp at or after ``timestamp_ms`` below that bound
        (read_committed cannot find undecided data, design/kafka-semantics.md §4.3). The epoch is this leader's
        for LATEST, else that of the leader which appended the offset (-1 unknown), as Kafka's leader answers.

        Raises:
            InvalidRequest: a negative timestamp for TIMESTAMP.
            StorageUnavailable: the partition is offline or closed.
        """
        self._check_online()
        bound = self.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else self._high_watermark
        return find_offset(self._log, self.epochs, spec, bound, timestamp_ms, self.leader_epoch)

    def describe_producers(self) -> list[ProducerDescription]:
        """Every producer with state on the partition (DescribeProducers, KIP-664)."""
        self._check_online()
        return self._producers.describe_producers()

    # ------------------------------------------------------------------------------------------ maintenance

    async def expire_producers(self) -> list[int]:
        """Forget producers idle past ``producer_id_expiration_ms`` without an open transaction
        (design/kafka-semantics.md §4.7)."""
        self._check_online()
        async with self._lock:
            return self._producers.remove_expired_producers()

    def reconfigure(self, config: EngineConfig) -> bool:
        """Apply changed settings (a topic config altered in the catalog) to the open partition; False when
        nothing changed. Segment rolling, retention, the largest batch and ``flush`` follow the new values from
        the next append or retention pass on."""
        if config == self.config:
            return False
        self._log.reconfigure(
            segment_bytes=config.segment_bytes,
            segment_ms=config.segment_ms,
            retention_bytes=config.retention_bytes,
            retention_ms=config.retention_ms,
        )
        self.config = config
        return True

    async def enforce_retention(self) -> list[int]:
        """Delete whole segments beyond the topic's retention, never past the high watermark; returns their bases."""
        self._check_online()
        async with self._lock:
            deleted = self._log.enforce_retention(up_to=self._high_watermark)
            for base in deleted:
                self._txn_indexes.pop(base, None)
            if deleted:
                # the leader-epoch checkpoint follows the log start, as Kafka's does (docs/design/replication.md §5)
                self.epochs.truncate_from_start(self._log.log_start_offset)
                # Snapshots go with their segments (Kafka deletes a segment's snapshot with it): one below the
                # new log start must never be loaded again.
                for offset in self._log.snapshot_offsets():
                    if offset < self._log.log_start_offset:
                        await asyncio.to_thread(self._log.delete_snapshot, offset)
        if deleted:
            self._notify()
        return deleted

    def _schedule_snapshot(self, offset: int, data: bytes) -> None:
        task = asyncio.get_running_loop().create_task(self._write_snapshot_when_durable(offset, data))
        self._snapshot_tasks.add(task)
        task.add_done_callback(self._snapshot_tasks.discard)

    async def _write_snapshot_when_durable(self, offset: int, data: bytes) -> None:
        """Store a roll snapshot once everything below it is durable (the snapshot invariant)."""
        try:
            await self._await_durable(offset)
            async with self._snapshot_lock:
                if self.online and offset >= self._log.log_start_offset:
                    await asyncio.to_thread(self._log.write_snapshot, offset, data)
        except Exception as err:
            # a missing snapshot only lengthens the next recovery's replay
            log.warning("snapshot at %d of %s not written: %s", offset, self._log.directory, err)

    async def close(self) -> None:
        """Flush, write a snapshot at the log end, close the files; idempotent (design/kafka-semantics.md §4.6)."""
        async with self._lock:
            if self._closed:
                return
            if self._snapshot_tasks:
                await asyncio.gather(*self._snapshot_tasks, return_exceptions=True)
            try:
                if self._failure is None:
                    await asyncio.to_thread(self._log.flush)
                    self._producers.update_map_end_offset(self._log.log_end_offset)
                    data = self._producers.snapshot()
                    async with self._snapshot_lock:
                        await asyncio.to_thread(self._log.write_snapshot, self._log.log_end_offset, data)
                    if self.replicated:
                        await asyncio.to_thread(write_high_watermark, self._log.directory, self._high_watermark)
            except Exception as err:
                log.error("closing %s without a snapshot: %s", self._log.directory, err)
            finally:
                self._closed = True
                await asyncio.to_thread(self._log.close)
                self._notify()
                self._appended.set()

    def __repr__(self) -> str:
        return (
            f"PartitionEngine({self._log.directory.name}, start={self.log_start_offset}, hw={self._high_watermark}, "
            f"lso={self.last_stable_offset}, end={self.log_end_offset})"
        )
