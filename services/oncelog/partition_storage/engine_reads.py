"""The partition engine's read path: fetch ranges capped at the high watermark or the LSO, and ListOffsets.

Pure functions over the log and the aborted-transaction indexes; the engine passes its offsets of the moment
(reads take no lock: they run on the loop, between appends) (design/kafka-semantics.md §4.3, §4.5).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from oncelog.errors import InvalidRequest, OffsetOutOfRange
from oncelog.partition_storage.engine_types import FetchResult, ListedOffset, OffsetSpec
from oncelog.partition_storage.leader_epoch_cache import LeaderEpochCache
from oncelog.partition_storage.partition_log import PartitionLog
from oncelog.partition_storage.txn_index import AbortedTxn, TransactionIndex, collect_aborted_txns
from oncelog.torture import mutants

__all__ = ["find_offset", "read_fetch"]


def read_fetch(
    log_: PartitionLog,
    indexes: Mapping[int, TransactionIndex],
    offset: int,
    max_bytes: int,
    high_watermark: int,
    lso: int,
    *,
    committed: bool,
) -> FetchResult:
    """Whole batches from ``offset`` below the LSO (``committed``) or the high watermark, with the aborted
    transactions overlapping them for a read_committed reader.

    Raises:
        OffsetOutOfRange: ``offset`` is below the log start or above the log end.
        InvalidRequest: ``max_bytes`` is negative.
    """
    if max_bytes < 0:
        raise InvalidRequest(f"max_bytes must be >= 0, got {max_bytes}")
    start, end = log_.log_start_offset, log_.log_end_offset
    if not start <= offset <= end:
        raise OffsetOutOfRange(f"fetch offset {offset} is outside [{start}, {end}] of {log_.directory.name}")
    bound = end if mutants.active("serve-above-hw") and not committed else high_watermark
    data, next_offset = log_.read(offset, max_bytes, lso if committed else bound)
    aborted: tuple[AbortedTxn, ...] = ()
    if committed and data:
        aborted = tuple(collect_aborted_txns(_indexes_from(log_, indexes, offset), offset, next_offset))
    return FetchResult(data, next_offset, high_watermark, lso, start, aborted)


def _indexes_from(
    log_: PartitionLog, indexes: Mapping[int, TransactionIndex], offset: int
) -> Iterator[TransactionIndex]:
    first = log_.segment_base_for(offset)
    for base in log_.segment_bases:
        if base >= first and (index := indexes.get(base)) is not None:
            yield index


def find_offset(
    log_: PartitionLog, epochs: LeaderEpochCache, spec: OffsetSpec, bound: int, timestamp_ms: int, leader_epoch: int
) -> ListedOffset:
    """What ListOffsets resolves for ``spec`` below ``bound`` (the HW or the LSO); offset -1 when no readable record
    has that timestamp. The leader epoch is the one Kafka's leader answers: its own (``leader_epoch``) for LATEST,
    and for an offset in the log the epoch of the leader that appended it (``epochs``).

    Raises:
        InvalidRequest: a negative timestamp for TIMESTAMP.
    """
    if spec is OffsetSpec.EARLIEST:
        start = log_.log_start_offset
        return ListedOffset(start, -1, epochs.epoch_for_offset(start))
    if spec is OffsetSpec.LATEST:
        return ListedOffset(bound, -1, leader_epoch)
    if timestamp_ms < 0:
        raise InvalidRequest(f"timestamp_ms must be >= 0 for a timestamp lookup, got {timestamp_ms}")
    found = log_.offset_for_timestamp(timestamp_ms)
    if found is None or found.offset >= bound:
        return ListedOffset(-1, -1, -1)
    return ListedOffset(found.offset, found.timestamp, epochs.epoch_for_offset(found.offset))
