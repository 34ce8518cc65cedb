"""GrpcReplicaTransport: the :class:`~oncelog.partition_storage.replica_fetcher.ReplicaTransport` over gRPC."""

from __future__ import annotations

from collections.abc import Sequence

import grpc

from oncelog.api.common import v1 as common_pb
from oncelog.api.storage import v1 as pb
from oncelog.errors import NetworkException, OncelogError
from oncelog.partition_storage.replica_fetcher import CopyPosition, CopyResult
from oncelog.rpc import ChannelFactory, ChannelPool, from_rpc_error
from oncelog.rpc.errors import from_error_info

__all__ = ["GrpcReplicaTransport"]


class GrpcReplicaTransport:
    """Sends ReplicaFetch to leaders, one cached channel per address.

    Args:
        channels: opens the channels (TLS, message size limits).
        slack_ms: added to the long-poll wait for the call's deadline.
    """

    def __init__(self, channels: ChannelFactory | None = None, *, slack_ms: int = 5_000) -> None:
        self._slack_ms = slack_ms
        self._channels = ChannelPool(channels)

    async def replica_fetch(
        self,
        address: str,
        follower_id: str,
        follower_epoch: int,
        positions: Sequence[CopyPosition],
        *,
        max_wait_ms: int,
        max_bytes: int,
    ) -> list[CopyResult | OncelogError]:
        """See :class:`~oncelog.partition_storage.replica_fetcher.ReplicaTransport`."""
        request = pb.ReplicaFetchRequest(
            replica_node_id=follower_id,
            replica_node_epoch=follower_epoch,
            max_wait_ms=max_wait_ms,
            max_bytes=max_bytes,
            partitions=[
                pb.ReplicaFetchPartition(
                    topic_partition=common_pb.TopicPartition(topic=p.topic, partition=p.partition),
                    current_leader_epoch=p.current_leader_epoch,
                    fetch_offset=p.fetch_offset,
                    last_fetched_epoch=p.last_fetched_epoch,
                    high_watermark=p.high_watermark,
                )
                for p in positions
            ],
        )
        channel = self._channels.get(address)
        try:
            response = await pb.PartitionStorageServiceStub(channel).ReplicaFetch(
                request, timeout=(max_wait_ms + self._slack_ms) / 1000
            )
        except grpc.RpcError as exc:
            await self._channels.forget(address)
            raise from_rpc_error(exc) from exc
        except OSError as exc:
            await self._channels.forget(address)
            raise NetworkException(f"cannot reach {address}: {exc}") from exc
        return [_result(r) for r in response.results]

    async def close(self) -> None:
        """Close every channel."""
        await self._channels.close()


def _result(r: pb.ReplicaFetchPartitionResult) -> CopyResult | OncelogError:
    if r.HasField("error") and r.error.reason != common_pb.ERROR_REASON_UNSPECIFIED:
        return from_error_info(r.error)
    diverging = (r.diverging_epoch.epoch, r.diverging_epoch.end_offset) if r.HasField("diverging_epoch") else None
    return CopyResult(r.records, r.high_watermark, r.log_start_offset, diverging)
