"""The ``atomicity=batch`` sink protocol (design (c1)) against a real local cluster, without Spark.

Each test plays what Spark does: tasks stage their rows (:class:`OutputStager`), possibly in several
attempts, and the driver commits the messages Spark kept (:class:`DriverCommitter`), possibly again after a
crash. What a read_committed consumer sees afterwards is the verdict.
"""

from __future__ import annotations

import pickle
import threading
from typing import Any

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

from oncelog.client.errors import ProducerFencedError
from oncelog.client.producer import Producer
from oncelog.errors import OncelogError
from oncelog.spark import OncelogDataSource
from oncelog.spark.atomic import (
    BatchTooLargeError,
    DriverCommitter,
    OncelogAtomicBatchWriter,
    OncelogAtomicStreamWriter,
    OutputStager,
    StagedOutput,
)
from oncelog.spark.options import SinkOptions
from oncelog.spark.output import SEND_CHUNK_ROWS
from oncelog.spark.writer import (
    NonDeterministicBatchError,
    OncelogStreamWriter,
    RewoundCheckpointError,
    RowEncoder,
    TaskWriter,
    read_marker,
    task_transactional_id,
)
from oncelog.testing import LocalCluster

from .conftest import Topic
from .test_writer import KV, SimulatedCrash, rows, sink_options, task, visible

pytestmark = pytest.mark.timeout(120)


def batch_options(cluster: LocalCluster, topic: Topic, **extra: str) -> SinkOptions:
    return sink_options(cluster, topic, atomicity="batch", **extra)


def stage(options: SinkOptions, batch: int, partition: int, *values: str, attempt: int = 0) -> StagedOutput:
    """What a task of ``partition`` returns to the driver for ``batch``."""
    stager = OutputStager(options, RowEncoder(KV, options.topic))
    return stager.stage(rows(*values), task(batch, partition=partition, attempt=attempt))


def through_spark(message: StagedOutput) -> StagedOutput:
    """The message as the driver receives it: pickled in the task, unpickled in the commit process."""
    copy = pickle.loads(pickle.dumps(message))
    assert isinstance(copy, StagedOutput)
    return copy


def batch_of(options: SinkOptions, batch: int, **partitions: tuple[str, ...]) -> list[StagedOutput]:
    """One staged message per Spark partition: ``p0=("a", "b"), p1=(...)``."""
    return [through_spark(stage(options, batch, int(name[1:]), *values)) for name, values in partitions.items()]


# ----------------------------------------------------------------------------------------------- protocol


def test_batch_atomicity_commit_makes_whole_batch_visible_at_once(cluster: LocalCluster, topic3: Topic) -> None:
    """Both Spark partitions' rows, spread over three output partitions, are hidden until the one commit."""
    options = batch_options(cluster, topic3)
    messages = batch_of(options, 0, p0=("a", "b", "c", "d"), p1=("e", "f", "g"))
    assert visible(cluster, topic3, "read_uncommitted") == [], "tasks staged their rows and wrote nothing"
    seen_before_commit: dict[str, list[str]] = {}

    class Observed(Producer):
        def commit_transaction(self, timeout: float | None = None) -> None:
            self.flush()
            seen_before_commit["committed"] = visible(cluster, topic3, settle=False)
            seen_before_commit["raw"] = visible(cluster, topic3, "read_uncommitted", settle=False)
            super().commit_transaction(timeout)

    outcome = DriverCommitter(options, producer_factory=Observed).commit(messages, 0)
    assert seen_before_commit == {"committed": [], "raw": ["a", "b", "c", "d", "e", "f", "g"]}
    assert (outcome.rows, outcome.written, outcome.skipped) == (7, (0, 1), ())
    assert outcome.transactional_id == f"p-{topic3.name}-q1-batch"
    # read right away, not waiting for markers: the batch commit returns once they are all written
    assert visible(cluster, topic3, settle=False) == ["a", "b", "c", "d", "e", "f", "g"]
    for message in messages:
        marker = read_marker(options, task_transactional_id(options, "q1", message.partition_id))
        assert (marker.batch_id, marker.rows, marker.digest) == (0, message.rows, message.digest)


def test_batch_atomicity_replay_skips_committed_batch(cluster: LocalCluster, topic: Topic) -> None:
    """The driver died after its commit and before Spark wrote ``commits/N``: the replay writes nothing."""
    options = batch_options(cluster, topic)

    class CrashAfterCommit(Producer):
        def commit_transaction(self, timeout: float | None = None) -> None:
            super().commit_transaction(timeout)
            raise SimulatedCrash

    crashing = DriverCommitter(options, producer_factory=CrashAfterCommit)
    with pytest.raises(SimulatedCrash):
        crashing.commit(batch_of(options, 5, p0=("a",), p1=("b",)), 5)
    replay = DriverCommitter(options).commit(batch_of(options, 5, p1=("b",), p0=("a",)), 5)
    assert (replay.rows, replay.written, replay.skipped) == (0, (), (0, 1))
    assert visible(cluster, topic) == ["a", "b"]
    assert visible(cluster, topic, "read_uncommitted") == ["a", "b"], "the replay sent nothing, not even aborted data"


def test_batch_atomicity_task_retry_does_not_duplicate(cluster: LocalCluster, topic: Topic) -> None:
    """A failed attempt and a speculative twin staged the same rows; only the message Spark keeps is written."""
    options = batch_options(cluster, topic)
    first_attempt = stage(options, 0, 1, "x", "y")
    retry = stage(options, 0, 1, "x", "y", attempt=1)
    assert (first_attempt.digest, first_attempt.rows) == (retry.digest, retry.rows)
    assert visible(cluster, topic, "read_uncommitted") == [], "attempts have no side effect on the cluster"
    with pytest.raises(RuntimeError, match="several messages for one Spark partition"):
        DriverCommitter(options).commit([first_attempt, retry], 0)
    DriverCommitter(options).commit([through_spark(stage(options, 0, 0, "w")), through_spark(retry)], 0)
    assert visible(cluster, topic) == ["w", "x", "y"]
    assert visible(cluster, topic, "read_uncommitted") == ["w", "x", "y"]


def test_batch_atomicity_driver_crash_before_commit_rewrites_batch_once(cluster: LocalCluster, topic: Topic) -> None:
    """The driver produced the batch and died before EndTxn; the restarted driver's init aborts that transaction."""
    options = batch_options(cluster, topic)
    crashed: list[Producer] = []

    class CrashBeforeCommit(Producer):
        def commit_transaction(self, timeout: float | None = None) -> None:
            self.flush()
            raise SimulatedCrash

        def close(self, timeout: float | None = None) -> None:
            crashed.append(self)  # a dead driver closes nothing

    with pytest.raises(SimulatedCrash):
        DriverCommitter(options, producer_factory=CrashBeforeCommit).commit(batch_of(options, 2, p0=("a", "b")), 2)
    assert visible(cluster, topic, settle=False) == [], "the open transaction holds the LSO"
    replay = DriverCommitter(options).commit(batch_of(options, 2, p0=("a", "b")), 2)
    assert replay.written == (0,)
    assert visible(cluster, topic) == ["a", "b"], "exactly one copy"
    assert visible(cluster, topic, "read_uncommitted") == ["a", "a", "b", "b"], "the first copy was aborted"
    for producer in crashed:
        Producer.close(producer)


def test_batch_atomicity_zombie_driver_is_fenced(cluster: LocalCluster, topic: Topic) -> None:
    """A driver of a previous run is still producing when the new run's driver commits the same batch."""
    options = batch_options(cluster, topic)
    outcome: dict[str, Any] = {}

    class NewDriverCommitsFirst(Producer):
        def commit_transaction(self, timeout: float | None = None) -> None:
            self.flush()
            outcome["new"] = DriverCommitter(options).commit(batch_of(options, 1, p0=("a",), p1=("b",)), 1)
            super().commit_transaction(timeout)

    with pytest.raises(ProducerFencedError):
        DriverCommitter(options, producer_factory=NewDriverCommitsFirst).commit(
            batch_of(options, 1, p0=("a",), p1=("b",)), 1
        )
    assert outcome["new"].written == (0, 1)
    assert visible(cluster, topic) == ["a", "b"]


def test_batch_atomicity_nondeterministic_replay_fails_loudly(cluster: LocalCluster, topic: Topic) -> None:
    options = batch_options(cluster, topic)
    DriverCommitter(options).commit(batch_of(options, 3, p0=("a",), p1=("b",)), 3)
    with pytest.raises(NonDeterministicBatchError, match="Spark partition 1 with 1 rows"):
        DriverCommitter(options).commit(batch_of(options, 3, p0=("a",), p1=("b", "c")), 3)
    assert visible(cluster, topic) == ["a", "b"], "the committed output is kept as it is"


def test_batch_atomicity_next_batch_writes_and_stale_batch_is_refused(cluster: LocalCluster, topic: Topic) -> None:
    options = batch_options(cluster, topic)
    DriverCommitter(options).commit(batch_of(options, 0, p0=("a",)), 0)
    DriverCommitter(options).commit(batch_of(options, 1, p0=("b",)), 1)
    with pytest.raises(RewoundCheckpointError):
        DriverCommitter(options).commit(batch_of(options, 0, p0=("zombie",)), 0)
    assert visible(cluster, topic) == ["a", "b"], "a batch older than the marker is never written again"


def test_batch_atomicity_empty_batch_opens_no_transaction(cluster: LocalCluster, topic: Topic) -> None:
    options = batch_options(cluster, topic)
    outcome = DriverCommitter(options).commit(batch_of(options, 4, p0=(), p1=()), 4)
    assert (outcome.transactional_id, outcome.rows) == (None, 0)
    assert read_marker(options, task_transactional_id(options, "q1", 0)).batch_id == -1


def test_switch_from_task_to_batch_atomicity_completes_a_half_committed_batch(
    cluster: LocalCluster, topic: Topic
) -> None:
    """Under atomicity=task, partition 0 committed batch 6 and the query died; it restarts with atomicity=batch."""
    task_mode = sink_options(cluster, topic)
    TaskWriter(task_mode, RowEncoder(KV, topic.name)).write(rows("a", "b"), task(6, partition=0))
    options = batch_options(cluster, topic)
    replay = DriverCommitter(options).commit(batch_of(options, 6, p0=("b", "a"), p1=("c",)), 6)
    assert (replay.written, replay.skipped) == ((1,), (0,))
    assert visible(cluster, topic) == ["a", "b", "c"]


def test_switch_from_batch_to_task_atomicity_skips_what_the_driver_committed(
    cluster: LocalCluster, topic: Topic
) -> None:
    options = batch_options(cluster, topic)
    DriverCommitter(options).commit(batch_of(options, 8, p0=("a",), p1=("b",)), 8)
    writer = TaskWriter(sink_options(cluster, topic), RowEncoder(KV, topic.name))
    assert writer.write(rows("a"), task(8, partition=0)).skipped
    assert writer.write(rows("b"), task(8, partition=1)).skipped
    with pytest.raises(NonDeterministicBatchError):
        writer.write(rows("b", "extra"), task(8, partition=1))
    assert not writer.write(rows("c"), task(9, partition=0)).skipped
    assert visible(cluster, topic) == ["a", "b", "c"]


def test_batch_atomicity_refused_batch_fails_the_commit_and_moves_no_marker(cluster: LocalCluster) -> None:
    """The driver's batch is refused by the partition after ``send_batch`` returned: the commit must raise."""
    small = Topic(cluster, configs={"max_message_bytes": "1024"})
    options = batch_options(cluster, small)
    messages = batch_of(options, 3, p0=("a", "x" * 4096), p1=("b",))
    with pytest.raises(OncelogError, match="max_message_bytes"):
        DriverCommitter(options).commit(messages, 3)
    for partition in (0, 1):
        assert read_marker(options, task_transactional_id(options, "q1", partition)).batch_id == -1
    assert visible(cluster, small) == []
    replay = DriverCommitter(options).commit(batch_of(options, 3, p0=("a",), p1=("b",)), 3)
    assert (replay.rows, replay.written) == (2, (0, 1))
    assert visible(cluster, small) == ["a", "b"]


def test_staged_chunks_survive_pickling_and_keep_each_partitions_rows(cluster: LocalCluster, topic3: Topic) -> None:
    """More rows than one chunk per task: the driver writes every staged row once."""
    options = batch_options(cluster, topic3)
    many = tuple(f"r{i:05d}" for i in range(SEND_CHUNK_ROWS + 7))
    messages = batch_of(options, 0, p0=many, p1=("z",))
    assert [len(c) for c in messages[0].chunks] == [SEND_CHUNK_ROWS, 7]
    outcome = DriverCommitter(options).commit(messages, 0)
    assert outcome.rows == len(many) + 1
    assert visible(cluster, topic3) == sorted([*many, "z"])


# ------------------------------------------------------------------------------------------- limits, wiring


def test_task_over_max_batch_bytes_fails_naming_the_option(cluster: LocalCluster, topic: Topic) -> None:
    options = batch_options(cluster, topic, maxBatchBytes="100")
    with pytest.raises(BatchTooLargeError, match="maxBatchBytes: Spark partition 0 of batch 0 alone stages") as err:
        stage(options, 0, 0, *(f"value-{i}" for i in range(20)))
    # the batch's offsets are logged: a smaller maxRecordsPerTrigger cannot shrink its replay
    assert "only bounds later batches" in str(err.value) and "restart with atomicity=task" in str(err.value)


def test_batch_over_max_batch_bytes_fails_before_producing(cluster: LocalCluster, topic: Topic) -> None:
    options = batch_options(cluster, topic, maxBatchBytes="200")
    messages = batch_of(options, 0, p0=("a" * 30, "b" * 30), p1=("c" * 30, "d" * 30))  # 170 bytes each
    with pytest.raises(BatchTooLargeError, match="maxBatchBytes: batch 0 stages") as err:
        DriverCommitter(options).commit(messages, 0)
    assert "raise maxBatchBytes (and spark.driver.maxResultSize if needed)" in str(err.value)
    assert visible(cluster, topic, "read_uncommitted") == []


def test_messages_of_another_batch_or_query_are_refused(cluster: LocalCluster, topic: Topic) -> None:
    options = batch_options(cluster, topic)
    with pytest.raises(RuntimeError, match="expected StagedOutput"):
        DriverCommitter(options).commit([stage(options, 1, 0, "a")], 2)
    other_query = OutputStager(options, RowEncoder(KV, topic.name)).stage(rows("b"), task(2, 1, query="q2"))
    with pytest.raises(RuntimeError, match="several queries"):
        DriverCommitter(options).commit([stage(options, 2, 0, "a"), other_query], 2)
    assert visible(cluster, topic, "read_uncommitted") == []


def test_atomicity_option_selects_the_writer(cluster: LocalCluster, topic: Topic) -> None:
    base = {"bootstrap": cluster.bootstrap, "topic": topic.name}
    assert isinstance(OncelogDataSource(base).streamWriter(KV, False), OncelogStreamWriter)
    batch = {**base, "ATOMICITY": "Batch"}
    assert isinstance(OncelogDataSource(batch).streamWriter(KV, False), OncelogAtomicStreamWriter)
    assert isinstance(OncelogDataSource(batch).writer(KV, False), OncelogAtomicBatchWriter)


# ----------------------------------------------------------------------------- rewinds, switches, empty replays


def test_batch_atomicity_refuses_a_rewound_checkpoint(cluster: LocalCluster, topic: Topic) -> None:
    options = batch_options(cluster, topic)
    for batch in range(3):
        DriverCommitter(options).commit(batch_of(options, batch, p0=(f"r{batch}",)), batch)
    with pytest.raises(RewoundCheckpointError, match="already committed batch 2, but Spark is writing batch 1"):
        DriverCommitter(options).commit(batch_of(options, 1, p0=("r1", "r2")), 1)
    assert visible(cluster, topic, "read_uncommitted") == ["r0", "r1", "r2"]


def test_batch_atomicity_replay_without_rows_of_a_committed_partition_fails(
    cluster: LocalCluster, topic: Topic
) -> None:
    options = batch_options(cluster, topic)
    DriverCommitter(options).commit(batch_of(options, 4, p0=("a",), p1=("b",)), 4)
    with pytest.raises(NonDeterministicBatchError, match=r"Spark partition 0 with 1 rows .* replay gives 0 rows"):
        DriverCommitter(options).commit(batch_of(options, 4, p0=(), p1=("b",)), 4)
    assert visible(cluster, topic) == ["a", "b"]


def test_switch_from_task_to_batch_fences_a_straggling_task(cluster: LocalCluster, topic: Topic) -> None:
    """A task of the previous run (``atomicity=task``) sent batch 5's rows and is about to commit its marker
    when the restarted query's driver (``atomicity=batch``) commits the same batch."""
    options = sink_options(cluster, topic)
    reached, resume = threading.Event(), threading.Event()

    class Straggler(Producer):
        def send_offsets_to_transaction(self, *args: Any, **kwargs: Any) -> None:
            reached.set()
            resume.wait(60)
            super().send_offsets_to_transaction(*args, **kwargs)

    outcome: list[BaseException | None] = []

    def old_run_task() -> None:
        writer = TaskWriter(options, RowEncoder(KV, options.topic), producer_factory=Straggler)
        try:
            writer.write(rows("a", "b"), task(5))
            outcome.append(None)
        except BaseException as exc:  # the verdict of the test
            outcome.append(exc)

    straggler = threading.Thread(target=old_run_task)
    straggler.start()
    assert reached.wait(60), "the old run's task never got to its marker"
    batch = batch_options(cluster, topic)
    committed = DriverCommitter(batch).commit(batch_of(batch, 5, p0=("a", "b")), 5)
    resume.set()
    straggler.join(60)
    assert committed.written == (0,)
    assert isinstance(outcome[0], ProducerFencedError | OncelogError), outcome
    assert visible(cluster, topic) == ["a", "b"], "batch 5 once: the straggler's transaction was aborted"
