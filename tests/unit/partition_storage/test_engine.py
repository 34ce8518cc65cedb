"""PartitionEngine on real files: validation, dedup, fencing, markers, LSO, aborted index, durability, recovery.

A crash is simulated by copying the directory of an engine that is still open: the copy holds what the page
cache held (every acknowledged write was fsynced before its acknowledgement), the recovery point of the last
checkpoint, and no close-time snapshot, which is the image a kill -9 leaves.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import google_crc32c
import pytest

from oncelog.errors import (
    CorruptMessage,
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    MessageTooLarge,
    OffsetOutOfRange,
    OutOfOrderSequence,
    StorageUnavailable,
    TransactionCoordinatorFenced,
)
from oncelog.partition_storage import partition_log as partition_log_module
from oncelog.partition_storage.engine import (
    EngineConfig,
    FetchResult,
    OffsetSpec,
    PartitionEngine,
    TxnMarkerSpec,
)
from oncelog.partition_storage.leader_epoch_cache import LeaderEpochCache
from oncelog.partition_storage.partition_log import PartitionLog
from oncelog.records import (
    ControlType,
    Record,
    build_batch,
    build_control_batch,
    decode_records,
    iter_batches,
    read_control_record,
    validate_batch,
)
from oncelog.vocabulary import IsolationLevel

RC = IsolationLevel.READ_COMMITTED
RU = IsolationLevel.READ_UNCOMMITTED
pytestmark = pytest.mark.timeout(60)


class Clock:
    """Injected wall clock, in milliseconds."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def data(
    pid: int = -1, epoch: int = -1, seq: int = -1, *, n: int = 1, txn: bool = False, tag: str = "v", ts: int = 1_000
) -> bytes:
    """A client batch of ``n`` records whose values are ``<tag>-<i>``."""
    records = [Record(key=None, value=f"{tag}-{i}".encode(), timestamp=ts + i) for i in range(n)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=txn)


def marker(pid: int, epoch: int, result: ControlType = ControlType.COMMIT, coordinator_epoch: int = 0) -> TxnMarkerSpec:
    return TxnMarkerSpec(pid, epoch, coordinator_epoch, result)


def read_committed_values(result: FetchResult) -> list[bytes]:
    """What a read_committed consumer hands to the user (Kafka's ``CompletedFetch``, design/kafka-semantics.md §4.5)."""
    pending = sorted(result.aborted_transactions, key=lambda t: t.first_offset)
    aborted_pids: set[int] = set()
    values = []
    for header, batch in iter_batches(result.records, verify_crc=True):
        while pending and pending[0].first_offset <= header.last_offset:
            aborted_pids.add(pending.pop(0).producer_id)
        if header.is_control:
            if read_control_record(batch)[0] is ControlType.ABORT:
                aborted_pids.discard(header.producer_id)
            continue
        if header.is_transactional and header.producer_id in aborted_pids:
            continue
        values += [r.value for r in decode_records(batch)]
    return values


def uncommitted_values(result: FetchResult) -> list[bytes]:
    """What a read_uncommitted consumer hands to the user: every data record, never a control record."""
    return [
        r.value
        for header, batch in iter_batches(result.records, verify_crc=True)
        if not header.is_control
        for r in decode_records(batch)
    ]


def control_batches(result: FetchResult) -> list[tuple[int, ControlType]]:
    return [
        (header.base_offset, read_control_record(batch)[0])
        for header, batch in iter_batches(result.records)
        if header.is_control
    ]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def opened(tmp_path: Path, clock: Clock) -> AsyncIterator[Callable[..., object]]:
    engines: list[PartitionEngine] = []

    async def open_engine(directory: Path | None = None, **config: object) -> PartitionEngine:
        config.setdefault("index_interval_bytes", 256)
        engine = await PartitionEngine.open(directory or tmp_path / "t-0", EngineConfig(**config), clock=clock)  # type: ignore[arg-type]
        engines.append(engine)
        return engine

    yield open_engine
    for engine in engines:
        await engine.close()


def crash_image(engine: PartitionEngine, target: Path) -> Path:
    """Copy the directory of a still-open engine: what a kill -9 right now would leave on disk."""
    shutil.copytree(engine.directory, target, ignore=shutil.ignore_patterns(".lock"))
    return target


# --------------------------------------------------------------------------------------------------- append


async def test_append_assigns_offsets_and_acknowledges_once_durable(opened) -> None:
    engine = await opened()
    first = await engine.append(data(7, 0, 0, n=3))
    second = await engine.append(data(7, 0, 3, n=2))
    assert (first.base_offset, first.last_offset, first.duplicate) == (0, 2, False)
    assert (second.base_offset, second.last_offset) == (3, 4)
    assert engine.high_watermark == engine.log_end_offset == 5
    assert engine.flush_count >= 1
    fetched = engine.read(0, 1 << 20, RU)
    assert uncommitted_values(fetched) == [b"v-0", b"v-1", b"v-2", b"v-0", b"v-1"]


async def test_duplicate_batch_returns_original_offsets(opened) -> None:
    engine = await opened()
    original = await engine.append(data(7, 0, 0, n=2))
    await engine.append(data(7, 0, 2, n=2))
    retried = await engine.append(data(7, 0, 0, n=2))
    assert retried.duplicate
    assert (retried.base_offset, retried.last_offset) == (original.base_offset, original.last_offset)
    assert engine.log_end_offset == 4, "a duplicate must not be appended"


async def test_retry_with_duplicate_prefix_appends_only_the_new_batches(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0, n=2))
    retried = await engine.append(data(7, 0, 0, n=2) + data(7, 0, 2, n=1))
    assert not retried.duplicate
    assert (retried.base_offset, retried.last_offset) == (0, 2)
    assert engine.log_end_offset == 3


async def test_concurrent_appends_share_fsyncs(opened) -> None:
    engine = await opened()
    results = await asyncio.gather(*(engine.append(data(100 + i, 0, 0)) for i in range(20)))
    assert sorted(r.base_offset for r in results) == list(range(20))
    assert engine.flush_count < 20, "group commit must share fsyncs between concurrent appenders"


async def test_pipelined_producers_across_segment_rolls_all_complete(opened) -> None:
    engine = await opened(segment_bytes=4096)

    async def producer(pid: int) -> list[int]:
        window = asyncio.Semaphore(5)  # five batches in flight, as the client library allows

        async def acknowledge(pending) -> int:
            try:
                return (await pending.wait()).base_offset
            finally:
                window.release()

        acks = []
        for seq in range(60):
            await window.acquire()
            acks.append(asyncio.ensure_future(acknowledge(await engine.write(data(pid, 0, seq, tag=str(pid))))))
        return list(await asyncio.gather(*acks))

    offsets = await asyncio.wait_for(asyncio.gather(*(producer(pid) for pid in (1, 2, 3))), 30)
    assert sorted(o for acks in offsets for o in acks) == list(range(180))
    assert all(acks == sorted(acks) for acks in offsets), "each producer's batches keep their order"
    assert len(list(engine.directory.glob("*.log"))) > 1, "the log rolled while batches were in flight"
    assert engine.high_watermark == 180


async def test_unacknowledged_write_is_invisible_until_durable(opened) -> None:
    engine = await opened()
    pending = await engine.write(data(7, 0, 0))
    assert engine.log_end_offset == 1 and engine.high_watermark == 0
    assert engine.read(0, 1 << 20, RU).records == b""
    await pending.wait()
    assert engine.high_watermark == 1
    assert uncommitted_values(engine.read(0, 1 << 20, RU)) == [b"v-0"]


async def test_flush_async_topic_acknowledges_without_fsync(opened) -> None:
    engine = await opened(flush_sync=False)
    await engine.append(data(7, 0, 0))
    assert engine.high_watermark == 1
    assert engine.flush_count == 0
    await engine.flush()
    assert engine.flush_count == 1


async def test_markers_on_a_flush_async_topic_are_acknowledged_only_once_fsynced(opened) -> None:
    """Issue 25 item 9: the coordinator completes a transaction on the acknowledgement; a marker lost after it
    would leave the transaction open on the partition for good."""
    engine = await opened(flush_sync=False)
    await engine.append(data(8, 0, 0, txn=True))
    assert engine.flush_count == 0, "flush=async data is acknowledged without an fsync"
    [outcome] = await engine.write_markers([marker(8, 1)])
    assert outcome is None
    assert engine.flush_count == 1, "the marker (and what precedes it) was fsynced before the acknowledgement"


async def test_the_first_abort_marker_of_a_segment_makes_its_index_file_durable(
    opened, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25 item 9: creating a segment's ``.txnindex`` fsyncs the directory, not only the file."""
    synced_dirs: list[Path] = []
    real_fsync_directory = partition_log_module.fsync_directory

    def recording_fsync_directory(path: Path) -> None:
        synced_dirs.append(Path(path))
        real_fsync_directory(path)

    monkeypatch.setattr(partition_log_module, "fsync_directory", recording_fsync_directory)
    engine = await opened()
    await engine.append(data(8, 0, 0, txn=True))
    synced_dirs.clear()
    [outcome] = await engine.write_markers([marker(8, 1, ControlType.ABORT)])
    assert outcome is None
    assert list(engine.directory.glob("*.txnindex")), "the abort created the segment's index"
    assert engine.directory in synced_dirs, "the new index file's directory entry was fsynced"


async def test_changed_event_fires_when_the_high_watermark_moves(opened) -> None:
    engine = await opened()
    event = engine.changed()
    assert not event.is_set()
    await engine.append(data())
    assert event.is_set()
    assert not engine.changed().is_set()


# ------------------------------------------------------------------------------------------------ validation


async def test_out_of_order_sequence_is_rejected_and_nothing_appended(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0))
    with pytest.raises(OutOfOrderSequence, match="expected 1"):
        await engine.append(data(7, 0, 2))
    assert engine.log_end_offset == 1
    assert (await engine.append(data(7, 0, 1))).base_offset == 1


async def test_zombie_epoch_is_fenced(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0))
    await engine.append(data(7, 1, 0))
    with pytest.raises(InvalidProducerEpoch):
        await engine.append(data(7, 0, 1))
    with pytest.raises(OutOfOrderSequence, match="must start at 0"):
        await engine.append(data(7, 2, 5))
    assert engine.log_end_offset == 2


async def test_sequence_wraps_past_int32_max(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 2**31 - 2, n=3))  # sequences 2**31-2, 2**31-1, 0
    assert (await engine.append(data(7, 0, 1))).base_offset == 3


async def test_non_transactional_write_inside_open_transaction_is_rejected(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0, txn=True))
    with pytest.raises(InvalidTxnState):
        await engine.append(data(7, 0, 1))
    assert engine.log_end_offset == 1


@pytest.mark.parametrize(
    ("mangle", "error", "fragment"),
    [
        (lambda b: b[:-1] + bytes([b[-1] ^ 1]), CorruptMessage, "CRC32C"),
        (lambda b: b[:-5], CorruptMessage, "truncated"),
        (lambda b: b[:30], CorruptMessage, "truncated RecordBatch header"),
        (lambda b: b"", InvalidRecord, "no record batch"),
        (lambda b: b + b"\x00" * 3, CorruptMessage, "truncated RecordBatch header"),
    ],
    ids=["crc", "truncated-body", "truncated-header", "empty", "trailing-garbage"],
)
async def test_damaged_batches_are_rejected_and_the_partition_keeps_serving(opened, mangle, error, fragment) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0))
    with pytest.raises(error, match=fragment):
        await engine.append(mangle(data(7, 0, 1)))
    assert engine.log_end_offset == 1
    assert (await engine.append(data(7, 0, 1))).base_offset == 1


async def test_oversize_batch_is_rejected(opened) -> None:
    engine = await opened(max_message_bytes=200)
    big = build_batch(
        [Record(key=None, value=b"x" * 300, timestamp=1)], producer_id=7, producer_epoch=0, base_sequence=0
    )
    with pytest.raises(MessageTooLarge, match="max_message_bytes is 200"):
        await engine.append(big)
    assert engine.log_end_offset == 0


async def test_client_control_batch_is_rejected(opened) -> None:
    engine = await opened()
    forged = build_control_batch(ControlType.COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=0, timestamp=1)
    with pytest.raises(InvalidRecord, match="control batches"):
        await engine.append(forged)
    assert engine.log_end_offset == 0


async def test_record_validation_rejects_undecodable_records_when_enabled(opened) -> None:
    engine = await opened(validate_records=True)
    good = bytearray(data(7, 0, 0))
    good[61] = 0x7F  # the first record's length varint now runs past the records section
    good[17:21] = google_crc32c.value(bytes(good[21:])).to_bytes(4, "big")
    with pytest.raises(InvalidRecord):
        await engine.append(bytes(good))
    assert engine.log_end_offset == 0


# ------------------------------------------------------------------------------------------- transactions


async def test_lso_stops_at_first_open_transaction_and_advances_on_its_marker(opened) -> None:
    engine = await opened()
    await engine.append(data(1, 0, 0, tag="plain"))  # offset 0
    await engine.append(data(7, 0, 0, txn=True, tag="a"))  # offset 1: first open transaction
    await engine.append(data(8, 0, 0, txn=True, tag="b"))  # offset 2
    assert (engine.high_watermark, engine.last_stable_offset) == (3, 1)
    assert read_committed_values(engine.read(0, 1 << 20, RC)) == [b"plain-0"]
    assert await engine.write_markers([marker(8, 1)]) == [None]  # offset 3; the earlier txn still pins the LSO
    assert engine.last_stable_offset == 1
    assert await engine.write_markers([marker(7, 1)]) == [None]  # offset 4
    assert engine.last_stable_offset == engine.high_watermark == 5
    assert read_committed_values(engine.read(0, 1 << 20, RC)) == [b"plain-0", b"a-0", b"b-0"]


async def test_aborted_data_is_listed_so_read_committed_drops_it(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0, txn=True, tag="doomed"))
    await engine.append(data(8, 0, 0, tag="plain"))
    await engine.write_markers([marker(7, 1, ControlType.ABORT)])
    await engine.append(data(7, 1, 0, txn=True, tag="kept"))
    await engine.write_markers([marker(7, 2)])
    fetched = engine.read(0, 1 << 20, RC)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in fetched.aborted_transactions] == [(7, 0, 2)]
    assert read_committed_values(fetched) == [b"plain-0", b"kept-0"]
    assert uncommitted_values(engine.read(0, 1 << 20, RU)) == [b"doomed-0", b"plain-0", b"kept-0"]
    assert engine.read(0, 1 << 20, RU).aborted_transactions == ()
    assert control_batches(fetched) == [(2, ControlType.ABORT), (4, ControlType.COMMIT)]
    assert engine.read(3, 1 << 20, RC).aborted_transactions == (), "the abort ended before offset 3"


async def test_marker_retried_twice_is_applied_once(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0, txn=True))
    for _ in range(3):
        assert await engine.write_markers([marker(7, 1, coordinator_epoch=4)]) == [None]
    assert control_batches(engine.read(0, 1 << 20, RU)) == [(1, ControlType.COMMIT)]
    assert engine.log_end_offset == 2


async def test_old_coordinator_epoch_marker_is_rejected(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0, txn=True))
    assert await engine.write_markers([marker(7, 1, coordinator_epoch=5)]) == [None]
    await engine.append(data(7, 1, 0, txn=True))
    [outcome] = await engine.write_markers([marker(7, 2, ControlType.ABORT, coordinator_epoch=4)])
    assert isinstance(outcome, TransactionCoordinatorFenced)
    assert engine.log_end_offset == 3 and engine.last_stable_offset == 2
    assert await engine.write_markers([marker(7, 2, ControlType.ABORT, coordinator_epoch=5)]) == [None]
    assert engine.last_stable_offset == 4


async def test_marker_must_carry_a_bumped_epoch_while_its_transaction_is_open(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 3, 0, txn=True))
    [outcome] = await engine.write_markers([marker(7, 3)])
    assert isinstance(outcome, InvalidProducerEpoch)
    assert engine.log_end_offset == 1


async def test_markers_of_many_transactions_share_one_append_and_fail_independently(opened) -> None:
    engine = await opened()
    for pid in (1, 2, 3):
        await engine.append(data(pid, 5, 0, txn=True))
    outcomes = await engine.write_markers([marker(1, 6), marker(2, 4), marker(3, 6, ControlType.ABORT)])
    assert outcomes[0] is None and outcomes[2] is None
    assert isinstance(outcomes[1], InvalidProducerEpoch)
    assert control_batches(engine.read(0, 1 << 20, RU)) == [(3, ControlType.COMMIT), (4, ControlType.ABORT)]
    assert engine.last_stable_offset == 1, "producer 2's transaction is still open"


async def test_marker_without_data_on_the_partition_is_written_and_changes_nothing(opened) -> None:
    engine = await opened()
    assert await engine.write_markers([marker(9, 1)]) == [None]
    assert engine.last_stable_offset == engine.high_watermark == 1
    [described] = engine.describe_producers()
    assert (described.producer_id, described.producer_epoch, described.current_txn_start_offset) == (9, 1, None)


async def test_late_batch_of_an_ended_transaction_is_fenced(opened) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0, txn=True))
    await engine.write_markers([marker(7, 1, ControlType.ABORT)])
    with pytest.raises(InvalidProducerEpoch):
        await engine.append(data(7, 0, 1, txn=True))
    assert engine.last_stable_offset == engine.high_watermark == 2


async def test_interleaved_transactional_and_plain_producers_are_exposed_in_offset_order(opened) -> None:
    engine = await opened()
    await engine.append(data(1, 0, 0, tag="n1"))  # 0: before any transaction: visible at once
    await engine.append(data(10, 0, 0, txn=True, tag="x1"))  # 1: X1 opens
    await engine.append(data(1, 0, 1, tag="n2"))  # 2: behind X1's first offset
    await engine.append(data(20, 0, 0, txn=True, tag="x2"))  # 3: X2 opens
    assert read_committed_values(engine.read(0, 1 << 20, RC)) == [b"n1-0"]
    await engine.write_markers([marker(20, 1)])  # 4: X2 commits first, X1 still pins the LSO
    assert engine.last_stable_offset == 1
    assert read_committed_values(engine.read(0, 1 << 20, RC)) == [b"n1-0"]
    await engine.write_markers([marker(10, 1)])
    assert read_committed_values(engine.read(0, 1 << 20, RC)) == [b"n1-0", b"x1-0", b"n2-0", b"x2-0"]


# ---------------------------------------------------------------------------------------------------- reads


async def test_reads_reject_offsets_outside_the_log(opened) -> None:
    engine = await opened()
    await engine.append(data())
    for offset in (-1, 2):
        with pytest.raises(OffsetOutOfRange):
            engine.read(offset, 100, RC)
    assert engine.read(1, 100, RC).records == b""


async def test_list_offsets(opened, clock: Clock) -> None:
    engine = await opened()
    await engine.append(data(1, 0, 0, ts=5_000, n=2))  # 0-1
    await engine.append(data(7, 0, 0, txn=True, ts=9_000))  # 2, open
    # (offset, timestamp, leader epoch): the engine leads at epoch 0 and stamped every batch with it
    assert engine.list_offset(OffsetSpec.EARLIEST, RC) == (0, -1, 0)
    assert engine.list_offset(OffsetSpec.LATEST, RU) == (3, -1, 0)
    assert engine.list_offset(OffsetSpec.LATEST, RC) == (2, -1, 0)
    assert engine.list_offset(OffsetSpec.TIMESTAMP, RU, 5_001) == (1, 5_001, 0)
    assert engine.list_offset(OffsetSpec.TIMESTAMP, RU, 9_000) == (2, 9_000, 0)
    assert engine.list_offset(OffsetSpec.TIMESTAMP, RC, 9_000) == (-1, -1, -1), "undecided data cannot be found"
    assert engine.list_offset(OffsetSpec.TIMESTAMP, RU, 99_999) == (-1, -1, -1)


async def test_describe_producers_shows_the_open_transaction(opened, clock: Clock) -> None:
    engine = await opened()
    await engine.append(data(1, 0, 0, n=3))
    await engine.append(data(7, 2, 0, txn=True))
    described = {d.producer_id: d for d in engine.describe_producers()}
    assert (described[1].last_sequence, described[1].current_txn_start_offset) == (2, None)
    assert (described[7].producer_epoch, described[7].current_txn_start_offset) == (2, 3)


# ------------------------------------------------------------------------------------------------- maintenance


async def test_expiry_forgets_idle_producers_but_never_an_open_transaction(opened, clock: Clock) -> None:
    engine = await opened(producer_id_expiration_ms=1_000)
    await engine.append(data(1, 0, 0))
    await engine.append(data(7, 0, 0, txn=True))
    clock.now += 1_000
    assert await engine.expire_producers() == [1]
    assert [d.producer_id for d in engine.describe_producers()] == [7]
    # an expired producer may resume at any sequence (KIP-360)
    assert (await engine.append(data(1, 0, 42))).base_offset == 2


async def test_retention_deletes_old_segments(opened, clock: Clock) -> None:
    engine = await opened(segment_bytes=300, retention_bytes=400)
    for batch in range(6):  # 91-byte batches of 3 records: 3 batches per segment
        await engine.append(data(7, 0, 3 * batch, n=3))
    assert await engine.enforce_retention() == [0]
    assert engine.log_start_offset == 9
    assert engine.read(engine.log_start_offset, 1 << 20, RC).records


async def test_a_leader_only_write_is_acknowledged_once_fsynced_here_whatever_the_followers_hold(opened) -> None:
    """acks=1 on a replicated partition: the followers hold the HW at 0, yet a leader-only write is acknowledged
    once it is durable on the leader; an acks=all one is not, until the replicas let the HW pass it."""
    engine = await opened()
    engine.high_watermark_limit = lambda candidate: 0  # no follower has copied anything
    leader_only = await engine.write(data(7, 0, 0, n=3))
    leader_only.leader_only = True
    assert not leader_only.acknowledged, "the fast path never skips the leader's fsync check"
    assert (await leader_only.wait()).last_offset == 2
    assert engine.flush_count >= 1 and engine.high_watermark == 0, "fsynced here, not passed by the HW"
    all_replicas = await engine.write(data(7, 0, 3, n=3))
    assert not all_replicas.acknowledged
    engine.high_watermark_limit = None  # the followers caught up
    engine.refresh_high_watermark()
    assert (await all_replicas.wait()).last_offset == 5 and engine.high_watermark == 6


async def test_retention_moves_the_leader_epoch_checkpoint_to_the_new_log_start(opened) -> None:
    engine = await opened(segment_bytes=300, retention_bytes=400)
    for batch in range(6):  # 3 batches per segment; the leader epoch moves from 0 to 2 at offset 6
        engine.leader_epoch = 0 if batch < 2 else 2
        await engine.append(data(7, 0, 3 * batch, n=3))
    assert [(e.epoch, e.start_offset) for e in engine.epochs.entries] == [(0, 0), (2, 6)]
    assert await engine.enforce_retention() == [0]
    assert [(e.epoch, e.start_offset) for e in engine.epochs.entries] == [(2, 9)], "epoch 0 ended below the start"
    reloaded = LeaderEpochCache.load(engine.directory)
    assert [(e.epoch, e.start_offset) for e in reloaded.entries] == [(2, 9)], "and the checkpoint file says so"


async def test_retention_deletes_snapshots_with_their_segments(opened, tmp_path: Path) -> None:
    """Issue 25 item 3: a snapshot below the new log start goes with the segments retention deletes."""
    engine = await opened(segment_bytes=300, retention_bytes=100)
    for batch in range(2):
        await engine.append(data(7, 0, 3 * batch, n=3))
    await engine.close()  # snapshot at the log end, 6
    engine = await opened(segment_bytes=300, retention_bytes=100)
    for batch in range(2, 4):  # rolls past the snapshot
        await engine.append(data(7, 0, 3 * batch, n=3))
    assert await engine.enforce_retention()
    assert engine.log_start_offset > 6
    left = sorted(int(path.stem) for path in engine.directory.glob("*.snapshot"))
    assert all(offset >= engine.log_start_offset for offset in left), left


async def test_retention_never_deletes_writes_above_the_high_watermark(opened) -> None:
    """Issue 25 item 8: segments holding writes that are not acknowledged yet stay until they are."""
    engine = await opened(segment_bytes=300, retention_bytes=100)
    pending = [await engine.write(data(7, 0, 3 * batch, n=3, tag=f"b{batch}")) for batch in range(6)]
    assert engine.high_watermark == 0 and engine.log_end_offset == 18
    assert await engine.enforce_retention() == [], "nothing below the high watermark: nothing may go"
    for write in pending:
        await write.wait()
    assert engine.high_watermark == 18
    assert await engine.enforce_retention() == [0]
    assert uncommitted_values(engine.read(engine.log_start_offset, 1 << 20, RU))


# ---------------------------------------------------------------------------------------------------- recovery


async def test_close_and_reopen_restores_everything_from_the_snapshot(opened, tmp_path: Path) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0, txn=True))
    await engine.append(data(8, 0, 0))
    await engine.write_markers([marker(7, 1, ControlType.ABORT, coordinator_epoch=3)])
    await engine.append(data(9, 0, 0, txn=True))
    await engine.close()
    reopened = await opened()
    assert (reopened.log_end_offset, reopened.high_watermark, reopened.last_stable_offset) == (4, 4, 3)
    assert (await reopened.append(data(8, 0, 0))).duplicate
    [aborted] = reopened.read(0, 1 << 20, RC).aborted_transactions
    assert (aborted.producer_id, aborted.first_offset) == (7, 0)
    [outcome] = await reopened.write_markers([marker(9, 1, coordinator_epoch=2)])
    assert outcome is None, "a first marker for producer 9 accepts any coordinator epoch"
    [fenced] = await reopened.write_markers([marker(7, 2, coordinator_epoch=2)])
    assert isinstance(fenced, TransactionCoordinatorFenced), "producer 7's coordinator epoch 3 survived the restart"


async def test_crash_recovery_rebuilds_dedup_lso_and_aborted_index_by_replay(opened, tmp_path: Path) -> None:
    engine = await opened()
    for seq in range(3):
        await engine.append(data(7, 0, seq, tag=f"p{seq}"))
    await engine.append(data(8, 0, 0, txn=True, tag="doomed"))
    await engine.write_markers([marker(8, 1, ControlType.ABORT)])
    await engine.append(data(9, 0, 0, txn=True, tag="open"))
    image = crash_image(engine, tmp_path / "crashed")
    recovered = await opened(image)
    assert (recovered.log_end_offset, recovered.last_stable_offset) == (6, 5)
    retried = await recovered.append(data(7, 0, 1, tag="p1"))
    assert retried.duplicate and retried.base_offset == 1
    fetched = recovered.read(0, 1 << 20, RC)
    assert [(t.producer_id, t.first_offset) for t in fetched.aborted_transactions] == [(8, 3)]
    assert read_committed_values(fetched) == [b"p0-0", b"p1-0", b"p2-0"]


async def test_crash_recovery_truncates_a_torn_tail(opened, tmp_path: Path) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0))
    await engine.append(data(7, 0, 1))
    image = crash_image(engine, tmp_path / "crashed")
    [segment] = sorted(image.glob("*.log"))
    torn = data(7, 0, 2)
    with segment.open("ab") as f:
        f.write(torn[: len(torn) // 2])
    recovered = await opened(image)
    assert recovered.log_end_offset == 2
    assert (await recovered.append(data(7, 0, 2))).base_offset == 2, "the torn batch was never acknowledged"
    for header, batch in iter_batches(recovered.read(0, 1 << 20, RU).records):
        validate_batch(batch)
        assert header.base_offset in (0, 1, 2)


async def test_recovery_rebuilds_aborted_entries_written_after_the_snapshot(opened, tmp_path: Path) -> None:
    engine = await opened(segment_bytes=160)
    await engine.append(data(1, 0, 0, n=2))  # 81 bytes each
    await engine.append(data(1, 0, 2, n=2))  # rolls at offset 2
    await engine.append(data(8, 0, 0, txn=True))  # offset 4
    await engine.write_markers([marker(8, 1, ControlType.ABORT)])  # rolls: the marker opens the segment at 5
    await engine.close()  # the roll snapshot is written once durable, then one at the log end
    log_ = PartitionLog(tmp_path / "t-0")
    assert log_.snapshot_offsets() == [5, 6], "snapshots are written on roll and on close; two are kept"
    log_.delete_snapshot(6)  # as if the process had crashed instead of closing
    log_.close()
    for index in tmp_path.joinpath("t-0").glob("*.txnindex"):
        index.write_bytes(b"")  # as if the index entry had not reached the disk
    reopened = await opened()
    fetched = reopened.read(4, 1 << 20, RC)  # one read returns one segment: [4, 5), the aborted data
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in fetched.aborted_transactions] == [(8, 4, 5)]
    assert read_committed_values(fetched) == []


async def test_unreadable_index_below_the_snapshot_forces_a_full_replay(opened, tmp_path: Path) -> None:
    engine = await opened(segment_bytes=160)
    await engine.append(data(8, 0, 0, txn=True))  # 0
    await engine.write_markers([marker(8, 1, ControlType.ABORT)])  # 1: indexed in segment 0
    await engine.append(data(1, 0, 0, n=2))  # rolls past segment 0
    await engine.append(data(1, 0, 2, n=2))
    await engine.close()  # snapshot at the log end: every index entry lies below it
    [index] = tmp_path.joinpath("t-0").glob("00000000000000000000.txnindex")
    index.write_bytes(b"\x00\x07garbage")
    reopened = await opened()
    [aborted] = reopened.read(0, 1 << 20, RC).aborted_transactions
    assert (aborted.producer_id, aborted.first_offset, aborted.last_offset) == (8, 0, 1)
    assert len(index.read_bytes()) == 34, "the index file was rewritten from the replay"


async def test_corrupt_snapshot_falls_back_to_a_full_replay(opened, tmp_path: Path) -> None:
    engine = await opened()
    await engine.append(data(7, 0, 0))
    await engine.append(data(8, 0, 0, txn=True))
    await engine.close()
    for snapshot in tmp_path.joinpath("t-0").glob("*.snapshot"):
        snapshot.write_bytes(b"garbage")
    reopened = await opened()
    assert reopened.last_stable_offset == 1
    assert (await reopened.append(data(7, 0, 0))).duplicate


async def test_recovery_never_loads_a_snapshot_below_the_log_start(opened, tmp_path: Path) -> None:
    """Issue 25 item 3: crash between a roll and its snapshot, a retention pass, a second crash.

    The only snapshot left predates the COMMIT marker that retention deleted; loading it reopened the committed
    transaction at its old epoch, stuck the LSO below the log start and let a zombie continue it.
    """
    directory = tmp_path / "t-0"
    engine = await opened(segment_bytes=200)
    await engine.append(data(8, 0, 0, txn=True, tag="committed"))  # offset 0
    await engine.close()  # snapshot at 1: producer 8's transaction is open there
    stale = (directory / f"{1:020d}.snapshot").read_bytes()
    engine = await opened(segment_bytes=200)
    [outcome] = await engine.write_markers([marker(8, 1)])  # offset 1 commits it
    assert outcome is None
    for seq in range(6):  # plain data rolls segments past the marker
        await engine.append(data(7, 0, 2 * seq, n=2, tag=f"plain{seq}"))
    await engine.close()
    log_ = PartitionLog(directory, retention_bytes=250)
    for offset in log_.snapshot_offsets():
        log_.delete_snapshot(offset)  # the roll snapshots never reached the disk...
    log_.write_snapshot(1, stale)  # ...only the one from before the marker did
    assert log_.enforce_retention(), "retention must delete the segments holding the marker"
    log_start, log_end = log_.log_start_offset, log_.log_end_offset
    assert log_start > 1
    log_.close()

    recovered = await opened(segment_bytes=200)
    assert recovered.log_start_offset == log_start
    assert recovered.last_stable_offset == recovered.high_watermark == log_end
    assert all(p.current_txn_start_offset is None for p in recovered.describe_producers())
    fetched = recovered.read(log_start, 1 << 20, RC)
    assert read_committed_values(fetched), "read_committed readers get the retained data"
    snapshots = sorted(int(path.stem) for path in directory.glob("*.snapshot"))
    assert snapshots == [log_end], "the stale snapshot is gone, and recovery stored what it replayed"


async def test_a_write_waiting_for_its_fsync_when_the_engine_closes_is_indeterminate(opened) -> None:
    """Issue 25 item 6: close() flushes the batch, so the wait must not report it as definitely failed."""
    engine = await opened()
    pending = await engine.write(data(7, 0, 0, tag="in-the-log"))
    assert not pending.acknowledged
    await engine.close()  # leadership moved, or SIGTERM
    with pytest.raises(StorageUnavailable) as info:
        await pending.wait()
    assert info.value.definite is False, "the write is in the log: its outcome is unknown, not failed"
    reopened = await opened()
    assert uncommitted_values(reopened.read(0, 1 << 20, RU)) == [b"in-the-log-0"], "the write survived"
    assert (await reopened.append(data(7, 0, 0, tag="in-the-log"))).duplicate, "a retry is deduplicated"


async def test_closed_engine_refuses_requests(opened) -> None:
    engine = await opened()
    await engine.close()
    with pytest.raises(StorageUnavailable, match="closed"):
        await engine.append(data())
    with pytest.raises(StorageUnavailable, match="closed"):
        engine.read(0, 100, RC)
