"""Client channel factory: keepalive, message size limits, retries of UNAVAILABLE, and tracing.

Only UNAVAILABLE is retried by the channel itself: it means the request was not processed (connection
refused, server draining, a retriable reason such as COORDINATOR_LOAD_IN_PROGRESS). Reasons that need new
metadata first (NOT_LEADER, NOT_COORDINATOR) or a decision by the caller are left to the client library,
which reads the ``ErrorInfo`` of the failed call.
"""

from __future__ import annotations

import json
from typing import Any

import grpc
from grpc import aio

from oncelog.rpc.interceptors import AioClientInterceptor, SyncClientInterceptor

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


def aio_channel(
    target: str,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    credentials: grpc.ChannelCredentials | None = None,
    tracer_provider: Any = None,
) -> aio.Channel:
    """Open a grpc.aio channel to ``target`` (host:port) with oncelog's defaults and tracing."""
    interceptors = [AioClientInterceptor(tracer_provider)]
    options = channel_options(max_message_bytes)
    if credentials is not None:
        return aio.secure_channel(target, credentials, options=options, interceptors=interceptors)
    return aio.insecure_channel(target, options=options, interceptors=interceptors)


def sync_channel(
    target: str,
    *,
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    credentials: grpc.ChannelCredentials | None = None,
    tracer_provider: Any = None,
) -> grpc.Channel:
    """Open a blocking channel to ``target`` with oncelog's defaults and tracing."""
    options = channel_options(max_message_bytes)
    if credentials is not None:
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    return grpc.intercept_channel(channel, SyncClientInterceptor(tracer_provider))
