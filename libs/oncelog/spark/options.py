"""Options of the ``oncelog`` Spark source and sink: parsing, defaults and errors that name the option.

Spark hands a data source its ``.option(...)`` values as strings in a case-insensitive mapping; a plain
``dict`` copy of it keeps only lower-cased keys (design/spark-connector.md §2). Every option is therefore
looked up by its lower-cased name, and everything is parsed once, on the driver, into a frozen
:class:`SourceOptions` that is pickled with the reader to the executors. Nothing here touches the network:
options that need the cluster (does the topic exist, is the partition there) are checked when the query
plans its first batch.

The names follow Spark's Kafka source where the meaning is the same (``startingOffsets``,
``endingOffsets``, ``maxRecordsPerTrigger``, ``minPartitions``, ``maxRecordsPerPartition``,
``failOnDataLoss``), so a pipeline moves from ``format("kafka")`` to ``format("oncelog")`` by renaming
``kafka.bootstrap.servers`` to ``bootstrap`` and ``subscribe`` to ``topics``. Sink options
(:class:`SinkOptions`) are parsed the same way; the sink's columns are checked by
:class:`oncelog.spark.writer.RowEncoder`.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from oncelog.client import transport
from oncelog.client.records import TopicPartition
from oncelog.client.transport import BOOTSTRAP_ENV, DEFAULT_CLUSTER_FILE, BootstrapError
from oncelog.spark.offsets import EARLIEST, LATEST, offsets_from_json
from oncelog.vocabulary import IsolationLevel

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_CLUSTER_FILE",
    "ATOMICITY_BATCH",
    "ATOMICITY_TASK",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_TRANSACTIONAL_ID_PREFIX",
    "OffsetsSpec",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "parse_sink_options",
    "parse_source_options",
    "resolve_bootstrap",
]

# every option the source understands, by lower-cased name -> the spelling shown in messages
_SOURCE_OPTIONS = {
    name.lower(): name
    for name in (
        "bootstrap",
        "topic",
        "topics",
        "startingOffsets",
        "endingOffsets",
        "maxRecordsPerTrigger",
        "maxBytesPerTrigger",
        "isolationLevel",
        "minPartitions",
        "maxRecordsPerPartition",
        "failOnDataLoss",
        "fetchMaxBytes",
        "requestTimeoutMs",
    )
}
_SINK_OPTIONS = {
    name.lower(): name
    for name in (
        "bootstrap",
        "topic",
        "markerTopic",
        "transactionalIdPrefix",
        "transactionTimeoutMs",
        "requestTimeoutMs",
        "atomicity",
        "maxBatchBytes",
    )
}
# keys Spark itself puts into the option map
_SPARK_KEYS = {"path", "checkpointlocation", "queryname"}

DEFAULT_TRANSACTIONAL_ID_PREFIX = "oncelog-spark"

ATOMICITY_TASK = "task"
"""``atomicity=task`` (default): each Spark task commits its own output (design (a), ``spark.writer``)."""
ATOMICITY_BATCH = "batch"
"""``atomicity=batch``: the driver commits each micro-batch in one transaction (design (c1), ``spark.atomic``)."""
DEFAULT_MAX_BATCH_BYTES = 64 * 1024 * 1024


class OptionError(ValueError):
    """One or more options of the ``oncelog`` data source are missing or invalid.

    Attributes:
        problems: one message per problem, each naming its option.
    """

    header = "invalid options for format('oncelog')"

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{self.header}:\n  " + "\n  ".join(problems))


@dataclass(frozen=True)
class OffsetsSpec:
    """Where reading starts or ends: ``earliest``, ``latest``, or per-partition offsets.

    Attributes:
        kind: ``"earliest"``, ``"latest"`` or ``"json"``.
        offsets: for ``"json"``, the offset of each named partition; :data:`~oncelog.spark.offsets.EARLIEST`
            (-2) and :data:`~oncelog.spark.offsets.LATEST` (-1) stand for the partition's bounds, as in
            Spark's Kafka source. Partitions not named take ``default``.
        default: ``EARLIEST`` or ``LATEST``, for partitions the JSON does not name.
    """

    kind: str
    offsets: Mapping[TopicPartition, int]
    default: int

    @classmethod
    def earliest(cls) -> OffsetsSpec:
        """Every partition from its log start offset."""
        return cls("earliest", {}, EARLIEST)

    @classmethod
    def latest(cls) -> OffsetsSpec:
        """Every partition from its latest offset (the LSO under read_committed)."""
        return cls("latest", {}, LATEST)

    def offset_for(self, tp: TopicPartition) -> int:
        """The configured offset of ``tp``: a real offset, ``EARLIEST`` or ``LATEST``."""
        return self.offsets.get(tp, self.default)


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of one ``oncelog`` source; immutable and picklable.

    Attributes:
        bootstrap: cluster addresses (``host:port``); any oncelog process answers ClusterService.
        topics: subscribed topics, in the order given.
        starting_offsets: where a new query (or a batch read) starts; streaming defaults to ``latest``,
            batch to ``earliest`` (Spark's Kafka source does the same).
        ending_offsets: where a batch read ends (``latest`` by default); ``None`` for streaming.
        max_records_per_trigger: offsets admitted per micro-batch over all partitions, or None.
        max_bytes_per_trigger: approximate bytes admitted per micro-batch (whole record batches), or None.
        isolation_level: READ_COMMITTED (default) reads up to the last stable offset and drops aborted data.
        min_partitions: split offset ranges so that at least this many Spark tasks read, or None.
        max_records_per_partition: split any offset range longer than this, or None.
        fail_on_data_loss: raise when offsets to read were deleted by retention (default); when False, skip
            to the log start instead.
        fetch_max_bytes: bytes asked for per Fetch call of one partition.
        request_timeout_s: deadline of one call, and how long a read keeps retrying a partition whose
            leader is moving or unreachable.
    """

    bootstrap: tuple[str, ...]
    topics: tuple[str, ...]
    starting_offsets: OffsetsSpec
    ending_offsets: OffsetsSpec | None
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    fetch_max_bytes: int = 4 * 1024 * 1024
    request_timeout_s: float = 30.0


def parse_source_options(
    options: Mapping[str, str], *, streaming: bool, environ: Mapping[str, str] | None = None
) -> SourceOptions:
    """Parse and check the options of a batch (``streaming=False``) or streaming read.

    Args:
        options: what Spark passes to the DataSource (any key case).
        streaming: the reader is a stream reader: ``endingOffsets`` is refused and ``startingOffsets``
            defaults to ``latest``.
        environ: where ``ONCELOG_BOOTSTRAP`` is looked up; ``os.environ`` by default.

    Raises:
        OptionError: every problem found, each naming its option.
    """
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    problems: list[str] = []
    problems += _typos(opts, _SOURCE_OPTIONS, ignore=_SINK_OPTIONS)

    bootstrap: tuple[str, ...] = ()
    try:
        bootstrap = resolve_bootstrap(opts.get("bootstrap"), environ=environ)
    except OptionError as err:
        problems += err.problems

    topics = _topics(opts, problems)
    starting = _offsets_option(
        opts, "startingOffsets", topics, problems, default="latest" if streaming else "earliest", allow_earliest=True
    )
    ending: OffsetsSpec | None = None
    if streaming:
        if "endingoffsets" in opts:
            problems.append("endingOffsets: only batch reads (spark.read) take an end; a stream runs until stopped")
    else:
        ending = _offsets_option(opts, "endingOffsets", topics, problems, default="latest", allow_earliest=False)
        if "maxrecordspertrigger" in opts or "maxbytespertrigger" in opts:
            problems.append("maxRecordsPerTrigger/maxBytesPerTrigger: only streaming reads (spark.readStream) use them")

    isolation = IsolationLevel.READ_COMMITTED
    raw_isolation = opts.get("isolationlevel", "read_committed").strip().lower()
    try:
        isolation = IsolationLevel(raw_isolation)
    except ValueError:
        problems.append(f"isolationLevel: {raw_isolation!r} is not read_committed or read_uncommitted")

    parsed = SourceOptions(
        bootstrap=bootstrap,
        topics=topics,
        starting_offsets=starting,
        ending_offsets=ending,
        max_records_per_trigger=_positive_int(opts, "maxRecordsPerTrigger", problems),
        max_bytes_per_trigger=_positive_int(opts, "maxBytesPerTrigger", problems),
        isolation_level=isolation,
        min_partitions=_positive_int(opts, "minPartitions", problems),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition", problems),
        fail_on_data_loss=_boolean(opts, "failOnDataLoss", True, problems),
        fetch_max_bytes=_positive_int(opts, "fetchMaxBytes", problems) or 4 * 1024 * 1024,
        request_timeout_s=(_positive_int(opts, "requestTimeoutMs", problems) or 30_000) / 1000,
    )
    if problems:
        raise OptionError(problems)
    return parsed


@dataclass(frozen=True)
class SinkOptions:
    """The parsed options of one ``oncelog`` sink; immutable and picklable.

    Attributes:
        bootstrap: cluster addresses (``host:port``).
        topic: the topic every row goes to; it overrides a ``topic`` column, as in Spark's Kafka sink.
            ``None`` takes each row's ``topic`` column.
        marker_topic: an existing topic whose partition 0 keys the batch markers (the group offsets
            service only stores offsets of existing partitions); ``topic`` by default.
        transactional_id_prefix: transactional ids are ``<prefix>-<query id>-<Spark partition id>``.
        transaction_timeout_ms: the coordinator aborts a task's transaction open longer than this, so a
            dead executor holds back the last stable offset of the output for at most this long.
        request_timeout_s: deadline of one call, and of the retries of one operation.
        atomicity: :data:`ATOMICITY_TASK` (one transaction per Spark task, committed by the task) or
            :data:`ATOMICITY_BATCH` (one transaction per micro-batch, committed by the driver).
        max_batch_bytes: with ``atomicity=batch``, the most bytes of keys, values and headers one micro-batch
            may carry through the driver; a larger batch fails instead of exhausting the driver's memory.
        checkpoint_location: the streaming query's ``checkpointLocation`` option, as Spark passes it to the
            sink (None for batch writes, or when the location comes from a session setting).
    """

    bootstrap: tuple[str, ...]
    topic: str | None
    marker_topic: str
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX
    transaction_timeout_ms: int = 60_000
    request_timeout_s: float = 30.0
    atomicity: str = ATOMICITY_TASK
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES
    checkpoint_location: str | None = None


def parse_sink_options(options: Mapping[str, str], *, environ: Mapping[str, str] | None = None) -> SinkOptions:
    """Parse and check the options of a write (``df.write`` or ``df.writeStream``).

    Raises:
        OptionError: every problem found, each naming its option.
    """
    opts = {str(k).lower(): v for k, v in options.items() if v is not None}
    problems = _typos(opts, _SINK_OPTIONS, ignore=_SOURCE_OPTIONS)
    bootstrap: tuple[str, ...] = ()
    try:
        bootstrap = resolve_bootstrap(opts.get("bootstrap"), environ=environ)
    except OptionError as err:
        problems += err.problems
    if "topics" in opts:
        problems.append("topics: a sink writes to one topic (option topic) or to each row's topic column")
    topic = opts.get("topic", "").strip() or None
    if topic is not None and "," in topic:
        problems.append(f"topic: {topic!r} names several topics; a sink writes to one, or to each row's topic column")
    marker_topic = opts.get("markertopic", "").strip() or topic or ""
    if not marker_topic:
        problems.append(
            "markerTopic: writing with each row's topic column needs markerTopic, an existing topic whose "
            "partition 0 keys the exactly-once batch markers (or set the topic option)"
        )
    prefix = opts.get("transactionalidprefix", DEFAULT_TRANSACTIONAL_ID_PREFIX).strip()
    if not prefix:
        problems.append("transactionalIdPrefix: must not be empty")
    atomicity = str(opts.get("atomicity", ATOMICITY_TASK)).strip().lower()
    if atomicity not in (ATOMICITY_TASK, ATOMICITY_BATCH):
        problems.append(
            f"atomicity: {atomicity!r} is not 'task' (each Spark task commits its output in one transaction, "
            "the default) or 'batch' (the driver commits each micro-batch in one transaction)"
        )
    if "maxbatchbytes" in opts and atomicity != ATOMICITY_BATCH:
        problems.append("maxBatchBytes: only atomicity=batch stages output through the driver; drop the option")
    parsed = SinkOptions(
        bootstrap=bootstrap,
        topic=topic,
        marker_topic=marker_topic,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=_positive_int(opts, "transactionTimeoutMs", problems) or 60_000,
        request_timeout_s=(_positive_int(opts, "requestTimeoutMs", problems) or 30_000) / 1000,
        atomicity=atomicity,
        max_batch_bytes=_positive_int(opts, "maxBatchBytes", problems) or DEFAULT_MAX_BATCH_BYTES,
        checkpoint_location=str(opts["checkpointlocation"]).strip() or None if "checkpointlocation" in opts else None,
    )
    if problems:
        raise OptionError(problems)
    return parsed


def resolve_bootstrap(
    value: str | None, *, environ: Mapping[str, str] | None = None, cluster_file: Path = DEFAULT_CLUSTER_FILE
) -> tuple[str, ...]:
    """The cluster addresses: the ``bootstrap`` option, else ``$ONCELOG_BOOTSTRAP``, else ``.oncelog/cluster.json``.

    The clients' resolver (:func:`oncelog.client.transport.resolve_bootstrap`) with its error as an option
    problem. The value is resolved on the driver and travels with the reader, so executors never look for the file.

    Raises:
        OptionError: nothing names the cluster, or an address is not ``host:port``.
    """
    try:
        return transport.resolve_bootstrap(
            value or None,
            environ=environ,
            cluster_file=cluster_file,
            how_to_pass='set .option("bootstrap", "host:port")',
        )
    except BootstrapError as exc:
        raise OptionError([f"bootstrap: {exc.message}"]) from None


def _typos(opts: Mapping[str, str], known: Mapping[str, str], *, ignore: Mapping[str, str]) -> list[str]:
    # Spark passes its own keys (path, checkpointLocation) too, so only near-misses of ours are errors
    problems = []
    for key in opts:
        if key in known or key in ignore or key in _SPARK_KEYS:
            continue
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.85)
        if close:
            problems.append(f"{key}: unknown option; did you mean {known[close[0]]!r}?")
    return problems


def _topics(opts: Mapping[str, str], problems: list[str]) -> tuple[str, ...]:
    given = [name for name in ("topic", "topics") if name in opts]
    if not given:
        problems.append('topic: not set; name the topic with .option("topic", "orders"), or a comma list in "topics"')
        return ()
    if len(given) == 2:
        problems.append("topic/topics: set only one of them")
        return ()
    raw = opts[given[0]]
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if not topics:
        problems.append(f"{given[0]}: {raw!r} names no topic")
    elif given[0] == "topic" and len(topics) > 1:
        problems.append(f'topic: {raw!r} names several topics; use the "topics" option for a comma list')
    return topics


def _offsets_option(
    opts: Mapping[str, str],
    name: str,
    topics: tuple[str, ...],
    problems: list[str],
    *,
    default: str,
    allow_earliest: bool,
) -> OffsetsSpec:
    raw = opts.get(name.lower(), default).strip()
    if raw.lower() == "latest":
        return OffsetsSpec.latest()
    if raw.lower() == "earliest":
        if not allow_earliest:
            problems.append(f"{name}: 'earliest' is not a valid end; use 'latest' or per-partition JSON")
        return OffsetsSpec.earliest()
    if not raw.startswith("{"):
        problems.append(f"{name}: {raw!r} is not 'earliest', 'latest' or JSON like {{\"orders\": {{\"0\": 12}}}}")
        return OffsetsSpec.earliest()
    try:
        document = json.loads(raw)
        offsets = offsets_from_json(document, allow_sentinels=True)
    except ValueError as exc:
        problems.append(f"{name}: {exc}")
        return OffsetsSpec.earliest()
    for tp, offset in sorted(offsets.items()):
        if tp.topic not in topics:
            problems.append(f"{name}: topic {tp.topic!r} is not among the subscribed topics {list(topics)}")
            break
        if offset == EARLIEST and not allow_earliest:
            problems.append(f"{name}: {tp} is -2 (earliest), which is not a valid end")
    return OffsetsSpec("json", offsets, EARLIEST if name == "startingOffsets" else LATEST)


def _positive_int(opts: Mapping[str, str], name: str, problems: list[str]) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        problems.append(f"{name}: {raw!r} is not an integer")
        return None
    if value < 1:
        problems.append(f"{name}: must be at least 1, got {value}")
        return None
    return value


def _boolean(opts: Mapping[str, str], name: str, default: bool, problems: list[str]) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    text = str(raw).strip().lower()
    if text in ("true", "false"):
        return text == "true"
    problems.append(f"{name}: {raw!r} is not true or false")
    return default
