"""Source options: defaults, parsing, and errors that name the option at fault."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oncelog.client.records import TopicPartition
from oncelog.spark.offsets import EARLIEST, LATEST
from oncelog.spark.options import (
    ATOMICITY_BATCH,
    ATOMICITY_TASK,
    DEFAULT_MAX_BATCH_BYTES,
    OptionError,
    parse_sink_options,
    parse_source_options,
    resolve_bootstrap,
)
from oncelog.vocabulary import IsolationLevel

BASE = {"bootstrap": "127.0.0.1:7101", "topic": "orders"}


def problems(options: dict[str, str], *, streaming: bool = False) -> list[str]:
    with pytest.raises(OptionError) as caught:
        parse_source_options(options, streaming=streaming, environ={})
    return caught.value.problems


def test_defaults_follow_sparks_kafka_source() -> None:
    batch = parse_source_options(BASE, streaming=False, environ={})
    stream = parse_source_options(BASE, streaming=True, environ={})
    assert batch.bootstrap == ("127.0.0.1:7101",) and batch.topics == ("orders",)
    assert (batch.starting_offsets.kind, batch.ending_offsets and batch.ending_offsets.kind) == ("earliest", "latest")
    assert (stream.starting_offsets.kind, stream.ending_offsets) == ("latest", None)
    assert stream.isolation_level is IsolationLevel.READ_COMMITTED
    assert stream.max_records_per_trigger is None and stream.fail_on_data_loss


def test_option_names_are_case_insensitive_like_sparks_options() -> None:
    parsed = parse_source_options(
        {"BOOTSTRAP": "h:1", "Topics": "a, b,a", "MAXRECORDSPERTRIGGER": "500", "isolationlevel": "READ_UNCOMMITTED"},
        streaming=True,
        environ={},
    )
    assert parsed.topics == ("a", "b")
    assert parsed.max_records_per_trigger == 500
    assert parsed.isolation_level is IsolationLevel.READ_UNCOMMITTED


def test_offsets_json_with_earliest_and_latest_sentinels() -> None:
    starting = json.dumps({"orders": {"0": 12, "1": -2, "2": -1}})
    parsed = parse_source_options({**BASE, "startingOffsets": starting}, streaming=True, environ={})
    spec = parsed.starting_offsets
    assert spec.kind == "json"
    assert spec.offset_for(TopicPartition("orders", 0)) == 12
    assert spec.offset_for(TopicPartition("orders", 1)) == EARLIEST
    assert spec.offset_for(TopicPartition("orders", 2)) == LATEST
    assert spec.offset_for(TopicPartition("orders", 7)) == EARLIEST, "unnamed partitions start at the beginning"


def test_missing_topic_is_named() -> None:
    [problem] = problems({"bootstrap": "h:1"})
    assert problem.startswith("topic:")


def test_missing_bootstrap_names_the_option_and_the_fallbacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    [problem] = problems({"topic": "orders"})
    assert problem.startswith("bootstrap:") and "ONCELOG_BOOTSTRAP" in problem and "cluster.json" in problem
    assert '.option("bootstrap", "host:port")' in problem


def test_bootstrap_falls_back_to_env_then_cluster_file(tmp_path: Path) -> None:
    assert resolve_bootstrap(None, environ={"ONCELOG_BOOTSTRAP": "a:1,b:2"}) == ("a:1", "b:2")
    cluster_file = tmp_path / "cluster.json"
    cluster_file.write_text(json.dumps({"bootstrap": "127.0.0.1:9"}))
    assert resolve_bootstrap(None, environ={}, cluster_file=cluster_file) == ("127.0.0.1:9",)
    assert resolve_bootstrap("x:5", environ={"ONCELOG_BOOTSTRAP": "a:1"}, cluster_file=cluster_file) == ("x:5",)


def test_bad_bootstrap_address() -> None:
    [problem] = problems({**BASE, "bootstrap": "localhost"})
    assert problem.startswith("bootstrap:") and "host:port" in problem


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("{not json", "startingOffsets:"),
        ('{"orders": {"zero": 1}}', "not a non-negative integer"),
        ('{"orders": {"0": -3}}', "-3"),
        ('{"orders": {"0": "5"}}', "'5'"),
        ('{"payments": {"0": 1}}', "not among the subscribed topics"),
        ("beginning", "not 'earliest', 'latest' or JSON"),
    ],
)
def test_bad_starting_offsets_are_named(value: str, fragment: str) -> None:
    [problem] = problems({**BASE, "startingOffsets": value})
    assert problem.startswith("startingOffsets:") and fragment in problem


def test_earliest_is_not_a_valid_end() -> None:
    assert problems({**BASE, "endingOffsets": "earliest"})[0].startswith("endingOffsets:")
    assert problems({**BASE, "endingOffsets": '{"orders": {"0": -2}}'})[0].startswith("endingOffsets:")


def test_ending_offsets_refused_for_a_stream_and_trigger_limits_for_a_batch() -> None:
    assert problems({**BASE, "endingOffsets": "latest"}, streaming=True)[0].startswith("endingOffsets:")
    assert "maxRecordsPerTrigger" in problems({**BASE, "maxRecordsPerTrigger": "5"})[0]


def test_unknown_isolation_level_is_named() -> None:
    [problem] = problems({**BASE, "isolationLevel": "serializable"})
    assert problem.startswith("isolationLevel:") and "serializable" in problem


def test_numbers_must_be_positive_integers() -> None:
    found = problems({**BASE, "maxRecordsPerTrigger": "0", "maxBytesPerTrigger": "1k"}, streaming=True)
    assert sorted(p.split(":")[0] for p in found) == ["maxBytesPerTrigger", "maxRecordsPerTrigger"]


def test_every_problem_is_reported_at_once() -> None:
    found = problems({"bootstrap": "nope", "startingOffsets": "soon", "isolationLevel": "x"})
    assert {p.split(":")[0] for p in found} == {"bootstrap", "topic", "startingOffsets", "isolationLevel"}


def test_near_miss_option_name_is_flagged_but_spark_keys_are_not() -> None:
    [problem] = problems({**BASE, "startingOffset": "earliest", "checkpointLocation": "/tmp/x", "path": "p"})
    assert problem.startswith("startingoffset:") and "'startingOffsets'" in problem


def test_topic_and_topics_together_are_ambiguous() -> None:
    assert problems({**BASE, "topics": "a,b"})[0].startswith("topic/topics:")
    assert problems({"bootstrap": "h:1", "topic": "a,b"})[0].startswith("topic:")


# ------------------------------------------------------------------------------------------------- sink


def sink_problems(options: dict[str, str]) -> list[str]:
    with pytest.raises(OptionError) as caught:
        parse_sink_options(options, environ={})
    return caught.value.problems


def test_atomicity_defaults_to_task_and_accepts_batch() -> None:
    assert parse_sink_options(BASE, environ={}).atomicity == ATOMICITY_TASK
    parsed = parse_sink_options({**BASE, "Atomicity": " BATCH ", "maxBatchBytes": "1024"}, environ={})
    assert (parsed.atomicity, parsed.max_batch_bytes) == (ATOMICITY_BATCH, 1024)
    assert parse_sink_options({**BASE, "atomicity": "batch"}, environ={}).max_batch_bytes == DEFAULT_MAX_BATCH_BYTES


def test_unknown_atomicity_is_named() -> None:
    [problem] = sink_problems({**BASE, "atomicity": "job"})
    assert problem.startswith("atomicity: 'job' is not 'task'") and "'batch'" in problem


def test_max_batch_bytes_needs_batch_atomicity_and_a_positive_size() -> None:
    assert sink_problems({**BASE, "maxBatchBytes": "10"})[0].startswith("maxBatchBytes: only atomicity=batch")
    assert sink_problems({**BASE, "atomicity": "batch", "maxBatchBytes": "0"}) == [
        "maxBatchBytes: must be at least 1, got 0"
    ]
