"""The one mapping between domain errors and the wire: gRPC status + ``ErrorInfo`` detail.

Servers raise :class:`oncelog.errors.OncelogError`; the server interceptor turns it into a status whose
code comes from :data:`oncelog.errors.REASONS` and whose ``grpc-status-details-bin`` trailer holds a
``google.rpc.Status`` with one packed ``oncelog.api.common.v1.ErrorInfo`` (gRPC's rich error model, readable
from every language). Clients call :func:`from_rpc_error` to get the same domain error back.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import status_pb2

from oncelog.api.common.v1 import ErrorInfo, ErrorReason
from oncelog.errors import REASONS, OncelogError, Reason, error_for

STATUS_DETAILS_KEY = "grpc-status-details-bin"
_PREFIX = "ERROR_REASON_"


def reason_to_proto(reason: Reason) -> ErrorReason.ValueType:
    """Wire enum value of a domain reason."""
    return ErrorReason.Value(_PREFIX + reason.name)


def reason_from_proto(value: int) -> Reason:
    """Domain reason of a wire enum value; unknown or unset values map to UNKNOWN_SERVER_ERROR."""
    try:
        return Reason[ErrorReason.Name(ErrorReason.ValueType(value))[len(_PREFIX) :]]
    except (ValueError, KeyError):
        return Reason.UNKNOWN_SERVER_ERROR


def status_code(reason: Reason) -> grpc.StatusCode:
    """gRPC status code for a reason, from the single table in :mod:`oncelog.errors`."""
    return grpc.StatusCode[REASONS[reason].status]


def to_error_info(err: OncelogError) -> ErrorInfo:
    """Describe a domain error as the wire ``ErrorInfo`` message (also used for per-item errors)."""
    return ErrorInfo(
        reason=reason_to_proto(err.reason),
        message=err.message,
        retriable=err.retriable,
        definite=err.definite,
        metadata=err.metadata,
    )


def from_error_info(info: ErrorInfo) -> OncelogError:
    """Rebuild the domain error described by an ``ErrorInfo`` (per-item errors inside a response)."""
    err = error_for(reason_from_proto(info.reason), info.message, metadata=dict(info.metadata))
    err.retriable = info.retriable
    err.definite = info.definite
    return err


def to_status(err: OncelogError) -> tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]:
    """Status code, message and trailing metadata that carry ``err`` to the client."""
    code = status_code(err.reason)
    detail = any_pb2.Any()
    detail.Pack(to_error_info(err))
    status = status_pb2.Status(code=code.value[0], message=err.message, details=[detail])
    return code, err.message, ((STATUS_DETAILS_KEY, status.SerializeToString()),)


def from_rpc_error(exc: grpc.RpcError) -> OncelogError:
    """Turn a failed call into the domain error the server raised.

    Calls that failed without an oncelog detail (transport errors, deadline, a non-oncelog server) are mapped
    from their status code: UNAVAILABLE and DEADLINE_EXCEEDED become retriable and indeterminate.
    """
    trailers = exc.trailing_metadata() if hasattr(exc, "trailing_metadata") else None
    for key, value in trailers or ():
        if key == STATUS_DETAILS_KEY:
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = ErrorInfo()
                if detail.Unpack(info):
                    return from_error_info(info)
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    details = (exc.details() if hasattr(exc, "details") else None) or str(exc)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return error_for(Reason.REQUEST_TIMED_OUT, f"deadline exceeded: {details}")
    if code == grpc.StatusCode.UNAVAILABLE:
        return error_for(Reason.NETWORK_EXCEPTION, f"server unavailable: {details}")
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return error_for(Reason.INVALID_REQUEST, details)
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return error_for(Reason.MESSAGE_TOO_LARGE, details)
    return error_for(Reason.UNKNOWN_SERVER_ERROR, f"{code.name}: {details}")
