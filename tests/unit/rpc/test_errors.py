"""The one error table: every reason has a status, and errors survive the trip over the wire."""

from __future__ import annotations

import grpc
import pytest

from oncelog.errors import REASONS, NotLeader, Reason, RequestTimedOut, error_for
from oncelog.rpc.errors import (
    from_error_info,
    reason_from_proto,
    reason_to_proto,
    status_code,
    to_error_info,
    to_status,
)


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_maps_to_a_status_and_back(reason: Reason) -> None:
    assert isinstance(status_code(reason), grpc.StatusCode)
    assert status_code(reason) != grpc.StatusCode.OK
    assert reason_from_proto(reason_to_proto(reason)) is reason
    err = error_for(reason, "m")
    assert err.reason is reason and err.retriable == REASONS[reason].retriable


def test_error_info_round_trip_keeps_flags_and_metadata() -> None:
    err = NotLeader("not the leader of orders-0", metadata={"leader": "10.0.0.2:7110"})
    back = from_error_info(to_error_info(err))
    assert type(back) is NotLeader
    assert (back.message, back.retriable, back.definite, back.metadata) == (
        err.message,
        True,
        True,
        {"leader": "10.0.0.2:7110"},
    )


def test_status_carries_rich_error_detail() -> None:
    code, message, trailers = to_status(RequestTimedOut("took too long"))
    assert code == grpc.StatusCode.DEADLINE_EXCEEDED and message == "took too long"
    assert trailers[0][0] == "grpc-status-details-bin"


def test_definite_override() -> None:
    assert error_for(Reason.STORAGE_UNAVAILABLE, "x", definite=True).definite is True
    assert error_for(Reason.STORAGE_UNAVAILABLE, "x").definite is False


def test_unknown_wire_value_is_unknown_server_error() -> None:
    assert reason_from_proto(9999) is Reason.UNKNOWN_SERVER_ERROR
