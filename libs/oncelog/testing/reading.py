"""Read a whole topic with the client library: for tests, the demo and benchmarks."""

from __future__ import annotations

import asyncio
import time

from oncelog.client import Consumer, ConsumerRecord
from oncelog.client.fetch_filter import filter_fetch
from oncelog.client.records import TopicPartition
from oncelog.client.services import FetchPosition, PartitionStorageClient
from oncelog.rpc import aio_channel
from oncelog.vocabulary import IsolationLevel


def read_all(
    bootstrap: str, topic: str, isolation: str = "read_committed", *, settle: bool = True, timeout_s: float = 60
) -> list[ConsumerRecord]:
    """Every record of ``topic`` up to its end for ``isolation`` (the LSO at read_committed).

    With ``settle`` it first waits until no transaction is undecided on the topic (last stable offset == high
    watermark on every partition, whatever ``isolation`` reads): a commit returns once the decision is durable, and
    its markers reach the partitions moments later.

    Raises:
        TimeoutError: a transaction stayed open, or the end was not reached, within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    with Consumer(bootstrap, isolation_level=isolation) as consumer:
        partitions = consumer.partitions_for(topic)
        consumer.assign(partitions)
        consumer.seek_to_beginning()
        if settle:
            with (
                Consumer(bootstrap, isolation_level="read_committed") as committed,
                Consumer(bootstrap, isolation_level="read_uncommitted") as uncommitted,
            ):
                while committed.end_offsets(partitions) != uncommitted.end_offsets(partitions):
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


def read_partition_values(
    address: str, topic: str, partition: int, leader_epoch: int, isolation: IsolationLevel
) -> list[tuple[int, str]]:
    """(offset, value) of every record a reader at ``isolation`` gets from one partition, read with single Fetch calls.

    It waits until every transaction on the partition is decided (LSO == HW) and filters the batches with the
    client library's fetch filter, so other languages' clients can be checked against the Python codec.
    """
    return asyncio.run(_read_partition_values(address, TopicPartition(topic, partition), leader_epoch, isolation))


async def _read_partition_values(
    address: str, tp: TopicPartition, leader_epoch: int, isolation: IsolationLevel
) -> list[tuple[int, str]]:
    position = 0
    out: list[tuple[int, str]] = []
    deadline = time.monotonic() + 30
    async with aio_channel(address) as channel:
        storage = PartitionStorageClient(lambda _address: channel, timeout_s=10)
        while True:
            [result] = await storage.fetch(
                address, [FetchPosition(tp, position, leader_epoch=leader_epoch)], isolation=isolation, max_wait_ms=200
            )
            assert result.error is None, result.error
            records, position = filter_fetch(
                tp,
                result.records,
                fetch_offset=position,
                isolation_level=isolation,
                aborted_transactions=result.aborted_transactions,
            )
            out.extend((r.offset, (r.value or b"").decode()) for r in records)
            if position >= result.last_stable_offset == result.high_watermark:
                return out
            assert time.monotonic() < deadline, f"{tp}: transactions still open at {result.last_stable_offset}"
