"""The ``oncelog`` command run as a user runs it: a subprocess, stdout piped (not a terminal), exact text or JSON.

Each failure path answers with one line naming the problem and what to check, within a bounded time where
it used to hang (the subprocess timeouts below are those bounds, not performance figures).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from oncelog.api.common import v1 as common_pb
from oncelog.api.storage import v1 as storage_pb
from oncelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from oncelog.records import Record, build_batch
from oncelog.rpc import sync_channel
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("cli-pipes"), storage_nodes=1) as running:
        yield running


def oncelog(
    *args: str, input: bytes | None = None, cwd: Path | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m oncelog ARGS`` with stdout and stderr piped; text decoded leniently."""
    env = {k: v for k, v in os.environ.items() if k not in ("ONCELOG_BOOTSTRAP", "COLUMNS")}
    done = subprocess.run(
        [sys.executable, "-m", "oncelog", *args],
        input=input if input is not None else b"",
        capture_output=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    )


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def new_topic(local: LocalCluster, name: str | None = None, partitions: int = 1) -> str:
    name = name or unique("pipes")
    with AdminClient(local.bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def unused_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


# ---------------------------------------------------------------------------------------------- errors


def test_server_text_is_printed_literally_not_as_markup(local: LocalCluster) -> None:
    done = oncelog("topics", "create", "bad name!", "-b", local.bootstrap)
    assert done.returncode == 1
    assert done.stderr == "error: topic name 'bad name!' contains [' ', '!']; only [a-zA-Z0-9._-] are allowed\n"


def test_unreachable_bootstrap_fails_within_seconds_naming_the_address_and_what_to_check() -> None:
    address = unused_address()
    for command in (["topics", "list"], ["produce", "orders"], ["consume", "orders", "-n", "1"]):
        done = oncelog(*command, "-b", address, timeout=20)  # it took 30 s (topics) and 60 s (produce)
        assert done.returncode == 1, command
        assert done.stderr == (
            f"error: cannot reach the cluster ({address}: connection refused or host unreachable); check that the "
            "cluster is running (`oncelog dev`, or the services' pods) and that --bootstrap (or ONCELOG_BOOTSTRAP) "
            "names one of its addresses\n"
        ), command


def test_port_out_of_range_is_reported_as_an_invalid_port() -> None:
    done = oncelog("topics", "list", "-b", "127.0.0.1:99999")
    assert done.returncode == 1
    assert done.stderr == (
        "error: bootstrap address '127.0.0.1:99999' has an invalid port 99999: a port is 1-65535 "
        "(host:port, for example 127.0.0.1:7101)\n"
    )


def test_transaction_size_without_transactional_id_is_refused() -> None:
    done = oncelog("produce", "orders", "--transaction-size", "10", "-b", "127.0.0.1:9")
    assert done.returncode == 2
    flat = " ".join(done.stderr.replace("│", " ").split())
    assert "--transaction-size needs --transactional-id (-t); without one, records are not written in" in flat


def test_non_utf8_input_is_produced_byte_for_byte(local: LocalCluster, tmp_path: Path) -> None:
    topic = new_topic(local)
    payload = b"caf\xe9\n\xff\xfe\nplain\n"
    done = oncelog("produce", topic, "-b", local.bootstrap, input=payload)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith(f"produced 3 record(s) to {topic} in ")
    source = tmp_path / "latin1.txt"
    source.write_bytes(b"k\xe9:v\xe9\n")
    done = oncelog("produce", topic, "-f", str(source), "-k", ":", "-b", local.bootstrap)
    assert done.returncode == 0, done.stderr
    assert values_of_committed(local, topic) == [b"caf\xe9", b"\xff\xfe", b"plain", b"v\xe9"]


def test_aborting_an_already_aborted_transaction_says_nothing_was_aborted(local: LocalCluster) -> None:
    tid = unique("abort-twice")
    topic = new_topic(local)
    producer = Producer(local.bootstrap, transactional_id=tid)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(topic, b"hanging").result()
    first = oncelog("transactions", "abort", tid, "-b", local.bootstrap)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith(f"aborted the transaction of {tid}; producer id ")
    second = oncelog("transactions", "abort", tid, "-b", local.bootstrap)
    assert second.returncode == 0, second.stderr
    assert second.stdout in (
        f"transactional id {tid} has no open transaction (state {state}); nothing was aborted\n"
        for state in ("complete_abort", "prepare_abort")
    )
    producer.close()


# ---------------------------------------------------------------------------------------------- output


def test_tables_are_not_cut_when_stdout_is_not_a_terminal(local: LocalCluster) -> None:
    topic = new_topic(local, name="wide-" + "x" * 120)
    tid = "long-transactional-id-" + "y" * 120
    with Producer(local.bootstrap, transactional_id=tid) as producer:
        producer.init_transactions()
    done = oncelog("topics", "describe", topic, "-b", local.bootstrap)
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    assert done.stdout.splitlines()[0].startswith(f"{topic}  (")
    assert "partition-storage-0" in done.stdout and "retention_ms=" in done.stdout
    done = oncelog("transactions", "list", "-b", local.bootstrap)
    assert done.returncode == 0, done.stderr
    [row] = [line for line in done.stdout.splitlines() if tid in line]
    assert row.split("│")[1].strip() == tid and row.split("│")[3].strip() == "empty"


def test_topics_describe_json_has_log_start_high_watermark_and_last_stable_offset(local: LocalCluster) -> None:
    topic = new_topic(local)
    with Producer(local.bootstrap) as producer:
        producer.send(topic, b"a")
        producer.send(topic, b"b")
    with Producer(local.bootstrap, transactional_id=unique("lso")) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open").result()  # the open transaction holds the last stable offset at 2
        done = oncelog("topics", "describe", topic, "-o", "json", "-b", local.bootstrap)
        producer.abort_transaction()
    assert done.returncode == 0, done.stderr
    [described] = json.loads(done.stdout)
    assert described["topic"] == topic
    assert described["partitions"] == [
        {
            "partition": 0,
            "leader": "partition-storage-0",
            "address": local.addresses("partition-storage")[0],
            "leader_epoch": described["partitions"][0]["leader_epoch"],
            "log_start": 0,
            "high_watermark": 3,
            "last_stable": 2,
            "replicas": ["partition-storage-0"],
            "in_sync": ["partition-storage-0"],
        }
    ]


def test_every_listing_command_prints_json_and_plain(local: LocalCluster) -> None:
    topic = new_topic(local)
    tid = unique("listing")
    with Producer(local.bootstrap, transactional_id=tid) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"x")
        producer.commit_transaction()
    b = ["-b", local.bootstrap]
    listed = json.loads(oncelog("topics", "list", "-o", "json", *b).stdout)
    assert {"topic": topic} in listed
    assert topic in oncelog("topics", "list", *b).stdout.splitlines()
    [txn] = json.loads(oncelog("transactions", "describe", tid, "-o", "json", *b).stdout)
    assert (txn["transactional_id"], txn["state"]) == (tid, "complete_commit")
    listing = json.loads(oncelog("transactions", "list", "-o", "json", *b).stdout)
    assert [t["state"] for t in listing if t["transactional_id"] == tid] == ["complete_commit"]
    [producer_row] = json.loads(oncelog("producers", "describe", topic, "-o", "json", *b).stdout)
    assert (producer_row["partition"], producer_row["producer_id"]) == (0, txn["producer_id"])
    plain = oncelog("producers", "describe", topic, "-o", "plain", *b).stdout
    assert plain.split("\t")[0] == "0" and len(plain.splitlines()) == 1
    assert json.loads(oncelog("groups", "offsets", unique("nobody"), "-o", "json", *b).stdout) == []


def test_version_and_python_dash_m() -> None:
    done = oncelog("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("oncelog ") and done.stdout.split()[1][0].isdigit()


# ---------------------------------------------------------------------------------------------- Kafka habits


def test_kafka_dotted_config_names_are_aliases(local: LocalCluster) -> None:
    topic = unique("dotted")
    b = ["-b", local.bootstrap]
    done = oncelog("topics", "create", topic, "--config", "retention.ms=60000", "-c", "segment.bytes=1048576", *b)
    assert done.returncode == 0, done.stderr
    [described] = json.loads(oncelog("topics", "describe", topic, "-o", "json", *b).stdout)
    assert (described["configs"]["retention_ms"], described["configs"]["segment_bytes"]) == ("60000", "1048576")


def test_headers_partition_offset_and_timestamp(local: LocalCluster) -> None:
    topic = new_topic(local, partitions=2)
    b = ["-b", local.bootstrap]
    done = oncelog("produce", topic, "-p", "1", "-H", "src=cli", "-H", "n=1", *b, input=b"a\nb\nc\n")
    assert done.returncode == 0, done.stderr
    done = oncelog("consume", topic, "-p", "1", "--offset", "1", "-n", "2", "--print-offset", "--print-headers", *b)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "1:1\tsrc=cli,n=1\tb\n1:2\tsrc=cli,n=1\tc\n"
    done = oncelog("consume", topic, "--from-timestamp", "0", "-n", "3", *b)
    assert (done.returncode, done.stdout) == (0, "a\nb\nc\n"), done.stderr
    late = oncelog("consume", topic, "--from-timestamp", "4102444800000", "--timeout", "1", *b)  # year 2100
    assert (late.returncode, late.stdout) == (0, ""), late.stderr


def test_consume_reads_several_topics(local: LocalCluster) -> None:
    first, second = new_topic(local), new_topic(local)
    with Producer(local.bootstrap) as producer:
        producer.send(first, b"from-first")
        producer.send(second, b"from-second")
    done = oncelog("consume", first, second, "--from-beginning", "-n", "2", "--print-offset", "-b", local.bootstrap)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == sorted([f"{first}:0:0\tfrom-first", f"{second}:0:0\tfrom-second"])
    assert done.stderr == f"consumed 2 record(s) from {first}, {second}\n"


def test_a_group_consume_commits_while_it_runs(local: LocalCluster) -> None:
    topic = new_topic(local)
    group = unique("periodic")
    with Producer(local.bootstrap) as producer:
        for value in (b"a", b"b", b"c"):
            producer.send(topic, value)
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"}
    command = ["consume", topic, "-g", group, "--from-beginning", "--commit-interval-ms", "0"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "oncelog", *command, "-b", local.bootstrap],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        assert proc.stdout is not None
        assert [proc.stdout.readline() for _ in range(3)] == [b"a\n", b"b\n", b"c\n"]
        tp = TopicPartition(topic, 0)
        with AdminClient(local.bootstrap) as admin:  # committed while running: a SIGKILL loses nothing printed
            committed = admin.list_group_offsets(group).get(tp)
            while committed is None or committed.offset < 3:
                assert proc.poll() is None
                committed = admin.list_group_offsets(group, timeout=30).get(tp)
    finally:
        proc.kill()
        proc.wait(30)


def test_producer_properties_and_base64_input(local: LocalCluster) -> None:
    topic = new_topic(local)
    b = ["-b", local.bootstrap]
    props = ["-X", "compression.type=zstd", "-X", "acks=all", "-X", "max.request.size=2097152"]
    done = oncelog("produce", topic, *props, "--base64", *b, input=b"aGVsbG8=\nAP8=\n")
    assert done.returncode == 0, done.stderr
    assert values_of_committed(local, topic) == [b"hello", b"\x00\xff"]
    bad = oncelog("produce", topic, "--base64", *b, input=b"aGVsbG8=\nnot base64!\n")
    assert bad.returncode == 1
    assert bad.stderr == "error: line 2 is not base64 (b'not base64!'); nothing after it was sent\n"


@pytest.mark.parametrize(
    ("option", "fragment", "code"),
    [
        ("nope=1", "unknown producer property 'nope'; use one of acks, compression.type,", 2),
        ("linger.ms=soon", "linger.ms='soon' does not parse", 2),
        ("compression.type=snappy", "compression='snappy' is not supported by oncelog", 2),
    ],
)
def test_bad_producer_properties_are_refused(local: LocalCluster, option: str, fragment: str, code: int) -> None:
    done = oncelog("produce", "orders", "-X", option, "-b", local.bootstrap, input=b"x\n")
    assert done.returncode == code
    assert fragment in " ".join(done.stderr.replace("│", " ").split())


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        (["--offset", "3"], "--offset needs --partition: offsets are per partition"),
        (["--group", "g", "-p", "0"], "--group reads from the group's committed offsets"),
        (["-p", "0", "--offset", "1", "--from-beginning"], "choose one of --offset, --from-timestamp and"),
    ],
)
def test_conflicting_consume_options_are_refused(options: list[str], fragment: str) -> None:
    done = oncelog("consume", "orders", *options, "-b", "127.0.0.1:9")
    assert done.returncode == 2
    assert fragment in " ".join(done.stderr.replace("│", " ").split())


def test_an_unknown_partition_is_named(local: LocalCluster) -> None:
    topic = new_topic(local, partitions=2)
    done = oncelog("consume", topic, "-p", "7", "-n", "1", "-b", local.bootstrap)
    assert (done.returncode, done.stderr) == (1, f"error: {topic} has no partition 7; it has partitions 0-1\n")


def test_find_hanging_lists_transactions_open_longer_than_the_timeout(local: LocalCluster) -> None:
    topic = new_topic(local)
    tid = unique("long-open")
    b = ["-b", local.bootstrap]
    with Producer(local.bootstrap, transactional_id=tid) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"held").result()
        within = oncelog("transactions", "find-hanging", topic, "-o", "json", *b)
        late = oncelog("transactions", "find-hanging", topic, "--max-transaction-timeout-ms", "0", "-o", "json", *b)
        producer.abort_transaction()
    assert (within.returncode, json.loads(within.stdout)) == (0, []), within.stderr
    [row] = json.loads(late.stdout)
    assert row == {
        "topic": topic,
        "partition": 0,
        "producer_id": row["producer_id"],
        "epoch": 0,
        "transactional_id": tid,
        "start_offset": 0,
        "why": "open longer than 0 ms",
    }


def test_topics_alter_adds_partitions_and_refuses_a_decrease(local: LocalCluster) -> None:
    topic = new_topic(local, partitions=2)
    b = ["-b", local.bootstrap]
    grown = oncelog("topics", "alter", topic, "--partitions", "4", *b)
    assert (grown.returncode, grown.stderr) == (0, "")
    assert grown.stdout == (
        f"altered topic {topic}: 2 -> 4 partition(s); added 2 (leader partition-storage-0), "
        "3 (leader partition-storage-0)\n"
    )
    shrink = oncelog("topics", "alter", topic, "--partitions", "3", *b)
    assert (shrink.returncode, shrink.stdout) == (1, "")
    assert shrink.stderr == (
        f"error: topic '{topic}' has 4 partition(s) and cannot shrink to 3: the count can only grow (partitions "
        "are never removed, so keyed records keep their partition); ask for more than 4\n"
    )
    described = json.loads(oncelog("topics", "describe", topic, "-o", "json", *b).stdout)
    assert [p["partition"] for p in described[0]["partitions"]] == [0, 1, 2, 3]


def test_configs_describe_and_alter_with_kafka_names(local: LocalCluster) -> None:
    topic = unique("configs")
    b = ["-b", local.bootstrap]
    assert oncelog("topics", "create", topic, "-c", "retention.ms=60000", *b).returncode == 0
    altered = oncelog(
        "configs", "alter", "--entity-type", "topics", "--entity-name", topic,
        "--add-config", "max.message.bytes=4096,segment.ms=3600000", "--delete-config", "retention.ms", *b,
    )  # fmt: skip
    assert (altered.returncode, altered.stderr) == (0, "")
    assert altered.stdout == (
        f"altered configs of topic {topic}: max_message_bytes=4096, segment_ms=3600000, "
        "retention_ms=604800000 (default)\n"
    )
    described = oncelog("configs", "describe", "--entity-type", "topics", "--entity-name", topic, "-o", "json", *b)
    assert json.loads(described.stdout) == [
        {"topic": topic, "name": "flush", "value": "sync", "source": "default"},
        {"topic": topic, "name": "max_message_bytes", "value": "4096", "source": "topic"},
        {"topic": topic, "name": "min_insync_replicas", "value": "1", "source": "default"},
        {"topic": topic, "name": "retention_bytes", "value": "-1", "source": "default"},
        {"topic": topic, "name": "retention_ms", "value": "604800000", "source": "default"},
        {"topic": topic, "name": "segment_bytes", "value": "134217728", "source": "default"},
        {"topic": topic, "name": "segment_ms", "value": "3600000", "source": "topic"},
        {"topic": topic, "name": "unclean_leader_election", "value": "false", "source": "default"},
    ]
    plain = oncelog("configs", "describe", "--topic", topic, "-o", "plain", *b)
    assert plain.stdout.splitlines()[1] == f"{topic}\tmax_message_bytes\t4096\ttopic"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["--add-config", "retention.ms=soon,flush=never"],
            1,
            "error: topic '{topic}': retention_ms='soon' is not an integer; flush='never'; use 'sync' (fsync before "
            "ack), 'leader' (only the leader fsyncs before ack) or 'async'\n",
        ),
        (
            ["--add-config", "min.insync.replicas=2"],
            1,
            "error: topic '{topic}': min_insync_replicas=2 is above its replication factor 1, so no write could ever "
            "be acknowledged; use at most 1\n",
        ),
        (["--entity-type", "brokers", "--add-config", "a=1"], 2, "oncelog has topic settings only"),
        (["--add-config", "retention.ms"], 2, "'retention.ms' is not key=value"),
        (["--add-config", "a=1", "--delete-config", "a"], 2, "a is both added and deleted; choose one"),
    ],
)
def test_bad_config_changes_are_refused_precisely(
    local: LocalCluster, args: list[str], code: int, message: str
) -> None:
    topic = new_topic(local)
    done = oncelog("configs", "alter", "--entity-name", topic, *args, "-b", local.bootstrap)
    assert done.returncode == code
    if code == 1:
        assert done.stderr == message.format(topic=topic)
    else:  # usage errors come in typer's box, which wraps lines
        assert message in " ".join(done.stderr.replace("│", " ").split())
    after = oncelog("configs", "describe", "--topic", topic, "-o", "json", "-b", local.bootstrap)
    assert {e["source"] for e in json.loads(after.stdout)} == {"default"}


def write_hanging_transaction(local: LocalCluster, topic: str, values: list[bytes]) -> int:
    """Append a transactional batch of a producer id no coordinator knows (KIP-664's hanging transaction: its
    AddPartitionsToTxn was lost); returns the producer id."""
    producer_id = 9_000_000_000 + uuid.uuid4().int % 1_000_000
    batch = build_batch(
        [Record(key=None, value=v) for v in values],
        producer_id=producer_id,
        producer_epoch=3,
        base_sequence=0,
        transactional=True,
        base_timestamp=int(time.time() * 1000),
    )
    with AdminClient(local.bootstrap) as admin:
        leader = admin.describe_topics([topic])[topic].partitions[0].leader_address
    request = storage_pb.ProduceRequest(
        acks=storage_pb.ACKS_ALL,
        partitions=[
            storage_pb.PartitionBatches(
                topic_partition=common_pb.TopicPartition(topic=topic, partition=0), leader_epoch=-1, records=batch
            )
        ],
    )
    [result] = storage_pb.PartitionStorageServiceStub(sync_channel(leader)).Produce(request, timeout=30).results
    assert not result.HasField("error"), result.error
    return producer_id


def test_a_hanging_transaction_is_aborted_by_topic_partition_and_start_offset(local: LocalCluster) -> None:
    topic = new_topic(local)
    b = ["-b", local.bootstrap]
    with Producer(local.bootstrap) as producer:
        producer.send(topic, b"before").result()  # offset 0
        producer_id = write_hanging_transaction(local, topic, [b"lost-1", b"lost-2"])  # offsets 1-2
        producer.send(topic, b"after").result()  # offset 3, held back by the open transaction
    tp = TopicPartition(topic, 0)
    with AdminClient(local.bootstrap) as admin:
        assert admin.list_offsets({tp: "latest"}, isolation_level="read_committed")[tp][0] == 1
    found = oncelog("transactions", "find-hanging", topic, "-o", "json", *b)
    assert json.loads(found.stdout) == [
        {
            "topic": topic,
            "partition": 0,
            "producer_id": producer_id,
            "epoch": 3,
            "transactional_id": None,
            "start_offset": 1,
            "why": "its coordinator has no open transaction for this producer id",
        }
    ]
    aborted = oncelog("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "1", *b)
    assert (aborted.returncode, aborted.stderr) == (0, "")
    assert aborted.stdout == (
        f"aborted the transaction of producer id {producer_id} (epoch 3) that started at offset 1 of {topic}-0; it "
        "is fenced there at epoch 4, and the last stable offset is now 5\n"
    )
    assert values_of_committed(local, topic) == [b"before", b"after"]  # read_committed sees nothing of it
    assert json.loads(oncelog("transactions", "find-hanging", topic, "-o", "json", *b).stdout) == []
    again = oncelog("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "1", *b)
    assert (again.returncode, again.stdout) == (1, "")
    assert again.stderr == (
        f"error: no open transaction starts at offset 1 of {topic}-0 (open ones start at: none); see "
        f"`oncelog transactions find-hanging {topic}`\n"
    )


def test_abort_by_start_offset_refuses_a_transaction_its_coordinator_has_open(local: LocalCluster) -> None:
    topic = new_topic(local)
    tid = unique("coordinated")
    b = ["-b", local.bootstrap]
    with Producer(local.bootstrap, transactional_id=tid) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(topic, b"open").result()
        refused = oncelog("transactions", "abort", "--topic", topic, "--partition", "0", "--start-offset", "0", *b)
        producer.abort_transaction()
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr == (
        f"error: the transaction at offset 0 of {topic}-0 belongs to transactional id {tid}, which its coordinator "
        f"has open (ongoing): abort it there, on all its partitions, with `oncelog transactions abort {tid}`\n"
    )
    incomplete = oncelog("transactions", "abort", "--topic", topic, "--start-offset", "0", *b)
    assert incomplete.returncode == 2
    assert "by all of --topic, --partition and --start-offset" in " ".join(incomplete.stderr.replace("│", " ").split())


# ---------------------------------------------------------------------------------------------- interrupts


# Runs `python -m oncelog ARGS` with Ctrl-C as a terminal delivers it: a test run started in the background of a
# non-interactive shell inherits SIGINT ignored, and a Python child would keep ignoring it. Not Popen's preexec_fn:
# that makes Python fork() this gRPC-using process instead of spawning, and gRPC's fork handlers can start a poller
# thread in the child whose epoll descriptor close_fds then closes (the child aborts: "epoll_wait error: Bad file
# descriptor").
_ONCELOG_WITH_SIGINT = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('oncelog', run_name='__main__', alter_sys=True)"
)


def start_transactional_produce(local: LocalCluster, topic: str, tid: str) -> subprocess.Popen[bytes]:
    """``oncelog produce -t TID`` with two lines written and stdin left open, once its transaction is ongoing."""
    env = {k: v for k, v in os.environ.items() if k != "ONCELOG_BOOTSTRAP"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _ONCELOG_WITH_SIGINT, "produce", topic, "-t", tid, "-b", local.bootstrap],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdin is not None
    try:
        proc.stdin.write(b"one\ntwo\n")
        proc.stdin.flush()
    except BrokenPipeError:  # it exited before reading: say why instead of the pipe error
        _, stderr = proc.communicate()
        raise AssertionError(f"produce exited with {proc.returncode} before reading: {stderr.decode()!r}") from None
    with AdminClient(local.bootstrap) as admin:  # the signal: the coordinator holds the open transaction
        while True:
            assert proc.poll() is None, proc.communicate()
            listed = {t.transactional_id for t in admin.list_transactions()}
            described = admin.describe_transactions([tid]) if tid in listed else {}
            if tid in described and described[tid].state == "ongoing" and described[tid].partitions:
                return proc


def test_ctrl_c_in_a_transactional_produce_aborts_and_says_so(local: LocalCluster) -> None:
    topic = new_topic(local)
    tid = unique("interrupted")
    proc = start_transactional_produce(local, topic, tid)
    try:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr.decode()
    assert stderr.decode() == (
        "error: interrupted: aborted the open transaction (2 record(s) discarded); 0 record(s) were committed before\n"
    )
    with AdminClient(local.bootstrap) as admin:
        assert admin.describe_transactions([tid])[tid].state in ("prepare_abort", "complete_abort")


def test_a_fenced_producer_says_what_happened_in_one_line(local: LocalCluster) -> None:
    topic = new_topic(local)
    tid = unique("fenced")
    proc = start_transactional_produce(local, topic, tid)
    try:
        with Producer(local.bootstrap, transactional_id=tid) as newer:
            newer.init_transactions()  # fences the command's producer and aborts its transaction
            _, stderr = proc.communicate(b"three\n", timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr
    assert stderr.decode() == (
        f"error: producer fenced: another producer started with transactional id {tid!r}, or an operator aborted "
        "its transaction (`oncelog transactions abort`); this one stopped. The open transaction is not committed; "
        "0 record(s) were committed before. Produce the rest again with a new run.\n"
    )
    assert values_of_committed(local, topic) == []


def values_of_committed(local: LocalCluster, topic: str) -> list[bytes | None]:
    with Consumer(local.bootstrap, isolation_level="read_committed") as consumer:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning()
        end = consumer.end_offsets([tp])[tp]
        seen: list[bytes | None] = []
        while consumer.position(tp) < end:
            seen += [r.value for r in consumer.poll(timeout_ms=1_000)]
        return seen


# ---------------------------------------------------------------------------------------------- offline partitions


@pytest.fixture(scope="module")
def degraded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LocalCluster, str, int]]:
    """A cluster whose second storage node was stopped: (cluster, topic, the partition it led)."""
    with LocalCluster(tmp_path_factory.mktemp("cli-offline"), storage_nodes=2) as running:
        topic = unique("offline")
        with AdminClient(running.bootstrap) as admin:
            admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
            leaders = {p.partition: p.leader_node_id for p in admin.describe_topics([topic])[topic].partitions}
        [lost] = [p for p, node in leaders.items() if node == "partition-storage-1"]
        node = running.node("partition-storage-1")
        assert node.process is not None
        node.process.terminate()  # a graceful stop deregisters the node: its partition is offline at once
        node.process.wait(30)
        yield running, topic, lost


def offline_line(topic: str, partition: int) -> str:
    return (
        f"error: partition {topic}-{partition} (leader partition-storage-1) is offline: the leading storage node is "
        f"not live; start it again, and see `oncelog topics describe {topic}`\n"
    )


@pytest.mark.parametrize(
    "command",
    [["consume", "--timeout", "3"], ["consume", "-n", "5"], ["consume", "-n", "5", "--group", "g1"], ["produce"]],
    ids=" ".join,
)
def test_an_offline_partition_is_named_instead_of_waited_on(
    degraded: tuple[LocalCluster, str, int], command: list[str]
) -> None:
    cluster, topic, lost = degraded
    verb, *options = command
    done = oncelog(verb, topic, *options, "-b", cluster.bootstrap, input=b"x\n", timeout=30)  # hung before
    assert done.returncode == 1
    assert done.stderr == offline_line(topic, lost)
    assert done.stdout == ""


def test_producing_to_an_online_partition_of_a_degraded_topic_works(degraded: tuple[LocalCluster, str, int]) -> None:
    cluster, topic, lost = degraded
    done = oncelog("produce", topic, "-p", str(1 - lost), "-b", cluster.bootstrap, input=b"x\n", timeout=30)
    assert done.returncode == 0, done.stderr


def test_topics_describe_shows_the_offline_partition(degraded: tuple[LocalCluster, str, int]) -> None:
    cluster, topic, lost = degraded
    done = oncelog("topics", "describe", topic, "-o", "json", "-b", cluster.bootstrap)
    assert done.returncode == 0, done.stderr
    [described] = json.loads(done.stdout)
    offline = described["partitions"][lost]
    assert (offline["address"], offline["log_start"], offline["high_watermark"]) == ("OFFLINE", None, None)
    assert described["partitions"][1 - lost]["address"] == cluster.addresses("partition-storage")[0]
