"""A partition's on-disk log: segments, offsets, reads, roll, retention, recovery, snapshots, group commit.

This is the storage half of Kafka's ``UnifiedLog`` / ``LocalLog`` (design/architecture.md §4,
design/kafka-semantics.md §4.4, §4.6). It knows
RecordBatch headers and nothing about producers or transactions: the storage engine validates batches
against producer state, calls :meth:`PartitionLog.append` under its per-partition lock, stores aborted
transactions with :meth:`PartitionLog.append_txn_index_entry`, and replays :meth:`PartitionLog.batches_from`
after loading a producer-state snapshot.

Directory layout (one directory per partition)::

    00000000000000000000.log  .index  .timeindex  [.txnindex]     segment with base offset 0
    00000000000000052311.log  ...                                   the active (last) segment
    00000000000000052311.snapshot                                   producer-state snapshots (opaque bytes)
    recovery-point-offset-checkpoint                                offset below which everything is fsynced
    .lock                                                           flock: one open log per directory

Durability. :meth:`PartitionLog.append` only writes (one ``writev`` into the page cache); the caller decides
when to acknowledge and calls :meth:`PartitionLog.flush` first, or shares fsyncs between concurrent
appenders through :class:`FlushCoordinator`. A flush fsyncs every segment written since the previous one (a
rolled segment together with its indexes) and, after a roll, the directory, then advances the recovery
point. The recovery point is checkpointed after the flush that follows a roll, on :meth:`close`, and on
:meth:`PartitionLog.checkpoint_recovery_point`.

Recovery on open is Kafka's ``LogLoader``: :mod:`oncelog.partition_storage.log_loader`.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType

from oncelog.errors import CorruptMessage, InvalidRecord, MessageTooLarge, OffsetOutOfRange, StorageUnavailable
from oncelog.partition_storage.flush_coordinator import FlushCoordinator
from oncelog.partition_storage.log_loader import (
    CHECKPOINT_FILE,
    RecoveryResult,
    load_segments,
    lock_directory,
    read_recovery_checkpoint,
    write_recovery_checkpoint,
)
from oncelog.partition_storage.log_retention import check_log_config, retention_breaches
from oncelog.partition_storage.segment import (
    MAX_RELATIVE_OFFSET,
    MAX_SEGMENT_BYTES,
    LogSegment,
    TimestampOffset,
    file_name,
    fsync_directory,
    parse_file_name,
    write_file_atomically,
)
from oncelog.records import BATCH_OVERHEAD, LOG_OVERHEAD, MAGIC, BatchHeader

__all__ = [
    "CHECKPOINT_FILE",
    "SNAPSHOT_SUFFIX",
    "SNAPSHOTS_KEPT",
    "FlushCoordinator",
    "PartitionLog",
    "RecoveryResult",
    "TimestampOffset",
]

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2
"""Producer-state snapshots kept: the newest, and one to fall back on if the newest is unreadable."""

_DEFAULT_SEGMENT_BYTES = 1 << 30
_DEFAULT_SEGMENT_MS = 7 * 24 * 3600 * 1000
_DEFAULT_RETENTION_MS = 7 * 24 * 3600 * 1000
_DEFAULT_INDEX_INTERVAL_BYTES = 4096

# The RecordBatch v2 header up to max_timestamp (oncelog.records.batch): base_offset, batch_length,
# partition_leader_epoch, magic, crc, attributes, last_offset_delta, base_timestamp, max_timestamp
_APPEND_HEADER = struct.Struct(">qiibIhiqq")
_BASE_OFFSET = struct.Struct(">q")
_BASE_OFFSET_LENGTH_EPOCH = struct.Struct(">qii")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

# what a segment needs at the next flush
_SYNC_LOG = 1
_SYNC_INDEXES = 2
_SYNC_TXN = 4


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionLog:
    """The segment files of one partition (Kafka's ``LocalLog`` plus the storage side of ``UnifiedLog``).

    Opening runs recovery (see the module docstring); :attr:`recovery` reports it.

    Threading: :meth:`append`, :meth:`read`, :meth:`enforce_retention` and the other methods belong to one
    thread (the partition's event loop), as appends are serialised per partition anyway. :meth:`flush` may
    run in another thread at the same time (that is how :class:`FlushCoordinator` uses it).

    Args:
        directory: the partition's directory; created if missing.
        segment_bytes: roll when an append would take the active segment past this size.
        segment_ms: roll when the active segment is older than this on ``clock``. Kafka measures from the
            first record timestamp; the broker clock is used here so a producer's skewed clock cannot force
            a roll per append. A reopened log restarts the age of its active segment.
        retention_bytes: delete the oldest segments while the log is larger than this; -1 for no limit.
        retention_ms: delete segments whose largest timestamp is older than this; -1 for no limit.
        index_interval_bytes: bytes between offset index entries.
        clock: milliseconds since the epoch; the wall clock by default.

    Raises:
        InvalidConfig: a setting is out of range.
        StorageUnavailable: another open log holds the directory, or it cannot be read.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        segment_bytes: int = _DEFAULT_SEGMENT_BYTES,
        segment_ms: int = _DEFAULT_SEGMENT_MS,
        retention_bytes: int = -1,
        retention_ms: int = _DEFAULT_RETENTION_MS,
        index_interval_bytes: int = _DEFAULT_INDEX_INTERVAL_BYTES,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        check_log_config(segment_bytes, segment_ms, retention_bytes, retention_ms, index_interval_bytes)
        self._dir = Path(directory)
        self._segment_bytes = segment_bytes
        self._segment_ms = segment_ms
        self._retention_bytes = retention_bytes
        self._retention_ms = retention_ms
        self._index_interval = index_interval_bytes
        self._clock = clock
        # _lock guards what appends change and the flusher reads; _flush_lock serialises flushes
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._unsynced: dict[LogSegment, int] = {}
        self._flushing: frozenset[LogSegment] = frozenset()
        self._dir_dirty = False
        self._checkpoint_due = False
        self._recovery_point = 0
        self._log_end_offset = 0
        self._failure: BaseException | None = None
        self._closed = False
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_directory(self._dir)
        try:
            self.recovery = self._load()
        except BaseException:
            self._close_files()
            raise

    # ---------------------------------------------------------------------------------------------- state

    @property
    def directory(self) -> Path:
        """The partition's directory."""
        return self._dir

    @property
    def log_start_offset(self) -> int:
        """First offset still in the log (base offset of the oldest segment)."""
        return self._bases[0]

    @property
    def log_end_offset(self) -> int:
        """Offset the next appended record gets."""
        return self._log_end_offset

    @property
    def recovery_point(self) -> int:
        """Every offset below this is fsynced."""
        return self._recovery_point

    @property
    def active_segment_base(self) -> int:
        """Base offset of the segment appends go to (where a marker's ``.txnindex`` entry belongs)."""
        return self._bases[-1]

    @property
    def segment_bases(self) -> list[int]:
        """Base offsets of all segments, oldest first."""
        return list(self._bases)

    @property
    def size_in_bytes(self) -> int:
        """Total size of the ``.log`` files."""
        return sum(segment.size for segment in self._segments)

    def segment_base_for(self, offset: int) -> int:
        """Base offset of the segment holding ``offset``.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or at/after the log end.
        """
        if not self._bases[0] <= offset < self._log_end_offset:
            raise OffsetOutOfRange(self._range_message(offset))
        return self._bases[bisect.bisect_right(self._bases, offset) - 1]

    # --------------------------------------------------------------------------------------------- append

    def append(self, batches: Sequence[bytes], *, partition_leader_epoch: int | None = None) -> list[tuple[int, int]]:
        """Assign offsets to ``batches`` and write them to the active segment with one ``writev``.

        Each batch gets the next base offset (and ``partition_leader_epoch`` if given) through
        ``with_base_offset`` would (the CRC does not cover either field); every other byte stays as the
        producer wrote it and is not even copied. The caller has validated the batches (``validate_batch``):
        only the header fields the log needs are read here, with one ``struct`` unpack per batch.
        The active segment is rolled first if the append would take it past ``segment_bytes``, if it is
        older than ``segment_ms``, or if the offsets would leave its relative range; an append is never
        split across segments. Nothing is durable until :meth:`flush`.

        Returns:
            ``(base_offset, last_offset)`` of each batch, in order.

        Raises:
            CorruptMessage: a buffer is not exactly one magic-2 batch.
            InvalidRecord: a batch declares a negative ``last_offset_delta``.
            ValueError: ``partition_leader_epoch`` does not fit in int32.
            MessageTooLarge: the batches together exceed a segment's addressable size.
            StorageUnavailable: the write failed (``definite`` tells whether the log is unchanged), or an
                earlier fsync failed, or the log is closed.
        """
        if not batches:
            return []
        if partition_leader_epoch is not None and not _INT32_MIN <= partition_leader_epoch <= _INT32_MAX:
            raise ValueError(f"partition_leader_epoch {partition_leader_epoch} does not fit in int32")
        headers = []
        total = 0
        records = 0
        for batch in batches:
            if len(batch) < BATCH_OVERHEAD:
                raise CorruptMessage(f"buffer of {len(batch)} bytes is shorter than a RecordBatch header")
            _, batch_length, _, magic, _, _, last_offset_delta, _, max_timestamp = _APPEND_HEADER.unpack_from(batch)
            if magic != MAGIC:
                raise CorruptMessage(f"RecordBatch has magic {magic}; only magic {MAGIC} is supported")
            size = batch_length + LOG_OVERHEAD
            if size != len(batch):
                raise CorruptMessage(f"buffer of {len(batch)} bytes holds a batch of {size} bytes")
            if last_offset_delta < 0:
                raise InvalidRecord(f"batch declares negative last_offset_delta {last_offset_delta}")
            headers.append((batch_length, last_offset_delta, max_timestamp))
            total += size
            records += last_offset_delta + 1
        if total > MAX_SEGMENT_BYTES:
            raise MessageTooLarge(f"append of {total} bytes exceeds the {MAX_SEGMENT_BYTES}-byte segment limit")
        with self._lock:
            self._check_writable()
            segment = self._segments[-1]
            offset = self._log_end_offset
            if segment.size and self._should_roll(segment, total, offset + records - 1):
                segment = self._roll()
            parts: list[bytes | memoryview] = []
            metas = []
            ranges = []
            for batch, (batch_length, last_offset_delta, max_timestamp) in zip(batches, headers, strict=True):
                last = offset + last_offset_delta
                # with_base_offset's rewrite, without copying the batch: the new leading fields go in their
                # own iovec and the producer's bytes follow untouched
                if partition_leader_epoch is None:
                    parts += (_BASE_OFFSET.pack(offset), memoryview(batch)[_BASE_OFFSET.size :])
                else:
                    prefix = _BASE_OFFSET_LENGTH_EPOCH.pack(offset, batch_length, partition_leader_epoch)
                    parts += (prefix, memoryview(batch)[_BASE_OFFSET_LENGTH_EPOCH.size :])
                metas.append((last, max_timestamp, batch_length + LOG_OVERHEAD))
                ranges.append((offset, last))
                offset = last + 1
            try:
                segment.append(parts, metas, total)
            except OSError as err:
                restored = segment.restore_size()
                if not restored:
                    self._failure = err
                raise StorageUnavailable(f"write to {segment.log_path} failed: {err}", definite=restored) from err
            self._log_end_offset = offset
            self._unsynced[segment] = self._unsynced.get(segment, 0) | _SYNC_LOG
        return ranges

    def _should_roll(self, segment: LogSegment, total: int, last_offset: int) -> bool:
        return (
            segment.size + total > self._segment_bytes
            or self._clock() - segment.created_ms > self._segment_ms
            or last_offset - segment.base_offset > MAX_RELATIVE_OFFSET
        )

    def _roll(self) -> LogSegment:
        """Start a new active segment at the log end (``LocalLog.roll``); called with ``_lock`` held."""
        old = self._segments[-1]
        try:
            new = LogSegment.create(
                self._dir, self._log_end_offset, index_interval_bytes=self._index_interval, now_ms=self._clock()
            )
        except OSError as err:
            raise StorageUnavailable(
                f"cannot roll {self._dir} at {self._log_end_offset}: {err}", definite=True
            ) from err
        old.seal()
        self._segments.append(new)
        self._bases.append(new.base_offset)
        self._unsynced[old] = self._unsynced.get(old, 0) | _SYNC_LOG | _SYNC_INDEXES
        self._dir_dirty = True
        self._checkpoint_due = True
        log.info("rolled %s: new segment at offset %d after %d bytes", self._dir, new.base_offset, old.size)
        return new

    # ---------------------------------------------------------------------------------------------- flush

    def flush(self) -> None:
        """fsync everything written so far, then advance the recovery point (``LocalLog.flush``).

        Safe to call from a thread other than the appender's; concurrent calls run one after another.

        Raises:
            StorageUnavailable: an fsync failed, or failed earlier, or the log is closed (``definite=False``:
                earlier writes may or may not be durable). After a failed fsync the log refuses writes and
                flushes for good: the kernel may have dropped the dirty pages, so a later fsync succeeding
                would prove nothing (Kafka takes the log directory offline).
        """
        with self._flush_lock:
            self._flush_locked()

    def _flush_locked(self) -> None:
        with self._lock:
            self._check_writable(definite=False)
            target = self._log_end_offset
            work = list(self._unsynced.items())
            self._unsynced.clear()
            sync_dir, self._dir_dirty = self._dir_dirty, False
            checkpoint, self._checkpoint_due = self._checkpoint_due, False
            # retention must not close a descriptor this flush is about to fsync
            self._flushing = frozenset(segment for segment, _ in work)
        try:
            for segment, what in work:
                if what & _SYNC_LOG:
                    segment.fsync_log()
                if what & _SYNC_INDEXES:
                    segment.fsync_indexes()
                if what & _SYNC_TXN:
                    segment.fsync_txn_index()
            if sync_dir:
                fsync_directory(self._dir)
            if checkpoint:
                write_recovery_checkpoint(self._dir, target)
        except OSError as err:
            with self._lock:
                self._failure = err
                self._flushing = frozenset()
            log.error("fsync of partition log %s failed, refusing further writes: %s", self._dir, err)
            raise StorageUnavailable(f"fsync of {self._dir} failed: {err}", definite=False) from err
        with self._lock:
            self._flushing = frozenset()
            self._recovery_point = max(self._recovery_point, target)

    def checkpoint_recovery_point(self) -> None:
        """Persist the current recovery point, bounding the rescan after a crash (Kafka does it every 60 s)."""
        with self._flush_lock:
            self._check_writable()
            write_recovery_checkpoint(self._dir, self._recovery_point)

    # ----------------------------------------------------------------------------------------------- read

    def read(self, offset: int, max_bytes: int, upper_bound_offset: int | None = None) -> tuple[bytes, int]:
        """Whole batches from the one containing ``offset``, for a fetch (``LocalLog.read``).

        Returns at most ``max_bytes`` unless the first batch alone is larger, in which case that batch is
        returned whole. Batches reaching ``upper_bound_offset`` (exclusive: the high watermark or, for
        read_committed, the LSO) are not returned. Like Kafka, one call reads from one segment.

        Returns:
            ``(data, next_offset)``: concatenated batches and the offset after the last one, or ``(b"",
            offset)`` when there is nothing to return (``offset`` at the log end or the upper bound).

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or above the log end.
            ValueError: ``max_bytes`` is negative.
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        end = self._log_end_offset
        if not self._bases[0] <= offset <= end:
            raise OffsetOutOfRange(self._range_message(offset))
        upper = end if upper_bound_offset is None else min(upper_bound_offset, end)
        if offset >= upper:
            return b"", offset
        segment = self._segments[bisect.bisect_right(self._bases, offset) - 1]
        return segment.read(offset, max_bytes, upper)

    def batches_from(self, offset: int, *, verify_crc: bool = False) -> Iterator[tuple[BatchHeader, bytes]]:
        """Every batch from the one containing ``offset`` to the log end as of this call.

        For the storage engine's replay after loading a producer-state snapshot (design/kafka-semantics.md §4.6): start
        at
        ``max(snapshot offset, log_start_offset)``. Reads in 1 MiB chunks.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or above the log end (raised at the call).
            CorruptMessage: with ``verify_crc``, a batch fails its CRC (raised while iterating).
        """
        end = self._log_end_offset
        if not self._bases[0] <= offset <= end:
            raise OffsetOutOfRange(self._range_message(offset))
        first = bisect.bisect_right(self._bases, offset) - 1
        limits = [(segment, segment.size) for segment in self._segments[first:]]
        return self._iter_batches(limits, offset, verify_crc)

    @staticmethod
    def _iter_batches(
        segments: list[tuple[LogSegment, int]], offset: int, verify_crc: bool
    ) -> Iterator[tuple[BatchHeader, bytes]]:
        for segment, limit in segments:
            found = segment.translate_offset(offset, limit)
            if found is None:
                continue
            for header, batch in segment.iter_batches(found[0], limit, verify_crc=verify_crc):
                yield header, batch
                offset = header.next_offset

    def offset_for_timestamp(self, timestamp: int) -> TimestampOffset | None:
        """First record whose timestamp is ``>= timestamp`` (``UnifiedLog.fetchOffsetByTimestamp``).

        Searches the first segment whose largest timestamp reaches ``timestamp``, through its time index.
        Kafka's special values (-1 latest, -2 earliest) are the caller's: use :attr:`log_end_offset` and
        :attr:`log_start_offset`.

        Returns:
            The record's timestamp and offset, or ``None`` if no record is that recent.
        """
        start = self._bases[0]
        for segment in list(self._segments):
            if segment.max_timestamp >= timestamp:
                found = segment.find_offset_by_timestamp(timestamp, start)
                if found is not None:
                    return TimestampOffset(*found)
        return None

    def _range_message(self, offset: int) -> str:
        return f"offset {offset} is outside [{self._bases[0]}, {self._log_end_offset}] of {self._dir}"

    def reconfigure(self, *, segment_bytes: int, segment_ms: int, retention_bytes: int, retention_ms: int) -> None:
        """Apply changed topic settings to the open log: the next append rolls and the next retention pass
        deletes by the new values (existing segments keep their size).

        Raises:
            InvalidConfig: a setting is out of range (nothing changes).
        """
        check_log_config(segment_bytes, segment_ms, retention_bytes, retention_ms, self._index_interval)
        with self._lock:
            self._segment_bytes = segment_bytes
            self._segment_ms = segment_ms
            self._retention_bytes = retention_bytes
            self._retention_ms = retention_ms

    # ------------------------------------------------------------------------------------------ retention

    def enforce_retention(self, now_ms: int | None = None, *, up_to: int | None = None) -> list[int]:
        """Delete whole old segments beyond ``retention_ms`` or ``retention_bytes``; never the active one.

        With ``up_to`` (the high watermark), only segments that end at or below it are deleted: retention
        never takes a write that is not acknowledged yet (Kafka bounds deletable segments by the high
        watermark), so nothing is acknowledged after its segment is gone.

        Kafka's rules (``deleteRetentionMsBreachedSegments``, ``deleteRetentionSizeBreachedSegments``):
        oldest first, a segment is deleted when ``now - largest timestamp > retention_ms``, or while the log
        stays above ``retention_bytes`` without it. The log start moves to the oldest remaining segment.
        Files go at once: readers run on the same thread, so none can be mid-read. A segment an in-flight
        flush is syncing is kept until the next call.

        Returns:
            Base offsets of the deleted segments.
        """
        now = self._clock() if now_ms is None else now_ms
        with self._lock:
            if self._closed:
                return []
            candidates = self._segments[:-1]
            if up_to is not None:
                # a segment ends where the next one starts
                candidates = [seg for seg, nxt in zip(candidates, self._bases[1:], strict=True) if nxt <= up_to]
            total = sum(segment.size for segment in self._segments)
            count = retention_breaches(candidates, total, now, self._retention_ms, self._retention_bytes)
            doomed = []
            for segment in candidates[:count]:
                if segment in self._flushing:
                    break
                doomed.append(segment)
            if not doomed:
                return []
            del self._segments[: len(doomed)]
            del self._bases[: len(doomed)]
            for segment in doomed:
                self._unsynced.pop(segment, None)
                segment.delete()
            self._recovery_point = max(self._recovery_point, self._bases[0])
            self._dir_dirty = True
        deleted = [segment.base_offset for segment in doomed]
        log.info("retention deleted segments %s of %s; log start is now %d", deleted, self._dir, self._bases[0])
        return deleted

    # ---------------------------------------------------------------------------------- aborted-txn index

    def append_txn_index_entry(self, segment_base: int, entry: bytes) -> None:
        """Append ``entry`` (an encoded ``AbortedTxn``) to the ``.txnindex`` of segment ``segment_base``.

        Kafka puts the entry in the segment holding the ABORT marker (design/kafka-semantics.md §4.4): normally
        :attr:`active_segment_base` right after appending the marker. Made durable by the next flush.

        Raises:
            ValueError: no segment has that base offset.
        """
        segment = self._segment_with_base(segment_base)
        with self._lock:
            self._check_writable()
            try:
                created = segment.append_txn_index(entry)
            except OSError as err:
                raise StorageUnavailable(f"write to {segment.txn_index_path} failed: {err}", definite=False) from err
            self._unsynced[segment] = self._unsynced.get(segment, 0) | _SYNC_TXN
            if created:
                # a new file is durable only once its directory entry is: without it a crash can lose the
                # whole index, and recovery trusts the entries below its snapshot
                self._dir_dirty = True

    def read_txn_index(self, segment_base: int) -> bytes:
        """The ``.txnindex`` bytes of segment ``segment_base`` (empty if it has none).

        Raises:
            ValueError: no segment has that base offset.
        """
        return self._segment_with_base(segment_base).read_txn_index()

    def replace_txn_index(self, segment_base: int, data: bytes) -> None:
        """Atomically and durably replace the ``.txnindex`` of segment ``segment_base`` (after recovery).

        Raises:
            ValueError: no segment has that base offset.
        """
        segment = self._segment_with_base(segment_base)
        self._check_writable()
        segment.replace_txn_index(data)

    def _segment_with_base(self, base_offset: int) -> LogSegment:
        i = bisect.bisect_left(self._bases, base_offset)
        if i == len(self._bases) or self._bases[i] != base_offset:
            raise ValueError(f"{self._dir} has no segment with base offset {base_offset}")
        return self._segments[i]

    # ------------------------------------------------------------------------------------------ snapshots

    def write_snapshot(self, offset: int, data: bytes) -> None:
        """Durably store a producer-state snapshot taken at ``offset``; keep only the newest two.

        Written as ``<offset>.snapshot`` through a temporary file, fsync, rename and directory fsync, so a
        crash leaves the old set or the new one, never a partial file under the final name.

        Raises:
            ValueError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
        """
        if not self._bases[0] <= offset <= self._log_end_offset:
            raise ValueError(f"snapshot offset {offset} is outside [{self._bases[0]}, {self._log_end_offset}]")
        write_file_atomically(self._dir / file_name(offset, SNAPSHOT_SUFFIX), data)
        for old in self.snapshot_offsets()[:-SNAPSHOTS_KEPT]:
            self.delete_snapshot(old)

    def snapshot_offsets(self) -> list[int]:
        """Offsets of the stored snapshots, oldest first."""
        names = (entry.name for entry in os.scandir(self._dir))
        return sorted(offset for name in names if (offset := parse_file_name(name, SNAPSHOT_SUFFIX)) is not None)

    def read_snapshot(self, offset: int) -> bytes:
        """Bytes of the snapshot taken at ``offset``.

        Raises:
            FileNotFoundError: there is no such snapshot.
        """
        return (self._dir / file_name(offset, SNAPSHOT_SUFFIX)).read_bytes()

    def latest_snapshot(self) -> tuple[int, bytes] | None:
        """``(offset, bytes)`` of the newest snapshot, or ``None``.

        If the engine finds it corrupt, it deletes it with :meth:`delete_snapshot` and asks again.
        """
        offsets = self.snapshot_offsets()
        if not offsets:
            return None
        return offsets[-1], self.read_snapshot(offsets[-1])

    def delete_snapshot(self, offset: int) -> None:
        """Remove the snapshot taken at ``offset`` (no error if absent)."""
        (self._dir / file_name(offset, SNAPSHOT_SUFFIX)).unlink(missing_ok=True)

    # ---------------------------------------------------------------------------------------- open, close

    def _load(self) -> RecoveryResult:
        checkpoint = read_recovery_checkpoint(self._dir)
        segments = self._segments
        loaded = load_segments(
            self._dir, segments, checkpoint, index_interval_bytes=self._index_interval, now_ms=self._clock()
        )
        recovery_point, deleted = loaded.recovery_point, loaded.deleted
        for segment in loaded.rescanned:
            self._unsynced[segment] = _SYNC_LOG | _SYNC_INDEXES
        self._dir_dirty = self._dir_dirty or loaded.dir_dirty
        self._bases = [segment.base_offset for segment in segments]
        active = segments[-1]
        self._log_end_offset = active.next_offset
        self._recovery_point = min(recovery_point, self._log_end_offset)
        deleted_snapshots = [offset for offset in self.snapshot_offsets() if offset > self._log_end_offset]
        for offset in deleted_snapshots:
            log.warning("deleting snapshot %d of %s: above the recovered log end", offset, self._dir)
            self.delete_snapshot(offset)
        result = RecoveryResult(
            recovery_point=recovery_point,
            log_end_offset=self._log_end_offset,
            segments=tuple(loaded.recovered),
            deleted_segments=tuple(deleted),
            deleted_snapshots=tuple(deleted_snapshots),
        )
        if result.truncated_bytes or deleted:
            log.warning(
                "recovered %s: cut %d bytes, deleted segments %s, log end %d",
                self._dir,
                result.truncated_bytes,
                deleted,
                self._log_end_offset,
            )
        # what recovery kept was read from the page cache, not necessarily from the disk: make it durable
        # before the recovery point claims it
        self._checkpoint_due = checkpoint != self._log_end_offset or bool(deleted_snapshots)
        self._flush_locked()
        return result

    def _check_writable(self, *, definite: bool = True) -> None:
        # An append refused here wrote nothing (definite); a flush refused here leaves earlier writes in
        # an unknown state (not definite).
        if self._closed:
            raise StorageUnavailable(f"partition log {self._dir} is closed", definite=definite)
        if self._failure is not None:
            raise StorageUnavailable(
                f"partition log {self._dir} is offline after an I/O failure: {self._failure}", definite=definite
            )

    def close(self) -> None:
        """Flush everything, indexes included, checkpoint the log end, and release the directory.

        Idempotent. After a failed fsync nothing more is written; the descriptors are only closed.
        """
        with self._flush_lock:
            if self._closed:
                return
            try:
                if self._failure is None:
                    with self._lock:
                        active = self._segments[-1]
                        self._unsynced[active] = self._unsynced.get(active, 0) | _SYNC_LOG | _SYNC_INDEXES
                        self._checkpoint_due = True
                    self._flush_locked()
            finally:
                with self._lock:
                    self._closed = True
                self._close_files()

    def _close_files(self) -> None:
        for segment in self._segments:
            segment.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"PartitionLog({str(self._dir)!r}, start={self._bases[0] if self._bases else None}, "
            f"end={self._log_end_offset}, segments={len(self._segments)})"
        )
