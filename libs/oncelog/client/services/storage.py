"""PartitionStorageService client, with the producer's ProduceStream."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import grpc

from oncelog.api.common import v1 as common_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.client.fetch_filter import AbortedTransaction
from oncelog.client.records import ProducerStateDescription, ReplicaDescription
from oncelog.client.services.retry import call
from oncelog.client.services.transactions import TxnMarker, TxnMarkerResult, _marker_results, _markers_pb
from oncelog.client.services.wire import (
    _ISOLATION_PB,
    _Client,
    _error,
    _tp,
    _tp_pb,
)
from oncelog.errors import OncelogError
from oncelog.rpc.errors import from_error_info, from_rpc_error
from oncelog.vocabulary import IsolationLevel, TopicPartition

# --------------------------------------------------------------------------------------- PartitionStorageService


class FetchPosition(NamedTuple):
    """Where to read one partition from."""

    topic_partition: TopicPartition
    offset: int
    leader_epoch: int = -1
    max_bytes: int = 1 << 20


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    """One partition's answer to Fetch: bytes of whole RecordBatch v2 batches, or ``error``."""

    topic_partition: TopicPartition
    error: OncelogError | None = None
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""
    aborted_transactions: tuple[AbortedTransaction, ...] = ()


class OffsetQuery(NamedTuple):
    """Which offset ListOffsets resolves: ``earliest``, ``latest``, or the first at or after a timestamp."""

    spec: str
    timestamp_ms: int = -1

    @classmethod
    def of(cls, spec: str | int) -> OffsetQuery:
        """``"earliest"``, ``"latest"`` or a Unix-millisecond timestamp.

        Raises:
            ValueError: anything else.
        """
        if spec in ("earliest", "latest"):
            return cls(str(spec))
        if isinstance(spec, int) and not isinstance(spec, bool):
            return cls("timestamp", spec)
        raise ValueError(f"offset spec {spec!r}: use 'earliest', 'latest' or a timestamp in ms")


_OFFSET_SPEC_PB = {
    "earliest": storage_pb.OFFSET_SPEC_EARLIEST,
    "latest": storage_pb.OFFSET_SPEC_LATEST,
    "timestamp": storage_pb.OFFSET_SPEC_TIMESTAMP,
}


def fetch_request(
    positions: Iterable[FetchPosition], isolation: IsolationLevel, max_wait_ms: int, min_bytes: int, max_bytes: int
) -> storage_pb.FetchRequest:
    """The Fetch request for ``positions`` (shared by the asyncio and the blocking client)."""
    return storage_pb.FetchRequest(
        partitions=[
            storage_pb.FetchPartition(
                topic_partition=_tp_pb(p.topic_partition),
                fetch_offset=p.offset,
                max_bytes=p.max_bytes,
                leader_epoch=p.leader_epoch,
            )
            for p in positions
        ],
        isolation_level=_ISOLATION_PB[isolation],
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
    )


def fetched(response: storage_pb.FetchResponse) -> list[FetchedPartition]:
    """Each partition's answer to Fetch, in request order."""
    return [
        FetchedPartition(
            topic_partition=_tp(r.topic_partition),
            error=_error(r),
            high_watermark=r.high_watermark,
            last_stable_offset=r.last_stable_offset,
            log_start_offset=r.log_start_offset,
            records=r.records,
            aborted_transactions=tuple(
                AbortedTransaction(a.producer_id, a.first_offset) for a in r.aborted_transactions
            ),
        )
        for r in response.results
    ]


class ListedOffset(NamedTuple):
    """A resolved offset, with the timestamp of its record (-1 for earliest and latest, and when none matched) and
    the leader epoch Kafka's ListOffsets answers (the leader's for latest, else the one that appended the offset;
    -1 unknown)."""

    offset: int
    timestamp_ms: int
    leader_epoch: int = -1


def list_offsets_request(
    queries: Mapping[TopicPartition, OffsetQuery], isolation: IsolationLevel
) -> storage_pb.ListOffsetsRequest:
    """The ListOffsets request for ``queries`` (shared by the asyncio and the blocking client)."""
    return storage_pb.ListOffsetsRequest(
        partitions=[
            storage_pb.ListOffsetsPartition(
                topic_partition=_tp_pb(tp), spec=_OFFSET_SPEC_PB[q.spec], timestamp_ms=max(q.timestamp_ms, 0)
            )
            for tp, q in queries.items()
        ],
        isolation_level=_ISOLATION_PB[isolation],
    )


def listed(response: storage_pb.ListOffsetsResponse) -> dict[TopicPartition, ListedOffset | OncelogError]:
    """Each partition's resolved offset, or its error."""
    return {
        _tp(r.topic_partition): _error(r) or ListedOffset(r.offset, r.timestamp_ms, r.leader_epoch)
        for r in response.results
    }


class EpochQuery(NamedTuple):
    """Where does ``leader_epoch`` end? Asked of the leader of ``current_leader_epoch`` (-1: no check)."""

    leader_epoch: int
    current_leader_epoch: int = -1


class EpochEndOffset(NamedTuple):
    """Where an epoch ends in the leader's log: the largest epoch at or below the one asked that the leader knows,
    and the first offset after it; ``(-1, -1)`` when the leader knows no such epoch."""

    epoch: int
    end_offset: int

    @property
    def undefined(self) -> bool:
        """The leader knows no epoch at or below the one asked (or its log is empty)."""
        return self.epoch < 0 or self.end_offset < 0


ProduceEntry = tuple[TopicPartition, int, bytes]
"""One batch of a produce request: its partition, the leader epoch the producer knows, the encoded batch."""


@dataclass(frozen=True, slots=True)
class ProduceSettings:
    """What every produce request of one producer carries besides its batches.

    Attributes:
        transactional_id: the producer's transactional id, "" for none.
        acks_all: every in-sync replica must have the batch (``acks="all"``), else the leader alone.
        timeout_ms: how long the server may wait for replication before it answers REQUEST_TIMED_OUT.
    """

    transactional_id: str
    acks_all: bool
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class PartitionResult:
    """A partition's answer to one batch.

    Attributes:
        base_offset: offset of the batch's first record (-1 on error).
        log_append_time_ms: the broker's time for LogAppendTime topics, else -1.
        duplicate: the partition already had the batch (a retry of a written batch).
        error: the partition refused the batch, or None.
    """

    base_offset: int
    log_append_time_ms: int = -1
    duplicate: bool = False
    error: OncelogError | None = None


@dataclass(frozen=True, slots=True)
class ProduceAnswer:
    """The answer to one request on a produce stream: the result per partition of the request."""

    correlation_id: int
    results: Mapping[TopicPartition, PartitionResult]


class ProduceStreamCall:
    """One open ProduceStream to a storage node (the producer's :class:`~oncelog.client.sender.ProduceStream`):
    ``write`` sends one request of encoded batches, ``read`` returns the next answer in request order, None once
    the server closed the stream. Both raise the server's :class:`~oncelog.errors.OncelogError` when it fails."""

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


class PartitionStorageClient(_Client):
    """PartitionStorageService on a partition's leader: fetch, offsets, producer state, transaction markers."""

    def _stub(self, address: str) -> storage_pb.PartitionStorageServiceStub:
        return storage_pb.PartitionStorageServiceStub(self._channel_for(address))

    def open_produce_stream(self, address: str, settings: ProduceSettings) -> ProduceStreamCall:
        """Open a ProduceStream to ``address`` (the producer's path: many requests in flight, answers in order)."""
        return ProduceStreamCall(self._stub(address).ProduceStream(), settings)

    async def produce(
        self,
        address: str,
        batches: Mapping[TopicPartition, bytes],
        *,
        transactional_id: str = "",
        acks_all: bool = True,
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, int | OncelogError]:
        """Append one encoded RecordBatch v2 per partition (unary Produce); each partition's base offset or error.

        The producer streams instead (:meth:`open_produce_stream`); this is for tools and tests.
        """
        request = storage_pb.ProduceRequest(
            transactional_id=transactional_id,
            acks=storage_pb.ACKS_ALL if acks_all else storage_pb.ACKS_LEADER,
            partitions=[
                storage_pb.PartitionBatches(topic_partition=_tp_pb(tp), leader_epoch=-1, records=records)
                for tp, records in batches.items()
            ],
        )
        response = await call(self._stub(address).Produce, request, timeout_s=self._timeout(timeout_s))
        return {_tp(r.topic_partition): _error(r) or r.base_offset for r in response.results}

    async def fetch(
        self,
        address: str,
        positions: Iterable[FetchPosition],
        *,
        isolation: IsolationLevel,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        max_bytes: int = 50 << 20,
        timeout_s: float | None = None,
    ) -> list[FetchedPartition]:
        """Read from each position; waits up to ``max_wait_ms`` for ``min_bytes``.

        The call's deadline is ``timeout_s`` plus the wait. A partition's failure is in its result.
        """
        request = fetch_request(positions, isolation, max_wait_ms, min_bytes, max_bytes)
        response = await call(
            self._stub(address).Fetch, request, timeout_s=self._timeout(timeout_s) + max_wait_ms / 1000
        )
        return fetched(response)

    async def list_offsets(
        self,
        address: str,
        queries: Mapping[TopicPartition, OffsetQuery],
        *,
        isolation: IsolationLevel,
        timeout_s: float | None = None,
    ) -> dict[TopicPartition, ListedOffset | OncelogError]:
        """Resolve an offset per partition (``latest`` is the last stable offset at READ_COMMITTED)."""
        request = list_offsets_request(queries, isolation)
        response = await call(self._stub(address).ListOffsets, request, timeout_s=self._timeout(timeout_s))
        return listed(response)

    async def offset_for_leader_epoch(
        self, address: str, queries: Mapping[TopicPartition, EpochQuery], *, timeout_s: float | None = None
    ) -> dict[TopicPartition, EpochEndOffset | OncelogError]:
        """Where each asked epoch ends in the leader's log (KIP-320), for a consumer validating its position."""
        request = storage_pb.OffsetForLeaderEpochRequest(
            partitions=[
                storage_pb.OffsetForLeaderEpochPartition(
                    topic_partition=_tp_pb(tp), current_leader_epoch=q.current_leader_epoch, leader_epoch=q.leader_epoch
                )
                for tp, q in queries.items()
            ]
        )
        response = await call(self._stub(address).OffsetForLeaderEpoch, request, timeout_s=self._timeout(timeout_s))
        return {
            _tp(r.topic_partition): _error(r) or EpochEndOffset(r.end.epoch, r.end.end_offset) for r in response.results
        }

    async def describe_producers(
        self, address: str, partitions: Iterable[TopicPartition], *, timeout_s: float | None = None
    ) -> dict[TopicPartition, list[ProducerStateDescription] | OncelogError]:
        """The producer state of each partition (KIP-664)."""
        response = await call(
            self._stub(address).DescribeProducers,
            storage_pb.DescribeProducersRequest(partitions=[_tp_pb(tp) for tp in partitions]),
            timeout_s=self._timeout(timeout_s),
        )
        return {
            _tp(item.topic_partition): _error(item)
            or [
                ProducerStateDescription(
                    producer_id=p.producer.producer_id,
                    producer_epoch=p.producer.producer_epoch,
                    last_sequence=p.last_sequence,
                    last_timestamp_ms=p.last_timestamp_ms,
                    coordinator_epoch=p.coordinator_epoch,
                    current_transaction_start_offset=(
                        None if p.current_txn_start_offset < 0 else p.current_txn_start_offset
                    ),
                )
                for p in item.producers
            ]
            for item in response.partitions
        }

    async def describe_replicas(
        self, address: str, partitions: Iterable[TopicPartition], *, timeout_s: float | None = None
    ) -> dict[TopicPartition, list[ReplicaDescription] | OncelogError]:
        """Where each replica of each partition stands, leader first, as the leader at ``address`` sees it."""
        response = await call(
            self._stub(address).DescribeReplicas,
            storage_pb.DescribeReplicasRequest(partitions=[_tp_pb(tp) for tp in partitions]),
            timeout_s=self._timeout(timeout_s),
        )
        return {
            _tp(item.topic_partition): _error(item)
            or [
                ReplicaDescription(r.node_id, r.log_end_offset, r.lag, r.in_sync, r.caught_up_ms_ago)
                for r in item.replicas
            ]
            for item in response.partitions
        }

    async def write_txn_markers(
        self, address: str, markers: Iterable[TxnMarker], *, timeout_s: float | None = None
    ) -> list[TxnMarkerResult]:
        """Write COMMIT/ABORT markers to the partitions this node leads; one result per marker."""
        response = await call(
            self._stub(address).WriteTxnMarkers,
            storage_pb.WriteTxnMarkersRequest(markers=_markers_pb(markers)),
            timeout_s=self._timeout(timeout_s),
        )
        return _marker_results(response.results)
