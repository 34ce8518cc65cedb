"""The classic group protocol's bookkeeping: subscriptions read, assignments written, commits' generations."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
from kio.schema.consumer_protocol_subscription.v1.data import ConsumerProtocolSubscription
from kio.schema.consumer_protocol_subscription.v1.data import TopicPartition as SubscribedPartition
from kio.serial import entity_reader, entity_writer

from oncelog.kafka_gateway.classic_groups import ClassicMember, ClassicMembers, assignment_bytes, subscribed_topics
from oncelog.vocabulary import TopicPartition


def _subscription(version: int, topics: tuple[str, ...]) -> bytes:
    out = io.BytesIO()
    out.write(struct.pack(">h", version))
    entity_writer(ConsumerProtocolSubscription)(
        out,
        ConsumerProtocolSubscription(
            topics=topics, user_data=b"u", owned_partitions=(SubscribedPartition(topic="a", partitions=(1,)),)
        ),
    )
    return out.getvalue()


@pytest.mark.parametrize("version", [1, 7])  # every version starts with v0's fields, so any version reads
def test_the_subscribed_topics_are_read_from_the_protocol_metadata(version: int) -> None:
    assert subscribed_topics(_subscription(version, ("orders", "audit"))) == ("orders", "audit")


@pytest.mark.parametrize("metadata", [b"", b"\x00", b"\x00\x01\x00\x00\x00\x05ab"])
def test_metadata_that_is_not_a_subscription_is_refused(metadata: bytes) -> None:
    with pytest.raises(ValueError):
        subscribed_topics(metadata)


def test_an_assignment_is_written_as_consumer_protocol_assignment_v0() -> None:
    data = assignment_bytes([TopicPartition("b", 0), TopicPartition("a", 2), TopicPartition("a", 1)])
    assert struct.unpack_from(">h", data)[0] == 0
    assignment, size = entity_reader(ConsumerProtocolAssignment)(data, 2)
    assert size == len(data) - 2
    assert [(t.topic, tuple(t.partitions)) for t in assignment.assigned_partitions] == [("a", (1, 2)), ("b", (0,))]


def test_a_classic_members_commit_uses_the_coordinators_epoch_and_a_stale_generation_is_refused() -> None:
    members = ClassicMembers()
    members.put(ClassicMember(group_id="g", member_id="m", topics=("t",), epoch=9, generation=7))
    assert members.commit_generation("g", "m", 7) == 9
    assert members.commit_generation("g", "m", 6) == -1
    assert members.commit_generation("g", "other", 7) is None
    members.drop("g", "m")
    assert members.commit_generation("g", "m", 7) is None
