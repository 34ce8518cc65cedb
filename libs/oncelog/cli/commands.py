"""Client commands of the ``oncelog`` CLI: topics, produce, consume, transactions, producers and groups.

Every command talks to a running cluster through :mod:`oncelog.client`. ``--bootstrap`` (or
``ONCELOG_BOOTSTRAP``) names any address of the cluster; without it the commands read
``.oncelog/cluster.json``, written by ``oncelog dev``. Data goes to stdout, one record per line, so the
output pipes; progress, tables and errors go to stderr (tables of the describe/list commands go to stdout).
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import grpc
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from oncelog.cli.output import Format, err, error, output_option, print_rows, print_table, stdout_console
from oncelog.client import (
    AbortableError,
    AdminClient,
    Consumer,
    NewTopic,
    OncelogError,
    Producer,
    ProducerFencedError,
    TopicPartition,
)
from oncelog.client.metadata import TopicInfo
from oncelog.client.transport import BOOTSTRAP_ENV, DEFAULT_CLUSTER_FILE, BootstrapError, resolve_bootstrap
from oncelog.errors import Reason

__all__ = ["SETTINGS", "consume", "groups_app", "produce", "producers_app", "topics_app", "transactions_app"]

T = TypeVar("T")

BOOTSTRAP_HELP = f"any cluster address, host:port[,host:port]; default: the one in {DEFAULT_CLUSTER_FILE}"
Bootstrap = typer.Option(None, "--bootstrap", "-b", envvar=BOOTSTRAP_ENV, help=BOOTSTRAP_HELP)

topics_app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)
transactions_app = typer.Typer(
    help="List, describe and abort transactions (hanging-transaction tooling, KIP-664).", no_args_is_help=True
)
producers_app = typer.Typer(help="Inspect producer state on partitions.", no_args_is_help=True)
groups_app = typer.Typer(help="Inspect consumer group offsets.", no_args_is_help=True)

# a connection attempt gets at most this long, so a wrong address fails in seconds, not at the request timeout
CONNECT_TIMEOUT_S = 5.0


@dataclass
class Settings:
    """Options of the ``oncelog`` command itself, set before any subcommand runs."""

    timeout_s: float = 30.0
    """Bound of every network step: connecting, each request, each record's delivery (``--timeout``)."""

    @property
    def timeout_ms(self) -> int:
        """``timeout_s`` in whole milliseconds (at least one)."""
        return max(int(self.timeout_s * 1000), 1)

    @property
    def request_timeout_ms(self) -> int:
        """One request's bound: the timeout, at most 30 s (retries then fit in the rest)."""
        return min(self.timeout_ms, 30_000)


SETTINGS = Settings()


class CommandFailed(Exception):
    """A failure the command explains in one line (exit code 1)."""


def _caused_by_fencing(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, ProducerFencedError) or getattr(exc, "reason", None) is Reason.PRODUCER_FENCED:
            return True
        exc = getattr(exc, "cause", None)
    return False


@contextmanager
def _errors() -> Iterator[None]:
    """Turn a library error into one line on stderr and exit code 1 (no traceback for expected failures)."""
    try:
        yield
    except CommandFailed as exc:
        error(str(exc))
        raise typer.Exit(1) from None
    except OncelogError as exc:
        message = exc.message
        if "did not complete in time" in message or "expired after" in message:
            message += f" (oncelog --timeout is {SETTINGS.timeout_s:g} s)"
        error(message)
        raise typer.Exit(1) from None
    except ValueError as exc:
        error(str(exc))
        raise typer.Exit(2) from None


def _probe(address: str, timeout_s: float) -> str | None:
    """None when ``address`` accepts a gRPC connection within ``timeout_s``, else what went wrong."""
    settled = threading.Event()
    states: list[grpc.ChannelConnectivity] = []

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
            states.append(state)
            settled.set()

    channel = grpc.insecure_channel(address)
    channel.subscribe(watch, try_to_connect=True)
    try:
        if not settled.wait(timeout_s):
            return f"no answer within {timeout_s:g} s"
        return None if states[0] is grpc.ChannelConnectivity.READY else "connection refused or host unreachable"
    finally:
        channel.unsubscribe(watch)
        channel.close()


def _bootstrap(bootstrap: str | None) -> tuple[str, ...]:
    """The cluster's addresses, checked to answer within seconds; otherwise one line saying what to check."""
    if bootstrap is None and not DEFAULT_CLUSTER_FILE.exists():
        raise CommandFailed(
            f"no --bootstrap given and {DEFAULT_CLUSTER_FILE} does not exist: start a local cluster with "
            f"`oncelog dev` in this directory, or pass --bootstrap host:port (or set {BOOTSTRAP_ENV})"
        )
    try:
        addresses = resolve_bootstrap(bootstrap)
    except BootstrapError as exc:
        raise CommandFailed(exc.message) from None
    wait_s = min(SETTINGS.timeout_s, CONNECT_TIMEOUT_S)
    problems = []
    for address in addresses:
        problem = _probe(address, wait_s)
        if problem is None:
            return addresses
        problems.append(f"{address}: {problem}")
    source = "--bootstrap" if bootstrap is not None else str(DEFAULT_CLUSTER_FILE)
    raise CommandFailed(
        f"cannot reach the cluster ({'; '.join(problems)}); check that the cluster is running (`oncelog dev`, "
        f"or the services' pods) and that {source} (or {BOOTSTRAP_ENV}) names one of its addresses"
    )


def _admin(addresses: tuple[str, ...]) -> AdminClient:
    return AdminClient(addresses, request_timeout_ms=SETTINGS.timeout_ms)


def _with_admin(bootstrap: str | None, action: Callable[[AdminClient], T]) -> T:
    with _errors(), _admin(_bootstrap(bootstrap)) as admin:
        return action(admin)


def _offline(topic: TopicInfo, partitions: Iterable[int] | None = None) -> list[str]:
    wanted = None if partitions is None else set(partitions)
    return [
        f"{topic.name}-{p.partition} (leader {p.leader_node_id or 'none'})"
        for p in topic.partitions
        if not p.leader_address and (wanted is None or p.partition in wanted)
    ]


def _require_online(admin: AdminClient, topic: str, partitions: Iterable[int] | None = None) -> TopicInfo:
    """The topic's description; fails naming every wanted partition whose leader is not live."""
    info = admin.describe_topics([topic])[topic]
    offline = _offline(info, partitions)
    if offline:
        raise CommandFailed(
            f"{'partition' if len(offline) == 1 else 'partitions'} {', '.join(offline)} "
            f"{'is' if len(offline) == 1 else 'are'} offline: the leading storage node is not live; start it "
            f"again, and see `oncelog topics describe {topic}`"
        )
    return info


def _ms_to_text(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


# Kafka's dotted topic config names, accepted as aliases of oncelog's (kafka-topics --config retention.ms=...)
KAFKA_CONFIG_ALIASES = {
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.ms": "segment_ms",
    "segment.bytes": "segment_bytes",
    "max.message.bytes": "max_message_bytes",
}


def _pairs(items: list[str], option: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not key=value", param_hint=option)
        pairs.append((key, value))
    return pairs


def _parse_configs(items: list[str]) -> dict[str, str]:
    return {KAFKA_CONFIG_ALIASES.get(key, key): value for key, value in _pairs(items, "--config")}


# ------------------------------------------------------------------------------------------------ topics


@topics_app.command("create")
def topics_create(
    name: str = typer.Argument(..., help="topic name: letters, digits, '.', '_' and '-'"),
    partitions: int = typer.Option(1, "--partitions", "-p", min=1, help="partition count"),
    config: list[str] = typer.Option(
        [], "--config", "-c", help="topic setting key=value (repeatable); Kafka's dotted names (retention.ms) work too"
    ),
    replication_factor: int | None = typer.Option(
        None,
        "--replication-factor",
        "-r",
        help="copies of each partition, 1 to the number of storage nodes; default: the cluster's default",
    ),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Create a topic.

    Example: oncelog topics create orders --partitions 3 --replication-factor 3 --config flush=async
    """
    configs = _parse_configs(config)
    spec = NewTopic(name, num_partitions=partitions, configs=configs, replication_factor=replication_factor)
    created = _with_admin(bootstrap, lambda admin: admin.create_topics([spec]))
    for topic in created:
        copies = len(topic.partitions[0].replicas) if topic.partitions else 0
        typer.echo(
            f"created topic {topic.name} with {len(topic.partitions)} partition(s), replication factor {copies} "
            f"(id {topic.topic_id})"
        )


@topics_app.command("list")
def topics_list(bootstrap: str | None = Bootstrap, output: Format = output_option(Format.PLAIN)) -> None:
    """List topic names, one per line.

    Example: oncelog topics list
    """
    names = _with_admin(bootstrap, lambda admin: admin.list_topics())
    print_rows([(name,) for name in names], ["topic"], output, title="topics")


_PARTITION_COLUMNS = ["partition", "leader", "address", "leader epoch", "log start", "high watermark", "last stable"]


def _partition_rows(admin: AdminClient, topic: TopicInfo) -> list[tuple[Any, ...]]:
    """One row per partition; offsets of offline partitions are unknown (None)."""
    online = [TopicPartition(topic.name, p.partition) for p in topic.partitions if p.leader_address]
    offsets: dict[str, dict[TopicPartition, tuple[int, int]]] = {}
    if online:
        offsets["start"] = admin.list_offsets(dict.fromkeys(online, "earliest"))
        offsets["hw"] = admin.list_offsets(dict.fromkeys(online, "latest"))
        offsets["lso"] = admin.list_offsets(dict.fromkeys(online, "latest"), isolation_level="read_committed")
    rows = []
    for p in topic.partitions:
        tp = TopicPartition(topic.name, p.partition)
        known = [offsets[k][tp][0] if tp in offsets.get(k, {}) else None for k in ("start", "hw", "lso")]
        rows.append((p.partition, p.leader_node_id, p.leader_address or "OFFLINE", p.leader_epoch, *known))
    return rows


@topics_app.command("describe")
def topics_describe(
    names: list[str] = typer.Argument(None, help="topics to describe; default all"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show partitions, leaders, leader epochs, replicas (preferred leader first), in-sync replicas, log start,
    high watermark, last stable offset and configs.

    An offline partition (its leader is not live) shows OFFLINE as its address.

    Example: oncelog topics describe orders
    """

    def describe(admin: AdminClient) -> list[tuple[TopicInfo, list[tuple[Any, ...]]]]:
        return [(t, _partition_rows(admin, t)) for t in admin.describe_topics(names or None).values()]

    described = _with_admin(bootstrap, describe)
    if output is Format.JSON:
        keys = [c.replace(" ", "_") for c in _PARTITION_COLUMNS]
        document = [
            {
                "topic": t.name,
                "topic_id": t.topic_id,
                "configs": dict(sorted(t.configs.items())),
                "partitions": [
                    {**dict(zip(keys, row, strict=True)), "replicas": list(p.replicas), "in_sync": list(p.isr)}
                    for p, row in zip(t.partitions, rows, strict=True)
                ],
            }
            for t, rows in described
        ]
        typer.echo(json.dumps(document))
        return
    for topic, rows in described:
        if output is Format.PLAIN:
            print_rows([(topic.name, *row) for row in rows], ["topic", *_PARTITION_COLUMNS], output)
            continue
        print_rows(rows, _PARTITION_COLUMNS, output, title=f"{topic.name}  ({topic.topic_id})")
        if any(len(p.replicas) > 1 for p in topic.partitions):
            print_table(replica_table(topic), "replicas (preferred leader first)")
        stdout_console().print(Text("configs: " + ", ".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))))


def replica_table(topic: TopicInfo) -> Table:
    """Replicas and in-sync replicas per partition; an ISR smaller than the replica list is highlighted."""
    table = Table()
    table.add_column("partition", justify="right")
    table.add_column("replicas")
    table.add_column("in sync")
    for p in topic.partitions:
        isr = "\n".join(p.isr)
        complete = set(p.isr) == set(p.replicas)
        table.add_row(
            str(p.partition),
            Text("\n".join(p.replicas)),
            Text(isr) if complete else Text(isr or "(none)", style="yellow"),
        )
    return table


@topics_app.command("delete")
def topics_delete(
    names: list[str] = typer.Argument(..., help="topics to delete"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Delete topics and their data.

    Example: oncelog topics delete orders scratch
    """
    for name in _with_admin(bootstrap, lambda admin: admin.delete_topics(names)):
        typer.echo(f"deleted topic {name}")


# ------------------------------------------------------------------------------------------------ produce


def _lines(file: Path | None) -> Iterator[bytes]:
    """Input lines as bytes, line ending removed: any encoding (or none) goes through unchanged."""
    if file is None:
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\r\n")
        return
    with file.open("rb") as handle:
        for line in handle:
            yield line.rstrip(b"\r\n")


# --producer-property: Kafka's names (and the library's) -> Producer keyword and value parser
PRODUCER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "acks": ("acks", str),
    "compression.type": ("compression", lambda v: None if v == "none" else v),
    "max.request.size": ("max_request_size", int),
    "linger.ms": ("linger_ms", int),
    "batch.size": ("batch_size", int),
    "enable.idempotence": ("enable_idempotence", lambda v: {"true": True, "false": False}[v.lower()]),
    "transaction.timeout.ms": ("transaction_timeout_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight", int),
}


def _producer_properties(items: list[str]) -> dict[str, Any]:
    """``--producer-property`` values as Producer keywords; an unknown name or a bad value is a usage error."""
    by_keyword = {keyword: (keyword, parse) for keyword, parse in PRODUCER_PROPERTIES.values()}
    known = {**PRODUCER_PROPERTIES, **by_keyword}
    properties = {}
    for name, raw in _pairs(items, "--producer-property"):
        if name not in known:
            raise typer.BadParameter(
                f"unknown producer property {name!r}; use one of {', '.join(PRODUCER_PROPERTIES)}",
                param_hint="--producer-property",
            )
        keyword, parse = known[name]
        try:
            properties[keyword] = parse(raw)
        except (ValueError, KeyError):
            raise typer.BadParameter(f"{name}={raw!r} does not parse", param_hint="--producer-property") from None
    return properties


def _b64(data: bytes | None, line: int) -> bytes | None:
    if data is None:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error:
        raise CommandFailed(f"line {line} is not base64 ({data[:40]!r}); nothing after it was sent") from None


def _fenced_message(transactional_id: str | None, committed: int) -> str:
    return (
        f"producer fenced: another producer started with transactional id {transactional_id!r}, or an operator "
        f"aborted its transaction (`oncelog transactions abort`); this one stopped. The open transaction is not "
        f"committed; {committed} record(s) were committed before. Produce the rest again with a new run."
    )


def produce(
    topic: str = typer.Argument(..., help="topic to write to"),
    file: Path | None = typer.Option(None, "--file", "-f", exists=True, dir_okay=False, help="read lines from FILE"),
    key_separator: str | None = typer.Option(
        None, "--key-separator", "-k", help="split each line at the first SEP into key and value"
    ),
    transactional_id: str | None = typer.Option(
        None, "--transactional-id", "-t", help="write in transactions with this transactional id"
    ),
    transaction_size: int = typer.Option(
        0, "--transaction-size", min=0, help="records per transaction with --transactional-id; 0: one transaction"
    ),
    partition: int | None = typer.Option(None, "--partition", "-p", min=0, help="write every record to this partition"),
    linger_ms: int = typer.Option(5, "--linger-ms", min=0, help="batching delay"),
    header: list[str] = typer.Option([], "--header", "-H", help="NAME=VALUE header on every record (repeatable)"),
    producer_property: list[str] = typer.Option(
        [], "--producer-property", "-X", help="Kafka producer setting NAME=VALUE (acks, compression.type, ...)"
    ),
    base64_input: bool = typer.Option(
        False, "--base64", help="each line (and key) is base64: send the decoded bytes (binary records)"
    ),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Write each line of stdin (or --file) as one record, then print the rate.

    Lines are sent as the bytes they are (any encoding). Records are acknowledged exactly once
    (idempotent producer); with --transactional-id they become visible to read_committed consumers
    only when their transaction commits. Ctrl-C aborts the open transaction.

    Example: seq 1 1000 | oncelog produce orders --transactional-id loader-1 --transaction-size 100
    """
    if transaction_size and not transactional_id:
        raise typer.BadParameter(
            "--transaction-size needs --transactional-id (-t); without one, records are not written in transactions",
            param_hint="--transaction-size",
        )
    total = None
    if file is not None:
        with file.open("rb") as handle:
            total = sum(1 for _ in handle)
    sent = failed = committed = 0
    first_failure: list[BaseException] = []
    separator = None if key_separator is None else key_separator.encode()
    headers = [(name, value.encode()) for name, value in _pairs(header, "--header")]
    properties = {"linger_ms": linger_ms, **_producer_properties(producer_property)}
    started = time.monotonic()
    with _errors():
        addresses = _bootstrap(bootstrap)
        producer = Producer(  # a bad setting is refused before anything is asked of the cluster
            addresses,
            transactional_id=transactional_id,
            **properties,
            max_block_ms=SETTINGS.timeout_ms,
            request_timeout_ms=SETTINGS.request_timeout_ms,
            delivery_timeout_ms=SETTINGS.timeout_ms,
        )
        try:
            with _admin(addresses) as admin:
                _require_online(admin, topic, None if partition is None else [partition])
        except BaseException:
            producer.close()
            raise
    in_transaction = 0
    try:
        with _errors(), producer:
            if transactional_id:
                producer.init_transactions()
                producer.begin_transaction()
            with Progress(
                SpinnerColumn(),
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err(),
                transient=True,
                disable=not sys.stderr.isatty(),  # a log file gets the summary line, not a bar's remains
            ) as progress:
                task = progress.add_task(f"producing to {topic}", total=total)

                def acknowledged(future: Any) -> None:
                    nonlocal failed
                    if future.exception() is not None:
                        failed += 1
                        first_failure[:] = first_failure or [future.exception()]

                try:
                    for line in _lines(file):
                        key: bytes | None = None
                        value: bytes | None = line
                        if separator is not None and separator in line:
                            key, _, value = line.partition(separator)
                        if base64_input:
                            key, value = _b64(key, sent + 1), _b64(value, sent + 1)
                        sent_future = producer.send(topic, value, key=key, partition=partition, headers=headers or None)
                        sent_future.add_done_callback(acknowledged)
                        sent += 1
                        in_transaction += 1
                        progress.advance(task)
                        if transactional_id and transaction_size and in_transaction >= transaction_size:
                            producer.commit_transaction()
                            committed += in_transaction
                            producer.begin_transaction()
                            in_transaction = 0
                    if transactional_id:
                        producer.commit_transaction()
                        committed += in_transaction
                        in_transaction = 0
                    else:
                        producer.flush()
                except KeyboardInterrupt:
                    _interrupted(producer, transactional_id, sent, committed, in_transaction)
                except AbortableError as exc:
                    _abort_failed_transaction(producer, transactional_id, exc, committed)
                except OncelogError as exc:
                    if _caused_by_fencing(exc):
                        raise CommandFailed(_fenced_message(transactional_id, committed)) from None
                    raise
    except KeyboardInterrupt:  # a second Ctrl-C while closing
        raise typer.Exit(130) from None
    elapsed = max(time.monotonic() - started, 1e-9)
    if failed:
        cause = first_failure[0] if first_failure else None
        reason = getattr(cause, "message", str(cause)) if cause is not None else "unknown"
        error(f"{failed} of {sent} record(s) failed; first error: {reason}")
        raise typer.Exit(1)
    err().print(Text(f"produced {sent} record(s) to {topic} in {elapsed:.2f} s ({sent / elapsed:,.0f} records/s)"))


def _abort_failed_transaction(
    producer: Producer, transactional_id: str | None, failure: AbortableError, committed: int
) -> None:
    """The open transaction cannot commit: abort it, then say why in one line (fencing has its own message)."""
    reason = failure.cause.message if failure.cause is not None else failure.message
    try:
        producer.abort_transaction()
    except OncelogError as exc:
        if _caused_by_fencing(exc):
            raise CommandFailed(_fenced_message(transactional_id, committed)) from None
        raise CommandFailed(f"the transaction failed ({reason}) and could not be aborted ({exc.message})") from None
    raise CommandFailed(
        f"the transaction failed and was aborted: {reason}; {committed} record(s) were committed before"
    )


def _interrupted(producer: Producer, transactional_id: str | None, sent: int, committed: int, open_count: int) -> None:
    """Ctrl-C during produce: abort the open transaction (or flush), say what happened, exit 130."""
    if transactional_id:
        try:
            producer.abort_transaction()
            outcome = f"aborted the open transaction ({open_count} record(s) discarded)"
        except OncelogError as exc:
            outcome = f"could not abort the open transaction ({exc.message}); it aborts at its timeout"
        error(f"interrupted: {outcome}; {committed} record(s) were committed before")
    else:
        producer.flush()
        error(f"interrupted: {sent} record(s) were produced")
    raise typer.Exit(130)


# ------------------------------------------------------------------------------------------------ consume


def consume(
    topics: list[str] = typer.Argument(..., help="topics to read (one or more)"),
    isolation: str = typer.Option(
        "read_committed", "--isolation", "-i", help="read_committed (committed data only) or read_uncommitted"
    ),
    from_beginning: bool = typer.Option(
        False, "--from-beginning", help="start at the log start (with --group: when the group has no offset)"
    ),
    group: str | None = typer.Option(None, "--group", "-g", help="read as this group: start at and commit its offsets"),
    max_messages: int | None = typer.Option(None, "--max-messages", "-n", min=1, help="stop after N records"),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0, help="stop after this many seconds without a record; default: run until Ctrl-C"
    ),
    print_key: bool = typer.Option(False, "--print-key", help="print key<TAB>value"),
    print_offset: bool = typer.Option(False, "--print-offset", help="prefix each line with partition:offset"),
    print_headers: bool = typer.Option(False, "--print-headers", help="print name=value,... of each record first"),
    commit_interval_ms: int = typer.Option(
        5_000, "--commit-interval-ms", min=0, help="with --group: commit the positions this often (and at the end)"
    ),
    partition: list[int] = typer.Option([], "--partition", "-p", min=0, help="read only this partition (repeatable)"),
    offset: int | None = typer.Option(None, "--offset", min=0, help="start at this offset (needs --partition)"),
    from_timestamp: int | None = typer.Option(
        None, "--from-timestamp", min=0, help="start at the first record at or after this time (ms since the epoch)"
    ),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Print records of one or more topics, one value per line.

    Fails at once, naming them, when partitions of a topic are offline (and later, if one goes offline
    while waiting for records). With --group, positions are committed every --commit-interval-ms and at the end.

    Example: oncelog consume orders --from-beginning --isolation read_committed --max-messages 10
    """
    if isolation not in ("read_committed", "read_uncommitted"):
        raise typer.BadParameter("use read_committed or read_uncommitted", param_hint="--isolation")
    if offset is not None and not partition:
        raise typer.BadParameter("--offset needs --partition: offsets are per partition", param_hint="--offset")
    if group and (partition or offset is not None or from_timestamp is not None):
        raise typer.BadParameter(
            "--group reads from the group's committed offsets; drop --partition/--offset/--from-timestamp",
            param_hint="--group",
        )
    if partition and len(topics) > 1:
        raise typer.BadParameter("--partition needs a single topic", param_hint="--partition")
    starts = sum(x for x in (offset is not None, from_timestamp is not None, from_beginning))
    if starts > 1:
        raise typer.BadParameter("choose one of --offset, --from-timestamp and --from-beginning", param_hint="--offset")
    count = 0
    with _errors():
        addresses = _bootstrap(bootstrap)
        admin = _admin(addresses)
    with (
        _errors(),
        admin,
        Consumer(
            addresses,
            group_id=group,
            isolation_level=isolation,
            auto_offset_reset="earliest" if from_beginning else "latest",
            request_timeout_ms=SETTINGS.request_timeout_ms,
            default_api_timeout_ms=SETTINGS.timeout_ms,
        ) as consumer,
    ):
        infos = [_require_online(admin, topic, partition or None) for topic in topics]
        if group:
            consumer.subscribe(topics)
        else:
            _position(admin, consumer, infos, partition, offset, from_timestamp, from_beginning)
        last_record = last_check = last_commit = time.monotonic()
        try:
            while max_messages is None or count < max_messages:
                left = None if max_messages is None else max_messages - count
                records = consumer.poll(timeout_ms=200, max_records=left)
                for record in records:
                    value = "" if record.value is None else record.value.decode("utf-8", errors="replace")
                    where = f"{record.topic}:" if len(topics) > 1 else ""
                    prefix = f"{where}{record.partition}:{record.offset}\t" if print_offset else ""
                    if print_key:
                        key = "" if record.key is None else record.key.decode("utf-8", errors="replace")
                        value = f"{key}\t{value}"
                    if print_headers:
                        prefix += _headers_text(record.headers) + "\t"
                    typer.echo(f"{prefix}{value}")  # plain text, tabs kept: the output is meant for pipes
                count += len(records)
                now = time.monotonic()
                if group and records and now - last_commit >= commit_interval_ms / 1000:
                    consumer.commit()  # what was printed is committed, so a killed run resumes near here
                    last_commit = now
                if records:
                    last_record = last_check = now
                elif timeout is not None and now - last_record >= timeout:
                    break
                elif now - last_check >= CONNECT_TIMEOUT_S:  # idle: make sure it is not a partition gone offline
                    last_check = now
                    for topic in topics:
                        _require_online(admin, topic)
        except KeyboardInterrupt:
            pass
        if group:
            consumer.commit()
    err().print(Text(f"consumed {count} record(s) from {', '.join(topics)}"))


def _headers_text(headers: tuple[tuple[str, bytes | None], ...]) -> str:
    shown = (f"{name}={'' if value is None else value.decode('utf-8', errors='replace')}" for name, value in headers)
    return ",".join(shown) or "-"


def _position(
    admin: AdminClient,
    consumer: Consumer,
    topics: list[TopicInfo],
    partitions: list[int],
    offset: int | None,
    from_timestamp: int | None,
    from_beginning: bool,
) -> None:
    """Assign the chosen partitions (default all of every topic) and seek where the options say (default: the end)."""
    tps = []
    for topic in topics:
        known = {p.partition for p in topic.partitions}
        unknown = sorted(set(partitions) - known)
        if unknown:
            raise CommandFailed(f"{topic.name} has no partition {unknown[0]}; it has partitions 0-{max(known)}")
        tps += [TopicPartition(topic.name, p) for p in (partitions or sorted(known))]
    consumer.assign(tps)
    if offset is not None:
        for tp in tps:
            consumer.seek(tp, offset)
    elif from_timestamp is not None:
        found = admin.list_offsets(dict.fromkeys(tps, from_timestamp))
        for tp in tps:
            at, _ = found[tp]
            if at < 0:  # no record that late: wait for new ones
                consumer.seek_to_end([tp])
            else:
                consumer.seek(tp, at)
    elif from_beginning:
        consumer.seek_to_beginning(tps)
    else:
        consumer.seek_to_end(tps)


# ------------------------------------------------------------------------------------------------ transactions


@transactions_app.command("list")
def transactions_list(
    state: list[str] = typer.Option([], "--state", "-s", help="keep this state (ongoing, prepare_commit, ...)"),
    older_than_ms: int = typer.Option(0, "--older-than-ms", min=0, help="keep open transactions older than this"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """List transactional ids with their state and producer id.

    Example: oncelog transactions list --state ongoing --older-than-ms 60000
    """
    listed = _with_admin(
        bootstrap, lambda admin: admin.list_transactions(states=state or None, older_than_ms=older_than_ms or None)
    )
    rows = [(t.transactional_id, t.producer_id, t.state, _ms_to_text(t.transaction_start_time_ms)) for t in listed]
    print_rows(rows, ["transactional id", "producer id", "state", "started"], output, title="transactions")


@transactions_app.command("describe")
def transactions_describe(
    transactional_ids: list[str] = typer.Argument(..., help="transactional ids"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show the coordinator's view of transactional ids: state, producer, partitions, groups.

    Example: oncelog transactions describe copier-0
    """
    described = _with_admin(bootstrap, lambda admin: admin.describe_transactions(transactional_ids))
    columns = ["transactional id", "state", "producer id", "producer epoch", "timeout ms", "started", "partitions"]
    columns += ["groups", "coordinator", "coordinator epoch", "last update"]
    rows = [
        (
            d.transactional_id,
            d.state,
            d.producer_id,
            d.producer_epoch,
            d.transaction_timeout_ms,
            _ms_to_text(d.transaction_start_time_ms),
            ", ".join(map(str, d.partitions)) or "-",
            ", ".join(d.groups) or "-",
            d.coordinator_node_id,
            d.coordinator_epoch,
            _ms_to_text(d.last_update_time_ms),
        )
        for d in described.values()
    ]
    if output is not Format.TABLE:
        print_rows(rows, columns, output)
        return
    for row in rows:  # one two-column table per id: field, value
        table = Table(show_header=False)
        table.add_column("field")
        table.add_column("value")
        for column, value in zip(columns[1:], row[1:], strict=True):
            table.add_row(Text(column), Text(str(value)))
        print_table(table, str(row[0]))


_OPEN_STATES = ("ongoing", "prepare_commit", "prepare_abort", "prepare_epoch_fence")


@transactions_app.command("abort")
def transactions_abort(
    transactional_id: str = typer.Argument(..., help="transactional id whose open transaction to abort"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Abort an open (hanging) transaction; its producer instance is fenced.

    Without an open transaction nothing happens, and the command says so (exit code 0).

    Example: oncelog transactions abort copier-0
    """

    def abort(admin: AdminClient) -> str:
        state = admin.describe_transactions([transactional_id])[transactional_id].state
        if state not in _OPEN_STATES:
            return f"transactional id {transactional_id} has no open transaction (state {state}); nothing was aborted"
        producer_id, epoch = admin.abort_transaction(transactional_id)
        return f"aborted the transaction of {transactional_id}; producer id {producer_id} is fenced at epoch {epoch}"

    typer.echo(_with_admin(bootstrap, abort))


@transactions_app.command("skip-markers")
def transactions_skip_markers(
    transactional_id: str = typer.Argument(..., help="transactional id of a transaction stuck completing"),
    partition: list[str] = typer.Option(
        [], "--partition", "-p", help="TOPIC:PARTITION whose marker to give up on (repeatable)"
    ),
    group: list[str] = typer.Option([], "--group", "-g", help="group whose marker to give up on (repeatable)"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Give up on markers that a participant will never accept, so a transaction stuck completing finishes.

    A last resort: the named participants never get this transaction's marker. Find the stuck participant with
    `oncelog transactions describe` and the coordinator's log first.

    Example: oncelog transactions skip-markers copier-0 -p orders:3
    """
    partitions = [_parse_topic_partition(text) for text in partition]
    if not partitions and not group:
        raise typer.BadParameter("name at least one --partition TOPIC:PARTITION or --group GROUP to skip")

    def skip(admin: AdminClient) -> str:
        skipped_partitions, skipped_groups = admin.skip_transaction_markers(transactional_id, partitions, group)
        names = [f"{tp.topic}:{tp.partition}" for tp in skipped_partitions] + [f"group {g}" for g in skipped_groups]
        if not names:
            return f"every named participant of {transactional_id} had acknowledged its marker; nothing was skipped"
        return f"skipped the markers of {transactional_id} for " + ", ".join(names)

    typer.echo(_with_admin(bootstrap, skip))


def _parse_topic_partition(text: str) -> TopicPartition:
    topic, sep, number = text.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise typer.BadParameter(f"{text!r} is not TOPIC:PARTITION (for example orders:3)", param_hint="--partition")
    return TopicPartition(topic, int(number))


@transactions_app.command("find-hanging")
def transactions_find_hanging(
    topic: str = typer.Argument(..., help="topic whose partitions to inspect"),
    partition: list[int] = typer.Option([], "--partition", "-p", help="partition (repeatable); default all"),
    max_transaction_timeout_ms: int = typer.Option(
        900_000,
        "--max-transaction-timeout-ms",
        min=0,
        help="a transaction open longer than this is hanging (the largest timeout producers use; Kafka: 15 min)",
    ),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """List open transactions on a topic's partitions that hold the last stable offset back (KIP-664).

    A transaction is hanging when its coordinator knows no open transaction of that producer id (a marker was
    lost), or when it has been open longer than --max-transaction-timeout-ms. Abort one with
    `oncelog transactions abort <transactional id>`.

    Example: oncelog transactions find-hanging orders --max-transaction-timeout-ms 600000
    """

    def find(admin: AdminClient) -> list[tuple[Any, ...]]:
        partitions = partition or [p.partition for p in admin.describe_topics([topic])[topic].partitions]
        described = admin.describe_producers([TopicPartition(topic, p) for p in partitions])
        coordinated = {t.producer_id: t for t in admin.list_transactions() if t.state in _OPEN_STATES}
        now_ms = int(time.time() * 1000)
        rows = []
        for tp, producers in sorted(described.items()):
            for p in producers:
                if p.current_transaction_start_offset is None:
                    continue
                listing = coordinated.get(p.producer_id)
                started = listing.transaction_start_time_ms if listing else p.last_timestamp_ms
                if listing is None:
                    why = "its coordinator has no open transaction for this producer id"
                elif now_ms - started > max_transaction_timeout_ms:
                    why = f"open longer than {max_transaction_timeout_ms} ms"
                else:
                    continue
                tid = listing.transactional_id if listing else None
                rows.append(
                    (tp.partition, p.producer_id, p.producer_epoch, tid, p.current_transaction_start_offset, why)
                )
        return rows

    rows = _with_admin(bootstrap, find)
    columns = ["partition", "producer id", "epoch", "transactional id", "start offset", "why"]
    print_rows(rows, columns, output, title=f"hanging transactions on {topic}", extra={"topic": topic})


# ------------------------------------------------------------------------------------------------ producers, groups


@producers_app.command("describe")
def producers_describe(
    topic: str = typer.Argument(..., help="topic"),
    partition: list[int] = typer.Option([], "--partition", "-p", help="partition (repeatable); default all"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show each partition's producers: epoch, last sequence, open transaction start.

    Example: oncelog producers describe orders --partition 0
    """

    def describe(admin: AdminClient) -> dict[TopicPartition, Any]:
        partitions = partition or [p.partition for p in admin.describe_topics([topic])[topic].partitions]
        return admin.describe_producers([TopicPartition(topic, p) for p in partitions])

    described = _with_admin(bootstrap, describe)
    columns = ["partition", "producer id", "epoch", "last sequence", "last write", "coordinator epoch", "open txn"]
    rows = [
        (
            tp.partition,
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            _ms_to_text(p.last_timestamp_ms),
            p.coordinator_epoch,
            "-" if p.current_transaction_start_offset is None else f"from {p.current_transaction_start_offset}",
        )
        for tp, producers in sorted(described.items())
        for p in producers
    ]
    print_rows(rows, columns, output, title=f"producers of {topic}")


@groups_app.command("offsets")
def groups_offsets(
    group: str = typer.Argument(..., help="consumer group id"),
    stable: bool = typer.Option(False, "--stable", help="wait while a transactional commit is pending"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show a group's committed offsets.

    Example: oncelog groups offsets billing --stable
    """
    offsets = _with_admin(bootstrap, lambda admin: admin.list_group_offsets(group, require_stable=stable))
    rows = [(tp.topic, tp.partition, om.offset, om.metadata or "") for tp, om in sorted(offsets.items())]
    print_rows(rows, ["topic", "partition", "offset", "metadata"], output, title=f"offsets of group {group}")
