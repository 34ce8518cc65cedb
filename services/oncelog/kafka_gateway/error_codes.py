"""Every oncelog error reason as the Kafka error code a Kafka client understands.

Most reasons carry Kafka's own name (design/architecture.md §3) and map by name to kio's ``ErrorCode``; the
table below holds the few whose Kafka name differs and the ones Kafka has no code for.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from oncelog.errors import OncelogError, Reason

_RENAMED: dict[Reason, ErrorCode] = {
    Reason.INVALID_TOPIC: ErrorCode.invalid_topic_exception,
    Reason.NOT_LEADER: ErrorCode.not_leader_or_follower,
    Reason.OUT_OF_ORDER_SEQUENCE: ErrorCode.out_of_order_sequence_number,
    Reason.DUPLICATE_SEQUENCE: ErrorCode.duplicate_sequence_number,
    Reason.STORAGE_UNAVAILABLE: ErrorCode.kafka_storage_error,
    # oncelog-internal reasons a Kafka client cannot act on: Kafka's catch-all, which clients treat as fatal
    # for the request (the gateway never sends requests that could meet them: they concern node registration)
    Reason.STALE_REQUESTER_EPOCH: ErrorCode.unknown_server_error,
    Reason.PRODUCER_ID_SPACE_EXHAUSTED: ErrorCode.unknown_server_error,
}


def kafka_error_code(reason: Reason) -> ErrorCode:
    """The Kafka error code of ``reason``."""
    renamed = _RENAMED.get(reason)
    if renamed is not None:
        return renamed
    return ErrorCode[reason.name.lower()]


def error_code_of(error: OncelogError | None) -> ErrorCode:
    """``ErrorCode.none`` for no error, else the code of the error's reason."""
    return ErrorCode.none if error is None else kafka_error_code(error.reason)
