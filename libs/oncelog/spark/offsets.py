"""Offset arithmetic of the Spark source: the JSON offset format, range planning and rate limiting.

A source offset is one offset per partition, written into Spark's checkpoint (``offsets/N``) as JSON in
the shape Spark's Kafka source uses: ``{"orders": {"0": 120, "1": 97}}``. Each value is the *next* offset
to read, so a micro-batch reads ``[start, end)`` per partition. Under read_committed every end lies at or
below the partition's last stable offset, so the records in a range are settled (committed or aborted) and
a replay of the batch reads exactly the same rows (design/spark-connector.md §3.2).

Offsets count log positions, not records: control markers and aborted data occupy offsets that no row
comes from, so "records per trigger" and range sizes are upper bounds on rows, as in Spark's Kafka source.

Everything here is pure: no network, no Spark, so the planning rules are unit-tested directly.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from oncelog.client.records import TopicPartition

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetRange",
    "PartitionOffsets",
    "limit_by_records",
    "offsets_from_json",
    "offsets_to_json",
    "plan_ranges",
]

EARLIEST = -2
"""In ``startingOffsets`` JSON: the partition's log start offset (Spark's Kafka convention)."""
LATEST = -1
"""In offsets JSON: the partition's latest offset, the last stable offset under read_committed."""

PartitionOffsets = dict[TopicPartition, int]
"""One offset per partition."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """The offsets ``[start, end)`` of one partition that one Spark task reads.

    Attributes:
        topic: the topic.
        partition: the partition index.
        start: first offset to read.
        end: first offset not to read; rows come only from offsets below it.
    """

    topic: str
    partition: int
    start: int
    end: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition as a :class:`TopicPartition`."""
        return TopicPartition(self.topic, self.partition)

    @property
    def size(self) -> int:
        """Offsets in the range (an upper bound on its rows)."""
        return self.end - self.start


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """The checkpoint form of ``offsets``: ``{topic: {"partition": offset}}``, sorted for stable output."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return out


def offsets_from_json(document: object, *, allow_sentinels: bool = False) -> PartitionOffsets:
    """Parse ``{topic: {"partition": offset}}`` (a checkpoint offset or a ``startingOffsets`` option).

    Args:
        document: the decoded JSON.
        allow_sentinels: accept -2 (earliest) and -1 (latest), as the offset options do; a checkpointed
            offset is always a real offset.

    Raises:
        ValueError: the shape is wrong, a partition is not a non-negative integer, or an offset is
            negative (beyond the allowed sentinels); the message quotes the bad part.
    """
    if not isinstance(document, Mapping):
        raise ValueError(f'expected a JSON object like {{"orders": {{"0": 12}}}}, got {document!r}')
    lowest = EARLIEST if allow_sentinels else 0
    offsets: PartitionOffsets = {}
    for topic, partitions in document.items():
        if not isinstance(topic, str) or not topic:
            raise ValueError(f"topic {topic!r} is not a topic name")
        if not isinstance(partitions, Mapping):
            raise ValueError(f'topic {topic!r} maps to {partitions!r}; expected {{"partition": offset}}')
        for partition, offset in partitions.items():
            if not (isinstance(partition, str) and partition.isdigit()):
                raise ValueError(f"topic {topic!r}: partition {partition!r} is not a non-negative integer")
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < lowest:
                allowed = "an offset >= 0, -2 (earliest) or -1 (latest)" if allow_sentinels else "an offset >= 0"
                raise ValueError(f"{topic}-{partition}: {offset!r} is not {allowed}")
            offsets[TopicPartition(topic, int(partition))] = offset
    return offsets


def plan_ranges(
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Cut ``[start, end)`` of every partition into the ranges Spark tasks read.

    One range per partition with data, split further like Spark's ``KafkaOffsetRangeCalculator``:
    ranges longer than ``max_records_per_partition`` are cut into equal parts, and when fewer than
    ``min_partitions`` ranges result, each is split in proportion to its share of all offsets. The
    result depends only on the arguments, so a replayed micro-batch gets the same tasks with the same
    ranges. Partitions missing from ``start`` start at 0 (a partition added while the query ran).

    Raises:
        ValueError: an end lies before its start (the checkpoint and the log disagree).
    """
    ranges: list[OffsetRange] = []
    for tp in sorted(end):
        lo, hi = start.get(tp, 0), end[tp]
        if hi < lo:
            raise ValueError(f"{tp}: end offset {hi} is before start offset {lo}")
        if hi > lo:
            ranges.append(OffsetRange(tp.topic, tp.partition, lo, hi))
    if max_records_per_partition:
        ranges = [part for r in ranges for part in _split(r, math.ceil(r.size / max_records_per_partition))]
    if min_partitions and 0 < len(ranges) < min_partitions:
        total = sum(r.size for r in ranges)
        ranges = [part for r in ranges for part in _split(r, max(1, round(r.size / total * min_partitions)))]
    return ranges


def _split(r: OffsetRange, parts: int) -> Iterable[OffsetRange]:
    parts = max(1, min(parts, r.size))
    bounds = [r.start + r.size * i // parts for i in range(parts + 1)]
    return [OffsetRange(r.topic, r.partition, a, b) for a, b in itertools.pairwise(bounds) if b > a]


def limit_by_records(
    start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], max_records: int
) -> PartitionOffsets:
    """End offsets that admit at most about ``max_records`` offsets, shared in proportion to each backlog.

    This is Spark Kafka source's ``rateLimit``: a partition's share is ``max_records * backlog / total``,
    rounded down, except that a share below one offset is rounded up so that no partition with data
    starves. Partitions missing from ``start`` start at 0.
    """
    backlog = {tp: max(0, latest[tp] - start.get(tp, 0)) for tp in latest}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    ends: PartitionOffsets = {}
    for tp, size in backlog.items():
        begin = start.get(tp, 0)
        share = max_records * (size / total)
        admitted = math.ceil(share) if share < 1 else math.floor(share)
        ends[tp] = min(latest[tp], begin + admitted)
    return ends
