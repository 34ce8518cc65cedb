"""One segment of a partition log: a ``.log`` file of RecordBatches and its indexes (Kafka's ``LogSegment``).

Every file of a segment is named by the segment's base offset, zero-padded to 20 digits
(``00000000000000001234.log``), as in Kafka:

* ``.log`` — RecordBatch v2 bytes exactly as the producer built them; the log only assigned the base offset
  (and optionally the leader epoch), which lie outside the CRC.
* ``.index`` — sparse offset index (Kafka's ``OffsetIndex``): 8-byte big-endian entries
  ``relative_offset uint32 | position uint32``. Before a batch is written, if more than
  ``index_interval_bytes`` were written since the previous entry, an entry maps the batch's *last* offset to
  the batch's position (``LogSegment.append``).
* ``.timeindex`` — time index (Kafka's ``TimeIndex``): 12-byte entries ``timestamp int64 | relative_offset
  uint32`` holding the largest batch ``max_timestamp`` seen so far and the last offset of the batch that
  carried it. An entry is added with each offset index entry when that maximum grew, and once more when the
  segment stops being the active one (``onBecomeInactiveSegment``), so the last entry is the segment's
  largest timestamp.
* ``.txnindex`` — the aborted-transaction index (design/kafka-semantics.md §4.4). Its bytes belong to the storage
  engine; this
  module only appends, reads, replaces, syncs and deletes the file with the segment.

Both indexes are hints. A lookup yields a position from which a short forward scan over batch headers finds
the batch wanted, so a missing entry costs scanned bytes, never a wrong answer. The active segment's index
files are written with each append but fsynced only when the segment is sealed or closed; recovery checks
the entry it starts from against the batch header it points to and rebuilds the indexes from there.

Sealed segments load their indexes into memory on first use (Kafka's ``LazyIndex``) and keep only the
``.log`` descriptor open. The owner (:class:`~oncelog.partition_storage.partition_log.PartitionLog`) calls
every method from one thread, except the ``fsync_*`` methods, which its flusher may run in another.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from oncelog.errors import CorruptMessage
from oncelog.partition_storage.segment_files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_DIGITS,
    OPEN_APPEND,
    OPEN_LOG,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_name,
    fsync_directory,
    fsync_path,
    parse_file_name,
    pread,
    write_all,
    write_file_atomically,
)
from oncelog.partition_storage.segment_index import (
    NO_TIMESTAMP,
    CorruptIndexError,
    OffsetIndex,
    TimeIndex,
    TimestampOffset,
)
from oncelog.records import BATCH_OVERHEAD, BatchHeader, decode_records, read_header, split_batches

__all__ = [
    "INDEX_SUFFIX",
    "LOG_SUFFIX",
    "MAX_RELATIVE_OFFSET",
    "MAX_SEGMENT_BYTES",
    "NO_TIMESTAMP",
    "OFFSET_DIGITS",
    "TIME_INDEX_SUFFIX",
    "TXN_INDEX_SUFFIX",
    "CorruptIndexError",
    "LogSegment",
    "OffsetIndex",
    "SegmentRecovery",
    "TimeIndex",
    "TimestampOffset",
    "file_name",
    "fsync_directory",
    "parse_file_name",
    "write_file_atomically",
]

log = logging.getLogger(__name__)
MAX_RELATIVE_OFFSET = 2**31 - 1
"""Largest ``offset - base_offset`` a segment accepts (Kafka's ``canConvertToRelativeOffset``: Int.MaxValue)."""

MAX_SEGMENT_BYTES = 2**31 - 1
"""Largest segment size: index positions are Kafka's int32 file positions stored as uint32."""
# A lookup scans at most one index interval plus one batch; 16 KiB covers the default interval in one pread.
_SCAN_CHUNK = 16 * 1024
# Recovery and replay read large chunks: one pread per MiB instead of one per batch.
_BULK_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class SegmentRecovery:
    """What recovering one segment found (Kafka's ``LogSegment.recover`` result, with details).

    Attributes:
        base_offset: the segment.
        start_position: where the CRC scan started (0 when the indexes were rebuilt from scratch).
        scanned_bytes: bytes read and CRC-checked.
        truncated_bytes: bytes cut from the end because they did not form valid, contiguous batches.
        reason: why the tail was cut, ``None`` if nothing was.
    """

    base_offset: int
    start_position: int
    scanned_bytes: int
    truncated_bytes: int
    reason: str | None


class LogSegment:
    """A ``.log`` file plus its offset, time and transaction index files.

    Create one with :meth:`create` (a new, empty segment) or :meth:`open` (an existing file; the caller then
    either trusts it with :meth:`check_sealed` or rescans it with :meth:`recover`).
    """

    def __init__(self, directory: Path, base_offset: int, fd: int, *, index_interval_bytes: int, created_ms: int):
        self.directory = directory
        self.base_offset = base_offset
        self.log_path = directory / file_name(base_offset, LOG_SUFFIX)
        self.txn_index_path = directory / file_name(base_offset, TXN_INDEX_SUFFIX)
        self.offset_index = OffsetIndex(directory / file_name(base_offset, INDEX_SUFFIX), base_offset)
        self.time_index = TimeIndex(directory / file_name(base_offset, TIME_INDEX_SUFFIX), base_offset)
        self.created_ms = created_ms
        """Clock time the segment was created or, for the active segment of a reopened log, opened."""
        self.size = os.fstat(fd).st_size
        self.next_offset = base_offset
        """Offset after the segment's last batch, as far as known (set by recovery or by the owner)."""
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = NO_TIMESTAMP
        self.sealed = False
        self._fd = fd
        self._txn_fd = -1
        self._index_interval = index_interval_bytes
        self._bytes_since_index_entry = 0

    @classmethod
    def create(cls, directory: Path, base_offset: int, *, index_interval_bytes: int, now_ms: int) -> LogSegment:
        """Create the files of a new, empty segment; fails if its ``.log`` already exists."""
        path = directory / file_name(base_offset, LOG_SUFFIX)
        fd = os.open(path, OPEN_LOG | os.O_CREAT | os.O_EXCL, 0o644)
        segment = cls(directory, base_offset, fd, index_interval_bytes=index_interval_bytes, created_ms=now_ms)
        segment.offset_index.reset()
        segment.time_index.reset()
        return segment

    @classmethod
    def open(cls, directory: Path, base_offset: int, *, index_interval_bytes: int, now_ms: int) -> LogSegment:
        """Open an existing segment without reading it."""
        fd = os.open(directory / file_name(base_offset, LOG_SUFFIX), OPEN_LOG)
        return cls(directory, base_offset, fd, index_interval_bytes=index_interval_bytes, created_ms=now_ms)

    def __repr__(self) -> str:
        return f"LogSegment({self.log_path.name}, size={self.size}, next_offset={self.next_offset})"

    @property
    def largest_timestamp(self) -> int:
        """Largest batch timestamp, or the file's modification time if no batch has one (time retention)."""
        if self.max_timestamp != NO_TIMESTAMP:
            return self.max_timestamp
        return os.fstat(self._fd).st_mtime_ns // 1_000_000

    # ------------------------------------------------------------------------------------------------ append

    def append(self, parts: Sequence[bytes | memoryview], metas: Sequence[tuple[int, int, int]], total: int) -> None:
        """Write whole batches at the end with one ``writev`` and index them.

        Args:
            parts: buffers whose concatenation is the batches, offsets already assigned.
            metas: per batch ``(last_offset, max_timestamp, size_in_bytes)``, in order.
            total: sum of the sizes.

        Raises:
            OSError: the write failed; :attr:`size` is unchanged and :meth:`restore_size` cuts whatever part
                reached the file.
        """
        position = self.size
        write_all(self._fd, parts, total)
        self.size = position + total
        for last_offset, max_timestamp, size in metas:
            self._index_batch(position, last_offset, max_timestamp, size)
            position += size
        self.next_offset = metas[-1][0] + 1
        try:
            # time index first: a crash between the two writes leaves a time entry past the last offset
            # entry, which recovery drops, rather than an offset entry without its time entry
            self.time_index.persist()
            self.offset_index.persist()
        except OSError as err:
            # The batches are written; indexes are hints and the next append retries the write.
            log.warning("cannot write index entries of %s: %s", self.log_path, err)

    def restore_size(self) -> bool:
        """After a failed :meth:`append`, cut the file back to :attr:`size`; False if that failed too."""
        try:
            os.ftruncate(self._fd, self.size)
        except OSError:
            return False
        return True

    def _index_batch(self, position: int, last_offset: int, max_timestamp: int, size: int) -> None:
        # The one rule for index entries, shared by append, recovery and rebuild (LogSegment.append).
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.offset_of_max_timestamp = last_offset
        if self._bytes_since_index_entry > self._index_interval:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
            self.offset_index.append(last_offset, position)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size

    def seal(self) -> None:
        """Mark the segment inactive: add the final time index entry and release the index descriptors."""
        if self.max_timestamp != NO_TIMESTAMP:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        try:
            self.time_index.persist()
            self.offset_index.persist()
        except OSError as err:
            log.warning("cannot write index entries of %s: %s", self.log_path, err)
        self.time_index.close()
        self.offset_index.close()
        self.sealed = True

    # -------------------------------------------------------------------------------------------------- read

    def iter_headers(self, position: int, limit: int) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of each batch from ``position`` (a batch boundary) up to ``limit``.

        Raises:
            CorruptMessage: bytes that are not a batch header (the file changed under the log).
        """
        buffer = b""
        buffer_start = position
        while position < limit:
            relative = position - buffer_start
            if relative + BATCH_OVERHEAD > len(buffer):
                buffer = pread(self._fd, min(_SCAN_CHUNK, limit - position), position)
                buffer_start, relative = position, 0
            header = read_header(buffer, relative)
            yield position, header
            position += header.size_in_bytes

    def translate_offset(self, offset: int, limit: int | None = None, start: int = 0) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is ``>= offset`` (``translateOffset``).

        Scans forward from the offset index entry at or below ``offset`` (or from ``start``, a known batch
        boundary, if that is further on). ``None`` if no batch before ``limit`` qualifies.
        """
        limit = self.size if limit is None else limit
        self.ensure_indexes()
        position = max(self.offset_index.lookup(offset), start)
        for batch_position, header in self.iter_headers(position, limit):
            if header.last_offset >= offset:
                return batch_position, header
        return None

    def read(self, offset: int, max_bytes: int, upper_bound_offset: int) -> tuple[bytes, int]:
        """Whole batches from the one containing ``offset``, ending before ``upper_bound_offset``.

        At most ``max_bytes`` unless the first batch alone is larger: it is returned whole (Kafka's
        ``minOneMessage``). A batch that reaches ``upper_bound_offset`` is never returned, even partly. The
        end is found on batch headers first, so the data is read with one ``pread`` of the exact length and
        never copied again.

        Returns:
            ``(data, next_offset)``; ``next_offset`` is the offset after the last returned batch, or
            ``offset`` when nothing is returned.
        """
        limit = self.size
        found = self.translate_offset(offset, limit)
        if found is None:
            return b"", offset
        position, first = found
        if first.last_offset >= upper_bound_offset:
            return b"", offset
        end, end_offset = limit, self.next_offset
        if upper_bound_offset < self.next_offset:
            bound = self.translate_offset(upper_bound_offset, limit, position)
            if bound is not None:
                end, end_offset = bound[0], bound[1].base_offset
        budget = max(max_bytes, first.size_in_bytes)
        if end - position > budget:
            end, end_offset = self._last_boundary(position + budget, position, first, end)
        return pread(self._fd, end - position, position), end_offset

    def _last_boundary(self, at_most: int, position: int, first: BatchHeader, limit: int) -> tuple[int, int]:
        """The last batch boundary ``<= at_most`` after the first batch, and the offset starting there.

        The walk starts at the last indexed batch before ``at_most`` rather than at ``position``, so it
        costs about one index interval of headers however large the read.
        """
        boundary, boundary_offset = position + first.size_in_bytes, first.next_offset
        start = max(boundary, self.offset_index.floor_position(at_most))
        for batch_position, header in self.iter_headers(start, limit):
            end = batch_position + header.size_in_bytes
            if end > at_most:
                return batch_position, header.base_offset
            boundary, boundary_offset = end, header.next_offset
        return boundary, boundary_offset

    def iter_batches(self, position: int, limit: int, *, verify_crc: bool) -> Iterator[tuple[BatchHeader, bytes]]:
        """Yield ``(header, batch bytes)`` from ``position`` (a batch boundary) up to ``limit``, in bulk reads.

        Raises:
            CorruptMessage: a batch fails its CRC (with ``verify_crc``) or is not a batch.
        """
        want = _BULK_CHUNK
        while position < limit:
            chunk = pread(self._fd, min(want, limit - position), position)
            want = _BULK_CHUNK
            view = memoryview(chunk)
            cursor = 0
            while len(chunk) - cursor >= BATCH_OVERHEAD:
                header = read_header(chunk, cursor)
                end = cursor + header.size_in_bytes
                if end > len(chunk):
                    break
                batch = view[cursor:end]
                if verify_crc and split_batches(batch)[1] != len(batch):
                    raise CorruptMessage(f"{self.log_path.name}: batch at byte {position + cursor} fails its CRC")
                yield header, bytes(batch)
                cursor = end
            if cursor == 0:
                # one batch larger than the chunk: read exactly that batch next
                want = read_header(chunk).size_in_bytes
                if position + want > limit:
                    raise CorruptMessage(f"{self.log_path.name}: batch at byte {position} runs past the segment end")
            position += cursor

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int) -> tuple[int, int] | None:
        """``(timestamp, offset)`` of the first record at or after ``start_offset`` with a timestamp
        ``>= timestamp`` (Kafka's ``LogSegment.findOffsetByTimestamp``), or ``None``.

        Only the one batch found through the time index is decoded.
        """
        self.ensure_indexes()
        below = self.time_index.lookup_below(timestamp)
        begin = start_offset if below is None else max(start_offset, below)
        found = self.translate_offset(begin)
        if found is None:
            return None
        limit = self.size
        for position, header in self.iter_headers(found[0], limit):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            for record in decode_records(pread(self._fd, header.size_in_bytes, position)):
                # decoded records always carry both; the checks narrow the Optional fields
                record_timestamp, record_offset = record.timestamp, record.offset
                if record_timestamp is None or record_offset is None:
                    continue
                if record_timestamp >= timestamp and record_offset >= start_offset:
                    return record_timestamp, record_offset
        return None

    # ---------------------------------------------------------------------------------------------- recovery

    def check_sealed(self, next_offset: int) -> bool:
        """Trust a segment below the recovery point after a cheap check of its index files.

        Like Kafka's ``sanityCheck``: both files exist, hold whole entries, and their last entries point
        inside the segment. The largest timestamp is read from the time index's last entry. The full check
        runs when the indexes are first loaded (:meth:`ensure_indexes`).

        Returns:
            False if the indexes are missing or implausible; the caller then runs :meth:`recover`.
        """
        self.next_offset = next_offset
        try:
            last_offset_entry = self.offset_index.read_last_entry()
            last_time_entry = self.time_index.read_last_entry()
        except (FileNotFoundError, CorruptIndexError) as err:
            log.warning("index of sealed segment %s is unusable (%s); rebuilding it", self.log_path.name, err)
            return False
        if last_offset_entry is not None:
            relative, position = last_offset_entry
            if position >= self.size or self.base_offset + relative >= next_offset:
                log.warning("offset index of %s points past the segment; rebuilding it", self.log_path.name)
                return False
        if last_time_entry is not None:
            timestamp, relative = last_time_entry
            if self.base_offset + relative >= next_offset:
                log.warning("time index of %s points past the segment; rebuilding it", self.log_path.name)
                return False
            self.max_timestamp, self.offset_of_max_timestamp = timestamp, self.base_offset + relative
        self.sealed = True
        return True

    def ensure_indexes(self) -> None:
        """Load the index files on first use; rebuild them from the batch headers if they fail the check."""
        if self.offset_index.loaded and self.time_index.loaded:
            return
        try:
            if not self.offset_index.loaded:
                self.offset_index.load()
            if not self.time_index.loaded:
                self.time_index.load()
        except (FileNotFoundError, CorruptIndexError) as err:
            log.warning("rebuilding the indexes of %s: %s", self.log_path.name, err)
            self._reindex()

    def _reindex(self) -> None:
        """Rebuild both indexes from the batch headers (no CRC: the data below the recovery point is trusted)."""
        self._reset_indexes()
        for position, header in self.iter_headers(0, self.size):
            self._index_batch(position, header.last_offset, header.max_timestamp, header.size_in_bytes)
        if self.sealed:
            self.seal()
            self.fsync_indexes()
        else:
            self.time_index.persist()
            self.offset_index.persist()

    def _reset_indexes(self) -> None:
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = NO_TIMESTAMP
        self._bytes_since_index_entry = 0

    def recover(self, recovery_point: int | None) -> SegmentRecovery:
        """CRC-check the segment's tail, cut what is torn or out of sequence, rebuild the indexes for it.

        The scan starts at the last offset index entry below ``recovery_point`` (everything before it was
        fsynced), after checking that the batch header at that position carries the entry's offset.
        Without a recovery point, or if the indexes are missing, implausible or disagree with the log, it
        starts at byte 0 and rebuilds the indexes from scratch. Each batch must pass its CRC
        (``split_batches``) and start exactly at the offset after the previous one (the first at the
        segment's base offset); the file is truncated before the first batch that does not.
        """
        position, expected = self._recovery_start(recovery_point)
        start = position
        reason = None
        want = _BULK_CHUNK
        while position < self.size and reason is None:
            chunk = pread(self._fd, min(want, self.size - position), position)
            want = _BULK_CHUNK
            batches, _ = split_batches(chunk)
            accepted = 0
            for header, _ in batches:
                reason = self._sequence_problem(header, expected, position + accepted)
                if reason is not None:
                    break
                self._index_batch(position + accepted, header.last_offset, header.max_timestamp, header.size_in_bytes)
                accepted += header.size_in_bytes
                expected = header.next_offset
            position += accepted
            rest = len(chunk) - accepted
            if reason is not None or rest == 0:
                continue
            # the chunk ends inside a batch, or at a damaged one
            if rest < BATCH_OVERHEAD:
                if position + BATCH_OVERHEAD > self.size:
                    reason = f"torn batch header at byte {position}: {self.size - position} bytes"
                continue  # the chunk cut the header: read again from this batch
            try:
                needed = read_header(chunk, accepted).size_in_bytes
            except CorruptMessage as err:
                reason = str(err)
                continue
            if position + needed > self.size:
                reason = f"batch at byte {position} needs {needed} bytes, only {self.size - position} remain"
            elif needed <= rest:
                reason = f"batch at byte {position} fails its CRC32C check"
            else:
                want = needed
        truncated = self.size - position
        if truncated:
            log.warning(
                "truncating %s at byte %d (offset %d): dropping %d bytes: %s",
                self.log_path,
                position,
                expected,
                truncated,
                reason,
            )
            os.ftruncate(self._fd, position)
            self.size = position
        self.next_offset = expected
        self.time_index.persist()
        self.offset_index.persist()
        return SegmentRecovery(self.base_offset, start, position - start, truncated, reason)

    def _recovery_start(self, recovery_point: int | None) -> tuple[int, int]:
        """Choose the scan start and bring the in-memory index state to that point."""
        if recovery_point is not None:
            try:
                self.offset_index.load()
                self.time_index.load()
            except (FileNotFoundError, CorruptIndexError) as err:
                log.warning("indexes of %s are unusable (%s); rescanning the whole segment", self.log_path, err)
            else:
                index = self.offset_index
                k = min(index.count_below(recovery_point), index.count_before_position(self.size)) - 1
                if k >= 0:
                    offset, position = index.entry(k)
                    header = self._header_at(position)
                    if header is not None and header.last_offset == offset:
                        index.truncate(k + 1)
                        self.time_index.truncate_after(offset)
                        last = self.time_index.last
                        self.max_timestamp, self.offset_of_max_timestamp = last or (NO_TIMESTAMP, NO_TIMESTAMP)
                        self._bytes_since_index_entry = 0
                        return position, header.base_offset
                    log.warning("offset index of %s disagrees with the log at byte %d", self.log_path, position)
        self._reset_indexes()
        return 0, self.base_offset

    def _header_at(self, position: int) -> BatchHeader | None:
        try:
            return read_header(pread(self._fd, BATCH_OVERHEAD, position))
        except CorruptMessage:
            return None

    def _sequence_problem(self, header: BatchHeader, expected: int, position: int) -> str | None:
        if header.base_offset != expected:
            return f"batch at byte {position} has base offset {header.base_offset}, expected {expected}"
        if header.last_offset_delta < 0:
            return f"batch at byte {position} has negative last_offset_delta {header.last_offset_delta}"
        if header.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
            return f"batch at byte {position} ends at offset {header.last_offset}, out of this segment's range"
        return None

    # -------------------------------------------------------------------------------- aborted-txn index file

    def append_txn_index(self, data: bytes) -> bool:
        """Append ``data`` to the ``.txnindex`` file (created on first use); True if this created the file."""
        created = False
        if self._txn_fd < 0:
            created = not self.txn_index_path.exists()
            self._txn_fd = os.open(self.txn_index_path, OPEN_APPEND, 0o644)
        write_all(self._txn_fd, (data,), len(data))
        return created

    def read_txn_index(self) -> bytes:
        """Content of the ``.txnindex`` file, empty if there is none."""
        try:
            return self.txn_index_path.read_bytes()
        except FileNotFoundError:
            return b""

    def replace_txn_index(self, data: bytes) -> None:
        """Atomically and durably replace the ``.txnindex`` file (for rebuilds after recovery)."""
        self._close_txn_index()
        write_file_atomically(self.txn_index_path, data)

    def _close_txn_index(self) -> None:
        if self._txn_fd >= 0:
            os.close(self._txn_fd)
            self._txn_fd = -1

    # ----------------------------------------------------------------------------------------------- syncing

    def fsync_log(self) -> None:
        """Make the ``.log`` file durable."""
        os.fsync(self._fd)

    def fsync_indexes(self) -> None:
        """Make the offset and time index files durable."""
        self.offset_index.fsync()
        self.time_index.fsync()

    def fsync_txn_index(self) -> None:
        """Make the ``.txnindex`` file durable."""
        fsync_path(self.txn_index_path)

    # ------------------------------------------------------------------------------------------------ ending

    def close(self) -> None:
        """Close every descriptor; idempotent."""
        self.offset_index.close()
        self.time_index.close()
        self._close_txn_index()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        """Close the segment and remove all of its files."""
        self.close()
        for path in (self.log_path, self.offset_index.path, self.time_index.path, self.txn_index_path):
            path.unlink(missing_ok=True)
