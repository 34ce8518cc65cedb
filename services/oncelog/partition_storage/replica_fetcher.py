"""Follower side of replication: one fetcher per leader node copies every partition this node follows there.

Kafka's ``ReplicaFetcherThread`` / ``AbstractFetcherThread`` (docs/design/replication.md §3): a fetcher keeps the
position of each partition it copies from one leader, sends one long-polling replica fetch for all of them, appends
what comes back to the local engines exactly as the leader wrote it (:meth:`PartitionEngine.append_copied`),
makes it durable for ``flush=sync`` topics before reporting the new position (``flush=leader`` topics report it at
once and fsync right after, as a Kafka follower acknowledges from memory), and passes the leader's high
watermark on to the local engine (a follower's HW is ``min(own log end, leader HW)``).

Domain code: the network comes in through the :class:`ReplicaTransport` protocol and the clock through asyncio;
nothing here imports grpc (``replica_transport.py`` is the gRPC implementation).

Errors: a failed call backs off (``retry_backoff_ms``) and retries, and so does a round in which any partition
answered an error. A leadership error (NOT_LEADER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH) also asks the owner
to refresh the catalog (``on_leadership_error``): if leadership moved, the owner re-assigns the partition to the
new leader's fetcher; if the leader's own view was stale, the partition is simply fetched again after the backoff.
A call that fails (the leader is unreachable: it may have died) asks for a refresh too, at most every
``unreachable_refresh_ms``, so a follower finds the leader the controller elects in its place within that time
instead of at its next periodic refresh (failover, design/replication.md §6).

Truncation by leader epoch (design/replication.md §5, KIP-279): every fetch carries the epoch of the follower's last
batch. When the
leader answers that this epoch ends earlier in its log (``diverging_epoch = (epoch, end)``), the follower's log
must be cut to ``min(end, where that epoch ends in its own log)`` (never to its HW): the partition is paused and
``on_divergence(followed, offset)`` asks the owner to close, cut and reopen it, which re-adds it here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from oncelog.errors import OncelogError, Reason
from oncelog.partition_storage.engine import PartitionEngine

__all__ = [
    "CopyPosition",
    "CopyResult",
    "FetcherSettings",
    "FollowedPartition",
    "ReplicaFetcher",
    "ReplicaFetcherManager",
    "ReplicaTransport",
]

log = logging.getLogger(__name__)

_LEADERSHIP_ERRORS = (Reason.NOT_LEADER, Reason.FENCED_LEADER_EPOCH, Reason.UNKNOWN_LEADER_EPOCH)


@dataclass(frozen=True, slots=True)
class CopyPosition:
    """Where this follower stands in one partition (one entry of a replica fetch)."""

    topic: str
    partition: int
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int


@dataclass(frozen=True, slots=True)
class CopyResult:
    """The leader's answer for one partition: its next batches, its HW and, if the logs diverge, where."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    diverging_epoch: tuple[int, int] | None = None


class ReplicaTransport(Protocol):
    """Sends one replica fetch to a leader."""

    async def replica_fetch(
        self,
        address: str,
        follower_id: str,
        follower_epoch: int,
        positions: Sequence[CopyPosition],
        *,
        max_wait_ms: int,
        max_bytes: int,
    ) -> list[CopyResult | OncelogError]:
        """One result (or per-partition error) per position, in order; raises OncelogError if the call failed."""
        ...


@dataclass(slots=True)
class FollowedPartition:
    """A partition this node copies: its engine, the leader epoch it copies under and the leader's last HW."""

    topic: str
    partition: int
    engine: PartitionEngine
    leader_epoch: int
    leader_high_watermark: int = 0
    paused: str = ""  # why copying stopped until the owner re-opens the partition (truncation); empty while copying

    def limit(self, candidate: int) -> int:
        """The engine's HW limit: never above the leader's HW (nor, by the caller, the local log end)."""
        return min(candidate, self.leader_high_watermark)


@dataclass(frozen=True, slots=True)
class FetcherSettings:
    """What every fetcher of a node shares.

    Attributes:
        follower_id: this node's id, sent in every fetch.
        follower_epoch: this node's current registration epoch.
        transport: sends the fetches.
        on_leadership_error: asks the owner to re-read the catalog.
        on_divergence: asks the owner to cut a partition to an offset and re-add it.
        max_wait_ms, max_bytes: long-poll and size of one fetch.
        retry_backoff_ms: pause after a failed fetch.
        unreachable_refresh_ms: while the leader cannot be reached, the catalog is re-read at most this often.
        clock: monotonic milliseconds (paces those refreshes).
    """

    follower_id: str
    follower_epoch: Callable[[], int]
    transport: ReplicaTransport
    on_leadership_error: Callable[[], None]
    on_divergence: Callable[[FollowedPartition, int], None]
    max_wait_ms: int = 500
    max_bytes: int = 8 * 1024 * 1024
    retry_backoff_ms: int = 100
    unreachable_refresh_ms: int = 200
    clock: Callable[[], int] = field(default=lambda: time.monotonic_ns() // 1_000_000)


class ReplicaFetcher:
    """Copies the partitions this node follows on one leader node; see the module docstring."""

    def __init__(self, leader_id: str, address: str, settings: FetcherSettings) -> None:
        self.leader_id = leader_id
        self.address = address
        self._settings = settings
        self._partitions: dict[tuple[str, int], FollowedPartition] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._refresh_requested_at: int | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    @property
    def partitions(self) -> dict[tuple[str, int], FollowedPartition]:
        """The partitions copied, by (topic, partition)."""
        return self._partitions

    def add(self, followed: FollowedPartition) -> None:
        """Start copying a partition (replacing an earlier entry of the same partition)."""
        followed.leader_high_watermark = min(followed.engine.high_watermark, followed.engine.log_end_offset)
        followed.engine.high_watermark_limit = followed.limit
        self._partitions[(followed.topic, followed.partition)] = followed
        self._changed.set()
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher {self.leader_id}")

    def remove(self, topic: str, partition: int) -> FollowedPartition | None:
        """Stop copying a partition; returns its entry."""
        followed = self._partitions.pop((topic, partition), None)
        if followed is not None and followed.engine.high_watermark_limit == followed.limit:
            followed.engine.high_watermark_limit = None
        return followed

    async def stop(self) -> None:
        """Stop the fetch loop (an in-flight append finishes first)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)

    def _flush_soon(self, engine: PartitionEngine) -> None:
        """fsync what was copied without waiting for it (``flush=leader``); concurrent calls share fsyncs."""

        async def flush() -> None:
            try:
                await engine.flush()
            except OncelogError as err:  # the engine is offline now; the owner's next fetch round skips it
                log.warning("fsync of copied batches of %s failed: %s", engine.directory.name, err)

        task = asyncio.get_running_loop().create_task(flush())
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _run(self) -> None:
        while True:
            active = [f for f in self._partitions.values() if not f.paused and f.engine.online]
            if not active:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                if await self.fetch_once(active):
                    await asyncio.sleep(self._settings.retry_backoff_ms / 1000)
            except OncelogError as err:
                log.warning("replica fetch from %s (%s) failed: %s; retrying", self.leader_id, self.address, err)
                self._leader_unreachable()
                await asyncio.sleep(self._settings.retry_backoff_ms / 1000)
            except Exception:
                log.exception("replica fetch from %s failed; retrying", self.leader_id)
                await asyncio.sleep(self._settings.retry_backoff_ms / 1000)

    def _leader_unreachable(self) -> None:
        """The leader may be gone: have the catalog re-read, at most every ``unreachable_refresh_ms``."""
        now = self._settings.clock()
        last = self._refresh_requested_at
        if last is None or now - last >= self._settings.unreachable_refresh_ms:
            self._refresh_requested_at = now
            self._settings.on_leadership_error()

    async def fetch_once(self, active: Sequence[FollowedPartition]) -> bool:
        """One round: send the positions, apply every answer; True if any partition answered an error."""
        positions = [
            CopyPosition(
                f.topic,
                f.partition,
                f.leader_epoch,
                f.engine.log_end_offset,
                f.engine.epochs.latest_epoch,
                f.engine.high_watermark,
            )
            for f in active
        ]
        settings = self._settings
        results = await settings.transport.replica_fetch(
            self.address,
            settings.follower_id,
            settings.follower_epoch(),
            positions,
            max_wait_ms=settings.max_wait_ms,
            max_bytes=settings.max_bytes,
        )
        failed = False
        for followed, position, result in zip(active, positions, results, strict=True):
            if self._partitions.get((followed.topic, followed.partition)) is not followed:
                continue  # re-assigned while the fetch was in flight
            failed |= isinstance(result, OncelogError)
            await self._apply(followed, position, result)
        return failed

    async def _apply(
        self, followed: FollowedPartition, position: CopyPosition, result: CopyResult | OncelogError
    ) -> None:
        name = f"{followed.topic}-{followed.partition}"
        if isinstance(result, OncelogError):
            if result.reason in _LEADERSHIP_ERRORS:
                log.info("%s: %s; refreshing the catalog", name, result.message)
                self._settings.on_leadership_error()
            else:
                log.warning("%s: replica fetch failed: %s", name, result.message)
            return
        if result.diverging_epoch is not None:
            epoch, end = result.diverging_epoch
            own_epoch, own_end = followed.engine.epochs.end_offset_for(epoch, followed.engine.log_end_offset)
            target = max(min(end, own_end) if own_epoch >= 0 and end >= 0 else end, 0)
            followed.paused = f"log diverges from the leader's after epoch {epoch}; truncating to {target}"
            log.warning("%s: %s", name, followed.paused)
            self._settings.on_divergence(followed, target)
            return
        engine = followed.engine
        if result.records and engine.log_end_offset == position.fetch_offset:
            await engine.append_copied(result.records)
            if engine.config.flush_sync and engine.config.follower_fsync:
                await engine.flush()  # durable before the next fetch reports the new position
            elif engine.config.flush_sync:
                self._flush_soon(engine)  # flush=leader: reported from the page cache, durable right after
        followed.leader_high_watermark = result.high_watermark
        engine.refresh_high_watermark()


class ReplicaFetcherManager:
    """The fetchers of one node, one per leader node (Kafka's ``ReplicaFetcherManager``)."""

    def __init__(self, settings: FetcherSettings) -> None:
        self._settings = settings
        self._fetchers: dict[str, ReplicaFetcher] = {}
        self._leader_of: dict[tuple[str, int], str] = {}

    def following(self, topic: str, partition: int) -> FollowedPartition | None:
        """The entry of a partition this node copies, or None."""
        leader = self._leader_of.get((topic, partition))
        return None if leader is None else self._fetchers[leader].partitions.get((topic, partition))

    def follow(self, leader_id: str, address: str, followed: FollowedPartition) -> None:
        """Copy ``followed`` from ``leader_id`` at ``address`` (moving it from another leader's fetcher)."""
        key = (followed.topic, followed.partition)
        self.unfollow(*key)
        fetcher = self._fetchers.get(leader_id)
        if fetcher is not None and fetcher.address != address:  # the leader restarted elsewhere
            for other in list(fetcher.partitions.values()):
                fetcher.remove(other.topic, other.partition)
                self._leader_of.pop((other.topic, other.partition), None)
            asyncio.get_running_loop().create_task(fetcher.stop())
            fetcher = None
        if fetcher is None:
            fetcher = self._fetchers[leader_id] = ReplicaFetcher(leader_id, address, self._settings)
        fetcher.add(followed)
        self._leader_of[key] = leader_id

    def unfollow(self, topic: str, partition: int) -> FollowedPartition | None:
        """Stop copying a partition."""
        leader = self._leader_of.pop((topic, partition), None)
        if leader is None:
            return None
        return self._fetchers[leader].remove(topic, partition)

    async def stop(self) -> None:
        """Stop every fetcher."""
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._leader_of.clear()
        await asyncio.gather(*(f.stop() for f in fetchers), return_exceptions=True)
