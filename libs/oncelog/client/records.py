"""Public value types of the client library, named and shaped after Kafka's Java client.

These are what a user handles: the partition a record goes to (:class:`TopicPartition`), the
acknowledgement of a sent record (:class:`RecordMetadata`), a consumed record
(:class:`ConsumerRecord`), an offset to commit (:class:`OffsetAndMetadata`) and the group
identity a transactional producer commits offsets under (:class:`ConsumerGroupMetadata`,
KIP-447, design/kafka-semantics.md §5.3). All are immutable.
"""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.records import TimestampType
from oncelog.vocabulary import TopicPartition  # re-exported: public API

__all__ = [
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "OffsetAndMetadata",
    "RecordMetadata",
    "TopicPartition",
]


@dataclass(frozen=True, slots=True)
class RecordMetadata:
    """Where an acknowledged record was written (Kafka's ``RecordMetadata``).

    Attributes:
        topic: topic written to.
        partition: partition written to.
        offset: the record's offset in the partition; -1 when the server acknowledged the
            write without knowing the offset (a duplicate older than its cache, design/kafka-semantics.md §4.2).
        timestamp: the record's timestamp in Unix milliseconds: the broker's append time when
            the topic uses LogAppendTime, else the time the producer stamped.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition as a :class:`TopicPartition`."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class ConsumerRecord:
    """A record returned by ``Consumer.poll`` (Kafka's ``ConsumerRecord``).

    Attributes:
        topic: topic read from.
        partition: partition read from.
        offset: the record's offset; the consumer's position after it is ``offset + 1``.
        timestamp: Unix milliseconds, as given by ``timestamp_type``.
        timestamp_type: whether the producer (CREATE_TIME) or the broker (LOG_APPEND_TIME) set it.
        key: the key bytes, or None.
        value: the value bytes, or None (a tombstone).
        headers: ``(name, value)`` pairs in the order the producer added them.
        leader_epoch: the partition leader epoch that wrote the record, or None when unknown;
            committed with offsets so a new leader can detect log truncation.
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    leader_epoch: int | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition as a :class:`TopicPartition`."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """An offset to commit for a partition (Kafka's ``OffsetAndMetadata``).

    Attributes:
        offset: the next offset to consume, i.e. one past the last processed record.
        metadata: free-form text stored with the offset.
        leader_epoch: leader epoch of the last processed record, or None when unknown.
    """

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None

    def __post_init__(self) -> None:
        if self.offset < 0:
            raise ValueError(f"a committed offset must be >= 0, got {self.offset}")


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The consumer's group identity, passed to ``send_offsets_to_transaction`` (KIP-447,
    design/kafka-semantics.md §5.3).

    The group offsets service rejects a transactional offset commit whose generation or member
    is stale, which fences a zombie consumer that lost its partitions.

    Attributes:
        group_id: the consumer group.
        generation_id: the member epoch of a subscribed consumer (design/consumer-groups.md §6), or a classic
            generation; -1 skips the check.
        member_id: the member's id; empty skips the member check.
        group_instance_id: the static member id, or None.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None
