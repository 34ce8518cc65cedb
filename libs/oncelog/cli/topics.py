"""``oncelog topics``: create, list, describe and delete topics (kafka-topics)."""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from oncelog.cli.common import Bootstrap, parse_configs, with_admin
from oncelog.cli.output import Format, output_option, print_rows, print_table, stdout_console
from oncelog.client import AdminClient, NewTopic, TopicPartition
from oncelog.client.metadata import TopicInfo

app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    """Add ``oncelog topics`` to the root command."""
    root.add_typer(app, name="topics")


@app.command("create")
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
    configs = parse_configs(config)
    spec = NewTopic(name, num_partitions=partitions, configs=configs, replication_factor=replication_factor)
    created = with_admin(bootstrap, lambda admin: admin.create_topics([spec]))
    for topic in created:
        copies = len(topic.partitions[0].replicas) if topic.partitions else 0
        typer.echo(
            f"created topic {topic.name} with {len(topic.partitions)} partition(s), replication factor {copies} "
            f"(id {topic.topic_id})"
        )


@app.command("list")
def topics_list(bootstrap: str | None = Bootstrap, output: Format = output_option(Format.PLAIN)) -> None:
    """List topic names, one per line.

    Example: oncelog topics list
    """
    names = with_admin(bootstrap, lambda admin: admin.list_topics())
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


@app.command("describe")
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

    described = with_admin(bootstrap, describe)
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


@app.command("alter")
def topics_alter(
    name: str = typer.Argument(..., help="topic to grow"),
    partitions: int = typer.Option(
        ..., "--partitions", "-p", min=1, help="the new total partition count; above the current one"
    ),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Add partitions to a topic (kafka-topics --alter --partitions).

    Existing partitions keep their data and leaders; the new ones get the topic's replication factor and are
    placed over the live storage nodes as at creation. Partitions are never removed, so a smaller count is
    refused. Keyed records map to partitions by the count: after growing, a key may go to another partition.
    Producers and consumers use the new partitions at their next metadata refresh.

    Example: oncelog topics alter orders --partitions 6
    """

    def grow(admin: AdminClient) -> tuple[int, TopicInfo]:
        before = len(admin.describe_topics([name])[name].partitions)
        return before, admin.create_partitions({name: partitions})[name]

    before, topic = with_admin(bootstrap, grow)
    added = ", ".join(f"{p.partition} (leader {p.leader_node_id})" for p in topic.partitions[before:])
    typer.echo(f"altered topic {topic.name}: {before} -> {len(topic.partitions)} partition(s); added {added}")


@app.command("delete")
def topics_delete(
    names: list[str] = typer.Argument(..., help="topics to delete"),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Delete topics and their data.

    Example: oncelog topics delete orders scratch
    """
    for name in with_admin(bootstrap, lambda admin: admin.delete_topics(names)):
        typer.echo(f"deleted topic {name}")
