"""Tests for the aborted-transaction index and the read_committed search over it (design/kafka-semantics.md §4.4)."""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.errors import CorruptMessage
from oncelog.partition_storage.txn_index import (
    ENTRY_SIZE,
    AbortedTxn,
    TransactionIndex,
    collect_aborted_txns,
)


def _index(base_offset: int, *txns: AbortedTxn) -> TransactionIndex:
    index = TransactionIndex(base_offset)
    for txn in txns:
        index.append(txn)
    return index


def test_entry_uses_kafka_34_byte_layout() -> None:
    txn = AbortedTxn(producer_id=0x0102030405060708, first_offset=5, last_offset=9, last_stable_offset=10)

    encoded = txn.to_bytes()

    assert ENTRY_SIZE == 34
    assert encoded == (
        bytes.fromhex("0000")  # version 0
        + bytes.fromhex("0102030405060708")
        + (5).to_bytes(8, "big")
        + (9).to_bytes(8, "big")
        + (10).to_bytes(8, "big")
    )
    assert AbortedTxn.from_bytes(encoded) == txn


def test_entry_with_unknown_version_is_corrupt() -> None:
    data = struct.pack(">hqqqq", 1, 7, 0, 3, 4)

    with pytest.raises(CorruptMessage):
        AbortedTxn.from_bytes(data)


def test_append_returns_the_bytes_to_write_and_round_trips() -> None:
    index = TransactionIndex(100)
    first = AbortedTxn(1, 90, 100, 101)
    second = AbortedTxn(2, 102, 110, 105)

    written = index.append(first) + index.append(second)

    assert written == index.to_bytes() == first.to_bytes() + second.to_bytes()
    reloaded = TransactionIndex.from_bytes(100, written)
    assert reloaded.entries == (first, second)
    assert reloaded.last_offset == 110
    assert reloaded.base_offset == 100


@pytest.mark.parametrize("last_offset", [110, 109])
def test_append_requires_strictly_increasing_last_offset(last_offset: int) -> None:
    index = _index(100, AbortedTxn(1, 100, 110, 111))

    with pytest.raises(ValueError):
        index.append(AbortedTxn(2, 105, last_offset, 111))
    assert len(index) == 1


def test_append_rejects_entry_ending_before_the_segment() -> None:
    index = TransactionIndex(100)

    with pytest.raises(ValueError):
        index.append(AbortedTxn(1, 90, 99, 100))


@pytest.mark.parametrize(
    "data",
    [
        AbortedTxn(1, 100, 110, 111).to_bytes()[:-1],  # torn tail
        AbortedTxn(1, 100, 110, 111).to_bytes() + AbortedTxn(2, 100, 110, 111).to_bytes(),  # not increasing
        AbortedTxn(1, 10, 20, 21).to_bytes(),  # ends before the segment's base offset
        struct.pack(">hqqqq", 3, 1, 100, 110, 111),  # unknown version
    ],
    ids=["torn-tail", "not-increasing", "before-base", "unknown-version"],
)
def test_from_bytes_rejects_damaged_index(data: bytes) -> None:
    with pytest.raises(CorruptMessage):
        TransactionIndex.from_bytes(100, data)


def test_empty_index_round_trips() -> None:
    index = TransactionIndex.from_bytes(0, b"")

    assert len(index) == 0
    assert index.last_offset is None
    assert index.to_bytes() == b""


def test_truncate_to_drops_entries_at_or_above_offset_and_returns_file_size() -> None:
    index = _index(0, AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 9, 10), AbortedTxn(3, 11, 12, 13))

    size = index.truncate_to(9)

    assert size == ENTRY_SIZE
    assert index.entries == (AbortedTxn(1, 0, 5, 6),)
    assert index.last_offset == 5
    index.append(AbortedTxn(4, 7, 8, 9))  # appending again continues from the truncation point


def test_collect_returns_only_transactions_overlapping_the_range() -> None:
    before = AbortedTxn(1, 0, 4, 5)
    spanning_start = AbortedTxn(2, 6, 12, 13)
    inside = AbortedTxn(3, 13, 15, 16)
    after = AbortedTxn(4, 20, 22, 23)
    index = _index(0, before, spanning_start, inside, after)

    found, complete = index.collect_aborted_txns(10, 20)

    assert found == [spanning_start, inside]
    assert complete is True  # `after` recorded LSO 23 >= 20


def test_collect_includes_transaction_that_started_before_fetch_and_ends_after_range() -> None:
    long_running = AbortedTxn(1, 2, 30, 31)
    index = _index(0, long_running)

    found, _ = index.collect_aborted_txns(10, 20)

    assert found == [long_running]


def test_collect_stops_once_recorded_lso_reaches_upper_bound() -> None:
    # Entry 1's LSO (12) is below the bound: a transaction that started at 12 was still open, so the search
    # must go on and find it (entry 2). Entry 2's LSO (40) ends the search before the next segment.
    first_segment = _index(0, AbortedTxn(1, 0, 20, 12), AbortedTxn(2, 12, 30, 40))
    second_segment = _index(50, AbortedTxn(3, 14, 55, 56))

    assert collect_aborted_txns([first_segment, second_segment], 5, 35) == [
        AbortedTxn(1, 0, 20, 12),
        AbortedTxn(2, 12, 30, 40),
    ]


def test_collect_does_not_stop_while_recorded_lso_is_inside_the_range() -> None:
    # LSO 24 < upper bound 25: the transaction that started at 24 may still overlap the range.
    index = _index(0, AbortedTxn(1, 0, 20, 24), AbortedTxn(2, 24, 30, 31))

    assert collect_aborted_txns([index], 5, 25) == [AbortedTxn(1, 0, 20, 24), AbortedTxn(2, 24, 30, 31)]


def test_collect_continues_into_later_segments_until_complete() -> None:
    first_segment = _index(0, AbortedTxn(1, 0, 20, 12))
    second_segment = _index(21, AbortedTxn(2, 12, 30, 31))
    never_read = _index(40, AbortedTxn(3, 1, 45, 46))
    read: list[int] = []

    def lazily() -> Iterator[TransactionIndex]:
        for index in (first_segment, second_segment, never_read):
            read.append(index.base_offset)
            yield index

    found = collect_aborted_txns(lazily(), 5, 25)

    assert found == [AbortedTxn(1, 0, 20, 12), AbortedTxn(2, 12, 30, 31)]
    assert read == [0, 21]


def test_collect_on_empty_range_returns_nothing() -> None:
    index = _index(0, AbortedTxn(1, 0, 20, 21))

    assert collect_aborted_txns([index], 10, 10) == []


@given(
    spans=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 50)), min_size=0, max_size=30),
    fetch_offset=st.integers(0, 260),
    length=st.integers(1, 100),
)
def test_collect_matches_brute_force_when_lso_bounds_later_transactions(
    spans: list[tuple[int, int]], fetch_offset: int, length: int
) -> None:
    # The search relies on one invariant: an entry's LSO is at most the first offset of every transaction
    # whose marker comes later. Record the largest LSO allowed by it; the result must equal an overlap filter.
    txns: list[tuple[int, int]] = []
    last = -1
    for start, span in spans:
        marker = max(last + 1, start + span)
        txns.append((min(start, marker), marker))
        last = marker
    entries = [
        AbortedTxn(pid, first, marker, min(f for f, _ in txns[pid:])) for pid, (first, marker) in enumerate(txns)
    ]
    index = _index(0, *entries)
    upper_bound = fetch_offset + length

    expected = [t for t in entries if t.last_offset >= fetch_offset and t.first_offset < upper_bound]

    assert collect_aborted_txns([index], fetch_offset, upper_bound) == expected
