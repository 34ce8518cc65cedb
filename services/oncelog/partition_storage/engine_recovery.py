"""Opening a partition engine: the log, then producer state and aborted-transaction indexes rebuilt from it.

Kafka's ``UnifiedLog`` load path (design/kafka-semantics.md §4.6): the newest readable producer-state snapshot,
the transaction-index entries its invariant lets us trust, and a replay of the log tail through the same apply
step a follower uses for batches copied from its leader (:func:`apply_logged_batch`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from oncelog.errors import CorruptMessage, InvalidRecord
from oncelog.partition_storage.engine_types import EngineConfig
from oncelog.partition_storage.leader_epoch_cache import LeaderEpochCache
from oncelog.partition_storage.partition_log import PartitionLog
from oncelog.partition_storage.producer_state import AppendOrigin, ProducerAppendInfo, ProducerStateManager
from oncelog.partition_storage.txn_index import TransactionIndex
from oncelog.records import BatchHeader, read_control_record

__all__ = ["apply_logged_batch", "load_epochs", "recover"]

log = logging.getLogger(__name__)


def recover(
    directory: Path, config: EngineConfig, clock: Callable[[], int]
) -> tuple[PartitionLog, ProducerStateManager, dict[int, TransactionIndex]]:
    """Open the log and rebuild producer state and aborted-transaction indexes (design/kafka-semantics.md §4.6);
    blocking.

    1. :class:`PartitionLog` truncates a torn or CRC-failing tail and flushes what it keeps.
    2. Snapshots below the log start are deleted (Kafka's ``truncateAndReload``); the newest readable one left
       gives the producer state at its offset S (an unreadable one is deleted and the previous one tried; with
       none, S is the log start).
    3. Index entries of markers below S are trusted (the snapshot invariant); entries at or above S are cut.
    4. The log is replayed from S with origin REPLICATION (never rejects); every ABORT marker of a
       transaction with data yields its index entry again, with the LSO of that moment.
    5. Index files that changed are replaced atomically.
    6. If anything was replayed, a snapshot is written at the log end.
    """
    log_ = PartitionLog(
        directory,
        segment_bytes=config.segment_bytes,
        segment_ms=config.segment_ms,
        retention_bytes=config.retention_bytes,
        retention_ms=config.retention_ms,
        index_interval_bytes=config.index_interval_bytes,
        clock=clock,
    )
    try:
        # Kafka's truncateAndReload: a snapshot below the log start describes a prefix whose tail is gone (the
        # retention that deleted it may have taken markers the snapshot has not seen), so it is never loaded.
        # One exactly at the log start holds the state of everything below it and stays valid.
        for offset in log_.snapshot_offsets():
            if offset < log_.log_start_offset:
                log.info("deleting producer snapshot %d of %s: below the log start", offset, directory)
                log_.delete_snapshot(offset)
        producers = _load_snapshot(log_, config, clock)
        start = max(producers.map_end_offset, log_.log_start_offset)
        files = {base: log_.read_txn_index(base) for base in log_.segment_bases}
        indexes = _trusted_indexes(files, start)
        if indexes is None:
            # an index below the replay start is unreadable: only a replay from the log start rebuilds it
            producers = _empty_state(config, clock)
            start = log_.log_start_offset
            indexes = {}
        _replay(log_, producers, indexes, start)
        producers.update_map_end_offset(log_.log_end_offset)
        for base, content in files.items():
            index = indexes.get(base)
            rebuilt = index.to_bytes() if index is not None else b""
            if rebuilt != content:
                log_.replace_txn_index(base, rebuilt)
        if start < log_.log_end_offset:
            # What was just replayed is stored, so the next recovery starts here rather than from an older
            # snapshot that a later retention pass may leave below the log start. Everything below the log end
            # is durable (the log flushed what it kept, the index files were replaced), as the invariant asks.
            log_.write_snapshot(log_.log_end_offset, producers.snapshot())
        if log_.recovery.truncated_bytes or start < log_.log_end_offset:
            log.info(
                "recovered %s: replayed [%d, %d), %d open transaction(s), %d producer(s)",
                directory,
                start,
                log_.log_end_offset,
                len(producers.ongoing_txns()),
                len(producers.active_producers),
            )
        return log_, producers, indexes
    except BaseException:
        log_.close()
        raise


def load_epochs(log_: PartitionLog) -> LeaderEpochCache:
    """The leader-epoch checkpoint, cut to the recovered log end (a crash may have cut the log below it)."""
    epochs = LeaderEpochCache.load(log_.directory)
    epochs.truncate_from_end(log_.log_end_offset)
    return epochs


def _empty_state(config: EngineConfig, clock: Callable[[], int]) -> ProducerStateManager:
    return ProducerStateManager(producer_id_expiration_ms=config.producer_id_expiration_ms, clock=clock)


def _load_snapshot(log_: PartitionLog, config: EngineConfig, clock: Callable[[], int]) -> ProducerStateManager:
    while (latest := log_.latest_snapshot()) is not None:
        offset, data = latest
        try:
            producers = ProducerStateManager.from_snapshot(
                data, producer_id_expiration_ms=config.producer_id_expiration_ms, clock=clock
            )
            if producers.map_end_offset != offset:
                raise CorruptMessage(f"snapshot file {offset} holds state at offset {producers.map_end_offset}")
            return producers
        except CorruptMessage as err:
            log.warning("deleting unreadable producer snapshot %d of %s: %s", offset, log_.directory, err)
            log_.delete_snapshot(offset)
    return _empty_state(config, clock)


def _trusted_indexes(files: dict[int, bytes], start: int) -> dict[int, TransactionIndex] | None:
    """Decode every segment's index file, cut to the entries whose marker lies below ``start``.

    Returns ``None`` if a file that holds trusted entries is unreadable.
    """
    indexes = {}
    for base, data in files.items():
        try:
            index = TransactionIndex.from_bytes(base, data)
        except CorruptMessage as err:
            log.warning("transaction index of segment %d is unreadable: %s", base, err)
            if base < start:
                return None
            index = TransactionIndex(base)
        index.truncate_to(start)
        if len(index):
            indexes[base] = index
    return indexes


def _replay(
    log_: PartitionLog, producers: ProducerStateManager, indexes: dict[int, TransactionIndex], start: int
) -> None:
    """Feed every batch from ``start`` to the log end through the producer state, re-indexing aborts."""
    if start >= log_.log_end_offset:
        return
    for header, batch in log_.batches_from(start):
        if header.base_offset < start or not header.has_producer_id:
            continue
        info = producers.prepare_append(AppendOrigin.REPLICATION)
        apply_logged_batch(info, header, batch, log_)
        for txn in info.aborted_txns:
            base = log_.segment_base_for(txn.last_offset)
            index = indexes.get(base)
            if index is None:
                index = indexes[base] = TransactionIndex(base)
            index.append(txn)
        producers.commit(info)


def apply_logged_batch(info: ProducerAppendInfo, header: BatchHeader, batch: bytes | memoryview, where: object) -> None:
    """Feed one batch already in a log (recovery replay, or a copy from the leader) through the producer state.

    Never rejects: the log is the truth. An unreadable marker is skipped with a warning, as recovery always did.
    """
    if not header.has_producer_id:
        return
    if header.is_control:
        try:
            control_type, coordinator_epoch = read_control_record(batch)
        except (CorruptMessage, InvalidRecord) as err:
            log.warning("skipping unreadable marker at offset %d of %s: %s", header.base_offset, where, err)
            return
        info.append_marker(
            header.producer_id,
            header.producer_epoch,
            int(control_type),  # type: ignore[arg-type]
            coordinator_epoch,
            header.base_offset,
            header.max_timestamp,
        )
    else:
        info.append_data_batch(
            header.producer_id,
            header.producer_epoch,
            header.base_sequence,
            header.last_sequence,
            header.base_offset,
            header.last_offset,
            header.max_timestamp,
            header.is_transactional,
        )
