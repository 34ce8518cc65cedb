"""``oncelog produce``: write lines of stdin or a file as records (kafka-console-producer)."""

from __future__ import annotations

import base64
import binascii
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.text import Text

from oncelog.cli.common import (
    SETTINGS,
    Bootstrap,
    CommandFailed,
    admin_client,
    bootstrap_addresses,
    command_errors,
    key_values,
    require_online,
)
from oncelog.cli.output import err, error
from oncelog.client import AbortableError, OncelogError, Producer, ProducerFencedError
from oncelog.errors import Reason


def register(root: typer.Typer) -> None:
    """Add ``oncelog produce`` to the root command."""
    root.command("produce")(produce)


def _caused_by_fencing(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, ProducerFencedError) or getattr(exc, "reason", None) is Reason.PRODUCER_FENCED:
            return True
        exc = getattr(exc, "cause", None)
    return False


def _lines(file: Path | None) -> Iterator[bytes]:
    """Input lines as bytes, line ending removed: any encoding (or none) goes through unchanged."""
    if file is None:
        for line in sys.stdin.buffer:
            yield line.rstrip(b"\r\n")
        return
    with file.open("rb") as handle:
        for line in handle:
            yield line.rstrip(b"\r\n")


# --producer-property: Kafka's names (and the library's) -> Producer keyword and value parser
PRODUCER_PROPERTIES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "acks": ("acks", str),
    "compression.type": ("compression", lambda v: None if v == "none" else v),
    "max.request.size": ("max_request_size", int),
    "linger.ms": ("linger_ms", int),
    "batch.size": ("batch_size", int),
    "enable.idempotence": ("enable_idempotence", lambda v: {"true": True, "false": False}[v.lower()]),
    "transaction.timeout.ms": ("transaction_timeout_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight", int),
}


def _producer_properties(items: list[str]) -> dict[str, Any]:
    """``--producer-property`` values as Producer keywords; an unknown name or a bad value is a usage error."""
    by_keyword = {keyword: (keyword, parse) for keyword, parse in PRODUCER_PROPERTIES.values()}
    known = {**PRODUCER_PROPERTIES, **by_keyword}
    properties = {}
    for name, raw in key_values(items, "--producer-property"):
        if name not in known:
            raise typer.BadParameter(
                f"unknown producer property {name!r}; use one of {', '.join(PRODUCER_PROPERTIES)}",
                param_hint="--producer-property",
            )
        keyword, parse = known[name]
        try:
            properties[keyword] = parse(raw)
        except (ValueError, KeyError):
            raise typer.BadParameter(f"{name}={raw!r} does not parse", param_hint="--producer-property") from None
    return properties


def _b64(data: bytes | None, line: int) -> bytes | None:
    if data is None:
        return None
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error:
        raise CommandFailed(f"line {line} is not base64 ({data[:40]!r}); nothing after it was sent") from None


def _fenced_message(transactional_id: str | None, committed: int) -> str:
    return (
        f"producer fenced: another producer started with transactional id {transactional_id!r}, or an operator "
        f"aborted its transaction (`oncelog transactions abort`); this one stopped. The open transaction is not "
        f"committed; {committed} record(s) were committed before. Produce the rest again with a new run."
    )


def produce(
    topic: str = typer.Argument(..., help="topic to write to"),
    file: Path | None = typer.Option(None, "--file", "-f", exists=True, dir_okay=False, help="read lines from FILE"),
    key_separator: str | None = typer.Option(
        None, "--key-separator", "-k", help="split each line at the first SEP into key and value"
    ),
    transactional_id: str | None = typer.Option(
        None, "--transactional-id", "-t", help="write in transactions with this transactional id"
    ),
    transaction_size: int = typer.Option(
        0, "--transaction-size", min=0, help="records per transaction with --transactional-id; 0: one transaction"
    ),
    partition: int | None = typer.Option(None, "--partition", "-p", min=0, help="write every record to this partition"),
    linger_ms: int = typer.Option(5, "--linger-ms", min=0, help="batching delay"),
    header: list[str] = typer.Option([], "--header", "-H", help="NAME=VALUE header on every record (repeatable)"),
    producer_property: list[str] = typer.Option(
        [], "--producer-property", "-X", help="Kafka producer setting NAME=VALUE (acks, compression.type, ...)"
    ),
    base64_input: bool = typer.Option(
        False, "--base64", help="each line (and key) is base64: send the decoded bytes (binary records)"
    ),
    bootstrap: str | None = Bootstrap,
) -> None:
    """Write each line of stdin (or --file) as one record, then print the rate.

    Lines are sent as the bytes they are (any encoding). Records are acknowledged exactly once
    (idempotent producer); with --transactional-id they become visible to read_committed consumers
    only when their transaction commits. Ctrl-C aborts the open transaction.

    Example: seq 1 1000 | oncelog produce orders --transactional-id loader-1 --transaction-size 100
    """
    if transaction_size and not transactional_id:
        raise typer.BadParameter(
            "--transaction-size needs --transactional-id (-t); without one, records are not written in transactions",
            param_hint="--transaction-size",
        )
    total = None
    if file is not None:
        with file.open("rb") as handle:
            total = sum(1 for _ in handle)
    sent = failed = committed = 0
    first_failure: list[BaseException] = []
    separator = None if key_separator is None else key_separator.encode()
    headers = [(name, value.encode()) for name, value in key_values(header, "--header")]
    properties = {"linger_ms": linger_ms, **_producer_properties(producer_property)}
    started = time.monotonic()
    with command_errors():
        addresses = bootstrap_addresses(bootstrap)
        producer = Producer(  # a bad setting is refused before anything is asked of the cluster
            addresses,
            transactional_id=transactional_id,
            **properties,
            max_block_ms=SETTINGS.timeout_ms,
            request_timeout_ms=SETTINGS.request_timeout_ms,
            delivery_timeout_ms=SETTINGS.timeout_ms,
        )
        try:
            with admin_client(addresses) as admin:
                require_online(admin, topic, None if partition is None else [partition])
        except BaseException:
            producer.close()
            raise
    in_transaction = 0
    try:
        with command_errors(), producer:
            if transactional_id:
                producer.init_transactions()
                producer.begin_transaction()
            with Progress(
                SpinnerColumn(),
                TextColumn("[progress.description]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=err(),
                transient=True,
                disable=not sys.stderr.isatty(),  # a log file gets the summary line, not a bar's remains
            ) as progress:
                task = progress.add_task(f"producing to {topic}", total=total)

                def acknowledged(future: Any) -> None:
                    nonlocal failed
                    if future.exception() is not None:
                        failed += 1
                        first_failure[:] = first_failure or [future.exception()]

                try:
                    for line in _lines(file):
                        key: bytes | None = None
                        value: bytes | None = line
                        if separator is not None and separator in line:
                            key, _, value = line.partition(separator)
                        if base64_input:
                            key, value = _b64(key, sent + 1), _b64(value, sent + 1)
                        sent_future = producer.send(topic, value, key=key, partition=partition, headers=headers or None)
                        sent_future.add_done_callback(acknowledged)
                        sent += 1
                        in_transaction += 1
                        progress.advance(task)
                        if transactional_id and transaction_size and in_transaction >= transaction_size:
                            producer.commit_transaction()
                            committed += in_transaction
                            producer.begin_transaction()
                            in_transaction = 0
                    if transactional_id:
                        producer.commit_transaction()
                        committed += in_transaction
                        in_transaction = 0
                    else:
                        producer.flush()
                except KeyboardInterrupt:
                    _interrupted(producer, transactional_id, sent, committed, in_transaction)
                except AbortableError as exc:
                    _abort_failed_transaction(producer, transactional_id, exc, committed)
                except OncelogError as exc:
                    if _caused_by_fencing(exc):
                        raise CommandFailed(_fenced_message(transactional_id, committed)) from None
                    raise
    except KeyboardInterrupt:  # a second Ctrl-C while closing
        raise typer.Exit(130) from None
    elapsed = max(time.monotonic() - started, 1e-9)
    if failed:
        cause = first_failure[0] if first_failure else None
        reason = getattr(cause, "message", str(cause)) if cause is not None else "unknown"
        error(f"{failed} of {sent} record(s) failed; first error: {reason}")
        raise typer.Exit(1)
    err().print(Text(f"produced {sent} record(s) to {topic} in {elapsed:.2f} s ({sent / elapsed:,.0f} records/s)"))


def _abort_failed_transaction(
    producer: Producer, transactional_id: str | None, failure: AbortableError, committed: int
) -> None:
    """The open transaction cannot commit: abort it, then say why in one line (fencing has its own message)."""
    reason = failure.cause.message if failure.cause is not None else failure.message
    try:
        producer.abort_transaction()
    except OncelogError as exc:
        if _caused_by_fencing(exc):
            raise CommandFailed(_fenced_message(transactional_id, committed)) from None
        raise CommandFailed(f"the transaction failed ({reason}) and could not be aborted ({exc.message})") from None
    raise CommandFailed(
        f"the transaction failed and was aborted: {reason}; {committed} record(s) were committed before"
    )


def _interrupted(producer: Producer, transactional_id: str | None, sent: int, committed: int, open_count: int) -> None:
    """Ctrl-C during produce: abort the open transaction (or flush), say what happened, exit 130."""
    if transactional_id:
        try:
            producer.abort_transaction()
            outcome = f"aborted the open transaction ({open_count} record(s) discarded)"
        except OncelogError as exc:
            outcome = f"could not abort the open transaction ({exc.message}); it aborts at its timeout"
        error(f"interrupted: {outcome}; {committed} record(s) were committed before")
    else:
        producer.flush()
        error(f"interrupted: {sent} record(s) were produced")
    raise typer.Exit(130)
