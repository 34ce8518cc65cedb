"""The RSS row of ``bench.yardstick``: one storage node's resident memory with 1,000 partitions and 10,000 idempotent
producers, against the Kafka broker's in the same scenario.

Each system is fresh for this row (a LocalCluster with one storage node, a Kafka 4.4 broker with its default
``-Xmx768m``), started side by side, so no topic of the other figures is in memory. The scenario, the same on both:
one topic of ``partitions`` partitions (the "default" mode: oncelog ``flush=async``, Kafka without
``flush.messages``), then ``producers`` idempotent producers, each with its own producer id, each appending one
record of 100 B to each of ``per_producer`` partitions (producer ``i`` to partitions ``i*per_producer ..
+per_producer`` modulo ``partitions``, so every partition holds the state of ``producers * per_producer /
partitions`` producers, which both systems keep for deduplication). Both sides speak their wire protocol directly,
the same requests on each: InitProducerId with no transactional id (a fresh producer id at epoch 0), then one
Produce request carrying one RecordBatch v2 per partition, stamped with that id, epoch 0, sequence 0
(``oncelog.records.build_batch``, the same bytes for both): oncelog over gRPC (:class:`ClusterView`'s shared
channels, 64 producers in flight), Kafka over its binary protocol (InitProducerId v1, Produce v3 with acks=-1, 8
connections). 10,000 client-library producers would mostly measure the bench process and its connection set-up, not
the server's producer state. The figure is the RSS (``/proc/<pid>/status`` VmRSS) of the storage node and of Kafka's
JVM once every producer's records are acknowledged; the idle RSS right after the topic exists is recorded too.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import threading
import time
from pathlib import Path

from confluent_kafka.admin import AdminClient as KAdmin
from confluent_kafka.admin import NewTopic as KNewTopic

from bench.yardstick_sides import process_rss_mb
from oncelog.client.records import TopicPartition
from oncelog.records import Record, build_batch
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import ApacheKafka
from oncelog.testing.txn_driver import ClusterView

VALUE = b"r" * 100
TOPIC = "yard-rss"
CONCURRENCY = 64
KAFKA_CONNECTIONS = 8


def _spread(producer: int, per_producer: int, partitions: int) -> list[int]:
    return [(producer * per_producer + k) % partitions for k in range(per_producer)]


async def _oncelog_topic(bootstrap: str, partitions: int) -> None:
    view = ClusterView([bootstrap])
    try:
        await view.create_topic(TOPIC, partitions, flush="async")  # the "default" mode: no fsync per write
    finally:
        await view.close()


async def _oncelog_producers(
    bootstrap: str, coordinator: str, partitions: int, producers: int, per_producer: int
) -> None:
    view = ClusterView([bootstrap])
    try:
        leaders = {p: await view.leader(TopicPartition(TOPIC, p)) for p in range(partitions)}
        queue: asyncio.Queue[int] = asyncio.Queue()
        for index in range(producers):
            queue.put_nowait(index)

        async def worker() -> None:
            while not queue.empty():
                index = queue.get_nowait()
                identity = await view.coordinators.init_producer_id(coordinator, "")
                by_leader: dict[str, dict[TopicPartition, bytes]] = {}
                for p in _spread(index, per_producer, partitions):
                    batch = _batch(identity.producer_id, identity.epoch)
                    by_leader.setdefault(leaders[p], {})[TopicPartition(TOPIC, p)] = batch
                for address, batches in by_leader.items():
                    outcome = await view.partitions.produce(address, batches)
                    failed = {tp: r for tp, r in outcome.items() if not isinstance(r, int)}
                    if failed:
                        raise RuntimeError(f"producer {index}: {failed}")

        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    finally:
        await view.close()


def _kafka_topic(bootstrap: str, partitions: int) -> None:
    admin = KAdmin({"bootstrap.servers": bootstrap})
    admin.create_topics([KNewTopic(TOPIC, partitions, 1)])[TOPIC].result(120)
    deadline = time.monotonic() + 120
    while True:  # the broker answers NOT_LEADER_OR_FOLLOWER until it leads every new partition
        topic = admin.list_topics(TOPIC, timeout=30).topics[TOPIC]
        if len(topic.partitions) == partitions and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"Kafka did not elect leaders for the {partitions} partitions of {TOPIC} in 120 s")
        time.sleep(0.2)


class _KafkaWire:
    """One connection to a Kafka broker sending InitProducerId v1 and Produce v3 (non-flexible versions)."""

    INIT_PRODUCER_ID, PRODUCE = 22, 0

    def __init__(self, bootstrap: str) -> None:
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=60)
        self.correlation = 0

    def _call(self, api_key: int, version: int, body: bytes) -> bytes:
        self.correlation += 1
        header = struct.pack(">hhih", api_key, version, self.correlation, -1)  # null client id
        self.sock.sendall(struct.pack(">i", len(header) + len(body)) + header + body)
        (size,) = struct.unpack(">i", self._exactly(4))
        frame = self._exactly(size)
        (correlation,) = struct.unpack_from(">i", frame)
        assert correlation == self.correlation, (correlation, self.correlation)
        return frame[4:]

    def _exactly(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("the Kafka broker closed the connection")
            data += chunk
        return bytes(data)

    def init_producer_id(self) -> tuple[int, int]:
        """A fresh idempotent producer id and epoch."""
        deadline = time.monotonic() + 60
        while True:
            response = self._call(self.INIT_PRODUCER_ID, 1, struct.pack(">hi", -1, 60_000))
            _throttle, error, producer_id, epoch = struct.unpack(">ihqh", response)
            if not error:
                return producer_id, epoch
            # COORDINATOR_LOAD_IN_PROGRESS / NOT_AVAILABLE while a fresh broker loads: retried, as clients do
            if error not in (14, 15) or time.monotonic() > deadline:
                raise RuntimeError(f"InitProducerId failed with Kafka error {error}")
            time.sleep(0.1)

    def produce(self, topic: str, batches: dict[int, bytes]) -> None:
        """One Produce request (acks=-1) with a batch per partition; raises on any partition's error."""
        name = topic.encode()
        body = struct.pack(">hhii", -1, -1, 60_000, 1) + struct.pack(">h", len(name)) + name
        body += struct.pack(">i", len(batches))
        for partition, batch in batches.items():
            body += struct.pack(">ii", partition, len(batch)) + batch
        deadline = time.monotonic() + 60
        while True:
            response = self._call(self.PRODUCE, 3, body)
            (topics,) = struct.unpack_from(">i", response)
            (length,) = struct.unpack_from(">h", response, 4)
            offset = 6 + length
            (count,) = struct.unpack_from(">i", response, offset)
            offset += 4
            errors = {}
            for _ in range(topics * count):
                partition, error, _base, _append_time = struct.unpack_from(">ihqq", response, offset)
                offset += 22
                if error:
                    errors[partition] = error
            if not errors:
                return
            # NOT_LEADER_OR_FOLLOWER while a new partition's leadership settles: the same request again, which
            # the broker deduplicates for the partitions that did append (same producer id, sequence 0)
            if set(errors.values()) != {6} or time.monotonic() > deadline:
                raise RuntimeError(f"Produce failed with Kafka errors {errors}")
            time.sleep(0.1)

    def close(self) -> None:
        self.sock.close()


def _kafka_producers(bootstrap: str, partitions: int, producers: int, per_producer: int) -> None:
    failures: list[BaseException] = []

    def connection(first: int) -> None:
        wire = _KafkaWire(bootstrap)
        try:
            for index in range(first, producers, KAFKA_CONNECTIONS):
                producer_id, epoch = wire.init_producer_id()
                wire.produce(TOPIC, {p: _batch(producer_id, epoch) for p in _spread(index, per_producer, partitions)})
        except BaseException as exc:
            failures.append(exc)
        finally:
            wire.close()

    threads = [threading.Thread(target=connection, args=(i,)) for i in range(KAFKA_CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]


def _batch(producer_id: int, epoch: int) -> bytes:
    return build_batch(
        [Record(key=None, value=VALUE)],
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0,
        transactional=False,
        base_timestamp=int(time.time() * 1000),
    )


def measure_rss(
    tmp: Path, libs: Path, partitions: int, producers: int, per_producer: int
) -> dict[str, dict[str, float]]:
    """``{"oncelog"|"kafka": {"idle_mb", "rss_mb", "seconds"}}`` of the scenario on fresh processes."""
    results: dict[str, dict[str, float]] = {}
    with (
        ApacheKafka(tmp / "rss-kafka", libs=libs) as kafka,
        LocalCluster(tmp / "rss-oncelog", storage_nodes=1) as cluster,
    ):
        assert kafka.process is not None
        storage = [pid for pid, node in cluster.pids().items() if "storage" in node]
        assert len(storage) == 1, cluster.pids()
        kafka_pid = kafka.process.pid
        _kafka_topic(kafka.bootstrap, partitions)
        asyncio.run(_oncelog_topic(cluster.bootstrap, partitions))
        results["kafka"] = {"idle_mb": process_rss_mb([kafka_pid])}
        results["oncelog"] = {"idle_mb": process_rss_mb(storage)}

        started = time.perf_counter()
        _kafka_producers(kafka.bootstrap, partitions, producers, per_producer)
        results["kafka"] |= {"rss_mb": process_rss_mb([kafka_pid]), "seconds": time.perf_counter() - started}

        started = time.perf_counter()
        coordinator = cluster.addresses("txn-coordinator")[0]
        asyncio.run(_oncelog_producers(cluster.bootstrap, coordinator, partitions, producers, per_producer))
        results["oncelog"] |= {"rss_mb": process_rss_mb(storage), "seconds": time.perf_counter() - started}
    return results
