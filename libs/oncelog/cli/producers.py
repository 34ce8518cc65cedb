"""``oncelog producers``: producer state on partitions (kafka-transactions describe-producers)."""

from __future__ import annotations

from typing import Any

import typer

from oncelog.cli.common import Bootstrap, ms_to_text, with_admin
from oncelog.cli.output import Format, output_option, print_rows
from oncelog.client import AdminClient, TopicPartition

app = typer.Typer(help="Inspect producer state on partitions.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    """Add ``oncelog producers`` to the root command."""
    root.add_typer(app, name="producers")


@app.command("describe")
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

    described = with_admin(bootstrap, describe)
    columns = ["partition", "producer id", "epoch", "last sequence", "last write", "coordinator epoch", "open txn"]
    rows = [
        (
            tp.partition,
            p.producer_id,
            p.producer_epoch,
            p.last_sequence,
            ms_to_text(p.last_timestamp_ms),
            p.coordinator_epoch,
            "-" if p.current_transaction_start_offset is None else f"from {p.current_transaction_start_offset}",
        )
        for tp, producers in sorted(described.items())
        for p in producers
    ]
    print_rows(rows, columns, output, title=f"producers of {topic}")
