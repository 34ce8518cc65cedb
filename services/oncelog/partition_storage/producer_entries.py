"""The values the producer state is made of: one producer's entry, its cached batches, transactions, constants.

Kafka's ``ProducerStateEntry``, ``BatchMetadata``, ``CompletedTxn`` and ``TxnMetadata``
(design/kafka-semantics.md §4.1); immutable, so a staged append can never leak into committed state.
:mod:`oncelog.partition_storage.producer_state` validates and applies appends with them and re-exports them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

NO_PRODUCER_EPOCH = -1
"""Epoch of a producer the partition knows nothing about (Kafka's ``RecordBatch.NO_PRODUCER_EPOCH``)."""

NO_SEQUENCE = -1
"""Sequence reported when no data batch is cached (Kafka's ``RecordBatch.NO_SEQUENCE``)."""

NO_TIMESTAMP = -1
"""Timestamp of an entry that has seen neither data nor a marker."""

MAX_SEQUENCE = 2**31 - 1
"""Highest int32 sequence; the next one is 0 (design/kafka-semantics.md §1)."""

DEFAULT_MAX_BATCHES_PER_PRODUCER = 5
"""Batches remembered per producer for dedup: the client's limit of 5 in-flight requests
(design/kafka-semantics.md §4.1)."""

LATE_TRANSACTION_BUFFER_MS = 5 * 60 * 1000
"""Grace beyond the maximum transaction timeout before an open transaction counts as late (KIP-664)."""


def next_sequence(sequence: int) -> int:
    """The sequence that follows ``sequence``, wrapping ``2**31 - 1`` to 0."""
    return 0 if sequence == MAX_SEQUENCE else sequence + 1


class AppendOrigin(enum.Enum):
    """Who is appending, which decides how much is validated (design/kafka-semantics.md §4.2).

    * ``CLIENT``: produce requests; epoch, sequence and transaction checks.
    * ``COORDINATOR``: transaction markers and the group-offsets service's transactional offset writes;
      epoch and coordinator-epoch checks, no sequence checks (those writes carry no sequence).
    * ``REPLICATION``: replay of the local log during recovery (and, later, follower fetches); never rejects,
      because the data was validated when it was first written.
    """

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """What is remembered of one data batch, enough to answer a retry of it.

    Kafka stores (last_seq, last_offset, offset_delta); storing both ends explicitly avoids re-deriving the
    first sequence across the int32 wrap.
    """

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(frozen=True, slots=True)
class ProducerStateEntry:
    """Immutable state of one producer id on this partition (Kafka's ``ProducerStateEntry``,
    design/kafka-semantics.md §4.1).

    Every change builds a new entry, so a staged append can never leak into committed state.

    Attributes:
        producer_id: the producer id.
        producer_epoch: newest epoch seen in data or a marker; ``NO_PRODUCER_EPOCH`` if unknown.
        coordinator_epoch: coordinator epoch of the newest marker, -1 before any marker.
        last_timestamp: max timestamp of the newest data batch, or the newest marker's timestamp.
        current_txn_first_offset: first offset of the open transaction on this partition, if any.
        batches: up to the last 5 data batches of ``producer_epoch``, oldest first; cleared on an epoch change.
        last_update_ms: server clock at the last append that touched the entry; drives expiry (see
            :meth:`ProducerStateManager.remove_expired_producers`).
    """

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = NO_TIMESTAMP
    current_txn_first_offset: int | None = None
    batches: tuple[BatchMetadata, ...] = ()
    last_update_ms: int = -1

    @property
    def first_seq(self) -> int:
        """First sequence of the oldest cached batch, or ``NO_SEQUENCE``."""
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        """Last sequence of the newest cached batch, or ``NO_SEQUENCE``."""
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        """First offset of the oldest cached batch, or -1."""
        return self.batches[0].first_offset if self.batches else -1

    @property
    def last_data_offset(self) -> int:
        """Last offset of the newest cached batch, or -1."""
        return self.batches[-1].last_offset if self.batches else -1

    def find_batch(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this sequence range, if any."""
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction with data on this partition that a marker has just ended (Kafka's ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    """Offset of the marker."""
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class OngoingTxn:
    """An open transaction on this partition: undecided data from ``first_offset`` on."""

    producer_id: int
    first_offset: int


@dataclass(frozen=True, slots=True)
class ProducerDescription:
    """One row of DescribeProducers (KIP-664, design/kafka-semantics.md §5.4)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int | None
