"""Cut a closed partition's files back to an offset, for truncation by leader epoch (docs/design/replication.md §5).

A follower whose log diverges from its leader's (design/replication.md §5 case 2, KIP-101/279) must drop everything from
the
divergence point on. The engine is closed first; this module then works on the files alone, and the next
:meth:`PartitionEngine.open` rebuilds everything derived from them through the ordinary recovery: offset and time
indexes (the cut segment's are deleted and the recovery-point checkpoint removed, so it is rescanned), snapshots
above the new end (deleted by the log's recovery), transaction-index entries at or above the replayed snapshot
(cut and rebuilt by replay) and the producer state. The leader-epoch checkpoint is cut here too. Keeping one path
from "bytes on disk" to "derived state" is why truncation reopens instead of editing live structures; it is rare
(leader changes only).

Batches are never split: the log ends before the first batch holding ``offset`` or any later offset.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from oncelog.partition_storage.leader_epoch_cache import LeaderEpochCache
from oncelog.partition_storage.partition_log import CHECKPOINT_FILE
from oncelog.partition_storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    file_name,
    fsync_directory,
    parse_file_name,
)
from oncelog.records import iter_batches

__all__ = ["truncate_partition_files"]

log = logging.getLogger(__name__)

_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


def truncate_partition_files(directory: Path, offset: int) -> int:
    """Make the closed partition in ``directory`` end before ``offset``; returns the new log end offset.

    Segments starting at or above ``offset`` are deleted (all but the first, which is emptied, so the log keeps
    its start); the segment holding ``offset`` is cut at the start of the batch that holds it. Blocking.
    """
    bases = sorted(b for name in os.listdir(directory) if (b := parse_file_name(name, LOG_SUFFIX)) is not None)
    if not bases:
        return 0
    kept = [b for b in bases if b < offset] or bases[:1]
    for base in bases:
        if base not in kept:
            for suffix in _SEGMENT_SUFFIXES:
                (directory / file_name(base, suffix)).unlink(missing_ok=True)
    last = kept[-1]
    end = _cut_segment(directory / file_name(last, LOG_SUFFIX), last, offset)
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # rebuilt by the rescan of this segment on open
        (directory / file_name(last, suffix)).unlink(missing_ok=True)
    (directory / CHECKPOINT_FILE).unlink(missing_ok=True)  # rescan from the start: nothing above is trusted
    LeaderEpochCache.load(directory).truncate_from_end(end)
    fsync_directory(directory)
    log.warning("truncated %s to offset %d (asked %d) to match the leader's log", directory, end, offset)
    return end


def _cut_segment(path: Path, base: int, offset: int) -> int:
    """Cut one ``.log`` file before the first batch holding ``offset`` or later; returns the offset it ends at."""
    data = path.read_bytes()
    position, end = 0, base
    for header, view in iter_batches(data):
        if header.base_offset + header.last_offset_delta >= offset:
            break
        position += len(view)
        end = header.base_offset + header.last_offset_delta + 1
    with open(path, "r+b") as handle:
        handle.truncate(position)
        handle.flush()
        os.fsync(handle.fileno())
    return end
