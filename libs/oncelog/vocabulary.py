"""The nouns every part of oncelog shares: partitions, isolation levels, marker types, producer identities, roles.

One definition each, used by the client library, the Spark connector, the test helpers and the services alike
(Kafka keeps the same nouns in ``org.apache.kafka.common``). Wire conversion lives in
:mod:`oncelog.client.services`; these are plain values with no gRPC in them.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = [
    "NO_PRODUCER_ID_AND_EPOCH",
    "ROLES",
    "ControlType",
    "CoordinatorKind",
    "IsolationLevel",
    "ProducerIdAndEpoch",
    "Role",
    "TopicPartition",
]


class TopicPartition(NamedTuple):
    """One partition of a topic: a dict key, sorted by topic then partition, unpacked as ``topic, partition``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class IsolationLevel(enum.Enum):
    """Which records a reader sees (Kafka's ``isolation.level``, design/kafka-semantics.md §4.5)."""

    READ_UNCOMMITTED = "read_uncommitted"
    """Every data record up to the high watermark, including open and aborted transactions."""
    READ_COMMITTED = "read_committed"
    """Only committed data, up to the last stable offset (design/architecture.md §1.4)."""


class ControlType(enum.IntEnum):
    """Type of a transaction marker: the type field of a control record key (Kafka's ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1


class ProducerIdAndEpoch(NamedTuple):
    """The identity stamped on every batch: producer id and epoch (Kafka's ``ProducerIdAndEpoch``)."""

    producer_id: int
    epoch: int

    @property
    def is_valid(self) -> bool:
        """True once InitProducerId (or a local bump) produced a usable identity."""
        return self.producer_id >= 0 and self.epoch >= 0

    def __str__(self) -> str:
        return f"producer id {self.producer_id} epoch {self.epoch}"


NO_PRODUCER_ID_AND_EPOCH = ProducerIdAndEpoch(-1, -1)
"""The identity before InitProducerId answered, or after the epoch space ran out."""


class CoordinatorKind(enum.Enum):
    """Which coordinator owns a key: a transactional id's transaction coordinator, or a group's offsets owner."""

    TRANSACTION = "transaction"
    GROUP = "group"


class Role(enum.StrEnum):
    """What a process of the cluster serves; the value is the name used in the catalog, the CLI and metrics."""

    PID_ALLOCATOR = "pid-allocator"
    TXN_COORDINATOR = "txn-coordinator"
    PARTITION_STORAGE = "partition-storage"
    GROUP_OFFSETS = "group-offsets"


ROLES: tuple[Role, ...] = tuple(Role)
"""Every role, in the order the catalog lists them."""
