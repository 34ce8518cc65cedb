"""Batch and stream readers against a real local cluster, called directly as Spark would (no JVM).

The driver-side calls (``partitions``, ``initialOffset``, ``latestOffset``) and the executor-side
``read`` are plain Python; Spark adds only the pickling between them, which is exercised here too.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")
pytest.importorskip("pyarrow", reason="pyarrow comes with pyspark[sql]")

from pyspark import cloudpickle
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from oncelog.client.records import TopicPartition
from oncelog.client.services import FetchedPartition
from oncelog.errors import OffsetOutOfRange
from oncelog.spark import OncelogDataSource, OptionError
from oncelog.spark.channels import LogClient
from oncelog.spark.offsets import OffsetRange
from oncelog.spark.reader import RangePartition, read_range, read_range_columns
from oncelog.testing import LocalCluster
from oncelog.vocabulary import IsolationLevel

if TYPE_CHECKING:
    from tests.integration.spark.conftest import Topic

pytestmark = pytest.mark.timeout(120)


def source(cluster: LocalCluster, topic: Topic | str, **options: object) -> OncelogDataSource:
    name = topic if isinstance(topic, str) else topic.name
    return OncelogDataSource({"bootstrap": cluster.bootstrap, "topic": name, **{k: str(v) for k, v in options.items()}})


def rows(reader: object, partitions: Iterable[InputPartition]) -> list[dict]:
    """What Spark would get: every partition read in turn, through a pickled copy of the reader."""
    shipped = cloudpickle.loads(cloudpickle.dumps(reader))
    out = []
    for partition in partitions:
        for batch in shipped.read(cloudpickle.loads(cloudpickle.dumps(partition))):
            out += batch.to_pylist()
    return out


def values(found: list[dict]) -> list[str]:
    return [r["value"].decode() for r in found]


def batch_rows(cluster: LocalCluster, topic: Topic, **options: object) -> list[dict]:
    reader = source(cluster, topic, **options).reader(None)
    return rows(reader, reader.partitions())


# -------------------------------------------------------------------------------------------------- batch


def test_batch_read_returns_every_committed_row_with_the_kafka_schema(cluster: LocalCluster, topic: Topic) -> None:
    topic.append(0, ["a", "b"], key="k", headers=(("h", b"1"), ("h", b"2"), ("n", None)))
    found = batch_rows(cluster, topic, includeHeaders="true")
    assert [(r["offset"], r["value"], r["key"]) for r in found] == [(0, b"a", b"k"), (1, b"b", b"k")]
    first = found[0]
    assert (first["topic"], first["partition"], first["timestampType"]) == (topic.name, 0, 0)
    assert first["timestamp"] == datetime.fromtimestamp(1_700_000_000, tz=UTC)
    assert first["headers"] == [
        {"key": "h", "value": b"1"},
        {"key": "h", "value": b"2"},
        {"key": "n", "value": None},
    ], "every header in order, a repeated name included, as in Spark's Kafka source"
    assert "headers" not in batch_rows(cluster, topic)[0], "no headers column unless includeHeaders is set"


def test_one_task_per_partition_bounded_by_the_lso(cluster: LocalCluster, topic3: Topic) -> None:
    for p in range(3):
        topic3.append(p, [f"p{p}-{i}" for i in range(p + 2)])
    open_txn = topic3.txn()
    open_txn.send(1, "open")
    topic3.append(1, ["after-open"])
    reader = source(cluster, topic3).reader(None)
    planned = [p.range for p in reader.partitions()]
    assert planned == [
        OffsetRange(topic3.name, 0, 0, 2),
        OffsetRange(topic3.name, 1, 0, 3),
        OffsetRange(topic3.name, 2, 0, 4),
    ]
    assert "open" not in values(rows(reader, reader.partitions()))


def test_aborted_transactions_and_markers_never_become_rows(cluster: LocalCluster, topic: Topic) -> None:
    topic.append(0, ["plain-1"])  # 0
    aborted = topic.txn()
    aborted.send(0, "aborted-1", "aborted-2")  # 1-2
    committed = topic.txn()
    committed.send(0, "committed-1")  # 3
    aborted.abort()  # 4
    committed.commit()  # 5
    topic.append(0, ["plain-2"])  # 6
    found = batch_rows(cluster, topic)
    assert [(r["offset"], r["value"].decode()) for r in found] == [(0, "plain-1"), (3, "committed-1"), (6, "plain-2")]
    uncommitted = batch_rows(cluster, topic, isolationLevel="read_uncommitted")
    assert values(uncommitted) == ["plain-1", "aborted-1", "aborted-2", "committed-1", "plain-2"]


def test_read_stops_at_end_offset_despite_gaps(cluster: LocalCluster, topic: Topic) -> None:
    """A range may start and end on a marker's offset; rows come only from inside it, whatever the gaps."""
    topic.append(0, ["a"])  # 0
    txn = topic.txn()
    txn.send(0, "t1", "t2")  # 1-2
    txn.commit()  # 3: marker
    aborted = topic.txn()
    aborted.send(0, "x")  # 4
    aborted.abort()  # 5: marker
    topic.append(0, ["b", "c"])  # 6-7
    client = LogClient([cluster.bootstrap])

    def read(start: int, end: int) -> list[tuple[int, str]]:
        """The range's records, read as records and as columns (what the Spark tasks read): the same both ways."""
        batches = read_range(client, OffsetRange(topic.name, 0, start, end))
        records = [(r.offset, r.value.decode()) for records in batches for r in records]
        chunked = read_range_columns(client, OffsetRange(topic.name, 0, start, end))
        columns = [(o, v.decode()) for chunks in chunked for chunk in chunks for o, _, _, v, _ in chunk.to_fields()]
        assert columns == records
        return records

    assert read(0, 3) == [(0, "a"), (1, "t1"), (2, "t2")], "ends on the COMMIT marker's offset"
    assert read(3, 6) == [], "a range of a marker, aborted data and a marker has no row"
    assert read(2, 7) == [(2, "t2"), (6, "b")], "starts inside a batch, ends inside one"
    assert read(5, 8) == [(6, "b"), (7, "c")], "starts on the ABORT marker"


def test_split_ranges_read_each_record_exactly_once(cluster: LocalCluster, topic: Topic) -> None:
    for i in range(10):
        txn = topic.txn()
        txn.send(0, f"v{i}a", f"v{i}b")
        txn.abort() if i % 3 == 0 else txn.commit()
    whole = batch_rows(cluster, topic)
    reader = source(cluster, topic, minPartitions=7).reader(None)
    planned = reader.partitions()
    assert len(planned) == 7
    split = rows(reader, planned)
    assert [r["offset"] for r in split] == [r["offset"] for r in whole]
    assert len(whole) == 2 * 6, "the four aborted transactions are dropped"


def test_explicit_offsets_and_their_errors(cluster: LocalCluster, topic: Topic) -> None:
    topic.append(0, [str(i) for i in range(10)])
    found = batch_rows(
        cluster,
        topic,
        startingOffsets=json.dumps({topic.name: {"0": 3}}),
        endingOffsets=json.dumps({topic.name: {"0": 6}}),
    )
    assert values(found) == ["3", "4", "5"]
    with pytest.raises(OptionError, match=r"endingOffsets: .* beyond its latest readable offset 10"):
        source(cluster, topic, endingOffsets=json.dumps({topic.name: {"0": 11}})).reader(None).partitions()
    with pytest.raises(OptionError, match="after its end"):
        source(
            cluster,
            topic,
            startingOffsets=json.dumps({topic.name: {"0": 8}}),
            endingOffsets=json.dumps({topic.name: {"0": 4}}),
        ).reader(None).partitions()
    with pytest.raises(
        OptionError, match=r"startingOffsets: partition 3 of topic .* does not exist \(the topic has only"
    ):
        source(cluster, topic, startingOffsets=json.dumps({topic.name: {"3": 0}})).reader(None).partitions()


def test_unknown_topic_is_a_clear_error_at_query_start(cluster: LocalCluster) -> None:
    reader = source(cluster, "no-such-topic").reader(None)
    with pytest.raises(OptionError, match=r"topic: .*no-such-topic"):
        reader.partitions()
    with pytest.raises(OptionError, match=r"topic: .*no-such-topic"):
        source(cluster, "no-such-topic").streamReader(None).initialOffset()


def test_empty_topic_plans_no_task_and_reads_nothing(cluster: LocalCluster, topic: Topic) -> None:
    reader = source(cluster, topic).reader(None)
    assert reader.partitions() == []
    assert list(reader.read(InputPartition(None))) == [], "Spark's placeholder partition reads nothing"


def test_bad_options_fail_when_the_dataframe_is_defined(cluster: LocalCluster) -> None:
    with pytest.raises(OptionError, match="startingOffsets:"):
        source(cluster, "t", startingOffsets="{oops").schema()
    with pytest.raises(OptionError, match="isolationLevel:"):
        source(cluster, "t", isolationLevel="dirty").schema()


# ------------------------------------------------------------------------------------------------- stream


def drain(reader: object, start: dict, limit: object, *, max_batches: int = 50) -> list[tuple[dict, dict]]:
    """Plan micro-batches like Spark until the source has nothing new: ``[(start, end), ...]``."""
    batches = []
    for _ in range(max_batches):
        end = reader.latestOffset(start, limit)
        if end == start:
            return batches
        batches.append((start, end))
        start = json.loads(json.dumps(end))  # through the checkpoint's JSON
    raise AssertionError("the source never stopped admitting data")


def test_stream_with_rate_limit_reads_every_committed_row_exactly_once(cluster: LocalCluster, topic3: Topic) -> None:
    for p in range(3):
        topic3.append(p, [f"{p}-{i}" for i in range(40 * (p + 1))])
        txn = topic3.txn()
        txn.send(p, f"{p}-aborted")
        txn.abort()
    reader = source(cluster, topic3, startingOffsets="earliest", maxRecordsPerTrigger=50).streamReader(None)
    assert reader.getDefaultReadLimit() == ReadMaxRows(50)
    start = reader.initialOffset()
    assert start == {topic3.name: {"0": 0, "1": 0, "2": 0}}
    planned = drain(reader, start, reader.getDefaultReadLimit())
    admitted = [sum(e[topic3.name][p] - s[topic3.name][p] for p in e[topic3.name]) for s, e in planned]
    assert all(n <= 50 + 3 for n in admitted) and len(planned) >= 5
    found = [r for s, e in planned for r in rows(reader, reader.partitions(s, e))]
    expected = sorted(f"{p}-{i}" for p in range(3) for i in range(40 * (p + 1)))
    assert sorted(values(found)) == expected, "no loss, no duplicate, no aborted row"


def test_latest_offset_never_passes_last_stable_offset(cluster: LocalCluster, topic: Topic) -> None:
    reader = source(cluster, topic, startingOffsets="earliest").streamReader(None)
    start = reader.initialOffset()
    topic.append(0, ["before"])  # 0
    txn = topic.txn()
    txn.send(0, "in-txn")  # 1: holds the LSO at 1
    topic.append(0, ["after"])  # 2
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic.name: {"0": 1}}
    assert values(rows(reader, reader.partitions(start, end))) == ["before"]
    assert reader.latestOffset(end, ReadAllAvailable()) == end, "nothing new while the transaction is open"
    txn.commit()  # 3
    later = reader.latestOffset(end, ReadAllAvailable())
    assert later == {topic.name: {"0": 4}}
    assert values(rows(reader, reader.partitions(end, later))) == ["in-txn", "after"]


def test_replayed_batch_reads_identical_rows(cluster: LocalCluster, topic: Topic) -> None:
    """Spark replays the last batch with the same offsets; later writes must not change what it reads."""
    txn = topic.txn()
    txn.send(0, "a", "b")
    txn.commit()
    reader = source(cluster, topic, startingOffsets="earliest").streamReader(None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    first = rows(reader, reader.partitions(start, end))
    late = topic.txn()
    late.send(0, "late")
    late.abort()
    topic.append(0, ["later"])
    replay = rows(cloudpickle.loads(cloudpickle.dumps(reader)), reader.partitions(start, end))
    assert replay == first and values(first) == ["a", "b"]


def test_starting_offsets_latest_skips_existing_data(cluster: LocalCluster, topic: Topic) -> None:
    topic.append(0, ["old"])
    reader = source(cluster, topic).streamReader(None)
    start = reader.initialOffset()
    assert start == {topic.name: {"0": -1}}, "latest is pinned by batch 0, not here"
    first = reader.latestOffset(start, ReadAllAvailable())
    assert first == {topic.name: {"0": 1}} and rows(reader, reader.partitions(start, first)) == []
    topic.append(0, ["new"])
    end = reader.latestOffset(first, ReadAllAvailable())
    assert values(rows(reader, reader.partitions(first, end))) == ["new"]


def test_starting_offsets_latest_stays_pinned_across_calls_and_restarts(cluster: LocalCluster, topic3: Topic) -> None:
    """Spark asks initialOffset() to plan batch 0, again to run it, and again when a restart replays it.

    Records keep arriving between those calls; every call must describe the same batch 0, and the records
    after its end must all reach batch 1.
    """
    options = {"startingOffsets": "latest", "maxRecordsPerTrigger": 1000}
    for p in range(3):
        topic3.append(p, [f"old-{p}"])
    reader = source(cluster, topic3, **options).streamReader(None)
    planned = reader.initialOffset()
    topic3.append(0, ["arrived-before-batch-0-was-planned"])  # part of "latest": skipped
    batch0_end = reader.latestOffset(planned, reader.getDefaultReadLimit())
    topic3.append(1, ["arrived-while-batch-0-ran"])
    ran = reader.initialOffset()
    assert ran == planned
    assert rows(reader, reader.partitions(ran, batch0_end)) == [], "batch 0 starts at latest: it reads nothing"
    topic3.append(2, ["arrived-before-the-restart"])
    restarted = source(cluster, topic3, **options).streamReader(None)  # a new driver process replays batch 0
    replayed = restarted.initialOffset()
    assert replayed == planned
    assert rows(restarted, restarted.partitions(replayed, batch0_end)) == []
    later = drain(restarted, batch0_end, restarted.getDefaultReadLimit())
    found = [r for s, e in later for r in rows(restarted, restarted.partitions(s, e))]
    assert sorted(values(found)) == [
        "arrived-before-the-restart",
        "arrived-while-batch-0-ran",
    ], "latest is pinned when batch 0 is planned: nothing older is read, nothing newer lost"


def test_trigger_available_now_from_latest_reads_nothing_old(cluster: LocalCluster, topic: Topic) -> None:
    """Trigger.AvailableNow snapshots its end before Spark asks for the start; a later write must not make the
    start lie after that end (which looked like a truncated topic)."""
    topic.append(0, ["old"])
    reader = source(cluster, topic, startingOffsets="latest").streamReader(None)
    reader.prepareForTriggerAvailableNow()
    topic.append(0, ["after-the-snapshot"])
    planned = drain(reader, reader.initialOffset(), reader.getDefaultReadLimit())
    assert [e for _, e in planned] == [{topic.name: {"0": 1}}], "one empty batch 0 ending at the snapshot"
    assert [r for s, e in planned for r in rows(reader, reader.partitions(s, e))] == []
    following = source(cluster, topic, startingOffsets="latest").streamReader(None)  # the next AvailableNow run
    following.prepareForTriggerAvailableNow()
    later = drain(following, planned[-1][1], following.getDefaultReadLimit())
    assert values([r for s, e in later for r in rows(following, following.partitions(s, e))]) == ["after-the-snapshot"]


def test_partition_added_while_running_is_read_from_zero(cluster: LocalCluster, topic3: Topic) -> None:
    """A checkpoint that lacks a partition (the topic grew) reads that partition from its beginning."""
    for p in range(3):
        topic3.append(p, [f"{p}"])
    reader = source(cluster, topic3, startingOffsets="earliest").streamReader(None)
    start = {topic3.name: {"0": 1}}  # as if partitions 1 and 2 were added after this offset was checkpointed
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic3.name: {"0": 1, "1": 1, "2": 1}}
    assert sorted(values(rows(reader, reader.partitions(start, end)))) == ["1", "2"]


def test_trigger_available_now_stops_at_the_offsets_seen_when_it_started(cluster: LocalCluster, topic: Topic) -> None:
    topic.append(0, [str(i) for i in range(10)])
    reader = source(cluster, topic, startingOffsets="earliest", maxRecordsPerTrigger=4).streamReader(None)
    reader.prepareForTriggerAvailableNow()
    topic.append(0, ["too-late"])
    planned = drain(reader, reader.initialOffset(), reader.getDefaultReadLimit())
    assert [e[topic.name]["0"] for _, e in planned] == [4, 8, 10]


def test_max_bytes_per_trigger_admits_whole_batches(cluster: LocalCluster, topic: Topic) -> None:
    for i in range(6):
        topic.append(0, [f"{i}-" + "x" * 1000] * 5)  # about 5 KiB per batch, 5 offsets each
    reader = source(cluster, topic, startingOffsets="earliest", maxBytesPerTrigger=12_000).streamReader(None)
    assert reader.getDefaultReadLimit() == ReadMaxBytes(12_000)
    planned = drain(reader, reader.initialOffset(), reader.getDefaultReadLimit())
    ends = [e[topic.name]["0"] for _, e in planned]
    assert ends == [10, 20, 30], "two whole batches of about 5 KiB fit in 12 KB"
    assert reader.latestOffset({topic.name: {"0": 0}}, ReadAllAvailable()) == {topic.name: {"0": 30}}
    assert reader.reportLatestOffset() == {topic.name: {"0": 30}}


def test_checkpoint_from_another_query_is_refused(cluster: LocalCluster, topic: Topic) -> None:
    reader = source(cluster, topic).streamReader(None)
    with pytest.raises(OptionError, match="topics: the checkpoint holds offsets of \\['payments'\\]"):
        reader.latestOffset({"payments": {"0": 4}}, ReadAllAvailable())
    with pytest.raises(OptionError, match="checkpointLocation:"):
        reader.latestOffset({"offset": 17}, ReadAllAvailable())


def test_checkpoint_beyond_the_log_is_data_loss(cluster: LocalCluster, topic: Topic) -> None:
    topic.append(0, ["only"])
    reader = source(cluster, topic).streamReader(None)
    with pytest.raises(OffsetOutOfRange, match="re-created"):
        reader.latestOffset({topic.name: {"0": 50}}, ReadAllAvailable())
    lenient = source(cluster, topic, failOnDataLoss="false").streamReader(None)
    assert lenient.latestOffset({topic.name: {"0": 50}}, ReadAllAvailable()) == {topic.name: {"0": 50}}


def test_reader_and_partitions_pickle_after_use(cluster: LocalCluster, topic: Topic) -> None:
    """Channels live in the process, not in the reader: a used reader still pickles (design/spark-connector.md §3.1)."""
    topic.append(0, ["x"])
    reader = source(cluster, topic, startingOffsets="earliest").streamReader(None)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    [partition] = reader.partitions(start, end)
    assert isinstance(partition, RangePartition)
    assert values(rows(reader, [partition])) == ["x"]
    assert cloudpickle.loads(cloudpickle.dumps(reader)).options == reader.options


# ----------------------------------------------------------------------------------------- data loss, fakes


class LostLog:
    """A client whose partition lost offsets below ``log_start`` to retention."""

    request_timeout_s = 1.0
    retry_backoff_s = 0.01

    def __init__(self, real: LogClient, log_start: int) -> None:
        self.real, self.log_start = real, log_start

    def fetch(self, tp: TopicPartition, offset: int, **kwargs: object) -> FetchedPartition:
        if offset < self.log_start:
            raise OffsetOutOfRange(f"fetch offset {offset} is below the log start {self.log_start}")
        return self.real.fetch(tp, offset, **kwargs)

    def list_offsets(self, tps: list[TopicPartition], spec: str, isolation: IsolationLevel) -> dict:
        assert spec == "earliest"
        return {tp: self.log_start for tp in tps}


def test_deleted_offsets_fail_the_read_unless_data_loss_is_allowed(cluster: LocalCluster, topic: Topic) -> None:
    topic.append(0, [str(i) for i in range(6)])
    client = LostLog(LogClient([cluster.bootstrap]), log_start=4)
    lost = OffsetRange(topic.name, 0, 1, 6)
    with pytest.raises(OffsetOutOfRange, match=r"\[1, 4\) were deleted .*failOnDataLoss=false"):
        list(read_range(client, lost))  # type: ignore[arg-type]
    kept = read_range(client, lost, fail_on_data_loss=False)  # type: ignore[arg-type]
    assert [r.value for records in kept for r in records] == [b"4", b"5"]
