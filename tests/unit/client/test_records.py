"""Public value types: TopicPartition, RecordMetadata, ConsumerRecord, OffsetAndMetadata, ConsumerGroupMetadata."""

from __future__ import annotations

import dataclasses

import pytest

from oncelog.client.records import (
    ConsumerGroupMetadata,
    ConsumerRecord,
    OffsetAndMetadata,
    RecordMetadata,
    TopicPartition,
    new_consumer_record,
)
from oncelog.records import TimestampType


def test_topic_partition_is_a_hashable_named_tuple() -> None:
    tp = TopicPartition("orders", 2)
    topic, partition = tp
    assert (topic, partition) == ("orders", 2)
    assert tp == ("orders", 2)
    assert {tp: 1}[TopicPartition("orders", 2)] == 1
    assert str(tp) == "orders-2"
    assert sorted([TopicPartition("b", 0), TopicPartition("a", 5), TopicPartition("a", 1)]) == [
        ("a", 1),
        ("a", 5),
        ("b", 0),
    ]


def test_metadata_and_records_expose_their_partition_and_are_immutable() -> None:
    metadata = RecordMetadata("orders", 1, 99, 1_000)
    assert metadata.topic_partition == TopicPartition("orders", 1)
    record = ConsumerRecord("orders", 1, 5, 1_000, TimestampType.CREATE_TIME, b"k", b"v", (("h", None),), 3)
    assert record.topic_partition == TopicPartition("orders", 1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.offset = 6  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        metadata.offset = 100  # type: ignore[misc]


def test_offset_and_metadata_defaults_and_validation() -> None:
    committed = OffsetAndMetadata(42)
    assert (committed.metadata, committed.leader_epoch) == ("", None)
    with pytest.raises(ValueError, match="must be >= 0"):
        OffsetAndMetadata(-1)


def test_group_metadata_defaults_skip_the_membership_checks() -> None:
    group = ConsumerGroupMetadata("copier")
    assert (group.generation_id, group.member_id, group.group_instance_id) == (-1, "", None)


@pytest.mark.parametrize(
    "fields",
    [
        ("orders", 3, 17, 1_700, TimestampType.CREATE_TIME, b"k", b"v", (("h", b"1"),), 4),
        ("o", 0, 0, 0, TimestampType.LOG_APPEND_TIME, None, None, (), None),
    ],
)
def test_the_consumers_fast_constructor_makes_the_record_the_constructor_makes(fields: tuple) -> None:
    fast, made = new_consumer_record(*fields), ConsumerRecord(*fields)
    assert fast == made and hash(fast) == hash(made) and repr(fast) == repr(made)
    assert dataclasses.astuple(fast) == fields
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.offset = 1  # type: ignore[misc]
