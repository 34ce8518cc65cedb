"""Kafka's default partitioner: murmur2 for keyed records, sticky round-robin for records without a key.

Keyed records go to ``to_positive(murmur2(key)) % num_partitions``, bit for bit what the Java
client's ``BuiltInPartitioner.partitionForKey`` computes, so a key lands on the same partition
whichever client (Java, librdkafka in its ``murmur2_random`` mode, kafka-python, oncelog) wrote it.

Records without a key are spread round-robin **one batch at a time** (Kafka's uniform sticky
partitioner, KIP-480/KIP-794) rather than one record at a time: the partitioner sticks to one
partition until about ``sticky_batch_size`` bytes went there, then moves to the next partition
in round-robin order. Per-record round-robin splits a burst of n records into n tiny batches on
n partitions; sticking fills one batch, so each partition gets fewer, fuller requests, which
uses fewer of the 5 in-flight slots per partition and fewer sequence numbers, and KIP-480
measured lower latency for it. Order among keyless records carries no meaning, so nothing is
lost. The next partition is the next one in order rather than Kafka's random pick, so the spread
is exactly even; only the starting partition is random, so many producers do not all start on
partition 0. ``sticky_batch_size=1`` gives plain per-record round-robin.
"""

from __future__ import annotations

import random
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

try:  # optional: hashes many keys at once (numpy comes with the spark extra)
    import numpy
except ImportError:  # pragma: no cover - the pure-Python loop serves alone
    numpy = None  # type: ignore[assignment]

__all__ = ["DefaultPartitioner", "RecordGroup", "murmur2", "partition_for_key", "partitions_for_keys", "to_positive"]

RecordGroup = tuple[list[int] | None, Sequence[Any] | None, Sequence[Any]]
"""Records of one partition among records sent together: their positions (None: all, in order), keys, values."""

_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF


# unpackers of n little-endian 32-bit words, for the key lengths most keys have
_WORDS = tuple(struct.Struct(f"<{n}I").unpack_from for n in range(64))


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """MurmurHash2 of ``data`` as a signed 32-bit integer, exactly like Kafka's ``Utils.murmur2``.

    Java does the arithmetic in wrapping ``int``; here every step is masked to 32 bits and the
    result is reinterpreted as signed at the end.
    """
    if not isinstance(data, bytes | bytearray):
        data = memoryview(data).cast("B")
    length = len(data)
    h = (_SEED ^ length) & _MASK32
    words = length >> 2
    unpack = _WORDS[words] if words < len(_WORDS) else struct.Struct(f"<{words}I").unpack_from
    for k in unpack(data):
        k = (k * _M) & _MASK32
        k ^= k >> _R
        h = ((h * _M) & _MASK32) ^ ((k * _M) & _MASK32)
    extra = length & 3
    if extra:
        tail = length - extra
        # Java's switch falls through from case 3 to case 1
        if extra == 3:
            h ^= data[tail + 2] << 16
        if extra >= 2:
            h ^= data[tail + 1] << 8
        h ^= data[tail]
        h = (h * _M) & _MASK32
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(number: int) -> int:
    """Clear the sign bit, like Kafka's ``Utils.toPositive`` (not ``abs``: ``abs(MIN_VALUE)`` is negative in Java)."""
    return number & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition of a keyed record (``BuiltInPartitioner.partitionForKey``).

    Raises:
        ValueError: ``num_partitions`` is below 1.
    """
    if num_partitions < 1:
        raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")
    return to_positive(murmur2(key)) % num_partitions


_VECTOR_MIN_KEYS = 32
"""From this many keys on, :func:`partitions_for_keys` hashes with numpy (when installed)."""


def partitions_for_keys(keys: Sequence[bytes], num_partitions: int) -> list[int]:
    """:func:`partition_for_key` of each of ``keys``, in order.

    With numpy installed, many keys are hashed column-wise, about eight times faster than one by one: keys
    of equal length are stacked into a matrix and MurmurHash2's steps run over all rows at once, in
    unsigned 32-bit arithmetic that wraps as Java's ``int`` does.

    Raises:
        ValueError: ``num_partitions`` is below 1.
    """
    if num_partitions < 1:
        raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")
    if numpy is None or len(keys) < _VECTOR_MIN_KEYS:
        return [(murmur2(key) & 0x7FFFFFFF) % num_partitions for key in keys]
    hashes = _murmur2_columns(keys)
    return ((hashes & numpy.uint32(0x7FFFFFFF)) % numpy.uint32(num_partitions)).tolist()  # type: ignore[no-any-return]


def _murmur2_columns(keys: Sequence[bytes]) -> Any:
    """MurmurHash2 of each key as an unsigned 32-bit numpy array (the bits of Kafka's signed result)."""
    np = numpy
    assert np is not None
    m = np.uint32(_M)
    lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
    out = np.empty(len(keys), dtype=np.uint32)
    for length in np.unique(lengths).tolist():
        index = np.flatnonzero(lengths == length)
        rows = np.frombuffer(b"".join([keys[i] for i in index.tolist()]), dtype=np.uint8).reshape(len(index), length)
        h = np.full(len(index), (_SEED ^ length) & _MASK32, dtype=np.uint32)
        words = length >> 2
        if words:
            columns = np.ascontiguousarray(rows[:, : words * 4]).view("<u4")
            for column in range(words):
                k = columns[:, column] * m
                k ^= k >> np.uint32(_R)
                k *= m
                h *= m
                h ^= k
        extra = length & 3
        if extra:
            tail = length - extra
            # Java's switch falls through from case 3 to case 1
            if extra == 3:
                h ^= rows[:, tail + 2].astype(np.uint32) << np.uint32(16)
            if extra >= 2:
                h ^= rows[:, tail + 1].astype(np.uint32) << np.uint32(8)
            h ^= rows[:, tail].astype(np.uint32)
            h *= m
        h ^= h >> np.uint32(13)
        h *= m
        h ^= h >> np.uint32(15)
        out[index] = h
    return out


@dataclass(slots=True)
class _Sticky:
    partition: int
    produced_bytes: int = 0
    done: bool = False
    """Enough bytes went to ``partition``; the next keyless record moves on."""


def _next_after(partition: int, candidates: Sequence[int]) -> int:
    for candidate in candidates:
        if candidate > partition:
            return candidate
    return candidates[0]


class DefaultPartitioner:
    """Choose the partition of each record the way Kafka's default partitioner does.

    Thread-safe: one instance serves every thread sending through a producer.

    Args:
        sticky_batch_size: bytes sent to one partition before keyless records move to the
            next; the producer passes its ``batch_size``. 1 means per-record round-robin.
        rng: source of the random starting partition (inject a seeded one in tests).
    """

    def __init__(self, *, sticky_batch_size: int = 16384, rng: random.Random | None = None) -> None:
        if sticky_batch_size < 1:
            raise ValueError(f"sticky_batch_size must be >= 1, got {sticky_batch_size}")
        self._sticky_batch_size = sticky_batch_size
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._sticky: dict[str, _Sticky] = {}

    def partition(
        self,
        topic: str,
        key: bytes | bytearray | memoryview | None,
        num_partitions: int,
        available: Sequence[int] | None = None,
    ) -> int:
        """Return the partition for a record of ``topic``.

        Args:
            topic: the record's topic.
            key: the serialized key; None for a keyless record.
            num_partitions: the topic's partition count.
            available: partitions that currently have a leader. Keyed records ignore it (a key
                must always map to the same partition); keyless records only use these,
                unless none is available.

        Raises:
            ValueError: ``num_partitions`` is below 1.
        """
        if key is not None:
            return partition_for_key(key, num_partitions)
        if num_partitions < 1:
            raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")
        candidates = self._candidates(num_partitions, available)
        with self._lock:
            sticky = self._sticky.get(topic)
            if sticky is None:
                sticky = _Sticky(self._rng.choice(candidates))
                self._sticky[topic] = sticky
            elif sticky.done or sticky.partition not in candidates:
                sticky = _Sticky(_next_after(sticky.partition, candidates))
                self._sticky[topic] = sticky
            return sticky.partition

    def partition_keys(
        self,
        topic: str,
        keys: Sequence[bytes | bytearray | memoryview | None],
        num_partitions: int,
        available: Sequence[int] | None = None,
    ) -> list[int]:
        """:meth:`partition` of each of ``keys`` at once (a None key takes the sticky partition).

        Raises:
            ValueError: ``num_partitions`` is below 1.
        """
        if num_partitions < 1:
            raise ValueError(f"a topic has at least one partition, got num_partitions={num_partitions}")
        if num_partitions == 1:
            return [0] * len(keys)
        if all(type(key) is bytes for key in keys):
            return partitions_for_keys(keys, num_partitions)  # type: ignore[arg-type]
        sticky: int | None = None
        targets = []
        for key in keys:
            if key is not None:
                targets.append(partition_for_key(key, num_partitions))
            else:
                if sticky is None:
                    sticky = self.partition(topic, None, num_partitions, available)
                targets.append(sticky)
        return targets

    def group(
        self,
        topic: str,
        keys: Sequence[Any] | None,
        values: Sequence[Any],
        num_partitions: int,
        available: Sequence[int] | None = None,
        partition: int | None = None,
    ) -> dict[int, RecordGroup]:
        """Split records sent together by partition, keeping their order within each.

        Returns:
            partition -> (positions of its records among all, or None when it takes all of them in order;
            its keys, or None; its values). ``partition`` given: all go there; no keys: all go to the sticky
            partition; else each key's partition.
        """
        if partition is not None:
            return {partition: (None, keys, values)}
        if keys is None:
            return {self.partition(topic, None, num_partitions, available): (None, None, values)}
        targets = self.partition_keys(topic, keys, num_partitions, available)
        if len(set(targets)) == 1:
            return {targets[0]: (None, keys, values)} if targets else {}
        groups: dict[int, RecordGroup] = {}
        for index, target in enumerate(targets):
            positions, group_keys, group_values = groups.setdefault(target, ([], [], []))
            positions.append(index)  # type: ignore[union-attr]
            group_keys.append(keys[index])  # type: ignore[union-attr]
            group_values.append(values[index])  # type: ignore[attr-defined]
        return groups

    def on_append(self, topic: str, partition: int, appended_bytes: int, *, enable_switch: bool = True) -> None:
        """Account ``appended_bytes`` of a keyless record and move on once the partition had enough.

        Mirrors ``BuiltInPartitioner.updatePartitionInfo``: the switch happens after
        ``sticky_batch_size`` bytes when ``enable_switch`` is True (pass whether the
        partition's open batch is now full, so the switch falls on a batch boundary), and in
        any case after twice that, so a long linger cannot pin one partition.
        """
        with self._lock:
            sticky = self._sticky.get(topic)
            if sticky is None or sticky.partition != partition or sticky.done:
                return
            sticky.produced_bytes += appended_bytes
            limit = self._sticky_batch_size
            if (enable_switch and sticky.produced_bytes >= limit) or sticky.produced_bytes >= 2 * limit:
                sticky.done = True

    def _candidates(self, num_partitions: int, available: Sequence[int] | None) -> Sequence[int]:
        if available is not None and len(available) == num_partitions:
            # every partition has a leader (the usual case): skip building a sorted copy on each send()
            return range(num_partitions)
        if available:
            usable = sorted({p for p in available if 0 <= p < num_partitions})
            if usable:
                return usable
        return list(range(num_partitions))
