"""ProducerIdSource reports ``oncelog.pid.block.remaining``: the ids it can hand out without a network call."""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from oncelog.client.pid_allocator import ProducerIdSource
from oncelog.telemetry.metrics import PID_BLOCK_REMAINING, OncelogMetrics

pytestmark = pytest.mark.timeout(10)


class Blocks:
    """Consecutive blocks of ``size`` ids, answered at once."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.next_first = 0

    async def fetch(self) -> tuple[int, int]:
        first = self.next_first
        self.next_first += self.size
        return first, first + self.size - 1


def remaining(reader: InMemoryMetricReader) -> list[float]:
    data = reader.get_metrics_data()
    return [
        point.value
        for resource in (data.resource_metrics if data else [])
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == PID_BLOCK_REMAINING.name
        for point in metric.data.data_points
    ]


async def test_remaining_ids_are_reported_as_ids_are_taken_and_blocks_arrive() -> None:
    reader = InMemoryMetricReader()
    source = ProducerIdSource(Blocks(10).fetch, metrics=OncelogMetrics(MeterProvider(metric_readers=[reader])))
    assert remaining(reader) == [], "nothing is reported before the first block"

    assert await source.next_id() == 0
    assert remaining(reader) == [9]
    for _ in range(8):
        await source.next_id()
    # 9 of 10 used: the prefetch of the next block has started; until it lands one id is left
    assert remaining(reader) == [1]
    for _ in range(3):
        await asyncio.sleep(0)  # the prefetch completes
    assert remaining(reader) == [11], "the last id of the first block and the whole prefetched block"
    await source.next_id()
    assert remaining(reader) == [10]
    await source.close()
