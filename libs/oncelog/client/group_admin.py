"""What ``AdminClient`` returns about consumer groups (design/consumer-groups.md §5): listings and descriptions."""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.api.offsets import v1 as offsets_pb
from oncelog.client.records import TopicPartition


@dataclass(frozen=True)
class ConsumerGroupListing:
    """One group of ``AdminClient.list_consumer_groups()``."""

    group_id: str
    state: str
    group_epoch: int
    members: int


@dataclass(frozen=True)
class MemberDescription:
    """One member as the coordinator holds it: its current assignment, what it still has to revoke, its target."""

    member_id: str
    group_instance_id: str
    client_id: str
    member_epoch: int
    subscription: tuple[str, ...]
    pattern: str
    assignment: frozenset[TopicPartition]
    pending_revocation: frozenset[TopicPartition]
    target_assignment: frozenset[TopicPartition]


@dataclass(frozen=True)
class ConsumerGroupDescription:
    """One group of ``AdminClient.describe_consumer_groups()``."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[MemberDescription, ...]


def _tps(items: object) -> frozenset[TopicPartition]:
    return frozenset(TopicPartition(tp.topic, tp.partition) for tp in items)  # type: ignore[attr-defined]


def listing(item: offsets_pb.ConsumerGroupListing) -> ConsumerGroupListing:
    """The listing of a ListConsumerGroups entry."""
    return ConsumerGroupListing(item.group_id, item.state, item.group_epoch, item.member_count)


def description(item: offsets_pb.ConsumerGroupDescription) -> ConsumerGroupDescription:
    """The description of a DescribeConsumerGroups entry (without error)."""
    return ConsumerGroupDescription(
        group_id=item.group_id,
        state=item.state,
        group_epoch=item.group_epoch,
        assignment_epoch=item.assignment_epoch,
        assignor=item.assignor,
        members=tuple(
            MemberDescription(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                member_epoch=m.member_epoch,
                subscription=tuple(m.subscribed_topic_names),
                pattern=m.subscribed_topic_regex,
                assignment=_tps(m.assignment),
                pending_revocation=_tps(m.pending_revocation),
                target_assignment=_tps(m.target_assignment),
            )
            for m in item.members
        ),
    )


__all__ = ["ConsumerGroupDescription", "ConsumerGroupListing", "MemberDescription", "description", "listing"]
