"""The sparse indexes of a segment: ``.index`` (offset -> position) and ``.timeindex`` (timestamp -> offset).

Kafka's ``OffsetIndex`` and ``TimeIndex``; the file formats are described in
:mod:`oncelog.partition_storage.segment`. Both are hints: a lookup gives a position to scan forward from.
"""

from __future__ import annotations

import bisect
import itertools
import os
import struct
from array import array
from dataclasses import dataclass
from pathlib import Path

from oncelog.partition_storage.segment_files import OPEN_APPEND, fsync_path, write_all

__all__ = ["NO_TIMESTAMP", "CorruptIndexError", "OffsetIndex", "TimeIndex", "TimestampOffset"]

NO_TIMESTAMP = -1
"""``max_timestamp`` of a segment that holds no timestamped batch (Kafka's ``RecordBatch.NO_TIMESTAMP``)."""

_OFFSET_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")


class CorruptIndexError(Exception):
    """An index file fails its sanity check; the caller rebuilds it from the log (never a client error)."""


def _increasing(values: array, *, strict: bool) -> bool:
    if strict:
        return all(a < b for a, b in itertools.pairwise(values))
    return all(a <= b for a, b in itertools.pairwise(values))


class _SparseIndex:
    """Append-only sorted index file mirrored in two typed arrays; the file is written, never rewritten."""

    _ENTRY: struct.Struct
    _KEY_TYPE: str
    _VALUE_TYPE: str

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._keys = array(self._KEY_TYPE)
        self._values = array(self._VALUE_TYPE)
        self._loaded = False
        self._persisted = 0  # entries present in the file
        self._fd = -1

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def loaded(self) -> bool:
        """True once the entries are in memory (always for the active segment)."""
        return self._loaded

    def load(self) -> None:
        """Read and check every entry (Kafka's ``sanityCheck``, applied to all of them).

        Raises:
            FileNotFoundError: the file does not exist.
            CorruptIndexError: a partial entry, or keys out of order.
        """
        data = self.path.read_bytes()
        if len(data) % self._ENTRY.size:
            raise CorruptIndexError(f"{self.path.name}: size {len(data)} is not a multiple of {self._ENTRY.size}")
        keys = array(self._KEY_TYPE)
        values = array(self._VALUE_TYPE)
        for key, value in self._ENTRY.iter_unpack(data):
            keys.append(key)
            values.append(value)
        self._check(keys, values)
        self._keys, self._values = keys, values
        self._persisted = len(keys)
        self._loaded = True

    def _check(self, keys: array, values: array) -> None:
        raise NotImplementedError

    def read_last_entry(self) -> tuple[int, int] | None:
        """The file's last entry without loading the rest, or ``None`` when empty.

        Raises:
            FileNotFoundError: the file does not exist.
            CorruptIndexError: the size is not a whole number of entries.
        """
        with open(self.path, "rb") as file:
            size = os.fstat(file.fileno()).st_size
            if size % self._ENTRY.size:
                raise CorruptIndexError(f"{self.path.name}: size {size} is not a multiple of {self._ENTRY.size}")
            if not size:
                return None
            file.seek(size - self._ENTRY.size)
            return self._ENTRY.unpack(file.read(self._ENTRY.size))

    def reset(self) -> None:
        """Drop every entry, in memory and in the file (which is created if missing)."""
        self._keys = array(self._KEY_TYPE)
        self._values = array(self._VALUE_TYPE)
        self._loaded = True
        self._truncate_file(0)

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` entries, in memory and in the file."""
        del self._keys[count:]
        del self._values[count:]
        if self._persisted > count:
            self._truncate_file(count)

    def _truncate_file(self, count: int) -> None:
        self._open()
        os.ftruncate(self._fd, count * self._ENTRY.size)
        self._persisted = count

    def _append(self, key: int, value: int) -> None:
        self._keys.append(key)
        self._values.append(value)

    def persist(self) -> None:
        """Write the entries appended since the last call with one ``write``."""
        if self._persisted == len(self._keys):
            return
        pack = self._ENTRY.pack
        data = b"".join(pack(self._keys[i], self._values[i]) for i in range(self._persisted, len(self._keys)))
        self._open()
        write_all(self._fd, (data,), len(data))
        self._persisted = len(self._keys)

    def _open(self) -> None:
        if self._fd < 0:
            self._fd = os.open(self.path, OPEN_APPEND, 0o644)

    def fsync(self) -> None:
        """Make the file durable (through a descriptor of its own)."""
        fsync_path(self.path)

    def close(self) -> None:
        """Close the write descriptor; the entries stay in memory."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class OffsetIndex(_SparseIndex):
    """Sparse map from a batch's last offset to its file position (Kafka's ``OffsetIndex``)."""

    _ENTRY = _OFFSET_ENTRY
    _KEY_TYPE = "I"  # relative offset
    _VALUE_TYPE = "I"  # position

    def _check(self, keys: array, values: array) -> None:
        if not (_increasing(keys, strict=True) and _increasing(values, strict=True)):
            raise CorruptIndexError(f"{self.path.name}: offsets or positions are not strictly increasing")

    def append(self, last_offset: int, position: int) -> None:
        """Add an entry in memory; :meth:`persist` writes it."""
        self._append(last_offset - self.base_offset, position)

    def lookup(self, offset: int) -> int:
        """Position of the indexed batch with the largest last offset ``<= offset``, or 0 (segment start)."""
        i = bisect.bisect_right(self._keys, offset - self.base_offset) - 1
        return self._values[i] if i >= 0 else 0

    def floor_position(self, position: int) -> int:
        """Largest indexed position ``<= position``, or 0: a batch boundary to walk forward from."""
        i = bisect.bisect_right(self._values, position) - 1
        return self._values[i] if i >= 0 else 0

    def count_before_position(self, position: int) -> int:
        """Number of entries whose position is ``< position``."""
        return bisect.bisect_left(self._values, position)

    def count_below(self, offset: int) -> int:
        """Number of entries whose offset is ``< offset``."""
        return bisect.bisect_left(self._keys, offset - self.base_offset)

    def entry(self, i: int) -> tuple[int, int]:
        """Entry ``i`` as ``(absolute last offset, position)``."""
        return self._keys[i] + self.base_offset, self._values[i]


class TimeIndex(_SparseIndex):
    """Largest timestamp so far -> last offset of the batch carrying it (Kafka's ``TimeIndex``)."""

    _ENTRY = _TIME_ENTRY
    _KEY_TYPE = "q"  # timestamp
    _VALUE_TYPE = "I"  # relative offset

    def _check(self, keys: array, values: array) -> None:
        if not (_increasing(keys, strict=True) and _increasing(values, strict=False)):
            raise CorruptIndexError(f"{self.path.name}: timestamps or offsets are out of order")

    @property
    def last(self) -> tuple[int, int] | None:
        """Last entry in memory as ``(timestamp, absolute offset)``."""
        if not self._keys:
            return None
        return self._keys[-1], self._values[-1] + self.base_offset

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is above the last entry's (``TimeIndex.maybeAppend``)."""
        if timestamp > (self._keys[-1] if self._keys else NO_TIMESTAMP):
            self._append(timestamp, offset - self.base_offset)

    def lookup_below(self, timestamp: int) -> int | None:
        """Offset of the entry with the largest timestamp ``< timestamp``, or ``None``.

        Every batch up to that offset has ``max_timestamp < timestamp``, so a search for the first batch
        reaching ``timestamp`` may start right after it. (Kafka looks up ``<=``, which can skip an earlier
        batch carrying the same timestamp.)
        """
        i = bisect.bisect_left(self._keys, timestamp) - 1
        return self._values[i] + self.base_offset if i >= 0 else None

    def truncate_after(self, offset: int) -> None:
        """Drop entries whose offset is above ``offset``."""
        self.truncate(bisect.bisect_right(self._values, offset - self.base_offset))


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A record found by timestamp (Kafka's ``TimestampAndOffset``)."""

    timestamp: int
    offset: int
