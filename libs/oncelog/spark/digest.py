"""BatchDigest: an order-independent hash of the records a task wrote in one micro-batch.

It is committed with each batch marker (:mod:`oncelog.spark.markers`) so that a replayed batch can be checked
against what was committed: the same records give the same digest whatever their order, and a replay whose
digest differs raises NonDeterministicBatchError instead of losing or duplicating output.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from oncelog.spark.encoder import OutputRecord
from oncelog.spark.output import Headers, RecordColumns


class BatchDigest:
    """An order-independent digest of a task's records: the sum of per-record hashes, and their count.

    Rows reach a task in an order Spark does not guarantee after a shuffle (design/spark-connector.md §3.2), so the
    digest
    is a multiset hash: equal for the same records in any order, different (with overwhelming odds) when a
    record is added, dropped, changed or repeated.
    """

    def __init__(self) -> None:
        self.rows = 0
        self._sum = 0
        # the framed (topic, partition) prefix, which nearly every record of a task shares
        self._prefixes: dict[tuple[str, int | None], bytes] = {}

    def add(self, record: OutputRecord) -> None:
        """Count one record."""
        self._sum += _record_hash(
            self._prefix(record.topic, record.partition), record.key, record.value, record.headers
        )
        self.rows += 1

    def add_columns(self, columns: RecordColumns) -> None:
        """Count every record of ``columns``; the same digest as :meth:`add` of each record."""
        blake2b = hashlib.blake2b
        total = 0
        if columns.target is not None and columns.headers is None:
            # one prefix for all: the per-record work is two length prefixes and the hash
            prefix = self._prefix(*columns.target)
            for key, value in zip(columns.keys, columns.values, strict=True):
                encoded = (
                    prefix
                    + (_NULL if key is None else len(key).to_bytes(4, "big") + key)
                    + (_NULL if value is None else len(value).to_bytes(4, "big") + value)
                )
                total += int.from_bytes(blake2b(encoded, digest_size=16).digest(), "big")
        else:
            for topic, partition, key, value, headers in columns.rows():
                total += _record_hash(self._prefix(topic, partition), key, value, headers)
        self._sum += total
        self.rows += len(columns)

    def _prefix(self, topic: str, partition: int | None) -> bytes:
        prefix = self._prefixes.get((topic, partition))
        if prefix is None:
            prefix = self._prefixes[(topic, partition)] = _frame(topic.encode()) + _frame(str(partition).encode())
        return prefix

    @property
    def hexdigest(self) -> str:
        """The digest as 32 hex digits."""
        return f"{self._sum % _MODULUS:032x}"

    @staticmethod
    def combine(hexdigests: Iterable[str]) -> str:
        """The digest of the union of several tasks' records, from their digests (the sums add up)."""
        return f"{sum(int(h, 16) for h in hexdigests) % _MODULUS:032x}"


# fields are length-prefixed, with None distinct from empty, so that field boundaries cannot shift
_NULL = b"\xff\xff\xff\xff"
_MODULUS = 1 << 128


def _frame(part: bytes | None) -> bytes:
    return _NULL if part is None else len(part).to_bytes(4, "big") + part


def _header_order(header: tuple[str, bytes | None]) -> tuple[str, bool, bytes]:
    return header[0], header[1] is not None, header[1] or b""


def _record_hash(prefix: bytes, key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """One record's 128-bit hash; ``prefix`` frames its topic and partition."""
    encoded = (
        prefix
        + (_NULL if key is None else len(key).to_bytes(4, "big") + key)
        + (_NULL if value is None else len(value).to_bytes(4, "big") + value)
    )
    # sorted: a map column's entries (or a rebuilt header array) may come in another order on a replay
    for name, data in sorted(headers, key=_header_order):
        encoded += _frame(name.encode()) + _frame(data)
    # reduced modulo 2**128 once, when read: the unreduced sum of a task's hashes stays a small int
    return int.from_bytes(hashlib.blake2b(encoded, digest_size=16).digest(), "big")


__all__ = ["BatchDigest"]
