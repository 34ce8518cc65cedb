"""Consumer-side filtering of fetched batches (design/kafka-semantics.md §4.5): aborted transactions, control records,
position."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client.fetch_filter import AbortedTransaction, CompletedFetch, filter_fetch
from oncelog.client.records import TopicPartition
from oncelog.errors import CorruptMessage
from oncelog.records import (
    Compression,
    ControlType,
    Record,
    TimestampType,
    build_batch,
    build_control_batch,
    with_base_offset,
)
from oncelog.vocabulary import IsolationLevel

TP = TopicPartition("payments", 3)
RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
TS = 1_700_000_000_000


@dataclass
class Log:
    """A partition log built batch by batch, with the aborted-transaction index a server would keep."""

    batches: list[tuple[int, int, bytes]] = field(default_factory=list)  # (base_offset, next_offset, bytes)
    aborted_index: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, first_offset, marker_offset)
    open_txns: dict[int, int] = field(default_factory=dict)  # pid -> first offset
    txn_records: dict[int, list[int]] = field(default_factory=dict)  # pid -> offsets of the open txn
    visible: list[int] = field(default_factory=list)  # offsets a read_committed reader must see
    data: list[int] = field(default_factory=list)  # every data offset (read_uncommitted)
    compression: Compression = Compression.NONE
    headers: bool = True  # every record carries a header (the columnar decoder leaves such batches to the rows)

    @property
    def end(self) -> int:
        return self.batches[-1][1] if self.batches else 0

    @property
    def last_stable_offset(self) -> int:
        return min(self.open_txns.values(), default=self.end)

    def write(self, count: int, *, pid: int = -1, transactional: bool = False) -> list[int]:
        base = self.end
        headers = (("h", b"x"),) if self.headers else ()
        records = [Record(key=None, value=b"%d" % (base + i), headers=headers) for i in range(count)]
        epoch, sequence = (0, base) if pid >= 0 else (-1, -1)
        raw = build_batch(
            records,
            base_offset=base,
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=sequence,
            transactional=transactional,
            base_timestamp=TS + base,
            compression=self.compression,
            partition_leader_epoch=7,
        )
        offsets = list(range(base, base + count))
        self.batches.append((base, base + count, raw))
        self.data.extend(offsets)
        if transactional:
            self.open_txns.setdefault(pid, base)
            self.txn_records.setdefault(pid, []).extend(offsets)
        else:
            self.visible.extend(offsets)
        return offsets

    def end_txn(self, pid: int, control: ControlType) -> int:
        marker = self.end
        raw = build_control_batch(
            control, producer_id=pid, producer_epoch=0, coordinator_epoch=1, base_offset=marker, timestamp=TS
        )
        self.batches.append((marker, marker + 1, raw))
        first = self.open_txns.pop(pid)
        offsets = self.txn_records.pop(pid)
        if control is ControlType.COMMIT:
            self.visible.extend(offsets)
        else:
            self.aborted_index.append((pid, first, marker))
        return marker

    def fetch(self, offset: int, isolation: IsolationLevel, max_batches: int = 1000) -> tuple[bytes, list, int]:
        """What a partition returns (design/kafka-semantics.md §4.5): whole batches from the one holding ``offset``,
        capped at the LSO."""
        limit = self.last_stable_offset if isolation is RC else self.end
        chosen = [(b, n, raw) for b, n, raw in self.batches if n > offset and b < limit][:max_batches]
        upper = chosen[-1][1] if chosen else offset
        aborted = []
        if isolation is RC:
            # TransactionIndex search: marker at or after the fetch offset, start before the upper bound
            aborted = [
                AbortedTransaction(pid, first)
                for pid, first, marker in self.aborted_index
                if marker >= offset and first < upper
            ]
        return b"".join(raw for _, _, raw in chosen), aborted, upper


def offsets(records: list) -> list[int]:
    return [r.offset for r in records]


def test_aborted_transaction_data_is_dropped() -> None:
    log = Log()
    before = log.write(2)
    aborted = log.write(3, pid=7, transactional=True)
    interleaved = log.write(1, pid=9, transactional=True)
    log.write(2, pid=7, transactional=True)
    log.end_txn(7, ControlType.ABORT)
    log.end_txn(9, ControlType.COMMIT)
    after = log.write(1)
    raw, aborted_list, upper = log.fetch(0, RC)
    assert aborted_list == [AbortedTransaction(7, aborted[0])]
    records, position = filter_fetch(TP, raw, fetch_offset=0, isolation_level=RC, aborted_transactions=aborted_list)
    assert offsets(records) == before + interleaved + after
    assert [r.value for r in records] == [b"%d" % o for o in before + interleaved + after]
    assert position == upper == log.end


def test_control_records_never_returned() -> None:
    log = Log()
    log.write(1, pid=4, transactional=True)
    commit = log.end_txn(4, ControlType.COMMIT)
    log.write(1, pid=4, transactional=True)
    abort = log.end_txn(4, ControlType.ABORT)
    for isolation in (RC, RU):
        raw, aborted_list, _ = log.fetch(0, isolation)
        records, position = filter_fetch(
            TP, raw, fetch_offset=0, isolation_level=isolation, aborted_transactions=aborted_list
        )
        assert commit not in offsets(records) and abort not in offsets(records)
        assert position == abort + 1  # the position moves past the trailing marker


def test_read_uncommitted_returns_aborted_and_open_transactions() -> None:
    log = Log()
    log.write(2, pid=1, transactional=True)
    log.end_txn(1, ControlType.ABORT)
    log.write(2, pid=2, transactional=True)  # still open
    raw, _, _ = log.fetch(0, RU)
    # even a (wrong) aborted list must not hide anything from read_uncommitted
    records, position = filter_fetch(
        TP, raw, fetch_offset=0, isolation_level=RU, aborted_transactions=[AbortedTransaction(1, 0)]
    )
    assert offsets(records) == log.data
    assert position == log.end


def test_abort_marker_clears_the_producer_so_its_next_transaction_is_visible() -> None:
    log = Log()
    log.write(2, pid=5, transactional=True)
    log.end_txn(5, ControlType.ABORT)
    committed = log.write(2, pid=5, transactional=True)
    log.end_txn(5, ControlType.COMMIT)
    raw, aborted_list, _ = log.fetch(0, RC)
    records, _ = filter_fetch(TP, raw, fetch_offset=0, isolation_level=RC, aborted_transactions=aborted_list)
    assert offsets(records) == committed


def test_committed_transaction_before_an_aborted_one_of_the_same_producer_is_kept() -> None:
    # the aborted entry only applies from its first offset: the heap must not be emptied up front
    log = Log()
    committed = log.write(2, pid=5, transactional=True)
    log.end_txn(5, ControlType.COMMIT)
    log.write(2, pid=5, transactional=True)
    log.end_txn(5, ControlType.ABORT)
    raw, aborted_list, _ = log.fetch(0, RC)
    assert aborted_list == [AbortedTransaction(5, 3)]
    records, _ = filter_fetch(TP, raw, fetch_offset=0, isolation_level=RC, aborted_transactions=aborted_list)
    assert offsets(records) == committed


def test_fetch_starting_inside_an_aborted_transaction_still_drops_it() -> None:
    log = Log()
    log.write(2, pid=3, transactional=True)
    later_part = log.write(2, pid=3, transactional=True)
    log.end_txn(3, ControlType.ABORT)
    tail = log.write(1)
    raw, aborted_list, _ = log.fetch(later_part[0], RC)
    assert aborted_list == [AbortedTransaction(3, 0)]  # starts before the fetch offset, ends after it
    records, _ = filter_fetch(
        TP, raw, fetch_offset=later_part[0], isolation_level=RC, aborted_transactions=aborted_list
    )
    assert offsets(records) == tail


def test_non_transactional_batches_of_an_aborted_producer_id_are_kept() -> None:
    log = Log()
    kept = log.write(2, pid=8)  # idempotent, not transactional
    raw, _, _ = log.fetch(0, RC)
    records, _ = filter_fetch(
        TP, raw, fetch_offset=0, isolation_level=RC, aborted_transactions=[AbortedTransaction(8, 0)]
    )
    assert offsets(records) == kept


def test_records_before_the_fetch_offset_are_skipped() -> None:
    log = Log()
    log.write(5)
    raw, _, _ = log.fetch(3, RC)
    records, position = filter_fetch(TP, raw, fetch_offset=3, isolation_level=RC)
    assert offsets(records) == [3, 4]
    assert position == 5


def test_a_fetch_of_markers_and_aborted_data_only_moves_the_position() -> None:
    log = Log()
    log.write(3, pid=2, transactional=True)
    marker = log.end_txn(2, ControlType.ABORT)
    raw, aborted_list, _ = log.fetch(0, RC)
    fetch = CompletedFetch(TP, raw, fetch_offset=0, isolation_level=RC, aborted_transactions=aborted_list)
    assert fetch.fetch_records(500) == []
    assert fetch.is_consumed and fetch.next_fetch_offset == marker + 1


def test_the_position_epoch_is_the_epoch_of_the_last_batch_passed_markers_and_aborted_data_included() -> None:
    """KIP-320: a consumer validates its position after a leader change with the epoch of the batch just before it;
    a marker or an aborted batch written under a newer leader moves that epoch too, else the validation would ask
    about an older epoch, find it ending below the position and rewind (records read twice)."""
    log = Log()
    log.write(2)  # epoch 7
    log.write(2, pid=4, transactional=True)
    aborted_under_epoch_9 = with_base_offset(log.batches[-1][2], log.batches[-1][0], partition_leader_epoch=9)
    log.batches[-1] = (*log.batches[-1][:2], aborted_under_epoch_9)
    marker = log.end_txn(4, ControlType.ABORT)
    log.batches[-1] = (marker, marker + 1, with_base_offset(log.batches[-1][2], marker, partition_leader_epoch=11))
    raw, aborted_list, _ = log.fetch(0, RC)
    fetch = CompletedFetch(TP, raw, fetch_offset=0, isolation_level=RC, aborted_transactions=aborted_list)
    assert fetch.position_epoch is None, "nothing passed yet"
    assert offsets(fetch.fetch_records(1)) == [0]
    assert (fetch.next_fetch_offset, fetch.position_epoch) == (1, 7)
    assert offsets(fetch.fetch_records(500)) == [1]
    assert fetch.is_consumed and (fetch.next_fetch_offset, fetch.position_epoch) == (marker + 1, 11)


def test_records_carry_their_metadata() -> None:
    log = Log()
    log.write(2)
    raw, _, _ = log.fetch(0, RC)
    (first, _), _ = filter_fetch(TP, raw, fetch_offset=0, isolation_level=RC)
    assert (first.topic, first.partition, first.offset) == ("payments", 3, 0)
    assert first.timestamp == TS and first.timestamp_type is TimestampType.CREATE_TIME
    assert first.key is None and first.value == b"0" and first.headers == (("h", b"x"),)
    assert first.leader_epoch == 7 and first.topic_partition == TP


def test_max_records_pages_through_a_fetch_and_keeps_the_position() -> None:
    log = Log()
    log.write(3)
    log.write(3, pid=6, transactional=True)
    log.end_txn(6, ControlType.COMMIT)
    raw, aborted_list, _ = log.fetch(0, RC)
    fetch = CompletedFetch(TP, raw, fetch_offset=0, isolation_level=RC, aborted_transactions=aborted_list)
    assert offsets(fetch.fetch_records(2)) == [0, 1]
    assert fetch.next_fetch_offset == 2 and not fetch.is_consumed
    assert offsets(fetch.fetch_records(3)) == [2, 3, 4]
    assert fetch.next_fetch_offset == 5
    assert offsets(fetch.fetch_records(3)) == [5]
    assert fetch.next_fetch_offset == 7 and fetch.is_consumed
    with pytest.raises(ValueError, match="max_records"):
        fetch.fetch_records(0)


def test_damaged_batch_is_raised_after_the_records_before_it() -> None:
    log = Log()
    log.write(2)
    log.write(2)
    raw, _, _ = log.fetch(0, RC)
    damaged = bytearray(raw)
    damaged[-1] ^= 0xFF  # inside the second batch's CRC-covered records
    fetch = CompletedFetch(TP, bytes(damaged), fetch_offset=0, isolation_level=RC)
    assert offsets(fetch.fetch_records(10)) == [0, 1]
    assert fetch.next_fetch_offset == 2
    with pytest.raises(CorruptMessage, match="CRC32C"):
        fetch.fetch_records(10)
    with pytest.raises(CorruptMessage):
        fetch.fetch_records(10)  # the fetch stays failed; the consumer refetches from its position
    assert fetch.next_fetch_offset == 2
    with pytest.raises(CorruptMessage):
        filter_fetch(TP, bytes(damaged), fetch_offset=0, isolation_level=RC)
    # without CRC checks the flipped byte goes unnoticed in the value, as Kafka's check.crcs=false would
    records, _ = filter_fetch(TP, bytes(damaged), fetch_offset=0, isolation_level=RC, check_crcs=False)
    assert len(records) == 4


def test_a_damaged_batch_ends_a_columns_page_after_the_batches_before_it() -> None:
    log = Log(headers=False)
    log.write(2)
    log.write(3)
    log.write(2)
    raw, _, _ = log.fetch(0, RC)
    damaged = bytearray(raw)
    damaged[-1] ^= 0xFF  # the third batch's records
    fetch = CompletedFetch(TP, bytes(damaged), fetch_offset=1, isolation_level=RC)
    (chunk,) = fetch.fetch_columns(100)
    assert chunk.offsets.tolist() == [1, 2, 3, 4] and chunk.values.to_pylist() == [b"1", b"2", b"3", b"4"]
    assert fetch.next_fetch_offset == 5
    with pytest.raises(CorruptMessage, match="CRC32C"):
        fetch.fetch_columns(100)
    assert fetch.next_fetch_offset == 5


def test_records_left_by_a_columns_page_keep_their_metadata_as_records() -> None:
    records = [Record(key=b"k%d" % i, value=b"v%d" % i, headers=()) for i in range(4)]
    raw = build_batch(records, base_offset=10, base_timestamp=TS, partition_leader_epoch=3)
    appended = bytearray(raw)
    appended[22] |= 0x08  # attributes (int16 at byte 21) bit 3: LogAppendTime
    fetch = CompletedFetch(TP, bytes(appended), fetch_offset=10, isolation_level=RC, check_crcs=False)
    (chunk,) = fetch.fetch_columns(1)
    assert chunk.keys.to_pylist() == [b"k0"] and chunk.timestamp_types.tolist() == [TimestampType.LOG_APPEND_TIME]
    rest = fetch.fetch_records(10)
    assert [(r.offset, r.key, r.leader_epoch) for r in rest] == [(11, b"k1", 3), (12, b"k2", 3), (13, b"k3", 3)]
    assert {r.timestamp_type for r in rest} == {TimestampType.LOG_APPEND_TIME}
    assert fetch.next_fetch_offset == 14 and fetch.position_epoch == 3


def test_empty_fetch_leaves_the_position() -> None:
    records, position = filter_fetch(TP, b"", fetch_offset=42, isolation_level=RC)
    assert records == [] and position == 42


# -- property test: the filter against a brute-force model over random logs ---------------------------------

EVENT = st.tuples(
    st.sampled_from(["txn", "txn", "commit", "abort", "plain", "idempotent"]),
    st.integers(min_value=1, max_value=2),  # transactional producer id: few, so they reuse their id
    st.integers(min_value=1, max_value=3),  # record count
)


def build_log(events: list[tuple[str, int, int]], compression: Compression, headers: bool = True) -> Log:
    log = Log(compression=compression, headers=headers)
    for kind, pid, count in events:
        if kind == "txn":
            log.write(count, pid=pid, transactional=True)
        elif kind in ("commit", "abort") and pid in log.open_txns:
            log.end_txn(pid, ControlType.COMMIT if kind == "commit" else ControlType.ABORT)
        elif kind == "plain":
            log.write(count)
        elif kind == "idempotent":
            log.write(count, pid=50)
    return log


@settings(max_examples=300, deadline=None)
@given(
    st.lists(EVENT, min_size=4, max_size=40),
    st.sampled_from([RC, RU]),
    st.sampled_from([Compression.NONE, Compression.GZIP]),
    st.booleans(),
    st.data(),
)
def test_filter_matches_brute_force_model(
    events: list[tuple[str, int, int]],
    isolation: IsolationLevel,
    compression: Compression,
    headers: bool,
    data: st.DataObject,
) -> None:
    """Pages of records, of Arrow columns, or both in turn: the same records, and the position after each page."""
    log = build_log(events, compression, headers)
    # an open transaction pins the LSO, so mostly end them all (in a drawn order and outcome)
    if data.draw(st.integers(0, 3), label="end open transactions") > 0:
        for pid in data.draw(st.permutations(sorted(log.open_txns)), label="closing order"):
            log.end_txn(pid, data.draw(st.sampled_from([ControlType.COMMIT, ControlType.ABORT]), label="outcome"))
    end = log.last_stable_offset if isolation is RC else log.end
    start = data.draw(st.integers(min_value=0, max_value=max(end, 0)), label="start offset")
    expected = sorted(o for o in (log.visible if isolation is RC else log.data) if start <= o < end)

    position, seen = start, []
    while position < end:
        raw, aborted_list, upper = log.fetch(position, isolation, data.draw(st.integers(1, 12), label="batches"))
        fetch = CompletedFetch(
            TP, raw, fetch_offset=position, isolation_level=isolation, aborted_transactions=aborted_list
        )
        assert fetch.end_offset == upper, "a fetch ahead of this one would not start where reading it ends"
        while not fetch.is_consumed:
            wanted = data.draw(st.integers(1, 5), label="max records")
            if data.draw(st.booleans(), label="as columns"):
                page = [
                    Seen(offset, value, headers, fetch.position_epoch)
                    for chunk in fetch.fetch_columns(wanted)
                    for offset, _, _, value, headers in chunk.to_fields()
                ]
            else:
                page = [Seen(r.offset, r.value, r.headers, r.leader_epoch) for r in fetch.fetch_records(wanted)]
            assert len(page) <= wanted
            seen.extend(page)
            if page:
                assert fetch.next_fetch_offset > page[-1].offset
            # the position may pass markers read ahead, never a record not handed out yet
            remaining = expected[len(seen) :]
            assert not remaining or fetch.next_fetch_offset <= remaining[0]
        assert fetch.next_fetch_offset == upper > position  # every fetch makes progress
        position = fetch.next_fetch_offset

    assert offsets(seen) == expected
    assert [r.value for r in seen] == [b"%d" % o for o in expected]
    assert {r.headers for r in seen} <= {(("h", b"x"),) if headers else ()}
    assert position == end


@dataclass(frozen=True)
class Seen:
    offset: int
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    leader_epoch: int | None
