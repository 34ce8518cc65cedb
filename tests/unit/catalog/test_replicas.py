"""Replica placement and replication-factor checks (pure rules of ``oncelog.catalog.replicas``)."""

from __future__ import annotations

from collections import Counter

import pytest

from oncelog.catalog.records import PartitionRecord
from oncelog.catalog.replicas import StorageNode, place_replicas, reassignment_step, validate_replication_factor
from oncelog.errors import InvalidReplicationFactor, InvalidRequest, Reason


def nodes(*ids: str, racks: str = "") -> list[StorageNode]:
    return [StorageNode(node_id, racks[i] if racks else None) for i, node_id in enumerate(ids)]


def test_factor_one_places_leaders_round_robin_from_the_topic_start() -> None:
    """Replication factor 1 keeps the placement used before replication: sorted nodes, round-robin from start."""
    placement = place_replicas(5, nodes("s1", "s0"), 1, start=1)
    assert placement == [("s1",), ("s0",), ("s1",), ("s0",), ("s1",)]


def test_every_partition_gets_distinct_replicas_and_leaders_are_balanced() -> None:
    five = nodes("a", "b", "c", "d", "e")
    placement = place_replicas(20, five, 3, start=7)
    assert all(len(set(replicas)) == 3 for replicas in placement)
    assert Counter(replicas[0] for replicas in placement) == {n.node_id: 4 for n in five}
    assert Counter(n for replicas in placement for n in replicas) == {n.node_id: 12 for n in five}


def test_followers_of_one_leader_spread_over_the_other_nodes() -> None:
    """The follower shift grows every full round, so one node's partitions do not all replicate to its neighbour."""
    placement = place_replicas(12, nodes("a", "b", "c", "d"), 2, start=0)
    followers_of_a = {replicas[1] for replicas in placement if replicas[0] == "a"}
    assert len(followers_of_a) == 3, placement


def test_replicas_take_distinct_racks_when_every_node_has_one() -> None:
    six = nodes("n1", "n2", "n3", "n4", "n5", "n6", racks="xxyyzz")
    rack_of = {n.node_id: n.rack for n in six}
    for start in range(6):
        for replicas in place_replicas(12, six, 3, start=start):
            assert len({rack_of[n] for n in replicas}) == 3, (start, replicas)


def test_more_replicas_than_racks_still_uses_every_rack() -> None:
    four = nodes("n1", "n2", "n3", "n4", racks="xxxy")
    rack_of = {n.node_id: n.rack for n in four}
    for replicas in place_replicas(8, four, 3, start=3):
        assert len(set(replicas)) == 3 and {rack_of[n] for n in replicas} == {"x", "y"}, replicas


def test_racks_are_ignored_unless_every_node_has_one() -> None:
    mixed = [StorageNode("s0", "x"), StorageNode("s1", None), StorageNode("s2", "x")]
    assert place_replicas(3, mixed, 1, start=0) == [("s0",), ("s1",), ("s2",)]


@pytest.mark.parametrize(
    ("factor", "live", "fragment"),
    [
        (0, 3, "replication_factor=0; it must be at least 1 (the cluster has 3 live storage nodes)"),
        (-2, 3, "replication_factor=-2; it must be at least 1"),
        (4, 3, "replication_factor=4 is larger than the 3 live storage nodes; use at most 3"),
        (2, 1, "larger than the 1 live storage node;"),
    ],
)
def test_bad_replication_factor_names_the_number_of_nodes(factor: int, live: int, fragment: str) -> None:
    with pytest.raises(InvalidReplicationFactor) as info:
        validate_replication_factor(factor, live)
    assert fragment in info.value.message
    assert info.value.reason is Reason.INVALID_REPLICATION_FACTOR and not info.value.retriable


def test_valid_factors_pass() -> None:
    for factor in (1, 2, 3):
        validate_replication_factor(factor, 3)


def test_election_picks_the_first_live_in_sync_replica_in_replica_order() -> None:
    from oncelog.catalog.replicas import Election, elect_leader

    assert elect_leader(["a", "b", "c"], ["a", "b", "c"], {"b", "c"}) == Election("b", ("b", "c"))
    assert elect_leader(["a", "b", "c"], ["c", "a"], {"b", "c"}) == Election("c", ("c",)), "b is not in sync"


def test_election_without_a_live_in_sync_replica_goes_offline_and_keeps_the_isr() -> None:
    from oncelog.catalog.replicas import Election, elect_leader

    assert elect_leader(["a", "b", "c"], ["a"], {"b", "c"}) == Election("", ("a",))


def test_a_node_that_lost_its_disk_leaves_the_isr_and_hands_its_leadership_on() -> None:
    from oncelog.catalog.replicas import Election, leave_isr_after_disk_loss

    follower = PartitionRecord(0, "a", 3, ("a", "b", "c"), ("a", "b", "c"), 7)
    assert leave_isr_after_disk_loss(follower, "b", {"a", "b", "c"}) == Election("a", ("a", "c"))
    leader = PartitionRecord(0, "b", 3, ("b", "a", "c"), ("b", "c", "a"), 7)
    assert leave_isr_after_disk_loss(leader, "b", {"a", "b", "c"}) == Election("a", ("c", "a")), "replica order"
    assert leave_isr_after_disk_loss(leader, "b", {"b", "c"}) == Election("c", ("c", "a")), "a is not live"
    # no other live in-sync replica: offline, keeping the others, so one of them is elected cleanly on return
    assert leave_isr_after_disk_loss(leader, "b", {"b"}) == Election("", ("c", "a"))
    out_of_sync = PartitionRecord(0, "a", 3, ("a", "b", "c"), ("a", "c"), 7)
    assert leave_isr_after_disk_loss(out_of_sync, "b", {"a", "b", "c"}) is None
    alone = PartitionRecord(0, "b", 3, ("b", "a"), ("b",), 7)
    assert leave_isr_after_disk_loss(alone, "b", {"a", "b"}) is None, "no copy left to prefer"


def test_a_reassignment_step_keeps_the_listed_in_sync_replicas_and_moves_an_unlisted_leader() -> None:
    seen = PartitionRecord(0, "n1", 3, ("n1", "n2", "n3"), ("n1", "n2", "n3"), 7)
    live = {"n1", "n2", "n3", "n4"}
    assert reassignment_step("t-0", seen, ["n1", "n2", "n3", "n4"], live) == (["n1", "n2", "n3"], "n1")
    assert reassignment_step("t-0", seen, ["n4", "n2", "n3"], live) == (["n2", "n3"], "n2"), "n4 is not in sync yet"


@pytest.mark.parametrize(
    ("replicas", "message"),
    [
        ([], "must be distinct storage nodes, at least one"),
        (["n1", "n1"], "must be distinct storage nodes, at least one"),
        (["n1", "n9"], "n9 is not a live storage node; live storage nodes: n1, n2, n3, n4"),
        (["n4"], r"none of \['n4'\] is in sync for t-0 \(ISR \['n1', 'n2', 'n3'\]\): add the new replicas next to"),
    ],
)
def test_a_reassignment_step_refuses_what_would_lose_data_or_names_no_node(replicas: list[str], message: str) -> None:
    seen = PartitionRecord(0, "n1", 3, ("n1", "n2", "n3"), ("n1", "n2", "n3"), 7)
    with pytest.raises(InvalidRequest, match=message):
        reassignment_step("t-0", seen, replicas, {"n1", "n2", "n3", "n4"})


def test_an_offline_partition_is_not_reassigned() -> None:
    seen = PartitionRecord(0, "", 3, ("n1", "n2"), ("n1",), 7)
    with pytest.raises(InvalidRequest, match="t-0 is offline"):
        reassignment_step("t-0", seen, ["n1", "n3"], {"n1", "n2", "n3"})
