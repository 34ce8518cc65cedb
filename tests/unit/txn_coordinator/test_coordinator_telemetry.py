"""Telemetry of the txn-coordinator's domain: open/completed transactions, marker latency, write spans.

The instruments come from an in-memory meter provider and the spans from an in-memory exporter, so each
assertion reads exactly what the service would export over OTLP (design/architecture.md §9).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from oncelog.storage.sql import create_engine
from oncelog.telemetry.metrics import (
    TRANSACTIONS_COMPLETED,
    TRANSACTIONS_OPEN,
    TXN_MARKER_DURATION,
    OncelogMetrics,
)
from oncelog.txn_coordinator.coordinator import MarkerCompletion, TransactionCoordinator
from oncelog.txn_coordinator.marker_channel import (
    DestinationService,
    MarkerDestination,
    Route,
    TransactionMarkerChannelManager,
    TxnMarkerEntry,
    TxnMarkerOutcome,
)
from oncelog.txn_coordinator.metadata import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, TopicPartition, TxnTransition
from oncelog.txn_coordinator.state import TransactionResult, TransactionState
from oncelog.txn_coordinator.state_manager import TransactionStateManager
from oncelog.txn_coordinator.transaction_log import TransactionLog

pytestmark = pytest.mark.timeout(20)

TP: TopicPartition = ("orders", 0)
STORAGE = MarkerDestination(DestinationService.PARTITION_STORAGE, "storage-0", "127.0.0.1:1")


class Meter:
    """An :class:`OncelogMetrics` on an in-memory reader, read back as {(metric, attributes): value}."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.metrics = OncelogMetrics(MeterProvider(metric_readers=[self.reader]))

    def points(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        return [
            point
            for resource in (data.resource_metrics if data else [])
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    def values(self, name: str) -> dict[tuple[tuple[str, object], ...], float]:
        """Histograms are read by their count, sums and gauges by their value."""
        return {
            tuple(sorted(p.attributes.items())): p.count if hasattr(p, "bucket_counts") else p.value
            for p in self.points(name)
        }


async def until(condition: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.001)


# ---------------------------------------------------------------------------------------------- coordinator


class MemoryStore:
    """Rows in a dict; every write succeeds (the lease is never lost in these tests)."""

    def __init__(self) -> None:
        self.rows: dict[str, TxnTransition] = {}

    async def load_shard(self, shard: int) -> Iterable[tuple[str, TxnTransition | None]]:
        return [(tid, row) for tid, row in self.rows.items() if len(tid) % 2 == shard]

    async def write(self, transactional_id: str, transition: TxnTransition, expected_coordinator_epoch: int) -> None:
        await asyncio.sleep(0)
        self.rows[transactional_id] = transition


class CountingIds:
    def __init__(self) -> None:
        self.next = 100

    async def next_id(self) -> int:
        self.next += 1
        return self.next


class HeldMarkers:
    """Keeps each transaction's completion until :meth:`deliver` plays every participant acknowledging."""

    def __init__(self) -> None:
        self.pending: list[MarkerCompletion] = []

    def enqueue(self, *, on_complete: MarkerCompletion, **_: object) -> None:
        self.pending.append(on_complete)

    async def deliver(self) -> None:
        while self.pending:
            await self.pending.pop(0)()


def shard_by_length(transactional_id: str) -> int:
    return len(transactional_id) % 2


async def new_coordinator(meter: Meter, store: MemoryStore, markers: HeldMarkers) -> TransactionCoordinator:
    coordinator = TransactionCoordinator(
        state=TransactionStateManager(store, shard_for=shard_by_length, metrics=meter.metrics),
        producer_ids=CountingIds(),
        markers=markers,
        clock=lambda: 1_000_000,
        metrics=meter.metrics,
    )
    for shard in (0, 1):
        await coordinator.load(shard, 1)
    return coordinator


async def test_open_transactions_per_shard_follow_begin_decide_and_complete() -> None:
    meter, store, markers = Meter(), MemoryStore(), HeldMarkers()
    coordinator = await new_coordinator(meter, store, markers)
    assert meter.values(TRANSACTIONS_OPEN.name) == {(("shard", 0),): 0, (("shard", 1),): 0}

    ids = {}
    for tid in ("ab", "cd", "xyz"):  # shards 0, 0 and 1
        ids[tid] = await coordinator.init_producer_id(tid, 60_000)
        await coordinator.add_partitions(tid, *ids[tid], [TP])
    assert meter.values(TRANSACTIONS_OPEN.name) == {(("shard", 0),): 2, (("shard", 1),): 1}

    await coordinator.add_partitions("ab", *ids["ab"], [("orders", 1)])  # still the same open transaction
    await coordinator.end_txn("ab", *ids["ab"], commit=True)
    await coordinator.end_txn("xyz", *ids["xyz"], commit=False)
    # PREPARE_* is still open: the markers hold the last stable offset back until Complete* is written
    assert meter.values(TRANSACTIONS_OPEN.name) == {(("shard", 0),): 2, (("shard", 1),): 1}
    assert meter.values(TRANSACTIONS_COMPLETED.name) == {}

    await markers.deliver()
    assert meter.values(TRANSACTIONS_OPEN.name) == {(("shard", 0),): 1, (("shard", 1),): 0}
    assert meter.values(TRANSACTIONS_COMPLETED.name) == {(("result", "abort"),): 1, (("result", "commit"),): 1}


async def test_a_reloaded_shard_counts_its_stored_open_transactions_and_an_unloaded_one_reports_zero() -> None:
    meter, store, markers = Meter(), MemoryStore(), HeldMarkers()
    first = await new_coordinator(meter, store, markers)
    for tid in ("ab", "cd"):
        producer = await first.init_producer_id(tid, 60_000)
        await first.add_partitions(tid, *producer, [TP])

    successor_meter = Meter()
    await new_coordinator(successor_meter, store, HeldMarkers())
    assert successor_meter.values(TRANSACTIONS_OPEN.name)[(("shard", 0),)] == 2, "counted from the replayed rows"

    first.unload(0)
    assert meter.values(TRANSACTIONS_OPEN.name)[(("shard", 0),)] == 0, "the new owner reports the shard now"


# ---------------------------------------------------------------------------------------------- marker channel


class OneRoute:
    async def resolve(
        self, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[dict[TopicPartition, Route], dict[str, Route]]:
        return {tp: STORAGE for tp in partitions}, {}

    def invalidate(self, *args: object, **kwargs: object) -> None:
        pass


class GatedTransport:
    """Acknowledges every marker once the gate opens."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def write_markers(
        self, destination: MarkerDestination, markers: Sequence[TxnMarkerEntry]
    ) -> Sequence[TxnMarkerOutcome]:
        await self.gate.wait()
        return [TxnMarkerOutcome({tp: None for tp in m.partitions}, {}) for m in markers]

    async def close(self) -> None:
        pass


def _span_context(span_id: int) -> SpanContext:
    return SpanContext(trace_id=0xABC, span_id=span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


async def test_marker_duration_is_recorded_once_per_transaction_and_completion_joins_its_trace() -> None:
    meter, transport = Meter(), GatedTransport()
    manager = TransactionMarkerChannelManager(
        resolver=OneRoute(),
        transport=transport,
        shard_for=lambda _tid: 0,
        is_current=lambda _shard, _epoch: True,
        metrics=meter.metrics,
    )
    manager.start()
    completed_in: dict[str, int] = {}

    def completion(tid: str) -> MarkerCompletion:
        async def complete() -> None:
            completed_in[tid] = trace.get_current_span().get_span_context().span_id

        return complete

    try:
        for span_id, (tid, partitions) in enumerate((("with-data", frozenset({TP})), ("empty", frozenset())), 1):
            # the EndTxn span the coordinator runs in when it enqueues
            with trace.use_span(NonRecordingSpan(_span_context(span_id))):
                manager.enqueue(
                    transactional_id=tid,
                    producer_id=span_id,
                    producer_epoch=1,
                    result=TransactionResult.COMMIT,
                    partitions=partitions,
                    groups=frozenset(),
                    coordinator_epoch=1,
                    on_complete=completion(tid),
                )
        await until(lambda: "empty" in completed_in, "the transaction without participants completed")
        assert meter.values(TXN_MARKER_DURATION.name) == {}, "nothing was held back, so no marker latency"
        await asyncio.sleep(0.05)
        transport.gate.set()
        await until(lambda: "with-data" in completed_in, "the markers were acknowledged")
    finally:
        await manager.close()

    assert completed_in == {"with-data": 1, "empty": 2}, "Complete* is written in the trace of its EndTxn"
    assert meter.values(TXN_MARKER_DURATION.name) == {(("result", "commit"),): 1}
    (point,) = meter.points(TXN_MARKER_DURATION.name)
    assert point.sum >= 0.05, "measured from enqueueing until the last acknowledgement"


# ---------------------------------------------------------------------------------------------- state manager


def _row(state: TransactionState) -> TxnTransition:
    return TxnTransition(
        state=state,
        producer_id=42,
        previous_producer_id=42,
        next_producer_id=NO_PRODUCER_ID,
        producer_epoch=3,
        last_producer_epoch=NO_PRODUCER_EPOCH,
        txn_timeout_ms=60_000,
        partitions=frozenset({TP}) if state.has_open_transaction else frozenset(),
        txn_start_timestamp=1_000,
        txn_last_update_timestamp=1_000,
    )


async def test_each_write_is_a_persist_span_in_its_callers_trace_and_group_commits_link_them(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    store = TransactionLog(create_engine(f"sqlite:///{tmp_path / 'txn.db'}"), lambda _tid: 0, tracer_provider=provider)
    await asyncio.to_thread(store.migrate)
    store.begin_takeover(0, 1)
    await store.load_shard(0)
    tracer = provider.get_tracer("test")
    try:

        async def end_txn(tid: str) -> None:
            with tracer.start_as_current_span(f"EndTxn {tid}"):
                await store.write(tid, _row(TransactionState.PREPARE_COMMIT), 1)

        await asyncio.gather(end_txn("first"), end_txn("second"), end_txn("third"))
    finally:
        await store.close()
        store.engine.dispose()

    spans = exporter.get_finished_spans()
    by_name = {s.name: s for s in spans}
    persists = [s for s in spans if s.name == "oncelog.txn.persist"]
    assert len(persists) == 3
    for persist in persists:
        tid = persist.attributes["oncelog.transactional_id"]
        assert persist.parent.span_id == by_name[f"EndTxn {tid}"].context.span_id
        assert persist.attributes["oncelog.txn.state"] == "PREPARE_COMMIT"
        assert persist.attributes["oncelog.producer_id"] == 42
        assert persist.attributes["oncelog.coordinator_epoch"] == 1
        assert persist.attributes["db.system"] == "sqlite"
    commits = [s for s in spans if s.name == "oncelog.txn.sql_transaction"]
    carried = sum(s.attributes["oncelog.txn.writes"] for s in commits)
    assert carried == 3, "every write is carried by exactly one SQL transaction"
    persist_ids = {p.context.span_id for p in persists}
    for commit in commits:
        assert commit.parent.span_id in persist_ids, "under the first write it carries"
        linked = {link.context.span_id for link in commit.links}
        assert len(linked) == commit.attributes["oncelog.txn.writes"] - 1 and linked <= persist_ids
    assert any(s.attributes["oncelog.txn.writes"] > 1 for s in commits), "concurrent writes share a commit"
