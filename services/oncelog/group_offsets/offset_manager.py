"""OffsetMetadataManager: plain and transactional offset commits, transaction markers and fetches (pure domain).

Modelled on Kafka's ``OffsetMetadataManager`` (new group coordinator) and ``GroupMetadata`` (old one),
design/kafka-semantics.md §6,
with KIP-447 generation fencing (design/kafka-semantics.md §5.3) and KIP-890's epoch rule
(design/kafka-semantics.md §5.6). The manager holds no state of
its own: every request runs as one atomic unit of work against an :class:`OffsetStore` (the SQL tables in
production), so a replica that takes over a shard needs no loading phase and a crash never leaves half a
request applied.

How the pieces fit:

* Each group has a **commit order**: every offset write, plain or transactional, takes the next value of the
  group's ``next_commit_seq``. It plays the role of the record offset in ``__consumer_offsets``.
* **CommitOffsets** writes visible offsets at once.
* **TxnOffsetCommit** writes *pending* offsets keyed by (producer id, producer epoch, partition). They are
  invisible to FetchOffsets; ``require_stable`` fetches fail with UNSTABLE_OFFSET_COMMIT (retriable) while any
  exists for a requested partition.
* **WriteTxnMarkers** settles a producer's pending offsets: COMMIT copies each into the visible offsets only if
  it is newer in commit order than the visible one (a plain commit made after the transactional one wins,
  Kafka's ``completePendingTxnOffsetCommit``), ABORT drops them. A marker is acknowledged however often it
  arrives; repeats change nothing.

Fencing, per (group, producer id), in the ``ProducerRecord``:

* ``producer_epoch`` is the newest epoch seen from TxnOffsetCommit *or a marker*. A TxnOffsetCommit with an
  older epoch gets INVALID_PRODUCER_EPOCH. Because the coordinator bumps the epoch on every EndTxn (KIP-890,
  design/architecture.md §5) and writes the marker with the bumped epoch, a zombie's late TxnOffsetCommit that arrives
  after
  the marker is rejected instead of leaving a pending offset behind that would keep the group unstable forever
  (design/kafka-semantics.md §6, the franz-go #581 / Redpanda #6423 pitfall).
* For the same reason a marker settles only pending offsets written with an epoch *older* than its own: a row
  with the marker's epoch belongs to the producer's next transaction, so a delayed duplicate marker of the
  previous transaction cannot commit it early.
* ``coordinator_epoch`` is the newest transaction-coordinator epoch seen in a marker; an older one gets
  TRANSACTION_COORDINATOR_FENCED for that group (design/kafka-semantics.md §3.3). The producer epoch of a marker is not
  checked: the
  coordinator epoch is what fences markers, and refusing an authoritative abort would leave offsets pending.

Group membership: a group with consumer-group state (members joined through ConsumerGroupHeartbeat) fences
commits by member id and member epoch (design/consumer-groups.md §6: UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH,
STALE_MEMBER_EPOCH). Any other group learns the generation from commits: a commit naming a newer generation
moves the group to it; an older one gets ILLEGAL_GENERATION; a generation without a member id gets
UNKNOWN_MEMBER_ID; a request without membership information skips the checks (simple groups and admin tools,
as in Kafka).

Shards: every group belongs to one shard (``shard_for(group, n)``, like ``__consumer_offsets`` partitions).
The :class:`ShardOwnership` says whether this process owns the group's shard and at which coordinator epoch;
the store checks that epoch inside every write transaction, so a replica that lost its lease cannot write.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from oncelog.catalog.topics import validate_group_id
from oncelog.errors import (
    IllegalGeneration,
    InvalidProducerEpoch,
    InvalidRequest,
    NotCoordinator,
    OncelogError,
    Reason,
    TransactionCoordinatorFenced,
    UnknownMemberId,
    UnknownTopicOrPartition,
    UnstableOffsetCommit,
)
from oncelog.vocabulary import TopicPartition

T = TypeVar("T")

NO_OFFSET = -1
"""Offset returned for a partition without a committed offset (Kafka's ``OffsetFetchResponse.INVALID_OFFSET``)."""

NO_LEADER_EPOCH = -1
"""Leader epoch of an offset committed without one."""

NO_GENERATION = -1
"""Generation of a group that has never seen membership information, and of requests that carry none."""

NO_PRODUCER_ID = -1
"""Producer id of a request that names no producer."""

NO_PRODUCER_EPOCH = -1
"""Producer epoch of a request that names no producer."""

NO_COORDINATOR_EPOCH = -1
"""Coordinator epoch stored for a producer before its first marker."""


MAX_TOPIC_LENGTH = 249
"""Longest topic name Kafka allows."""

DEFAULT_MAX_METADATA_BYTES = 4096
"""Kafka's ``offset.metadata.max.bytes`` default."""


# ---------------------------------------------------------------------------------------------- values


@dataclass(frozen=True)
class PartitionOffset:
    """The next offset to consume in one partition, as committed by a consumer."""

    topic_partition: TopicPartition
    offset: int
    leader_epoch: int = NO_LEADER_EPOCH
    metadata: str = ""


@dataclass(frozen=True)
class GroupMember:
    """Who sends a commit: the member's generation, member id and static instance id (KIP-447).

    All defaults mean "no membership information": the commit is not checked against the group's generation.
    """

    generation_id: int = NO_GENERATION
    member_id: str = ""
    group_instance_id: str = ""

    @property
    def given(self) -> bool:
        """True when the request carries membership information to check (Kafka's rule,
        design/kafka-semantics.md §6)."""
        return self.generation_id >= 0 or bool(self.member_id) or bool(self.group_instance_id)


NO_MEMBER = GroupMember()
"""A request without membership information."""


class TxnResult(enum.Enum):
    """What a marker does with a producer's pending offsets."""

    COMMIT = "commit"
    ABORT = "abort"


@dataclass(frozen=True)
class TxnMarker:
    """A transaction coordinator's decision for one producer, for the groups it names (design/kafka-semantics.md §3.1).

    ``result`` is None when the sender left it unspecified; validation rejects such a marker.
    """

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: TxnResult | None
    groups: tuple[str, ...]
    transactional_id: str = ""


@dataclass(frozen=True)
class GroupResult:
    """A marker's outcome for one group: ``error`` is None on success."""

    group_id: str
    error: OncelogError | None = None


@dataclass(frozen=True)
class ShardFence:
    """The shard of a group and the coordinator epoch under which this process owns it."""

    shard: int
    coordinator_epoch: int


class ShardFenced(OncelogError):
    """The store refused a write: the shard's coordinator epoch moved on, another replica owns it now.

    Its reason is NOT_COORDINATOR, so clients see the same error as for a shard this process never owned.
    """

    reason = Reason.NOT_COORDINATOR

    def __init__(self, fence: ShardFence, stored_epoch: int | None) -> None:
        stored = "was never claimed" if stored_epoch is None else f"is at coordinator epoch {stored_epoch}"
        super().__init__(
            f"group-offsets shard {fence.shard} {stored}, not {fence.coordinator_epoch}: this replica lost the "
            "shard; find the coordinator again",
            metadata={"shard": str(fence.shard)},
        )
        self.fence = fence


# ---------------------------------------------------------------------------------------------- store records


@dataclass(frozen=True)
class CommittedOffset:
    """A visible offset and its place in the group's commit order."""

    value: PartitionOffset
    commit_seq: int


@dataclass(frozen=True)
class PendingOffset:
    """A transactional offset waiting for its marker, with the producer epoch it was written with."""

    value: PartitionOffset
    producer_epoch: int
    commit_seq: int


@dataclass(frozen=True)
class GroupRecord:
    """Per-group state: the generation learned from commits and the next value of the commit order."""

    generation_id: int = NO_GENERATION
    next_commit_seq: int = 0


@dataclass(frozen=True)
class ProducerRecord:
    """Per (group, producer id) fencing state: newest producer epoch and coordinator epoch seen."""

    producer_epoch: int = NO_PRODUCER_EPOCH
    coordinator_epoch: int = NO_COORDINATOR_EPOCH


@dataclass(frozen=True)
class GroupView:
    """What FetchOffsets needs of a group: visible offsets and the partitions with pending offsets."""

    committed: Mapping[TopicPartition, CommittedOffset]
    pending: frozenset[TopicPartition]


# ---------------------------------------------------------------------------------------------- ports


class MemberFence(Protocol):
    """A consumer group's commit fencing (``ConsumerGroupState``, design/consumer-groups.md §6)."""

    def check_commit(
        self, member_id: str, member_epoch: int, partitions: Collection[TopicPartition], *, transactional: bool
    ) -> None:
        """Raise UnknownMemberId, FencedMemberEpoch or StaleMemberEpoch when the committer is fenced."""
        ...


class OffsetTransaction(Protocol):
    """Reads and writes inside one atomic store transaction (all or nothing)."""

    def consumer_group(self, group_id: str) -> MemberFence | None:
        """The group's consumer-group state, or None for a group without one (simple groups)."""
        ...

    def group(self, group_id: str) -> GroupRecord:
        """The group's record; a default record for a group never written."""
        ...

    def put_group(self, group_id: str, record: GroupRecord) -> None:
        """Create or replace the group's record."""
        ...

    def producer(self, group_id: str, producer_id: int) -> ProducerRecord | None:
        """Fencing state of a producer in the group, or None if it never wrote to or was marked in the group."""
        ...

    def put_producer(self, group_id: str, producer_id: int, record: ProducerRecord) -> None:
        """Create or replace a producer's fencing state."""
        ...

    def committed(self, group_id: str, partitions: Collection[TopicPartition]) -> dict[TopicPartition, CommittedOffset]:
        """Visible offsets of the given partitions (absent ones are left out)."""
        ...

    def put_committed(self, group_id: str, offsets: Sequence[CommittedOffset]) -> None:
        """Create or replace visible offsets (one per partition)."""
        ...

    def pending(self, group_id: str, producer_id: int) -> list[PendingOffset]:
        """Every pending offset of a producer in the group."""
        ...

    def put_pending(self, group_id: str, producer_id: int, offsets: Sequence[PendingOffset]) -> None:
        """Create or replace pending offsets, keyed by (producer epoch, partition)."""
        ...

    def delete_pending(self, group_id: str, producer_id: int, below_epoch: int) -> None:
        """Drop a producer's pending offsets written with an epoch lower than ``below_epoch``."""
        ...


class OffsetStore(Protocol):
    """Durable group-offset state; the manager's only dependency for data."""

    def write(self, fences: Mapping[str, ShardFence], work: Callable[[OffsetTransaction], T]) -> T:
        """Run ``work`` in one atomic transaction after checking each group's shard fence.

        Raises:
            ShardFenced: a shard's stored coordinator epoch differs from the fence; nothing was written.
            Any exception ``work`` raises, after rolling everything back.
        """
        ...

    def read_group(self, group_id: str, fence: ShardFence) -> GroupView:
        """A consistent view of a group's visible offsets and pending partitions."""
        ...

    def claim_shard(self, shard: int, coordinator_epoch: int) -> bool:
        """Raise the shard's stored coordinator epoch to ``coordinator_epoch`` so writes under older epochs fail.

        Returns False when the stored epoch is already higher (this claim is stale and must not serve).
        """
        ...


class ShardOwnership(Protocol):
    """Which groups this process may serve (the shard lease manager in production)."""

    def fence_for(self, group_id: str) -> ShardFence:
        """The fence to write the group under; raises NotCoordinator when this process does not own its shard."""
        ...

    def fenced(self, fence: ShardFence) -> None:
        """Report that the store rejected ``fence``: stop serving that shard until it is acquired again."""
        ...


class PartitionDirectory(Protocol):
    """Which partitions exist (the catalog in production); offsets are accepted for existing partitions only."""

    def unknown(self, partitions: Collection[TopicPartition]) -> list[TopicPartition]:
        """The partitions of ``partitions`` that do not exist, in sorted order."""
        ...


# ---------------------------------------------------------------------------------------------- manager


class OffsetMetadataManager:
    """Serves CommitOffsets, FetchOffsets, TxnOffsetCommit and WriteTxnMarkers for the groups this process owns.

    Methods are synchronous (they run store transactions); async callers use ``asyncio.to_thread``.

    Args:
        store: the durable tables.
        ownership: shard ownership and fences.
        partitions: when given, commits for partitions it does not know fail with UNKNOWN_TOPIC_OR_PARTITION
            (Kafka checks the metadata cache the same way).
        max_metadata_bytes: longest accepted offset metadata, UTF-8 encoded.
    """

    def __init__(
        self,
        store: OffsetStore,
        ownership: ShardOwnership,
        *,
        partitions: PartitionDirectory | None = None,
        max_metadata_bytes: int = DEFAULT_MAX_METADATA_BYTES,
    ) -> None:
        self._store = store
        self._ownership = ownership
        self._partitions = partitions
        self._max_metadata_bytes = max_metadata_bytes

    # ------------------------------------------------------------------------------ CommitOffsets

    def commit_offsets(
        self, group_id: str, member: GroupMember, offsets: Sequence[PartitionOffset]
    ) -> list[PartitionOffset]:
        """Make ``offsets`` visible at once (OffsetCommit); returns them as stored.

        Raises:
            InvalidRequest: malformed group id or offsets.
            UnknownTopicOrPartition: an offset names a partition that does not exist.
            NotCoordinator: this process does not own the group's shard.
            IllegalGeneration, UnknownMemberId, FencedMemberEpoch, StaleMemberEpoch: the member is fenced (see the
                module docstring).
        """
        self._check_group_id(group_id)
        self._check_offsets(offsets)
        self._check_member_fields(member)
        fence = self._ownership.fence_for(group_id)
        self._check_partitions_exist(offsets)

        def work(tx: OffsetTransaction) -> None:
            record = _check_member(tx, group_id, member, offsets, transactional=False)
            seq = record.next_commit_seq
            tx.put_committed(group_id, [CommittedOffset(o, seq + i) for i, o in enumerate(offsets)])
            tx.put_group(group_id, replace(record, next_commit_seq=seq + len(offsets)))

        self._write({group_id: fence}, work)
        return list(offsets)

    # ------------------------------------------------------------------------------ TxnOffsetCommit

    def commit_transactional_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        member: GroupMember,
        offsets: Sequence[PartitionOffset],
    ) -> list[PartitionOffset]:
        """Store ``offsets`` as pending for the producer's open transaction (TxnOffsetCommit,
        design/kafka-semantics.md §6).

        They stay invisible until a COMMIT marker for the producer arrives; an ABORT marker drops them.

        Raises:
            InvalidRequest: missing transactional id or producer, malformed group id or offsets.
            UnknownTopicOrPartition: an offset names a partition that does not exist.
            NotCoordinator: this process does not own the group's shard.
            IllegalGeneration, UnknownMemberId, FencedMemberEpoch, StaleMemberEpoch: the consumer is a zombie
                (KIP-447).
            InvalidProducerEpoch: a newer epoch of this producer id was already seen in the group.
        """
        if not transactional_id:
            raise InvalidRequest("transactional_id is required: the producer's transactional.id")
        if producer_id < 0 or producer_epoch < 0:
            raise InvalidRequest(
                f"producer is required: got producer_id={producer_id}, producer_epoch={producer_epoch}; "
                "send the (producer_id, producer_epoch) that InitProducerId returned"
            )
        self._check_group_id(group_id)
        self._check_offsets(offsets)
        self._check_member_fields(member)
        fence = self._ownership.fence_for(group_id)
        self._check_partitions_exist(offsets)

        def work(tx: OffsetTransaction) -> None:
            record = _check_member(tx, group_id, member, offsets, transactional=True)
            producer = tx.producer(group_id, producer_id)
            if producer is not None and producer_epoch < producer.producer_epoch:
                raise InvalidProducerEpoch(
                    f"group {group_id!r}: producer {producer_id} sent epoch {producer_epoch}, but epoch "
                    f"{producer.producer_epoch} was already seen; this producer instance has been fenced"
                )
            seq = record.next_commit_seq
            tx.put_pending(
                group_id, producer_id, [PendingOffset(o, producer_epoch, seq + i) for i, o in enumerate(offsets)]
            )
            if producer is None or producer_epoch > producer.producer_epoch:
                coordinator_epoch = NO_COORDINATOR_EPOCH if producer is None else producer.coordinator_epoch
                tx.put_producer(group_id, producer_id, ProducerRecord(producer_epoch, coordinator_epoch))
            tx.put_group(group_id, replace(record, next_commit_seq=seq + len(offsets)))

        self._write({group_id: fence}, work)
        return list(offsets)

    # ------------------------------------------------------------------------------ WriteTxnMarkers

    def write_txn_markers(self, markers: Sequence[TxnMarker]) -> list[list[GroupResult]]:
        """Apply markers in order, each in its own atomic transaction; one result per group of each marker.

        Every marker and every group is answered on its own, so a malformed one never holds back the others
        (a coordinator retries only what failed). Per-group outcomes: success, INVALID_REQUEST (the marker
        lacks its producer, result or coordinator epoch, names a group twice, or the group id breaks the
        group id rules), NOT_COORDINATOR (the shard is not ours), TRANSACTION_COORDINATOR_FENCED.
        """
        results: list[list[GroupResult]] = []
        for index, marker in enumerate(markers):
            try:
                self._check_marker(index, marker)
            except InvalidRequest as err:
                results.append([GroupResult(group_id, err) for group_id in marker.groups])
                continue
            refused: dict[str, OncelogError] = {}
            for group_id in marker.groups:
                try:
                    validate_group_id(group_id, f"markers[{index}]: group id")
                except InvalidRequest as err:
                    refused[group_id] = err
            valid = replace(marker, groups=tuple(g for g in marker.groups if g not in refused))
            applied = {r.group_id: r for r in self._complete_transaction(valid)}
            results.append([applied.get(g) or GroupResult(g, refused[g]) for g in marker.groups])
        return results

    def _complete_transaction(self, marker: TxnMarker) -> list[GroupResult]:
        errors: dict[str, OncelogError | None] = {}
        fences: dict[str, ShardFence] = {}
        for group_id in marker.groups:
            try:
                fences[group_id] = self._ownership.fence_for(group_id)
            except NotCoordinator as err:
                errors[group_id] = err
        while fences:
            work = functools.partial(_apply_marker_to_groups, groups=tuple(fences), marker=marker)
            try:
                errors.update(self._write(fences, work))
                break
            except ShardFenced as err:
                # The lease was lost between the ownership check and the write: answer NOT_COORDINATOR for that
                # shard's groups and apply the marker to the rest, still in one transaction.
                lost = [g for g, f in fences.items() if f == err.fence]
                for group_id in lost:
                    errors[group_id] = err
                    del fences[group_id]
        return [GroupResult(group_id, errors.get(group_id)) for group_id in marker.groups]

    # ------------------------------------------------------------------------------ FetchOffsets

    def fetch_offsets(
        self, group_id: str, partitions: Sequence[TopicPartition], require_stable: bool
    ) -> list[PartitionOffset]:
        """Visible offsets of ``partitions`` in request order (all of the group's, sorted, when empty).

        Partitions without a visible offset come back with offset -1. Pending transactional offsets are never
        returned; with ``require_stable`` their presence fails the call instead (KIP-447, design/kafka-semantics.md §6).

        Raises:
            InvalidRequest: malformed group id or partitions.
            NotCoordinator: this process does not own the group's shard.
            UnstableOffsetCommit: ``require_stable`` and a requested partition has pending offsets (retriable).
        """
        self._check_group_id(group_id)
        for tp in partitions:
            self._check_partition(tp)
        fence = self._ownership.fence_for(group_id)
        view = self._store.read_group(group_id, fence)
        # Answer only under a lease known held for the whole read: a shard lost (or lost and retaken at a new
        # epoch) meanwhile may have a newer owner whose commits this read did not see (a cache can lag).
        if self._ownership.fence_for(group_id) != fence:
            raise NotCoordinator(
                f"group {group_id!r}: shard {fence.shard} changed owner while its offsets were read; "
                "find the coordinator again and retry",
                metadata={"shard": str(fence.shard)},
            )
        if require_stable:
            unstable = sorted({tp for tp in partitions if tp in view.pending} if partitions else view.pending)
            if unstable:
                shown = ", ".join(str(tp) for tp in unstable[:10]) + (" …" if len(unstable) > 10 else "")
                raise UnstableOffsetCommit(
                    f"group {group_id!r} has transactional offsets pending for {shown}; retry once the "
                    "transaction completes (or abort it if it hangs)",
                    metadata={"partitions": ",".join(str(tp) for tp in unstable[:100])},
                )
        wanted = list(partitions) if partitions else sorted(view.committed)
        return [view.committed[tp].value if tp in view.committed else PartitionOffset(tp, NO_OFFSET) for tp in wanted]

    # ------------------------------------------------------------------------------ helpers

    def _write(self, fences: Mapping[str, ShardFence], work: Callable[[OffsetTransaction], T]) -> T:
        try:
            return self._store.write(fences, work)
        except ShardFenced as err:
            self._ownership.fenced(err.fence)
            raise

    @staticmethod
    def _check_group_id(group_id: str) -> None:
        validate_group_id(group_id)

    @staticmethod
    def _check_partition(tp: TopicPartition) -> None:
        if not tp.topic:
            raise InvalidRequest("a partition has an empty topic name; name the topic of every partition")
        if len(tp.topic) > MAX_TOPIC_LENGTH:
            raise InvalidRequest(f"topic name is {len(tp.topic)} characters long; the limit is {MAX_TOPIC_LENGTH}")
        if tp.partition < 0:
            raise InvalidRequest(f"partition={tp.partition} for topic {tp.topic!r}; partitions are numbered from 0")

    def _check_offsets(self, offsets: Sequence[PartitionOffset]) -> None:
        if not offsets:
            raise InvalidRequest("offsets is empty; give at least one partition offset to commit")
        seen: set[TopicPartition] = set()
        for o in offsets:
            tp = o.topic_partition
            self._check_partition(tp)
            if tp in seen:
                raise InvalidRequest(f"partition {tp} appears twice; commit one offset per partition")
            seen.add(tp)
            if o.offset < 0:
                raise InvalidRequest(f"offset={o.offset} for {tp}; commit the next offset to consume (0 or more)")
            if o.leader_epoch < NO_LEADER_EPOCH:
                raise InvalidRequest(f"leader_epoch={o.leader_epoch} for {tp}; use -1 when unknown")
            size = len(o.metadata.encode("utf-8"))
            if size > self._max_metadata_bytes:
                raise InvalidRequest(
                    f"metadata for {tp} is {size} bytes; the limit is {self._max_metadata_bytes} "
                    "(Kafka's OFFSET_METADATA_TOO_LARGE)"
                )

    def _check_partitions_exist(self, offsets: Sequence[PartitionOffset]) -> None:
        if self._partitions is not None:
            unknown = self._partitions.unknown({o.topic_partition for o in offsets})
            if unknown:
                raise UnknownTopicOrPartition(
                    f"no such partition(s): {', '.join(str(tp) for tp in unknown[:10])}; create the topic first "
                    "or check the partition count"
                )

    @staticmethod
    def _check_member_fields(member: GroupMember) -> None:
        if member.generation_id < NO_GENERATION:
            raise InvalidRequest(f"generation_id={member.generation_id}; use -1 when the member has no generation")

    @staticmethod
    def _check_marker(index: int, marker: TxnMarker) -> None:
        where = f"markers[{index}]"
        if marker.producer_id < 0 or marker.producer_epoch < 0:
            raise InvalidRequest(
                f"{where}: producer is required: got producer_id={marker.producer_id}, "
                f"producer_epoch={marker.producer_epoch}"
            )
        if marker.coordinator_epoch < 0:
            raise InvalidRequest(f"{where}: coordinator_epoch={marker.coordinator_epoch}; epochs are not negative")
        if marker.result is None:
            raise InvalidRequest(f"{where}: result is unspecified; send TRANSACTION_RESULT_COMMIT or _ABORT")
        seen: set[str] = set()
        for group_id in marker.groups:
            if group_id in seen:
                raise InvalidRequest(f"{where}: group {group_id!r} appears twice")
            seen.add(group_id)


def _check_member(
    tx: OffsetTransaction,
    group_id: str,
    member: GroupMember,
    offsets: Sequence[PartitionOffset],
    *,
    transactional: bool,
) -> GroupRecord:
    """KIP-447 fencing; returns the group record (with the generation to store, for a simple group).

    A consumer group (design/consumer-groups.md §6) checks member id and member epoch against its members;
    any other group checks against the generation learned from commits so far.
    """
    record = tx.group(group_id)
    consumer_group = tx.consumer_group(group_id)
    if consumer_group is not None:
        partitions = [o.topic_partition for o in offsets]
        consumer_group.check_commit(member.member_id, member.generation_id, partitions, transactional=transactional)
        return record
    if not member.given:
        return record
    if not member.member_id:
        raise UnknownMemberId(
            f"group {group_id!r}: generation {member.generation_id} was sent without a member id; "
            "commit with the member id the group assigned, or without any membership information"
        )
    if member.generation_id < record.generation_id:
        raise IllegalGeneration(
            f"group {group_id!r} is at generation {record.generation_id}; member {member.member_id!r} committed "
            f"with generation {member.generation_id}, so it no longer owns these partitions: rejoin the group"
        )
    if member.generation_id > record.generation_id:
        return replace(record, generation_id=member.generation_id)
    return record


def _apply_marker_to_groups(
    tx: OffsetTransaction, *, groups: Sequence[str], marker: TxnMarker
) -> dict[str, OncelogError | None]:
    return {group_id: _apply_marker(tx, group_id, marker) for group_id in groups}


def _apply_marker(tx: OffsetTransaction, group_id: str, marker: TxnMarker) -> OncelogError | None:
    """Settle the producer's pending offsets in one group (``replayEndTransactionMarker``,
    design/kafka-semantics.md §6).

    Validation comes before any write, so a rejected marker leaves the group untouched.
    """
    producer = tx.producer(group_id, marker.producer_id)
    if producer is not None and marker.coordinator_epoch < producer.coordinator_epoch:
        return TransactionCoordinatorFenced(
            f"group {group_id!r}: marker for producer {marker.producer_id} carries coordinator epoch "
            f"{marker.coordinator_epoch}, but epoch {producer.coordinator_epoch} was already seen; a newer "
            "transaction coordinator owns this transaction"
        )
    settled = [p for p in tx.pending(group_id, marker.producer_id) if p.producer_epoch < marker.producer_epoch]
    # KIP-890: EndTxn bumps the epoch and the marker carries it, so the transaction it ends wrote its offsets at
    # the epoch just below. Offsets pending from older epochs belong to transactions that never added this group
    # (a client that skipped AddOffsetsToTxn, whose markers never came here): they are dropped, never committed
    # by a later transaction's marker (design/exactly-once-audit.md §6).
    ours = [p for p in settled if p.producer_epoch == marker.producer_epoch - 1]
    if marker.result is TxnResult.COMMIT and ours:
        current = tx.committed(group_id, {p.value.topic_partition for p in ours})
        winners: dict[TopicPartition, CommittedOffset] = {}
        for pending in sorted(ours, key=lambda p: p.commit_seq):
            tp = pending.value.topic_partition
            held = winners.get(tp) or current.get(tp)
            if held is None or pending.commit_seq > held.commit_seq:
                winners[tp] = CommittedOffset(pending.value, pending.commit_seq)
        if winners:
            tx.put_committed(group_id, list(winners.values()))
    if settled:
        tx.delete_pending(group_id, marker.producer_id, below_epoch=marker.producer_epoch)
    before = producer or ProducerRecord()
    after = ProducerRecord(
        max(before.producer_epoch, marker.producer_epoch), max(before.coordinator_epoch, marker.coordinator_epoch)
    )
    if after != producer:
        tx.put_producer(group_id, marker.producer_id, after)
    return None
