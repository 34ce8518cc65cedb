"""TransactionCoordinatorServicer: protobuf <-> :class:`~.coordinator.TransactionCoordinator`.

Besides translating, it runs the checks Kafka's ``KafkaApis`` makes before the coordinator sees a request:
the size of the transactional id, and that every partition added to a transaction exists
(UNKNOWN_TOPIC_OR_PARTITION, nothing added, design/kafka-semantics.md §2.4). :class:`CatalogLookups` answers those from
the catalog.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from oncelog.api.common import v1 as common_pb
from oncelog.api.txn import v1 as pb
from oncelog.catalog.store import CatalogStore
from oncelog.catalog.topics import shard_for
from oncelog.errors import InvalidRequest, UnknownTopicOrPartition
from oncelog.vocabulary import ProducerIdAndEpoch, Role, TopicPartition

from .coordinator import TransactionCoordinator
from .prepared import PreparedToken
from .state import TransactionState
from .state_manager import TransactionDescription
from .transaction_log import MAX_TRANSACTIONAL_ID_BYTES

_STATE_PREFIX = "TRANSACTION_STATE_"
_REPLY_MARGIN_MS = 50
"""Part of the caller's deadline kept back from a parked wait for sending the answer."""


class CatalogLookups:
    """Catalog facts the servicer needs: which partitions exist, who coordinates a group's offsets.

    Partition counts are cached once seen (partitions are never removed from a live topic); a topic not
    found is looked up again on every request, so one created a moment ago is accepted.
    """

    def __init__(self, catalog: CatalogStore, clock: Callable[[], int]) -> None:
        self._catalog = catalog
        self._clock = clock
        self._partition_counts: dict[str, int] = {}
        self._group_shards: int | None = None

    async def check_partitions_exist(self, partitions: Collection[TopicPartition]) -> None:
        """Raise UnknownTopicOrPartition naming every partition that does not exist."""
        unknown = [tp for tp in partitions if not 0 <= tp[1] < self._partition_counts.get(tp[0], 0)]
        if not unknown:
            return
        topics = sorted({topic for topic, _ in unknown})
        found = await asyncio.to_thread(self._describe, topics)
        self._partition_counts.update(found)
        missing = sorted(tp for tp in partitions if not 0 <= tp[1] < self._partition_counts.get(tp[0], 0))
        if missing:
            names = ", ".join(f"{topic}-{partition}" for topic, partition in missing)
            raise UnknownTopicOrPartition(f"unknown partition(s) {names}; nothing was added to the transaction")

    def _describe(self, topics: list[str]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for topic in topics:
            try:
                records = self._catalog.describe_topics([topic])
            except UnknownTopicOrPartition:
                continue
            counts.update({r.name: len(r.partitions) for r in records})
        return counts

    async def group_coordinator_address(self, group: str) -> str:
        """Address of the group-offsets node owning ``group``'s shard, or "" when none owns it right now."""

        def lookup() -> str:
            if self._group_shards is None:  # fixed when the cluster was created (design/architecture.md §2.1)
                self._group_shards = self._catalog.cluster_info().group_offsets_shards
            lease = self._catalog.shard_lease(Role.GROUP_OFFSETS, shard_for(group, self._group_shards))
            now = self._clock()
            if lease is None or lease.owner_node_id is None or lease.lease_expires_at_ms <= now:
                return ""
            nodes = {n.node_id: n.address for n in self._catalog.list_nodes(now, role=Role.GROUP_OFFSETS)}
            return nodes.get(lease.owner_node_id, "")

        return await asyncio.to_thread(lookup)


class TransactionCoordinatorServicer(pb.TransactionCoordinatorServiceServicer):
    """Serve the seven TransactionCoordinatorService RPCs."""

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        lookups: CatalogLookups,
        *,
        node_id: str,
        shard_for: Callable[[str], int],
    ) -> None:
        self._coordinator = coordinator
        self._lookups = lookups
        self._node_id = node_id
        self._shard_for = shard_for

    async def InitProducerId(self, request: pb.InitProducerIdRequest, context: object) -> pb.InitProducerIdResponse:
        _check_transactional_id(request.transactional_id)
        # An empty id is Kafka's null transactional.id: an idempotent-only producer asking for a fresh
        # producer id at epoch 0. No state is kept for it, so any coordinator replica may answer.
        transactional_id = request.transactional_id or None
        expected_pid = expected_epoch = None
        if request.HasField("producer"):
            if request.producer.producer_id >= 0:
                expected_pid = request.producer.producer_id
            if request.producer.producer_epoch >= 0:
                expected_epoch = request.producer.producer_epoch
        identity = await self._coordinator.init_producer_id(
            transactional_id,
            request.transaction_timeout_ms,
            expected_pid,
            expected_epoch,
            max_wait_ms=_wait_budget_ms(context),
            keep_prepared=request.keep_prepared,
        )
        response = pb.InitProducerIdResponse(producer=_identity_pb(identity))
        if request.keep_prepared and transactional_id is not None:
            token = self._coordinator.prepared_token(transactional_id, identity)
            if token is not None:
                response.prepared_transaction.CopyFrom(_token_pb(token))
        return response

    async def AddPartitionsToTxn(
        self, request: pb.AddPartitionsToTxnRequest, context: object
    ) -> pb.AddPartitionsToTxnResponse:
        _check_transactional_id(request.transactional_id)
        producer = _required_producer(request)
        partitions = [TopicPartition(tp.topic, tp.partition) for tp in request.partitions]
        if not partitions:
            raise InvalidRequest("AddPartitionsToTxn needs at least one partition")
        await self._lookups.check_partitions_exist(partitions)
        await self._coordinator.add_partitions(
            request.transactional_id,
            producer.producer_id,
            producer.producer_epoch,
            partitions,
            groups=request.group_ids,
            max_wait_ms=_wait_budget_ms(context),
        )
        return pb.AddPartitionsToTxnResponse(partitions=request.partitions)

    async def AddOffsetsToTxn(self, request: pb.AddOffsetsToTxnRequest, context: object) -> pb.AddOffsetsToTxnResponse:
        _check_transactional_id(request.transactional_id)
        producer = _required_producer(request)
        # the answer names the group's owner: look it up in the catalog while the transaction row is written
        address = asyncio.ensure_future(self._lookups.group_coordinator_address(request.group_id))
        try:
            await self._coordinator.add_offsets(
                request.transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                request.group_id,
                max_wait_ms=_wait_budget_ms(context),
            )
        except BaseException:
            address.cancel()
            raise
        return pb.AddOffsetsToTxnResponse(group_coordinator_address=await address)

    async def EndTxn(self, request: pb.EndTxnRequest, context: object) -> pb.EndTxnResponse:
        _check_transactional_id(request.transactional_id)
        producer = _required_producer(request)
        commit = _commit_of(request.result)
        if request.wait_for_completion:
            outcome = await self._coordinator.end_txn_and_wait(
                request.transactional_id,
                producer.producer_id,
                producer.producer_epoch,
                commit,
                max_wait_ms=_wait_budget_ms(context),
            )
            return pb.EndTxnResponse(producer=_identity_pb(outcome.producer), completed=outcome.completed)
        identity = await self._coordinator.end_txn(
            request.transactional_id, producer.producer_id, producer.producer_epoch, commit
        )
        return pb.EndTxnResponse(producer=_identity_pb(identity))

    async def PrepareTransaction(
        self, request: pb.PrepareTransactionRequest, context: object
    ) -> pb.PrepareTransactionResponse:
        _check_transactional_id(request.transactional_id)
        producer = _required_producer(request)
        token = await self._coordinator.prepare_transaction(
            request.transactional_id, producer.producer_id, producer.producer_epoch, request.check_back_address
        )
        return pb.PrepareTransactionResponse(prepared_transaction=_token_pb(token))

    async def CompleteTransaction(
        self, request: pb.CompleteTransactionRequest, context: object
    ) -> pb.CompleteTransactionResponse:
        _check_transactional_id(request.transactional_id)
        producer = _required_producer(request)
        commit = _commit_of(request.result)
        if not request.HasField("prepared_transaction"):
            raise InvalidRequest("prepared_transaction (the token PrepareTransaction returned) is required")
        token = request.prepared_transaction
        if token.transactional_id != request.transactional_id:
            raise InvalidRequest(
                f"the token names transactional id {token.transactional_id!r}, the request "
                f"{request.transactional_id!r}; complete a token with a producer of its own transactional id"
            )
        outcome = await self._coordinator.end_txn_and_wait(
            request.transactional_id,
            producer.producer_id,
            producer.producer_epoch,
            commit,
            max_wait_ms=_wait_budget_ms(context) if request.wait_for_completion else 0,
            token=(token.producer_id, token.producer_epoch),
        )
        return pb.CompleteTransactionResponse(producer=_identity_pb(outcome.producer), completed=outcome.completed)

    async def DescribeTransactions(
        self, request: pb.DescribeTransactionsRequest, context: object
    ) -> pb.DescribeTransactionsResponse:
        for transactional_id in request.transactional_ids:
            _check_transactional_id(transactional_id)
        found = self._coordinator.describe(request.transactional_ids)
        descriptions = []
        for transactional_id in request.transactional_ids:
            answer = found[transactional_id]
            if not isinstance(answer, TransactionDescription):
                raise answer
            descriptions.append(self._description_pb(answer))
        return pb.DescribeTransactionsResponse(transactions=descriptions)

    async def ListTransactions(
        self, request: pb.ListTransactionsRequest, context: object
    ) -> pb.ListTransactionsResponse:
        if request.older_than_ms < 0:
            raise InvalidRequest(f"older_than_ms must not be negative, got {request.older_than_ms}")
        listed = self._coordinator.list_transactions(
            states={_state_of(s) for s in request.states},
            producer_ids=set(request.producer_ids),
            older_than_ms=request.older_than_ms or None,
        )
        return pb.ListTransactionsResponse(
            transactions=[
                pb.TransactionListing(
                    transactional_id=d.transactional_id,
                    producer_id=d.producer_id,
                    state=_state_pb(d.state),
                    transaction_start_time_ms=d.txn_start_timestamp,
                    prepared_time_ms=d.prepared_at,
                )
                for d in listed
            ]
        )

    async def AbortTransaction(
        self, request: pb.AbortTransactionRequest, context: object
    ) -> pb.AbortTransactionResponse:
        _check_transactional_id(request.transactional_id)
        description = await self._coordinator.abort_transaction(request.transactional_id)
        return pb.AbortTransactionResponse(
            producer=common_pb.ProducerIdentity(
                producer_id=description.producer_id, producer_epoch=description.producer_epoch
            )
        )

    async def SkipTxnMarkers(self, request: pb.SkipTxnMarkersRequest, context: object) -> pb.SkipTxnMarkersResponse:
        _check_transactional_id(request.transactional_id)
        partitions, groups = await self._coordinator.skip_markers(
            request.transactional_id,
            [TopicPartition(tp.topic, tp.partition) for tp in request.partitions],
            list(request.groups),
        )
        return pb.SkipTxnMarkersResponse(
            partitions=[common_pb.TopicPartition(topic=t, partition=p) for t, p in sorted(partitions)],
            groups=sorted(groups),
        )

    def _description_pb(self, d: TransactionDescription) -> pb.TransactionDescription:
        return pb.TransactionDescription(
            transactional_id=d.transactional_id,
            state=_state_pb(d.state),
            producer_id=d.producer_id,
            producer_epoch=d.producer_epoch,
            transaction_timeout_ms=d.txn_timeout_ms,
            transaction_start_time_ms=d.txn_start_timestamp,
            partitions=[common_pb.TopicPartition(topic=t, partition=p) for t, p in sorted(d.partitions)],
            groups=sorted(d.groups),
            coordinator_node_id=self._node_id,
            coordinator_epoch=self._coordinator.owned_shards.get(self._shard_for(d.transactional_id), -1),
            last_update_time_ms=d.txn_last_update_timestamp,
            prepared_time_ms=d.prepared_at,
            check_back_address=d.check_back_address,
        )


def _wait_budget_ms(context: object) -> int | None:
    """How long a parked request may wait so that its CONCURRENT_TRANSACTIONS answer beats the caller's deadline.

    None when the call has no deadline (the coordinator's ``completion_wait_ms`` alone bounds the wait).
    """
    time_remaining = getattr(context, "time_remaining", None)
    remaining_s = time_remaining() if callable(time_remaining) else None
    if remaining_s is None:
        return None
    remaining_ms = int(remaining_s * 1000)
    # a tenth of the deadline for a long one: on a busy machine the answer needs more than 50 ms to arrive
    return max(0, remaining_ms - max(_REPLY_MARGIN_MS, remaining_ms // 10))


def _check_transactional_id(transactional_id: str) -> None:
    # Emptiness is the coordinator's check (INVALID_REQUEST); the size limit is the table's.
    size = len(transactional_id.encode())
    if size > MAX_TRANSACTIONAL_ID_BYTES:
        raise InvalidRequest(
            f"transactional id is {size} bytes long; the limit is {MAX_TRANSACTIONAL_ID_BYTES} bytes (UTF-8)"
        )


def _required_producer(
    request: pb.AddPartitionsToTxnRequest
    | pb.AddOffsetsToTxnRequest
    | pb.EndTxnRequest
    | pb.PrepareTransactionRequest
    | pb.CompleteTransactionRequest,
) -> common_pb.ProducerIdentity:
    if not request.HasField("producer"):
        raise InvalidRequest("producer (producer id and epoch from InitProducerId) is required")
    return request.producer


def _commit_of(result: common_pb.TransactionResult.ValueType) -> bool:
    if result == common_pb.TRANSACTION_RESULT_COMMIT:
        return True
    if result == common_pb.TRANSACTION_RESULT_ABORT:
        return False
    raise InvalidRequest("result must be TRANSACTION_RESULT_COMMIT or TRANSACTION_RESULT_ABORT")


def _token_pb(token: PreparedToken) -> pb.PreparedTransaction:
    return pb.PreparedTransaction(
        transactional_id=token.transactional_id, producer_id=token.producer_id, producer_epoch=token.producer_epoch
    )


def _identity_pb(identity: ProducerIdAndEpoch) -> common_pb.ProducerIdentity:
    return common_pb.ProducerIdentity(producer_id=identity.producer_id, producer_epoch=identity.epoch)


def _state_pb(state: TransactionState) -> pb.TransactionState.ValueType:
    return pb.TransactionState.Value(_STATE_PREFIX + state.name)


def _state_of(value: pb.TransactionState.ValueType) -> TransactionState:
    try:
        return TransactionState[pb.TransactionState.Name(value)[len(_STATE_PREFIX) :]]
    except (ValueError, KeyError):
        raise InvalidRequest(f"unknown transaction state {value} in the filter") from None


__all__ = ["CatalogLookups", "TransactionCoordinatorServicer"]
