"""ProducerIdSource: prefetch at 90 %, never wait on the network while ids are left."""

from __future__ import annotations

import asyncio

import pytest

from oncelog.client.pid_allocator import ProducerIdSource
from oncelog.errors import CoordinatorLoadInProgress, NetworkException, StaleRequesterEpoch


class GatedAllocator:
    """In-memory block source whose answers the test releases one by one."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.next_first = 0
        self.calls = 0
        self.gates: list[asyncio.Event] = []
        self.failures: list[BaseException] = []

    async def fetch(self) -> tuple[int, int]:
        self.calls += 1
        gate = asyncio.Event()
        self.gates.append(gate)
        await gate.wait()
        if self.failures:
            raise self.failures.pop(0)
        first = self.next_first
        self.next_first += self.size
        return first, first + self.size - 1


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_prefetch_starts_at_90_percent_and_callers_never_wait_while_ids_are_left() -> None:
    alloc = GatedAllocator(size=10)
    source = ProducerIdSource(alloc.fetch, prefetch_ratio=0.9)
    first = asyncio.create_task(source.next_id())
    await _settle()
    alloc.gates[0].set()
    assert await first == 0
    for expected in range(1, 8):
        assert await source.next_id() == expected
    await _settle()
    assert alloc.calls == 1, "no prefetch before 90 % of the block is used"
    assert await source.next_id() == 8  # 9 of 10 ids used: 90 % -> prefetch starts, its gate still closed
    await _settle()
    assert alloc.calls == 2
    assert await source.next_id() == 9  # the last id comes from memory although the fetch is still held
    # the block is exhausted and the prefetch is held: the next caller waits, and only until the block lands
    waiter = asyncio.create_task(source.next_id())
    await _settle()
    assert not waiter.done()
    alloc.gates[1].set()
    assert await waiter == 10
    # ids 11..18 come from memory: none of these calls may touch the network
    calls = alloc.calls
    got = [await source.next_id() for _ in range(8)]
    assert got == list(range(11, 19))
    await _settle()
    assert alloc.calls == calls + 1  # only the 90 % prefetch of the second block, never a wait
    await source.close()


async def test_retriable_fetch_failure_is_retried_transparently() -> None:
    alloc = GatedAllocator(size=5)
    alloc.failures.append(NetworkException("connection refused"))
    source = ProducerIdSource(alloc.fetch, retry_backoff_s=0)
    task = asyncio.create_task(source.next_id())
    await _settle()
    alloc.gates[0].set()
    await _settle()
    alloc.gates[1].set()
    assert await task == 0
    assert alloc.calls == 2


async def test_stale_requester_epoch_reaches_the_caller() -> None:
    alloc = GatedAllocator(size=5)
    alloc.failures.append(StaleRequesterEpoch("newer instance exists"))
    source = ProducerIdSource(alloc.fetch)
    task = asyncio.create_task(source.next_id())
    await _settle()
    alloc.gates[0].set()
    with pytest.raises(StaleRequesterEpoch):
        await task


async def test_no_block_in_time_is_load_in_progress_not_a_hang() -> None:
    alloc = GatedAllocator(size=5)
    source = ProducerIdSource(alloc.fetch, wait_timeout_s=0.05)
    with pytest.raises(CoordinatorLoadInProgress):
        await source.next_id()
    await source.close()


async def test_a_block_that_goes_backwards_is_refused() -> None:
    alloc = GatedAllocator(size=5)
    source = ProducerIdSource(alloc.fetch, retry_backoff_s=0)
    task = asyncio.create_task(source.next_id())
    await _settle()
    alloc.gates[0].set()
    assert await task == 0
    for _ in range(4):
        await source.next_id()
    alloc.next_first = 2  # a broken allocator hands out an overlapping block
    nxt = asyncio.create_task(source.next_id())
    await _settle()
    alloc.gates[1].set()
    await _settle()
    alloc.gates[2].set()  # refused once, fetched again: 7..11 (the fake moved on)
    assert await nxt == 7
