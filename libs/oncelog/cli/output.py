"""How the ``oncelog`` commands print: listings as a table, JSON or plain lines; server text always literally.

Every listing command takes ``--output table|json|plain``:

* ``table``: a box table for people. When stdout is not a terminal, the table is as wide as its content
  (nothing is cut at 80 columns or wrapped), so ``oncelog topics describe | less -S`` shows every cell.
* ``json``: one JSON document (a list of objects, keys as the table's column names in snake case) for ``jq``.
* ``plain``: one line per row, cells separated by a tab, no header, for ``cut``/``awk``.

Text that comes from a server or a user (topic names, error messages) is never read as Rich markup:
``[a-zA-Z0-9._-]`` in an error stays on screen as written.
"""

from __future__ import annotations

import enum
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["Format", "err", "error", "output_option", "print_rows", "print_table", "stdout_console"]

# wide enough for any row: a table piped to a file keeps every cell whole
_UNBOUNDED_WIDTH = 1_000_000


class Format(enum.StrEnum):
    """The ``--output`` choices."""

    TABLE = "table"
    JSON = "json"
    PLAIN = "plain"


def output_option(default: Format = Format.TABLE) -> Any:
    """The ``--output/-o`` option of a listing command."""
    return typer.Option(
        default,
        "--output",
        "-o",
        case_sensitive=False,
        help="table (for people), json (one document, for jq) or plain (tab-separated lines, no header)",
    )


def _console(stream: Any, *, stderr: bool = False) -> Console:
    width = None if stream.isatty() else _UNBOUNDED_WIDTH
    return Console(stderr=stderr, highlight=False, emoji=False, markup=False, soft_wrap=False, width=width)


def stdout_console() -> Console:
    """A console on the current stdout (looked up per call, so tests and pipes see their own stream)."""
    return _console(sys.stdout)


def err() -> Console:
    """A console on the current stderr: progress, summaries and errors."""
    return _console(sys.stderr, stderr=True)


def error(message: str) -> None:
    """Print ``error: <message>`` on stderr, the message verbatim (red prefix on a terminal only)."""
    console = err()
    line = Text("error:", style="red")
    line.append(" " + message, style="")
    console.print(line)


def _snake(column: str) -> str:
    return column.strip().lower().replace(" ", "_").replace("-", "_")


def print_rows(
    rows: Sequence[Sequence[Any]],
    columns: Sequence[str],
    fmt: Format,
    *,
    title: str | None = None,
    extra: Mapping[str, Any] | None = None,
) -> None:
    """Print ``rows`` (one value per column) in the chosen format on stdout.

    Args:
        rows: the rows; values are printed with ``str()`` except in JSON, where ints, bools and None stay typed.
        columns: column headers (their snake case names the JSON keys).
        fmt: the ``--output`` choice.
        title: table title (table format only).
        extra: JSON only: fields added to every object (for example the topic of a partition listing).
    """
    if fmt is Format.JSON:
        keys = [_snake(c) for c in columns]
        objects = [{**(extra or {}), **dict(zip(keys, row, strict=True))} for row in rows]
        typer.echo(json.dumps(objects, indent=None, default=str))
        return
    if fmt is Format.PLAIN:
        for row in rows:
            typer.echo("\t".join("" if v is None else str(v) for v in row))
        return
    table = Table()
    for column in columns:
        table.add_column(Text(column))
    for row in rows:
        table.add_row(*(Text("-" if v is None else str(v)) for v in row))
    print_table(table, title)


def print_table(table: Table, title: str | None = None) -> None:
    """Print ``table`` on stdout under ``title``, a line of its own (a table title would wrap at the table width)."""
    console = stdout_console()
    if title:
        console.print(Text(title))
    console.print(table)
