"""PartitionStorageServicer: protobuf <-> :class:`PartitionManager` / :class:`PartitionEngine`.

Every RPC is multi-partition and reports errors per partition (an ``ErrorInfo`` in the partition's result);
a call fails as a whole only when the request itself is malformed (an unknown enum value, a negative wait).

ProduceStream keeps per-partition order with many requests in flight: the stream's requests are *written*
one after another, in arrival order (each write is short: validation plus a page-cache append), while their
fsync waits overlap, so a stream of pipelined batches shares fsyncs through group commit. Responses are sent
in request order, which keeps every partition's responses in order too. At most ``stream_max_in_flight``
requests wait for their fsync; beyond that the stream stops reading and HTTP/2 flow control holds the client.
A malformed request on the stream is answered with that error on each of its partitions; the stream goes on.
Concurrent unary Produce calls carry no order between them (gRPC may start them in any order), so a client
pipelining one partition's batches uses the stream; out-of-order unary calls are answered
OUT_OF_ORDER_SEQUENCE and retried, as Kafka's client does.

With one replica per partition, ``acks`` LEADER and ALL answer alike: once the batch is durable by the
topic's ``flush`` setting (fsynced for ``flush=sync``, written for ``flush=async``). For a replicated partition
ALL answers once the high watermark passes the batch, i.e. every in-sync replica has it, and LEADER (``acks=1``,
for Kafka parity, lossy) once the leader alone has it (docs/design/replication.md §8).

ReplicaFetch is the follower's copy request (design/replication.md §3): it is served by
:meth:`PartitionManager.replica_fetch`. OffsetForLeaderEpoch answers from the leader's epoch cache, for consumers
validating their position after a leader change (design/replication.md §10).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

from oncelog.api.common import v1 as common_pb
from oncelog.api.storage import v1 as pb
from oncelog.errors import InvalidRequest, OncelogError, RequestTimedOut, UnknownServerError
from oncelog.partition_storage.engine import (
    AppendResult,
    FetchResult,
    OffsetSpec,
    PendingAppend,
    TxnMarkerSpec,
)
from oncelog.partition_storage.partition_manager import FetchSpec, PartitionManager
from oncelog.partition_storage.replica_fetcher import CopyPosition, CopyResult
from oncelog.rpc import to_error_info
from oncelog.vocabulary import ControlType, IsolationLevel

log = logging.getLogger(__name__)

_ISOLATION: dict[int, IsolationLevel] = {
    pb.ISOLATION_LEVEL_UNSPECIFIED: IsolationLevel.READ_COMMITTED,
    pb.ISOLATION_LEVEL_READ_COMMITTED: IsolationLevel.READ_COMMITTED,
    pb.ISOLATION_LEVEL_READ_UNCOMMITTED: IsolationLevel.READ_UNCOMMITTED,
}
_OFFSET_SPEC: dict[int, OffsetSpec] = {
    pb.OFFSET_SPEC_EARLIEST: OffsetSpec.EARLIEST,
    pb.OFFSET_SPEC_LATEST: OffsetSpec.LATEST,
    pb.OFFSET_SPEC_TIMESTAMP: OffsetSpec.TIMESTAMP,
}
_RESULT = {
    common_pb.TRANSACTION_RESULT_COMMIT: ControlType.COMMIT,
    common_pb.TRANSACTION_RESULT_ABORT: ControlType.ABORT,
}
_ACKS = (pb.ACKS_UNSPECIFIED, pb.ACKS_LEADER, pb.ACKS_ALL)
_MAX_PRODUCER_EPOCH = 2**15 - 1

_Outcome = PendingAppend | AppendResult | OncelogError
_Written = tuple[common_pb.TopicPartition, PendingAppend | OncelogError]


class PartitionStorageServicer(pb.PartitionStorageServiceServicer):
    """Serve PartitionStorageService from a :class:`PartitionManager`.

    Args:
        partitions: the node's partitions.
        produce_timeout_ms: wait for durability when a produce request leaves ``timeout_ms`` at 0.
        stream_max_in_flight: requests of one ProduceStream waiting for their fsync at once.
    """

    def __init__(
        self, partitions: PartitionManager, *, produce_timeout_ms: int = 30_000, stream_max_in_flight: int = 32
    ) -> None:
        self._partitions = partitions
        self._produce_timeout_ms = produce_timeout_ms
        self._stream_max_in_flight = stream_max_in_flight

    # ---------------------------------------------------------------------------------------------- produce

    async def Produce(self, request: pb.ProduceRequest, context: object) -> pb.ProduceResponse:
        timeout_s = self._check_produce(request)
        written = await self._write_all(request)
        return _response_now(written) or await self._acknowledge(written, timeout_s)

    async def ProduceStream(
        self, request_iterator: AsyncIterator[pb.ProduceStreamRequest], context: object
    ) -> AsyncIterator[pb.ProduceStreamResponse]:
        answers: asyncio.Queue[tuple[int, asyncio.Future[pb.ProduceResponse]] | None] = asyncio.Queue(
            self._stream_max_in_flight
        )
        reader = asyncio.get_running_loop().create_task(self._read_stream(request_iterator, answers))
        try:
            while (answer := await answers.get()) is not None:
                correlation_id, response = answer
                yield pb.ProduceStreamResponse(correlation_id=correlation_id, response=await response)
            await reader  # re-raises a broken request stream
        finally:
            reader.cancel()

    async def _read_stream(
        self,
        requests: AsyncIterator[pb.ProduceStreamRequest],
        answers: asyncio.Queue[tuple[int, asyncio.Future[pb.ProduceResponse]] | None],
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for item in requests:
                try:
                    timeout_s = self._check_produce(item.request)
                except InvalidRequest as err:
                    ready: pb.ProduceResponse | None = _failed_produce(item.request, err)
                else:
                    written = await self._write_all(item.request)
                    ready = _response_now(written)
                response: asyncio.Future[pb.ProduceResponse]
                if ready is None:
                    response = asyncio.ensure_future(self._acknowledge(written, timeout_s))
                else:
                    response = loop.create_future()
                    response.set_result(ready)
                await answers.put((item.correlation_id, response))
        finally:
            task = asyncio.current_task()
            if task is None or not task.cancelling():  # cancelled: the response side is gone, nobody reads
                await answers.put(None)

    def _check_produce(self, request: pb.ProduceRequest) -> float:
        if request.acks not in _ACKS:
            raise InvalidRequest(f"acks={request.acks} is not a known Acks value")
        if request.timeout_ms < 0:
            raise InvalidRequest(f"timeout_ms must be >= 0, got {request.timeout_ms}")
        return (request.timeout_ms or self._produce_timeout_ms) / 1000

    async def _write_all(self, request: pb.ProduceRequest) -> list[_Written]:
        """Write each partition's batches in request order; durability is awaited by :meth:`_acknowledge`."""
        written: list[_Written] = []
        for part in request.partitions:
            tp = part.topic_partition
            try:
                pending = await self._partitions.write(tp.topic, tp.partition, part.leader_epoch, part.records)
                pending.leader_only = request.acks == pb.ACKS_LEADER
                outcome: PendingAppend | OncelogError = pending
            except OncelogError as err:
                outcome = err
            except Exception as err:
                log.exception("produce to %s-%d failed", tp.topic, tp.partition)
                outcome = UnknownServerError(f"produce to {tp.topic}-{tp.partition} failed: {err}")
            written.append((tp, outcome))
        return written

    async def _acknowledge(self, written: Sequence[_Written], timeout_s: float) -> pb.ProduceResponse:
        """Wait for every partition's durability (bounded by the request's timeout) and build the response."""

        async def settle(tp: common_pb.TopicPartition, outcome: _Outcome) -> pb.PartitionProduceResult:
            if isinstance(outcome, PendingAppend):
                try:
                    async with asyncio.timeout(timeout_s):
                        outcome = await outcome.wait()
                except TimeoutError:
                    outcome = RequestTimedOut(
                        f"{tp.topic}-{tp.partition}: not durable within {timeout_s:.3f} s; retry the same batch"
                    )
                except OncelogError as err:
                    outcome = err
            return _produce_result(tp, outcome)

        if len(written) == 1:
            return pb.ProduceResponse(results=[await settle(*written[0])])
        return pb.ProduceResponse(results=await asyncio.gather(*(settle(tp, outcome) for tp, outcome in written)))

    # ------------------------------------------------------------------------------------------------ fetch

    async def Fetch(self, request: pb.FetchRequest, context: object) -> pb.FetchResponse:
        isolation = _isolation(request.isolation_level)
        specs = [
            FetchSpec(p.topic_partition.topic, p.topic_partition.partition, p.fetch_offset, p.max_bytes, p.leader_epoch)
            for p in request.partitions
        ]
        max_wait_ms = request.max_wait_ms
        remaining = getattr(context, "time_remaining", lambda: None)()
        if remaining is not None and max_wait_ms > 0:
            # answer before the client's deadline expires, with whatever is there
            max_wait_ms = max(0, min(max_wait_ms, int(remaining * 1000) - 50))
        outcomes = await self._partitions.fetch(
            specs, isolation, max_wait_ms=max_wait_ms, min_bytes=request.min_bytes, max_bytes=request.max_bytes
        )
        return pb.FetchResponse(
            results=[_fetch_result(p.topic_partition, o) for p, o in zip(request.partitions, outcomes, strict=True)]
        )

    async def ReplicaFetch(self, request: pb.ReplicaFetchRequest, context: object) -> pb.ReplicaFetchResponse:
        if not request.replica_node_id:
            raise InvalidRequest("replica_node_id is required: the follower's node id")
        positions = [
            CopyPosition(
                p.topic_partition.topic,
                p.topic_partition.partition,
                p.current_leader_epoch,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.high_watermark,
            )
            for p in request.partitions
        ]
        outcomes = await self._partitions.replica_fetch(
            request.replica_node_id,
            request.replica_node_epoch,
            positions,
            max_wait_ms=request.max_wait_ms,
            max_bytes=request.max_bytes,
        )
        return pb.ReplicaFetchResponse(
            results=[_copy_result(p.topic_partition, o) for p, o in zip(request.partitions, outcomes, strict=True)]
        )

    async def OffsetForLeaderEpoch(
        self, request: pb.OffsetForLeaderEpochRequest, context: object
    ) -> pb.OffsetForLeaderEpochResponse:
        """Where each asked epoch ends in this leader's log (KIP-320; design/replication.md §10)."""
        results = []
        for part in request.partitions:
            tp = part.topic_partition
            try:
                if part.leader_epoch < 0:
                    raise InvalidRequest(
                        f"leader_epoch must be >= 0 (the epoch of the last fetched batch), got {part.leader_epoch}"
                    )
                engine = await self._partitions.leader_engine(tp.topic, tp.partition, part.current_leader_epoch)
                epoch, end = engine.epochs.end_offset_for(part.leader_epoch, engine.log_end_offset)
                answer = pb.EpochEndOffset(epoch=epoch, end_offset=end)
                results.append(pb.OffsetForLeaderEpochResult(topic_partition=tp, end=answer))
            except OncelogError as err:
                results.append(pb.OffsetForLeaderEpochResult(topic_partition=tp, error=to_error_info(err)))
        return pb.OffsetForLeaderEpochResponse(results=results)

    async def ListOffsets(self, request: pb.ListOffsetsRequest, context: object) -> pb.ListOffsetsResponse:
        isolation = _isolation(request.isolation_level)
        results = []
        for part in request.partitions:
            tp = part.topic_partition
            try:
                spec = _OFFSET_SPEC.get(part.spec)
                if spec is None:
                    raise InvalidRequest(f"spec={part.spec}: choose EARLIEST, LATEST or TIMESTAMP")
                engine = await self._partitions.leader_engine(tp.topic, tp.partition)
                listed = engine.list_offset(spec, isolation, part.timestamp_ms)
                results.append(
                    pb.ListOffsetsPartitionResult(
                        topic_partition=tp,
                        offset=listed.offset,
                        timestamp_ms=listed.timestamp_ms,
                        leader_epoch=listed.leader_epoch,
                    )
                )
            except OncelogError as err:
                results.append(
                    pb.ListOffsetsPartitionResult(
                        topic_partition=tp, offset=-1, timestamp_ms=-1, leader_epoch=-1, error=to_error_info(err)
                    )
                )
        return pb.ListOffsetsResponse(results=results)

    # ---------------------------------------------------------------------------------------------- markers

    async def WriteTxnMarkers(self, request: pb.WriteTxnMarkersRequest, context: object) -> pb.WriteTxnMarkersResponse:
        valid: list[tuple[int, TxnMarkerSpec]] = []
        refusals: dict[int, OncelogError] = {}
        for i, marker in enumerate(request.markers):
            try:
                valid.append((i, _marker_spec(marker)))
            except InvalidRequest as err:
                refusals[i] = err
        applied = await self._partitions.write_markers(
            [(spec, [(tp.topic, tp.partition) for tp in request.markers[i].partitions]) for i, spec in valid]
        )
        outcomes: dict[int, Sequence[OncelogError | None]] = {i: o for (i, _), o in zip(valid, applied, strict=True)}
        results = []
        for i, marker in enumerate(request.markers):
            per_partition = outcomes[i] if i in outcomes else [refusals[i]] * len(marker.partitions)
            groups_refused = InvalidRequest(
                "partition-storage holds no consumer group offsets; send them to group-offsets"
            )
            results.append(
                common_pb.TxnMarkerResult(
                    producer_id=marker.producer.producer_id,
                    partition_errors=[
                        common_pb.PartitionError(topic_partition=tp, error=None if err is None else to_error_info(err))
                        for tp, err in zip(marker.partitions, per_partition, strict=True)
                    ],
                    group_errors=[
                        common_pb.GroupError(group_id=group, error=to_error_info(groups_refused))
                        for group in marker.groups
                    ],
                )
            )
        return pb.WriteTxnMarkersResponse(results=results)

    async def DescribeProducers(
        self, request: pb.DescribeProducersRequest, context: object
    ) -> pb.DescribeProducersResponse:
        partitions = []
        for tp in request.partitions:
            try:
                engine = await self._partitions.leader_engine(tp.topic, tp.partition)
                producers = [
                    pb.ProducerState(
                        producer=common_pb.ProducerIdentity(producer_id=d.producer_id, producer_epoch=d.producer_epoch),
                        last_sequence=d.last_sequence,
                        last_timestamp_ms=d.last_timestamp,
                        coordinator_epoch=d.coordinator_epoch,
                        current_txn_start_offset=-1
                        if d.current_txn_start_offset is None
                        else d.current_txn_start_offset,
                    )
                    for d in engine.describe_producers()
                ]
                partitions.append(pb.PartitionProducers(topic_partition=tp, producers=producers))
            except OncelogError as err:
                partitions.append(pb.PartitionProducers(topic_partition=tp, error=to_error_info(err)))
        return pb.DescribeProducersResponse(partitions=partitions)

    async def DescribeReplicas(
        self, request: pb.DescribeReplicasRequest, context: object
    ) -> pb.DescribeReplicasResponse:
        partitions = []
        for tp in request.partitions:
            try:
                described = await self._partitions.describe_replicas(tp.topic, tp.partition)
                replicas = [
                    pb.ReplicaPosition(
                        node_id=r.node_id,
                        log_end_offset=r.log_end_offset,
                        lag=r.lag,
                        in_sync=r.in_sync,
                        caught_up_ms_ago=r.caught_up_ms_ago,
                    )
                    for r in described.replicas
                ]
                partitions.append(
                    pb.PartitionReplicas(
                        topic_partition=tp,
                        leader_epoch=described.leader_epoch,
                        high_watermark=described.high_watermark,
                        replicas=replicas,
                    )
                )
            except OncelogError as err:
                partitions.append(pb.PartitionReplicas(topic_partition=tp, error=to_error_info(err)))
        return pb.DescribeReplicasResponse(partitions=partitions)


def _isolation(value: int) -> IsolationLevel:
    isolation = _ISOLATION.get(value)
    if isolation is None:
        raise InvalidRequest(f"isolation_level={value} is not a known IsolationLevel value")
    return isolation


def _marker_spec(marker: common_pb.TxnMarker) -> TxnMarkerSpec:
    result = _RESULT.get(marker.result)
    if result is None:
        raise InvalidRequest(f"marker result {marker.result} must be COMMIT or ABORT")
    producer = marker.producer
    if producer.producer_id < 0 or not 0 <= producer.producer_epoch <= _MAX_PRODUCER_EPOCH:
        raise InvalidRequest(
            f"marker producer id {producer.producer_id} / epoch {producer.producer_epoch} is invalid: the id must be "
            f">= 0 and the epoch in [0, {_MAX_PRODUCER_EPOCH}]"
        )
    if marker.coordinator_epoch < 0:
        raise InvalidRequest(f"marker coordinator epoch {marker.coordinator_epoch} must be >= 0")
    return TxnMarkerSpec(producer.producer_id, producer.producer_epoch, marker.coordinator_epoch, result)


def _response_now(written: Sequence[_Written]) -> pb.ProduceResponse | None:
    """The response if no partition has to wait for an fsync (errors, ``flush=async``, durable duplicates)."""
    results = []
    for tp, outcome in written:
        if isinstance(outcome, PendingAppend):
            if not outcome.acknowledged:
                return None
            results.append(_produce_result(tp, outcome.result))
        else:
            results.append(_produce_result(tp, outcome))
    return pb.ProduceResponse(results=results)


def _produce_result(tp: common_pb.TopicPartition, outcome: AppendResult | OncelogError) -> pb.PartitionProduceResult:
    if isinstance(outcome, OncelogError):
        return pb.PartitionProduceResult(
            topic_partition=tp, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1, error=to_error_info(outcome)
        )
    return pb.PartitionProduceResult(
        topic_partition=tp,
        base_offset=outcome.base_offset,
        log_append_time_ms=-1,
        log_start_offset=outcome.log_start_offset,
        duplicate=outcome.duplicate,
    )


def _failed_produce(request: pb.ProduceRequest, err: OncelogError) -> pb.ProduceResponse:
    return pb.ProduceResponse(results=[_produce_result(p.topic_partition, err) for p in request.partitions])


def _fetch_result(tp: common_pb.TopicPartition, outcome: FetchResult | OncelogError) -> pb.FetchPartitionResult:
    if isinstance(outcome, OncelogError):
        return pb.FetchPartitionResult(
            topic_partition=tp,
            high_watermark=-1,
            last_stable_offset=-1,
            log_start_offset=-1,
            error=to_error_info(outcome),
        )
    return pb.FetchPartitionResult(
        topic_partition=tp,
        high_watermark=outcome.high_watermark,
        last_stable_offset=outcome.last_stable_offset,
        log_start_offset=outcome.log_start_offset,
        aborted_transactions=[
            pb.AbortedTransaction(producer_id=t.producer_id, first_offset=t.first_offset)
            for t in outcome.aborted_transactions
        ],
        records=outcome.records,
    )


def _copy_result(tp: common_pb.TopicPartition, outcome: CopyResult | OncelogError) -> pb.ReplicaFetchPartitionResult:
    if isinstance(outcome, OncelogError):
        return pb.ReplicaFetchPartitionResult(topic_partition=tp, error=to_error_info(outcome))
    diverging = None
    if outcome.diverging_epoch is not None:
        diverging = pb.EpochEndOffset(epoch=outcome.diverging_epoch[0], end_offset=outcome.diverging_epoch[1])
    return pb.ReplicaFetchPartitionResult(
        topic_partition=tp,
        high_watermark=outcome.high_watermark,
        log_start_offset=outcome.log_start_offset,
        records=outcome.records,
        diverging_epoch=diverging,
    )
