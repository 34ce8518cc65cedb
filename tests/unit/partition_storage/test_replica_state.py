"""LeaderReplicaState: HW over the ISR, caught-up times, ISR shrink and expand (pure, with a test clock)."""

from __future__ import annotations

import pytest

from oncelog.partition_storage.replica_state import LeaderReplicaState

LAG_MS = 10_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


def leader(clock: Clock, *, isr=("a", "b", "c"), hw: int = 0, epoch_start: int = 0) -> LeaderReplicaState:
    return LeaderReplicaState(
        "a",
        ["a", "b", "c"],
        isr,
        epoch_start_offset=epoch_start,
        high_watermark=hw,
        lag_time_max_ms=LAG_MS,
        clock=clock,
    )


def test_hw_moves_only_when_every_isr_member_fetched_past_it() -> None:
    """design/replication.md §4: the HW needs the second fetch round; one lagging ISR member holds it."""
    state = leader(Clock())
    assert state.update_high_watermark(2) == 0, "followers have not fetched yet in this epoch"
    state.record_fetch("b", 1, 0, leader_end_offset=2)
    state.record_fetch("c", 1, 0, leader_end_offset=2)
    assert state.update_high_watermark(2) == 0
    state.record_fetch("b", 1, 2, leader_end_offset=2)
    assert state.update_high_watermark(2) == 0, "c has not confirmed offset 1 yet"
    state.record_fetch("c", 1, 1, leader_end_offset=2)
    assert state.update_high_watermark(2) == 1
    state.record_fetch("c", 1, 2, leader_end_offset=2)
    assert state.update_high_watermark(2) == 2
    assert state.update_high_watermark(1) == 2, "the HW never goes back"


def test_a_restarted_follower_counts_from_scratch_and_the_hw_stays() -> None:
    state = leader(Clock(), isr=("a", "b"))
    state.record_fetch("b", 1, 5, leader_end_offset=5)
    assert state.update_high_watermark(5) == 5
    state.record_fetch("b", 2, 0, leader_end_offset=7)  # registered again with an empty disk
    follower = state.follower("b")
    assert follower is not None and (follower.node_epoch, follower.log_end_offset) == (2, 0)
    assert state.update_high_watermark(7) == 5


def test_isr_follower_that_stops_fetching_is_out_of_sync_after_the_lag_time() -> None:
    clock = Clock()
    state = leader(clock)
    state.record_fetch("b", 1, 3, leader_end_offset=3)
    state.record_fetch("c", 1, 3, leader_end_offset=3)
    clock.now += LAG_MS + 1
    assert state.out_of_sync(3) == set(), "both at the leader's end: nothing to catch up on"
    state.record_fetch("b", 1, 3, leader_end_offset=3)
    state.record_fetch("c", 1, 3, leader_end_offset=3)  # c's last fetch
    state.record_fetch("b", 1, 5, leader_end_offset=5)
    clock.now += LAG_MS
    assert state.out_of_sync(5) == set(), "c was caught up within the window"
    clock.now += 1
    assert state.out_of_sync(5) == {"c"}


def test_slow_follower_counts_as_caught_up_to_its_previous_fetch() -> None:
    """Kafka's lastCaughtUpTime: reaching the LEO the leader had at the previous fetch counts from that fetch."""
    clock = Clock()
    state = leader(clock)
    state.record_fetch("b", 1, 0, leader_end_offset=10)
    first_fetch = clock.now
    clock.now += 4_000
    state.record_fetch("b", 1, 10, leader_end_offset=20)
    follower = state.follower("b")
    assert follower is not None and follower.last_caught_up_ms == first_fetch
    clock.now = first_fetch + LAG_MS + 1
    assert "b" in state.out_of_sync(20)


def test_new_leader_gives_isr_members_a_full_lag_window() -> None:
    clock = Clock()
    state = leader(clock)
    clock.now += LAG_MS
    assert state.out_of_sync(4) == set()
    clock.now += 1
    assert state.out_of_sync(4) == {"b", "c"}


def test_follower_joins_once_it_reaches_the_hw_and_the_epoch_start() -> None:
    state = leader(Clock(), isr=("a", "b"), hw=0, epoch_start=8)
    state.record_fetch("b", 1, 10, leader_end_offset=10)
    assert state.update_high_watermark(10) == 10
    state.record_fetch("c", 1, 6, leader_end_offset=10)
    assert state.ready_to_join() == set()
    state.record_fetch("c", 1, 9, leader_end_offset=10)
    assert state.ready_to_join() == set(), "below the HW"
    state.record_fetch("c", 1, 10, leader_end_offset=12)
    assert state.ready_to_join() == {"c"}
    state.set_isr(["a", "b", "c"])
    assert state.ready_to_join() == set() and state.isr == {"a", "b", "c"}


def test_caught_up_follower_outside_the_isr_holds_the_hw() -> None:
    """The HW must not pass a follower that is about to join, or it would join with a LEO below the HW."""
    state = leader(Clock(), isr=("a",))
    state.record_fetch("b", 1, 4, leader_end_offset=4)
    state.record_fetch("b", 1, 4, leader_end_offset=6)
    assert state.update_high_watermark(6) == 4


def test_isr_members_must_be_replicas() -> None:
    state = leader(Clock())
    with pytest.raises(ValueError, match="not replicas"):
        state.set_isr(["a", "z"])
    with pytest.raises(KeyError):
        state.record_fetch("z", 1, 0, leader_end_offset=0)


def test_a_reassignment_adds_a_follower_that_joins_once_caught_up_and_drops_one_whose_lag_no_longer_counts() -> None:
    state = leader(Clock(), hw=5)
    for follower in ("b", "c"):
        state.record_fetch(follower, 1, 5, leader_end_offset=5)
    assert state.set_replicas(["a", "b", "c", "d"]) == []
    state.record_fetch("d", 1, 5, leader_end_offset=9)  # the new replica copies; unknown before set_replicas
    assert state.ready_to_join() == {"d"}
    state.set_isr(["a", "b", "c", "d"])
    assert state.set_replicas(["a", "b", "d"]) == ["c"]
    assert state.isr == {"a", "b", "d"}, "a dropped replica leaves the ISR at once"
    for follower in ("b", "d"):
        state.record_fetch(follower, 1, 9, leader_end_offset=9)
    assert state.update_high_watermark(9) == 9, "the dropped replica (still at 5) holds nothing back"
    with pytest.raises(KeyError):
        state.record_fetch("c", 1, 9, leader_end_offset=9)
