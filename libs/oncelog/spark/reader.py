"""Batch and streaming readers of the ``oncelog`` Spark source: offsets bounded by the LSO, read_committed.

Planning runs on the driver, reading on executors (design/spark-connector.md §3.1):

* the driver resolves the partitions of the subscribed topics (ClusterService ``Metadata``) and their
  bounds (``ListOffsets``: LATEST is the last stable offset under read_committed), and cuts the offsets
  to read into :class:`RangePartition` tasks (:func:`~oncelog.spark.offsets.plan_ranges`);
* an executor reads one range ``[start, end)`` with Fetch and Kafka's read_committed filter
  (:class:`~oncelog.client.fetch_filter.CompletedFetch`, design/kafka-semantics.md §4.5): aborted data and control
  markers
  never become rows, so offsets inside a range may yield no row, and a range may start or end on a
  marker's offset. Reading stops at ``end`` whatever the gaps, and rows reach Spark as Arrow record
  batches, one per Fetch, built from the fetched records' columns with no Python per record
  (:func:`read_range_columns`, :func:`columns_to_arrow`).

Because every end offset lies at or below the LSO when it is planned, the records of a range are settled
and a replayed micro-batch reads exactly the same rows (design/spark-connector.md §3.2); that is what the exactly-once
sink relies on.
The stream reader's offsets go into Spark's checkpoint as ``{"topic": {"partition": offset}}``
(:mod:`oncelog.spark.offsets`).
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from oncelog.client.fetch_filter import CompletedFetch
from oncelog.client.records import ConsumerRecord, TopicPartition
from oncelog.errors import CorruptMessage, OffsetOutOfRange, OncelogError, UnknownTopicOrPartition
from oncelog.records import iter_batches
from oncelog.records.columnar import DecodedColumns
from oncelog.spark.channels import LogClient
from oncelog.spark.offsets import (
    EARLIEST,
    LATEST,
    OffsetRange,
    PartitionOffsets,
    limit_by_records,
    offsets_from_json,
    offsets_to_json,
    plan_ranges,
)
from oncelog.spark.options import OffsetsSpec, OptionError, SourceOptions
from oncelog.vocabulary import IsolationLevel

__all__ = [
    "HEADERS_TYPE",
    "SCHEMA",
    "SCHEMA_WITH_HEADERS",
    "schema_of",
    "OncelogBatchReader",
    "OncelogStreamReader",
    "RangePartition",
    "arrow_schema",
    "columns_to_arrow",
    "read_range",
    "read_range_columns",
]

log = logging.getLogger(__name__)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]), True
)
"""Type of the ``headers`` column, as in Spark's Kafka source: ``(key, value)`` pairs in the producer's order."""

SCHEMA = StructType(
    [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
)
"""Rows of the source, as in Spark's Kafka source (``timestampType`` 0 is CreateTime, 1 LogAppendTime)."""

SCHEMA_WITH_HEADERS = StructType([*SCHEMA.fields, StructField("headers", HEADERS_TYPE, True)])
"""Rows with ``includeHeaders=true``: a ``headers`` column after the others, as in Spark's Kafka source."""


def schema_of(options: SourceOptions) -> StructType:
    """The row schema the options ask for: with a ``headers`` column only under ``includeHeaders``."""
    return SCHEMA_WITH_HEADERS if options.include_headers else SCHEMA


@functools.cache
def arrow_schema(include_headers: bool = False) -> pa.Schema:
    """The row schema as the Arrow schema Spark expects batches to carry (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA_WITH_HEADERS if include_headers else SCHEMA, timezone="UTC")


class RangePartition(InputPartition):
    """One Spark task: the offsets ``[start, end)`` of one partition (pickled to the executor).

    Args:
        offset_range: what to read.
    """

    def __init__(self, offset_range: OffsetRange) -> None:
        super().__init__(offset_range)
        self.range = offset_range

    def __repr__(self) -> str:
        r = self.range
        return f"RangePartition({r.topic}-{r.partition} [{r.start}, {r.end}))"


# ------------------------------------------------------------------------------------------------- reading


def read_range(
    client: LogClient,
    offset_range: OffsetRange,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    fetch_max_bytes: int = 4 * 1024 * 1024,
    fail_on_data_loss: bool = True,
) -> Iterator[list[ConsumerRecord]]:
    """Read the user records of ``[start, end)`` of one partition, one list per Fetch.

    Records before ``start`` in the first batch and from ``end`` on in the last are dropped; markers and
    (under read_committed) aborted data are skipped, so a list may be empty while the position moves.

    Raises:
        OffsetOutOfRange: offsets of the range were deleted by retention and ``fail_on_data_loss`` is set,
            or the log no longer reaches ``end`` (truncated or re-created topic).
        OncelogError: the partition stayed unreadable for the client's request timeout.
    """
    return _read_range(client, offset_range, isolation, fetch_max_bytes, fail_on_data_loss, columns=False)


def read_range_columns(
    client: LogClient,
    offset_range: OffsetRange,
    *,
    isolation: IsolationLevel = IsolationLevel.READ_COMMITTED,
    fetch_max_bytes: int = 4 * 1024 * 1024,
    fail_on_data_loss: bool = True,
) -> Iterator[list[DecodedColumns]]:
    """:func:`read_range` as Arrow columns (``CompletedFetch.fetch_columns``): the same records, one list of
    column chunks per Fetch, with no Python per record."""
    return _read_range(client, offset_range, isolation, fetch_max_bytes, fail_on_data_loss, columns=True)


def _read_range(
    client: LogClient,
    offset_range: OffsetRange,
    isolation: IsolationLevel,
    fetch_max_bytes: int,
    fail_on_data_loss: bool,
    *,
    columns: bool,
) -> Iterator[list[Any]]:
    tp = offset_range.topic_partition
    position, end = offset_range.start, offset_range.end
    stalled_since: float | None = None
    while position < end:
        try:
            result = client.fetch(tp, position, max_bytes=fetch_max_bytes, isolation=isolation)
        except OffsetOutOfRange as err:
            position = _after_data_loss(client, tp, position, end, isolation, fail_on_data_loss, err)
            continue
        aborted = result.aborted_transactions
        fetched = CompletedFetch(
            tp, result.records, fetch_offset=position, isolation_level=isolation, aborted_transactions=aborted
        )
        try:
            # a damaged batch after good ones ends this list early; the next fetch starts on it again
            taken: list[Any] = fetched.fetch_columns(1 << 30) if columns else fetched.fetch_records(1 << 30)
        except CorruptMessage:
            if _stalled(stalled_since, client):
                raise
            stalled_since = stalled_since or time.monotonic()
            time.sleep(client.retry_backoff_s)
            continue
        if fetched.next_fetch_offset <= position:
            # nothing came back below an end that was readable when planned
            bound = result.last_stable_offset if isolation is IsolationLevel.READ_COMMITTED else result.high_watermark
            if _stalled(stalled_since, client):
                raise OffsetOutOfRange(
                    f"{tp}: offsets [{position}, {end}) were readable when the batch was planned, but the partition "
                    f"now ends at {bound}; the log was truncated or the topic re-created"
                )
            stalled_since = stalled_since or time.monotonic()
            time.sleep(client.retry_backoff_s)
            continue
        stalled_since = None
        position = fetched.next_fetch_offset
        yield _below(taken, end, columns)


def _below(taken: list[Any], end: int, columns: bool) -> list[Any]:
    """The records (or column chunks, cut) of ``taken`` with an offset below ``end``."""
    if columns:
        cut = [chunk.slice(0, int(np.searchsorted(chunk.offsets, end))) for chunk in taken]
        return [chunk for chunk in cut if len(chunk)]
    if taken and taken[-1].offset >= end:
        return [r for r in taken if r.offset < end]
    return taken


def _stalled(since: float | None, client: LogClient) -> bool:
    return since is not None and time.monotonic() - since > client.request_timeout_s


def _after_data_loss(
    client: LogClient,
    tp: TopicPartition,
    position: int,
    end: int,
    isolation: IsolationLevel,
    fail_on_data_loss: bool,
    err: OncelogError,
) -> int:
    """Where to go on when ``position`` is outside the log: raise, or skip to the log start."""
    log_start = client.list_offsets([tp], "earliest", isolation)[tp]
    if position >= log_start:
        raise OffsetOutOfRange(
            f"{tp}: offset {position} is beyond the end of the log (the topic was truncated or re-created): {err}"
        ) from err
    if fail_on_data_loss:
        raise OffsetOutOfRange(
            f"{tp}: offsets [{position}, {min(log_start, end)}) were deleted by retention before they were read. "
            "Set the option failOnDataLoss=false to skip lost data instead."
        ) from err
    log.warning("%s: offsets [%d, %d) were deleted by retention; skipping them", tp, position, min(log_start, end))
    return min(log_start, end)


def columns_to_arrow(
    tp: TopicPartition, chunks: Sequence[DecodedColumns], *, include_headers: bool = False
) -> pa.RecordBatch:
    """Rows of :func:`schema_of` as one Arrow record batch (what Spark takes from ``read()`` without conversion),
    from the column chunks of one partition (:func:`read_range_columns`).

    Headers keep every pair in the producer's order, repeated names included, as Spark's Kafka source does.
    """
    schema = arrow_schema(include_headers)
    count = sum(len(chunk) for chunk in chunks)
    timestamps = np.concatenate([chunk.timestamps for chunk in chunks]) * 1000  # milliseconds to Spark's micros
    columns = [
        _joined([chunk.keys for chunk in chunks]),
        _joined([chunk.values for chunk in chunks]),
        pa.repeat(pa.scalar(tp.topic, pa.string()), count),
        pa.repeat(pa.scalar(tp.partition, pa.int32()), count),
        pa.array(np.concatenate([chunk.offsets for chunk in chunks])),
        pa.array(timestamps, type=schema.field("timestamp").type),
        pa.array(np.concatenate([chunk.timestamp_types for chunk in chunks]).astype(np.int32)),
    ]
    if include_headers:
        headers = _joined([chunk.headers_column() for chunk in chunks])
        columns.append(headers.cast(schema.field("headers").type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _joined(arrays: list[Any]) -> Any:
    return arrays[0] if len(arrays) == 1 else pa.concat_arrays(arrays)


def _read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return  # Spark's placeholder task when a batch read found nothing to read
    client = LogClient(options.bootstrap, request_timeout_s=options.request_timeout_s)
    for chunks in read_range_columns(
        client,
        partition.range,
        isolation=options.isolation_level,
        fetch_max_bytes=options.fetch_max_bytes,
        fail_on_data_loss=options.fail_on_data_loss,
    ):
        if chunks:
            yield columns_to_arrow(partition.range.topic_partition, chunks, include_headers=options.include_headers)


# ------------------------------------------------------------------------------------------------ planning


class _Planner:
    """Driver-side questions to the cluster, with failures turned into errors that name the option."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.client = LogClient(options.bootstrap, request_timeout_s=options.request_timeout_s)

    def topic_partitions(self) -> list[TopicPartition]:
        """Every partition of the subscribed topics; with ``subscribePattern``, of the topics matching it now."""
        try:
            topics = self.options.topics
            if self.options.topic_pattern is not None:
                topics = tuple(t for t in self.client.topic_names() if self.options.subscribes_to(t))
            return self.client.topic_partitions(topics)
        except UnknownTopicOrPartition as err:
            if self.options.topic_pattern is not None:
                return self._without_deleted_topics()
            name = "topic" if len(self.options.topics) == 1 else "topics"
            raise OptionError([f"{name}: {err.message} (bootstrap {','.join(self.options.bootstrap)})"]) from None
        except OncelogError as err:
            raise OptionError(
                [f"bootstrap: the cluster at {','.join(self.options.bootstrap)} did not answer: {err.message}"]
            ) from None

    def _without_deleted_topics(self) -> list[TopicPartition]:
        # a topic matching the pattern was deleted between the listing and its metadata: list again
        tps: list[TopicPartition] = []
        for topic in self.client.topic_names():
            if self.options.subscribes_to(topic):
                try:
                    tps += self.client.topic_partitions([topic])
                except UnknownTopicOrPartition:
                    continue
        return sorted(tps)

    def bounds(self, tps: Sequence[TopicPartition], spec: str) -> PartitionOffsets:
        return self.client.list_offsets(tps, spec, self.options.isolation_level)

    def resolve(
        self, name: str, spec: OffsetsSpec, tps: Sequence[TopicPartition], *, keep_latest: bool = False
    ) -> PartitionOffsets:
        """Concrete offsets of ``spec`` (option ``name``) for ``tps``.

        Args:
            keep_latest: leave partitions at ``latest`` as the marker ``LATEST`` (a stream's batch 0 pins them).

        Raises:
            OptionError: a partition named in the option does not exist, or (timestamps with
                ``none_found="error"``) has no record at or after its time.
        """
        unknown = sorted((set(spec.offsets) | set(spec.timestamps)) - set(tps))
        if unknown:
            counts: dict[str, int] = {}
            for tp in tps:
                counts[tp.topic] = counts.get(tp.topic, 0) + 1
            raise OptionError(
                [
                    f"{name}: partition {tp.partition} of topic {tp.topic!r} does not exist"
                    + _partitions_note(counts.get(tp.topic, 0))
                    for tp in unknown
                ]
            )
        wanted = {tp: spec.offset_for(tp) for tp in tps}
        if spec.kind == "timestamp":
            wanted.update(self._by_timestamp(name, spec, tps))
        earliest = [tp for tp, o in wanted.items() if o == EARLIEST]
        latest = [] if keep_latest else [tp for tp, o in wanted.items() if o == LATEST]
        if earliest:
            wanted.update(self.bounds(earliest, "earliest"))
        if latest:
            wanted.update(self.bounds(latest, "latest"))
        return wanted

    def _by_timestamp(self, name: str, spec: OffsetsSpec, tps: Sequence[TopicPartition]) -> PartitionOffsets:
        """Each timed partition's first offset whose record is at or after its time, within what is readable.

        A partition without such a record takes its latest offset, or fails under ``none_found="error"``
        (``startingOffsetsByTimestampStrategy``, as in Spark's Kafka source).
        """
        stamps = {tp: ts for tp in tps if (ts := spec.timestamp_for(tp)) is not None}
        if not stamps:
            return {}
        found = self.client.offsets_for_times(stamps, self.options.isolation_level)
        latest = self.bounds(sorted(stamps), "latest")
        missing = sorted(tp for tp in stamps if found[tp] is None or found[tp] >= latest[tp])  # type: ignore[operator]
        if missing and spec.none_found == "error":
            raise OptionError(
                [
                    f"{name}: {tp} has no record at or after timestamp {stamps[tp]} (its latest offset is "
                    f"{latest[tp]}); give an earlier time, or set startingOffsetsByTimestampStrategy=latest to start "
                    "such partitions at their latest offset"
                    for tp in missing
                ]
            )
        return {tp: LATEST if tp in missing else min(int(found[tp] or 0), latest[tp]) for tp in stamps}

    def checkpointed(self, document: Mapping[str, Any], *, initial: bool = False) -> PartitionOffsets:
        """Offsets Spark read back from its checkpoint; they must belong to this source's topics.

        Args:
            document: the offsets JSON.
            initial: the document may be a start from :meth:`OncelogStreamReader.initialOffset`, whose
                partitions at ``latest`` hold -1 until batch 0 pins them.
        """
        try:
            offsets = offsets_from_json(document, allow_sentinels=initial)
            if any(offset == EARLIEST for offset in offsets.values()):
                raise ValueError("-2 (earliest) is not a checkpointed offset")
        except ValueError as exc:
            raise OptionError([f"checkpointLocation: the checkpointed source offset is not ours: {exc}"]) from None
        foreign = sorted({tp.topic for tp in offsets if not self.options.subscribes_to(tp.topic)})
        if foreign:
            raise OptionError(
                [
                    f"topics: the checkpoint holds offsets of {foreign}, which this query does not subscribe to "
                    f"({self.options.subscription}); the checkpoint belongs to another query, so use a new "
                    "checkpointLocation"
                ]
            )
        return offsets


def _partitions_note(count: int) -> str:
    if count == 0:
        return " (the topic does not exist)"
    return " (the topic has only partition 0)" if count == 1 else f" (the topic has partitions 0-{count - 1})"


def _start_name(spec: OffsetsSpec) -> str:
    if spec.kind != "timestamp":
        return "startingOffsets"
    return "startingOffsetsByTimestamp" if spec.timestamps else "startingTimestamp"


def _end_name(spec: OffsetsSpec) -> str:
    if spec.kind != "timestamp":
        return "endingOffsets"
    return "endingOffsetsByTimestamp" if spec.timestamps else "endingTimestamp"


class OncelogBatchReader(DataSourceReader):
    """``spark.read.format("oncelog")``: the offsets between ``startingOffsets`` and ``endingOffsets``.

    Args:
        options: parsed with ``streaming=False``.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        """Resolve both bounds on the driver and cut them into tasks.

        Raises:
            OptionError: a topic or a partition in the offsets JSON does not exist, a start lies after its
                end, or an explicit end lies beyond what is readable (the LSO under read_committed).
        """
        assert self.options.ending_offsets is not None
        planner = _Planner(self.options)
        tps = planner.topic_partitions()
        start = planner.resolve(_start_name(self.options.starting_offsets), self.options.starting_offsets, tps)
        end = planner.resolve(_end_name(self.options.ending_offsets), self.options.ending_offsets, tps)
        problems = []
        explicit_ends = {tp: o for tp, o in self.options.ending_offsets.offsets.items() if o >= 0}
        if explicit_ends:
            readable = planner.bounds(sorted(explicit_ends), "latest")
            problems += [
                f"endingOffsets: {tp} ends at {o}, beyond its latest readable offset {readable[tp]}"
                f" ({self.options.isolation_level.value})"
                for tp, o in sorted(explicit_ends.items())
                if o > readable[tp]
            ]
        problems += [
            f"startingOffsets/endingOffsets: {tp} starts at {start[tp]}, after its end {end[tp]}"
            for tp in tps
            if start[tp] > end[tp]
        ]
        if problems:
            raise OptionError(problems)
        ranges = plan_ranges(
            start,
            end,
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
        )
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor."""
        return _read_partition(self.options, partition)


class OncelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """``spark.readStream.format("oncelog")``: micro-batches of per-partition offset ranges.

    Offsets are ``{"topic": {"partition": next offset}}``. ``latestOffset`` never passes the last stable
    offset (read_committed) and admits at most ``maxRecordsPerTrigger`` offsets and about
    ``maxBytesPerTrigger`` bytes per micro-batch; a partition added to a topic while the query runs is
    read from offset 0. ``commit`` is informational: Spark's checkpoint is the source of truth
    (design/spark-connector.md §3.6).

    Args:
        options: parsed with ``streaming=True``.
    """

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._target: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None

    def initialOffset(self) -> dict:
        """Where a new query starts: ``startingOffsets``, with ``latest`` left for the first batch to pin.

        Spark calls this more than once for the same batch 0 — to plan it, to run it, and again when it
        replays batch 0 after a restart — and never records the answer. Earliest and explicit offsets are
        resolved here (the same answer each time while retention keeps the data). A partition starting at
        ``latest`` is answered with the marker ``-1`` instead of the log's current end, which moves while
        the topic is written: the first :meth:`latestOffset` resolves it once, and batch 0 then ends there
        and reads nothing of that partition. Spark writes that end into ``offsets/0``, so every later call,
        replay and restart starts from the same pinned offset (Spark's Kafka source pins it in a file of
        the checkpoint instead, which a Python source cannot reach).
        """
        planner = _Planner(self.options)
        tps = planner.topic_partitions()
        spec = self.options.starting_offsets
        return offsets_to_json(planner.resolve(_start_name(spec), spec, tps, keep_latest=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        """``maxRecordsPerTrigger`` or ``maxBytesPerTrigger`` as Spark's read limit (both apply when both are set)."""
        if self.options.max_records_per_trigger:
            return ReadMaxRows(self.options.max_records_per_trigger)
        if self.options.max_bytes_per_trigger:
            return ReadMaxBytes(self.options.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: fix the end at what is readable now; later data waits for the next run."""
        planner = _Planner(self.options)
        self._target = planner.bounds(planner.topic_partitions(), "latest")

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """The end of the next micro-batch: the readable end of every partition, within ``limit``.

        Raises:
            OptionError: a topic disappeared, or the checkpointed offsets belong to another query.
            OffsetOutOfRange: a partition now ends before the checkpointed offset and ``failOnDataLoss`` is set.
        """
        planner = _Planner(self.options)
        begin = planner.checkpointed(start, initial=True)
        tps = planner.topic_partitions()
        latest = planner.bounds(tps, "latest")
        self._latest = dict(latest)
        for tp, offset in begin.items():
            if offset == LATEST:
                # batch 0 of a query starting at latest: pin the start here, once (see initialOffset); under
                # Trigger.AvailableNow "latest" is the end the trigger snapshotted
                pinned = self._target if self._target is not None and tp in self._target else latest
                begin[tp] = pinned.get(tp, 0)
        if self._target is not None:
            latest = {tp: min(latest[tp], self._target[tp]) for tp in tps if tp in self._target}
        for tp, offset in begin.items():
            if tp in latest and latest[tp] < offset:
                if self.options.fail_on_data_loss:
                    raise OffsetOutOfRange(
                        f"{tp}: the checkpoint is at offset {offset} but the partition now ends at {latest[tp]}; the "
                        "topic was truncated or re-created. Use a new checkpointLocation, or set failOnDataLoss=false."
                    )
                log.warning("%s: partition ends at %d before checkpointed offset %d", tp, latest[tp], offset)
                latest[tp] = offset
        end = self._admit(begin, latest, limit)
        # a partition that vanished from the metadata keeps its offset rather than making the checkpoint forget it
        return offsets_to_json({**begin, **end})

    def _admit(self, begin: PartitionOffsets, latest: PartitionOffsets, limit: ReadLimit) -> PartitionOffsets:
        if isinstance(limit, ReadAllAvailable):
            return latest
        max_records = self.options.max_records_per_trigger
        max_bytes = self.options.max_bytes_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_records = limit.max_rows
        elif isinstance(limit, ReadMaxBytes):
            max_bytes = limit.max_bytes
        end = dict(latest)
        if max_records:
            end = limit_by_records(begin, end, max_records)
        if max_bytes:
            end = self._limit_by_bytes(begin, end, max_bytes)
        return end

    def _limit_by_bytes(self, begin: PartitionOffsets, latest: PartitionOffsets, max_bytes: int) -> PartitionOffsets:
        """Admit about ``max_bytes`` of whole record batches, shared in proportion to each backlog.

        The driver cannot know a range's size without looking, so it fetches up to each partition's share
        from its start and ends the partition after the last whole batch that fits (at least one batch, so a
        large batch cannot stall the stream). This costs one extra read of up to ``max_bytes`` per trigger.
        """
        backlog = {tp: latest[tp] - begin.get(tp, 0) for tp in latest if latest[tp] > begin.get(tp, 0)}
        total = sum(backlog.values())
        if not total:
            return dict(latest)
        wanted = {tp: (begin.get(tp, 0), max(1, int(max_bytes * size / total))) for tp, size in backlog.items()}
        client = LogClient(self.options.bootstrap, request_timeout_s=self.options.request_timeout_s)
        end = dict(latest)
        try:
            fetched = client.fetch_many(wanted, isolation=self.options.isolation_level)
        except OffsetOutOfRange:
            return end  # lost data: the read reports it (or skips it) with the full picture
        for tp, result in fetched.items():
            share = wanted[tp][1]
            used, reach = 0, wanted[tp][0]
            for header, _ in iter_batches(result.records):
                if used and used + header.size_in_bytes > share:
                    break
                used += header.size_in_bytes
                reach = header.next_offset
            end[tp] = max(wanted[tp][0], min(latest[tp], reach))
        return end

    def reportLatestOffset(self) -> dict | None:
        """The readable end seen by the last ``latestOffset`` call, for Spark's progress reports."""
        return None if self._latest is None else offsets_to_json(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        """The tasks of one micro-batch; the same ``(start, end)`` always gives the same tasks."""
        planner = _Planner(self.options)
        begin, stop = planner.checkpointed(start, initial=True), planner.checkpointed(end)
        # a partition that started at latest ends batch 0 where latestOffset pinned it: nothing to read
        begin = {tp: stop.get(tp, 0) if offset == LATEST else offset for tp, offset in begin.items()}
        ranges = plan_ranges(
            begin,
            stop,
            min_partitions=self.options.min_partitions,
            max_records_per_partition=self.options.max_records_per_partition,
        )
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Read one range on an executor."""
        return _read_partition(self.options, partition)

    def commit(self, end: dict) -> None:
        """Spark finished every batch up to ``end``; nothing to do, the checkpoint holds the progress."""

    def stop(self) -> None:
        """Nothing to release: channels belong to the process and are reused by the next query."""
