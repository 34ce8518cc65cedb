"""Consumer groups: reassignment time after a member dies, and the coordinator's heartbeat CPU cost.

    python -m bench.groups [--runs 5] [--members 3,30] [--heartbeat-members 1000] [--window 10]

Starts a real cluster (LocalCluster: partition-storage + group-offsets on SQLite). Members are simulated in this
process over raw gRPC, behaving like the client (they report the partitions they own, release what the answer
leaves out, take what it adds), so hundreds fit on the shared machine.

* ``reassignment``: N members share a 60-partition topic; one stops heartbeating (as after kill -9). Time until
  the survivors own every partition, per run; reported as median and spread, and as a ratio to the session
  timeout (the same-run baseline: the floor of any detection by session timeout).
* ``heartbeat cpu``: M members join one after another (the join storm), then in ``--runs`` interleaved rounds the
  coordinator process's CPU time (``/proc/<pid>/stat``) over a ``--window`` while they heartbeat at the default
  interval, as a share of one core, against the same process while M clients send health Checks at the same rate
  (the gRPC floor) and idle.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as pb
from oncelog.rpc import aio_channel, sync_channel
from oncelog.testing import LocalCluster

PARTITIONS = 60
SESSION_MS = 3000
HEARTBEAT_MS = 300


class SimulatedMember:
    """One member over raw gRPC: owns what it was given, releases what it was not."""

    def __init__(
        self,
        stub: pb.GroupOffsetsServiceStub,
        group: str,
        topic: str,
        interval_s: float,
        running: asyncio.Event | None = None,
    ) -> None:
        self.stub, self.group, self.topic, self.interval_s = stub, group, topic, interval_s
        self.running = running
        self.member_id, self.epoch = uuid.uuid4().hex, 0
        self.owned: set[tuple[str, int]] = set()
        self.alive = True
        self.rejoins = 0

    async def beat(self) -> None:
        response = await self.stub.ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=self.epoch,
                subscribed_topic_names=[self.topic],
                owned_partitions=[common_pb.TopicPartition(topic=t, partition=p) for t, p in sorted(self.owned)],
            ),
            timeout=10,
        )
        self.epoch = response.member_epoch
        self.owned = {(tp.topic, tp.partition) for tp in response.assignment}

    async def run(self) -> None:
        """Heartbeat every interval (the first one after an interval); rejoin when the group removed us."""
        while self.alive:
            await asyncio.sleep(self.interval_s)
            if self.running is not None:
                await self.running.wait()
            if not self.alive:
                return
            try:
                await self.beat()
            except grpc.aio.AioRpcError:
                self.rejoins += 1
                self.epoch, self.owned = 0, set()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _create_topic(cluster: LocalCluster, name: str) -> None:
    stub = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    stub.CreateTopics(cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=name, partitions=PARTITIONS)]))


async def _until(condition, timeout_s: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError("the group did not settle")
        await asyncio.sleep(0.01)


def _covered(members: list[SimulatedMember]) -> bool:
    owned = [m.owned for m in members]
    return sum(len(o) for o in owned) == PARTITIONS and len(set().union(*owned)) == PARTITIONS


async def reassignment_once(address: str, topic: str, size: int) -> float:
    stub = pb.GroupOffsetsServiceStub(aio_channel(address))
    group = f"bench-{uuid.uuid4().hex[:8]}"
    members = [SimulatedMember(stub, group, topic, HEARTBEAT_MS / 1000) for _ in range(size)]
    for m in members:
        await m.beat()
    tasks = [asyncio.create_task(m.run()) for m in members]
    await _until(lambda: _covered(members) and all(m.owned for m in members))
    victim, survivors = members[0], members[1:]
    victim.alive = False
    await tasks[0]
    killed = time.monotonic()
    await _until(lambda: _covered(survivors))
    took = time.monotonic() - killed
    for m in survivors:
        m.alive = False
    await asyncio.gather(*tasks[1:])
    for m in survivors:
        await stub.ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(group_id=group, member_id=m.member_id, member_epoch=-1), timeout=10
        )
    return took


async def _health_window(address: str, pid: int, count: int, interval_s: float, window: float) -> float:
    """The process's CPU share while ``count`` clients each send a health Check every ``interval_s``: the floor of
    any unary call at that rate (gRPC, the event loop; health checks skip the service interceptors)."""
    health = health_pb2_grpc.HealthStub(aio_channel(address))
    stop = asyncio.Event()

    async def client(delay: float) -> None:
        await asyncio.sleep(delay)
        while not stop.is_set():
            await health.Check(health_pb2.HealthCheckRequest(), timeout=10)
            await asyncio.sleep(interval_s)

    tasks = [asyncio.create_task(client(interval_s * i / count)) for i in range(count)]
    await asyncio.sleep(interval_s)
    share = await _cpu_share(pid, window)
    stop.set()
    await asyncio.gather(*tasks)
    return share


async def _cpu_share(pid: int, window: float) -> float:
    start = _cpu_seconds(pid)
    await asyncio.sleep(window)
    return (_cpu_seconds(pid) - start) / window


async def heartbeat_cpu(
    address: str, pid: int, topic: str, count: int, interval_s: float, window: float, runs: int
) -> dict[str, list[float]]:
    """Join ``count`` members one after another, wait for STABLE, then ``runs`` interleaved rounds of three windows:
    the members heartbeating, the members paused while as many clients send health checks, everything idle.
    A pause (two windows and two intervals) stays below the default 45 s session timeout."""
    stub = pb.GroupOffsetsServiceStub(aio_channel(address))
    group = f"bench-cpu-{uuid.uuid4().hex[:8]}"
    running = asyncio.Event()
    running.set()
    members = [SimulatedMember(stub, group, topic, interval_s, running) for _ in range(count)]
    tasks = []
    began = time.monotonic()
    for m in members:  # join one by one, as a rolling start does; each heartbeats from then on
        await m.beat()
        tasks.append(asyncio.create_task(m.run()))
    joined = time.monotonic() - began
    request = pb.DescribeConsumerGroupsRequest(group_ids=[group])
    deadline = time.monotonic() + 300
    while (await stub.DescribeConsumerGroups(request, timeout=10)).groups[0].state != "STABLE":
        if time.monotonic() > deadline:
            raise TimeoutError("the group did not become STABLE")
        await asyncio.sleep(interval_s / 5)  # measure the steady state, after the joins' reconciliation
    print(
        f"\n{count} members joined one after another in {joined:.1f} s; STABLE {time.monotonic() - began:.1f} s after"
    )
    shares: dict[str, list[float]] = {"heartbeat": [], "floor": [], "idle": []}
    for _ in range(runs):
        running.set()
        await asyncio.sleep(interval_s)  # every member beats once before the window
        shares["heartbeat"].append(await _cpu_share(pid, window))
        running.clear()
        await asyncio.sleep(1.0)  # heartbeats in flight are answered
        shares["floor"].append(await _health_window(address, pid, count, interval_s, window))
        shares["idle"].append(await _cpu_share(pid, window))
    running.set()
    for m in members:
        m.alive = False
    await asyncio.gather(*tasks)
    rejoins = sum(m.rejoins for m in members)
    if rejoins:
        print(f"warning: {rejoins} heartbeat(s) were refused and the member rejoined")
    return shares


def _summary(values: list[float]) -> str:
    median = statistics.median(values)
    spread = (max(values) - min(values)) / median if median else 0.0
    return f"{median:.1%} | {spread:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--members", default="3,30")
    parser.add_argument("--heartbeat-members", type=int, default=1000)
    parser.add_argument("--heartbeat-interval-ms", type=int, default=5000, help="the default interval")
    parser.add_argument("--window", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            "ONCELOG_GROUP_OFFSETS_SESSION_TIMEOUT_MS": str(SESSION_MS),
            "ONCELOG_GROUP_OFFSETS_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_MS),
            "ONCELOG_GROUP_OFFSETS_GROUP_SWEEP_MS": "100",
        }
        (Path(tmp) / "reassign").mkdir()
        (Path(tmp) / "cpu").mkdir()
        with LocalCluster(Path(tmp) / "reassign", services=("partition-storage", "group-offsets"), env=env) as cluster:
            topic = "bench-groups"
            _create_topic(cluster, topic)
            address = cluster.addresses("group-offsets")[0]
            print(
                f"### reassignment after a member stops (session timeout {SESSION_MS} ms, heartbeat {HEARTBEAT_MS} ms)"
            )
            print("\n| members | median s | spread | runs | ratio to session timeout |\n|---|---|---|---|---|")
            for size in (int(s) for s in args.members.split(",") if s):
                times = [asyncio.run(reassignment_once(address, topic, size)) for _ in range(args.runs)]
                median = statistics.median(times)
                spread = (max(times) - min(times)) / median
                print(f"| {size} | {median:.2f} | {spread:.0%} | {len(times)} | {median / (SESSION_MS / 1000):.2f} |")
        # the heartbeat cost is measured with the default session timeout and heartbeat interval
        with LocalCluster(Path(tmp) / "cpu", services=("partition-storage", "group-offsets")) as cluster:
            topic = "bench-groups"
            _create_topic(cluster, topic)
            address = cluster.addresses("group-offsets")[0]
            pid = next(n for n in cluster.nodes if n.service == "group-offsets").process.pid  # type: ignore[union-attr]
            shares = asyncio.run(
                heartbeat_cpu(
                    address,
                    pid,
                    topic,
                    args.heartbeat_members,
                    args.heartbeat_interval_ms / 1000,
                    args.window,
                    args.runs,
                )
            )
            n = args.heartbeat_members
            print(
                f"\n### heartbeat CPU of group-offsets, {n} members, interval {args.heartbeat_interval_ms} ms, "
                f"{args.window:.0f} s windows, {args.runs} interleaved rounds\n"
            )
            print("| measurement | share of one core (median) | spread |\n|---|---|---|")
            print(f"| idle (baseline) | {_summary(shares['idle'])} |")
            print(f"| {n} clients sending health checks at the same rate (gRPC floor) | {_summary(shares['floor'])} |")
            print(f"| {n} members heartbeating | {_summary(shares['heartbeat'])} |")
            ratios = [h / f for h, f in zip(shares["heartbeat"], shares["floor"], strict=True) if f]
            if ratios:
                print(
                    f"\nheartbeat / gRPC floor, per round: median {statistics.median(ratios):.2f} "
                    f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
                )


if __name__ == "__main__":
    main()
