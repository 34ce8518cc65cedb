"""Default partitioner: Kafka's murmur2 key mapping and sticky round-robin for keyless records."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from oncelog.client.partitioner import (
    DefaultPartitioner,
    murmur2,
    partition_for_key,
    partitions_for_keys,
    to_positive,
)

# org.apache.kafka.common.utils.UtilsTest#testMurmur2 (apache/kafka, clients/src/test/java)
KAFKA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2.items(), ids=[k.decode() for k in KAFKA_MURMUR2])
def test_murmur2_matches_kafka_utils_test(key: bytes, expected: int) -> None:
    assert murmur2(key) == expected


@given(st.binary(max_size=300))
def test_murmur2_matches_kafka_python(key: bytes) -> None:
    # kafka-python returns the same 32 bits, unsigned
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key)


def test_murmur2_accepts_bytearray_and_memoryview() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"xfoobar")[1:]) == KAFKA_MURMUR2[b"foobar"]


@pytest.mark.parametrize("num_partitions", [1, 2, 3, 6, 7, 12, 50, 1000])
def test_partition_for_key_uses_java_to_positive_not_abs(num_partitions: int) -> None:
    for key, java_hash in KAFKA_MURMUR2.items():
        # Java: Utils.toPositive(hash) % numPartitions, i.e. hash & 0x7fffffff
        assert partition_for_key(key, num_partitions) == (java_hash & 0x7FFFFFFF) % num_partitions
    # "21" hashes negative: abs() would pick partition 6 of 7, Kafka picks 3
    assert partition_for_key(b"21", 7) == 3


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=10_000))
def test_partition_for_key_matches_kafka_python_default_partitioner(key: bytes, num_partitions: int) -> None:
    # kafka.partitioner.default.DefaultPartitioner: (murmur2(key) & 0x7fffffff) % len(all_partitions)
    assert partition_for_key(key, num_partitions) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % num_partitions


def test_to_positive_clears_the_sign_bit() -> None:
    assert to_positive(-(1 << 31)) == 0
    assert to_positive(-1) == 0x7FFFFFFF
    assert to_positive(12) == 12


def test_keyed_records_ignore_availability_and_stickiness() -> None:
    partitioner = DefaultPartitioner(rng=random.Random(1))
    expected = partition_for_key(b"order-42", 12)
    assert partitioner.partition("t", b"order-42", 12, available=[p for p in range(12) if p != expected]) == expected
    partitioner.on_append("t", expected, 1 << 20)
    assert partitioner.partition("t", b"order-42", 12) == expected
    # an empty key is a key, not a missing one
    assert partitioner.partition("t", b"", 12) == partition_for_key(b"", 12)


def test_null_keys_stick_to_one_partition_until_batch_size_then_move_round_robin() -> None:
    partitioner = DefaultPartitioner(sticky_batch_size=100, rng=random.Random(7))
    first = partitioner.partition("t", None, 4)
    for _ in range(9):
        assert partitioner.partition("t", None, 4) == first
        partitioner.on_append("t", first, 10)  # 90 bytes after nine records
    assert partitioner.partition("t", None, 4) == first
    partitioner.on_append("t", first, 10)  # reaches 100
    second = partitioner.partition("t", None, 4)
    assert second == (first + 1) % 4
    partitioner.on_append("t", second, 100)
    assert partitioner.partition("t", None, 4) == (first + 2) % 4


def test_null_keys_spread_evenly_over_all_partitions() -> None:
    partitioner = DefaultPartitioner(sticky_batch_size=50, rng=random.Random(3))
    sent = Counter[int]()
    for _ in range(6 * 50):
        partition = partitioner.partition("t", None, 6)
        sent[partition] += 10
        partitioner.on_append("t", partition, 10)
    assert sent == {p: 500 for p in range(6)}


def test_sticky_batch_size_one_is_per_record_round_robin() -> None:
    partitioner = DefaultPartitioner(sticky_batch_size=1, rng=random.Random(5))
    picks = []
    for _ in range(8):
        picks.append(partitioner.partition("t", None, 4))
        partitioner.on_append("t", picks[-1], 30, enable_switch=False)
    assert picks == [(picks[0] + i) % 4 for i in range(8)]


def test_switch_waits_for_a_full_batch_but_not_beyond_twice_batch_size() -> None:
    partitioner = DefaultPartitioner(sticky_batch_size=100, rng=random.Random(2))
    first = partitioner.partition("t", None, 3)
    partitioner.on_append("t", first, 150, enable_switch=False)  # past batch size, batch not full yet
    assert partitioner.partition("t", None, 3) == first
    partitioner.on_append("t", first, 50, enable_switch=False)  # 200 = twice batch size: move anyway
    assert partitioner.partition("t", None, 3) != first


def test_null_keys_use_only_partitions_with_a_leader() -> None:
    partitioner = DefaultPartitioner(sticky_batch_size=1, rng=random.Random(11))
    seen = set()
    for _ in range(20):
        partition = partitioner.partition("t", None, 5, available=[1, 3])
        seen.add(partition)
        partitioner.on_append("t", partition, 1)
    assert seen == {1, 3}
    # the sticky partition loses its leader: move on at once
    partitioner = DefaultPartitioner(rng=random.Random(11))
    first = partitioner.partition("t", None, 5)
    assert partitioner.partition("t", None, 5, available=[p for p in range(5) if p != first]) != first
    # nothing available: any partition rather than no answer
    assert 0 <= partitioner.partition("u", None, 5, available=[]) < 5


def test_topics_are_independent() -> None:
    partitioner = DefaultPartitioner(sticky_batch_size=10, rng=random.Random(4))
    a = partitioner.partition("a", None, 8)
    b = partitioner.partition("b", None, 8)
    partitioner.on_append("a", a, 10)
    assert partitioner.partition("b", None, 8) == b
    assert partitioner.partition("a", None, 8) == (a + 1) % 8


def test_invalid_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="at least one partition"):
        partition_for_key(b"k", 0)
    with pytest.raises(ValueError, match="at least one partition"):
        DefaultPartitioner().partition("t", None, 0)
    with pytest.raises(ValueError, match="sticky_batch_size"):
        DefaultPartitioner(sticky_batch_size=0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=32, max_size=200), st.integers(min_value=1, max_value=10_000))
def test_partitions_of_many_keys_are_those_of_each_key(keys: list[bytes], num_partitions: int) -> None:
    """The column-wise hash (numpy) gives exactly what hashing one key at a time gives."""
    pytest.importorskip("numpy")
    assert partitions_for_keys(keys, num_partitions) == [partition_for_key(k, num_partitions) for k in keys]


def test_partition_keys_sends_null_keys_to_the_sticky_partition_and_others_by_hash() -> None:
    partitioner = DefaultPartitioner(rng=random.Random(3))
    keys: list[bytes | None] = [b"k%d" % i for i in range(40)]
    keys[5] = keys[30] = None
    sticky = partitioner.partition("t", None, 7)
    expected = [sticky if k is None else partition_for_key(k, 7) for k in keys]
    assert partitioner.partition_keys("t", keys, 7) == expected
    assert partitioner.partition_keys("t", [k for k in keys if k is not None], 7) == [
        e for k, e in zip(keys, expected, strict=True) if k is not None
    ]
    assert partitioner.partition_keys("t", keys, 1) == [0] * 40
