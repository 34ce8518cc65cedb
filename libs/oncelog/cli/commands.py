"""Client commands of the ``oncelog`` CLI: topics, produce, consume, transactions, producers and groups.

Every command talks to a running cluster through :mod:`oncelog.client`. ``--bootstrap`` (or
``ONCELOG_BOOTSTRAP``) names any address of the cluster; without it the commands read
``.oncelog/cluster.json``, written by ``oncelog dev``. Data goes to stdout, one record per line, so the
output pipes; progress, tables and errors go to stderr (tables of the describe/list commands go to stdout).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from oncelog.client import (
    AdminClient,
    Consumer,
    NewTopic,
    OncelogError,
    Producer,
    TopicInfo,
    TopicPartition,
)
from oncelog.client.transport import DEFAULT_CLUSTER_FILE

__all__ = ["consume", "groups_app", "produce", "producers_app", "topics_app", "transactions_app"]

T = TypeVar("T")

out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, emoji=False)

BOOTSTRAP_HELP = f"any cluster address, host:port[,host:port]; default: the one in {DEFAULT_CLUSTER_FILE}"
Bootstrap = typer.Option(None, "--bootstrap", "-b", envvar="ONCELOG_BOOTSTRAP", help=BOOTSTRAP_HELP)

topics_app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)
transactions_app = typer.Typer(
    help="List, describe and abort transactions (hanging-transaction tooling, KIP-664).", no_args_is_help=True
)
producers_app = typer.Typer(help="Inspect producer state on partitions.", no_args_is_help=True)
groups_app = typer.Typer(help="Inspect consumer group offsets.", no_args_is_help=True)


@contextmanager
def _errors() -> Iterator[None]:
    """Turn a library error into one red line and exit code 1 (no traceback for expected failures)."""
    try:
        yield
    except OncelogError as exc:
        err.print(f"[red]error:[/red] {exc.message}", markup=True)
        raise typer.Exit(1) from None
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


def _bootstrap(bootstrap: str | None) -> str | None:
    """``bootstrap`` as given; without it, stop early with the fix when there is no local cluster file."""
    if bootstrap is None and not DEFAULT_CLUSTER_FILE.exists():
        err.print(
            f"[red]error:[/red] no --bootstrap given and {DEFAULT_CLUSTER_FILE} does not exist: start a local "
            "cluster with `oncelog dev` in this directory, or pass --bootstrap host:port (or set ONCELOG_BOOTSTRAP)"
        )
        raise typer.Exit(1)
    return bootstrap


def _with_admin(bootstrap: str | None, action: Callable[[AdminClient], T]) -> T:
    with _errors(), AdminClient(_bootstrap(bootstrap)) as admin:
        return action(admin)


def _ms_to_text(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def _parse_configs(items: list[str]) -> dict[str, str]:
    configs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not key=value", param_hint="--config")
        configs[key] = value
    return configs


# ------------------------------------------------------------------------------------------------ topics


@topics_app.command("create")
def topics_create(
    name: str = typer.Argument(..., help="topic name: letters, digits, '.', '_' and '-'"),
    partitions: int = typer.Option(1, "--partitions", "-p", min=1, help="partition count"),
    config: list[str] = typer.Option([], "--config", "-c", help="topic setting key=value (repeatable)"),
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
        out.print(
            f"created topic {topic.name} with {len(topic.partitions)} partition(s), replication factor {copies} "
            f"(id {topic.topic_id})"
        )


@topics_app.command("list")
def topics_list(bootstrap: str | None = Bootstrap) -> None:
    """List topic names, one per line.

    Example: oncelog topics list
    """
    for name in _with_admin(bootstrap, lambda admin: admin.list_topics()):
        out.print(name)


@topics_app.command("describe")
def topics_describe(
    names: list[str] = typer.Argument(None, help="topics to describe; default all"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Show partitions, leaders, leader epochs, replicas, in-sync replicas and configs.

    Example: oncelog topics describe orders
    """
    topics = _with_admin(bootstrap, lambda admin: admin.describe_topics(names or None))
    for topic in topics.values():
        table = Table(title=f"{topic.name}  ({topic.topic_id})", title_justify="left")
        table.add_column("partition", justify="right")
        table.add_column("leader")
        table.add_column("address")
        table.add_column("leader epoch", justify="right")
        for p in topic.partitions:
            table.add_row(
                str(p.partition), p.leader_node_id, p.leader_address or "[red]offline[/red]", str(p.leader_epoch)
            )
        out.print(table)
        if any(len(p.replicas) > 1 for p in topic.partitions):
            out.print(replica_table(topic))
        out.print("configs: " + ", ".join(f"{k}={v}" for k, v in sorted(topic.configs.items())))


def replica_table(topic: TopicInfo) -> Table:
    """Replicas and in-sync replicas per partition; an ISR smaller than the replica list is highlighted."""
    table = Table(title="replicas (preferred leader first)", title_justify="left")
    table.add_column("partition", justify="right")
    table.add_column("replicas")
    table.add_column("in sync")
    for p in topic.partitions:
        isr = "\n".join(p.isr)
        table.add_row(
            str(p.partition),
            "\n".join(p.replicas),
            isr if set(p.isr) == set(p.replicas) else f"[yellow]{isr or '(none)'}[/yellow]",
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
        out.print(f"deleted topic {name}")


# ------------------------------------------------------------------------------------------------ produce


def _lines(file: Path | None) -> Iterator[str]:
    if file is None:
        for line in sys.stdin:
            yield line.rstrip("\r\n")
        return
    with file.open(encoding="utf-8") as handle:
        for line in handle:
            yield line.rstrip("\r\n")


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
    bootstrap: str | None = Bootstrap,
) -> None:
    """Write each line of stdin (or --file) as one record, then print the rate.

    Records are acknowledged exactly once (idempotent producer); with --transactional-id they become
    visible to read_committed consumers only when their transaction commits.

    Example: seq 1 1000 | oncelog produce orders --transactional-id loader-1 --transaction-size 100
    """
    total = None
    if file is not None:
        with file.open(encoding="utf-8") as handle:
            total = sum(1 for _ in handle)
    sent = failed = 0
    started = time.monotonic()
    with _errors(), Producer(_bootstrap(bootstrap), transactional_id=transactional_id, linger_ms=linger_ms) as producer:
        if transactional_id:
            producer.init_transactions()
            producer.begin_transaction()
        in_transaction = 0
        with Progress(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            transient=True,
        ) as progress:
            task = progress.add_task(f"producing to {topic}", total=total)

            def acknowledged(future: Any) -> None:
                nonlocal failed
                if future.exception() is not None:
                    failed += 1

            for line in _lines(file):
                key: bytes | None = None
                value = line
                if key_separator is not None and key_separator in line:
                    raw_key, _, value = line.partition(key_separator)
                    key = raw_key.encode()
                producer.send(topic, value.encode(), key=key, partition=partition).add_done_callback(acknowledged)
                sent += 1
                in_transaction += 1
                progress.advance(task)
                if transactional_id and transaction_size and in_transaction >= transaction_size:
                    producer.commit_transaction()
                    producer.begin_transaction()
                    in_transaction = 0
            if transactional_id:
                producer.commit_transaction()
            else:
                producer.flush()
    elapsed = max(time.monotonic() - started, 1e-9)
    if failed:
        err.print(f"[red]{failed} of {sent} record(s) failed[/red]")
        raise typer.Exit(1)
    err.print(f"produced {sent} record(s) to {topic} in {elapsed:.2f} s ({sent / elapsed:,.0f} records/s)")


# ------------------------------------------------------------------------------------------------ consume


def consume(
    topic: str = typer.Argument(..., help="topic to read"),
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
    bootstrap: str | None = Bootstrap,
) -> None:
    """Print records of a topic, one value per line.

    Example: oncelog consume orders --from-beginning --isolation read_committed --max-messages 10
    """
    if isolation not in ("read_committed", "read_uncommitted"):
        raise typer.BadParameter("use read_committed or read_uncommitted", param_hint="--isolation")
    count = 0
    with (
        _errors(),
        Consumer(
            _bootstrap(bootstrap),
            group_id=group,
            isolation_level=isolation,
            auto_offset_reset="earliest" if from_beginning else "latest",
        ) as consumer,
    ):
        if group:
            consumer.subscribe([topic])
        else:
            consumer.assign(consumer.partitions_for(topic))
            if from_beginning:
                consumer.seek_to_beginning()
            else:
                consumer.seek_to_end()
        last_record = time.monotonic()
        try:
            while max_messages is None or count < max_messages:
                left = None if max_messages is None else max_messages - count
                records = consumer.poll(timeout_ms=200, max_records=left)
                for record in records:
                    value = "" if record.value is None else record.value.decode("utf-8", errors="replace")
                    prefix = f"{record.partition}:{record.offset}\t" if print_offset else ""
                    if print_key:
                        key = "" if record.key is None else record.key.decode("utf-8", errors="replace")
                        value = f"{key}\t{value}"
                    typer.echo(f"{prefix}{value}")  # plain text, tabs kept: the output is meant for pipes
                count += len(records)
                if records:
                    last_record = time.monotonic()
                elif timeout is not None and time.monotonic() - last_record >= timeout:
                    break
        except KeyboardInterrupt:
            pass
        if group:
            consumer.commit()
    err.print(f"consumed {count} record(s) from {topic}")


# ------------------------------------------------------------------------------------------------ transactions


@transactions_app.command("list")
def transactions_list(
    state: list[str] = typer.Option([], "--state", "-s", help="keep this state (ongoing, prepare_commit, ...)"),
    older_than_ms: int = typer.Option(0, "--older-than-ms", min=0, help="keep open transactions older than this"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """List transactional ids with their state and producer id.

    Example: oncelog transactions list --state ongoing --older-than-ms 60000
    """
    listed = _with_admin(
        bootstrap, lambda admin: admin.list_transactions(states=state or None, older_than_ms=older_than_ms or None)
    )
    table = Table(title="transactions", title_justify="left")
    for column in ("transactional id", "producer id", "state", "started"):
        table.add_column(column)
    for t in listed:
        table.add_row(t.transactional_id, str(t.producer_id), t.state, _ms_to_text(t.transaction_start_time_ms))
    out.print(table)


@transactions_app.command("describe")
def transactions_describe(
    transactional_ids: list[str] = typer.Argument(..., help="transactional ids"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Show the coordinator's view of transactional ids: state, producer, partitions, groups.

    Example: oncelog transactions describe copier-0
    """
    described = _with_admin(bootstrap, lambda admin: admin.describe_transactions(transactional_ids))
    for d in described.values():
        table = Table(title=d.transactional_id, title_justify="left", show_header=False)
        table.add_column("field")
        table.add_column("value")
        table.add_row("state", d.state)
        table.add_row("producer", f"id {d.producer_id}, epoch {d.producer_epoch}")
        table.add_row("timeout", f"{d.transaction_timeout_ms} ms")
        table.add_row("started", _ms_to_text(d.transaction_start_time_ms))
        table.add_row("partitions", ", ".join(map(str, d.partitions)) or "-")
        table.add_row("groups", ", ".join(d.groups) or "-")
        table.add_row("coordinator", f"{d.coordinator_node_id} (epoch {d.coordinator_epoch})")
        table.add_row("last update", _ms_to_text(d.last_update_time_ms))
        out.print(table)


@transactions_app.command("abort")
def transactions_abort(
    transactional_id: str = typer.Argument(..., help="transactional id whose open transaction to abort"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Abort an open (hanging) transaction; its producer instance is fenced.

    Example: oncelog transactions abort copier-0
    """
    producer_id, epoch = _with_admin(bootstrap, lambda admin: admin.abort_transaction(transactional_id))
    out.print(f"aborted the transaction of {transactional_id}; producer id {producer_id} is fenced at epoch {epoch}")


# ------------------------------------------------------------------------------------------------ producers, groups


@producers_app.command("describe")
def producers_describe(
    topic: str = typer.Argument(..., help="topic"),
    partition: list[int] = typer.Option([], "--partition", "-p", help="partition (repeatable); default all"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Show each partition's producers: epoch, last sequence, open transaction start.

    Example: oncelog producers describe orders --partition 0
    """

    def describe(admin: AdminClient) -> dict[TopicPartition, Any]:
        partitions = partition or [p.partition for p in admin.describe_topics([topic])[topic].partitions]
        return admin.describe_producers([TopicPartition(topic, p) for p in partitions])

    described = _with_admin(bootstrap, describe)
    table = Table(title=f"producers of {topic}", title_justify="left")
    for column in ("partition", "producer id", "epoch", "last sequence", "last write", "coordinator epoch", "open txn"):
        table.add_column(column)
    for tp, producers in sorted(described.items()):
        for p in producers:
            table.add_row(
                str(tp.partition),
                str(p.producer_id),
                str(p.producer_epoch),
                str(p.last_sequence),
                _ms_to_text(p.last_timestamp_ms),
                str(p.coordinator_epoch),
                "-" if p.current_transaction_start_offset is None else f"from {p.current_transaction_start_offset}",
            )
    out.print(table)


@groups_app.command("offsets")
def groups_offsets(
    group: str = typer.Argument(..., help="consumer group id"),
    stable: bool = typer.Option(False, "--stable", help="wait while a transactional commit is pending"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Show a group's committed offsets.

    Example: oncelog groups offsets billing --stable
    """
    offsets = _with_admin(bootstrap, lambda admin: admin.list_group_offsets(group, require_stable=stable))
    table = Table(title=f"offsets of group {group}", title_justify="left")
    for column in ("topic", "partition", "offset", "metadata"):
        table.add_column(column)
    for tp, om in sorted(offsets.items()):
        table.add_row(tp.topic, str(tp.partition), str(om.offset), om.metadata or "")
    out.print(table)
