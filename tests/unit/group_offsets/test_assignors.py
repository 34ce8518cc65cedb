"""Assignors (design/consumer-groups.md §4): properties over random subscriptions, sizes and previous targets."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.group_offsets.assignors import AssignmentSpec, RangeAssignor, UniformAssignor, assignor_named
from oncelog.group_offsets.offset_manager import TopicPartition

TOPICS = ["a", "b", "c"]

counts_st = st.dictionaries(st.sampled_from(TOPICS), st.integers(1, 12), min_size=1)


@st.composite
def specs(draw: st.DrawFn, same_subscription: bool = False) -> AssignmentSpec:
    counts = draw(counts_st)
    members = draw(st.lists(st.text("mnopq", min_size=1, max_size=3), min_size=1, max_size=8, unique=True))
    if same_subscription:
        everything = frozenset(counts)
        subscriptions = {m: everything for m in members}
    else:
        subscriptions = {m: frozenset(draw(st.sets(st.sampled_from(sorted(counts)), min_size=1))) for m in members}
    partitions = [TopicPartition(t, p) for t, n in counts.items() for p in range(n)]
    previous: dict[str, frozenset[TopicPartition]] = {}
    for tp in partitions:
        owner = draw(st.sampled_from([*members, "gone"]))
        previous[owner] = previous.get(owner, frozenset()) | {tp}
    return AssignmentSpec(subscriptions, counts, previous)


def check_exact_cover(spec: AssignmentSpec, result: dict[str, frozenset[TopicPartition]]) -> None:
    assert set(result) == set(spec.subscriptions)
    owners = Counter(tp for ps in result.values() for tp in ps)
    wanted = {
        TopicPartition(t, p)
        for t, n in spec.partition_counts.items()
        if any(t in s for s in spec.subscriptions.values())
        for p in range(n)
    }
    assert set(owners) == wanted, "every subscribed partition is assigned"
    assert all(c == 1 for c in owners.values()), "no partition is assigned twice"
    for member, ps in result.items():
        assert all(tp.topic in spec.subscriptions[member] for tp in ps), "only subscribed topics"


@settings(max_examples=300, deadline=None)
@given(specs())
def test_uniform_and_range_assign_every_subscribed_partition_once_to_a_subscriber(spec: AssignmentSpec) -> None:
    check_exact_cover(spec, UniformAssignor().assign(spec))
    check_exact_cover(spec, RangeAssignor().assign(spec))


@settings(max_examples=300, deadline=None)
@given(specs(same_subscription=True))
def test_uniform_sizes_differ_by_at_most_one_with_identical_subscriptions(spec: AssignmentSpec) -> None:
    sizes = [len(ps) for ps in UniformAssignor().assign(spec).values()]
    assert max(sizes) - min(sizes) <= 1


@settings(max_examples=200, deadline=None)
@given(specs(same_subscription=True))
def test_range_sizes_differ_by_at_most_one_per_topic(spec: AssignmentSpec) -> None:
    result = RangeAssignor().assign(spec)
    for topic in spec.partition_counts:
        sizes = [sum(1 for tp in ps if tp.topic == topic) for ps in result.values()]
        assert max(sizes) - min(sizes) <= 1


@settings(max_examples=200, deadline=None)
@given(specs(same_subscription=True))
def test_uniform_is_stable_when_nothing_changes(spec: AssignmentSpec) -> None:
    first = UniformAssignor().assign(spec)
    again = UniformAssignor().assign(AssignmentSpec(spec.subscriptions, spec.partition_counts, first))
    assert again == first


@settings(max_examples=200, deadline=None)
@given(specs(same_subscription=True), st.text("xyz", min_size=1, max_size=3))
def test_uniform_moves_only_what_balance_forces_when_a_member_joins(spec: AssignmentSpec, newcomer: str) -> None:
    before = UniformAssignor().assign(spec)
    topics = next(iter(spec.subscriptions.values()))
    joined = AssignmentSpec({**spec.subscriptions, newcomer: topics}, spec.partition_counts, before)
    after = UniformAssignor().assign(joined)
    total = sum(len(ps) for ps in before.values())
    moved = sum(len(before[m] - after[m]) for m in before)
    # the newcomer needs its floor share; everything else stays where it was
    assert moved == len(after[newcomer]) <= -(-total // len(joined.subscriptions))


def test_assignor_names() -> None:
    assert assignor_named("").name == "uniform"
    assert assignor_named("range").name == "range"
    assert assignor_named("sticky") is None
