"""TransactionMarkerChannelManager: delivers COMMIT/ABORT markers to every participant (design/kafka-semantics.md §3.2).

It implements the coordinator's ``MarkerSink`` port the way Kafka's ``TransactionMarkerChannelManager``
does:

* every participant of a transaction (a partition, or a consumer group's offsets) is an item that
  is routed to its current destination: the partition-storage leader of the partition, or the
  group-offsets node owning the group's shard. Items whose destination is unknown or offline wait in
  an unrouted queue and are routed again after a backoff (Kafka's ``noNode`` queue); a partition whose
  topic no longer exists is dropped from the transaction (a deleted topic cannot take a marker, and an
  offline leader is never mistaken for a deletion, KAFKA-20734);
* each destination has a queue, and one WriteTxnMarkers request carries everything queued for it,
  from as many transactions as are waiting. Only one request per destination is in flight, so markers
  that arrive meanwhile are batched into the next one (the marker cost is shared by producers);
* a failed item is retried with exponential backoff, re-resolving its destination first (NOT_LEADER,
  UNKNOWN_TOPIC_OR_PARTITION, NOT_COORDINATOR, transport errors), for as long as the shard is still
  held at the transaction's coordinator epoch. TRANSACTION_COORDINATOR_FENCED or
  INVALID_PRODUCER_EPOCH mean something newer owns the transaction: its markers are dropped;
* once every participant acknowledged, ``on_complete`` writes Complete*; it is retried until it
  succeeds, and abandoned on NOT_COORDINATOR (the next owner resumes the transaction on load);
* each request is traced as a child of the EndTxn that decided its first transaction, with links to the
  others it carries, and the Complete* write runs in the trace of the EndTxn too, so one commit reads as one
  trace (design/architecture.md §9);
* the time from enqueueing (right after Prepare* became durable, or after a shard load resumed the
  transaction) until the last participant acknowledged is recorded as ``oncelog.txn.marker.duration``: how
  long the transaction holds back the last stable offset of its partitions.

Destinations come from a :class:`DestinationResolver` and requests go through a :class:`MarkerTransport`; both are
ports, so this module is pure (no gRPC, no SQL) and the manager is tested without a network. The service wires in
:class:`~.marker_destinations.CatalogMarkerDestinations` (routes from the cluster catalog) and
:class:`~.marker_transport.GrpcMarkerTransport` (WriteTxnMarkers over gRPC).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace

from oncelog.catalog.topics import validate_group_id
from oncelog.errors import InvalidRequest, NotCoordinator, OncelogError, Reason, UnknownServerError
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics
from oncelog.torture import mutants
from oncelog.vocabulary import Role, TopicPartition

from .ports import MarkerCompletion
from .state import TransactionResult

log = logging.getLogger(__name__)
_tracer = trace.get_tracer(__name__)

_FENCING_REASONS = frozenset({Reason.TRANSACTION_COORDINATOR_FENCED, Reason.INVALID_PRODUCER_EPOCH})
TRANSPORT_REASONS = frozenset({Reason.NETWORK_EXCEPTION, Reason.REQUEST_TIMED_OUT})


class DestinationService(enum.Enum):
    """Which service's WriteTxnMarkers a destination is called through."""

    PARTITION_STORAGE = Role.PARTITION_STORAGE.value
    GROUP_OFFSETS = Role.GROUP_OFFSETS.value


@dataclass(frozen=True, slots=True)
class MarkerDestination:
    """One node that receives markers; a node that moves to a new address is a new destination."""

    service: DestinationService
    node_id: str
    address: str


class Unroutable(enum.Enum):
    """Why a participant has no destination right now."""

    OFFLINE = "offline"
    """No live leader or owner; retried after a backoff."""
    DELETED = "deleted"
    """The topic or partition does not exist any more; the participant is dropped from the transaction."""


Route = MarkerDestination | Unroutable


@dataclass(frozen=True, slots=True)
class TxnMarkerEntry:
    """The marker one destination receives for one transaction: its participants on that destination."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TransactionResult
    partitions: tuple[TopicPartition, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TxnMarkerOutcome:
    """Per-participant result of one :class:`TxnMarkerEntry`; ``None`` means acknowledged."""

    partition_errors: Mapping[TopicPartition, OncelogError | None] = field(default_factory=dict)
    group_errors: Mapping[str, OncelogError | None] = field(default_factory=dict)


class DestinationResolver(Protocol):
    """Finds where each participant's marker must go (partition leaders, group shard owners)."""

    async def resolve(
        self, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[dict[TopicPartition, Route], dict[str, Route]]:
        """Current route of every partition and group."""
        ...

    def invalidate(
        self,
        partitions: Collection[TopicPartition] = (),
        groups: Collection[str] = (),
        destination: MarkerDestination | None = None,
    ) -> None:
        """Forget cached routes so the next :meth:`resolve` reads fresh metadata."""
        ...


class MarkerTransport(Protocol):
    """Sends one WriteTxnMarkers request to one destination."""

    async def write_markers(
        self, destination: MarkerDestination, markers: Sequence[TxnMarkerEntry]
    ) -> Sequence[TxnMarkerOutcome]:
        """Outcomes in request order.

        Raises:
            OncelogError: the whole call failed (transport error, or an error for every marker).
        """
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


# ---------------------------------------------------------------------------------------------- manager


@dataclass(eq=False, slots=True)
class _Job:
    """The markers of one Prepare* transaction at one coordinator epoch."""

    transactional_id: str
    shard: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TransactionResult
    on_complete: MarkerCompletion
    pending_partitions: set[TopicPartition]
    pending_groups: set[str]
    trace_context: otel_context.Context
    """The EndTxn (or load, or sweep) the markers belong to, so their fan-out joins its trace."""
    enqueued_at: float
    """Event-loop time of :meth:`TransactionMarkerChannelManager.enqueue`."""
    dropped: bool = False

    @property
    def acknowledged(self) -> bool:
        return not self.pending_partitions and not self.pending_groups


@dataclass(eq=False, slots=True)
class _Item:
    """One participant of one job that has not acknowledged yet."""

    job: _Job
    partition: TopicPartition | None = None
    group: str | None = None
    attempts: int = 0
    not_before: float = 0.0


class TransactionMarkerChannelManager:
    """Per-destination marker queues with batching, retries and completion (implements ``MarkerSink``).

    Args:
        resolver: routes partitions and groups to destination nodes.
        transport: sends WriteTxnMarkers.
        shard_for: transactional id -> shard (the coordinator's mapping).
        is_current: whether ``(shard, coordinator_epoch)`` is still held and loaded by this process;
            markers are retried only while it is.
        retry_backoff_ms: first pause before a failed participant or completion is retried.
        retry_backoff_max_ms: the pause doubles up to this value.
        max_participants_per_request: most partitions and groups one request carries; what is queued beyond
            goes in the destination's next request, so a burst never grows a request past the message size
            limit (a request refused for its size would be retried, and refused, for ever).
        metrics: where marker durations are recorded; the process-wide instruments by default.
    """

    def __init__(
        self,
        *,
        resolver: DestinationResolver,
        transport: MarkerTransport,
        shard_for: Callable[[str], int],
        is_current: Callable[[int, int], bool],
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        max_participants_per_request: int = 1_000,
        metrics: OncelogMetrics | None = None,
    ) -> None:
        if max_participants_per_request < 1:
            raise ValueError(f"max_participants_per_request must be positive, got {max_participants_per_request}")
        self._max_items = max_participants_per_request
        self._resolver = resolver
        self._metrics = default_metrics() if metrics is None else metrics
        self._transport = transport
        self._shard_for = shard_for
        self._is_current = is_current
        self._backoff_s = retry_backoff_ms / 1000
        self._backoff_max_s = retry_backoff_max_ms / 1000
        self._jobs: dict[str, _Job] = {}
        self._unrouted: list[_Item] = []
        self._queues: dict[MarkerDestination, list[_Item]] = {}
        self._in_flight: dict[MarkerDestination, asyncio.Task[None]] = {}
        self._completions: set[asyncio.Task[None]] = set()
        self._wakeup = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self.requests_sent = 0
        """WriteTxnMarkers calls made so far (for metrics and tests)."""

    # ------------------------------------------------------------------------------ MarkerSink

    def enqueue(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        partitions: frozenset[TopicPartition],
        groups: frozenset[str],
        coordinator_epoch: int,
        on_complete: MarkerCompletion,
    ) -> None:
        """Queue the markers of one Prepare* transaction (see ``MarkerSink.enqueue``).

        A job already queued for the same transactional id is superseded: the coordinator only
        enqueues again after reloading the shard or after the previous transaction completed.
        """
        result, partitions = mutants.markers(
            result, partitions, TransactionResult.COMMIT
        )  # test builds only (design/torture.md §4)
        previous = self._jobs.pop(transactional_id, None)
        if previous is not None:
            previous.dropped = True
        job = _Job(
            transactional_id=transactional_id,
            shard=self._shard_for(transactional_id),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            result=result,
            on_complete=on_complete,
            pending_partitions=set(partitions),
            pending_groups=set(groups),
            trace_context=otel_context.get_current(),
            enqueued_at=asyncio.get_running_loop().time(),
        )
        self._jobs[transactional_id] = job
        if job.acknowledged:
            self._start_completion(job)
            return
        self._unrouted.extend(_Item(job, partition=tp) for tp in sorted(partitions))
        self._unrouted.extend(_Item(job, group=group) for group in sorted(groups))
        self._wakeup.set()

    def skip(
        self, transactional_id: str, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[set[TopicPartition], set[str]]:
        """Give up on the markers of some participants of a queued transaction (an operator's escape).

        Each named participant still waiting is treated as acknowledged and never sent again; once none is
        left the transaction completes. Returns the participants that were still waiting (the others had
        acknowledged already, or are not queued here).
        """
        job = self._jobs.get(transactional_id)
        if job is None or job.dropped:
            return set(), set()
        skipped_partitions = job.pending_partitions & set(partitions)
        skipped_groups = job.pending_groups & set(groups)
        for tp in sorted(skipped_partitions):
            log.warning("skipping the marker of %s in transaction %r on request", tp, transactional_id)
            self._acknowledge(_Item(job, partition=tp))
        for group in sorted(skipped_groups):
            log.warning("skipping the marker of group %r in transaction %r on request", group, transactional_id)
            self._acknowledge(_Item(job, group=group))
        return skipped_partitions, skipped_groups

    def drop_shard(self, shard: int) -> None:
        """Forget every job of ``shard`` (it was unloaded); the next owner resends them
        (design/kafka-semantics.md §2.10)."""
        for job in [j for j in self._jobs.values() if j.shard == shard]:
            self._drop(job, "shard unloaded")

    @property
    def pending_transactions(self) -> int:
        """Transactions whose markers or completion are outstanding."""
        return len(self._jobs)

    # ------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Start the sender loop (idempotent)."""
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run(), name="txn-marker-sender")

    async def close(self) -> None:
        """Stop sending, cancel requests and completions in flight, close the transport."""
        tasks = [t for t in (self._loop_task, *self._in_flight.values(), *self._completions) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._loop_task = None
        await self._transport.close()

    # ------------------------------------------------------------------------------ sender loop

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            ready_at = min((item.not_before for item in self._unrouted), default=None)
            timeout = None if ready_at is None else max(0.0, ready_at - loop.time())
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout)
            except TimeoutError:
                pass
            self._wakeup.clear()
            try:
                self._drop_stale_jobs()
                await self._route_ready_items()
                self._send_queued()
            except Exception:
                log.exception("marker sender round failed; retrying")
                await asyncio.sleep(self._backoff_s)

    def _drop_stale_jobs(self) -> None:
        for job in list(self._jobs.values()):
            if not self._is_current(job.shard, job.coordinator_epoch):
                self._drop(job, f"shard {job.shard} is no longer held at coordinator epoch {job.coordinator_epoch}")

    async def _route_ready_items(self) -> None:
        now = asyncio.get_running_loop().time()
        ready = [i for i in self._unrouted if _waiting(i) and i.not_before <= now]
        self._unrouted = [i for i in self._unrouted if _waiting(i) and i.not_before > now]
        for item in [i for i in ready if i.group is not None]:
            refusal = _group_refusal(item.group or "")
            if refusal is not None:
                # Admitted before AddOffsetsToTxn applied the group id rule (replayed from the transaction log):
                # group-offsets refuses the id, so no offset can exist for it and there is nothing to settle.
                log.warning("dropping group from transaction %r: %s", item.job.transactional_id, refusal)
                ready.remove(item)
                self._acknowledge(item)
        if not ready:
            return
        try:
            partition_routes, group_routes = await self._resolver.resolve(
                {i.partition for i in ready if i.partition is not None},
                {i.group for i in ready if i.group is not None},
            )
        except Exception as exc:
            log.warning("cannot resolve marker destinations: %s; retrying", exc)
            for item in ready:
                self._retry_later(item)
            return
        for item in ready:
            if item.job.dropped:
                continue
            route = (
                partition_routes.get(item.partition, Unroutable.OFFLINE)
                if item.partition is not None
                else group_routes.get(item.group or "", Unroutable.OFFLINE)
            )
            if isinstance(route, MarkerDestination):
                self._queues.setdefault(route, []).append(item)
            elif route is Unroutable.DELETED and item.partition is not None:
                log.warning(
                    "dropping partition %s from transaction %r: the topic or partition no longer exists",
                    item.partition,
                    item.job.transactional_id,
                )
                self._acknowledge(item)
            else:
                self._retry_later(item)

    def _send_queued(self) -> None:
        for destination in list(self._queues):
            if destination in self._in_flight:
                continue  # one request per destination at a time; the queue grows into the next batch
            queued = [i for i in self._queues.pop(destination) if _waiting(i)]
            items, rest = queued[: self._max_items], queued[self._max_items :]
            if rest:
                self._queues[destination] = rest  # sent when this request is answered
            if not items:
                continue
            self.requests_sent += 1
            self._in_flight[destination] = asyncio.create_task(
                self._send(destination, items), name=f"write-txn-markers-{destination.node_id}"
            )

    async def _send(self, destination: MarkerDestination, items: list[_Item]) -> None:
        by_job: dict[_Job, list[_Item]] = {}
        for item in items:
            by_job.setdefault(item.job, []).append(item)
        entries = [
            TxnMarkerEntry(
                transactional_id=job.transactional_id,
                producer_id=job.producer_id,
                producer_epoch=job.producer_epoch,
                coordinator_epoch=job.coordinator_epoch,
                result=job.result,
                partitions=tuple(i.partition for i in job_items if i.partition is not None),
                groups=tuple(i.group for i in job_items if i.group is not None),
            )
            for job, job_items in by_job.items()
        ]
        # The request is a child of the first transaction's trace and linked to every other one it carries.
        jobs = list(by_job)
        carried = [trace.get_current_span(j.trace_context).get_span_context() for j in jobs[1:]]
        links = [trace.Link(span) for span in carried if span.is_valid]
        try:
            try:
                with _tracer.start_as_current_span(
                    "txn-markers",
                    context=jobs[0].trace_context,
                    links=links,
                    attributes={
                        "oncelog.destination": destination.node_id,
                        "oncelog.markers": len(entries),
                        "oncelog.transactional_ids": [entry.transactional_id for entry in entries],
                    },
                ):
                    outcomes = await self._transport.write_markers(destination, entries)
                if len(outcomes) != len(entries):
                    raise UnknownServerError(f"{len(outcomes)} results for {len(entries)} markers")
            except OncelogError as error:
                log.info("WriteTxnMarkers to %s failed: %r", destination.node_id, error)
                if error.reason in TRANSPORT_REASONS:
                    self._resolver.invalidate(destination=destination)
                for item in items:
                    self._fail(item, error, destination)
                return
            except Exception as exc:
                log.exception("WriteTxnMarkers to %s failed unexpectedly", destination.node_id)
                for item in items:
                    self._fail(item, UnknownServerError(str(exc)), destination)
                return
            for (job, job_items), outcome in zip(by_job.items(), outcomes, strict=True):
                for item in job_items:
                    if job.dropped:
                        break
                    refusal = self._outcome_of(item, outcome)
                    if refusal is None:
                        self._acknowledge(item)
                    else:
                        self._fail(item, refusal, destination)
        finally:
            del self._in_flight[destination]
            self._wakeup.set()

    @staticmethod
    def _outcome_of(item: _Item, outcome: TxnMarkerOutcome) -> OncelogError | None:
        if item.partition is not None:
            if item.partition not in outcome.partition_errors:
                return UnknownServerError(f"no result for partition {item.partition}")
            return outcome.partition_errors[item.partition]
        assert item.group is not None
        if item.group not in outcome.group_errors:
            return UnknownServerError(f"no result for group {item.group!r}")
        return outcome.group_errors[item.group]

    # ------------------------------------------------------------------------------ outcomes

    def _acknowledge(self, item: _Item) -> None:
        job = item.job
        if not _waiting(item):
            return  # dropped, or skipped while its request was in flight: completion started once already
        if item.partition is not None:
            job.pending_partitions.discard(item.partition)
        if item.group is not None:
            job.pending_groups.discard(item.group)
        if job.acknowledged:
            self._metrics.record_marker_duration(
                job.result.value.lower(), asyncio.get_running_loop().time() - job.enqueued_at
            )
            self._start_completion(job)

    def _fail(self, item: _Item, error: OncelogError, destination: MarkerDestination) -> None:
        job = item.job
        if job.dropped:
            return
        if error.reason in _FENCING_REASONS:
            # Something newer owns the transaction (design/kafka-semantics.md §3.2): stop sending its markers at all.
            self._drop(job, f"{destination.node_id} answered {error.reason.name}")
            return
        if not error.retriable:
            log.error(
                "marker of %r to %s rejected with %r; retrying, but this needs attention",
                job.transactional_id,
                destination.node_id,
                error,
            )
        self._resolver.invalidate(
            partitions=() if item.partition is None else (item.partition,),
            groups=() if item.group is None else (item.group,),
        )
        self._retry_later(item)

    def _retry_later(self, item: _Item) -> None:
        if not _waiting(item):
            return  # skipped meanwhile
        item.attempts += 1
        delay = min(self._backoff_s * 2 ** (item.attempts - 1), self._backoff_max_s)
        item.not_before = asyncio.get_running_loop().time() + delay
        self._unrouted.append(item)
        self._wakeup.set()

    def _drop(self, job: _Job, why: str) -> None:
        if job.dropped:
            return
        job.dropped = True
        if self._jobs.get(job.transactional_id) is job:
            del self._jobs[job.transactional_id]
        log.info("dropped markers of %r (producer id %d): %s", job.transactional_id, job.producer_id, why)

    # ------------------------------------------------------------------------------ completion

    def _start_completion(self, job: _Job) -> None:
        task = asyncio.create_task(self._complete(job), name=f"complete-txn-{job.transactional_id}")
        self._completions.add(task)
        task.add_done_callback(self._completions.discard)

    async def _complete(self, job: _Job) -> None:
        """Write Complete* through the coordinator; retried until it is durable or the shard moved."""
        delay = self._backoff_s
        # the task has its own context copy, so attaching here makes the write a span of the EndTxn's trace
        token = otel_context.attach(job.trace_context)
        try:
            while not job.dropped and self._is_current(job.shard, job.coordinator_epoch):
                try:
                    await job.on_complete()
                    return
                except NotCoordinator:
                    return  # the next owner of the shard completes it after loading
                except Exception as exc:
                    level = logging.INFO if isinstance(exc, OncelogError) and exc.retriable else logging.ERROR
                    log.log(level, "completing %r failed: %r; retrying", job.transactional_id, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._backoff_max_s)
        finally:
            otel_context.detach(token)
            if self._jobs.get(job.transactional_id) is job:
                del self._jobs[job.transactional_id]


def _waiting(item: _Item) -> bool:
    """Whether the participant of ``item`` still waits for its marker (not dropped, acknowledged or skipped)."""
    job = item.job
    if job.dropped:
        return False
    if item.partition is not None:
        return item.partition in job.pending_partitions
    return item.group in job.pending_groups


def _group_refusal(group: str) -> str | None:
    """Why a group id can never take a marker (it breaks the group id rule), or None."""
    try:
        validate_group_id(group, "group id")
    except InvalidRequest as err:
        return str(err)
    return None


__all__ = [
    "TRANSPORT_REASONS",
    "DestinationResolver",
    "DestinationService",
    "MarkerDestination",
    "MarkerTransport",
    "Route",
    "TransactionMarkerChannelManager",
    "TxnMarkerEntry",
    "TxnMarkerOutcome",
    "Unroutable",
]
