"""Load frozen settings dataclasses from ``ONCELOG_*`` environment variables.

Each service declares a frozen dataclass whose fields have defaults and a ``help`` in their metadata.
A field is read from ``ONCELOG_<SERVICE>_<FIELD>``, or from the exact name given as ``env`` in the
field metadata for settings shared by every service (``ONCELOG_DATABASE_URL``, ``ONCELOG_REDIS_URL``).
Every missing or malformed variable is collected and reported in one :class:`ConfigError`, so an
operator fixes a broken deployment in one round instead of one variable per restart.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from oncelog.config.tls import TlsSettings

T = TypeVar("T")
S = TypeVar("S", bound="ServiceSettings")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """One or more environment variables are missing or invalid; ``problems`` lists each of them."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("invalid configuration:\n  " + "\n  ".join(problems))


def setting(default: Any = dataclasses.MISSING, *, help: str, env: str | None = None) -> Any:
    """Declare a settings field with its documentation and optional shared variable name."""
    metadata = {"help": help, "env": env}
    if default is dataclasses.MISSING:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


def env_name(prefix: str, f: dataclasses.Field[Any]) -> str:
    """The environment variable that feeds field ``f`` under ``prefix`` (e.g. ``ONCELOG_PID_ALLOCATOR_``)."""
    return f.metadata.get("env") or f"{prefix}{f.name.upper()}"


def _convert(raw: str, annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if raw == "":
            return None
        return _convert(raw, args[0])
    if annotation is bool:
        lowered = raw.strip().lower()
        if lowered in _TRUE:
            return True
        if lowered in _FALSE:
            return False
        raise ValueError(f"expected one of {sorted(_TRUE | _FALSE)}")
    if annotation is int:
        return int(raw.strip())
    if annotation is float:
        return float(raw.strip())
    if annotation is str:
        return raw
    if origin is tuple:
        return tuple(item.strip() for item in raw.split(",") if item.strip())
    raise TypeError(f"unsupported settings type {annotation!r}")


def load_settings(cls: type[T], prefix: str, environ: Mapping[str, str] | None = None, **overrides: Any) -> T:
    """Build ``cls`` from ``environ`` (default ``os.environ``); explicit ``overrides`` win over the environment.

    Raises:
        ConfigError: listing every missing required variable and every value that does not parse or
            fails the dataclass's ``validate()`` checks.
    """
    environ = os.environ if environ is None else environ
    hints = typing.get_type_hints(cls)
    values: dict[str, Any] = {}
    problems: list[str] = []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name in overrides:
            values[f.name] = overrides[f.name]
            continue
        name = env_name(prefix, f)
        raw = environ.get(name)
        if raw is None:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                problems.append(f"{name} is required: {f.metadata.get('help', f.name)}")
            continue
        try:
            values[f.name] = _convert(raw, hints[f.name])
        except (ValueError, TypeError) as exc:
            problems.append(f"{name}={raw!r} is invalid ({exc}): {f.metadata.get('help', f.name)}")
    if problems:
        raise ConfigError(problems)
    instance = cls(**values)
    validate = getattr(instance, "validate", None)
    if validate is not None:
        problems = list(validate())
        if problems:
            raise ConfigError(problems)
    return instance


def settings_help(cls: type[Any], prefix: str) -> str:
    """One block per setting of ``cls``: its variable, default and help (what ``--help`` of a service prints)."""
    blocks = []
    for f in dataclasses.fields(cls):
        default = "required" if f.default is dataclasses.MISSING else f"default {f.default!r}"
        blocks.append(f"  {env_name(prefix, f)}  ({default})\n      {f.metadata.get('help', f.name)}")
    return "\n".join(blocks)


def _is_listen_address(value: str) -> bool:
    host, sep, port = value.rpartition(":")
    return bool(sep and host and port.isdigit() and int(port) <= 65535)


def _default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(frozen=True)
class ServiceSettings:
    """Settings every oncelog service shares; services subclass it, set ``ENV_PREFIX`` and add fields."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_"

    listen: str = setting("127.0.0.1:0", help="host:port to bind; port 0 picks a free port")
    advertise: str = setting("", help="host:port other processes use to reach this one; default the bound address")
    external_listen: str = setting(
        "",
        help="host:port of a second listener for clients outside the network of the services (Kafka's external"
        " listener): ClusterService answers on it with every node's external address; empty disables it",
    )
    external_advertise: str = setting(
        "",
        help="host:port clients outside reach this node at (a NodePort or load balancer address); default the bound"
        " external address",
    )
    node_id: str = setting("", help="stable node id in the catalog; default <hostname>-<pid>")
    database_url: str = setting(
        "sqlite:///.oncelog/catalog.db",
        env="ONCELOG_DATABASE_URL",
        help="SQLAlchemy URL of the cluster catalog (sqlite:///path or postgresql+psycopg://...)",
    )
    redis_url: str = setting("", env="ONCELOG_REDIS_URL", help="optional Redis URL for caches; empty disables Redis")
    node_lease_ms: int = setting(10_000, help="how long a node registration lives without a heartbeat")
    node_heartbeat_interval_ms: int = setting(
        0, help="period of the node registration's renewal; 0 renews every third of node_lease_ms"
    )
    drain_delay_s: float = setting(
        0.2, help="seconds health reports NOT_SERVING before the server stops accepting calls"
    )
    shutdown_grace_s: float = setting(10.0, help="seconds in-flight calls get to finish on SIGTERM")
    max_message_bytes: int = setting(64 * 1024 * 1024, help="largest gRPC message accepted or sent")
    ready_file: str = setting(
        "", env="ONCELOG_READY_FILE", help="if set, the bound address is written here as JSON once serving"
    )
    parent_pid: int = setting(
        0,
        env="ONCELOG_PARENT_PID",
        help="drain and exit once this process is no longer the parent (the local cluster sets it); 0 disables",
    )
    txn_coordinator_shards: int = setting(
        16, env="ONCELOG_TXN_COORDINATOR_SHARDS", help="transaction coordinator shards, fixed at cluster creation"
    )
    group_offsets_shards: int = setting(
        16, env="ONCELOG_GROUP_OFFSETS_SHARDS", help="group-offsets shards, fixed at cluster creation"
    )
    default_replication_factor: int = setting(
        1,
        env="ONCELOG_DEFAULT_REPLICATION_FACTOR",
        help="copies of each partition for topics created without a replication factor; set alike on every process",
    )
    rack: str = setting("", env="ONCELOG_RACK", help="rack or zone label of this node; replicas spread over racks")
    tls_cert: str = setting(
        "", env="ONCELOG_TLS_CERT", help="PEM certificate chain of this node; with tls_key it turns TLS on"
    )
    tls_key: str = setting("", env="ONCELOG_TLS_KEY", help="PEM private key of tls_cert (unencrypted)")
    tls_ca: str = setting(
        "",
        env="ONCELOG_TLS_CA",
        help="PEM CA bundle of the cluster; servers then require client certificates (mutual TLS) and"
        " channels trust only this CA",
    )
    tls_server_name: str = setting(
        "",
        env="ONCELOG_TLS_SERVER_NAME",
        help="name verified in servers' certificates instead of the dialled host (a shared internal DNS name)",
    )
    metrics_listen: str = setting(
        "",
        env="ONCELOG_METRICS_LISTEN",
        help="host:port of the Prometheus scrape endpoint (GET /metrics, next to OTLP push); port 0 picks a free"
        " one; empty disables it",
    )
    health_listen: str = setting(
        "",
        help="host:port of an extra plaintext listener serving only grpc.health.v1, for probes that cannot"
        " speak TLS (Kubernetes gRPC probes); empty disables it",
    )

    @classmethod
    def help_text(cls) -> str:
        """Every variable this service reads, with its default and meaning."""
        return settings_help(cls, cls.ENV_PREFIX)

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None, **overrides: Any) -> S:
        """Load from the environment (``ENV_PREFIX`` + field name); every problem in one ConfigError."""
        return load_settings(cls, cls.ENV_PREFIX, environ, **overrides)

    def resolved_node_id(self) -> str:
        """The node id, defaulting to ``<hostname>-<pid>``."""
        return self.node_id or _default_node_id()

    def validate(self) -> list[str]:
        """Cross-field checks; returns one message per problem."""
        problems = []
        if ":" not in self.listen:
            problems.append(f"listen={self.listen!r} must be host:port")
        if self.advertise and ":" not in self.advertise:
            problems.append(f"advertise={self.advertise!r} must be host:port")
        for name in ("external_listen", "external_advertise"):
            value = getattr(self, name)
            if value and not _is_listen_address(value):
                problems.append(f"{self.ENV_PREFIX}{name.upper()}={value!r} must be host:port (port 0-65535)")
        if self.external_advertise and not self.external_listen:
            problems.append(
                f"{self.ENV_PREFIX}EXTERNAL_ADVERTISE needs {self.ENV_PREFIX}EXTERNAL_LISTEN: the external address must"
                " lead to a listener"
            )
        for name in (
            "node_lease_ms",
            "max_message_bytes",
            "txn_coordinator_shards",
            "group_offsets_shards",
            "default_replication_factor",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        heartbeat, lease = self.node_heartbeat_interval_ms, self.node_lease_ms
        if heartbeat < 0 or 0 < lease <= heartbeat:
            problems.append(
                f"node_heartbeat_interval_ms={self.node_heartbeat_interval_ms} must be 0 (a third of the lease) or "
                f"below node_lease_ms={self.node_lease_ms}, so the lease is renewed before it lapses"
            )
        if self.shutdown_grace_s < 0 or self.drain_delay_s < 0:
            problems.append("shutdown_grace_s and drain_delay_s must not be negative")
        if not self.database_url:
            problems.append("ONCELOG_DATABASE_URL must not be empty")
        if self.metrics_listen and not _is_listen_address(self.metrics_listen):
            problems.append(
                f"ONCELOG_METRICS_LISTEN={self.metrics_listen!r} must be host:port (for example 0.0.0.0:9464; "
                "port 0 picks one)"
            )
        health_env = f"{self.ENV_PREFIX}HEALTH_LISTEN"
        if self.health_listen and ":" not in self.health_listen:
            problems.append(f"{health_env}={self.health_listen!r} must be host:port")
        elif self.health_listen == self.listen and not self.listen.endswith(":0"):
            problems.append(f"{health_env}={self.health_listen!r} must differ from the main listen address")
        problems += TlsSettings.from_settings(self).problems(serving=True)
        return problems
