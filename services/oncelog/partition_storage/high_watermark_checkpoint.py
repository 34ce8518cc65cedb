"""The high-watermark checkpoint of a replicated partition (docs/design/replication.md §4).

``<partition dir>/high-watermark.checkpoint`` holds the partition's high watermark as last written (every
checkpoint interval and on close), in Kafka's checkpoint shape: a version line, then the offset. A restarted
replica starts with ``min(checkpointed HW, log end)`` instead of its log end, so a node that was leader when it
stopped, and is elected again, does not expose records above the HW that no follower confirmed: the HW moves on
only as followers fetch. It is a hint for reads, never a truncation point (truncation goes by leader epoch,
design/replication.md §5). A missing or unreadable file means the log end (the behaviour of a partition with one
replica, and of one written before this file existed).
"""

from __future__ import annotations

import logging
from pathlib import Path

from oncelog.partition_storage.segment import write_file_atomically

__all__ = ["HIGH_WATERMARK_CHECKPOINT", "read_high_watermark", "write_high_watermark"]

log = logging.getLogger(__name__)

HIGH_WATERMARK_CHECKPOINT = "high-watermark.checkpoint"
_VERSION = "0"


def write_high_watermark(directory: Path, high_watermark: int) -> None:
    """Replace the checkpoint with ``high_watermark`` (atomically: a crash leaves the old or the new one)."""
    write_file_atomically(directory / HIGH_WATERMARK_CHECKPOINT, f"{_VERSION}\n{high_watermark}\n".encode())


def read_high_watermark(directory: Path, log_start_offset: int, log_end_offset: int) -> int:
    """The HW a reopened replicated partition starts with: the checkpointed one, within [log start, log end];
    the log end when there is no usable checkpoint."""
    path = directory / HIGH_WATERMARK_CHECKPOINT
    try:
        version, value = path.read_text("ascii").split()
        if version != _VERSION:
            raise ValueError(f"version {version!r}")
        checkpointed = int(value)
    except FileNotFoundError:
        return log_end_offset
    except (OSError, ValueError, UnicodeDecodeError) as err:
        log.warning("%s is unusable (%s); the high watermark starts at the log end", path, err)
        return log_end_offset
    return max(log_start_offset, min(checkpointed, log_end_offset))
