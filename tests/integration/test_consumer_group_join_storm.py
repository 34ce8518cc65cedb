"""A join storm against a real group-offsets process (design/consumer-groups.md §5.1).

120 members join one group at the same moment and reconcile until the group is STABLE. Every heartbeat that changes
the group waits for a fenced SQL write, and the coordinator writes the changes of many heartbeats in one transaction:
its /metrics show fewer state transactions than heartbeats committed by them (one transaction per member's change
is what made a 1,000-member group overload the coordinator until it lost its shard lease). Nothing is lost on the
way: every member holds the epoch and the partitions the store holds, and no partition ever had two owners.
"""

from __future__ import annotations

import asyncio
import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as pb
from oncelog.client import AdminClient, NewTopic
from oncelog.rpc import aio_channel
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(240)

MEMBERS = 120
PARTITIONS = 12


@pytest.fixture(scope="module")
def storm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    env = {
        "ONCELOG_METRICS_LISTEN": "127.0.0.1:0",
        "ONCELOG_GROUP_OFFSETS_SESSION_TIMEOUT_MS": "30000",
        "ONCELOG_GROUP_OFFSETS_HEARTBEAT_INTERVAL_MS": "1000",
    }
    with LocalCluster(
        tmp_path_factory.mktemp("storm"), services=("partition-storage", "group-offsets"), env=env
    ) as running:
        yield running


def scrape(cluster: LocalCluster, series: str) -> float:
    node = next(n for n in cluster.nodes if n.service == "group-offsets")
    address = json.loads(Path(node.ready_file).read_text())["metrics_address"]
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = [float(m.group(1)) for m in re.finditer(rf"^{series}(?:{{[^}}]*}})? (\S+)$", text, re.MULTILINE)]
    return sum(values)


class Member:
    """A member over raw gRPC that behaves as the client does: it releases what the answer leaves out."""

    def __init__(self, stub: pb.GroupOffsetsServiceStub, group: str, topic: str) -> None:
        self.stub, self.group, self.topic = stub, group, topic
        self.member_id, self.epoch = uuid.uuid4().hex, 0
        self.owned: set[tuple[str, int]] = set()

    async def beat(self) -> None:
        response = await self.stub.ConsumerGroupHeartbeat(
            pb.ConsumerGroupHeartbeatRequest(
                group_id=self.group,
                member_id=self.member_id,
                member_epoch=self.epoch,
                subscribed_topic_names=[self.topic],
                owned_partitions=[common_pb.TopicPartition(topic=t, partition=p) for t, p in sorted(self.owned)],
            ),
            timeout=60,
        )
        assert response.member_epoch >= self.epoch, "a member epoch went backwards"
        self.epoch = response.member_epoch
        self.owned = {(tp.topic, tp.partition) for tp in response.assignment}


async def storm(address: str, topic: str, group: str) -> tuple[list[Member], pb.ConsumerGroupDescription]:
    stub = pb.GroupOffsetsServiceStub(aio_channel(address))
    members = [Member(stub, group, topic) for _ in range(MEMBERS)]
    await asyncio.gather(*(m.beat() for m in members))  # everyone joins at once
    request = pb.DescribeConsumerGroupsRequest(group_ids=[group], include_history=True)
    for _ in range(60):
        await asyncio.gather(*(m.beat() for m in members))
        [described] = (await stub.DescribeConsumerGroups(request, timeout=30)).groups
        if described.state == "STABLE":
            return members, described
    raise AssertionError(f"the group did not become STABLE: {described.state}")


def test_a_join_storm_is_written_in_shared_transactions_and_loses_no_epoch(storm_cluster: LocalCluster) -> None:
    topic, group = f"storm-{uuid.uuid4().hex[:8]}", f"storm-{uuid.uuid4().hex[:8]}"
    with AdminClient(storm_cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)])
    writes_before = scrape(storm_cluster, "oncelog_groups_state_writes_total")
    committed_before = scrape(storm_cluster, "oncelog_groups_heartbeats_committed_total")

    members, described = asyncio.run(storm(storm_cluster.addresses("group-offsets")[0], topic, group))

    writes = scrape(storm_cluster, "oncelog_groups_state_writes_total") - writes_before
    committed = scrape(storm_cluster, "oncelog_groups_heartbeats_committed_total") - committed_before
    print(f"join storm: {committed:.0f} heartbeats committed by {writes:.0f} state transactions")
    assert committed >= MEMBERS, f"every join waited for a write ({committed} heartbeats committed)"
    assert writes < committed, f"{writes:.0f} transactions for {committed:.0f} heartbeats: no write was shared"
    # what the members were told is what the store holds
    stored = {m.member_id: m for m in described.members}
    assert len(stored) == MEMBERS
    for member in members:
        held = stored[member.member_id]
        assert held.member_epoch == member.epoch
        assert {(tp.topic, tp.partition) for tp in held.assignment} == member.owned
    owned = [m.owned for m in members]
    assert sum(len(o) for o in owned) == PARTITIONS == len(set().union(*owned))
    holders: dict[str, set[tuple[str, int]]] = {}
    for change in described.history:  # at no moment did two members own one partition
        holders[change.member_id] = {(tp.topic, tp.partition) for tp in change.owned}
        flat = [tp for parts in holders.values() for tp in parts]
        assert len(flat) == len(set(flat)), f"two owners at history entry {change.seq}"
