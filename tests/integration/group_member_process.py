"""A consumer group member as its own OS process, for tests that kill -9 or pause a member.

Usage: python group_member_process.py BOOTSTRAP GROUP TOPIC MODE [OUTPUT_TOPIC]

* ``consume``: subscribe and poll forever; print the assignment as a JSON line whenever it changes.
* ``zombie``: subscribe, read a record, open a transaction that writes to OUTPUT_TOPIC, print
  ``{"ready": ...}``, then wait for a line on stdin (the test pauses the process meanwhile). Then try
  ``send_offsets_to_transaction`` + ``commit_transaction`` and a plain ``commit()``, printing each outcome.
"""

from __future__ import annotations

import json
import sys

from oncelog.client import Consumer, OffsetAndMetadata, Producer
from oncelog.errors import OncelogError


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def consume(bootstrap: str, group: str, topic: str) -> None:
    with Consumer(bootstrap, group_id=group) as consumer:
        consumer.subscribe([topic])
        shown = None
        while True:
            consumer.poll(timeout_ms=100)
            current = sorted([tp.topic, tp.partition] for tp in consumer.assignment())
            if current != shown:
                shown = current
                emit(assignment=current, member_id=consumer.group_metadata().member_id)


def zombie(bootstrap: str, group: str, topic: str, output: str) -> None:
    consumer = Consumer(bootstrap, group_id=group)
    consumer.subscribe([topic])
    records = []
    while not records:
        records = consumer.poll(timeout_ms=200)
    producer = Producer(bootstrap, transactional_id=f"zombie-{group}")
    producer.init_transactions()
    producer.begin_transaction()
    for record in records:
        producer.send(output, b"zombie-" + (record.value or b""), partition=0)
    producer.flush()
    offsets = {}
    for record in records:
        offsets[record.topic_partition] = OffsetAndMetadata(record.offset + 1)
    metadata = consumer.group_metadata()
    emit(ready=True, member_id=metadata.member_id, member_epoch=metadata.generation_id, records=len(records))
    sys.stdin.readline()  # the test pauses this process past its session timeout, then sends a line
    try:
        producer.send_offsets_to_transaction(offsets, metadata)
        producer.commit_transaction()
        emit(transaction="committed")
    except OncelogError as err:
        emit(transaction="refused", error=type(err).__name__, reason=err.reason.name, text=str(err))
        try:
            producer.abort_transaction()
            emit(transaction="aborted")
        except OncelogError as abort_err:
            emit(transaction="abort failed", text=str(abort_err))
    try:
        consumer.commit(offsets)
        emit(commit="accepted")
    except OncelogError as err:
        emit(commit="refused", reason=err.reason.name, text=str(err))
    producer.close()
    consumer.close()


if __name__ == "__main__":
    bootstrap_, group_, topic_, mode = sys.argv[1:5]
    if mode == "consume":
        consume(bootstrap_, group_, topic_)
    else:
        zombie(bootstrap_, group_, topic_, sys.argv[5])
