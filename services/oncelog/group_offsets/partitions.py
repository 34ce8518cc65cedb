"""CatalogPartitions: which partitions exist, read from the catalog and cached (a ``PartitionDirectory``).

Kafka's broker checks its metadata cache before accepting an offset commit (``UNKNOWN_TOPIC_OR_PARTITION``,
design/kafka-semantics.md §6). Topics are created far less often than offsets are committed, so partition counts are
cached and
a topic is read again only when a commit names a topic or partition the cache does not know. A deleted topic
stays known until restart; accepting an offset for it is harmless.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping

from oncelog.catalog import CatalogStore
from oncelog.errors import UnknownTopicOrPartition
from oncelog.vocabulary import TopicPartition


class CatalogPartitions:
    """Answers ``unknown(partitions)`` from cached partition counts, refreshing a topic on a miss."""

    def __init__(self, catalog: CatalogStore) -> None:
        self.catalog = catalog
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def unknown(self, partitions: Collection[TopicPartition]) -> list[TopicPartition]:
        """Partitions that do not exist, sorted."""
        misses = {tp.topic for tp in partitions if not self._known(tp)}
        for topic in sorted(misses):
            try:
                count = len(self.catalog.describe_topics([topic])[0].partitions)
            except UnknownTopicOrPartition:
                count = 0
            with self._lock:
                self._counts[topic] = count
        return sorted(tp for tp in partitions if not self._known(tp))

    def _known(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp.partition < self._counts.get(tp.topic, 0)


class CatalogTopics:
    """Every topic's partition count for consumer group assignment (a ``TopicDirectory``), read from the catalog
    at most once per ``refresh_ms`` (design/consumer-groups.md §3): a new partition reaches the assignor within
    that time. A subscribed topic name the cache does not know is looked for at once, unless that same name was
    looked for and missed within ``miss_refresh_ms``: a member that subscribes to a topic created a moment ago gets
    its partitions at once even when a read for another name happened just before, while members subscribed to a
    name that does not exist cost at most one read per ``miss_refresh_ms``."""

    def __init__(
        self, catalog: CatalogStore, clock: Callable[[], int], refresh_ms: int = 1000, miss_refresh_ms: int = 50
    ) -> None:
        self.catalog = catalog
        self._clock = clock
        self._refresh_ms = refresh_ms
        self._miss_refresh_ms = miss_refresh_ms
        self._counts: Mapping[str, int] = {}
        self._read_at: int | None = None
        self._missed_at: dict[str, int] = {}
        """When a wanted name was last read and not found."""
        self._lock = threading.Lock()

    def partition_counts(self, wanted: Collection[str] = ()) -> Mapping[str, int]:
        """Topic → partition count, as of at most ``refresh_ms`` ago, and read again for a wanted name not
        looked for within ``miss_refresh_ms``."""
        with self._lock:
            now = self._clock()
            age = None if self._read_at is None else now - self._read_at
            missing = [t for t in wanted if t not in self._counts]
            look_again = any(
                now - self._missed_at.get(t, now - self._miss_refresh_ms) >= self._miss_refresh_ms for t in missing
            )
            if age is None or age >= self._refresh_ms or look_again:
                fresh = {t.name: len(t.partitions) for t in self.catalog.describe_topics(None)}
                if fresh != self._counts:  # the same object while nothing changed: groups need no re-evaluation
                    self._counts = fresh
                self._read_at = now
                self._missed_at = {
                    t: at for t, at in self._missed_at.items() if t not in self._counts and now - at < self._refresh_ms
                }
                self._missed_at.update((t, now) for t in missing if t not in self._counts)
            return self._counts

    def cached_partition_counts(self, wanted: Collection[str] = ()) -> Mapping[str, int] | None:
        """What :meth:`partition_counts` would return without reading the catalog, or None when it would read it
        (or another thread holds the cache): never blocks, for callers on an event loop."""
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._read_at is None or self._clock() - self._read_at >= self._refresh_ms:
                return None
            return None if any(t not in self._counts for t in wanted) else self._counts
        finally:
            self._lock.release()
