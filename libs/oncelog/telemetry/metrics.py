"""The catalog of oncelog metrics: every metric defined once, with typed helpers to record it.

Each :class:`MetricDefinition` names an OpenTelemetry instrument (dot-separated name, UCUM unit, description,
kind, attribute keys). :class:`OncelogMetrics` creates the instruments from a ``MeterProvider`` (the global one
by default, which ``configure_telemetry`` points at OTLP) and offers one method per thing a service observes;
the module-level functions record through a default instance on the global provider. Instruments obtained
before the provider is installed forward to it once it is (the API's proxy meter), so importing this module
early costs nothing and loses nothing.

Prometheus names. Metrics travel over OTLP to Prometheus' OTLP receiver, which translates names the way the
OpenTelemetry/Prometheus compatibility spec says and :func:`prometheus_name` reproduces: dots become
underscores, the unit is appended as a word unless the name already ends with it (``s`` → ``_seconds``,
``By`` → ``_bytes``; annotations such as ``{record}`` are dropped), monotonic counters get ``_total``, and a
histogram is queried through ``_bucket``, ``_sum`` and ``_count``. Attribute keys become labels the same way
(``rpc.method`` → ``rpc_method``). So ``oncelog.produce.records`` is ``oncelog_produce_records_total`` and
``oncelog.rpc.server.duration`` is ``oncelog_rpc_server_duration_seconds_bucket``. Dashboards query only names
from :func:`prometheus_series`, which ``tests/deploy/test_dashboards.py`` enforces.

Attribute values stay bounded: topic and partition (as Kafka's per-partition JMX metrics), an isolation
level, a transaction result, an RPC method. Never a transactional id or producer id; those belong on spans.
"""

from __future__ import annotations

import enum
import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from opentelemetry import metrics
from opentelemetry.metrics import CallbackOptions, Meter, MeterProvider, Observation

from oncelog.vocabulary import Role

METER_NAME = "oncelog"

# Bucket boundaries in seconds: OTel's default boundaries (0..10000) assume milliseconds and would put every
# oncelog call into the first two buckets.
LATENCY_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class InstrumentKind(enum.Enum):
    """The OpenTelemetry instrument a metric is recorded with."""

    COUNTER = "counter"
    """Monotonic sum; a Prometheus counter (``_total``)."""
    UP_DOWN_COUNTER = "up_down_counter"
    """Non-monotonic sum; a Prometheus gauge."""
    GAUGE = "gauge"
    """Last value set; a Prometheus gauge."""
    HISTOGRAM = "histogram"
    """Explicit-bucket histogram; Prometheus ``_bucket``/``_sum``/``_count``."""
    OBSERVABLE_GAUGE = "observable_gauge"
    """Values read from registered sources at each collection; a Prometheus gauge. A series whose source stops
    reporting it (a partition no longer assigned, a closed client) ends instead of repeating its last value."""


@dataclass(frozen=True)
class MetricDefinition:
    """One metric: its OTel identity, what it means, which attributes it carries and who records it.

    Attributes:
        name: OTel instrument name, ``oncelog.<area>.<what>``.
        kind: instrument kind.
        unit: UCUM unit (``s``, ``By``) or an annotation (``{record}``).
        description: one sentence, exported as the metric's help text.
        attributes: attribute keys every data point carries.
        recorded_by: the services (kebab-case) or library that record it.
        buckets: histogram bucket boundaries, in ``unit``.
    """

    name: str
    kind: InstrumentKind
    unit: str
    description: str
    attributes: tuple[str, ...] = ()
    recorded_by: tuple[str, ...] = ()
    buckets: tuple[float, ...] | None = None

    @property
    def prometheus_name(self) -> str:
        """The base name Prometheus stores this metric under (see the module docstring)."""
        return prometheus_name(self.name, self.unit, self.kind)

    @property
    def prometheus_series(self) -> tuple[str, ...]:
        """Every series name a query may use for this metric."""
        base = self.prometheus_name
        if self.kind is InstrumentKind.HISTOGRAM:
            return (f"{base}_bucket", f"{base}_sum", f"{base}_count")
        return (base,)

    @property
    def prometheus_labels(self) -> tuple[str, ...]:
        """The attribute keys as Prometheus label names."""
        return tuple(prometheus_label(a) for a in self.attributes)


PRODUCE_RECORDS = MetricDefinition(
    "oncelog.produce.records",
    InstrumentKind.COUNTER,
    "{record}",
    "Records appended to a partition by Produce (duplicates of an idempotent retry are not counted).",
    ("topic", "partition"),
    (Role.PARTITION_STORAGE,),
)
PRODUCE_BYTES = MetricDefinition(
    "oncelog.produce.bytes",
    InstrumentKind.COUNTER,
    "By",
    "Record batch bytes appended to a partition by Produce.",
    ("topic", "partition"),
    (Role.PARTITION_STORAGE,),
)
FETCH_RECORDS = MetricDefinition(
    "oncelog.fetch.records",
    InstrumentKind.COUNTER,
    "{record}",
    "Records returned by Fetch, by isolation level (read_committed stops at the last stable offset).",
    ("topic", "partition", "isolation"),
    (Role.PARTITION_STORAGE,),
)
FETCH_BYTES = MetricDefinition(
    "oncelog.fetch.bytes",
    InstrumentKind.COUNTER,
    "By",
    "Record batch bytes returned by Fetch, by isolation level.",
    ("topic", "partition", "isolation"),
    (Role.PARTITION_STORAGE,),
)
PARTITION_LSO_LAG = MetricDefinition(
    "oncelog.partition.lso_lag",
    InstrumentKind.GAUGE,
    "{offset}",
    "High watermark minus last stable offset of a partition led by this node: records that read_committed"
    " consumers cannot see yet because an open transaction precedes them.",
    ("topic", "partition"),
    (Role.PARTITION_STORAGE,),
)
PARTITION_UNDER_REPLICATED = MetricDefinition(
    "oncelog.partition.under_replicated",
    InstrumentKind.GAUGE,
    "{partition}",
    "1 while a replicated partition led by this node has fewer in-sync replicas than replicas, else 0 (Kafka's"
    " UnderReplicatedPartitions, per partition: sum it for the count).",
    ("topic", "partition"),
    (Role.PARTITION_STORAGE,),
)
PARTITION_ISR_SHRINKS = MetricDefinition(
    "oncelog.partition.isr.shrinks",
    InstrumentKind.COUNTER,
    "{replica}",
    "Replicas the leader removed from a partition's ISR because they fell behind (Kafka's IsrShrinksPerSec).",
    ("topic", "partition"),
    (Role.PARTITION_STORAGE,),
)
PARTITION_ISR_EXPANDS = MetricDefinition(
    "oncelog.partition.isr.expands",
    InstrumentKind.COUNTER,
    "{replica}",
    "Replicas the leader added back to a partition's ISR once caught up (Kafka's IsrExpandsPerSec).",
    ("topic", "partition"),
    (Role.PARTITION_STORAGE,),
)
PARTITION_REPLICA_LAG = MetricDefinition(
    "oncelog.partition.replica_lag",
    InstrumentKind.GAUGE,
    "{offset}",
    "Leader log end minus a follower's fetch offset at that follower's latest replica fetch, by follower"
    " (replica: its node id); reported by the leader.",
    ("topic", "partition", "replica"),
    (Role.PARTITION_STORAGE,),
)
TRANSACTIONS_OPEN = MetricDefinition(
    "oncelog.transactions.open",
    InstrumentKind.GAUGE,
    "{transaction}",
    "Transactions of a coordinator shard that are ongoing or preparing (not yet complete); a coordinator"
    " sets 0 for a shard it gives up.",
    ("shard",),
    (Role.TXN_COORDINATOR,),
)
TRANSACTIONS_COMPLETED = MetricDefinition(
    "oncelog.transactions.completed",
    InstrumentKind.COUNTER,
    "{transaction}",
    "Transactions that reached COMPLETE_COMMIT or COMPLETE_ABORT, by result (commit or abort).",
    ("result",),
    (Role.TXN_COORDINATOR,),
)
TRANSACTIONS_PREPARED = MetricDefinition(
    "oncelog.transactions.prepared",
    InstrumentKind.GAUGE,
    "{transaction}",
    "Prepared transactions (two-phase commit) of a coordinator waiting for their outcome.",
    (),
    (Role.TXN_COORDINATOR,),
)
TRANSACTIONS_PREPARED_MAX_AGE = MetricDefinition(
    "oncelog.transactions.prepared.max_age",
    InstrumentKind.GAUGE,
    "ms",
    "Age of a coordinator's oldest prepared transaction (0 when none); the check-back starts at"
    " check_back_after_ms and max_prepared_ms bounds it.",
    (),
    (Role.TXN_COORDINATOR,),
)
TRANSACTION_CHECK_BACKS = MetricDefinition(
    "oncelog.transactions.check_backs",
    InstrumentKind.COUNTER,
    "{call}",
    "CheckTransaction calls to applications, by verdict (commit, rollback, unknown, unreachable).",
    ("verdict",),
    (Role.TXN_COORDINATOR,),
)
TXN_MARKER_DURATION = MetricDefinition(
    "oncelog.txn.marker.duration",
    InstrumentKind.HISTOGRAM,
    "s",
    "Time from a PREPARE_COMMIT/PREPARE_ABORT becoming durable until every partition and group has its"
    " marker: how long the transaction holds back the last stable offset after EndTxn.",
    ("result",),
    (Role.TXN_COORDINATOR,),
    LATENCY_BUCKETS_S,
)
PID_BLOCK_REMAINING = MetricDefinition(
    "oncelog.pid.block.remaining",
    InstrumentKind.GAUGE,
    "{producer_id}",
    "Producer ids left in the block this coordinator fetched from the pid-allocator before it needs a new one.",
    (),
    (Role.TXN_COORDINATOR,),
)
GROUP_REBALANCES = MetricDefinition(
    "oncelog.groups.rebalances",
    InstrumentKind.COUNTER,
    "{rebalance}",
    "Consumer group epoch bumps (a member joined, left, was removed or changed its subscription, or a subscribed"
    " topic grew): each starts a cooperative rebalance (design/consumer-groups.md).",
    (),
    (Role.GROUP_OFFSETS,),
)
GROUP_MEMBERS = MetricDefinition(
    "oncelog.groups.members",
    InstrumentKind.GAUGE,
    "{member}",
    "Members of the consumer groups of a group-offsets shard served by this process; 0 for a shard it gave up.",
    ("shard",),
    (Role.GROUP_OFFSETS,),
)
GROUP_STATE_WRITES = MetricDefinition(
    "oncelog.groups.state_writes",
    InstrumentKind.COUNTER,
    "{transaction}",
    "Fenced SQL transactions the group coordinator wrote for consumer group state: one per shard per flush, however"
    " many members' changes it carries (design/consumer-groups.md §5.1).",
    (),
    (Role.GROUP_OFFSETS,),
)
GROUP_HEARTBEATS_COMMITTED = MetricDefinition(
    "oncelog.groups.heartbeats_committed",
    InstrumentKind.COUNTER,
    "{heartbeat}",
    "Heartbeats answered once a group state write held the change they made or read; divided by"
    " oncelog.groups.state_writes, the heartbeats per transaction of a join storm.",
    (),
    (Role.GROUP_OFFSETS,),
)
CONSUMER_RECORDS_LAG = MetricDefinition(
    "oncelog.consumer.records_lag",
    InstrumentKind.OBSERVABLE_GAUGE,
    "{offset}",
    "Per partition a consumer reads, offsets between its position and the end it may read: the last stable offset"
    " at read_committed (what a read_committed group still has to read), the high watermark at read_uncommitted"
    " (Kafka's records-lag; design/consumer-groups.md §8).",
    ("group", "client_id", "topic", "partition"),
    ("the consumer (oncelog.client.fetcher)",),
)
SPARK_SINK_ROWS = MetricDefinition(
    "oncelog.spark.sink.rows",
    InstrumentKind.COUNTER,
    "{row}",
    "Rows the oncelog Spark sink committed, counted by the driver as each micro-batch or write job commits "
    "(rows of Spark partitions a replay skipped are not counted again).",
    ("atomicity",),
    ("the Spark sink's driver (oncelog.spark)",),
)
SPARK_SINK_BYTES = MetricDefinition(
    "oncelog.spark.sink.bytes",
    InstrumentKind.COUNTER,
    "By",
    "Bytes of keys, values and headers the oncelog Spark sink committed.",
    ("atomicity",),
    ("the Spark sink's driver (oncelog.spark)",),
)
SPARK_SINK_TRANSACTIONS = MetricDefinition(
    "oncelog.spark.sink.transactions",
    InstrumentKind.COUNTER,
    "{transaction}",
    "Transactions the oncelog Spark sink committed: one per Spark task with rows under atomicity=task, one per "
    "micro-batch under atomicity=batch.",
    ("atomicity",),
    ("the Spark sink's driver (oncelog.spark)",),
)
SPARK_SINK_REPLAYS_SKIPPED = MetricDefinition(
    "oncelog.spark.sink.replays_skipped",
    InstrumentKind.COUNTER,
    "{partition}",
    "Spark partitions of a replayed micro-batch the oncelog Spark sink skipped because an earlier run of the "
    "query had committed them (the exactly-once markers at work).",
    ("atomicity",),
    ("the Spark sink's driver (oncelog.spark)",),
)
RPC_SERVER_DURATION = MetricDefinition(
    "oncelog.rpc.server.duration",
    InstrumentKind.HISTOGRAM,
    "s",
    "Duration of gRPC calls served, from the first byte received to the status sent, by method and status.",
    ("rpc.system", "rpc.service", "rpc.method", "rpc.grpc.status_code"),
    ("every service (oncelog.rpc.interceptors)",),
    LATENCY_BUCKETS_S,
)

CATALOG: tuple[MetricDefinition, ...] = (
    PRODUCE_RECORDS,
    PRODUCE_BYTES,
    FETCH_RECORDS,
    FETCH_BYTES,
    PARTITION_LSO_LAG,
    PARTITION_UNDER_REPLICATED,
    PARTITION_ISR_SHRINKS,
    PARTITION_ISR_EXPANDS,
    PARTITION_REPLICA_LAG,
    TRANSACTIONS_OPEN,
    TRANSACTIONS_COMPLETED,
    TRANSACTIONS_PREPARED,
    TRANSACTIONS_PREPARED_MAX_AGE,
    TRANSACTION_CHECK_BACKS,
    TXN_MARKER_DURATION,
    PID_BLOCK_REMAINING,
    GROUP_REBALANCES,
    GROUP_MEMBERS,
    GROUP_STATE_WRITES,
    GROUP_HEARTBEATS_COMMITTED,
    CONSUMER_RECORDS_LAG,
    SPARK_SINK_ROWS,
    SPARK_SINK_BYTES,
    SPARK_SINK_TRANSACTIONS,
    SPARK_SINK_REPLAYS_SKIPPED,
    RPC_SERVER_DURATION,
)
"""Every metric oncelog emits."""

# UCUM units with a Prometheus word, from the OTel/Prometheus compatibility spec (only those oncelog uses or
# is likely to: seconds for durations, bytes for sizes).
_UNIT_WORDS = {"s": "seconds", "ms": "milliseconds", "By": "bytes", "KiBy": "kibibytes", "MiBy": "mebibytes"}


def prometheus_label(attribute: str) -> str:
    """The Prometheus label name of an OTel attribute key (``rpc.method`` → ``rpc_method``)."""
    return re.sub(r"_+", "_", re.sub(r"[^a-zA-Z0-9_]", "_", attribute))


def prometheus_name(name: str, unit: str, kind: InstrumentKind) -> str:
    """The Prometheus metric name of an OTel instrument, as Prometheus' OTLP receiver builds it.

    Example: ``prometheus_name("oncelog.txn.marker.duration", "s", HISTOGRAM)`` is
    ``oncelog_txn_marker_duration_seconds``.
    """
    base = re.sub(r"_+", "_", re.sub(r"[^a-zA-Z0-9_:]", "_", name)).strip("_")
    words = base.split("_")
    unit_word = _UNIT_WORDS.get(re.sub(r"\{[^}]*\}", "", unit).strip(), "")
    if unit == "1" and kind in (InstrumentKind.GAUGE, InstrumentKind.UP_DOWN_COUNTER):
        unit_word = "ratio"
    if unit_word and unit_word not in words:
        words.append(unit_word)
    if kind is InstrumentKind.COUNTER and words[-1] != "total":
        words.append("total")
    return "_".join(words)


def _create(meter: Meter, definition: MetricDefinition, observe: Callable[[CallbackOptions], Any]) -> Any:
    kind, args = definition.kind, (definition.name, definition.unit, definition.description)
    if kind is InstrumentKind.OBSERVABLE_GAUGE:
        return meter.create_observable_gauge(
            definition.name, callbacks=[observe], unit=definition.unit, description=definition.description
        )
    if kind is InstrumentKind.COUNTER:
        return meter.create_counter(*args)
    if kind is InstrumentKind.UP_DOWN_COUNTER:
        return meter.create_up_down_counter(*args)
    if kind is InstrumentKind.GAUGE:
        return meter.create_gauge(*args)
    return meter.create_histogram(*args, explicit_bucket_boundaries_advisory=definition.buckets)


class OncelogMetrics:
    """The catalog's instruments from one meter provider, with one typed method per observation.

    Services call these methods (or the module-level functions, which use the global provider); tests pass a
    provider with an in-memory reader.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        meter = metrics.get_meter(METER_NAME, meter_provider=meter_provider)
        self._sources: dict[str, dict[int, Callable[[], Iterable[tuple[int, Mapping[str, Any]]]]]] = {}
        self._sources_lock = threading.Lock()
        self._instruments: dict[str, Any] = {
            d.name: _create(meter, d, functools.partial(self._observe, d.name)) for d in CATALOG
        }

    def _observe(self, name: str, options: CallbackOptions) -> Iterator[Observation]:
        with self._sources_lock:
            sources = list(self._sources.get(name, {}).values())
        for source in sources:
            for value, attributes in source():
                yield Observation(value, dict(attributes))

    def register_source(
        self, definition: MetricDefinition, source: Callable[[], Iterable[tuple[int, Mapping[str, Any]]]]
    ) -> Callable[[], None]:
        """Report ``source()``'s ``(value, attributes)`` pairs for an observable gauge at every collection, until the
        returned function is called (the source may be called from the exporter's thread)."""
        key = id(source)
        with self._sources_lock:
            self._sources.setdefault(definition.name, {})[key] = source

        def unregister() -> None:
            with self._sources_lock:
                self._sources.get(definition.name, {}).pop(key, None)

        return unregister

    def instrument(self, definition: MetricDefinition) -> Any:
        """The OTel instrument of a catalog entry, for recordings no helper covers."""
        return self._instruments[definition.name]

    def record_produce(self, topic: str, partition: int, records: int, size_bytes: int) -> None:
        """Count one appended batch (not a deduplicated retry)."""
        attributes = {"topic": topic, "partition": partition}
        self._instruments[PRODUCE_RECORDS.name].add(records, attributes)
        self._instruments[PRODUCE_BYTES.name].add(size_bytes, attributes)

    def record_fetch(self, topic: str, partition: int, isolation: str, records: int, size_bytes: int) -> None:
        """Count what one Fetch returned for one partition; ``isolation`` is read_committed or read_uncommitted."""
        attributes = {"topic": topic, "partition": partition, "isolation": isolation}
        self._instruments[FETCH_RECORDS.name].add(records, attributes)
        self._instruments[FETCH_BYTES.name].add(size_bytes, attributes)

    def set_lso_lag(self, topic: str, partition: int, lag: int) -> None:
        """Report high watermark minus last stable offset of a partition this node leads."""
        self._instruments[PARTITION_LSO_LAG.name].set(lag, {"topic": topic, "partition": partition})

    def set_under_replicated(self, topic: str, partition: int, under_replicated: bool) -> None:
        """Report whether a replicated partition this node leads lacks in-sync replicas (0 when it stops leading)."""
        self._instruments[PARTITION_UNDER_REPLICATED.name].set(
            int(under_replicated), {"topic": topic, "partition": partition}
        )

    def record_isr_change(self, topic: str, partition: int, *, shrinks: int, expands: int) -> None:
        """Count the replicas one ISR update removed and added."""
        attributes = {"topic": topic, "partition": partition}
        if shrinks:
            self._instruments[PARTITION_ISR_SHRINKS.name].add(shrinks, attributes)
        if expands:
            self._instruments[PARTITION_ISR_EXPANDS.name].add(expands, attributes)

    def set_replica_lag(self, topic: str, partition: int, replica: str, lag: int) -> None:
        """Report how far a follower's latest fetch was behind this leader's log end."""
        self._instruments[PARTITION_REPLICA_LAG.name].set(
            lag, {"topic": topic, "partition": partition, "replica": replica}
        )

    def set_transactions_open(self, shard: int, count: int) -> None:
        """Report the open (ongoing or preparing) transactions of one coordinator shard; 0 when unloaded."""
        self._instruments[TRANSACTIONS_OPEN.name].set(count, {"shard": shard})

    def record_transaction_completed(self, result: str) -> None:
        """Count a transaction that completed; ``result`` is ``commit`` or ``abort``."""
        self._instruments[TRANSACTIONS_COMPLETED.name].add(1, {"result": result})

    def set_transactions_prepared(self, count: int, max_age_ms: int) -> None:
        """Report a coordinator's prepared transactions and the age of the oldest (0 when none)."""
        self._instruments[TRANSACTIONS_PREPARED.name].set(count)
        self._instruments[TRANSACTIONS_PREPARED_MAX_AGE.name].set(max_age_ms)

    def record_check_back(self, verdict: str) -> None:
        """Count one CheckTransaction call; ``verdict`` is commit, rollback, unknown or unreachable."""
        self._instruments[TRANSACTION_CHECK_BACKS.name].add(1, {"verdict": verdict})

    def record_marker_duration(self, result: str, seconds: float) -> None:
        """Record the time from a durable PREPARE_* until every marker of the transaction is written."""
        self._instruments[TXN_MARKER_DURATION.name].record(seconds, {"result": result})

    def set_pid_block_remaining(self, remaining: int) -> None:
        """Report the producer ids left in the current block."""
        self._instruments[PID_BLOCK_REMAINING.name].set(remaining)

    def record_group_rebalances(self, count: int = 1) -> None:
        """Count consumer group epoch bumps."""
        self._instruments[GROUP_REBALANCES.name].add(count)

    def record_group_state_write(self, heartbeats: int) -> None:
        """Count one group state transaction and the heartbeats that waited for it."""
        self._instruments[GROUP_STATE_WRITES.name].add(1)
        if heartbeats:
            self._instruments[GROUP_HEARTBEATS_COMMITTED.name].add(heartbeats)

    def set_group_members(self, shard: int, count: int) -> None:
        """Report the members of one group-offsets shard's consumer groups; 0 when the shard is not served."""
        self._instruments[GROUP_MEMBERS.name].set(count, {"shard": shard})

    def record_spark_sink_batch(
        self, atomicity: str, *, rows: int, size_bytes: int, transactions: int, replays_skipped: int
    ) -> None:
        """Count what one committed micro-batch (or write job) of the Spark sink wrote and skipped."""
        attributes = {"atomicity": atomicity}
        self._instruments[SPARK_SINK_ROWS.name].add(rows, attributes)
        self._instruments[SPARK_SINK_BYTES.name].add(size_bytes, attributes)
        self._instruments[SPARK_SINK_TRANSACTIONS.name].add(transactions, attributes)
        self._instruments[SPARK_SINK_REPLAYS_SKIPPED.name].add(replays_skipped, attributes)

    def record_rpc_server_duration(self, full_method: str, status_code: int, seconds: float) -> None:
        """Record one served call; ``full_method`` is ``/package.Service/Method``."""
        service, _, method = full_method.lstrip("/").partition("/")
        attributes: Mapping[str, str | int] = {
            "rpc.system": "grpc",
            "rpc.service": service,
            "rpc.method": method,
            "rpc.grpc.status_code": status_code,
        }
        self._instruments[RPC_SERVER_DURATION.name].record(seconds, attributes)


@functools.cache
def default_metrics() -> OncelogMetrics:
    """The instance on the global meter provider (real once ``configure_telemetry`` installed one)."""
    return OncelogMetrics()


def record_produce(topic: str, partition: int, records: int, size_bytes: int) -> None:
    """:meth:`OncelogMetrics.record_produce` on the global provider."""
    default_metrics().record_produce(topic, partition, records, size_bytes)


def record_fetch(topic: str, partition: int, isolation: str, records: int, size_bytes: int) -> None:
    """:meth:`OncelogMetrics.record_fetch` on the global provider."""
    default_metrics().record_fetch(topic, partition, isolation, records, size_bytes)


def set_lso_lag(topic: str, partition: int, lag: int) -> None:
    """:meth:`OncelogMetrics.set_lso_lag` on the global provider."""
    default_metrics().set_lso_lag(topic, partition, lag)


def set_transactions_open(shard: int, count: int) -> None:
    """:meth:`OncelogMetrics.set_transactions_open` on the global provider."""
    default_metrics().set_transactions_open(shard, count)


def record_transaction_completed(result: str) -> None:
    """:meth:`OncelogMetrics.record_transaction_completed` on the global provider."""
    default_metrics().record_transaction_completed(result)


def record_marker_duration(result: str, seconds: float) -> None:
    """:meth:`OncelogMetrics.record_marker_duration` on the global provider."""
    default_metrics().record_marker_duration(result, seconds)


def set_pid_block_remaining(remaining: int) -> None:
    """:meth:`OncelogMetrics.set_pid_block_remaining` on the global provider."""
    default_metrics().set_pid_block_remaining(remaining)


__all__ = [
    "CATALOG",
    "FETCH_BYTES",
    "FETCH_RECORDS",
    "LATENCY_BUCKETS_S",
    "PARTITION_ISR_EXPANDS",
    "PARTITION_ISR_SHRINKS",
    "PARTITION_LSO_LAG",
    "PARTITION_REPLICA_LAG",
    "PARTITION_UNDER_REPLICATED",
    "PID_BLOCK_REMAINING",
    "PRODUCE_BYTES",
    "PRODUCE_RECORDS",
    "SPARK_SINK_BYTES",
    "SPARK_SINK_REPLAYS_SKIPPED",
    "SPARK_SINK_ROWS",
    "SPARK_SINK_TRANSACTIONS",
    "RPC_SERVER_DURATION",
    "TRANSACTIONS_COMPLETED",
    "TRANSACTIONS_OPEN",
    "TRANSACTIONS_PREPARED",
    "TRANSACTIONS_PREPARED_MAX_AGE",
    "TRANSACTION_CHECK_BACKS",
    "TXN_MARKER_DURATION",
    "InstrumentKind",
    "MetricDefinition",
    "OncelogMetrics",
    "default_metrics",
    "prometheus_label",
    "prometheus_name",
    "record_fetch",
    "record_marker_duration",
    "record_produce",
    "record_transaction_completed",
    "set_lso_lag",
    "set_pid_block_remaining",
    "set_transactions_open",
]
