"""The producer's calls over gRPC: the :class:`~oncelog.client.sender.SenderTransport` and
:class:`~oncelog.client.transaction_manager.CoordinatorClient` the producer gives its sender and transaction
manager.

This is the only producer module that builds requests or reads answers of the generated API: domain types in
(:class:`~oncelog.client.records.TopicPartition`, :class:`~oncelog.client.sequences.ProducerIdAndEpoch`,
encoded batches), domain types out, failures as :class:`~oncelog.errors.OncelogError` with the server's reason.
Retries are not made here; the sender and the transaction manager decide them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import grpc

from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.metadata import ClusterMetadata
from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, TopicPartition
from oncelog.client.sender import PartitionResult, ProduceAnswer, ProduceEntry, ProduceSettings
from oncelog.client.transaction_manager import EndTxnResult
from oncelog.client.transport import Channels, call
from oncelog.rpc.errors import from_error_info, from_rpc_error
from oncelog.vocabulary import CoordinatorKind, ProducerIdAndEpoch, Role

__all__ = ["GrpcProduceStream", "GrpcProducerTransport"]


def _identity_pb(identity: ProducerIdAndEpoch) -> common_pb.ProducerIdentity:
    return common_pb.ProducerIdentity(producer_id=identity.producer_id, producer_epoch=identity.epoch)


def _identity(producer: common_pb.ProducerIdentity) -> ProducerIdAndEpoch:
    return ProducerIdAndEpoch(producer.producer_id, producer.producer_epoch)


def _offset_pb(tp: TopicPartition, om: OffsetAndMetadata) -> common_pb.PartitionOffset:
    return common_pb.PartitionOffset(
        topic_partition=common_pb.TopicPartition(topic=tp.topic, partition=tp.partition),
        offset=om.offset,
        leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
        metadata=om.metadata,
    )


class GrpcProduceStream:
    """One ProduceStream call; see :class:`~oncelog.client.sender.ProduceStream`."""

    def __init__(self, call_: Any, settings: ProduceSettings) -> None:
        self._call = call_
        self._transactional_id = settings.transactional_id
        self._acks = storage_pb.ACKS_ALL if settings.acks_all else storage_pb.ACKS_LEADER
        self._timeout_ms = settings.timeout_ms

    async def write(self, correlation_id: int, entries: Sequence[ProduceEntry]) -> None:
        request = storage_pb.ProduceRequest(
            transactional_id=self._transactional_id,
            acks=self._acks,
            timeout_ms=self._timeout_ms,
            partitions=[
                storage_pb.PartitionBatches(
                    topic_partition=common_pb.TopicPartition(topic=tp.topic, partition=tp.partition),
                    leader_epoch=leader_epoch,
                    records=payload,
                )
                for tp, leader_epoch, payload in entries
            ],
        )
        try:
            await self._call.write(storage_pb.ProduceStreamRequest(correlation_id=correlation_id, request=request))
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc

    async def read(self) -> ProduceAnswer | None:
        try:
            message = await self._call.read()
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from exc
        if message is grpc.aio.EOF:
            return None
        results = {
            TopicPartition(r.topic_partition.topic, r.topic_partition.partition): PartitionResult(
                r.base_offset,
                r.log_append_time_ms,
                r.duplicate,
                from_error_info(r.error) if r.HasField("error") else None,
            )
            for r in message.response.results
        }
        return ProduceAnswer(message.correlation_id, results)

    def cancel(self) -> None:
        self._call.cancel()


class GrpcProducerTransport:
    """The producer's calls to partition-storage, txn-coordinator and group-offsets over one client's channels.

    Args:
        channels: the client's channels.
        metadata: the client's metadata cache (coordinators and live nodes).
    """

    def __init__(self, channels: Channels, metadata: ClusterMetadata) -> None:
        self._channels = channels
        self._metadata = metadata

    # -------------------------------------------------------------------------------- partition-storage

    def open_produce_stream(self, address: str, settings: ProduceSettings) -> GrpcProduceStream:
        return GrpcProduceStream(self._channels.storage(address).ProduceStream(), settings)

    # -------------------------------------------------------------------------------- coordinators

    async def txn_coordinator_addresses(self) -> list[str]:
        cluster = await self._metadata.describe_cluster()
        return cluster.addresses(Role.TXN_COORDINATOR)

    async def find_coordinator(self, key: str, kind: CoordinatorKind) -> str:
        return await self._metadata.find_coordinator(key, kind)

    def invalidate_coordinator(self, key: str, kind: CoordinatorKind) -> None:
        self._metadata.invalidate_coordinator(key, kind)

    # -------------------------------------------------------------------------------- txn-coordinator

    async def init_producer_id(
        self,
        address: str,
        transactional_id: str,
        transaction_timeout_ms: int,
        *,
        expected: ProducerIdAndEpoch | None,
        timeout_s: float,
    ) -> ProducerIdAndEpoch:
        request = txn_pb.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms
        )
        if expected is not None:
            request.producer.CopyFrom(_identity_pb(expected))
        response = await call(self._channels.txn(address).InitProducerId, request, timeout_s=timeout_s)
        return _identity(response.producer)

    async def add_partitions_to_txn(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        partitions: Sequence[TopicPartition],
        *,
        timeout_s: float,
    ) -> None:
        request = txn_pb.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer=_identity_pb(identity),
            partitions=[common_pb.TopicPartition(topic=tp.topic, partition=tp.partition) for tp in partitions],
        )
        await call(self._channels.txn(address).AddPartitionsToTxn, request, timeout_s=timeout_s)

    async def add_offsets_to_txn(
        self, address: str, transactional_id: str, identity: ProducerIdAndEpoch, group_id: str, *, timeout_s: float
    ) -> str:
        request = txn_pb.AddOffsetsToTxnRequest(
            transactional_id=transactional_id, producer=_identity_pb(identity), group_id=group_id
        )
        response = await call(self._channels.txn(address).AddOffsetsToTxn, request, timeout_s=timeout_s)
        return response.group_coordinator_address

    async def end_txn(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        *,
        commit: bool,
        wait_for_completion: bool,
        timeout_s: float,
    ) -> EndTxnResult:
        request = txn_pb.EndTxnRequest(
            transactional_id=transactional_id,
            producer=_identity_pb(identity),
            result=common_pb.TRANSACTION_RESULT_COMMIT if commit else common_pb.TRANSACTION_RESULT_ABORT,
            wait_for_completion=wait_for_completion,
        )
        response = await call(self._channels.txn(address).EndTxn, request, timeout_s=timeout_s)
        return EndTxnResult(_identity(response.producer), response.completed)

    # -------------------------------------------------------------------------------- group-offsets

    async def txn_offset_commit(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        group: ConsumerGroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout_s: float,
    ) -> None:
        request = offsets_pb.TxnOffsetCommitRequest(
            transactional_id=transactional_id,
            producer=_identity_pb(identity),
            group_id=group.group_id,
            member=offsets_pb.GroupMember(
                generation_id=group.generation_id,
                member_id=group.member_id,
                group_instance_id=group.group_instance_id or "",
            ),
            offsets=[_offset_pb(tp, om) for tp, om in sorted(offsets.items())],
        )
        await call(self._channels.offsets(address).TxnOffsetCommit, request, timeout_s=timeout_s)
