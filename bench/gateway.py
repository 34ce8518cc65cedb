"""confluent-kafka against the kafka-gateway and against Apache Kafka 4.4, in the same run.

    python -m bench.gateway [--runs 5] [--records 20000] [--value-bytes 100] [--transactions 30]

Three measurements per target, each run interleaving the targets so both see the same machine load:

* produce: ``--records`` records of ``--value-bytes`` bytes to one partition with an idempotent producer
  (``linger.ms`` 5), records per second from the first ``produce()`` to the end of ``flush()``;
* read_committed consume: the same records read back by a read_committed consumer (``assign``), records per second;
* transaction latency: ``--transactions`` one-record transactions (begin, produce, commit) back to back, the p50 of
  their wall time in milliseconds.

The goals of issue 19: the gateway at least 0.5 of Kafka for produce and read_committed consume, and its p50
one-record transaction at most 1.5 times Kafka's. Apache Kafka runs as one KRaft node on loopback
(``oncelog.testing.kafka``; fetch it first with ``scripts/kafka/fetch.sh``), oncelog as a local cluster with one
storage node behind one gateway process. An unrecorded warm-up round runs first. Each figure is the median of
``--runs`` runs with its spread ((max - min) / median).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.common import Series
from oncelog.testing.cluster import LocalCluster
from oncelog.testing.kafka import ApacheKafka, KafkaGatewayProcess, fetch_kafka, kafka_libs


def _topic(bootstrap: str) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, 1, 1)])[name].result(60)
    return name


def produce_rate(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(120) == 0, "records left unsent"
    return records / (time.perf_counter() - start)


def consume_rate(bootstrap: str, topic: str, records: int) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "isolation.level": "read_committed",
         "enable.auto.commit": False, "fetch.wait.max.ms": 100}
    )  # fmt: skip
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 300
    try:
        while seen < records and time.perf_counter() < deadline:
            # ask for no more than are left: consume() returns early only once it has num_messages, so asking for
            # more would add its whole timeout to the last batch and bias the rate against the faster target
            for message in consumer.consume(num_messages=min(10_000, records - seen), timeout=1.0):
                if message.error() is None:
                    seen += 1
    finally:
        consumer.close()
    assert seen >= records, f"read {seen} of {records}"
    return records / (time.perf_counter() - start)


def transaction_p50_ms(bootstrap: str, topic: str, transactions: int) -> float:
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)
    times = []
    for i in range(transactions):
        start = time.perf_counter()
        producer.begin_transaction()
        producer.produce(topic, f"t{i}".encode(), partition=0)
        producer.commit_transaction(60)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--transactions", type=int, default=30)
    args = parser.parse_args()
    value = b"x" * args.value_bytes
    libs = kafka_libs() or fetch_kafka()
    series: dict[tuple[str, str], Series] = {}
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        root = Path(tmp)
        with (
            ApacheKafka(root / "kafka", libs=libs) as kafka,
            LocalCluster(root / "oncelog", storage_nodes=1) as cluster,
            KafkaGatewayProcess(cluster.bootstrap, root / "gateway") as gateway,
        ):
            targets = {"Apache Kafka 4.4": kafka.bootstrap, "oncelog kafka-gateway": gateway.address}
            # one unrecorded round first: Kafka's JIT and both sides' connections and caches warm up, so the first
            # recorded run does not measure a cold JVM (which flattered the gateway)
            for bootstrap in targets.values():
                topic = _topic(bootstrap)
                produce_rate(bootstrap, topic, args.records // 4, value)
                consume_rate(bootstrap, topic, args.records // 4)
                transaction_p50_ms(bootstrap, topic, 10)
            for run in range(args.runs):
                order = list(targets.items()) if run % 2 == 0 else list(reversed(targets.items()))
                for name, bootstrap in order:
                    topic = _topic(bootstrap)
                    measured = {
                        "produce records/s": produce_rate(bootstrap, topic, args.records, value),
                        "read_committed consume records/s": consume_rate(bootstrap, topic, args.records),
                        "one-record transaction p50 ms": transaction_p50_ms(bootstrap, topic, args.transactions),
                    }
                    for metric, figure in measured.items():
                        series.setdefault((name, metric), Series(name, [])).rates.append(figure)
                    print(
                        f"run {run + 1}/{args.runs} {name}: " + ", ".join(f"{k} {v:,.1f}" for k, v in measured.items())
                    )
    print()
    print("| measurement | Apache Kafka 4.4 median (spread) | gateway median (spread) | gateway / Kafka |")
    print("|---|---|---|---|")
    for metric in ("produce records/s", "read_committed consume records/s", "one-record transaction p50 ms"):
        kafka_s, gateway_s = series[("Apache Kafka 4.4", metric)], series[("oncelog kafka-gateway", metric)]
        print(
            f"| {metric} | {kafka_s.median:,.1f} ({kafka_s.spread:.0%}) | {gateway_s.median:,.1f} "
            f"({gateway_s.spread:.0%}) | {gateway_s.median / kafka_s.median:.2f} |"
        )


if __name__ == "__main__":
    main()
