"""The calls the transaction manager makes to the transaction coordinator, as ports.

:mod:`oncelog.client.producer_rpc` implements them over gRPC; the unit tests implement them in memory.
:class:`TwoPhaseCoordinatorClient` adds the calls of prepared transactions (:mod:`oncelog.client.two_phase`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, PreparedTransaction, TopicPartition
from oncelog.client.sequences import ProducerIdAndEpoch
from oncelog.vocabulary import CoordinatorKind


@dataclass(frozen=True, slots=True)
class EndTxnResult:
    """EndTxn's answer: the identity for the next transaction, and whether every marker is written."""

    identity: ProducerIdAndEpoch
    completed: bool


class ProducerIdSource(Protocol):
    """InitProducerId, which both the sender (an idempotent producer's id) and the transaction manager call."""

    async def init_producer_id(
        self,
        address: str,
        transactional_id: str,
        transaction_timeout_ms: int,
        *,
        expected: ProducerIdAndEpoch | None,
        timeout_s: float,
    ) -> ProducerIdAndEpoch:
        """InitProducerId at the coordinator at ``address`` ("" as ``transactional_id``: a fresh idempotent id)."""
        ...


class CoordinatorClient(ProducerIdSource, Protocol):
    """The calls the transaction manager makes. Each raises the server's :class:`~oncelog.errors.OncelogError`."""

    async def find_coordinator(self, key: str, kind: CoordinatorKind) -> str:
        """Address of the process owning ``key`` (cached until invalidated)."""
        ...

    def invalidate_coordinator(self, key: str, kind: CoordinatorKind) -> None:
        """Forget the cached owner of ``key``."""
        ...

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
        """AddPartitionsToTxn, adding ``groups``' offsets to the transaction in the same call."""
        ...

    async def add_offsets_to_txn(
        self, address: str, transactional_id: str, identity: ProducerIdAndEpoch, group_id: str, *, timeout_s: float
    ) -> str:
        """AddOffsetsToTxn; the address of the group's offsets owner, or "" when the answer names none."""
        ...

    async def end_txn(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        *,
        commit: bool,
        wait_for_completion: bool,
        timeout_s: float,
    ) -> EndTxnResult: ...

    async def txn_offset_commit(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        group: ConsumerGroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout_s: float,
    ) -> None: ...


class TwoPhaseCoordinatorClient(CoordinatorClient, Protocol):
    """The coordinator calls of prepared transactions (two-phase commit, design/kafka-semantics.md §5.7)."""

    async def init_producer_id_keeping_prepared(
        self, address: str, transactional_id: str, transaction_timeout_ms: int, *, timeout_s: float
    ) -> tuple[ProducerIdAndEpoch, PreparedTransaction | None]:
        """InitProducerId that keeps a prepared transaction pending; the identity and that transaction's token."""
        ...

    async def prepare_transaction(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        *,
        check_back_address: str,
        timeout_s: float,
    ) -> PreparedTransaction:
        """PrepareTransaction; the token."""
        ...

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
        """CompleteTransaction, answered as EndTxn."""
        ...


__all__ = ["CoordinatorClient", "EndTxnResult", "ProducerIdSource", "TwoPhaseCoordinatorClient"]
