"""The consumer's answer to a new leader's epoch end (KIP-320, Kafka's ``SubscriptionState.maybeCompleteValidation``).

The real-process case (an unclean leader change under a reading consumer) is
tests/integration/test_consumer_position_validation.py; these cover each branch of the decision.
"""

from __future__ import annotations

from typing import Any

import pytest

from oncelog.client.fetcher import Fetcher, PartitionState
from oncelog.client.services import EpochEndOffset
from oncelog.errors import OffsetOutOfRange
from oncelog.vocabulary import IsolationLevel, TopicPartition

TP = TopicPartition("orders", 0)


def fetcher(auto_offset_reset: str, isolation: IsolationLevel = IsolationLevel.READ_COMMITTED) -> Fetcher:
    """A Fetcher for decisions that touch neither the metadata nor the network (also test_fetch_ahead.py's)."""
    unused: Any = None
    return Fetcher(
        unused,
        unused,
        unused,
        isolation=isolation,
        initial_reset=auto_offset_reset,
        auto_offset_reset=auto_offset_reset,
        fetch_committed=unused,
        fetch_min_bytes=1,
        fetch_max_wait_ms=500,
        fetch_max_bytes=1 << 20,
        max_partition_fetch_bytes=1 << 20,
        request_timeout_s=5,
        retry_backoff_ms=100,
        check_crcs=True,
    )


def at(position: int, epoch: int = 3) -> PartitionState:
    return PartitionState(position=position, leader_epoch=epoch, current_leader_epoch=3)


@pytest.mark.parametrize("end", [25, 40])
def test_a_position_at_or_below_the_epochs_end_is_valid_and_stays(end: int) -> None:
    state = at(25)
    fetcher("earliest")._complete_validation(TP, state, EpochEndOffset(3, end), current=4)
    assert (state.position, state.leader_epoch, state.current_leader_epoch, state.error) == (25, 3, 4, None)


def test_a_position_beyond_the_epochs_end_goes_back_to_the_first_offset_known_to_diverge() -> None:
    state = at(25)
    fetcher("latest")._complete_validation(TP, state, EpochEndOffset(2, 10), current=4)
    assert (state.position, state.leader_epoch, state.current_leader_epoch, state.error) == (10, 2, 4, None)


def test_an_epoch_the_new_leader_does_not_know_resets_the_position_by_auto_offset_reset() -> None:
    state = at(25)
    fetcher("earliest")._complete_validation(TP, state, EpochEndOffset(-1, -1), current=4)
    assert (state.position, state.reset, state.current_leader_epoch) == (None, "earliest", 3)


@pytest.mark.parametrize("end", [EpochEndOffset(2, 10), EpochEndOffset(-1, -1)])
def test_without_a_reset_policy_truncation_is_raised_by_the_next_poll_and_the_position_stays(
    end: EpochEndOffset,
) -> None:
    state = at(25)
    fetcher("none")._complete_validation(TP, state, end, current=4)
    assert isinstance(state.error, OffsetOutOfRange) and "seek()" in state.error.message
    assert (state.position, state.current_leader_epoch) == (25, 3), "still to be validated"
