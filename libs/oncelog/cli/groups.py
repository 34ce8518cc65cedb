"""``oncelog groups``: consumer groups (kafka-consumer-groups)."""

from __future__ import annotations

import typer

from oncelog.cli.common import Bootstrap, with_admin
from oncelog.cli.output import Format, output_option, print_rows

app = typer.Typer(help="Inspect consumer group offsets.", no_args_is_help=True)


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
