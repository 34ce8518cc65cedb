"""Conversions between the domain values and the generated messages, shared by the typed clients."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from grpc import aio

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.records import (
    OffsetAndMetadata,
    PartitionInfo,
    TopicInfo,
)
from oncelog.errors import OncelogError
from oncelog.rpc.errors import from_error_info
from oncelog.vocabulary import ControlType, IsolationLevel, ProducerIdAndEpoch, Role, TopicPartition

ChannelSource = Callable[[str], aio.Channel]
"""Returns the channel to an address (opened on the caller's event loop)."""

# ------------------------------------------------------------------------------------------- wire helpers


def _tp_pb(tp: TopicPartition) -> common_pb.TopicPartition:
    return common_pb.TopicPartition(topic=tp.topic, partition=tp.partition)


def _tp(pb: common_pb.TopicPartition) -> TopicPartition:
    return TopicPartition(pb.topic, pb.partition)


def _identity_pb(identity: ProducerIdAndEpoch | None) -> common_pb.ProducerIdentity:
    if identity is None:
        return common_pb.ProducerIdentity(producer_id=-1, producer_epoch=-1)
    return common_pb.ProducerIdentity(producer_id=identity.producer_id, producer_epoch=identity.epoch)


def _identity(pb: common_pb.ProducerIdentity) -> ProducerIdAndEpoch:
    return ProducerIdAndEpoch(pb.producer_id, pb.producer_epoch)


_HasError = (
    common_pb.PartitionError
    | common_pb.GroupError
    | storage_pb.FetchPartitionResult
    | storage_pb.ListOffsetsPartitionResult
    | storage_pb.PartitionProducers
    | storage_pb.PartitionProduceResult
    | offsets_pb.ConsumerGroupDescription
)


def _error(holder: _HasError) -> OncelogError | None:
    """The per-item error of a result message, or None when it has none."""
    if not holder.HasField("error") or holder.error.reason == common_pb.ERROR_REASON_UNSPECIFIED:
        return None
    return from_error_info(holder.error)


def _offsets_pb(offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> list[common_pb.PartitionOffset]:
    return [
        common_pb.PartitionOffset(
            topic_partition=_tp_pb(tp),
            offset=om.offset,
            leader_epoch=-1 if om.leader_epoch is None else om.leader_epoch,
            metadata=om.metadata,
        )
        for tp, om in sorted(offsets.items())
    ]


_ISOLATION_PB = {
    IsolationLevel.READ_UNCOMMITTED: storage_pb.ISOLATION_LEVEL_READ_UNCOMMITTED,
    IsolationLevel.READ_COMMITTED: storage_pb.ISOLATION_LEVEL_READ_COMMITTED,
}
_ROLE_OF_PB = {
    cluster_pb.SERVICE_ROLE_PID_ALLOCATOR: Role.PID_ALLOCATOR,
    cluster_pb.SERVICE_ROLE_TXN_COORDINATOR: Role.TXN_COORDINATOR,
    cluster_pb.SERVICE_ROLE_PARTITION_STORAGE: Role.PARTITION_STORAGE,
    cluster_pb.SERVICE_ROLE_GROUP_OFFSETS: Role.GROUP_OFFSETS,
}
_RESULT_PB = {
    ControlType.COMMIT: common_pb.TRANSACTION_RESULT_COMMIT,
    ControlType.ABORT: common_pb.TRANSACTION_RESULT_ABORT,
}
_STATE_PREFIX = "TRANSACTION_STATE_"


def transaction_state_name(value: int) -> str:
    """The lower-case name of a wire ``TransactionState`` (``ongoing``, ``prepare_commit``, ...)."""
    return txn_pb.TransactionState.Name(value)[len(_STATE_PREFIX) :].lower()  # type: ignore[arg-type]


def transaction_state_value(name: str) -> txn_pb.TransactionState.ValueType:
    """The wire ``TransactionState`` of a lower-case name.

    Raises:
        ValueError: ``name`` is not a state; the message lists them.
    """
    try:
        return txn_pb.TransactionState.Value(_STATE_PREFIX + name.upper())
    except ValueError:
        known = [transaction_state_name(v) for v in txn_pb.TransactionState.values() if v]
        raise ValueError(f"unknown transaction state {name!r}; use one of {', '.join(known)}") from None


def check_transaction_states(names: Iterable[str]) -> None:
    """Raise ValueError, before anything is sent, when a name is not a transaction state."""
    for name in names:
        transaction_state_value(name)


def topic_info(topic: cluster_pb.TopicMetadata) -> TopicInfo:
    """Convert a wire ``TopicMetadata``."""
    return TopicInfo(
        name=topic.name,
        topic_id=topic.topic_id,
        partitions=tuple(
            PartitionInfo(
                topic=topic.name,
                partition=p.partition,
                leader_node_id=p.leader_node_id,
                leader_address=p.leader_address,
                leader_epoch=p.leader_epoch,
                replicas=tuple(p.replica_node_ids),
                isr=tuple(p.isr_node_ids),
                partition_epoch=p.partition_epoch,
            )
            for p in sorted(topic.partitions, key=lambda p: p.partition)
        ),
        configs=dict(topic.configs),
    )


class _Client:
    """What every typed client shares: where channels come from and the deadline of one call."""

    def __init__(self, channel_for: ChannelSource, *, timeout_s: float = 30.0) -> None:
        self._channel_for = channel_for
        self.timeout_s = timeout_s

    def _timeout(self, timeout_s: float | None) -> float:
        return self.timeout_s if timeout_s is None else timeout_s
