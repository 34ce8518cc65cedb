"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) on oncelog's KIP-848 coordinator.

Classic consumers (librdkafka's default, kafka-python, aiokafka, Kafka's Java client with ``group.protocol=classic``)
elect a leader that computes the assignment and rebalance in two barriers; oncelog's group coordinator assigns
partitions itself, member by member, with epochs (design/consumer-groups.md §3). The gateway plays every member's
side of the KIP-848 protocol and answers the classic requests from what the coordinator says:

* JoinGroup: the member's subscription (the topics in its ``consumer`` protocol metadata) joins, or rejoins having
  revoked everything (classic eager rebalancing); the answer names no member as leader, so every client is a
  follower and runs no assignor, and its generation is the coordinator's member epoch.
* SyncGroup: the coordinator's assignment for the member, encoded as a ``ConsumerProtocolAssignment``.
* Heartbeat: a coordinator heartbeat with the partitions the member holds; when the coordinator's assignment for it
  differs (partitions to revoke, or new ones free), the answer is REBALANCE_IN_PROGRESS and the client rejoins.
* LeaveGroup: the member leaves.

:class:`ClassicMembers` is the per-member bookkeeping (subscription, partitions handed over, the generation the
client holds, the coordinator's current epoch); like the transactional identities it lives in the gateway process.
Offset commits of a classic member are checked against the generation the client holds and sent with the
coordinator's current epoch, so the coordinator's member-epoch fencing applies (design/consumer-groups.md §6).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kio.serial import entity_reader, entity_writer

from oncelog.vocabulary import TopicPartition

_VERSION = struct.Struct(">h")


@dataclass
class ClassicMember:
    """One classic member as the gateway tracks it."""

    group_id: str
    member_id: str
    topics: tuple[str, ...]
    epoch: int
    """The coordinator's current member epoch."""
    generation: int
    """The generation the client was given at its last JoinGroup."""
    owned: frozenset[TopicPartition] = field(default_factory=frozenset)
    """What the last SyncGroup handed the client."""
    instance_id: str = ""
    client_id: str = ""


class ClassicMembers:
    """(group id, member id) -> :class:`ClassicMember`."""

    def __init__(self) -> None:
        self._members: dict[tuple[str, str], ClassicMember] = {}

    def __len__(self) -> int:
        return len(self._members)

    def get(self, group_id: str, member_id: str) -> ClassicMember | None:
        """The member, or None when the gateway does not know it."""
        return self._members.get((group_id, member_id))

    def put(self, member: ClassicMember) -> None:
        """Record (or replace) a member."""
        self._members[(member.group_id, member.member_id)] = member

    def drop(self, group_id: str, member_id: str) -> None:
        """Forget a member (it left or was fenced)."""
        self._members.pop((group_id, member_id), None)

    def commit_generation(self, group_id: str, member_id: str, generation: int) -> int | None:
        """The coordinator epoch to commit with for a classic member at ``generation``.

        None when the member is not a classic member of this gateway (the commit goes through unchanged); -1 when
        the generation is not the one the member holds (a zombie: the caller answers ILLEGAL_GENERATION).
        """
        member = self._members.get((group_id, member_id))
        if member is None:
            return None
        return member.epoch if generation == member.generation else -1


def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """The topics of a ``consumer`` protocol subscription of any version.

    Every version starts with the topics and user data of v0 and only adds fields after them, so the v0 reader
    serves all (the later fields are not needed: the coordinator assigns, and owned partitions are the gateway's).

    Raises:
        ValueError: the bytes are not a subscription.
    """
    from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription

    if len(metadata) < _VERSION.size:
        raise ValueError("the protocol metadata is shorter than its version")
    try:
        subscription, _ = entity_reader(ConsumerProtocolSubscription)(metadata, _VERSION.size)
    except Exception as exc:  # kio's native readers raise several types on short or corrupt input
        raise ValueError(f"the protocol metadata is not a consumer subscription: {exc}") from exc
    return tuple(subscription.topics)


def subscription_bytes(topics: Iterable[str]) -> bytes:
    """A ``ConsumerProtocolSubscription`` v0 of ``topics`` (DescribeGroups' member metadata)."""
    from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription

    out = io.BytesIO()
    out.write(_VERSION.pack(0))
    subscription: Any = ConsumerProtocolSubscription(topics=tuple(topics), user_data=None)
    entity_writer(ConsumerProtocolSubscription)(out, subscription)
    return out.getvalue()


def assignment_bytes(partitions: Iterable[TopicPartition]) -> bytes:
    """A ``ConsumerProtocolAssignment`` v0 holding ``partitions`` (every client version reads v0)."""
    from kio.schema.consumer_protocol_assignment.v0.data import ConsumerProtocolAssignment
    from kio.schema.consumer_protocol_assignment.v0.data import TopicPartition as Tp

    by_topic: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    assignment: Any = ConsumerProtocolAssignment(
        assigned_partitions=tuple(Tp(topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),  # type: ignore[arg-type]
        user_data=None,
    )
    out = io.BytesIO()
    out.write(_VERSION.pack(0))
    entity_writer(ConsumerProtocolAssignment)(out, assignment)
    return out.getvalue()
