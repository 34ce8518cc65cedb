"""Typed clients of the oncelog services: domain values in, domain values out, one retry table, one backoff.

Every gRPC service has one class here, and nothing else in the client library, the Spark connector or the
test helpers builds a request message by hand (Temporal's Python SDK wraps its stubs the same way):

* :class:`ClusterClient` — ClusterService, served by every process: nodes, topics, leaders, coordinators.
* :class:`PidAllocatorClient` — PidAllocatorService: blocks of producer ids.
* :class:`TransactionCoordinatorClient` — TransactionCoordinatorService: producer ids, transactions.
* :class:`TransactionCheckClient` — TransactionCheckService, an application's check-back of prepared transactions.
* :class:`PartitionStorageClient` — PartitionStorageService: fetch, offsets, epoch end offsets, producers, markers.
* :class:`GroupOffsetsClient` — GroupOffsetsService: committed and transactional offsets, markers.

A client makes one attempt per call and raises the server's :class:`~oncelog.errors.OncelogError`; a call
with one answer per partition returns the partition's error in place, so the caller decides per partition.
Which failures are worth another attempt is decided in one place, :data:`RETRY_TABLE`; how long to pause
between attempts in one place, :class:`RetryPolicy` (built on tenacity, design/client.md §3).

All calls are coroutines on a ``grpc.aio`` channel; ``channel_for`` maps an address to a channel (the
client's :class:`~oncelog.client.transport.Channels` pool, or one channel per address in a test).
:class:`BlockingClient` makes the calls of the Spark connector, which has no event loop, on blocking channels with
the same request builders and answer readers.
"""

from oncelog.client.fetch_filter import AbortedTransaction
from oncelog.client.services.blocking import BlockingClient, call_sync
from oncelog.client.services.cluster import ClusterClient, PidAllocatorClient, ProducerIdBlock
from oncelog.client.services.groups import GroupMember, GroupOffsetsClient, HeartbeatAnswer, MemberHeartbeat
from oncelog.client.services.retry import (
    RETRY_TABLE,
    Backoff,
    Deadline,
    Retry,
    RetryPolicy,
    call,
    is_retriable,
    retry_of,
)
from oncelog.client.services.storage import (
    EpochEndOffset,
    EpochQuery,
    FetchedPartition,
    FetchPosition,
    ListedOffset,
    OffsetQuery,
    PartitionResult,
    PartitionStorageClient,
    ProduceAnswer,
    ProduceEntry,
    ProduceSettings,
    ProduceStreamCall,
)
from oncelog.client.services.transactions import (
    EndTxnResult,
    InitProducerIdResult,
    TransactionCheckClient,
    TransactionCoordinatorClient,
    TxnMarker,
    TxnMarkerResult,
    fencing_abort_marker,
)
from oncelog.client.services.wire import ChannelSource, check_transaction_states, topic_info

__all__ = [
    "RETRY_TABLE",
    "AbortedTransaction",
    "Backoff",
    "BlockingClient",
    "ChannelSource",
    "ClusterClient",
    "Deadline",
    "EndTxnResult",
    "EpochEndOffset",
    "EpochQuery",
    "InitProducerIdResult",
    "FetchPosition",
    "FetchedPartition",
    "GroupMember",
    "GroupOffsetsClient",
    "HeartbeatAnswer",
    "ListedOffset",
    "MemberHeartbeat",
    "OffsetQuery",
    "PartitionResult",
    "PartitionStorageClient",
    "ProduceAnswer",
    "ProduceEntry",
    "ProduceSettings",
    "ProduceStreamCall",
    "PidAllocatorClient",
    "ProducerIdBlock",
    "Retry",
    "RetryPolicy",
    "TransactionCheckClient",
    "TransactionCoordinatorClient",
    "TxnMarker",
    "TxnMarkerResult",
    "fencing_abort_marker",
    "call",
    "call_sync",
    "check_transaction_states",
    "is_retriable",
    "retry_of",
    "topic_info",
]
