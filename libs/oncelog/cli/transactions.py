"""``oncelog transactions``: list, describe, abort and find hanging transactions (KIP-664's kafka-transactions)."""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from oncelog.cli.common import OPEN_STATES, Bootstrap, CommandFailed, ms_to_text, parse_topic_partition, with_admin
from oncelog.cli.output import Format, output_option, print_rows, print_table
from oncelog.client import AdminClient, TopicPartition

app = typer.Typer(
    help="List, describe and abort transactions (hanging-transaction tooling, KIP-664).", no_args_is_help=True
)


def register(root: typer.Typer) -> None:
    """Add ``oncelog transactions`` to the root command."""
    root.add_typer(app, name="transactions")


@app.command("list")
def transactions_list(
    state: list[str] = typer.Option([], "--state", "-s", help="keep this state (ongoing, prepared, ...)"),
    older_than_ms: int = typer.Option(0, "--older-than-ms", min=0, help="keep open transactions older than this"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """List transactional ids with their state and producer id; prepared ones (two-phase commit) with their age.

    Example: oncelog transactions list --state prepared
    """
    listed = with_admin(
        bootstrap, lambda admin: admin.list_transactions(states=state or None, older_than_ms=older_than_ms or None)
    )
    now_ms = int(time.time() * 1000)
    rows = [
        (
            t.transactional_id,
            t.producer_id,
            t.state,
            ms_to_text(t.transaction_start_time_ms),
            ms_to_text(t.prepared_time_ms) if t.state == "prepared" else "-",
            age_text(now_ms - t.prepared_time_ms) if t.state == "prepared" else "-",
        )
        for t in listed
    ]
    columns = ["transactional id", "producer id", "state", "started", "prepared", "prepared age"]
    print_rows(rows, columns, output, title="transactions")


def age_text(ms: int) -> str:
    """A duration for people: ``850 ms``, ``12.3 s``, ``4 min 05 s``, ``3 h 02 min``."""
    ms = max(0, ms)
    if ms < 1_000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(ms // 1000, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@app.command("describe")
def transactions_describe(
    transactional_ids: list[str] = typer.Argument(..., help="transactional ids"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show the coordinator's view of transactional ids: state, producer, partitions, groups.

    Example: oncelog transactions describe copier-0
    """
    described = with_admin(bootstrap, lambda admin: admin.describe_transactions(transactional_ids))
    columns = ["transactional id", "state", "producer id", "producer epoch", "timeout ms", "started", "partitions"]
    columns += ["groups", "coordinator", "coordinator epoch", "last update", "prepared", "check-back"]
    rows = [
        (
            d.transactional_id,
            d.state,
            d.producer_id,
            d.producer_epoch,
            d.transaction_timeout_ms,
            ms_to_text(d.transaction_start_time_ms),
            ", ".join(map(str, d.partitions)) or "-",
            ", ".join(d.groups) or "-",
            d.coordinator_node_id,
            d.coordinator_epoch,
            ms_to_text(d.last_update_time_ms),
            ms_to_text(d.prepared_time_ms),
            d.check_back_address or "-",
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


@app.command("abort")
def transactions_abort(
    transactional_id: str | None = typer.Argument(
        None, help="transactional id whose open transaction to abort (or name it by --topic/--partition/--start-offset)"
    ),
    topic: str | None = typer.Option(None, "--topic", help="topic of the hanging transaction's partition"),
    partition: int | None = typer.Option(None, "--partition", "-p", min=0, help="partition of the hanging transaction"),
    start_offset: int | None = typer.Option(
        None, "--start-offset", min=0, help="first offset of the hanging transaction (find-hanging's start offset)"
    ),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Abort an open (hanging) transaction; its producer instance is fenced.

    By transactional id the coordinator aborts the transaction on all its partitions and groups. By --topic,
    --partition and --start-offset (KIP-664, for a transaction its coordinator does not know, as
    `oncelog transactions find-hanging` lists) the ABORT marker of the producer whose transaction starts there is
    written on that partition, so its last stable offset moves on.

    Without an open transaction nothing happens, and the command says so (exit code 0).

    Example: oncelog transactions abort copier-0

    Example: oncelog transactions abort --topic orders --partition 3 --start-offset 1042
    """
    by_offset = (topic, partition, start_offset)
    if transactional_id is not None and any(v is not None for v in by_offset):
        raise typer.BadParameter(
            "give a transactional id or --topic/--partition/--start-offset, not both", param_hint="TRANSACTIONAL_ID"
        )
    if transactional_id is None:
        if any(v is None for v in by_offset):
            raise typer.BadParameter(
                "name the transaction by its transactional id, or by all of --topic, --partition and --start-offset",
                param_hint="--start-offset",
            )
        assert topic is not None and partition is not None and start_offset is not None
        tp = TopicPartition(topic, partition)
        typer.echo(with_admin(bootstrap, lambda admin: _abort_at_offset(admin, tp, start_offset)))
        return

    def abort(admin: AdminClient) -> str:
        state = admin.describe_transactions([transactional_id])[transactional_id].state
        if state not in OPEN_STATES:
            return f"transactional id {transactional_id} has no open transaction (state {state}); nothing was aborted"
        producer_id, epoch = admin.abort_transaction(transactional_id)
        return f"aborted the transaction of {transactional_id}; producer id {producer_id} is fenced at epoch {epoch}"

    typer.echo(with_admin(bootstrap, abort))


def _abort_at_offset(admin: AdminClient, tp: TopicPartition, start_offset: int) -> str:
    """Find the producer whose open transaction starts at ``start_offset`` of ``tp`` and write its ABORT marker."""
    where = f"{tp.topic}-{tp.partition}"
    producers = admin.describe_producers([tp])[tp]
    open_at = {
        p.current_transaction_start_offset: p for p in producers if p.current_transaction_start_offset is not None
    }
    found = open_at.get(start_offset)
    if found is None:
        starts = ", ".join(str(offset) for offset in sorted(open_at)) or "none"
        raise CommandFailed(
            f"no open transaction starts at offset {start_offset} of {where} (open ones start at: {starts}); "
            f"see `oncelog transactions find-hanging {tp.topic}`"
        )
    coordinated = [t for t in admin.list_transactions(producer_ids=[found.producer_id]) if t.state in OPEN_STATES]
    if coordinated:
        tid = coordinated[0].transactional_id
        raise CommandFailed(
            f"the transaction at offset {start_offset} of {where} belongs to transactional id {tid}, which its "
            f"coordinator has open ({coordinated[0].state}): abort it there, on all its partitions, with "
            f"`oncelog transactions abort {tid}`"
        )
    admin.abort_transaction_on_partition(tp, found.producer_id, found.producer_epoch, found.coordinator_epoch)
    [(stable, _)] = admin.list_offsets({tp: "latest"}, isolation_level="read_committed").values()
    return (
        f"aborted the transaction of producer id {found.producer_id} (epoch {found.producer_epoch}) that started at "
        f"offset {start_offset} of {where}; it is fenced there at epoch {found.producer_epoch + 1}, and the last "
        f"stable offset is now {stable}"
    )


@app.command("skip-markers")
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
    partitions = [parse_topic_partition(text) for text in partition]
    if not partitions and not group:
        raise typer.BadParameter("name at least one --partition TOPIC:PARTITION or --group GROUP to skip")

    def skip(admin: AdminClient) -> str:
        skipped_partitions, skipped_groups = admin.skip_transaction_markers(transactional_id, partitions, group)
        names = [f"{tp.topic}:{tp.partition}" for tp in skipped_partitions] + [f"group {g}" for g in skipped_groups]
        if not names:
            return f"every named participant of {transactional_id} had acknowledged its marker; nothing was skipped"
        return f"skipped the markers of {transactional_id} for " + ", ".join(names)

    typer.echo(with_admin(bootstrap, skip))


@app.command("find-hanging")
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
    `oncelog transactions abort <transactional id>`, or, when its coordinator has none open, with
    `oncelog transactions abort --topic T --partition P --start-offset O`.

    Example: oncelog transactions find-hanging orders --max-transaction-timeout-ms 600000
    """

    def find(admin: AdminClient) -> list[tuple[Any, ...]]:
        partitions = partition or [p.partition for p in admin.describe_topics([topic])[topic].partitions]
        described = admin.describe_producers([TopicPartition(topic, p) for p in partitions])
        coordinated = {t.producer_id: t for t in admin.list_transactions() if t.state in OPEN_STATES}
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

    rows = with_admin(bootstrap, find)
    columns = ["partition", "producer id", "epoch", "transactional id", "start offset", "why"]
    print_rows(rows, columns, output, title=f"hanging transactions on {topic}", extra={"topic": topic})
