"""Group commit of consumer group changes (design/consumer-groups.md §5.1) over a real SQLite store.

Heartbeats that change a group are applied in memory and staged; one flush writes every staged change of a shard
in one fenced transaction, and a heartbeat is answered only after the write that holds its change. A failed write
answers none of them and the coordinator reads the group again from the store, so no member is ever told an epoch
the store does not have, and a new owner of the shard continues from the same epochs.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from oncelog.catalog import shard_for
from oncelog.errors import InvalidRequest, StorageUnavailable, UnknownMemberId, UnsupportedAssignor
from oncelog.group_offsets.group_coordinator import GroupCoordinator, HeartbeatRequest, HeartbeatResponse
from oncelog.group_offsets.offset_manager import ShardFence, ShardFenced, TopicPartition
from oncelog.group_offsets.offset_store import SqlOffsetStore
from oncelog.storage.sql import create_engine

SHARDS = 2
GROUP = "storm"
TOPIC_PARTITIONS = {"in": 12}


class CountingStore(SqlOffsetStore):
    """The SQLite store, counting write transactions; ``fail_next`` makes the next write fail before it commits."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.writes = 0
        self.fail_next: Exception | None = None

    def write(self, fences: Any, work: Callable[[Any], Any]) -> Any:
        self.writes += 1
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        return super().write(fences, work)


class Ownership:
    """Every shard owned at ``epoch`` (claimed in the store), as a replica that holds all leases."""

    def __init__(self, store: SqlOffsetStore, epoch: int) -> None:
        self.epoch = epoch
        self.fenced_at: list[ShardFence] = []
        for shard in range(SHARDS):
            assert store.claim_shard(shard, epoch)

    def fence_for(self, group_id: str) -> ShardFence:
        return ShardFence(shard_for(group_id, SHARDS), self.epoch)

    def fenced(self, fence: ShardFence) -> None:
        self.fenced_at.append(fence)

    def owned_shards(self) -> dict[int, int]:
        return dict.fromkeys(range(SHARDS), self.epoch)


class Topics:
    def partition_counts(self, wanted: object = ()) -> dict[str, int]:
        return TOPIC_PARTITIONS

    def cached_partition_counts(self, wanted: object = ()) -> dict[str, int]:
        return TOPIC_PARTITIONS


@pytest.fixture
def store() -> Iterator[CountingStore]:
    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{Path(tmp) / 'groups.db'}")
        sql = CountingStore(engine)
        sql.migrate()
        yield sql
        engine.dispose()


def coordinator(store: CountingStore, epoch: int = 1) -> GroupCoordinator:
    return GroupCoordinator(store, Ownership(store, epoch), Topics(), lambda: 1_000_000)  # type: ignore[arg-type]


def join(name: str) -> HeartbeatRequest:
    return HeartbeatRequest(GROUP, name, 0, topics=("in",))


def stage_joins(groups: GroupCoordinator, count: int) -> list[tuple[HeartbeatResponse, Future[None] | None]]:
    return [groups.handle_heartbeat(join(f"m{i:03}")) for i in range(count)]


def test_changes_of_many_members_staged_in_one_tick_are_written_in_one_transaction(store: CountingStore) -> None:
    groups = coordinator(store)
    staged = stage_joins(groups, 100)
    assert store.writes == 0, "staging writes nothing"
    assert all(durable is not None and not durable.done() for _, durable in staged), "no answer before the write"
    assert store.read_consumer_group(GROUP) is None

    assert groups.flush() == 1
    assert store.writes == 1, "one transaction for the changes of 100 members"
    for _, durable in staged:
        assert durable is not None and durable.done() and durable.exception() is None
    stored = store.read_consumer_group(GROUP)
    assert stored is not None and len(stored.members) == 100
    for answer, _ in staged:
        assert stored.members[answer.member_id].member_epoch == answer.member_epoch
    assert groups.flush() == 0 and store.writes == 1, "nothing left to write"


def test_a_steady_heartbeat_waits_for_nothing_and_writes_nothing(store: CountingStore) -> None:
    groups = coordinator(store)
    member = groups.heartbeat(join("alone"))
    while True:  # reconcile until the member holds its whole target
        member = groups.heartbeat(HeartbeatRequest(GROUP, "alone", member.member_epoch, topics=("in",)))
        if groups.describe(GROUP).state == "STABLE":
            break
    writes = store.writes
    request = HeartbeatRequest(GROUP, "alone", member.member_epoch, topics=("in",), owned=member.assignment)
    answer, durable = groups.handle_heartbeat(request)
    assert durable is None and answer.assignment == member.assignment
    assert groups.steady_heartbeat(request) == answer
    assert store.writes == writes
    # the fast path refuses bad input as precisely as the full one
    with pytest.raises(UnsupportedAssignor):
        groups.steady_heartbeat(replace(request, assignor="roundrobin"))
    with pytest.raises(InvalidRequest):
        groups.steady_heartbeat(replace(request, owned=frozenset({TopicPartition("", 0)})))


def test_a_failed_write_answers_none_of_its_heartbeats_and_the_group_is_read_again(store: CountingStore) -> None:
    groups = coordinator(store)
    first = groups.heartbeat(join("first"))
    before = store.read_consumer_group(GROUP)
    assert before is not None
    staged = stage_joins(groups, 5)
    store.fail_next = StorageUnavailable("the database went away", definite=True)
    groups.flush()
    for _, durable in staged:
        assert durable is not None and isinstance(durable.exception(), StorageUnavailable)
    assert store.read_consumer_group(GROUP) == before, "the failed write changed nothing"
    # the members that were answered nothing are unknown; the one that was answered keeps its epoch
    with pytest.raises(UnknownMemberId):
        groups.heartbeat(HeartbeatRequest(GROUP, staged[0][0].member_id, staged[0][0].member_epoch, topics=("in",)))
    again = groups.heartbeat(HeartbeatRequest(GROUP, "first", first.member_epoch, topics=("in",)))
    assert again.member_epoch >= first.member_epoch


def test_a_new_shard_owner_keeps_the_flushed_group_and_the_old_owner_cannot_write_after_it(
    store: CountingStore,
) -> None:
    old = coordinator(store, epoch=1)
    answers = [old.heartbeat(join(f"m{i}")) for i in range(3)]
    group_epoch = store.read_consumer_group(GROUP).group_epoch  # type: ignore[union-attr]
    new = coordinator(store, epoch=2)  # failover: the shard is claimed at a newer coordinator epoch
    late = stage_joins(old, 1)  # the old owner, not knowing yet, stages one more join
    old.flush()
    [(_, durable)] = late
    assert durable is not None and isinstance(durable.exception(), ShardFenced)  # NOT_COORDINATOR on the wire
    assert old._ownership.fenced_at, "the old owner learns it lost the shard"  # type: ignore[attr-defined]
    # the new owner serves every member at the epoch it was told: nothing went back
    for answer in answers:
        latest = answer
        for _ in range(4):
            latest = new.heartbeat(
                HeartbeatRequest(GROUP, answer.member_id, latest.member_epoch, topics=("in",), owned=latest.assignment)
            )
            assert latest.member_epoch >= answer.member_epoch
    stored = store.read_consumer_group(GROUP)
    assert stored is not None and stored.group_epoch >= group_epoch and "m000" not in stored.members
    owned = [new.describe(GROUP).members[a.member_id].assigned for a in answers]
    assert sum(len(o) for o in owned) == len(frozenset().union(*owned)), "no partition has two owners"
    assert frozenset().union(*owned) <= {TopicPartition("in", p) for p in range(12)}
