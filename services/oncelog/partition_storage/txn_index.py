"""Aborted-transaction index of one log segment (the ``.txnindex`` file) and its read_committed search.

Follows Kafka's ``TransactionIndex`` / ``AbortedTxn`` (design/kafka-semantics.md §4.4). Each segment keeps, in the order
their
ABORT markers were written into that segment, one entry per aborted transaction that had data in the
partition: producer id, first offset, last offset (the marker's offset) and the last stable offset computed
when the marker was written. Committed transactions and empty transactions (a marker without data) are not
indexed.

The 34-byte entry layout is Kafka's, byte for byte (big-endian)::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64 | last_stable_offset int64

This module only encodes and decodes; reading and writing the file is the caller's job, so the index can be
tested without a disk and the caller decides when to fsync.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from oncelog.errors import CorruptMessage

_ENTRY = struct.Struct(">hqqqq")

ENTRY_SIZE = _ENTRY.size
"""Bytes per index entry (34), as in Kafka's ``AbortedTxn.TOTAL_SIZE``."""

CURRENT_VERSION = 0
"""Entry version written by this module; entries with a higher version are rejected on read."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One aborted transaction of a partition, as stored in the segment holding its ABORT marker.

    Attributes:
        producer_id: the producer whose transaction was aborted.
        first_offset: offset of the transaction's first data batch in this partition.
        last_offset: offset of the ABORT marker.
        last_stable_offset: the partition's LSO right after the marker, ignoring the high watermark: the first
            offset of the earliest other transaction still open at that moment, else ``last_offset + 1``.
            The fetch search relies on it to stop early (see :meth:`TransactionIndex.collect_aborted_txns`).
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        """Encode as one 34-byte index entry (version 0)."""
        return _ENTRY.pack(
            CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )

    @classmethod
    def from_bytes(cls, data: bytes | bytearray | memoryview, offset: int = 0) -> AbortedTxn:
        """Decode the entry that starts at ``offset`` of ``data``.

        Raises:
            CorruptMessage: fewer than 34 bytes are left, or the entry has an unknown version.
        """
        if len(data) - offset < ENTRY_SIZE:
            raise CorruptMessage(f"transaction index entry at byte {offset} is truncated")
        version, producer_id, first_offset, last_offset, lso = _ENTRY.unpack_from(data, offset)
        if version != CURRENT_VERSION:
            # A version we do not know may change the meaning of the fields; refusing is safer than guessing.
            raise CorruptMessage(f"transaction index entry at byte {offset} has unknown version {version}")
        return cls(producer_id, first_offset, last_offset, lso)


class TransactionIndex:
    """The aborted transactions whose ABORT marker lies in one segment, in marker order.

    Entries must arrive with strictly increasing ``last_offset`` (markers are appended in offset order);
    :meth:`append` enforces it, so a replayed or duplicated marker cannot produce a second entry.
    """

    __slots__ = ("_base_offset", "_entries", "_last_offsets")

    def __init__(self, base_offset: int) -> None:
        """Create an empty index for the segment starting at ``base_offset``."""
        if base_offset < 0:
            raise ValueError(f"segment base offset must be >= 0, got {base_offset}")
        self._base_offset = base_offset
        self._entries: list[AbortedTxn] = []
        # Parallel list of marker offsets, kept for bisect (entries are sorted by last_offset).
        self._last_offsets: list[int] = []

    @property
    def base_offset(self) -> int:
        """Base offset of the segment this index belongs to."""
        return self._base_offset

    @property
    def last_offset(self) -> int | None:
        """Marker offset of the newest entry, or ``None`` when the index is empty."""
        return self._last_offsets[-1] if self._last_offsets else None

    @property
    def entries(self) -> tuple[AbortedTxn, ...]:
        """All entries in marker order."""
        return tuple(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[AbortedTxn]:
        return iter(tuple(self._entries))

    def append(self, txn: AbortedTxn) -> bytes:
        """Add an entry and return its 34-byte encoding, for the caller to append to the ``.txnindex`` file.

        Raises:
            ValueError: ``txn.last_offset`` is not greater than the newest entry's, or lies before the segment.
        """
        if txn.last_offset < self._base_offset:
            raise ValueError(f"aborted txn {txn} ends before segment base offset {self._base_offset}")
        if self._last_offsets and txn.last_offset <= self._last_offsets[-1]:
            raise ValueError(
                f"last offset of appended aborted txns must increase: {txn.last_offset} <= {self._last_offsets[-1]}"
            )
        if txn.first_offset > txn.last_offset:
            raise ValueError(f"aborted txn {txn} starts after its marker")
        self._entries.append(txn)
        self._last_offsets.append(txn.last_offset)
        return txn.to_bytes()

    def truncate_to(self, offset: int) -> int:
        """Drop every entry whose marker is at or above ``offset`` (log truncation, like Kafka's ``truncateTo``).

        Returns:
            The index's new size in bytes, for the caller to truncate the file to.
        """
        keep = bisect.bisect_left(self._last_offsets, offset)
        del self._entries[keep:]
        del self._last_offsets[keep:]
        return keep * ENTRY_SIZE

    def to_bytes(self) -> bytes:
        """Encode the whole index, the exact content of its ``.txnindex`` file."""
        return b"".join(entry.to_bytes() for entry in self._entries)

    @classmethod
    def from_bytes(cls, base_offset: int, data: bytes | bytearray | memoryview) -> TransactionIndex:
        """Decode a ``.txnindex`` file's content.

        Unlike Kafka, which silently ignores a partial trailing entry, any damage is reported: the caller
        rebuilds the index by replaying the segment through the producer state (design/kafka-semantics.md §4.6).

        Raises:
            CorruptMessage: the length is not a multiple of 34 bytes, an entry has an unknown version, marker
                offsets do not strictly increase, or an entry ends before the segment's base offset.
        """
        if len(data) % ENTRY_SIZE:
            raise CorruptMessage(f"transaction index of {len(data)} bytes is not a whole number of entries")
        index = cls(base_offset)
        for position in range(0, len(data), ENTRY_SIZE):
            txn = AbortedTxn.from_bytes(data, position)
            try:
                index.append(txn)
            except ValueError as exc:
                raise CorruptMessage(f"transaction index entry at byte {position}: {exc}") from exc
        return index

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """Aborted transactions of this segment that overlap the fetch range ``[fetch_offset, upper_bound)``.

        An entry overlaps when ``last_offset >= fetch_offset`` and ``first_offset < upper_bound``.

        Returns:
            The overlapping entries in marker order, and whether the search is complete: ``True`` once an
            entry's recorded LSO is at or above ``upper_bound``. Every transaction still open when that marker
            was written started at or after that LSO, and every later one starts after the marker, so no
            later entry, here or in a later segment, can overlap the range.
        """
        if upper_bound <= fetch_offset:
            return [], True
        found: list[AbortedTxn] = []
        # Entries ending before fetch_offset cannot overlap, and cannot end the search either: their LSO is at
        # most last_offset + 1 <= fetch_offset < upper_bound. Skip them by bisecting on the marker offset.
        start = bisect.bisect_left(self._last_offsets, fetch_offset)
        for txn in self._entries[start:]:
            if txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False


def collect_aborted_txns(
    indexes_in_order: Iterable[TransactionIndex], fetch_offset: int, upper_bound: int
) -> list[AbortedTxn]:
    """Aborted transactions overlapping ``[fetch_offset, upper_bound)`` for a read_committed fetch
    (design/kafka-semantics.md §4.4, §4.5).

    Args:
        indexes_in_order: the transaction indexes of the segment containing ``fetch_offset`` and of every later
            segment, in offset order. It is consumed lazily, so a generator that loads index files on demand
            reads only the segments the search needs.
        fetch_offset: first offset of the fetch (inclusive).
        upper_bound: offset just past the returned data (exclusive); never above the LSO for read_committed.

    Returns:
        The entries to put in the fetch response, in marker order. The consumer drops data batches of a listed
        producer from ``first_offset`` until that producer's ABORT marker.
    """
    result: list[AbortedTxn] = []
    for index in indexes_in_order:
        found, complete = index.collect_aborted_txns(fetch_offset, upper_bound)
        result.extend(found)
        if complete:
            break
    return result
