"""The producer-state snapshot file format: the producer table at one offset, encoded and decoded.

:meth:`ProducerStateManager.snapshot <oncelog.partition_storage.producer_state.ProducerStateManager.snapshot>` and
``from_snapshot`` keep the table; this module only turns it into bytes and back (design/kafka-semantics.md §4.6).

Layout (big-endian)::

    version int16 (1) | crc32c uint32 | map_end_offset int64 | producer_count int32 | producers...
    producer: producer_id int64 | epoch int16 | coordinator_epoch int32 | last_timestamp int64 |
              last_update_ms int64 | current_txn_first_offset int64 (-1: none) | batch_count uint8 |
              batches...
    batch:    first_seq int32 | last_seq int32 | first_offset int64 | last_offset int64 | timestamp int64

The CRC32C covers everything after the CRC field, as in Kafka.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import google_crc32c

from oncelog.errors import CorruptMessage
from oncelog.partition_storage.producer_entries import BatchMetadata, ProducerStateEntry

SNAPSHOT_VERSION = 1
"""Version of the producer snapshot layout written by :func:`encode_snapshot`."""

_SNAPSHOT_PREFIX = struct.Struct(">hI")
_SNAPSHOT_BODY_HEADER = struct.Struct(">qi")
_SNAPSHOT_PRODUCER = struct.Struct(">qhiqqqB")
_SNAPSHOT_BATCH = struct.Struct(">iiqqq")


def encode_snapshot(map_end_offset: int, entries: Iterable[ProducerStateEntry], count: int) -> bytes:
    """The snapshot bytes of ``count`` producer ``entries`` (in the order given) at ``map_end_offset``."""
    parts = [_SNAPSHOT_BODY_HEADER.pack(map_end_offset, count)]
    for entry in entries:
        txn_first = -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
        parts.append(
            _SNAPSHOT_PRODUCER.pack(
                entry.producer_id,
                entry.producer_epoch,
                entry.coordinator_epoch,
                entry.last_timestamp,
                entry.last_update_ms,
                txn_first,
                len(entry.batches),
            )
        )
        parts.extend(
            _SNAPSHOT_BATCH.pack(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp)
            for b in entry.batches
        )
    body = b"".join(parts)
    return _SNAPSHOT_PREFIX.pack(SNAPSHOT_VERSION, google_crc32c.value(body)) + body


def decode_snapshot(data: bytes | bytearray | memoryview, max_batches: int) -> tuple[list[ProducerStateEntry], int]:
    """The producer entries and the map end offset stored in ``data``; each entry keeps its newest ``max_batches``.

    Raises:
        CorruptMessage: empty, truncated, wrong version, CRC mismatch, trailing bytes or impossible values.
    """
    view = memoryview(data)
    if len(view) < _SNAPSHOT_PREFIX.size + _SNAPSHOT_BODY_HEADER.size:
        raise CorruptMessage(f"producer snapshot of {len(view)} bytes is too short")
    version, stored_crc = _SNAPSHOT_PREFIX.unpack_from(view, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptMessage(f"producer snapshot has unknown version {version}")
    computed_crc = google_crc32c.value(bytes(view[_SNAPSHOT_PREFIX.size :]))
    if computed_crc != stored_crc:
        raise CorruptMessage(
            f"producer snapshot CRC mismatch: stored {stored_crc:#010x}, computed {computed_crc:#010x}"
        )
    try:
        return _decode_snapshot_body(view, max_batches)
    except struct.error as exc:
        raise CorruptMessage(f"producer snapshot is truncated: {exc}") from exc


def _decode_snapshot_body(view: memoryview, max_batches: int) -> tuple[list[ProducerStateEntry], int]:
    position = _SNAPSHOT_PREFIX.size
    map_end_offset, count = _SNAPSHOT_BODY_HEADER.unpack_from(view, position)
    position += _SNAPSHOT_BODY_HEADER.size
    if map_end_offset < 0 or count < 0:
        raise CorruptMessage(f"producer snapshot header is invalid: offset {map_end_offset}, {count} producers")
    entries: list[ProducerStateEntry] = []
    seen: set[int] = set()
    for _ in range(count):
        pid, epoch, coordinator_epoch, last_timestamp, last_update_ms, txn_first, batch_count = (
            _SNAPSHOT_PRODUCER.unpack_from(view, position)
        )
        position += _SNAPSHOT_PRODUCER.size
        batches = []
        for _ in range(batch_count):
            batch = BatchMetadata(*_SNAPSHOT_BATCH.unpack_from(view, position))
            position += _SNAPSHOT_BATCH.size
            if batch.first_offset < 0 or batch.last_offset < batch.first_offset:
                raise CorruptMessage(f"producer snapshot has an invalid batch {batch} for producer {pid}")
            batches.append(batch)
        if pid in seen or txn_first < -1:
            raise CorruptMessage(f"producer snapshot has an invalid entry for producer {pid}")
        seen.add(pid)
        entries.append(
            ProducerStateEntry(
                producer_id=pid,
                producer_epoch=epoch,
                coordinator_epoch=coordinator_epoch,
                last_timestamp=last_timestamp,
                current_txn_first_offset=None if txn_first == -1 else txn_first,
                # A smaller configured cache keeps the newest batches.
                batches=tuple(batches[-max_batches:]),
                last_update_ms=last_update_ms,
            )
        )
    if position != len(view):
        raise CorruptMessage(f"producer snapshot has {len(view) - position} trailing bytes")
    return entries, map_end_offset
