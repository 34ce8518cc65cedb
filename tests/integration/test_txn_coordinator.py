"""txn-coordinator as real processes: the KIP-98 state machine, marker fan-out, sweeps and failover.

The coordinator processes (and the pid-allocator) run from :class:`LocalCluster`. The marker destinations
are :class:`MarkerDestinationDouble`: a real gRPC server started by the test that serves
``PartitionStorageService.WriteTxnMarkers`` and ``GroupOffsetsService.WriteTxnMarkers``, registers itself in
the catalog as a partition-storage or group-offsets node (leading the test topic's partitions, owning the
test group's shard) and records every request. It stands in for the separate storage and group-offsets
services; nothing of the coordinator is mocked. Ports the coordinator scenarios of design/kafka-semantics.md §8 S3 and
S6.
"""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
import sqlalchemy as sa
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as pb
from oncelog.catalog import CatalogStore
from oncelog.catalog.node import wall_clock_ms
from oncelog.errors import OncelogError, Reason
from oncelog.rpc import from_rpc_error, sync_channel
from oncelog.storage.sql import create_engine
from oncelog.testing import LocalCluster
from oncelog.testing.otlp import OtlpReceiver, ReceivedSpan

pytestmark = pytest.mark.timeout(120)

TOPIC = "orders"
GROUP = "billing-readers"
LONG_LEASE_MS = 600_000
COMMIT = common_pb.TRANSACTION_RESULT_COMMIT
ABORT = common_pb.TRANSACTION_RESULT_ABORT
SPAN_KIND_CLIENT = 3
COORDINATOR_ENV = {
    "ONCELOG_TXN_COORDINATOR_ABORT_CHECK_INTERVAL_MS": "100",
    "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MS": "20",
    "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MAX_MS": "200",
}


# ---------------------------------------------------------------------------------------------- test double


@dataclass(frozen=True)
class ReceivedMarker:
    """One TxnMarker as a destination received it."""

    service: str  # "partition-storage" or "group-offsets"
    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    result: int
    partitions: tuple[tuple[str, int], ...]
    groups: tuple[str, ...]


class MarkerDestinationDouble:
    """A real gRPC server answering WriteTxnMarkers for partition-storage and group-offsets.

    ``fail_next(n)`` answers the next n calls with UNAVAILABLE; ``hold()`` keeps calls waiting (they are
    recorded on arrival) until ``release()``. Every other call acknowledges every partition and group.
    """

    def __init__(self) -> None:
        self.requests: list[list[ReceivedMarker]] = []
        self.failed = 0
        self._failures = 0
        self._gate: threading.Event | None = None
        self._changed = threading.Condition()
        self.server = grpc.server(ThreadPoolExecutor(max_workers=8))
        double = self

        class Storage(storage_pb.PartitionStorageServiceServicer):
            def WriteTxnMarkers(self, request, context):
                markers = double._receive("partition-storage", request, context)
                return storage_pb.WriteTxnMarkersResponse(results=_acknowledge(markers))

        class Offsets(offsets_pb.GroupOffsetsServiceServicer):
            def WriteTxnMarkers(self, request, context):
                markers = double._receive("group-offsets", request, context)
                return offsets_pb.WriteTxnMarkersResponse(results=_acknowledge(markers))

        # Only WriteTxnMarkers is served; the generated base class answers UNIMPLEMENTED for the rest.
        storage_pb.add_PartitionStorageServiceServicer_to_server(Storage(), self.server)  # type: ignore[abstract]
        offsets_pb.add_GroupOffsetsServiceServicer_to_server(Offsets(), self.server)  # type: ignore[abstract]
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.server.start()

    def _receive(self, service: str, request, context) -> list[common_pb.TxnMarker]:
        received = [
            ReceivedMarker(
                service=service,
                transactional_id=m.transactional_id,
                producer_id=m.producer.producer_id,
                producer_epoch=m.producer.producer_epoch,
                coordinator_epoch=m.coordinator_epoch,
                result=m.result,
                partitions=tuple((tp.topic, tp.partition) for tp in m.partitions),
                groups=tuple(m.groups),
            )
            for m in request.markers
        ]
        with self._changed:
            self.requests.append(received)
            fail = self._failures > 0
            if fail:
                self._failures -= 1
                self.failed += 1
            gate = self._gate
            self._changed.notify_all()
        if fail:
            context.abort(grpc.StatusCode.UNAVAILABLE, "marker destination unavailable (test double)")
        if gate is not None:
            gate.wait(60)
        return list(request.markers)

    def fail_next(self, calls: int) -> None:
        with self._changed:
            self._failures = calls

    def hold(self) -> None:
        self._gate = threading.Event()

    def release(self) -> None:
        gate, self._gate = self._gate, None
        if gate is not None:
            gate.set()

    def markers(self, producer_id: int | None = None) -> list[ReceivedMarker]:
        with self._changed:
            return [m for request in self.requests for m in request if producer_id in (None, m.producer_id)]

    def wait_for(self, condition: Callable[[], object], what: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        with self._changed:
            while not condition():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out waiting until {what}; received {self.requests}")
                self._changed.wait(left)

    def stop(self) -> None:
        self.release()
        self.server.stop(0)


def _acknowledge(markers: list[common_pb.TxnMarker]) -> list[common_pb.TxnMarkerResult]:
    return [
        common_pb.TxnMarkerResult(
            producer_id=m.producer.producer_id,
            partition_errors=[common_pb.PartitionError(topic_partition=tp) for tp in m.partitions],
            group_errors=[common_pb.GroupError(group_id=g) for g in m.groups],
        )
        for m in markers
    ]


@dataclass
class Destinations:
    """Two storage doubles leading ``TOPIC``'s partitions and one group-offsets double owning ``GROUP``."""

    storage: dict[str, MarkerDestinationDouble]
    """node id -> double."""
    offsets: MarkerDestinationDouble
    leaders: dict[int, str]
    """partition -> leader node id."""

    def leader_of(self, partition: int) -> MarkerDestinationDouble:
        return self.storage[self.leaders[partition]]

    def partition_on(self, node_id: str) -> int:
        return min(p for p, leader in self.leaders.items() if leader == node_id)

    def all(self) -> list[MarkerDestinationDouble]:
        return [*self.storage.values(), self.offsets]

    def markers(self, producer_id: int) -> list[ReceivedMarker]:
        return [m for d in self.all() for m in d.markers(producer_id)]

    def reset(self) -> None:
        for double in self.all():
            double.release()
            double.fail_next(0)


def start_destinations(cluster: LocalCluster, partitions: int = 4) -> Destinations:
    """Start the doubles, register them in the catalog and create ``TOPIC`` on them."""
    catalog = CatalogStore(create_engine(cluster.database_url))
    now = wall_clock_ms()
    storage = {}
    for index in range(2):
        double = MarkerDestinationDouble()
        node_id = f"storage-double-{index}"
        catalog.register_node(node_id, "partition-storage", double.address, LONG_LEASE_MS, now)
        storage[node_id] = double
    offsets = MarkerDestinationDouble()
    catalog.register_node("offsets-double", "group-offsets", offsets.address, LONG_LEASE_MS, now)
    group_shard = catalog.shard_for("group-offsets", GROUP)
    assert catalog.acquire_shard("group-offsets", group_shard, "offsets-double", LONG_LEASE_MS, now) is not None
    admin = cluster_pb.ClusterServiceStub(sync_channel(cluster.bootstrap))
    created = admin.CreateTopics(
        cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=TOPIC, partitions=partitions)])
    )
    leaders = {p.partition: p.leader_node_id for p in created.topics[0].partitions}
    assert set(leaders.values()) == set(storage), "the topic must be spread over both storage doubles"
    catalog.engine.dispose()
    return Destinations(storage, offsets, leaders)


# ---------------------------------------------------------------------------------------------- client


class TxnClient:
    """A minimal transactional client: FindCoordinator, then the coordinator RPCs."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._channels: dict[str, grpc.Channel] = {}

    def channel(self, address: str) -> grpc.Channel:
        if address not in self._channels:
            self._channels[address] = sync_channel(address)
        return self._channels[address]

    def find(self, transactional_id: str) -> cluster_pb.FindCoordinatorResponse:
        deadline = time.monotonic() + 30
        while True:
            admin = cluster_pb.ClusterServiceStub(self.channel(self._any_live_address()))
            try:
                return admin.FindCoordinator(
                    cluster_pb.FindCoordinatorRequest(
                        key=transactional_id, type=cluster_pb.COORDINATOR_TYPE_TRANSACTION
                    )
                )
            except grpc.RpcError as exc:
                if from_rpc_error(exc).reason is not Reason.COORDINATOR_NOT_AVAILABLE or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _any_live_address(self) -> str:
        return next(n.address for n in self.cluster.nodes if n.alive())

    def stub(self, transactional_id: str) -> pb.TransactionCoordinatorServiceStub:
        return pb.TransactionCoordinatorServiceStub(self.channel(self.find(transactional_id).address))

    def call(self, transactional_id: str, rpc: str, request: object, timeout: float | None = None) -> Any:
        """One coordinator RPC at the owner FindCoordinator names, retried while that owner is still loading the
        shard (COORDINATOR_LOAD_IN_PROGRESS, as a client does); NOT_COORDINATOR and every other error are raised."""
        deadline = time.monotonic() + 30
        while True:
            try:
                return getattr(self.stub(transactional_id), rpc)(request, timeout=timeout)
            except grpc.RpcError as exc:
                if from_rpc_error(exc).reason is not Reason.COORDINATOR_LOAD_IN_PROGRESS or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def init(
        self,
        transactional_id: str,
        timeout_ms: int = 60_000,
        producer: tuple[int, int] | None = None,
        *,
        deadline_s: float | None = None,
    ) -> tuple[int, int]:
        request = pb.InitProducerIdRequest(transactional_id=transactional_id, transaction_timeout_ms=timeout_ms)
        if producer is not None:
            request.producer.CopyFrom(_identity(producer))
        response = self.call(transactional_id, "InitProducerId", request, deadline_s)
        return response.producer.producer_id, response.producer.producer_epoch

    def add_partitions(
        self, transactional_id: str, producer: tuple[int, int], *partitions: int, deadline_s: float | None = None
    ) -> None:
        self.call(
            transactional_id,
            "AddPartitionsToTxn",
            pb.AddPartitionsToTxnRequest(
                transactional_id=transactional_id,
                producer=_identity(producer),
                partitions=[common_pb.TopicPartition(topic=TOPIC, partition=p) for p in partitions],
            ),
            deadline_s,
        )

    def add_offsets(self, transactional_id: str, producer: tuple[int, int], group: str = GROUP) -> str:
        request = pb.AddOffsetsToTxnRequest(
            transactional_id=transactional_id, producer=_identity(producer), group_id=group
        )
        return self.call(transactional_id, "AddOffsetsToTxn", request).group_coordinator_address

    def end(
        self, transactional_id: str, producer: tuple[int, int], result: common_pb.TransactionResult.ValueType = COMMIT
    ) -> tuple[int, int]:
        response = self.call(
            transactional_id,
            "EndTxn",
            pb.EndTxnRequest(transactional_id=transactional_id, producer=_identity(producer), result=result),
        )
        return response.producer.producer_id, response.producer.producer_epoch

    def describe(self, transactional_id: str) -> pb.TransactionDescription:
        request = pb.DescribeTransactionsRequest(transactional_ids=[transactional_id])
        response = self.call(transactional_id, "DescribeTransactions", request)
        return response.transactions[0]

    def wait_state(
        self, transactional_id: str, state: pb.TransactionState.ValueType, timeout: float = 30
    ) -> pb.TransactionDescription:
        deadline = time.monotonic() + timeout
        while True:
            described = self.describe(transactional_id)
            if described.state == state:
                return described
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{transactional_id} stayed {pb.TransactionState.Name(described.state)}, "
                    f"expected {pb.TransactionState.Name(state)}"
                )
            time.sleep(0.02)

    def retry_concurrent(self, call: Callable[[], tuple[int, int]], timeout: float = 30) -> tuple[int, int]:
        """Retry CONCURRENT_TRANSACTIONS as a client does while the previous transaction completes."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return call()
            except grpc.RpcError as exc:
                if from_rpc_error(exc).reason is not Reason.CONCURRENT_TRANSACTIONS or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)


def _identity(producer: tuple[int, int]) -> common_pb.ProducerIdentity:
    return common_pb.ProducerIdentity(producer_id=producer[0], producer_epoch=producer[1])


def rpc_error(call: Callable[[], object]) -> tuple[grpc.StatusCode, OncelogError]:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value.code(), from_rpc_error(info.value)


# ---------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def txn_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """pid-allocator + one txn-coordinator, with a fast timeout sweep."""
    with LocalCluster(
        tmp_path_factory.mktemp("txn"), services=("pid-allocator", "txn-coordinator"), env=COORDINATOR_ENV
    ) as running:
        yield running


@pytest.fixture(scope="module")
def module_destinations(txn_cluster: LocalCluster) -> Iterator[Destinations]:
    destinations = start_destinations(txn_cluster)
    yield destinations
    for double in destinations.all():
        double.stop()


@pytest.fixture
def dest(module_destinations: Destinations) -> Iterator[Destinations]:
    yield module_destinations
    module_destinations.reset()


@pytest.fixture
def client(txn_cluster: LocalCluster) -> TxnClient:
    return TxnClient(txn_cluster)


# ---------------------------------------------------------------------------------------------- scenarios


def test_init_producer_id_new_and_bump(client: TxnClient) -> None:
    pid, epoch = client.init("init-a")
    assert epoch == 0
    assert client.init("init-a") == (pid, 1), "a new instance bumps the epoch"
    assert client.init("init-a", producer=(pid, 1)) == (pid, 2), "KIP-360: the owner recovers with a bump"
    assert client.init("init-a", producer=(pid, 1)) == (pid, 2), "a retry of that recovery gets the same answer"
    other_pid, other_epoch = client.init("init-b")
    assert other_pid != pid and other_epoch == 0
    code, err = rpc_error(lambda: client.init("init-a", producer=(pid, 0)))
    assert code == grpc.StatusCode.FAILED_PRECONDITION and err.reason is Reason.PRODUCER_FENCED
    described = client.describe("init-a")
    assert (described.state, described.producer_id, described.producer_epoch) == (pb.TRANSACTION_STATE_EMPTY, pid, 2)


def test_commit_writes_markers_to_every_participant_then_complete_commit(client: TxnClient, dest: Destinations) -> None:
    tid = "commit-all"
    producer = client.init(tid)
    client.add_partitions(tid, producer, 0, 1, 2, 3)
    assert client.add_offsets(tid, producer) == dest.offsets.address
    dest.offsets.hold()
    next_identity = client.end(tid, producer, COMMIT)
    assert next_identity == (producer[0], producer[1] + 1), "KIP-890: every EndTxn bumps the epoch"

    pid = producer[0]
    dest.offsets.wait_for(lambda: dest.offsets.markers(pid), "the group marker arrived")
    for double in dest.storage.values():
        double.wait_for(functools.partial(double.markers, pid), "the partition markers arrived")
    assert client.describe(tid).state == pb.TRANSACTION_STATE_PREPARE_COMMIT, "Complete* before every ack"
    dest.offsets.release()
    client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_COMMIT)

    coordinator_epoch = client.find(tid).coordinator_epoch
    markers = dest.markers(pid)
    assert {(m.result, m.producer_epoch, m.coordinator_epoch, m.transactional_id) for m in markers} == {
        (COMMIT, producer[1] + 1, coordinator_epoch, tid)
    }
    for node_id, double in dest.storage.items():
        sent = [tp for m in double.markers(pid) for tp in m.partitions]
        assert sorted(sent) == sorted((TOPIC, p) for p, leader in dest.leaders.items() if leader == node_id)
    assert [m.groups for m in dest.offsets.markers(pid)] == [(GROUP,)]
    assert all(m.service == "group-offsets" for m in dest.offsets.markers(pid))


def test_markers_batched_per_destination(client: TxnClient, dest: Destinations) -> None:
    held_node, other_node = sorted(dest.storage)
    held, other = dest.storage[held_node], dest.storage[other_node]
    partitions = (dest.partition_on(held_node), dest.partition_on(other_node))
    tids = ["batch-1", "batch-2", "batch-3"]
    producers = {}
    for tid in tids:
        producers[tid] = client.init(tid)
        client.add_partitions(tid, producers[tid], *partitions)
    requests_before = len(held.requests)

    held.hold()
    client.end(tids[0], producers[tids[0]])
    held.wait_for(lambda: len(held.requests) == requests_before + 1, "the first request is in flight")
    for tid in tids[1:]:
        client.end(tid, producers[tid])
    for tid in tids[1:]:
        other.wait_for(functools.partial(other.markers, producers[tid][0]), f"{tid}'s marker reached the other node")
    assert len(held.requests) == requests_before + 1, "no second request while one is in flight"

    held.release()
    for tid in tids:
        client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_COMMIT)
    batches = [[m.transactional_id for m in request] for request in held.requests[requests_before:]]
    assert batches == [["batch-1"], ["batch-2", "batch-3"]], "one request carries every pending marker"
    sent = [m.partitions for request in held.requests[requests_before:] for m in request]
    assert sent == [((TOPIC, partitions[0]),)] * 3


def test_markers_retried_until_acknowledged(client: TxnClient, dest: Destinations) -> None:
    tid = "retry-markers"
    producer = client.init(tid)
    partition = dest.partition_on(sorted(dest.storage)[0])
    double = dest.leader_of(partition)
    client.add_partitions(tid, producer, partition)
    # More failures than the channel's own retry attempts, so the coordinator has to send again itself.
    double.fail_next(7)
    failed_before = double.failed
    client.end(tid, producer)
    client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_COMMIT)

    assert double.failed - failed_before == 7
    received = double.markers(producer[0])
    assert len(received) == 8, "seven refused deliveries and the acknowledged one"
    assert len(set(received)) == 1, "every retry carries the same marker"


def test_operator_skips_a_marker_that_is_never_accepted(client: TxnClient, dest: Destinations) -> None:
    """Issue 25 item 2: a destination that refuses a marker for good holds the commit until an operator skips it."""
    tid = "skip-markers"
    producer = client.init(tid)
    refusing_node, other_node = sorted(dest.storage)
    refusing, accepted = dest.partition_on(refusing_node), dest.partition_on(other_node)
    client.add_partitions(tid, producer, refusing, accepted)
    double = dest.storage[refusing_node]
    double.fail_next(10**9)  # never accepted
    client.end(tid, producer)
    double.wait_for(lambda: double.failed >= 3, "the refused marker is retried")
    assert client.describe(tid).state == pb.TRANSACTION_STATE_PREPARE_COMMIT
    stub = client.stub(tid)
    code, err = rpc_error(
        lambda: stub.SkipTxnMarkers(
            pb.SkipTxnMarkersRequest(
                transactional_id=tid, partitions=[common_pb.TopicPartition(topic=TOPIC, partition=99)]
            )
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "not a participant" in err.message

    def skip_markers(*arguments: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "oncelog", "transactions", "skip-markers", *arguments]
        command += ["-b", client.cluster.bootstrap]
        return subprocess.run(command, capture_output=True, text=True, timeout=60)

    malformed = skip_markers(tid, "-p", TOPIC)
    assert malformed.returncode == 2 and "is not TOPIC:PARTITION" in malformed.stderr, malformed.stderr
    assert client.describe(tid).state == pb.TRANSACTION_STATE_PREPARE_COMMIT, "a refused command skips nothing"
    # the operator's command (AdminClient.skip_transaction_markers): only the participant still waiting is skipped
    done = skip_markers(tid, "-p", f"{TOPIC}:{refusing}", "-p", f"{TOPIC}:{accepted}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip() == f"skipped the markers of {tid} for {TOPIC}:{refusing}"
    client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_COMMIT)


def test_zombie_commit_after_fence_rejected(client: TxnClient, dest: Destinations) -> None:
    tid = "zombie"
    partition = dest.partition_on(sorted(dest.storage)[0])
    zombie = client.init(tid)
    client.add_partitions(tid, zombie, partition)

    code, err = rpc_error(lambda: client.init(tid))
    assert err.reason is Reason.CONCURRENT_TRANSACTIONS and err.retriable, "the new instance first aborts"
    successor = client.retry_concurrent(lambda: client.init(tid))
    assert successor == (zombie[0], zombie[1] + 2), "one bump fences and aborts, one is the new owner's"

    for attempt in (
        lambda: client.end(tid, zombie, COMMIT),
        lambda: client.add_partitions(tid, zombie, partition),
        lambda: client.add_offsets(tid, zombie),
    ):
        code, err = rpc_error(attempt)
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert err.reason is Reason.PRODUCER_FENCED and not err.retriable
    markers = dest.markers(zombie[0])
    assert [(m.result, m.producer_epoch) for m in markers] == [(ABORT, zombie[1] + 1)]

    client.add_partitions(tid, successor, partition)
    client.end(tid, successor, COMMIT)
    client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_COMMIT)
    commits = [m for m in dest.markers(zombie[0]) if m.result == COMMIT]
    assert [m.producer_epoch for m in commits] == [successor[1] + 1], "only the new owner's work commits"


def _commit_with_markers_held(
    client: TxnClient, dest: Destinations, tid: str
) -> tuple[int, MarkerDestinationDouble, tuple[int, int], tuple[int, int]]:
    """Commit a transaction of ``tid`` whose COMMIT marker the partition holds unanswered.

    Returns the partition, its held leader (``release()`` lets the marker through), the committing identity
    and the identity EndTxn handed out for the next transaction.
    """
    partition = dest.partition_on(sorted(dest.storage)[0])
    double = dest.leader_of(partition)
    producer = client.init(tid)
    client.add_partitions(tid, producer, partition)
    double.hold()
    next_identity = client.end(tid, producer, COMMIT)
    double.wait_for(lambda: double.markers(producer[0]), "the marker is in flight")
    return partition, double, producer, next_identity


def test_add_partitions_waits_for_previous_markers_instead_of_rejecting(client: TxnClient, dest: Destinations) -> None:
    tid = "parked-add"
    partition, double, _, next_identity = _commit_with_markers_held(client, dest, tid)

    request = pb.AddPartitionsToTxnRequest(
        transactional_id=tid,
        producer=_identity(next_identity),
        partitions=[common_pb.TopicPartition(topic=TOPIC, partition=partition)],
    )
    add = client.stub(tid).AddPartitionsToTxn.future(request, timeout=30)
    # Sent on the same connection after the AddPartitions stream opened, so answered while that one is parked.
    assert client.describe(tid).state == pb.TRANSACTION_STATE_PREPARE_COMMIT
    assert not add.done()
    double.release()
    add.result()  # no CONCURRENT_TRANSACTIONS: the call waited for CompleteCommit
    described = client.describe(tid)
    assert (described.state, described.producer_epoch) == (pb.TRANSACTION_STATE_ONGOING, next_identity[1])
    client.end(tid, next_identity, ABORT)


def test_concurrent_transactions_while_markers_pending(client: TxnClient, dest: Destinations) -> None:
    tid = "pending-markers"
    partition, double, producer, next_identity = _commit_with_markers_held(client, dest, tid)

    # Parked for the markers at most until shortly before the caller's deadline, then refused as Kafka does.
    code, err = rpc_error(lambda: client.add_partitions(tid, next_identity, partition, deadline_s=1.0))
    assert code == grpc.StatusCode.ABORTED
    assert err.reason is Reason.CONCURRENT_TRANSACTIONS and err.retriable and err.definite
    code, err = rpc_error(lambda: client.init(tid, deadline_s=1.0))
    assert err.reason is Reason.CONCURRENT_TRANSACTIONS
    assert client.end(tid, producer, COMMIT) == next_identity, "a retried EndTxn gets the same answer"
    assert client.describe(tid).state == pb.TRANSACTION_STATE_PREPARE_COMMIT

    double.release()

    def add_again() -> tuple[int, int]:
        client.add_partitions(tid, next_identity, partition)
        return next_identity

    client.retry_concurrent(add_again)
    described = client.describe(tid)
    assert described.state == pb.TRANSACTION_STATE_ONGOING
    assert described.producer_epoch == next_identity[1]
    client.end(tid, next_identity, ABORT)


def test_transaction_timeout_aborts_and_fences(client: TxnClient, dest: Destinations) -> None:
    tid = "times-out"
    partition = dest.partition_on(sorted(dest.storage)[0])
    producer = client.init(tid, timeout_ms=1_000)
    client.add_partitions(tid, producer, partition)
    assert client.describe(tid).state == pb.TRANSACTION_STATE_ONGOING

    described = client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_ABORT, timeout=15)
    assert described.producer_epoch == producer[1] + 1, "the sweep fenced the producer with one bump"
    assert [(m.result, m.producer_epoch) for m in dest.markers(producer[0])] == [(ABORT, producer[1] + 1)]
    for attempt in (lambda: client.end(tid, producer, COMMIT), lambda: client.add_partitions(tid, producer, partition)):
        _, err = rpc_error(attempt)
        assert err.reason is Reason.PRODUCER_FENCED


def test_list_describe_and_abort_hanging_transaction(client: TxnClient, dest: Destinations) -> None:
    tid = "hanging"
    producer = client.init(tid, timeout_ms=600_000)
    client.add_partitions(tid, producer, 0, 1)
    client.add_offsets(tid, producer)
    stub = client.stub(tid)

    def listed(**filters) -> list[str]:
        response = stub.ListTransactions(pb.ListTransactionsRequest(**filters))
        return [t.transactional_id for t in response.transactions]

    assert tid in listed(states=[pb.TRANSACTION_STATE_ONGOING])
    assert tid not in listed(states=[pb.TRANSACTION_STATE_EMPTY, pb.TRANSACTION_STATE_COMPLETE_COMMIT])
    assert listed(producer_ids=[producer[0]]) == [tid]
    assert tid not in listed(older_than_ms=3_600_000)
    started_ms = client.describe(tid).transaction_start_time_ms
    while wall_clock_ms() < started_ms + 5:  # 5 ms old by the coordinator's clock (this host's wall clock)
        time.sleep(0.001)
    assert tid in listed(older_than_ms=5)

    described = client.describe(tid)
    lease = client.find(tid)
    assert described.state == pb.TRANSACTION_STATE_ONGOING
    assert [(p.topic, p.partition) for p in described.partitions] == [(TOPIC, 0), (TOPIC, 1)]
    assert list(described.groups) == [GROUP]
    assert described.transaction_timeout_ms == 600_000 and described.transaction_start_time_ms > 0
    assert (described.coordinator_node_id, described.coordinator_epoch) == (lease.node_id, lease.coordinator_epoch)

    aborted = stub.AbortTransaction(pb.AbortTransactionRequest(transactional_id=tid))
    assert (aborted.producer.producer_id, aborted.producer.producer_epoch) == (producer[0], producer[1] + 1)
    client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_ABORT)
    markers = dest.markers(producer[0])
    assert {(m.result, m.producer_epoch) for m in markers} == {(ABORT, producer[1] + 1)}
    assert sorted(tp for m in markers for tp in m.partitions) == [(TOPIC, 0), (TOPIC, 1)]
    assert [g for m in markers for g in m.groups] == [GROUP]

    code, err = rpc_error(lambda: client.end(tid, producer, COMMIT))
    assert err.reason is Reason.PRODUCER_FENCED
    code, err = rpc_error(lambda: stub.AbortTransaction(pb.AbortTransactionRequest(transactional_id="never-seen")))
    assert code == grpc.StatusCode.NOT_FOUND and err.reason is Reason.TRANSACTIONAL_ID_NOT_FOUND
    code, err = rpc_error(
        lambda: stub.DescribeTransactions(pb.DescribeTransactionsRequest(transactional_ids=[tid, "never-seen"]))
    )
    assert err.reason is Reason.TRANSACTIONAL_ID_NOT_FOUND and "never-seen" in err.message


def test_init_producer_id_without_transactional_id_gives_a_fresh_producer_id(client: TxnClient) -> None:
    """An idempotent-only producer (Kafka's null transactional.id) gets a new producer id at epoch 0, no state."""
    stub = pb.TransactionCoordinatorServiceStub(client.channel(client.cluster.addresses("txn-coordinator")[0]))
    before = {t.producer_id for t in stub.ListTransactions(pb.ListTransactionsRequest()).transactions}
    identities = [
        stub.InitProducerId(pb.InitProducerIdRequest(transactional_id="", transaction_timeout_ms=0)).producer
        for _ in range(3)
    ]
    pids = [identity.producer_id for identity in identities]
    assert [identity.producer_epoch for identity in identities] == [0, 0, 0]
    assert len(set(pids)) == 3 and min(pids) >= 0, "each call allocates a producer id never handed out before"
    after = {t.producer_id for t in stub.ListTransactions(pb.ListTransactionsRequest()).transactions}
    assert not set(pids) & (after | before), "no transactional state is kept for an idempotent producer"


@pytest.mark.parametrize(
    ("call", "code", "reason", "fragment"),
    [
        (
            lambda s: s.InitProducerId(pb.InitProducerIdRequest(transactional_id="x" * 1025, transaction_timeout_ms=1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_REQUEST,
            "limit is 1024 bytes",
        ),
        (
            lambda s: s.InitProducerId(pb.InitProducerIdRequest(transactional_id="bad-t", transaction_timeout_ms=0)),
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_TRANSACTION_TIMEOUT,
            "transaction timeout 0 ms is outside (0, 900000]",
        ),
        (
            lambda s: s.InitProducerId(pb.InitProducerIdRequest(transactional_id="bad-t", transaction_timeout_ms=-5)),
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_TRANSACTION_TIMEOUT,
            "-5 ms",
        ),
        (
            lambda s: s.InitProducerId(
                pb.InitProducerIdRequest(transactional_id="bad-t", transaction_timeout_ms=900_001)
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_TRANSACTION_TIMEOUT,
            "900001 ms is outside",
        ),
        (
            lambda s: s.EndTxn(
                pb.EndTxnRequest(transactional_id="bad-t", producer=common_pb.ProducerIdentity(producer_id=1))
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_REQUEST,
            "result must be TRANSACTION_RESULT_COMMIT or TRANSACTION_RESULT_ABORT",
        ),
        (
            lambda s: s.EndTxn(pb.EndTxnRequest(transactional_id="bad-t", result=COMMIT)),
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_REQUEST,
            "producer (producer id and epoch from InitProducerId) is required",
        ),
        (
            lambda s: s.ListTransactions(pb.ListTransactionsRequest(states=[pb.TRANSACTION_STATE_UNSPECIFIED])),
            grpc.StatusCode.INVALID_ARGUMENT,
            Reason.INVALID_REQUEST,
            "unknown transaction state",
        ),
    ],
    ids=[
        "oversize-id",
        "zero-timeout",
        "negative-timeout",
        "timeout-above-max",
        "no-result",
        "no-producer",
        "unspecified-state",
    ],
)
def test_bad_input_is_rejected_and_the_server_stays_up(client: TxnClient, call, code, reason, fragment) -> None:
    stub = client.stub("bad-t")
    got_code, err = rpc_error(lambda: call(stub))
    assert (got_code, err.reason) == (code, reason)
    assert fragment in err.message
    assert err.definite and not err.retriable
    pid, epoch = client.init("bad-t")  # the server still serves, and nothing of the bad request stuck
    described = client.describe("bad-t")
    assert (described.producer_id, described.producer_epoch, described.transaction_timeout_ms) == (pid, epoch, 60_000)


@pytest.mark.parametrize(("topic", "partition"), [("no-such-topic", 0), (TOPIC, 4), (TOPIC, -1)])
def test_add_partitions_of_unknown_partitions_changes_nothing(
    client: TxnClient, dest: Destinations, topic: str, partition: int
) -> None:
    tid = "unknown-partitions"
    producer = client.init(tid)
    code, err = rpc_error(
        lambda: client.stub(tid).AddPartitionsToTxn(
            pb.AddPartitionsToTxnRequest(
                transactional_id=tid,
                producer=_identity(producer),
                partitions=[
                    common_pb.TopicPartition(topic=TOPIC, partition=0),
                    common_pb.TopicPartition(topic=topic, partition=partition),
                ],
            )
        )
    )
    assert code == grpc.StatusCode.NOT_FOUND and err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION
    assert f"{topic}-{partition}" in err.message
    described = client.describe(tid)
    assert described.state == pb.TRANSACTION_STATE_EMPTY and not described.partitions, "all or nothing"


# ---------------------------------------------------------------------------------------------- several coordinators


def _replicated_cluster(tmp_path: Path, database_url: str = "", **env: str) -> LocalCluster:
    return LocalCluster(
        tmp_path,
        services=("pid-allocator", "txn-coordinator"),
        replicas={"txn-coordinator": 2},
        database_url=database_url,
        env={**COORDINATOR_ENV, **env},
    )


def test_not_coordinator_for_unowned_shard(tmp_path: Path) -> None:
    with _replicated_cluster(tmp_path) as cluster:
        client = TxnClient(cluster)
        catalog = CatalogStore(sa.create_engine(cluster.database_url))
        shards = catalog.cluster_info().txn_coordinator_shards
        owners = {getattr(catalog.shard_lease("txn-coordinator", s), "owner_node_id", None) for s in range(shards)}
        assert owners <= {"txn-coordinator-0", "txn-coordinator-1"}, "every shard is owned by a coordinator"

        owner = client.find("unowned-probe").node_id
        other = next(n for n in cluster.nodes if n.service == "txn-coordinator" and n.node_id != owner)
        wrong = pb.TransactionCoordinatorServiceStub(sync_channel(other.address))
        code, err = rpc_error(
            lambda: wrong.InitProducerId(
                pb.InitProducerIdRequest(transactional_id="unowned-probe", transaction_timeout_ms=60_000)
            )
        )
        assert code == grpc.StatusCode.FAILED_PRECONDITION
        assert err.reason is Reason.NOT_COORDINATOR and err.retriable
        code, err = rpc_error(
            lambda: wrong.DescribeTransactions(pb.DescribeTransactionsRequest(transactional_ids=["unowned-probe"]))
        )
        assert err.reason is Reason.NOT_COORDINATOR
        assert client.init("unowned-probe")[1] == 0, "the owner FindCoordinator names serves it"
        catalog.engine.dispose()


def test_failover_resumes_prepare_commit_markers(tmp_path: Path, database_url: str) -> None:
    """Catalog and transaction table on SQLite files, or both on one PostgreSQL database."""
    with _replicated_cluster(
        tmp_path,
        database_url,
        ONCELOG_TXN_COORDINATOR_LEASE_MS="1500",
        ONCELOG_TXN_COORDINATOR_NODE_LEASE_MS="1500",
    ) as cluster:
        destinations = start_destinations(cluster, partitions=2)
        try:
            client = TxnClient(cluster)
            tid = "failover"
            before = client.find(tid)
            producer = client.init(tid)
            client.add_partitions(tid, producer, 0, 1)
            for double in destinations.storage.values():
                double.hold()
            next_identity = client.end(tid, producer, COMMIT)
            pid = producer[0]
            for double in destinations.storage.values():
                double.wait_for(functools.partial(double.markers, pid), "the first owner's markers arrived")
            assert client.describe(tid).state == pb.TRANSACTION_STATE_PREPARE_COMMIT

            cluster.kill(before.node_id)  # kill -9 with the commit decided and no marker acknowledged
            deadline = time.monotonic() + 30
            after = client.find(tid)
            while after.node_id == before.node_id:
                assert time.monotonic() < deadline, "no replica took the shard over"
                time.sleep(0.1)
                after = client.find(tid)
            assert after.coordinator_epoch > before.coordinator_epoch

            for double in destinations.storage.values():
                double.release()
            described = client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_COMMIT)
            assert described.coordinator_node_id == after.node_id
            markers = destinations.markers(pid)
            assert {(m.result, m.producer_epoch) for m in markers} == {(COMMIT, next_identity[1])}
            resent = [m for m in markers if m.coordinator_epoch == after.coordinator_epoch]
            assert sorted(tp for m in resent for tp in m.partitions) == [(TOPIC, 0), (TOPIC, 1)]
            assert {m.coordinator_epoch for m in markers} == {before.coordinator_epoch, after.coordinator_epoch}
            assert client.init(tid) == (pid, next_identity[1] + 1), "the new owner kept the bumped epoch"
        finally:
            for double in destinations.all():
                double.stop()


def test_idle_transactional_id_expires_but_an_open_transaction_does_not(tmp_path: Path) -> None:
    """design/kafka-semantics.md §2.8 / §8 S4: an expired id is forgotten; its old producer id no longer maps to it."""
    env = {
        **COORDINATOR_ENV,
        "ONCELOG_TXN_COORDINATOR_TRANSACTIONAL_ID_EXPIRATION_MS": "500",
        "ONCELOG_TXN_COORDINATOR_EXPIRATION_CHECK_INTERVAL_MS": "100",
    }
    with LocalCluster(tmp_path, services=("pid-allocator", "txn-coordinator"), env=env) as cluster:
        client = TxnClient(cluster)
        idle = client.init("expiring")
        open_txn = client.init("open-for-long", timeout_ms=600_000)
        client.add_offsets("open-for-long", open_txn)

        deadline = time.monotonic() + 30
        while True:
            try:
                client.describe("expiring")
            except grpc.RpcError as exc:
                assert from_rpc_error(exc).reason is Reason.TRANSACTIONAL_ID_NOT_FOUND
                break
            assert time.monotonic() < deadline, "the idle id never expired"
            time.sleep(0.05)

        assert client.describe("open-for-long").state == pb.TRANSACTION_STATE_ONGOING, "open transactions never expire"
        _, err = rpc_error(lambda: client.add_offsets("expiring", idle))
        assert err.reason is Reason.INVALID_PRODUCER_ID_MAPPING
        fresh = client.init("expiring")
        assert fresh[0] != idle[0] and fresh[1] == 0, "an expired id starts over with a new producer id"


def test_marker_fan_out_joins_the_end_txn_trace(tmp_path: Path) -> None:
    """design/architecture.md §9: one commit is one trace, from the client's EndTxn to each WriteTxnMarkers the
    coordinator sends."""
    with OtlpReceiver() as receiver:
        env = {**COORDINATOR_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_BSP_SCHEDULE_DELAY": "50"}
        with LocalCluster(tmp_path, services=("pid-allocator", "txn-coordinator"), env=env) as cluster:
            destinations = start_destinations(cluster, partitions=2)
            try:
                client = TxnClient(cluster)
                tid = "traced"
                producer = client.init(tid)
                client.add_partitions(tid, producer, 0, 1)
                provider = TracerProvider(resource=Resource.create({SERVICE_NAME: "test-client"}))
                provider.add_span_processor(
                    SimpleSpanProcessor(OTLPSpanExporter(endpoint=receiver.endpoint, insecure=True))
                )
                traced = pb.TransactionCoordinatorServiceStub(
                    sync_channel(client.find(tid).address, tracer_provider=provider)
                )
                traced.EndTxn(pb.EndTxnRequest(transactional_id=tid, producer=_identity(producer), result=COMMIT))
                provider.shutdown()
                client.wait_state(tid, pb.TRANSACTION_STATE_COMPLETE_COMMIT)

                def end_txn_trace(spans: list[ReceivedSpan]) -> str | None:
                    return next((s.trace_id for s in spans if s.service == "test-client" and "EndTxn" in s.name), None)

                def fanned_out(spans: list[ReceivedSpan]) -> list[ReceivedSpan]:
                    trace_id = end_txn_trace(spans)
                    return [
                        s
                        for s in spans
                        if s.trace_id == trace_id
                        and s.service == "oncelog-txn-coordinator"
                        and s.name.endswith("PartitionStorageService/WriteTxnMarkers")
                        and s.kind == SPAN_KIND_CLIENT
                    ]

                spans = receiver.wait_for(lambda spans: len(fanned_out(spans)) == 2)
                assert len(fanned_out(spans)) == 2, "one WriteTxnMarkers per storage node, inside the EndTxn trace"
            finally:
                for double in destinations.all():
                    double.stop()
