"""Exactly-once consume-transform-produce: copy a topic to another, transformed, surviving any crash.

Each loop reads a batch of records with a read_committed consumer, writes the transformed records and the
consumer's positions in one transaction, and commits. A crash at any point leaves either the whole batch
(output records and input offsets) or none of it; the next instance with the same transactional id fences
the old one, aborts its open transaction and resumes from the committed offsets. After an abort the
consumer rewinds to the committed offsets and reads the batch again (DESIGN §1.8).

Run it against a local cluster (``oncelog dev`` in another terminal)::

    oncelog topics create input --partitions 2
    oncelog topics create output --partitions 2
    seq 1 1000 | oncelog produce input
    python examples/consume_transform_produce.py input output --transactional-id copier-0
    oncelog consume output --from-beginning --timeout 2

Each committed transaction prints one JSON line: ``{"committed": <records>, "total": <records so far>}``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from oncelog.client import (
    AbortableError,
    Consumer,
    ConsumerRecord,
    OffsetAndMetadata,
    Producer,
    ProducerFencedError,
)


def transform(record: ConsumerRecord) -> bytes:
    """The business logic: here, upper-case the value."""
    return (record.value or b"").upper()


def copy(
    bootstrap: str | None,
    input_topic: str,
    output_topic: str,
    *,
    group: str,
    transactional_id: str,
    batch_size: int,
    idle_exit_s: float | None,
    max_rate: float | None = None,
) -> int:
    """Copy until stopped (or idle for ``idle_exit_s``); return the number of records committed.

    ``max_rate`` caps the records sent per second (the pause falls inside transactions, as a slow transform's
    would), so a demo can show crashes landing in the middle of one.
    """
    consumer = Consumer(bootstrap, group_id=group, isolation_level="read_committed")
    producer = Producer(bootstrap, transactional_id=transactional_id)
    total = 0
    try:
        consumer.subscribe([input_topic])
        producer.init_transactions()  # fences an earlier instance and aborts its open transaction
        idle_since = started = time.monotonic()
        sent = 0
        while True:
            records = consumer.poll(timeout_ms=500, max_records=batch_size)
            if not records:
                if idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                    return total
                continue
            idle_since = time.monotonic()
            producer.begin_transaction()
            try:
                for record in records:
                    producer.send(output_topic, transform(record), key=record.key)
                    sent += 1
                    if max_rate:
                        time.sleep(max(0.0, sent / max_rate - (time.monotonic() - started)))
                positions = {tp: OffsetAndMetadata(consumer.position(tp)) for tp in consumer.assignment()}
                producer.send_offsets_to_transaction(positions, consumer.group_metadata())
                producer.commit_transaction()
            except AbortableError as exc:
                print(json.dumps({"aborted": str(exc)}), flush=True)
                producer.abort_transaction()
                consumer.rewind_to_committed()
                continue
            total += len(records)
            print(json.dumps({"committed": len(records), "total": total}), flush=True)
    except ProducerFencedError:
        print(json.dumps({"fenced": transactional_id}), flush=True)  # a newer instance took over
        return total
    finally:
        producer.close()
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("input_topic")
    parser.add_argument("output_topic")
    parser.add_argument("--bootstrap", default=None, help="cluster address; default .oncelog/cluster.json")
    parser.add_argument("--group", default="copier", help="consumer group of the input offsets")
    parser.add_argument("--transactional-id", default="copier-0", help="stable across restarts of this copier")
    parser.add_argument("--batch-size", type=int, default=200, help="records per transaction at most")
    parser.add_argument("--idle-exit", type=float, default=None, help="exit after this many idle seconds")
    parser.add_argument("--max-rate", type=float, default=None, help="records sent per second at most")
    args = parser.parse_args(argv)
    copy(
        args.bootstrap,
        args.input_topic,
        args.output_topic,
        group=args.group,
        transactional_id=args.transactional_id,
        batch_size=args.batch_size,
        idle_exit_s=args.idle_exit,
        max_rate=args.max_rate,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
