"""``oncelog consume``: print records of one or more topics (kafka-console-consumer)."""

from __future__ import annotations

import time

import typer
from rich.text import Text

from oncelog.cli.common import (
    CONNECT_TIMEOUT_S,
    SETTINGS,
    Bootstrap,
    CommandFailed,
    admin_client,
    bootstrap_addresses,
    command_errors,
    require_online,
)
from oncelog.cli.output import err
from oncelog.client import AdminClient, Consumer, TopicPartition
from oncelog.client.metadata import TopicInfo


def register(root: typer.Typer) -> None:
    """Add ``oncelog consume`` to the root command."""
    root.command("consume")(consume)


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
    with command_errors():
        addresses = bootstrap_addresses(bootstrap)
        admin = admin_client(addresses)
    with (
        command_errors(),
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
        infos = [require_online(admin, topic, partition or None) for topic in topics]
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
                        require_online(admin, topic)
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
