"""``oncelog partitions``: the replication state of partitions (kafka-topics --describe --under-replicated-partitions).

``describe`` lists, per partition, its leader and leader epoch, replicas (preferred leader first), in-sync
replicas, high watermark and last stable offset (asked of the leader), and a status: ``ok``,
``UNDER-REPLICATED`` (fewer in-sync replicas than replicas) or ``OFFLINE`` (no live leader). Per-replica lag is
exported by each leader as the metric ``oncelog_partition_replica_lag`` (docs/replication.md).
"""

from __future__ import annotations

from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from oncelog.cli.common import Bootstrap, with_admin
from oncelog.cli.output import Format, output_option, print_rows, print_table
from oncelog.cli.topics import _partition_rows
from oncelog.client import AdminClient
from oncelog.client.metadata import PartitionInfo, TopicInfo

app = typer.Typer(help="Show the replication state of partitions.", no_args_is_help=True)

COLUMNS = [
    *("topic", "partition", "leader", "leader epoch", "replicas", "in sync"),
    *("high watermark", "last stable", "status"),
]

OK, UNDER_REPLICATED, OFFLINE = "ok", "UNDER-REPLICATED", "OFFLINE"
_STYLES = {OK: "", UNDER_REPLICATED: "yellow", OFFLINE: "bold red"}


def register(root: typer.Typer) -> None:
    """Add ``oncelog partitions`` to the root command."""
    root.add_typer(app, name="partitions")


def status(partition: PartitionInfo) -> str:
    """``OFFLINE`` without a live leader, ``UNDER-REPLICATED`` with fewer in-sync replicas than replicas, else
    ``ok``."""
    if not partition.leader_address:
        return OFFLINE
    return UNDER_REPLICATED if len(partition.isr) < len(partition.replicas) else OK


def _rows(admin: AdminClient, topic: TopicInfo) -> list[tuple[Any, ...]]:
    offsets = _partition_rows(admin, topic)  # partition, leader, address, epoch, log start, HW, LSO
    rows = []
    for p, row in zip(topic.partitions, offsets, strict=True):
        leader = (p.leader_node_id or None, p.leader_epoch)
        rows.append((topic.name, p.partition, *leader, list(p.replicas), list(p.isr), *row[5:7], status(p)))
    return rows


@app.command("describe")
def partitions_describe(
    topics: list[str] = typer.Argument(None, help="topics to describe; default all"),
    under_replicated: bool = typer.Option(
        False, "--under-replicated", help="only partitions that are under-replicated or offline"
    ),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show each partition's leader, leader epoch, replicas, in-sync replicas, high watermark, last stable
    offset and status; under-replicated partitions are highlighted, offline ones in red.

    Example: oncelog partitions describe orders --under-replicated
    """

    def describe(admin: AdminClient) -> list[tuple[Any, ...]]:
        return [row for t in admin.describe_topics(topics or None).values() for row in _rows(admin, t)]

    rows = [r for r in with_admin(bootstrap, describe) if not under_replicated or r[-1] != OK]
    if output is Format.JSON:
        print_rows(rows, COLUMNS, output)  # replica lists stay JSON lists
        return
    if output is Format.PLAIN:
        print_rows([[",".join(v) if isinstance(v, list) else v for v in row] for row in rows], COLUMNS, output)
        return
    table = Table()
    for column in COLUMNS:
        table.add_column(Text(column))
    for row in rows:
        style = _STYLES[row[-1]]
        cells = [", ".join(v) if isinstance(v, list) else ("-" if v is None else str(v)) for v in row]
        table.add_row(*(Text(cell, style=style) for cell in cells))
    print_table(table)
