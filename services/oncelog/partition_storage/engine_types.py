"""The values a partition engine takes and returns: its settings, append and fetch results, marker specs, and
the write that waits for its acknowledgement (:class:`PendingAppend`)."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from oncelog.partition_storage.txn_index import AbortedTxn
from oncelog.records import ControlType

__all__ = [
    "AppendResult",
    "EngineConfig",
    "FetchResult",
    "ListedOffset",
    "OffsetSpec",
    "PendingAppend",
    "TxnMarkerSpec",
]


class OffsetSpec(enum.Enum):
    """Which offset :meth:`PartitionEngine.list_offset` resolves."""

    EARLIEST = "earliest"
    LATEST = "latest"
    TIMESTAMP = "timestamp"


class ListedOffset(NamedTuple):
    """What ListOffsets resolves on one partition (Kafka's ``TimestampAndOffset``).

    Attributes:
        offset: the offset, or -1 when no readable record has the timestamp asked for.
        timestamp_ms: the record's timestamp for a timestamp lookup, else -1.
        leader_epoch: the epoch of the leader that appended ``offset`` (the current epoch for LATEST, as Kafka's
            leader answers), or -1 when unknown.
    """

    offset: int
    timestamp_ms: int
    leader_epoch: int


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Settings of one partition: the topic's configs plus the node's storage settings.

    Attributes:
        segment_bytes, segment_ms: roll the active segment past this size or age.
        retention_bytes, retention_ms: delete old segments beyond these (-1: no limit).
        max_message_bytes: largest batch accepted (Kafka's ``max.message.bytes``, checked per batch).
        flush_sync: fsync before acknowledging (the topic's ``flush=sync`` or ``flush=leader``); ``False``
            acknowledges after the write and lets the periodic flush make it durable.
        follower_fsync: on a follower of a ``flush_sync`` partition, fsync copied batches before reporting them
            to the leader (``flush=sync``); ``False`` (``flush=leader``) reports them from the page cache and
            fsyncs right after, so an acknowledged batch is durable on the leader and in memory on the followers.
        index_interval_bytes: bytes between sparse offset index entries.
        producer_id_expiration_ms: idle time after which a producer without an open transaction is forgotten.
        validate_records: also decompress and parse every record of a client batch (Kafka's
            ``LogValidator``); off, only the header and the CRC32C are checked, which proves the producer's
            bytes arrived intact but leaves record framing to the reader.
        strict_marker_epoch: the coordinator bumps the producer epoch when it ends a transaction (KIP-890,
            design/architecture.md §5), so a marker must carry an epoch above its data's
            (design/kafka-semantics.md §3.3, TV2 rule).
    """

    segment_bytes: int = 128 * 1024 * 1024
    segment_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    retention_ms: int = 7 * 24 * 3600 * 1000
    max_message_bytes: int = 1_048_588
    flush_sync: bool = True
    follower_fsync: bool = True
    index_interval_bytes: int = 4096
    producer_id_expiration_ms: int = 24 * 3600 * 1000
    validate_records: bool = False
    strict_marker_epoch: bool = True


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Outcome of a data append.

    Attributes:
        base_offset: offset of the first record of the request (of the original write for a duplicate).
        last_offset: offset of the last record of the request.
        log_start_offset: the partition's log start offset after the append.
        duplicate: every batch had been written before; nothing was appended (design/kafka-semantics.md §4.2 rule 1).
        appended_records, appended_bytes: records and batch bytes this request added to the log (leading
            duplicates excluded), what produce throughput counts.
    """

    base_offset: int
    last_offset: int
    log_start_offset: int
    duplicate: bool
    appended_records: int = 0
    appended_bytes: int = 0


@dataclass(frozen=True, slots=True)
class TxnMarkerSpec:
    """One COMMIT/ABORT marker for this partition (one entry of WriteTxnMarkers, design/kafka-semantics.md §3.1)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: ControlType


@dataclass(frozen=True, slots=True)
class FetchResult:
    """What one partition returns to a fetch.

    Attributes:
        records: whole batches as stored, control batches included; empty when nothing is readable.
        next_offset: offset right after the returned batches (the fetch offset if none).
        high_watermark, last_stable_offset, log_start_offset: the partition's offsets at the read.
        aborted_transactions: read_committed only: aborted transactions overlapping the returned range.
    """

    records: bytes
    next_offset: int
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    aborted_transactions: tuple[AbortedTxn, ...]


class _AcknowledgingEngine(Protocol):
    """What :class:`PendingAppend` needs of :class:`~oncelog.partition_storage.engine.PartitionEngine`."""

    acknowledge_check: Callable[[], None] | None
    leadership_check: Callable[[], None] | None
    config: EngineConfig

    @property
    def high_watermark(self) -> int: ...

    async def _await_high_watermark(self, offset: int) -> None: ...

    async def _await_durable(self, offset: int) -> None: ...


class PendingAppend:
    """A write that is in the log and in the producer state but maybe not yet durable.

    Returned by :meth:`PartitionEngine.write` so a caller can start the next write to the partition (keeping
    request order) while this one waits for its fsync; :meth:`wait` returns once the write is acknowledged.
    ``leader_only`` (``acks=1``) acknowledges once this replica has the batches (fsynced for ``flush=sync`` and
    ``flush=leader`` topics) whatever the followers hold: lossy if this leader is lost before they copy them.
    """

    __slots__ = ("_durable_offset", "_engine", "leader_only", "result")

    def __init__(self, engine: _AcknowledgingEngine, result: AppendResult, durable_offset: int) -> None:
        self._engine = engine
        self._durable_offset = durable_offset
        self.result = result
        self.leader_only = False

    @property
    def acknowledged(self) -> bool:
        """True once the batches are below the high watermark (at once for ``flush=async`` topics)."""
        return self._engine.high_watermark >= self._durable_offset and not self.leader_only

    async def wait(self) -> AppendResult:
        """Wait until the written (or, for a duplicate, the original) batches are below the high watermark.

        Raises:
            StorageUnavailable: the fsync failed or the partition went offline or closed meanwhile; always
                ``definite=False``, since the batches are in the log and may survive.
        """
        if self.leader_only:
            if self._engine.config.flush_sync:
                await self._engine._await_durable(self._durable_offset)
            if self._engine.leadership_check is not None:
                self._engine.leadership_check()  # this node still leads: a deposed leader acknowledges nothing
            return self.result
        await self._engine._await_high_watermark(self._durable_offset)
        if self._engine.acknowledge_check is not None:
            self._engine.acknowledge_check()
        return self.result
