"""The sink's names recorded in the checkpoint: a restart under another topic, marker topic or prefix is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed (pip install -e '.[spark]')")

from oncelog.spark import OncelogDataSource, OptionError
from oncelog.spark.atomic import OutputStager
from oncelog.spark.checkpoint import NAMES_FILE, local_checkpoint
from oncelog.spark.writer import BatchDigest, RowEncoder, SinkCommitMessage
from oncelog.testing import LocalCluster

from .conftest import Topic
from .test_writer import KV, rows, task

pytestmark = pytest.mark.timeout(120)


def stream_writer(cluster: LocalCluster, checkpoint: Path, **options: str) -> object:
    base = {"bootstrap": cluster.bootstrap, "checkpointLocation": str(checkpoint), **options}
    return OncelogDataSource(base).streamWriter(KV, False)


def test_changed_sink_names_are_refused_once_a_batch_committed(
    cluster: LocalCluster, topic: Topic, topic3: Topic, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    names = {"topic": topic.name, "transactionalIdPrefix": "orders"}
    stream_writer(cluster, checkpoint, topic=topic3.name)  # nothing committed yet: a fixed typo is fine
    writer = stream_writer(cluster, checkpoint, **names)
    empty = SinkCommitMessage(0, 0, 0, 0, False, BatchDigest().hexdigest, "orders-q1-0")
    writer.commit([empty], 0)  # type: ignore[attr-defined]
    assert (checkpoint / NAMES_FILE).exists()
    stream_writer(cluster, checkpoint, **names)  # the same names: accepted
    changes = (
        ({**names, "transactionalIdPrefix": "orders-v2"}, "transactionalIdPrefix: this checkpoint's earlier runs"),
        ({**names, "topic": topic3.name}, "topic: this checkpoint's earlier runs committed their batches with topic="),
        ({**names, "markerTopic": topic3.name}, "markerTopic: this checkpoint's earlier runs"),
    )
    for changed, problem in changes:
        with pytest.raises(OptionError, match=problem) as err:
            stream_writer(cluster, checkpoint, **changed)
        assert "Set" in str(err.value) and "new checkpointLocation" in str(err.value)
    other = tmp_path / "other"
    stream_writer(cluster, other, **{**names, "transactionalIdPrefix": "orders-v2"})  # another query: its own names


def test_batch_atomicity_records_the_names_too(cluster: LocalCluster, topic: Topic, tmp_path: Path) -> None:
    checkpoint = tmp_path / "checkpoint"
    writer = stream_writer(cluster, checkpoint, topic=topic.name, atomicity="batch", transactionalIdPrefix="p1")
    staged = OutputStager(writer.options, RowEncoder(KV, topic.name)).stage(rows("a"), task(0))  # type: ignore[attr-defined]
    writer.commit([staged], 0)  # type: ignore[attr-defined]
    with pytest.raises(OptionError, match="transactionalIdPrefix: "):
        stream_writer(cluster, checkpoint, topic=topic.name, atomicity="batch", transactionalIdPrefix="p2")


def test_only_checkpoints_on_this_file_system_are_checked() -> None:
    assert local_checkpoint("/data/ckpt") == Path("/data/ckpt")
    assert local_checkpoint("file:///data/ckpt") == Path("/data/ckpt")
    assert local_checkpoint("hdfs://nn:8020/ckpt") is None
    assert local_checkpoint("s3a://bucket/ckpt") is None
    assert local_checkpoint(None) is None
