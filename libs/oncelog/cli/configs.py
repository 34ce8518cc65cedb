"""``oncelog configs``: describe and alter topic settings (kafka-configs --entity-type topics)."""

from __future__ import annotations

import typer

from oncelog.catalog.topics import config_name
from oncelog.cli.common import Bootstrap, key_values, with_admin
from oncelog.cli.output import Format, output_option, print_rows
from oncelog.client import AdminClient, ConfigEntry

app = typer.Typer(help="Describe and alter topic settings (kafka-configs).", no_args_is_help=True)

_ENTITY_TYPES = ("topics", "topic")

EntityType = typer.Option(
    "topics", "--entity-type", help="what the settings belong to; oncelog has topic settings only: topics"
)


def register(root: typer.Typer) -> None:
    """Add ``oncelog configs`` to the root command."""
    root.add_typer(app, name="configs")


def _check_entity_type(entity_type: str) -> None:
    if entity_type not in _ENTITY_TYPES:
        raise typer.BadParameter(
            f"{entity_type!r}: oncelog has topic settings only; use --entity-type topics", param_hint="--entity-type"
        )


def _split(items: list[str]) -> list[str]:
    """Kafka's comma-separated lists (``--add-config a=1,b=2``), repeatable options too."""
    return [part.strip() for item in items for part in item.split(",") if part.strip()]


def _rows(described: dict[str, list[ConfigEntry]]) -> list[tuple[str, str, str, str]]:
    return [(topic, e.name, e.value, e.source) for topic, entries in described.items() for e in entries]


_COLUMNS = ["topic", "name", "value", "source"]


@app.command("describe")
def configs_describe(
    entity_type: str = EntityType,
    entity_name: str | None = typer.Option(None, "--entity-name", "--topic", help="the topic; default every topic"),
    bootstrap: str | None = Bootstrap,
    output: Format = output_option(),
) -> None:
    """Show every setting of a topic: its value and whether it was set on the topic or is the default.

    Example: oncelog configs describe --entity-type topics --entity-name orders
    """
    _check_entity_type(entity_type)
    described = with_admin(bootstrap, lambda admin: admin.describe_configs([entity_name] if entity_name else None))
    print_rows(_rows(described), _COLUMNS, output, title="topic configs")


@app.command("alter")
def configs_alter(
    entity_type: str = EntityType,
    entity_name: str = typer.Option(..., "--entity-name", "--topic", help="the topic to change"),
    add_config: list[str] = typer.Option(
        [],
        "--add-config",
        help="NAME=VALUE[,NAME=VALUE...] to set (repeatable); Kafka's dotted names (retention.ms) work too",
    ),
    delete_config: list[str] = typer.Option(
        [], "--delete-config", help="NAME[,NAME...] to reset to the default (repeatable)"
    ),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Set or reset topic settings; storage nodes apply them within seconds (their catalog refresh).

    All or nothing: with one bad name or value nothing changes, and every problem is named.

    Example: oncelog configs alter --entity-type topics --entity-name orders --add-config retention.ms=3600000
    """
    _check_entity_type(entity_type)
    sets = dict(key_values(_split(add_config), "--add-config"))
    deletes = _split(delete_config)
    if not sets and not deletes:
        raise typer.BadParameter("give --add-config NAME=VALUE and/or --delete-config NAME", param_hint="--add-config")
    both = sorted(set(sets) & set(deletes))
    if both:
        raise typer.BadParameter(f"{both[0]} is both added and deleted; choose one", param_hint="--delete-config")
    changes: dict[str, str | None] = {**sets, **dict.fromkeys(deletes)}

    def alter(admin: AdminClient) -> dict[str, list[ConfigEntry]]:
        return admin.incremental_alter_configs({entity_name: changes})

    entries = with_admin(bootstrap, alter)[entity_name]
    values = {e.name: e for e in entries}
    shown = [values[config_name(name)] for name in changes]
    text = ", ".join(f"{e.name}={e.value}" + (" (default)" if e.source == "default" else "") for e in shown)
    typer.echo(f"altered configs of topic {entity_name}: {text}")
