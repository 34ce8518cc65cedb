"""Telemetry of the whole cluster as Grafana sees it: one commit is one trace, and every dashboard metric is emitted.

The cluster (two storage nodes, group-offsets, coordinator, pid-allocator, each an OS process) exports over OTLP
to an in-test receiver. Transactions are driven with raw stubs, as any gRPC client would: InitProducerId,
AddPartitionsToTxn for a partition on each storage node, AddOffsetsToTxn, transactional Produce, TxnOffsetCommit
and EndTxn (design/architecture.md §9, issue "tracing end to end").
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.errors import Reason
from oncelog.records import Record, build_batch
from oncelog.rpc import from_rpc_error, sync_channel
from oncelog.telemetry.metrics import (
    CATALOG,
    FETCH_RECORDS,
    PARTITION_LSO_LAG,
    PID_BLOCK_REMAINING,
    PRODUCE_BYTES,
    PRODUCE_RECORDS,
    TRANSACTIONS_COMPLETED,
    TRANSACTIONS_OPEN,
    TXN_MARKER_DURATION,
)
from oncelog.testing import LocalCluster
from oncelog.testing.otlp import OtlpReceiver, ReceivedPoint, ReceivedSpan

pytestmark = pytest.mark.timeout(120)
T = TypeVar("T")

ROOT = Path(__file__).resolve().parents[2]
TOPIC = "payments"
GROUP = "ledger-writers"
SPAN_KIND_INTERNAL, SPAN_KIND_SERVER, SPAN_KIND_CLIENT = 1, 2, 3
COORDINATOR = "oncelog-txn-coordinator"
STORAGE = "oncelog-partition-storage"
OFFSETS = "oncelog-group-offsets"
END_TXN = "oncelog.api.txn.v1.TransactionCoordinatorService/EndTxn"
STORAGE_MARKERS = "oncelog.api.storage.v1.PartitionStorageService/WriteTxnMarkers"
OFFSETS_MARKERS = "oncelog.api.offsets.v1.GroupOffsetsService/WriteTxnMarkers"
PRODUCE = "oncelog.api.storage.v1.PartitionStorageService/Produce"
TXN_OFFSET_COMMIT = "oncelog.api.offsets.v1.GroupOffsetsService/TxnOffsetCommit"


@dataclass
class Telemetry:
    """A running cluster exporting to ``receiver``."""

    cluster: LocalCluster
    receiver: OtlpReceiver


@pytest.fixture
def telemetry(tmp_path: Path) -> Iterator[Telemetry]:
    with OtlpReceiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "OTEL_METRIC_EXPORT_INTERVAL": "200",
        }
        with LocalCluster(tmp_path, storage_nodes=2, env=env) as cluster:
            yield Telemetry(cluster, receiver)


# ---------------------------------------------------------------------------------------------- raw client


def _retrying(call: Callable[[], T], *reasons: Reason, timeout: float = 30.0) -> T:
    """``call()``, retried while it fails with one of ``reasons`` (a shard loading, markers completing)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return call()
        except grpc.RpcError as exc:
            if from_rpc_error(exc).reason not in reasons or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


class RawClient:
    """The wire protocol with nothing but stubs: what a client in any language does."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._channels: dict[str, grpc.Channel] = {}
        self.admin = cluster_pb.ClusterServiceStub(self.channel(cluster.bootstrap))
        created = self.admin.CreateTopics(
            cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=TOPIC, partitions=2)])
        )
        self.partitions = {p.partition: p for p in created.topics[0].partitions}
        assert len({p.leader_node_id for p in self.partitions.values()}) == 2, "one partition on each storage node"
        metadata = self.admin.Metadata(cluster_pb.MetadataRequest(topics=[TOPIC]))
        self.leaders = {p.partition: (p.leader_address, p.leader_epoch) for p in metadata.topics[0].partitions}
        self.sequences: dict[tuple[int, int], int] = {}

    def channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            self._channels[address] = sync_channel(address)
        return self._channels[address]

    def coordinator(self, key: str, kind: cluster_pb.CoordinatorType.ValueType) -> str:
        request = cluster_pb.FindCoordinatorRequest(key=key, type=kind)
        found = _retrying(lambda: self.admin.FindCoordinator(request), Reason.COORDINATOR_NOT_AVAILABLE)
        return found.address

    def txn_stub(self, transactional_id: str) -> txn_pb.TransactionCoordinatorServiceStub:
        address = self.coordinator(transactional_id, cluster_pb.COORDINATOR_TYPE_TRANSACTION)
        return txn_pb.TransactionCoordinatorServiceStub(self.channel(address))

    def init(self, transactional_id: str = "") -> common_pb.ProducerIdentity:
        """InitProducerId; an empty transactional id gives an idempotent-only producer id (epoch 0)."""
        # any coordinator replica hands out idempotent-only producer ids
        address = self.cluster.addresses("txn-coordinator")[0]
        stub = (
            self.txn_stub(transactional_id)
            if transactional_id
            else txn_pb.TransactionCoordinatorServiceStub(self.channel(address))
        )
        request = txn_pb.InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=60_000)
        response = _retrying(
            lambda: stub.InitProducerId(request), Reason.CONCURRENT_TRANSACTIONS, Reason.COORDINATOR_LOAD_IN_PROGRESS
        )
        return response.producer

    def begin(self, transactional_id: str, producer: common_pb.ProducerIdentity, *partitions: int) -> None:
        """AddPartitionsToTxn (retried while the previous transaction of the id completes)."""
        request = txn_pb.AddPartitionsToTxnRequest(
            transactional_id=transactional_id,
            producer=producer,
            partitions=[common_pb.TopicPartition(topic=TOPIC, partition=p) for p in partitions],
        )
        stub = self.txn_stub(transactional_id)
        _retrying(lambda: stub.AddPartitionsToTxn(request), Reason.CONCURRENT_TRANSACTIONS)

    def produce(
        self, partition: int, producer: common_pb.ProducerIdentity, values: list[bytes], transactional_id: str = ""
    ) -> int:
        """One batch of ``values``; returns its base offset."""
        key = (producer.producer_id, partition)
        batch = build_batch(
            [Record(key=None, value=v) for v in values],
            producer_id=producer.producer_id,
            producer_epoch=producer.producer_epoch,
            base_sequence=self.sequences.get(key, 0),
            transactional=bool(transactional_id),
            base_timestamp=int(time.time() * 1000),
        )
        self.sequences[key] = self.sequences.get(key, 0) + len(values)
        address, leader_epoch = self.leaders[partition]
        response = storage_pb.PartitionStorageServiceStub(self.channel(address)).Produce(
            storage_pb.ProduceRequest(
                transactional_id=transactional_id,
                acks=storage_pb.ACKS_ALL,
                partitions=[
                    storage_pb.PartitionBatches(
                        topic_partition=common_pb.TopicPartition(topic=TOPIC, partition=partition),
                        leader_epoch=leader_epoch,
                        records=batch,
                    )
                ],
            ),
            timeout=10,
        )
        result = response.results[0]
        assert not result.HasField("error"), result.error
        return result.base_offset

    def add_offsets(self, transactional_id: str, producer: common_pb.ProducerIdentity, offset: int) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit of ``offset`` on partition 0 to the group's coordinator."""
        group_address = (
            self.txn_stub(transactional_id)
            .AddOffsetsToTxn(
                txn_pb.AddOffsetsToTxnRequest(transactional_id=transactional_id, producer=producer, group_id=GROUP)
            )
            .group_coordinator_address
        )
        offsets_pb.GroupOffsetsServiceStub(self.channel(group_address)).TxnOffsetCommit(
            offsets_pb.TxnOffsetCommitRequest(
                transactional_id=transactional_id,
                producer=producer,
                group_id=GROUP,
                offsets=[
                    common_pb.PartitionOffset(
                        topic_partition=common_pb.TopicPartition(topic=TOPIC, partition=0),
                        offset=offset,
                        leader_epoch=-1,
                    )
                ],
            ),
            timeout=10,
        )

    def end(
        self,
        transactional_id: str,
        producer: common_pb.ProducerIdentity,
        result: common_pb.TransactionResult.ValueType,
        stub: txn_pb.TransactionCoordinatorServiceStub | None = None,
    ) -> common_pb.ProducerIdentity:
        """EndTxn, through ``stub`` when given (a traced channel)."""
        stub = stub or self.txn_stub(transactional_id)
        request = txn_pb.EndTxnRequest(transactional_id=transactional_id, producer=producer, result=result)
        return stub.EndTxn(request, timeout=10).producer

    def wait_state(self, transactional_id: str, state: txn_pb.TransactionState.ValueType) -> None:
        stub = self.txn_stub(transactional_id)
        deadline = time.monotonic() + 30
        request = txn_pb.DescribeTransactionsRequest(transactional_ids=[transactional_id])
        while (found := stub.DescribeTransactions(request).transactions[0].state) != state:
            assert time.monotonic() < deadline, f"{transactional_id} stayed {txn_pb.TransactionState.Name(found)}"
            time.sleep(0.02)

    def fetch_all(self, partition: int, isolation: storage_pb.IsolationLevel.ValueType) -> None:
        address, leader_epoch = self.leaders[partition]
        storage_pb.PartitionStorageServiceStub(self.channel(address)).Fetch(
            storage_pb.FetchRequest(
                partitions=[
                    storage_pb.FetchPartition(
                        topic_partition=common_pb.TopicPartition(topic=TOPIC, partition=partition),
                        fetch_offset=0,
                        leader_epoch=leader_epoch,
                    )
                ],
                isolation_level=isolation,
            ),
            timeout=10,
        )


# ---------------------------------------------------------------------------------------------- tracing


def _children(spans: list[ReceivedSpan], parent: ReceivedSpan) -> list[ReceivedSpan]:
    return [s for s in spans if s.parent_span_id == parent.span_id and s.trace_id == parent.trace_id]


def _one(spans: list[ReceivedSpan], what: str, predicate: Callable[[ReceivedSpan], bool]) -> ReceivedSpan:
    found = [s for s in spans if predicate(s)]
    assert len(found) == 1, f"expected one {what}, found {[(s.service, s.name) for s in found]}"
    return found[0]


def test_commit_transaction_is_one_trace_from_the_client_to_every_marker(telemetry: Telemetry) -> None:
    """design/architecture.md §9: client span → EndTxn → Prepare write → one WriteTxnMarkers per destination → Complete
    write."""
    receiver = telemetry.receiver
    client = RawClient(telemetry.cluster)
    tid = "traced-payments"
    producer = client.init(tid)
    client.begin(tid, producer, 0, 1)
    for partition in (0, 1):
        client.produce(partition, producer, [b"debit", b"credit"], transactional_id=tid)
    client.add_offsets(tid, producer, offset=7)

    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "test-client"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True)))
    # resolved before the span starts, so the trace holds the commit and nothing else
    address = client.coordinator(tid, cluster_pb.COORDINATOR_TYPE_TRANSACTION)
    with (
        sync_channel(address, tracer_provider=provider) as traced,
        provider.get_tracer("test").start_as_current_span("commit_transaction"),
    ):
        client.end(tid, producer, common_pb.TRANSACTION_RESULT_COMMIT, txn_pb.TransactionCoordinatorServiceStub(traced))
    provider.shutdown()
    client.wait_state(tid, txn_pb.TRANSACTION_STATE_COMPLETE_COMMIT)

    def root(spans: list[ReceivedSpan]) -> ReceivedSpan | None:
        return next((s for s in spans if s.service == "test-client" and s.name == "commit_transaction"), None)

    def complete(spans: list[ReceivedSpan]) -> bool:
        """Every process exported its part: the Complete write and the three WriteTxnMarkers it served."""
        top = root(spans)
        if top is None:
            return False
        in_trace = [s for s in spans if s.trace_id == top.trace_id]
        served = [s for s in in_trace if s.kind == SPAN_KIND_SERVER and s.name in (STORAGE_MARKERS, OFFSETS_MARKERS)]
        return len(served) >= 3 and any(s.attributes.get("oncelog.txn.state") == "COMPLETE_COMMIT" for s in in_trace)

    received = receiver.wait_for(complete)
    commit = root(received)
    assert commit is not None
    spans = [s for s in received if s.trace_id == commit.trace_id]

    client_end = _one(spans, "EndTxn client span", lambda s: s.name == END_TXN and s.kind == SPAN_KIND_CLIENT)
    assert client_end.parent_span_id == commit.span_id
    server_end = _one(spans, "EndTxn server span", lambda s: s.name == END_TXN and s.kind == SPAN_KIND_SERVER)
    assert (server_end.service, server_end.parent_span_id) == (COORDINATOR, client_end.span_id)
    assert server_end.attributes["oncelog.transactional_id"] == tid

    # the decision is written once, under EndTxn, with its own SQL transaction span
    prepare = _one(spans, "Prepare write", lambda s: s.attributes.get("oncelog.txn.state") == "PREPARE_COMMIT")
    assert (prepare.name, prepare.parent_span_id) == ("oncelog.txn.persist", server_end.span_id)
    assert prepare.attributes["oncelog.transactional_id"] == tid
    assert prepare.attributes["oncelog.producer_id"] == producer.producer_id
    sql = _children(spans, prepare)
    assert [s.name for s in sql] == ["oncelog.txn.sql_transaction"]
    assert sql[0].attributes["db.system"] == "sqlite"

    # one WriteTxnMarkers per destination (two storage nodes, one group-offsets node), each under EndTxn
    fan_outs = [s for s in _children(spans, server_end) if s.name == "txn-markers"]
    destinations = sorted(str(s.attributes["oncelog.destination"]) for s in fan_outs)
    assert destinations == sorted(
        [client.partitions[0].leader_node_id, client.partitions[1].leader_node_id, "group-offsets-0"]
    ), destinations
    marker_calls = [c for fan_out in fan_outs for c in _children(spans, fan_out)]
    assert sorted((c.name, c.kind) for c in marker_calls) == sorted(
        [(STORAGE_MARKERS, SPAN_KIND_CLIENT)] * 2 + [(OFFSETS_MARKERS, SPAN_KIND_CLIENT)]
    )
    servers = []
    for call in marker_calls:
        served = _children(spans, call)
        assert [(s.service, s.kind, s.name) for s in served] == [
            (OFFSETS if call.name == OFFSETS_MARKERS else STORAGE, SPAN_KIND_SERVER, call.name)
        ], f"{call.name} must be served exactly once, as a child of the coordinator's call"
        servers.extend(served)
    assert all(prepare.end_ns <= fan_out.start_ns for fan_out in fan_outs), "markers only after Prepare is durable"

    # Complete* is written in the same trace, under EndTxn, once every destination answered
    completion = _one(spans, "Complete write", lambda s: s.attributes.get("oncelog.txn.state") == "COMPLETE_COMMIT")
    assert (completion.name, completion.parent_span_id) == ("oncelog.txn.persist", server_end.span_id)
    assert completion.start_ns >= max(s.end_ns for s in servers), "Complete* only after every marker was written"

    # the rest of the transaction is found by the same attribute (Tempo search: oncelog.transactional_id)
    tagged = receiver.wait_for(
        lambda all_spans: (
            {s.name for s in all_spans if s.kind == SPAN_KIND_SERVER and s.attributes.get("oncelog.transactional_id")}
            >= {PRODUCE, TXN_OFFSET_COMMIT}
        )
    )
    assert {s.attributes["oncelog.transactional_id"] for s in tagged if s.name in (PRODUCE, TXN_OFFSET_COMMIT)} == {tid}


# ---------------------------------------------------------------------------------------------- metrics


def dashboard_metrics() -> set[str]:
    """OTel names of every catalog metric a dashboard in deploy/grafana queries."""
    text = "\n".join(
        json.dumps(json.loads(p.read_text())) for p in sorted((ROOT / "deploy" / "grafana").glob("*.json"))
    )
    queried = set(re.findall(r"\b(oncelog_[A-Za-z0-9_:]*)", text))
    return {d.name for d in CATALOG if queried & set(d.prometheus_series)}


def _total(receiver: OtlpReceiver, name: str, service: str, **attributes: object) -> float:
    points: list[ReceivedPoint] = receiver.points(name, service)
    return sum(p.value for p in points if all(p.attributes.get(k) == v for k, v in attributes.items()))


def _await_value(receiver: OtlpReceiver, name: str, service: str, expected: float, **attributes: object) -> None:
    try:
        receiver.wait_for_metrics(lambda rx: _total(rx, name, service, **attributes) == expected)
    except TimeoutError:
        raise AssertionError(
            f"{name}{attributes} from {service} is {_total(receiver, name, service, **attributes)}, "
            f"expected {expected}; points: {receiver.points(name)}"
        ) from None


# Series this workload cannot feed: they need a replicated partition whose follower dies and returns, or a consumer
# group that rebalances. Each is proven emitted by its own real-process test: the replication series scraped from the
# leader's /metrics by test_replication.py::test_dead_follower_leaves_the_isr_and_acks_all_continues_then_it_rejoins,
# the rebalance counter by tests/unit/group_offsets/test_group_coordinator.py::test_rebalances_and_members_are_counted,
# the check-back calls (they need an application's check-back service) by
# tests/unit/txn_coordinator/test_prepared.py::test_check_backs_the_prepared_count_and_the_oldest_age_are_reported.
# The consumers' records lag comes from consumer processes, not from the services this workload drives; its value
# is proven by test_consumer_records_lag.py (records lag against the LSO at read_committed, the high watermark
# otherwise). The group state writes need a consumer group too: test_consumer_group_join_storm.py scrapes both.
# The Spark sink's counters come from the Spark job's commit process, not from a service: their values are read from
# an OpenTelemetry reader by tests/integration/spark/test_sink_metrics.py.
PROVEN_ELSEWHERE = {
    "oncelog.spark.sink.bytes",
    "oncelog.spark.sink.replays_skipped",
    "oncelog.spark.sink.rows",
    "oncelog.spark.sink.transactions",
    "oncelog.consumer.records_lag",
    "oncelog.groups.heartbeats_committed",
    "oncelog.groups.state_writes",
    "oncelog.transactions.check_backs",
    "oncelog.groups.rebalances",
    "oncelog.partition.isr.expands",
    "oncelog.partition.isr.shrinks",
    "oncelog.partition.replica_lag",
    "oncelog.partition.under_replicated",
}


def test_every_metric_the_dashboards_query_is_emitted(telemetry: Telemetry) -> None:
    """Produce, fetch, a committed and an aborted transaction, a hanging one: every dashboard series is fed."""
    receiver = telemetry.receiver
    client = RawClient(telemetry.cluster)

    idempotent = client.init()
    assert idempotent.producer_epoch == 0
    client.produce(0, idempotent, [b"a", b"b", b"c"])

    committed = client.init("committing")
    client.begin("committing", committed, 0, 1)
    client.produce(0, committed, [b"d"], transactional_id="committing")
    client.produce(1, committed, [b"e", b"f"], transactional_id="committing")
    client.add_offsets("committing", committed, offset=4)
    client.end("committing", committed, common_pb.TRANSACTION_RESULT_COMMIT)
    client.wait_state("committing", txn_pb.TRANSACTION_STATE_COMPLETE_COMMIT)

    # an open transaction followed by two committed-by-nature records: read_committed readers lag by 1 + 2
    hanging = client.init("hanging")
    client.begin("hanging", hanging, 0)
    client.produce(0, hanging, [b"g"], transactional_id="hanging")
    client.produce(0, idempotent, [b"h", b"i"])
    _await_value(receiver, PARTITION_LSO_LAG.name, STORAGE, 3, topic=TOPIC, partition=0)
    _await_value(receiver, TRANSACTIONS_OPEN.name, COORDINATOR, 1)

    client.end("hanging", hanging, common_pb.TRANSACTION_RESULT_ABORT)
    client.wait_state("hanging", txn_pb.TRANSACTION_STATE_COMPLETE_ABORT)
    for partition in (0, 1):
        client.fetch_all(partition, storage_pb.ISOLATION_LEVEL_READ_COMMITTED)
    client.fetch_all(0, storage_pb.ISOLATION_LEVEL_READ_UNCOMMITTED)

    _await_value(receiver, PARTITION_LSO_LAG.name, STORAGE, 0, topic=TOPIC, partition=0)
    _await_value(receiver, TRANSACTIONS_OPEN.name, COORDINATOR, 0)
    _await_value(receiver, PRODUCE_RECORDS.name, STORAGE, 7, topic=TOPIC, partition=0)
    _await_value(receiver, PRODUCE_RECORDS.name, STORAGE, 2, topic=TOPIC, partition=1)
    # the log holds the 7 data records of partition 0 plus two markers, which are no records to a reader
    _await_value(receiver, FETCH_RECORDS.name, STORAGE, 7, topic=TOPIC, partition=0, isolation="read_committed")
    _await_value(receiver, FETCH_RECORDS.name, STORAGE, 7, topic=TOPIC, partition=0, isolation="read_uncommitted")
    _await_value(receiver, TRANSACTIONS_COMPLETED.name, COORDINATOR, 1, result="commit")
    _await_value(receiver, TRANSACTIONS_COMPLETED.name, COORDINATOR, 1, result="abort")
    _await_value(receiver, TXN_MARKER_DURATION.name, COORDINATOR, 1, result="commit")
    _await_value(receiver, TXN_MARKER_DURATION.name, COORDINATOR, 1, result="abort")
    assert _total(receiver, PRODUCE_BYTES.name, STORAGE, topic=TOPIC) > 0
    receiver.wait_for_metrics(lambda rx: bool(rx.points(PID_BLOCK_REMAINING.name, COORDINATOR)))
    assert all(p.value > 0 for p in receiver.points(PID_BLOCK_REMAINING.name, COORDINATOR))

    wanted = dashboard_metrics()
    assert wanted, "the dashboards query no oncelog metric"
    assert wanted >= PROVEN_ELSEWHERE, f"no dashboard queries {sorted(PROVEN_ELSEWHERE - wanted)} any more"
    wanted -= PROVEN_ELSEWHERE
    try:
        receiver.wait_for_metrics(lambda rx: wanted <= rx.metric_names)
    except TimeoutError:
        raise AssertionError(f"never emitted: {sorted(wanted - receiver.metric_names)}") from None
