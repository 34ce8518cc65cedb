"""Shared gRPC plumbing: server lifecycle, error mapping, channels and tracing interceptors."""

from oncelog.rpc.channels import aio_channel, channel_options, sync_channel
from oncelog.rpc.errors import from_error_info, from_rpc_error, to_error_info, to_status
from oncelog.rpc.server import GrpcServer, ServiceSpec

__all__ = [
    "GrpcServer",
    "ServiceSpec",
    "aio_channel",
    "channel_options",
    "from_error_info",
    "from_rpc_error",
    "sync_channel",
    "to_error_info",
    "to_status",
]
