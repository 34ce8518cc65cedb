"""Which old segments retention deletes, and the range checks of a log's roll and retention settings.

Kafka's ``deleteRetentionMsBreachedSegments`` and ``deleteRetentionSizeBreachedSegments``; the partition log
(:meth:`~oncelog.partition_storage.partition_log.PartitionLog.enforce_retention`) chooses the candidates and
deletes the files.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.errors import InvalidConfig
from oncelog.partition_storage.segment import MAX_SEGMENT_BYTES, LogSegment

__all__ = ["check_log_config", "retention_breaches"]


def retention_breaches(
    candidates: Sequence[LogSegment], log_size: int, now: int, retention_ms: int, retention_bytes: int
) -> int:
    """How many of ``candidates`` (oldest first) breach retention in a log of ``log_size`` bytes.

    A segment is deleted when ``now - largest timestamp > retention_ms``, or while the log stays above
    ``retention_bytes`` without it; -1 disables either rule.
    """
    by_time = 0
    if retention_ms >= 0:
        while by_time < len(candidates) and now - candidates[by_time].largest_timestamp > retention_ms:
            by_time += 1
    by_size = 0
    if retention_bytes >= 0:
        excess = log_size - retention_bytes
        while by_size < len(candidates) and candidates[by_size].size <= excess:
            excess -= candidates[by_size].size
            by_size += 1
    return max(by_time, by_size)


def check_log_config(
    segment_bytes: int, segment_ms: int, retention_bytes: int, retention_ms: int, index_interval_bytes: int
) -> None:
    """Raise :class:`InvalidConfig` naming every setting out of range."""
    problems = []
    if not 1 <= segment_bytes <= MAX_SEGMENT_BYTES:
        problems.append(f"segment_bytes must be in [1, {MAX_SEGMENT_BYTES}], got {segment_bytes}")
    if segment_ms < 1:
        problems.append(f"segment_ms must be >= 1, got {segment_ms}")
    if retention_bytes < -1:
        problems.append(f"retention_bytes must be -1 (no limit) or >= 0, got {retention_bytes}")
    if retention_ms < -1:
        problems.append(f"retention_ms must be -1 (no limit) or >= 0, got {retention_ms}")
    if index_interval_bytes < 0:
        problems.append(f"index_interval_bytes must be >= 0, got {index_interval_bytes}")
    if problems:
        raise InvalidConfig("; ".join(problems))
