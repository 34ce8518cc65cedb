"""PartitionManager: which partitions this storage node leads, and their engines (Kafka's ``ReplicaManager``).

Leadership comes from the cluster catalog (design/architecture.md §2): ``describe_topics`` gives every partition's
leader
node and leader epoch, ``list_nodes`` the live nodes' addresses. The manager keeps a copy, refreshed every
``metadata_refresh_interval_ms`` and on demand when a request names a partition it does not know, a leader
epoch newer than its own, or a partition another node leads. Such a request waits for a refresh that started
after it arrived, so a topic created (or a leader moved) before the request was sent is always seen; refreshes
are single-flight, so a burst of such requests shares one catalog read.

* A request for a partition this node leads gets its :class:`PartitionEngine`, opened lazily under
  ``<data_dir>/<topic>-<partition>/`` (recovery runs in a worker thread; concurrent first requests share
  one open).
* Another leader: ``NOT_LEADER`` with ``leader`` (address, when the leader is live), ``leader_node_id`` and
  ``leader_epoch`` in the error metadata. A leader epoch below the catalog's: ``FENCED_LEADER_EPOCH``; above
  it even after a refresh: ``UNKNOWN_LEADER_EPOCH``. Unknown topic or partition:
  ``UNKNOWN_TOPIC_OR_PARTITION``.
* A partition whose leadership moved away is closed (its files stay). A deleted topic's partitions are
  closed and their directories removed. Each partition directory records the topic id it was created for
  (``partition.metadata``, as Kafka's KIP-516), so a topic deleted and re-created under the same name never
  sees the old incarnation's data, even if the deletion happened while this node was down. The catalog starts
  a re-created topic's leader epochs above the old ones, so a produce or fetch for the new topic reaching
  this node before its periodic refresh carries a newer epoch and makes it refresh first: it is never
  served by the deleted partition (whose removal would lose what was acknowledged there).
* ``<data_dir>/meta.properties`` binds the directory to one cluster id and node id (Kafka's
  ``meta.properties``); starting against another catalog is refused rather than deleting "unknown" topics.
* :meth:`PartitionManager.fetch` reads many partitions under one response budget and long-polls on the
  engines' change events (Kafka's ``fetchMessages`` + ``DelayedFetch``); :meth:`PartitionManager.write_markers`
  fans one WriteTxnMarkers request out to the partitions, one append per partition.
* **Replicated partitions** (more than one replica, docs/design/replication.md): the leader's side (follower
  fetches moving the HW, ISR upkeep, lease-bounded acknowledgements, controlled shutdown) is
  :class:`~oncelog.partition_storage.leader_replication.LeaderReplication`, a base of this class; a follower
  opens the partition's engine and copies it through a :class:`ReplicaFetcherManager` (one long-polling fetcher
  per leader node).
* Background loops run producer-id expiry, retention, the periodic flush of ``flush=async`` topics and the
  recovery-point checkpoint over every open engine.
* Metrics (design/architecture.md §9): records and bytes appended by produce (retried duplicates excluded) and returned
  by
  fetch, per partition; and each led partition's LSO lag (high watermark minus last stable offset), updated
  whenever the engine signals that either moved and reset to 0 when the partition is closed here.

Concurrency: all state lives on the event loop; catalog reads and directory removal run in worker threads.
Refreshes are single-flight, and so is the opening of each partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path

from oncelog.catalog.store import CatalogStore, TopicRecord
from oncelog.errors import (
    FencedLeaderEpoch,
    InvalidRequest,
    NotLeader,
    OncelogError,
    StorageUnavailable,
    UnknownLeaderEpoch,
    UnknownServerError,
    UnknownTopicOrPartition,
)
from oncelog.partition_storage.engine import (
    FetchResult,
    PartitionEngine,
    PendingAppend,
    TxnMarkerSpec,
)
from oncelog.partition_storage.leader_replication import LeaderReplication, wait_any
from oncelog.partition_storage.log_truncation import truncate_partition_files
from oncelog.partition_storage.manager_types import (
    NO_EPOCH_CHECK,
    FetchSpec,
    NodeLease,
    PartitionAssignment,
    PartitionKey,
    StorageNodeConfig,
)
from oncelog.partition_storage.partition_dirs import (
    META_PROPERTIES,
    PARTITION_METADATA,
    check_meta_properties,
    prepare_directory,
    stray_directories,
    write_meta_properties,
)
from oncelog.partition_storage.replica_fetcher import (
    FetcherSettings,
    FollowedPartition,
    ReplicaFetcherManager,
    ReplicaTransport,
)
from oncelog.partition_storage.replica_state import LeaderReplicaState
from oncelog.records import iter_batches
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics
from oncelog.vocabulary import IsolationLevel

__all__ = [
    "META_PROPERTIES",
    "PARTITION_METADATA",
    "FetchSpec",
    "PartitionAssignment",
    "PartitionManager",
    "StorageNodeConfig",
]

log = logging.getLogger(__name__)


class PartitionManager(LeaderReplication):
    """The engines of the partitions this node leads; see the module docstring.

    Args:
        catalog: the cluster catalog (synchronous; called from worker threads).
        node_id: this node's id, as partitions name their leader.
        config: node-wide storage settings.
        clock: milliseconds since the epoch.
        flush_executor: where group-commit fsyncs run (the loop's default executor if ``None``).
        metrics: where produce, fetch and LSO-lag measurements go; the process-wide instruments by default.
    """

    def __init__(
        self,
        catalog: CatalogStore,
        node_id: str,
        config: StorageNodeConfig,
        *,
        clock: Callable[[], int],
        flush_executor: Executor | None = None,
        metrics: OncelogMetrics | None = None,
        replica_transport: ReplicaTransport | None = None,
        node_epoch: Callable[[], int] = lambda: 0,
        lease: NodeLease | None = None,
    ) -> None:
        self._metrics = default_metrics() if metrics is None else metrics
        self._catalog = catalog
        self._node_id = node_id
        self._config = config
        self._clock = clock
        self._flush_executor = flush_executor
        self._assignments: dict[PartitionKey, PartitionAssignment] = {}
        self._topic_ids: dict[str, str] = {}
        self._addresses: dict[str, str] = {}
        # loop.time() at which the newest successful refresh started; -inf before the first one
        self._fresh_since = float("-inf")
        self._refreshing: asyncio.Task[None] | None = None
        # set by start() once the data directory is bound: until then no catalog view is applied, so a node back
        # from a lost disk takes no role (a request's refresh included) before it left the ISRs it was in
        self._bound = asyncio.Event()
        self._engines: dict[PartitionKey, PartitionEngine] = {}
        self._engine_topic_ids: dict[PartitionKey, str] = {}
        self._opening: dict[PartitionKey, asyncio.Task[PartitionEngine]] = {}
        self._lag_reporters: dict[PartitionKey, tuple[PartitionEngine, asyncio.Task[None]]] = {}
        self._loops: list[asyncio.Task[None]] = []
        self._stopping = False
        # lease-bounded leadership: None leads without a lease (single-node tests); the monotonic time at
        # which the newest successful catalog read started
        self._lease = lease
        self._catalog_read_at = -1
        # replication: the leader-side state of replicated partitions led here, and the fetchers of those
        # followed here (docs/design/replication.md §3, §4, §7)
        self._leaders: dict[PartitionKey, LeaderReplicaState] = {}
        self._handing_over = False  # controlled shutdown: lead nothing, copy nothing
        self._background: set[asyncio.Task[None]] = set()
        self._fetchers = (
            None
            if replica_transport is None
            else ReplicaFetcherManager(
                FetcherSettings(
                    follower_id=node_id,
                    follower_epoch=node_epoch,
                    transport=replica_transport,
                    on_leadership_error=self.request_refresh,
                    on_divergence=self._truncate_diverged,
                    max_wait_ms=config.replica_fetch_wait_ms,
                )
            )
        )

    @property
    def node_id(self) -> str:
        """This node's id."""
        return self._node_id

    def engines(self) -> dict[PartitionKey, PartitionEngine]:
        """The open engines by (topic, partition)."""
        return dict(self._engines)

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Check ``meta.properties``, load the catalog, start the background loops.

        Raises:
            InvalidConfig: the data directory belongs to another cluster or node.
        """
        cluster = await asyncio.to_thread(self._catalog.cluster_info)
        data_dir = self._config.data_dir
        if not await asyncio.to_thread(check_meta_properties, data_dir, cluster.cluster_id, self._node_id):
            # first start, or the disk was lost: leave the ISRs first, bind the directory after (a crash in
            # between leaves it unbound, so the next start leaves them again)
            await self.leave_isrs_after_disk_loss_retrying()
            await asyncio.to_thread(write_meta_properties, data_dir, cluster.cluster_id, self._node_id)
        self._bound.set()
        try:
            await self.refresh()
        except OncelogError as err:
            log.warning("first catalog refresh failed (%s); serving requests will retry it", err)
        config = self._config
        self._loops = [
            self._every(config.metadata_refresh_interval_ms, "metadata refresh", self.refresh),
            self._every(config.producer_id_expiration_check_interval_ms, "producer expiry", self._expire_producers),
            self._every(config.retention_check_interval_ms, "retention", self._enforce_retention),
            self._every(config.flush_interval_ms, "async flush", self._flush_async_topics),
            self._every(config.checkpoint_interval_ms, "recovery checkpoint", self._checkpoint),
            self._every(max(config.replica_lag_time_max_ms // 4, 1), "ISR update", self._maintain_isr),
        ]

    async def stop(self) -> None:
        """Stop the loops and close every engine (each flushes and writes a producer-state snapshot)."""
        self._stopping = True
        if self._fetchers is not None:
            await self._fetchers.stop()
        await asyncio.gather(*self._background, return_exceptions=True)
        for task in self._loops:
            task.cancel()
        for task in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._loops = []
        if self._refreshing is not None:
            if not self._bound.is_set():  # start() never finished: the refresh waits for it, forever
                self._refreshing.cancel()
            await asyncio.gather(self._refreshing, return_exceptions=True)
        if self._opening:
            await asyncio.gather(*self._opening.values(), return_exceptions=True)
        engines, self._engines = list(self._engines.values()), {}
        await asyncio.gather(*(engine.close() for engine in engines), return_exceptions=True)
        for key, (engine, _) in list(self._lag_reporters.items()):
            self._stop_lag_reporter(key, engine)

    def _every(self, interval_ms: int, what: str, action: Callable[[], Awaitable[object]]) -> asyncio.Task[None]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(interval_ms / 1000)
                try:
                    await action()
                except OncelogError as err:
                    log.warning("%s failed (%s); retrying in %d ms", what, err, interval_ms)
                except Exception:
                    log.exception("%s failed; retrying in %d ms", what, interval_ms)

        return asyncio.get_running_loop().create_task(loop(), name=f"partition-storage {what}")

    # ------------------------------------------------------------------------------------------- leadership

    async def leader_engine(self, topic: str, partition: int, leader_epoch: int = NO_EPOCH_CHECK) -> PartitionEngine:
        """The engine of a partition this node leads, checking the client's leader epoch (-1: no check).

        Raises:
            InvalidRequest: a leader epoch below -1.
            UnknownTopicOrPartition, NotLeader, FencedLeaderEpoch, UnknownLeaderEpoch: see the module docstring.
            StorageUnavailable: the catalog cannot be read, or the partition cannot be opened.
        """
        if leader_epoch < NO_EPOCH_CHECK:
            raise InvalidRequest(f"leader_epoch must be -1 (no check) or >= 0, got {leader_epoch}")
        arrived = asyncio.get_running_loop().time()
        assignment = await self._leader_assignment(topic, partition, arrived)
        if leader_epoch != NO_EPOCH_CHECK and leader_epoch != assignment.leader_epoch:
            if leader_epoch > assignment.leader_epoch:
                await self._refresh_since(arrived)
                assignment = await self._leader_assignment(topic, partition, arrived)
            if leader_epoch < assignment.leader_epoch:
                raise FencedLeaderEpoch(
                    f"leader epoch {leader_epoch} of {topic}-{partition} is stale; the current one is "
                    f"{assignment.leader_epoch}: refresh metadata",
                    metadata={"leader_epoch": str(assignment.leader_epoch)},
                )
            if leader_epoch > assignment.leader_epoch:
                raise UnknownLeaderEpoch(
                    f"leader epoch {leader_epoch} of {topic}-{partition} is newer than this node's "
                    f"{assignment.leader_epoch}; retry shortly",
                    metadata={"leader_epoch": str(assignment.leader_epoch)},
                )
        if assignment.replicated and not self.lease_holds():
            # the lease may have lapsed (a pause, a slow catalog): re-read before leading again
            await self._refresh_since(asyncio.get_running_loop().time())
            assignment = await self._leader_assignment(topic, partition, arrived)
            if not self.lease_holds():
                raise NotLeader(
                    f"{topic}-{partition}: the lease of {self._node_id} may have lapsed, so it may have been "
                    "replaced as leader; refresh metadata and retry",
                    metadata={"leader_epoch": str(assignment.leader_epoch)},
                )
        return await self._engine(assignment)

    def lease_holds(self) -> bool:
        """True while this node may acknowledge as a leader (design/replication.md §9): its lease, as last
        renewed, holds beyond a fifth of the lease on the local monotonic clock, and the catalog view was read
        after the lease's current unbroken stretch began."""
        lease = self._lease
        if lease is None:
            return True
        now = lease.monotonic_ms()
        return (
            now + lease.lease_ms // 5 < lease.lease_valid_until() and self._catalog_read_at >= lease.lease_valid_since()
        )

    async def _leader_assignment(self, topic: str, partition: int, arrived: float) -> PartitionAssignment:
        key = (topic, partition)
        assignment = self._assignments.get(key)
        if assignment is None or assignment.leader_node_id != self._node_id:
            await self._refresh_since(arrived)
            assignment = self._assignments.get(key)
        if assignment is None:
            if self._fresh_since == float("-inf"):
                raise StorageUnavailable("the catalog could not be read yet; retry", definite=True)
            raise UnknownTopicOrPartition(f"{topic}-{partition} does not exist; check the topic and partition count")
        if assignment.leader_node_id != self._node_id:
            metadata = {"leader_node_id": assignment.leader_node_id, "leader_epoch": str(assignment.leader_epoch)}
            address = self._addresses.get(assignment.leader_node_id)
            if address:
                metadata["leader"] = address
            raise NotLeader(
                f"{topic}-{partition} is led by {assignment.leader_node_id} ({address or 'not live'}), "
                f"not {self._node_id}: refresh metadata and send it there",
                metadata=metadata,
            )
        return assignment

    async def _engine(self, assignment: PartitionAssignment) -> PartitionEngine:
        key = (assignment.topic, assignment.partition)
        engine = self._engines.get(key)
        if engine is not None and self._engine_topic_ids.get(key) == assignment.topic_id:
            engine.leader_epoch = assignment.leader_epoch
            return engine
        if self._stopping:
            raise StorageUnavailable("the storage node is shutting down; retry on the new leader", definite=True)
        opening = self._opening.get(key)
        if opening is None:
            opening = asyncio.get_running_loop().create_task(self._open(assignment))
            self._opening[key] = opening
            opening.add_done_callback(lambda _: self._opening.pop(key, None))
        return await asyncio.shield(opening)

    async def _open(self, assignment: PartitionAssignment) -> PartitionEngine:
        key = (assignment.topic, assignment.partition)
        stale = self._engines.pop(key, None)
        if stale is not None:
            await self._retire(key, stale, delete=True)
        directory = self.partition_dir(assignment.topic, assignment.partition)
        await asyncio.to_thread(prepare_directory, directory, assignment.topic_id)
        engine = await PartitionEngine.open(
            directory,
            self._config.engine_config(assignment.config),
            clock=self._clock,
            flush_executor=self._flush_executor,
            leader_epoch=assignment.leader_epoch,
            replicated=assignment.replicated,
        )
        if self._stopping:
            await engine.close()
            raise StorageUnavailable("the storage node is shutting down; retry on the new leader", definite=True)
        self._engines[key] = engine
        self._engine_topic_ids[key] = assignment.topic_id
        self._attach_replication(key, assignment, engine)
        reporter = asyncio.get_running_loop().create_task(
            self._report_lso_lag(key, engine), name=f"lso-lag {assignment.topic}-{assignment.partition}"
        )
        self._lag_reporters[key] = (engine, reporter)
        log.info(
            "opened %s-%d at leader epoch %d: %r",
            assignment.topic,
            assignment.partition,
            assignment.leader_epoch,
            engine,
        )
        return engine

    def partition_dir(self, topic: str, partition: int) -> Path:
        """Directory of a partition's files."""
        return self._config.data_dir / f"{topic}-{partition}"

    # ------------------------------------------------------------------------------------- request fan-out

    async def write(self, topic: str, partition: int, leader_epoch: int, records: bytes) -> PendingAppend:
        """Write client batches to a partition this node leads; await the result's ``wait()`` to acknowledge.

        Raises:
            OncelogError: leadership (see :meth:`leader_engine`) or :meth:`PartitionEngine.write` errors.
        """
        engine = await self.leader_engine(topic, partition, leader_epoch)
        self._check_min_insync((topic, partition), definite=True)
        pending = await engine.write(records)
        if pending.result.appended_records:
            self._metrics.record_produce(
                topic, partition, pending.result.appended_records, pending.result.appended_bytes
            )
        return pending

    async def write_markers(
        self, markers: Sequence[tuple[TxnMarkerSpec, Sequence[tuple[str, int]]]]
    ) -> list[list[OncelogError | None]]:
        """Apply each marker to its partitions; one append and one fsync per partition (design/kafka-semantics.md §3.3).

        Returns:
            Per marker, per partition (in the order given): ``None`` for success, else the error.
        """
        by_partition: dict[PartitionKey, list[tuple[int, int]]] = {}
        for m, (_, partitions) in enumerate(markers):
            for p, key in enumerate(partitions):
                by_partition.setdefault(key, []).append((m, p))
        outcomes: list[list[OncelogError | None]] = [[None] * len(partitions) for _, partitions in markers]

        async def apply(key: PartitionKey, slots: list[tuple[int, int]]) -> None:
            try:
                engine = await self.leader_engine(*key)
                results: Sequence[OncelogError | None] = await engine.write_markers([markers[m][0] for m, _ in slots])
            except OncelogError as err:
                results = [err] * len(slots)
            except Exception as err:
                log.exception("markers for %s-%d failed", *key)
                results = [UnknownServerError(f"markers for {key[0]}-{key[1]} failed: {err}")] * len(slots)
            for (m, p), result in zip(slots, results, strict=True):
                outcomes[m][p] = result

        await asyncio.gather(*(apply(key, slots) for key, slots in by_partition.items()))
        return outcomes

    async def fetch(
        self,
        specs: Sequence[FetchSpec],
        isolation: IsolationLevel,
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        max_bytes: int = 0,
    ) -> list[FetchResult | OncelogError]:
        """Read several partitions, long-polling until ``min_bytes`` are readable or ``max_wait_ms`` passed.

        Like Kafka's ``fetchMessages``: the answer is immediate when ``max_wait_ms`` or ``min_bytes`` is 0,
        when enough bytes are readable, or when a partition has an error. Otherwise it waits on the
        partitions' change events (high watermark or LSO moved) and reads again. The response holds at most
        ``max_bytes`` (0: the node's ``fetch_max_bytes``), except that the first partition with data always
        returns its first batch whole (KIP-74); a later partition whose first batch does not fit returns
        nothing this time.

        Raises:
            InvalidRequest: a negative wait, min_bytes or max_bytes.
        """
        if max_wait_ms < 0 or min_bytes < 0 or max_bytes < 0:
            raise InvalidRequest(
                f"max_wait_ms, min_bytes and max_bytes must be >= 0, got {max_wait_ms}, {min_bytes}, {max_bytes}"
            )
        budget = min(max_bytes or self._config.fetch_max_bytes, self._config.fetch_max_bytes)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + min(max_wait_ms, self._config.fetch_max_wait_ms) / 1000
        while True:
            events: list[asyncio.Event] = []
            results = await self._read_once(specs, isolation, budget, events)
            readable = sum(len(r.records) for r in results if isinstance(r, FetchResult))
            failed = any(isinstance(r, OncelogError) for r in results)
            remaining = deadline - loop.time()
            if failed or readable >= min_bytes or remaining <= 0 or not events:
                self._record_fetch(specs, results, isolation)
                return results
            await wait_any(events, remaining)

    def _record_fetch(
        self, specs: Sequence[FetchSpec], results: Sequence[FetchResult | OncelogError], isolation: IsolationLevel
    ) -> None:
        for spec, result in zip(specs, results, strict=True):
            if isinstance(result, FetchResult) and result.records:
                # headers only: the records section stays compressed and unparsed; markers are no records to a reader
                records = sum(h.record_count for h, _ in iter_batches(result.records) if not h.is_control)
                self._metrics.record_fetch(spec.topic, spec.partition, isolation.value, records, len(result.records))

    async def _read_once(
        self, specs: Sequence[FetchSpec], isolation: IsolationLevel, budget: int, events: list[asyncio.Event]
    ) -> list[FetchResult | OncelogError]:
        results: list[FetchResult | OncelogError] = []
        first_with_data = True
        for spec in specs:
            try:
                if spec.max_bytes < 0:
                    raise InvalidRequest(f"max_bytes of {spec.topic}-{spec.partition} must be >= 0")
                engine = await self.leader_engine(spec.topic, spec.partition, spec.leader_epoch)
                events.append(engine.changed())
                limit = min(spec.max_bytes or self._config.partition_fetch_bytes, max(budget, 0))
                result = engine.read(spec.offset, limit, isolation)
                if result.records and not first_with_data and len(result.records) > budget:
                    result = FetchResult(
                        b"", spec.offset, result.high_watermark, result.last_stable_offset, result.log_start_offset, ()
                    )
                if result.records:
                    first_with_data = False
                    budget -= len(result.records)
                results.append(result)
            except OncelogError as err:
                results.append(err)
        return results

    # ---------------------------------------------------------------------------------------------- catalog

    async def refresh(self) -> None:
        """Reload leadership from the catalog and apply it to the open engines.

        Single-flight: a call while a refresh runs waits for that one.

        Raises:
            StorageUnavailable: the catalog cannot be read (the previous view is kept).
        """
        # a finished task whose completion callback has not run yet counts as none: awaiting it would return at
        # once without yielding, and a caller looping for a newer refresh (_refresh_since) would spin forever
        if self._refreshing is None or self._refreshing.done():
            task = asyncio.get_running_loop().create_task(self._refresh())
            task.add_done_callback(self._refresh_done)
            self._refreshing = task
        await asyncio.shield(self._refreshing)

    def _refresh_done(self, task: asyncio.Task[None]) -> None:
        if self._refreshing is task:  # not a newer refresh started meanwhile
            self._refreshing = None
        if not task.cancelled():
            task.exception()  # retrieved by the awaiting callers; avoid "never retrieved" noise

    async def _refresh_since(self, arrived: float) -> None:
        """Wait for a refresh that started at or after ``arrived``; on a catalog error keep the old view."""
        with contextlib.suppress(OncelogError):
            while self._fresh_since < arrived:
                await self.refresh()

    async def _refresh(self) -> None:
        await self._bound.wait()  # requests arriving while start() runs wait for it
        started = asyncio.get_running_loop().time()
        read_at = self._lease.monotonic_ms() if self._lease is not None else 0
        topics, addresses = await asyncio.to_thread(self._read_catalog)
        assignments = {}
        for topic in topics:
            for p in topic.partitions:
                assignments[(topic.name, p.partition)] = PartitionAssignment(
                    topic.name,
                    p.partition,
                    topic.topic_id,
                    p.leader_node_id,
                    p.leader_epoch,
                    topic.config,
                    p.replicas,
                    p.isr,
                    p.partition_epoch,
                )
        self._assignments = assignments
        self._topic_ids = {topic.name: topic.topic_id for topic in topics}
        self._addresses = addresses
        self._fresh_since = max(self._fresh_since, started)
        self._catalog_read_at = max(self._catalog_read_at, read_at)
        await self._reconcile()

    def _read_catalog(self) -> tuple[list[TopicRecord], dict[str, str]]:
        topics = self._catalog.describe_topics()
        nodes = self._catalog.list_nodes(self._clock())
        return topics, {node.node_id: node.address for node in nodes}

    async def _reconcile(self) -> None:
        """Close engines this node no longer leads or follows; remove partitions of deleted topics; open the
        replicated partitions this node follows and (re)start their copying."""
        for key, engine in list(self._engines.items()):
            assignment = self._assignments.get(key)
            if assignment is None or assignment.topic_id != self._engine_topic_ids.get(key):
                self._engines.pop(key, None)
                log.info("%s-%d was deleted from the catalog; removing its data", *key)
                await self._retire(key, engine, delete=True)
            elif assignment.leader_node_id != self._node_id and self._node_id not in assignment.replicas:
                self._engines.pop(key, None)
                log.info("%s-%d is now led by %s; closing it here", *key, assignment.leader_node_id)
                await self._retire(key, engine, delete=False)
            else:
                engine.leader_epoch = assignment.leader_epoch
                if engine.reconfigure(self._config.engine_config(assignment.config)):
                    log.info("%s-%d: applied the topic's changed configs %s", *key, assignment.config)
                self._attach_replication(key, assignment, engine)
        if self._fetchers is not None and not self._stopping:
            for key, assignment in self._assignments.items():
                if (
                    assignment.replicated
                    and self._node_id in assignment.replicas
                    and assignment.leader_node_id != self._node_id
                    and key not in self._engines
                ):
                    try:
                        await self._engine(assignment)  # opening attaches the follower side
                    except OncelogError as err:
                        log.warning("cannot open %s-%d to follow it: %s", *key, err)
        busy = {self.partition_dir(*key) for key in (*self._engines, *self._opening)}
        strays = await asyncio.to_thread(stray_directories, self._config.data_dir, self._topic_ids, busy)
        for directory in strays:
            log.info("removing %s: its topic no longer exists", directory)
            await asyncio.to_thread(shutil.rmtree, directory, True)

    async def _retire(self, key: PartitionKey, engine: PartitionEngine, *, delete: bool) -> None:
        self._engine_topic_ids.pop(key, None)
        self._stop_leading(key)
        if self._fetchers is not None:
            self._fetchers.unfollow(*key)
        await engine.close()
        self._stop_lag_reporter(key, engine)
        if delete:
            await asyncio.to_thread(shutil.rmtree, engine.directory, True)

    # ---------------------------------------------------------------------------------------------- follower

    def _truncate_diverged(self, followed: FollowedPartition, offset: int) -> None:
        """A follower's log diverges from its leader's: close it, cut it to ``offset``, reopen and copy again."""
        key = (followed.topic, followed.partition)

        async def truncate() -> None:
            if self._engines.get(key) is not followed.engine or self._stopping:
                return
            assert self._fetchers is not None
            self._fetchers.unfollow(*key)
            self._engines.pop(key, None)
            await self._retire(key, followed.engine, delete=False)
            await asyncio.to_thread(truncate_partition_files, followed.engine.directory, offset)
            assignment = self._assignments.get(key)
            if assignment is not None and self._node_id in assignment.replicas:
                await self._engine(assignment)  # reopening recovers the cut log and follows the leader again

        self._spawn(truncate(), f"truncation of {followed.topic}-{followed.partition}")

    def request_refresh(self) -> None:
        """Re-read the catalog soon, without waiting for it (a fetcher met a leadership error, the controller
        elected)."""
        if not self._stopping:
            self._spawn(self._refresh_since(asyncio.get_running_loop().time()), "catalog refresh")

    def _spawn(self, work: Awaitable[None], what: str) -> None:
        """Run ``work`` in the background, keeping a reference until it ends and logging a failure."""

        async def run() -> None:
            try:
                await work
            except Exception:
                log.exception("%s failed", what)

        task = asyncio.get_running_loop().create_task(run(), name=what)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # ----------------------------------------------------------------------------------------------- metrics

    async def _report_lso_lag(self, key: PartitionKey, engine: PartitionEngine) -> None:
        """Report the partition's LSO lag each time the engine says HW or LSO may have moved, until it closes."""
        topic, partition = key
        while engine.online:
            changed = engine.changed()  # taken before reading, so no move between the read and the wait is missed
            self._metrics.set_lso_lag(topic, partition, engine.high_watermark - engine.last_stable_offset)
            await changed.wait()

    def _stop_lag_reporter(self, key: PartitionKey, engine: PartitionEngine) -> None:
        entry = self._lag_reporters.get(key)
        if entry is not None and entry[0] is engine:  # not the reporter of an engine reopened meanwhile
            del self._lag_reporters[key]
            entry[1].cancel()
            # the partition's lag is reported by its new leader now; a stale value here would be counted twice
            self._metrics.set_lso_lag(*key, 0)

    # ------------------------------------------------------------------------------------------ maintenance

    async def _each_online(self, action: Callable[[PartitionEngine], Awaitable[object]], what: str) -> None:
        for key, engine in list(self._engines.items()):
            if not engine.online:
                continue
            try:
                await action(engine)
            except Exception:
                log.exception("%s of %s-%d failed", what, *key)

    async def _expire_producers(self) -> None:
        await self._each_online(PartitionEngine.expire_producers, "producer expiry")

    async def _enforce_retention(self) -> None:
        await self._each_online(PartitionEngine.enforce_retention, "retention")

    async def _flush_async_topics(self) -> None:
        async def flush(engine: PartitionEngine) -> None:
            if not engine.config.flush_sync:
                await engine.flush()

        await self._each_online(flush, "flush")

    async def _checkpoint(self) -> None:
        await self._each_online(PartitionEngine.checkpoint, "recovery-point checkpoint")
