"""The consumer fetches a partition's next answer while it decodes the one it holds (design/kafka-semantics.md
§4.5), against a real storage node.

The proof that the next Fetch is on the wire before the decode starts does not time anything: each answer's decode
is held until the storage node has served one more Fetch than the answers decoded so far (read from its Prometheus
endpoint). A consumer that fetched only after decoding would hold there forever; the hold gives up after 20 s and
the test fails.
"""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from oncelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from oncelog.client.fetch_filter import CompletedFetch
from oncelog.telemetry.metrics import RPC_SERVER_DURATION
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

RECORDS = 640
VALUE = b"v" * 1024


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("ahead"), env={"ONCELOG_METRICS_LISTEN": "127.0.0.1:0"}) as cluster:
        yield cluster


def filled_topic(cluster: LocalCluster) -> str:
    topic = f"ahead-{uuid.uuid4().hex[:8]}"
    with AdminClient(cluster.bootstrap) as admin:
        admin.create_topics([NewTopic(topic, num_partitions=1, configs={"flush": "async"})])
    with Producer(cluster.bootstrap, batch_size=16 * 1024, linger_ms=5) as producer:
        for _ in range(RECORDS // 16):
            producer.send_batch(topic, [VALUE] * 16, partition=0)
        producer.flush()
    return topic


def fetches_served(cluster: LocalCluster) -> int:
    """Fetch calls the storage node has answered, from its Prometheus endpoint."""
    (node,) = [node for node in cluster.nodes if node.service == "partition-storage"]
    scrape = json.loads(node.ready_file.read_text())["metrics_address"]
    with urllib.request.urlopen(f"http://{scrape}/metrics", timeout=10) as response:
        body = response.read().decode()
    name = f"{RPC_SERVER_DURATION.prometheus_name}_count"
    return sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in body.splitlines()
        if line.startswith(name + "{") and 'rpc_method="Fetch"' in line
    )


@pytest.mark.parametrize("arrow", [False, True], ids=["poll", "poll_arrow"])
def test_the_next_fetch_is_served_while_an_answer_is_decoded(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, arrow: bool
) -> None:
    topic = filled_topic(cluster)
    tp = TopicPartition(topic, 0)
    decoded: list[CompletedFetch] = []
    held: list[tuple[int, int]] = []  # (answers decoded before, Fetch calls served when the hold ended)

    def hold_until_the_next_fetch_is_served(original: Any) -> Any:
        def take(self: CompletedFetch, max_records: int) -> Any:
            if self not in decoded:
                decoded.append(self)
                end = self.end_offset
                late = any(served < k + 1 for k, served in held)  # one late answer fails the test: hold no more
                if end is not None and end < RECORDS and not late:  # more to fetch: the next Fetch is out already
                    wanted, served = len(decoded) + 1 + base, 0
                    deadline = time.monotonic() + 20
                    while (served := fetches_served(cluster)) < wanted and time.monotonic() < deadline:
                        time.sleep(0.02)  # polls the node's counter; the outcome does not depend on this pace
                    held.append((len(decoded), served - base))
            return original(self, max_records)

        return take

    base = fetches_served(cluster)
    monkeypatch.setattr(
        CompletedFetch, "fetch_records", hold_until_the_next_fetch_is_served(CompletedFetch.fetch_records)
    )
    monkeypatch.setattr(
        CompletedFetch, "fetch_columns", hold_until_the_next_fetch_is_served(CompletedFetch.fetch_columns)
    )
    offsets: list[int] = []
    with Consumer(cluster.bootstrap, isolation_level="read_committed", max_partition_fetch_bytes=64 * 1024) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        while len(offsets) < RECORDS:
            if arrow:
                offsets.extend(consumer.poll_arrow(timeout_ms=5000).column("offset").to_pylist())
            else:
                offsets.extend(record.offset for record in consumer.poll(timeout_ms=5000))
    assert offsets == list(range(RECORDS))
    late = [(k, served) for k, served in held if served < k + 1]
    assert not late, f"an answer decoded before its successor was fetched (answer, Fetch calls served): {late}"
    assert len(held) >= 8, f"the records came in {len(decoded)} answers; the test needs many"


def test_a_seek_drops_the_answers_fetched_ahead(cluster: LocalCluster) -> None:
    topic = filled_topic(cluster)
    tp = TopicPartition(topic, 0)
    with Consumer(cluster.bootstrap, isolation_level="read_committed", max_partition_fetch_bytes=64 * 1024) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        first: list[int] = []
        while len(first) < 200:  # several answers in, with the next ones fetched ahead
            first.extend(record.offset for record in consumer.poll(timeout_ms=5000, max_records=7))
        consumer.seek(tp, 3)
        again: list[int] = []
        while len(again) < RECORDS - 3:
            again.extend(record.offset for record in consumer.poll(timeout_ms=5000))
    assert first == list(range(len(first)))
    assert again == list(range(3, RECORDS))
