"""oncelog's Python client: ``Producer``, ``Consumer`` and ``AdminClient`` with Kafka's names and semantics.

Import from here::

    from oncelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition

(``oncelog`` itself is a namespace package shared by the services, so the public path is
``oncelog.client``.) Without a ``bootstrap`` argument every client reads ``.oncelog/cluster.json``, which
``oncelog dev`` writes. Every exception the library raises is an :class:`~oncelog.errors.OncelogError`;
:class:`ProducerFencedError` and the other :class:`FatalError` kinds end a producer,
:class:`AbortableError` ends a transaction, :class:`RetriableError` ran out of retry time (see
:mod:`oncelog.client.errors`).
"""

from oncelog.client.admin import (
    AdminClient,
    ConfigEntry,
    NewTopic,
    ProducerStateDescription,
    ReplicaDescription,
    TransactionDescription,
    TransactionListing,
)
from oncelog.client.consumer import Consumer
from oncelog.client.errors import (
    AbortableError,
    BufferExhaustedError,
    FatalError,
    IllegalStateError,
    InvalidProducerEpochError,
    ProducerFencedError,
    RetriableError,
)
from oncelog.client.group_membership import ConsumerRebalanceListener
from oncelog.client.metadata import ClusterDescription, NodeInfo, PartitionInfo, TopicInfo
from oncelog.client.producer import Producer, TransactionState
from oncelog.client.records import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    PreparedTransaction,
    RecordMetadata,
    TopicPartition,
)
from oncelog.client.transport import BootstrapError
from oncelog.client.two_phase import TokenMismatchError
from oncelog.errors import OncelogError

__all__ = [
    "ConsumerRebalanceListener",
    "AbortableError",
    "AdminClient",
    "BootstrapError",
    "BufferExhaustedError",
    "ClusterDescription",
    "ConfigEntry",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "FatalError",
    "IllegalStateError",
    "InvalidProducerEpochError",
    "NewTopic",
    "NodeInfo",
    "OffsetAndMetadata",
    "OncelogError",
    "PartitionInfo",
    "PreparedTransaction",
    "Producer",
    "ProducerFencedError",
    "ProducerStateDescription",
    "ReplicaDescription",
    "RecordMetadata",
    "RetriableError",
    "TokenMismatchError",
    "TopicInfo",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
    "TransactionState",
]
