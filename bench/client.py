"""Client library: transactional vs idempotent throughput, consume-transform-produce latency, and a Redis baseline.

    python -m bench.client [--runs 5] [--seconds 2]

All three measurements run in one process against one LocalCluster (one storage node, topics ``flush=sync``):

1. Throughput: one producer sends 1 KiB records to one partition back to back for ``--seconds``; the
   idempotent producer flushes at the end, the transactional one commits every 100 ms (design/kafka-semantics.md §1.1).
   The ratio
   transactional ÷ idempotent is the cost of transactions on throughput (target >= 0.98).
2. Latency of one record through a consume-transform-produce loop, from the moment the consumer can fetch
   it until a read_committed reader of the output sees the result: poll, produce, send the offsets to the
   transaction, commit (markers written); against poll, idempotent produce acknowledged, plain offset
   commit. The ratio of the p50s is the cost of transactions on latency (target <= 3x).
3. Records per second of the idempotent producer against Redis: a ``redis-server`` started here on a free
   port, fed by redis-py with MULTI/EXEC pipelines of XADDs of 1 KiB values, as many per transaction as the
   producer put in its batches in the same run. Redis runs with ``appendfsync always`` (every acknowledged
   write is on disk, like a ``flush=sync`` topic) and, as a second line, without persistence. The producer
   is measured twice: with ``send()`` per record (the Kafka-style API, also the figure of measurement 1) and
   with ``send_batch()`` of 64 records per call, the bulk API documented for high throughput and the fair
   counterpart of a pipeline of XADDs; the headline ratio to Redis is the ``send_batch()`` line.

Each figure is the median of ``--runs`` runs with its spread ((max - min) / median). Runs interleave the
measurements so the ratios compare figures taken under the same machine load; the machine is shared. A
ratio is therefore the median of the per-run ratios (each of two figures measured back to back), as in
``bench.storage``; the ratio of the two medians, which a load change between runs moves, is shown next to it.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis

from bench.common import Series
from oncelog.client import AdminClient, Consumer, NewTopic, OffsetAndMetadata, Producer, TopicPartition
from oncelog.testing import LocalCluster
from oncelog.testing.servers import redis_server as shared_redis_server

VALUE = b"v" * 1024
BATCH_SIZE = 64 * 1024
LINGER_MS = 5
COMMIT_INTERVAL_S = 0.1
BULK_RECORDS = 64

_ids = itertools.count()


def _new_topic(bootstrap: str, prefix: str) -> str:
    name = f"{prefix}-{next(_ids)}-{uuid.uuid4().hex[:6]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=1, configs={"flush": "sync"})])
    return name


# ---------------------------------------------------------------------------------------------- throughput


def idempotent_throughput(bootstrap: str, seconds: float) -> tuple[float, float]:
    """Acknowledged records per second and the mean records per batch of an idempotent producer."""
    topic = _new_topic(bootstrap, "bench-idem")
    with Producer(bootstrap, batch_size=BATCH_SIZE, linger_ms=LINGER_MS) as producer:
        producer.send(topic, VALUE).result()  # metadata and producer id outside the timed part
        batches_before = producer.metrics()["batches_sent"]
        sent = 0
        start = time.perf_counter()
        deadline = start + seconds
        last = None
        while time.perf_counter() < deadline:
            last = producer.send(topic, VALUE)
            sent += 1
        producer.flush()
        elapsed = time.perf_counter() - start
        assert last is not None
        last.result()  # a failed record would make the figure meaningless
        batches = producer.metrics()["batches_sent"] - batches_before
    return sent / elapsed, sent / max(batches, 1)


def bulk_throughput(bootstrap: str, seconds: float) -> float:
    """Acknowledged records per second of an idempotent producer using ``send_batch()`` (64 records a call)."""
    topic = _new_topic(bootstrap, "bench-bulk")
    values = [VALUE] * BULK_RECORDS
    with Producer(bootstrap, batch_size=BATCH_SIZE, linger_ms=LINGER_MS) as producer:
        producer.send(topic, VALUE).result()
        sent = 0
        start = time.perf_counter()
        deadline = start + seconds
        last = None
        while time.perf_counter() < deadline:
            last = producer.send_batch(topic, values)
            sent += BULK_RECORDS
        producer.flush()
        elapsed = time.perf_counter() - start
        assert last is not None
        last.result()
    return sent / elapsed


def transactional_throughput(bootstrap: str, seconds: float) -> float:
    """Committed records per second of a transactional producer committing every 100 ms."""
    topic = _new_topic(bootstrap, "bench-txn")
    with Producer(
        bootstrap, transactional_id=f"bench-{uuid.uuid4().hex[:8]}", batch_size=BATCH_SIZE, linger_ms=LINGER_MS
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, VALUE)
        producer.commit_transaction()
        committed = 0
        start = time.perf_counter()
        deadline = start + seconds
        while (now := time.perf_counter()) < deadline:
            producer.begin_transaction()
            commit_at = min(now + COMMIT_INTERVAL_S, deadline)
            in_txn = 0
            while time.perf_counter() < commit_at:
                producer.send(topic, VALUE)
                in_txn += 1
            producer.commit_transaction()
            committed += in_txn
        elapsed = time.perf_counter() - start
    return committed / elapsed


# ---------------------------------------------------------------------------------------------- latency


def _poll_one(consumer: Consumer) -> list:
    while not (records := consumer.poll(timeout_ms=1000, max_records=1)):
        pass
    return records


def ctp_latencies(bootstrap: str, seconds: float, *, transactional: bool) -> list[float]:
    """Seconds per record through consume-transform-produce, until a read_committed reader sees the output."""
    source, sink = _new_topic(bootstrap, "bench-in"), _new_topic(bootstrap, "bench-out")
    source_tp, sink_tp = TopicPartition(source, 0), TopicPartition(sink, 0)
    group = f"bench-ctp-{uuid.uuid4().hex[:8]}"
    kwargs = {"transactional_id": f"bench-ctp-{uuid.uuid4().hex[:8]}"} if transactional else {}
    latencies: list[float] = []
    with (
        Producer(bootstrap, linger_ms=0) as feeder,
        Producer(bootstrap, linger_ms=0, **kwargs) as producer,
        Consumer(bootstrap, group_id=group, isolation_level="read_committed") as consumer,
        Consumer(bootstrap, isolation_level="read_committed") as reader,
    ):
        consumer.assign([source_tp])
        consumer.seek(source_tp, 0)
        reader.assign([sink_tp])
        reader.seek(sink_tp, 0)
        if transactional:
            producer.init_transactions()
        deadline = time.perf_counter() + seconds
        warm_up = True
        while warm_up or time.perf_counter() < deadline:
            feeder.send(source, VALUE).result()
            start = time.perf_counter()
            (record,) = _poll_one(consumer)
            offsets = {source_tp: OffsetAndMetadata(record.offset + 1)}
            if transactional:
                producer.begin_transaction()
                producer.send(sink, record.value)
                producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
                producer.commit_transaction()
            else:
                producer.send(sink, record.value).result()
                consumer.commit(offsets)
            _poll_one(reader)
            if not warm_up:
                latencies.append(time.perf_counter() - start)
            warm_up = False
    return latencies


# ---------------------------------------------------------------------------------------------- Redis


@contextmanager
def redis_server(*, fsync_always: bool) -> Iterator[redis.Redis]:
    """A client of a throwaway ``redis-server`` (AOF ``appendfsync always`` or no persistence)."""
    with shared_redis_server(fsync_always=fsync_always) as url:
        client = redis.Redis.from_url(url)
        try:
            yield client
        finally:
            client.close()


def redis_throughput(client: redis.Redis, records_per_txn: int, seconds: float) -> float:
    """XADD records per second, ``records_per_txn`` per MULTI/EXEC pipeline, back to back."""
    stream = f"bench-{uuid.uuid4().hex[:6]}"
    written = 0
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline:
        pipe = client.pipeline(transaction=True)
        for _ in range(records_per_txn):
            pipe.xadd(stream, {"v": VALUE})
        pipe.execute()
        written += records_per_txn
    elapsed = time.perf_counter() - start
    client.delete(stream)
    return written / elapsed


# ---------------------------------------------------------------------------------------------- driver


def _per_run_ratio(series: Series, baseline: Series) -> float:
    """The median of the ratios of the runs taken side by side (run i of ``series`` against run i of ``baseline``)."""
    return statistics.median(s / b for s, b in zip(series.rates, baseline.rates, strict=True))


def _ratio_table(title: str, rows: list[tuple[str, Series, Series | None]]) -> str:
    """Like ``bench.common.report``, with the ratio taken per run (see the module docstring)."""
    lines = [
        f"### {title}",
        "",
        "| measurement | median /s | spread | runs | ratio to baseline (median of per-run ratios; of medians) |",
        "|---|---|---|---|---|",
    ]
    for label, series, baseline in rows:
        ratio = "baseline"
        if baseline is not None:
            ratio = f"{_per_run_ratio(series, baseline):.3f}; {series.median / baseline.median:.3f} of {baseline.name}"
        lines.append(f"| {label} | {series.median:,.0f} | {series.spread:.0%} | {len(series.rates)} | {ratio} |")
    return "\n".join(lines)


def _latency_table(rows: list[tuple[str, Series, Series | None]]) -> str:
    lines = [
        "### consume-transform-produce latency of one record (p50 per run)",
        "",
        "| path | median p50 ms | spread | runs | ratio to baseline |",
        "|---|---|---|---|---|",
    ]
    for label, series, baseline in rows:
        ratio = "baseline"
        if baseline is not None:
            ratio = (
                f"{_per_run_ratio(series, baseline):.2f}x {baseline.name} "
                f"(of medians {series.median / baseline.median:.2f}x)"
            )
        lines.append(f"| {label} | {series.median:.1f} | {series.spread:.0%} | {len(series.rates)} | {ratio} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=2.0)
    args = parser.parse_args()

    idem = Series("idempotent", [])
    txn = Series("transactional", [])
    plain_ms = Series("plain", [])
    txn_ms = Series("transaction", [])
    redis_always = Series("Redis fsync always", [])
    redis_memory = Series("Redis no persistence", [])
    idem_vs_always = Series("Redis fsync always", [])
    bulk = Series("send_batch", [])
    bulk_vs_memory = Series("send_batch", [])
    batch_records: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-client-") as tmp,
        LocalCluster(Path(tmp, "cluster"), storage_nodes=1) as cluster,
        redis_server(fsync_always=True) as aof,
        redis_server(fsync_always=False) as memory,
    ):
        bootstrap = cluster.bootstrap
        for run in range(args.runs):
            idem_rate, per_batch = idempotent_throughput(bootstrap, args.seconds)
            idem.rates.append(idem_rate)
            idem_vs_always.rates.append(idem_rate)
            batch_records.append(per_batch)
            txn.rates.append(transactional_throughput(bootstrap, args.seconds))
            bulk_rate = bulk_throughput(bootstrap, args.seconds)
            bulk.rates.append(bulk_rate)
            bulk_vs_memory.rates.append(bulk_rate)
            records_per_txn = max(1, round(per_batch))
            redis_always.rates.append(redis_throughput(aof, records_per_txn, args.seconds))
            redis_memory.rates.append(redis_throughput(memory, records_per_txn, args.seconds))
            plain_ms.rates.append(statistics.median(ctp_latencies(bootstrap, args.seconds, transactional=False)) * 1000)
            txn_ms.rates.append(statistics.median(ctp_latencies(bootstrap, args.seconds, transactional=True)) * 1000)
            print(f"run {run + 1}/{args.runs} done", flush=True)

    print()
    print(
        _ratio_table(
            "produce throughput, 1 KiB records, one partition (records/s)",
            [("idempotent, flush at end", idem, None), ("transactional, commit every 100 ms", txn, idem)],
        )
    )
    print()
    print(_latency_table([("plain produce + offset commit", plain_ms, None), ("transaction", txn_ms, plain_ms)]))
    print()
    print(
        _ratio_table(
            f"producer vs Redis MULTI/EXEC XADD (records/s, {statistics.median(batch_records):.0f} records per"
            " batch / per MULTI)",
            [
                ("Redis MULTI/EXEC XADD, appendfsync always", redis_always, None),
                ("Redis MULTI/EXEC XADD, no persistence", redis_memory, None),
                ("oncelog idempotent producer, send()", idem_vs_always, redis_always),
                ("oncelog idempotent producer, send()", idem, redis_memory),
                (f"oncelog idempotent producer, send_batch() of {BULK_RECORDS}", bulk, redis_always),
                (f"oncelog idempotent producer, send_batch() of {BULK_RECORDS}", bulk_vs_memory, redis_memory),
            ],
        )
    )


if __name__ == "__main__":
    main()
