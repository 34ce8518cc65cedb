"""Turn one partition's fetched batches into user records: the consumer's ``CompletedFetch``
(design/kafka-semantics.md §4.5).

A read_committed fetch returns data only below the last stable offset, but it still returns
the batches of aborted transactions, plus the list of aborted transactions overlapping the
returned range as ``(producer_id, first_offset)``: dropping them is the client's job, so the
server never copies data. The filter follows Kafka's ``CompletedFetch`` exactly:

* the aborted list goes into a min-heap by first offset;
* for each batch with a producer id, every aborted entry whose first offset is at or below
  the batch's last offset moves into the set of aborted producer ids;
* an ABORT marker of a producer removes it from the set (its later transactions are new
  ones); a transactional data batch of a producer in the set is skipped;
* control batches (COMMIT and ABORT markers) never reach the user, in either isolation level.

read_uncommitted returns every data record, including those of open and aborted transactions.

The position (:attr:`CompletedFetch.next_fetch_offset`) moves past skipped batches and
markers, so a read_committed consumer can sit on an offset just past a marker rather than
after its last record — the reason "lag" never reaches 0 on a transactional topic (KAFKA-10683).
Records before the fetch offset (a batch returned whole although the fetch offset falls
inside it) are skipped.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from oncelog.client.records import ConsumerRecord, TopicPartition, new_consumer_record
from oncelog.errors import OncelogError
from oncelog.records import ControlType, decode_record_fields, iter_batches, read_control_record, validate_batch
from oncelog.vocabulary import IsolationLevel

__all__ = ["AbortedTransaction", "CompletedFetch", "filter_fetch"]


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction overlapping a fetch: drop ``producer_id``'s transactional data from ``first_offset``."""

    producer_id: int
    first_offset: int


class CompletedFetch:
    """One partition's answer to a Fetch, consumed record by record across polls.

    Args:
        tp: the partition fetched.
        records: the fetched bytes: zero or more whole RecordBatch v2 batches, as stored.
        fetch_offset: the offset the fetch asked for; earlier records are skipped.
        isolation_level: READ_COMMITTED drops aborted data (``aborted_transactions`` is used);
            READ_UNCOMMITTED does not.
        aborted_transactions: aborted transactions overlapping the returned range.
        check_crcs: verify each batch's CRC32C before use (Kafka's ``check.crcs``, default on).

    A damaged batch raises :class:`~oncelog.errors.CorruptMessage` (or
    :class:`~oncelog.errors.InvalidRecord`) once the records before it were handed out: the
    call that reaches it returns what it has, and the next call raises, with the position
    left on the damaged batch so a new fetch retries from there.
    """

    def __init__(
        self,
        tp: TopicPartition,
        records: bytes | bytearray | memoryview,
        *,
        fetch_offset: int,
        isolation_level: IsolationLevel,
        aborted_transactions: Iterable[AbortedTransaction] = (),
        check_crcs: bool = True,
    ) -> None:
        self.topic_partition = tp
        self._data = memoryview(records)
        self._next_offset = fetch_offset
        self._position_epoch: int | None = None
        self._read_committed = isolation_level is IsolationLevel.READ_COMMITTED
        self._check_crcs = check_crcs
        self._aborted_heap: list[tuple[int, int]] = (
            [(aborted.first_offset, aborted.producer_id) for aborted in aborted_transactions]
            if self._read_committed
            else []
        )
        heapq.heapify(self._aborted_heap)
        self._aborted_producers: set[int] = set()
        self._iterator = self._iterate()
        self._error: OncelogError | None = None
        self._consumed = False

    @property
    def next_fetch_offset(self) -> int:
        """The consumer's position after the records handed out so far."""
        return self._next_offset

    @property
    def position_epoch(self) -> int | None:
        """The leader epoch of the batch the position last moved through (Kafka's offset epoch, KIP-320), markers
        and skipped batches included; None until the position moved or when the batch carries no epoch."""
        return self._position_epoch

    @property
    def is_consumed(self) -> bool:
        """Every batch was processed (or an error ended the fetch); nothing more will come."""
        return self._consumed

    @property
    def error(self) -> OncelogError | None:
        """The error that ended the fetch early, if any; :meth:`fetch_records` raises it."""
        return self._error

    def fetch_records(self, max_records: int) -> list[ConsumerRecord]:
        """Return up to ``max_records`` more records and advance the position past them.

        May return an empty list while moving the position (a fetch of markers and aborted
        data only); check :attr:`is_consumed` to know whether more may come.

        Raises:
            CorruptMessage: a batch is damaged and no record came before it in this call.
            InvalidRecord: a batch's records cannot be decoded, likewise.
            ValueError: ``max_records`` is below 1.
        """
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        if self._error is not None:
            raise self._error
        out: list[ConsumerRecord] = []
        if self._consumed:
            return out
        try:
            for record in self._iterator:
                out.append(record)
                self._next_offset = record.offset + 1
                self._position_epoch = record.leader_epoch
                if len(out) >= max_records:
                    break
            else:
                self._consumed = True
        except OncelogError as err:
            self._consumed = True
            if not out:
                self._error = err
                raise
            self._error = err
        return out

    def _consume_aborted_up_to(self, offset: int) -> None:
        heap = self._aborted_heap
        while heap and heap[0][0] <= offset:
            self._aborted_producers.add(heapq.heappop(heap)[1])

    def _iterate(self) -> Iterator[ConsumerRecord]:
        tp = self.topic_partition
        for header, batch in iter_batches(self._data):
            if self._check_crcs:
                validate_batch(batch, check_records=False)
            leader_epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else None
            if self._read_committed and header.has_producer_id:
                self._consume_aborted_up_to(header.last_offset)
                if header.is_control:
                    control_type, _ = read_control_record(batch)
                    if control_type is ControlType.ABORT:
                        self._aborted_producers.discard(header.producer_id)
                elif header.is_transactional and header.producer_id in self._aborted_producers:
                    self._advance_past(header.next_offset, leader_epoch)
                    continue
            if header.is_control or header.next_offset <= self._next_offset:
                self._advance_past(header.next_offset, leader_epoch)
                continue
            timestamp_type = header.timestamp_type
            topic, partition, next_offset = tp.topic, tp.partition, self._next_offset
            for offset, timestamp, key, value, headers in decode_record_fields(batch):
                if offset < next_offset:
                    continue
                yield new_consumer_record(
                    topic, partition, offset, timestamp, timestamp_type, key, value, headers, leader_epoch
                )
            # v2 keeps a batch's last offset even when compaction removed its last records
            self._advance_past(header.next_offset, leader_epoch)

    def _advance_past(self, next_offset: int, leader_epoch: int | None) -> None:
        if next_offset > self._next_offset:
            self._next_offset = next_offset
            self._position_epoch = leader_epoch


def filter_fetch(
    tp: TopicPartition,
    records: bytes | bytearray | memoryview,
    *,
    fetch_offset: int,
    isolation_level: IsolationLevel,
    aborted_transactions: Iterable[AbortedTransaction] = (),
    check_crcs: bool = True,
) -> tuple[list[ConsumerRecord], int]:
    """Filter a whole fetch at once: the user records and the position after them.

    Raises:
        CorruptMessage: a batch is damaged (nothing is returned).
        InvalidRecord: a batch's records cannot be decoded.
    """
    fetch = CompletedFetch(
        tp,
        records,
        fetch_offset=fetch_offset,
        isolation_level=isolation_level,
        aborted_transactions=aborted_transactions,
        check_crcs=check_crcs,
    )
    out: list[ConsumerRecord] = []
    while not fetch.is_consumed:
        out.extend(fetch.fetch_records(1 << 30))
    if fetch.error is not None:
        raise fetch.error
    return out, fetch.next_fetch_offset
