"""GrpcMarkerTransport: the marker channel's WriteTxnMarkers requests, through the typed service clients.

The :class:`~.marker_channel.MarkerTransport` of the service: one channel per destination address, and the request
made by :class:`~oncelog.client.services.PartitionStorageClient` or
:class:`~oncelog.client.services.GroupOffsetsClient` (``write_txn_markers``), the one place that builds it. Each
:class:`~.marker_channel.TxnMarkerEntry` becomes a :class:`~oncelog.client.services.TxnMarker` and each result a
:class:`~.marker_channel.TxnMarkerOutcome`. Transport failures arrive as ``NETWORK_EXCEPTION`` /
``REQUEST_TIMED_OUT`` errors; the channel to that address is closed, and the manager retries after re-resolving
the destination. The manager does its own retrying, so the clients make one attempt per request.
"""

from __future__ import annotations

from collections.abc import Sequence

from oncelog.client.services import GroupOffsetsClient, PartitionStorageClient, TxnMarker, TxnMarkerResult
from oncelog.errors import NetworkException, OncelogError
from oncelog.rpc import ChannelFactory, ChannelPool
from oncelog.vocabulary import ControlType, ProducerIdAndEpoch, TopicPartition

from .marker_channel import TRANSPORT_REASONS, DestinationService, MarkerDestination, TxnMarkerEntry, TxnMarkerOutcome
from .state import TransactionResult

_RESULT_TO_CONTROL = {TransactionResult.COMMIT: ControlType.COMMIT, TransactionResult.ABORT: ControlType.ABORT}


class GrpcMarkerTransport:
    """WriteTxnMarkers over gRPC to PartitionStorageService or GroupOffsetsService.

    Args:
        timeout_s: deadline of one call; an expired call is retried like a lost connection.
        channels: opens the channels (TLS, message size limits); plaintext defaults when omitted.
    """

    def __init__(self, *, timeout_s: float = 30.0, channels: ChannelFactory | None = None) -> None:
        self._channels = ChannelPool(channels)
        self._storage = PartitionStorageClient(self._channels.get, timeout_s=timeout_s)
        self._offsets = GroupOffsetsClient(self._channels.get, timeout_s=timeout_s)

    async def write_markers(
        self, destination: MarkerDestination, markers: Sequence[TxnMarkerEntry]
    ) -> Sequence[TxnMarkerOutcome]:
        """Send one request carrying ``markers``; see :class:`MarkerTransport`."""
        client = self._storage if destination.service is DestinationService.PARTITION_STORAGE else self._offsets
        try:
            results = await client.write_txn_markers(destination.address, [_marker(m) for m in markers])
        except OncelogError as error:
            if error.reason in TRANSPORT_REASONS:
                await self._channels.forget(destination.address)
            raise
        except OSError as exc:
            await self._channels.forget(destination.address)
            raise NetworkException(f"cannot reach {destination.address}: {exc}") from exc
        return [_outcome(result) for result in results]

    async def close(self) -> None:
        """Close every channel."""
        await self._channels.close()


def _marker(m: TxnMarkerEntry) -> TxnMarker:
    return TxnMarker(
        transactional_id=m.transactional_id,
        producer=ProducerIdAndEpoch(m.producer_id, m.producer_epoch),
        coordinator_epoch=m.coordinator_epoch,
        result=_RESULT_TO_CONTROL[m.result],
        partitions=tuple(TopicPartition(topic, partition) for topic, partition in m.partitions),
        groups=tuple(m.groups),
    )


def _outcome(result: TxnMarkerResult) -> TxnMarkerOutcome:
    return TxnMarkerOutcome(partition_errors=dict(result.partition_errors), group_errors=dict(result.group_errors))


__all__ = ["GrpcMarkerTransport"]
