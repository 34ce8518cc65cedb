"""Transactions across real processes: pid-allocator, two coordinators, two storage nodes, group-offsets.

Ports the coordinator and end-to-end scenarios of design/kafka-semantics.md §8 S3, S6 and S7 onto the whole system:
records are
written by :class:`~oncelog.testing.txn_driver.TransactionalDriver` (raw stubs, Kafka RecordBatch v2 with
producer id, epoch and sequence) and read back with Fetch plus the consumer's own read_committed filter, so
every assertion is about what a consumer would see. Faults are real: ``kill -9`` of a coordinator or a
storage node, and restarts. Nothing sleeps for a state; :func:`eventually` polls against a deadline.

The cluster is shared by the module (once on SQLite, once on PostgreSQL); each test uses its own topics and
transactional ids, and a test that kills a process starts it again before it ends.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from oncelog.api.common import v1 as common_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.fetch_filter import AbortedTransaction
from oncelog.client.records import TopicPartition
from oncelog.errors import OncelogError, Reason
from oncelog.records import ControlType, Record, build_batch
from oncelog.rpc import from_error_info
from oncelog.testing import LocalCluster
from oncelog.testing.txn_driver import (
    ClusterView,
    PartitionRead,
    TransactionalDriver,
    eventually,
    fetch_group_offsets,
    read_partition,
)
from oncelog.vocabulary import IsolationLevel

pytestmark = pytest.mark.timeout(240)

STORAGE = ("partition-storage-0", "partition-storage-1")
COORDINATORS = ("txn-coordinator-0", "txn-coordinator-1")
RU = IsolationLevel.READ_UNCOMMITTED
COMMIT, ABORT = ControlType.COMMIT, ControlType.ABORT
EMPTY = txn_pb.TRANSACTION_STATE_EMPTY
PREPARE_COMMIT = txn_pb.TRANSACTION_STATE_PREPARE_COMMIT
COMPLETE_COMMIT = txn_pb.TRANSACTION_STATE_COMPLETE_COMMIT
COMPLETE_ABORT = txn_pb.TRANSACTION_STATE_COMPLETE_ABORT
FENCED = {Reason.PRODUCER_FENCED, Reason.INVALID_PRODUCER_EPOCH}
ENV = {
    # short leases: a killed coordinator's shards move to the other process within seconds
    "ONCELOG_TXN_COORDINATOR_LEASE_MS": "2000",
    "ONCELOG_TXN_COORDINATOR_NODE_LEASE_MS": "2000",
    "ONCELOG_PARTITION_STORAGE_NODE_LEASE_MS": "3000",
    # design/kafka-semantics.md §8: the timeout sweep runs often in tests
    "ONCELOG_TXN_COORDINATOR_ABORT_CHECK_INTERVAL_MS": "100",
    "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MS": "20",
    "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MAX_MS": "200",
    "ONCELOG_TXN_COORDINATOR_MARKER_REQUEST_TIMEOUT_MS": "5000",
}


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The whole system as processes: 2 coordinators, 2 storage nodes, group-offsets, pid-allocator.

    Catalog, transaction table and group offsets on SQLite files, or all on one PostgreSQL database.
    """
    database_url = ""
    if request.param == "postgres":
        server = request.getfixturevalue("postgres_url")
        name = "fs_" + uuid.uuid4().hex[:12]
        admin = sa.create_engine(server, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        database_url = server.rsplit("/", 1)[0] + "/" + name
    with LocalCluster(
        Path(tmp_path_factory.mktemp(f"txn-full-stack-{request.param}")),
        storage_nodes=2,
        replicas={"txn-coordinator": 2},
        database_url=database_url,
        env=ENV,
    ) as running:
        yield running


@pytest.fixture
async def view(cluster: LocalCluster) -> AsyncIterator[ClusterView]:
    """A client view whose bootstrap follows restarts (a restarted process listens on a new port)."""
    client = ClusterView(lambda: [n.address for n in cluster.nodes if n.alive() and n.address])
    yield client
    await client.close()


@pytest.fixture
def revive(cluster: LocalCluster) -> Iterator[None]:
    """Start again whatever a test killed, so the next test finds the whole cluster."""
    yield
    for node in cluster.nodes:
        if not node.alive():
            cluster.restart(node.node_id)


# ---------------------------------------------------------------------------------------------- helpers


async def new_topic(view: ClusterView, name: str, partitions: int = 4) -> tuple[list[TopicPartition], dict[int, str]]:
    """Create ``name``; returns its partitions and partition -> leader node id (both storage nodes lead some)."""
    leaders = await view.create_topic(name, partitions)
    assert set(leaders.values()) == set(STORAGE), f"{name} must be spread over both storage nodes: {leaders}"
    return [TopicPartition(name, p) for p in range(partitions)], leaders


def led_by(tps: list[TopicPartition], leaders: dict[int, str], node_id: str) -> TopicPartition:
    """The first partition of ``tps`` that ``node_id`` leads."""
    return next(tp for tp in tps if leaders[tp.partition] == node_id)


def values(prefix: str, tp: TopicPartition, count: int) -> list[bytes]:
    return [f"{prefix}:{tp.partition}:{i}".encode() for i in range(count)]


async def expect_error(call, *reasons: Reason) -> OncelogError:
    with pytest.raises(OncelogError) as info:
        await call
    assert info.value.reason in reasons, f"expected {[r.name for r in reasons]}, got {info.value!r}"
    return info.value


def markers_of(read: PartitionRead, producer_id: int) -> list[tuple[ControlType, int]]:
    """The decisions (type, producer epoch) ``producer_id``'s control records carry, in log order.

    A coordinator that takes a shard over resends every marker of a Prepare* transaction, and storage appends a
    resend carrying a newer coordinator epoch once more (design/kafka-semantics.md §2.10); such repeats count once here.
    """
    decisions = [(m.control_type, m.producer_epoch) for m in read.markers if m.producer_id == producer_id]
    return list(dict.fromkeys(decisions))


async def stable(view: ClusterView, tp: TopicPartition) -> PartitionRead | None:
    """The read_committed view of ``tp`` once nothing is open in it (LSO == high watermark), else None.

    A leader that cannot be reached yet (it is restarting) also gives None: the next poll looks it up again.
    """
    try:
        read = await read_partition(view, tp)
    except OncelogError as error:
        if error.retriable:
            return None
        raise
    return read if read.last_stable_offset == read.high_watermark else None


# ---------------------------------------------------------------------------------------------- S3 basics


async def test_commit_makes_all_partitions_visible_together(view: ClusterView) -> None:
    tps, _ = await new_topic(view, "fs-commit")
    producer = TransactionalDriver(view, "fs-commit-tx")
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(*tps)
    sent = {tp: values("c", tp, 3) for tp in tps}
    assert await producer.send(sent) == dict.fromkeys(tps, 0)

    for tp in tps:
        committed = await read_partition(view, tp)
        assert committed.records == [], "nothing of an open transaction is visible"
        assert (committed.last_stable_offset, committed.high_watermark) == (0, 3), "the LSO stops at the txn start"
        assert (await read_partition(view, tp, RU)).values == sent[tp], "read_uncommitted sees the open data"

    assert await producer.commit() == (pid, epoch + 1), "KIP-890: EndTxn bumps the epoch"
    await producer.wait_state(COMPLETE_COMMIT)
    # CompleteCommit is written only once every participant acknowledged its marker: from then on every
    # partition shows the whole transaction, with no further waiting.
    for tp in tps:
        committed = await read_partition(view, tp)
        assert committed.values == sent[tp]
        assert (committed.last_stable_offset, committed.high_watermark) == (4, 4), "3 records and the marker"
        assert markers_of(committed, pid) == [(COMMIT, epoch + 1)]
        assert committed.aborted == []


async def test_abort_hides_all_partitions(view: ClusterView) -> None:
    tps, _ = await new_topic(view, "fs-abort")
    producer = TransactionalDriver(view, "fs-abort-tx")
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(*tps)
    aborted = {tp: values("aborted", tp, 2) for tp in tps}
    await producer.send(aborted)
    assert await producer.abort() == (pid, epoch + 1)
    await producer.wait_state(COMPLETE_ABORT)

    for tp in tps:
        read = await read_partition(view, tp)
        assert read.records == [], "aborted data never reaches a read_committed reader"
        assert read.last_stable_offset == read.high_watermark == 3, "the abort marker closes the transaction"
        assert read.aborted == [AbortedTransaction(pid, 0)]
        assert markers_of(read, pid) == [(ABORT, epoch + 1)]
        assert (await read_partition(view, tp, RU)).values == aborted[tp], "the data is stored, only hidden"

    # S3 "basic": the same producer's next transaction commits; only it is visible
    await producer.add_partitions(*tps)
    committed = {tp: values("committed", tp, 2) for tp in tps}
    await producer.send(committed)
    await producer.commit()
    await producer.wait_state(COMPLETE_COMMIT)
    for tp in tps:
        assert (await read_partition(view, tp)).values == committed[tp]
        assert (await read_partition(view, tp, RU)).values == aborted[tp] + committed[tp]


# ---------------------------------------------------------------------------------------------- fencing


async def test_zombie_fenced_after_new_init_producer_id(view: ClusterView) -> None:
    tps, leaders = await new_topic(view, "fs-zombie")
    parts = [led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])]
    zombie = TransactionalDriver(view, "fs-zombie-tx")
    pid, epoch = await zombie.init_producer_id()
    await zombie.add_partitions(*parts)
    await zombie.send({tp: values("zombie", tp, 2) for tp in parts})

    successor = TransactionalDriver(view, "fs-zombie-tx")
    assert await successor.init_producer_id() == (pid, epoch + 2), "one bump fences and aborts, one is the owner's"

    for tp in parts:
        await expect_error(zombie.send({tp: [b"zombie-late"]}), *FENCED)
    await expect_error(zombie.commit(), Reason.PRODUCER_FENCED)
    await expect_error(zombie.add_partitions(*parts), Reason.PRODUCER_FENCED)

    await successor.add_partitions(*parts)
    owned = {tp: values("successor", tp, 2) for tp in parts}
    await successor.send(owned)
    await successor.commit()
    await successor.wait_state(COMPLETE_COMMIT)
    for tp in parts:
        read = await read_partition(view, tp)
        assert read.values == owned[tp], "nothing of the zombie is visible"
        assert markers_of(read, pid) == [(ABORT, epoch + 1), (COMMIT, epoch + 3)]
        assert b"zombie-late" not in (await read_partition(view, tp, RU)).values, "the late produce was refused"


async def test_init_producer_id_aborts_previous_open_transaction(view: ClusterView) -> None:
    tps, leaders = await new_topic(view, "fs-init-aborts")
    parts = [led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])]
    first = TransactionalDriver(view, "fs-init-aborts-tx")
    pid, epoch = await first.init_producer_id()
    await first.add_partitions(*parts)
    await first.send({tp: values("open", tp, 3) for tp in parts})
    for tp in parts:
        assert (await read_partition(view, tp)).last_stable_offset == 0, "the open transaction holds the LSO"

    second = TransactionalDriver(view, "fs-init-aborts-tx")
    error = await expect_error(second.init_producer_id(retry_concurrent=False), Reason.CONCURRENT_TRANSACTIONS)
    assert error.retriable, "the new instance retries while the previous transaction is aborted"
    assert await second.init_producer_id() == (pid, epoch + 2)
    described = await second.describe()
    assert (described.state, described.producer_epoch) == (EMPTY, epoch + 2)

    for tp in parts:
        read = await read_partition(view, tp)
        assert read.records == []
        assert read.last_stable_offset == read.high_watermark == 4, "the abort released the LSO"
        assert markers_of(read, pid) == [(ABORT, epoch + 1)], "aborted with the fencing epoch"
        assert read.aborted == [AbortedTransaction(pid, 0)]


async def test_late_end_txn_of_older_epoch_rejected(view: ClusterView) -> None:
    """KIP-890: a delayed EndTxn (or batch) of the previous transaction cannot touch the current one."""
    tps, leaders = await new_topic(view, "fs-late-end")
    parts = [led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])]
    producer = TransactionalDriver(view, "fs-late-end-tx")
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(parts[0])
    await producer.send({parts[0]: [b"first"]})
    previous = producer.identity
    assert await producer.commit() == (pid, epoch + 1)

    await producer.add_partitions(*parts)
    await producer.send({parts[0]: [b"second"], parts[1]: [b"third"]})
    for commit in (False, True):
        await expect_error(producer.end_txn(commit, identity=previous), Reason.PRODUCER_FENCED)
    late = build_batch(
        [Record(key=None, value=b"late", timestamp=1)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=1,
        transactional=True,
    )
    [result] = (await view.storage(await view.leader(parts[0])).Produce(_produce_request(parts[0], late))).results
    assert result.HasField("error") and from_error_info(result.error).reason in FENCED, "storage refuses the old epoch"

    described = await producer.describe()
    assert (described.state, described.producer_epoch) == (txn_pb.TRANSACTION_STATE_ONGOING, epoch + 1)
    await producer.commit()
    await producer.wait_state(COMPLETE_COMMIT)
    assert (await read_partition(view, parts[0])).values == [b"first", b"second"]
    assert (await read_partition(view, parts[1])).values == [b"third"]


def _produce_request(tp: TopicPartition, batch: bytes) -> storage_pb.ProduceRequest:
    return storage_pb.ProduceRequest(
        partitions=[
            storage_pb.PartitionBatches(
                topic_partition=common_pb.TopicPartition(topic=tp.topic, partition=tp.partition),
                leader_epoch=-1,
                records=batch,
            )
        ]
    )


async def test_duplicate_end_txn_retry_returns_success(view: ClusterView) -> None:
    tps, leaders = await new_topic(view, "fs-retry-end")
    parts = [led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])]
    producer = TransactionalDriver(view, "fs-retry-end-tx")
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(*parts)
    await producer.send({tp: [b"once"] for tp in parts})
    first = producer.identity
    assert await producer.end_txn(True) == (pid, epoch + 1)
    assert await producer.end_txn(True, identity=first) == (pid, epoch + 1), "a retry gets the same answer"
    await producer.wait_state(COMPLETE_COMMIT)
    assert await producer.end_txn(True, identity=first) == (pid, epoch + 1), "also once the commit completed"
    await expect_error(producer.end_txn(False, identity=first), Reason.INVALID_TXN_STATE)

    await producer.add_partitions(*parts)
    await producer.send({tp: [b"dropped"] for tp in parts})
    second = producer.identity
    assert await producer.abort() == (pid, epoch + 2)
    assert await producer.end_txn(False, identity=second) == (pid, epoch + 2)
    await producer.wait_state(COMPLETE_ABORT)
    assert await producer.end_txn(False, identity=second) == (pid, epoch + 2)

    for tp in parts:
        read = await read_partition(view, tp)
        assert read.values == [b"once"], "retries wrote nothing twice"
        assert markers_of(read, pid) == [(COMMIT, epoch + 1), (ABORT, epoch + 2)]
        written = [(m.producer_epoch, m.coordinator_epoch) for m in read.markers]
        assert len(written) == len(set(written)), "no decision is written twice by one coordinator epoch"


# ---------------------------------------------------------------------------------------------- timeout


async def test_transaction_timeout_aborts_and_lso_advances(view: ClusterView) -> None:
    tps, leaders = await new_topic(view, "fs-timeout")
    parts = [led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])]
    producer = TransactionalDriver(view, "fs-timeout-tx", timeout_ms=1_000)
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(*parts)
    await producer.send({tp: values("forgotten", tp, 2) for tp in parts})
    for tp in parts:
        assert (await read_partition(view, tp)).last_stable_offset == 0

    # The producer goes silent: the coordinator's sweep fences and aborts it, and the LSO catches up
    # (design/architecture.md §1.5).
    for tp in parts:
        read = await eventually(functools.partial(stable, view, tp), f"the LSO of {tp} reached the high watermark")
        assert read.records == [] and markers_of(read, pid) == [(ABORT, epoch + 1)]
    described = await producer.wait_state(COMPLETE_ABORT)
    assert described.producer_epoch == epoch + 1

    await expect_error(producer.send({parts[0]: [b"after-timeout"]}), *FENCED)
    await expect_error(producer.commit(), Reason.PRODUCER_FENCED)


# ---------------------------------------------------------------------------------------------- offsets


async def test_offsets_committed_only_with_transaction(view: ClusterView) -> None:
    inputs, _ = await new_topic(view, "fs-offsets-in", 2)
    outputs, _ = await new_topic(view, "fs-offsets-out", 2)
    group = "fs-offsets-group"
    producer = TransactionalDriver(view, "fs-offsets-tx")
    await producer.init_producer_id()
    positions = {inputs[0]: 10, inputs[1]: 20}

    await producer.add_partitions(outputs[0])
    await producer.send({outputs[0]: [b"aborted-output"]})
    await producer.send_offsets_to_transaction(group, positions)
    assert await fetch_group_offsets(view, group, inputs) == dict.fromkeys(inputs, -1), "pending offsets are hidden"
    await producer.abort()
    await producer.wait_state(COMPLETE_ABORT)
    assert await fetch_group_offsets(view, group, inputs) == dict.fromkeys(inputs, -1), "aborted offsets are dropped"

    await producer.add_partitions(outputs[0])
    await producer.send({outputs[0]: [b"committed-output"]})
    await producer.send_offsets_to_transaction(group, positions)
    assert await fetch_group_offsets(view, group, inputs) == dict.fromkeys(inputs, -1)
    await producer.commit()
    await producer.wait_state(COMPLETE_COMMIT)
    assert await fetch_group_offsets(view, group, inputs, require_stable=True) == positions
    assert (await read_partition(view, outputs[0])).values == [b"committed-output"], "records and offsets together"


async def test_require_stable_fetch_returns_unstable_offset_commit(view: ClusterView) -> None:
    inputs, _ = await new_topic(view, "fs-stable-in", 2)
    outputs, _ = await new_topic(view, "fs-stable-out", 2)
    group = "fs-stable-group"
    producer = TransactionalDriver(view, "fs-stable-tx")
    await producer.init_producer_id()
    await producer.add_partitions(outputs[0])
    await producer.send({outputs[0]: [b"out"]})
    await producer.send_offsets_to_transaction(group, {inputs[0]: 5})

    error = await expect_error(
        fetch_group_offsets(view, group, [inputs[0]], require_stable=True), Reason.UNSTABLE_OFFSET_COMMIT
    )
    assert error.retriable, "the consumer retries until the transaction completes (KIP-447)"
    assert await fetch_group_offsets(view, group, [inputs[0]]) == {inputs[0]: -1}
    assert await fetch_group_offsets(view, group, [inputs[1]], require_stable=True) == {inputs[1]: -1}, (
        "only partitions with a pending offset are unstable"
    )

    await producer.commit()
    await producer.wait_state(COMPLETE_COMMIT)
    assert await fetch_group_offsets(view, group, [inputs[0]], require_stable=True) == {inputs[0]: 5}


# ---------------------------------------------------------------------------------------------- crashes


async def test_marker_fanout_to_down_storage_node_retried_until_it_returns(
    cluster: LocalCluster, view: ClusterView, revive: None
) -> None:
    tps, leaders = await new_topic(view, "fs-down-storage")
    up, down = led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])
    producer = TransactionalDriver(view, "fs-down-storage-tx")
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(up, down)
    sent = {tp: values("fanout", tp, 2) for tp in (up, down)}
    await producer.send(sent)

    cluster.kill(STORAGE[1])  # kill -9 the leader of one participant; its acknowledged data is on disk
    assert await producer.commit() == (pid, epoch + 1), "EndTxn answers once PrepareCommit is durable"
    read = await eventually(lambda: stable(view, up), f"the LSO of {up} passed the commit marker")
    assert read.values == sent[up], "the live participant's records are visible"
    assert (await producer.describe()).state == PREPARE_COMMIT, "Complete waits for the down participant"

    await asyncio.to_thread(cluster.restart, STORAGE[1])
    await producer.wait_state(COMPLETE_COMMIT)
    read = await eventually(lambda: stable(view, down), f"{down} is readable and stable again")
    assert read.values == sent[down]
    assert markers_of(read, pid) == [(COMMIT, epoch + 1)]


async def test_prepare_commit_rolled_forward_after_coordinator_kill_9(
    cluster: LocalCluster, view: ClusterView, revive: None
) -> None:
    tid = "fs-roll-forward-tx"
    tps, leaders = await new_topic(view, "fs-roll-forward")
    up, down = led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])
    producer = TransactionalDriver(view, tid)
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(up, down)
    sent = {tp: values("roll", tp, 2) for tp in (up, down)}
    await producer.send(sent)

    cluster.kill(STORAGE[1])  # holds the transaction in PrepareCommit: one participant cannot take its marker
    await producer.commit()
    assert (await producer.describe()).state == PREPARE_COMMIT
    owner = (await view.find_coordinator(tid)).node_id
    cluster.kill(owner)  # kill -9 with the commit decided and not completed
    await asyncio.to_thread(cluster.restart, owner)

    # Whoever loads the shard now finds PrepareCommit: a new instance must wait, never abort it
    # (design/kafka-semantics.md §2.3).
    successor = TransactionalDriver(view, tid)
    await expect_error(successor.init_producer_id(retry_concurrent=False), Reason.CONCURRENT_TRANSACTIONS)
    assert (await successor.describe()).state == PREPARE_COMMIT

    await asyncio.to_thread(cluster.restart, STORAGE[1])
    assert await successor.init_producer_id() == (pid, epoch + 2), "the commit completed, then the bump"
    for tp in (up, down):
        read = await eventually(functools.partial(stable, view, tp), f"{tp} is stable")
        assert read.values == sent[tp], "the decided commit was rolled forward"
        assert markers_of(read, pid) == [(COMMIT, epoch + 1)], "and never turned into an abort"


async def test_markers_resumed_after_coordinator_failover(
    cluster: LocalCluster, view: ClusterView, revive: None
) -> None:
    tid = "fs-failover-tx"
    tps, leaders = await new_topic(view, "fs-failover")
    up, down = led_by(tps, leaders, STORAGE[0]), led_by(tps, leaders, STORAGE[1])
    before = await view.find_coordinator(tid)
    producer = TransactionalDriver(view, tid)
    pid, epoch = await producer.init_producer_id()
    await producer.add_partitions(up, down)
    sent = {tp: values("failover", tp, 2) for tp in (up, down)}
    await producer.send(sent)

    cluster.kill(STORAGE[1])
    await producer.commit()
    await eventually(lambda: stable(view, up), f"the first coordinator's marker reached {up}")
    assert (await producer.describe()).state == PREPARE_COMMIT
    cluster.kill(before.node_id)  # not restarted: the other process must take the shard over

    async def moved():
        found = await view.find_coordinator(tid)
        return found if found.node_id != before.node_id else None

    after = await eventually(moved, "another coordinator process owns the shard")
    assert after.coordinator_epoch > before.coordinator_epoch, "taking a shard over bumps the coordinator epoch"
    described = await producer.describe()
    assert (described.state, described.coordinator_node_id) == (PREPARE_COMMIT, after.node_id)

    await asyncio.to_thread(cluster.restart, STORAGE[1])
    described = await producer.wait_state(COMPLETE_COMMIT)
    assert (described.coordinator_node_id, described.coordinator_epoch) == (after.node_id, after.coordinator_epoch)
    resumed = await eventually(lambda: stable(view, down), f"{down} is stable")
    assert resumed.values == sent[down]
    assert [m.coordinator_epoch for m in resumed.markers] == [after.coordinator_epoch], "resumed by the new owner"
    first = await read_partition(view, up)
    assert first.values == sent[up], "visible once"
    assert {(m.producer_id, m.producer_epoch, m.control_type) for m in first.markers} == {(pid, epoch + 1, COMMIT)}
    # The new owner cannot know which participants acknowledged, so it resends to all of them
    # (design/kafka-semantics.md §2.10);
    # storage appends such a resend once more, to record the newer coordinator epoch (as Kafka does).
    epochs = [m.coordinator_epoch for m in first.markers]
    assert epochs[0] == before.coordinator_epoch and set(epochs) <= {before.coordinator_epoch, after.coordinator_epoch}
