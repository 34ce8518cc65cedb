"""The typed service clients: the retry table, the backoff policy, and each client against a real grpc.aio server.

The servers here are tiny servicers on a loopback port chosen by the kernel, behind the production server
interceptor, so a domain error raised by a servicer reaches the client the way it does in the cluster.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from grpc import aio

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common_pb
from oncelog.api.offsets import v1 as offsets_pb
from oncelog.api.pid import v1 as pid_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.api.txn import v1 as txn_pb
from oncelog.client.fetch_filter import AbortedTransaction
from oncelog.client.records import NewTopic, OffsetAndMetadata
from oncelog.client.services import (
    RETRY_TABLE,
    ClusterClient,
    Deadline,
    EpochEndOffset,
    EpochQuery,
    FetchPosition,
    GroupMember,
    GroupOffsetsClient,
    HeartbeatAnswer,
    ListedOffset,
    MemberHeartbeat,
    OffsetQuery,
    PartitionResult,
    PartitionStorageClient,
    PidAllocatorClient,
    ProducerIdBlock,
    ProduceSettings,
    Retry,
    RetryPolicy,
    TransactionCoordinatorClient,
    TxnMarker,
    is_retriable,
    retry_of,
)
from oncelog.errors import (
    REASONS,
    ConcurrentTransactions,
    NotCoordinator,
    NotLeader,
    OncelogError,
    ProducerFenced,
    Reason,
    TransactionalIdNotFound,
    UnknownMemberId,
    UnknownTopicOrPartition,
    error_for,
)
from oncelog.rpc.errors import to_error_info
from oncelog.rpc.interceptors import ServerInterceptor
from oncelog.vocabulary import ControlType, CoordinatorKind, IsolationLevel, ProducerIdAndEpoch, Role, TopicPartition

TP0 = TopicPartition("orders", 0)
TP1 = TopicPartition("orders", 1)


# ------------------------------------------------------------------------------------------- retry table

# the reaction every reason must get; a change to RETRY_TABLE that is not mirrored here is a deliberate one
EXPECTED = {
    Reason.NOT_LEADER: Retry.LOCATE,
    Reason.FENCED_LEADER_EPOCH: Retry.LOCATE,
    Reason.UNKNOWN_LEADER_EPOCH: Retry.LOCATE,
    Reason.UNKNOWN_TOPIC_OR_PARTITION: Retry.LOCATE,
    Reason.NOT_COORDINATOR: Retry.LOCATE,
    Reason.COORDINATOR_NOT_AVAILABLE: Retry.LOCATE,
    Reason.NETWORK_EXCEPTION: Retry.LOCATE,
    Reason.COORDINATOR_LOAD_IN_PROGRESS: Retry.SAME,
    Reason.CONCURRENT_TRANSACTIONS: Retry.SAME,
    Reason.UNSTABLE_OFFSET_COMMIT: Retry.SAME,
    Reason.NOT_ENOUGH_REPLICAS: Retry.SAME,
    Reason.STORAGE_UNAVAILABLE: Retry.SAME,
    Reason.REQUEST_TIMED_OUT: Retry.SAME,
    Reason.CORRUPT_MESSAGE: Retry.SAME,
    Reason.UNKNOWN_PRODUCER_ID: Retry.SAME,
}


@pytest.mark.parametrize("reason", list(Reason), ids=lambda r: r.name)
def test_retry_table_gives_every_reason_its_reaction(reason: Reason) -> None:
    """Each reason, as a server sends it, is retried the way the table says, or not at all."""
    assert retry_of(error_for(reason, "from the server")) is EXPECTED.get(reason)


def test_retry_table_covers_exactly_the_reasons_the_wire_marks_retriable() -> None:
    wire = {reason for reason, info in REASONS.items() if info.retriable}
    assert set(RETRY_TABLE) == wire, f"only in one of them: {sorted(r.name for r in set(RETRY_TABLE) ^ wire)}"


def test_a_server_can_veto_a_retry_with_the_retriable_flag() -> None:
    err = NotLeader("the topic is being deleted")
    err.retriable = False
    assert retry_of(err) is None and not is_retriable(err)


def test_unknown_topic_is_final_only_where_the_caller_says_so() -> None:
    err = UnknownTopicOrPartition("no such topic")
    assert is_retriable(err) and not is_retriable(err, unknown_topic_is_final=True)
    assert is_retriable(NotLeader("moved"), unknown_topic_is_final=True)


# ------------------------------------------------------------------------------------------- backoff policy


def test_pauses_double_from_the_initial_up_to_the_maximum_within_the_jitter() -> None:
    policy = RetryPolicy(initial_ms=100, max_ms=1_000)
    rng = random.Random(7)
    for attempt, base_ms in enumerate([100, 200, 400, 800, 1_000, 1_000, 1_000]):
        pause = policy.pause_s(attempt, rng)
        assert base_ms * 0.8 / 1000 <= pause <= base_ms * 1.2 / 1000, (attempt, pause)


def test_the_stateful_backoff_follows_the_same_curve_and_resets() -> None:
    policy = RetryPolicy(initial_ms=50, max_ms=400)
    backoff, reference = policy.backoff(random.Random(3)), random.Random(3)
    assert [backoff.next_s() for _ in range(5)] == [policy.pause_s(n, reference) for n in range(5)]
    backoff.reset()
    assert 0.04 <= backoff.next_s() <= 0.06


async def test_run_retries_retriable_failures_and_reports_each_before_the_pause() -> None:
    failures = [NotCoordinator("moved"), ConcurrentTransactions("busy")]
    seen: list[Reason] = []

    async def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    result = await RetryPolicy(1, 2).run(attempt, Deadline(30), before_retry=lambda err: seen.append(err.reason))
    assert result == "done"
    assert seen == [Reason.NOT_COORDINATOR, Reason.CONCURRENT_TRANSACTIONS]


async def test_run_raises_a_final_failure_at_once() -> None:
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        raise ProducerFenced("a newer instance owns the id")

    with pytest.raises(ProducerFenced):
        await RetryPolicy(1, 2).run(attempt, Deadline(30))
    assert attempts == 1


async def test_run_gives_up_at_the_deadline_with_the_callers_exception() -> None:
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        raise NotLeader("no leader yet")

    class OutOfTime(Exception):
        pass

    with pytest.raises(OutOfTime) as raised:
        await RetryPolicy(1, 5).run(attempt, Deadline(0.05), out_of_time=lambda err: OutOfTime(err.message))
    assert attempts > 1 and "no leader yet" in str(raised.value)


async def test_run_honours_the_callers_retry_predicate() -> None:
    attempts = 0

    async def attempt() -> None:
        nonlocal attempts
        attempts += 1
        raise UnknownTopicOrPartition("no such topic")

    with pytest.raises(UnknownTopicOrPartition):
        await RetryPolicy(1, 2).run(
            attempt, Deadline(30), retry_if=lambda err: is_retriable(err, unknown_topic_is_final=True)
        )
    assert attempts == 1


def test_run_sync_retries_blocking_attempts_with_the_same_table_and_deadline() -> None:
    failures = [NotLeader("moved"), ConcurrentTransactions("busy")]
    seen: list[Reason] = []

    def attempt() -> str:
        if failures:
            raise failures.pop(0)
        return "done"

    policy = RetryPolicy(1, 2)
    assert policy.run_sync(attempt, Deadline(30), before_retry=lambda err: seen.append(err.reason)) == "done"
    assert seen == [Reason.NOT_LEADER, Reason.CONCURRENT_TRANSACTIONS]

    calls = 0

    def never() -> None:
        nonlocal calls
        calls += 1
        raise NotLeader("no leader yet")

    with pytest.raises(NotLeader):
        policy.run_sync(never, Deadline(0.05))
    assert calls > 1
    with pytest.raises(ProducerFenced):
        policy.run_sync(lambda: (_ for _ in ()).throw(ProducerFenced("newer instance")), Deadline(30))


# ------------------------------------------------------------------------------------------- a real server


class Recorder:
    """The requests a servicer received, by method name."""

    def __init__(self) -> None:
        self.requests: dict[str, Any] = {}


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Any]]:
    """Start a grpc.aio server on a kernel-chosen loopback port with the given servicers; yields the client side."""
    servers: list[aio.Server] = []
    channels: list[aio.Channel] = []

    async def start(*adders: tuple[Callable[[Any, aio.Server], None], Any]) -> Callable[[str], aio.Channel]:
        server = aio.server(interceptors=[ServerInterceptor()])
        for add, servicer in adders:
            add(servicer, server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        servers.append(server)
        address = f"127.0.0.1:{port}"
        channel = aio.insecure_channel(address)
        channels.append(channel)

        def channel_for(wanted: str) -> aio.Channel:
            assert wanted == address, f"the client dialled {wanted}, the server is at {address}"
            return channel

        start.address = address  # type: ignore[attr-defined]
        return channel_for

    yield start
    for channel in channels:
        await channel.close()
    for server in servers:
        await server.stop(None)


async def test_cluster_client_translates_nodes_topics_coordinators_and_topic_creation(serve: Any) -> None:
    seen = Recorder()

    class Cluster(cluster_pb.ClusterServiceServicer):
        async def DescribeCluster(self, request: Any, context: Any) -> Any:
            seen.requests["DescribeCluster"] = request
            return cluster_pb.DescribeClusterResponse(
                cluster_id="c-1",
                nodes=[
                    cluster_pb.Node(node_id="s-0", role=cluster_pb.SERVICE_ROLE_PARTITION_STORAGE, address="a:1"),
                    cluster_pb.Node(node_id="t-0", role=cluster_pb.SERVICE_ROLE_TXN_COORDINATOR, address="b:2"),
                ],
                txn_coordinator_shards=8,
                group_offsets_shards=4,
            )

        async def Metadata(self, request: Any, context: Any) -> Any:
            if "gone" in request.topics:
                raise UnknownTopicOrPartition("topic 'gone' does not exist")
            partition = cluster_pb.PartitionMetadata(partition=1, leader_node_id="s-0", leader_address="a:1")
            return cluster_pb.MetadataResponse(
                topics=[
                    cluster_pb.TopicMetadata(name="zeta", topic_id="z"),
                    cluster_pb.TopicMetadata(name="orders", topic_id="o", partitions=[partition]),
                ]
            )

        async def FindCoordinator(self, request: Any, context: Any) -> Any:
            seen.requests["FindCoordinator"] = request
            return cluster_pb.FindCoordinatorResponse(address="b:2")

        async def CreateTopics(self, request: Any, context: Any) -> Any:
            seen.requests["CreateTopics"] = request
            return cluster_pb.CreateTopicsResponse(
                topics=[cluster_pb.TopicMetadata(name=t.name, topic_id="new") for t in request.topics]
            )

    channel_for = await serve((cluster_pb.add_ClusterServiceServicer_to_server, Cluster()))
    client, address = ClusterClient(channel_for, timeout_s=5), serve.address

    described = await client.describe_cluster(address, include_expired=True)
    assert seen.requests["DescribeCluster"].include_expired
    assert [(n.node_id, n.role) for n in described.nodes] == [
        ("s-0", Role.PARTITION_STORAGE),
        ("t-0", Role.TXN_COORDINATOR),
    ]
    assert described.addresses(Role.TXN_COORDINATOR) == ["b:2"]
    assert (described.txn_coordinator_shards, described.group_offsets_shards) == (8, 4)

    topics = await client.metadata(address, ["orders"])
    assert [t.name for t in topics] == ["orders", "zeta"]
    assert topics[0].partitions[0].topic_partition == TopicPartition("orders", 1)
    with pytest.raises(UnknownTopicOrPartition, match="gone"):
        await client.metadata(address, ["gone"])

    assert await client.find_coordinator(address, "payments", CoordinatorKind.GROUP) == "b:2"
    assert seen.requests["FindCoordinator"].type == cluster_pb.COORDINATOR_TYPE_GROUP

    created = await client.create_topics(address, [NewTopic("t", 3, {"flush": "sync"}, 2)], validate_only=True)
    spec = seen.requests["CreateTopics"].topics[0]
    assert (spec.name, spec.partitions, dict(spec.configs), spec.replication_factor) == ("t", 3, {"flush": "sync"}, 2)
    assert seen.requests["CreateTopics"].validate_only and created[0].topic_id == "new"


async def test_transaction_coordinator_client_sends_identities_and_results(serve: Any) -> None:
    seen = Recorder()

    class Coordinator(txn_pb.TransactionCoordinatorServiceServicer):
        async def InitProducerId(self, request: Any, context: Any) -> Any:
            seen.requests["InitProducerId"] = request
            return txn_pb.InitProducerIdResponse(producer=common_pb.ProducerIdentity(producer_id=7, producer_epoch=3))

        async def AddPartitionsToTxn(self, request: Any, context: Any) -> Any:
            if request.producer.producer_epoch < 3:
                raise ProducerFenced("epoch 2 is older than 3")
            return txn_pb.AddPartitionsToTxnResponse(partitions=request.partitions)

        async def EndTxn(self, request: Any, context: Any) -> Any:
            seen.requests["EndTxn"] = request
            return txn_pb.EndTxnResponse(
                producer=common_pb.ProducerIdentity(producer_id=7, producer_epoch=4), completed=True
            )

        async def DescribeTransactions(self, request: Any, context: Any) -> Any:
            raise TransactionalIdNotFound(f"{request.transactional_ids[0]!r} is unknown")

        async def ListTransactions(self, request: Any, context: Any) -> Any:
            seen.requests["ListTransactions"] = request
            return txn_pb.ListTransactionsResponse(
                transactions=[
                    txn_pb.TransactionListing(
                        transactional_id="t", producer_id=7, state=txn_pb.TRANSACTION_STATE_ONGOING
                    )
                ]
            )

    channel_for = await serve((txn_pb.add_TransactionCoordinatorServiceServicer_to_server, Coordinator()))
    client, address = TransactionCoordinatorClient(channel_for, timeout_s=5), serve.address

    identity = await client.init_producer_id(address, "t", transaction_timeout_ms=60_000)
    request = seen.requests["InitProducerId"]
    assert identity == ProducerIdAndEpoch(7, 3)
    assert (request.transactional_id, request.transaction_timeout_ms) == ("t", 60_000)
    assert not request.HasField("producer")
    await client.init_producer_id(address, "t", current=ProducerIdAndEpoch(7, 3))
    assert seen.requests["InitProducerId"].producer.producer_epoch == 3

    assert await client.add_partitions_to_txn(address, "t", identity, [TP0, TP1]) == [TP0, TP1]
    with pytest.raises(ProducerFenced):
        await client.add_partitions_to_txn(address, "t", ProducerIdAndEpoch(7, 2), [TP0])

    ended = await client.end_txn(address, "t", identity, ControlType.ABORT, wait_for_completion=True)
    assert ended.producer == ProducerIdAndEpoch(7, 4) and ended.completed
    assert seen.requests["EndTxn"].result == common_pb.TRANSACTION_RESULT_ABORT
    assert seen.requests["EndTxn"].wait_for_completion

    with pytest.raises(TransactionalIdNotFound, match="'x' is unknown"):
        await client.describe_transactions(address, ["x"])

    listed = await client.list_transactions(address, states=["ongoing"], older_than_ms=5)
    assert [(t.transactional_id, t.state) for t in listed] == [("t", "ongoing")]
    assert list(seen.requests["ListTransactions"].states) == [txn_pb.TRANSACTION_STATE_ONGOING]
    with pytest.raises(ValueError, match=r"unknown transaction state 'opened'.*ongoing"):
        await client.list_transactions(address, states=["opened"])


async def test_partition_storage_client_returns_each_partitions_answer_or_error(serve: Any) -> None:
    seen = Recorder()

    class Storage(storage_pb.PartitionStorageServiceServicer):
        async def Fetch(self, request: Any, context: Any) -> Any:
            seen.requests["Fetch"] = request
            first, second = request.partitions
            return storage_pb.FetchResponse(
                results=[
                    storage_pb.FetchPartitionResult(
                        topic_partition=first.topic_partition,
                        high_watermark=10,
                        last_stable_offset=8,
                        records=b"batches",
                        aborted_transactions=[storage_pb.AbortedTransaction(producer_id=5, first_offset=2)],
                    ),
                    storage_pb.FetchPartitionResult(
                        topic_partition=second.topic_partition, error=to_error_info(NotLeader("moved to s-1"))
                    ),
                ]
            )

        async def ListOffsets(self, request: Any, context: Any) -> Any:
            seen.requests["ListOffsets"] = request
            return storage_pb.ListOffsetsResponse(
                results=[
                    storage_pb.ListOffsetsPartitionResult(
                        topic_partition=p.topic_partition, offset=42, timestamp_ms=9, leader_epoch=5
                    )
                    for p in request.partitions
                ]
            )

        async def WriteTxnMarkers(self, request: Any, context: Any) -> Any:
            seen.requests["WriteTxnMarkers"] = request
            marker = request.markers[0]
            return storage_pb.WriteTxnMarkersResponse(
                results=[
                    common_pb.TxnMarkerResult(
                        producer_id=marker.producer.producer_id,
                        partition_errors=[
                            common_pb.PartitionError(topic_partition=marker.partitions[0]),
                            common_pb.PartitionError(
                                topic_partition=marker.partitions[1], error=to_error_info(NotLeader("not here"))
                            ),
                        ],
                    )
                ]
            )

    channel_for = await serve((storage_pb.add_PartitionStorageServiceServicer_to_server, Storage()))
    client, address = PartitionStorageClient(channel_for, timeout_s=5), serve.address

    fetched = await client.fetch(
        address,
        [FetchPosition(TP0, 3, leader_epoch=2, max_bytes=100), FetchPosition(TP1, 0)],
        isolation=IsolationLevel.READ_COMMITTED,
        max_wait_ms=10,
    )
    request = seen.requests["Fetch"]
    assert request.isolation_level == storage_pb.ISOLATION_LEVEL_READ_COMMITTED and request.max_wait_ms == 10
    assert (request.partitions[0].fetch_offset, request.partitions[0].leader_epoch) == (3, 2)
    assert request.partitions[0].max_bytes == 100
    assert fetched[0].error is None and fetched[0].records == b"batches"
    assert (fetched[0].high_watermark, fetched[0].last_stable_offset) == (10, 8)
    assert fetched[0].aborted_transactions == (AbortedTransaction(5, 2),)
    assert isinstance(fetched[1].error, NotLeader) and fetched[1].topic_partition == TP1

    listed = await client.list_offsets(
        address, {TP0: OffsetQuery.of("latest"), TP1: OffsetQuery.of(1_700)}, isolation=IsolationLevel.READ_UNCOMMITTED
    )
    specs = [(p.spec, p.timestamp_ms) for p in seen.requests["ListOffsets"].partitions]
    assert specs == [(storage_pb.OFFSET_SPEC_LATEST, 0), (storage_pb.OFFSET_SPEC_TIMESTAMP, 1_700)]
    assert listed == {TP0: ListedOffset(42, 9, 5), TP1: ListedOffset(42, 9, 5)}
    with pytest.raises(ValueError, match="'newest'"):
        OffsetQuery.of("newest")

    marker = TxnMarker("t", ProducerIdAndEpoch(7, 4), 2, ControlType.COMMIT, (TP0, TP1))
    (result,) = await client.write_txn_markers(address, [marker])
    sent = seen.requests["WriteTxnMarkers"].markers[0]
    assert (sent.transactional_id, sent.coordinator_epoch, sent.result) == ("t", 2, common_pb.TRANSACTION_RESULT_COMMIT)
    assert result.producer_id == 7 and result.partition_errors[TP0] is None
    assert isinstance(result.partition_errors[TP1], NotLeader)


async def test_unary_produce_returns_each_partitions_base_offset_or_error(serve: Any) -> None:
    seen = Recorder()

    class Storage(storage_pb.PartitionStorageServiceServicer):
        async def Produce(self, request: Any, context: Any) -> Any:
            seen.requests["Produce"] = request
            first, second = request.partitions
            return storage_pb.ProduceResponse(
                results=[
                    storage_pb.PartitionProduceResult(topic_partition=first.topic_partition, base_offset=17),
                    storage_pb.PartitionProduceResult(
                        topic_partition=second.topic_partition, error=to_error_info(NotLeader("moved"))
                    ),
                ]
            )

    channel_for = await serve((storage_pb.add_PartitionStorageServiceServicer_to_server, Storage()))
    answers = await PartitionStorageClient(channel_for, timeout_s=5).produce(
        serve.address, {TP0: b"batch-0", TP1: b"batch-1"}, transactional_id="t"
    )
    request = seen.requests["Produce"]
    assert (request.transactional_id, request.acks) == ("t", storage_pb.ACKS_ALL)
    assert [(p.topic_partition.partition, p.records, p.leader_epoch) for p in request.partitions] == [
        (0, b"batch-0", -1),
        (1, b"batch-1", -1),
    ]
    assert answers[TP0] == 17 and isinstance(answers[TP1], NotLeader)


async def test_offset_for_leader_epoch_sends_both_epochs_and_returns_each_end_or_error(serve: Any) -> None:
    seen = Recorder()

    class Storage(storage_pb.PartitionStorageServiceServicer):
        async def OffsetForLeaderEpoch(self, request: Any, context: Any) -> Any:
            seen.requests["OffsetForLeaderEpoch"] = request
            first, second = request.partitions
            return storage_pb.OffsetForLeaderEpochResponse(
                results=[
                    storage_pb.OffsetForLeaderEpochResult(
                        topic_partition=first.topic_partition, end=storage_pb.EpochEndOffset(epoch=3, end_offset=120)
                    ),
                    storage_pb.OffsetForLeaderEpochResult(
                        topic_partition=second.topic_partition, error=to_error_info(NotLeader("moved to s-2"))
                    ),
                ]
            )

    channel_for = await serve((storage_pb.add_PartitionStorageServiceServicer_to_server, Storage()))
    answers = await PartitionStorageClient(channel_for, timeout_s=5).offset_for_leader_epoch(
        serve.address, {TP0: EpochQuery(4, current_leader_epoch=6), TP1: EpochQuery(0)}
    )
    sent = [
        (p.topic_partition.partition, p.leader_epoch, p.current_leader_epoch)
        for p in seen.requests["OffsetForLeaderEpoch"].partitions
    ]
    assert sent == [(0, 4, 6), (1, 0, -1)]
    assert answers[TP0] == EpochEndOffset(3, 120) and not EpochEndOffset(3, 120).undefined
    assert isinstance(answers[TP1], NotLeader)
    assert EpochEndOffset(-1, -1).undefined


async def test_produce_stream_sends_each_request_with_its_settings_and_reads_answers_in_order(serve: Any) -> None:
    received: list[Any] = []

    class Storage(storage_pb.PartitionStorageServiceServicer):
        async def ProduceStream(self, requests: Any, context: Any) -> Any:
            async for message in requests:
                received.append(message)
                if message.correlation_id == 3:
                    return  # the server ends the stream
                first, second = message.request.partitions
                yield storage_pb.ProduceStreamResponse(
                    correlation_id=message.correlation_id,
                    response=storage_pb.ProduceResponse(
                        results=[
                            storage_pb.PartitionProduceResult(
                                topic_partition=first.topic_partition,
                                base_offset=40 + message.correlation_id,
                                log_append_time_ms=-1,
                                duplicate=message.correlation_id == 2,
                            ),
                            storage_pb.PartitionProduceResult(
                                topic_partition=second.topic_partition,
                                base_offset=-1,
                                error=to_error_info(NotLeader("moved to s-1")),
                            ),
                        ]
                    ),
                )

    channel_for = await serve((storage_pb.add_PartitionStorageServiceServicer_to_server, Storage()))
    client = PartitionStorageClient(channel_for, timeout_s=5)
    stream = client.open_produce_stream(serve.address, ProduceSettings("t-1", acks_all=False, timeout_ms=1_500))
    for correlation_id in (1, 2):
        await stream.write(correlation_id, [(TP0, 3, b"batch-%d" % correlation_id), (TP1, -1, b"other")])
    first, second = await stream.read(), await stream.read()
    assert first is not None and second is not None
    assert [first.correlation_id, second.correlation_id] == [1, 2]
    assert first.results[TP0] == PartitionResult(41, -1, False, None)
    assert second.results[TP0] == PartitionResult(42, -1, True, None)
    assert isinstance(second.results[TP1].error, NotLeader) and second.results[TP1].base_offset == -1
    request = received[0].request
    assert (request.transactional_id, request.acks, request.timeout_ms) == ("t-1", storage_pb.ACKS_LEADER, 1_500)
    assert [(p.topic_partition.partition, p.leader_epoch, p.records) for p in request.partitions] == [
        (0, 3, b"batch-1"),
        (1, -1, b"other"),
    ]
    await stream.write(3, [(TP0, 3, b"last")])
    assert await stream.read() is None


async def test_a_failed_produce_stream_raises_the_servers_error_on_read(serve: Any) -> None:
    class Storage(storage_pb.PartitionStorageServiceServicer):
        async def ProduceStream(self, requests: Any, context: Any) -> Any:
            async for _ in requests:
                raise ConcurrentTransactions("the stream broke")
            yield  # pragma: no cover - makes this an async generator

    channel_for = await serve((storage_pb.add_PartitionStorageServiceServicer_to_server, Storage()))
    stream = PartitionStorageClient(channel_for).open_produce_stream(serve.address, ProduceSettings("", True, 100))
    await stream.write(1, [(TP0, -1, b"batch")])
    with pytest.raises(ConcurrentTransactions, match="the stream broke"):
        await stream.read()
    stream.cancel()


async def test_consumer_group_heartbeat_sends_the_members_state_and_returns_its_assignment(serve: Any) -> None:
    seen = Recorder()

    class Offsets(offsets_pb.GroupOffsetsServiceServicer):
        async def ConsumerGroupHeartbeat(self, request: Any, context: Any) -> Any:
            seen.requests["ConsumerGroupHeartbeat"] = request
            if request.member_epoch == -1:
                raise UnknownMemberId("no such member")
            return offsets_pb.ConsumerGroupHeartbeatResponse(
                member_id="m-9",
                member_epoch=4,
                heartbeat_interval_ms=300,
                session_timeout_ms=4_000,
                assignment=[common_pb.TopicPartition(topic="orders", partition=1)],
            )

    channel_for = await serve((offsets_pb.add_GroupOffsetsServiceServicer_to_server, Offsets()))
    client = GroupOffsetsClient(channel_for, timeout_s=5)
    beat = MemberHeartbeat(
        "g",
        "m-1",
        3,
        group_instance_id="i-1",
        topics=("orders", "refunds"),
        server_assignor="range",
        owned=(TP0, TP1),
        client_id="c-1",
    )
    answer = await client.consumer_group_heartbeat(serve.address, beat)
    assert answer == HeartbeatAnswer("m-9", 4, frozenset({TP1}), heartbeat_interval_ms=300, session_timeout_ms=4_000)
    sent = seen.requests["ConsumerGroupHeartbeat"]
    assert (sent.group_id, sent.member_id, sent.member_epoch, sent.group_instance_id) == ("g", "m-1", 3, "i-1")
    assert list(sent.subscribed_topic_names) == ["orders", "refunds"] and sent.subscribed_topic_regex == ""
    assert (sent.server_assignor, sent.client_id) == ("range", "c-1")
    assert [(p.topic, p.partition) for p in sent.owned_partitions] == [("orders", 0), ("orders", 1)]
    with pytest.raises(UnknownMemberId):
        await client.consumer_group_heartbeat(serve.address, MemberHeartbeat("g", "m-1", -1, pattern="o.*"))
    assert seen.requests["ConsumerGroupHeartbeat"].subscribed_topic_regex == "o.*"


async def test_group_offsets_and_pid_allocator_clients(serve: Any) -> None:
    seen = Recorder()

    class Offsets(offsets_pb.GroupOffsetsServiceServicer):
        async def CommitOffsets(self, request: Any, context: Any) -> Any:
            seen.requests["CommitOffsets"] = request
            return offsets_pb.CommitOffsetsResponse(offsets=request.offsets)

        async def FetchOffsets(self, request: Any, context: Any) -> Any:
            seen.requests["FetchOffsets"] = request
            return offsets_pb.FetchOffsetsResponse(
                offsets=[
                    common_pb.PartitionOffset(topic_partition=request.partitions[0], offset=5, leader_epoch=-1),
                    common_pb.PartitionOffset(topic_partition=request.partitions[1], offset=-1),
                ]
            )

        async def TxnOffsetCommit(self, request: Any, context: Any) -> Any:
            seen.requests["TxnOffsetCommit"] = request
            return offsets_pb.TxnOffsetCommitResponse()

    class Pids(pid_pb.PidAllocatorServiceServicer):
        async def AllocateProducerIdBlock(self, request: Any, context: Any) -> Any:
            seen.requests["AllocateProducerIdBlock"] = request
            return pid_pb.AllocateProducerIdBlockResponse(first_id=1_000, last_id=1_999)

    channel_for = await serve(
        (offsets_pb.add_GroupOffsetsServiceServicer_to_server, Offsets()),
        (pid_pb.add_PidAllocatorServiceServicer_to_server, Pids()),
    )
    offsets, address = GroupOffsetsClient(channel_for, timeout_s=5), serve.address

    await offsets.commit_offsets(
        address, "g", {TP1: OffsetAndMetadata(9, "m", 3), TP0: OffsetAndMetadata(4)}, member=GroupMember(2, "m-1")
    )
    commit = seen.requests["CommitOffsets"]
    assert [(o.topic_partition.partition, o.offset, o.leader_epoch, o.metadata) for o in commit.offsets] == [
        (0, 4, -1, ""),
        (1, 9, 3, "m"),
    ]
    assert (commit.member.generation_id, commit.member.member_id) == (2, "m-1")

    committed = await offsets.fetch_offsets(address, "g", [TP0, TP1], require_stable=True)
    assert seen.requests["FetchOffsets"].require_stable
    assert committed == {TP0: OffsetAndMetadata(5), TP1: None}

    await offsets.txn_offset_commit(address, "t", ProducerIdAndEpoch(7, 4), "g", {TP0: OffsetAndMetadata(6)})
    txn_commit = seen.requests["TxnOffsetCommit"]
    assert (txn_commit.producer.producer_id, txn_commit.producer.producer_epoch) == (7, 4)
    assert not txn_commit.HasField("member")

    block = await PidAllocatorClient(channel_for, timeout_s=5).allocate_producer_id_block(address, "tc-0", 3)
    assert block == ProducerIdBlock(1_000, 1_999)
    assert (
        seen.requests["AllocateProducerIdBlock"].requester_id,
        seen.requests["AllocateProducerIdBlock"].requester_epoch,
    ) == (
        "tc-0",
        3,
    )


async def test_a_stopped_server_is_a_network_error_retried_after_a_new_lookup() -> None:
    """Nothing listens any more: the call fails with NETWORK_EXCEPTION, which the table retries after a lookup."""
    server = aio.server()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    await server.stop(None)
    address = f"127.0.0.1:{port}"
    async with aio.insecure_channel(address) as channel:
        with pytest.raises(OncelogError) as raised:
            await ClusterClient(lambda _address: channel, timeout_s=5).describe_cluster(address)
    assert raised.value.reason is Reason.NETWORK_EXCEPTION and not raised.value.definite
    assert retry_of(raised.value) is Retry.LOCATE
