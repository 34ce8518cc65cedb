"""Fetching ahead (design/kafka-semantics.md §4.5): while a partition's answer is read, its next answer is fetched
from where the first ends, and is read only if the position gets there.

The fetcher's own bookkeeping (``PartitionState.next_fetch``, ``Fetcher._accept``, ``Fetcher._drain_buffered``) is
driven here against the brute-force log model of test_fetch_filter.py, with the network's timing, seeks and
damaged answers drawn at random; the real consumer over a real storage node is
tests/integration/test_consumer_fetch_ahead.py.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from oncelog.client.fetcher import Fetcher, PartitionState
from oncelog.client.services import FetchedPartition
from oncelog.errors import CorruptMessage
from oncelog.records import Compression, ControlType
from oncelog.vocabulary import IsolationLevel

from .test_fetch_filter import EVENT, RC, RU, TP, Log, build_log
from .test_fetcher_validation import fetcher as validation_fetcher


def fetcher(isolation: IsolationLevel) -> Fetcher:
    return validation_fetcher("earliest", isolation)  # answers are handed in directly: no metadata, no network


def started(isolation: IsolationLevel) -> tuple[Fetcher, PartitionState]:
    """A fetcher of partition ``TP`` from offset 0, nothing fetched yet."""
    fetch = fetcher(isolation)
    fetch.set_assignment([TP])
    state = fetch.assignment[TP]
    state.reposition(0, None)
    return fetch, state


def answer(log: Log, offset: int, isolation: IsolationLevel, batches: int, damaged: bool) -> FetchedPartition:
    raw, aborted, _ = log.fetch(offset, isolation, batches)
    if damaged and raw:
        flipped = bytearray(raw)
        flipped[-1] ^= 0xFF  # inside the last batch's CRC-covered records
        raw = bytes(flipped)
    return FetchedPartition(
        TP,
        high_watermark=log.end,
        last_stable_offset=log.last_stable_offset,
        records=raw,
        aborted_transactions=tuple(aborted),
    )


def read(fetch: Fetcher, limit: int, columnar: bool) -> list[int]:
    """One poll's offsets; a damaged batch raises, as poll() would, once the records before it are out."""
    try:
        page = fetch._drain_buffered(limit, columnar)
    except CorruptMessage:
        return []
    if columnar:
        return [offset for _, chunk in page for offset in chunk.offsets.tolist()]
    return [record.offset for record in page]


@settings(max_examples=300, deadline=None)
@given(st.lists(EVENT, min_size=4, max_size=40), st.sampled_from([RC, RU]), st.booleans(), st.data())
def test_reading_with_answers_fetched_ahead_gives_every_record_once_in_order(
    events: list[tuple[str, int, int]], isolation: IsolationLevel, headers: bool, data: st.DataObject
) -> None:
    log = build_log(events, Compression.NONE, headers)
    if data.draw(st.integers(0, 3), label="end open transactions") > 0:
        for pid in data.draw(st.permutations(sorted(log.open_txns)), label="closing order"):
            log.end_txn(pid, data.draw(st.sampled_from([ControlType.COMMIT, ControlType.ABORT]), label="outcome"))
    read_committed = isolation is RC
    end = log.last_stable_offset if read_committed else log.end
    every = sorted(log.visible if read_committed else log.data)

    fetch = fetcher(isolation)
    fetch.set_assignment([TP])
    state: PartitionState = fetch.assignment[TP]
    start = data.draw(st.integers(0, end), label="start")
    state.reposition(start, None)
    expected = [o for o in every if start <= o < end]
    seen: list[int] = []
    in_flight: int | None = None  # the offset of the one Fetch in flight (one per storage node)
    damages = seeks = 3  # at most, so that every run ends
    for _ in range(1000):
        if state.position is not None and state.position >= end and state.buffered is None:
            break
        if in_flight is None:
            in_flight = state.next_fetch(read_committed)
            assert in_flight is not None or state.buffered is not None, f"stuck at {state.position} before {end}"
        # with nothing buffered the poll waits for the answer; with an answer buffered it may come later
        if in_flight is not None and (state.buffered is None or data.draw(st.booleans(), label="answer arrives")):
            batches = data.draw(st.integers(1, 6), label="batches")
            damaged = damages > 0 and data.draw(st.integers(0, 9), label="damaged") == 0
            damages -= damaged
            fetch._accept(answer(log, in_flight, isolation, batches, damaged), in_flight)
            in_flight = None
        if seeks > 0 and data.draw(st.integers(0, 5), label="seek") == 0:
            seeks -= 1
            target = data.draw(st.integers(0, end), label="seek to")
            state.reposition(target, None)  # what Consumer.seek does; a Fetch in flight stays in flight
            expected, seen = [o for o in every if target <= o < end], []
        page = read(fetch, data.draw(st.integers(1, 5), label="max records"), data.draw(st.booleans()))
        seen.extend(page)
        assert seen == expected[: len(seen)], "a record skipped, repeated or out of order"
        remaining = expected[len(seen) :]
        assert state.position is not None
        assert not remaining or state.position <= remaining[0], "the position passed a record not yet returned"
    else:
        raise AssertionError(f"no progress: position {state.position}, end {end}")
    assert seen == expected
    assert state.ahead is None or state.buffered is not None, "an answer fetched ahead is held only behind another"


def test_a_partition_is_fetched_ahead_only_while_more_data_is_available_past_its_answer() -> None:
    log = Log(headers=False)
    for _ in range(4):
        log.write(3)
    fetch, state = started(RU)
    assert state.next_fetch(read_committed=False) == 0
    fetch._accept(answer(log, 0, RU, 2, damaged=False), 0)
    assert state.buffered_end == 6 and state.next_fetch(read_committed=False) == 6  # 12 records are there
    fetch._accept(answer(log, 6, RU, 2, damaged=False), 6)
    assert state.ahead is not None and state.next_fetch(read_committed=False) is None  # two answers at most
    assert read(fetch, 100, columnar=False) == list(range(6))  # one answer a call: the next is fetched ahead first
    assert state.buffered is not None and state.ahead is None
    assert state.next_fetch(read_committed=False) is None  # this answer reaches the high watermark
    assert read(fetch, 100, columnar=False) == list(range(6, 12))
    assert state.position == 12 and state.buffered is None and state.ahead is None
    assert state.next_fetch(read_committed=False) == 12
    fetch._accept(answer(log, 12, RU, 2, damaged=False), 12)  # nothing new: no answer, no fetch ahead
    log.write(2)
    fetch._accept(answer(log, 12, RU, 2, damaged=False), 12)
    assert state.buffered_end == 14 and state.next_fetch(read_committed=False) is None  # at the high watermark


def test_an_answer_fetched_ahead_of_a_damaged_one_is_dropped_and_the_damaged_batch_fetched_again() -> None:
    log = Log(headers=False)
    for _ in range(4):
        log.write(2)
    fetch, state = started(RC)
    fetch._accept(answer(log, 0, RC, 2, damaged=True), 0)
    fetch._accept(answer(log, 4, RC, 2, damaged=False), 4)
    assert state.ahead is not None
    assert read(fetch, 100, columnar=True) == [0, 1]  # the records before the damaged batch
    assert state.position == 2 and state.ahead is None and state.buffered is None  # not read from offset 4
    assert state.next_fetch(read_committed=True) == 2
    fetch._accept(answer(log, 2, RC, 6, damaged=False), 2)
    assert read(fetch, 100, columnar=True) == [2, 3, 4, 5, 6, 7]
