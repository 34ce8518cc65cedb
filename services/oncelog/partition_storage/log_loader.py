"""Opening a partition's log directory (Kafka's ``LogLoader``): find the segments, trust or rescan each one.

Segments entirely below the checkpointed recovery point are
trusted after a cheap index check. From the segment holding the recovery point on, every batch is read and
CRC-checked (``split_batches``) and must continue the offsets of the previous one; the scan of that first
segment starts at its last offset index entry below the recovery point (after a clean shutdown that is the
last index entry, so reopening reads about one index interval). The log is truncated before the first bad
batch, later segments that no longer follow are deleted, the indexes are rebuilt for the rescanned part,
snapshots above the new log end are deleted, and the result is fsynced and checkpointed.

Also the directory's small files: the recovery-point checkpoint and the ``.lock`` file.
"""

from __future__ import annotations

import bisect
import fcntl
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from oncelog.errors import StorageUnavailable
from oncelog.partition_storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    SegmentRecovery,
    parse_file_name,
    write_file_atomically,
)

__all__ = [
    "CHECKPOINT_FILE",
    "LoadedSegments",
    "RecoveryResult",
    "load_segments",
    "lock_directory",
    "read_recovery_checkpoint",
    "scan_directory",
    "write_recovery_checkpoint",
]

log = logging.getLogger(__name__)

CHECKPOINT_FILE = "recovery-point-offset-checkpoint"
CHECKPOINT_VERSION = 0
LOCK_FILE = ".lock"
TMP_SUFFIX = ".tmp"


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    """What opening the log found and repaired.

    The storage engine uses it to rebuild what depends on the rescanned range: the aborted-transaction
    index of every segment in ``segments`` may hold entries for markers that were cut, or miss entries, so
    the engine replays from its snapshot and rewrites them with :meth:`PartitionLog.replace_txn_index`.

    Attributes:
        recovery_point: the checkpointed offset read at open (the log start if there was none).
        log_end_offset: the log end offset after recovery.
        segments: per rescanned segment, where the scan started and what it cut.
        deleted_segments: base offsets of segments deleted because an earlier one ended short.
        deleted_snapshots: offsets of snapshots deleted because they lay above the log end.
    """

    recovery_point: int
    log_end_offset: int
    segments: tuple[SegmentRecovery, ...]
    deleted_segments: tuple[int, ...]
    deleted_snapshots: tuple[int, ...]

    @property
    def truncated_bytes(self) -> int:
        """Bytes cut from segment tails (deleted segments not counted)."""
        return sum(s.truncated_bytes for s in self.segments)

    @property
    def scanned_bytes(self) -> int:
        """Bytes read and CRC-checked while opening."""
        return sum(s.scanned_bytes for s in self.segments)


@dataclass(slots=True)
class LoadedSegments:
    """What :func:`load_segments` did: the recovery point it started from, the rescans, the deletions.

    Attributes:
        recovery_point: the checkpointed offset (the log start if there was none), not yet cut to the log end.
        recovered: per rescanned segment, where the scan started and what it cut.
        rescanned: the rescanned segments, whose log and index files the next flush must fsync.
        deleted: base offsets of segments deleted because an earlier one ended short.
        dir_dirty: a segment file was created or deleted, so the directory needs an fsync.
    """

    recovery_point: int
    recovered: list[SegmentRecovery]
    rescanned: list[LogSegment]
    deleted: list[int]
    dir_dirty: bool


def load_segments(
    directory: Path, segments: list[LogSegment], checkpoint: int | None, *, index_interval_bytes: int, now_ms: int
) -> LoadedSegments:
    """Open every segment of ``directory`` into ``segments`` (empty on entry; filled even if this raises, so the
    caller can close them), creating segment 0 in an empty directory, and recover those at or above
    ``checkpoint``."""
    bases = scan_directory(directory)
    recovered: list[SegmentRecovery] = []
    rescanned: list[LogSegment] = []
    deleted: list[int] = []
    dir_dirty = False
    if not bases:
        segments.append(LogSegment.create(directory, 0, index_interval_bytes=index_interval_bytes, now_ms=now_ms))
        recovery_point = 0
        dir_dirty = True
    else:
        recovery_point = bases[0] if checkpoint is None else max(checkpoint, bases[0])
        first_rescanned = bisect.bisect_right(bases, recovery_point) - 1
        for base in bases:
            segments.append(LogSegment.open(directory, base, index_interval_bytes=index_interval_bytes, now_ms=now_ms))
        i = 0
        while i < len(segments):
            segment = segments[i]
            following = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if i < first_rescanned and following is not None and segment.check_sealed(following):
                i += 1
                continue
            recovered.append(segment.recover(recovery_point if i == first_rescanned else None))
            rescanned.append(segment)
            if following is not None and segment.next_offset != following:
                # the log must stay contiguous: nothing after a segment that ends short can be kept
                log.error(
                    "segment %s ends at offset %d but the next one starts at %d; deleting %d later segment(s)",
                    segment.log_path,
                    segment.next_offset,
                    following,
                    len(segments) - i - 1,
                )
                for later in segments[i + 1 :]:
                    deleted.append(later.base_offset)
                    later.delete()
                del segments[i + 1 :]
                dir_dirty = True
                following = None
            if following is not None:
                segment.seal()
            i += 1

    return LoadedSegments(recovery_point, recovered, rescanned, deleted, dir_dirty)


def scan_directory(directory: Path) -> list[int]:
    """Base offsets of the ``.log`` files; removes leftovers of interrupted writes and orphan indexes."""
    names = os.listdir(directory)
    bases = sorted(base for name in names if (base := parse_file_name(name, LOG_SUFFIX)) is not None)
    present = set(bases)
    for name in names:
        if name.endswith(TMP_SUFFIX):
            log.info("removing leftover %s from %s", name, directory)
            (directory / name).unlink(missing_ok=True)
            continue
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
            base = parse_file_name(name, suffix)
            if base is not None and base not in present:
                log.info("removing %s from %s: no segment %d", name, directory, base)
                (directory / name).unlink(missing_ok=True)
    return bases


def read_recovery_checkpoint(directory: Path) -> int | None:
    """The checkpointed recovery point, or ``None`` when the file is missing or unreadable (recover everything)."""
    path = directory / CHECKPOINT_FILE
    try:
        lines = path.read_text("ascii").split()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        log.warning("cannot read %s (%s); recovering every segment", path, err)
        return None
    if len(lines) != 2 or lines[0] != str(CHECKPOINT_VERSION) or not lines[1].isdigit():
        log.warning("malformed %s %r; recovering every segment", path, lines)
        return None
    return int(lines[1])


def write_recovery_checkpoint(directory: Path, offset: int) -> None:
    """Atomically store ``offset`` as the recovery point."""
    write_file_atomically(directory / CHECKPOINT_FILE, f"{CHECKPOINT_VERSION}\n{offset}\n".encode())


def lock_directory(directory: Path) -> int:
    fd = os.open(directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        os.close(fd)
        raise StorageUnavailable(f"{directory} is already open in another partition log: {err}", definite=True) from err
    return fd
