"""Public value types of the client library, named and shaped after Kafka's Java client.

These are what a user handles: the partition a record goes to (:class:`TopicPartition`), the
acknowledgement of a sent record (:class:`RecordMetadata`), a consumed record
(:class:`ConsumerRecord`), an offset to commit (:class:`OffsetAndMetadata`), the group
identity a transactional producer commits offsets under (:class:`ConsumerGroupMetadata`,
KIP-447, design/kafka-semantics.md §5.3), and what the cluster answers about itself: topics and
leaders (:class:`TopicInfo`, :class:`PartitionInfo`), nodes (:class:`ClusterDescription`), producers
and transactions (:class:`ProducerStateDescription`, :class:`TransactionDescription`). All are immutable;
:mod:`oncelog.client.services` converts them to and from the wire.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from oncelog.records import TimestampType
from oncelog.vocabulary import TopicPartition  # re-exported: public API

__all__ = [
    "ClusterDescription",
    "ConfigEntry",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "NewTopic",
    "NodeInfo",
    "OffsetAndMetadata",
    "PartitionInfo",
    "ProducerStateDescription",
    "ReplicaDescription",
    "RecordMetadata",
    "TopicInfo",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
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


_SLOTS = ConsumerRecord.__dict__
_NEW = object.__new__
(_SET_TOPIC, _SET_PARTITION, _SET_OFFSET, _SET_TIMESTAMP, _SET_TIMESTAMP_TYPE, _SET_KEY, _SET_VALUE, _SET_HEADERS,
 _SET_LEADER_EPOCH) = (_SLOTS[f].__set__ for f in ("topic", "partition", "offset", "timestamp", "timestamp_type", "key",
                                                    "value", "headers", "leader_epoch"))  # fmt: skip


def new_consumer_record(
    topic: str,
    partition: int,
    offset: int,
    timestamp: int,
    timestamp_type: TimestampType,
    key: bytes | None,
    value: bytes | None,
    headers: tuple[tuple[str, bytes | None], ...],
    leader_epoch: int | None,
) -> ConsumerRecord:
    """The :class:`ConsumerRecord` of these fields, as the constructor makes it, for the consumer's per-record path:
    the frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``, this sets its slots directly
    (about 4x faster; the record stays frozen)."""
    record = _NEW(ConsumerRecord)
    _SET_TOPIC(record, topic)
    _SET_PARTITION(record, partition)
    _SET_OFFSET(record, offset)
    _SET_TIMESTAMP(record, timestamp)
    _SET_TIMESTAMP_TYPE(record, timestamp_type)
    _SET_KEY(record, key)
    _SET_VALUE(record, value)
    _SET_HEADERS(record, headers)
    _SET_LEADER_EPOCH(record, leader_epoch)
    return record


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


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition's leadership (Kafka's ``PartitionInfo``).

    Attributes:
        topic: the topic.
        partition: the partition index.
        leader_node_id: the partition-storage node leading it.
        leader_address: host:port of the leader, empty while the leader is not live.
        leader_epoch: increases on every leadership change; produce and fetch carry it for fencing.
        replicas: node ids holding a copy, the preferred leader first.
        isr: the in-sync replicas.
        partition_epoch: grows on every change of leader, ISR or replicas.
    """

    topic: str
    partition: int
    leader_node_id: str
    leader_address: str
    leader_epoch: int
    replicas: tuple[str, ...] = ()
    isr: tuple[str, ...] = ()
    partition_epoch: int = 0

    @property
    def topic_partition(self) -> TopicPartition:
        """The partition as a :class:`TopicPartition`."""
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic as the catalog describes it.

    Attributes:
        name: the topic name.
        topic_id: a UUID fixed at creation (a re-created topic is another topic).
        partitions: the partitions in index order.
        configs: the topic's settings as strings (``flush``, ``max_message_bytes``, ...).
    """

    name: str
    topic_id: str
    partitions: tuple[PartitionInfo, ...]
    configs: Mapping[str, str] = field(default_factory=dict)

    def available_partitions(self) -> list[int]:
        """Partitions whose leader is live right now."""
        return [p.partition for p in self.partitions if p.leader_address]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One registered process of the cluster.

    Attributes:
        node_id: the node's stable id.
        role: ``pid-allocator``, ``txn-coordinator``, ``partition-storage`` or ``group-offsets``.
        address: host:port where it serves gRPC.
        node_epoch: grows each time the node registers again.
        lease_expires_at_ms: when its registration lapses unless renewed (Unix ms).
    """

    node_id: str
    role: str
    address: str
    node_epoch: int
    lease_expires_at_ms: int


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """Answer of DescribeCluster.

    Attributes:
        cluster_id: fixed at cluster creation.
        nodes: the live nodes (all registered ones when asked to include expired).
        txn_coordinator_shards: the fixed number of transaction coordinator shards.
        group_offsets_shards: the fixed number of group offsets shards.
    """

    cluster_id: str
    nodes: tuple[NodeInfo, ...]
    txn_coordinator_shards: int
    group_offsets_shards: int

    def addresses(self, role: str) -> list[str]:
        """Addresses of the nodes of one role."""
        return [n.address for n in self.nodes if n.role == role and n.address]


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create.

    Attributes:
        name: ``[a-zA-Z0-9._-]{1,249}``.
        num_partitions: at least 1.
        configs: topic settings: ``flush`` (``sync``/``async``), ``max_message_bytes``, ``retention_ms``,
            ``retention_bytes``, ``segment_bytes``, ``segment_ms``, ``min_insync_replicas`` (in-sync copies an
            acks=all write needs; at most the replication factor).
        replication_factor: copies of each partition, 1 to the number of live storage nodes; None uses the
            cluster's ``default_replication_factor``.
    """

    name: str
    num_partitions: int = 1
    configs: Mapping[str, str] = field(default_factory=dict)
    replication_factor: int | None = None


@dataclass(frozen=True, slots=True)
class ProducerStateDescription:
    """One producer id's state on a partition (Kafka's ``ProducerState``, KIP-664).

    Attributes:
        producer_id: the producer id.
        producer_epoch: its latest epoch on the partition.
        last_sequence: last sequence written, -1 if none.
        last_timestamp_ms: time of its last write or marker.
        coordinator_epoch: epoch of the coordinator that wrote its last marker, -1 if none.
        current_transaction_start_offset: first offset of its open transaction, None when none is open.
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp_ms: int
    coordinator_epoch: int
    current_transaction_start_offset: int | None


@dataclass(frozen=True, slots=True)
class ReplicaDescription:
    """One replica of a partition as its leader sees it (``oncelog partitions describe``'s lag column).

    Attributes:
        node_id: the storage node holding the replica.
        log_end_offset: the replica's log end (-1: the follower has not fetched since the leader's epoch began).
        lag: the leader's log end minus the replica's; 0 for the leader.
        in_sync: the replica is in the ISR.
        caught_up_ms_ago: how long ago the follower last reached the leader's log end; -1 not in this epoch.
    """

    node_id: str
    log_end_offset: int
    lag: int
    in_sync: bool
    caught_up_ms_ago: int


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One row of :meth:`AdminClient.list_transactions`.

    Attributes:
        transactional_id: the producer's stable id.
        producer_id: its current producer id.
        state: ``empty``, ``ongoing``, ``prepare_commit``, ``prepare_abort``, ``complete_commit``,
            ``complete_abort``, ``prepare_epoch_fence``, ``dead`` or ``prepared``.
        transaction_start_time_ms: when the open transaction started, -1 if none.
        prepared_time_ms: when it was prepared (two-phase commit), -1 unless it is or was prepared.
    """

    transactional_id: str
    producer_id: int
    state: str
    transaction_start_time_ms: int
    prepared_time_ms: int = -1


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """The coordinator's view of a transactional id (Kafka's ``TransactionDescription``).

    Attributes:
        transactional_id: the producer's stable id.
        state: as in :class:`TransactionListing`.
        producer_id: current producer id.
        producer_epoch: current epoch.
        transaction_timeout_ms: the timeout the producer asked for.
        transaction_start_time_ms: when the open transaction started, -1 if none.
        partitions: partitions of the open or completing transaction.
        groups: consumer groups whose offsets it commits.
        coordinator_node_id: the coordinator owning the id's shard.
        coordinator_epoch: that coordinator's epoch on the shard.
        last_update_time_ms: when the state last changed.
        prepared_time_ms: when it was prepared (two-phase commit), -1 unless it is or was prepared.
        check_back_address: the check-back service registered when it was prepared, "" if none.
    """

    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int
    partitions: tuple[TopicPartition, ...]
    groups: tuple[str, ...]
    coordinator_node_id: str
    coordinator_epoch: int
    last_update_time_ms: int
    prepared_time_ms: int = -1
    check_back_address: str = ""


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """The token of a prepared transaction (two-phase commit, KIP-939): the identity its records carry.

    Store it with the outcome it stands for (the outbox does so in the same database commit as the rows), then pass
    it to ``Producer.complete_transaction``. :meth:`to_text` / :meth:`from_text` give it a stable string form.

    Attributes:
        transactional_id: the producer's stable id.
        producer_id: the producer id of the transaction's records.
        producer_epoch: the epoch of the transaction's records (the one it was prepared with).
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int

    def to_text(self) -> str:
        """``<producer_id>:<producer_epoch>:<transactional_id>``."""
        return f"{self.producer_id}:{self.producer_epoch}:{self.transactional_id}"

    @classmethod
    def from_text(cls, text: str) -> PreparedTransaction:
        """Parse :meth:`to_text`'s form.

        Raises:
            ValueError: the text is not a token, with what is wrong in it.
        """
        parts = text.split(":", 2)
        if len(parts) != 3 or not parts[2]:
            raise ValueError(f"{text!r} is not a prepared-transaction token (<producer_id>:<epoch>:<transactional_id>)")
        try:
            producer_id, epoch = int(parts[0]), int(parts[1])
        except ValueError:
            raise ValueError(f"{text!r}: producer id and epoch of a token are integers") from None
        if producer_id < 0 or not 0 <= epoch <= 32767:
            raise ValueError(f"{text!r}: producer id must be >= 0 and epoch within 0..32767")
        return cls(parts[2], producer_id, epoch)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One topic setting (Kafka's ``ConfigEntry``).

    Attributes:
        name: oncelog's name (``retention_ms``; Kafka's dotted names are accepted as input only).
        value: the effective value, as a string.
        source: ``"topic"`` when set on the topic, ``"default"`` otherwise.
    """

    name: str
    value: str
    source: str
