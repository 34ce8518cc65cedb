"""A consume-transform-produce copier built on confluent-kafka alone, as a Kafka user writes one.

    python kafka_copier.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID INSTANCE_ID

A static member (``group.instance.id``) of GROUP subscribed to INPUT; each poll's records are written upper-cased to
OUTPUT (same partition, same key) in one transaction together with the consumer's positions
(``send_offsets_to_transaction``). After each commit it prints ``committed <records copied so far>``. It runs
until killed; tests SIGKILL it and start it again.
"""

from __future__ import annotations

import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition


def main() -> None:
    bootstrap, source, target, group, transactional_id, instance_id = sys.argv[1:7]
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "group.instance.id": instance_id,
         "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest",
         "session.timeout.ms": 10_000, "heartbeat.interval.ms": 500}
    )  # fmt: skip
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(60)
    consumer.subscribe([source])
    copied = 0
    while True:
        records = [m for m in consumer.consume(num_messages=20, timeout=0.5) if m.error() is None]
        if not records:
            continue
        producer.begin_transaction()
        try:
            for m in records:
                producer.produce(target, m.value().upper(), key=m.key(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
            producer.commit_transaction(60)
        except KafkaException as exc:
            if not exc.args[0].txn_requires_abort():
                raise
            producer.abort_transaction(60)
            for tp in consumer.assignment():  # back to the committed positions, as the transaction never happened
                (committed,) = consumer.committed([TopicPartition(tp.topic, tp.partition)], timeout=30)
                consumer.seek(committed if committed.offset >= 0 else TopicPartition(tp.topic, tp.partition, 0))
            continue
        copied += len(records)
        print(f"committed {copied}", flush=True)


if __name__ == "__main__":
    main()
