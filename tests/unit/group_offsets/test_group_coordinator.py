"""GroupCoordinator (design/consumer-groups.md §3, §6) over the in-memory and the SQLite store, with a manual clock.

Simulated members behave like the client: they drop partitions the response leaves out (sometimes one
heartbeat late, as a slow revocation) and take the ones it adds. The random-interleaving test checks after every
step that no partition has two owners, in the coordinator's state and in its stored ownership history.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.catalog import shard_for
from oncelog.errors import (
    FencedMemberEpoch,
    InvalidRegularExpression,
    InvalidRequest,
    NonEmptyGroup,
    StaleMemberEpoch,
    UnknownMemberId,
    UnreleasedInstanceId,
    UnsupportedAssignor,
)
from oncelog.group_offsets.group_coordinator import GroupCoordinator, HeartbeatRequest, OwnershipChange
from oncelog.group_offsets.offset_manager import (
    GroupMember,
    OffsetMetadataManager,
    PartitionOffset,
    ShardFence,
    TopicPartition,
)
from oncelog.group_offsets.offset_store import MemoryOffsetStore, SqlOffsetStore
from oncelog.storage.sql import create_engine

SHARDS = 2
GROUP = "copiers"
SESSION_MS = 1000
COUNTS = {"in": 6, "other": 2}


class Ownership:
    def __init__(self, store: object) -> None:
        self.epochs = dict.fromkeys(range(SHARDS), 1)
        for shard in range(SHARDS):
            assert store.claim_shard(shard, 1)  # type: ignore[attr-defined]

    def fence_for(self, group_id: str) -> ShardFence:
        shard = shard_for(group_id, SHARDS)
        return ShardFence(shard, self.epochs[shard])

    def fenced(self, fence: ShardFence) -> None:
        pass

    def owned_shards(self) -> dict[int, int]:
        return dict(self.epochs)


class Topics:
    def __init__(self) -> None:
        self.counts = dict(COUNTS)

    def partition_counts(self, wanted: object = ()) -> dict[str, int]:
        return self.counts

    def cached_partition_counts(self, wanted: object = ()) -> dict[str, int]:
        return self.counts


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def sqlite_store() -> Iterator[SqlOffsetStore]:
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{Path(tmp) / 'groups.db'}")
        store = SqlOffsetStore(engine)
        store.migrate()
        yield store
        engine.dispose()


STORES: dict[str, Callable[[], Iterator[object]]] = {
    "memory": lambda: iter([MemoryOffsetStore()]),
    "sqlite": sqlite_store,
}


class Member:
    """A well-behaved client: owns what it was assigned, releases what it was not (optionally one beat late)."""

    def __init__(self, coordinator: GroupCoordinator, name: str, **subscription: object) -> None:
        self.coordinator = coordinator
        self.member_id = name
        self.epoch = 0
        self.owned: frozenset[TopicPartition] = frozenset()
        self.to_release: frozenset[TopicPartition] = frozenset()
        self.subscription = {"topics": ("in",), **subscription}

    def beat(self, release_now: bool = True) -> frozenset[TopicPartition]:
        if release_now:
            self.owned -= self.to_release
            self.to_release = frozenset()
        answer = self.coordinator.heartbeat(
            HeartbeatRequest(GROUP, self.member_id, self.epoch, owned=self.owned, **self.subscription)  # type: ignore[arg-type]
        )
        self.member_id, self.epoch = answer.member_id, answer.member_epoch
        self.to_release = self.owned - answer.assignment
        self.owned |= answer.assignment
        return answer.assignment

    def leave(self) -> None:
        self.coordinator.heartbeat(HeartbeatRequest(GROUP, self.member_id, -1))
        self.owned = frozenset()


@pytest.fixture(params=sorted(STORES))
def env(request: pytest.FixtureRequest) -> Iterator[tuple[GroupCoordinator, Clock, object]]:
    for store in STORES[request.param]():
        clock = Clock()
        yield (
            GroupCoordinator(store, Ownership(store), Topics(), clock, session_timeout_ms=SESSION_MS),  # type: ignore[arg-type]
            clock,
            store,
        )


def settle(members: list[Member], rounds: int = 6) -> None:
    for _ in range(rounds):
        for m in members:
            m.beat()


def replay_history(history: list[OwnershipChange]) -> None:
    """Replay the stored ownership changes; fail if a partition ever has two holders."""
    holders: dict[str, frozenset[TopicPartition]] = {}
    for change in history:
        holders[change.member_id] = change.owned
        seen: dict[TopicPartition, str] = {}
        for member_id, owned in holders.items():
            for tp in owned:
                assert tp not in seen, f"{tp} held by {seen[tp]} and {member_id} after change {change.seq}"
                seen[tp] = member_id


def test_three_members_own_disjoint_sets_covering_the_topic(env) -> None:
    coordinator, _, _ = env
    members = [Member(coordinator, f"m{i}") for i in range(3)]
    settle(members)
    owned = [m.owned for m in members]
    assert all(len(o) == 2 for o in owned)
    assert frozenset().union(*owned) == {TopicPartition("in", p) for p in range(6)}
    assert coordinator.describe(GROUP).state == "STABLE"


def test_a_joining_member_gets_a_partition_only_after_its_old_owner_revoked_it(env) -> None:
    coordinator, _, _ = env
    members = [Member(coordinator, f"m{i}") for i in range(3)]
    settle(members)
    newcomer = Member(coordinator, "m3")
    assert newcomer.beat() == frozenset(), "nothing is free yet: every partition is still owned"
    for m in members:
        m.beat(release_now=False)  # told to revoke, still holding
    releasing = [m for m in members if m.to_release]
    assert releasing, "the new target takes partitions from someone"
    assert newcomer.beat() == frozenset(), "the old owners have not released yet"
    for m in releasing:
        m.beat()  # reports the partitions gone
    got = newcomer.beat()
    assert got and all(not (got & m.owned) for m in members)
    replay_history(coordinator.history(GROUP))


def test_a_silent_member_is_removed_after_the_session_timeout_and_others_take_its_partitions(env) -> None:
    coordinator, clock, _ = env
    members = [Member(coordinator, f"m{i}") for i in range(3)]
    settle(members)
    clock.now += SESSION_MS // 2
    for m in members[:2]:
        m.beat()
    clock.now += SESSION_MS // 2 + 1
    assert coordinator.expire() == [(GROUP, "m2")]
    settle(members[:2])
    assert members[0].owned | members[1].owned == {TopicPartition("in", p) for p in range(6)}
    with pytest.raises(UnknownMemberId):
        members[2].beat()


def test_a_slow_revocation_is_bounded_by_the_rebalance_timeout(env) -> None:
    coordinator, clock, _ = env
    slow = Member(coordinator, "slow", rebalance_timeout_ms=300)
    settle([slow])
    fast = Member(coordinator, "fast")
    fast.beat()
    slow.beat(release_now=False)
    assert slow.to_release
    clock.now += 301
    slow.beat(release_now=False)  # still holding: its session is alive but the revocation is overdue
    assert (GROUP, "slow") in coordinator.expire()
    settle([fast])
    assert len(fast.owned) == 6


def test_static_member_comes_back_to_its_assignment_within_the_session_timeout(env) -> None:
    coordinator, _, _ = env
    a = Member(coordinator, "a1", instance_id="host-a")
    b = Member(coordinator, "b1", instance_id="host-b")
    settle([a, b])
    before, epoch = a.owned, coordinator.describe(GROUP).group_epoch
    coordinator.heartbeat(HeartbeatRequest(GROUP, "a1", -2, instance_id="host-a"))
    with pytest.raises(UnreleasedInstanceId):
        Member(coordinator, "b2", instance_id="host-b").beat()
    restarted = Member(coordinator, "a2", instance_id="host-a")
    assert restarted.beat() == before
    assert coordinator.describe(GROUP).group_epoch == epoch, "no rebalance"


def test_member_epoch_fencing_of_heartbeats(env) -> None:
    coordinator, _, _ = env
    m = Member(coordinator, "m0")
    settle([m])
    with pytest.raises(FencedMemberEpoch):
        coordinator.heartbeat(HeartbeatRequest(GROUP, "m0", m.epoch + 5, topics=("in",)))
    with pytest.raises(UnknownMemberId):
        coordinator.heartbeat(HeartbeatRequest(GROUP, "nobody", 3, topics=("in",)))


def test_bad_input_changes_nothing(env) -> None:
    coordinator, _, _ = env
    m = Member(coordinator, "m0")
    settle([m])
    before = coordinator.describe(GROUP)
    cases = [
        (InvalidRequest, HeartbeatRequest("", "x", 0, topics=("in",))),
        (InvalidRegularExpression, HeartbeatRequest(GROUP, "x", 0, regex="in(")),
        (UnsupportedAssignor, HeartbeatRequest(GROUP, "x", 0, topics=("in",), assignor="sticky")),
        (InvalidRequest, HeartbeatRequest(GROUP, "", 4, topics=("in",))),
        (InvalidRequest, HeartbeatRequest(GROUP, "x", -3, topics=("in",))),
        (InvalidRequest, HeartbeatRequest(GROUP, "x", 0)),
    ]
    for error, request in cases:
        with pytest.raises(error) as info:
            coordinator.heartbeat(request)
        assert str(info.value)
    assert coordinator.describe(GROUP) == before
    with pytest.raises(NonEmptyGroup):
        coordinator.delete(GROUP)


def test_regex_subscription_and_range_assignor(env) -> None:
    coordinator, _, _ = env
    a = Member(coordinator, "a", topics=(), regex="in|oth.*", assignor="range")
    b = Member(coordinator, "b", topics=(), regex="in|oth.*", assignor="range")
    settle([a, b])
    assert a.owned == {TopicPartition("in", p) for p in range(3)} | {TopicPartition("other", 0)}
    assert coordinator.describe(GROUP).assignor == "range"


def test_commits_are_fenced_by_member_and_member_epoch(env) -> None:
    coordinator, clock, store = env
    manager = OffsetMetadataManager(store, Ownership.__new__(Ownership))  # type: ignore[arg-type]
    manager._ownership = coordinator._ownership  # type: ignore[attr-defined]
    a, b = Member(coordinator, "a"), Member(coordinator, "b")
    settle([a, b])
    mine = sorted(a.owned)[0]
    theirs = sorted(b.owned)[0]
    manager.commit_offsets(GROUP, GroupMember(a.epoch, "a"), [PartitionOffset(mine, 5)])
    with pytest.raises(StaleMemberEpoch):
        manager.commit_offsets(GROUP, GroupMember(a.epoch, "a"), [PartitionOffset(theirs, 5)])
    with pytest.raises(FencedMemberEpoch):
        manager.commit_offsets(GROUP, GroupMember(a.epoch + 1, "a"), [PartitionOffset(mine, 5)])
    with pytest.raises(UnknownMemberId):
        manager.commit_offsets(GROUP, GroupMember(-1, ""), [PartitionOffset(mine, 5)])
    clock.now += SESSION_MS + 1
    b.beat()
    coordinator.expire()
    with pytest.raises(UnknownMemberId):
        manager.commit_transactional_offsets("t", 1, 0, GROUP, GroupMember(a.epoch, "a"), [PartitionOffset(mine, 6)])


OPS = st.lists(
    st.tuples(st.sampled_from(["join", "beat", "lazy", "leave", "tick", "grow"]), st.integers(0, 4)),
    min_size=5,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_no_partition_ever_has_two_owners_under_random_interleavings(ops) -> None:
    store = MemoryOffsetStore()
    clock = Clock()
    topics = Topics()
    coordinator = GroupCoordinator(store, Ownership(store), topics, clock, session_timeout_ms=SESSION_MS)  # type: ignore[arg-type]
    members: dict[int, Member] = {}
    for op, i in ops:
        member = members.get(i)
        try:
            if op == "join" and member is None:
                members[i] = Member(coordinator, f"m{i}")
                members[i].beat()
            elif op in ("beat", "lazy") and member is not None:
                member.beat(release_now=op == "beat")
            elif op == "leave" and member is not None:
                member.leave()
                del members[i]
            elif op == "tick":
                clock.now += SESSION_MS // 3
                for gone in coordinator.expire():
                    members.pop(int(gone[1][1:]), None)
            elif op == "grow":
                topics.counts = {**topics.counts, "in": topics.counts["in"] + 1}  # a refresh is a new mapping
        except UnknownMemberId:
            members.pop(i, None)
        group = store.read_consumer_group(GROUP)
        if group is not None:
            seen: set[TopicPartition] = set()
            for m in group.members.values():
                assert not (m.owned & seen)
                seen |= m.owned
        replay_history(store.ownership_history(GROUP))


def test_rebalances_and_members_are_counted() -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from oncelog.telemetry.metrics import GROUP_MEMBERS, GROUP_REBALANCES, OncelogMetrics

    reader = InMemoryMetricReader()
    store = MemoryOffsetStore()
    clock = Clock()
    coordinator = GroupCoordinator(
        store,  # type: ignore[arg-type]
        Ownership(store),
        Topics(),
        clock,
        session_timeout_ms=SESSION_MS,
        metrics=OncelogMetrics(MeterProvider(metric_readers=[reader])),
    )
    members = [Member(coordinator, f"m{i}") for i in range(3)]
    settle(members)
    clock.now += SESSION_MS + 1
    members[0].beat()
    coordinator.expire()  # m1 and m2 are removed: two more epochs

    def values() -> dict[tuple[str, tuple[object, ...]], float]:
        return {
            (metric.name, tuple(sorted(point.attributes.items()))): point.value
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
        }

    got = values()
    assert got[(GROUP_REBALANCES.name, ())] == 5, "three joins and two removals"
    shard = shard_for(GROUP, SHARDS)
    assert got[(GROUP_MEMBERS.name, (("shard", shard),))] == 1
