"""Partition-storage produce and fetch throughput against a bare gRPC + file-append ceiling.

    python -m bench.storage [--runs 5] [--seconds 1.5]

Produce: idempotent producers send 1 KiB records in 256 KiB RecordBatch v2 batches over ProduceStream, up to
5 batches in flight each (the client library's limit), all to one partition, with 1 and 4 producers, on a
``flush=sync`` topic (fsync before the ack) and a ``flush=async`` one. The baseline, measured in the same run
with the same client code and messages, is a bare servicer in its own process that appends each request's
bytes to one file (and fsyncs after each append when fsync is on): the raw gRPC + file-append ceiling. The
storage figure is reported as a ratio of it (target >= 0.5).

Fetch: a partition preloaded with committed, aborted and plain data is read from start to end in 1 MiB
fetches, read_committed and read_uncommitted; their ratio is the cost of the LSO bound and the
aborted-transaction lookups (target >= 0.9).

Replication (``--replication``, instead of the above): three storage nodes; topics with replication factor 3
(``flush=sync``: every in-sync replica fsyncs before the ack; ``flush=leader``: only the leader does, followers
right after, close to Kafka's default) and one with factor 1 (``flush=sync``), produced to in alternation in each
run: throughput as above (1 producer, 256 KiB batches, 5 in flight) and the p50 latency of 16 KiB acks=all
produces sent one at a time. Goals (issue 15): throughput ratio RF 3 / RF 1 >= 0.5, p50 latency ratio <= 2. A last
pair, RF 3 against RF 1 both ``flush=async``, takes fsync out and shows what the replication round trips cost alone.

Each figure is the median of ``--runs`` runs with its spread ((max - min) / median). The machine is shared;
compare ratios measured back to back rather than absolute figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import google_crc32c
import grpc

from bench.common import Series
from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.common import v1 as common
from oncelog.api.storage import v1 as pb
from oncelog.api.storage.v1 import partition_storage_service_pb2
from oncelog.records import Record, build_batch, iter_batches
from oncelog.rpc import aio_channel
from oncelog.testing import LocalCluster

RECORD_VALUE = 1014  # with its varint framing a record takes 1 KiB
RECORDS_PER_BATCH = 255  # 255 KiB of records + the 61-byte header: one 256 KiB batch
IN_FLIGHT = 5
_MB = 1_000_000


def template(producer_id: int) -> bytearray:
    """One 256 KiB idempotent batch; :func:`restamp` gives it a new sequence without re-encoding."""
    value = os.urandom(RECORD_VALUE)
    records = [Record(key=None, value=value, timestamp=1_700_000_000_000) for _ in range(RECORDS_PER_BATCH)]
    return bytearray(build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=0))


def restamp(batch: bytearray, base_sequence: int) -> bytes:
    struct.pack_into(">i", batch, 53, base_sequence)
    struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
    return bytes(batch)


# ------------------------------------------------------------------------------------------------ baseline


class _FileAppendServicer:
    """The ceiling: append each request's bytes to one file, fsync if asked, acknowledge."""

    def __init__(self, path: Path, fsync: bool) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._fsync = fsync
        self._size = 0

    async def produce_stream(
        self, request_iterator: AsyncIterator[pb.ProduceStreamRequest], context: object
    ) -> AsyncIterator[pb.ProduceStreamResponse]:
        async for item in request_iterator:
            part = item.request.partitions[0]
            os.write(self._fd, part.records)
            self._size += len(part.records)
            if self._fsync:
                await asyncio.to_thread(os.fsync, self._fd)
            if self._size > 1 << 30:
                os.ftruncate(self._fd, 0)
                self._size = 0
            yield pb.ProduceStreamResponse(
                correlation_id=item.correlation_id,
                response=pb.ProduceResponse(results=[pb.PartitionProduceResult(topic_partition=part.topic_partition)]),
            )


async def _serve_baseline(directory: Path, fsync: bool, ready: Path) -> None:
    server = grpc.aio.server(
        options=[("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    )
    servicer = _FileAppendServicer(directory / "baseline.log", fsync)
    handler = grpc.stream_stream_rpc_method_handler(
        servicer.produce_stream,
        request_deserializer=pb.ProduceStreamRequest.FromString,
        response_serializer=pb.ProduceStreamResponse.SerializeToString,
    )
    service = partition_storage_service_pb2.DESCRIPTOR.services_by_name["PartitionStorageService"].full_name
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, {"ProduceStream": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    ready.write_text(json.dumps({"address": f"127.0.0.1:{port}"}))
    await server.wait_for_termination()


def _start_baseline(directory: Path, fsync: bool) -> tuple[subprocess.Popen[bytes], str]:
    ready = directory / f"baseline-{int(fsync)}.json"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.storage",
            "--serve-baseline",
            str(directory),
            "--fsync",
            str(int(fsync)),
            "--ready",
            str(ready),
        ]
    )
    deadline = time.monotonic() + 30
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("baseline server did not start")
        time.sleep(0.05)
    return process, json.loads(ready.read_text())["address"]


# ------------------------------------------------------------------------------------------------- produce


async def _produce(address: str, tp: common.TopicPartition, producer_id: int, seconds: float) -> tuple[int, float]:
    """One producer: ProduceStream with 5 batches in flight for ``seconds``; returns (acked bytes, elapsed)."""
    batch = template(producer_id)
    window = asyncio.Semaphore(IN_FLIGHT)
    start = time.perf_counter()
    deadline = start + seconds
    acked = 0
    last_ack = start

    async def requests():
        seq = 0
        while time.perf_counter() < deadline:
            await window.acquire()
            yield pb.ProduceStreamRequest(
                correlation_id=seq,
                request=pb.ProduceRequest(
                    partitions=[
                        pb.PartitionBatches(
                            topic_partition=tp, leader_epoch=-1, records=restamp(batch, seq * RECORDS_PER_BATCH)
                        )
                    ]
                ),
            )
            seq += 1

    async with aio_channel(address) as channel:
        stub = pb.PartitionStorageServiceStub(channel)
        async for response in stub.ProduceStream(requests()):
            [result] = response.response.results
            if result.HasField("error"):
                raise RuntimeError(f"produce failed: {result.error.message}")
            acked += len(batch)
            last_ack = time.perf_counter()
            window.release()
    return acked, last_ack - start


async def _produce_rate(
    address: str, tp: common.TopicPartition, producers: int, first_pid: int, seconds: float
) -> float:
    outcomes = await asyncio.gather(*(_produce(address, tp, first_pid + i, seconds) for i in range(producers)))
    return sum(acked for acked, _ in outcomes) / max(elapsed for _, elapsed in outcomes) / _MB


# --------------------------------------------------------------------------------------------------- fetch


async def _preload(address: str, tp: common.TopicPartition, megabytes: int) -> None:
    """Plain, committed and aborted transactional batches, interleaved, up to ``megabytes``."""
    async with aio_channel(address) as channel:
        stub = pb.PartitionStorageServiceStub(channel)
        written, round_ = 0, 0
        value = os.urandom(RECORD_VALUE)
        records = [Record(key=None, value=value, timestamp=1) for _ in range(64)]
        while written < megabytes * _MB:
            for pid, txn in ((9001, False), (9002 + round_ * 2, True), (9003 + round_ * 2, True)):
                seq = round_ * 64 if not txn else 0
                data = build_batch(records, producer_id=pid, producer_epoch=0, base_sequence=seq, transactional=txn)
                request = pb.ProduceRequest(
                    partitions=[pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=data)]
                )
                [result] = (await stub.Produce(request)).results
                assert not result.HasField("error"), result.error.message
                written += len(data)
            markers = [
                common.TxnMarker(
                    producer=common.ProducerIdentity(producer_id=9002 + round_ * 2 + k, producer_epoch=1),
                    coordinator_epoch=0,
                    result=common.TRANSACTION_RESULT_COMMIT if k == 0 else common.TRANSACTION_RESULT_ABORT,
                    partitions=[tp],
                )
                for k in (0, 1)
            ]
            await stub.WriteTxnMarkers(pb.WriteTxnMarkersRequest(markers=markers))
            round_ += 1


async def _fetch_rate(address: str, tp: common.TopicPartition, isolation: pb.IsolationLevel.ValueType) -> float:
    async with aio_channel(address) as channel:
        stub = pb.PartitionStorageServiceStub(channel)
        offset, total = 0, 0
        start = time.perf_counter()
        while True:
            request = pb.FetchRequest(
                partitions=[
                    pb.FetchPartition(topic_partition=tp, fetch_offset=offset, max_bytes=1 << 20, leader_epoch=-1)
                ],
                isolation_level=isolation,
            )
            [result] = (await stub.Fetch(request)).results
            if not result.records:
                break
            total += len(result.records)
            offset = list(iter_batches(result.records))[-1][0].next_offset
        return total / (time.perf_counter() - start) / _MB


# ---------------------------------------------------------------------------------------------------- main


def _create(address: str, name: str, **configs: str) -> common.TopicPartition:
    channel = grpc.insecure_channel(address)
    cluster_pb.ClusterServiceStub(channel).CreateTopics(
        cluster_pb.CreateTopicsRequest(topics=[cluster_pb.TopicSpec(name=name, partitions=1, configs=configs)])
    )
    channel.close()
    return common.TopicPartition(topic=name, partition=0)


def _figure(series: Series, unit: str = "MB/s") -> str:
    return f"{series.median:,.0f} {unit} ({series.spread:.0%})"


def _ms(series: Series) -> str:
    return f"{series.median:.1f} ms ({series.spread:.0%})"


def _ratio(series: Series, baseline: Series) -> Series:
    """Per-run ratios: each run of ``series`` was measured right after the same run of ``baseline``."""
    return Series(f"{series.name}/{baseline.name}", [a / b for a, b in zip(series.rates, baseline.rates, strict=True)])


async def _run(runs: int, seconds: float, fetch_mb: int) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp:
        root = Path(tmp)
        env = {"ONCELOG_PARTITION_STORAGE_RETENTION_CHECK_INTERVAL_MS": "1000"}
        with LocalCluster(root / "cluster", services=("partition-storage",), env=env) as cluster:
            address = cluster.addresses("partition-storage")[0]
            retention = {"retention_bytes": str(1 << 30), "segment_bytes": str(128 << 20)}
            topics = {
                True: _create(address, "bench.sync", flush="sync", **retention),
                False: _create(address, "bench.async", flush="async", **retention),
            }
            lines = [
                "### Idempotent produce: 1 KiB records, 256 KiB batches, 5 in flight per producer, one partition",
                "",
                "median (spread) of the runs; the ratio is the median of per-run ratios (target >= 0.5)",
                "",
                "| fsync | producers | ceiling (bare servicer + file append) | partition-storage | records/s | ratio |",
                "|---|---|---|---|---|---|",
            ]
            pid = 1
            for fsync in (True, False):
                baseline_process, baseline_address = _start_baseline(root, fsync)
                try:
                    for producers in (1, 4):
                        ceiling, storage = Series("ceiling", []), Series("storage", [])
                        for _ in range(runs):
                            ceiling.rates.append(
                                await _produce_rate(baseline_address, topics[fsync], producers, pid, seconds)
                            )
                            storage.rates.append(await _produce_rate(address, topics[fsync], producers, pid, seconds))
                            pid += producers
                        records = Series("records", [rate * _MB / 1024 for rate in storage.rates])
                        ratio = _ratio(storage, ceiling)
                        lines.append(
                            f"| {'on' if fsync else 'off'} | {producers} | {_figure(ceiling)} | {_figure(storage)} "
                            f"| {_figure(records, 'rec/s')} | {ratio.median:.2f} ({ratio.spread:.0%}) |"
                        )
                finally:
                    baseline_process.terminate()
                    baseline_process.wait()
            fetch_tp = _create(address, "bench.fetch", flush="async")
            await _preload(address, fetch_tp, fetch_mb)
            committed, uncommitted = Series("read_committed", []), Series("read_uncommitted", [])
            for _ in range(runs):
                uncommitted.rates.append(await _fetch_rate(address, fetch_tp, pb.ISOLATION_LEVEL_READ_UNCOMMITTED))
                committed.rates.append(await _fetch_rate(address, fetch_tp, pb.ISOLATION_LEVEL_READ_COMMITTED))
            ratio = _ratio(committed, uncommitted)
            lines += [
                "",
                f"### Fetch of {fetch_mb} MB (plain, committed and aborted batches interleaved), 1 MiB per fetch",
                "",
                "| read_uncommitted | read_committed | ratio (target >= 0.9) |",
                "|---|---|---|",
                f"| {_figure(uncommitted)} | {_figure(committed)} | {ratio.median:.2f} ({ratio.spread:.0%}) |",
            ]
            print("\n".join(lines))


async def _p50_latency_ms(address: str, tp: common.TopicPartition, producer_id: int, seconds: float) -> float:
    """Median latency of acks=all Produce calls of one 16 KiB idempotent batch, one at a time."""
    value = os.urandom(RECORD_VALUE)
    records = [Record(key=None, value=value, timestamp=1_700_000_000_000) for _ in range(16)]
    latencies: list[float] = []
    async with aio_channel(address) as channel:
        stub = pb.PartitionStorageServiceStub(channel)
        deadline = time.perf_counter() + seconds
        seq = 0
        while time.perf_counter() < deadline:
            data = build_batch(records, producer_id=producer_id, producer_epoch=0, base_sequence=seq * 16)
            batches = pb.PartitionBatches(topic_partition=tp, leader_epoch=-1, records=data)
            start = time.perf_counter()
            [result] = (await stub.Produce(pb.ProduceRequest(acks=pb.ACKS_ALL, partitions=[batches]))).results
            latencies.append((time.perf_counter() - start) * 1000)
            if result.HasField("error"):
                raise RuntimeError(f"produce failed: {result.error.message}")
            seq += 1
    return statistics.median(latencies)


def _leader(bootstrap: str, topic: str) -> str:
    channel = grpc.insecure_channel(bootstrap)
    meta = cluster_pb.ClusterServiceStub(channel).Metadata(cluster_pb.MetadataRequest(topics=[topic]), timeout=30)
    channel.close()
    return meta.topics[0].partitions[0].leader_address


async def _run_replication(runs: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-replication-") as tmp:
        env = {"ONCELOG_PARTITION_STORAGE_RETENTION_CHECK_INTERVAL_MS": "1000"}
        with LocalCluster(Path(tmp), storage_nodes=3, services=("partition-storage",), env=env) as cluster:
            retention = {"retention_bytes": str(1 << 30), "segment_bytes": str(128 << 20)}
            variants = {
                "rf1": (1, "sync"),
                "rf3": (3, "sync"),
                "rf3-leader": (3, "leader"),
                "rf1-async": (1, "async"),
                "rf3-async": (3, "async"),
            }
            channel = grpc.insecure_channel(cluster.bootstrap)
            cluster_pb.ClusterServiceStub(channel).CreateTopics(
                cluster_pb.CreateTopicsRequest(
                    topics=[
                        cluster_pb.TopicSpec(
                            name=f"bench.{name}",
                            partitions=1,
                            configs={**retention, "flush": flush},
                            replication_factor=rf,
                        )
                        for name, (rf, flush) in variants.items()
                    ]
                ),
                timeout=30,
            )
            channel.close()
            targets = {
                name: (_leader(cluster.bootstrap, f"bench.{name}"), common.TopicPartition(topic=f"bench.{name}"))
                for name in variants
            }
            rates = {name: Series(name, []) for name in variants}
            p50s = {name: Series(f"{name} p50", []) for name in variants}
            pid = 1
            for _ in range(runs):
                for name in ("rf3", "rf3-leader", "rf1", "rf3-async", "rf1-async"):
                    address, tp = targets[name]
                    rates[name].rates.append(await _produce_rate(address, tp, 1, pid, seconds))
                    p50s[name].rates.append(await _p50_latency_ms(address, tp, pid + 1, seconds))
                    pid += 2
            lines = [
                "### Replication: RF 3 acks=all against RF 1 (flush=sync), 3 storage nodes, interleaved runs",
                "",
                "median (spread) of the runs; each ratio is the median of per-run ratios",
                "",
                "| measurement | RF 1 flush=sync | RF 3 | ratio RF 3 / RF 1 | goal |",
                "|---|---|---|---|---|",
            ]
            for name, flush in (("rf3", "sync"), ("rf3-leader", "leader")):
                throughput, latency = _ratio(rates[name], rates["rf1"]), _ratio(p50s[name], p50s["rf1"])
                lines += [
                    f"| throughput, RF 3 flush={flush}, 1 producer, 256 KiB batches, 5 in flight | "
                    f"{_figure(rates['rf1'])} | {_figure(rates[name])} | {throughput.median:.2f} "
                    f"({throughput.spread:.0%}) | >= 0.5 |",
                    f"| p50 latency, RF 3 flush={flush}, 16 KiB batch, one at a time | {_ms(p50s['rf1'])} | "
                    f"{_ms(p50s[name])} | {latency.median:.2f} ({latency.spread:.0%}) | <= 2 |",
                ]
            # diagnostic: no fsync anywhere, so what is left is the replication round trips themselves
            throughput, latency = (
                _ratio(rates["rf3-async"], rates["rf1-async"]),
                _ratio(p50s["rf3-async"], p50s["rf1-async"]),
            )
            lines += [
                f"| throughput, RF 3 ÷ RF 1 both flush=async (no fsync: the round trips alone) | "
                f"{_figure(rates['rf1-async'])} | {_figure(rates['rf3-async'])} | {throughput.median:.2f} "
                f"({throughput.spread:.0%}) | - |",
                f"| p50 latency, RF 3 ÷ RF 1 both flush=async | {_ms(p50s['rf1-async'])} | {_ms(p50s['rf3-async'])} | "
                f"{latency.median:.2f} ({latency.spread:.0%}) | - |",
            ]
            print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--fetch-mb", type=int, default=200)
    parser.add_argument("--replication", action="store_true", help="RF 3 acks=all against RF 1 instead")
    parser.add_argument("--serve-baseline", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--fsync", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--ready", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_baseline is not None:
        asyncio.run(_serve_baseline(args.serve_baseline, bool(args.fsync), args.ready))
        return
    if args.replication:
        asyncio.run(_run_replication(args.runs, args.seconds))
        return
    asyncio.run(_run(args.runs, args.seconds, args.fetch_mb))


if __name__ == "__main__":
    main()
