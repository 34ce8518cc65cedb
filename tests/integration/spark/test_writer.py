"""The exactly-once sink protocol (design (a)) against a real local cluster, without Spark.

Each test plays what Spark does to a task — first attempt, retry, replay after a crash, a speculative
twin — by calling :class:`TaskWriter` with the identity Spark would give it, and checks what a
read_committed consumer sees afterwards.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from oncelog.client import AdminClient, NewTopic
from oncelog.client.errors import ProducerFencedError
from oncelog.client.producer import Producer
from oncelog.client.records import TopicPartition
from oncelog.errors import OncelogError
from oncelog.spark import OncelogDataSource
from oncelog.spark.channels import LogClient
from oncelog.spark.options import OptionError, SinkOptions, parse_sink_options
from oncelog.spark.output import SEND_CHUNK_ROWS
from oncelog.spark.writer import (
    STATELESS_AQE,
    BatchDigest,
    NonDeterministicBatchError,
    OncelogStreamWriter,
    OutputRecord,
    RewoundCheckpointError,
    RowEncoder,
    SinkSchemaError,
    TaskIdentity,
    TaskWriter,
    UnstablePartitioningError,
    check_stable_partitioning,
)
from oncelog.testing import LocalCluster
from oncelog.vocabulary import IsolationLevel

from .conftest import Topic

pytestmark = pytest.mark.timeout(120)

KV = StructType([StructField("key", StringType()), StructField("value", StringType())])


class SimulatedCrash(Exception):
    """The executor died at this point."""


def sink_options(cluster: LocalCluster, topic: Topic, **extra: str) -> SinkOptions:
    """Options with a transactional id prefix of this test's own, so no two tests share an id."""
    return parse_sink_options(
        {"bootstrap": cluster.bootstrap, "topic": topic.name, "transactionalIdPrefix": f"p-{topic.name}", **extra}
    )


def task_writer(cluster: LocalCluster, topic: Topic, **extra: str) -> TaskWriter:
    options = sink_options(cluster, topic, **extra)
    return TaskWriter(options, RowEncoder(KV, options.topic))


def task(batch: int, partition: int = 0, attempt: int = 0, query: str = "q1") -> TaskIdentity:
    return TaskIdentity(query_id=query, batch_id=batch, partition_id=partition, attempt=attempt)


def rows(*values: str) -> list[tuple[str, str]]:
    return [(f"k{v}", v) for v in values]


def visible(
    cluster: LocalCluster, topic: Topic, isolation: str = "read_committed", *, settle: bool = True
) -> list[str]:
    """Every value a consumer with ``isolation`` reads once the transactions that ended have their markers.

    A commit returns once the decision is durable; the markers that move the LSO follow asynchronously
    (design/architecture.md §5), so the check waits for every partition's LSO to reach its high watermark.
    """
    client = LogClient([cluster.bootstrap])
    tps = client.topic_partitions([topic.name])
    deadline = time.monotonic() + 30
    while settle and client.list_offsets(tps, "latest", IsolationLevel.READ_COMMITTED) != client.list_offsets(
        tps, "latest", IsolationLevel.READ_UNCOMMITTED
    ):
        assert time.monotonic() < deadline, "a transaction stayed open"
        time.sleep(0.02)
    reader = OncelogDataSource(
        {"bootstrap": cluster.bootstrap, "topic": topic.name, "isolationLevel": isolation}
    ).reader(None)
    return sorted(r["value"].decode() for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist())


def marker(cluster: LocalCluster, writer: TaskWriter, identity: TaskIdentity) -> tuple[int, dict[str, Any]]:
    offset, metadata = LogClient([cluster.bootstrap]).committed_offset(
        writer.transactional_id(identity), TopicPartition(writer.options.marker_topic, 0)
    )
    return offset, json.loads(metadata) if metadata else {}


# ----------------------------------------------------------------------------------------------- protocol


def test_task_commits_rows_and_batch_marker_together(cluster: LocalCluster, topic: Topic) -> None:
    writer = task_writer(cluster, topic)
    message = writer.write(rows("a", "b", "c"), task(0))
    assert (message.rows, message.skipped, message.batch_id) == (3, False, 0)
    assert message.transactional_id == f"p-{topic.name}-q1-0"
    assert visible(cluster, topic) == ["a", "b", "c"]
    offset, meta = marker(cluster, writer, task(0))
    assert offset == 0 and meta == {"v": 1, "batch": 0, "rows": 3, "digest": message.digest}


def test_replay_of_committed_batch_skips_and_writes_nothing(cluster: LocalCluster, topic: Topic) -> None:
    writer = task_writer(cluster, topic)
    writer.write(rows("a", "b"), task(4))
    replay = writer.write(rows("b", "a"), task(4, attempt=0, query="q1"))  # a restart: same ids, any row order
    assert replay.skipped and replay.rows == 2
    assert visible(cluster, topic) == ["a", "b"], "no duplicate"
    assert visible(cluster, topic, "read_uncommitted") == ["a", "b"], "nothing was even sent"


def test_nondeterministic_replay_fails_loudly(cluster: LocalCluster, topic: Topic) -> None:
    writer = task_writer(cluster, topic)
    writer.write(rows("a", "b"), task(2))
    with pytest.raises(NonDeterministicBatchError, match="batch 2 was committed with 2 rows"):
        writer.write(rows("a", "b", "c"), task(2))
    with pytest.raises(NonDeterministicBatchError):
        writer.write(rows("a", "x"), task(2))
    assert visible(cluster, topic) == ["a", "b"], "the committed output is kept as it is"


def test_next_batch_writes_and_stale_batch_is_refused(cluster: LocalCluster, topic: Topic) -> None:
    writer = task_writer(cluster, topic)
    writer.write(rows("a"), task(0))
    writer.write(rows("b"), task(1))
    with pytest.raises(RewoundCheckpointError):
        writer.write(rows("zombie"), task(0, attempt=3))
    assert visible(cluster, topic) == ["a", "b"], "a batch older than the marker is never written again"
    assert marker(cluster, writer, task(1))[0] == 1


def test_rewound_checkpoint_is_an_error_that_says_what_happened(cluster: LocalCluster, topic: Topic) -> None:
    """An operator deleted the last two batches' checkpoint entries and reran with another maxRecordsPerTrigger:
    Spark re-plans batch 2 with other offsets; skipping it (the marker is at 3) would lose those rows."""
    writer = task_writer(cluster, topic)
    for batch in range(4):
        writer.write(rows(f"r{batch}"), task(batch))
    with pytest.raises(RewoundCheckpointError, match="already committed batch 3, but Spark is writing batch 2") as err:
        writer.write(rows("r2", "r3", "r4"), task(2))
    assert "checkpoint was rewound" in str(err.value) and "Nothing was written" in str(err.value)
    with pytest.raises(RewoundCheckpointError):
        writer.write([], task(1))  # a task without rows is refused as well
    assert visible(cluster, topic, "read_uncommitted") == ["r0", "r1", "r2", "r3"]


def test_replay_without_rows_of_a_batch_committed_with_rows_fails(cluster: LocalCluster, topic: Topic) -> None:
    writer = task_writer(cluster, topic)
    writer.write(rows("a", "b"), task(4))
    with pytest.raises(NonDeterministicBatchError, match=r"batch 4 was committed with 2 rows .* gives this task 0 row"):
        writer.write([], task(4))
    assert visible(cluster, topic) == ["a", "b"]
    assert writer.write([], task(5)).rows == 0, "a new batch without rows is fine"


def test_streaming_task_refuses_adaptive_execution_of_stateless_queries() -> None:
    """Spark sends the settings a session set explicitly to its tasks; an unset switch is Spark 4.3's default, on."""
    for conf in ({}, {STATELESS_AQE: "true"}, {"spark.sql.adaptive.enabled": "true"}):
        with pytest.raises(UnstablePartitioningError, match=f'spark.conf.set\\("{STATELESS_AQE}", "false"\\)'):
            check_stable_partitioning(conf.get)
    check_stable_partitioning({STATELESS_AQE: "false"}.get)
    check_stable_partitioning({"spark.sql.adaptive.enabled": "false"}.get)


def test_task_retry_fences_earlier_attempt_and_its_data_never_shows(cluster: LocalCluster, topic: Topic) -> None:
    crashed: list[Producer] = []

    class CrashBeforeCommit(Producer):
        def commit_transaction(self, timeout: float | None = None) -> None:
            self.flush()  # the rows reached the partition inside the open transaction
            raise SimulatedCrash

        def close(self, timeout: float | None = None) -> None:
            crashed.append(self)  # a dead executor closes nothing

    options = sink_options(cluster, topic)
    encoder = RowEncoder(KV, topic.name)
    with pytest.raises(SimulatedCrash):
        TaskWriter(options, encoder, producer_factory=CrashBeforeCommit).write(rows("a", "b"), task(0))
    assert visible(cluster, topic, settle=False) == [], "the open transaction holds the LSO"
    retry = TaskWriter(options, encoder).write(rows("a", "b"), task(0, attempt=1))
    assert not retry.skipped
    assert visible(cluster, topic) == ["a", "b"], "exactly one copy"
    assert visible(cluster, topic, "read_uncommitted") == ["a", "a", "b", "b"], "the first copy was aborted"
    for producer in crashed:
        Producer.close(producer)


def test_failed_task_aborts_its_transaction_before_raising(cluster: LocalCluster, topic: Topic) -> None:
    """A task that fails after producing closes its producer at once, so its transaction never holds the LSO."""

    class FailBeforeMarker(Producer):
        def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
            self.flush()
            raise SimulatedCrash

    with pytest.raises(SimulatedCrash):
        TaskWriter(sink_options(cluster, topic), RowEncoder(KV, topic.name), producer_factory=FailBeforeMarker).write(
            rows("a"), task(0)
        )
    client = LogClient([cluster.bootstrap])
    tps = client.topic_partitions([topic.name])
    deadline = time.monotonic() + 10  # the abort's markers are written asynchronously after EndTxn
    while client.list_offsets(tps, "latest", IsolationLevel.READ_COMMITTED) != client.list_offsets(
        tps, "latest", IsolationLevel.READ_UNCOMMITTED
    ):
        assert time.monotonic() < deadline, "the failed attempt's transaction stayed open"
        time.sleep(0.02)
    assert visible(cluster, topic) == [] and visible(cluster, topic, "read_uncommitted") == ["a"]


def test_speculative_twin_fences_the_first_attempt(cluster: LocalCluster, topic: Topic) -> None:
    """Attempt A produced; twin B inits (fencing A), writes and commits; A's commit then fails
    (design/spark-connector.md §3.4)."""
    options = sink_options(cluster, topic)
    encoder = RowEncoder(KV, topic.name)
    outcome: dict[str, Any] = {}

    class TwinCommitsFirst(Producer):
        def commit_transaction(self, timeout: float | None = None) -> None:
            self.flush()
            outcome["twin"] = TaskWriter(options, encoder).write(rows("a", "b"), task(0, attempt=1))
            super().commit_transaction(timeout)

    with pytest.raises(ProducerFencedError):
        TaskWriter(options, encoder, producer_factory=TwinCommitsFirst).write(rows("a", "b"), task(0))
    assert not outcome["twin"].skipped
    assert visible(cluster, topic) == ["a", "b"]
    late = TaskWriter(options, encoder).write(rows("a", "b"), task(0, attempt=2))
    assert late.skipped, "a third attempt finds the batch committed"


def test_crash_after_commit_replays_as_skip(cluster: LocalCluster, topic: Topic) -> None:
    """The task committed but died before reporting; Spark replays the batch after the restart."""
    options = sink_options(cluster, topic)
    encoder = RowEncoder(KV, topic.name)

    class CrashAfterCommit(Producer):
        def commit_transaction(self, timeout: float | None = None) -> None:
            super().commit_transaction(timeout)
            raise SimulatedCrash

    with pytest.raises(SimulatedCrash):
        TaskWriter(options, encoder, producer_factory=CrashAfterCommit).write(rows("a"), task(7))
    assert TaskWriter(options, encoder).write(rows("a"), task(7)).skipped
    assert visible(cluster, topic) == ["a"]


def test_tasks_of_one_batch_use_their_own_transactional_ids(cluster: LocalCluster, topic3: Topic) -> None:
    writer = task_writer(cluster, topic3)
    first = writer.write(rows("p0-a", "p0-b"), task(0, partition=0))
    second = writer.write(rows("p1-a"), task(0, partition=1))
    assert {first.transactional_id, second.transactional_id} == {f"p-{topic3.name}-q1-0", f"p-{topic3.name}-q1-1"}
    assert writer.write(rows("p1-a"), task(0, partition=1)).skipped
    assert not writer.write(rows("p0-a"), task(0, partition=0, query="q2")).skipped, "another query, other ids"
    assert visible(cluster, topic3) == ["p0-a", "p0-a", "p0-b", "p1-a"]


def test_task_without_rows_opens_no_transaction(cluster: LocalCluster, topic: Topic) -> None:
    writer = task_writer(cluster, topic)
    message = writer.write(iter(()), task(3))
    assert (message.rows, message.skipped) == (0, False)
    assert marker(cluster, writer, task(3))[0] == -1


def test_topic_partition_and_header_columns(cluster: LocalCluster, topic3: Topic) -> None:
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("headers", MapType(StringType(), BinaryType())),
        ]
    )
    options = parse_sink_options(
        {"bootstrap": cluster.bootstrap, "markerTopic": topic3.name, "transactionalIdPrefix": f"p-{topic3.name}"}
    )
    writer = TaskWriter(options, RowEncoder(schema, None))
    writer.write([(topic3.name, 2, b"k", b"v", {"h": b"1"})], task(0))
    reader = OncelogDataSource({"bootstrap": cluster.bootstrap, "topic": topic3.name, "includeHeaders": "true"}).reader(
        None
    )
    [found] = [r for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert (found["partition"], found["key"], found["value"], found["headers"]) == (
        2,
        b"k",
        b"v",
        [{"key": "h", "value": b"1"}],
    )


# ------------------------------------------------------------------------------------------ rows and digest


def test_value_of_the_wrong_type_is_named() -> None:
    schema = StructType([StructField("value", LongType())])
    with pytest.raises(SinkSchemaError, match="value: column of type bigint; cast it to binary or string"):
        RowEncoder(schema, "out")


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ([StructField("key", StringType())], "value: the DataFrame has no value column"),
        ([StructField("value", StringType()), StructField("amount", LongType())], "amount: not a column"),
        ([StructField("value", StringType()), StructField("headers", MapType(StringType(), LongType()))], "headers:"),
        ([StructField("value", StringType()), StructField("partition", StringType())], "partition: column of type"),
    ],
)
def test_bad_columns_are_named(fields: list[StructField], fragment: str) -> None:
    with pytest.raises(SinkSchemaError, match=fragment):
        RowEncoder(StructType(fields), "out")


def test_topic_needs_an_option_or_a_column() -> None:
    with pytest.raises(SinkSchemaError, match="topic: set the topic option"):
        RowEncoder(StructType([StructField("value", StringType())]), None)


def test_kafka_style_header_array_is_accepted() -> None:
    element = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType([StructField("value", StringType()), StructField("headers", ArrayType(element))])
    record = RowEncoder(schema, "out").encode(("v", [("a", b"1"), ("a", b"2")]))
    assert record.headers == (("a", b"1"), ("a", b"2"))


def _digest(records: list[OutputRecord]) -> str:
    digest = BatchDigest()
    for record in records:
        digest.add(record)
    return digest.hexdigest


def test_digest_ignores_order_but_not_duplicates_or_changes() -> None:
    a, b = OutputRecord("t", None, b"k", b"a", ()), OutputRecord("t", None, b"k", b"b", ())
    assert _digest([a, b]) == _digest([b, a])
    assert _digest([a, b]) != _digest([a, b, b])
    assert _digest([a]) != _digest([OutputRecord("t", 0, b"k", b"a", ())]), "the partition counts"
    assert _digest([OutputRecord("t", None, None, b"ab", ())]) != _digest([OutputRecord("t", None, b"a", b"b", ())])
    assert _digest([OutputRecord("t", None, None, b"", ())]) != _digest([OutputRecord("t", None, None, None, ())])


def test_digest_ignores_header_order_but_not_header_content() -> None:
    """A map column's entries may come in another order when a replay rebuilds the map."""
    both = (("a", b"1"), ("b", b"2"))
    record = OutputRecord("t", None, b"k", b"v", both)
    assert _digest([record]) == _digest([OutputRecord("t", None, b"k", b"v", both[::-1])])
    assert _digest([record]) != _digest([OutputRecord("t", None, b"k", b"v", (("a", b"1"), ("b", b"3")))])
    assert _digest([record]) != _digest([OutputRecord("t", None, b"k", b"v", (("a", b"1"),))])
    assert _digest([OutputRecord("t", None, b"k", b"v", (("a", None),))]) != _digest(
        [OutputRecord("t", None, b"k", b"v", (("a", b""),))]
    )


def test_arrow_batches_become_records_in_column_order() -> None:
    """Spark hands the sink Arrow batches (DataSourceStreamArrowWriter); headers come as Kafka's array form."""
    import pyarrow as pa

    from oncelog.spark.writer import arrow_rows

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["v1", "v2"]), pa.array([[{"key": "h", "value": b"1"}], []], type=pa.list_(header))],
        names=["value", "headers"],
    )
    element = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    encoder = RowEncoder(
        StructType([StructField("value", StringType()), StructField("headers", ArrayType(element))]), "out"
    )
    records = [encoder.encode(row) for row in arrow_rows(iter([batch, batch]))]
    assert [(r.value, r.headers) for r in records] == [(b"v1", (("h", b"1"),)), (b"v2", ())] * 2


# ------------------------------------------------------------------------------------------ bulk sends


def test_refused_batch_fails_the_task_and_commits_nothing(cluster: LocalCluster) -> None:
    """A batch the partition refuses (larger than the topic's max_message_bytes) must fail the task, not commit.

    ``send_batch`` returns before the batch is written; the refusal arrives later, and the task must wait for
    it and raise before EndTxn. The open transaction is aborted, the marker stays where it was, and the retry
    of a fixed pipeline writes its rows once.
    """
    small = Topic(cluster, configs={"max_message_bytes": "1024"})
    writer = task_writer(cluster, small)
    with pytest.raises(OncelogError, match=r"max_message_bytes|too large"):
        writer.write([*rows("a", "b"), ("kbig", "x" * 4096)], task(0))
    assert marker(cluster, writer, task(0))[0] == -1, "no marker: the batch is not committed"
    assert visible(cluster, small) == []
    retry = writer.write(rows("a", "b"), task(0, attempt=1))
    assert (retry.rows, retry.skipped) == (2, False)
    assert visible(cluster, small) == ["a", "b"]


def test_task_of_many_chunks_writes_each_row_once_in_order(cluster: LocalCluster, topic: Topic) -> None:
    """Rows beyond one send_batch chunk: all committed once, in the task's order, with one marker for all."""
    values = [f"v{i:05d}" for i in range(2 * SEND_CHUNK_ROWS + 321)]
    writer = TaskWriter(
        sink_options(cluster, topic), RowEncoder(StructType([StructField("value", StringType())]), topic.name)
    )
    message = writer.write([(v,) for v in values], task(0))
    assert message.rows == len(values)
    reader = OncelogDataSource({"bootstrap": cluster.bootstrap, "topic": topic.name}).reader(None)
    read = [r["value"].decode() for p in reader.partitions() for b in reader.read(p) for r in b.to_pylist()]
    assert read == values, "one partition: the order of the task's rows"
    offset, meta = marker(cluster, writer, task(0))
    assert (offset, meta["rows"], meta["digest"]) == (0, len(values), message.digest)


def test_fencing_and_marker_read_run_while_the_rows_are_computed(cluster: LocalCluster, topic: Topic) -> None:
    """The first row arrives only after InitProducerId and the marker read: they overlap with the upstream."""
    registered = threading.Event()

    class Observed(Producer):
        def init_transactions(self, timeout: float | None = None) -> None:
            super().init_transactions(timeout)
            registered.set()

    def upstream() -> Iterator[tuple[str, str]]:
        assert registered.wait(20), "the task waited for its rows before registering its transactional id"
        yield from rows("a", "b")

    options = sink_options(cluster, topic)
    message = TaskWriter(options, RowEncoder(KV, topic.name), producer_factory=Observed).write(upstream(), task(0))
    assert (message.rows, message.skipped) == (2, False)
    assert visible(cluster, topic) == ["a", "b"]


def test_upstream_failure_fails_the_task_and_writes_nothing(cluster: LocalCluster, topic: Topic) -> None:
    def upstream() -> Iterator[tuple[str, str]]:
        raise SimulatedCrash
        yield  # a generator that fails on the first row, as a failing Spark stage does

    with pytest.raises(SimulatedCrash):
        task_writer(cluster, topic).write(upstream(), task(0))
    assert visible(cluster, topic, "read_uncommitted") == []
    assert marker(cluster, task_writer(cluster, topic), task(0))[0] == -1


# ---------------------------------------------------------------------------------------- query start checks


def test_missing_sink_topics_are_named_when_the_writer_is_built(cluster: LocalCluster, topic: Topic) -> None:
    with pytest.raises(OptionError, match=r"topic: .*no-such-out"):
        OncelogDataSource({"bootstrap": cluster.bootstrap, "topic": "no-such-out"}).streamWriter(KV, False)
    with pytest.raises(OptionError, match=r"markerTopic: .*no-such-markers"):
        OncelogDataSource(
            {"bootstrap": cluster.bootstrap, "topic": topic.name, "markerTopic": "no-such-markers"}
        ).writer(KV, False)


def test_writers_of_later_micro_batches_do_not_ask_the_cluster_again(tmp_path: Path) -> None:
    """Spark builds a writer per micro-batch and per commit; a topic found once needs no round trip again."""
    with LocalCluster(tmp_path / "own", storage_nodes=1) as own:
        with AdminClient(own.bootstrap) as admin:
            admin.create_topics([NewTopic("found", num_partitions=1), NewTopic("never-asked", num_partitions=1)])
        options = {"bootstrap": own.bootstrap, "topic": "found", "requestTimeoutMs": "1000"}
        assert isinstance(OncelogDataSource(options).streamWriter(KV, False), OncelogStreamWriter)
    # the cluster is gone: the topic found before is not asked for again, one never asked for is
    assert isinstance(OncelogDataSource(options).streamWriter(KV, False), OncelogStreamWriter)
    with pytest.raises(OptionError, match=r"bootstrap: the cluster at .* did not answer"):
        OncelogDataSource({**options, "topic": "never-asked"}).streamWriter(KV, False)
