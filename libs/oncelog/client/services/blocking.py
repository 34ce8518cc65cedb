"""Blocking twins of the typed clients, for processes without an event loop: the Spark connector's driver and
executors (design/spark-connector.md §5), whose readers are pickled and so keep only addresses, and open
synchronous channels per process.

They make the calls the connector needs with the same request builders and answer readers as the asyncio
clients (:mod:`oncelog.client.services.storage`, ``.cluster``, ``.groups``), so a request is still built in one
place. One attempt per call; failures raise the server's :class:`~oncelog.errors.OncelogError`, and retries are
the caller's (with :meth:`RetryPolicy.run_sync <oncelog.client.services.RetryPolicy.run_sync>`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

import grpc

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.client.records import OffsetAndMetadata, TopicInfo
from oncelog.client.services.cluster import find_coordinator_request, topics_of
from oncelog.client.services.groups import committed, fetch_offsets_request
from oncelog.client.services.storage import (
    FetchedPartition,
    FetchPosition,
    ListedOffset,
    OffsetQuery,
    fetch_request,
    fetched,
    list_offsets_request,
    listed,
)
from oncelog.errors import OncelogError
from oncelog.rpc.errors import from_rpc_error
from oncelog.vocabulary import CoordinatorKind, IsolationLevel, TopicPartition

__all__ = ["BlockingClient", "call_sync"]

T = TypeVar("T")

BlockingChannelSource = Callable[[str], grpc.Channel]
"""Returns the blocking channel to an address."""


def call_sync(rpc: Callable[..., T], request: object, *, timeout_s: float) -> T:
    """Make one blocking unary call and turn a failure into the server's domain error (as :func:`call`)."""
    try:
        return rpc(request, timeout=max(timeout_s, 0.001))
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from exc


class BlockingClient:
    """The blocking calls of the Spark connector, on ClusterService, PartitionStorageService and
    GroupOffsetsService; each takes the address of the server to call.

    Args:
        channel_for: the process's blocking channel to an address.
        timeout_s: deadline of one call.
    """

    def __init__(self, channel_for: BlockingChannelSource, *, timeout_s: float = 30.0) -> None:
        self._channel_for = channel_for
        self.timeout_s = timeout_s

    def metadata(self, address: str, topics: Iterable[str]) -> list[TopicInfo]:
        """The named topics, sorted by name (:meth:`ClusterClient.metadata`)."""
        stub = cluster_pb.ClusterServiceStub(self._channel_for(address))
        return topics_of(
            call_sync(stub.Metadata, cluster_pb.MetadataRequest(topics=list(topics)), timeout_s=self.timeout_s)
        )

    def find_coordinator(self, address: str, key: str, kind: CoordinatorKind) -> str:
        """The address of the process owning ``key``'s shard (:meth:`ClusterClient.find_coordinator`)."""
        stub = cluster_pb.ClusterServiceStub(self._channel_for(address))
        return call_sync(stub.FindCoordinator, find_coordinator_request(key, kind), timeout_s=self.timeout_s).address

    def list_offsets(
        self, address: str, queries: Mapping[TopicPartition, OffsetQuery], *, isolation: IsolationLevel
    ) -> dict[TopicPartition, ListedOffset | OncelogError]:
        """An offset per partition, or its error (:meth:`PartitionStorageClient.list_offsets`)."""
        stub = storage_pb.PartitionStorageServiceStub(self._channel_for(address))
        return listed(call_sync(stub.ListOffsets, list_offsets_request(queries, isolation), timeout_s=self.timeout_s))

    def fetch(
        self, address: str, positions: Iterable[FetchPosition], *, isolation: IsolationLevel, max_bytes: int
    ) -> list[FetchedPartition]:
        """Each position's answer without waiting for data (:meth:`PartitionStorageClient.fetch`)."""
        stub = storage_pb.PartitionStorageServiceStub(self._channel_for(address))
        request = fetch_request(positions, isolation, 0, 1, max_bytes)
        return fetched(call_sync(stub.Fetch, request, timeout_s=self.timeout_s))

    def fetch_offsets(
        self, address: str, group_id: str, partitions: Iterable[TopicPartition], *, require_stable: bool
    ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        """The group's committed offsets (:meth:`GroupOffsetsClient.fetch_offsets`)."""
        stub = offsets_pb.GroupOffsetsServiceStub(self._channel_for(address))
        request = fetch_offsets_request(group_id, partitions, require_stable)
        return committed(call_sync(stub.FetchOffsets, request, timeout_s=self.timeout_s))
