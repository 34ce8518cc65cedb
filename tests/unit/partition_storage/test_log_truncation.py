"""truncate_partition_files: a closed partition cut to an offset reopens with exactly the prefix's state."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.partition_storage.engine import EngineConfig, PartitionEngine, TxnMarkerSpec
from oncelog.partition_storage.leader_epoch_cache import EpochEntry
from oncelog.partition_storage.log_truncation import truncate_partition_files
from oncelog.records import ControlType, Record, build_batch
from oncelog.vocabulary import IsolationLevel

pytestmark = pytest.mark.timeout(60)
RC = IsolationLevel.READ_COMMITTED


def batch(pid: int, seq: int, *, txn: bool = False, epoch: int = 0) -> bytes:
    records = [Record(key=None, value=f"{pid}-{seq}-{i}".encode() * 8, timestamp=1) for i in range(3)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


async def open_engine(directory: Path, leader_epoch: int = 0) -> PartitionEngine:
    config = EngineConfig(index_interval_bytes=128, segment_bytes=1024)
    return await PartitionEngine.open(directory, config, clock=lambda: 1_700_000_000_000, leader_epoch=leader_epoch)


async def write_prefix(engine: PartitionEngine) -> None:
    """Data, an aborted and an open transaction, across several segments."""
    for seq in range(0, 24, 3):
        await engine.append(batch(1, seq))
    await engine.append(batch(2, 0, txn=True))
    await engine.write_markers([TxnMarkerSpec(2, 1, 0, ControlType.ABORT)])
    await engine.append(batch(3, 0, txn=True))


async def test_cut_log_reopens_with_the_state_of_the_prefix(tmp_path: Path) -> None:
    prefix_only = await open_engine(tmp_path / "prefix")
    await write_prefix(prefix_only)
    cut_at = prefix_only.log_end_offset
    expected = (prefix_only.describe_producers(), prefix_only.read(0, 1 << 20, RC), prefix_only.last_stable_offset)
    await prefix_only.close()

    engine = await open_engine(tmp_path / "diverged")
    await write_prefix(engine)
    engine.leader_epoch = 4  # a tail written under a later epoch, to be cut away with its epoch entry
    for seq in range(24, 60, 3):
        await engine.append(batch(1, seq))
    await engine.write_markers([TxnMarkerSpec(3, 1, 0, ControlType.COMMIT)])
    assert len(list(engine.directory.glob("*.log"))) > 2
    await engine.close()

    assert truncate_partition_files(tmp_path / "diverged", cut_at + 1) == cut_at, "never splits a batch"
    reopened = await open_engine(tmp_path / "diverged")
    try:
        assert reopened.log_end_offset == cut_at
        assert reopened.epochs.entries == [EpochEntry(0, 0)]
        assert reopened.describe_producers() == expected[0]
        assert reopened.last_stable_offset == expected[2] < reopened.high_watermark
        fetched = reopened.read(0, 1 << 20, RC)
        assert (fetched.records, fetched.aborted_transactions) == (
            expected[1].records,
            expected[1].aborted_transactions,
        )
        # and the log goes on from there: producer 1's next sequence follows the prefix, not the cut tail
        assert (await reopened.append(batch(1, 24))).base_offset == cut_at
    finally:
        await reopened.close()


async def test_cut_to_the_start_empties_the_log_but_keeps_its_start(tmp_path: Path) -> None:
    engine = await open_engine(tmp_path / "p")
    await write_prefix(engine)
    await engine.close()
    assert truncate_partition_files(tmp_path / "p", 0) == 0
    reopened = await open_engine(tmp_path / "p")
    try:
        assert (reopened.log_start_offset, reopened.log_end_offset) == (0, 0)
        assert reopened.describe_producers() == [] and reopened.epochs.entries == []
    finally:
        await reopened.close()
