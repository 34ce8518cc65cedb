"""ReplicaFetcher with real engines on both sides and an in-memory transport standing in for the network."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from oncelog.catalog.topics import TopicConfig
from oncelog.errors import NetworkException, NotLeader, OncelogError
from oncelog.partition_storage.engine import EngineConfig, PartitionEngine
from oncelog.partition_storage.manager_types import StorageNodeConfig
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


class GatedExecutor(ThreadPoolExecutor):
    """Runs fsyncs only once ``gate`` is set, as a slow disk would."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.gate = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        def gated() -> Any:
            if not self.gate.wait(30):
                raise TimeoutError("the test never opened the fsync gate")
            return fn(*args, **kwargs)

        return super().submit(gated)


class ReportingTransport(LeaderTransport):
    """Notes, for each fetch reporting a position above 0, whether the follower's fsyncs had been let through."""

    def __init__(self, leader: PartitionEngine, gate: threading.Event) -> None:
        super().__init__(leader, refusals=0)
        self.gate = gate
        self.reported: list[bool] = []
        self.report_seen = asyncio.Event()

    async def replica_fetch(
        self, address: str, follower_id: str, follower_epoch: int, positions: Sequence[CopyPosition], **kwargs: Any
    ) -> list[CopyResult | OncelogError]:
        if positions[0].fetch_offset > 0:
            self.reported.append(self.gate.is_set())
            self.report_seen.set()
        return await super().replica_fetch(address, follower_id, follower_epoch, positions, **kwargs)


@pytest.mark.parametrize("follower_fsync", [True, False], ids=["flush=sync", "flush=leader"])
async def test_a_follower_reports_copied_batches_after_its_fsync_unless_the_topic_flushes_on_the_leader_only(
    tmp_path: Path, follower_fsync: bool
) -> None:
    """flush=sync: the fetch that reports the copied batches (and lets the leader's HW pass them) comes only after
    the follower's fsync; flush=leader: it comes at once, while the fsync is still held, and the fsync follows."""
    leader = await open_engine(tmp_path / "leader")
    executor = GatedExecutor()
    follower = await PartitionEngine.open(
        tmp_path / "follower",
        EngineConfig(follower_fsync=follower_fsync),
        clock=lambda: 1_700_000_000_000,
        flush_executor=executor,
    )
    transport = ReportingTransport(leader, executor.gate)
    settings = FetcherSettings(
        follower_id="f",
        follower_epoch=lambda: 1,
        transport=transport,
        on_leadership_error=lambda: pytest.fail("no leadership error expected"),
        on_divergence=lambda followed, offset: pytest.fail(f"no divergence expected, got {offset}"),
        max_wait_ms=100,
    )
    fetcher = ReplicaFetcher("leader", "leader:1", settings)
    try:
        records = [Record(key=None, value=b"v%d" % i, timestamp=1) for i in range(3)]
        await leader.append(build_batch(records, producer_id=1, producer_epoch=0, base_sequence=0))
        fetcher.add(FollowedPartition("t", 0, follower, leader_epoch=0))
        while follower.log_end_offset < leader.log_end_offset:
            await asyncio.wait_for(follower.appended().wait(), 10)
        if follower_fsync:
            executor.gate.set()  # the copy is in the follower's log; its fsync may run now
        await asyncio.wait_for(transport.report_seen.wait(), 10)
        executor.gate.set()
        assert transport.reported[0] is follower_fsync
        await asyncio.wait_for(follower.flush(), 10)  # flush=leader: the fsync started without waiting still ends
        assert follower.read_copy(0, 1 << 20) == leader.read_copy(0, 1 << 20)
    finally:
        executor.gate.set()
        await fetcher.stop()
        await leader.close()
        await follower.close()
        executor.shutdown()


@pytest.mark.parametrize(
    ("flush", "flush_sync", "follower_fsync"), [("sync", True, True), ("leader", True, False), ("async", False, False)]
)
def test_the_topic_flush_setting_decides_which_replicas_fsync_before_the_ack(
    flush: str, flush_sync: bool, follower_fsync: bool
) -> None:
    config = StorageNodeConfig(data_dir=Path("unused")).engine_config(TopicConfig.parse({"flush": flush}))
    assert (config.flush_sync, config.follower_fsync) == (flush_sync, follower_fsync)
