"""What every client command of the ``oncelog`` CLI shares: settings, bootstrap, error printing, parsing.

Every command talks to a running cluster through :mod:`oncelog.client`. ``--bootstrap`` (or
``ONCELOG_BOOTSTRAP``) names any address of the cluster; without it the commands read
``.oncelog/cluster.json``, written by ``oncelog dev``. Data goes to stdout, one record per line, so the
output pipes; progress and errors go to stderr (tables of the describe/list commands go to stdout).

A command module defines its commands and a ``register(app)`` function; :mod:`oncelog.cli.main` lists the
modules, so adding a command group is one line there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import grpc
import typer

from oncelog.catalog.topics import config_name
from oncelog.cli.output import error
from oncelog.client import AdminClient, OncelogError, TopicPartition
from oncelog.client.metadata import TopicInfo
from oncelog.client.transport import BOOTSTRAP_ENV, DEFAULT_CLUSTER_FILE, BootstrapError, resolve_bootstrap

__all__ = [
    "CONNECT_TIMEOUT_S",
    "OPEN_STATES",
    "SETTINGS",
    "Bootstrap",
    "CommandFailed",
    "Settings",
    "admin_client",
    "bootstrap_addresses",
    "command_errors",
    "key_values",
    "ms_to_text",
    "offline_partitions",
    "parse_configs",
    "parse_topic_partition",
    "require_online",
    "with_admin",
]

T = TypeVar("T")

BOOTSTRAP_HELP = f"any cluster address, host:port[,host:port]; default: the one in {DEFAULT_CLUSTER_FILE}"
Bootstrap = typer.Option(None, "--bootstrap", "-b", envvar=BOOTSTRAP_ENV, help=BOOTSTRAP_HELP)

# a connection attempt gets at most this long, so a wrong address fails in seconds, not at the request timeout
CONNECT_TIMEOUT_S = 5.0


@dataclass
class Settings:
    """Options of the ``oncelog`` command itself, set before any subcommand runs."""

    timeout_s: float = 30.0
    """Bound of every network step: connecting, each request, each record's delivery (``--timeout``)."""

    @property
    def timeout_ms(self) -> int:
        """``timeout_s`` in whole milliseconds (at least one)."""
        return max(int(self.timeout_s * 1000), 1)

    @property
    def request_timeout_ms(self) -> int:
        """One request's bound: the timeout, at most 30 s (retries then fit in the rest)."""
        return min(self.timeout_ms, 30_000)


SETTINGS = Settings()


class CommandFailed(Exception):
    """A failure the command explains in one line (exit code 1)."""


@contextmanager
def command_errors() -> Iterator[None]:
    """Turn a library error into one line on stderr and exit code 1 (no traceback for expected failures)."""
    try:
        yield
    except CommandFailed as exc:
        error(str(exc))
        raise typer.Exit(1) from None
    except OncelogError as exc:
        message = exc.message
        if "did not complete in time" in message or "expired after" in message:
            message += f" (oncelog --timeout is {SETTINGS.timeout_s:g} s)"
        error(message)
        raise typer.Exit(1) from None
    except ValueError as exc:
        error(str(exc))
        raise typer.Exit(2) from None


def _probe(address: str, timeout_s: float) -> str | None:
    """None when ``address`` accepts a gRPC connection within ``timeout_s``, else what went wrong."""
    settled = threading.Event()
    states: list[grpc.ChannelConnectivity] = []

    def watch(state: grpc.ChannelConnectivity) -> None:
        if state in (grpc.ChannelConnectivity.READY, grpc.ChannelConnectivity.TRANSIENT_FAILURE):
            states.append(state)
            settled.set()

    channel = grpc.insecure_channel(address)
    channel.subscribe(watch, try_to_connect=True)
    try:
        if not settled.wait(timeout_s):
            return f"no answer within {timeout_s:g} s"
        return None if states[0] is grpc.ChannelConnectivity.READY else "connection refused or host unreachable"
    finally:
        channel.unsubscribe(watch)
        channel.close()


def bootstrap_addresses(bootstrap: str | None) -> tuple[str, ...]:
    """The cluster's addresses, checked to answer within seconds; otherwise one line saying what to check."""
    try:
        addresses = resolve_bootstrap(bootstrap, how_to_pass=f"pass --bootstrap host:port (or set {BOOTSTRAP_ENV})")
    except BootstrapError as exc:
        raise CommandFailed(exc.message) from None
    wait_s = min(SETTINGS.timeout_s, CONNECT_TIMEOUT_S)
    problems = []
    for address in addresses:
        problem = _probe(address, wait_s)
        if problem is None:
            return addresses
        problems.append(f"{address}: {problem}")
    source = "--bootstrap" if bootstrap is not None else str(DEFAULT_CLUSTER_FILE)
    raise CommandFailed(
        f"cannot reach the cluster ({'; '.join(problems)}); check that the cluster is running (`oncelog dev`, "
        f"or the services' pods) and that {source} (or {BOOTSTRAP_ENV}) names one of its addresses"
    )


def admin_client(addresses: tuple[str, ...]) -> AdminClient:
    return AdminClient(addresses, request_timeout_ms=SETTINGS.timeout_ms)


def with_admin(bootstrap: str | None, action: Callable[[AdminClient], T]) -> T:
    with command_errors(), admin_client(bootstrap_addresses(bootstrap)) as admin:
        return action(admin)


def offline_partitions(topic: TopicInfo, partitions: Iterable[int] | None = None) -> list[str]:
    wanted = None if partitions is None else set(partitions)
    return [
        f"{topic.name}-{p.partition} (leader {p.leader_node_id or 'none'})"
        for p in topic.partitions
        if not p.leader_address and (wanted is None or p.partition in wanted)
    ]


def require_online(admin: AdminClient, topic: str, partitions: Iterable[int] | None = None) -> TopicInfo:
    """The topic's description; fails naming every wanted partition whose leader is not live."""
    info = admin.describe_topics([topic])[topic]
    offline = offline_partitions(info, partitions)
    if offline:
        raise CommandFailed(
            f"{'partition' if len(offline) == 1 else 'partitions'} {', '.join(offline)} "
            f"{'is' if len(offline) == 1 else 'are'} offline: the leading storage node is not live; start it "
            f"again, and see `oncelog topics describe {topic}`"
        )
    return info


def ms_to_text(ms: int) -> str:
    if ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def key_values(items: list[str], option: str) -> list[tuple[str, str]]:
    pairs = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"{item!r} is not key=value", param_hint=option)
        pairs.append((key, value))
    return pairs


def parse_configs(items: list[str]) -> dict[str, str]:
    return {config_name(key): value for key, value in key_values(items, "--config")}


def parse_topic_partition(text: str) -> TopicPartition:
    topic, sep, number = text.rpartition(":")
    if not sep or not topic or not number.isdigit():
        raise typer.BadParameter(f"{text!r} is not TOPIC:PARTITION (for example orders:3)", param_hint="--partition")
    return TopicPartition(topic, int(number))


# the states of a transaction that is open (not yet complete) at its coordinator
OPEN_STATES = ("ongoing", "prepared", "prepare_commit", "prepare_abort", "prepare_epoch_fence")
