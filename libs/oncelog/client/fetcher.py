"""The consumer's fetcher: positions, fetches in flight and buffered answers (Kafka's ``Fetcher`` and
``OffsetFetcher``, aiokafka's ``consumer/fetcher.py``).

The :class:`Fetcher` keeps one :class:`PartitionState` per assigned partition. ``fetch_records()`` keeps one
Fetch in flight per storage node for the assigned partitions that have no data buffered, returns as soon as one
answers with records, and leaves the others running for the next call. A partition whose buffered answer ends
below its last stable offset (at read_committed; its high watermark otherwise) is fetched ahead from that end while the
answer is read, so the storage node serves the next answer while this one is decoded: at most two answers per
partition are held (design/kafka-semantics.md §4.5). Each partition's answer goes through
:class:`~oncelog.client.fetch_filter.CompletedFetch`, which drops control records and, at read_committed, the data
of aborted transactions; the server already stops at the last stable offset, so open transactions stay invisible
(design/architecture.md §1.4, design/kafka-semantics.md §4.5).

A partition without a position gets one from the group's committed offset (through the ``fetch_committed``
callable the consumer passes, which reads with ``require_stable``, KIP-447) or, without one, from its reset
(``earliest`` / ``latest`` through ListOffsets). A topic deleted while assigned is reported once
(``UnknownTopicOrPartition``) and stays assigned; a topic created again under its name (a new topic id) is read
from its beginning.

A position carries the leader epoch of the last batch it moved through. When the metadata shows another leader
epoch, the partition is not fetched until :meth:`Fetcher._validate` asked the new leader where that epoch ends
(OffsetForLeaderEpoch, Kafka's KIP-320) and moved a position beyond the end back to it.

The fetcher runs on one event loop (the consumer's I/O thread) and is not thread-safe.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from oncelog.client.errors import Action, Refresh, RetriableError, classify
from oncelog.client.fetch_filter import CompletedFetch
from oncelog.client.metadata import ClusterMetadata
from oncelog.client.records import ConsumerRecord, OffsetAndMetadata, TopicPartition
from oncelog.client.services import (
    Deadline,
    EpochEndOffset,
    EpochQuery,
    FetchedPartition,
    FetchPosition,
    OffsetQuery,
    PartitionStorageClient,
    RetryPolicy,
    is_retriable,
)
from oncelog.errors import OffsetOutOfRange, OncelogError, Reason, UnknownTopicOrPartition
from oncelog.telemetry.metrics import CONSUMER_RECORDS_LAG, OncelogMetrics, default_metrics
from oncelog.vocabulary import IsolationLevel

if TYPE_CHECKING:
    from oncelog.records.columnar import DecodedColumns

__all__ = ["COMMITTED", "FetchCommitted", "Fetcher", "PartitionState"]

log = logging.getLogger("oncelog.client.consumer")

COMMITTED = "committed"
"""The reset of a partition whose position comes from the group's committed offset."""

_SEND_STEPS = 3
"""Event-loop steps a new Fetch task takes to put its request on the wire: the task itself, the client
interceptor's task and gRPC's call task (tests/integration/test_consumer_fetch_ahead.py fails with fewer)."""

FetchCommitted = Callable[
    [Sequence[TopicPartition], Deadline], Awaitable[dict[TopicPartition, OffsetAndMetadata | None]]
]
"""Reads the group's committed offsets of some partitions (None where nothing is committed)."""


@dataclass(slots=True)
class PartitionState:
    """What the consumer knows about one assigned partition."""

    position: int | None = None
    reset: str | None = None
    """How to find the position when it is None: "committed", "earliest" or "latest"."""
    start: int | None = None
    """Where this consumer began reading the partition (its first resolved position, or the last ``seek()``):
    ``rewind_to_committed()`` returns here while the group has no committed offset for it."""
    leader_epoch: int | None = None
    """Leader epoch of the last batch the position moved through (Kafka's offset epoch), committed with the offset;
    None after a reset or a seek. A leader change makes the fetcher check it (KIP-320, :meth:`Fetcher._validate`)."""
    current_leader_epoch: int | None = None
    """The partition leader's epoch the position was last fetched under or validated against; a different one in
    the metadata means a leader change since."""
    buffered: CompletedFetch | None = None
    """The answer being read."""
    buffered_end: int | None = None
    """Where ``buffered`` ends: the offset a fetch ahead of it starts at (None: do not fetch ahead)."""
    ahead: CompletedFetch | None = None
    """The next answer, fetched from ``buffered_end`` while ``buffered`` was read."""
    error: OncelogError | None = None
    """A non-retriable fetch error, raised by the next poll."""
    last_stable_offset: int = -1
    high_watermark: int = -1
    topic_id: str = ""
    """Id of the topic incarnation the position belongs to ("" until known)."""
    deleted_reported: bool = False
    """The deletion of the topic was reported by a poll; it is not reported again until the topic returns."""

    def reposition(self, position: int | None, reset: str | None) -> None:
        """Move to ``position`` (None: find it through ``reset``), dropping what was fetched and any error."""
        self.position, self.reset, self.error = position, reset, None
        self.drop_fetched()

    def drop_fetched(self) -> None:
        """Forget the buffered answers; the partition is fetched again from its position."""
        self.buffered = self.ahead = self.buffered_end = None

    def next_fetch(self, read_committed: bool) -> int | None:
        """The offset this partition's next Fetch starts at, or None while none is to be sent: its position with
        nothing buffered; with an answer buffered, that answer's end when the partition holds data beyond it."""
        if self.position is None or self.error is not None or self.ahead is not None:
            return None
        if self.buffered is None:
            return self.position
        end = self.buffered_end
        available = self.last_stable_offset if read_committed else self.high_watermark
        return end if end is not None and end < available else None


class Fetcher:
    """Fetches the assigned partitions for one consumer and tracks each one's position.

    Args:
        metadata: the consumer's metadata cache (leaders, topic ids).
        storage: the typed partition-storage client (Fetch, ListOffsets).
        retry: the consumer's retry policy for position lookups.
        isolation: read_committed or read_uncommitted.
        initial_reset: how a newly assigned partition finds its position: ``"committed"`` with a group,
            else the ``auto_offset_reset``.
        auto_offset_reset: ``"earliest"``, ``"latest"`` or ``"none"``.
        fetch_committed: reads the group's committed offsets (used only when a partition's reset is
            ``"committed"``).
    """

    def __init__(
        self,
        metadata: ClusterMetadata,
        storage: PartitionStorageClient,
        retry: RetryPolicy,
        *,
        isolation: IsolationLevel,
        initial_reset: str,
        auto_offset_reset: str,
        fetch_committed: FetchCommitted,
        fetch_min_bytes: int,
        fetch_max_wait_ms: int,
        fetch_max_bytes: int,
        max_partition_fetch_bytes: int,
        request_timeout_s: float,
        retry_backoff_ms: int,
        check_crcs: bool,
        metrics: OncelogMetrics | None = None,
        metric_labels: Mapping[str, str] | None = None,
    ) -> None:
        self._metadata = metadata
        self._storage = storage
        self._retry = retry
        self._isolation = isolation
        self.initial_reset = initial_reset
        self._auto_offset_reset = auto_offset_reset
        self._fetch_committed = fetch_committed
        self._fetch_min_bytes = fetch_min_bytes
        self._fetch_max_wait_ms = fetch_max_wait_ms
        self._fetch_max_bytes = fetch_max_bytes
        self._partition_fetch_bytes = max_partition_fetch_bytes
        self._request_timeout_s = request_timeout_s
        self._retry_backoff_ms = retry_backoff_ms
        self._check_crcs = check_crcs
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self._fetches: dict[str, asyncio.Task[None]] = {}
        self._ahead_due = False  # an answer arrived or moved up since the last look for Fetches to send ahead
        self._validations: dict[str, asyncio.Task[None]] = {}
        self._refresh_task: asyncio.Task[None] | None = None
        self._node_backoff_until: dict[str, float] = {}
        self._metric_labels = dict(metric_labels or {})
        lag = weakref.WeakMethod(self._records_lag)  # a consumer never closed must not be kept alive by its gauge

        def records_lag() -> list[tuple[int, Mapping[str, object]]]:
            method = lag()
            return [] if method is None else method()

        self._stop_lag_reports = (metrics or default_metrics()).register_source(CONSUMER_RECORDS_LAG, records_lag)

    def _records_lag(self) -> list[tuple[int, Mapping[str, object]]]:
        """Per assigned partition with a known position and end: end - position, the end being the last stable
        offset at read_committed and the high watermark otherwise (design/consumer-groups.md §8)."""
        committed = self._isolation is IsolationLevel.READ_COMMITTED
        out: list[tuple[int, Mapping[str, object]]] = []
        for tp, state in list(self.assignment.items()):
            end = state.last_stable_offset if committed else state.high_watermark
            if state.position is None or end < 0:
                continue
            labels = {**self._metric_labels, "topic": tp.topic, "partition": tp.partition}
            out.append((max(end - state.position, 0), labels))
        return out

    async def close(self) -> None:
        """Cancel the fetches and the metadata refresh in flight; stop reporting the records lag."""
        self._stop_lag_reports()
        tasks = [*self._fetches.values(), *self._validations.values()]
        tasks += [self._refresh_task] if self._refresh_task else []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """Assign exactly ``partitions``; those already assigned keep their state."""
        old = self.assignment
        self.assignment = {tp: old.get(tp) or PartitionState(reset=self.initial_reset) for tp in partitions}

    def note_topic_ids(self) -> None:
        """Remember the topic id each assigned partition's position belongs to, where metadata knows it."""
        for tp, state in self.assignment.items():
            info = self._metadata.cached_topic(tp.topic)
            if info is not None and not state.topic_id:
                state.topic_id = info.topic_id

    def _check_incarnation(self, tp: TopicPartition, state: PartitionState) -> bool:
        """Follow a deleted or re-created topic; False while the partition cannot be fetched.

        A deleted topic is reported once, by the next poll (UnknownTopicOrPartition), and the partition stays
        assigned: the consumer keeps asking for the topic. When a topic of that name exists again (a new
        topic id), its partitions are read from their beginning: positions of the old topic mean nothing in
        the new one, and starting anywhere later would skip its first records.
        """
        info = self._metadata.cached_topic(tp.topic)
        if info is None:  # dropped from the metadata cache: the cluster said the topic does not exist
            if not state.deleted_reported:
                state.deleted_reported = True
                state.drop_fetched()
                state.error = UnknownTopicOrPartition(
                    f"topic {tp.topic!r} was deleted while {tp} was assigned; the consumer keeps the assignment and "
                    "reads the topic from its beginning if it is created again (unassign it to stop)"
                )
            return False
        if state.topic_id and info.topic_id and info.topic_id != state.topic_id:
            log.warning(
                "%s: topic %r was deleted and created again (id %s -> %s); reading the new topic from its beginning",
                tp,
                tp.topic,
                state.topic_id,
                info.topic_id,
            )
            state.reposition(None, "earliest")
            state.start, state.leader_epoch = None, None
        if info.topic_id:
            state.topic_id = info.topic_id
        state.deleted_reported = False
        return True

    async def resolve_positions(
        self, partitions: Sequence[TopicPartition], deadline: Deadline, *, strict: bool
    ) -> None:
        """Give every partition in ``partitions`` without a position one, from committed offsets or the reset.

        With ``strict`` a failure or the deadline raises; otherwise partitions left unresolved are tried
        again by the next poll.
        """

        def unresolved() -> list[TopicPartition]:
            return [tp for tp in partitions if tp in self.assignment and self.assignment[tp].position is None]

        async def resolve() -> None:
            while todo := unresolved():
                committed_needed = [tp for tp in todo if self.assignment[tp].reset == COMMITTED]
                if committed_needed:
                    committed = await self._fetch_committed(committed_needed, deadline)
                    for tp in committed_needed:
                        state = self.assignment.get(tp)
                        if state is None or state.position is not None or state.reset != COMMITTED:
                            continue
                        found = committed.get(tp)
                        state.current_leader_epoch = None
                        if found is not None:
                            state.position, state.reset = found.offset, None
                            state.leader_epoch = found.leader_epoch
                        elif state.start is not None:
                            state.position, state.reset = state.start, None  # a rewind: back to the first read
                            state.leader_epoch = None
                        else:
                            state.reset = self._auto_offset_reset
                by_reset: dict[str, list[TopicPartition]] = {}
                for tp in todo:
                    state = self.assignment.get(tp)
                    if state is not None and state.position is None and state.reset in ("earliest", "latest"):
                        by_reset.setdefault(state.reset, []).append(tp)
                    elif state is not None and state.position is None and state.reset == "none":
                        raise OffsetOutOfRange(
                            f"{tp} has no committed offset and auto_offset_reset='none'; seek() to an offset first"
                        )
                for reset, tps in by_reset.items():
                    offsets = await self._list_offsets(tps, reset, deadline)
                    for tp, offset in offsets.items():
                        state = self.assignment.get(tp)
                        if state is not None and state.position is None and state.reset == reset:
                            state.position, state.reset = offset, None
                            state.leader_epoch = state.current_leader_epoch = None
                            if state.start is None:
                                state.start = offset

        def out_of_time(err: OncelogError) -> OncelogError:
            return RetriableError(
                f"could not resolve the position of {', '.join(map(str, unresolved()))}: {err.message}", cause=err
            )

        try:
            await self._retry.run(
                resolve,
                deadline,
                before_retry=lambda err: log.debug("position lookup failed (%s); retrying", err),
                out_of_time=out_of_time,
            )
        except RetriableError:
            if strict or not deadline.expired:
                raise

    async def lookup_offsets(
        self, partitions: Sequence[TopicPartition], reset: str, deadline: Deadline
    ) -> dict[TopicPartition, int]:
        """:meth:`_list_offsets`, retried until ``deadline`` while the error is retriable (a leader moved)."""

        def out_of_time(err: OncelogError) -> OncelogError:
            return RetriableError(
                f"could not look up the {reset} offsets of {', '.join(map(str, partitions))}: {err.message}",
                cause=err,
            )

        return await self._retry.run(
            lambda: self._list_offsets(partitions, reset, deadline),
            deadline,
            retry_if=lambda err: is_retriable(err, unknown_topic_is_final=True),
            before_retry=lambda err: log.debug("offsets lookup failed (%s); retrying", err),
            out_of_time=out_of_time,
        )

    async def _list_offsets(
        self, partitions: Sequence[TopicPartition], reset: str, deadline: Deadline
    ) -> dict[TopicPartition, int]:
        query = OffsetQuery(reset)
        found: dict[TopicPartition, int] = {}
        by_leader: dict[str, list[TopicPartition]] = {}
        for tp in partitions:
            leader = await self._metadata.wait_for_leader(tp, deadline)
            by_leader.setdefault(leader.leader_address, []).append(tp)
        for address, tps in by_leader.items():
            try:
                answers = await self._storage.list_offsets(
                    address,
                    dict.fromkeys(tps, query),
                    isolation=self._isolation,
                    timeout_s=deadline.cap(self._request_timeout_s),
                )
            except OncelogError as err:
                self._metadata.note_failure({tp.topic for tp in tps}, err)
                raise
            for tp, answer in answers.items():
                if isinstance(answer, OncelogError):
                    self._metadata.note_failure([tp.topic], answer)
                    raise answer
                found[tp] = answer.offset
        return found

    async def fetch_records(self, deadline: Deadline, limit: int) -> list[ConsumerRecord]:
        """Up to ``limit`` records of the assigned partitions, waiting until ``deadline`` for some (``poll()``)."""
        return await self._fetch_until(deadline, limit, columnar=False)  # type: ignore[no-any-return]

    async def fetch_columns(self, deadline: Deadline, limit: int) -> list[tuple[TopicPartition, DecodedColumns]]:
        """:meth:`fetch_records` as Arrow columns, a chunk per partition and batch (``poll_arrow()``)."""
        return await self._fetch_until(deadline, limit, columnar=True)  # type: ignore[no-any-return]

    async def _fetch_until(self, deadline: Deadline, limit: int, *, columnar: bool) -> list[Any]:
        while True:
            if self._ahead_due:  # not every poll: a poll that only reads on costs nothing per partition
                self._ahead_due = False
                if self._send_fetches(deadline):
                    for _ in range(_SEND_STEPS):
                        await asyncio.sleep(0)  # the new fetches go out before the buffered answers are decoded
            records = self._drain_buffered(limit, columnar)
            if records:
                return records
            unresolved = [tp for tp, s in self.assignment.items() if s.position is None]
            if unresolved:
                await self.resolve_positions(unresolved, deadline, strict=False)
            self._send_fetches(deadline)
            pending = [task for task in (*self._fetches.values(), *self._validations.values()) if not task.done()]
            remaining = deadline.remaining()
            if remaining is not None and remaining <= 0:
                return self._drain_buffered(limit, columnar)
            if pending:
                await asyncio.wait(pending, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            else:
                await asyncio.sleep(deadline.cap(self._retry_backoff_ms / 1000))
            self._reap_fetches()

    def _drain_buffered(self, limit: int, columnar: bool = False) -> list[Any]:
        """Buffered records, up to ``limit``: a list of records, or of ``(partition, columns)`` chunks."""
        out: list[Any] = []
        count = 0
        for tp, state in self.assignment.items():
            if state.error is not None:
                if out:
                    return out
                err, state.error = state.error, None
                raise err
            fetch = state.buffered
            if fetch is None:
                continue
            try:
                if columnar:
                    chunks = fetch.fetch_columns(limit - count)
                    out.extend((tp, chunk) for chunk in chunks)
                    count += sum(len(chunk) for chunk in chunks)
                else:
                    records = fetch.fetch_records(limit - count)
                    out.extend(records)
                    count += len(records)
            except OncelogError:
                state.drop_fetched()  # the damaged batch is fetched again from the position
                if out:
                    return out
                raise
            if fetch.position_epoch is not None:
                state.leader_epoch = fetch.position_epoch
            state.position = fetch.next_fetch_offset
            if fetch.is_consumed:
                # the answer fetched ahead is read by a later call, after the Fetch ahead of it went out
                self._next_answer(state)
                self._ahead_due = self._ahead_due or state.buffered is not None
            if count >= limit:
                break
        return out

    @staticmethod
    def _next_answer(state: PartitionState) -> None:
        """``state.buffered`` was read to its end: the answer fetched ahead takes its place if it starts at the
        position (an answer that ended early, on a damaged batch, leaves the position short of it)."""
        ahead = state.ahead
        state.drop_fetched()
        if ahead is not None and ahead.next_fetch_offset == state.position:
            state.buffered = ahead
            state.buffered_end = ahead.end_offset

    def _send_fetches(self, deadline: Deadline) -> bool:
        """Start a Fetch at each storage node with none in flight, for its partitions that want one; True if any
        was started."""
        now = time.monotonic()
        by_leader: dict[str, list[tuple[TopicPartition, int, int]]] = {}
        to_validate: dict[str, list[tuple[TopicPartition, int, int, int]]] = {}
        missing = sorted({tp.topic for tp in self.assignment if self._metadata.cached_topic(tp.topic) is None})
        if missing:
            self._refresh_metadata(missing)
        read_committed = self._isolation is IsolationLevel.READ_COMMITTED
        for tp, state in self.assignment.items():
            if not self._check_incarnation(tp, state):
                continue
            offset = state.next_fetch(read_committed)
            if offset is None:
                continue
            leader = self._metadata.cached_leader(tp)
            if leader is None or self._metadata.needs_update(tp.topic):
                self._metadata.request_update(tp.topic)
                self._refresh_metadata([])
                if leader is None:
                    continue
            address = leader.leader_address
            if self._node_backoff_until.get(address, 0) > now:
                continue
            if state.current_leader_epoch != leader.leader_epoch:
                if state.buffered is not None:
                    continue  # what is buffered is read first; then the position is checked with the new leader
                if state.leader_epoch is not None and leader.leader_epoch >= 0:
                    task = self._validations.get(address)
                    if task is None or task.done():
                        position = (tp, offset, state.leader_epoch, leader.leader_epoch)
                        to_validate.setdefault(address, []).append(position)
                    continue  # not fetched until validated
                state.current_leader_epoch = leader.leader_epoch
            task = self._fetches.get(address)
            if task is not None and not task.done():
                continue
            by_leader.setdefault(address, []).append((tp, offset, leader.leader_epoch))
        loop = asyncio.get_running_loop()
        for address, parts in by_leader.items():
            self._fetches[address] = loop.create_task(self._fetch(address, parts, deadline))
        for address, positions in to_validate.items():
            self._validations[address] = loop.create_task(self._validate(address, positions))
        return bool(by_leader)

    def _refresh_metadata(self, missing: Sequence[str]) -> None:
        """Refresh stale topics, and ask again for assigned topics the cluster said do not exist, in the background."""
        if self._refresh_task is not None and not self._refresh_task.done():
            return

        async def refresh() -> None:
            await self._metadata.refresh_stale()
            for topic in missing:
                try:
                    await self._metadata.topic(topic)
                except OncelogError as err:
                    log.debug("topic %r is still unavailable: %s", topic, err)

        self._refresh_task = asyncio.get_running_loop().create_task(refresh())

    def _reap_fetches(self) -> None:
        for tasks in (self._fetches, self._validations):
            for key in [k for k, task in tasks.items() if task.done()]:
                task = tasks.pop(key)
                if not task.cancelled() and task.exception() is not None:
                    log.debug("fetch task failed: %r", task.exception())

    async def _fetch(self, address: str, parts: list[tuple[TopicPartition, int, int]], deadline: Deadline) -> None:
        wait_ms = self._fetch_max_wait_ms
        left = deadline.remaining()
        if left is not None:
            # a short poll still sends a useful fetch, it just does not long-poll
            wait_ms = max(0, min(wait_ms, int(left * 1000)))
        try:
            results = await self._storage.fetch(
                address,
                [
                    FetchPosition(tp, offset, leader_epoch=epoch, max_bytes=self._partition_fetch_bytes)
                    for tp, offset, epoch in parts
                ],
                isolation=self._isolation,
                max_wait_ms=wait_ms,
                min_bytes=self._fetch_min_bytes,
                max_bytes=self._fetch_max_bytes,
                timeout_s=self._request_timeout_s,
            )
        except OncelogError as err:
            log.debug("fetch from %s failed: %s", address, err)
            self._node_backoff_until[address] = time.monotonic() + self._retry_backoff_ms / 1000
            for tp, _, _ in parts:
                self._metadata.request_update(tp.topic)
            return
        self._node_backoff_until.pop(address, None)
        requested = {tp: offset for tp, offset, _ in parts}
        for result in results:
            offset = requested.get(result.topic_partition)
            if offset is not None:
                self._accept(result, offset)
        self._ahead_due = True  # the node takes a Fetch again: the next poll looks for partitions to fetch ahead

    def _accept(self, result: FetchedPartition, offset: int) -> None:
        """Take one partition's answer to a Fetch from ``offset``: buffer its records to be read next, or after
        the answer being read when it was fetched ahead of it."""
        tp = result.topic_partition
        state = self.assignment.get(tp)
        if state is None or offset != state.next_fetch(self._isolation is IsolationLevel.READ_COMMITTED):
            return  # reassigned, seeked or read past while the fetch was in flight
        ahead = state.buffered is not None
        if result.error is not None:
            if ahead:
                state.buffered_end = None  # not fetched ahead again: fetched, its error handled, from the position
            else:
                self._on_fetch_error(tp, state, result.error)
            return
        state.high_watermark = result.high_watermark
        state.last_stable_offset = result.last_stable_offset
        if result.records:
            fetched = CompletedFetch(
                tp,
                result.records,
                fetch_offset=offset,
                isolation_level=self._isolation,
                aborted_transactions=result.aborted_transactions,
                check_crcs=self._check_crcs,
            )
            if ahead:
                state.ahead = fetched
            else:
                state.buffered, state.buffered_end = fetched, fetched.end_offset

    def _on_fetch_error(self, tp: TopicPartition, state: PartitionState, err: OncelogError) -> None:
        disposition = classify(err, source="fetch")
        if disposition.action is Action.RESET_POSITION:
            if self._auto_offset_reset == "none":
                state.error = err
                return
            log.info("%s: position %s is out of range; resetting to %s", tp, state.position, self._auto_offset_reset)
            state.position, state.reset = None, self._auto_offset_reset
            return
        if disposition.refresh is Refresh.METADATA or err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION:
            self._metadata.request_update(tp.topic)
        if disposition.action is not Action.RETRY:
            state.error = err

    # ------------------------------------------------------------------------ position validation (KIP-320)

    async def _validate(self, address: str, positions: list[tuple[TopicPartition, int, int, int]]) -> None:
        """Check positions against a new leader's log: ask where the epoch of each position's last batch ends there
        (OffsetForLeaderEpoch) and move a position that lies beyond that end back to it (design/replication.md §10).

        Each entry is ``(partition, position, position's epoch, leader epoch in the metadata)``.
        """
        queries = {tp: EpochQuery(epoch, current_leader_epoch=current) for tp, _, epoch, current in positions}
        try:
            answers = await self._storage.offset_for_leader_epoch(address, queries, timeout_s=self._request_timeout_s)
        except OncelogError as err:
            if err.reason is Reason.UNKNOWN_SERVER_ERROR and err.message.startswith("UNIMPLEMENTED"):
                # a storage node from before OffsetForLeaderEpoch: fetch on as clients did then (no check)
                log.warning("%s cannot validate consumer positions (%s); fetching without the check", address, err)
                answers = {}
            else:
                log.debug("position validation at %s failed: %s", address, err)
                self._node_backoff_until[address] = time.monotonic() + self._retry_backoff_ms / 1000
                for tp, *_ in positions:
                    self._metadata.request_update(tp.topic)
                return
        for tp, position, epoch, current in positions:
            state = self.assignment.get(tp)
            if state is None or state.position != position or state.leader_epoch != epoch:
                continue  # reassigned, seeked or reset while the request was in flight
            answer = answers.get(tp)
            if isinstance(answer, OncelogError):
                self._on_fetch_error(tp, state, answer)
            elif answer is None:
                state.current_leader_epoch = current
            else:
                self._complete_validation(tp, state, answer, current)

    def _complete_validation(
        self, tp: TopicPartition, state: PartitionState, end: EpochEndOffset, current: int
    ) -> None:
        """Kafka's ``SubscriptionState.maybeCompleteValidation``: a position at or below the end is valid; one above
        it was truncated away and moves back to the first offset known to diverge (or, with
        ``auto_offset_reset="none"``, the next poll raises)."""
        position = state.position
        assert position is not None
        if not end.undefined and end.end_offset >= position:
            state.current_leader_epoch = current
            return
        if self._auto_offset_reset == "none":
            where = "an unknown offset" if end.undefined else f"offset {end.end_offset} (epoch {end.epoch})"
            state.error = OffsetOutOfRange(
                f"{tp}: a leader change truncated the log below the position {position} (its epoch "
                f"{state.leader_epoch} ends at {where} on the new leader) and auto_offset_reset='none'; seek() to "
                "where reading should go on"
            )
            return
        if end.undefined:
            log.info(
                "%s: truncation detected at %s (epoch %s unknown to the new leader); resetting to %s",
                tp,
                position,
                state.leader_epoch,
                self._auto_offset_reset,
            )
            state.position, state.reset = None, self._auto_offset_reset
            return
        log.info(
            "%s: truncation detected at %s; going back to %s, the first offset known to diverge",
            tp,
            position,
            end.end_offset,
        )
        state.position, state.leader_epoch, state.current_leader_epoch = end.end_offset, end.epoch, current
