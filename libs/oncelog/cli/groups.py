"""``oncelog groups``: consumer groups (kafka-consumer-groups)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import typer

from oncelog.cli.common import Bootstrap, CommandFailed, command_errors, require_online, with_admin
from oncelog.cli.output import Format, output_option, print_rows, stdout_console
from oncelog.client import AdminClient, TopicPartition
from oncelog.client.group_admin import ConsumerGroupDescription
from oncelog.errors import GroupIdNotFound

app = typer.Typer(
    help="Consumer groups: list, describe (lag against the LSO), reset offsets, delete.", no_args_is_help=True
)


def register(root: typer.Typer) -> None:
    """Add ``oncelog groups`` to the root command."""
    root.add_typer(app, name="groups")


@app.command("offsets")
def groups_offsets(
    group: str = typer.Argument(..., help="consumer group id"),
    stable: bool = typer.Option(False, "--stable", help="wait while a transactional commit is pending"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show a group's committed offsets.

    Example: oncelog groups offsets billing --stable
    """
    offsets = with_admin(bootstrap, lambda admin: admin.list_group_offsets(group, require_stable=stable))
    rows = [(tp.topic, tp.partition, om.offset, om.metadata or "") for tp, om in sorted(offsets.items())]
    print_rows(rows, ["topic", "partition", "offset", "metadata"], output, title=f"offsets of group {group}")


@app.command("list")
def groups_list(bootstrap: str | None = Bootstrap, output: Format = output_option()) -> None:
    """List the consumer groups with their state, epoch and member count.

    Example: oncelog groups list
    """
    groups = with_admin(bootstrap, lambda admin: admin.list_consumer_groups())
    rows = [(g.group_id, g.state, g.group_epoch, g.members) for g in groups]
    print_rows(rows, ["group", "state", "epoch", "members"], output, title="consumer groups")


def _describe_rows(admin: AdminClient, group: str) -> tuple[ConsumerGroupDescription | None, list[tuple[Any, ...]]]:
    try:
        description = admin.describe_consumer_group(group)
    except GroupIdNotFound:
        description = None
    owners: dict[TopicPartition, str] = {}
    for member in description.members if description else ():
        name = member.client_id or member.member_id
        for tp in member.assignment:
            owners[tp] = name
        for tp in member.pending_revocation:
            owners[tp] = f"{name} (revoking)"
    committed = admin.list_group_offsets(group)
    partitions = sorted(set(owners) | set(committed))
    # Lag against the last stable offset: what a read_committed member can still read (users ask for exactly this).
    stable = (
        admin.list_offsets(dict.fromkeys(partitions, "latest"), isolation_level="read_committed") if partitions else {}
    )
    rows = []
    for tp in partitions:
        offset = committed[tp].offset if tp in committed else None
        lso = stable[tp][0]
        lag = lso - offset if offset is not None else None
        rows.append((tp.topic, tp.partition, owners.get(tp, "-"), "-" if offset is None else offset, lso, lag))
    return description, rows


@app.command("describe")
def groups_describe(
    group: str = typer.Argument(..., help="consumer group id"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show a group's state, epochs and members, and per partition its owner, committed offset, last stable
    offset (LSO) and lag (LSO - committed, what a read_committed consumer still has to read).

    Example: oncelog groups describe copiers
    """
    description, rows = with_admin(bootstrap, lambda admin: _describe_rows(admin, group))
    if description is None and not rows:
        with command_errors():
            raise CommandFailed(f"no consumer group {group!r}: `oncelog groups list` shows the groups")
    extra = {}
    if description is not None:
        extra = {
            "state": description.state,
            "group_epoch": description.group_epoch,
            "assignment_epoch": description.assignment_epoch,
            "assignor": description.assignor,
            "members": len(description.members),
        }
    print_rows(
        rows,
        ["topic", "partition", "owner", "committed", "lso", "lag"],
        output,
        title=f"group {group}" + (f" ({description.state}, epoch {description.group_epoch})" if description else ""),
        extra=extra,
    )


def _target_offsets(
    admin: AdminClient,
    group: str,
    topic: str,
    to_earliest: bool,
    to_latest: bool,
    to_datetime: str | None,
    shift_by: int | None,
) -> list[tuple[TopicPartition, int | None, int]]:
    chosen = [to_earliest, to_latest, to_datetime is not None, shift_by is not None]
    if sum(chosen) != 1:
        raise ValueError("choose exactly one of --to-earliest, --to-latest, --to-datetime, --shift-by")
    try:
        description = admin.describe_consumer_group(group)
        active = [m for m in description.members]
    except GroupIdNotFound:
        active = []
    if active:
        raise CommandFailed(
            f"group {group!r} has {len(active)} active member(s); stop its consumers (or wait for their session "
            "timeout) before resetting its offsets"
        )
    info = require_online(admin, topic)
    partitions = [TopicPartition(topic, p.partition) for p in info.partitions]
    committed = admin.list_group_offsets(group, partitions)
    earliest = admin.list_offsets(dict.fromkeys(partitions, "earliest"))
    latest = admin.list_offsets(dict.fromkeys(partitions, "latest"), isolation_level="read_committed")
    if to_datetime is not None:
        try:
            when = datetime.fromisoformat(to_datetime)
        except ValueError as exc:
            raise ValueError(f"--to-datetime {to_datetime!r}: use ISO 8601, e.g. 2026-11-25T10:00:00+00:00") from exc
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        by_time = admin.list_offsets(dict.fromkeys(partitions, int(when.timestamp() * 1000)))
    plan = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        low, high = earliest[tp][0], latest[tp][0]
        if to_earliest:
            new = low
        elif to_latest:
            new = high
        elif to_datetime is not None:
            found = by_time[tp][0]
            new = high if found < 0 else found
        else:
            assert shift_by is not None
            new = min(max((low if current is None else current) + shift_by, low), high)
        plan.append((tp, current, new))
    return plan


@app.command("reset-offsets")
def groups_reset_offsets(
    group: str = typer.Argument(..., help="consumer group id"),
    topic: str = typer.Option(..., "--topic", help="topic whose partitions are reset"),
    to_earliest: bool = typer.Option(False, "--to-earliest", help="the first offset still stored"),
    to_latest: bool = typer.Option(False, "--to-latest", help="the last stable offset"),
    to_datetime: str | None = typer.Option(None, "--to-datetime", help="the first offset at or after this time"),
    shift_by: int | None = typer.Option(None, "--shift-by", help="move the committed offset by N (may be < 0)"),
    execute: bool = typer.Option(False, "--execute", help="commit the new offsets (default: only show them)"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Reset a group's committed offsets for a topic; a dry run unless --execute. Refused while the group has
    members.

    Example: oncelog groups reset-offsets copiers --topic orders --to-datetime 2026-11-25T10:00:00 --execute
    """

    def reset(admin: AdminClient) -> list[tuple[TopicPartition, int | None, int]]:
        plan = _target_offsets(admin, group, topic, to_earliest, to_latest, to_datetime, shift_by)
        if execute:
            admin.alter_group_offsets(group, {tp: new for tp, _, new in plan})
        return plan

    plan = with_admin(bootstrap, reset)
    rows = [(tp.topic, tp.partition, "-" if cur is None else cur, new) for tp, cur, new in plan]
    title = f"offsets of group {group} " + ("reset" if execute else "after a reset (dry run: add --execute)")
    print_rows(rows, ["topic", "partition", "current", "new"], output, title=title, extra={"executed": execute})


@app.command("delete")
def groups_delete(
    group: str = typer.Argument(..., help="consumer group id"), bootstrap: str | None = Bootstrap
) -> None:
    """Delete a group without members, with its committed offsets.

    Example: oncelog groups delete old-copiers
    """
    with_admin(bootstrap, lambda admin: admin.delete_consumer_group(group))
    stdout_console().print(f"deleted group {group}")
