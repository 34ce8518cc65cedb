"""Sequence numbers of an idempotent or transactional producer, per partition
(design/kafka-semantics.md §1, §4.2, §5.1).

A partition writes a batch stamped (producer id, epoch, base sequence) at most once and only in
sequence order (design/architecture.md §1.1). This module is the client's half of that contract, a port of the
sequence bookkeeping in Kafka's ``TransactionManager``, ``TxnPartitionMap`` and
``TxnPartitionEntry``:

* sequences start at 0 for each (producer id, epoch) and partition, are assigned when a batch
  is drained for its first send, and wrap from ``2**31 - 1`` to 0;
* at most ``max_in_flight`` (≤ 5, the number of batches a partition remembers for
  deduplication) batches per partition are unacknowledged, kept in sequence order;
* a retry resends the **same** bytes with the same sequence, and while a partition retries,
  only its oldest unacknowledged batch may go out, so order survives any number of retries;
* OUT_OF_ORDER_SEQUENCE for a batch that is not the next one expected only reflects an
  earlier batch's failure and is retried as is, never "repaired";
* an idempotent producer that finds a real gap bumps its epoch **locally** (no RPC; a new
  producer id once the epoch is exhausted) and rewrites its in-flight sequences from 0; a
  transactional producer instead aborts and bumps the epoch through InitProducerId (KIP-360);
* a batch that may have been written under its stamp (it is on the wire, or a send got no
  definite answer) is never re-stamped: the partition's rewrite waits until its oldest batch is
  answered under its original (producer id, epoch, sequence) — written (a duplicate answer),
  known not held by the partition (out of order), or given up on — so a retry never writes a
  record twice (Kafka's client re-stamps them at once and can duplicate);
* a batch whose outcome is unknown (it timed out after being sent) leaves its partition
  *unresolved*: no new batch goes there until the in-flight ones settle, and if a gap remains
  the epoch must change before the partition is written again (design/kafka-semantics.md §7 problem 3).

The object is not thread-safe: the producer's sender owns it (the accumulator calls it while
draining, under its own lock, from the sender).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from oncelog.client.errors import Action, IllegalStateError, classify
from oncelog.client.records import TopicPartition
from oncelog.errors import OncelogError, Reason
from oncelog.vocabulary import NO_PRODUCER_ID_AND_EPOCH, ProducerIdAndEpoch

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "NO_PRODUCER_ID_AND_EPOCH",
    "NO_SEQUENCE",
    "ProducerIdAndEpoch",
    "ProducerSequences",
    "SequencedBatch",
    "decrement_sequence",
    "increment_sequence",
]

NO_SEQUENCE = -1
"""Sequence of a batch that has not been stamped yet (and of a non-idempotent batch)."""

MAX_PRODUCER_EPOCH = 32766
"""Highest epoch a producer may use; 32767 is reserved so the coordinator can always fence
(design/kafka-semantics.md §1)."""

MAX_IN_FLIGHT = 5
"""Batches a partition remembers per producer for deduplication (design/kafka-semantics.md §4.1), hence the in-flight
cap."""

# Answers by which the partition says it does not hold the batch under its stamp at all (a copy written by an
# earlier attempt would have been answered as a duplicate, or is impossible): they settle a doubtful batch. Any
# other definite error only says that this attempt wrote nothing (a leader that moved, say).
_NOT_HELD = frozenset({Reason.OUT_OF_ORDER_SEQUENCE, Reason.MESSAGE_TOO_LARGE})

_SEQUENCE_SPACE = 1 << 31  # sequences are int32 >= 0 and wrap from INT32_MAX to 0


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment`` in the wrapping int32 sequence space (``DefaultRecordBatch.incrementSequence``)."""
    return (sequence + increment) % _SEQUENCE_SPACE


def decrement_sequence(sequence: int, decrement: int) -> int:
    """``sequence - decrement`` in the wrapping sequence space (the inverse of :func:`increment_sequence`)."""
    return (sequence - decrement) % _SEQUENCE_SPACE


def _is_after(sequence: int, reference: int) -> bool:
    """True when ``sequence`` comes after ``reference``, across a wrap; unacknowledged windows are tiny."""
    if reference == NO_SEQUENCE:
        return True
    return 0 < (sequence - reference) % _SEQUENCE_SPACE < _SEQUENCE_SPACE // 2


class SequencedBatch(Protocol):
    """What the sequence book needs from a producer batch (the accumulator's ``ProducerBatch``)."""

    @property
    def topic_partition(self) -> TopicPartition:
        """The batch's partition."""
        ...

    @property
    def record_count(self) -> int:
        """Records in the batch; the batch consumes this many sequence numbers."""
        ...

    @property
    def producer_id(self) -> int:
        """Producer id the batch is stamped with (-1 before stamping)."""
        ...

    @property
    def producer_epoch(self) -> int:
        """Epoch the batch is stamped with (-1 before stamping)."""
        ...

    @property
    def base_sequence(self) -> int:
        """Sequence of the batch's first record, or :data:`NO_SEQUENCE` before stamping."""
        ...

    def stamp(self, identity: ProducerIdAndEpoch, base_sequence: int) -> None:
        """Set producer id, epoch and base sequence (the batch re-encodes itself before its next send)."""
        ...


def _last_sequence(batch: SequencedBatch) -> int:
    return increment_sequence(batch.base_sequence, batch.record_count - 1)


@dataclass(slots=True, eq=False)
class _InFlight:
    batch: SequencedBatch
    reset: bool = False
    """Re-stamped from 0 after an epoch change: an out-of-order answer to its old stamp is expected."""
    on_wire: bool = True
    """Sent under its current stamp and not answered yet."""
    doubtful: bool = False
    """A send under its current stamp got no definite answer: the partition may have written it."""
    stamped_after: int = 0
    """Batches of the partition stamped after this one under the same identity."""

    @property
    def may_be_written(self) -> bool:
        """The partition may hold this batch under its current stamp: it must keep that stamp."""
        return self.on_wire or self.doubtful


@dataclass(slots=True, eq=False)
class _Partition:
    """One partition's state (Kafka's ``TxnPartitionEntry``)."""

    identity: ProducerIdAndEpoch
    next_sequence: int = 0
    last_acked_sequence: int = NO_SEQUENCE
    last_acked_offset: int = -1
    in_flight: list[_InFlight] = field(default_factory=list)
    """Stamped, unacknowledged batches in sequence order (retries keep their place)."""
    unresolved_next: int | None = None
    """Sequence after the newest batch whose outcome is unknown; None when every outcome is known."""

    def find(self, batch: SequencedBatch) -> int:
        for index, entry in enumerate(self.in_flight):
            if entry.batch is batch:
                return index
        return -1

    def may_hold_written(self) -> bool:
        """Some in-flight batch may have been written under its current stamp.

        Only the oldest decides: a partition writes a producer's batches in sequence order, so once the
        oldest is known unwritten, no later one (all share its identity) can have been written either.
        """
        return bool(self.in_flight) and self.in_flight[0].may_be_written

    def start_at_beginning(self, identity: ProducerIdAndEpoch) -> None:
        """Re-stamp every in-flight batch from sequence 0 under ``identity`` (``startSequencesAtBeginning``)."""
        sequence = 0
        for index, entry in enumerate(self.in_flight):
            entry.batch.stamp(identity, sequence)
            entry.reset = True
            entry.doubtful = entry.on_wire = False  # the new stamp was never sent
            entry.stamped_after = len(self.in_flight) - 1 - index
            sequence = increment_sequence(sequence, entry.batch.record_count)
        self.identity = identity
        self.next_sequence = sequence
        self.last_acked_sequence = NO_SEQUENCE
        self.unresolved_next = None


class ProducerSequences:
    """Assign, track and repair the per-partition sequence numbers of one producer.

    Lifecycle of a batch: :meth:`may_send` → :meth:`assign` (first send only) → either
    :meth:`complete`, or a failed answer checked with :meth:`can_retry` (then resent unchanged
    once :meth:`may_send` allows it) and finally :meth:`fail` when the client gives up.

    Args:
        transactional: the producer has a transactional id; decides how a sequence gap is
            repaired (abort and bump through the coordinator vs. local epoch bump).
        max_in_flight: unacknowledged batches allowed per partition, 1 to 5.
    """

    def __init__(self, *, transactional: bool, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(
                f"max_in_flight must be between 1 and {MAX_IN_FLIGHT} for an idempotent producer "
                f"(partitions remember only the last {MAX_IN_FLIGHT} batches), got {max_in_flight}"
            )
        self._transactional = transactional
        self._max_in_flight = max_in_flight
        self._identity = NO_PRODUCER_ID_AND_EPOCH
        self._partitions: dict[TopicPartition, _Partition] = {}
        self._to_rewrite: set[TopicPartition] = set()
        # partitions due for re-stamping under the current identity once no batch may be written under its old
        # stamp (each such batch is resent with that stamp until its fate is known)
        self._restamp: set[TopicPartition] = set()

    @property
    def transactional(self) -> bool:
        """Whether the producer is transactional."""
        return self._transactional

    @property
    def identity(self) -> ProducerIdAndEpoch:
        """The producer id and epoch new batches are stamped with."""
        return self._identity

    @property
    def epoch_bump_required(self) -> bool:
        """A partition found a sequence gap; the epoch must change before it is written again."""
        return bool(self._to_rewrite)

    def set_identity(self, identity: ProducerIdAndEpoch) -> None:
        """Adopt the id and epoch returned by InitProducerId.

        Partitions waiting for an epoch bump re-stamp their in-flight batches from 0 — at once, or,
        while one of those batches may have been written under its old stamp, once every such batch
        is settled (:meth:`resolve_sequences`). Every other partition restarts at sequence 0 under
        the new identity as soon as it has no batch in flight under the old one; until then it takes
        no new batch, so a batch with the new epoch cannot overtake older ones
        (``RecordAccumulator.shouldStopDrainBatchesForPartition``).
        """
        self._identity = identity
        self._restamp |= self._to_rewrite
        self._to_rewrite.clear()
        self._restamp_settled()
        for tp in [tp for tp, entry in self._partitions.items() if not entry.in_flight and tp not in self._restamp]:
            del self._partitions[tp]

    def request_epoch_bump(self, tp: TopicPartition) -> None:
        """Mark ``tp`` as needing a new epoch and re-stamped in-flight sequences (``requestEpochBumpForPartition``)."""
        self._entry(tp)
        self._to_rewrite.add(tp)

    def bump_epoch(self) -> bool:
        """Bump an idempotent producer's epoch locally and re-stamp the marked partitions from 0.

        Returns False when the epoch space is exhausted: the identity is cleared and the
        producer must get a new producer id through InitProducerId and pass it to
        :meth:`set_identity`, which then re-stamps the marked partitions (design/kafka-semantics.md §4.2).

        Raises:
            IllegalStateError: the producer is transactional (its epoch only changes through
                the coordinator) or has no identity yet.
        """
        if self._transactional:
            raise IllegalStateError(
                "a transactional producer's epoch changes only through InitProducerId: abort the transaction"
            )
        if not self._identity.is_valid:
            raise IllegalStateError("no producer id yet: InitProducerId must answer before the epoch can be bumped")
        if self._identity.epoch >= MAX_PRODUCER_EPOCH:
            self._identity = NO_PRODUCER_ID_AND_EPOCH
            return False
        self.set_identity(ProducerIdAndEpoch(self._identity.producer_id, self._identity.epoch + 1))
        return True

    def next_sequence(self, tp: TopicPartition) -> int:
        """Base sequence the next new batch for ``tp`` would get."""
        entry = self._partitions.get(tp)
        if entry is None or entry.identity != self._identity:
            return 0  # a partition under an older identity restarts at 0
        return entry.next_sequence

    def last_acked_sequence(self, tp: TopicPartition) -> int:
        """Last sequence the partition acknowledged under the partition's current identity, or -1."""
        entry = self._partitions.get(tp)
        return NO_SEQUENCE if entry is None else entry.last_acked_sequence

    def last_acked_offset(self, tp: TopicPartition) -> int:
        """Offset of the last acknowledged record in ``tp``, or -1."""
        entry = self._partitions.get(tp)
        return -1 if entry is None else entry.last_acked_offset

    def in_flight(self, tp: TopicPartition) -> list[SequencedBatch]:
        """Stamped, unacknowledged batches of ``tp`` in sequence order."""
        entry = self._partitions.get(tp)
        return [] if entry is None else [e.batch for e in entry.in_flight]

    def is_unresolved(self, tp: TopicPartition) -> bool:
        """True while a batch of ``tp`` with an unknown outcome has not been settled."""
        entry = self._partitions.get(tp)
        return entry is not None and entry.unresolved_next is not None

    @property
    def batches_per_request(self) -> int:
        """Most batches of one partition a produce request may carry: half the in-flight limit, rounded up (3 of
        5), so that two requests of the partition can be on the wire at once (design/kafka-semantics.md §4.2)."""
        return (self._max_in_flight + 1) // 2

    def may_send(self, batch: SequencedBatch) -> bool:
        """Whether ``batch`` may be sent now.

        A new batch (no sequence yet) needs a valid identity, a free in-flight slot, no
        pending epoch bump or unresolved outcome on its partition, no batches still in
        flight there under an older identity, and must not push a batch that may have been
        written but was not answered out of the partition's last ``MAX_IN_FLIGHT`` batches:
        the partition recognises a retry as a duplicate only there, and answers an older one
        OUT_OF_ORDER_SEQUENCE, which would have it re-stamped and written twice. A retried
        batch goes out only when it is the oldest unacknowledged batch of its partition, which
        keeps order during retries.
        """
        if not self._identity.is_valid:
            return False
        tp = batch.topic_partition
        entry = self._partitions.get(tp)
        if tp in self._to_rewrite or tp in self._restamp:
            # only a batch that may have been written goes out before the rewrite, with its original stamp,
            # so the partition answers whether it holds it
            return (
                batch.base_sequence != NO_SEQUENCE
                and entry is not None
                and bool(entry.in_flight)
                and entry.in_flight[0].batch is batch
                and entry.in_flight[0].doubtful
            )
        if batch.base_sequence != NO_SEQUENCE:
            return entry is not None and bool(entry.in_flight) and entry.in_flight[0].batch is batch
        if entry is None:
            return True
        if entry.in_flight and entry.identity != self._identity:
            return False
        return (
            entry.unresolved_next is None
            and len(entry.in_flight) < self._max_in_flight
            and all(e.stamped_after < MAX_IN_FLIGHT - 1 for e in entry.in_flight if e.doubtful)
        )

    def assign(self, batch: SequencedBatch) -> None:
        """Stamp a new batch with the identity and the partition's next sequence, and track it.

        Raises:
            IllegalStateError: the batch already has a sequence (a retry must keep it) or
                :meth:`may_send` does not allow it.
        """
        if batch.base_sequence != NO_SEQUENCE:
            raise IllegalStateError(
                f"batch for {batch.topic_partition} already has sequence {batch.base_sequence}; "
                "a retry must be sent with the sequence it was first sent with"
            )
        if not self.may_send(batch):
            raise IllegalStateError(f"no batch may be sent to {batch.topic_partition} now")
        entry = self._entry(batch.topic_partition)
        if entry.identity != self._identity:
            entry.start_at_beginning(self._identity)
        batch.stamp(self._identity, entry.next_sequence)
        entry.next_sequence = increment_sequence(entry.next_sequence, batch.record_count)
        for earlier in entry.in_flight:
            earlier.stamped_after += 1
        entry.in_flight.append(_InFlight(batch))

    def resending(self, batch: SequencedBatch) -> None:
        """``batch`` (already stamped) goes on the wire again for a retry."""
        entry = self._partitions.get(batch.topic_partition)
        index = -1 if entry is None else entry.find(batch)
        if entry is not None and index >= 0:
            entry.in_flight[index].on_wire = True

    def complete(self, batch: SequencedBatch, base_offset: int) -> None:
        """Record a successful write of ``batch`` at ``base_offset`` (-1 when unknown)."""
        entry = self._partitions.get(batch.topic_partition)
        if entry is None:
            return
        index = entry.find(batch)
        if index >= 0:
            del entry.in_flight[index]
        same_identity = (batch.producer_id, batch.producer_epoch) == (
            entry.identity.producer_id,
            entry.identity.epoch,
        )
        last = _last_sequence(batch)
        if same_identity and _is_after(last, entry.last_acked_sequence):
            entry.last_acked_sequence = last
        if base_offset >= 0:
            entry.last_acked_offset = max(entry.last_acked_offset, base_offset + batch.record_count - 1)

    def can_retry(self, batch: SequencedBatch, err: OncelogError) -> bool:
        """Whether a failed send of ``batch`` may be retried unchanged (``TransactionManager.canRetry``).

        The caller also enforces its own budget (``delivery_timeout_ms``). OUT_OF_ORDER_SEQUENCE
        is retried as is when the batch is not the next one expected (an earlier batch failed
        or the batch was re-stamped after an epoch bump); when it is, an idempotent producer
        requests a local epoch bump and retries, a transactional one gives up (the transaction
        is abortable). Any other error follows :func:`~oncelog.client.errors.classify`.
        """
        tp = batch.topic_partition
        entry = self._partitions.get(tp)
        index = -1 if entry is None else entry.find(batch)
        reset = entry is not None and index >= 0 and entry.in_flight[index].reset
        if entry is not None and index >= 0:
            answered = entry.in_flight[index]
            answered.on_wire = False
            if not err.definite:
                answered.doubtful = True
            elif err.reason in _NOT_HELD:
                answered.doubtful = False
        reason = err.reason
        if reason is Reason.OUT_OF_ORDER_SEQUENCE and err.definite:
            unresolved = entry is not None and entry.unresolved_next is not None
            if not unresolved and (reset or not self._is_next_sequence(tp, batch.base_sequence)):
                return True
            if self._transactional:
                return False
            if not unresolved or (entry is not None and batch.base_sequence == entry.unresolved_next):
                self.request_epoch_bump(tp)
            return True
        if reason is Reason.UNKNOWN_PRODUCER_ID and err.definite:
            if reset:
                return True
            if self._transactional:
                return False
            self.request_epoch_bump(tp)
            return True
        return classify(err, source="produce", transactional=self._transactional).action is Action.RETRY

    def fail(self, batch: SequencedBatch, *, definite: bool) -> None:
        """Stop tracking ``batch`` after the client gave up on it (``handleFailedBatch``).

        Args:
            batch: the failed batch.
            definite: the partition certainly did not write it (an error answer). When False
                (the batch timed out after it was sent) its partition becomes unresolved.

        A definite failure leaves a hole in the partition's sequences: an idempotent producer
        requests an epoch bump for the partition; a transactional one (whose transaction is
        abortable anyway) shifts the later in-flight batches down to close the hole
        (``adjustSequencesDueToFailedBatch``).
        """
        tp = batch.topic_partition
        entry = self._partitions.get(tp)
        if entry is None:
            return
        index = entry.find(batch)
        if index < 0:
            return
        del entry.in_flight[index]
        if not definite:
            following = increment_sequence(_last_sequence(batch), 1)
            if entry.unresolved_next is None or _is_after(following, entry.unresolved_next):
                entry.unresolved_next = following
            return
        if not self._transactional:
            self.request_epoch_bump(tp)
            return
        count = batch.record_count
        entry.next_sequence = decrement_sequence(entry.next_sequence, count)
        for later in entry.in_flight[index:]:
            later.batch.stamp(
                ProducerIdAndEpoch(later.batch.producer_id, later.batch.producer_epoch),
                decrement_sequence(later.batch.base_sequence, count),
            )

    def _restamp_settled(self) -> None:
        """Re-stamp the partitions due for a rewrite whose batches can no longer be written under their old stamp."""
        for tp in [tp for tp in self._restamp if not self._entry(tp).may_hold_written()]:
            self._partitions[tp].start_at_beginning(self._identity)
            self._restamp.discard(tp)

    def resolve_sequences(self) -> list[TopicPartition]:
        """Settle unresolved partitions that no longer have batches in flight (``maybeResolveSequences``).

        A partition is resolved when its last acknowledged sequence is right before its next
        sequence (the timed-out batch was written after all). Otherwise an idempotent
        producer requests an epoch bump for it, and a transactional producer gets the
        partition back in the returned list: its transaction must be aborted with an epoch
        bump, since nobody knows whether those records were written.
        """
        self._restamp_settled()
        doubtful = []
        for tp, entry in self._partitions.items():
            if entry.unresolved_next is None or entry.in_flight:
                continue
            if not self._is_next_sequence(tp, entry.next_sequence):
                if self._transactional:
                    doubtful.append(tp)
                else:
                    self._to_rewrite.add(tp)
            entry.unresolved_next = None
        return doubtful

    def reset(self) -> None:
        """Forget every partition (after the transactional producer's epoch bump at abort)."""
        self._partitions.clear()
        self._to_rewrite.clear()
        self._restamp.clear()

    def _entry(self, tp: TopicPartition) -> _Partition:
        entry = self._partitions.get(tp)
        if entry is None:
            entry = self._partitions[tp] = _Partition(self._identity)
        return entry

    def _is_next_sequence(self, tp: TopicPartition, sequence: int) -> bool:
        return increment_sequence(self.last_acked_sequence(tp), 1) == sequence
