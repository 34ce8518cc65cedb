"""TransactionCoordinatorService client, and the transaction markers two services accept."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from oncelog.api.common import v1 as common_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.records import (
    PreparedTransaction,
    TransactionDescription,
    TransactionListing,
)
from oncelog.client.services.retry import call
from oncelog.client.services.wire import (
    _RESULT_PB,
    _Client,
    _error,
    _identity,
    _identity_pb,
    _tp,
    _tp_pb,
    transaction_state_name,
    transaction_state_value,
)
from oncelog.errors import InvalidRequest, OncelogError
from oncelog.vocabulary import ControlType, ProducerIdAndEpoch, TopicPartition

# --------------------------------------------------------------------------------------- TransactionCoordinatorService


class EndTxnResult(NamedTuple):
    """The answer to EndTxn."""

    producer: ProducerIdAndEpoch
    """The identity for the next transaction (a new epoch or id once the epoch space runs out)."""
    completed: bool
    """Every participant had its marker before the answer (only asked for with ``wait_for_completion``)."""


class InitProducerIdResult(NamedTuple):
    """The answer to InitProducerId with ``keep_prepared``."""

    producer: ProducerIdAndEpoch
    prepared: PreparedTransaction | None
    """The id's prepared transaction the caller now owns, None when there is none."""


class TransactionCoordinatorClient(_Client):
    """TransactionCoordinatorService: producer ids, transaction state, markers (design/architecture.md §5)."""

    def _stub(self, address: str) -> txn_pb.TransactionCoordinatorServiceStub:
        return txn_pb.TransactionCoordinatorServiceStub(self._channel_for(address))

    async def init_producer_id(
        self,
        address: str,
        transactional_id: str = "",
        *,
        transaction_timeout_ms: int = 0,
        current: ProducerIdAndEpoch | None = None,
        timeout_s: float | None = None,
    ) -> ProducerIdAndEpoch:
        """A producer identity: a fresh id for an idempotent producer (empty ``transactional_id``), else the
        id's current one with a bumped epoch, fencing older instances. ``current`` asks for the bump of that
        identity (KIP-360)."""
        request = txn_pb.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms
        )
        if current is not None:
            request.producer.CopyFrom(_identity_pb(current))
        response = await call(self._stub(address).InitProducerId, request, timeout_s=self._timeout(timeout_s))
        return _identity(response.producer)

    async def init_producer_id_keeping_prepared(
        self,
        address: str,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        current: ProducerIdAndEpoch | None = None,
        timeout_s: float | None = None,
    ) -> InitProducerIdResult:
        """InitProducerId that leaves a prepared transaction of the id pending and returns its token (KIP-939)."""
        request = txn_pb.InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=transaction_timeout_ms, keep_prepared=True
        )
        if current is not None:
            request.producer.CopyFrom(_identity_pb(current))
        response = await call(self._stub(address).InitProducerId, request, timeout_s=self._timeout(timeout_s))
        prepared = _token(response.prepared_transaction) if response.HasField("prepared_transaction") else None
        return InitProducerIdResult(_identity(response.producer), prepared)

    async def prepare_transaction(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        *,
        check_back_address: str = "",
        timeout_s: float | None = None,
    ) -> PreparedTransaction:
        """Make the open transaction prepared (two-phase commit); returns its token."""
        response = await call(
            self._stub(address).PrepareTransaction,
            txn_pb.PrepareTransactionRequest(
                transactional_id=transactional_id,
                producer=_identity_pb(producer),
                check_back_address=check_back_address,
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return _token(response.prepared_transaction)

    async def complete_transaction(
        self,
        address: str,
        producer: ProducerIdAndEpoch,
        token: PreparedTransaction,
        result: ControlType,
        *,
        wait_for_completion: bool = False,
        timeout_s: float | None = None,
    ) -> EndTxnResult:
        """Commit or abort the prepared transaction ``token`` names; ``producer`` must own its transactional id."""
        response = await call(
            self._stub(address).CompleteTransaction,
            txn_pb.CompleteTransactionRequest(
                transactional_id=token.transactional_id,
                producer=_identity_pb(producer),
                prepared_transaction=_token_pb(token),
                result=_RESULT_PB[result],
                wait_for_completion=wait_for_completion,
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return EndTxnResult(_identity(response.producer), response.completed)

    async def add_partitions_to_txn(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        partitions: Iterable[TopicPartition],
        *,
        groups: Iterable[str] = (),
        timeout_s: float | None = None,
    ) -> list[TopicPartition]:
        """Add partitions (and ``groups``' offsets, in the same write) to the open transaction (opening it); returns
        the partitions added."""
        response = await call(
            self._stub(address).AddPartitionsToTxn,
            txn_pb.AddPartitionsToTxnRequest(
                transactional_id=transactional_id,
                producer=_identity_pb(producer),
                partitions=[_tp_pb(tp) for tp in partitions],
                group_ids=list(groups),
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return [_tp(tp) for tp in response.partitions]

    async def add_offsets_to_txn(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        group_id: str,
        *,
        timeout_s: float | None = None,
    ) -> str:
        """Add a group's offsets to the open transaction; returns the group coordinator's address."""
        response = await call(
            self._stub(address).AddOffsetsToTxn,
            txn_pb.AddOffsetsToTxnRequest(
                transactional_id=transactional_id, producer=_identity_pb(producer), group_id=group_id
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return response.group_coordinator_address

    async def end_txn(
        self,
        address: str,
        transactional_id: str,
        producer: ProducerIdAndEpoch,
        result: ControlType,
        *,
        wait_for_completion: bool = False,
        timeout_s: float | None = None,
    ) -> EndTxnResult:
        """Commit or abort the open transaction (design/read-after-commit.md for ``wait_for_completion``)."""
        response = await call(
            self._stub(address).EndTxn,
            txn_pb.EndTxnRequest(
                transactional_id=transactional_id,
                producer=_identity_pb(producer),
                result=_RESULT_PB[result],
                wait_for_completion=wait_for_completion,
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return EndTxnResult(_identity(response.producer), response.completed)

    async def describe_transactions(
        self, address: str, transactional_ids: Iterable[str], *, timeout_s: float | None = None
    ) -> list[TransactionDescription]:
        """The coordinator's view of each id.

        Raises:
            TransactionalIdNotFound: an id is unknown or expired.
        """
        response = await call(
            self._stub(address).DescribeTransactions,
            txn_pb.DescribeTransactionsRequest(transactional_ids=list(transactional_ids)),
            timeout_s=self._timeout(timeout_s),
        )
        return [
            TransactionDescription(
                transactional_id=d.transactional_id,
                state=transaction_state_name(d.state),
                producer_id=d.producer_id,
                producer_epoch=d.producer_epoch,
                transaction_timeout_ms=d.transaction_timeout_ms,
                transaction_start_time_ms=d.transaction_start_time_ms,
                partitions=tuple(_tp(p) for p in d.partitions),
                groups=tuple(d.groups),
                coordinator_node_id=d.coordinator_node_id,
                coordinator_epoch=d.coordinator_epoch,
                last_update_time_ms=d.last_update_time_ms,
                prepared_time_ms=d.prepared_time_ms,
                check_back_address=d.check_back_address,
            )
            for d in response.transactions
        ]

    async def list_transactions(
        self,
        address: str,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        older_than_ms: int = 0,
        timeout_s: float | None = None,
    ) -> list[TransactionListing]:
        """The ids this coordinator owns, filtered by state names, producer ids and age of the open transaction.

        Raises:
            ValueError: a state name is unknown (before anything is sent).
        """
        request = txn_pb.ListTransactionsRequest(
            states=[transaction_state_value(s) for s in states],
            producer_ids=list(producer_ids),
            older_than_ms=older_than_ms,
        )
        response = await call(self._stub(address).ListTransactions, request, timeout_s=self._timeout(timeout_s))
        return [
            TransactionListing(
                transactional_id=t.transactional_id,
                producer_id=t.producer_id,
                state=transaction_state_name(t.state),
                transaction_start_time_ms=t.transaction_start_time_ms,
                prepared_time_ms=t.prepared_time_ms,
            )
            for t in response.transactions
        ]

    async def abort_transaction(
        self, address: str, transactional_id: str, *, timeout_s: float | None = None
    ) -> ProducerIdAndEpoch:
        """Abort the id's open transaction, fencing its producer; returns the fenced identity."""
        response = await call(
            self._stub(address).AbortTransaction,
            txn_pb.AbortTransactionRequest(transactional_id=transactional_id),
            timeout_s=self._timeout(timeout_s),
        )
        return _identity(response.producer)

    async def skip_txn_markers(
        self,
        address: str,
        transactional_id: str,
        partitions: Iterable[TopicPartition] = (),
        groups: Iterable[str] = (),
        *,
        timeout_s: float | None = None,
    ) -> tuple[list[TopicPartition], list[str]]:
        """Give up on the markers of a completing transaction for these participants; returns those skipped."""
        response = await call(
            self._stub(address).SkipTxnMarkers,
            txn_pb.SkipTxnMarkersRequest(
                transactional_id=transactional_id,
                partitions=[_tp_pb(TopicPartition(*tp)) for tp in partitions],
                groups=list(groups),
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return [_tp(tp) for tp in response.partitions], list(response.groups)


# ------------------------------------------------------------------------------------------- markers (two services)


_VERDICTS = {
    txn_pb.TRANSACTION_CHECK_RESULT_COMMIT: "commit",
    txn_pb.TRANSACTION_CHECK_RESULT_ROLLBACK: "rollback",
}


class TransactionCheckClient(_Client):
    """TransactionCheckService, the application's check-back endpoint the coordinator calls
    (design/kafka-semantics.md §5.7)."""

    async def check_transaction(
        self, address: str, token: PreparedTransaction, *, timeout_s: float | None = None
    ) -> str:
        """The application's verdict on a prepared transaction: ``commit``, ``rollback`` or ``unknown``
        (UNSPECIFIED and any value this client does not know count as ``unknown``)."""
        response = await call(
            txn_pb.TransactionCheckServiceStub(self._channel_for(address)).CheckTransaction,
            txn_pb.CheckTransactionRequest(
                transactional_id=token.transactional_id,
                prepared_transaction=_token_pb(token),
            ),
            timeout_s=self._timeout(timeout_s),
        )
        return _VERDICTS.get(response.result, "unknown")


def _token(token: txn_pb.PreparedTransaction) -> PreparedTransaction:
    return PreparedTransaction(token.transactional_id, token.producer_id, token.producer_epoch)


def _token_pb(token: PreparedTransaction) -> txn_pb.PreparedTransaction:
    return txn_pb.PreparedTransaction(
        transactional_id=token.transactional_id, producer_id=token.producer_id, producer_epoch=token.producer_epoch
    )


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A transaction marker for the participants of one transaction on one server."""

    transactional_id: str
    producer: ProducerIdAndEpoch
    coordinator_epoch: int
    result: ControlType
    partitions: tuple[TopicPartition, ...] = ()
    groups: tuple[str, ...] = ()


LARGEST_PRODUCER_EPOCH = 32_767
"""Kafka's producer epoch is an int16: a producer at this epoch cannot be fenced by a marker of the next one."""


def fencing_abort_marker(
    tp: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
) -> TxnMarker:
    """The ABORT marker that ends a hanging transaction on one partition (KIP-664's ``abortTransaction``).

    It carries the next producer epoch, which the partition accepts and which fences that producer instance there
    (KIP-890). ``AdminClient.abort_transaction_on_partition`` and the kafka-gateway's WriteTxnMarkers send it.

    Raises:
        InvalidRequest: the producer is at the largest epoch, so no marker epoch can fence it.
    """
    if producer_epoch >= LARGEST_PRODUCER_EPOCH:
        raise InvalidRequest(
            f"producer {producer_id} is at epoch {producer_epoch}, the largest: no marker epoch can fence it; "
            "this transaction cannot be aborted by a marker"
        )
    return TxnMarker(
        transactional_id="",
        producer=ProducerIdAndEpoch(producer_id, producer_epoch + 1),
        coordinator_epoch=max(coordinator_epoch, 0),
        result=ControlType.ABORT,
        partitions=(tp,),
    )


@dataclass(frozen=True, slots=True)
class TxnMarkerResult:
    """Each participant's answer to a marker: None where it was written."""

    producer_id: int
    partition_errors: Mapping[TopicPartition, OncelogError | None]
    group_errors: Mapping[str, OncelogError | None]


def _markers_pb(markers: Iterable[TxnMarker]) -> list[common_pb.TxnMarker]:
    return [
        common_pb.TxnMarker(
            producer=_identity_pb(m.producer),
            coordinator_epoch=m.coordinator_epoch,
            result=_RESULT_PB[m.result],
            partitions=[_tp_pb(tp) for tp in m.partitions],
            groups=list(m.groups),
            transactional_id=m.transactional_id,
        )
        for m in markers
    ]


def _marker_results(results: Iterable[common_pb.TxnMarkerResult]) -> list[TxnMarkerResult]:
    return [
        TxnMarkerResult(
            producer_id=r.producer_id,
            partition_errors={_tp(e.topic_partition): _error(e) for e in r.partition_errors},
            group_errors={e.group_id: _error(e) for e in r.group_errors},
        )
        for r in results
    ]
