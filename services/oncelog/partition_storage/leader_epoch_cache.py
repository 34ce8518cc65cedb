"""LeaderEpochCache: which leader epoch started at which offset (Kafka's ``LeaderEpochFileCache``, KIP-101).

A replica keeps an ordered list of ``(epoch, start_offset)`` entries, strictly increasing in both: the leader of
epoch *e* wrote its first record at ``start_offset``. It is what truncation uses instead of the high watermark
(docs/design/replication.md §5): a follower asks the leader where its latest epoch ends on the leader and cuts its
log there, so neither an acknowledged record (case 1 there) nor a divergent tail (case 2) survives wrongly.

Updated by the owner of the partition's engine:

* :meth:`assign` when a leader starts an epoch (at its log end) and when a follower appends a batch stamped
  with a newer epoch (at the batch's base offset);
* :meth:`truncate_from_end` when the log is truncated;
* :meth:`truncate_from_start` when the log start moves (retention), keeping the epoch that covers it.

:meth:`end_offset_for` answers OffsetForLeaderEpoch (and the fetch's diverging-epoch check) with Kafka's rules.

Persistence: with a ``path`` every change rewrites the checkpoint file atomically (``leader-epoch-checkpoint``,
Kafka's text format: version, count, then ``epoch start_offset`` lines). Changes are rare (one per leader change),
so the write is synchronous. A file that cannot be parsed raises :class:`CorruptEpochCheckpoint` naming the file.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from oncelog.partition_storage.segment import write_file_atomically

__all__ = [
    "CHECKPOINT_FILE",
    "UNDEFINED_EPOCH",
    "UNDEFINED_OFFSET",
    "CorruptEpochCheckpoint",
    "EpochEntry",
    "LeaderEpochCache",
]

CHECKPOINT_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = 0


class CorruptEpochCheckpoint(ValueError):
    """The leader-epoch checkpoint file is not in the expected format."""


@dataclass(frozen=True, slots=True)
class EpochEntry:
    """The leader of ``epoch`` wrote its first record at ``start_offset``."""

    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epoch → start offset for one partition replica; see the module docstring.

    Args:
        path: the checkpoint file, or None to keep the cache in memory only.
        entries: initial entries (already ordered); :meth:`load` reads them from ``path``.
    """

    def __init__(self, path: Path | None = None, entries: Iterable[EpochEntry] = ()) -> None:
        self._path = path
        self._entries: list[EpochEntry] = list(entries)
        for before, after in zip(self._entries, self._entries[1:], strict=False):
            if not (before.epoch < after.epoch and before.start_offset < after.start_offset):
                raise CorruptEpochCheckpoint(f"entries are not increasing: {before} then {after}")

    @classmethod
    def load(cls, directory: Path) -> LeaderEpochCache:
        """Read ``directory/leader-epoch-checkpoint`` (an empty cache if the file does not exist)."""
        path = directory / CHECKPOINT_FILE
        try:
            text = path.read_text("ascii")
        except FileNotFoundError:
            return cls(path)
        return cls(path, _parse(text, path))

    # ------------------------------------------------------------------------------------------- queries

    @property
    def entries(self) -> list[EpochEntry]:
        """The entries, oldest first."""
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The newest epoch, or :data:`UNDEFINED_EPOCH` when empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def start_offset_of(self, epoch: int) -> int | None:
        """The start offset of exactly ``epoch``, or None if it has no entry."""
        index = bisect.bisect_left([e.epoch for e in self._entries], epoch)
        if index < len(self._entries) and self._entries[index].epoch == epoch:
            return self._entries[index].start_offset
        return None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch of the leader that appended ``offset``: that of the last entry starting at or below it (Kafka's
        ``epochForOffset``, which ListOffsets answers with); :data:`UNDEFINED_EPOCH` below every entry or when empty.
        """
        index = bisect.bisect_right([e.start_offset for e in self._entries], offset)
        return self._entries[index - 1].epoch if index else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """``(epoch, end_offset)``: where ``requested_epoch`` ends in this replica's log (Kafka's ``endOffsetFor``).

        * the latest epoch ends at the log end;
        * an older epoch ends where the next known epoch starts; the epoch returned is the largest known epoch at
          or below the requested one (the requested one itself when it is below every known epoch);
        * an epoch above every known epoch, an undefined epoch, or an empty cache: ``(-1, -1)``.
        """
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if requested_epoch == self.latest_epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        end = self._entries[higher].start_offset
        floor = higher - 1
        return (self._entries[floor].epoch if floor >= 0 else requested_epoch), end

    # ----------------------------------------------------------------------------------------- updates

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset``; returns whether anything changed.

        Repeating the latest epoch at the same or a later offset changes nothing. Otherwise entries that would
        break monotonicity (an epoch at or above ``epoch``, or a start at or above ``start_offset``) are
        dropped first, as Kafka does.

        Raises:
            ValueError: a negative epoch or offset.
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"epoch {epoch} and start offset {start_offset} must not be negative")
        if self._entries:
            latest = self._entries[-1]
            if latest.epoch == epoch and start_offset >= latest.start_offset:
                return False
        while self._entries and (self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        self._persist()
        return True

    def truncate_from_end(self, end_offset: int) -> bool:
        """Drop entries starting at or above ``end_offset`` (the log was truncated to it)."""
        kept = [e for e in self._entries if e.start_offset < end_offset]
        return self._replace(kept)

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log now starts at ``start_offset``: drop epochs that ended before it, clamp the one covering it."""
        covering = [e for e in self._entries if e.start_offset <= start_offset]
        kept = [e for e in self._entries if e.start_offset > start_offset]
        if covering:
            kept.insert(0, EpochEntry(covering[-1].epoch, start_offset))
        return self._replace(kept)

    def clear(self) -> bool:
        """Forget every entry (the log was emptied)."""
        return self._replace([])

    def _replace(self, entries: list[EpochEntry]) -> bool:
        if entries == self._entries:
            return False
        self._entries = entries
        self._persist()
        return True

    def _persist(self) -> None:
        if self._path is not None:
            write_file_atomically(self._path, _format(self._entries))

    def __repr__(self) -> str:
        pairs = ", ".join(f"{e.epoch}@{e.start_offset}" for e in self._entries)
        return f"LeaderEpochCache([{pairs}])"


def _format(entries: list[EpochEntry]) -> bytes:
    lines = [str(_VERSION), str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def _parse(text: str, path: Path) -> list[EpochEntry]:
    lines = text.splitlines()
    try:
        version, count = int(lines[0]), int(lines[1])
    except (IndexError, ValueError):
        raise CorruptEpochCheckpoint(f"{path}: the first two lines must be the version and the count") from None
    if version != _VERSION:
        raise CorruptEpochCheckpoint(f"{path}: version {version} is not {_VERSION}")
    body = lines[2:]
    if len(body) != count:
        raise CorruptEpochCheckpoint(f"{path}: says {count} entries but has {len(body)}")
    entries = []
    for number, line in enumerate(body, start=3):
        parts = line.split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise CorruptEpochCheckpoint(f"{path}: line {number} {line!r} is not 'epoch start_offset'")
        entries.append(EpochEntry(int(parts[0]), int(parts[1])))
    try:
        LeaderEpochCache(None, entries)
    except CorruptEpochCheckpoint as err:
        raise CorruptEpochCheckpoint(f"{path}: {err}") from None
    return entries
