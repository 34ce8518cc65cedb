"""Offset JSON, range planning and rate limiting of the Spark source (pure functions)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client.records import TopicPartition
from oncelog.spark.offsets import OffsetRange, limit_by_records, offsets_from_json, offsets_to_json, plan_ranges

A0, A1, B0 = TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)


def test_json_round_trip_in_sparks_kafka_shape() -> None:
    offsets = {A1: 7, A0: 3, B0: 0}
    document = offsets_to_json(offsets)
    assert json.dumps(document) == '{"a": {"0": 3, "1": 7}, "b": {"0": 0}}'
    assert offsets_from_json(json.loads(json.dumps(document))) == offsets


@pytest.mark.parametrize(
    "document",
    [[1], {"a": [1]}, {"a": {"x": 1}}, {"a": {"0": -1}}, {"a": {"0": 1.5}}, {"a": {"0": True}}, {"": {"0": 1}}],
)
def test_malformed_checkpoint_offsets_are_rejected(document: object) -> None:
    with pytest.raises(ValueError):
        offsets_from_json(document)


def test_sentinels_only_where_allowed() -> None:
    assert offsets_from_json({"a": {"0": -2, "1": -1}}, allow_sentinels=True) == {A0: -2, A1: -1}
    with pytest.raises(ValueError):
        offsets_from_json({"a": {"0": -1}})


def test_one_range_per_partition_with_data() -> None:
    ranges = plan_ranges({A0: 5, A1: 9, B0: 0}, {A0: 10, A1: 9, B0: 4})
    assert ranges == [OffsetRange("a", 0, 5, 10), OffsetRange("b", 0, 0, 4)], "an empty range gets no task"


def test_new_partition_missing_from_start_is_read_from_zero() -> None:
    assert plan_ranges({A0: 5}, {A0: 5, A1: 3}) == [OffsetRange("a", 1, 0, 3)]


def test_end_before_start_is_an_error() -> None:
    with pytest.raises(ValueError, match="before start"):
        plan_ranges({A0: 9}, {A0: 3})


def test_min_partitions_splits_in_proportion_to_size() -> None:
    ranges = plan_ranges({A0: 0, B0: 0}, {A0: 300, B0: 100}, min_partitions=4)
    assert [(r.topic, r.start, r.end) for r in ranges] == [
        ("a", 0, 100),
        ("a", 100, 200),
        ("a", 200, 300),
        ("b", 0, 100),
    ]


def test_max_records_per_partition_caps_every_range() -> None:
    ranges = plan_ranges({A0: 10}, {A0: 35}, max_records_per_partition=10)
    assert [(r.start, r.end) for r in ranges] == [(10, 18), (18, 26), (26, 35)]
    assert all(r.size <= 10 for r in ranges)


@settings(deadline=None)  # pure code: a slow example on a loaded machine is not a failure
@given(
    st.dictionaries(
        st.sampled_from([A0, A1, B0]), st.tuples(st.integers(0, 10_000), st.integers(0, 10_000)), min_size=1
    ),
    st.one_of(st.none(), st.integers(1, 50)),
    st.one_of(st.none(), st.integers(1, 3_000)),
)
def test_plan_covers_every_offset_exactly_once(
    bounds: dict[TopicPartition, tuple[int, int]], min_partitions: int | None, max_per_partition: int | None
) -> None:
    start = {tp: min(a, b) for tp, (a, b) in bounds.items()}
    end = {tp: max(a, b) for tp, (a, b) in bounds.items()}
    ranges = plan_ranges(start, end, min_partitions=min_partitions, max_records_per_partition=max_per_partition)
    for tp in end:
        mine = [r for r in ranges if r.topic_partition == tp]
        assert all(r.size > 0 for r in mine)
        covered = [o for r in mine for o in range(r.start, r.end)]
        assert covered == list(range(start[tp], end[tp])), "contiguous, ordered, no gap, no overlap"
    assert ranges == plan_ranges(start, end, min_partitions=min_partitions, max_records_per_partition=max_per_partition)


def test_rate_limit_shares_in_proportion_to_backlog() -> None:
    ends = limit_by_records({A0: 0, A1: 100}, {A0: 300, A1: 200}, 200)
    assert ends == {A0: 150, A1: 150}


def test_rate_limit_never_starves_a_small_backlog() -> None:
    ends = limit_by_records({A0: 0, A1: 0}, {A0: 10_000, A1: 1}, 10)
    assert ends[A1] == 1, "a share below one offset rounds up"
    assert ends[A0] == 9


def test_rate_limit_admits_everything_when_under_the_limit() -> None:
    assert limit_by_records({A0: 4}, {A0: 10, A1: 3}, 100) == {A0: 10, A1: 3}


@settings(deadline=None)
@given(
    st.dictionaries(st.sampled_from([A0, A1, B0]), st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1),
    st.integers(1, 500),
)
def test_rate_limit_stays_within_bounds(bounds: dict[TopicPartition, tuple[int, int]], limit: int) -> None:
    start = {tp: min(a, b) for tp, (a, b) in bounds.items()}
    latest = {tp: max(a, b) for tp, (a, b) in bounds.items()}
    ends = limit_by_records(start, latest, limit)
    assert all(start[tp] <= ends[tp] <= latest[tp] for tp in latest)
    admitted = sum(ends[tp] - start[tp] for tp in latest)
    backlog = sum(latest[tp] - start[tp] for tp in latest)
    assert admitted <= max(limit, 0) + len(latest), "at most one offset of rounding per partition"
    assert admitted > 0 or backlog == 0, "progress whenever there is a backlog"
