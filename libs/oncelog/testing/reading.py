"""Read a whole topic with the client library: for tests, the demo and benchmarks."""

from __future__ import annotations

import time

from oncelog.client import Consumer, ConsumerRecord


def read_all(
    bootstrap: str, topic: str, isolation: str = "read_committed", *, settle: bool = True, timeout_s: float = 60
) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end for ``isolation`` (the LSO at read_committed).

    With ``settle`` it first waits until no transaction is undecided on the topic: a commit returns once the
    decision is durable, and its markers reach the partitions moments later.

    Raises:
        TimeoutError: a transaction stayed open, or the end was not reached, within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    with Consumer(bootstrap, isolation_level=isolation) as consumer:
        partitions = consumer.partitions_for(topic)
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        if settle:
            with Consumer(bootstrap, isolation_level="read_uncommitted") as uncommitted:
                while consumer.end_offsets(partitions) != uncommitted.end_offsets(partitions):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"a transaction on {topic} stayed open")
                    time.sleep(0.02)
        end = consumer.end_offsets(partitions)
        records: list[ConsumerRecord] = []
        while any(consumer.position(tp) < end[tp] for tp in partitions):
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} up to {end} at {isolation}")
            records.extend(consumer.poll(timeout_ms=200))
        return records
