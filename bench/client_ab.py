"""The client's hot paths, this checkout against an older revision, in one interleaved run.

    python -m bench.client_ab --base 9800ce7 [--runs 5]
                              [--parts ctp,send,consume,gateway,txn,produce,smalltxn,grpc,sparkread]
                              [--ctp-samples 60] [--records 30000] [--transactions 200] [--buffer-memory 33554432]
                              [--producers 8]
    python -m bench.client_ab --one txn [--transactions 100]    # one part, this checkout only, figures as JSON

Each measurement (but ``grpc``) runs on a fresh LocalCluster with one storage node and ``flush=async`` topics:

* ``ctp``: consume-transform-produce transactions with oncelog's client (poll one record, send it on, send the
  consumer's offset, commit, wait until a read_committed reader sees it), the p50 of the whole and of each phase;
* ``send``: per-record ``send()`` of 100-byte records, records per second (best of three rounds);
* ``consume``: a read_committed consumer reading 64,000 records of 100 bytes again and again, records per second
  (best of three rounds); then the yardstick's consume rows, MB/s of ``poll()`` and of ``poll_arrow()`` over
  51,200 records of 1 KiB (best of three rounds each, in turn);
* ``txn``: the yardstick's transactional producer (1 KiB ``send()`` for 100 ms, then commit) timed phase by
  phase, the p50 of each over ``--transactions`` transactions: the next transaction's first ``send()`` and the
  acknowledgement of its record (AddPartitionsToTxn, which waits for the previous transaction's markers, then the
  linger and the Produce), the produce window's records per second, ``flush()``, then the commit of what is
  already sent (EndTxn alone); also the share of the wall time spent in the window, the records per second over
  all, and an idempotent producer's rate on the same cluster right after, and their ratio;
* ``produce``: 1 KiB records with ``send_batch()`` (64 a call) and with per-record ``send()``, 64 KiB batches, three
  rounds of 50,000 each: the median records per second, the CPU seconds per GB of the cluster's processes
  (``/proc``), and produce requests per batch sent (below 1 when requests carry several batches of a partition);
* ``smalltxn``: the yardstick's small transactions (4 partitions x 1 record of 100 B, one client per thread) from
  ``--producers`` threads for 8 s: transactions per second and the CPU milliseconds each process spends per
  transaction (``/proc``: coordinator, storage, group-offsets, pid-allocator, and this client process);
* ``grpc``: the floor under every server figure: one trivial unary call (gRPC's health check on a bare
  ``grpc.aio`` server in a child process, no interceptor), CPU microseconds of the server and of the client per
  call, and the wall time per call;
* ``sparkread``: the Spark source's task-side ``read()`` (called as an executor calls it, no JVM) over 2 x
  ``--records`` records of 100 bytes in one partition, rows per second (best of three rounds);
* ``gateway``: one-record transactions of confluent-kafka (librdkafka) through a kafka-gateway, their p50 and the
  CPU milliseconds the gateway and the services spent per transaction (``/proc``).

``--base`` is checked out into a temporary git worktree; its runs put that worktree's ``libs`` and ``services``
first on ``PYTHONPATH`` (the processes the cluster starts inherit it), so the base side runs the base's client and
services. The sides alternate (base, this, base, this, ...); each figure is the median of ``--runs`` runs with its
spread ((max - min) / median), and the ratio is the median of the per-run ratios (this ÷ base).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSUME_1K_RECORDS = 51_200
PARTS = ("ctp", "send", "consume", "gateway", "txn", "produce", "smalltxn", "grpc", "sparkread")


def ctp(samples: int) -> dict[str, float]:
    """p50 milliseconds of each phase of ``samples`` consume-transform-produce transactions, and of the whole."""
    from oncelog.client import AdminClient, Consumer, NewTopic, OffsetAndMetadata, Producer, TopicPartition
    from oncelog.testing import LocalCluster

    phases: dict[str, list[float]] = {k: [] for k in ("poll", "send", "send_offsets", "commit", "visible", "total")}
    with (
        tempfile.TemporaryDirectory(prefix="ab-ctp-") as scratch,
        LocalCluster(Path(scratch), storage_nodes=1) as cluster,
    ):
        bootstrap = cluster.bootstrap
        source, sink = (f"ab-{uuid.uuid4().hex[:6]}" for _ in range(2))
        with AdminClient(bootstrap) as admin:
            admin.create_topics([NewTopic(t, num_partitions=1, configs={"flush": "async"}) for t in (source, sink)])
        source_tp, sink_tp = TopicPartition(source, 0), TopicPartition(sink, 0)
        with (
            Producer(bootstrap, linger_ms=0) as feeder,
            Producer(bootstrap, linger_ms=0, transactional_id=f"ab-{uuid.uuid4().hex[:8]}") as producer,
            Consumer(bootstrap, group_id=f"ab-{uuid.uuid4().hex[:8]}", fetch_max_wait_ms=100) as consumer,
            Consumer(bootstrap, isolation_level="read_committed", fetch_max_wait_ms=100) as reader,
        ):
            consumer.assign([source_tp])
            consumer.seek(source_tp, 0)
            reader.assign([sink_tp])
            reader.seek(sink_tp, 0)
            producer.init_transactions()
            for i in range(samples + 1):  # the first is a warm-up
                feeder.send(source, b"c" * 1024, partition=0).result()
                marks = [time.perf_counter()]
                while not (records := consumer.poll(timeout_ms=1000, max_records=1)):
                    pass
                marks.append(time.perf_counter())
                producer.begin_transaction()
                producer.send(sink, records[0].value, partition=0)
                marks.append(time.perf_counter())
                producer.send_offsets_to_transaction(
                    {source_tp: OffsetAndMetadata(records[0].offset + 1)}, consumer.group_metadata()
                )
                marks.append(time.perf_counter())
                producer.commit_transaction()
                marks.append(time.perf_counter())
                while not reader.poll(timeout_ms=1000, max_records=1):
                    pass
                marks.append(time.perf_counter())
                if i:
                    for name, begin, end in zip(phases, marks, marks[1:], strict=False):
                        phases[name].append(end - begin)
                    phases["total"].append(marks[-1] - marks[0])
    return {name: statistics.median(values) * 1000 for name, values in phases.items()}


def send(records: int) -> dict[str, float]:
    """Records per second of per-record ``send()`` of 100 bytes (best of three rounds of ``records``)."""
    from oncelog.client import AdminClient, NewTopic, Producer
    from oncelog.testing import LocalCluster

    with (
        tempfile.TemporaryDirectory(prefix="ab-send-") as scratch,
        LocalCluster(Path(scratch), storage_nodes=1) as cluster,
    ):
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("ab", num_partitions=1, configs={"flush": "async"})])
        rates = []
        with Producer(cluster.bootstrap, batch_size=64 * 1024, linger_ms=5) as producer:
            producer.send("ab", b"x", partition=0).result()
            value = b"v" * 100
            for _ in range(3):
                start = time.perf_counter()
                for _ in range(records):
                    last = producer.send("ab", value, partition=0)
                producer.flush()
                last.result()
                rates.append(records / (time.perf_counter() - start))
    return {"records_per_s": max(rates)}


def _fill(bootstrap: str, topic: str, records: int, value: bytes, *, keyed: bool = False) -> None:
    """Create ``topic`` (one partition, ``flush=async``) and write ``records`` records of ``value``, 64 a call."""
    from oncelog.client import AdminClient, NewTopic, Producer

    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1, configs={"flush": "async"})])
    with Producer(bootstrap, batch_size=64 * 1024, linger_ms=5) as producer:
        for i in range(records // 64):
            producer.send_batch(topic, [value] * 64, keys=[b"k%d" % i] * 64 if keyed else None, partition=0)
        producer.flush()


def consume(records: int) -> dict[str, float]:
    """Records per second of a read_committed consumer over ``records`` records of 100 bytes (best of three); MB/s
    of ``poll()`` and of ``poll_arrow()`` over 51,200 records of 1 KiB (best of three, in turn)."""
    from bench.yardstick_sides import OncelogSide
    from oncelog.client import Consumer, TopicPartition
    from oncelog.testing import LocalCluster

    records = records // 64 * 64
    with (
        tempfile.TemporaryDirectory(prefix="ab-consume-") as scratch,
        LocalCluster(Path(scratch), storage_nodes=1) as cluster,
    ):
        _fill(cluster.bootstrap, "ab", records, b"v" * 100)
        tp = TopicPartition("ab", 0)
        rates = []
        for _ in range(3):
            with Consumer(cluster.bootstrap, isolation_level="read_committed") as consumer:
                consumer.assign([tp])
                consumer.seek(tp, 0)
                seen = 0
                start = time.perf_counter()
                while seen < records:
                    seen += len(consumer.poll(timeout_ms=1000, max_records=10_000))
                rates.append(records / (time.perf_counter() - start))
        # the yardstick's rows: 1 KiB records read as records and into Arrow, in turn
        _fill(cluster.bootstrap, "ab-1k", CONSUME_1K_RECORDS, b"v" * 1024)
        side = OncelogSide("oncelog", cluster.bootstrap, lambda: list(cluster.pids()))
        poll_mb_s, arrow_mb_s = [], []
        for _ in range(3):
            poll_mb_s.append(side.consume_mb_s("ab-1k", CONSUME_1K_RECORDS, 1024))
            arrow_mb_s.append(side.consume_mb_s("ab-1k", CONSUME_1K_RECORDS, 1024, arrow=True))
    return {"records_per_s": max(rates), "poll_1k_mb_s": max(poll_mb_s), "poll_arrow_1k_mb_s": max(arrow_mb_s)}


def spark_read(records: int) -> dict[str, float]:
    """Rows per second of the Spark source's task-side ``read()`` over ``records`` records of 100 bytes in one
    partition, called as a Spark executor calls it, without a JVM (best of three)."""
    from oncelog.spark import OncelogDataSource
    from oncelog.testing import LocalCluster

    records = records // 64 * 64
    with (
        tempfile.TemporaryDirectory(prefix="ab-sparkread-") as scratch,
        LocalCluster(Path(scratch), storage_nodes=1) as cluster,
    ):
        _fill(cluster.bootstrap, "ab", records, b"v" * 100, keyed=True)
        source = OncelogDataSource({"bootstrap": cluster.bootstrap, "topic": "ab"})
        reader = source.reader(source.schema())
        partitions = reader.partitions()
        rates = []
        for _ in range(3):
            start = time.perf_counter()
            rows = sum(len(batch) for partition in partitions for batch in reader.read(partition))
            rates.append(rows / (time.perf_counter() - start))
            assert rows == records, f"read {rows} of {records}"
    return {"rows_per_s": max(rates)}


def gateway(transactions: int) -> dict[str, float]:
    """p50 ms of ``transactions`` one-record transactions through a gateway, and server CPU ms per transaction."""
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka.admin import AdminClient, NewTopic

    from bench.yardstick_sides import process_cpu_seconds
    from oncelog.testing import LocalCluster
    from oncelog.testing.kafka import KafkaGatewayProcess

    with (
        tempfile.TemporaryDirectory(prefix="ab-gateway-") as scratch,
        LocalCluster(Path(scratch) / "cluster", storage_nodes=1) as cluster,
        KafkaGatewayProcess(cluster.bootstrap, Path(scratch) / "gateway") as gw,
    ):
        admin = AdminClient({"bootstrap.servers": gw.address})
        admin.create_topics([NewTopic("ab", 1, 1)])["ab"].result(60)
        producer = KafkaProducer({"bootstrap.servers": gw.address, "transactional.id": f"ab-{uuid.uuid4().hex[:8]}"})
        producer.init_transactions(60)

        def one() -> float:
            start = time.perf_counter()
            producer.begin_transaction()
            producer.produce("ab", b"v", partition=0)
            producer.commit_transaction(60)
            return time.perf_counter() - start

        for _ in range(20):  # warm-up
            one()
        pids = [*cluster.pids(), gw.process.pid]
        cpu = process_cpu_seconds(pids)
        times = [one() for _ in range(transactions)]
        cpu = process_cpu_seconds(pids) - cpu
    return {"p50_ms": statistics.median(times) * 1000, "server_cpu_ms_per_txn": cpu / transactions * 1000}


def txn(transactions: int, buffer_memory: int = 32 * 1024 * 1024) -> dict[str, float]:
    """p50 ms of each phase of a 100 ms transaction of 1 KiB ``send()`` (topic ``flush=async``), see the docstring."""
    from oncelog.client import AdminClient, NewTopic, Producer
    from oncelog.testing import LocalCluster

    window_s = 0.1
    phases: dict[str, list[float]] = {k: [] for k in ("flush", "end_txn", "first_send", "first_ack")}
    rates: list[float] = []
    with (
        tempfile.TemporaryDirectory(prefix="ab-txn-") as scratch,
        LocalCluster(Path(scratch), storage_nodes=1) as cluster,
    ):
        with AdminClient(cluster.bootstrap) as admin:
            admin.create_topics([NewTopic("ab", num_partitions=1, configs={"flush": "async"})])
        value = b"v" * 1024
        with Producer(
            cluster.bootstrap,
            transactional_id=f"ab-{uuid.uuid4().hex[:8]}",
            batch_size=64 * 1024,
            linger_ms=5,
            buffer_memory=buffer_memory,
        ) as producer:
            producer.init_transactions()
            producer.begin_transaction()
            producer.send("ab", value, partition=0)
            producer.commit_transaction()
            producing, total = 0.0, 0
            start = time.perf_counter()
            for i in range(transactions + 1):  # the first is a warm-up
                begin = time.perf_counter()
                producer.begin_transaction()
                acked: list[float] = []
                producer.send("ab", value, partition=0).add_done_callback(
                    lambda _, acked=acked: acked.append(time.perf_counter())
                )
                opened = time.perf_counter()
                sent = 1
                while time.perf_counter() - opened < window_s:
                    producer.send("ab", value, partition=0)
                    sent += 1
                closed = time.perf_counter()
                producer.flush()
                flushed = time.perf_counter()
                producer.commit_transaction()
                committed = time.perf_counter()
                if i == 0:
                    start = committed
                    continue
                phases["first_send"].append(opened - begin)
                phases["first_ack"].append(acked[0] - begin)
                phases["flush"].append(flushed - closed)
                phases["end_txn"].append(committed - flushed)
                rates.append(sent / (closed - opened))
                producing += closed - opened
                total += sent
            wall = time.perf_counter() - start
            txn_rate = total / wall
        with Producer(cluster.bootstrap, batch_size=64 * 1024, linger_ms=5, buffer_memory=buffer_memory) as idempotent:
            idempotent.send("ab", value, partition=0).result()
            sent, idem_start = 0, time.perf_counter()
            while time.perf_counter() - idem_start < min(wall, 10.0):
                last = idempotent.send("ab", value, partition=0)
                sent += 1
            idempotent.flush()
            last.result()
            idem_rate = sent / (time.perf_counter() - idem_start)
    figures = {name: statistics.median(values) * 1000 for name, values in phases.items()}
    figures["window_records_per_s"] = statistics.median(rates)
    figures["idempotent_records_per_s"] = idem_rate
    figures["producing_share"] = producing / wall
    figures["txn_records_per_s"] = txn_rate
    figures["txn_over_idempotent"] = txn_rate / idem_rate
    return figures


def produce(records: int = 50_000, rounds: int = 3) -> dict[str, float]:
    """1 KiB records through the yardstick's ``send_batch()`` and ``send()`` loops (64 KiB batches, a new producer
    a round): the median records/s, the cluster's CPU s/GB over the rounds, and the last round's requests per
    batch."""
    from bench.yardstick_sides import OncelogSide, process_cpu_seconds
    from oncelog.testing import LocalCluster

    value = b"v" * 1024
    figures: dict[str, float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="ab-produce-") as scratch,
        LocalCluster(Path(scratch), storage_nodes=1) as cluster,
    ):
        side = OncelogSide("oncelog", cluster.bootstrap, lambda: list(cluster.pids()))
        topic = side.topic("default")
        for api in ("send_batch", "send"):
            cpu = process_cpu_seconds(side.pids())
            loop = "batch" if api == "send_batch" else "send"
            rates = [side.produce(topic, value, records, api=loop) for _ in range(rounds)]
            figures[f"{api}_records_per_s"] = statistics.median(rates)
            figures[f"{api}_server_cpu_s_per_gb"] = (process_cpu_seconds(side.pids()) - cpu) / (
                rounds * records * len(value) / 1e9
            )
            counters = side.producer_metrics or {}
            # a revision before requests could carry several batches of a partition sent one batch per request
            requests = counters.get("produce_requests", counters.get("batches_sent", 1))
            figures[f"{api}_requests_per_batch"] = requests / max(1, counters.get("batches_sent", 1))
    return figures


def smalltxn(producers: int = 8, seconds: float = 8.0) -> dict[str, float]:
    """Small transactions (4 partitions x 1 record of 100 B, the yardstick's), ``producers`` threads for
    ``seconds``: transactions/s and each process's CPU milliseconds per transaction (``/proc``)."""
    from bench.yardstick_sides import OncelogSide, process_cpu_seconds
    from oncelog.testing import LocalCluster

    with (
        tempfile.TemporaryDirectory(prefix="ab-smalltxn-") as scratch,
        LocalCluster(Path(scratch), storage_nodes=1) as cluster,
    ):
        side = OncelogSide("oncelog", cluster.bootstrap, lambda: list(cluster.pids()))
        topic = side.topic("default", partitions=4)
        side.small_transactions(topic, producers, 1.0)  # warm-up: connections, producer ids
        processes = {pid: name.rsplit("-", 1)[0] for pid, name in cluster.pids().items()}
        processes[os.getpid()] = "client"
        before = {pid: process_cpu_seconds([pid]) for pid in processes}
        rate = side.small_transactions(topic, producers, seconds)
        transactions = rate * seconds
        figures = {"txn_per_s": rate}
        for pid, name in processes.items():
            spent = process_cpu_seconds([pid]) - before[pid]
            figures[f"{name}_cpu_ms_per_txn"] = figures.get(f"{name}_cpu_ms_per_txn", 0.0) + spent * 1000 / transactions
    figures["total_cpu_ms_per_txn"] = sum(v for k, v in figures.items() if k.endswith("_cpu_ms_per_txn"))
    return figures


_HEALTH_SERVER = """
import asyncio
import grpc
from grpc_health.v1 import health, health_pb2_grpc

async def main():
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    print(server.add_insecure_port("127.0.0.1:0"), flush=True)
    await server.start()
    await server.wait_for_termination()

asyncio.run(main())
"""


def grpc_floor(calls: int = 3000) -> dict[str, float]:
    """What one trivial unary call costs on this machine: gRPC's health check against a bare ``grpc.aio`` server
    (no interceptor, no servicer work) in a child process, from a blocking client; CPU microseconds per call of
    the server process and of this one, and the wall time per call."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from bench.yardstick_sides import process_cpu_seconds

    server = subprocess.Popen([sys.executable, "-c", _HEALTH_SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            request = health_pb2.HealthCheckRequest()
            for _ in range(200):  # warm-up
                stub.Check(request, timeout=10)
            server_cpu, client_cpu = process_cpu_seconds([server.pid]), process_cpu_seconds([os.getpid()])
            start = time.perf_counter()
            for _ in range(calls):
                stub.Check(request, timeout=10)
            wall = time.perf_counter() - start
            return {
                "server_cpu_us_per_call": (process_cpu_seconds([server.pid]) - server_cpu) / calls * 1e6,
                "client_cpu_us_per_call": (process_cpu_seconds([os.getpid()]) - client_cpu) / calls * 1e6,
                "wall_us_per_call": wall / calls * 1e6,
            }
    finally:
        server.kill()
        server.wait()


def _one(part: str, args: argparse.Namespace, pythonpath: str | None) -> dict[str, float]:
    """One measurement in a fresh interpreter (``--one``), with ``pythonpath`` first when given."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    command = [sys.executable, "-m", "bench.client_ab", "--one", part, "--ctp-samples", str(args.ctp_samples),
               "--records", str(args.records), "--transactions", str(args.transactions),
               "--buffer-memory", str(args.buffer_memory), "--producers", str(args.producers)]  # fmt: skip
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{part} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", help="the git revision to compare with (required unless --one)")
    parser.add_argument("--runs", type=int, default=5, help="interleaved runs per side (5)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"{','.join(PARTS)} (all)")
    parser.add_argument("--producers", type=int, default=8, help="producer threads of the smalltxn part (8)")
    parser.add_argument("--ctp-samples", type=int, default=60, help="transactions per CTP run (60)")
    parser.add_argument("--records", type=int, default=30_000, help="records per send() round (30,000)")
    parser.add_argument("--transactions", type=int, default=200, help="transactions per gateway or txn run (200)")
    parser.add_argument("--buffer-memory", type=int, default=32 * 1024 * 1024,
                        help="the txn part's producers' buffer_memory in bytes (32 MiB, the default)")  # fmt: skip
    parser.add_argument("--one", choices=PARTS, metavar="PART",
                        help="measure one part once on this checkout, print its figures as JSON")  # fmt: skip
    args = parser.parse_args(argv)
    if args.one:
        measure = {
            "ctp": lambda: ctp(args.ctp_samples),
            "send": lambda: send(args.records),
            "consume": lambda: consume(64_000),
            "gateway": lambda: gateway(args.transactions),
            "txn": lambda: txn(args.transactions, args.buffer_memory),
            "produce": lambda: produce(),
            "smalltxn": lambda: smalltxn(args.producers),
            "grpc": lambda: grpc_floor(),
            "sparkread": lambda: spark_read(args.records * 2),
        }
        figures = measure[args.one]()
        print(json.dumps(figures))
        return 0
    parts = [p for p in args.parts.split(",") if p]
    if not args.base or not parts or any(p not in PARTS for p in parts):
        parser.error(f"give --base REV and --parts from {','.join(PARTS)}")
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        worktree = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", str(worktree), args.base], cwd=ROOT, check=True,
                       capture_output=True)  # fmt: skip
        try:
            base_path = f"{worktree / 'libs'}{os.pathsep}{worktree / 'services'}"
            for part in parts:
                results: dict[str, list[dict[str, float]]] = {"base": [], "this": []}
                for run in range(args.runs):
                    for side in ("base", "this"):
                        figures = _one(part, args, base_path if side == "base" else None)
                        results[side].append(figures)
                        print(f"{part} run {run + 1}/{args.runs} {side}: {json.dumps(figures)}", flush=True)
                _report(part, args.base, results)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(worktree)], cwd=ROOT, check=False)
    return 0


def _report(part: str, base: str, results: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n| {part} | {base} median (spread) | this median (spread) | this ÷ base, median of runs (range) |")
    print("|---|---|---|---|")
    for key in results["base"][0]:
        before, after = [r[key] for r in results["base"]], [r[key] for r in results["this"]]
        ratios = [a / b for a, b in zip(after, before, strict=True) if b]

        def cell(values: list[float]) -> str:
            median = statistics.median(values)
            spread = f"{(max(values) - min(values)) / median:.0%}" if median else "-"
            return f"{median:,.2f} ({spread})"

        print(f"| {key} | {cell(before)} | {cell(after)} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f} to {max(ratios):.2f}) |")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
