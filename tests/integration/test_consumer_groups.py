"""Consumer groups with real processes (design/consumer-groups.md): assignment, cooperative hand-over, kill -9,
a paused zombie member, coordinator failover during a rebalance, bad input.

The group-offsets processes run with a short session timeout and heartbeat interval so that removals happen in
seconds. "At no instant do two members own one partition" is checked on the coordinator's stored ownership history
(DescribeConsumerGroups with include_history), replayed in order.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from oncelog.api.offsets import v1 as pb
from oncelog.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from oncelog.errors import Reason
from oncelog.rpc import from_rpc_error, sync_channel
from oncelog.testing import LocalCluster

pytestmark = pytest.mark.timeout(180)

SESSION_MS = 3000
HEARTBEAT_MS = 300
GROUP_ENV = {
    "ONCELOG_GROUP_OFFSETS_SESSION_TIMEOUT_MS": str(SESSION_MS),
    "ONCELOG_GROUP_OFFSETS_HEARTBEAT_INTERVAL_MS": str(HEARTBEAT_MS),
    "ONCELOG_GROUP_OFFSETS_GROUP_SWEEP_MS": "100",
}
MEMBER_SCRIPT = Path(__file__).with_name("group_member_process.py")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with LocalCluster(tmp_path_factory.mktemp("groups"), env=GROUP_ENV) as running:
        yield running


def new_topic(bootstrap: str, partitions: int) -> str:
    name = f"groups-{uuid.uuid4().hex[:10]}"
    with AdminClient(bootstrap) as admin:
        admin.create_topics([NewTopic(name, num_partitions=partitions)])
    return name


def group_stub(cluster: LocalCluster) -> pb.GroupOffsetsServiceStub:
    return pb.GroupOffsetsServiceStub(sync_channel(cluster.addresses("group-offsets")[0]))


def describe(cluster: LocalCluster, group: str, history: bool = False) -> pb.ConsumerGroupDescription:
    request = pb.DescribeConsumerGroupsRequest(group_ids=[group], include_history=history)
    [found] = group_stub(cluster).DescribeConsumerGroups(request, timeout=10).groups
    return found


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def owned_by(description: pb.ConsumerGroupDescription) -> dict[str, set[tuple[str, int]]]:
    return {
        m.member_id: {(tp.topic, tp.partition) for tp in [*m.assignment, *m.pending_revocation]}
        for m in description.members
    }


def replay(history: list[pb.OwnershipChange]) -> list[tuple[int, str, set[tuple[str, int]]]]:
    """Replay the ownership history; fail if a partition ever has two holders. Returns the entries."""
    holders: dict[str, set[tuple[str, int]]] = {}
    entries = []
    for change in history:
        owned = {(tp.topic, tp.partition) for tp in change.owned}
        holders[change.member_id] = owned
        entries.append((change.seq, change.member_id, owned))
        seen: dict[tuple[str, int], str] = {}
        for member, parts in holders.items():
            for tp in parts:
                assert tp not in seen, f"{tp} held by {seen[tp]} and {member} at history entry {change.seq}"
                seen[tp] = member
    return entries


class Listener:
    def __init__(self) -> None:
        self.events: list[tuple[str, set[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", assigned))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", lost))


def poll_all(consumers: list[Consumer]) -> None:
    for consumer in consumers:
        consumer.poll(timeout_ms=20)


def partitions_of(topic: str, count: int) -> set[TopicPartition]:
    return {TopicPartition(topic, p) for p in range(count)}


def disjoint_cover(consumers: list[Consumer], wanted: set[TopicPartition]) -> bool:
    sets = [c.assignment() for c in consumers]
    return sum(len(s) for s in sets) == len(wanted) and set().union(*sets) == wanted and all(sets)


def test_members_split_the_topic_and_a_joiner_gets_partitions_only_after_revocation(cluster: LocalCluster) -> None:
    topic, group = new_topic(cluster.bootstrap, 6), f"split-{uuid.uuid4().hex[:6]}"
    wanted = partitions_of(topic, 6)
    listeners = [Listener() for _ in range(4)]
    consumers = [Consumer(cluster.bootstrap, group_id=group) for _ in range(4)]
    try:
        for consumer, listener in zip(consumers[:3], listeners, strict=False):
            consumer.subscribe([topic], listener=listener)
        wait_until(lambda: (poll_all(consumers[:3]), disjoint_cover(consumers[:3], wanted))[1], "three-way split")
        assert sorted(len(c.assignment()) for c in consumers[:3]) == [2, 2, 2]

        consumers[3].subscribe([topic], listener=listeners[3])
        wait_until(
            lambda: (
                (poll_all(consumers), disjoint_cover(consumers, wanted))[1]
                and describe(cluster, group).state == "STABLE"
            ),
            "four-way split",
        )
        assert sorted(len(c.assignment()) for c in consumers) == [1, 1, 2, 2]
        revoked = {tp for listener in listeners[:3] for kind, tps in listener.events if kind == "revoked" for tp in tps}
        gained = consumers[3].assignment()
        assert gained and gained <= revoked, "the joiner got only partitions their old owners revoked"

        # the coordinator's history: never two holders, and each moved partition was released before granted
        entries = replay(list(describe(cluster, group, history=True).history))
        joiner = consumers[3].group_metadata().member_id
        for tp in gained:
            key = (tp.topic, tp.partition)
            granted = min(seq for seq, member, owned in entries if member == joiner and key in owned)
            released = [
                seq for seq, member, owned in entries if member != joiner and seq < granted and key not in owned
            ]
            assert released, f"{tp} was granted at {granted} without a release before it"
    finally:
        for consumer in consumers:
            consumer.close()
    assert describe(cluster, group).state == "EMPTY", "close() leaves the group at once"


def start_member(cluster: LocalCluster, group: str, topic: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(MEMBER_SCRIPT), cluster.bootstrap, group, topic, *extra],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def read_line(process: subprocess.Popen[str]) -> dict[str, object]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, f"member process exited with {process.wait()}"
    return json.loads(line)  # type: ignore[no-any-return]


def test_kill_9_member_partitions_go_to_the_others_after_the_session_timeout(cluster: LocalCluster) -> None:
    topic, group = new_topic(cluster.bootstrap, 4), f"kill-{uuid.uuid4().hex[:6]}"
    wanted = partitions_of(topic, 4)
    member = start_member(cluster, group, topic, "consume")
    consumers = [Consumer(cluster.bootstrap, group_id=group) for _ in range(2)]
    try:
        assert read_line(member)["assignment"], "the process member owns everything first"
        for consumer in consumers:
            consumer.subscribe([topic])
        wait_until(
            lambda: (
                poll_all(consumers),
                len(describe(cluster, group).members) == 3
                and all(len(m.assignment) >= 1 for m in describe(cluster, group).members),
            )[1],
            "three members each owning partitions",
        )
        killed_at = time.monotonic()
        os.kill(member.pid, signal.SIGKILL)
        member.wait()
        wait_until(lambda: (poll_all(consumers), disjoint_cover(consumers, wanted))[1], "the survivors cover all")
        took = time.monotonic() - killed_at
        assert len(describe(cluster, group).members) == 2
        replay(list(describe(cluster, group, history=True).history))
        print(f"reassignment after kill -9 took {took:.2f}s (session {SESSION_MS} ms, heartbeat {HEARTBEAT_MS} ms)")
    finally:
        member.kill()
        for consumer in consumers:
            consumer.close()


def read_committed_values(bootstrap: str, topic: str) -> list[bytes]:
    with Consumer(bootstrap) as reader:
        tp = TopicPartition(topic, 0)
        reader.assign([tp])
        end = reader.end_offsets([tp])[tp]
        values: list[bytes] = []
        while reader.position(tp) < end:
            values.extend(r.value or b"" for r in reader.poll(timeout_ms=200))
        return values


def test_zombie_member_paused_past_its_session_is_fenced_and_its_transaction_aborts(cluster: LocalCluster) -> None:
    topic, output = new_topic(cluster.bootstrap, 2), new_topic(cluster.bootstrap, 1)
    group = f"zombie-{uuid.uuid4().hex[:6]}"
    with Producer(cluster.bootstrap) as producer:
        for i in range(10):
            producer.send(topic, f"in-{i}".encode(), partition=i % 2)
    zombie = start_member(cluster, group, topic, "zombie", output)
    survivor = Consumer(cluster.bootstrap, group_id=group)
    try:
        ready = read_line(zombie)
        assert ready["ready"] and int(ready["member_epoch"]) > 0  # type: ignore[arg-type]
        os.kill(zombie.pid, signal.SIGSTOP)  # a long pause: no heartbeats
        survivor.subscribe([topic])
        wait_until(
            lambda: ready["member_id"] not in {m.member_id for m in describe(cluster, group).members},
            "the coordinator to remove the paused member",
        )
        wait_until(lambda: (poll_all([survivor]), survivor.assignment() == partitions_of(topic, 2))[1], "take-over")
        os.kill(zombie.pid, signal.SIGCONT)
        assert zombie.stdin is not None
        zombie.stdin.write("go\n")
        zombie.stdin.flush()
        outcome = read_line(zombie)
        assert outcome["transaction"] == "refused", outcome
        assert (outcome["error"], outcome["reason"]) == ("AbortableError", "UNKNOWN_MEMBER_ID"), outcome
        assert read_line(zombie) == {"transaction": "aborted"}
        commit = read_line(zombie)
        assert commit["commit"] == "refused" and commit["reason"] in ("UNKNOWN_MEMBER_ID", "FENCED_MEMBER_EPOCH")
        assert zombie.wait(timeout=30) == 0
        assert read_committed_values(cluster.bootstrap, output) == [], "nothing the zombie wrote is visible"
        assert all(v is None for v in survivor.committed(partitions_of(topic, 2)).values()), "no offsets committed"
    finally:
        if zombie.poll() is None:
            os.kill(zombie.pid, signal.SIGCONT)
            zombie.kill()
        survivor.close()


def test_bad_input_gets_precise_errors_and_changes_nothing(cluster: LocalCluster) -> None:
    topic, group = new_topic(cluster.bootstrap, 2), f"bad-{uuid.uuid4().hex[:6]}"
    stub = group_stub(cluster)
    with Consumer(cluster.bootstrap, group_id=group) as member:
        member.subscribe([topic])
        assert len(member.assignment()) == 2, "a topic created just before is known to the assignor at once"
        before = describe(cluster, group)
        cases = {
            "empty group": (
                pb.ConsumerGroupHeartbeatRequest(group_id="", subscribed_topic_names=[topic]),
                Reason.INVALID_REQUEST,
            ),
            "bad regex": (
                pb.ConsumerGroupHeartbeatRequest(group_id=group, subscribed_topic_regex="groups-(", member_id="x"),
                Reason.INVALID_REGULAR_EXPRESSION,
            ),
            "unknown assignor": (
                pb.ConsumerGroupHeartbeatRequest(
                    group_id=group, subscribed_topic_names=[topic], server_assignor="sticky", member_id="y"
                ),
                Reason.UNSUPPORTED_ASSIGNOR,
            ),
        }
        for what, (request, reason) in cases.items():
            with pytest.raises(grpc.RpcError) as info:
                stub.ConsumerGroupHeartbeat(request, timeout=10)
            err = from_rpc_error(info.value)
            assert err.reason is reason, what
            assert err.message, what
        with pytest.raises(grpc.RpcError) as info:
            stub.DeleteConsumerGroup(pb.DeleteConsumerGroupRequest(group_id=group), timeout=10)
        assert from_rpc_error(info.value).reason is Reason.NON_EMPTY_GROUP
        assert describe(cluster, group) == before
        with pytest.raises(ValueError, match="does not compile"):
            Consumer(cluster.bootstrap, group_id=group).subscribe(pattern="(")
        member.poll(timeout_ms=10)  # the server stayed up and still serves the member
        assert len(member.assignment()) == 2


def test_coordinator_failover_during_a_rebalance_converges_and_epochs_never_go_back(
    database_url: str, tmp_path: Path
) -> None:
    with LocalCluster(
        tmp_path,
        replicas={"group-offsets": 2},
        database_url=database_url,
        env={**GROUP_ENV, "ONCELOG_GROUP_OFFSETS_SHARD_LEASE_MS": "1500"},
    ) as cluster:
        topic, group = new_topic(cluster.bootstrap, 6), "failover-group"
        wanted = partitions_of(topic, 6)
        consumers = [Consumer(cluster.bootstrap, group_id=group) for _ in range(3)]
        try:
            for consumer in consumers[:2]:
                consumer.subscribe([topic])
            wait_until(lambda: (poll_all(consumers[:2]), disjoint_cover(consumers[:2], wanted))[1], "two-way split")
            owner = next(
                n for n in cluster.nodes if n.service == "group-offsets" and _serves_heartbeats(n.address, group)
            )
            epoch_before = _describe_at(cluster, group).group_epoch
            consumers[2].subscribe([topic])  # a rebalance starts: the others must revoke inside poll() ...
            assert _describe_at(cluster, group).state == "RECONCILING"
            cluster.kill(owner.node_id)  # ... and its coordinator dies in the middle of it
            epochs: dict[int, list[int]] = {i: [] for i in range(3)}

            def converge() -> bool:
                poll_all(consumers)
                for i, consumer in enumerate(consumers):
                    epochs[i].append(consumer.group_metadata().generation_id)
                return disjoint_cover(consumers, wanted) and sorted(len(c.assignment()) for c in consumers) == [2, 2, 2]

            wait_until(converge, "the group to converge on the surviving replica", timeout=90)
            after = _describe_at(cluster, group)
            assert after.group_epoch > epoch_before
            for seen in epochs.values():
                positive = [e for e in seen if e > 0]
                assert positive == sorted(positive), f"a member epoch went backwards: {seen}"
        finally:
            for consumer in consumers:
                consumer.close()


def _serves_heartbeats(address: str, group: str) -> bool:
    try:
        stub = pb.GroupOffsetsServiceStub(sync_channel(address))
        stub.FetchOffsets(pb.FetchOffsetsRequest(group_id=group), timeout=5)
        return True
    except grpc.RpcError:
        return False


def _describe_at(cluster: LocalCluster, group: str) -> pb.ConsumerGroupDescription:
    for node in cluster.nodes:
        if node.service == "group-offsets" and node.alive():
            stub = pb.GroupOffsetsServiceStub(sync_channel(node.address))
            request = pb.DescribeConsumerGroupsRequest(group_ids=[group])
            return stub.DescribeConsumerGroups(request, timeout=10).groups[0]
    raise AssertionError("no group-offsets process is alive")


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("ONCELOG_BOOTSTRAP", "COLUMNS")}
    return subprocess.run(
        [sys.executable, "-m", "oncelog", *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.mark.timeout(400)
def test_groups_cli_list_describe_reset_offsets_and_delete(cluster: LocalCluster) -> None:
    topic, group = new_topic(cluster.bootstrap, 2), f"cli-{uuid.uuid4().hex[:6]}"
    b = ("--bootstrap", cluster.bootstrap)
    with Producer(cluster.bootstrap) as producer:
        for i in range(10):
            producer.send(topic, b"x", partition=i % 2)
    member = Consumer(cluster.bootstrap, group_id=group)
    member.subscribe([topic])
    member.commit({TopicPartition(topic, 0): 2, TopicPartition(topic, 1): 5})

    listed = json.loads(cli("groups", "list", *b, "--output", "json").stdout)
    assert {"group": group, "state": "STABLE", "epoch": 1, "members": 1} in [
        {k: row[k] for k in ("group", "state", "epoch", "members")} for row in listed
    ]
    described = json.loads(cli("groups", "describe", group, *b, "--output", "json").stdout)
    lags = {(r["topic"], r["partition"]): (r["committed"], r["lso"], r["lag"]) for r in described}
    assert lags == {(topic, 0): (2, 5, 3), (topic, 1): (5, 5, 0)}

    refused = cli("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", *b)
    assert refused.returncode == 1 and "1 active member(s)" in refused.stderr
    member.close()
    dry = json.loads(
        cli("groups", "reset-offsets", group, "--topic", topic, "--shift-by", "-1", *b, "-o", "json").stdout
    )
    assert [(r["current"], r["new"]) for r in dry] == [(2, 1), (5, 4)]
    with AdminClient(cluster.bootstrap) as admin:
        assert {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()} == {0: 2, 1: 5}
    done = cli("groups", "reset-offsets", group, "--topic", topic, "--to-earliest", "--execute", *b)
    assert done.returncode == 0, done.stderr
    with AdminClient(cluster.bootstrap) as admin:
        assert {tp.partition: om.offset for tp, om in admin.list_group_offsets(group).items()} == {0: 0, 1: 0}
    bad = cli("groups", "reset-offsets", group, "--topic", topic, *b)
    assert bad.returncode == 2 and "exactly one of" in bad.stderr
    assert cli("groups", "delete", group, *b).returncode == 0
    assert group not in cli("groups", "list", *b).stdout


COPIER = Path(__file__).resolve().parents[2] / "examples" / "consume_transform_produce.py"


def _copier(cluster: LocalCluster, source: str, sink: str, group: str, slot: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                str(COPIER),
                source,
                sink,
                "--bootstrap",
                cluster.bootstrap,
                "--group",
                group,
                "--transactional-id",
                f"{group}-{slot}",  # stable per slot: a restarted copier fences its killed predecessor
                "--batch-size",
                "50",
                "--max-rate",
                "150",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _committed_lines(log: Path) -> int:
    return sum(1 for line in log.read_text(errors="replace").splitlines() if '"committed"' in line)


@pytest.mark.timeout(400)
def test_exactly_once_with_scaling_copiers_killed_at_random_and_one_joining(
    cluster: LocalCluster, tmp_path: Path
) -> None:
    """Three transactional copiers in one group, each SIGKILLed twice at random and restarted, a fourth joining
    mid-run: the output is the transformed input, nothing duplicated, nothing missing."""
    import random
    from collections import Counter

    from oncelog.testing.reading import read_all

    source, sink = new_topic(cluster.bootstrap, 6), new_topic(cluster.bootstrap, 3)
    group = f"scale-{uuid.uuid4().hex[:6]}"
    inputs = [f"in-{i:06d}".encode() for i in range(4000)]
    with Producer(cluster.bootstrap) as producer:
        for i, value in enumerate(inputs):
            producer.send(source, value, partition=i % 6)
    # Inputs keep arriving while the kill plan runs (about 300 a second), so a restarted copier always has
    # something to commit: with a fixed input the others could copy all of it before the plan's last step.
    plan_done = threading.Event()

    def feed() -> None:
        with Producer(cluster.bootstrap) as producer:
            while not plan_done.is_set():
                value = f"in-{len(inputs):06d}".encode()
                producer.send(source, value, partition=len(inputs) % 6)
                inputs.append(value)
                if len(inputs) % 30 == 0:
                    plan_done.wait(0.1)  # the feed's pace, not a wait for an event

    feeder = threading.Thread(target=feed, name="feeder")
    feeder.start()
    rng = random.Random(18)
    logs = {slot: tmp_path / f"copier-{slot}.log" for slot in range(4)}
    copiers = {slot: _copier(cluster, source, sink, group, slot, logs[slot]) for slot in range(3)}
    kills = Counter[int]()
    try:
        plan = [slot for slot in range(3) for _ in range(2)]
        rng.shuffle(plan)
        for step, slot in enumerate(plan):
            before = _committed_lines(logs[slot])
            wait_until(lambda s=slot, b=before: _committed_lines(logs[s]) > b, f"copier {slot} to commit", timeout=120)
            time.sleep(rng.uniform(0, 0.3))  # land the kill anywhere, often inside a transaction
            copiers[slot].send_signal(signal.SIGKILL)
            copiers[slot].wait()
            kills[slot] += 1
            copiers[slot] = _copier(cluster, source, sink, group, slot, logs[slot])
            if step == 2:
                copiers[3] = _copier(cluster, source, sink, group, 3, logs[3])  # one joins mid-run
        plan_done.set()
        feeder.join()
        with AdminClient(cluster.bootstrap) as admin:

            def done() -> bool:
                committed = admin.list_group_offsets(group)
                return sum(om.offset for om in committed.values()) >= len(inputs)

            wait_until(done, "the group to commit every input offset", timeout=240)
        assert _committed_lines(logs[3]) > 0, "the copier that joined mid-run took part"
        # every kill cost a removal (session timeout) and a rejoin: the group rebalanced at least that often
        assert describe(cluster, group).group_epoch >= 3 + 1 + 2 * len(plan)
    finally:
        plan_done.set()
        feeder.join()
        for process in copiers.values():
            process.send_signal(signal.SIGTERM)
        for process in copiers.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
    output = [r.value for r in read_all(cluster.bootstrap, sink)]
    duplicates = [v for v, n in Counter(output).items() if n > 1]
    assert not duplicates, f"{len(duplicates)} duplicated output record(s), e.g. {duplicates[:3]}"
    missing = {v.upper() for v in inputs} - set(output)
    assert not missing, f"{len(missing)} input record(s) missing from the output, e.g. {sorted(missing)[:3]}"
    assert sorted(kills.values()) == [2, 2, 2]
