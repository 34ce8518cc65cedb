"""LeaderEpochCache: Kafka's epoch → start offset rules, truncation and the checkpoint file."""

from __future__ import annotations

from pathlib import Path

import pytest

from oncelog.partition_storage.leader_epoch_cache import (
    CHECKPOINT_FILE,
    CorruptEpochCheckpoint,
    EpochEntry,
    LeaderEpochCache,
)


def cache(*pairs: tuple[int, int]) -> LeaderEpochCache:
    return LeaderEpochCache(None, [EpochEntry(e, o) for e, o in pairs])


def test_latest_epoch_ends_at_the_log_end_and_older_ones_where_the_next_starts() -> None:
    epochs = cache((0, 0), (1, 120))
    assert epochs.end_offset_for(1, log_end_offset=150) == (1, 150)
    assert epochs.end_offset_for(0, log_end_offset=150) == (0, 120)


def test_an_epoch_this_replica_never_saw_answers_the_epoch_below_it() -> None:
    epochs = cache((2, 10), (4, 20))
    assert epochs.end_offset_for(3, log_end_offset=30) == (2, 20)
    assert epochs.end_offset_for(1, log_end_offset=30) == (1, 10), "below every epoch: ends where the first starts"
    assert epochs.end_offset_for(5, log_end_offset=30) == (-1, -1)
    assert epochs.end_offset_for(-1, log_end_offset=30) == (-1, -1)
    assert cache().end_offset_for(0, log_end_offset=0) == (-1, -1)


def test_an_offset_belongs_to_the_epoch_of_the_last_entry_starting_at_or_below_it() -> None:
    epochs = cache((2, 10), (4, 20))
    assert [epochs.epoch_for_offset(o) for o in (10, 19, 20, 500)] == [2, 2, 4, 4]
    assert epochs.epoch_for_offset(9) == -1, "below the first entry: no epoch is known"
    assert cache().epoch_for_offset(0) == -1


def test_assign_appends_new_epochs_and_ignores_repeats() -> None:
    epochs = cache()
    assert epochs.assign(0, 0)
    assert not epochs.assign(0, 5), "the same epoch at a later offset is no change"
    assert epochs.assign(3, 7)
    assert epochs.entries == [EpochEntry(0, 0), EpochEntry(3, 7)] and epochs.latest_epoch == 3
    assert epochs.start_offset_of(3) == 7 and epochs.start_offset_of(1) is None


def test_assign_drops_entries_that_would_break_monotonic_order() -> None:
    epochs = cache((0, 0), (2, 10), (3, 20))
    assert epochs.assign(2, 15)
    assert epochs.entries == [EpochEntry(0, 0), EpochEntry(2, 15)]
    assert epochs.assign(4, 5)
    assert epochs.entries == [EpochEntry(0, 0), EpochEntry(4, 5)]
    with pytest.raises(ValueError):
        epochs.assign(-1, 0)


def test_truncation_from_the_end_and_from_the_start() -> None:
    epochs = cache((0, 0), (1, 10), (2, 20))
    assert epochs.truncate_from_end(20)
    assert epochs.entries == [EpochEntry(0, 0), EpochEntry(1, 10)]
    assert not epochs.truncate_from_end(25)
    assert epochs.truncate_from_start(12)
    assert epochs.entries == [EpochEntry(1, 12)], "the epoch covering the new start is kept, clamped"
    assert epochs.clear() and epochs.latest_epoch == -1


def test_divergent_tails_are_found_by_epoch_not_by_high_watermark() -> None:
    """design/replication.md §5 case 2: A led epoch 0 and wrote offsets 0-1; B, which had only offset 0, became leader
    at
    epoch 1 and wrote its own offset 1. A asks B where epoch 0 ends: at 1, so A drops its offset 1."""
    a, b = cache((0, 0)), cache((0, 0), (1, 1))
    epoch, end = b.end_offset_for(a.latest_epoch, log_end_offset=2)
    assert (epoch, end) == (0, 1)
    truncate_to = min(end, a.end_offset_for(epoch, log_end_offset=2)[1])
    assert truncate_to == 1


def test_checkpoint_survives_a_reload(tmp_path: Path) -> None:
    epochs = LeaderEpochCache.load(tmp_path)
    assert epochs.entries == [] and not (tmp_path / CHECKPOINT_FILE).exists()
    epochs.assign(0, 0)
    epochs.assign(2, 40)
    assert (tmp_path / CHECKPOINT_FILE).read_text() == "0\n2\n0 0\n2 40\n"
    assert LeaderEpochCache.load(tmp_path).entries == [EpochEntry(0, 0), EpochEntry(2, 40)]
    epochs.truncate_from_end(40)
    assert LeaderEpochCache.load(tmp_path).entries == [EpochEntry(0, 0)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "version and the count"),
        ("1\n0\n", "version 1"),
        ("0\n2\n0 0\n", "says 2 entries but has 1"),
        ("0\n1\nzero 0\n", "line 3"),
        ("0\n2\n3 0\n1 5\n", "not increasing"),
    ],
)
def test_a_corrupt_checkpoint_is_named(tmp_path: Path, text: str, fragment: str) -> None:
    (tmp_path / CHECKPOINT_FILE).write_text(text)
    with pytest.raises(CorruptEpochCheckpoint) as info:
        LeaderEpochCache.load(tmp_path)
    assert fragment in str(info.value) and CHECKPOINT_FILE in str(info.value)
