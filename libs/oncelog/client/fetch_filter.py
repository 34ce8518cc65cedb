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
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from oncelog.client.records import ConsumerRecord, TopicPartition, new_consumer_record
from oncelog.errors import OncelogError
from oncelog.records import (
    BatchHeader,
    ControlType,
    batches_end_offset,
    decode_record_fields,
    iter_batches,
    read_control_record,
    validate_batch,
)
from oncelog.records.batch import TimestampType, records_section
from oncelog.vocabulary import IsolationLevel

if TYPE_CHECKING:
    from oncelog.records.columnar import DecodedColumns

__all__ = ["AbortedTransaction", "CompletedFetch", "filter_fetch"]


@dataclass(frozen=True, slots=True)
class AbortedTransaction:
    """An aborted transaction overlapping a fetch: drop ``producer_id``'s transactional data from ``first_offset``."""

    producer_id: int
    first_offset: int


class CompletedFetch:
    """One partition's answer to a Fetch, consumed record by record (or column by column) across polls.

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

    :meth:`fetch_records` hands out :class:`ConsumerRecord` objects, :meth:`fetch_columns` Arrow columns
    (:mod:`oncelog.records.columnar`); both take from the same position, so a caller may mix them. A batch is
    decoded whole into the form its first taker asks for; what a call leaves of it waits for the next call.
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
        self._records = memoryview(records)
        self._batches = iter_batches(self._records)
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
        self._open: _OpenBatch | None = None  # the batch (or run of batches) records are being handed out of
        self._deferred: OncelogError | None = None  # met while reading ahead; raised once what came before is out
        self._error: OncelogError | None = None
        self._consumed = False

    @property
    def next_fetch_offset(self) -> int:
        """The consumer's position after the records handed out so far."""
        return self._next_offset

    @property
    def end_offset(self) -> int | None:
        """Where the position ends once every batch is read, unless a damaged batch stops it earlier: the offset
        after the last whole batch fetched (None: no whole batch)."""
        return batches_end_offset(self._records)

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
        out: list[ConsumerRecord] = []
        for taken in self._take(max_records, columnar=False):
            out.extend(taken)
        return out

    def fetch_columns(self, max_records: int) -> list[DecodedColumns]:
        """:meth:`fetch_records` as Arrow columns: up to ``max_records`` more records, one chunk per batch.

        Needs pyarrow and numpy (``pip install 'oncelog[arrow]'``). Raises as :meth:`fetch_records`.
        """
        return self._take(max_records, columnar=True)

    def _take(self, max_records: int, *, columnar: bool) -> list[Any]:
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        if self._error is not None:
            raise self._error
        out: list[Any] = []
        if self._consumed:
            return out
        wanted = max_records
        try:
            while wanted > 0:
                batch = self._open or self._next_batch(columnar)
                if batch is None:
                    self._consumed = True
                    break
                self._open = batch
                taken, last_offset, last_epoch = batch.take(wanted, columnar)
                if taken:
                    out.append(taken)
                    wanted -= len(taken)
                    self._next_offset = last_offset + 1
                    self._position_epoch = last_epoch
                if batch.done:
                    self._open = None
                    # v2 keeps a batch's last offset even when compaction removed its last records
                    self._advance_past(batch.next_offset, batch.leader_epoch)
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

    def _next_batch(self, columnar: bool) -> _OpenBatch | None:
        """The next batch with records for the user, decoded (for columns: every such batch to the end of the
        fetch, decoded together); the position moves past markers and skipped data."""
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        run: list[tuple[BatchHeader, memoryview, int | None]] = []
        from_offset = self._next_offset  # records before it were handed out already
        end = (self._next_offset, self._position_epoch)  # where the position goes once the run is handed out
        try:
            for header, batch in self._batches:
                if self._check_crcs:
                    validate_batch(batch, check_records=False)
                leader_epoch = header.partition_leader_epoch if header.partition_leader_epoch >= 0 else None
                skip = header.is_control or header.next_offset <= self._next_offset
                if self._read_committed and header.has_producer_id:
                    self._consume_aborted_up_to(header.last_offset)
                    if header.is_control:
                        control_type, _ = read_control_record(batch)
                        if control_type is ControlType.ABORT:
                            self._aborted_producers.discard(header.producer_id)
                    elif header.is_transactional and header.producer_id in self._aborted_producers:
                        skip = True
                if skip:
                    # a run's records are handed out before the position passes this batch (take() sets it back)
                    self._advance_past(header.next_offset, leader_epoch)
                    end = (max(end[0], header.next_offset), leader_epoch)
                    continue
                run.append((header, batch, leader_epoch))
                end = (header.next_offset, leader_epoch)
                if not columnar:
                    break
        except OncelogError as err:
            if not run:
                raise
            self._deferred = err
        if not run:
            return None
        opened = _OpenBatch(self.topic_partition, *end)
        if columnar:
            self._deferred = opened.decode_columns(run, from_offset) or self._deferred
        else:
            opened.decode_rows(run[0][0], run[0][1], run[0][2], from_offset)
        return opened

    def _advance_past(self, next_offset: int, leader_epoch: int | None) -> None:
        if next_offset > self._next_offset:
            self._next_offset = next_offset
            self._position_epoch = leader_epoch


class _OpenBatch:
    """The records of one batch (rows) or of a run of batches (columns) not yet handed out, and where the
    position goes once they all are."""

    __slots__ = ("_columns", "_epochs", "_index", "_rows", "_tp", "_types", "done", "leader_epoch", "next_offset")

    def __init__(self, tp: TopicPartition, next_offset: int, leader_epoch: int | None) -> None:
        self._tp = tp
        self.next_offset = next_offset
        self.leader_epoch = leader_epoch
        self._rows: list[ConsumerRecord] = []
        self._index = 0  # the next row to hand out
        self._columns: DecodedColumns | None = None  # what is left, when held as columns
        self._epochs: Any = None  # each column record's leader epoch, -1 for none
        self._types: Any = None  # and its batch's timestamp type
        self.done = False

    def decode_rows(self, header: BatchHeader, batch: memoryview, leader_epoch: int | None, from_offset: int) -> None:
        timestamp_type = header.timestamp_type
        topic, partition = self._tp.topic, self._tp.partition
        self._rows = [
            new_consumer_record(topic, partition, offset, timestamp, timestamp_type, key, value, headers, leader_epoch)
            for offset, timestamp, key, value, headers in decode_record_fields(batch)
            if offset >= from_offset
        ]
        self.done = not self._rows

    def decode_columns(
        self, run: list[tuple[BatchHeader, memoryview, int | None]], from_offset: int
    ) -> OncelogError | None:
        """Decode ``run``; a batch that cannot be decoded ends it there, and its error is returned."""
        import numpy as np

        from oncelog.records.columnar import DecodedColumns, concat_columns, decode_batches, decode_columns

        sections = [records_section(batch) for _, batch, _ in run]
        columns = decode_batches(sections)
        error: OncelogError | None = None
        if columns is None:  # headers, or a batch the row decoder must judge: batch by batch
            parts: list[DecodedColumns] = []
            for index, ((header, section), (_, batch, _)) in enumerate(zip(sections, run, strict=True)):
                try:
                    part = decode_columns(header, section)
                    parts.append(part if part is not None else DecodedColumns.from_fields(decode_record_fields(batch)))
                except OncelogError as err:
                    error, run = err, run[:index]
                    if run:  # the position stops before the damaged batch
                        self.next_offset, self.leader_epoch = run[-1][0].next_offset, run[-1][2]
                    break
            columns = concat_columns(parts)
        counts = [header.record_count for header, _, _ in run]
        epochs = np.repeat(np.array([-1 if epoch is None else epoch for _, _, epoch in run], dtype=np.int64), counts)
        types = np.repeat(np.array([int(header.timestamp_type) for header, _, _ in run], dtype=np.int64), counts)
        first = int(np.searchsorted(columns.offsets, from_offset, side="left"))
        self._columns = columns.slice(first) if first else columns
        self._epochs, self._types = epochs[first:], types[first:]
        self.done = not len(self._columns)
        return error

    def take(self, wanted: int, columnar: bool) -> tuple[Any, int, int | None]:
        """Up to ``wanted`` records (a list of records, or columns), the last one's offset and leader epoch."""
        if columnar:
            if self._columns is None:  # rows left by a fetch_records call
                from oncelog.records.columnar import DecodedColumns

                rest = self._rows[self._index :]
                self._columns = DecodedColumns.from_fields(
                    [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in rest]
                )
                self._epochs = [-1 if r.leader_epoch is None else r.leader_epoch for r in rest]
                self._types = [int(r.timestamp_type) for r in rest]
            columns = self._columns
            count = min(wanted, len(columns))
            taken_columns, self._columns = columns.slice(0, count), columns.slice(count)
            epochs, self._epochs = self._epochs[:count], self._epochs[count:]
            types, self._types = self._types[:count], self._types[count:]
            taken_columns = replace(taken_columns, timestamp_types=_int64s(types))
            self.done = not len(self._columns)
            if not count:
                return None, -1, None
            return taken_columns, int(taken_columns.offsets[-1]), _epoch(epochs[-1])
        if self._columns is not None:  # columns left by a fetch_columns call
            topic, partition, columns = self._tp.topic, self._tp.partition, self._columns
            self._rows = [
                new_consumer_record(
                    topic, partition, offset, timestamp, TimestampType(kind), key, value, headers, _epoch(epoch)
                )
                for (offset, timestamp, key, value, headers), epoch, kind in zip(
                    columns.to_fields(), list(self._epochs), list(self._types), strict=True
                )
            ]
            self._index = 0
            self._columns = None
        taken = self._rows[self._index : self._index + wanted]
        self._index += len(taken)
        self.done = self._index >= len(self._rows)
        return taken, (taken[-1].offset if taken else -1), (taken[-1].leader_epoch if taken else None)


def _int64s(values: Any) -> Any:
    import numpy as np

    return np.asarray(values, dtype=np.int64)


def _epoch(value: Any) -> int | None:
    return None if value < 0 else int(value)


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
