"""Every oncelog reason has a Kafka error code, with Kafka's numbers where the names differ."""

from __future__ import annotations

import pytest

from oncelog.errors import Reason
from oncelog.kafka_gateway.error_codes import kafka_error_code


@pytest.mark.parametrize("reason", list(Reason))
def test_every_reason_maps_to_a_kafka_error_code(reason: Reason) -> None:
    code = kafka_error_code(reason)
    assert isinstance(int(code), int)
    if reason is not Reason.UNKNOWN_SERVER_ERROR and reason.name not in (
        "STALE_REQUESTER_EPOCH",
        "PRODUCER_ID_SPACE_EXHAUSTED",
    ):
        assert int(code) != -1, f"{reason.name} fell back to UNKNOWN_SERVER_ERROR"


@pytest.mark.parametrize(
    ("reason", "kafka_code"),
    [
        (Reason.NOT_LEADER, 6),  # NOT_LEADER_OR_FOLLOWER
        (Reason.OUT_OF_ORDER_SEQUENCE, 45),
        (Reason.DUPLICATE_SEQUENCE, 46),
        (Reason.INVALID_TOPIC, 17),
        (Reason.STORAGE_UNAVAILABLE, 56),  # KAFKA_STORAGE_ERROR
        (Reason.PRODUCER_FENCED, 90),
        (Reason.INVALID_PRODUCER_EPOCH, 47),
        (Reason.CONCURRENT_TRANSACTIONS, 51),
        (Reason.UNSTABLE_OFFSET_COMMIT, 88),
        (Reason.TRANSACTION_ABORTABLE, 120),
    ],
)
def test_reasons_named_unlike_kafka_get_kafkas_numbers(reason: Reason, kafka_code: int) -> None:
    assert int(kafka_error_code(reason)) == kafka_code
