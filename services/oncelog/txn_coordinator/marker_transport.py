"""GrpcMarkerTransport: the marker channel's WriteTxnMarkers requests over gRPC.

The :class:`~.marker_channel.MarkerTransport` of the service: one channel per destination address, the request
built from :class:`~.marker_channel.TxnMarkerEntry` and each per-participant result read back into a
:class:`~.marker_channel.TxnMarkerOutcome`. Transport failures become ``NETWORK_EXCEPTION`` /
``REQUEST_TIMED_OUT`` errors, which the manager retries after re-resolving the destination.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.errors import NetworkException, OncelogError
from oncelog.rpc import ChannelFactory, from_error_info, from_rpc_error
from oncelog.vocabulary import TopicPartition

from .marker_channel import TRANSPORT_REASONS, DestinationService, MarkerDestination, TxnMarkerEntry, TxnMarkerOutcome
from .state import TransactionResult

_RESULT_TO_PB = {
    TransactionResult.COMMIT: common_pb.TRANSACTION_RESULT_COMMIT,
    TransactionResult.ABORT: common_pb.TRANSACTION_RESULT_ABORT,
}


class GrpcMarkerTransport:
    """WriteTxnMarkers over gRPC to PartitionStorageService or GroupOffsetsService.

    Args:
        timeout_s: deadline of one call; an expired call is retried like a lost connection.
        channels: opens the channels (TLS, message size limits); plaintext defaults when omitted.
    """

    def __init__(self, *, timeout_s: float = 30.0, channels: ChannelFactory | None = None) -> None:
        self._timeout_s = timeout_s
        self._factory = channels or ChannelFactory()
        self._channels: dict[str, grpc.aio.Channel] = {}

    async def write_markers(
        self, destination: MarkerDestination, markers: Sequence[TxnMarkerEntry]
    ) -> Sequence[TxnMarkerOutcome]:
        """Send one request carrying ``markers``; see :class:`MarkerTransport`."""
        channel = self._channel(destination.address)
        request_markers = [_marker_pb(m) for m in markers]
        try:
            if destination.service is DestinationService.PARTITION_STORAGE:
                response = await storage_pb.PartitionStorageServiceStub(channel).WriteTxnMarkers(
                    storage_pb.WriteTxnMarkersRequest(markers=request_markers), timeout=self._timeout_s
                )
            else:
                response = await offsets_pb.GroupOffsetsServiceStub(channel).WriteTxnMarkers(
                    offsets_pb.WriteTxnMarkersRequest(markers=request_markers), timeout=self._timeout_s
                )
        except grpc.RpcError as exc:
            error = from_rpc_error(exc)
            if error.reason in TRANSPORT_REASONS:
                await self._forget(destination.address)
            raise error from exc
        except OSError as exc:
            await self._forget(destination.address)
            raise NetworkException(f"cannot reach {destination.address}: {exc}") from exc
        return [_outcome_of(result) for result in response.results]

    def _channel(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._factory.aio(address)
            self._channels[address] = channel
        return channel

    async def _forget(self, address: str) -> None:
        # A node that restarted listens elsewhere; do not keep channels to dead addresses around.
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        """Close every channel."""
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close()


def _marker_pb(m: TxnMarkerEntry) -> common_pb.TxnMarker:
    return common_pb.TxnMarker(
        producer=common_pb.ProducerIdentity(producer_id=m.producer_id, producer_epoch=m.producer_epoch),
        coordinator_epoch=m.coordinator_epoch,
        result=_RESULT_TO_PB[m.result],
        partitions=[common_pb.TopicPartition(topic=t, partition=p) for t, p in m.partitions],
        groups=list(m.groups),
        transactional_id=m.transactional_id,
    )


def _error_of(holder: common_pb.PartitionError | common_pb.GroupError) -> OncelogError | None:
    if not holder.HasField("error") or holder.error.reason == common_pb.ERROR_REASON_UNSPECIFIED:
        return None
    return from_error_info(holder.error)


def _outcome_of(result: common_pb.TxnMarkerResult) -> TxnMarkerOutcome:
    return TxnMarkerOutcome(
        partition_errors={
            TopicPartition(e.topic_partition.topic, e.topic_partition.partition): _error_of(e)
            for e in result.partition_errors
        },
        group_errors={e.group_id: _error_of(e) for e in result.group_errors},
    )


__all__ = ["GrpcMarkerTransport"]
