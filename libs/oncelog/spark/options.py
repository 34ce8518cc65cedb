"""Options of the ``oncelog`` Spark source and sink: parsing, defaults and errors that name the option.

Spark hands a data source its ``.option(...)`` values as strings in a case-insensitive mapping; a plain
``dict`` copy of it keeps only lower-cased keys (design/spark-connector.md §2). Every option is therefore
looked up by its lower-cased name, and everything is parsed once, on the driver, into a frozen
:class:`SourceOptions` that is pickled with the reader to the executors. Nothing here touches the network:
options that need the cluster (does the topic exist, is the partition there) are checked when the query
plans its first batch.

The names follow Spark's Kafka source where the meaning is the same (``subscribe``, ``subscribePattern``,
``startingOffsets``, ``endingOffsets``, ``startingTimestamp``, ``startingOffsetsByTimestamp``,
``maxOffsetsPerTrigger``, ``minPartitions``, ``failOnDataLoss``, ``includeHeaders``), so a pipeline moves from
``format("kafka")`` to ``format("oncelog")`` by replacing ``kafka.bootstrap.servers`` with ``bootstrap``. A
Spark Kafka option with no counterpart here (``kafka.*`` consumer settings, ``assign``, ``groupIdPrefix``,
``minOffsetsPerTrigger``, ...) is refused with a message saying what to do instead, and any other unknown
option is refused with the closest known name (:data:`SPARK_KAFKA_ONLY`). Sink options
(:class:`SinkOptions`) are parsed the same way; the sink's columns are checked by
:class:`oncelog.spark.writer.RowEncoder`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
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
    "SPARK_KAFKA_ONLY",
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
        "subscribe",
        "subscribePattern",
        "startingOffsets",
        "endingOffsets",
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsetsByTimestampStrategy",
        "endingTimestamp",
        "endingOffsetsByTimestamp",
        "maxRecordsPerTrigger",
        "maxOffsetsPerTrigger",
        "maxBytesPerTrigger",
        "includeHeaders",
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
_SPARK_KEYS = {"path", "paths", "checkpointlocation", "queryname"}

SPARK_KAFKA_ONLY = {
    "kafka.bootstrap.servers": "oncelog's services are not reached over the Kafka protocol; set bootstrap to the "
    "host:port of any oncelog service (or $ONCELOG_BOOTSTRAP)",
    "kafka.isolation.level": "use isolationLevel (read_committed by default)",
    "kafka.group.id": "the source keeps its progress in Spark's checkpoint, not in a consumer group; drop it",
    "groupidprefix": "the source keeps its progress in Spark's checkpoint, not in a consumer group; drop it",
    "assign": "name the topics with subscribe (or topic/topics) and start each partition with startingOffsets JSON",
    "minoffsetspertrigger": "not supported: a micro-batch takes what is readable, up to maxOffsetsPerTrigger",
    "maxtriggerdelay": "not supported (it only qualifies minOffsetsPerTrigger)",
    "fetchoffset.numretries": "reads retry for requestTimeoutMs; set that instead",
    "fetchoffset.retryintervalms": "reads retry for requestTimeoutMs; set that instead",
    "kafkaconsumer.polltimeoutms": "use requestTimeoutMs",
}
"""Options of Spark's Kafka connector without an oncelog counterpart, by lower-cased name: what to do instead."""

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
    """Where reading starts or ends: ``earliest``, ``latest``, per-partition offsets, or timestamps.

    Attributes:
        kind: ``"earliest"``, ``"latest"``, ``"json"`` or ``"timestamp"``.
        offsets: for ``"json"``, the offset of each named partition; :data:`~oncelog.spark.offsets.EARLIEST`
            (-2) and :data:`~oncelog.spark.offsets.LATEST` (-1) stand for the partition's bounds, as in
            Spark's Kafka source. Partitions not named take ``default``.
        default: ``EARLIEST`` or ``LATEST``, for partitions the JSON does not name.
        timestamps: for ``"timestamp"`` given per partition (``...OffsetsByTimestamp``), each named
            partition's time in ms: it starts (or ends) at its first offset whose record is that old or newer.
        default_timestamp: for ``"timestamp"`` given once (``startingTimestamp``), the time of every partition.
        none_found: what a partition with no record at or after its timestamp does: ``"latest"`` (use its
            latest offset) or ``"error"``.
    """

    kind: str
    offsets: Mapping[TopicPartition, int]
    default: int
    timestamps: Mapping[TopicPartition, int] = field(default_factory=dict)
    default_timestamp: int | None = None
    none_found: str = "error"

    def timestamp_for(self, tp: TopicPartition) -> int | None:
        """The time ``tp`` starts or ends at, or None when it takes :attr:`default` (or is not by time)."""
        return self.timestamps.get(tp, self.default_timestamp)

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
        topic_pattern: with ``subscribePattern``, the regular expression every subscribed topic matches in
            full (``topics`` is then empty and the topics are listed when each batch is planned).
        max_records_per_trigger: offsets admitted per micro-batch over all partitions (``maxOffsetsPerTrigger``
            or its other name ``maxRecordsPerTrigger``), or None.
        max_bytes_per_trigger: approximate bytes admitted per micro-batch (whole record batches), or None.
        isolation_level: READ_COMMITTED (default) reads up to the last stable offset and drops aborted data.
        min_partitions: split offset ranges so that at least this many Spark tasks read, or None.
        max_records_per_partition: split any offset range longer than this, or None.
        fail_on_data_loss: raise when offsets to read were deleted by retention (default); when False, skip
            to the log start instead.
        fetch_max_bytes: bytes asked for per Fetch call of one partition.
        request_timeout_s: deadline of one call, and how long a read keeps retrying a partition whose
            leader is moving or unreachable.
        include_headers: rows carry a ``headers`` column (``includeHeaders``, off by default as in Spark).
    """

    bootstrap: tuple[str, ...]
    topics: tuple[str, ...]
    starting_offsets: OffsetsSpec
    ending_offsets: OffsetsSpec | None
    topic_pattern: str | None = None
    max_records_per_trigger: int | None = None
    max_bytes_per_trigger: int | None = None
    isolation_level: IsolationLevel = IsolationLevel.READ_COMMITTED
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    fetch_max_bytes: int = 4 * 1024 * 1024
    request_timeout_s: float = 30.0
    include_headers: bool = False

    def subscribes_to(self, topic: str) -> bool:
        """Whether ``topic`` is one of the subscribed topics (named, or matching ``subscribePattern``)."""
        if self.topic_pattern is not None:
            return re.fullmatch(self.topic_pattern, topic) is not None
        return topic in self.topics

    @property
    def subscription(self) -> str:
        """The subscription as the user wrote it, for messages."""
        if self.topic_pattern is not None:
            return f"subscribePattern {self.topic_pattern!r}"
        return f"topics {list(self.topics)}"


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

    topics, pattern = _subscription(opts, problems)
    subscribed = SourceOptions((), topics, OffsetsSpec.earliest(), None, topic_pattern=pattern)
    starting = _start_option(opts, subscribed, problems, default="latest" if streaming else "earliest")
    ending: OffsetsSpec | None = None
    if streaming:
        for name in ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"):
            if name.lower() in opts:
                problems.append(f"{name}: only batch reads (spark.read) take an end; a stream runs until stopped")
    else:
        ending = _end_option(opts, subscribed, problems)
        for name in ("maxOffsetsPerTrigger", "maxRecordsPerTrigger", "maxBytesPerTrigger"):
            if name.lower() in opts:
                problems.append(f"{name}: only streaming reads (spark.readStream) use it")

    isolation = IsolationLevel.READ_COMMITTED
    raw_isolation = opts.get("isolationlevel", "read_committed").strip().lower()
    try:
        isolation = IsolationLevel(raw_isolation)
    except ValueError:
        problems.append(f"isolationLevel: {raw_isolation!r} is not read_committed or read_uncommitted")

    max_offsets = _positive_int(opts, "maxOffsetsPerTrigger", problems)
    max_records = _positive_int(opts, "maxRecordsPerTrigger", problems)
    if max_offsets is not None and max_records is not None and max_offsets != max_records:
        problems.append(
            f"maxOffsetsPerTrigger/maxRecordsPerTrigger: two names of one limit with different values "
            f"({max_offsets} and {max_records}); set only maxOffsetsPerTrigger"
        )
    parsed = SourceOptions(
        bootstrap=bootstrap,
        topics=topics,
        topic_pattern=pattern,
        starting_offsets=starting,
        ending_offsets=ending,
        max_records_per_trigger=max_offsets or max_records,
        max_bytes_per_trigger=_positive_int(opts, "maxBytesPerTrigger", problems),
        isolation_level=isolation,
        min_partitions=_positive_int(opts, "minPartitions", problems),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition", problems),
        fail_on_data_loss=_boolean(opts, "failOnDataLoss", True, problems),
        fetch_max_bytes=_positive_int(opts, "fetchMaxBytes", problems) or 4 * 1024 * 1024,
        request_timeout_s=(_positive_int(opts, "requestTimeoutMs", problems) or 30_000) / 1000,
        include_headers=_boolean(opts, "includeHeaders", False, problems),
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
    """An unknown option is an error: a mistyped name would otherwise be ignored without a word.

    Spark passes its own keys (``path``, ``checkpointLocation``) too, and one option map may serve a read
    and a write (``ignore``: the other side's names). Options of Spark's Kafka connector without a counterpart
    say what to use instead (:data:`SPARK_KAFKA_ONLY`); any other name gets the closest known one.
    """
    problems = []
    for key in opts:
        if key in known or key in ignore or key in _SPARK_KEYS:
            continue
        if key in SPARK_KAFKA_ONLY:
            problems.append(
                f"{key}: an option of Spark's Kafka connector that format('oncelog') does not take; "
                f"{SPARK_KAFKA_ONLY[key]}"
            )
            continue
        if key.startswith("kafka."):
            problems.append(
                f"{key}: Kafka client settings do not apply to format('oncelog'); its options are "
                f"{', '.join(sorted(known.values(), key=str.lower))}"
            )
            continue
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = (
            f"did you mean {known[close[0]]!r}?"
            if close
            else f"the options are {', '.join(sorted(known.values(), key=str.lower))}"
        )
        problems.append(f"{key}: unknown option; {hint}")
    return problems


_SUBSCRIPTIONS = {
    "topic": "topic",
    "topics": "topics",
    "subscribe": "subscribe",
    "subscribepattern": "subscribePattern",
}


def _subscription(opts: Mapping[str, str], problems: list[str]) -> tuple[tuple[str, ...], str | None]:
    """The subscribed topics, or the ``subscribePattern`` regular expression (then no topics)."""
    given = [name for name in _SUBSCRIPTIONS if name in opts]
    if not given:
        problems.append(
            'topic: not set; name the topic with .option("topic", "orders"), a comma list in "subscribe" (or '
            '"topics"), or a regular expression in "subscribePattern"'
        )
        return (), None
    if len(given) > 1:
        problems.append(f"{'/'.join(_SUBSCRIPTIONS[g] for g in given)}: set only one of them")
        return (), None
    name = _SUBSCRIPTIONS[given[0]]
    raw = opts[given[0]]
    if name == "subscribePattern":
        try:
            re.compile(raw)
        except re.error as exc:
            problems.append(f"subscribePattern: {raw!r} is not a regular expression: {exc}")
            return (), None
        if not raw.strip():
            problems.append("subscribePattern: empty; give a regular expression such as 'orders-.*'")
            return (), None
        return (), raw
    topics = tuple(dict.fromkeys(t.strip() for t in raw.split(",") if t.strip()))
    if not topics:
        problems.append(f"{name}: {raw!r} names no topic")
    elif name == "topic" and len(topics) > 1:
        problems.append(f'topic: {raw!r} names several topics; use the "subscribe" option for a comma list')
    return topics, None


def _start_option(
    opts: Mapping[str, str], subscribed: SourceOptions, problems: list[str], *, default: str
) -> OffsetsSpec:
    given = [n for n in ("startingOffsets", "startingOffsetsByTimestamp", "startingTimestamp") if n.lower() in opts]
    if len(given) > 1:
        problems.append(f"{'/'.join(given)}: set only one of them (each says where reading starts)")
        return OffsetsSpec.earliest()
    strategy = str(opts.get("startingoffsetsbytimestampstrategy", "error")).strip().lower()
    if strategy not in ("error", "latest"):
        problems.append(
            f"startingOffsetsByTimestampStrategy: {strategy!r} is not 'error' (fail when a partition has no record "
            "at or after the timestamp, the default) or 'latest' (start such a partition at its latest offset)"
        )
    if given and given[0] != "startingOffsets":
        return _timestamp_option(
            opts, given[0], subscribed, problems, none_found="latest" if strategy == "latest" else "error"
        )
    return _offsets_option(opts, "startingOffsets", subscribed, problems, default=default, allow_earliest=True)


def _end_option(opts: Mapping[str, str], subscribed: SourceOptions, problems: list[str]) -> OffsetsSpec:
    given = [n for n in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp") if n.lower() in opts]
    if len(given) > 1:
        problems.append(f"{'/'.join(given)}: set only one of them (each says where reading ends)")
        return OffsetsSpec.latest()
    if given and given[0] != "endingOffsets":
        # as in Spark: a partition with no record at or after the timestamp ends at its latest offset
        return _timestamp_option(opts, given[0], subscribed, problems, none_found="latest")
    return _offsets_option(opts, "endingOffsets", subscribed, problems, default="latest", allow_earliest=False)


def _timestamp_option(
    opts: Mapping[str, str], name: str, subscribed: SourceOptions, problems: list[str], *, none_found: str
) -> OffsetsSpec:
    """``startingTimestamp``/``endingTimestamp`` (one timestamp for every partition) or the per-partition JSON."""
    raw = str(opts[name.lower()]).strip()
    start = name.startswith("starting")
    if name.endswith("Timestamp") and not name.endswith("ByTimestamp"):
        try:
            stamp = int(raw)
        except ValueError:
            problems.append(f"{name}: {raw!r} is not a timestamp in milliseconds since the epoch")
            return OffsetsSpec.earliest()
        if stamp < 0:
            problems.append(f"{name}: must be a timestamp in milliseconds since the epoch (>= 0), got {stamp}")
            return OffsetsSpec.earliest()
        return OffsetsSpec(
            "timestamp", {}, EARLIEST if start else LATEST, default_timestamp=stamp, none_found=none_found
        )
    try:
        document = json.loads(raw)
        stamps = offsets_from_json(document, allow_sentinels=False)
    except ValueError as exc:
        problems.append(f'{name}: {exc} (give JSON like {{"orders": {{"0": 1700000000000}}}}, times in ms)')
        return OffsetsSpec.earliest()
    for tp in sorted(stamps):
        if not subscribed.subscribes_to(tp.topic):
            problems.append(f"{name}: topic {tp.topic!r} is not among the subscribed {subscribed.subscription}")
            break
    return OffsetsSpec("timestamp", {}, EARLIEST if start else LATEST, timestamps=stamps, none_found=none_found)


def _offsets_option(
    opts: Mapping[str, str],
    name: str,
    subscribed: SourceOptions,
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
        if not subscribed.subscribes_to(tp.topic):
            problems.append(f"{name}: topic {tp.topic!r} is not among the subscribed {subscribed.subscription}")
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
