"""Exactly-once sink of the ``oncelog`` format: one transaction per Spark task, replay-safe (design (a)).

What Spark guarantees a sink (design/spark-connector.md §3): every micro-batch runs at least once; a
replayed batch keeps its batch id, offsets, content per Spark partition and partition ids; a task attempt
may have its side effects and then be discarded (retry, speculation loser, aborted batch), with no
cleanup hook. The sink turns that into exactly-once output with the platform's transactions
(design/spark-connector.md §4 (a)):

1. **Identify.** ``tid = <prefix>-<query id>-<partition id>``. The query id comes from the checkpoint,
   so a restarted query reuses its ids and fences the previous run's executors.
2. **InitProducerId(tid)** (``init_transactions``) bumps the epoch: every earlier holder of the id — a
   failed attempt, a speculative twin, an executor of a crashed run — is fenced, and its open
   transaction aborted (or, if it was already committing, completed). This comes *before* reading the
   marker, so the marker read cannot race a zombie's pending commit. Neither step needs the task's rows,
   so both run on a helper thread while Spark still computes them (the first Arrow batch reaches the sink
   only once the upstream stages have finished the partition).
3. **Read the batch marker**: the offset committed for ``(marker topic, 0)`` in group ``tid``, read with
   ``require_stable``. Its offset is the last batch this task committed; its metadata holds that batch's
   row count and digest. If the marker is at this batch, the task's output is already committed: the
   rows of this attempt are hashed and compared, a mismatch raises :class:`NonDeterministicBatchError`
   rather than silently losing or duplicating output, and a match skips. A marker at a later batch
   raises :class:`RewoundCheckpointError`.
4. Otherwise **produce** every row in one transaction, **commit the marker** (batch id, rows, digest)
   as transactional offset metadata in the same transaction, and **commit**: data and marker become
   visible together or not at all. Rows are encoded column by column from Spark's Arrow batches and sent
   in bulk (:mod:`oncelog.spark.output`). The marker's group joins the transaction while they are sent
   (``add_offsets_to_transaction``); only the marker's offset commit waits for the last row's digest.
   The commit waits for every record's acknowledgement and is not attempted when one failed.

Atomicity is per task, not per micro-batch, as in Kafka Streams: a read_committed consumer may see task
0's part of a batch before task 1's. The markers are keyed by Spark partition id, so a replay must give every
row to the same Spark partition as the run that crashed. Spark keeps the partitioning of a replayed batch
only without adaptive query execution, which Spark 4.3 applies to stateless streaming queries by default and
which merges shuffle partitions by core count (not recorded in the checkpoint): a streaming task therefore
refuses to write unless it is turned off (:func:`check_stable_partitioning`). The pipeline must also be
deterministic per Spark partition (no ``rand()``, ``current_timestamp()``, or changed partitioning between a
crash and its restart); the digest check turns a violation into an error, also for a replayed task that has
no rows. A marker at a later batch than the one being written means a rewound checkpoint:
:class:`RewoundCheckpointError`, nothing written. A task with no rows opens no transaction and commits no
marker (having registered its id in step 2 before it knew).

Batch writes (``df.write``) use the same protocol with a job id drawn on the driver and batch 0: task
retries are fenced and never duplicate, but a failed job keeps the output of the tasks that committed.

``atomicity=batch`` (:mod:`oncelog.spark.atomic`, design (c1)) commits a whole micro-batch in one driver
transaction instead, and advances the same per-partition markers (groups ``<prefix>-<query id>-<partition
id>``), so either mode finds what the other committed and a query may change mode between restarts (the
batch driver fences the task ids first).

``foreachBatch`` with ``df.write.format("oncelog")`` is a batch write with a new job id per call, so a
replayed micro-batch is written again: only ``writeStream.format("oncelog")`` is exactly-once.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from oncelog.client.errors import RetriableError
from oncelog.client.producer import Producer
from oncelog.client.records import OffsetAndMetadata
from oncelog.spark.checkpoint import record_sink_names
from oncelog.spark.digest import BatchDigest
from oncelog.spark.encoder import OutputRecord, RowEncoder, SinkSchemaError
from oncelog.spark.markers import (
    Marker,
    NonDeterministicBatchError,
    RewoundCheckpointError,
    batch_transactional_id,
    check_not_rewound,
    marker_metadata,
    marker_partition,
    read_marker,
    task_transactional_id,
)
from oncelog.spark.metrics import SinkBatchMetrics, record_sink_batch
from oncelog.spark.options import OptionError, SinkOptions
from oncelog.spark.output import BatchedSender, RecordColumns

# the encoder's, digest's and markers' names are re-exported: the connector's callers import them from here
__all__ = [
    "BatchDigest",
    "Marker",
    "NonDeterministicBatchError",
    "OncelogBatchWriter",
    "OncelogStreamWriter",
    "OutputRecord",
    "RewoundCheckpointError",
    "RowEncoder",
    "check_not_rewound",
    "SinkCommitMessage",
    "SinkSchemaError",
    "TaskIdentity",
    "TaskWriter",
    "UnstablePartitioningError",
    "STATELESS_AQE",
    "check_stable_partitioning",
    "JobSinkWriter",
    "SinkWriter",
    "arrow_rows",
    "batch_transactional_id",
    "commit_until_known",
    "in_background",
    "waited_for_on_error",
    "open_producer",
    "marker_metadata",
    "marker_partition",
    "read_marker",
    "task_batch_metrics",
    "task_identity",
    "task_transactional_id",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

_BATCH_ID = "streaming.sql.batchId"
_QUERY_ID = "sql.streaming.queryId"


class UnstablePartitioningError(OptionError):
    """Spark may number a streaming query's output partitions differently on its next run (adaptive execution)."""

    header = "the oncelog sink needs the same Spark partitions on every run of a micro-batch"


STATELESS_AQE = "spark.sql.adaptive.streaming.stateless.enabled"
"""Spark's switch for adaptive query execution in stateless streaming queries (on by default in Spark 4.3)."""
_AQE = "spark.sql.adaptive.enabled"


def check_stable_partitioning(conf: Callable[[str], str | None]) -> None:
    """Refuse a streaming write whose Spark partitions a restart may number differently.

    With adaptive query execution on, a stateless streaming query merges shuffle partitions by the cores it
    has, which the checkpoint does not record: a batch replayed after a restart on another machine size
    gives its rows to other Spark partitions. The sink keeps its batch markers per Spark partition, so that
    replay would duplicate the rows that moved to a partition without a marker and drop the ones that moved
    to a partition with one. Without adaptive execution the shuffle partitions are
    ``spark.sql.shuffle.partitions`` of the running session, which a restart must keep.

    Args:
        conf: the value of a Spark SQL setting in the running task, None when it was not set (Spark sends
            the settings a session set explicitly to its tasks as local properties).

    Raises:
        UnstablePartitioningError: adaptive execution may apply; the message says how to turn it off.
    """
    if conf(_AQE) == "false" or conf(STATELESS_AQE) == "false":
        return
    raise UnstablePartitioningError(
        [
            f"{STATELESS_AQE}: adaptive query execution is on for stateless streaming queries, so a restart with "
            "another number of cores may give a micro-batch's rows to other Spark partitions than the run that "
            "wrote part of it, and the sink's exactly-once markers are kept per Spark partition. Turn it off "
            f'before starting the query: spark.conf.set("{STATELESS_AQE}", "false") (or --conf '
            f"{STATELESS_AQE}=false); nothing was written"
        ]
    )


# ------------------------------------------------------------------------------------------ task identity


@dataclass(frozen=True, slots=True)
class TaskIdentity:
    """Who is writing: the query, the micro-batch, the Spark partition and the attempt.

    Attributes:
        query_id: the streaming query's id from its checkpoint (stable across restarts), or a job id.
        batch_id: the micro-batch id (0 for a batch write).
        partition_id: the Spark partition, stable for a batch across retries and replays.
        attempt: 0 for the first attempt of the task, then 1, 2, ...
    """

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int


def task_identity(job_id: str | None = None) -> TaskIdentity:
    """The identity of the running Spark task, from its TaskContext (design/spark-connector.md §2).

    Args:
        job_id: the id of a batch write; a streaming query's id and batch id come from the task's local
            properties instead.

    Raises:
        RuntimeError: not inside a Spark task, or a streaming task without the properties Spark 4.x sets.
        UnstablePartitioningError: a streaming task whose query runs with stateless adaptive execution.
    """
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("the oncelog sink writes inside Spark tasks only")
    query_id, batch_id = context.getLocalProperty(_QUERY_ID), context.getLocalProperty(_BATCH_ID)
    if job_id is None and (not query_id or batch_id is None):
        # both keys are Spark internals, verified on 4.3; without them exactly-once cannot be kept
        raise RuntimeError(
            f"Spark did not set the task properties {_QUERY_ID!r} and {_BATCH_ID!r}; this Spark version is not "
            "supported by the oncelog sink"
        )
    if job_id is None:
        check_stable_partitioning(context.getLocalProperty)
    return TaskIdentity(
        query_id=job_id or str(query_id),
        batch_id=0 if job_id else int(str(batch_id)),
        partition_id=context.partitionId(),
        attempt=context.attemptNumber(),
    )


def open_producer(
    options: SinkOptions, transactional_id: str, client_id: str, factory: Callable[..., Any] = Producer
) -> Any:
    """A transactional producer for one task's or one batch's output.

    Batches are as large as a request allows: a task sends thousands of records at once and then commits,
    so fewer, fuller batches mean fewer produce round trips before the commit can complete.

    Its commits wait for completion (docs/design/read-after-commit.md): a task reports success, and the
    driver's batch commit returns, only once every marker is written, so a read_committed read started after
    the job (or the micro-batch) sees every row, in both atomicity modes.
    """
    return factory(
        list(options.bootstrap),
        transactional_id=transactional_id,
        transaction_timeout_ms=options.transaction_timeout_ms,
        request_timeout_ms=int(options.request_timeout_s * 1000),
        batch_size=_PRODUCE_BATCH_BYTES,
        client_id=client_id,
        commit_wait_for_completion=True,
    )


_PRODUCE_BATCH_BYTES = 512 * 1024


@contextmanager
def closing(producer: Any) -> Iterator[Any]:
    """Close ``producer`` when the block ends; after a success, without making the caller wait.

    After a failure the close is synchronous, so that it aborts an open transaction before Spark retries
    the task (otherwise the transaction would hold back the last stable offset until fenced or timed out).
    After a commit or a skip nothing is left to send or abort, and tearing down the producer's I/O
    thread and channels (tens of milliseconds) need not delay the task's result.
    """
    try:
        yield producer
    except BaseException:
        producer.close()
        raise
    threading.Thread(target=producer.close, name="oncelog-sink-close", daemon=True).start()


def commit_until_known(producer: Any, options: SinkOptions) -> None:
    """Commit the producer's transaction; an unanswered commit has an unknown outcome, so ask again.

    Aborting after a timeout could discard a commit the coordinator already decided (design/architecture.md §1.7); the
    retries are bounded by four request timeouts, after which the error reaches Spark and the replay settles
    the batch through its marker.
    """
    deadline = time.monotonic() + options.request_timeout_s * 4
    while True:
        try:
            producer.commit_transaction()
            return
        except RetriableError:
            if time.monotonic() > deadline:
                raise


def in_background(function: Callable[[], T]) -> concurrent.futures.Future[T]:
    """Run ``function`` on a new daemon thread; its result or exception in a future."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(function())
        except BaseException as exc:  # handed to the caller of result()
            future.set_exception(exc)

    threading.Thread(target=run, name="oncelog-sink-helper", daemon=True).start()
    return future


@contextmanager
def waited_for_on_error(helper: concurrent.futures.Future[Any]) -> Iterator[None]:
    """When the block raises, wait for ``helper`` (a call on the producer made by :func:`in_background`)
    before the error propagates: the producer is closed next, and its calls should end first."""
    try:
        yield
    except BaseException:
        concurrent.futures.wait([helper])
        raise


# ------------------------------------------------------------------------------------------ the protocol


@dataclass
class SinkCommitMessage(WriterCommitMessage):
    """What a task reports to the driver (pickled back from the executor).

    Attributes:
        partition_id: the Spark partition.
        attempt: the task attempt that wrote (or skipped).
        batch_id: the micro-batch.
        rows: rows of the task.
        skipped: the output was already committed by an earlier run of this batch.
        digest: :class:`BatchDigest` of the rows.
        transactional_id: the task's transactional id.
        size: bytes of the keys, values and headers this attempt committed (0 when skipped or empty).
    """

    partition_id: int
    attempt: int
    batch_id: int
    rows: int
    skipped: bool
    digest: str
    transactional_id: str
    size: int = 0


ProducerFactory = Callable[..., Any]


class TaskWriter:
    """Runs the exactly-once protocol for one task's rows (design (a), module docstring).

    Args:
        options: the sink options.
        encoder: checked columns of the DataFrame.
        producer_factory: builds the transactional producer (``Producer`` by default; tests wrap it).
    """

    def __init__(self, options: SinkOptions, encoder: RowEncoder, producer_factory: ProducerFactory = Producer) -> None:
        self.options = options
        self.encoder = encoder
        self.producer_factory = producer_factory

    def transactional_id(self, task: TaskIdentity) -> str:
        """``<prefix>-<query id>-<partition id>``: one per query and Spark partition, reused by every batch."""
        return task_transactional_id(self.options, task.query_id, task.partition_id)

    def write(self, rows: Iterable[Sequence[Any]], task: TaskIdentity) -> SinkCommitMessage:
        """Write ``rows`` (``Row`` objects or tuples) for ``task``; see :meth:`write_columns`."""
        return self.write_columns(self.encoder.encode_rows(rows), task)

    def write_columns(self, chunks: Iterable[RecordColumns], task: TaskIdentity) -> SinkCommitMessage:
        """Write the records of ``chunks`` for ``task`` exactly once, or skip them if an earlier run committed.

        Records reach the producer in bulk (:class:`~oncelog.spark.output.BatchedSender`) while later chunks
        are still being encoded and hashed; every acknowledgement is awaited, and a failed one raised, before
        the commit.

        Raises:
            NonDeterministicBatchError: this batch was committed with other rows.
            ProducerFencedError: a newer attempt of this task took over; Spark keeps that attempt's result.
            OncelogError: the cluster failed the transaction; Spark retries the task, which fences this one.
        """
        tid = self.transactional_id(task)
        iterator = (chunk for chunk in chunks if len(chunk))
        client_id = f"{tid}-b{task.batch_id}-a{task.attempt}"
        with closing(open_producer(self.options, tid, client_id, self.producer_factory)) as producer:
            # Fencing and the marker read need no row, so they run while Spark still computes the task's rows
            # (the first Arrow batch arrives only once the upstream stages finished the partition).
            registered = in_background(lambda: self._register(producer, tid, task.batch_id))
            with waited_for_on_error(registered):
                first = next(iterator, None)
            marker = registered.result()
            check_not_rewound(marker, task.batch_id, f"{tid} (Spark partition {task.partition_id})")
            records = itertools.chain([] if first is None else [first], iterator)
            if marker.batch_id == task.batch_id:
                # a replay, also of a task that now has no row: its digest must match what was committed
                return self._skip(records, task, tid, marker)
            if first is None:
                return SinkCommitMessage(
                    task.partition_id, task.attempt, task.batch_id, 0, False, BatchDigest().hexdigest, tid
                )
            producer.begin_transaction()
            # the marker's group joins the transaction (AddOffsetsToTxn) while the rows are encoded and sent;
            # the marker itself (TxnOffsetCommit) needs the digest of every row, so it waits for the last one
            group_added = in_background(lambda: producer.add_offsets_to_transaction(tid))
            digest = BatchDigest()
            sender = BatchedSender(producer)
            size = 0
            with waited_for_on_error(group_added):
                for chunk in records:
                    sender.add(chunk)  # first, so the I/O thread sends while this thread hashes
                    digest.add_columns(chunk)
                    size += chunk.payload_size()
                sender.flush_buffers()
            group_added.result()
            metadata = marker_metadata(task.batch_id, digest.rows, digest.hexdigest)
            # overlaps with the produce requests still in flight
            producer.send_offsets_to_transaction(
                {marker_partition(self.options): OffsetAndMetadata(task.batch_id, metadata=metadata)}, tid
            )
            sender.finish()
            commit_until_known(producer, self.options)
            log.info("%s: batch %d committed, %d rows (attempt %d)", tid, task.batch_id, digest.rows, task.attempt)
            return SinkCommitMessage(
                task.partition_id, task.attempt, task.batch_id, digest.rows, False, digest.hexdigest, tid, size
            )

    def _register(self, producer: Any, tid: str, batch_id: int) -> Marker:
        """InitProducerId, which fences every earlier holder of ``tid``, and only then the marker (steps 2-3).

        When the batch is still to be written and the ``topic`` option names the topic, it also loads the
        topic's metadata into the producer, which the first send would otherwise wait for.
        """
        producer.init_transactions()
        marker = read_marker(self.options, tid)
        if marker.batch_id < batch_id and self.options.topic is not None:
            producer.partitions_for(self.options.topic)
        return marker

    def _skip(self, chunks: Iterable[RecordColumns], task: TaskIdentity, tid: str, marker: Marker) -> SinkCommitMessage:
        digest = BatchDigest()
        for chunk in chunks:
            digest.add_columns(chunk)
        if not marker.matches(digest.rows, digest.hexdigest):
            raise NonDeterministicBatchError(
                f"{tid}: batch {task.batch_id} was committed with {marker.rows} rows (digest "
                f"{marker.digest}), but its replay gives this task {digest.rows} rows (digest "
                f"{digest.hexdigest}). The pipeline is not deterministic per Spark partition (rand(), "
                "current_timestamp(), changed partitioning or input) or its code changed between the crash and "
                "the restart. The committed output is kept; fix the pipeline, or restart with a new checkpoint "
                "and output topic."
            )
        log.info("%s: batch %d already committed; skipped", tid, task.batch_id)
        return SinkCommitMessage(
            task.partition_id, task.attempt, task.batch_id, digest.rows, True, digest.hexdigest, tid
        )


# -------------------------------------------------------------------------------------- Spark writers


def arrow_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[tuple[Any, ...]]:
    """Rows of Arrow batches as tuples in column order, without building a Spark ``Row`` per record."""
    for batch in batches:
        yield from zip(*(column.to_pylist() for column in batch.columns), strict=True)


def task_batch_metrics(found: Sequence[SinkCommitMessage]) -> SinkBatchMetrics:
    """What the tasks of one batch committed and skipped (``atomicity=task``: a transaction per task with rows)."""
    written = [m for m in found if not m.skipped]
    return SinkBatchMetrics(
        rows=sum(m.rows for m in written),
        size_bytes=sum(m.size for m in written),
        transactions=sum(1 for m in written if m.rows),
        replays_skipped=sum(1 for m in found if m.skipped),
    )


def _check_messages(messages: Sequence[WriterCommitMessage | None], batch_id: int) -> list[SinkCommitMessage]:
    found = []
    for message in messages:
        if not isinstance(message, SinkCommitMessage) or message.batch_id != batch_id:
            raise RuntimeError(f"batch {batch_id}: a task reported {message!r}; expected its commit message")
        found.append(message)
    return found


class SinkWriter:
    """What every Spark writer of the sink carries from the driver to its tasks: the options and the columns.

    Spark builds a writer on the driver (once per micro-batch when streaming), pickles it to the tasks
    (``write``), and builds a fresh one for every ``commit``/``abort`` call (design/spark-connector.md §3.1), so all
    state
    lives in the cluster. The four writers — streaming or batch write, ``atomicity`` task or batch — differ
    only in what a task and the driver do.

    Args:
        options: the sink options.
        encoder: the checked columns of the DataFrame.
    """

    def __init__(self, options: SinkOptions, encoder: RowEncoder) -> None:
        self.options = options
        self.encoder = encoder

    def current_task(self) -> TaskIdentity:
        """The running Spark task (call it inside ``write``)."""
        return task_identity()


class JobSinkWriter(SinkWriter):
    """A writer of a batch write (``df.write``): the job has an id of its own instead of a query's.

    The id is drawn once on the driver and pickled to every task, so the retries of a task share its
    transactional id and all tasks name the same job.
    """

    def __init__(self, options: SinkOptions, encoder: RowEncoder) -> None:
        super().__init__(options, encoder)
        self.job_id = f"job-{uuid.uuid4().hex[:16]}"

    def current_task(self) -> TaskIdentity:
        """The running Spark task of this job (batch 0)."""
        return task_identity(self.job_id)


class OncelogStreamWriter(SinkWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("oncelog")``: exactly-once micro-batches, one transaction per task."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """One task: see :meth:`TaskWriter.write`."""
        return TaskWriter(self.options, self.encoder).write_columns(
            self.encoder.encode_arrow(iterator), self.current_task()
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task has committed (or skipped) its part of ``batchId``; check their reports."""
        found = _check_messages(messages, batchId)
        record_sink_names(self.options)
        batch = task_batch_metrics(found)
        record_sink_batch(self.options.atomicity, batch)
        log.info(
            "batch %d: %d rows (%d bytes) committed in %d transactions, %d tasks skipped as already committed",
            batchId,
            batch.rows,
            batch.size_bytes,
            batch.transactions,
            batch.replays_skipped,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The batch failed; nothing to undo.

        Committed tasks stay committed (the replay skips them), open transactions of failed attempts are
        aborted by the next InitProducerId of their id or by the transaction timeout. Spark may call this
        after :meth:`commit` raised, so it must never touch committed output (design/spark-connector.md §3.5).
        """
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.warning(
            "batch %d aborted: %d of %d tasks had committed; the replay skips them", batchId, len(done), len(messages)
        )


class OncelogBatchWriter(JobSinkWriter, DataSourceArrowWriter):
    """``df.write.format("oncelog")``: every task writes its rows in one transaction, retries fenced."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        """One task: see :meth:`TaskWriter.write`."""
        return TaskWriter(self.options, self.encoder).write_columns(
            self.encoder.encode_arrow(iterator), self.current_task()
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task committed; check their reports."""
        found = _check_messages(messages, 0)
        batch = task_batch_metrics(found)
        record_sink_batch(self.options.atomicity, batch)
        log.info(
            "%s: %d rows (%d bytes) committed in %d transactions",
            self.job_id,
            batch.rows,
            batch.size_bytes,
            batch.transactions,
        )

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job failed; tasks that committed keep their output (there is no batch to replay)."""
        done = [m for m in messages if isinstance(m, SinkCommitMessage)]
        log.warning("%s aborted: %d of %d tasks had committed their output", self.job_id, len(done), len(messages))
