"""Group-offset persistence: the SQL tables (the truth) and an in-memory twin; the optional Redis read cache over
them is :mod:`.offset_cache`.

Tables (the group-offsets state database, ``ONCELOG_GROUP_OFFSETS_STATE_DATABASE_URL``; design/architecture.md §2, §6):

* ``group_offsets`` — visible offsets per (group, topic, partition) with their ``commit_seq``;
* ``pending_txn_offsets`` — transactional offsets per (group, producer id, producer epoch, topic, partition);
* ``offset_groups`` — per group: learned generation and the next ``commit_seq``;
* ``offset_producers`` — per (group, producer id): newest producer epoch and coordinator epoch seen;
* ``offset_shard_epochs`` — per shard: the coordinator epoch of the replica allowed to write it;
* ``consumer_groups`` — per consumer group: epochs, assignor and target assignment as JSON
  (design/consumer-groups.md §5);
* ``consumer_group_members`` — per member: its epoch, subscription and assignment as JSON;
* ``consumer_group_ownership`` — per consumer group: the history of its members' ownership changes.

Fencing: every write transaction first runs ``UPDATE offset_shard_epochs SET coordinator_epoch = :e WHERE shard
= :s AND coordinator_epoch = :e`` for each shard it touches (in shard order). A row count of 0 means a newer
owner claimed the shard, and the transaction is rolled back. On PostgreSQL the update also takes the shard
row's lock, so writes of one shard are serialised and the new owner's claim waits for an in-flight write to
finish (or makes it fail); on SQLite ``BEGIN IMMEDIATE`` serialises every write anyway. Reads need no fence:
SQL is shared, so any replica reads the truth.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from oncelog.errors import StorageUnavailable
from oncelog.group_offsets.group_coordinator import OwnershipChange
from oncelog.group_offsets.group_state import ConsumerGroupState, decode_group, encode_header, encode_member
from oncelog.group_offsets.offset_manager import (
    CommittedOffset,
    GroupRecord,
    GroupView,
    OffsetTransaction,
    PartitionOffset,
    PendingOffset,
    ProducerRecord,
    ShardFence,
    ShardFenced,
    TopicPartition,
)
from oncelog.storage.sql import migrate

T = TypeVar("T")
log = logging.getLogger(__name__)

SCHEMA_NAME = "group-offsets"
metadata = sa.MetaData()

offset_shard_epochs = sa.Table(
    "offset_shard_epochs",
    metadata,
    sa.Column("shard", sa.Integer, primary_key=True),
    sa.Column("coordinator_epoch", sa.Integer, nullable=False),
)

offset_groups = sa.Table(
    "offset_groups",
    metadata,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("generation_id", sa.Integer, nullable=False),
    sa.Column("next_commit_seq", sa.BigInteger, nullable=False),
)

group_offsets = sa.Table(
    "group_offsets",
    metadata,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("committed_offset", sa.BigInteger, nullable=False),
    sa.Column("leader_epoch", sa.Integer, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("commit_seq", sa.BigInteger, nullable=False),
)

pending_txn_offsets = sa.Table(
    "pending_txn_offsets",
    metadata,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("producer_id", sa.BigInteger, primary_key=True),
    sa.Column("producer_epoch", sa.Integer, primary_key=True),
    sa.Column("topic", sa.String(249), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True),
    sa.Column("committed_offset", sa.BigInteger, nullable=False),
    sa.Column("leader_epoch", sa.Integer, nullable=False),
    sa.Column("metadata", sa.Text, nullable=False),
    sa.Column("commit_seq", sa.BigInteger, nullable=False),
)

offset_producers = sa.Table(
    "offset_producers",
    metadata,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("producer_id", sa.BigInteger, primary_key=True),
    sa.Column("producer_epoch", sa.Integer, nullable=False),
    sa.Column("coordinator_epoch", sa.Integer, nullable=False),
)

consumer_groups = sa.Table(
    "consumer_groups",
    metadata,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("group_epoch", sa.Integer, nullable=False),
    sa.Column("state", sa.Text, nullable=False),
)

consumer_group_members = sa.Table(
    "consumer_group_members",
    metadata,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("member_id", sa.String(255), primary_key=True),
    sa.Column("state", sa.Text, nullable=False),
)

consumer_group_ownership = sa.Table(
    "consumer_group_ownership",
    metadata,
    sa.Column("group_id", sa.String(255), primary_key=True),
    sa.Column("seq", sa.BigInteger, primary_key=True),
    sa.Column("member_id", sa.String(255), nullable=False),
    sa.Column("member_epoch", sa.Integer, nullable=False),
    sa.Column("owned", sa.Text, nullable=False),
)

MIGRATIONS: list[Callable[[Connection], None]] = []


@contextmanager
def _transaction(engine: Engine, **options: Any) -> Iterator[Connection]:
    """One transaction (``engine.begin()``) that reports database failures as StorageUnavailable.

    A failure before the commit is definite (nothing was written); a failure of the commit itself is not.
    """
    committing = False
    try:
        with engine.connect() as conn:
            if options:
                conn = conn.execution_options(**options)
            with conn.begin():
                yield conn
                committing = True
    except sa.exc.OperationalError as exc:
        if committing:
            raise StorageUnavailable(f"group-offsets commit failed: {exc.orig}", definite=False) from exc
        raise StorageUnavailable(f"group-offsets database unavailable: {exc.orig}", definite=True) from exc


def _value(row: Any) -> PartitionOffset:
    tp = TopicPartition(row.topic, row.partition)
    return PartitionOffset(tp, row.committed_offset, row.leader_epoch, row.metadata)


def _columns(value: PartitionOffset) -> dict[str, Any]:
    return {
        "topic": value.topic_partition.topic,
        "partition": value.topic_partition.partition,
        "committed_offset": value.offset,
        "leader_epoch": value.leader_epoch,
        "metadata": value.metadata,
    }


# ---------------------------------------------------------------------------------------------- SQL


class SqlOffsetStore:
    """:class:`OffsetStore` over SQLite or PostgreSQL (SQLAlchemy Core)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._postgres = engine.dialect.name == "postgresql"

    def migrate(self) -> None:
        """Create or upgrade the tables (safe with several replicas starting at once)."""
        migrate(self.engine, SCHEMA_NAME, metadata, MIGRATIONS)

    def claim_shard(self, shard: int, coordinator_epoch: int) -> bool:
        """Raise the shard's stored epoch to ``coordinator_epoch``; False if it is already higher."""
        while True:
            try:
                with _transaction(self.engine) as conn:
                    stored = conn.execute(
                        sa.select(offset_shard_epochs.c.coordinator_epoch).where(offset_shard_epochs.c.shard == shard)
                    ).scalar()
                    if stored is None:
                        conn.execute(
                            sa.insert(offset_shard_epochs).values(shard=shard, coordinator_epoch=coordinator_epoch)
                        )
                        return True
                    if stored > coordinator_epoch:
                        return False
                    if stored == coordinator_epoch:
                        return True
                    won = conn.execute(
                        sa.update(offset_shard_epochs)
                        .where(offset_shard_epochs.c.shard == shard, offset_shard_epochs.c.coordinator_epoch == stored)
                        .values(coordinator_epoch=coordinator_epoch)
                    ).rowcount
                    if won == 1:
                        return True
            except sa.exc.IntegrityError:
                pass  # another replica inserted the row first: read it again and compare epochs

    def write(self, fences: Mapping[str, ShardFence], work: Callable[[OffsetTransaction], T]) -> T:
        """Check every shard fence, then run ``work``, all in one SQL transaction."""
        with _transaction(self.engine) as conn:
            for fence in sorted(set(fences.values()), key=lambda f: f.shard):
                locked = conn.execute(
                    sa.update(offset_shard_epochs)
                    .where(
                        offset_shard_epochs.c.shard == fence.shard,
                        offset_shard_epochs.c.coordinator_epoch == fence.coordinator_epoch,
                    )
                    .values(coordinator_epoch=fence.coordinator_epoch)
                ).rowcount
                if locked != 1:
                    stored = conn.execute(
                        sa.select(offset_shard_epochs.c.coordinator_epoch).where(
                            offset_shard_epochs.c.shard == fence.shard
                        )
                    ).scalar()
                    raise ShardFenced(fence, stored)
            return work(_SqlTransaction(conn))

    def read_group(self, group_id: str, fence: ShardFence) -> GroupView:
        """Visible offsets and pending partitions from one snapshot (REPEATABLE READ on PostgreSQL)."""
        with self._read() as conn:
            committed = {
                TopicPartition(r.topic, r.partition): CommittedOffset(_value(r), r.commit_seq)
                for r in conn.execute(sa.select(group_offsets).where(group_offsets.c.group_id == group_id))
            }
            pending = frozenset(
                TopicPartition(r.topic, r.partition)
                for r in conn.execute(
                    sa.select(pending_txn_offsets.c.topic, pending_txn_offsets.c.partition)
                    .where(pending_txn_offsets.c.group_id == group_id)
                    .distinct()
                )
            )
        return GroupView(committed, pending)

    def read_consumer_group(self, group_id: str) -> ConsumerGroupState | None:
        """The consumer group as last written, or None."""
        with _transaction(self.engine) as conn:
            return _SqlTransaction(conn).consumer_group(group_id)

    def list_consumer_groups(self) -> list[ConsumerGroupState]:
        """Every consumer group."""
        with _transaction(self.engine) as conn:
            rows = conn.execute(sa.select(consumer_groups.c.group_id, consumer_groups.c.state)).all()
            members: dict[str, list[str]] = {}
            for m in conn.execute(sa.select(consumer_group_members.c.group_id, consumer_group_members.c.state)):
                members.setdefault(m.group_id, []).append(m.state)
        return [decode_group(r.group_id, r.state, members.get(r.group_id, [])) for r in rows]

    def ownership_history(self, group_id: str) -> list[OwnershipChange]:
        """The group's ownership changes, oldest first."""
        t = consumer_group_ownership
        with _transaction(self.engine) as conn:
            rows = conn.execute(sa.select(t).where(t.c.group_id == group_id).order_by(t.c.seq)).all()
        return [OwnershipChange(r.member_id, r.member_epoch, _decode_owned(r.owned), r.seq) for r in rows]

    def _read(self) -> AbstractContextManager[Connection]:
        if not self._postgres:
            return _transaction(self.engine)
        # Under READ COMMITTED each SELECT sees its own snapshot, and a marker committing between the two
        # SELECTs could hide both the pending rows and the offsets they became.
        return _transaction(self.engine, isolation_level="REPEATABLE READ")


class _SqlTransaction:
    """:class:`OffsetTransaction` over one open connection."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def group(self, group_id: str) -> GroupRecord:
        row = self._conn.execute(sa.select(offset_groups).where(offset_groups.c.group_id == group_id)).first()
        return GroupRecord() if row is None else GroupRecord(row.generation_id, row.next_commit_seq)

    def put_group(self, group_id: str, record: GroupRecord) -> None:
        values = {"generation_id": record.generation_id, "next_commit_seq": record.next_commit_seq}
        updated = self._conn.execute(
            sa.update(offset_groups).where(offset_groups.c.group_id == group_id).values(**values)
        ).rowcount
        if updated == 0:
            self._conn.execute(sa.insert(offset_groups).values(group_id=group_id, **values))

    def producer(self, group_id: str, producer_id: int) -> ProducerRecord | None:
        row = self._conn.execute(
            sa.select(offset_producers).where(
                offset_producers.c.group_id == group_id, offset_producers.c.producer_id == producer_id
            )
        ).first()
        return None if row is None else ProducerRecord(row.producer_epoch, row.coordinator_epoch)

    def put_producer(self, group_id: str, producer_id: int, record: ProducerRecord) -> None:
        values = {"producer_epoch": record.producer_epoch, "coordinator_epoch": record.coordinator_epoch}
        updated = self._conn.execute(
            sa.update(offset_producers)
            .where(offset_producers.c.group_id == group_id, offset_producers.c.producer_id == producer_id)
            .values(**values)
        ).rowcount
        if updated == 0:
            self._conn.execute(sa.insert(offset_producers).values(group_id=group_id, producer_id=producer_id, **values))

    def committed(self, group_id: str, partitions: Collection[TopicPartition]) -> dict[TopicPartition, CommittedOffset]:
        if not partitions:
            return {}
        topics = sorted({tp.topic for tp in partitions})
        rows = self._conn.execute(
            sa.select(group_offsets).where(group_offsets.c.group_id == group_id, group_offsets.c.topic.in_(topics))
        )
        wanted = set(partitions)
        found = {TopicPartition(r.topic, r.partition): CommittedOffset(_value(r), r.commit_seq) for r in rows}
        return {tp: c for tp, c in found.items() if tp in wanted}

    def put_committed(self, group_id: str, offsets: Sequence[CommittedOffset]) -> None:
        existing = self.committed(group_id, [o.value.topic_partition for o in offsets])
        inserts = [
            {"group_id": group_id, "commit_seq": o.commit_seq, **_columns(o.value)}
            for o in offsets
            if o.value.topic_partition not in existing
        ]
        updates = [
            {
                "b_topic": o.value.topic_partition.topic,
                "b_partition": o.value.topic_partition.partition,
                "b_offset": o.value.offset,
                "b_leader_epoch": o.value.leader_epoch,
                "b_metadata": o.value.metadata,
                "b_commit_seq": o.commit_seq,
            }
            for o in offsets
            if o.value.topic_partition in existing
        ]
        if inserts:
            self._conn.execute(sa.insert(group_offsets), inserts)
        if updates:
            self._conn.execute(
                sa.update(group_offsets)
                .where(
                    group_offsets.c.group_id == group_id,
                    group_offsets.c.topic == sa.bindparam("b_topic"),
                    group_offsets.c.partition == sa.bindparam("b_partition"),
                )
                .values(
                    committed_offset=sa.bindparam("b_offset"),
                    leader_epoch=sa.bindparam("b_leader_epoch"),
                    metadata=sa.bindparam("b_metadata"),
                    commit_seq=sa.bindparam("b_commit_seq"),
                ),
                updates,
            )

    def pending(self, group_id: str, producer_id: int) -> list[PendingOffset]:
        rows = self._conn.execute(
            sa.select(pending_txn_offsets)
            .where(pending_txn_offsets.c.group_id == group_id, pending_txn_offsets.c.producer_id == producer_id)
            .order_by(pending_txn_offsets.c.commit_seq)
        )
        return [PendingOffset(_value(r), r.producer_epoch, r.commit_seq) for r in rows]

    def put_pending(self, group_id: str, producer_id: int, offsets: Sequence[PendingOffset]) -> None:
        if not offsets:
            return
        t = pending_txn_offsets
        # A repeated partition within one producer epoch replaces the earlier row: delete, then insert.
        for o in offsets:
            self._conn.execute(
                sa.delete(t).where(
                    t.c.group_id == group_id,
                    t.c.producer_id == producer_id,
                    t.c.producer_epoch == o.producer_epoch,
                    t.c.topic == o.value.topic_partition.topic,
                    t.c.partition == o.value.topic_partition.partition,
                )
            )
        self._conn.execute(
            sa.insert(t),
            [
                {
                    "group_id": group_id,
                    "producer_id": producer_id,
                    "producer_epoch": o.producer_epoch,
                    "commit_seq": o.commit_seq,
                    **_columns(o.value),
                }
                for o in offsets
            ],
        )

    def delete_pending(self, group_id: str, producer_id: int, below_epoch: int) -> None:
        t = pending_txn_offsets
        self._conn.execute(
            sa.delete(t).where(
                t.c.group_id == group_id, t.c.producer_id == producer_id, t.c.producer_epoch < below_epoch
            )
        )

    def consumer_group(self, group_id: str) -> ConsumerGroupState | None:
        row = self._conn.execute(
            sa.select(consumer_groups.c.state).where(consumer_groups.c.group_id == group_id)
        ).first()
        if row is None:
            return None
        t = consumer_group_members
        members = self._conn.execute(sa.select(t.c.state).where(t.c.group_id == group_id)).scalars().all()
        return decode_group(group_id, row.state, members)

    def put_consumer_group(self, group: ConsumerGroupState, previous: ConsumerGroupState | None = None) -> None:
        """Write what changed since ``previous`` (everything when None): the header, changed and removed members."""
        if previous is None or _header_fields(previous) != _header_fields(group):
            values = {"group_epoch": group.group_epoch, "state": encode_header(group)}
            updated = self._conn.execute(
                sa.update(consumer_groups).where(consumer_groups.c.group_id == group.group_id).values(**values)
            ).rowcount
            if updated == 0:
                self._conn.execute(sa.insert(consumer_groups).values(group_id=group.group_id, **values))
        t = consumer_group_members
        if previous is None:
            self._conn.execute(sa.delete(t).where(t.c.group_id == group.group_id))
            changed = list(group.members.values())
            gone: list[str] = []
        else:
            # identity first: a group of M members rewrites the few that changed, not M dataclass comparisons
            changed = [m for k, m in group.members.items() if (p := previous.members.get(k)) is not m and p != m]
            gone = [k for k in previous.members if k not in group.members]
        for member_id in [*gone, *(m.member_id for m in changed)]:
            self._conn.execute(sa.delete(t).where(t.c.group_id == group.group_id, t.c.member_id == member_id))
        if changed:
            self._conn.execute(
                sa.insert(t),
                [{"group_id": group.group_id, "member_id": m.member_id, "state": encode_member(m)} for m in changed],
            )

    def delete_consumer_group(self, group_id: str) -> None:
        for table in (
            consumer_groups,
            consumer_group_members,
            consumer_group_ownership,
            group_offsets,
            pending_txn_offsets,
        ):
            self._conn.execute(sa.delete(table).where(table.c.group_id == group_id))

    def add_ownership_changes(self, group_id: str, changes: Sequence[OwnershipChange]) -> None:
        t = consumer_group_ownership
        last = self._conn.execute(sa.select(sa.func.max(t.c.seq)).where(t.c.group_id == group_id)).scalar()
        start = 0 if last is None else last + 1
        self._conn.execute(
            sa.insert(t),
            [
                {
                    "group_id": group_id,
                    "seq": start + i,
                    "member_id": c.member_id,
                    "member_epoch": c.member_epoch,
                    "owned": _encode_owned(c.owned),
                }
                for i, c in enumerate(changes)
            ],
        )


def _header_fields(group: ConsumerGroupState) -> tuple[object, ...]:
    """What :func:`encode_header` stores, compared without encoding it."""
    return (group.group_epoch, group.assignment_epoch, group.assignor, group.partition_counts, group.target)


def _encode_owned(owned: Collection[TopicPartition]) -> str:
    return json.dumps([[tp.topic, tp.partition] for tp in sorted(owned)], separators=(",", ":"))


def _decode_owned(raw: str) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(t, p) for t, p in json.loads(raw))


# ---------------------------------------------------------------------------------------------- in memory


@dataclass
class _MemoryState:
    shard_epochs: dict[int, int] = field(default_factory=dict)
    groups: dict[str, GroupRecord] = field(default_factory=dict)
    producers: dict[tuple[str, int], ProducerRecord] = field(default_factory=dict)
    committed: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    pending: dict[tuple[str, int], dict[tuple[int, TopicPartition], PendingOffset]] = field(default_factory=dict)
    consumer_groups: dict[str, ConsumerGroupState] = field(default_factory=dict)
    ownership: dict[str, list[OwnershipChange]] = field(default_factory=dict)


class MemoryOffsetStore:
    """:class:`OffsetStore` in process memory with the same all-or-nothing and fencing semantics as SQL.

    For unit tests and tools; it keeps nothing across restarts.
    """

    def __init__(self) -> None:
        self._state = _MemoryState()
        self._lock = threading.Lock()

    def claim_shard(self, shard: int, coordinator_epoch: int) -> bool:
        """Raise the shard's epoch; False if it is already higher."""
        with self._lock:
            stored = self._state.shard_epochs.get(shard)
            if stored is not None and stored > coordinator_epoch:
                return False
            self._state.shard_epochs[shard] = coordinator_epoch
            return True

    def write(self, fences: Mapping[str, ShardFence], work: Callable[[OffsetTransaction], T]) -> T:
        """Run ``work`` on a copy of the state and keep the copy only if it returns normally."""
        with self._lock:
            for fence in sorted(set(fences.values()), key=lambda f: f.shard):
                stored = self._state.shard_epochs.get(fence.shard)
                if stored != fence.coordinator_epoch:
                    raise ShardFenced(fence, stored)
            draft = copy.deepcopy(self._state)
            result = work(_MemoryTransaction(draft))
            self._state = draft
            return result

    def read_group(self, group_id: str, fence: ShardFence) -> GroupView:
        """The group's visible offsets and pending partitions."""
        with self._lock:
            committed = dict(self._state.committed.get(group_id, {}))
            pending = frozenset(
                tp for (group, _), rows in self._state.pending.items() if group == group_id for (_, tp) in rows
            )
        return GroupView(committed, pending)

    def read_consumer_group(self, group_id: str) -> ConsumerGroupState | None:
        """The consumer group, or None."""
        with self._lock:
            return self._state.consumer_groups.get(group_id)

    def list_consumer_groups(self) -> list[ConsumerGroupState]:
        """Every consumer group."""
        with self._lock:
            return list(self._state.consumer_groups.values())

    def ownership_history(self, group_id: str) -> list[OwnershipChange]:
        """The group's ownership changes, oldest first."""
        with self._lock:
            return list(self._state.ownership.get(group_id, []))


class _MemoryTransaction:
    def __init__(self, state: _MemoryState) -> None:
        self._s = state

    def group(self, group_id: str) -> GroupRecord:
        return self._s.groups.get(group_id, GroupRecord())

    def put_group(self, group_id: str, record: GroupRecord) -> None:
        self._s.groups[group_id] = record

    def producer(self, group_id: str, producer_id: int) -> ProducerRecord | None:
        return self._s.producers.get((group_id, producer_id))

    def put_producer(self, group_id: str, producer_id: int, record: ProducerRecord) -> None:
        self._s.producers[(group_id, producer_id)] = record

    def committed(self, group_id: str, partitions: Collection[TopicPartition]) -> dict[TopicPartition, CommittedOffset]:
        held = self._s.committed.get(group_id, {})
        return {tp: held[tp] for tp in partitions if tp in held}

    def put_committed(self, group_id: str, offsets: Sequence[CommittedOffset]) -> None:
        held = self._s.committed.setdefault(group_id, {})
        for o in offsets:
            held[o.value.topic_partition] = o

    def pending(self, group_id: str, producer_id: int) -> list[PendingOffset]:
        rows = self._s.pending.get((group_id, producer_id), {})
        return sorted(rows.values(), key=lambda p: p.commit_seq)

    def put_pending(self, group_id: str, producer_id: int, offsets: Sequence[PendingOffset]) -> None:
        rows = self._s.pending.setdefault((group_id, producer_id), {})
        for o in offsets:
            rows[(o.producer_epoch, o.value.topic_partition)] = o

    def delete_pending(self, group_id: str, producer_id: int, below_epoch: int) -> None:
        rows = self._s.pending.get((group_id, producer_id), {})
        for key in [k for k in rows if k[0] < below_epoch]:
            del rows[key]
        if not rows:
            self._s.pending.pop((group_id, producer_id), None)

    def consumer_group(self, group_id: str) -> ConsumerGroupState | None:
        return self._s.consumer_groups.get(group_id)

    def put_consumer_group(self, group: ConsumerGroupState, previous: ConsumerGroupState | None = None) -> None:
        self._s.consumer_groups[group.group_id] = group

    def delete_consumer_group(self, group_id: str) -> None:
        self._s.consumer_groups.pop(group_id, None)
        self._s.ownership.pop(group_id, None)
        self._s.committed.pop(group_id, None)
        for key in [k for k in self._s.pending if k[0] == group_id]:
            del self._s.pending[key]

    def add_ownership_changes(self, group_id: str, changes: Sequence[OwnershipChange]) -> None:
        history = self._s.ownership.setdefault(group_id, [])
        for c in changes:
            history.append(replace(c, seq=len(history)))
