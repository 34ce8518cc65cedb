"""What a write must pass before the partition engine appends it: client batches and transaction markers.

Client batches are checked whole before anything is written (design/kafka-semantics.md §4.2); markers are built
as control batches and checked one by one against the producer state (design/kafka-semantics.md §3.3), each
with its own outcome. Nothing here writes: :class:`~oncelog.partition_storage.engine.PartitionEngine` appends
what passed, under its lock, in the same synchronous section.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oncelog.errors import InvalidRecord, InvalidRequest, MessageTooLarge, OncelogError
from oncelog.partition_storage.engine_types import TxnMarkerSpec
from oncelog.partition_storage.producer_state import ProducerAppendInfo, ProducerStateManager
from oncelog.records import BatchHeader, ControlType, build_control_batch, iter_batches
from oncelog.records import validate_batch as _validate_batch

__all__ = ["ClientBatch", "parse_client_batches", "stage_markers"]


@dataclass(frozen=True, slots=True)
class ClientBatch:
    """One producer batch of a request, its header validated."""

    header: BatchHeader
    data: memoryview


def parse_client_batches(
    records: bytes | memoryview, max_message_bytes: int, validate_records: bool
) -> list[ClientBatch]:
    """Split a request into batches, each within ``max_message_bytes`` with a valid header and CRC32C (and valid
    records with ``validate_records``).

    Raises:
        CorruptMessage: truncated or trailing bytes, a bad header, or a CRC32C mismatch.
        InvalidRecord: an empty request, or a control batch (only the coordinator writes markers).
        MessageTooLarge: a batch exceeds ``max_message_bytes``.
    """
    batches: list[ClientBatch] = []
    for header, view in iter_batches(records):
        if header.size_in_bytes > max_message_bytes:
            raise MessageTooLarge(
                f"batch at offset delta {len(batches)} is {header.size_in_bytes} bytes; the topic's "
                f"max_message_bytes is {max_message_bytes}"
            )
        header = _validate_batch(view, check_records=validate_records)
        if header.is_control:
            raise InvalidRecord("control batches are written by the transaction coordinator, not by producers")
        batches.append(ClientBatch(header, view))
    if not batches:
        raise InvalidRecord("the request carries no record batch for this partition")
    return batches


def stage_markers(
    producers: ProducerStateManager,
    info: ProducerAppendInfo,
    markers: Sequence[TxnMarkerSpec],
    offset: int,
    now: int,
    strict_epoch: bool,
) -> tuple[list[bytes], list[OncelogError | None]]:
    """Build the control batch of each marker that is neither a repeat nor refused, from ``offset`` on, and stage
    it in ``info``; returns the batches and each marker's outcome (``None``: written or a repeat, else its error)."""
    outcomes: list[OncelogError | None] = [None] * len(markers)
    batches: list[bytes] = []
    for i, marker in enumerate(markers):
        if _marker_is_repeat(producers, info, marker):
            continue
        try:
            batch = build_control_batch(
                ControlType(marker.result),
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                coordinator_epoch=marker.coordinator_epoch,
                base_offset=offset,
                timestamp=now,
            )
        except ValueError as err:
            outcomes[i] = InvalidRequest(f"marker of producer {marker.producer_id} is malformed: {err}")
            continue
        try:
            info.append_marker(
                marker.producer_id,
                marker.producer_epoch,
                int(marker.result),  # type: ignore[arg-type]
                marker.coordinator_epoch,
                offset,
                now,
                strict_epoch=strict_epoch,
            )
        except OncelogError as err:
            outcomes[i] = err
            continue
        batches.append(batch)
        offset += 1
    return batches, outcomes


def _marker_is_repeat(producers: ProducerStateManager, info: ProducerAppendInfo, marker: TxnMarkerSpec) -> bool:
    entry = info.staged_entry(marker.producer_id) or producers.last_entry(marker.producer_id)
    return (
        entry is not None
        and entry.current_txn_first_offset is None
        and entry.producer_epoch == marker.producer_epoch
        and entry.coordinator_epoch == marker.coordinator_epoch
    )
