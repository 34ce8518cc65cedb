"""Exactly-once end to end through the client library, against real service processes (design/architecture.md §1).

Each test names the guarantee it checks. Most run on the shared session cluster (two storage nodes);
those that break things — a TCP proxy that swallows replies and cuts connections in front of a storage
node, SIGKILL of a storage node, of a transaction coordinator or of a copier process — start their own
cluster. Ports the client-side scenarios of design/kafka-semantics.md §8 S1 and S3.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path

import pytest

from oncelog.api.txn import v1 as txn_pb
from oncelog.client import (
    AdminClient,
    Consumer,
    ConsumerRecord,
    IllegalStateError,
    NewTopic,
    OffsetAndMetadata,
    Producer,
    ProducerFencedError,
    RecordMetadata,
    TopicPartition,
    TransactionState,
)
from oncelog.errors import OncelogError
from oncelog.rpc import sync_channel
from oncelog.testing import LocalCluster
from oncelog.testing.reading import read_all
from oncelog.testing.servers import free_port

pytestmark = pytest.mark.timeout(180)

REPO = Path(__file__).resolve().parents[2]
COPIER = REPO / "examples" / "consume_transform_produce.py"


# ---------------------------------------------------------------------------------------------- helpers


def new_topic(bootstrap: str, partitions: int, prefix: str = "eos") -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def values(records: list[ConsumerRecord]) -> list[bytes]:
    return [r.value or b"" for r in records]


class FaultyProxy:
    """A TCP proxy (its own thread and event loop) in front of one server.

    ``drop_replies()`` keeps forwarding requests but swallows every byte the server sends back, so the
    server does the work while the client never hears about it; ``cut()`` closes every connection, as a
    network partition would. Together they produce the "written, but the acknowledgement was lost" case
    an idempotent producer must survive without duplicates.
    """

    def __init__(self, upstream: str) -> None:
        host, port = upstream.rsplit(":", 1)
        self._upstream = (host, int(port))
        self.upstream = f"{host}:{port}"
        """The server behind the proxy, for a test to ask it directly."""
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.forwarded_while_dropping = 0
        self._dropping = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faulty-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(5)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _handle(self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(*self._upstream)
        except OSError:
            client_writer.close()
            return
        self._writers.update((client_writer, server_writer))

        async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, upstream: bool) -> None:
            try:
                while data := await reader.read(65536):
                    if upstream and self._dropping:
                        self.forwarded_while_dropping += len(data)
                    if not upstream and self._dropping:
                        continue  # the reply is lost on its way back
                    writer.write(data)
                    await writer.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        await asyncio.gather(pump(client_reader, server_writer, True), pump(server_reader, client_writer, False))
        self._writers.difference_update((client_writer, server_writer))

    def drop_replies(self) -> None:
        self.forwarded_while_dropping = 0
        self._dropping = True

    def cut(self) -> None:
        """Close every connection, then forward normally again."""

        def close_all() -> None:
            for writer in list(self._writers):
                writer.transport.abort()
            self._writers.clear()
            self._dropping = False

        self._loop.call_soon_threadsafe(close_all)

    def close(self) -> None:
        self.cut()
        self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


def assert_exactly_once_in_order(
    sent: dict[int, list[tuple[bytes, RecordMetadata]]], records: list[ConsumerRecord]
) -> None:
    """Each partition holds exactly the acknowledged records, once each, in send order, at the acked offsets."""
    by_partition: dict[int, list[ConsumerRecord]] = defaultdict(list)
    for record in records:
        by_partition[record.partition].append(record)
    assert sorted(by_partition) == sorted(p for p, acked in sent.items() if acked)
    for partition, acked in sent.items():
        stored = by_partition.get(partition, [])
        duplicates = [v for v, n in Counter(values(stored)).items() if n > 1]
        assert not duplicates, f"partition {partition}: {len(duplicates)} value(s) written more than once"
        assert values(stored) == [value for value, _ in acked], f"partition {partition}: not exactly the sent order"
        assert [r.offset for r in stored] == [meta.offset for _, meta in acked], "acknowledged offsets differ"


# ---------------------------------------------------------------------------------------------- idempotence


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, FaultyProxy]]:
    """One storage node that everybody reaches through a :class:`FaultyProxy` (its advertised address)."""
    storage_port = free_port()
    proxy = FaultyProxy(f"127.0.0.1:{storage_port}")
    env = {
        "ONCELOG_PARTITION_STORAGE_LISTEN": f"127.0.0.1:{storage_port}",
        "ONCELOG_PARTITION_STORAGE_ADVERTISE": proxy.address,
    }
    try:
        with LocalCluster(tmp_path_factory.mktemp("proxied"), storage_nodes=1, env=env) as cluster:
            yield cluster, proxy
    finally:
        proxy.close()


def _send_in_background(
    producer: Producer, topic: str, partitions: int, stop: threading.Event, sent: dict[int, list[tuple[bytes, Future]]]
) -> threading.Thread:
    """Send numbered records round-robin over ``partitions`` until ``stop`` is set."""

    def run() -> None:
        i = 0
        while not stop.is_set():
            value = f"record-{i:06d}".encode()
            partition = i % partitions
            sent[partition].append((value, producer.send(topic, value, partition=partition)))
            i += 1
            if i % 50 == 0:
                time.sleep(0.005)  # a steady stream, so requests are always in flight when faults hit

    thread = threading.Thread(target=run, name="sender")
    thread.start()
    return thread


def _acknowledged(sent: dict[int, list[tuple[bytes, Future]]]) -> int:
    """How many of the records sent so far were acknowledged."""
    futures = [future for items in list(sent.values()) for _, future in list(items)]
    return sum(1 for future in futures if future.done() and not future.exception())


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.01)


def _more_acknowledged(sent: dict[int, list[tuple[bytes, Future]]], count: int, what: str) -> None:
    """Wait until ``count`` more records are acknowledged than now: the stream flows (again)."""
    before = _acknowledged(sent)
    wait_until(lambda: _acknowledged(sent) >= before + count, what)


def test_idempotent_producer_retries_do_not_duplicate(proxied: tuple[LocalCluster, FaultyProxy]) -> None:
    """Replies lost after the write, then the connection cut: retries are written at most once
    (design/architecture.md §1.1)."""
    cluster, proxy = proxied
    topic = new_topic(cluster.bootstrap, 3, "idem-proxy")
    sent: dict[int, list[tuple[bytes, Future]]] = defaultdict(list)
    stop = threading.Event()
    faults = 5
    with Producer(cluster.bootstrap, linger_ms=2, batch_size=2048, request_timeout_ms=5_000) as producer:
        sender = _send_in_background(producer, topic, 3, stop, sent)
        try:
            for fault in range(faults):
                _more_acknowledged(sent, 200, f"records flow before fault {fault + 1}")
                proxy.drop_replies()
                # requests reach the server, which writes them, and their answers are lost
                wait_until(lambda: proxy.forwarded_while_dropping >= 4096, "requests were forwarded, answers lost")
                proxy.cut()
            _more_acknowledged(sent, 200, "the producer recovered from the last cut")
        finally:
            stop.set()
            sender.join()
        producer.flush()
        metrics = producer.metrics()
    acked = {p: [(v, f.result(timeout=0)) for v, f in items] for p, items in sent.items()}
    assert metrics["stream_breaks"] >= faults, metrics
    assert metrics["duplicate_batches"] > 0, f"no retry was recognised as already written: {metrics}"
    assert_exactly_once_in_order(acked, read_all(cluster.bootstrap, topic, "read_uncommitted"))


def test_acked_records_survive_storage_kill_exactly_once(proxied: tuple[LocalCluster, FaultyProxy]) -> None:
    """kill -9 of the storage node mid-send: every acked record survives, once, in order
    (design/architecture.md §1.1, §1.6)."""
    cluster, _ = proxied
    topic = new_topic(cluster.bootstrap, 2, "idem-kill")
    sent: dict[int, list[tuple[bytes, Future]]] = defaultdict(list)
    stop = threading.Event()
    with Producer(cluster.bootstrap, linger_ms=2, batch_size=4096, delivery_timeout_ms=120_000) as producer:
        sender = _send_in_background(producer, topic, 2, stop, sent)
        try:
            while sum(len(v) for v in sent.values()) < 1000:
                time.sleep(0.01)
            cluster.kill("partition-storage-0")
            # batches pile up and retry against the dead node: the fault landed
            wait_until(lambda: producer.metrics()["batch_retries"] >= 1, "a batch was retried against the dead node")
            cluster.restart("partition-storage-0")
            _more_acknowledged(sent, 200, "records were acknowledged by the restarted node")
        finally:
            stop.set()
            sender.join()
        producer.flush()
        metrics = producer.metrics()
    assert metrics["stream_breaks"] >= 1 and metrics["batch_retries"] >= 1, f"the kill went unnoticed: {metrics}"
    acked = {p: [(v, f.result(timeout=0)) for v, f in items] for p, items in sent.items()}
    assert_exactly_once_in_order(acked, read_all(cluster.bootstrap, topic, "read_uncommitted"))


# ---------------------------------------------------------------------------------------------- transactions


def test_transaction_commit_visible_atomically_across_partitions(cluster: LocalCluster) -> None:
    """Nothing of an open transaction is readable; after the commit, all of it on every partition
    (design/architecture.md §1.2)."""
    topic = new_topic(cluster.bootstrap, 4, "atomic")
    with Producer(cluster.bootstrap, transactional_id=f"atomic-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        futures = [producer.send(topic, f"v{i}".encode(), partition=i % 4) for i in range(40)]
        producer.flush()
        assert {f.result().partition for f in futures} == {0, 1, 2, 3}
        assert read_all(cluster.bootstrap, topic, settle=False) == [], "an open transaction leaked"
        assert len(read_all(cluster.bootstrap, topic, "read_uncommitted", settle=False)) == 40
        with Consumer(cluster.bootstrap) as consumer:
            lso = consumer.end_offsets([TopicPartition(topic, p) for p in range(4)])
        assert set(lso.values()) == {0}, f"the last stable offset must stay at the transaction's start: {lso}"
        producer.commit_transaction()
    committed = read_all(cluster.bootstrap, topic, "read_committed")
    assert sorted(values(committed)) == sorted(f"v{i}".encode() for i in range(40))
    assert {r.partition for r in committed} == {0, 1, 2, 3}


def test_aborted_transaction_invisible_to_read_committed(cluster: LocalCluster) -> None:
    """An aborted transaction's records never reach read_committed; plain records around it do
    (design/architecture.md §1.4)."""
    topic = new_topic(cluster.bootstrap, 2, "abort")
    with Producer(cluster.bootstrap) as plain:
        plain.send(topic, b"before", partition=0).result()
    with Producer(cluster.bootstrap, transactional_id=f"abort-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, f"aborted-{i}".encode(), partition=i % 2)
        producer.flush()  # written to both partitions, then thrown away
        producer.abort_transaction()
        producer.begin_transaction()
        for i in range(5):
            producer.send(topic, f"committed-{i}".encode(), partition=i % 2)
        producer.commit_transaction()
    with Producer(cluster.bootstrap) as plain:
        plain.send(topic, b"after", partition=1).result()
    committed = sorted(values(read_all(cluster.bootstrap, topic, "read_committed")))
    assert committed == sorted([b"before", b"after", *(f"committed-{i}".encode() for i in range(5))])
    uncommitted = values(read_all(cluster.bootstrap, topic, "read_uncommitted"))
    assert sum(v.startswith(b"aborted-") for v in uncommitted) == 10, "the aborted records were written"


def test_read_uncommitted_sees_open_transaction_but_no_control_records(cluster: LocalCluster) -> None:
    """read_uncommitted returns open-transaction data but never a COMMIT/ABORT marker (design/architecture.md §1.4)."""
    topic = new_topic(cluster.bootstrap, 1, "uncommitted")
    with Producer(cluster.bootstrap, transactional_id=f"uncommitted-{uuid.uuid4().hex[:6]}") as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"open-{i}".encode())
        producer.flush()
        open_records = read_all(cluster.bootstrap, topic, "read_uncommitted", settle=False)
        assert values(open_records) == [b"open-0", b"open-1", b"open-2"]
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(topic, b"second")
        # never sent: dropped before it left the client. If the partition was already added to the transaction
        # (the sender may do that before the abort), an ABORT marker takes offset 4, else nothing does
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"third")
        producer.commit_transaction()
    records = read_all(cluster.bootstrap, topic, "read_uncommitted")
    assert values(records) == [b"open-0", b"open-1", b"open-2", b"third"]
    offsets = [r.offset for r in records]
    assert offsets[:3] == [0, 1, 2] and offsets[3] in (4, 5), "offset 3 is the commit marker, which is never returned"
    with Consumer(cluster.bootstrap, isolation_level="read_uncommitted") as consumer:
        tp = TopicPartition(topic, 0)
        assert consumer.end_offsets([tp])[tp] == offsets[3] + 2, "the last commit marker follows the last record"


def test_zombie_producer_fenced_after_new_instance_inits(cluster: LocalCluster) -> None:
    """A second instance with the same transactional id fences the first; only its data commits
    (design/architecture.md §1.3)."""
    topic = new_topic(cluster.bootstrap, 2, "zombie")
    tid = f"zombie-{uuid.uuid4().hex[:6]}"
    zombie = Producer(cluster.bootstrap, transactional_id=tid)
    try:
        zombie.init_transactions()
        zombie.begin_transaction()
        zombie.send(topic, b"zombie-0", partition=0)
        zombie.flush()
        with Producer(cluster.bootstrap, transactional_id=tid) as successor:
            successor.init_transactions()  # aborts the zombie's open transaction
            with pytest.raises(ProducerFencedError):
                zombie.commit_transaction()
            assert zombie.transaction_state is TransactionState.FATAL_ERROR
            with pytest.raises(ProducerFencedError):
                zombie.send(topic, b"zombie-1", partition=1)
            successor.begin_transaction()
            successor.send(topic, b"successor-0", partition=0)
            successor.send(topic, b"successor-1", partition=1)
            successor.commit_transaction()
    finally:
        zombie.close()
    assert sorted(values(read_all(cluster.bootstrap, topic))) == [b"successor-0", b"successor-1"]
    assert sorted(values(read_all(cluster.bootstrap, topic, "read_uncommitted"))) == [
        b"successor-0",
        b"successor-1",
        b"zombie-0",
    ]


# ------------------------------------------------------------------------------------ consume-transform-produce


def _seed(bootstrap: str, topic: str, count: int) -> list[bytes]:
    inputs = [f"in-{i:05d}".encode() for i in range(count)]
    with Producer(bootstrap) as producer:
        for value in inputs:
            producer.send(topic, value)
    return inputs


def _poll_at_least(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    records: list[ConsumerRecord] = []
    deadline = time.monotonic() + 30
    while len(records) < count:
        assert time.monotonic() < deadline, f"only {len(records)} of {count} records arrived"
        records.extend(consumer.poll(timeout_ms=200, max_records=count - len(records)))
    return records


@contextmanager
def _copier(cluster: LocalCluster, name: str) -> Iterator[tuple[Consumer, Producer, str, TopicPartition]]:
    """A subscribed consumer of a seeded 20-record input and an initialised transactional producer, with the
    output topic and the input partition."""
    source = new_topic(cluster.bootstrap, 1, f"{name}-in")
    sink = new_topic(cluster.bootstrap, 1, f"{name}-out")
    group = f"{name}-{uuid.uuid4().hex[:6]}"
    _seed(cluster.bootstrap, source, 20)
    with (
        Consumer(cluster.bootstrap, group_id=group) as consumer,
        Producer(cluster.bootstrap, transactional_id=f"{group}-copier") as producer,
    ):
        consumer.subscribe([source])
        producer.init_transactions()
        yield consumer, producer, sink, TopicPartition(source, 0)


def test_a_group_id_over_255_characters_is_refused_where_it_enters_and_wedges_nothing(cluster: LocalCluster) -> None:
    """Issue 25 item 2: AddOffsetsToTxn refuses the id group-offsets would refuse, naming the limit, so no marker
    batch is ever poisoned; the same transactional id commits again at once."""
    topic = new_topic(cluster.bootstrap, 1, "long-group")
    tid = f"long-group-{uuid.uuid4().hex[:6]}"
    with Producer(cluster.bootstrap, transactional_id=tid) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"never-committed", partition=0)
        with pytest.raises(OncelogError, match="300 characters long; the limit is 255"):
            producer.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g" * 300)
    with Producer(cluster.bootstrap, transactional_id=tid) as producer:
        producer.init_transactions()  # fences the abandoned instance and aborts its transaction
        producer.begin_transaction()
        producer.send(topic, b"committed", partition=0)
        producer.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, "g" * 255)
        producer.commit_transaction()
    assert values(read_all(cluster.bootstrap, topic)) == [b"committed"]


def test_offsets_committed_only_with_transaction(cluster: LocalCluster) -> None:
    """Consume-transform-produce: an abort keeps offsets and output away; a commit makes both visible
    (design/architecture.md §1.2)."""
    with _copier(cluster, "ctp") as (consumer, producer, sink, tp):
        producer.begin_transaction()
        for record in _poll_at_least(consumer, 10):
            producer.send(sink, record.value.upper())
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(consumer.position(tp))}, consumer.group_metadata())
        producer.abort_transaction()
        assert consumer.committed([tp]) == {tp: None}, "an aborted transaction must not commit offsets"
        assert read_all(cluster.bootstrap, sink) == [], "an aborted transaction must not publish output"

        consumer.rewind_to_committed()
        producer.begin_transaction()
        for record in _poll_at_least(consumer, 10):
            producer.send(sink, record.value.upper())
        producer.send_offsets_to_transaction(
            {tp: OffsetAndMetadata(consumer.position(tp), metadata="batch-1")}, consumer.group_metadata()
        )
        producer.commit_transaction()
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(10, "batch-1")}
    assert values(read_all(cluster.bootstrap, sink)) == [f"IN-{i:05d}".encode() for i in range(10)]


def test_offsets_group_added_ahead_commits_and_aborts_with_the_transaction(cluster: LocalCluster) -> None:
    """add_offsets_to_transaction at the start, offsets at the end: still all or nothing with the output."""
    with _copier(cluster, "ahead") as (consumer, producer, sink, tp):
        group = consumer.group_metadata().group_id
        with pytest.raises(IllegalStateError, match="begin_transaction"):
            producer.add_offsets_to_transaction(consumer.group_metadata())

        producer.begin_transaction()
        producer.add_offsets_to_transaction(consumer.group_metadata())
        for record in _poll_at_least(consumer, 10):
            producer.send(sink, record.value.upper())
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(consumer.position(tp))}, consumer.group_metadata())
        producer.abort_transaction()
        assert consumer.committed([tp]) == {tp: None}, "an aborted transaction must not commit offsets"

        consumer.rewind_to_committed()
        producer.begin_transaction()
        producer.add_offsets_to_transaction(group)
        producer.add_offsets_to_transaction(group)  # a second time in the same transaction: nothing to do
        for record in _poll_at_least(consumer, 10):
            producer.send(sink, record.value.upper())
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(consumer.position(tp), "b")}, group)
        producer.commit_transaction()
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(10, "b")}

        # the next transaction must add the group again: a commit there still reaches the group
        producer.begin_transaction()
        for record in _poll_at_least(consumer, 10):
            producer.send(sink, record.value.upper())
        producer.send_offsets_to_transaction({tp: OffsetAndMetadata(consumer.position(tp), "c")}, group)
        producer.commit_transaction()
        assert consumer.committed([tp]) == {tp: OffsetAndMetadata(20, "c")}
    assert values(read_all(cluster.bootstrap, sink)) == [f"IN-{i:05d}".encode() for i in range(20)]


def test_rewind_to_committed_after_abort(cluster: LocalCluster) -> None:
    """After an abort, the consumer reads again from the first input offset of that transaction
    (design/architecture.md §1.8)."""
    source = new_topic(cluster.bootstrap, 2, "rewind-in")
    sink = new_topic(cluster.bootstrap, 1, "rewind-out")
    group = f"rewind-{uuid.uuid4().hex[:6]}"
    _seed(cluster.bootstrap, source, 40)
    with (
        Consumer(cluster.bootstrap, group_id=group) as consumer,
        Producer(cluster.bootstrap, transactional_id=f"{group}-copier") as producer,
    ):
        consumer.subscribe([source])
        producer.init_transactions()

        def transaction(count: int) -> tuple[dict[TopicPartition, int], list[ConsumerRecord]]:
            producer.begin_transaction()
            records = _poll_at_least(consumer, count)
            for record in records:
                producer.send(sink, record.value)
            positions = {tp: consumer.position(tp) for tp in consumer.assignment()}
            producer.send_offsets_to_transaction(positions, consumer.group_metadata())
            return positions, records

        committed_positions, first = transaction(15)
        producer.commit_transaction()
        aborted_positions, aborted = transaction(10)
        producer.abort_transaction()
        assert aborted_positions != committed_positions, "the aborted transaction read further"

        rewound = consumer.rewind_to_committed()
        assert rewound == committed_positions, "positions go back to the first input offset of the aborted txn"
        aborted_keys = {(r.partition, r.offset) for r in aborted}
        again: list[ConsumerRecord] = []
        deadline = time.monotonic() + 30
        while not aborted_keys <= {(r.partition, r.offset) for r in again}:
            assert time.monotonic() < deadline, "the input of the aborted transaction was not read again"
            again.extend(consumer.poll(timeout_ms=200))
        first_read_again = {}
        for record in again:
            first_read_again.setdefault(TopicPartition(record.topic, record.partition), record.offset)
        assert all(offset == committed_positions[tp] for tp, offset in first_read_again.items())
        assert aborted_keys.isdisjoint((r.partition, r.offset) for r in first), "rewind went too far back"
        assert {(r.partition, r.offset) for r in again}.isdisjoint((r.partition, r.offset) for r in first)


# ---------------------------------------------------------------------------------- failures of other processes


@pytest.fixture(scope="module")
def proxied_coordinator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, FaultyProxy]]:
    """One transaction coordinator that clients reach through a :class:`FaultyProxy`."""
    port = free_port()
    proxy = FaultyProxy(f"127.0.0.1:{port}")
    env = {
        "ONCELOG_TXN_COORDINATOR_LISTEN": f"127.0.0.1:{port}",
        "ONCELOG_TXN_COORDINATOR_ADVERTISE": proxy.address,
    }
    try:
        with LocalCluster(tmp_path_factory.mktemp("proxied-coordinator"), storage_nodes=1, env=env) as cluster:
            yield cluster, proxy
    finally:
        proxy.close()


def test_indeterminate_commit_is_retried_never_aborted(proxied_coordinator: tuple[LocalCluster, FaultyProxy]) -> None:
    """EndTxn reaches the coordinator but its answer is lost: the client retries the same commit
    (design/architecture.md §1.7)."""
    cluster, proxy = proxied_coordinator
    topic = new_topic(cluster.bootstrap, 2, "indeterminate")
    tid = f"indeterminate-{uuid.uuid4().hex[:6]}"
    with Producer(cluster.bootstrap, transactional_id=tid, request_timeout_ms=2_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(10):
            producer.send(topic, f"v{i}".encode(), partition=i % 2)
        producer.flush()
        epoch = producer.producer_id_and_epoch
        assert epoch is not None
        proxy.drop_replies()
        outcome: list[BaseException | None] = []
        committer = threading.Thread(target=lambda: outcome.append(_call(producer.commit_transaction)))
        committer.start()
        deadline = time.monotonic() + 10
        while proxy.forwarded_while_dropping == 0:  # EndTxn went out; its answer will be lost
            assert time.monotonic() < deadline, "EndTxn never reached the coordinator"
            time.sleep(0.01)
        wait_until(lambda: _state_behind(proxy, tid) != "ongoing", "the coordinator decided the lost EndTxn")
        proxy.cut()
        committer.join(60)
        assert outcome == [None], f"the commit must complete, not fail or abort: {outcome}"
        assert producer.transaction_state is TransactionState.READY
        after = producer.producer_id_and_epoch
        assert after is not None and (after.producer_id, after.epoch) == (epoch.producer_id, epoch.epoch + 1)
    with AdminClient(cluster.bootstrap) as admin:
        described = admin.describe_transactions([tid])[tid]
    assert described.state in ("prepare_commit", "complete_commit")
    assert described.producer_epoch == epoch.epoch + 1, "the retried EndTxn was recognised, not applied twice"
    assert sorted(values(read_all(cluster.bootstrap, topic))) == sorted(f"v{i}".encode() for i in range(10))


def _state_behind(proxy: FaultyProxy, transactional_id: str) -> str:
    """The transaction's state, asked of the coordinator directly (its answers through the proxy are dropped)."""
    with sync_channel(proxy.upstream) as channel:
        described = txn_pb.TransactionCoordinatorServiceStub(channel).DescribeTransactions(
            txn_pb.DescribeTransactionsRequest(transactional_ids=[transactional_id])
        )
    return txn_pb.TransactionState.Name(described.transactions[0].state).removeprefix("TRANSACTION_STATE_").lower()


def _call(fn: Callable[[], object]) -> BaseException | None:
    """Run ``fn`` and return what it raised (handed from a helper thread to the test)."""
    try:
        fn()
    except BaseException as exc:
        return exc
    return None


@pytest.fixture(scope="module")
def failover_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """Two txn-coordinator replicas with short shard leases, so a survivor takes over quickly."""
    env = {
        "ONCELOG_TXN_COORDINATOR_LEASE_MS": "1500",
        "ONCELOG_TXN_COORDINATOR_NODE_LEASE_MS": "1500",
    }
    with LocalCluster(
        tmp_path_factory.mktemp("failover"), storage_nodes=1, replicas={"txn-coordinator": 2}, env=env
    ) as running:
        yield running


def test_coordinator_failover_commit_completes(failover_cluster: LocalCluster) -> None:
    """SIGKILL of the coordinator owning the transaction before commit: the survivor completes it
    (design/kafka-semantics.md §2.10)."""
    cluster = failover_cluster
    topic = new_topic(cluster.bootstrap, 2, "failover")
    tid = f"failover-{uuid.uuid4().hex[:6]}"
    with Producer(cluster.bootstrap, transactional_id=tid, request_timeout_ms=3_000) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(20):
            producer.send(topic, f"v{i}".encode(), partition=i % 2)
        producer.flush()
        with AdminClient(cluster.bootstrap) as admin:
            owner = admin.describe_transactions([tid])[tid].coordinator_node_id
        cluster.kill(owner)
        producer.commit_transaction(timeout=60)
        with AdminClient(cluster.bootstrap) as admin:
            described = admin.describe_transactions([tid])[tid]
        assert described.coordinator_node_id != owner
        producer.begin_transaction()  # the producer carries on with the new coordinator
        producer.send(topic, b"after-failover", partition=0)
        producer.commit_transaction()
    cluster.restart(owner)
    assert sorted(values(read_all(cluster.bootstrap, topic))) == sorted(
        [*(f"v{i}".encode() for i in range(20)), b"after-failover"]
    )


def test_clients_follow_a_restarted_storage_node_to_its_new_address(failover_cluster: LocalCluster) -> None:
    """The node comes back on another port: metadata refresh redirects producer and consumer, nothing is lost."""
    cluster = failover_cluster
    topic = new_topic(cluster.bootstrap, 2, "moved")
    sent: dict[int, list[tuple[bytes, Future]]] = defaultdict(list)
    stop = threading.Event()
    old_address = cluster.node("partition-storage-0").address
    with Consumer(cluster.bootstrap, isolation_level="read_uncommitted") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(2)])
        with Producer(cluster.bootstrap, linger_ms=2) as producer:
            sender = _send_in_background(producer, topic, 2, stop, sent)
            try:
                while sum(len(v) for v in sent.values()) < 500:
                    time.sleep(0.01)
                cluster.kill("partition-storage-0")
                new_address = cluster.restart("partition-storage-0")
                _more_acknowledged(sent, 200, "records were acknowledged at the new address")
            finally:
                stop.set()
                sender.join()
            producer.flush()
        assert new_address != old_address, "the restarted node was expected to bind a new port"
        acked = {p: [(v, f.result(timeout=0)) for v, f in items] for p, items in sent.items()}
        total = sum(len(items) for items in acked.values())
        consumed: list[ConsumerRecord] = []
        deadline = time.monotonic() + 60
        while len(consumed) < total:
            assert time.monotonic() < deadline, f"the consumer read {len(consumed)} of {total} records"
            consumed.extend(consumer.poll(timeout_ms=200))
    assert_exactly_once_in_order(acked, consumed)


def _start_copier(bootstrap: str, source: str, sink: str, group: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "libs"), str(REPO / "services")])}
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                str(COPIER),
                source,
                sink,
                "--bootstrap",
                bootstrap,
                "--group",
                group,
                "--transactional-id",
                f"{group}-0",
                "--batch-size",
                "100",
                "--idle-exit",
                "8",  # beyond the group session timeout: a killed predecessor's partitions arrive meanwhile
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )


def _committed_total(log: Path) -> int:
    total = 0
    for line in log.read_text(errors="replace").splitlines():
        try:
            total = max(total, json.loads(line).get("total", 0))
        except (ValueError, AttributeError):
            continue
    return total


def test_copier_killed_three_times_outputs_each_input_exactly_once(cluster: LocalCluster, tmp_path: Path) -> None:
    """design/kafka-semantics.md §8 S1: a transactional copier SIGKILLed three times still yields output == input, once
    each."""
    source = new_topic(cluster.bootstrap, 2, "s1-in")
    sink = new_topic(cluster.bootstrap, 2, "s1-out")
    group = f"s1-{uuid.uuid4().hex[:6]}"
    inputs = _seed(cluster.bootstrap, source, 3000)
    rng = random.Random(7)
    kills = 0
    for _ in range(3):
        log = tmp_path / f"copier-{kills}.log"
        copier = _start_copier(cluster.bootstrap, source, sink, group, log)
        target = rng.randint(200, 500)
        deadline = time.monotonic() + 60
        while _committed_total(log) < target and copier.poll() is None:
            assert time.monotonic() < deadline, f"the copier made no progress:\n{log.read_text()}"
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 0.2))  # land the kill anywhere inside a transaction
        copier.send_signal(signal.SIGKILL)
        copier.wait()
        kills += 1
    log = tmp_path / "copier-final.log"
    final = _start_copier(cluster.bootstrap, source, sink, group, log)
    assert final.wait(timeout=120) == 0, log.read_text()
    output = values(read_all(cluster.bootstrap, sink))
    duplicates = [v for v, n in Counter(output).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} duplicated output record(s), e.g. {duplicates[:3]}"
    assert sorted(output) == sorted(v.upper() for v in inputs), "output must equal the transformed input"
    assert kills == 3
