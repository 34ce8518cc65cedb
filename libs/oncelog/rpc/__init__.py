"""Shared gRPC plumbing: server lifecycle, error mapping, channels, TLS and telemetry interceptors."""

from oncelog.rpc.channels import ChannelFactory, ChannelPool, aio_channel, channel_options, sync_channel
from oncelog.rpc.errors import from_error_info, from_rpc_error, to_error_info, to_status
from oncelog.rpc.server import GrpcServer, ServiceSpec
from oncelog.rpc.tls import TlsConfig, TlsMode, client_credentials_from_env

__all__ = [
    "ChannelFactory",
    "ChannelPool",
    "GrpcServer",
    "ServiceSpec",
    "TlsConfig",
    "TlsMode",
    "aio_channel",
    "channel_options",
    "client_credentials_from_env",
    "from_error_info",
    "from_rpc_error",
    "sync_channel",
    "to_error_info",
    "to_status",
]
