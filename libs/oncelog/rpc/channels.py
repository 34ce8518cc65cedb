"""Client channel factory: keepalive, message size limits, retries of UNAVAILABLE, and tracing.

Only UNAVAILABLE is retried by the channel itself: it means the request was not processed (connection
refused, server draining, a retriable reason such as COORDINATOR_LOAD_IN_PROGRESS). Reasons that need new
metadata first (NOT_LEADER, NOT_COORDINATOR) or a decision by the caller are left to the client library,
which reads the ``ErrorInfo`` of the failed call.

A process opens all its channels through one :class:`ChannelFactory`, built from its settings (or the
``ONCELOG_TLS_*`` variables), so TLS and mutual TLS apply to every call it makes (see :mod:`oncelog.rpc.tls`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
from grpc import aio

from oncelog.rpc.interceptors import AioClientInterceptor, SyncClientInterceptor
from oncelog.rpc.tls import TlsConfig, server_name_options

DEFAULT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

_RETRY_SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {
                "name": [{}],
                "retryPolicy": {
                    "maxAttempts": 5,
                    "initialBackoff": "0.05s",
                    "maxBackoff": "1s",
                    "backoffMultiplier": 2,
                    "retryableStatusCodes": ["UNAVAILABLE"],
                },
            }
        ]
    }
)


def channel_options(max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> list[tuple[str, Any]]:
    """Options shared by every oncelog channel."""
    return [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", 30_000),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", _RETRY_SERVICE_CONFIG),
    ]


def aio_channel_options(
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    *,
    credentials: grpc.ChannelCredentials | None = None,
    server_name: str = "",
    retries: bool = True,
    extra_options: Sequence[tuple[str, Any]] = (),
) -> list[tuple[str, Any]]:
    """The options :func:`aio_channel` opens a channel with (arguments as there)."""
    options = channel_options(max_message_bytes)
    if not retries:
        options = [o for o in options if o[0] not in ("grpc.enable_retries", "grpc.service_config")]
        options.append(("grpc.enable_retries", 0))
    return [*options, *extra_options, *_name_override(credentials, server_name)]


def aio_channel(
    target: str,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    credentials: grpc.ChannelCredentials | None = None,
    server_name: str = "",
    tracer_provider: Any = None,
    retries: bool = True,
    extra_options: Sequence[tuple[str, Any]] = (),
) -> aio.Channel:
    """Open a grpc.aio channel to ``target`` (host:port) with oncelog's defaults and tracing.

    Args:
        target: host:port to dial.
        max_message_bytes: largest message sent or received.
        credentials: TLS credentials; ``None`` opens a plaintext channel.
        server_name: name to verify in the server's certificate instead of the host of ``target``.
        tracer_provider: tracer provider of the client spans; the global one by default.
        retries: the channel retries UNAVAILABLE itself; False switches gRPC's retries off (the client library
            retries by itself, knowing which calls are idempotent).
        extra_options: more channel options (for example reconnect backoffs).
    """
    interceptors = [AioClientInterceptor(tracer_provider)]
    options = aio_channel_options(
        max_message_bytes,
        credentials=credentials,
        server_name=server_name,
        retries=retries,
        extra_options=extra_options,
    )
    if credentials is not None:
        return aio.secure_channel(target, credentials, options=options, interceptors=interceptors)
    return aio.insecure_channel(target, options=options, interceptors=interceptors)


def sync_channel(
    target: str,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    credentials: grpc.ChannelCredentials | None = None,
    server_name: str = "",
    tracer_provider: Any = None,
) -> grpc.Channel:
    """Open a blocking channel to ``target`` with oncelog's defaults and tracing; arguments as :func:`aio_channel`."""
    options = channel_options(max_message_bytes) + _name_override(credentials, server_name)
    if credentials is not None:
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    return grpc.intercept_channel(channel, SyncClientInterceptor(tracer_provider))


def _name_override(credentials: grpc.ChannelCredentials | None, server_name: str) -> list[tuple[str, Any]]:
    # a plaintext channel verifies no certificate, so the override would only change the authority header
    if credentials is None:
        return []
    return server_name_options(server_name)


@dataclass(frozen=True)
class ChannelFactory:
    """Opens every channel of one process with the same credentials, limits and tracing.

    Services build it once from their settings (:meth:`from_settings`) and hand it to whatever dials other
    nodes (marker channels, producer-id fetchers), so turning TLS on needs no change where channels are
    opened. The default instance opens plaintext channels.

    Attributes:
        credentials: TLS credentials of outgoing channels; ``None`` for plaintext.
        server_name: name verified in servers' certificates instead of the dialled host.
        max_message_bytes: largest message sent or received.
        tracer_provider: tracer provider of the client spans; the global one by default.
        retries: asyncio channels retry UNAVAILABLE themselves (off for the client library's channels).
        extra_options: more options for asyncio channels.
    """

    credentials: grpc.ChannelCredentials | None = None
    server_name: str = ""
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    tracer_provider: Any = None
    retries: bool = True
    extra_options: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def from_tls(cls, tls: TlsConfig, **kwargs: Any) -> ChannelFactory:
        """A factory using ``tls`` for every channel; raises ConfigError when its files are unusable."""
        return cls(credentials=tls.channel_credentials(), server_name=tls.server_name, **kwargs)

    @classmethod
    def from_settings(cls, settings: Any, **kwargs: Any) -> ChannelFactory:
        """The factory of a service process: its ``tls_*`` settings and ``max_message_bytes``."""
        kwargs.setdefault("max_message_bytes", settings.max_message_bytes)
        return cls.from_tls(TlsConfig.from_settings(settings), **kwargs)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **kwargs: Any) -> ChannelFactory:
        """The factory of a client process (CLI, tools): the ``ONCELOG_TLS_*`` variables."""
        return cls.from_tls(TlsConfig.from_env(environ), **kwargs)

    def aio(self, target: str) -> aio.Channel:
        """Open a grpc.aio channel to ``target``."""
        return aio_channel(
            target,
            max_message_bytes=self.max_message_bytes,
            credentials=self.credentials,
            server_name=self.server_name,
            tracer_provider=self.tracer_provider,
            retries=self.retries,
            extra_options=self.extra_options,
        )

    def sync(self, target: str) -> grpc.Channel:
        """Open a blocking channel to ``target``."""
        return sync_channel(
            target,
            max_message_bytes=self.max_message_bytes,
            credentials=self.credentials,
            server_name=self.server_name,
            tracer_provider=self.tracer_provider,
        )


class ChannelPool:
    """One grpc.aio channel per address, opened by ``factory`` on first use (a service dialling other nodes:
    marker delivery, replica fetching).

    ``forget(address)`` closes and drops an address's channel after a transport failure: a node that restarted
    listens elsewhere, and channels to dead addresses are not kept around.

    Once ``close()`` has run the pool opens nothing more: ``get()`` raises :meth:`closed_error`. A task still
    running when its owner closed (a retry, a background refresh) would otherwise open a channel nobody closes,
    whose poller then fires on a closed event loop ("Event loop is closed").
    """

    def __init__(self, factory: ChannelFactory | None = None) -> None:
        self._factory = factory or ChannelFactory()
        self._channels: dict[str, aio.Channel] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has been called."""
        return self._closed

    def closed_error(self) -> Exception:
        """What ``get()`` raises after ``close()`` (a subclass names its owner's state)."""
        return RuntimeError("the channel pool is closed; no channel can be opened")

    def __len__(self) -> int:
        """How many channels are open."""
        return len(self._channels)

    def get(self, address: str) -> aio.Channel:
        """The channel to ``address`` (call on the loop that uses it).

        Raises:
            Exception: :meth:`closed_error`, once the pool is closed.
        """
        channel = self._channels.get(address)
        if channel is None:
            if self._closed:
                raise self.closed_error()
            channel = self._channels[address] = self._factory.aio(address)
        return channel

    async def forget(self, address: str) -> None:
        """Close and drop the channel to ``address``, if any."""
        channel = self._channels.pop(address, None)
        if channel is not None:
            await channel.close()

    async def close(self) -> None:
        """Close every channel and open no more; calls in flight fail with CANCELLED. Idempotent."""
        self._closed = True
        channels, self._channels = list(self._channels.values()), {}
        await asyncio.gather(*(channel.close() for channel in channels), return_exceptions=True)
