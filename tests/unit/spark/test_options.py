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


# ------------------------------------------------------------------------- options of Spark's Kafka source


def test_max_offsets_per_trigger_is_sparks_name_of_the_record_limit() -> None:
    parsed = parse_source_options({**BASE, "maxOffsetsPerTrigger": "250"}, streaming=True, environ={})
    assert parsed.max_records_per_trigger == 250
    same = parse_source_options(
        {**BASE, "maxOffsetsPerTrigger": "250", "maxRecordsPerTrigger": "250"}, streaming=True, environ={}
    )
    assert same.max_records_per_trigger == 250
    [clash] = problems({**BASE, "maxOffsetsPerTrigger": "250", "maxRecordsPerTrigger": "100"}, streaming=True)
    assert clash.startswith("maxOffsetsPerTrigger/maxRecordsPerTrigger:") and "250 and 100" in clash


@pytest.mark.parametrize("value", ["-5", "0"])
def test_negative_or_zero_max_offsets_per_trigger_is_refused(value: str) -> None:
    [problem] = problems({**BASE, "maxOffsetsPerTrigger": value}, streaming=True)
    assert problem == f"maxOffsetsPerTrigger: must be at least 1, got {value}"
    assert problems({**BASE, "maxOffsetsPerTrigger": "ten"}, streaming=True) == [
        "maxOffsetsPerTrigger: 'ten' is not an integer"
    ]
    assert problems({**BASE, "maxOffsetsPerTrigger": "10"}) == [
        "maxOffsetsPerTrigger: only streaming reads (spark.readStream) use it"
    ]


def test_subscribe_takes_a_comma_list_like_sparks_kafka_source() -> None:
    parsed = parse_source_options({"bootstrap": "h:1", "subscribe": "a, b"}, streaming=True, environ={})
    assert (parsed.topics, parsed.topic_pattern) == (("a", "b"), None)
    assert problems({"bootstrap": "h:1", "subscribe": "a", "topic": "a"})[0] == "topic/subscribe: set only one of them"


def test_subscribe_pattern_matches_whole_topic_names() -> None:
    parsed = parse_source_options({"bootstrap": "h:1", "subscribePattern": "orders-.*"}, streaming=True, environ={})
    assert (parsed.topics, parsed.topic_pattern) == ((), "orders-.*")
    assert parsed.subscribes_to("orders-eu") and not parsed.subscribes_to("old-orders-eu")
    assert not parsed.subscribes_to("orders") and parsed.subscription == "subscribePattern 'orders-.*'"
    [bad] = problems({"bootstrap": "h:1", "subscribePattern": "orders-("})
    assert bad.startswith("subscribePattern: 'orders-(' is not a regular expression")
    starting = json.dumps({"payments": {"0": 1}})
    [foreign] = problems({"bootstrap": "h:1", "subscribePattern": "orders-.*", "startingOffsets": starting})
    assert foreign == "startingOffsets: topic 'payments' is not among the subscribed subscribePattern 'orders-.*'"


def test_starting_timestamp_applies_to_every_partition() -> None:
    parsed = parse_source_options({**BASE, "startingTimestamp": "1700000000000"}, streaming=True, environ={})
    spec = parsed.starting_offsets
    assert spec.kind == "timestamp" and spec.none_found == "error"
    assert spec.timestamp_for(TopicPartition("orders", 7)) == 1700000000000
    assert problems({**BASE, "startingTimestamp": "yesterday"}) == [
        "startingTimestamp: 'yesterday' is not a timestamp in milliseconds since the epoch"
    ]
    assert problems({**BASE, "startingTimestamp": "-1"})[0].startswith("startingTimestamp: must be a timestamp")


def test_offsets_by_timestamp_per_partition_with_sparks_strategy() -> None:
    stamps = json.dumps({"orders": {"0": 1700000000000, "1": 1700000005000}})
    parsed = parse_source_options(
        {**BASE, "startingOffsetsByTimestamp": stamps, "startingOffsetsByTimestampStrategy": "latest"},
        streaming=False,
        environ={},
    )
    spec = parsed.starting_offsets
    assert spec.timestamp_for(TopicPartition("orders", 1)) == 1700000005000
    assert (
        spec.timestamp_for(TopicPartition("orders", 2)) is None
        and spec.offset_for(TopicPartition("orders", 2)) == EARLIEST
    )
    assert spec.none_found == "latest"
    ending = parse_source_options({**BASE, "endingOffsetsByTimestamp": stamps}, streaming=False, environ={})
    assert ending.ending_offsets is not None and ending.ending_offsets.none_found == "latest"
    assert problems({**BASE, "startingOffsetsByTimestampStrategy": "skip"})[0].startswith(
        "startingOffsetsByTimestampStrategy: 'skip' is not 'error'"
    )
    assert problems({**BASE, "startingOffsets": "earliest", "startingTimestamp": "1"}) == [
        "startingOffsets/startingTimestamp: set only one of them (each says where reading starts)"
    ]
    assert problems({**BASE, "endingTimestamp": "1"}, streaming=True) == [
        "endingTimestamp: only batch reads (spark.read) take an end; a stream runs until stopped"
    ]


def test_include_headers_is_off_by_default_like_spark() -> None:
    assert not parse_source_options(BASE, streaming=True, environ={}).include_headers
    assert parse_source_options({**BASE, "includeHeaders": "TRUE"}, streaming=True, environ={}).include_headers
    assert problems({**BASE, "includeHeaders": "yes"}) == ["includeHeaders: 'yes' is not true or false"]


def test_unknown_option_suggests_the_closest_name() -> None:
    assert problems({**BASE, "maxOffsetPerTriger": "10"}, streaming=True) == [
        "maxoffsetpertriger: unknown option; did you mean 'maxOffsetsPerTrigger'?"
    ]
    [far] = problems({**BASE, "colour": "blue"})
    assert far.startswith("colour: unknown option; the options are bootstrap, endingOffsets,")


def test_spark_kafka_options_without_a_counterpart_say_what_to_do() -> None:
    found = problems(
        {
            "kafka.bootstrap.servers": "h:9092",
            "bootstrap": "h:1",
            "subscribe": "orders",
            "kafka.group.id": "g",
            "kafka.max.poll.records": "5",
        },
        streaming=True,
    )
    assert [p.split(":")[0] for p in found] == ["kafka.bootstrap.servers", "kafka.group.id", "kafka.max.poll.records"]
    assert "set bootstrap to the host:port of any oncelog service" in found[0]
    assert "Spark's checkpoint" in found[1]
    assert found[2].startswith("kafka.max.poll.records: Kafka client settings do not apply")


def test_load_checks_each_modes_own_option_values() -> None:
    from oncelog.spark import OncelogDataSource

    with pytest.raises(OptionError, match="maxOffsetsPerTrigger: must be at least 1, got -5"):
        OncelogDataSource({**BASE, "maxOffsetsPerTrigger": "-5"}).schema()
    with pytest.raises(OptionError, match="endingOffsets: 'soon' is not"):
        OncelogDataSource({**BASE, "endingOffsets": "soon"}).schema()
    # a valid option of either mode passes load(); whether it fits the mode is checked at query start
    OncelogDataSource({**BASE, "maxOffsetsPerTrigger": "5", "endingOffsets": "latest"}).schema()
