"""Pure catalog rules: topic names, group ids, topic configs, key → shard mapping, replica placement (``replicas``)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oncelog.errors import InvalidConfig, InvalidPartitions, InvalidRequest, InvalidTopic

MAX_TOPIC_NAME = 249
MAX_GROUP_ID_LENGTH = 255
"""Longest consumer group id, in characters (the width of group-offsets' ``group_id`` columns)."""
MAX_PARTITIONS = 10_000
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")


def validate_topic_name(name: str) -> None:
    """Apply Kafka's topic naming rules (``Topic.validate``); raise :class:`InvalidTopic` naming the fix."""
    if not name:
        raise InvalidTopic("topic name is empty; use 1-249 characters from [a-zA-Z0-9._-]")
    if name in (".", ".."):
        raise InvalidTopic(f"topic name {name!r} is not allowed; '.' and '..' are reserved")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopic(f"topic name is {len(name)} characters long; the limit is {MAX_TOPIC_NAME}")
    if not _LEGAL.match(name):
        bad = sorted({c for c in name if not _LEGAL.match(c)})
        raise InvalidTopic(f"topic name {name!r} contains {bad}; only [a-zA-Z0-9._-] are allowed")


def validate_group_id(group_id: str, where: str = "group_id") -> None:
    """The one rule for consumer group ids, applied wherever one enters (AddOffsetsToTxn, group-offsets).

    Raises:
        InvalidRequest: the id is empty or longer than :data:`MAX_GROUP_ID_LENGTH`, naming ``where`` it came.
    """
    if not group_id:
        raise InvalidRequest(f"{where} is empty; name the consumer group (1-{MAX_GROUP_ID_LENGTH} characters)")
    if len(group_id) > MAX_GROUP_ID_LENGTH:
        raise InvalidRequest(
            f"{where} is {len(group_id)} characters long; the limit is {MAX_GROUP_ID_LENGTH}: use a shorter group id"
        )


def validate_partitions(count: int) -> None:
    """Partition counts are between 1 and :data:`MAX_PARTITIONS`."""
    if count < 1:
        raise InvalidPartitions(f"partitions={count}; a topic needs at least 1 partition")
    if count > MAX_PARTITIONS:
        raise InvalidPartitions(f"partitions={count}; the limit is {MAX_PARTITIONS}")


@dataclass(frozen=True)
class TopicConfig:
    """Validated topic settings; unknown keys are rejected so a typo never silently loses durability."""

    flush: str = "sync"
    max_message_bytes: int = 1_048_588  # Kafka's message.max.bytes default
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    min_insync_replicas: int = 1  # Kafka's min.insync.replicas: an acks=all write needs this many in-sync copies
    # Kafka's unclean.leader.election.enable: with no live in-sync replica, elect an out-of-sync one (may lose data)
    unclean_leader_election: bool = False

    KEYS = (
        "flush",
        "max_message_bytes",
        "retention_ms",
        "retention_bytes",
        "segment_bytes",
        "segment_ms",
        "min_insync_replicas",
        "unclean_leader_election",
    )

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> TopicConfig:
        """Parse string settings as sent on the wire; :class:`InvalidConfig` lists every problem."""
        problems: list[str] = []
        values: dict[str, Any] = {}
        for key, value in raw.items():
            if key not in cls.KEYS:
                problems.append(f"unknown topic config {key!r}; known: {', '.join(cls.KEYS)}")
            elif key == "flush":
                if value not in ("sync", "leader", "async"):
                    problems.append(
                        f"flush={value!r}; use 'sync' (fsync before ack), 'leader' (only the leader fsyncs before ack) "
                        "or 'async'"
                    )
                values[key] = value
            elif key == "unclean_leader_election":
                if value not in ("true", "false"):
                    problems.append(
                        f"unclean_leader_election={value!r}; use 'false' (default: a partition with no live in-sync "
                        "replica stays offline) or 'true' (elect an out-of-sync replica, losing what it lacks)"
                    )
                values[key] = value == "true"
            else:
                try:
                    values[key] = int(value)
                except ValueError:
                    problems.append(f"{key}={value!r} is not an integer")
        config = cls(**values) if not problems else cls()
        if not problems:
            if config.max_message_bytes < 64:
                problems.append("max_message_bytes must be at least 64")
            if config.segment_bytes < 1024:
                problems.append("segment_bytes must be at least 1024")
            if config.retention_ms < -1 or config.retention_bytes < -1:
                problems.append("retention_ms and retention_bytes must be -1 (unlimited) or positive")
            if config.segment_ms < 1:
                problems.append("segment_ms must be positive")
            if config.min_insync_replicas < 1:
                problems.append("min_insync_replicas must be at least 1")
        if problems:
            raise InvalidConfig("; ".join(problems))
        return config

    def to_map(self) -> dict[str, str]:
        """The full settings as strings, as returned by Metadata."""
        return {key: _text(getattr(self, key)) for key in self.KEYS}

    def overrides(self, keys: Iterable[str]) -> dict[str, str]:
        """The values of ``keys`` (the settings set on the topic) as strings: what the catalog stores."""
        return {key: _text(getattr(self, key)) for key in self.KEYS if key in set(keys)}


def _text(value: object) -> str:
    """A setting as the wire and the catalog carry it (booleans as ``true``/``false``, as Kafka writes them)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


KAFKA_CONFIG_NAMES = {
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "segment.ms": "segment_ms",
    "segment.bytes": "segment_bytes",
    "max.message.bytes": "max_message_bytes",
    "min.insync.replicas": "min_insync_replicas",
    "unclean.leader.election.enable": "unclean_leader_election",
}
"""Kafka's dotted topic config names, accepted wherever a topic config is named (``retention.ms``)."""


def config_name(name: str) -> str:
    """oncelog's name of a topic config given by either name (``retention.ms`` → ``retention_ms``)."""
    return KAFKA_CONFIG_NAMES.get(name, name)


def java_string_hash(value: str) -> int:
    """Java's ``String.hashCode`` over UTF-16 code units, as an unsigned 32-bit value."""
    h = 0
    data = value.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h


def shard_for(key: str, shard_count: int) -> int:
    """Kafka's ``partitionFor``: ``Utils.abs(key.hashCode) % n``; stable for the life of the cluster."""
    if shard_count <= 0:
        raise ValueError("shard_count must be positive")
    return (java_string_hash(key) & 0x7FFFFFFF) % shard_count
