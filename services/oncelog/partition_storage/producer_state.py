"""Per-partition producer state: idempotent dedup, zombie fencing, open transactions and the LSO.

Modelled on Kafka's ``ProducerStateManager``, ``ProducerAppendInfo`` and ``ProducerStateEntry``
(design/kafka-semantics.md §4.1-§4.3, §4.6, §4.7) and on the partition side of WriteTxnMarkers
(design/kafka-semantics.md §3.3). The module works on
plain values taken from RecordBatch v2 headers, never on bytes, and does no I/O: time comes from an injected
clock, snapshots are returned as bytes for the caller to store.

How a partition log uses it, under its per-partition append lock:

1. Data from a client: ``check_duplicate`` before assigning offsets; a hit means "already written", answer
   with the original offsets and write nothing (design/architecture.md §1.1).
2. Marker from the coordinator: ``marker_already_applied``; a hit means acknowledge, write nothing
   (design/architecture.md §4).
3. ``prepare_append(origin)`` returns a :class:`ProducerAppendInfo`; feed it every batch of the request in
   offset order (``append_data_batch`` / ``append_marker``). Any validation error aborts the whole request.
4. Write the batches to the segment, append ``info.aborted_txns`` to the segment's transaction index, then
   ``commit(info)``. Commit right after the write (before fsync completes) so that the next request sees this
   one's sequences; acknowledge only after fsync. Nothing is changed unless ``commit`` runs (KAFKA-6683). If
   the write or the fsync fails, the state may be ahead of the disk: reload the partition from the log.
5. After fsync (the single-replica "high watermark"), call ``on_high_watermark_update``; read the LSO with
   ``last_stable_offset(high_watermark)``.

Recovery loads the newest snapshot with :meth:`ProducerStateManager.from_snapshot` and replays the log after
it with origin ``REPLICATION``, which never rejects: the log is the truth.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from types import MappingProxyType

from oncelog.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    OutOfOrderSequence,
    TransactionCoordinatorFenced,
)
from oncelog.partition_storage.producer_entries import (
    DEFAULT_MAX_BATCHES_PER_PRODUCER,
    LATE_TRANSACTION_BUFFER_MS,
    MAX_SEQUENCE,
    NO_PRODUCER_EPOCH,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    OngoingTxn,
    ProducerDescription,
    ProducerStateEntry,
    next_sequence,
)
from oncelog.partition_storage.producer_snapshot import SNAPSHOT_VERSION, decode_snapshot, encode_snapshot
from oncelog.partition_storage.txn_index import AbortedTxn
from oncelog.torture import mutants
from oncelog.vocabulary import ControlType

__all__ = [
    "DEFAULT_MAX_BATCHES_PER_PRODUCER",
    "LATE_TRANSACTION_BUFFER_MS",
    "MAX_SEQUENCE",
    "NO_PRODUCER_EPOCH",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "SNAPSHOT_VERSION",
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "OngoingTxn",
    "ProducerAppendInfo",
    "ProducerDescription",
    "ProducerStateEntry",
    "ProducerStateManager",
    "next_sequence",
]


class ProducerAppendInfo:
    """Validated, not yet committed producer-state changes of one append request (may hold many batches).

    Obtained from :meth:`ProducerStateManager.prepare_append`. Each call validates one batch against the
    committed state plus the batches staged before it, and stages the result; a call that raises leaves the
    staged state as it was. The manager changes only when :meth:`ProducerStateManager.commit` is called, so
    a request that fails half way leaves no trace (KAFKA-6683). Unlike Kafka's class of the same name, one
    instance covers every producer id of the request.
    """

    __slots__ = (
        "_aborted",
        "_base_version",
        "_closed_first_offsets",
        "_completed",
        "_entries",
        "_manager",
        "_next_offset",
        "_now_ms",
        "_started",
        "origin",
    )

    def __init__(self, manager: ProducerStateManager, origin: AppendOrigin, base_version: int, now_ms: int) -> None:
        """Use :meth:`ProducerStateManager.prepare_append` instead."""
        self._manager = manager
        self.origin = origin
        self._base_version = base_version
        self._now_ms = now_ms
        self._entries: dict[int, ProducerStateEntry] = {}
        self._started: list[OngoingTxn] = []
        self._completed: list[CompletedTxn] = []
        self._aborted: list[AbortedTxn] = []
        self._closed_first_offsets: set[int] = set()
        self._next_offset = -1

    @property
    def started_txns(self) -> tuple[OngoingTxn, ...]:
        """Transactions opened by this append, in offset order."""
        return tuple(self._started)

    @property
    def completed_txns(self) -> tuple[CompletedTxn, ...]:
        """Transactions with data that this append's markers end, in offset order."""
        return tuple(self._completed)

    @property
    def aborted_txns(self) -> tuple[AbortedTxn, ...]:
        """Index entries for the aborted ones among :attr:`completed_txns`, each with the LSO at its marker.

        Append them to the transaction index of the segment receiving this append before committing.
        """
        return tuple(self._aborted)

    @property
    def next_offset(self) -> int:
        """One past the highest offset staged, or -1 if nothing was staged."""
        return self._next_offset

    def staged_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """The entry ``producer_id`` will have after commit, if this append touched it."""
        return self._entries.get(producer_id)

    def append_data_batch(
        self,
        producer_id: int,
        producer_epoch: int,
        first_seq: int,
        last_seq: int,
        first_offset: int,
        last_offset: int,
        timestamp: int,
        is_transactional: bool,
    ) -> None:
        """Validate and stage one data batch (design/kafka-semantics.md §4.2, rules 3-6).

        Call :meth:`ProducerStateManager.check_duplicate` first: a retried batch that is not recognised as a
        duplicate there fails here with :class:`~oncelog.errors.OutOfOrderSequence`.

        Args:
            producer_id, producer_epoch, first_seq, last_seq: from the batch header (``last_seq`` already
                wrapped into int32 range).
            first_offset, last_offset: offsets assigned to the batch.
            timestamp: the batch's max timestamp.
            is_transactional: the batch's transactional attribute.

        Raises:
            InvalidProducerEpoch: the epoch is older than the producer's (a zombie or a late batch).
            OutOfOrderSequence: CLIENT origin, and the batch does not continue the producer's sequence: a gap,
                a retry older than the cached batches, or a new epoch not starting at 0.
            InvalidTxnState: a non-transactional batch while the producer has a transaction open here.
            InvalidRecord: CLIENT origin and a negative sequence.
        """
        if first_offset < 0 or last_offset < first_offset:
            raise ValueError(f"invalid offsets [{first_offset}, {last_offset}] for producer {producer_id}")
        origin = self.origin
        current = self._current(producer_id)
        if not mutants.active("no-epoch-check"):
            self._check_producer_epoch(current, producer_epoch, first_offset, strict=False)
        if origin is AppendOrigin.CLIENT and not mutants.active("skip-dedup"):
            self._check_sequence(current, producer_epoch, first_seq, first_offset)

        txn_first_offset = current.current_txn_first_offset
        if txn_first_offset is not None and not is_transactional and origin is not AppendOrigin.REPLICATION:
            raise InvalidTxnState(
                f"non-transactional batch from producer {producer_id} at offset {first_offset} while its "
                f"transaction started at offset {txn_first_offset} is open"
            )
        started = None
        if txn_first_offset is None and is_transactional:
            txn_first_offset = first_offset
            started = OngoingTxn(producer_id, first_offset)

        batch = BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp)
        kept = current.batches if producer_epoch == current.producer_epoch else ()
        self._entries[producer_id] = replace(
            current,
            producer_epoch=producer_epoch,
            batches=(*kept, batch)[-self._manager.max_batches_per_producer :],
            last_timestamp=timestamp,
            current_txn_first_offset=txn_first_offset,
            last_update_ms=self._now_ms,
        )
        if started is not None:
            self._started.append(started)
        self._next_offset = max(self._next_offset, last_offset + 1)

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        control_type: ControlType,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        *,
        strict_epoch: bool = False,
    ) -> CompletedTxn | None:
        """Validate and stage one COMMIT/ABORT marker (design/kafka-semantics.md §3.3 step 3).

        Call :meth:`ProducerStateManager.marker_already_applied` first to acknowledge a repeated marker
        without writing it again; appending it anyway is harmless (it completes nothing).

        Args:
            producer_id, producer_epoch: the transaction's producer.
            control_type: COMMIT or ABORT.
            coordinator_epoch: epoch of the coordinator shard that sent the marker.
            offset: offset assigned to the marker.
            timestamp: the marker's timestamp.
            strict_epoch: the coordinator bumped the epoch when ending the transaction (KIP-890 part 2,
                design/kafka-semantics.md §5.6), so the marker must carry an epoch above the data's; an equal epoch is
                accepted only
                as a retry when no transaction is open (KAFKA-19999). Without it, Kafka's classic rule applies:
                marker epoch >= producer epoch.

        Returns:
            The completed transaction if the producer had data open here, else ``None`` (an empty
            transaction: nothing to index, the LSO does not move).

        Raises:
            InvalidProducerEpoch: the marker's epoch is too old for this producer.
            TransactionCoordinatorFenced: the marker comes from an older coordinator epoch than the last one.
        """
        if offset < 0:
            raise ValueError(f"invalid marker offset {offset} for producer {producer_id}")
        current = self._current(producer_id)
        self._check_producer_epoch(current, producer_epoch, offset, strict=strict_epoch)
        if coordinator_epoch < current.coordinator_epoch and self.origin is not AppendOrigin.REPLICATION:
            raise TransactionCoordinatorFenced(
                f"marker for producer {producer_id} at offset {offset} has coordinator epoch {coordinator_epoch}, "
                f"older than {current.coordinator_epoch}"
            )

        completed = None
        txn_first_offset = current.current_txn_first_offset
        if txn_first_offset is not None:
            completed = CompletedTxn(producer_id, txn_first_offset, offset, control_type == ControlType.ABORT)
            self._closed_first_offsets.add(txn_first_offset)
            if completed.is_aborted:
                lso = self._first_open_offset()
                self._aborted.append(
                    AbortedTxn(producer_id, txn_first_offset, offset, offset + 1 if lso is None else lso)
                )
            self._completed.append(completed)

        self._entries[producer_id] = replace(
            current,
            producer_epoch=producer_epoch,
            batches=current.batches if producer_epoch == current.producer_epoch else (),
            coordinator_epoch=coordinator_epoch,
            current_txn_first_offset=None,
            last_timestamp=timestamp,
            last_update_ms=self._now_ms,
        )
        self._next_offset = max(self._next_offset, offset + 1)
        return completed

    def _current(self, producer_id: int) -> ProducerStateEntry:
        staged = self._entries.get(producer_id)
        if staged is not None:
            return staged
        committed = self._manager.last_entry(producer_id)
        return committed if committed is not None else ProducerStateEntry(producer_id)

    def _first_open_offset(self) -> int | None:
        """First offset of the earliest transaction open at this point of the append, if any."""
        for first_offset in self._manager._ongoing:
            if first_offset not in self._closed_first_offsets:
                return first_offset
        # Transactions started by this append come after every committed one (offsets only grow).
        for txn in self._started:
            if txn.first_offset not in self._closed_first_offsets:
                return txn.first_offset
        return None

    def _check_producer_epoch(self, current: ProducerStateEntry, epoch: int, offset: int, *, strict: bool) -> None:
        known = current.producer_epoch
        if epoch > known or (epoch == known and not strict):
            return
        if epoch == known and current.current_txn_first_offset is None:
            return  # strict rule: a retried marker of a transaction already ended here
        if self.origin is AppendOrigin.REPLICATION:
            return
        relation = "<=" if strict else "<"
        raise InvalidProducerEpoch(
            f"producer {current.producer_id} epoch {epoch} at offset {offset} is {relation} the last seen epoch {known}"
        )

    def _check_sequence(self, current: ProducerStateEntry, epoch: int, first_seq: int, offset: int) -> None:
        producer_id = current.producer_id
        if first_seq < 0:
            raise InvalidRecord(f"idempotent batch from producer {producer_id} at offset {offset} has no sequence")
        if epoch != current.producer_epoch:
            # A new epoch restarts sequences at 0. Only a producer we know nothing about (state expired or
            # removed with the log head) may continue anywhere: KIP-360 replaced UNKNOWN_PRODUCER_ID with this.
            if first_seq != 0 and current.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequence(
                    f"producer {producer_id} started epoch {epoch} at sequence {first_seq} at offset {offset}; "
                    f"a new epoch must start at 0 (current epoch {current.producer_epoch})"
                )
            return
        # Same epoch. A marker-only entry has no batches: its epoch is known, so sequence 0 is expected.
        expected = next_sequence(current.last_seq)
        if first_seq != expected:
            raise OutOfOrderSequence(
                f"producer {producer_id} epoch {epoch} sent sequence {first_seq} at offset {offset}; "
                f"expected {expected}"
            )


class ProducerStateManager:
    """Producer ids of one partition and their epochs, sequences and open transactions
    (design/kafka-semantics.md §4.1-4.3).

    Not thread-safe: the partition log calls it under its per-partition append lock.
    """

    def __init__(
        self,
        *,
        producer_id_expiration_ms: int,
        clock: Callable[[], int],
        max_batches_per_producer: int = DEFAULT_MAX_BATCHES_PER_PRODUCER,
    ) -> None:
        """Create an empty state.

        Args:
            producer_id_expiration_ms: idle time after which a producer without an open transaction is
                forgotten (``producer.id.expiration.ms``, design/kafka-semantics.md §4.7).
            clock: milliseconds since the epoch; stamps every change and is the default ``now`` of expiry.
            max_batches_per_producer: batches remembered per producer for duplicate detection.
        """
        if producer_id_expiration_ms <= 0:
            raise ValueError(f"producer_id_expiration_ms must be > 0, got {producer_id_expiration_ms}")
        if not 1 <= max_batches_per_producer <= 255:
            raise ValueError(f"max_batches_per_producer must be in [1, 255], got {max_batches_per_producer}")
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self.max_batches_per_producer = max_batches_per_producer
        self._clock = clock
        self._producers: dict[int, ProducerStateEntry] = {}
        # first offset -> producer id, kept in ascending offset order (see _add_ongoing).
        self._ongoing: dict[int, int] = {}
        # Completed transactions whose marker is not yet below the high watermark: first offset -> (pid, marker).
        self._unreplicated: dict[int, tuple[int, int]] = {}
        self._map_end_offset = 0
        # Bumped by every commit; detects an append info prepared before another append was committed.
        self._version = 0

    # ----------------------------------------------------------------------------------------------- queries

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """Read-only view of producer id -> entry."""
        return MappingProxyType(self._producers)

    @property
    def map_end_offset(self) -> int:
        """Offset up to which (exclusive) this state reflects the log; a snapshot is valid at this offset."""
        return self._map_end_offset

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        """Committed entry of ``producer_id``, if known."""
        return self._producers.get(producer_id)

    def check_duplicate(
        self, producer_id: int, producer_epoch: int, first_seq: int, last_seq: int
    ) -> BatchMetadata | None:
        """The original write of a retried batch, if it is one of the producer's cached batches
        (design/kafka-semantics.md §4.2 rule 1).

        Call before assigning offsets, for CLIENT appends only. A hit means the batch is already in the log:
        answer with the returned offsets and timestamp and write nothing. No error code is involved.
        """
        entry = self._producers.get(producer_id)
        if entry is None or entry.producer_epoch != producer_epoch or mutants.active("skip-dedup"):
            return None
        return entry.find_batch(first_seq, last_seq)

    def marker_already_applied(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> bool:
        """Whether a marker would change nothing here, so it can be acknowledged without being written.

        True when the producer has no open transaction on this partition and its epoch and coordinator epoch
        equal the marker's: the marker repeats one already written (the coordinator retries until it hears
        back), or ends a transaction that wrote nothing here. A marker that would fence (higher epoch) or
        record a newer coordinator epoch is not a repeat and must be appended.
        """
        entry = self._producers.get(producer_id)
        return (
            entry is not None
            and entry.current_txn_first_offset is None
            and entry.producer_epoch == producer_epoch
            and entry.coordinator_epoch == coordinator_epoch
        )

    def ongoing_txns(self) -> list[OngoingTxn]:
        """Open transactions, by first offset."""
        return [OngoingTxn(pid, first_offset) for first_offset, pid in self._ongoing.items()]

    def first_undecided_offset(self) -> int | None:
        """First offset of the earliest open transaction, if any."""
        return next(iter(self._ongoing), None)

    def first_unstable_offset(self) -> int | None:
        """First offset that is undecided, or decided by a marker not yet below the high watermark
        (design/kafka-semantics.md §4.3)."""
        candidates = list(self._unreplicated)
        undecided = self.first_undecided_offset()
        if undecided is not None:
            candidates.append(undecided)
        return min(candidates, default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        """The LSO: the first unstable offset if below ``high_watermark``, else ``high_watermark``
        (design/kafka-semantics.md §4.3)."""
        first_unstable = None if mutants.active("lso-ignores-open") else self.first_unstable_offset()
        return high_watermark if first_unstable is None else min(first_unstable, high_watermark)

    def has_late_transaction(self, max_transaction_timeout_ms: int, now_ms: int | None = None) -> bool:
        """Whether the oldest open transaction's producer has been silent for longer than the maximum
        transaction timeout plus 5 minutes: the hanging-transaction alarm of KIP-664
        (design/kafka-semantics.md §4.3)."""
        first = self.first_undecided_offset()
        if first is None:
            return False
        entry = self._producers.get(self._ongoing[first])
        if entry is None:
            return False
        now = self._clock() if now_ms is None else now_ms
        return now - entry.last_update_ms > max_transaction_timeout_ms + LATE_TRANSACTION_BUFFER_MS

    def describe_producers(self) -> list[ProducerDescription]:
        """Every known producer, by producer id (DescribeProducers, KIP-664)."""
        return [
            ProducerDescription(
                producer_id=pid,
                producer_epoch=entry.producer_epoch,
                last_sequence=entry.last_seq,
                last_timestamp=entry.last_timestamp,
                coordinator_epoch=entry.coordinator_epoch,
                current_txn_start_offset=entry.current_txn_first_offset,
            )
            for pid, entry in sorted(self._producers.items())
        ]

    # ----------------------------------------------------------------------------------------------- updates

    def prepare_append(self, origin: AppendOrigin) -> ProducerAppendInfo:
        """Start staging the batches of one append request; see :class:`ProducerAppendInfo`."""
        return ProducerAppendInfo(self, origin, self._version, self._clock())

    def commit(self, append_info: ProducerAppendInfo) -> None:
        """Apply a fully validated append after its batches were written (design/kafka-semantics.md §3.3 step 4).

        Raises:
            ValueError: the info belongs to another manager, or another append was committed after it was
                prepared (its validation would be stale).
        """
        if append_info._manager is not self or append_info._base_version != self._version:
            raise ValueError("append info is stale: prepare, stage and commit each append under one lock")
        open_txns = {**self._ongoing, **{txn.first_offset: txn.producer_id for txn in append_info._started}}
        for completed in append_info._completed:
            if open_txns.get(completed.first_offset) != completed.producer_id:
                raise AssertionError(f"{completed} does not match an open transaction")
        self._producers.update(append_info._entries)
        for txn in append_info._started:
            self._add_ongoing(txn)
        for completed in append_info._completed:
            del self._ongoing[completed.first_offset]
            self._unreplicated[completed.first_offset] = (completed.producer_id, completed.last_offset)
        self._map_end_offset = max(self._map_end_offset, append_info._next_offset)
        self._version += 1

    def update_map_end_offset(self, offset: int) -> None:
        """Record that the log up to ``offset`` (exclusive) is reflected, e.g. after batches without a producer id."""
        if offset < 0:
            raise ValueError(f"map end offset must be >= 0, got {offset}")
        self._map_end_offset = offset

    def on_high_watermark_update(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below ``high_watermark``, letting the LSO advance.

        With a single replica, call it once the marker is appended and flushed.
        """
        for first_offset, (_, marker_offset) in list(self._unreplicated.items()):
            if marker_offset < high_watermark:
                del self._unreplicated[first_offset]

    def remove_expired_producers(self, now_ms: int | None = None) -> list[int]:
        """Forget producers idle for ``producer_id_expiration_ms`` or longer, unless a transaction is open
        (design/kafka-semantics.md §4.7).

        Idleness is measured with the server clock at the last append, not with batch timestamps, which the
        client sets: a producer with a slow clock must not lose its dedup state early. An entry created only by
        a fencing marker is kept like any other until it ages out, so the fence holds meanwhile.

        Returns:
            The removed producer ids.
        """
        now = self._clock() if now_ms is None else now_ms
        expired = [pid for pid, entry in self._producers.items() if self._is_expired(entry, now)]
        for pid in expired:
            del self._producers[pid]
        if expired:
            self._version += 1
        return expired

    def _is_expired(self, entry: ProducerStateEntry, now: int) -> bool:
        return entry.current_txn_first_offset is None and now - entry.last_update_ms >= self.producer_id_expiration_ms

    def _add_ongoing(self, txn: OngoingTxn) -> None:
        last = next(reversed(self._ongoing), None)
        self._ongoing[txn.first_offset] = txn.producer_id
        if last is not None and txn.first_offset < last:
            # Appends arrive in offset order, so this only happens when loading a snapshot.
            self._ongoing = dict(sorted(self._ongoing.items()))

    # --------------------------------------------------------------------------------------------- snapshots

    def snapshot(self) -> bytes:
        """Serialise the producer table at :attr:`map_end_offset` (design/kafka-semantics.md §4.6, with changes).

        The layout is in :mod:`oncelog.partition_storage.producer_snapshot`. Unlike Kafka, which keeps only the
        newest batch per producer, every cached batch is stored, so a retry of any of the last 5 batches is
        still recognised as a duplicate after a restart. Completed transactions waiting for the high watermark
        are not stored: everything up to the snapshot offset is durable when it is taken.
        """
        entries = (entry for _, entry in sorted(self._producers.items()))
        return encode_snapshot(self._map_end_offset, entries, len(self._producers))

    @classmethod
    def from_snapshot(
        cls,
        data: bytes | bytearray | memoryview,
        *,
        producer_id_expiration_ms: int,
        clock: Callable[[], int],
        max_batches_per_producer: int = DEFAULT_MAX_BATCHES_PER_PRODUCER,
    ) -> ProducerStateManager:
        """Rebuild the state saved by :meth:`snapshot`; replay the log from :attr:`map_end_offset` afterwards.

        Producers that expired meanwhile are dropped (never those with an open transaction), and open
        transactions are registered again so the LSO is right before replay starts.

        Raises:
            CorruptMessage: empty, truncated, wrong version, CRC mismatch, trailing bytes or impossible values.
                The caller falls back to an older snapshot or to a full replay.
        """
        manager = cls(
            producer_id_expiration_ms=producer_id_expiration_ms,
            clock=clock,
            max_batches_per_producer=max_batches_per_producer,
        )
        entries, map_end_offset = decode_snapshot(data, max_batches_per_producer)

        now = clock()
        for entry in entries:
            if manager._is_expired(entry, now):
                continue
            manager._producers[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                manager._add_ongoing(OngoingTxn(entry.producer_id, entry.current_txn_first_offset))
        manager._map_end_offset = map_end_offset
        return manager
