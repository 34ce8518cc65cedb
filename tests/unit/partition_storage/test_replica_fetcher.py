"""ReplicaFetcher with real engines on both sides and an in-memory transport standing in for the network."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from oncelog.errors import NotLeader, OncelogError
from oncelog.partition_storage.engine import EngineConfig, PartitionEngine
from oncelog.partition_storage.replica_fetcher import (
    CopyPosition,
    CopyResult,
    FetcherSettings,
    FollowedPartition,
    ReplicaFetcher,
)
from oncelog.records import Record, build_batch

pytestmark = pytest.mark.timeout(60)


class LeaderTransport:
    """Serves fetches from a leader engine; the first ``refusals`` answers are NOT_LEADER (a stale leader view)."""

    def __init__(self, leader: PartitionEngine, refusals: int) -> None:
        self.leader = leader
        self.refusals = refusals

    async def replica_fetch(
        self,
        address: str,
        follower_id: str,
        follower_epoch: int,
        positions: Sequence[CopyPosition],
        *,
        max_wait_ms: int,
        max_bytes: int,
    ) -> list[CopyResult | OncelogError]:
        if self.refusals:
            self.refusals -= 1
            return [NotLeader("this node's catalog view is behind") for _ in positions]
        [position] = positions
        data = self.leader.read_copy(position.fetch_offset, max_bytes)
        if not data:
            await asyncio.wait_for(self.leader.appended().wait(), max_wait_ms / 1000)
            data = self.leader.read_copy(position.fetch_offset, max_bytes)
        return [CopyResult(data, self.leader.high_watermark, self.leader.log_start_offset)]


async def open_engine(directory: Path) -> PartitionEngine:
    return await PartitionEngine.open(directory, EngineConfig(), clock=lambda: 1_700_000_000_000)


async def test_a_stale_not_leader_answer_does_not_stop_copying(tmp_path: Path) -> None:
    """A leader whose catalog view lags answers NOT_LEADER; the follower asks for a refresh, backs off and copies
    once the leader answers again (it must not stay parked until leadership changes)."""
    leader, follower = await open_engine(tmp_path / "leader"), await open_engine(tmp_path / "follower")
    refreshes: list[int] = []
    settings = FetcherSettings(
        follower_id="f",
        follower_epoch=lambda: 1,
        transport=LeaderTransport(leader, refusals=3),
        on_leadership_error=lambda: refreshes.append(1),
        on_divergence=lambda followed, offset: pytest.fail(f"no divergence expected, got {offset}"),
        max_wait_ms=200,
        retry_backoff_ms=10,
    )
    fetcher = ReplicaFetcher("leader", "leader:1", settings)
    try:
        for seq in range(0, 10, 2):
            records = [Record(key=None, value=b"v%d" % i, timestamp=1) for i in range(2)]
            await leader.append(build_batch(records, producer_id=1, producer_epoch=0, base_sequence=seq))
        fetcher.add(FollowedPartition("t", 0, follower, leader_epoch=0))
        while follower.log_end_offset < leader.log_end_offset:
            await asyncio.wait_for(follower.appended().wait(), 10)
        assert len(refreshes) == 3
        assert follower.read_copy(0, 1 << 20) == leader.read_copy(0, 1 << 20)
    finally:
        await fetcher.stop()
        await leader.close()
        await follower.close()
