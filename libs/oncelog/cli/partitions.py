"""``oncelog partitions``: the replication state of partitions (kafka-topics --describe --under-replicated-partitions).

``describe`` lists, per partition, its leader and leader epoch, replicas (preferred leader first), in-sync
replicas, each replica's lag behind the leader's log end, high watermark and last stable offset (all asked of the
leader), and a status: ``ok``, ``UNDER-REPLICATED`` (fewer in-sync replicas than replicas) or ``OFFLINE`` (no live
leader). Each leader also exports the lag as the metric ``oncelog_partition_replica_lag`` (docs/replication.md).
``reassign`` moves a partition's replicas (add, catch up, drop), as to decommission a storage node.
"""

from __future__ import annotations

import time
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from oncelog.cli.common import Bootstrap, CommandFailed, with_admin
from oncelog.cli.output import Format, err, output_option, print_rows, print_table, stdout_console
from oncelog.cli.topics import _partition_rows
from oncelog.client import AdminClient
from oncelog.client.metadata import PartitionInfo, TopicInfo
from oncelog.errors import OncelogError
from oncelog.vocabulary import TopicPartition

app = typer.Typer(help="Show the replication state of partitions and move them between nodes.", no_args_is_help=True)

COLUMNS = [
    *("topic", "partition", "leader", "leader epoch", "replicas", "in sync", "replica lag"),
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


def _lags(admin: AdminClient, topic: TopicInfo) -> dict[TopicPartition, dict[str, int]]:
    """Each online partition's replica lags as its leader reports them; a leader that cannot answer leaves them
    unknown (the partition is shown without)."""
    online = [TopicPartition(topic.name, p.partition) for p in topic.partitions if p.leader_address]
    try:
        described = admin.describe_replicas(online) if online else {}
    except OncelogError:
        described = {}
    return {tp: {r.node_id: r.lag for r in replicas} for tp, replicas in described.items()}


def _rows(admin: AdminClient, topic: TopicInfo) -> list[tuple[Any, ...]]:
    offsets = _partition_rows(admin, topic)  # partition, leader, address, epoch, log start, HW, LSO
    lags = _lags(admin, topic)
    rows = []
    for p, row in zip(topic.partitions, offsets, strict=True):
        leader = (p.leader_node_id or None, p.leader_epoch)
        lag = lags.get(TopicPartition(topic.name, p.partition))
        replicas = (list(p.replicas), list(p.isr), lag)
        rows.append((topic.name, p.partition, *leader, *replicas, *row[5:7], status(p)))
    return rows


def _cell(value: object, separator: str = ", ") -> str:
    if isinstance(value, list):
        return separator.join(value)
    if isinstance(value, dict):  # replica lags: node=lag
        return separator.join(f"{node}={lag}" for node, lag in value.items())
    return "-" if value is None else str(value)


@app.command("describe")
def partitions_describe(
    topics: list[str] = typer.Argument(None, help="topics to describe; default all"),
    under_replicated: bool = typer.Option(
        False, "--under-replicated", help="only partitions that are under-replicated or offline"
    ),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show each partition's leader, leader epoch, replicas, in-sync replicas, each replica's lag behind the
    leader (offsets), high watermark, last stable offset and status; under-replicated partitions are highlighted,
    offline ones in red.

    Example: oncelog partitions describe orders --under-replicated
    """

    def describe(admin: AdminClient) -> list[tuple[Any, ...]]:
        return [row for t in admin.describe_topics(topics or None).values() for row in _rows(admin, t)]

    rows = [r for r in with_admin(bootstrap, describe) if not under_replicated or r[-1] != OK]
    if output is Format.JSON:
        print_rows(rows, COLUMNS, output)  # replica lists stay JSON lists
        return
    if output is Format.PLAIN:
        print_rows([[_cell(v, ",") if isinstance(v, list | dict) else v for v in row] for row in rows], COLUMNS, output)
        return
    table = Table()
    for column in COLUMNS:
        table.add_column(Text(column))
    for row in rows:
        style = _STYLES[row[-1]]
        table.add_row(*(Text(_cell(v), style=style) for v in row))
    print_table(table)


@app.command("reassign")
def partitions_reassign(
    topic: str = typer.Argument(..., help="the partition's topic"),
    partition: int = typer.Argument(..., min=0, help="the partition index"),
    replicas: str = typer.Option(
        ..., "--replicas", help="the storage nodes that should hold it, comma-separated, preferred leader first"
    ),
    wait_s: float = typer.Option(300, "--wait", min=0, help="seconds to wait for new replicas to join the ISR"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Move a partition to other storage nodes, as to decommission one: add the new replicas next to the current
    ones, wait until they have copied the log and joined the ISR, then drop the replicas not listed (a leader not
    listed hands over to a listed in-sync replica first). Each step is a conditional catalog update; interrupted,
    the partition keeps its extra replicas and running the command again finishes it.

    Example: oncelog partitions reassign orders 0 --replicas storage-1,storage-2,storage-4
    """
    target = [n.strip() for n in replicas.split(",") if n.strip()]

    def reassign(admin: AdminClient) -> PartitionInfo:
        current = _partition(admin, topic, partition)
        adding = [n for n in target if n not in current.replicas]
        if adding:
            step = admin.alter_partition_replicas(topic, partition, [*current.replicas, *adding])
            err().print(
                Text(f"{topic}-{partition}: copying to {', '.join(adding)} (replicas {', '.join(step.replicas)})")
            )
            deadline = time.monotonic() + wait_s
            while not set(target) <= set((step := _partition(admin, topic, partition)).isr):
                if time.monotonic() > deadline:
                    raise CommandFailed(
                        f"{topic}-{partition}: {', '.join(n for n in target if n not in step.isr)} did not join the "
                        f"ISR ({', '.join(step.isr)}) within {wait_s:g} s; the partition keeps replicas "
                        f"{', '.join(step.replicas)}: run the command again to finish, or reassign it back"
                    )
                time.sleep(0.5)  # polling the catalog: the leader adds caught-up replicas to the ISR on its own
        return admin.alter_partition_replicas(topic, partition, target)

    done = with_admin(bootstrap, reassign)
    stdout_console().print(
        Text(
            f"{topic}-{partition}: replicas {', '.join(done.replicas)}, in sync {', '.join(done.isr)}, leader "
            f"{done.leader_node_id} (epoch {done.leader_epoch})"
        )
    )


def _partition(admin: AdminClient, topic: str, partition: int) -> PartitionInfo:
    partitions = admin.describe_topics([topic])[topic].partitions
    if partition >= len(partitions):
        raise CommandFailed(f"{topic} has {len(partitions)} partition(s); there is no partition {partition}")
    return partitions[partition]
