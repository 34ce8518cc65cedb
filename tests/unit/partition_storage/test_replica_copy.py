"""A follower engine fed with the leader's bytes (read_copy -> append_copied) ends in the leader's state.

Real files on both sides; the copying loop of the test stands in for the replica fetcher, which the integration
tests in tests/integration/test_replication.py run between processes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from oncelog.errors import CorruptMessage, InvalidRequest
from oncelog.partition_storage.engine import EngineConfig, PartitionEngine, TxnMarkerSpec
from oncelog.records import ControlType, Record, build_batch
from oncelog.vocabulary import IsolationLevel

pytestmark = pytest.mark.timeout(60)
RC = IsolationLevel.READ_COMMITTED


def batch(pid: int, epoch: int, seq: int, *, n: int = 2, txn: bool = False) -> bytes:
    records = [Record(key=None, value=f"{pid}-{seq + i}".encode(), timestamp=1_000 + i) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


async def open_engine(directory: Path, *, leader_epoch: int = 0) -> PartitionEngine:
    config = EngineConfig(index_interval_bytes=256, segment_bytes=1024)
    return await PartitionEngine.open(directory, config, clock=lambda: 1_700_000_000_000, leader_epoch=leader_epoch)


async def copy_all(leader: PartitionEngine, follower: PartitionEngine, max_bytes: int = 700) -> None:
    while follower.log_end_offset < leader.log_end_offset:
        await follower.append_copied(leader.read_copy(follower.log_end_offset, max_bytes))
        await follower.flush()  # as the fetcher does before it reports the new position


def segment_bytes(engine: PartitionEngine) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(engine.directory.glob("*.log")))


async def test_follower_rebuilds_producer_state_aborts_and_bytes_from_the_copy(tmp_path: Path) -> None:
    leader = await open_engine(tmp_path / "leader", leader_epoch=3)
    follower = await open_engine(tmp_path / "follower")
    try:
        await leader.append(batch(7, 0, 0))
        await leader.append(batch(8, 0, 0, txn=True))
        await leader.append(batch(9, 0, 0, txn=True))
        await leader.append(batch(7, 0, 2))
        abort, commit = TxnMarkerSpec(8, 1, 0, ControlType.ABORT), TxnMarkerSpec(9, 1, 0, ControlType.COMMIT)
        await leader.write_markers([abort, commit])
        await leader.append(batch(8, 1, 0, txn=True))  # still open: pins the LSO
        for i in range(30):  # roll segments so the follower snapshots and indexes across them
            await leader.append(batch(7, 0, 4 + 2 * i))
        await copy_all(leader, follower)
        assert segment_bytes(follower) == segment_bytes(leader), "same batches, same offsets, leader epoch kept"
        assert len(list(follower.directory.glob("*.log"))) > 1
        assert follower.describe_producers() == leader.describe_producers()
        follower.high_watermark_limit = None
        follower.refresh_high_watermark()
        assert follower.last_stable_offset == leader.last_stable_offset < leader.high_watermark
        ours, theirs = follower.read(0, 1 << 20, RC), leader.read(0, 1 << 20, RC)
        assert ours.aborted_transactions == theirs.aborted_transactions != ()
        assert ours.records == theirs.records
    finally:
        await leader.close()
        await follower.close()
    # the follower's rebuilt state survives its own restart
    reopened = await open_engine(tmp_path / "follower")
    try:
        assert reopened.describe_producers() == (await _describe(tmp_path / "leader"))
    finally:
        await reopened.close()


async def _describe(directory: Path) -> list[object]:
    engine = await open_engine(directory)
    try:
        return list(engine.describe_producers())
    finally:
        await engine.close()


async def test_copied_batch_must_start_at_the_follower_log_end(tmp_path: Path) -> None:
    leader = await open_engine(tmp_path / "leader")
    follower = await open_engine(tmp_path / "follower")
    try:
        await leader.append(batch(1, 0, 0))
        await leader.append(batch(1, 0, 2))
        with pytest.raises(InvalidRequest, match="starts at offset 2 but follower expects 0"):
            await follower.append_copied(leader.read_copy(2, 1 << 20))
        damaged = bytearray(leader.read_copy(0, 1 << 20))
        damaged[-1] ^= 0xFF
        with pytest.raises(CorruptMessage):
            await follower.append_copied(bytes(damaged))
        assert follower.log_end_offset == 0, "nothing of a refused copy is appended"
    finally:
        await leader.close()
        await follower.close()


async def test_replicated_append_is_acknowledged_only_when_the_limit_lets_the_hw_pass(tmp_path: Path) -> None:
    """acks=all: the leader's durable write waits until the replicas (here: a settable limit) allow the HW."""
    leader = await open_engine(tmp_path / "leader")
    allowed = 0
    leader.high_watermark_limit = lambda candidate: min(candidate, allowed)
    try:
        pending = await leader.write(batch(5, 0, 0, n=3))
        waiter = asyncio.ensure_future(pending.wait())
        await leader.flush()
        assert leader.high_watermark == 0 and not waiter.done()
        changed = leader.changed()
        allowed = 3
        assert leader.refresh_high_watermark() == 3
        await changed.wait()
        assert (await waiter).last_offset == 2 and leader.read(0, 1 << 20, RC).records
    finally:
        await leader.close()
