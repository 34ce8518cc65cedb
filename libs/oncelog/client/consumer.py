"""The consumer: read_committed by default, positions and committed offsets (Kafka's ``KafkaConsumer``).

``poll()`` returns what the consumer's :class:`~oncelog.client.fetcher.Fetcher` fetched (Kafka's ``Fetcher``):
one Fetch in flight per storage node, a partition's next answer fetched while its current one is read, control
records and the data of aborted transactions dropped, open transactions invisible (design/architecture.md §1.4,
design/kafka-semantics.md §4.5).

Positions: a newly assigned partition starts at the group's committed offset (fetched with
``require_stable``, so it waits while a transactional commit for it is pending, KIP-447) or, without one,
at ``auto_offset_reset``. ``commit()`` stores positions outside any transaction; inside a
consume-transform-produce loop pass the positions to ``Producer.send_offsets_to_transaction`` instead and
call :meth:`Consumer.rewind_to_committed` after an abort, which puts every position back to the first input
offset of the aborted transaction (design/architecture.md §1.8).

After a leader change the consumer checks its position against the new leader's log before fetching there
(KIP-320): where the epoch of the last batch it read ends on the new leader (OffsetForLeaderEpoch); a position
beyond that end was truncated away (an unclean election) and goes back to the end, so the records the new leader
wrote there are neither skipped nor taken for ones already read (design/replication.md §10).

A topic deleted while assigned is reported once by ``poll()`` (``UnknownTopicOrPartition``) and stays
assigned; a topic created again under its name (a new topic id) is read from its beginning.

``subscribe()`` makes the consumer a member of its group (design/consumer-groups.md §7): the membership logic
and the heartbeat loop live in :mod:`oncelog.client.group_membership`; ``poll()`` applies assignment changes and
runs the listener's callbacks. ``assign()`` needs no group. A consumer is not thread-safe: call it from one
thread, as with Kafka.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from oncelog.client.errors import Action, IllegalStateError, Refresh, RetriableError, classify
from oncelog.client.fetcher import COMMITTED, Fetcher, PartitionState
from oncelog.client.group_membership import ConsumerRebalanceListener, GroupMembership, validate_pattern
from oncelog.client.metadata import ClusterMetadata
from oncelog.client.records import ConsumerGroupMetadata, ConsumerRecord, OffsetAndMetadata, TopicPartition
from oncelog.client.services import (
    Deadline,
    GroupMember,
    GroupOffsetsClient,
    HeartbeatAnswer,
    MemberHeartbeat,
    PartitionStorageClient,
    RetryPolicy,
)
from oncelog.client.transport import Channels, IoThread, resolve_bootstrap
from oncelog.errors import OncelogError, Reason, UnknownTopicOrPartition
from oncelog.telemetry.metrics import OncelogMetrics
from oncelog.vocabulary import CoordinatorKind, IsolationLevel

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider

__all__ = ["Consumer"]

log = logging.getLogger("oncelog.client.consumer")

T = TypeVar("T")

_GROUP = CoordinatorKind.GROUP
_RESETS = ("earliest", "latest", "none")


class Consumer:
    """Read records from oncelog topics; read_committed by default.

    Example:
        >>> from oncelog.client import Consumer
        >>> consumer = Consumer(group_id="billing")           # bootstrap from .oncelog/cluster.json
        >>> consumer.subscribe(["orders"])
        >>> for record in consumer.poll(timeout_ms=1000):
        ...     print(record.offset, record.value)
        >>> consumer.commit()
        >>> consumer.close()

    Args:
        bootstrap: any cluster address(es); None reads ``.oncelog/cluster.json``.
        group_id: the consumer group whose committed offsets the consumer starts from and commits to.
        isolation_level: ``"read_committed"`` (only committed transactional data) or ``"read_uncommitted"``.
        auto_offset_reset: where a partition without a committed offset (or whose position left the
            log) starts: ``"earliest"``, ``"latest"`` or ``"none"`` (raise).
        enable_auto_commit: commit positions every ``auto_commit_interval_ms`` from ``poll()`` and on
            close. Leave it off in a consume-transform-produce loop.
        auto_commit_interval_ms: period of the automatic commit.
        max_poll_records: most records one ``poll()`` returns.
        fetch_min_bytes: a fetch waits until this much data is available or ``fetch_max_wait_ms`` passed.
        fetch_max_wait_ms: longest wait of one fetch on the server.
        fetch_max_bytes: largest answer of one fetch.
        max_partition_fetch_bytes: largest data returned per partition and fetch (at least one batch). While one
            answer is read the next is fetched ahead, so a partition holds up to twice this.
        request_timeout_ms: deadline of one request.
        default_api_timeout_ms: bound of blocking calls without a timeout (``position``, ``committed``, ...).
        retry_backoff_ms: pause before retrying a failed request.
        metadata_max_age_ms: topic metadata older than this is refreshed, so a subscription reads partitions
            added to its topics (Kafka's ``metadata.max.age.ms``).
        check_crcs: verify each batch's CRC32C.
        client_id: a name for logs and thread names.
        credentials: TLS channel credentials; None for plaintext.
        group_instance_id: makes this consumer a static group member: a restart within the group's session
            timeout gets its partitions back without a rebalance.
        max_poll_interval_ms: a subscribed consumer whose application does not call ``poll()`` for this long
            leaves the group (its partitions go to the others) and joins again at the next ``poll()``.
        group_remote_assignor: the server assignor the group uses, ``"uniform"`` (default) or ``"range"``.
        meter_provider: where the consumer reports ``oncelog.consumer.records_lag`` (per partition, offsets left
            to read up to the last stable offset at read_committed); the global OpenTelemetry provider by default.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        *,
        group_id: str | None = None,
        isolation_level: str = "read_committed",
        auto_offset_reset: str = "earliest",
        enable_auto_commit: bool = False,
        auto_commit_interval_ms: int = 5_000,
        max_poll_records: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 50 * 1024 * 1024,
        max_partition_fetch_bytes: int = 1024 * 1024,
        request_timeout_ms: int = 30_000,
        default_api_timeout_ms: int = 60_000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300_000,
        check_crcs: bool = True,
        client_id: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
        group_instance_id: str | None = None,
        max_poll_interval_ms: int = 300_000,
        group_remote_assignor: str | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        problems = []
        try:
            self._isolation = IsolationLevel(isolation_level)
        except ValueError:
            problems.append(f"isolation_level={isolation_level!r}; use 'read_committed' or 'read_uncommitted'")
        if auto_offset_reset not in _RESETS:
            problems.append(f"auto_offset_reset={auto_offset_reset!r}; use 'earliest', 'latest' or 'none'")
        if group_id is not None and not group_id:
            problems.append("group_id must not be empty; pass None to consume without a group")
        if enable_auto_commit and not group_id:
            problems.append("enable_auto_commit needs a group_id")
        if max_poll_records < 1 or fetch_max_wait_ms < 0 or fetch_min_bytes < 0:
            problems.append("max_poll_records must be >= 1, fetch_max_wait_ms and fetch_min_bytes >= 0")
        if metadata_max_age_ms < 0:
            problems.append(f"metadata_max_age_ms must not be negative, got {metadata_max_age_ms}")
        if max_poll_interval_ms < 1:
            problems.append(f"max_poll_interval_ms={max_poll_interval_ms}; use a positive number")
        if problems:
            raise ValueError("invalid consumer configuration: " + "; ".join(problems))
        self._group_id = group_id
        self._group_instance_id = group_instance_id
        self._max_poll_interval_ms = max_poll_interval_ms
        self._group_remote_assignor = group_remote_assignor
        self._membership: GroupMembership | None = None
        self._listener: ConsumerRebalanceListener | None = None
        self._auto_commit = enable_auto_commit
        self._auto_commit_interval_s = auto_commit_interval_ms / 1000
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        self._max_poll_records = max_poll_records
        self._request_timeout_s = request_timeout_ms / 1000
        self._default_timeout_s = default_api_timeout_ms / 1000
        self._client_id = client_id or f"consumer-{uuid.uuid4().hex[:8]}"
        self._subscription: tuple[str, ...] | None = None
        self._closed = False
        bootstrap_addresses = resolve_bootstrap(bootstrap)
        self._io = IoThread(f"oncelog-{self._client_id}")
        self._channels = Channels(credentials=credentials)
        self._metadata = ClusterMetadata(
            self._channels,
            bootstrap_addresses,
            request_timeout_s=self._request_timeout_s,
            retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._retry = RetryPolicy(retry_backoff_ms, 1_000)
        self._storage = PartitionStorageClient(self._channels.get, timeout_s=self._request_timeout_s)
        self._offsets = GroupOffsetsClient(self._channels.get, timeout_s=self._request_timeout_s)
        self._fetcher = Fetcher(
            self._metadata,
            self._storage,
            self._retry,
            isolation=self._isolation,
            initial_reset=COMMITTED if group_id else auto_offset_reset,
            auto_offset_reset=auto_offset_reset,
            fetch_committed=self._fetch_committed,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_wait_ms=fetch_max_wait_ms,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            request_timeout_s=self._request_timeout_s,
            retry_backoff_ms=retry_backoff_ms,
            check_crcs=check_crcs,
            metrics=None if meter_provider is None else OncelogMetrics(meter_provider),
            metric_labels={"group": group_id or "", "client_id": self._client_id},
        )

    # -------------------------------------------------------------------------------- helpers

    def _ensure_open(self) -> None:
        if self._closed:
            raise IllegalStateError("the consumer is closed; create a new Consumer")

    def _deadline(self, timeout: float | None) -> Deadline:
        return Deadline(self._default_timeout_s if timeout is None else timeout)

    def _run(self, coro: Awaitable[T]) -> T:
        return self._io.run(coro)  # type: ignore[arg-type]

    def _require_group(self, what: str) -> str:
        if not self._group_id:
            raise IllegalStateError(f"{what} needs a consumer group: pass group_id=... to Consumer()")
        return self._group_id

    @property
    def _assignment(self) -> dict[TopicPartition, PartitionState]:
        return self._fetcher.assignment

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self._assignment.get(TopicPartition(*tp))
        if state is None:
            raise IllegalStateError(f"{tp} is not assigned to this consumer; assign() or subscribe() first")
        return state

    # -------------------------------------------------------------------------------- assignment

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (manual assignment); replaces any earlier assignment or subscription.

        Raises:
            UnknownTopicOrPartition: a topic or partition does not exist.
        """
        self._ensure_open()
        wanted = [TopicPartition(*tp) for tp in partitions]
        for topic in sorted({tp.topic for tp in wanted}):
            info = self._run(self._metadata.topic(topic))
            for tp in wanted:
                if tp.topic == topic and not 0 <= tp.partition < len(info.partitions):
                    raise UnknownTopicOrPartition(
                        f"{tp} does not exist: topic {topic!r} has {len(info.partitions)} partition(s)"
                    )
        self._subscription = None
        self._fetcher.set_assignment(wanted)
        self._fetcher.note_topic_ids()

    def subscribe(
        self,
        topics: Iterable[str] | None = None,
        *,
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join the consumer group and read the partitions it assigns this consumer (design/consumer-groups.md §7).

        The group's members share the partitions of ``topics`` (or of every topic whose whole name matches
        ``pattern``); partitions move between members as they join, leave or die, and each partition is
        handed over only after its old owner revoked it. The listener's callbacks run inside ``poll()``:
        ``on_partitions_revoked`` before partitions go (commit there), ``on_partitions_assigned`` after new ones
        arrive, ``on_partitions_lost`` when this member was removed (its commits would be refused). Heartbeats
        run on the consumer's I/O thread. The first assignment is known when this call returns.

        Raises:
            IllegalStateError: the consumer has no group_id.
            ValueError: neither or both of ``topics`` and ``pattern``, or a pattern that does not compile.
            OncelogError: the group refused the member (unknown assignor, a static instance id in use...).
        """
        self._ensure_open()
        group = self._require_group("subscribe()")
        names = tuple(dict.fromkeys(topics or ()))
        if bool(names) == bool(pattern):
            raise ValueError("subscribe() needs topics or a pattern (not both); use unsubscribe() to stop reading")
        if pattern:
            validate_pattern(pattern)
        self.unsubscribe()
        membership = GroupMembership(
            group,
            self._heartbeat,
            topics=names,
            pattern=pattern,
            group_instance_id=self._group_instance_id,
            server_assignor=self._group_remote_assignor,
            max_poll_interval_ms=self._max_poll_interval_ms,
            client_id=self._client_id,
        )

        async def join() -> None:
            await membership.join(self._request_timeout_s)
            membership.start()

        self._run(join())
        self._subscription = names or (pattern or "",)
        self._membership = membership
        self._listener = listener
        self._reconcile()

    async def _heartbeat(self, request: MemberHeartbeat, timeout_s: float) -> HeartbeatAnswer:
        deadline = Deadline(timeout_s)
        return await self._group_call(
            lambda address: self._offsets.consumer_group_heartbeat(
                address, request, timeout_s=deadline.cap(self._request_timeout_s)
            ),
            deadline,
        )

    def _reconcile(self) -> None:
        """Apply the group's latest assignment on the caller's thread (listener callbacks run here)."""
        if self._membership is None:
            return

        def add(partitions: set[TopicPartition]) -> None:
            for topic in sorted({tp.topic for tp in partitions}):
                if self._metadata.cached_topic(topic) is None:
                    self._run(self._metadata.topic(topic))
            self._fetcher.set_assignment([*self._assignment, *partitions])
            self._fetcher.note_topic_ids()

        def remove(partitions: set[TopicPartition]) -> None:
            self._fetcher.set_assignment([tp for tp in self._assignment if tp not in partitions])

        wake = self._membership.reconcile(self._listener, add, remove)
        if wake is not None:
            self._io.call_soon(wake)

    def unsubscribe(self) -> None:
        """Stop reading every partition; a subscribed consumer leaves its group."""
        self._leave_group()
        self._subscription = None
        self._fetcher.set_assignment([])

    def _leave_group(self) -> None:
        membership, self._membership = self._membership, None
        if membership is not None:
            self._run(membership.leave(self._request_timeout_s))

    def assignment(self) -> set[TopicPartition]:
        """The partitions this consumer reads."""
        return set(self._assignment)

    def subscription(self) -> set[str]:
        """The subscribed topics (empty with a manual assignment)."""
        return set(self._subscription or ())

    # -------------------------------------------------------------------------------- positions

    def seek(self, partition: TopicPartition | tuple[str, int], offset: int) -> None:
        """Read ``partition`` from ``offset`` on the next poll."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, got {offset}")
        state = self._state(TopicPartition(*partition))
        state.reposition(offset, None)
        state.start, state.leader_epoch, state.current_leader_epoch = offset, None, None

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the log start of ``partitions`` (default all assigned), evaluated lazily."""
        self._seek_lazily(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Read from the end of ``partitions`` (the last stable offset at read_committed), evaluated lazily."""
        self._seek_lazily(partitions, "latest")

    def _seek_lazily(self, partitions: Iterable[TopicPartition] | None, reset: str) -> None:
        for tp in self._assignment if partitions is None else [TopicPartition(*p) for p in partitions]:
            state = self._state(tp)
            state.reposition(None, reset)
            state.start = None

    def position(self, partition: TopicPartition | tuple[str, int], timeout: float | None = None) -> int:
        """The offset of the next record ``poll()`` returns for ``partition``, resolving it if needed.

        Raises:
            RetriableError: the position could not be resolved within ``timeout``.
        """
        self._ensure_open()
        tp = TopicPartition(*partition)
        state = self._state(tp)
        if state.position is None:
            self._run(self._fetcher.resolve_positions([tp], self._deadline(timeout), strict=True))
        assert state.position is not None
        return state.position

    def rewind_to_committed(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """Put positions back to the group's committed offsets (after an aborted transaction,
        design/architecture.md §1.8).

        In a consume-transform-produce loop the committed offset of each input partition is the first
        input offset of the transaction that was aborted, so the records it read are read again. The
        committed offsets are fetched with ``require_stable``: the call waits until the abort has
        removed the transaction's pending offsets. A partition without a committed offset goes back to
        where this consumer began reading it (its first position, from ``auto_offset_reset``, or the last
        ``seek()``): no transaction committed offsets for it, so everything read since then is input of
        the aborted transaction (or of none). Only a partition never read starts at ``auto_offset_reset``.
        Buffered records are dropped.

        Returns:
            The new position of each partition.

        Raises:
            IllegalStateError: the consumer has no group_id.
            RetriableError: the offsets could not be fetched within ``timeout``.
        """
        self._ensure_open()
        self._require_group("rewind_to_committed()")
        targets = list(self._assignment) if partitions is None else [TopicPartition(*p) for p in partitions]
        for tp in targets:
            state = self._state(tp)
            state.reposition(None, COMMITTED)
        self._run(self._fetcher.resolve_positions(targets, self._deadline(timeout), strict=True))
        return {tp: self._assignment[tp].position for tp in targets}  # type: ignore[misc]

    # -------------------------------------------------------------------------------- group offsets

    async def _group_call(self, rpc: Callable[[str], Awaitable[T]], deadline: Deadline) -> T:
        """``rpc(address)`` on the group's offsets owner, retried while :func:`classify` says so."""
        group = self._require_group("this call")

        async def attempt() -> T:
            return await rpc(await self._metadata.find_coordinator(group, _GROUP))

        def before_retry(err: OncelogError) -> None:
            if classify(err, source="group").refresh is not Refresh.NONE or err.reason is Reason.NOT_COORDINATOR:
                self._metadata.invalidate_coordinator(group, _GROUP)

        return await self._retry.run(
            attempt,
            deadline,
            retry_if=lambda err: classify(err, source="group").action is Action.RETRY,
            before_retry=before_retry,
            out_of_time=lambda err: RetriableError(f"group {group!r}: {err.message}", cause=err),
        )

    async def _fetch_committed(
        self, partitions: Sequence[TopicPartition], deadline: Deadline
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        group = self._require_group("committed()")
        committed = await self._group_call(
            lambda address: self._offsets.fetch_offsets(
                address, group, partitions, require_stable=True, timeout_s=deadline.cap(self._request_timeout_s)
            ),
            deadline,
        )
        found: dict[TopicPartition, OffsetAndMetadata | None] = dict.fromkeys(partitions)
        found.update((tp, om) for tp, om in committed.items() if om is not None)
        return found

    def committed(
        self, partitions: Iterable[TopicPartition] | None = None, timeout: float | None = None
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (None where nothing is committed).

        Waits while a transactional commit for a partition is pending (``require_stable``, KIP-447).

        Raises:
            IllegalStateError: the consumer has no group_id.
            RetriableError: no stable answer within ``timeout``.
        """
        self._ensure_open()
        self._require_group("committed()")
        targets = list(self._assignment) if partitions is None else [TopicPartition(*p) for p in partitions]
        return self._run(self._fetch_committed(targets, self._deadline(timeout)))

    def commit(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None, timeout: float | None = None
    ) -> None:
        """Commit ``offsets`` (default: the position of every assigned partition) outside any transaction.

        Raises:
            IllegalStateError: the consumer has no group_id.
            RetriableError: the commit did not complete within ``timeout``.
        """
        self._ensure_open()
        group = self._require_group("commit()")
        if offsets is None:
            offsets = {
                tp: OffsetAndMetadata(state.position, leader_epoch=state.leader_epoch)
                for tp, state in self._assignment.items()
                if state.position is not None
            }
        normalized = {
            TopicPartition(*tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            for tp, om in offsets.items()
        }
        if not normalized:
            return
        deadline, member = self._deadline(timeout), self._member()
        self._run(
            self._group_call(
                lambda address: self._offsets.commit_offsets(
                    address, group, normalized, member=member, timeout_s=deadline.cap(self._request_timeout_s)
                ),
                deadline,
            )
        )

    def group_metadata(self) -> ConsumerGroupMetadata:
        """The group identity to pass to ``Producer.send_offsets_to_transaction`` (KIP-447): with a subscription,
        the member id and member epoch the group fences a zombie's transactional commit with.

        Raises:
            IllegalStateError: the consumer has no group_id.
        """
        group = self._require_group("group_metadata()")
        if self._membership is None:
            return ConsumerGroupMetadata(group)
        return ConsumerGroupMetadata(
            group, self._membership.member_epoch, self._membership.member_id, self._group_instance_id
        )

    def _member(self) -> GroupMember | None:
        if self._membership is None:
            return None
        return GroupMember(
            generation_id=self._membership.member_epoch,
            member_id=self._membership.member_id,
            group_instance_id=self._group_instance_id or "",
        )

    # -------------------------------------------------------------------------------- offsets lookup

    def beginning_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The first offset still stored in each partition.

        Retries within ``timeout`` (default ``default_api_timeout_ms``) while a leader moves or is unreachable.

        Raises:
            UnknownTopicOrPartition: a topic or partition does not exist.
            RetriableError: no answer within ``timeout``.
        """
        self._ensure_open()
        return self._run(
            self._fetcher.lookup_offsets([TopicPartition(*p) for p in partitions], "earliest", self._deadline(timeout))
        )

    def end_offsets(
        self, partitions: Iterable[TopicPartition], timeout: float | None = None
    ) -> dict[TopicPartition, int]:
        """The end of each partition for this consumer: the last stable offset at read_committed, else the
        high watermark. A read_committed consumer that read everything has exactly this position.

        Retries within ``timeout`` (default ``default_api_timeout_ms``) while a leader moves or is unreachable.

        Raises:
            UnknownTopicOrPartition: a topic or partition does not exist.
            RetriableError: no answer within ``timeout``.
        """
        self._ensure_open()
        return self._run(
            self._fetcher.lookup_offsets([TopicPartition(*p) for p in partitions], "latest", self._deadline(timeout))
        )

    def partitions_for(self, topic: str) -> list[TopicPartition]:
        """The partitions of ``topic``.

        Raises:
            UnknownTopicOrPartition: the topic does not exist.
        """
        self._ensure_open()
        info = self._run(self._metadata.topic(topic))
        return [p.topic_partition for p in info.partitions]

    # -------------------------------------------------------------------------------- poll

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> list[ConsumerRecord]:
        """Return the next records of the assigned partitions, waiting up to ``timeout_ms`` for some.

        Records of one partition come in offset order. At read_committed, records of open
        transactions are held back until they commit, and those of aborted transactions and the
        control records never appear.

        Args:
            timeout_ms: the longest wait when no record is available.
            max_records: at most this many records (default ``max_poll_records``).

        Raises:
            OffsetOutOfRange: a position left the log and ``auto_offset_reset`` is ``"none"``.
            CorruptMessage: a fetched batch is damaged (the next poll fetches it again).
            IllegalStateError: nothing is assigned.
        """
        limit = self._before_poll("poll", max_records)
        return self._run(self._poll(Deadline(max(timeout_ms, 0) / 1000), limit))

    def _before_poll(self, name: str, max_records: int | None) -> int:
        """What every poll does first (the group's reconciliation, an automatic commit when due); its limit."""
        self._ensure_open()
        self._reconcile()
        if not self._assignment and self._membership is None:
            raise IllegalStateError(f"{name}() needs partitions: call assign() or subscribe() first")
        if self._auto_commit and time.monotonic() >= self._next_auto_commit:
            self._maybe_auto_commit()
        return max_records or self._max_poll_records

    def poll_arrow(self, timeout_ms: int = 1000, max_records: int | None = None) -> Any:
        """:meth:`poll` as one Arrow table, decoded a batch at a time with no Python per record.

        The same records in the same order as :meth:`poll` would return, and the same position afterwards; the
        two may be mixed on one consumer. Columns: ``topic`` (string), ``partition`` (int32), ``offset`` and
        ``timestamp`` (int64, epoch milliseconds), ``key`` and ``value`` (binary, null for null) and ``headers``
        (a list of ``{key, value}`` per record). Needs pyarrow and numpy (``pip install 'oncelog[arrow]'``).

        Returns:
            A ``pyarrow.Table`` (no rows when nothing arrived within ``timeout_ms``).

        Raises:
            The exceptions of :meth:`poll`.
        """
        from oncelog.records.columnar import records_table

        limit = self._before_poll("poll_arrow", max_records)
        chunks = self._run(self._poll_columns(Deadline(max(timeout_ms, 0) / 1000), limit))
        return records_table([(tp.topic, tp.partition, columns) for tp, columns in chunks])

    async def _poll_columns(self, deadline: Deadline, limit: int) -> list[tuple[TopicPartition, Any]]:
        if self._subscription and self._membership is None:
            await self._refresh_subscription()
        return await self._fetcher.fetch_columns(deadline, limit)

    def _maybe_auto_commit(self) -> None:
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        try:
            self.commit(timeout=self._request_timeout_s)
        except OncelogError as err:
            log.warning("automatic offset commit failed: %s", err)

    async def _poll(self, deadline: Deadline, limit: int) -> list[ConsumerRecord]:
        if self._subscription and self._membership is None:
            await self._refresh_subscription()
        return await self._fetcher.fetch_records(deadline, limit)

    async def _refresh_subscription(self) -> None:
        assert self._subscription is not None
        for topic in self._subscription:
            if not self._metadata.needs_update(topic):
                continue
            try:
                info = await self._metadata.topic(topic)
            except OncelogError as err:
                log.debug("metadata refresh of %s failed: %s", topic, err)
                continue
            for p in info.partitions:
                self._assignment.setdefault(p.topic_partition, PartitionState(reset=self._fetcher.initial_reset))

    # -------------------------------------------------------------------------------- close

    def close(self, timeout: float | None = None) -> None:
        """Commit positions if auto-commit is on, then release the connections. Idempotent."""
        if self._closed:
            return
        try:
            if self._auto_commit and self._group_id:
                self.commit(timeout=timeout)
        except OncelogError as err:
            log.warning("final offset commit failed: %s", err)
        finally:
            try:
                self._leave_group()
            except Exception as err:  # close() always releases the connections
                log.warning("leaving group %s failed: %s", self._group_id, err)
            self._closed = True

            async def shutdown() -> None:
                await self._fetcher.close()
                await self._channels.close()

            try:
                self._io.submit(shutdown()).result(timeout=5)
            except Exception:
                pass
            self._io.close(release=self._channels.close)

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Consumer({self._client_id}, group_id={self._group_id!r}, isolation={self._isolation.value})"
