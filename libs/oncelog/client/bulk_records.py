"""Records appended in bulk, row by row or column by column, through one accumulator path.

``Producer.send_batch`` hands the accumulator Python lists of keys and values (:class:`RowRecords`);
``Producer.send_arrow`` hands it Arrow columns (:class:`ColumnRecords`), encoded a batch at a time by
:mod:`oncelog.records.columnar` with no Python per record. Both answer the accumulator's three questions the
same way: are the records valid and how much buffer memory may they take (:meth:`BulkRecords.memory_bound`),
and how many of them fit in the open batch (:meth:`BulkRecords.append_to`), so a partition's batches, their
runs and their futures do not depend on which form the records came in.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from oncelog.client.producer_batch import (
    MAX_RECORD_OVERHEAD,
    all_bytes,
    as_bytes,
    bulk_bound,
    byte_length,
    check_record_size,
    estimate_record_size,
)
from oncelog.records.batch import BATCH_OVERHEAD
from oncelog.records.builder import RecordsBuilder
from oncelog.records.varint import encode_varlong

if TYPE_CHECKING:
    from oncelog.client.metadata import TopicInfo
    from oncelog.client.partitioner import DefaultPartitioner
    from oncelog.records.columnar import BinaryColumn

Serializer = Callable[[Any], bytes | None]

__all__ = ["BulkRecords", "ColumnRecords", "RowRecords"]

_SMALLEST_RECORD = 7
"""Bytes of the smallest encoded record: length, attributes, both deltas, null key, null value, no headers."""


class BulkRecords(Protocol):
    """Header-less records of one partition, appended in order by :meth:`RecordAccumulator.append_groups`."""

    def __len__(self) -> int: ...

    def memory_bound(self, batch_size: int, max_request_size: int) -> int:
        """Check every record (type, size) and return the most buffer memory they can take.

        Raises:
            TypeError: a key or value is not bytes.
            MessageTooLarge: a record alone exceeds ``max_request_size``.
        """
        ...

    def append_to(self, builder: RecordsBuilder, start: int, timestamp: int, max_batch_bytes: int) -> int:
        """Encode records from ``start`` into ``builder`` while it stays within ``max_batch_bytes``; how many.

        An empty builder takes at least one record, so a new batch always makes progress.
        """
        ...

    def payload_bytes(self) -> int:
        """The bytes of the values (what the sticky partitioner counts)."""
        ...

    @property
    def keyless(self) -> bool:
        """No record has a key column (the sticky partitioner places them)."""
        ...

    def by_partition(
        self, partitioner: DefaultPartitioner, topic: str, info: TopicInfo, partition: int | None
    ) -> dict[int, tuple[Sequence[int] | None, BulkRecords]]:
        """The records grouped by partition, each group in order: ``partition`` if given, else each key's, else
        the sticky one; with the group's positions among all records (None when it holds them all)."""
        ...


class RowRecords:
    """Keys and values as Python sequences of bytes (or None)."""

    __slots__ = ("keys", "values")

    def __init__(self, keys: Sequence[Any] | None, values: Sequence[Any]) -> None:
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values; pass one key per value or none")
        self.keys: Sequence[bytes | None] | None = keys
        self.values: Sequence[bytes | None] = values

    def __len__(self) -> int:
        return len(self.values)

    def memory_bound(self, batch_size: int, max_request_size: int) -> int:
        values = self.values if all_bytes(self.values) else [as_bytes(v, "value") for v in self.values]
        keys = self.keys if self.keys is None or all_bytes(self.keys) else [as_bytes(k, "key") for k in self.keys]
        self.keys, self.values = keys, values
        largest = max(map(byte_length, values), default=0)
        raw = sum(map(byte_length, values))
        if keys is not None:
            largest += max(map(byte_length, keys), default=0)
            raw += sum(map(byte_length, keys))
        if BATCH_OVERHEAD + largest + MAX_RECORD_OVERHEAD > max_request_size:
            for index, value in enumerate(values):
                check_record_size(None if keys is None else keys[index], value, (), max_request_size)
        return bulk_bound(len(values), raw, largest, batch_size) if values else 0

    @classmethod
    def serialized(
        cls,
        values: Sequence[Any],
        keys: Sequence[Any] | None,
        key_serializer: Serializer | None,
        value_serializer: Serializer | None,
    ) -> RowRecords:
        """Rows through the producer's serializers (None stays None)."""
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values; pass one key per value or none")
        if value_serializer is not None:
            values = [None if v is None else value_serializer(v) for v in values]
        if keys is not None and key_serializer is not None:
            keys = [None if k is None else key_serializer(k) for k in keys]
        return cls(keys, values)

    def append_to(self, builder: RecordsBuilder, start: int, timestamp: int, max_batch_bytes: int) -> int:
        return builder.append_run(self.keys, self.values, start, timestamp, max_batch_bytes)

    def payload_bytes(self) -> int:
        return sum(len(v) for v in self.values if v is not None)

    @property
    def keyless(self) -> bool:
        return self.keys is None

    def by_partition(
        self, partitioner: DefaultPartitioner, topic: str, info: TopicInfo, partition: int | None
    ) -> dict[int, tuple[Sequence[int] | None, BulkRecords]]:
        count, available = len(info.partitions), info.available_partitions()
        grouped = partitioner.group(topic, self.keys, self.values, count, available, partition)
        return {
            target: (positions, RowRecords(group_keys, group_values))
            for target, (positions, group_keys, group_values) in grouped.items()
        }


class ColumnRecords:
    """Keys and values as Arrow columns (see :func:`oncelog.records.columnar.as_binary_column`).

    Build it with :meth:`from_arrow`; it needs pyarrow and numpy (``pip install 'oncelog[arrow]'``).
    """

    __slots__ = ("_plan", "_plan_at", "keys", "values")

    def __init__(self, keys: BinaryColumn | None, values: BinaryColumn) -> None:
        if keys is not None and len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys for {len(values)} values; pass one key per value or none")
        self.keys = keys
        self.values = values
        # the fresh batches the records from _plan_at[0] take at batch size _plan_at[1]: (count, section) each
        self._plan: deque[tuple[int, Any]] = deque()
        self._plan_at = (-1, -1)

    @classmethod
    def from_arrow(cls, values: object, keys: object | None = None) -> ColumnRecords:
        from oncelog.records.columnar import as_binary_column

        return cls(None if keys is None else as_binary_column(keys, "key"), as_binary_column(values, "value"))

    def __len__(self) -> int:
        return len(self.values)

    def take(self, positions: Any) -> ColumnRecords:
        """The records at ``positions`` (an integer array), in that order."""
        return ColumnRecords(None if self.keys is None else self.keys.take(positions), self.values.take(positions))

    @property
    def keyless(self) -> bool:
        return self.keys is None

    def by_partition(
        self, partitioner: DefaultPartitioner, topic: str, info: TopicInfo, partition: int | None
    ) -> dict[int, tuple[Sequence[int] | None, BulkRecords]]:
        if partition is not None:
            return {partition: (None, self)}
        count, available = len(info.partitions), info.available_partitions()
        if self.keys is None:
            return {partitioner.partition(topic, None, count, available): (None, self)}
        keys: list[bytes | None] = self.keys.array.to_pylist()
        return self.split(partitioner.partition_keys(topic, keys, count, available))

    def split(self, targets: Sequence[int]) -> dict[int, tuple[Sequence[int] | None, BulkRecords]]:
        """The records grouped by their partition in ``targets`` (one per record), each group in order: its
        positions among all (None when it holds them all) and its records."""
        import numpy as np

        by_record = np.asarray(targets, dtype=np.int64)
        order = np.argsort(by_record, kind="stable")  # each partition's positions stay in record order
        found, starts = np.unique(by_record[order], return_index=True)
        if len(found) == 1:
            return {int(found[0]): (None, self)}
        groups: dict[int, tuple[Sequence[int] | None, BulkRecords]] = {}
        for target, positions in zip(found.tolist(), np.split(order, starts[1:]), strict=True):
            groups[target] = (positions.tolist(), self.take(positions))
        return groups

    def memory_bound(self, batch_size: int, max_request_size: int) -> int:
        sizes = self.values.lengths.clip(0)
        if self.keys is not None:
            sizes = sizes + self.keys.lengths.clip(0)
        count = len(sizes)
        largest = int(sizes.max()) if count else 0
        if BATCH_OVERHEAD + largest + MAX_RECORD_OVERHEAD > max_request_size:
            for index in (sizes + BATCH_OVERHEAD + MAX_RECORD_OVERHEAD > max_request_size).nonzero()[0]:
                key = None if self.keys is None else self.keys.item(int(index))
                check_record_size(key, self.values.item(int(index)), (), max_request_size)
        return bulk_bound(count, int(sizes.sum()), largest, batch_size) if count else 0

    def append_to(self, builder: RecordsBuilder, start: int, timestamp: int, max_batch_bytes: int) -> int:
        from oncelog.records.columnar import encode_run, fitting_records

        if builder.count == 0 and builder.base_timestamp is None:
            # a fresh batch, as every batch after the open one is: the rest of the records are laid out in fresh
            # batches and encoded together once, rather than a batch at a time
            if self._plan_at != (start, max_batch_bytes) or not self._plan:
                self._plan_fresh_batches(start, max_batch_bytes)
            taken, section = self._plan.popleft()
            builder.append_section(section, taken, timestamp)
            self._plan_at = (start + taken, max_batch_bytes)
            return taken
        base = timestamp if builder.base_timestamp is None else builder.base_timestamp
        timestamp_delta = encode_varlong(timestamp - base)
        room = max_batch_bytes - builder.size_in_bytes
        key = None if self.keys is None else self.keys.item(start)
        first = estimate_record_size(
            key, self.values.item(start), offset_delta=builder.count, timestamp_delta=timestamp - base
        )
        if first > room:
            return 0  # a batch the plan filled, or an open one without room: no numpy for that
        # sizes are computed for as many records as could possibly fit, not for the whole rest of the run
        stop = min(len(self.values), start + max(1, room // _SMALLEST_RECORD + 1))
        keys = None if self.keys is None else self.keys.slice(start, stop)
        values = self.values.slice(start, stop)
        taken = fitting_records(keys, values, builder.count, timestamp_delta, room)  # at least the first
        keys = None if keys is None else keys.slice(0, taken)
        section = encode_run(keys, values.slice(0, taken), builder.count, timestamp_delta)
        builder.append_section(section, taken, timestamp)
        return taken

    def _plan_fresh_batches(self, start: int, max_batch_bytes: int) -> None:
        import numpy as np

        from oncelog.records.columnar import encode_run, plan_batches

        keys = None if self.keys is None else self.keys.slice(start, len(self))
        values = self.values.slice(start, len(self))
        plan = plan_batches(keys, values, max_batch_bytes - BATCH_OVERHEAD)
        counts = [taken for taken, _ in plan]
        firsts = np.repeat(np.cumsum([0, *counts[:-1]]), counts)
        encoded = encode_run(keys, values, np.arange(len(values)) - firsts, encode_varlong(0))
        self._plan.clear()
        offset = 0
        for taken, size in plan:
            self._plan.append((taken, encoded[offset : offset + size]))
            offset += size
        self._plan_at = (start, max_batch_bytes)

    def payload_bytes(self) -> int:
        return self.values.payload_bytes()
