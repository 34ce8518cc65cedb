"""The measurements of ``bench.yardstick``, once for oncelog (its Python client) and once for Apache Kafka 4.4
(confluent-kafka), with the same shape so each figure compares like with like.

Each side creates its own topics with the flush setting of a mode:

* ``durable``: oncelog ``flush=sync`` (fsync before the acknowledgement) and Kafka ``flush.messages=1`` (fsync
  every message);
* ``default``: oncelog ``flush=async`` and Kafka's default (no fsync on the write path, the page cache and
  replication are its durability).
"""

from __future__ import annotations

import itertools
import os
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer as KConsumer
from confluent_kafka import KafkaError
from confluent_kafka import Producer as KProducer
from confluent_kafka import TopicPartition as KTopicPartition
from confluent_kafka.admin import AdminClient as KAdmin
from confluent_kafka.admin import NewTopic as KNewTopic

from oncelog.client import AdminClient, Consumer, NewTopic, OffsetAndMetadata, Producer, TopicPartition

MODES = ("durable", "default")
BATCH_SIZE = 64 * 1024
LINGER_MS = 5
BULK_RECORDS = 64
ARROW_RECORDS = 10_240
"""Rows of the Arrow column each ``send_arrow()`` call takes: an Arrow record batch of the size Spark hands a
Python sink (``spark.sql.execution.arrow.maxRecordsPerBatch``, 10,000 by default)."""


def arrow_column(value: bytes, records: int) -> Any:
    """An Arrow binary column of :data:`ARROW_RECORDS` (at most ``records``) copies of ``value``, built outside the
    timed part."""
    import pyarrow as pa

    return pa.array([value] * min(ARROW_RECORDS, records), pa.binary())


COMMIT_INTERVAL_S = 0.1
SMALL_TXN_PARTITIONS = 4
SMALL_TXN_VALUE = b"v" * 100
_ids = itertools.count()
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` so far (``/proc/<pid>/stat``)."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14 and 15)
    return total


def process_rss_mb(pids: list[int]) -> float:
    """Resident set size of ``pids`` together, in MB (``VmRSS`` of ``/proc/<pid>/status``)."""
    total_kb = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total_kb += int(line.split()[1])
        except OSError:
            continue
    return total_kb / 1024


def _run_threads(count: int, body: Callable[[int], None]) -> None:
    errors: list[BaseException] = []

    def wrapped(index: int) -> None:
        try:
            body(index)
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=wrapped, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


@dataclass
class Side:
    """One system under measurement: its name, how to reach it, and the processes that serve it."""

    name: str
    bootstrap: str
    pids: Callable[[], list[int]]

    def topic(self, mode: str, partitions: int = 1) -> str:
        raise NotImplementedError

    def produce(self, topic: str, value: bytes, records: int, *, api: str) -> float:
        """Records/s of ``records`` copies of ``value`` to partition 0 through ``api``: ``batch``
        (``send_batch()``, :data:`BULK_RECORDS` a call), ``send`` (per record) or ``arrow`` (``send_arrow()`` of
        an Arrow column, :data:`ARROW_RECORDS` a call), until every record is acknowledged."""
        raise NotImplementedError

    def consume_mb_s(self, topic: str, records: int, value_bytes: int, *, arrow: bool = False) -> float:
        """MB/s of a read_committed consumer reading ``records`` of ``value_bytes`` from offset 0 of partition 0;
        with ``arrow``, into Arrow columns (oncelog: ``poll_arrow()``; Kafka: each ``consume()`` batch's topic,
        partition, offset, timestamp, key and value into a ``pyarrow`` table, as a Python user of confluent-kafka
        would)."""
        raise NotImplementedError

    def idempotent_rate(self, topic: str, value: bytes, seconds: float) -> float:
        raise NotImplementedError

    def transactional_rate(self, topic: str, value: bytes, seconds: float) -> float:
        raise NotImplementedError

    def small_transactions(self, topic: str, producers: int, seconds: float) -> float:
        """Transactions/s of ``producers`` threads, each starting transactions until ``seconds`` passed; every
        transaction started counts, over the wall time until the last one committed."""
        raise NotImplementedError

    def ctp_latencies(self, mode: str, samples: int) -> list[float]:
        raise NotImplementedError


# ---------------------------------------------------------------------------------------------- oncelog


class OncelogSide(Side):
    """oncelog's Python client against a LocalCluster; topics ``flush=sync`` (durable) or ``flush=async``.

    ``producer_metrics`` holds the last :meth:`produce` producer's ``metrics()`` (the counters behind a rate).
    """

    producer_metrics: dict[str, int] | None = None

    def topic(self, mode: str, partitions: int = 1) -> str:
        name = f"yard-{next(_ids)}-{uuid.uuid4().hex[:6]}"
        flush = "sync" if mode == "durable" else "async"
        with AdminClient(self.bootstrap) as admin:
            admin.create_topics([NewTopic(name, num_partitions=partitions, configs={"flush": flush})])
        return name

    def produce(self, topic: str, value: bytes, records: int, *, api: str) -> float:
        column = arrow_column(value, records) if api == "arrow" else None
        with Producer(self.bootstrap, batch_size=BATCH_SIZE, linger_ms=LINGER_MS) as producer:
            producer.send(topic, value, partition=0).result()  # metadata and producer id outside the timed part
            start = time.perf_counter()
            if column is not None:
                futures = [producer.send_arrow(topic, column, partition=0) for _ in range(records // len(column))]
                sent = len(futures) * len(column)
                producer.flush()
                for future in futures[-1:]:
                    future.result()
            elif api == "batch":
                values = [value] * BULK_RECORDS
                futures = [producer.send_batch(topic, values, partition=0) for _ in range(records // BULK_RECORDS)]
                sent = len(futures) * BULK_RECORDS
                producer.flush()
                for future in futures[-1:]:
                    future.result()
            else:
                last = None
                for _ in range(records):
                    last = producer.send(topic, value, partition=0)
                sent = records
                producer.flush()
                assert last is not None
                last.result()
            rate = sent / (time.perf_counter() - start)
            self.producer_metrics = producer.metrics()
            return rate

    def consume_mb_s(self, topic: str, records: int, value_bytes: int, *, arrow: bool = False) -> float:
        tp = TopicPartition(topic, 0)
        with Consumer(self.bootstrap, isolation_level="read_committed", max_poll_records=10_000) as consumer:
            consumer.assign([tp])
            consumer.seek(tp, 0)
            seen = 0
            start = time.perf_counter()
            deadline = start + 300
            while seen < records and time.perf_counter() < deadline:
                if arrow:
                    seen += consumer.poll_arrow(timeout_ms=1000).num_rows
                else:
                    seen += len(consumer.poll(timeout_ms=1000))
            elapsed = time.perf_counter() - start
        assert seen >= records, f"read {seen} of {records}"
        return seen * value_bytes / elapsed / 1e6

    def idempotent_rate(self, topic: str, value: bytes, seconds: float) -> float:
        with Producer(self.bootstrap, batch_size=BATCH_SIZE, linger_ms=LINGER_MS) as producer:
            producer.send(topic, value, partition=0).result()
            sent, last = 0, None
            start = time.perf_counter()
            deadline = start + seconds
            while time.perf_counter() < deadline:
                last = producer.send(topic, value, partition=0)
                sent += 1
            producer.flush()
            assert last is not None
            last.result()
            return sent / (time.perf_counter() - start)

    def transactional_rate(self, topic: str, value: bytes, seconds: float) -> float:
        with Producer(
            self.bootstrap, transactional_id=f"yard-{uuid.uuid4().hex[:8]}", batch_size=BATCH_SIZE, linger_ms=LINGER_MS
        ) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send(topic, value, partition=0)
            producer.commit_transaction()
            committed = 0
            start = time.perf_counter()
            deadline = start + seconds
            while (now := time.perf_counter()) < deadline:
                producer.begin_transaction()
                commit_at = min(now + COMMIT_INTERVAL_S, deadline)
                in_txn = 0
                while time.perf_counter() < commit_at:
                    producer.send(topic, value, partition=0)
                    in_txn += 1
                producer.commit_transaction()
                committed += in_txn
            return committed / (time.perf_counter() - start)

    def small_transactions(self, topic: str, producers: int, seconds: float) -> float:
        clients = [
            Producer(self.bootstrap, transactional_id=f"yard-small-{uuid.uuid4().hex[:8]}", linger_ms=0)
            for _ in range(producers)
        ]
        committed = [0] * producers
        deadline = [0.0]

        def set_deadline() -> None:  # runs once every thread is ready, before any is released
            deadline[0] = time.perf_counter() + seconds

        start_at = threading.Barrier(producers + 1, action=set_deadline)

        def one(producer: Producer) -> None:
            producer.begin_transaction()
            for partition in range(SMALL_TXN_PARTITIONS):
                producer.send(topic, SMALL_TXN_VALUE, partition=partition)
            producer.commit_transaction()

        def body(index: int) -> None:
            producer = clients[index]
            producer.init_transactions()
            one(producer)  # warm-up: metadata, connections
            start_at.wait()
            while time.perf_counter() < deadline[0]:
                one(producer)
                committed[index] += 1

        try:
            runner = threading.Thread(target=_run_threads, args=(producers, body), daemon=True)
            runner.start()
            start_at.wait(timeout=300)
            runner.join()
            elapsed = time.perf_counter() - (deadline[0] - seconds)
        finally:
            for producer in clients:
                producer.close()
        return sum(committed) / elapsed

    def ctp_latencies(self, mode: str, samples: int) -> list[float]:
        source, sink = self.topic(mode), self.topic(mode)
        source_tp, sink_tp = TopicPartition(source, 0), TopicPartition(sink, 0)
        value = b"c" * 1024
        latencies: list[float] = []
        with (
            Producer(self.bootstrap, linger_ms=0) as feeder,
            Producer(self.bootstrap, linger_ms=0, transactional_id=f"yard-ctp-{uuid.uuid4().hex[:8]}") as producer,
            Consumer(self.bootstrap, group_id=f"yard-{uuid.uuid4().hex[:8]}", fetch_max_wait_ms=100) as consumer,
            Consumer(self.bootstrap, isolation_level="read_committed", fetch_max_wait_ms=100) as reader,
        ):
            consumer.assign([source_tp])
            consumer.seek(source_tp, 0)
            reader.assign([sink_tp])
            reader.seek(sink_tp, 0)
            producer.init_transactions()
            for i in range(samples + 1):  # the first is a warm-up
                feeder.send(source, value, partition=0).result()
                start = time.perf_counter()
                while not (records := consumer.poll(timeout_ms=1000, max_records=1)):
                    pass
                producer.begin_transaction()
                producer.send(sink, records[0].value, partition=0)
                producer.send_offsets_to_transaction(
                    {source_tp: OffsetAndMetadata(records[0].offset + 1)}, consumer.group_metadata()
                )
                producer.commit_transaction()
                while not reader.poll(timeout_ms=1000, max_records=1):
                    pass
                if i:
                    latencies.append(time.perf_counter() - start)
        return latencies


# ---------------------------------------------------------------------------------------------- Kafka


def _kafka_fill(producer: KProducer, topic: str, value: bytes, partition: int = 0) -> None:
    while True:
        try:
            producer.produce(topic, value, partition=partition)
            return
        except BufferError:
            producer.poll(0.01)


class KafkaSide(Side):
    """confluent-kafka (librdkafka) against Apache Kafka 4.4; topics at Kafka's default or ``flush.messages=1``."""

    def topic(self, mode: str, partitions: int = 1) -> str:
        name = f"yard-{next(_ids)}-{uuid.uuid4().hex[:6]}"
        config = {"flush.messages": "1"} if mode == "durable" else {}
        admin = KAdmin({"bootstrap.servers": self.bootstrap})
        admin.create_topics([KNewTopic(name, partitions, 1, config=config)])[name].result(60)
        return name

    def _producer(self, **extra: object) -> KProducer:
        config: dict[str, object] = {
            "bootstrap.servers": self.bootstrap,
            "enable.idempotence": True,
            "linger.ms": LINGER_MS,
            "batch.size": BATCH_SIZE,
        }
        config.update(extra)
        return KProducer(config)

    def produce(self, topic: str, value: bytes, records: int, *, api: str) -> float:
        # confluent-kafka has no bulk call: produce() per record, which librdkafka batches in C either way; from
        # an Arrow column, each value is taken out of it first (to_pylist), as a Python user would
        column = arrow_column(value, records) if api == "arrow" else None
        producer = self._producer()
        producer.produce(topic, value, partition=0)
        assert producer.flush(60) == 0
        start = time.perf_counter()
        if column is not None:
            for _ in range(records // len(column)):
                for item in column.to_pylist():
                    _kafka_fill(producer, topic, item)
            records -= records % len(column)
        else:
            for _ in range(records):
                _kafka_fill(producer, topic, value)
        assert producer.flush(300) == 0, "records left unsent"
        return records / (time.perf_counter() - start)

    def consume_mb_s(self, topic: str, records: int, value_bytes: int, *, arrow: bool = False) -> float:
        if arrow:
            import pyarrow as pa
        consumer = KConsumer(
            {"bootstrap.servers": self.bootstrap, "group.id": f"yard-{uuid.uuid4().hex[:6]}",
             "isolation.level": "read_committed", "enable.auto.commit": False, "fetch.wait.max.ms": 100}
        )  # fmt: skip
        consumer.assign([KTopicPartition(topic, 0, 0)])
        seen = 0
        start = time.perf_counter()
        deadline = start + 300
        try:
            while seen < records and time.perf_counter() < deadline:
                # consume() returns early only once it has num_messages: never ask for more than are left
                messages = consumer.consume(num_messages=min(10_000, records - seen), timeout=1.0)
                if arrow:
                    good = [m for m in messages if m.error() is None]
                    table = pa.table(
                        {
                            "topic": [m.topic() for m in good],
                            "partition": pa.array([m.partition() for m in good], pa.int32()),
                            "offset": [m.offset() for m in good],
                            "timestamp": [m.timestamp()[1] for m in good],
                            "key": pa.array([m.key() for m in good], pa.binary()),
                            "value": pa.array([m.value() for m in good], pa.binary()),
                        }
                    )
                    seen += table.num_rows
                    continue
                for message in messages:
                    if message.error() is None:
                        seen += 1
            elapsed = time.perf_counter() - start
        finally:
            consumer.close()
        assert seen >= records, f"read {seen} of {records}"
        return seen * value_bytes / elapsed / 1e6

    def idempotent_rate(self, topic: str, value: bytes, seconds: float) -> float:
        producer = self._producer()
        producer.produce(topic, value, partition=0)
        assert producer.flush(60) == 0
        sent = 0
        start = time.perf_counter()
        deadline = start + seconds
        while time.perf_counter() < deadline:
            _kafka_fill(producer, topic, value)
            sent += 1
        assert producer.flush(300) == 0
        return sent / (time.perf_counter() - start)

    def transactional_rate(self, topic: str, value: bytes, seconds: float) -> float:
        producer = self._producer(**{"transactional.id": f"yard-{uuid.uuid4().hex[:8]}"})
        producer.init_transactions(120)
        producer.begin_transaction()
        producer.produce(topic, value, partition=0)
        producer.commit_transaction(120)
        committed = 0
        start = time.perf_counter()
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline:
            producer.begin_transaction()
            commit_at = min(now + COMMIT_INTERVAL_S, deadline)
            in_txn = 0
            while time.perf_counter() < commit_at:
                _kafka_fill(producer, topic, value)
                in_txn += 1
            producer.commit_transaction(120)
            committed += in_txn
        return committed / (time.perf_counter() - start)

    def small_transactions(self, topic: str, producers: int, seconds: float) -> float:
        clients = [
            KProducer({"bootstrap.servers": self.bootstrap, "transactional.id": f"yard-small-{uuid.uuid4().hex[:8]}",
                       "linger.ms": 0})
            for _ in range(producers)
        ]  # fmt: skip
        committed = [0] * producers
        deadline = [0.0]

        def set_deadline() -> None:  # runs once every thread is ready, before any is released
            deadline[0] = time.perf_counter() + seconds

        start_at = threading.Barrier(producers + 1, action=set_deadline)

        def one(producer: KProducer) -> None:
            producer.begin_transaction()
            for partition in range(SMALL_TXN_PARTITIONS):
                producer.produce(topic, SMALL_TXN_VALUE, partition=partition)
            producer.commit_transaction(120)

        def body(index: int) -> None:
            producer = clients[index]
            producer.init_transactions(120)
            one(producer)
            start_at.wait()
            while time.perf_counter() < deadline[0]:
                one(producer)
                committed[index] += 1

        runner = threading.Thread(target=_run_threads, args=(producers, body), daemon=True)
        runner.start()
        start_at.wait(timeout=300)
        runner.join()
        return sum(committed) / (time.perf_counter() - (deadline[0] - seconds))

    def ctp_latencies(self, mode: str, samples: int) -> list[float]:
        source, sink = self.topic(mode), self.topic(mode)
        value = b"c" * 1024
        feeder = self._producer(**{"linger.ms": 0})
        producer = self._producer(**{"linger.ms": 0, "transactional.id": f"yard-ctp-{uuid.uuid4().hex[:8]}"})
        common = {"bootstrap.servers": self.bootstrap, "enable.auto.commit": False, "fetch.wait.max.ms": 100,
                  "isolation.level": "read_committed"}  # fmt: skip
        consumer = KConsumer({**common, "group.id": f"yard-{uuid.uuid4().hex[:8]}"})
        reader = KConsumer({**common, "group.id": f"yard-{uuid.uuid4().hex[:8]}"})
        consumer.assign([KTopicPartition(source, 0, 0)])
        reader.assign([KTopicPartition(sink, 0, 0)])
        producer.init_transactions(120)
        latencies: list[float] = []

        def poll_one(c: KConsumer) -> object:
            while True:
                message = c.poll(1.0)
                if message is not None and message.error() is None:
                    return message
                if message is not None and message.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(message.error())

        try:
            for i in range(samples + 1):
                feeder.produce(source, value, partition=0)
                assert feeder.flush(60) == 0
                start = time.perf_counter()
                record = poll_one(consumer)
                producer.begin_transaction()
                producer.produce(sink, record.value(), partition=0)  # type: ignore[attr-defined]
                producer.send_offsets_to_transaction(
                    [KTopicPartition(source, 0, record.offset() + 1)],  # type: ignore[attr-defined]
                    consumer.consumer_group_metadata(),
                    60,
                )
                producer.commit_transaction(60)
                poll_one(reader)
                if i:
                    latencies.append(time.perf_counter() - start)
        finally:
            consumer.close()
            reader.close()
        return latencies


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, by linear interpolation."""
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=1000, method="inclusive")[max(0, min(998, round(q * 1000) - 1))]
