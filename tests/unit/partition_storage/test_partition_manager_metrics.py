"""PartitionManager metrics: produce and fetch throughput per partition, and the LSO lag of each led partition.

The manager runs on a real catalog (SQLite file) and real partition directories; its instruments come from an
in-memory meter provider, so the assertions read what the storage node exports over OTLP (design/architecture.md §9).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from oncelog.catalog import CatalogStore
from oncelog.partition_storage.engine import TxnMarkerSpec
from oncelog.partition_storage.partition_manager import FetchSpec, PartitionManager, StorageNodeConfig
from oncelog.records import ControlType, Record, build_batch
from oncelog.storage.sql import create_engine
from oncelog.telemetry.metrics import (
    FETCH_BYTES,
    FETCH_RECORDS,
    PARTITION_LSO_LAG,
    PRODUCE_BYTES,
    PRODUCE_RECORDS,
    OncelogMetrics,
)
from oncelog.vocabulary import IsolationLevel

pytestmark = pytest.mark.timeout(30)

NODE = "storage-0"
TOPIC = "orders"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class Meter:
    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.metrics = OncelogMetrics(MeterProvider(metric_readers=[self.reader]))

    def values(self, name: str) -> dict[tuple[tuple[str, Any], ...], float]:
        data = self.reader.get_metrics_data()
        return {
            tuple(sorted(point.attributes.items())): point.value
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        }

    def value(self, name: str, **attributes: Any) -> float | None:
        return self.values(name).get(tuple(sorted(attributes.items())))


async def until(condition: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.001)


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[tuple[PartitionManager, Meter]]:
    catalog = CatalogStore(create_engine(f"sqlite:///{tmp_path / 'catalog.db'}"))
    catalog.migrate()
    catalog.ensure_cluster(4, 4, wall_clock_ms())
    catalog.register_node(NODE, "partition-storage", "127.0.0.1:1", 600_000, wall_clock_ms())
    catalog.create_topics([(TOPIC, 1, {})], wall_clock_ms())
    meter = Meter()
    manager = PartitionManager(
        catalog, NODE, StorageNodeConfig(data_dir=tmp_path / "data"), clock=wall_clock_ms, metrics=meter.metrics
    )
    await manager.start()
    try:
        yield manager, meter
    finally:
        await manager.stop()
        catalog.engine.dispose()


def batch(values: list[bytes], producer_id: int, sequence: int, *, transactional: bool = False) -> bytes:
    return build_batch(
        [Record(key=None, value=v) for v in values],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
        transactional=transactional,
        base_timestamp=wall_clock_ms(),
    )


async def produce(manager: PartitionManager, data: bytes) -> None:
    pending = await manager.write(TOPIC, 0, -1, data)
    await pending.wait()


async def test_produce_counts_appended_records_and_bytes_but_not_a_retried_duplicate(
    node: tuple[PartitionManager, Meter],
) -> None:
    manager, meter = node
    first = batch([b"a", b"b", b"c"], producer_id=1, sequence=0)
    await produce(manager, first)
    await produce(manager, first)  # the producer's retry: answered with the original offsets, not appended
    second = batch([b"d"], producer_id=1, sequence=3)
    await produce(manager, second)

    assert meter.value(PRODUCE_RECORDS.name, topic=TOPIC, partition=0) == 4
    assert meter.value(PRODUCE_BYTES.name, topic=TOPIC, partition=0) == len(first) + len(second)


async def test_fetch_counts_returned_data_records_per_isolation_level_and_never_markers(
    node: tuple[PartitionManager, Meter],
) -> None:
    manager, meter = node
    await produce(manager, batch([b"a", b"b"], producer_id=1, sequence=0, transactional=True))
    (outcome,) = await manager.write_markers([(TxnMarkerSpec(1, 1, 0, ControlType.COMMIT), [(TOPIC, 0)])])
    assert outcome == [None]
    await produce(manager, batch([b"c"], producer_id=2, sequence=0))

    for isolation in IsolationLevel:
        (result,) = await manager.fetch([FetchSpec(TOPIC, 0, 0)], isolation)
        attributes = {"topic": TOPIC, "partition": 0, "isolation": isolation.value}
        assert meter.value(FETCH_RECORDS.name, **attributes) == 3, "two transactional records and one plain"
        assert meter.value(FETCH_BYTES.name, **attributes) == len(result.records)
    await manager.fetch([FetchSpec(TOPIC, 0, 4)], IsolationLevel.READ_COMMITTED)  # at the end: nothing returned
    assert meter.value(FETCH_RECORDS.name, topic=TOPIC, partition=0, isolation="read_committed") == 3


async def test_lso_lag_follows_an_open_transaction_and_is_reset_when_the_partition_closes(
    node: tuple[PartitionManager, Meter],
) -> None:
    manager, meter = node

    def lag() -> float | None:
        return meter.value(PARTITION_LSO_LAG.name, topic=TOPIC, partition=0)

    await produce(manager, batch([b"plain"], producer_id=1, sequence=0))
    await until(lambda: lag() == 0, "an idle partition reports no lag")
    await produce(manager, batch([b"open"], producer_id=2, sequence=0, transactional=True))
    await produce(manager, batch([b"x", b"y"], producer_id=1, sequence=1))
    await until(lambda: lag() == 3, "the open transaction holds back itself and the two records after it")

    (outcome,) = await manager.write_markers([(TxnMarkerSpec(2, 1, 0, ControlType.ABORT), [(TOPIC, 0)])])
    assert outcome == [None]
    await until(lambda: lag() == 0, "the abort marker releases the last stable offset")

    await produce(manager, batch([b"open again"], producer_id=3, sequence=0, transactional=True))
    await until(lambda: lag() == 1, "a new open transaction")
    await manager.stop()
    assert lag() == 0, "a partition no longer served here reports no lag"
