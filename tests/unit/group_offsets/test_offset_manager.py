"""OffsetMetadataManager: plain and transactional commits, markers, require_stable fetches and fencing.

Every scenario runs against the in-memory store and the SQL store on SQLite, so the domain rules and their
SQL mapping are checked by the same assertions. The last tests drive random interleavings against a small
declarative model of design/kafka-semantics.md §6: the visible offset of a partition is the newest write, in commit
order, among
plain commits and transactional commits whose transaction committed.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.catalog import shard_for
from oncelog.errors import (
    IllegalGeneration,
    InvalidProducerEpoch,
    InvalidRequest,
    NotCoordinator,
    OncelogError,
    Reason,
    TransactionCoordinatorFenced,
    UnknownMemberId,
    UnknownTopicOrPartition,
    UnstableOffsetCommit,
)
from oncelog.group_offsets.offset_manager import (
    NO_MEMBER,
    GroupMember,
    OffsetMetadataManager,
    OffsetStore,
    PartitionOffset,
    ShardFence,
    TopicPartition,
    TxnMarker,
    TxnResult,
)
from oncelog.group_offsets.offset_store import MemoryOffsetStore, SqlOffsetStore
from oncelog.storage.sql import create_engine

SHARDS = 4
GROUP = "payments"
OTHER_GROUP = "audit"
T0, T1, T2 = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("refunds", 0)
PID = 4000
TXN_ID = "payments-worker-1"


class Ownership:
    """Owns every shard at ``epoch`` unless told a shard is lost; records ``fenced`` reports."""

    def __init__(self, store: OffsetStore, epoch: int = 1) -> None:
        self.epochs = {shard: epoch for shard in range(SHARDS)}
        self.lost: set[int] = set()
        self.fenced_reports: list[ShardFence] = []
        for shard in range(SHARDS):
            assert store.claim_shard(shard, epoch)

    def fence_for(self, group_id: str) -> ShardFence:
        shard = shard_for(group_id, SHARDS)
        if shard in self.lost:
            raise NotCoordinator(f"shard {shard} is not ours", metadata={"shard": str(shard)})
        return ShardFence(shard, self.epochs[shard])

    def fenced(self, fence: ShardFence) -> None:
        self.fenced_reports.append(fence)


class KnownPartitions:
    """Topic ``orders`` with 2 partitions and ``refunds`` with 1."""

    counts = {"orders": 2, "refunds": 1}

    def unknown(self, partitions):
        return sorted(tp for tp in partitions if tp.partition >= self.counts.get(tp.topic, 0))


@dataclass
class Env:
    store: OffsetStore
    ownership: Ownership
    manager: OffsetMetadataManager


def _sql_store(directory: Path) -> SqlOffsetStore:
    store = SqlOffsetStore(create_engine(f"sqlite:///{directory / 'offsets.db'}"))
    store.migrate()
    return store


def _env(store: OffsetStore) -> Env:
    ownership = Ownership(store)
    return Env(store, ownership, OffsetMetadataManager(store, ownership, partitions=KnownPartitions()))


@pytest.fixture(params=["memory", "sqlite"])
def env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Env]:
    store: OffsetStore = MemoryOffsetStore() if request.param == "memory" else _sql_store(tmp_path)
    yield _env(store)
    if isinstance(store, SqlOffsetStore):
        store.engine.dispose()


def po(tp: TopicPartition, offset: int, metadata: str = "", leader_epoch: int = -1) -> PartitionOffset:
    return PartitionOffset(tp, offset, leader_epoch, metadata)


def marker(
    result: TxnResult,
    *groups: str,
    pid: int = PID,
    epoch: int = 1,
    coordinator_epoch: int = 0,
) -> TxnMarker:
    return TxnMarker(pid, epoch, coordinator_epoch, result, groups or (GROUP,), TXN_ID)


def visible(
    manager: OffsetMetadataManager, *tps: TopicPartition, group: str = GROUP, stable: bool = False
) -> dict[TopicPartition, int]:
    return {o.topic_partition: o.offset for o in manager.fetch_offsets(group, list(tps), stable)}


def txn_commit(
    env: Env, *offsets: PartitionOffset, epoch: int = 0, pid: int = PID, group: str = GROUP, member=NO_MEMBER
) -> list[PartitionOffset]:
    return env.manager.commit_transactional_offsets(TXN_ID, pid, epoch, group, member, list(offsets))


def only_result(results) -> OncelogError | None:
    [[result]] = results
    return result.error


# ---------------------------------------------------------------------------------------------- plain commits


def test_plain_commit_is_visible_in_request_order_with_missing_partitions_at_minus_one(env: Env) -> None:
    stored = env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T1, 7, "batch-3", leader_epoch=2), po(T0, 5)])
    assert [o.offset for o in stored] == [7, 5]
    fetched = env.manager.fetch_offsets(GROUP, [T2, T1, T0], require_stable=True)
    assert fetched == [po(T2, -1), po(T1, 7, "batch-3", leader_epoch=2), po(T0, 5)]


def test_fetch_without_partitions_returns_every_committed_partition_sorted(env: Env) -> None:
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T2, 1), po(T1, 2)])
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 3)])
    assert [(o.topic_partition, o.offset) for o in env.manager.fetch_offsets(GROUP, [], False)] == [
        (T0, 3),
        (T1, 2),
        (T2, 1),
    ]
    assert env.manager.fetch_offsets("never-committed", [], True) == []


def test_later_plain_commit_overwrites_earlier_one(env: Env) -> None:
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 5, "a")])
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 3, "b")])
    assert env.manager.fetch_offsets(GROUP, [T0], False) == [po(T0, 3, "b")]


def test_groups_are_independent(env: Env) -> None:
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 5)])
    env.manager.commit_offsets(OTHER_GROUP, NO_MEMBER, [po(T0, 9)])
    assert visible(env.manager, T0) == {T0: 5}
    assert visible(env.manager, T0, group=OTHER_GROUP) == {T0: 9}


# ---------------------------------------------------------------------------------------------- transactional


def test_txn_offsets_invisible_until_commit_marker(env: Env) -> None:
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1)])
    txn_commit(env, po(T0, 10, "txn"), po(T1, 20))
    assert visible(env.manager, T0, T1) == {T0: 1, T1: -1}
    assert [o.topic_partition for o in env.manager.fetch_offsets(GROUP, [], False)] == [T0]
    assert only_result(env.manager.write_txn_markers([marker(TxnResult.COMMIT)])) is None
    assert env.manager.fetch_offsets(GROUP, [T0, T1], True) == [po(T0, 10, "txn"), po(T1, 20)]


def test_abort_marker_drops_pending_offsets(env: Env) -> None:
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1)])
    txn_commit(env, po(T0, 10), po(T1, 20))
    assert only_result(env.manager.write_txn_markers([marker(TxnResult.ABORT)])) is None
    assert visible(env.manager, T0, T1, stable=True) == {T0: 1, T1: -1}
    # a later COMMIT marker finds nothing left to settle
    assert only_result(env.manager.write_txn_markers([marker(TxnResult.COMMIT, epoch=2)])) is None
    assert visible(env.manager, T0, T1, stable=True) == {T0: 1, T1: -1}


def test_require_stable_reports_unstable_offset_commit(env: Env) -> None:
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1), po(T2, 4)])
    txn_commit(env, po(T0, 10))
    with pytest.raises(UnstableOffsetCommit) as info:
        env.manager.fetch_offsets(GROUP, [T2, T0], require_stable=True)
    assert info.value.retriable and info.value.reason is Reason.UNSTABLE_OFFSET_COMMIT
    assert "orders-0" in info.value.message and "refunds-0" not in info.value.message
    with pytest.raises(UnstableOffsetCommit):
        env.manager.fetch_offsets(GROUP, [], require_stable=True)
    # partitions without pending offsets stay readable, and without require_stable the last commit is returned
    assert visible(env.manager, T2, stable=True) == {T2: 4}
    assert visible(env.manager, T0, T2) == {T0: 1, T2: 4}
    env.manager.write_txn_markers([marker(TxnResult.COMMIT)])
    assert visible(env.manager, T0, T2, stable=True) == {T0: 10, T2: 4}


def test_pending_offsets_of_another_group_do_not_make_this_one_unstable(env: Env) -> None:
    txn_commit(env, po(T0, 10), group=OTHER_GROUP)
    assert visible(env.manager, T0, stable=True) == {T0: -1}


def test_marker_is_idempotent(env: Env) -> None:
    txn_commit(env, po(T0, 10))
    commit = marker(TxnResult.COMMIT)
    assert only_result(env.manager.write_txn_markers([commit])) is None
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 12)])
    # the coordinator resends the same marker (lost acknowledgement): acknowledged, nothing changes
    results = env.manager.write_txn_markers([commit, commit])
    assert [r.error for rs in results for r in rs] == [None, None]
    assert visible(env.manager, T0, stable=True) == {T0: 12}
    assert only_result(env.manager.write_txn_markers([marker(TxnResult.ABORT)])) is None
    assert visible(env.manager, T0, stable=True) == {T0: 12}


def test_a_bad_marker_entry_is_answered_alone(env: Env) -> None:
    """Issue 25 item 2: a group id over 255 characters or a malformed marker fails only its own entry."""
    txn_commit(env, po(T0, 7))
    txn_commit(env, po(T1, 9), group="other", pid=PID + 1)
    too_long = "g" * 256
    no_result = TxnMarker(PID + 2, 1, 0, None, ("third",), TXN_ID)
    results = env.manager.write_txn_markers(
        [marker(TxnResult.COMMIT, too_long, GROUP), no_result, marker(TxnResult.COMMIT, "other", pid=PID + 1)]
    )
    [[bad, good], [malformed], [other]] = results
    assert (bad.group_id, good.group_id, malformed.group_id, other.group_id) == (too_long, GROUP, "third", "other")
    assert isinstance(bad.error, InvalidRequest) and "256 characters" in str(bad.error)
    assert isinstance(malformed.error, InvalidRequest) and "result is unspecified" in str(malformed.error)
    assert good.error is None and other.error is None
    assert visible(env.manager, T0) == {T0: 7}
    assert visible(env.manager, T1, group="other") == {T1: 9}


def test_commit_marker_does_not_overwrite_newer_plain_commit(env: Env) -> None:
    txn_commit(env, po(T0, 10), po(T1, 20))
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 15)])  # newer in commit order than the pending T0
    env.manager.write_txn_markers([marker(TxnResult.COMMIT)])
    assert visible(env.manager, T0, T1, stable=True) == {T0: 15, T1: 20}


def test_commit_marker_overwrites_older_plain_commit(env: Env) -> None:
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 15)])
    txn_commit(env, po(T0, 10))  # a rewind inside the transaction is newer in commit order
    env.manager.write_txn_markers([marker(TxnResult.COMMIT)])
    assert visible(env.manager, T0) == {T0: 10}


def test_recommitting_a_partition_in_one_transaction_keeps_the_latest(env: Env) -> None:
    txn_commit(env, po(T0, 10))
    txn_commit(env, po(T0, 11, "second"))
    env.manager.write_txn_markers([marker(TxnResult.COMMIT)])
    assert env.manager.fetch_offsets(GROUP, [T0], True) == [po(T0, 11, "second")]


def test_two_producers_settle_independently(env: Env) -> None:
    txn_commit(env, po(T0, 10), pid=1)
    txn_commit(env, po(T1, 20), pid=2)
    env.manager.write_txn_markers([marker(TxnResult.ABORT, pid=1)])
    assert visible(env.manager, T0, stable=True) == {T0: -1}
    with pytest.raises(UnstableOffsetCommit):
        visible(env.manager, T1, stable=True)
    env.manager.write_txn_markers([marker(TxnResult.COMMIT, pid=2)])
    assert visible(env.manager, T0, T1, stable=True) == {T0: -1, T1: 20}


def test_one_marker_settles_every_group_it_names(env: Env) -> None:
    txn_commit(env, po(T0, 10))
    txn_commit(env, po(T0, 30), group=OTHER_GROUP)
    results = env.manager.write_txn_markers([marker(TxnResult.COMMIT, GROUP, OTHER_GROUP)])
    assert [(r.group_id, r.error) for r in results[0]] == [(GROUP, None), (OTHER_GROUP, None)]
    assert visible(env.manager, T0, stable=True) == {T0: 10}
    assert visible(env.manager, T0, group=OTHER_GROUP, stable=True) == {T0: 30}


def test_marker_for_a_group_without_pending_offsets_is_acknowledged(env: Env) -> None:
    assert only_result(env.manager.write_txn_markers([marker(TxnResult.COMMIT, "untouched")])) is None
    assert env.manager.fetch_offsets("untouched", [], True) == []


# ---------------------------------------------------------------------------------------------- fencing


def test_stale_coordinator_epoch_marker_rejected(env: Env) -> None:
    txn_commit(env, po(T0, 10))
    txn_commit(env, po(T0, 30), group=OTHER_GROUP)
    # a new coordinator (epoch 5) aborts in OTHER_GROUP only, so far
    env.manager.write_txn_markers([marker(TxnResult.ABORT, OTHER_GROUP, coordinator_epoch=5)])
    # the old coordinator (epoch 4) still tries to commit in both groups
    results = env.manager.write_txn_markers([marker(TxnResult.COMMIT, GROUP, OTHER_GROUP, coordinator_epoch=4)])
    by_group = {r.group_id: r.error for r in results[0]}
    assert by_group[GROUP] is None, "epoch 4 is the newest this group has seen"
    fenced = by_group[OTHER_GROUP]
    assert isinstance(fenced, TransactionCoordinatorFenced) and not fenced.retriable
    assert visible(env.manager, T0, stable=True) == {T0: 10}
    assert visible(env.manager, T0, group=OTHER_GROUP, stable=True) == {T0: -1}
    # the new coordinator's epoch is accepted again (retry of its marker)
    retry = marker(TxnResult.ABORT, OTHER_GROUP, coordinator_epoch=5)
    assert only_result(env.manager.write_txn_markers([retry])) is None


def test_zombie_producer_epoch_fenced(env: Env) -> None:
    txn_commit(env, po(T0, 10), epoch=3)
    # InitProducerId fenced epoch 3; the coordinator aborted its transaction with the bumped epoch
    env.manager.write_txn_markers([marker(TxnResult.ABORT, epoch=4)])
    txn_commit(env, po(T0, 20), epoch=4)
    with pytest.raises(InvalidProducerEpoch) as info:
        txn_commit(env, po(T0, 666), po(T1, 666), epoch=3)
    assert not info.value.retriable and "epoch 4" in info.value.message
    env.manager.write_txn_markers([marker(TxnResult.COMMIT, epoch=5)])
    assert visible(env.manager, T0, T1, stable=True) == {T0: 20, T1: -1}


def test_late_txn_offset_commit_after_its_marker_is_fenced(env: Env) -> None:
    """KIP-890: the marker carries the bumped epoch, so a delayed retry of the old request cannot hang the group."""
    txn_commit(env, po(T0, 10), epoch=0)
    env.manager.write_txn_markers([marker(TxnResult.COMMIT, epoch=1)])
    with pytest.raises(InvalidProducerEpoch):
        txn_commit(env, po(T1, 5), epoch=0)
    assert visible(env.manager, T0, T1, stable=True) == {T0: 10, T1: -1}


def test_offsets_of_a_transaction_that_never_added_the_group_are_not_committed_later(env: Env) -> None:
    """Issue 25 item 10: a client skipped AddOffsetsToTxn at epoch 0, so its commit sent this group no marker;
    the next transaction's marker must not publish those offsets with its own."""
    txn_commit(env, po(T0, 10), po(T1, 20), epoch=0)  # never added: no marker will come for epoch 0
    txn_commit(env, po(T0, 11), epoch=1)  # the next transaction added the group properly
    assert only_result(env.manager.write_txn_markers([marker(TxnResult.COMMIT, epoch=2)])) is None
    assert visible(env.manager, T0, T1, stable=True) == {T0: 11, T1: -1}


def test_delayed_duplicate_marker_does_not_settle_the_next_transaction(env: Env) -> None:
    txn_commit(env, po(T0, 10), epoch=0)
    first = marker(TxnResult.COMMIT, epoch=1)
    env.manager.write_txn_markers([first])
    txn_commit(env, po(T0, 20), epoch=1)  # the producer's next transaction, written with the bumped epoch
    env.manager.write_txn_markers([first])  # a delayed copy of the first marker
    with pytest.raises(UnstableOffsetCommit):
        visible(env.manager, T0, stable=True)
    assert visible(env.manager, T0) == {T0: 10}
    env.manager.write_txn_markers([marker(TxnResult.ABORT, epoch=2)])
    assert visible(env.manager, T0, stable=True) == {T0: 10}


def test_illegal_generation_rejected(env: Env) -> None:
    env.manager.commit_offsets(GROUP, GroupMember(3, "consumer-a"), [po(T0, 5)])
    with pytest.raises(IllegalGeneration) as info:
        env.manager.commit_offsets(GROUP, GroupMember(2, "consumer-b"), [po(T0, 99)])
    assert "generation 3" in info.value.message
    with pytest.raises(IllegalGeneration):
        txn_commit(env, po(T0, 99), member=GroupMember(2, "consumer-b"))
    assert visible(env.manager, T0, stable=True) == {T0: 5}


def test_newer_generation_is_adopted_and_fences_the_older_one(env: Env) -> None:
    env.manager.commit_offsets(GROUP, GroupMember(1, "a"), [po(T0, 1)])
    txn_commit(env, po(T0, 2), member=GroupMember(2, "b"))
    with pytest.raises(IllegalGeneration):
        env.manager.commit_offsets(GROUP, GroupMember(1, "a"), [po(T0, 3)])
    env.manager.commit_offsets(GROUP, GroupMember(2, "c"), [po(T1, 4)])  # another member of generation 2


def test_generation_without_member_id_is_an_unknown_member(env: Env) -> None:
    with pytest.raises(UnknownMemberId):
        env.manager.commit_offsets(GROUP, GroupMember(1, ""), [po(T0, 1)])
    with pytest.raises(UnknownMemberId):
        txn_commit(env, po(T0, 1), member=GroupMember(0, ""))
    assert visible(env.manager, T0) == {T0: -1}


def test_commit_without_membership_information_skips_generation_checks(env: Env) -> None:
    env.manager.commit_offsets(GROUP, GroupMember(7, "a"), [po(T0, 1)])
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 2)])
    txn_commit(env, po(T1, 3))
    assert visible(env.manager, T0) == {T0: 2}


def test_rejected_request_changes_nothing(env: Env) -> None:
    env.manager.commit_offsets(GROUP, GroupMember(2, "a"), [po(T0, 1)])
    txn_commit(env, po(T1, 5), epoch=2)
    with pytest.raises(IllegalGeneration):
        env.manager.commit_offsets(GROUP, GroupMember(1, "old"), [po(T0, 100)])
    with pytest.raises(InvalidProducerEpoch):
        txn_commit(env, po(T0, 100), epoch=1)
    env.manager.write_txn_markers([marker(TxnResult.COMMIT, epoch=3)])
    assert visible(env.manager, T0, T1, stable=True) == {T0: 1, T1: 5}


# ---------------------------------------------------------------------------------------------- shard ownership


def test_requests_for_an_unowned_shard_get_not_coordinator(env: Env) -> None:
    env.ownership.lost.add(shard_for(GROUP, SHARDS))
    for call in (
        lambda: env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1)]),
        lambda: env.manager.fetch_offsets(GROUP, [T0], False),
        lambda: txn_commit(env, po(T0, 1)),
    ):
        with pytest.raises(NotCoordinator) as info:
            call()
        assert info.value.retriable


def test_marker_reports_not_coordinator_for_groups_of_unowned_shards(env: Env) -> None:
    group_a, group_b = _groups_on_two_shards()
    txn_commit(env, po(T0, 10), group=group_a)
    txn_commit(env, po(T0, 20), group=group_b)
    env.ownership.lost.add(shard_for(group_b, SHARDS))
    [[a, b]] = env.manager.write_txn_markers([marker(TxnResult.COMMIT, group_a, group_b)])
    assert a.error is None
    assert b.error is not None and b.error.reason is Reason.NOT_COORDINATOR
    assert visible(env.manager, T0, group=group_a, stable=True) == {T0: 10}


def test_write_with_a_superseded_shard_epoch_is_fenced_and_reported(env: Env) -> None:
    group_a, group_b = _groups_on_two_shards()
    txn_commit(env, po(T0, 10), group=group_a)
    txn_commit(env, po(T0, 20), group=group_b)
    lost_shard = shard_for(group_b, SHARDS)
    assert env.store.claim_shard(lost_shard, 2)  # another replica took group_b's shard; we have not noticed
    with pytest.raises(OncelogError) as info:
        env.manager.commit_offsets(group_b, NO_MEMBER, [po(T0, 99)])
    assert info.value.reason is Reason.NOT_COORDINATOR
    [[a, b]] = env.manager.write_txn_markers([marker(TxnResult.COMMIT, group_a, group_b)])
    assert a.error is None and b.error is not None and b.error.reason is Reason.NOT_COORDINATOR
    assert {f.shard for f in env.ownership.fenced_reports} == {lost_shard}
    assert visible(env.manager, T0, group=group_a, stable=True) == {T0: 10}
    with pytest.raises(UnstableOffsetCommit):
        visible(env.manager, T0, group=group_b, stable=True)


def _groups_on_two_shards() -> tuple[str, str]:
    first = "group-0"
    for i in range(1, 100):
        other = f"group-{i}"
        if shard_for(other, SHARDS) != shard_for(first, SHARDS):
            return first, other
    raise AssertionError("no two groups on different shards")


# ---------------------------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda m: m.commit_offsets("", NO_MEMBER, [po(T0, 1)]), "group_id is empty"),
        (lambda m: m.commit_offsets("g" * 256, NO_MEMBER, [po(T0, 1)]), "256 characters"),
        (lambda m: m.commit_offsets(GROUP, NO_MEMBER, []), "offsets is empty"),
        (lambda m: m.commit_offsets(GROUP, NO_MEMBER, [po(T0, -5)]), "offset=-5"),
        (lambda m: m.commit_offsets(GROUP, NO_MEMBER, [po(TopicPartition("", 0), 1)]), "empty topic"),
        (lambda m: m.commit_offsets(GROUP, NO_MEMBER, [po(TopicPartition("orders", -1), 1)]), "partition=-1"),
        (lambda m: m.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1), po(T0, 2)]), "appears twice"),
        (lambda m: m.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1, leader_epoch=-2)]), "leader_epoch=-2"),
        (lambda m: m.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1, "x" * 4097)]), "4097 bytes"),
        (lambda m: m.commit_offsets(GROUP, GroupMember(-2, "a"), [po(T0, 1)]), "generation_id=-2"),
        (lambda m: m.commit_transactional_offsets("", PID, 0, GROUP, NO_MEMBER, [po(T0, 1)]), "transactional_id"),
        (lambda m: m.commit_transactional_offsets(TXN_ID, -1, -1, GROUP, NO_MEMBER, [po(T0, 1)]), "producer is"),
        (lambda m: m.fetch_offsets("", [], False), "group_id is empty"),
        (lambda m: m.fetch_offsets(GROUP, [TopicPartition("orders", -3)], False), "partition=-3"),
    ],
)
def test_bad_input_is_rejected_with_a_fix_and_changes_nothing(
    env: Env, call: Callable[[OffsetMetadataManager], object], fragment: str
) -> None:
    txn_commit(env, po(T0, 10))
    with pytest.raises(InvalidRequest) as info:
        call(env.manager)
    assert fragment in info.value.message
    assert info.value.definite and not info.value.retriable
    with pytest.raises(UnstableOffsetCommit):
        visible(env.manager, T0, stable=True)  # a rejected call settled nothing


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (marker(TxnResult.COMMIT, "other", pid=-1), "markers[0]: producer is required"),
        (marker(None, "other"), "markers[0]: result"),  # type: ignore[arg-type]
        (marker(TxnResult.COMMIT, "other", coordinator_epoch=-1), "coordinator_epoch=-1"),
        (marker(TxnResult.COMMIT, "other", ""), "markers[0]: group id is empty"),
        (marker(TxnResult.COMMIT, "other", "g" * 256), "markers[0]: group id is 256 characters long"),
        (marker(TxnResult.COMMIT, "other", "other"), "appears twice"),
    ],
)
def test_a_malformed_marker_is_refused_with_a_fix_and_the_others_apply(env: Env, bad: TxnMarker, fragment: str) -> None:
    txn_commit(env, po(T0, 10))
    [refused, [applied]] = env.manager.write_txn_markers([bad, marker(TxnResult.COMMIT)])
    errors = [r.error for r in refused if r.error is not None]
    assert errors, "the malformed marker must be refused"
    for error in errors:
        assert isinstance(error, InvalidRequest) and fragment in error.message
        assert error.definite and not error.retriable
    assert applied.error is None
    assert visible(env.manager, T0, stable=True) == {T0: 10}


def test_a_read_that_outlives_its_lease_is_not_answered(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 25 item 5: offsets are answered only under a lease known held for the whole read."""
    env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 5)])
    shard = env.ownership.fence_for(GROUP).shard
    read_group = env.store.read_group

    def read_then_lose(group_id, fence):  # the lease runs out (or moves) while the read is in flight
        view = read_group(group_id, fence)
        env.ownership.lost.add(shard)
        return view

    monkeypatch.setattr(env.store, "read_group", read_then_lose)
    with pytest.raises(NotCoordinator):
        visible(env.manager, T0)


def test_offsets_for_unknown_partitions_are_rejected(env: Env) -> None:
    with pytest.raises(UnknownTopicOrPartition) as info:
        env.manager.commit_offsets(GROUP, NO_MEMBER, [po(T0, 1), po(TopicPartition("orders", 2), 1)])
    assert "orders-2" in info.value.message
    with pytest.raises(UnknownTopicOrPartition):
        txn_commit(env, po(TopicPartition("nope", 0), 1))
    assert env.manager.fetch_offsets(GROUP, [], False) == []


# ---------------------------------------------------------------------------------------------- model check

TPS = [T0, T1, T2]
PIDS = [11, 12]

operation = st.one_of(
    st.tuples(st.just("plain"), st.sampled_from(TPS), st.integers(0, 1000)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.sampled_from(TPS), st.integers(0, 1000)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("resend"), st.sampled_from(PIDS)),
)


@dataclass
class Write:
    seq: int
    tp: TopicPartition
    offset: int
    pid: int | None = None  # None: plain commit
    epoch: int = 0
    state: str = "visible"  # pending, visible, dropped


def _check_against_model(manager: OffsetMetadataManager, ops: list[tuple]) -> None:
    """Replay ``ops`` through the manager and through the declarative model; they must agree after every step."""
    writes: list[Write] = []
    epochs = dict.fromkeys(PIDS, 0)
    last_marker: dict[int, TxnMarker] = {}
    for op in ops:
        if op[0] == "plain":
            _, tp, offset = op
            manager.commit_offsets(GROUP, NO_MEMBER, [po(tp, offset)])
            writes.append(Write(len(writes), tp, offset))
        elif op[0] == "txn":
            _, pid, tp, offset = op
            manager.commit_transactional_offsets(TXN_ID, pid, epochs[pid], GROUP, NO_MEMBER, [po(tp, offset)])
            writes.append(Write(len(writes), tp, offset, pid, epochs[pid], "pending"))
        elif op[0] == "end":
            _, pid, commit = op
            epochs[pid] += 1  # KIP-890: EndTxn bumps the epoch and the marker carries it
            last_marker[pid] = marker(TxnResult.COMMIT if commit else TxnResult.ABORT, pid=pid, epoch=epochs[pid])
            assert only_result(manager.write_txn_markers([last_marker[pid]])) is None
            for w in writes:
                if w.pid == pid and w.state == "pending" and w.epoch < epochs[pid]:
                    w.state = "visible" if commit else "dropped"
        else:
            _, pid = op
            if pid in last_marker:
                assert only_result(manager.write_txn_markers([last_marker[pid]])) is None
        expected_visible = {}
        for w in sorted(writes, key=lambda w: w.seq):
            if w.state == "visible":
                expected_visible[w.tp] = w.offset
        unstable = {w.tp for w in writes if w.state == "pending"}
        assert visible(manager, *TPS) == {tp: expected_visible.get(tp, -1) for tp in TPS}
        for tp in TPS:
            if tp in unstable:
                with pytest.raises(UnstableOffsetCommit):
                    manager.fetch_offsets(GROUP, [tp], True)
            else:
                assert manager.fetch_offsets(GROUP, [tp], True)[0].offset == expected_visible.get(tp, -1)


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=40))
def test_random_interleavings_match_the_model_in_memory(ops: list[tuple]) -> None:
    _check_against_model(_env(MemoryOffsetStore()).manager, ops)


@settings(max_examples=25, deadline=None)
@given(st.lists(operation, max_size=25))
def test_random_interleavings_match_the_model_on_sqlite(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        store = _sql_store(Path(directory))
        try:
            _check_against_model(_env(store).manager, ops)
        finally:
            store.engine.dispose()
