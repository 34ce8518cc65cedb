"""ReplicaFetcher with real engines on both sides and an in-memory transport standing in for the network."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

import pytest

from oncelog.errors import NetworkException, NotLeader, OncelogError
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


class UnreachableLeader:
    """Fails every call as a dead leader's address does; each call takes ``call_ms`` on a shared clock."""

    def __init__(self, clock: list[int], calls: int, call_ms: int) -> None:
        self.clock = clock
        self.calls = calls
        self.call_ms = call_ms
        self.done = asyncio.Event()

    async def replica_fetch(self, *args: object, **kwargs: object) -> list[CopyResult | OncelogError]:
        self.clock[0] += self.call_ms
        self.calls -= 1
        if self.calls == 0:
            self.done.set()
        raise NetworkException("cannot reach leader:1: connection refused")


async def test_an_unreachable_leader_makes_the_follower_re_read_the_catalog_at_a_bounded_rate(tmp_path: Path) -> None:
    """The leader may be dead: the follower asks for a catalog refresh at once (to find the leader elected in its
    place) and then at most every ``unreachable_refresh_ms``, not on every retry."""
    follower = await open_engine(tmp_path / "follower")
    clock = [0]
    refreshes: list[int] = []
    transport = UnreachableLeader(clock, calls=10, call_ms=50)
    settings = FetcherSettings(
        follower_id="f",
        follower_epoch=lambda: 1,
        transport=transport,
        on_leadership_error=lambda: refreshes.append(clock[0]),
        on_divergence=lambda followed, offset: pytest.fail(f"no divergence expected, got {offset}"),
        retry_backoff_ms=1,
        unreachable_refresh_ms=200,
        clock=lambda: clock[0],
    )
    fetcher = ReplicaFetcher("leader", "leader:1", settings)
    try:
        fetcher.add(FollowedPartition("t", 0, follower, leader_epoch=0))
        await asyncio.wait_for(transport.done.wait(), 10)
    finally:
        await fetcher.stop()
        await follower.close()
    assert refreshes[0] == 50, "the first failure asks at once"
    assert refreshes == [50, 250, 450], "then every 200 ms of failures (10 calls of 50 ms each)"
