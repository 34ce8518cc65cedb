"""Sink mode ``atomicity=batch``: one transaction per micro-batch, committed by the driver (design (c1)).

Under the default ``atomicity=task`` (:mod:`oncelog.spark.writer`) every Spark task commits its own part of a
micro-batch, so a read_committed consumer can see task 0's rows of batch N before task 1's, and a query
that dies mid-batch leaves the batch half visible until its restart completes it. ``atomicity=batch``
makes the whole micro-batch appear at once (design/spark-connector.md §4 (c1)):

1. **Tasks stage, they do not write.** ``write()`` encodes the task's rows and returns them, with their
   count and :class:`~oncelog.spark.writer.BatchDigest`, inside its commit message (:class:`StagedOutput`).
   A task has no side effect on the cluster, so retries, speculative twins and attempts of an aborted batch
   are harmless: Spark hands the driver exactly one message per Spark partition.
2. **The driver commits.** Spark calls ``commit(messages, batchId)`` on the driver once every task
   succeeded. :class:`DriverCommitter` runs ``InitProducerId`` for the query's driver id
   ``<prefix>-<query id>-batch``, which fences a driver of an earlier run and aborts (or completes) its
   open transaction, and for every Spark partition's task id, which does the same to a straggling task of an
   earlier ``atomicity=task`` run; it then reads the **batch marker of every Spark partition** — the same markers
   design (a) keeps, in groups ``<prefix>-<query id>-<partition id>``, read with ``require_stable``.
3. A partition whose marker is at this batch is already committed, by an earlier run of this
   driver or by tasks under ``atomicity=task``: its rows are skipped, after the digest check that fails
   loudly when the replay differs (:class:`~oncelog.spark.writer.NonDeterministicBatchError`). Every other
   partition's rows are produced in **one transaction**, together with the new markers of those
   partitions as transactional offset commits, and the transaction is committed: the batch's output and
   its markers become visible together or not at all.

Replays after a driver crash before the commit write the batch; after the commit they find every marker
at the batch and skip (a partition that now has no row must have had none). A marker at a later batch means a
rewound checkpoint and raises :class:`~oncelog.spark.writer.RewoundCheckpointError`. Because both modes share
the per-partition markers, a query may switch between ``atomicity=task`` and ``atomicity=batch`` across
restarts without duplicating a replayed batch. The markers are per Spark partition here too, so streaming
tasks refuse adaptive query execution (:func:`~oncelog.spark.writer.check_stable_partitioning`).

Trade-off against ``atomicity=task``, and when to use it:

* **Throughput.** All of a batch's output flows through one driver process: tasks pickle it into their
  commit messages, Spark ships them to the driver (bounded by ``spark.driver.maxResultSize``, 1 GiB by
  default), and one producer sends it. Nothing is produced in parallel and nothing is written before every
  task has finished, so a batch takes longer than under ``atomicity=task``; the sink suits low-volume
  outputs whose consumers need whole batches.
* **Transaction size and timeout.** The driver's transaction is open only while it produces, but it holds
  back the last stable offset of every output partition for that time; a batch must be produced within
  ``transactionTimeoutMs`` or the coordinator aborts it (the replay then writes it again). The option
  ``maxBatchBytes`` (64 MiB by default) bounds the keys, values and headers one micro-batch may stage, and
  a larger batch fails with an error naming it instead of exhausting the driver's memory.
* **Batch writes** (``df.write``) become all-or-nothing: the job's output is committed by the driver after
  every task succeeded, or not at all.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from oncelog.client.producer import Producer
from oncelog.client.records import OffsetAndMetadata
from oncelog.spark.checkpoint import record_sink_names
from oncelog.spark.metrics import SinkBatchMetrics, record_sink_batch
from oncelog.spark.options import OptionError, SinkOptions
from oncelog.spark.output import BatchedSender, RecordColumns
from oncelog.spark.writer import (
    BatchDigest,
    JobSinkWriter,
    Marker,
    NonDeterministicBatchError,
    ProducerFactory,
    RowEncoder,
    SinkWriter,
    TaskIdentity,
    batch_transactional_id,
    check_not_rewound,
    closing,
    commit_until_known,
    in_background,
    marker_metadata,
    marker_partition,
    open_producer,
    read_marker,
    task_transactional_id,
    waited_for_on_error,
)

__all__ = [
    "BatchCommitOutcome",
    "BatchTooLargeError",
    "DriverCommitter",
    "OncelogAtomicBatchWriter",
    "OncelogAtomicStreamWriter",
    "OutputStager",
    "StagedOutput",
]

log = logging.getLogger(__name__)

# per record, what pickling it costs beyond the payload bytes counted
_RECORD_OVERHEAD = 24
_PARALLEL_MARKER_READS = 8


class BatchTooLargeError(OptionError):
    """A micro-batch stages more bytes than ``maxBatchBytes`` allows under ``atomicity=batch``."""

    header = "a micro-batch is too large for atomicity=batch"


@dataclass
class StagedOutput(WriterCommitMessage):
    """One task's output under ``atomicity=batch``: its records, returned to the driver in the commit message.

    Attributes:
        query_id: the streaming query's id (or the batch write's job id); the driver's transactional id
            derives from it.
        batch_id: the micro-batch.
        partition_id: the Spark partition.
        attempt: the task attempt whose message Spark kept.
        rows: number of records.
        digest: :class:`~oncelog.spark.writer.BatchDigest` of the records, for the replay check.
        size: payload bytes of the records (keys, values, headers), counted against ``maxBatchBytes``.
        chunks: the records, in the task's order, column by column (lists of bytes pickle compactly, and the
            driver hands them to ``send_batch`` as they are).
    """

    query_id: str
    batch_id: int
    partition_id: int
    attempt: int
    rows: int
    digest: str
    size: int
    chunks: list[RecordColumns]


@dataclass(frozen=True, slots=True)
class BatchCommitOutcome:
    """What the driver did with a micro-batch.

    Attributes:
        batch_id: the micro-batch.
        transactional_id: the driver's transactional id, or None when the batch had no rows (no transaction).
        rows: rows produced by this commit.
        written: Spark partitions whose rows this commit produced.
        skipped: Spark partitions whose rows an earlier run had already committed.
        size_bytes: bytes of the keys, values and headers this commit produced.
    """

    batch_id: int
    transactional_id: str | None
    rows: int
    written: tuple[int, ...]
    skipped: tuple[int, ...]
    size_bytes: int = 0

    @property
    def metrics(self) -> SinkBatchMetrics:
        """The batch's metrics: one transaction when this commit wrote rows."""
        return SinkBatchMetrics(self.rows, self.size_bytes, 1 if self.written else 0, len(self.skipped))


class OutputStager:
    """The task side of ``atomicity=batch``: encode a task's rows for the driver, without touching the cluster.

    Args:
        options: the sink options.
        encoder: the checked columns of the DataFrame.
    """

    def __init__(self, options: SinkOptions, encoder: RowEncoder) -> None:
        self.options = options
        self.encoder = encoder

    def stage(self, rows: Iterable[Sequence[Any]], task: TaskIdentity) -> StagedOutput:
        """Encode ``rows`` (``Row`` objects or tuples) of ``task``; see :meth:`stage_columns`."""
        return self.stage_columns(self.encoder.encode_rows(rows), task)

    def stage_columns(self, chunks: Iterable[RecordColumns], task: TaskIdentity) -> StagedOutput:
        """Collect the records of ``chunks`` of ``task`` into a commit message.

        Raises:
            BatchTooLargeError: the task alone stages more than ``maxBatchBytes``.
        """
        digest = BatchDigest()
        staged: list[RecordColumns] = []
        size = 0
        limit = self.options.max_batch_bytes
        for chunk in chunks:
            if not len(chunk):
                continue
            size += chunk.payload_size() + _RECORD_OVERHEAD * len(chunk)
            if size > limit:
                raise _too_large(
                    f"Spark partition {task.partition_id} of batch {task.batch_id} alone stages more than {limit} "
                    "bytes",
                    task.batch_id,
                )
            digest.add_columns(chunk)
            staged.append(chunk)
        return StagedOutput(
            query_id=task.query_id,
            batch_id=task.batch_id,
            partition_id=task.partition_id,
            attempt=task.attempt,
            rows=digest.rows,
            digest=digest.hexdigest,
            size=size,
            chunks=staged,
        )


class DriverCommitter:
    """The driver side of ``atomicity=batch``: commit a micro-batch's staged output in one transaction.

    A fresh instance per ``commit`` call is fine: every decision is taken from the markers in the cluster,
    never from driver memory (Spark builds a new writer for each call, design/spark-connector.md §3.1).

    Args:
        options: the sink options.
        producer_factory: builds the transactional producer (``Producer`` by default; tests wrap it).
    """

    def __init__(self, options: SinkOptions, producer_factory: ProducerFactory = Producer) -> None:
        self.options = options
        self.producer_factory = producer_factory

    def transactional_id(self, query_id: str) -> str:
        """``<prefix>-<query id>-batch``: one per query, reused by every micro-batch and every restart."""
        return batch_transactional_id(self.options, query_id)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> BatchCommitOutcome:
        """Produce the staged rows of ``batch_id`` that no earlier run committed, with their markers, atomically.

        Raises:
            RuntimeError: a message is missing, of another batch or query, or two share a Spark partition.
            BatchTooLargeError: the batch stages more than ``maxBatchBytes``.
            NonDeterministicBatchError: a partition of this batch was committed with other rows.
            ProducerFencedError: a newer driver of the same query took over.
            OncelogError: the cluster failed the transaction; Spark fails the batch and the replay settles it.
        """
        staged = _check_staged(messages, batch_id)
        if not any(m.rows for m in staged):
            # nothing to write, so no transaction; a replay must still have no row where one was committed
            _, skipped = self._unwritten(staged, batch_id)
            return BatchCommitOutcome(batch_id, None, 0, (), skipped)
        size = sum(m.size for m in staged)
        if size > self.options.max_batch_bytes:
            raise _too_large(
                f"batch {batch_id} stages {size} bytes in {len(staged)} Spark partitions, more than "
                f"{self.options.max_batch_bytes}",
                batch_id,
            )
        query_id = staged[0].query_id
        tid = self.transactional_id(query_id)
        with closing(open_producer(self.options, tid, f"{tid}-b{batch_id}", self.producer_factory)) as producer:
            # fence first: a previous driver's open transaction may hold marker commits still pending, and so
            # may a straggling task of a previous run under atomicity=task, which holds its partition's own id
            producer.init_transactions()
            self._fence_tasks(staged)
            to_write, skipped = self._unwritten(staged, batch_id)
            if not to_write:
                log.info("%s: batch %d already committed; skipped", tid, batch_id)
                return BatchCommitOutcome(batch_id, tid, 0, (), skipped)
            producer.begin_transaction()
            # every marker is known already (the tasks hashed their rows): their coordinator calls run on a
            # helper thread while this one hands the rows over
            markers_sent = in_background(lambda: self._send_markers(producer, query_id, batch_id, to_write))
            sender = BatchedSender(producer)
            with waited_for_on_error(markers_sent):
                for message in to_write:
                    for chunk in message.chunks:
                        sender.add(chunk)
                sender.flush_buffers()
            markers_sent.result()
            sender.finish()
            commit_until_known(producer, self.options)
        rows = sum(m.rows for m in to_write)
        written = tuple(m.partition_id for m in to_write)
        log.info("%s: batch %d committed, %d rows of %d Spark partitions", tid, batch_id, rows, len(written))
        payload = sum(chunk.payload_size() for m in to_write for chunk in m.chunks)
        return BatchCommitOutcome(batch_id, tid, rows, written, skipped, payload)

    def _send_markers(self, producer: Any, query_id: str, batch_id: int, to_write: list[StagedOutput]) -> None:
        """Commit each written partition's marker (batch, rows, digest) in its group, inside the transaction."""
        marker = marker_partition(self.options)
        for message in to_write:
            group = task_transactional_id(self.options, query_id, message.partition_id)
            metadata = marker_metadata(batch_id, message.rows, message.digest)
            producer.send_offsets_to_transaction({marker: OffsetAndMetadata(batch_id, metadata=metadata)}, group)

    def _fence_tasks(self, staged: list[StagedOutput]) -> None:
        """InitProducerId of every Spark partition's task id ``<prefix>-<query id>-<partition id>``.

        Under ``atomicity=task`` these ids write the batch and its marker; after a switch to ``atomicity=batch``
        a task of the old run may still be about to commit the same batch. Bumping the epoch of its id aborts
        its open transaction, or completes one it was already committing, before the markers are read.
        """

        def fence(message: StagedOutput) -> None:
            tid = task_transactional_id(self.options, message.query_id, message.partition_id)
            task = open_producer(self.options, tid, f"{tid}-fence", self.producer_factory)
            try:
                task.init_transactions()
            finally:
                task.close()

        with ThreadPoolExecutor(min(len(staged), _PARALLEL_MARKER_READS), "oncelog-task-fence") as pool:
            list(pool.map(fence, staged))

    def _unwritten(self, staged: list[StagedOutput], batch_id: int) -> tuple[list[StagedOutput], tuple[int, ...]]:
        """Split the messages into partitions still to write and partitions an earlier run committed."""
        if not staged:
            return [], ()
        groups = [task_transactional_id(self.options, m.query_id, m.partition_id) for m in staged]
        # independent reads, each a round trip to its group's coordinator: in parallel, not one after another
        with ThreadPoolExecutor(min(len(groups), _PARALLEL_MARKER_READS), "oncelog-marker-read") as pool:
            markers = list(pool.map(lambda group: read_marker(self.options, group), groups))
        to_write: list[StagedOutput] = []
        skipped: list[int] = []
        for message, group, marker in zip(staged, groups, markers, strict=True):
            check_not_rewound(marker, batch_id, f"{group} (Spark partition {message.partition_id})")
            if marker.batch_id == batch_id:
                _check_replay(group, marker, message)  # also when the replay gives the partition no row
                skipped.append(message.partition_id)
            elif message.rows:
                to_write.append(message)
        return to_write, tuple(skipped)


def _too_large(what: str, batch_id: int) -> BatchTooLargeError:
    return BatchTooLargeError(
        [
            f"maxBatchBytes: {what}. Nothing was written. Batch {batch_id}'s offsets are in the checkpoint already, "
            "so its replay reads the same rows and a lower maxRecordsPerTrigger only bounds later batches. To get "
            "past it, raise maxBatchBytes (and spark.driver.maxResultSize if needed), or restart with atomicity=task, "
            "which writes the batch from the tasks (both modes keep the same markers, so it is written once)"
        ]
    )


def _check_replay(group: str, marker: Marker, message: StagedOutput) -> None:
    if not marker.matches(message.rows, message.digest):
        raise NonDeterministicBatchError(
            f"{group}: batch {message.batch_id} was committed for Spark partition {message.partition_id} with "
            f"{marker.rows} rows (digest {marker.digest}), but its replay gives {message.rows} rows (digest "
            f"{message.digest}). The pipeline is not deterministic per Spark partition (rand(), "
            "current_timestamp(), changed partitioning or input) or its code changed between the crash and the "
            "restart. The committed output is kept; fix the pipeline, or restart with a new checkpoint and "
            "output topic."
        )


def _check_staged(messages: Sequence[WriterCommitMessage | None], batch_id: int) -> list[StagedOutput]:
    found: list[StagedOutput] = []
    for message in messages:
        if not isinstance(message, StagedOutput) or message.batch_id != batch_id:
            raise RuntimeError(f"batch {batch_id}: a task reported {type(message).__name__}; expected StagedOutput")
        found.append(message)
    if len({m.query_id for m in found}) > 1:
        raise RuntimeError(f"batch {batch_id}: tasks of several queries reported {sorted({m.query_id for m in found})}")
    partitions = [m.partition_id for m in found]
    if len(set(partitions)) != len(partitions):
        # Spark's output commit coordinator keeps one attempt per partition; two would be written twice
        raise RuntimeError(f"batch {batch_id}: several messages for one Spark partition ({sorted(partitions)})")
    return sorted(found, key=lambda m: m.partition_id)


# -------------------------------------------------------------------------------------- Spark writers


class OncelogAtomicStreamWriter(SinkWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("oncelog").option("atomicity", "batch")``: one transaction per micro-batch."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedOutput:
        """One task: stage its rows for the driver (:meth:`OutputStager.stage`)."""
        return OutputStager(self.options, self.encoder).stage_columns(
            self.encoder.encode_arrow(iterator), self.current_task()
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Every task staged its rows: commit the micro-batch (:meth:`DriverCommitter.commit`)."""
        outcome = DriverCommitter(self.options).commit(messages, batchId)
        record_sink_names(self.options)
        record_sink_batch(self.options.atomicity, outcome.metrics)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """The batch failed; nothing to undo.

        Tasks wrote nothing. If :meth:`commit` raised, its transaction either committed (the replay then
        skips the batch) or was aborted when its producer closed, or is aborted by the next driver's
        InitProducerId or the transaction timeout. Spark may call this after :meth:`commit` raised, so it
        never touches the cluster (design/spark-connector.md §3.5).
        """
        staged = sum(1 for m in messages if isinstance(m, StagedOutput))
        log.warning("batch %d aborted with %d of %d tasks staged; the replay writes it", batchId, staged, len(messages))


class OncelogAtomicBatchWriter(JobSinkWriter, DataSourceArrowWriter):
    """``df.write.format("oncelog").option("atomicity", "batch")``: the whole job in one transaction, or nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> StagedOutput:
        """One task: stage its rows for the driver."""
        return OutputStager(self.options, self.encoder).stage_columns(
            self.encoder.encode_arrow(iterator), self.current_task()
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Every task staged its rows: commit them all in one transaction."""
        outcome = DriverCommitter(self.options).commit(messages, 0)
        record_sink_batch(self.options.atomicity, outcome.metrics)
        log.info("%s: %d rows committed in one transaction", self.job_id, outcome.rows)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """The job failed; tasks wrote nothing, and a commit that raised either committed or left nothing."""
        log.warning("%s aborted; its rows were committed only if the commit's outcome was unknown", self.job_id)
