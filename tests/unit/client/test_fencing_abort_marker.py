"""The ABORT marker that ends a hanging transaction on one partition, shared by AdminClient and the kafka-gateway."""

from __future__ import annotations

import pytest

from oncelog.client.services import fencing_abort_marker
from oncelog.errors import InvalidRequest
from oncelog.vocabulary import ControlType, ProducerIdAndEpoch, TopicPartition

TP = TopicPartition("orders", 3)


def test_the_marker_aborts_with_the_next_epoch_on_that_partition_alone() -> None:
    marker = fencing_abort_marker(TP, producer_id=42, producer_epoch=7, coordinator_epoch=-1)
    assert marker.producer == ProducerIdAndEpoch(42, 8), "the next epoch fences the hanging producer there"
    assert (marker.result, marker.partitions, marker.groups) == (ControlType.ABORT, (TP,), ())
    assert marker.coordinator_epoch == 0, "a partition that never saw a coordinator epoch reports -1"


def test_a_producer_at_the_largest_epoch_cannot_be_fenced_and_says_so() -> None:
    assert fencing_abort_marker(TP, 42, 32_766, 5).producer == ProducerIdAndEpoch(42, 32_767)
    with pytest.raises(InvalidRequest, match="producer 42 is at epoch 32767, the largest"):
        fencing_abort_marker(TP, 42, 32_767, 5)
