"""Kafka's cluster and data APIs on oncelog: ApiVersions, Metadata, CreateTopics, DeleteTopics, Produce, Fetch,
ListOffsets and FindCoordinator.

Each handler reads a kio request body, calls the oncelog services through the typed clients and answers with a
dict that :func:`~oncelog.kafka_gateway.protocol.build` turns into the response of the request's version. Record
batches pass through untouched: partition storage keeps Kafka's RecordBatch v2 bytes (design/architecture.md §4.1),
except a transactional batch whose identity the gateway translates (``producer_epochs.py``). The gateways are the
brokers: Metadata names them, and every partition's leader and every coordinator is one of them, picked by a
hash of the name so that several gateway replicas share the clients.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from oncelog.client.records import NewTopic, PartitionInfo, TopicInfo
from oncelog.client.services import (
    ClusterClient,
    EpochEndOffset,
    EpochQuery,
    FetchPosition,
    OffsetQuery,
    PartitionStorageClient,
)
from oncelog.errors import CorruptMessage, InvalidRequest, OffsetOutOfRange, OncelogError
from oncelog.kafka_gateway.error_codes import error_code_of
from oncelog.kafka_gateway.producer_epochs import TransactionalIdentities
from oncelog.kafka_gateway.protocol import Request, api_version_list
from oncelog.kafka_gateway.routing import ClusterRoutes
from oncelog.vocabulary import CoordinatorKind, IsolationLevel, TopicPartition

Broker = tuple[int, str, int]
"""(broker id, host, port) of one gateway replica."""

ZERO_UUID = uuid.UUID(int=0)
_LATEST, _EARLIEST = -1, -2
_DESCRIBE_PARTITION_LIMIT = 2000
"""Kafka's ``max.request.partition.size.limit`` default: the most partitions one DescribeTopicPartitions answers."""


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def _error(code: ErrorCode | OncelogError | None) -> ErrorCode:
    return code if isinstance(code, ErrorCode) else error_code_of(code)


class DataServicer:
    """The handlers of the cluster and data APIs (module docstring)."""

    def __init__(
        self,
        *,
        routes: ClusterRoutes,
        cluster: ClusterClient,
        storage: PartitionStorageClient,
        identities: TransactionalIdentities,
        brokers: Sequence[Broker],
        timeout_s: float,
    ) -> None:
        self._routes = routes
        self._cluster = cluster
        self._storage = storage
        self._identities = identities
        self._brokers = list(brokers)
        self._timeout_s = timeout_s
        self._cluster_id: str | None = None

    def broker_for(self, key: str) -> Broker:
        """The gateway replica that answers for ``key`` (a partition, a group or a transactional id)."""
        return self._brokers[zlib.crc32(key.encode()) % len(self._brokers)]

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any] | None]]]:
        """API key -> handler."""
        return {
            18: self.api_versions,
            3: self.metadata,
            19: self.create_topics,
            20: self.delete_topics,
            0: self.produce,
            1: self.fetch,
            2: self.list_offsets,
            10: self.find_coordinator,
            23: self.offset_for_leader_epoch,
            75: self.describe_topic_partitions,
        }

    # ------------------------------------------------------------------------------------ cluster

    async def api_versions(self, request: Request) -> dict[str, Any]:
        return {"error_code": ErrorCode.none, "api_keys": api_version_list(), "throttle_time": 0}

    async def _cluster_id_once(self) -> str | None:
        if self._cluster_id is None:
            try:
                description = await self._routes.ask(lambda a: self._cluster.describe_cluster(a))
                self._cluster_id = description.cluster_id
            except OncelogError:
                return None
        return self._cluster_id

    async def metadata(self, request: Request) -> dict[str, Any]:
        body = request.body
        wanted = None if body.topics is None else [t.name for t in body.topics if t.name is not None]
        topics = await self._topics_with(wanted or ())
        names = sorted(topics) if wanted is None else wanted
        answer: list[dict[str, Any]] = []
        for name in names:
            info = topics.get(name)
            if info is None:
                answer.append(_unknown_topic(name))
                continue
            partitions = [self._partition_view(name, p) for p in info.partitions]
            answer.append(
                {"error_code": ErrorCode.none, "name": name, "topic_id": _uuid(info.topic_id), "partitions": partitions}
            )
        return {
            "throttle_time": 0,
            "brokers": [{"node_id": i, "host": host, "port": port, "rack": None} for i, host, port in self._brokers],
            "cluster_id": await self._cluster_id_once(),
            "controller_id": self._brokers[0][0],
            "topics": answer,
        }

    async def _topics_with(self, wanted: Iterable[str]) -> dict[str, TopicInfo]:
        """The cached topics, read again when one of ``wanted`` is missing (it may have been created a moment ago)."""
        topics = await self._routes.topics()
        if any(name not in topics for name in wanted):
            topics = await self._routes.topics(fresh=True)
        return topics

    def _partition_view(self, topic: str, p: PartitionInfo) -> dict[str, Any]:
        """A partition as Metadata and DescribeTopicPartitions show it: a gateway leads it and is its only replica."""
        leader = self.broker_for(f"{topic}-{p.partition}")[0]
        return {
            "error_code": ErrorCode.none if p.leader_address else ErrorCode.leader_not_available,
            "partition_index": p.partition,
            "leader_id": leader,
            # the storage leader's epoch: clients send it back on Fetch and OffsetForLeaderEpoch (KIP-320), so a
            # consumer with stale metadata is fenced and one whose position lies beyond a new leader's log finds
            # out where its epoch ends
            "leader_epoch": p.leader_epoch,
            "replica_nodes": [leader],
            "isr_nodes": [leader],
            "offline_replicas": [],
        }

    async def describe_topic_partitions(self, request: Request) -> dict[str, Any]:
        """DescribeTopicPartitions (KIP-966; what ``kafka-topics --describe`` asks first): Metadata's partitions,
        topics in name order, at most ``response_partition_limit`` partitions from the cursor on, and the cursor
        to go on from. No replica is ever an eligible leader replica (oncelog elects from the ISR only), so both
        ELR lists are empty."""
        body = request.body
        wanted = sorted({t.name for t in body.topics})
        topics = await self._topics_with(wanted)
        cursor = body.cursor
        if cursor is not None and (cursor.partition_index < 0 or (wanted and cursor.topic_name not in wanted)):
            # a cursor outside the topics asked for, or before partition 0: Kafka's broker refuses the request, and
            # every topic asked for gets INVALID_REQUEST
            return {
                "throttle_time": 0,
                "topics": [
                    {"error_code": ErrorCode.invalid_request, "name": t.name, "topic_id": ZERO_UUID, "partitions": []}
                    for t in body.topics
                ],
                "next_cursor": None,
            }
        names = wanted or sorted(topics)
        if cursor is not None:
            names = [n for n in names if n >= cursor.topic_name]
        room = min(body.response_partition_limit, _DESCRIBE_PARTITION_LIMIT)
        answer: list[dict[str, Any]] = []
        next_cursor: dict[str, Any] | None = None
        for name in names:  # Kafka's KRaftMetadataCache.describeTopicResponse, step for step
            if room == 0:  # the page is full: the next one starts at this topic
                next_cursor = {"topic_name": name, "partition_index": 0}
                break
            if room < 0:
                continue
            info = topics.get(name)
            if info is None:
                answer.append(_unknown_topic(name))
                continue
            first = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            shown = info.partitions[first : first + room]
            room -= len(shown)
            answer.append(
                {
                    "error_code": ErrorCode.none,
                    "name": name,
                    "topic_id": _uuid(info.topic_id),
                    "is_internal": False,
                    "partitions": [
                        {**self._partition_view(name, p), "eligible_leader_replicas": [], "last_known_elr": []}
                        for p in shown
                    ],
                }
            )
            if first + len(shown) < len(info.partitions):
                next_cursor = {"topic_name": name, "partition_index": first + len(shown)}
                break
        return {"throttle_time": 0, "topics": answer, "next_cursor": next_cursor}

    async def create_topics(self, request: Request) -> dict[str, Any]:
        body = request.body
        results = []
        for topic in body.topics:
            if topic.assignments:
                results.append(
                    {"name": topic.name, "error_code": ErrorCode.invalid_request, "topic_id": ZERO_UUID,
                     "error_message": "replica assignments are chosen by oncelog; send num_partitions instead"}
                )  # fmt: skip
                continue
            new = NewTopic(
                topic.name,
                num_partitions=1 if topic.num_partitions == -1 else topic.num_partitions,
                configs={c.name: c.value for c in topic.configs if c.value is not None},
                replication_factor=None if topic.replication_factor == -1 else topic.replication_factor,
            )
            validate_only = getattr(body, "validate_only", False)

            def create(address: str, new: NewTopic = new, validate_only: bool = validate_only) -> Awaitable[Any]:
                return self._cluster.create_topics(
                    address, [new], validate_only=validate_only, timeout_s=self._timeout_s
                )

            try:
                created = await self._routes.ask(create)
            except OncelogError as exc:
                results.append(
                    {"name": topic.name, "error_code": _error(exc), "error_message": exc.message, "topic_id": ZERO_UUID}
                )
                continue
            info = created[0] if created else None
            results.append(
                {
                    "name": topic.name,
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "topic_id": _uuid(info.topic_id) if info else ZERO_UUID,
                    "num_partitions": len(info.partitions) if info else new.num_partitions,
                    "replication_factor": len(info.partitions[0].replicas) if info and info.partitions else -1,
                    "configs": [],
                }
            )
        self._routes.forget_topics()
        return {"throttle_time": 0, "topics": results}

    async def delete_topics(self, request: Request) -> dict[str, Any]:
        results = []
        for name in request.body.topic_names:

            def delete(address: str, name: str = name) -> Awaitable[Any]:
                return self._cluster.delete_topics(address, [name])

            try:
                await self._routes.ask(delete)
                results.append({"name": name, "error_code": ErrorCode.none, "error_message": None})
            except OncelogError as exc:
                results.append({"name": name, "error_code": _error(exc), "error_message": exc.message})
        self._routes.forget_topics()
        return {"throttle_time": 0, "responses": results}

    async def find_coordinator(self, request: Request) -> dict[str, Any]:
        body = request.body
        kind = CoordinatorKind.TRANSACTION if getattr(body, "key_type", 0) == 1 else CoordinatorKind.GROUP
        keys = list(body.coordinator_keys) if request.version >= 4 else [body.key]
        found = []
        for key in keys:
            entry: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1, "error_message": None}
            try:
                await self._routes.coordinator(key, kind)
                node, host, port = self.broker_for(f"{kind.value}:{key}")
                entry.update(node_id=node, host=host, port=port, error_code=ErrorCode.none)
            except OncelogError as exc:
                self._routes.failed(exc, key=(key, kind))
                entry.update(error_code=_error(exc), error_message=exc.message)
            found.append(entry)
        if request.version >= 4:
            return {"throttle_time": 0, "coordinators": found}
        return {"throttle_time": 0, **found[0]}

    # ------------------------------------------------------------------------------------ data

    async def _leaders(self, tps: Sequence[TopicPartition]) -> tuple[dict[str, list[TopicPartition]], dict]:
        """Partitions grouped by leader address, and the errors of those without one."""
        by_leader: dict[str, list[TopicPartition]] = defaultdict(list)
        errors: dict[TopicPartition, OncelogError] = {}
        for tp in tps:
            try:
                by_leader[await self._routes.leader(tp)].append(tp)
            except OncelogError as exc:
                errors[tp] = exc
        return by_leader, errors

    async def produce(self, request: Request) -> dict[str, Any] | None:
        body = request.body
        tid = body.transactional_id
        batches: dict[TopicPartition, bytes] = {}
        results: dict[TopicPartition, OncelogError | int] = {}
        order: list[TopicPartition] = []
        for topic in body.topic_data:
            for p in topic.partition_data:
                tp = TopicPartition(topic.name, p.index)
                order.append(tp)
                if not p.records:
                    results[tp] = CorruptMessage(f"{tp.topic}-{tp.partition}: the produce request carries no records")
                    continue
                try:
                    batches[tp] = self._identities.rewrite_batch(tid, tp, bytes(p.records)) if tid else bytes(p.records)
                except OncelogError as exc:
                    results[tp] = exc
        by_leader, errors = await self._leaders(list(batches))
        results.update(errors)

        async def send(address: str, tps: list[TopicPartition]) -> None:
            try:
                answer = await self._storage.produce(
                    address,
                    {tp: batches[tp] for tp in tps},
                    transactional_id=tid or "",
                    acks_all=body.acks == -1,
                    timeout_s=max(self._timeout_s, _ms(body.timeout) / 1000),
                )
            except OncelogError as exc:
                answer = dict.fromkeys(tps, exc)
            for tp, outcome in answer.items():
                results[tp] = outcome
                if isinstance(outcome, OncelogError):
                    self._routes.failed(outcome)

        await asyncio.gather(*(send(address, tps) for address, tps in by_leader.items()))
        if body.acks == 0:
            return None
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp in order:
            outcome = results.get(tp)
            failed = isinstance(outcome, OncelogError)
            by_topic[tp.topic].append(
                {
                    "index": tp.partition,
                    "error_code": _error(outcome if failed else None),  # type: ignore[arg-type]
                    "base_offset": -1 if failed or outcome is None else outcome,
                    "log_append_time": None,
                    "log_start_offset": -1,
                    "record_errors": [],
                    "error_message": outcome.message if failed else None,  # type: ignore[union-attr]
                }
            )
        return {
            "responses": [{"name": name, "partition_responses": parts} for name, parts in by_topic.items()],
            "throttle_time": 0,
        }

    async def fetch(self, request: Request) -> dict[str, Any]:
        body = request.body
        committed = getattr(body, "isolation_level", 0) == 1
        isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
        positions = {
            TopicPartition(t.topic, p.partition): FetchPosition(
                TopicPartition(t.topic, p.partition),
                p.fetch_offset,
                getattr(p, "current_leader_epoch", -1),  # v9+: the storage leader fences a stale epoch
                p.partition_max_bytes,
            )
            for t in body.topics
            for p in t.partitions
        }
        # Fetch v12+: the epoch of the last batch each position read. The leader is asked where it ends before
        # fetching when it is not the partition's current epoch (which ends at the log end), and after an
        # OFFSET_OUT_OF_RANGE otherwise, so an ordinary fetch costs no extra call.
        last_epochs = {
            TopicPartition(t.topic, p.partition): p.last_fetched_epoch
            for t in body.topics
            for p in t.partitions
            if getattr(p, "last_fetched_epoch", -1) >= 0
        }
        stale = {tp: e for tp, e in last_epochs.items() if e != await self._routes.leader_epoch(tp)}
        answers: dict[TopicPartition, dict[str, Any]] = await self._diverged(stale, positions) if stale else {}
        by_leader, errors = await self._leaders([tp for tp in positions if tp not in answers])

        async def fetch_from(address: str, tps: list[TopicPartition]) -> None:
            try:
                fetched = await self._storage.fetch(
                    address,
                    [positions[tp] for tp in tps],
                    isolation=isolation,
                    max_wait_ms=_ms(body.max_wait),
                    min_bytes=body.min_bytes,
                    max_bytes=getattr(body, "max_bytes", 50 << 20),
                    timeout_s=self._timeout_s,
                )
            except OncelogError as exc:
                self._routes.failed(exc)
                for tp in tps:
                    answers[tp] = _fetch_error(tp, exc)
                return
            for f in fetched:
                if f.error is not None:
                    self._routes.failed(f.error)
                    answers[f.topic_partition] = _fetch_error(f.topic_partition, f.error)
                    continue
                answers[f.topic_partition] = {
                    "partition_index": f.topic_partition.partition,
                    "error_code": ErrorCode.none,
                    "high_watermark": f.high_watermark,
                    "last_stable_offset": f.last_stable_offset,
                    "log_start_offset": f.log_start_offset,
                    "aborted_transactions": (
                        [{"producer_id": a.producer_id, "first_offset": a.first_offset} for a in f.aborted_transactions]
                        if committed
                        else None
                    ),
                    "preferred_read_replica": -1,
                    "records": f.records,
                }

        await asyncio.gather(*(fetch_from(address, tps) for address, tps in by_leader.items()))
        for tp, exc in errors.items():
            answers[tp] = _fetch_error(tp, exc)
        out_of_range = {
            tp: epoch
            for tp, epoch in last_epochs.items()
            if tp not in stale and answers[tp]["error_code"] == ErrorCode.offset_out_of_range
        }
        if out_of_range:
            answers.update(await self._diverged(out_of_range, positions))
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp in positions:
            by_topic[tp.topic].append(answers[tp])
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,  # no fetch sessions: every request is a full fetch (KIP-227's sessionless mode)
            "responses": [{"topic": name, "partitions": parts} for name, parts in by_topic.items()],
        }

    async def _diverged(
        self, asked: dict[TopicPartition, int], positions: dict[TopicPartition, FetchPosition]
    ) -> dict[TopicPartition, dict[str, Any]]:
        """Fetch v12+ answers for the positions whose last fetched epoch (``asked``) diverges from the leader's log.

        A Fetch v12+ names the epoch of the last batch the client read. As Kafka's broker does, the leader's end of
        that epoch decides: an epoch the leader does not know is OFFSET_OUT_OF_RANGE; an end below the fetch offset
        (or an older epoch) is answered with no records and ``diverging_epoch``, so the client truncates (KIP-320
        without a separate OffsetForLeaderEpoch). Positions that do not diverge are absent from the answer.
        """
        ends = await self._epoch_ends(
            {tp: EpochQuery(epoch, positions[tp].leader_epoch) for tp, epoch in asked.items()}
        )
        diverged: dict[TopicPartition, dict[str, Any]] = {}
        for tp, end in ends.items():
            if isinstance(end, OncelogError):  # a fenced or unknown current epoch: the fetch would fail alike
                diverged[tp] = _fetch_error(tp, end)
            elif end.epoch < 0 or end.end_offset < 0:
                diverged[tp] = _fetch_error(
                    tp, OffsetOutOfRange(f"{tp.topic}-{tp.partition}: the leader has no epoch {asked[tp]} or below")
                )
            elif end.epoch < asked[tp] or end.end_offset < positions[tp].offset:
                diverged[tp] = {
                    **_fetch_error(tp, None),
                    "diverging_epoch": {"epoch": end.epoch, "end_offset": end.end_offset},
                }
        truncated = {
            tp: positions[tp]._replace(offset=answer["diverging_epoch"]["end_offset"], max_bytes=1)
            for tp, answer in diverged.items()
            if "diverging_epoch" in answer
        }
        if truncated:
            await self._add_watermarks(diverged, truncated)
        return diverged

    async def _add_watermarks(
        self, answers: dict[TopicPartition, dict[str, Any]], at: dict[TopicPartition, FetchPosition]
    ) -> None:
        """Put each partition's high watermark, LSO and log start into its diverging answer, as Kafka's leader does.

        They come from a fetch at the end of the diverging epoch (an offset the leader has) whose records are
        dropped; a partition whose fetch fails keeps -1, which clients ignore next to ``diverging_epoch``.
        """
        by_leader, _ = await self._leaders(list(at))

        async def read(address: str, tps: list[TopicPartition]) -> None:
            try:
                fetched = await self._storage.fetch(
                    address,
                    [at[tp] for tp in tps],
                    isolation=IsolationLevel.READ_UNCOMMITTED,
                    max_wait_ms=0,
                    min_bytes=0,
                    max_bytes=1,
                    timeout_s=self._timeout_s,
                )
            except OncelogError as exc:
                self._routes.failed(exc)
                return
            for f in fetched:
                if f.error is None:
                    answers[f.topic_partition].update(
                        high_watermark=f.high_watermark,
                        last_stable_offset=f.last_stable_offset,
                        log_start_offset=f.log_start_offset,
                    )

        await asyncio.gather(*(read(address, tps) for address, tps in by_leader.items()))

    async def _epoch_ends(
        self, queries: dict[TopicPartition, EpochQuery]
    ) -> dict[TopicPartition, EpochEndOffset | OncelogError]:
        """Where each asked epoch ends, from each partition's storage leader (routing errors drop the cache)."""
        by_leader, errors = await self._leaders(list(queries))
        ends: dict[TopicPartition, EpochEndOffset | OncelogError] = dict(errors)

        async def ask(address: str, tps: list[TopicPartition]) -> None:
            try:
                found = await self._storage.offset_for_leader_epoch(
                    address, {tp: queries[tp] for tp in tps}, timeout_s=self._timeout_s
                )
            except OncelogError as exc:
                found = dict.fromkeys(tps, exc)
            for tp, outcome in found.items():
                if isinstance(outcome, OncelogError):
                    self._routes.failed(outcome)
                ends[tp] = outcome

        await asyncio.gather(*(ask(address, tps) for address, tps in by_leader.items()))
        return ends

    async def offset_for_leader_epoch(self, request: Request) -> dict[str, Any]:
        """Where each asked leader epoch ends in the partition leader's log (KIP-320)."""
        order: list[TopicPartition] = []
        queries: dict[TopicPartition, EpochQuery] = {}
        for t in request.body.topics:
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                order.append(tp)
                queries[tp] = EpochQuery(p.leader_epoch, p.current_leader_epoch)
        ends = await self._epoch_ends(queries)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp in order:
            end = ends[tp]
            if isinstance(end, OncelogError):
                entry = {"error_code": _error(end), "partition": tp.partition, "leader_epoch": -1, "end_offset": -1}
            else:
                entry = {
                    "error_code": ErrorCode.none,
                    "partition": tp.partition,
                    "leader_epoch": end.epoch,
                    "end_offset": end.end_offset,
                }
            by_topic[tp.topic].append(entry)
        return {"throttle_time": 0, "topics": [{"topic": n, "partitions": parts} for n, parts in by_topic.items()]}

    async def list_offsets(self, request: Request) -> dict[str, Any]:
        body = request.body
        isolation = (
            IsolationLevel.READ_COMMITTED
            if getattr(body, "isolation_level", 0) == 1
            else IsolationLevel.READ_UNCOMMITTED
        )
        queries: dict[TopicPartition, OffsetQuery] = {}
        answers: dict[TopicPartition, dict[str, Any]] = {}
        order: list[TopicPartition] = []
        for t in body.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                order.append(tp)
                if p.timestamp == _LATEST:
                    queries[tp] = OffsetQuery("latest")
                elif p.timestamp == _EARLIEST:
                    queries[tp] = OffsetQuery("earliest")
                elif p.timestamp >= 0:
                    queries[tp] = OffsetQuery("timestamp", p.timestamp)
                else:
                    error = InvalidRequest(f"ListOffsets timestamp {p.timestamp} is not served (use -1, -2 or >= 0)")
                    answers[tp] = _offset_answer(tp, error)
        by_leader, errors = await self._leaders(list(queries))

        async def ask(address: str, tps: list[TopicPartition]) -> None:
            try:
                listed = await self._storage.list_offsets(
                    address, {tp: queries[tp] for tp in tps}, isolation=isolation, timeout_s=self._timeout_s
                )
            except OncelogError as exc:
                listed = dict.fromkeys(tps, exc)
            for tp, outcome in listed.items():
                if isinstance(outcome, OncelogError):
                    self._routes.failed(outcome)
                answers[tp] = _offset_answer(tp, outcome)

        await asyncio.gather(*(ask(address, tps) for address, tps in by_leader.items()))
        for tp, exc in errors.items():
            answers[tp] = _offset_answer(tp, exc)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp in order:
            by_topic[tp.topic].append(answers[tp])
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": parts} for n, parts in by_topic.items()]}


def _uuid(value: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        return ZERO_UUID


def _unknown_topic(name: str) -> dict[str, Any]:
    return {"error_code": ErrorCode.unknown_topic_or_partition, "name": name, "topic_id": ZERO_UUID, "partitions": []}


def _fetch_error(tp: TopicPartition, error: OncelogError | None) -> dict[str, Any]:
    return {
        "partition_index": tp.partition,
        "error_code": _error(error),
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None,
        "preferred_read_replica": -1,
        "records": b"",
    }


def _offset_answer(tp: TopicPartition, outcome: Any) -> dict[str, Any]:
    if isinstance(outcome, OncelogError):
        return {"partition_index": tp.partition, "error_code": _error(outcome), "timestamp": -1, "offset": -1}
    return {
        "partition_index": tp.partition,
        "error_code": ErrorCode.none,
        "timestamp": outcome.timestamp_ms,
        "offset": outcome.offset,
        "leader_epoch": outcome.leader_epoch,
    }
