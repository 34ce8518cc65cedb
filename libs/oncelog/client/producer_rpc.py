"""The producer's calls over gRPC: the :class:`~oncelog.client.sender.SenderTransport` and
:class:`~oncelog.client.transaction_manager.CoordinatorClient` the producer gives its sender and transaction
manager.

Every call goes through the typed clients of :mod:`oncelog.client.services`, the ProduceStream through
:meth:`~oncelog.client.services.PartitionStorageClient.open_produce_stream`, so no producer module reads the
generated API. Failures are :class:`~oncelog.errors.OncelogError` with the server's reason. Retries are not made
here; the sender and the transaction manager decide them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oncelog.client.coordinator_client import EndTxnResult
from oncelog.client.metadata import ClusterMetadata
from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, PreparedTransaction, TopicPartition
from oncelog.client.services import (
    GroupMember,
    GroupOffsetsClient,
    PartitionStorageClient,
    ProduceSettings,
    ProduceStreamCall,
    TransactionCoordinatorClient,
)
from oncelog.client.transport import Channels
from oncelog.vocabulary import ControlType, CoordinatorKind, ProducerIdAndEpoch, Role

__all__ = ["GrpcProducerTransport"]


class GrpcProducerTransport:
    """The producer's calls to partition-storage, txn-coordinator and group-offsets over one client's channels.

    Args:
        channels: the client's channels.
        metadata: the client's metadata cache (coordinators and live nodes).
    """

    def __init__(self, channels: Channels, metadata: ClusterMetadata) -> None:
        self._metadata = metadata
        self._storage = PartitionStorageClient(channels.get)
        self._txn = TransactionCoordinatorClient(channels.get)
        self._offsets = GroupOffsetsClient(channels.get)

    # -------------------------------------------------------------------------------- partition-storage

    def open_produce_stream(self, address: str, settings: ProduceSettings) -> ProduceStreamCall:
        return self._storage.open_produce_stream(address, settings)

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
        return await self._txn.init_producer_id(
            address,
            transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            current=expected,
            timeout_s=timeout_s,
        )

    async def add_partitions_to_txn(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        partitions: Sequence[TopicPartition],
        *,
        groups: Sequence[str] = (),
        timeout_s: float,
    ) -> None:
        await self._txn.add_partitions_to_txn(
            address, transactional_id, identity, partitions, groups=groups, timeout_s=timeout_s
        )

    async def add_offsets_to_txn(
        self, address: str, transactional_id: str, identity: ProducerIdAndEpoch, group_id: str, *, timeout_s: float
    ) -> str:
        return await self._txn.add_offsets_to_txn(address, transactional_id, identity, group_id, timeout_s=timeout_s)

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
        ended = await self._txn.end_txn(
            address,
            transactional_id,
            identity,
            ControlType.COMMIT if commit else ControlType.ABORT,
            wait_for_completion=wait_for_completion,
            timeout_s=timeout_s,
        )
        return EndTxnResult(ended.producer, ended.completed)

    async def init_producer_id_keeping_prepared(
        self, address: str, transactional_id: str, transaction_timeout_ms: int, *, timeout_s: float
    ) -> tuple[ProducerIdAndEpoch, PreparedTransaction | None]:
        result = await self._txn.init_producer_id_keeping_prepared(
            address, transactional_id, transaction_timeout_ms=transaction_timeout_ms, timeout_s=timeout_s
        )
        return result.producer, result.prepared

    async def prepare_transaction(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        *,
        check_back_address: str,
        timeout_s: float,
    ) -> PreparedTransaction:
        return await self._txn.prepare_transaction(
            address, transactional_id, identity, check_back_address=check_back_address, timeout_s=timeout_s
        )

    async def complete_transaction(
        self,
        address: str,
        identity: ProducerIdAndEpoch,
        token: PreparedTransaction,
        *,
        commit: bool,
        wait_for_completion: bool,
        timeout_s: float,
    ) -> EndTxnResult:
        ended = await self._txn.complete_transaction(
            address,
            identity,
            token,
            ControlType.COMMIT if commit else ControlType.ABORT,
            wait_for_completion=wait_for_completion,
            timeout_s=timeout_s,
        )
        return EndTxnResult(ended.producer, ended.completed)

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
        await self._offsets.txn_offset_commit(
            address,
            transactional_id,
            identity,
            group.group_id,
            offsets,
            member=GroupMember(group.generation_id, group.member_id, group.group_instance_id or ""),
            timeout_s=timeout_s,
        )
