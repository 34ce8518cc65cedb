"""Server-side partition assignors: ``uniform`` (sticky, the default) and ``range`` (design/consumer-groups.md §4).

Pure functions of the group's subscriptions, the partition counts and (for ``uniform``) the previous target
assignment. Modelled on Kafka's ``UniformAssignor`` and ``RangeAssignor`` (group-coordinator module).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from oncelog.vocabulary import TopicPartition

DEFAULT_ASSIGNOR = "uniform"


@dataclass(frozen=True)
class AssignmentSpec:
    """What an assignor sees.

    Attributes:
        subscriptions: member id → the topics it is subscribed to (existing topics only).
        partition_counts: topic → number of partitions.
        previous: member id → its previous target partitions (sticky assignors keep them when they can).
    """

    subscriptions: Mapping[str, frozenset[str]]
    partition_counts: Mapping[str, int]
    previous: Mapping[str, frozenset[TopicPartition]]


class Assignor(Protocol):
    """Computes a target assignment: every member of ``spec.subscriptions`` gets an entry."""

    name: str

    def assign(self, spec: AssignmentSpec) -> dict[str, frozenset[TopicPartition]]: ...


class RangeAssignor:
    """Per topic, the members subscribed to it (sorted by id) take contiguous ranges; the first ``n % m`` one more."""

    name = "range"

    def assign(self, spec: AssignmentSpec) -> dict[str, frozenset[TopicPartition]]:
        result: dict[str, set[TopicPartition]] = {m: set() for m in spec.subscriptions}
        for topic in sorted(spec.partition_counts):
            members = sorted(m for m, topics in spec.subscriptions.items() if topic in topics)
            if not members:
                continue
            count = spec.partition_counts[topic]
            quota, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                size = quota + (1 if i < extra else 0)
                result[member].update(TopicPartition(topic, p) for p in range(start, start + size))
                start += size
        return {m: frozenset(ps) for m, ps in result.items()}


class UniformAssignor:
    """Balanced and sticky: each partition stays with its previous owner while that keeps the balance.

    Every partition goes to a member subscribed to its topic. Among members with identical subscriptions the
    sizes differ by at most one. Partitions are placed in a fixed order (topic, partition) and members are
    compared by (load, member id), so the result depends only on the inputs.
    """

    name = "uniform"

    def assign(self, spec: AssignmentSpec) -> dict[str, frozenset[TopicPartition]]:
        members = sorted(spec.subscriptions)
        result: dict[str, set[TopicPartition]] = {m: set() for m in members}
        if not members:
            return {}
        all_partitions = [
            TopicPartition(t, p)
            for t in sorted(spec.partition_counts)
            for p in range(spec.partition_counts[t])
            if any(t in spec.subscriptions[m] for m in members)
        ]
        # Each member's fair share among the members that could take its partitions: computed per group of
        # members with identical subscriptions, which is the common case (and exact for it).
        quota = self._quotas(spec, members)
        unassigned: list[TopicPartition] = []
        for tp in all_partitions:
            owner = next((m for m in members if tp in spec.previous.get(m, frozenset())), None)
            if owner is not None and tp.topic in spec.subscriptions[owner] and len(result[owner]) < quota[owner]:
                result[owner].add(tp)
            else:
                unassigned.append(tp)
        for tp in unassigned:
            candidates = [m for m in members if tp.topic in spec.subscriptions[m]]
            target = min(candidates, key=lambda m: (len(result[m]) >= quota[m], len(result[m]), m))
            result[target].add(tp)
        return {m: frozenset(ps) for m, ps in result.items()}

    @staticmethod
    def _quotas(spec: AssignmentSpec, members: list[str]) -> dict[str, int]:
        """Ceiling share per member: partitions its subscription class can take over the class size, rounded up,
        with only as many members at the ceiling as the remainder allows (the rest get the floor)."""
        classes: dict[frozenset[str], list[str]] = {}
        for m in members:
            classes.setdefault(spec.subscriptions[m], []).append(m)
        quota: dict[str, int] = {}
        for topics, group in classes.items():
            total = sum(spec.partition_counts.get(t, 0) for t in topics)
            base, extra = divmod(total, len(group))
            # Members keeping the most previous partitions get the extra slots: fewer moves.
            ranked = sorted(group, key=lambda m: (-len(spec.previous.get(m, frozenset())), m))
            for i, m in enumerate(ranked):
                quota[m] = base + (1 if i < extra else 0)
        return quota


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


def assignor_named(name: str) -> Assignor | None:
    """The assignor called ``name`` (empty means the default), or None if there is none by that name."""
    return ASSIGNORS.get(name or DEFAULT_ASSIGNOR)


__all__ = [
    "ASSIGNORS",
    "DEFAULT_ASSIGNOR",
    "AssignmentSpec",
    "Assignor",
    "RangeAssignor",
    "UniformAssignor",
    "assignor_named",
]
