"""Kafka's producer-id, transaction and offset APIs on oncelog: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, TxnOffsetCommit, OffsetCommit and OffsetFetch.

The transaction coordinator and group-offsets are reached through the typed clients at the address ClusterService
names for the key; identities are translated for Kafka's transaction-version-1 clients (``producer_epochs.py``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from oncelog.client.records import OffsetAndMetadata
from oncelog.client.services import GroupMember, GroupOffsetsClient, TransactionCoordinatorClient
from oncelog.errors import OncelogError, Reason
from oncelog.kafka_gateway.classic_groups import ClassicMembers
from oncelog.kafka_gateway.error_codes import error_code_of
from oncelog.kafka_gateway.producer_epochs import TransactionalIdentities
from oncelog.kafka_gateway.protocol import Request
from oncelog.kafka_gateway.routing import ClusterRoutes
from oncelog.vocabulary import ControlType, CoordinatorKind, ProducerIdAndEpoch, TopicPartition

_TXN = CoordinatorKind.TRANSACTION
_GROUP = CoordinatorKind.GROUP
_FENCED = frozenset({Reason.PRODUCER_FENCED, Reason.INVALID_PRODUCER_EPOCH, Reason.INVALID_PRODUCER_ID_MAPPING})


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


class TxnServicer:
    """The handlers of the producer-id, transaction and offset APIs (module docstring)."""

    def __init__(
        self,
        *,
        routes: ClusterRoutes,
        txn: TransactionCoordinatorClient,
        groups: GroupOffsetsClient,
        identities: TransactionalIdentities,
        members: ClassicMembers,
        timeout_s: float,
    ) -> None:
        self._routes = routes
        self._txn = txn
        self._groups = groups
        self._identities = identities
        self._members = members
        self._timeout_s = timeout_s

    def _member(
        self, group_id: str, generation: int, member_id: str, instance_id: str | None
    ) -> GroupMember | ErrorCode | None:
        """The member a commit names, with a classic member's generation turned into its coordinator epoch
        (``classic_groups.py``); ILLEGAL_GENERATION for a classic member's stale generation; None for no member."""
        if generation < 0 and not member_id:
            return None
        epoch = self._members.commit_generation(group_id, member_id, generation)
        if epoch == -1:
            return ErrorCode.illegal_generation
        return GroupMember(generation if epoch is None else epoch, member_id, instance_id or "")

    def handlers(self) -> dict[int, Callable[[Request], Awaitable[dict[str, Any] | None]]]:
        """API key -> handler."""
        return {
            22: self.init_producer_id,
            24: self.add_partitions_to_txn,
            25: self.add_offsets_to_txn,
            26: self.end_txn,
            28: self.txn_offset_commit,
            8: self.offset_commit,
            9: self.offset_fetch,
        }

    async def _coordinated(self, key: str, kind: CoordinatorKind, call: Callable[[str], Awaitable[Any]]) -> Any:
        """``call(address)`` on the coordinator of ``key``; a routing failure forgets the cached address."""
        try:
            return await call(await self._routes.coordinator(key, kind))
        except OncelogError as exc:
            self._routes.failed(exc, key=(key, kind))
            raise

    def _fenced(self, transactional_id: str, error: OncelogError) -> None:
        if error.reason in _FENCED:
            self._identities.forget(transactional_id)

    # ------------------------------------------------------------------------------------ producer ids

    async def init_producer_id(self, request: Request) -> dict[str, Any]:
        body = request.body
        tid = body.transactional_id or ""
        named = ProducerIdAndEpoch(getattr(body, "producer_id", -1), getattr(body, "producer_epoch", -1))
        current = self._identities.to_server(tid, named) if tid and named.producer_id >= 0 else None
        timeout_ms = _ms(body.transaction_timeout)
        try:
            if tid:
                identity = await self._coordinated(
                    tid,
                    _TXN,
                    lambda a: self._txn.init_producer_id(
                        a, tid, transaction_timeout_ms=timeout_ms, current=current, timeout_s=self._timeout_s
                    ),
                )
                self._identities.initialized(tid, identity)
            else:
                address = await self._routes.any_txn_coordinator()
                try:
                    identity = await self._txn.init_producer_id(address, "", timeout_s=self._timeout_s)
                except OncelogError as exc:
                    self._routes.failed(exc)
                    raise
        except OncelogError as exc:
            return {"throttle_time": 0, "error_code": error_code_of(exc), "producer_id": -1, "producer_epoch": -1}
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "producer_id": identity.producer_id,
            "producer_epoch": identity.epoch,
        }

    # ------------------------------------------------------------------------------------ transactions

    async def add_partitions_to_txn(self, request: Request) -> dict[str, Any]:
        body = request.body
        tid = body.v3_and_below_transactional_id
        client = ProducerIdAndEpoch(body.v3_and_below_producer_id, body.v3_and_below_producer_epoch)
        tps = [TopicPartition(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]
        server = self._identities.to_server(tid, client)
        code = ErrorCode.none
        try:
            await self._coordinated(
                tid, _TXN, lambda a: self._txn.add_partitions_to_txn(a, tid, server, tps, timeout_s=self._timeout_s)
            )
            self._identities.began(tid, client)
        except OncelogError as exc:
            self._fenced(tid, exc)
            code = error_code_of(exc)
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for tp in tps:
            by_topic[tp.topic].append({"partition_index": tp.partition, "partition_error_code": code})
        return {
            "throttle_time": 0,
            "results_by_topic_v3_and_below": [
                {"name": name, "results_by_partition": parts} for name, parts in by_topic.items()
            ],
        }

    async def add_offsets_to_txn(self, request: Request) -> dict[str, Any]:
        body = request.body
        tid = body.transactional_id
        client = ProducerIdAndEpoch(body.producer_id, body.producer_epoch)
        server = self._identities.to_server(tid, client)
        try:
            await self._coordinated(
                tid,
                _TXN,
                lambda a: self._txn.add_offsets_to_txn(a, tid, server, body.group_id, timeout_s=self._timeout_s),
            )
            self._identities.began(tid, client)
        except OncelogError as exc:
            self._fenced(tid, exc)
            return {"throttle_time": 0, "error_code": error_code_of(exc)}
        return {"throttle_time": 0, "error_code": ErrorCode.none}

    async def end_txn(self, request: Request) -> dict[str, Any]:
        body = request.body
        tid = body.transactional_id
        client = ProducerIdAndEpoch(body.producer_id, body.producer_epoch)
        server = self._identities.end_identity(tid, client)
        result = ControlType.COMMIT if body.committed else ControlType.ABORT
        try:
            ended = await self._coordinated(
                tid, _TXN, lambda a: self._txn.end_txn(a, tid, server, result, timeout_s=self._timeout_s)
            )
        except OncelogError as exc:
            self._fenced(tid, exc)
            return {"throttle_time": 0, "error_code": error_code_of(exc)}
        self._identities.ended(tid, client, server, ended.producer)
        return {"throttle_time": 0, "error_code": ErrorCode.none}

    async def txn_offset_commit(self, request: Request) -> dict[str, Any]:
        body = request.body
        tid = body.transactional_id
        client = ProducerIdAndEpoch(body.producer_id, body.producer_epoch)
        server = self._identities.to_server(tid, client)
        offsets = _offsets(body.topics)
        member = self._member(
            body.group_id,
            getattr(body, "generation_id", -1),
            getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None),
        )
        if isinstance(member, ErrorCode):
            return {"throttle_time": 0, "topics": _per_partition(offsets, lambda tp: {"error_code": member})}
        code = ErrorCode.none
        try:
            await self._coordinated(
                body.group_id,
                _GROUP,
                lambda a: self._groups.txn_offset_commit(
                    a, tid, server, body.group_id, offsets, member=member, timeout_s=self._timeout_s
                ),
            )
        except OncelogError as exc:
            self._fenced(tid, exc)
            code = error_code_of(exc)
        return {"throttle_time": 0, "topics": _per_partition(offsets, lambda tp: {"error_code": code})}

    # ------------------------------------------------------------------------------------ offsets

    async def offset_commit(self, request: Request) -> dict[str, Any]:
        body = request.body
        offsets = _offsets(body.topics)
        member = self._member(
            body.group_id,
            body.generation_id_or_member_epoch,
            body.member_id,
            getattr(body, "group_instance_id", None),
        )
        if isinstance(member, ErrorCode):
            return {"throttle_time": 0, "topics": _per_partition(offsets, lambda tp: {"error_code": member})}
        code = ErrorCode.none
        try:
            await self._coordinated(
                body.group_id,
                _GROUP,
                lambda a: self._groups.commit_offsets(
                    a, body.group_id, offsets, member=member, timeout_s=self._timeout_s
                ),
            )
        except OncelogError as exc:
            code = error_code_of(exc)
        return {"throttle_time": 0, "topics": _per_partition(offsets, lambda tp: {"error_code": code})}

    async def offset_fetch(self, request: Request) -> dict[str, Any]:
        body = request.body
        stable = getattr(body, "require_stable", False)
        if request.version >= 8:
            groups = [await self._fetch_group(g.group_id, g.topics, stable, top_level_error=True) for g in body.groups]
            return {"throttle_time": 0, "groups": groups}
        answer = await self._fetch_group(body.group_id, body.topics, stable, top_level_error=request.version >= 2)
        return {"throttle_time": 0, "topics": answer["topics"], "error_code": answer["error_code"]}

    async def _fetch_group(
        self, group_id: str, topics: Iterable[Any] | None, stable: bool, *, top_level_error: bool
    ) -> dict[str, Any]:
        wanted = [] if topics is None else [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
        try:
            committed = await self._coordinated(
                group_id,
                _GROUP,
                lambda a: self._groups.fetch_offsets(
                    a, group_id, wanted, require_stable=stable, timeout_s=self._timeout_s
                ),
            )
        except OncelogError as exc:
            # Kafka answers a pending transactional commit per partition, every other failure for the group
            per_partition = exc.reason is Reason.UNSTABLE_OFFSET_COMMIT or not top_level_error
            code = error_code_of(exc)
            none = {tp: None for tp in wanted}
            return {
                "group_id": group_id,
                "error_code": ErrorCode.none if per_partition else code,
                "topics": _per_partition(none, lambda tp: _committed(None, code if per_partition else ErrorCode.none)),
            }
        if wanted:
            committed = {tp: committed.get(tp) for tp in wanted}
        return {
            "group_id": group_id,
            "error_code": ErrorCode.none,
            "topics": _per_partition(committed, lambda tp: _committed(committed[tp], ErrorCode.none)),
        }


def _offsets(topics: Iterable[Any]) -> dict[TopicPartition, OffsetAndMetadata]:
    return {
        TopicPartition(t.name, p.partition_index): OffsetAndMetadata(
            p.committed_offset,
            p.committed_metadata or "",
            None if getattr(p, "committed_leader_epoch", -1) < 0 else p.committed_leader_epoch,
        )
        for t in topics
        for p in t.partitions
    }


def _committed(offset: OffsetAndMetadata | None, code: ErrorCode) -> dict[str, Any]:
    if offset is None:
        return {"committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": code}
    return {
        "committed_offset": offset.offset,
        "committed_leader_epoch": -1 if offset.leader_epoch is None else offset.leader_epoch,
        "metadata": offset.metadata,
        "error_code": code,
    }


def _per_partition(
    partitions: Iterable[TopicPartition], fields: Callable[[TopicPartition], dict[str, Any]]
) -> list[dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tp in sorted(partitions):
        by_topic[tp.topic].append({"partition_index": tp.partition, **fields(tp)})
    return [{"name": name, "partitions": parts} for name, parts in by_topic.items()]
