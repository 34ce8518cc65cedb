"""CachedOffsetStore: an optional Redis read cache in front of the group-offset store (``ONCELOG_REDIS_URL``).

The Redis cache (:class:`CachedOffsetStore`) holds one entry per group with the data FetchOffsets needs. It is
never the truth. Only the shard owner reads or writes a group, so the owner decides locally whether an entry is
current: every entry is tagged with this process's incarnation, the shard's coordinator epoch and a local
version of the group that changes whenever a write starts. An entry with any other tag is ignored. Losing
Redis data therefore costs a SQL read and nothing else, and writes never depend on Redis being reachable.
"""

from __future__ import annotations

import itertools
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from oncelog.group_offsets.group_coordinator import OwnershipChange
from oncelog.group_offsets.group_state import ConsumerGroupState
from oncelog.group_offsets.offset_manager import (
    CommittedOffset,
    GroupView,
    OffsetStore,
    OffsetTransaction,
    PartitionOffset,
    ShardFence,
    TopicPartition,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


class CachedOffsetStore:
    """An :class:`OffsetStore` whose group reads go through a Redis read cache (see the module docstring).

    Args:
        inner: the store holding the truth.
        client: a synchronous ``redis.Redis`` (thread-safe; give it short socket timeouts).
        incarnation: unique per process start, so entries of an earlier process are never trusted.
        ttl_s: lifetime of an entry; bounds Redis memory, not correctness.
        key_prefix: namespace of this cluster's keys.
        retry_after_s: after a Redis error, skip Redis this long before trying again.
        clock: monotonic seconds, for ``retry_after_s``.
    """

    def __init__(
        self,
        inner: OffsetStore,
        client: Any,
        *,
        incarnation: str,
        ttl_s: int = 300,
        key_prefix: str = "oncelog:group-offsets:",
        retry_after_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self._redis = client
        self._incarnation = incarnation
        self._ttl_s = ttl_s
        self._prefix = key_prefix
        self._retry_after_s = retry_after_s
        self._clock = clock
        self._lock = threading.Lock()
        self._counter = itertools.count(1)
        self._versions: dict[str, int] = {}
        self._writers: dict[str, int] = {}
        self._skip_redis_until = 0.0

    def key(self, group_id: str) -> str:
        """The Redis key of a group's entry."""
        return self._prefix + group_id

    def claim_shard(self, shard: int, coordinator_epoch: int) -> bool:
        """Delegates to the inner store (entries of older epochs stop matching by their tag)."""
        return self.inner.claim_shard(shard, coordinator_epoch)

    def read_consumer_group(self, group_id: str) -> ConsumerGroupState | None:
        """Delegates to the inner store (consumer groups are not cached in Redis)."""
        return self.inner.read_consumer_group(group_id)  # type: ignore[attr-defined,no-any-return]

    def list_consumer_groups(self) -> list[ConsumerGroupState]:
        """Delegates to the inner store."""
        return self.inner.list_consumer_groups()  # type: ignore[attr-defined,no-any-return]

    def ownership_history(self, group_id: str) -> list[OwnershipChange]:
        """Delegates to the inner store."""
        return self.inner.ownership_history(group_id)  # type: ignore[attr-defined,no-any-return]

    def write(self, fences: Mapping[str, ShardFence], work: Callable[[OffsetTransaction], T]) -> T:
        """Give each group a fresh version (invalidating its entry), then write through to the inner store."""
        with self._lock:
            for group_id in fences:
                self._versions[group_id] = next(self._counter)
                self._writers[group_id] = self._writers.get(group_id, 0) + 1
        try:
            return self.inner.write(fences, work)
        finally:
            with self._lock:
                for group_id in fences:
                    self._writers[group_id] -= 1
                    if not self._writers[group_id]:
                        del self._writers[group_id]

    def read_group(self, group_id: str, fence: ShardFence) -> GroupView:
        """Serve from Redis when the entry's tag is current; otherwise read SQL and refill unless a write began."""
        with self._lock:
            if group_id not in self._versions:
                self._versions[group_id] = next(self._counter)
            version = self._versions[group_id]
            writing = group_id in self._writers
        tag = f"{self._incarnation}:{fence.coordinator_epoch}:{version}"
        if not writing:
            cached = self._get(group_id, tag)
            if cached is not None:
                return cached
        view = self.inner.read_group(group_id, fence)
        # A view read while a write was running may predate its commit, and the write's version is the one readers
        # use once it finishes: such a view must never be stored. A view read before a write began is tagged with an
        # older version, so storing it would be harmless; skipping it only saves a useless SET.
        with self._lock:
            unchanged = self._versions.get(group_id) == version and group_id not in self._writers
        if unchanged and not writing:
            self._put(group_id, tag, view)
        return view

    def _redis_usable(self) -> bool:
        return self._clock() >= self._skip_redis_until

    def _redis_failed(self, exc: Exception) -> None:
        if self._redis_usable():
            log.warning("Redis read cache unavailable (%s); reading SQL for %.0fs", exc, self._retry_after_s)
        self._skip_redis_until = self._clock() + self._retry_after_s

    def _get(self, group_id: str, tag: str) -> GroupView | None:
        if not self._redis_usable():
            return None
        try:
            raw = self._redis.get(self.key(group_id))
        except Exception as exc:  # any client failure just means "read SQL"
            self._redis_failed(exc)
            return None
        if raw is None:
            return None
        try:
            return _decode(raw, tag)
        except (ValueError, KeyError, TypeError, IndexError):
            return None

    def _put(self, group_id: str, tag: str, view: GroupView) -> None:
        if not self._redis_usable():
            return
        try:
            self._redis.set(self.key(group_id), _encode(tag, view), ex=self._ttl_s)
        except Exception as exc:
            self._redis_failed(exc)


def _encode(tag: str, view: GroupView) -> str:
    return json.dumps(
        {
            "tag": tag,
            "committed": [
                [tp.topic, tp.partition, c.value.offset, c.value.leader_epoch, c.value.metadata, c.commit_seq]
                for tp, c in sorted(view.committed.items())
            ],
            "pending": [[tp.topic, tp.partition] for tp in sorted(view.pending)],
        },
        separators=(",", ":"),
    )


def _decode(raw: bytes | str, tag: str) -> GroupView | None:
    entry = json.loads(raw)
    if entry["tag"] != tag:
        return None
    committed = {}
    for topic, partition, offset, leader_epoch, meta, seq in entry["committed"]:
        tp = TopicPartition(topic, partition)
        committed[tp] = CommittedOffset(PartitionOffset(tp, offset, leader_epoch, meta), seq)
    return GroupView(committed, frozenset(TopicPartition(t, p) for t, p in entry["pending"]))


__all__ = ["CachedOffsetStore"]
