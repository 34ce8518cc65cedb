"""CatalogTopics (design/consumer-groups.md §3): topic sizes for the assignor, read at most once per refresh
interval, and again soon when a member subscribes to a name the last read did not know (a topic created a
moment before)."""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.group_offsets.partitions import CatalogTopics


@dataclass
class Topic:
    name: str
    partitions: tuple[int, ...]


class Catalog:
    """Counts describe_topics calls; the only catalog method CatalogTopics uses."""

    def __init__(self) -> None:
        self.topics = {"orders": 3}
        self.reads = 0

    def describe_topics(self, names: object) -> list[Topic]:
        assert names is None
        self.reads += 1
        return [Topic(n, tuple(range(c))) for n, c in self.topics.items()]


def test_reads_once_per_interval_and_soon_again_for_an_unknown_subscribed_name() -> None:
    catalog, now = Catalog(), [0]
    topics = CatalogTopics(catalog, lambda: now[0], refresh_ms=1000, miss_refresh_ms=50)  # type: ignore[arg-type]
    assert topics.partition_counts(["orders"]) == {"orders": 3}
    now[0] = 500
    assert topics.partition_counts(["orders"]) == {"orders": 3} and catalog.reads == 1, "cached within the interval"
    catalog.topics["payments"] = 2  # created just now
    now[0] = 520
    assert topics.partition_counts() == {"orders": 3} and catalog.reads == 1, "nobody asks for it: still cached"
    assert topics.partition_counts(["payments"]) == {"orders": 3, "payments": 2}, "a missing name is read again"
    assert catalog.reads == 2
    now[0] = 540
    catalog.topics["refunds"] = 1  # created after the read for another name 20 ms ago
    assert topics.partition_counts(["refunds"])["refunds"] == 1, "a name not looked for yet is read at once"
    assert catalog.reads == 3
    now[0] = 560
    assert "nope" not in topics.partition_counts(["nope"]) and catalog.reads == 4
    now[0] = 580
    assert "nope" not in topics.partition_counts(["nope"]), "the same missing name: no more than one read per 50 ms"
    assert catalog.reads == 4
    now[0] = 610
    topics.partition_counts(["nope"])
    assert catalog.reads == 5, "looked for again once 50 ms have passed"
