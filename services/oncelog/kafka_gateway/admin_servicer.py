"""Kafka's admin APIs on oncelog: the transaction ones of KIP-664 (what ``kafka-transactions.sh`` calls:
ListTransactions, DescribeTransactions, DescribeProducers, and WriteTxnMarkers for ``abort``), DescribeConfigs and
IncrementalAlterConfigs for topics, and CreatePartitions.

ListTransactions asks every transaction coordinator (each answers for the shards it owns) and merges; the others go
to the coordinator of the id or the leader of the partition. State names are Kafka's (``Ongoing``,
``PrepareCommit``, ...); identities are the coordinator's (``producer_epochs.py``: a transaction-version-1 client's
own epoch may be lower).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from oncelog.catalog.topics import KAFKA_CONFIG_NAMES
from oncelog.client.services import (
    ClusterClient,
    PartitionStorageClient,
    TransactionCoordinatorClient,
    fencing_abort_marker,
)
from oncelog.errors import InvalidRequest, OncelogError
from oncelog.kafka_gateway.error_codes import error_code_of
from oncelog.kafka_gateway.protocol import Request
from oncelog.kafka_gateway.routing import ClusterRoutes
from oncelog.vocabulary import CoordinatorKind, Role, TopicPartition


def kafka_state(name: str) -> str:
    """Kafka's name of a transaction state given oncelog's (``prepare_commit`` -> ``PrepareCommit``)."""
    return "".join(part.capitalize() for part in name.split("_"))


def oncelog_state(name: str) -> str:
    """oncelog's name of a transaction state given Kafka's (``PrepareCommit`` -> ``prepare_commit``)."""
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


KAFKA_STATES = frozenset(
    {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead"}
    | {"PrepareEpochFence", "Prepared"}  # Prepared: a prepared (two-phase) transaction; older clients show it Unknown
)
"""The state names ListTransactions filters on and the admin APIs answer with."""


_TOPIC_RESOURCE = 2
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations; APPEND (2) and SUBTRACT (3) concern list settings
_TOPIC_SOURCE, _DEFAULT_SOURCE = 1, 5  # Kafka's DYNAMIC_TOPIC_CONFIG and DEFAULT_CONFIG
_KAFKA_NAME = {ours: kafka for kafka, ours in KAFKA_CONFIG_NAMES.items()}


class AdminServicer:
    """The handlers of the transaction admin APIs (module docstring)."""

    def __init__(
        self,
        *,
        routes: ClusterRoutes,
        cluster: ClusterClient,
        txn: TransactionCoordinatorClient,
        storage: PartitionStorageClient,
        timeout_s: float,
    ) -> None:
        self._routes = routes
        self._cluster = cluster
        self._txn = txn
        self._storage = storage
        self._timeout_s = timeout_s

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any] | None]]]:
        """API key -> handler."""
        return {
            66: self.list_transactions,
            65: self.describe_transactions,
            61: self.describe_producers,
            32: self.describe_configs,
            27: self.write_txn_markers,
            37: self.create_partitions,
            44: self.incremental_alter_configs,
        }

    async def describe_configs(self, request: Request) -> dict[str, Any]:
        results = []
        for resource in request.body.resources:
            entry: dict[str, Any] = {
                "resource_type": resource.resource_type, "resource_name": resource.resource_name, "configs": [],
                "error_message": None,
            }  # fmt: skip
            if resource.resource_type != _TOPIC_RESOURCE:
                message = "the kafka-gateway describes topic configs only (resource type 2)"
                results.append({**entry, "error_code": ErrorCode.invalid_request, "error_message": message})
                continue
            name = resource.resource_name

            def describe(address: str, name: str = name) -> Awaitable[Any]:
                return self._cluster.describe_configs(address, [name], timeout_s=self._timeout_s)

            try:
                entries = (await self._routes.ask(describe)).get(name, [])
            except OncelogError as exc:
                results.append({**entry, "error_code": error_code_of(exc), "error_message": exc.message})
                continue
            keys = set(resource.configuration_keys or ())
            configs = []
            for e in entries:
                kafka_name = _KAFKA_NAME.get(e.name, e.name)
                if keys and kafka_name not in keys and e.name not in keys:
                    continue
                configs.append(
                    {"name": kafka_name, "value": e.value, "read_only": False, "is_default": e.source == "default",
                     "config_source": _DEFAULT_SOURCE if e.source == "default" else _TOPIC_SOURCE,
                     "is_sensitive": False, "synonyms": [], "config_type": 0, "documentation": None}
                )  # fmt: skip
            results.append({**entry, "error_code": ErrorCode.none, "configs": configs})
        return {"throttle_time": 0, "results": results}

    async def incremental_alter_configs(self, request: Request) -> dict[str, Any]:
        """SET and DELETE topic settings (``kafka-configs.sh --alter``), each topic all or nothing."""
        responses = []
        for resource in request.body.resources:
            entry = {"resource_type": resource.resource_type, "resource_name": resource.resource_name}
            if resource.resource_type != _TOPIC_RESOURCE:
                message = "the kafka-gateway alters topic configs only (resource type 2)"
                responses.append({**entry, "error_code": ErrorCode.invalid_request, "error_message": message})
                continue
            ops: dict[str, str | None] = {}
            bad = [c.name for c in resource.configs if c.config_operation not in (_SET, _DELETE)]
            if bad:
                message = f"{', '.join(bad)}: oncelog's topic settings are not lists; use SET or DELETE"
                responses.append({**entry, "error_code": ErrorCode.invalid_config, "error_message": message})
                continue
            for c in resource.configs:
                ops[c.name] = None if c.config_operation == _DELETE else (c.value or "")

            def alter(
                address: str, name: str = resource.resource_name, ops: dict[str, str | None] = ops
            ) -> Awaitable[Any]:
                return self._cluster.incremental_alter_configs(
                    address, {name: ops}, validate_only=request.body.validate_only, timeout_s=self._timeout_s
                )

            try:
                await self._routes.ask(alter)
            except OncelogError as exc:
                responses.append({**entry, "error_code": error_code_of(exc), "error_message": exc.message})
                continue
            responses.append({**entry, "error_code": ErrorCode.none, "error_message": None})
        return {"throttle_time": 0, "responses": responses}

    async def create_partitions(self, request: Request) -> dict[str, Any]:
        """Grow topics to a new partition count (``kafka-topics.sh --alter --partitions``); oncelog places them."""
        body = request.body
        results = []
        for topic in body.topics:
            if topic.assignments:
                results.append(
                    {"name": topic.name, "error_code": ErrorCode.invalid_request,
                     "error_message": "replica assignments are chosen by oncelog; send the count alone"}
                )  # fmt: skip
                continue

            def grow(address: str, name: str = topic.name, count: int = topic.count) -> Awaitable[Any]:
                return self._cluster.create_partitions(
                    address, {name: count}, validate_only=body.validate_only, timeout_s=self._timeout_s
                )

            try:
                await self._routes.ask(grow)
            except OncelogError as exc:
                results.append({"name": topic.name, "error_code": error_code_of(exc), "error_message": exc.message})
                continue
            results.append({"name": topic.name, "error_code": ErrorCode.none, "error_message": None})
        self._routes.forget_topics()
        return {"throttle_time": 0, "results": results}

    async def list_transactions(self, request: Request) -> dict[str, Any]:
        body = request.body
        unknown = [s for s in body.state_filters if s not in KAFKA_STATES]
        states = [oncelog_state(s) for s in body.state_filters if s in KAFKA_STATES]
        answer: dict[str, Any] = {"throttle_time": 0, "unknown_state_filters": unknown, "transaction_states": []}
        if body.state_filters and not states:
            return {**answer, "error_code": ErrorCode.none}
        try:
            description = await self._routes.ask(lambda a: self._cluster.describe_cluster(a))
            listings = await asyncio.gather(
                *(
                    self._txn.list_transactions(
                        address, states=states, producer_ids=list(body.producer_id_filters), timeout_s=self._timeout_s
                    )
                    for address in description.addresses(Role.TXN_COORDINATOR)
                )
            )
        except OncelogError as exc:
            return {**answer, "error_code": error_code_of(exc)}
        found = {t.transactional_id: t for listing in listings for t in listing}
        answer["transaction_states"] = [
            {"transactional_id": t.transactional_id, "producer_id": t.producer_id,
             "transaction_state": kafka_state(t.state)}
            for t in sorted(found.values(), key=lambda t: t.transactional_id)
        ]  # fmt: skip
        return {**answer, "error_code": ErrorCode.none}

    async def describe_transactions(self, request: Request) -> dict[str, Any]:
        states = []
        for tid in request.body.transactional_ids:
            entry: dict[str, Any] = {
                "transactional_id": tid, "transaction_state": "", "transaction_timeout": 0,
                "transaction_start_time": -1, "producer_id": -1, "producer_epoch": -1, "topics": [],
            }  # fmt: skip
            try:
                address = await self._routes.coordinator(tid, CoordinatorKind.TRANSACTION)
                (described,) = await self._txn.describe_transactions(address, [tid], timeout_s=self._timeout_s)
            except OncelogError as exc:
                self._routes.failed(exc, key=(tid, CoordinatorKind.TRANSACTION))
                states.append({**entry, "error_code": error_code_of(exc)})
                continue
            by_topic: dict[str, list[int]] = defaultdict(list)
            for tp in described.partitions:
                by_topic[tp.topic].append(tp.partition)
            states.append(
                {
                    **entry,
                    "error_code": ErrorCode.none,
                    "transaction_state": kafka_state(described.state),
                    "transaction_timeout": described.transaction_timeout_ms,
                    "transaction_start_time": described.transaction_start_time_ms,
                    "producer_id": described.producer_id,
                    "producer_epoch": described.producer_epoch,
                    "topics": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())],
                }
            )
        return {"throttle_time": 0, "transaction_states": states}

    async def describe_producers(self, request: Request) -> dict[str, Any]:
        wanted = [TopicPartition(t.name, p) for t in request.body.topics for p in t.partition_indexes]
        answers: dict[TopicPartition, dict[str, Any]] = {}
        for tp in wanted:
            try:
                leader = await self._routes.leader(tp)
                described = (await self._storage.describe_producers(leader, [tp], timeout_s=self._timeout_s))[tp]
            except (OncelogError, KeyError) as exc:
                described = exc if isinstance(exc, OncelogError) else OncelogError(f"{tp} was not answered")
            if isinstance(described, OncelogError):
                self._routes.failed(described)
                answers[tp] = {"partition_index": tp.partition, "error_code": error_code_of(described),
                               "error_message": described.message, "active_producers": []}  # fmt: skip
                continue
            answers[tp] = {
                "partition_index": tp.partition,
                "error_code": ErrorCode.none,
                "error_message": None,
                "active_producers": [
                    {
                        "producer_id": p.producer_id,
                        "producer_epoch": p.producer_epoch,
                        "last_sequence": p.last_sequence,
                        "last_timestamp": p.last_timestamp_ms,
                        "coordinator_epoch": p.coordinator_epoch,
                        "current_txn_start_offset": (
                            -1 if p.current_transaction_start_offset is None else p.current_transaction_start_offset
                        ),
                    }
                    for p in described
                ],
            }
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp in wanted:
            by_topic[tp.topic].append(answers[tp])
        return {"throttle_time": 0, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}

    async def write_txn_markers(self, request: Request) -> dict[str, Any]:
        """An ABORT marker per listed partition: what ``kafka-transactions.sh abort`` sends (KIP-664's
        ``abortTransaction``) for a hanging transaction, with the producer and coordinator epochs it read from
        DescribeProducers.

        As ``AdminClient.abort_transaction_on_partition`` does, the marker carries the next producer epoch, which
        the partition accepts and which fences that producer instance there (KIP-890). Kafka's coordinators are the
        only other senders of this request and the gateway has none behind it, so a COMMIT marker is refused
        (INVALID_REQUEST).
        """
        answers = []
        for m in request.body.markers:
            tps = [TopicPartition(t.name, p) for t in m.topics for p in t.partition_indexes]
            errors: dict[TopicPartition, OncelogError | None] = {}
            if m.transaction_result:
                refused = InvalidRequest("the kafka-gateway writes ABORT markers only (kafka-transactions.sh abort)")
                errors = dict.fromkeys(tps, refused)
            else:
                for tp in tps:
                    errors[tp] = await self._abort_on(tp, m.producer_id, m.producer_epoch, m.coordinator_epoch)
            by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
            for tp in tps:
                by_topic[tp.topic].append({"partition_index": tp.partition, "error_code": error_code_of(errors[tp])})
            answers.append(
                {"producer_id": m.producer_id, "topics": [{"name": n, "partitions": ps} for n, ps in by_topic.items()]}
            )
        return {"markers": answers}

    async def _abort_on(
        self, tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
    ) -> OncelogError | None:
        try:
            marker = fencing_abort_marker(tp, producer_id, producer_epoch, coordinator_epoch)  # refuses epoch 32767
            leader = await self._routes.leader(tp)
            results = await self._storage.write_txn_markers(leader, [marker], timeout_s=self._timeout_s)
        except OncelogError as exc:
            self._routes.failed(exc)
            return exc
        for result in results:
            failure = result.partition_errors.get(tp)
            if failure is not None:
                self._routes.failed(failure)
                return failure
        return None
