"""The high-watermark checkpoint of a replicated partition (docs/design/replication.md §4): a reopened replica
starts at the HW it had, not at its log end, so records no follower confirmed stay invisible after a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.partition_storage.engine import EngineConfig, PartitionEngine
from oncelog.partition_storage.high_watermark_checkpoint import HIGH_WATERMARK_CHECKPOINT
from oncelog.records import Record, build_batch

pytestmark = pytest.mark.timeout(60)


def batch(seq: int) -> bytes:
    records = [Record(key=None, value=b"v%d" % (seq + i), timestamp=1_000) for i in range(2)]
    return build_batch(records, producer_id=7, producer_epoch=0, base_sequence=seq)


async def open_engine(directory: Path, *, replicated: bool) -> PartitionEngine:
    return await PartitionEngine.open(directory, EngineConfig(), clock=lambda: 1_700_000_000_000, replicated=replicated)


async def test_a_reopened_replicated_partition_starts_at_its_checkpointed_high_watermark(tmp_path: Path) -> None:
    engine = await open_engine(tmp_path, replicated=True)
    engine.high_watermark_limit = lambda candidate: min(candidate, 4)  # the followers confirmed offsets 0..3 only
    for seq in range(0, 8, 2):
        pending = await engine.write(batch(seq))
        if pending.result.base_offset < 4:
            await pending.wait()
    await engine.flush()
    assert (engine.high_watermark, engine.log_end_offset) == (4, 8)
    await engine.close()  # writes the checkpoint

    reopened = await open_engine(tmp_path, replicated=True)
    assert (reopened.high_watermark, reopened.log_end_offset) == (4, 8), "offsets 4..7 were never confirmed"
    await reopened.close()
    one_copy = await open_engine(tmp_path, replicated=False)
    assert one_copy.high_watermark == 8, "a partition with one replica acknowledges what is durable: its log end"
    await one_copy.close()


@pytest.mark.parametrize(("content", "expected"), [("0\n99\n", 8), ("0\nmany\n", 8), (None, 8), ("0\n6\n", 6)])
async def test_the_checkpoint_is_a_hint_within_the_log(tmp_path: Path, content: str | None, expected: int) -> None:
    """Above the log end (the log was cut since), unreadable or missing: the log end; else the value."""
    engine = await open_engine(tmp_path, replicated=False)
    for seq in range(0, 8, 2):
        await engine.append(batch(seq))
    await engine.close()
    if content is not None:
        (tmp_path / HIGH_WATERMARK_CHECKPOINT).write_text(content)
    reopened = await open_engine(tmp_path, replicated=True)
    assert reopened.high_watermark == expected
    await reopened.close()
