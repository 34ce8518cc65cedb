"""Catalog rules: Kafka's topic-name rules, topic configs, and the key → shard mapping."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from oncelog.catalog.topics import (
    MAX_GROUP_ID_LENGTH,
    TopicConfig,
    java_string_hash,
    shard_for,
    validate_group_id,
    validate_partitions,
    validate_topic_name,
)
from oncelog.errors import InvalidConfig, InvalidPartitions, InvalidRequest, InvalidTopic


@pytest.mark.parametrize("name", ["a", "orders.v1", "A-b_c.9", "x" * 249])
def test_legal_names(name: str) -> None:
    validate_topic_name(name)


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a b", "a/b", "ünï", "a\nb"])
def test_illegal_names(name: str) -> None:
    with pytest.raises(InvalidTopic):
        validate_topic_name(name)


@pytest.mark.parametrize("count", [0, -1, 10_001])
def test_partition_bounds(count: int) -> None:
    with pytest.raises(InvalidPartitions):
        validate_partitions(count)


def test_java_string_hash_matches_java() -> None:
    # values computed by java.lang.String#hashCode, as unsigned 32-bit
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == 0x80000000  # Integer.MIN_VALUE
    assert java_string_hash("\U0001f600") == ((0xD83D * 31 + 0xDE00) & 0xFFFFFFFF)


def test_shard_for_follows_kafka_partition_for() -> None:
    # Utils.abs(Integer.MIN_VALUE) is 0 in Kafka (it masks the sign bit), so this key lands on shard 0
    assert shard_for("polygenelubricants", 50) == 0
    assert shard_for("hello", 50) == 99162322 % 50


@given(st.text(), st.integers(min_value=1, max_value=1000))
def test_shard_in_range_and_stable(key: str, n: int) -> None:
    assert 0 <= shard_for(key, n) < n
    assert shard_for(key, n) == shard_for(key, n)


def test_topic_config_rejects_unknown_keys_and_bad_values_together() -> None:
    with pytest.raises(InvalidConfig) as info:
        TopicConfig.parse({"flush": "maybe", "segment_bytes": "big", "retention.ms": "1"})
    message = str(info.value)
    assert "flush='maybe'" in message and "segment_bytes='big'" in message and "'retention.ms'" in message


def test_topic_config_round_trip() -> None:
    config = TopicConfig.parse({"flush": "async", "retention_ms": "1000"})
    assert TopicConfig.parse(config.to_map()) == config


def test_group_id_rule() -> None:
    validate_group_id("g" * MAX_GROUP_ID_LENGTH)
    with pytest.raises(InvalidRequest, match="empty"):
        validate_group_id("")
    with pytest.raises(InvalidRequest, match=f"AddOffsetsToTxn group id is 256 .* limit is {MAX_GROUP_ID_LENGTH}"):
        validate_group_id("g" * 256, "AddOffsetsToTxn group id")


def test_unclean_leader_election_is_false_unless_set_to_true_and_round_trips() -> None:
    assert TopicConfig.parse({}).unclean_leader_election is False
    config = TopicConfig.parse({"unclean_leader_election": "true"})
    assert config.unclean_leader_election is True and config.to_map()["unclean_leader_election"] == "true"
    assert TopicConfig.parse(config.to_map()) == config
    with pytest.raises(InvalidConfig, match="unclean_leader_election='yes'; use 'false'"):
        TopicConfig.parse({"unclean_leader_election": "yes"})
