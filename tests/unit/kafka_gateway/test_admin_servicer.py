"""Transaction state names between oncelog and Kafka's admin APIs."""

from __future__ import annotations

import pytest

from oncelog.api.txn import v1 as txn_pb
from oncelog.client.services.wire import transaction_state_name
from oncelog.kafka_gateway.admin_servicer import KAFKA_STATES, kafka_state, oncelog_state


@pytest.mark.parametrize("value", [v for v in txn_pb.TransactionState.values() if v])
def test_every_oncelog_state_has_kafkas_name_and_back(value: int) -> None:
    name = transaction_state_name(value)
    assert kafka_state(name) in KAFKA_STATES, name
    assert oncelog_state(kafka_state(name)) == name


def test_kafkas_two_word_states_are_camel_case() -> None:
    assert kafka_state("prepare_commit") == "PrepareCommit"
    assert oncelog_state("PrepareEpochFence") == "prepare_epoch_fence"
