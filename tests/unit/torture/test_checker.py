"""The checker on synthetic histories: each anomaly class is found and names its operations; clean twins pass."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from oncelog.torture.checker import CheckResult, check, main
from oncelog.torture.history import HistoryWriter, Op, parse_lines, read_history, write_history

from .histories import Builder, model_history

T0, T1, OUT, IN = "t-0", "t-1", "out-0", "in-0"


def only(result: CheckResult, cls: str) -> list:
    """The anomalies of `cls`, asserting no other failing class was found."""
    assert set(result.anomalies) == {cls}, result.to_dict()
    return result.anomalies[cls]


def test_a_clean_transactional_history_passes() -> None:
    b = Builder()
    w1 = b.write("p1", [(T0, 1, 0), (T1, 2, 0)])
    w2 = b.write("p1", [(T0, 3, 2)], f="produce")
    b.event("log", {"partition": T0, "start": 0, "records": [[0, "data", 1], [1, "control", "commit"], [2, "data", 3]]})
    b.read("c1", {T0: [(0, 1), (2, 3)], T1: [(0, 2)]}, final=True, hw={T0: 3, T1: 2}, lso={T0: 3, T1: 2})
    result = check(b.ops)
    assert result.valid, result.to_dict()
    assert result.ops_checked == len(b.ops) and w1.index < w2.index


def test_lost_write_names_the_writer_and_the_reader_that_passed_it() -> None:
    b = Builder()
    writer = b.write("p1", [(T0, 1, 0)], f="produce")
    b.write("p1", [(T0, 2, 1)], f="produce")
    reader = b.read("c1", {T0: [(1, 2)]})
    (anomaly,) = only(check(b.ops), "lost-write")
    assert anomaly.ops == (writer.index, reader.index)
    assert "value 1 acknowledged by op 1" in anomaly.explanation and "op 5 (c1 ok read)" in anomaly.explanation


def test_an_unknown_write_never_read_is_not_lost() -> None:
    b = Builder()
    b.write("p1", [(T0, 1, 0)], kind="info", f="produce")
    b.write("p1", [(T0, 2, 0)], f="produce")
    b.read("c1", {T0: [(0, 2)]}, final=True)
    assert check(b.ops).valid


def test_duplicate_value_at_two_offsets() -> None:
    b = Builder()
    writer = b.write("p1", [(T0, 7, 0)], f="produce")
    reader = b.read("c1", {T0: [(0, 7), (1, 7)]})
    (anomaly,) = only(check(b.ops), "duplicate")
    assert set(anomaly.ops) == {writer.index, reader.index}
    assert "t-0@0" in anomaly.explanation and "t-0@1" in anomaly.explanation


def test_two_values_at_one_offset_is_an_inconsistent_offset() -> None:
    b = Builder()
    first = b.write("p1", [(T0, 1, 0)], f="produce")
    second = b.write("p2", [(T0, 2, 0)], f="produce")
    b.read("c1", {T0: [(0, 1)]}, final=True)
    result = check(b.ops)
    assert "inconsistent-offset" in result.anomalies
    assert result.anomalies["inconsistent-offset"][0].ops == (first.index, second.index)


def test_aborted_read_in_read_committed() -> None:
    b = Builder()
    aborted = b.write("p1", [(T0, 1, 0)], f="txn-abort")
    reader = b.read("c1", {T0: [(0, 1)]})
    (anomaly,) = only(check(b.ops), "aborted-read")
    assert anomaly.ops == (reader.index, aborted.index)
    assert "aborted by the client" in anomaly.explanation


def test_aborted_data_in_read_uncommitted_is_allowed() -> None:
    b = Builder()
    b.write("p1", [(T0, 1, 0)], f="txn-abort")
    b.read("c1", {T0: [(0, 1)]}, isolation="read_uncommitted")
    assert check(b.ops).valid


def test_a_failed_write_that_becomes_visible_is_an_aborted_read() -> None:
    b = Builder()
    failed = b.write("p1", [(T0, 1, 0)], kind="fail", error="INVALID_PRODUCER_EPOCH")
    b.read("c1", {T0: [(0, 1)]})
    (anomaly,) = only(check(b.ops), "aborted-read")
    assert failed.index in anomaly.ops and "INVALID_PRODUCER_EPOCH" in anomaly.explanation


def test_torn_transaction_of_unknown_outcome() -> None:
    b = Builder()
    txn = b.write("p1", [(T0, 1, 0), (T1, 2, 0)], kind="info")
    drain = b.read("c1", {T0: [(0, 1)], T1: []}, final=True)
    (anomaly,) = only(check(b.ops), "torn-transaction")
    assert anomaly.ops == (txn.index, drain.index)
    assert "2@t-1" in anomaly.explanation and "final drain" in anomaly.explanation


def test_read_above_high_watermark_and_last_stable_offset() -> None:
    b = Builder()
    b.write("p1", [(T0, 1, 0), (T0, 2, 1)])
    above_hw = b.read("c1", {T0: [(0, 1), (1, 2)]}, hw={T0: 1})
    above_lso = b.read("c2", {T0: [(0, 1), (1, 2)]}, hw={T0: 2}, lso={T0: 1})
    bad_marks = b.event("watermarks", {"partition": T0, "hw": 2, "lso": 3})
    found = only(check(b.ops), "read-above-watermark")
    assert [a.ops for a in found] == [(above_hw.index,), (above_lso.index,), (bad_marks.index,)]
    assert "high watermark 1" in found[0].explanation and "last stable offset 1" in found[1].explanation


def test_last_stable_offset_past_a_transaction_not_yet_asked_to_commit() -> None:
    """An LSO above a record of a transaction observed before its client asked to commit: the LSO ignored an
    open transaction (the lso-ignores-open mutant); observed after the request, the same LSO is fine."""
    b = Builder()
    b.write("p1", [(T0, 1, 0)])
    probe = b.read("probe", {T0: [(0, 1)]}, isolation="read_uncommitted", hw={T0: 3}, lso={T0: 3})
    b.advance(5)
    txn = b.write("p2", [(T0, 2, 1), (T0, 3, 2)], commit_invoke_ns=b.now_ns)
    b.read("probe", {T0: [(1, 2), (2, 3)]}, isolation="read_uncommitted", hw={T0: 4}, lso={T0: 4})
    (anomaly,) = only(check(b.ops), "read-above-watermark")
    assert anomaly.ops == (probe.index, txn.index)
    assert "last stable offset 3" in anomaly.explanation and "2@t-0:1" in anomaly.explanation
    assert "ms later" in anomaly.explanation

    clean = Builder()
    clean.write("p1", [(T0, 1, 0)])
    clean.read("probe", {T0: [(0, 1)]}, isolation="read_uncommitted", hw={T0: 2}, lso={T0: 1})
    clean.advance(5)
    clean.write("p2", [(T0, 2, 1)], commit_invoke_ns=clean.now_ns)
    clean.read("probe", {T0: [(1, 2)]}, hw={T0: 3}, lso={T0: 3})
    assert check(clean.ops).valid, check(clean.ops).to_dict()


def test_a_read_whose_lso_is_above_its_hw_is_flagged() -> None:
    b = Builder()
    probe = b.read("probe", {T0: []}, hw={T0: 2}, lso={T0: 3})
    (anomaly,) = only(check(b.ops), "read-above-watermark")
    assert anomaly.ops == (probe.index,) and "above its high watermark 2" in anomaly.explanation


def _init(b: Builder, process: str, producer_id: int, epoch: int) -> Op:
    b.op(process, "invoke", "init-producer", {}, txn_id="t")
    return b.op(
        process,
        "ok",
        "init-producer",
        {"producer_id": producer_id, "epoch": epoch},
        producer_id=producer_id,
        epoch=epoch,
        txn_id="t",
    )


def test_init_producer_handing_out_an_epoch_again_is_an_epoch_regression() -> None:
    b = Builder()
    first = _init(b, "p1", 7, 3)
    again = _init(b, "p2", 7, 3)
    (anomaly,) = only(check(b.ops), "epoch-regression")
    assert anomaly.ops == (first.index, again.index)
    assert "producer 7 epoch 3" in anomaly.explanation

    clean = Builder()
    _init(clean, "p1", 7, 3)
    _init(clean, "p2", 7, 4)
    _init(clean, "p3", 8, 0)  # a new producer id starts over
    assert check(clean.ops).valid, check(clean.ops).to_dict()


def test_order_violation_within_a_producer() -> None:
    b = Builder()
    batch = b.write("p1", [(T0, 1, 5), (T0, 2, 4)], f="produce")
    (anomaly,) = only(check(b.ops), "order-violation")
    assert anomaly.ops == (batch.index,)
    assert "offsets 5 and 4" in anomaly.explanation
    sequential = Builder()
    first = sequential.write("p1", [(T0, 1, 5)], f="produce")
    second = sequential.write("p1", [(T0, 2, 4)], f="produce")
    found = check(sequential.ops).anomalies["order-violation"]
    assert [a.ops for a in found] == [(first.index, second.index)]


def test_order_violation_within_one_read() -> None:
    b = Builder()
    b.write("p1", [(T0, 1, 0), (T0, 2, 1)])
    reader = b.read("c1", {T0: [(1, 2), (0, 1)]})
    (anomaly,) = only(check(b.ops), "order-violation")
    assert anomaly.ops == (reader.index,)


def test_offset_gap_in_the_log_is_not_a_control_record() -> None:
    b = Builder()
    log = b.event("log", {"partition": T0, "start": 0, "records": [[0, "data", 1], [3, "control", "commit"]]})
    (anomaly,) = only(check(b.ops), "offset-gap")
    assert anomaly.ops == (log.index,) and "offsets 1-2" in anomaly.explanation


def test_a_read_that_skips_committed_data_is_an_offset_gap() -> None:
    b = Builder()
    writer = b.write("p1", [(T0, 1, 0), (T0, 2, 1), (T0, 3, 2)], f="produce")
    reader = b.read("c1", {T0: [(0, 1), (2, 3)]})
    found = check(b.ops).anomalies
    assert found["offset-gap"][0].ops == (reader.index, writer.index)


def test_a_read_may_skip_a_control_record() -> None:
    b = Builder()
    b.write("p1", [(T0, 1, 0)])
    b.write("p1", [(T0, 2, 2)])
    b.event(
        "log",
        {
            "partition": T0,
            "start": 0,
            "records": [[0, "data", 1], [1, "control", "commit"], [2, "data", 2], [3, "control", "commit"]],
        },
    )
    b.read("c1", {T0: [(0, 1), (2, 2)]}, final=True)
    assert check(b.ops).valid


def _copier(b: Builder, processed: list[tuple[int, int]], committed_to: int) -> int:
    """Inputs at IN offsets 0..n-1; each processed input gets an output in its own transaction."""
    b.write("src", [(IN, 100 + o, o) for o in range(3)], f="produce")
    last = 0
    for out_offset, (in_offset, out_value) in enumerate(processed):
        last = b.write(
            "copier",
            [(OUT, out_value, out_offset, [IN, in_offset])],
            reads={IN: [[in_offset, 100 + in_offset]]},
            offsets={"group": "g", "offsets": {IN: in_offset + 1}},
        ).index
    b.fetch_offsets("g", {IN: committed_to})
    b.read(
        "drain", {IN: [(o, 100 + o) for o in range(3)], OUT: [(i, v) for i, (_, v) in enumerate(processed)]}, final=True
    )
    return last


def test_consume_transform_produce_clean() -> None:
    b = Builder()
    _copier(b, [(0, 200), (1, 201), (2, 202)], committed_to=3)
    assert check(b.ops).valid, check(b.ops).to_dict()


def test_offsets_committed_without_their_outputs() -> None:
    b = Builder()
    _copier(b, [(0, 200), (1, 201)], committed_to=3)
    (anomaly,) = only(check(b.ops), "offsets-without-outputs")
    assert "in-0@2 has no visible output" in anomaly.explanation


def test_outputs_visible_without_their_offsets() -> None:
    b = Builder()
    last = _copier(b, [(0, 200), (1, 201), (2, 202)], committed_to=2)
    (anomaly,) = only(check(b.ops), "outputs-without-offsets")
    assert anomaly.ops[0] == last and "only up to 2" in anomaly.explanation


def test_double_processing_is_a_duplicate() -> None:
    b = Builder()
    _copier(b, [(0, 200), (1, 201), (1, 301), (2, 202)], committed_to=3)
    (anomaly,) = only(check(b.ops), "duplicate")
    assert "in-0@1" in anomaly.explanation and "2 times" in anomaly.explanation


def test_g1c_cycle_through_reads() -> None:
    b = Builder()
    b.op("p1", "invoke", "txn-commit", {"sends": [[T0, 1, None]]})
    b.op("p2", "invoke", "txn-commit", {"sends": [[T1, 2, None]]})
    t1 = b.op("p1", "ok", "txn-commit", {"sends": [[T0, 1, 0]], "reads": {T1: [[0, 2]]}})
    t2 = b.op("p2", "ok", "txn-commit", {"sends": [[T1, 2, 0]], "reads": {T0: [[0, 1]]}})
    (anomaly,) = only(check(b.ops), "G1c")
    assert set(anomaly.ops) == {t1.index, t2.index}
    assert "[wr]" in anomaly.explanation and "read 1" in anomaly.explanation


def test_g0_write_cycle_is_reported_but_allowed() -> None:
    b = Builder()
    b.op("p1", "invoke", "txn-commit", {"sends": [[T0, 1, None], [T1, 2, None]]})
    b.op("p2", "invoke", "txn-commit", {"sends": [[T0, 3, None], [T1, 4, None]]})
    b.op("p1", "ok", "txn-commit", {"sends": [[T0, 1, 0], [T1, 2, 1]]})
    b.op("p2", "ok", "txn-commit", {"sends": [[T0, 3, 1], [T1, 4, 0]]})
    result = check(b.ops)
    assert result.valid, result.to_dict()
    assert len(result.allowed["G0"]) == 1 and "[ww]" in result.allowed["G0"][0].explanation


def test_transaction_open_past_its_timeout() -> None:
    b = Builder()
    b.event("config", {"txn_timeout_ms": 1000, "margin_ms": 500})
    b.op("p1", "invoke", "txn-commit", {"sends": [[T0, 1, None]]})
    b.advance(2000)
    b.op("p1", "info", "txn-commit", {"sends": [[T0, 1, None]]})
    (anomaly,) = only(check(b.ops), "transaction-hang")
    assert "past the transaction timeout + margin of 1.5 s" in anomaly.explanation


def test_lso_stuck_after_the_faults_heal() -> None:
    b = Builder()
    b.event("config", {"txn_timeout_ms": 1000, "margin_ms": 0})
    b.event("nemesis", {"action": "start", "fault": "kill", "targets": ["storage-0"]}, process="nemesis")
    b.event("nemesis", {"action": "stop", "fault": "kill", "targets": ["storage-0"]}, process="nemesis")
    first = b.event("watermarks", {"partition": T0, "hw": 5, "lso": 3})
    b.advance(2000)
    later = b.event("watermarks", {"partition": T0, "hw": 6, "lso": 3})
    (anomaly,) = only(check(b.ops), "lso-stuck")
    assert anomaly.ops == (first.index, later.index)


def test_lso_stuck_seen_by_reads_in_a_run_without_faults() -> None:
    """The watermarks a probe's reads carry feed the lso-stuck check, and with no fault at all the whole history
    counts as healed (the no-txn-timeout mutant: an abandoned transaction holds the LSO)."""
    b = Builder()
    b.event("config", {"txn_timeout_ms": 1000, "margin_ms": 0})
    first = b.read("probe", {T0: []}, hw={T0: 5}, lso={T0: 3})
    b.advance(500)
    b.read("probe", {T0: []}, hw={T0: 6}, lso={T0: 3})
    b.advance(1000)
    later = b.read("probe", {T0: []}, hw={T0: 7}, lso={T0: 3})
    (anomaly,) = only(check(b.ops), "lso-stuck")
    assert anomaly.ops == (first.index, later.index)
    assert "last stable offset 3 below high watermark 5" in anomaly.explanation

    moved = Builder()
    moved.event("config", {"txn_timeout_ms": 1000, "margin_ms": 0})
    moved.read("probe", {T0: []}, hw={T0: 5}, lso={T0: 3})
    moved.advance(1500)
    moved.read("probe", {T0: []}, hw={T0: 7}, lso={T0: 4})
    assert check(moved.ops).valid


def test_lso_that_moves_is_not_stuck_and_faults_still_active_are_not_judged() -> None:
    moving = Builder()
    moving.event("config", {"txn_timeout_ms": 1000, "margin_ms": 0})
    moving.event("nemesis", {"action": "start", "fault": "kill"}, process="nemesis")
    moving.event("nemesis", {"action": "stop", "fault": "kill"}, process="nemesis")
    moving.event("watermarks", {"partition": T0, "hw": 5, "lso": 3})
    moving.advance(2000)
    moving.event("watermarks", {"partition": T0, "hw": 6, "lso": 6})
    assert check(moving.ops).valid
    active = Builder()
    active.event("config", {"txn_timeout_ms": 1000, "margin_ms": 0})
    active.event("nemesis", {"action": "start", "fault": "kill"}, process="nemesis")
    active.event("watermarks", {"partition": T0, "hw": 5, "lso": 3})
    active.advance(2000)
    active.event("watermarks", {"partition": T0, "hw": 6, "lso": 3})
    assert check(active.ops).valid


def test_consumer_without_progress_after_heal() -> None:
    b = Builder()
    b.event("config", {"consumer_progress_ms": 1000})
    b.event("nemesis", {"action": "start", "fault": "pause"}, process="nemesis")
    b.event("nemesis", {"action": "stop", "fault": "pause"}, process="nemesis")
    b.read("c1", {T0: []})
    b.read("c2", {T0: []}, caught_up=True)
    b.advance(2000)
    b.read("c1", {T0: []})
    (anomaly,) = only(check(b.ops), "consumer-stuck")
    assert "consumer c1" in anomaly.explanation and anomaly.ops


def test_history_round_trips_through_jsonl(tmp_path) -> None:
    ops = model_history([("commit", 1, [0, 1], 1), ("abort", 2, [1], 0), ("produce", 1, [0], 1)])
    path = tmp_path / "history.jsonl"
    write_history(path, ops)
    assert read_history(path) == ops
    with pytest.raises(ValueError, match="kind"):
        list(parse_lines(['{"index": 0, "process": "p", "type": "done", "f": "read"}']))


def test_command_prints_the_report_and_exits_one_on_anomalies(tmp_path, capsys) -> None:
    b = Builder()
    b.write("p1", [(T0, 1, 0)], f="txn-abort")
    b.read("c1", {T0: [(0, 1)]})
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    write_history(bad, b.ops)
    write_history(good, model_history([("commit", 1, [0], 1)]))
    assert main([str(bad)]) == 1
    assert "aborted-read" in capsys.readouterr().out
    assert main([str(good), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["valid"] is True
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "exits 1 when any anomaly is found" in " ".join(capsys.readouterr().out.split())


steps = st.lists(
    st.tuples(
        st.sampled_from(["produce", "commit", "abort"]),
        st.integers(0, 3),
        st.lists(st.integers(0, 1), min_size=1, max_size=4),
        st.integers(0, 1),
    ),
    min_size=1,
    max_size=12,
).filter(lambda s: any(kind != "abort" for kind, *_ in s))


@settings(max_examples=60, deadline=None)
@given(steps)
def test_model_histories_are_valid(model_steps) -> None:
    result = check(model_history(model_steps))
    assert result.valid, result.to_dict()


INJECTABLE = (
    "lost-write",
    "duplicate",
    "aborted-read",
    "read-above-watermark",
    "order-violation",
    "offset-gap",
    "torn-transaction",
)


def _inject(ops: list[Op], anomaly: str, pick: int) -> list[Op]:
    """One anomaly in a clean model history; `pick` chooses which committed value it hits."""
    ops = list(ops)
    drain_at = len(ops) - 1
    drain = ops[drain_at]
    reads = {p: [list(r) for r in rs] for p, rs in drain.value["reads"].items()}
    visible = [(p, i) for p, rs in reads.items() for i in range(len(rs))]
    partition, i = visible[pick % len(visible)]
    offset, value = reads[partition][i]
    if anomaly == "lost-write":
        ops = [
            replace(
                op,
                value={
                    **op.value,
                    "reads": {p: [r for r in rs if r[1] != value] for p, rs in op.value["reads"].items()},
                },
            )
            if op.f == "read" and op.kind == "ok"
            else op
            for op in ops
        ]
        return ops
    if anomaly == "duplicate":
        top = max(o for rs in reads.values() for o, _ in rs)
        reads[partition].append([top + 100, value])
    elif anomaly == "aborted-read":
        writer = next(
            op
            for op in ops
            if op.kind != "invoke"
            and op.f in ("produce", "txn-commit")
            and any(s[1] == value for s in op.value.get("sends", []))
        )
        ops[writer.index] = replace(writer, kind="fail")
        return ops
    elif anomaly == "order-violation":
        records = reads[partition]
        reads[partition] = records[::-1] if len(records) > 1 else [*records, records[0]]
    elif anomaly == "offset-gap":
        log_at = next(op.index for op in ops if op.f == "log" and op.value["partition"] == partition)
        log = ops[log_at]
        *head, (last, kind, last_value) = log.value["records"]
        ops[log_at] = replace(log, value={**log.value, "records": [*head, [last + 2, kind, last_value]]})
        return ops
    elif anomaly == "torn-transaction":
        txns = [op for op in ops if op.kind == "ok" and op.f == "txn-commit" and len(op.value["sends"]) > 1]
        assume(txns)
        txn = txns[pick % len(txns)]
        ops[txn.index] = replace(txn, kind="info")
        hidden = txn.value["sends"][pick % len(txn.value["sends"])][1]
        for op in ops:
            if op.f == "read" and op.kind == "ok":
                kept = {p: [r for r in rs if r[1] != hidden] for p, rs in op.value["reads"].items()}
                ops[op.index] = replace(op, value={**op.value, "reads": kept})
        return ops
    elif anomaly == "read-above-watermark":
        drain_value = {**drain.value, "hw": {**drain.value["hw"], partition: offset}}
        ops[drain_at] = replace(drain, value=drain_value)
        return ops
    ops[drain_at] = replace(drain, value={**drain.value, "reads": reads})
    return ops


@settings(max_examples=150, deadline=None)
@given(steps, st.sampled_from(INJECTABLE), st.integers(0, 50))
def test_one_injected_anomaly_is_found(model_steps, anomaly, pick) -> None:
    result = check(_inject(model_history(model_steps), anomaly, pick))
    assert not result.valid
    assert anomaly in result.anomalies, result.to_dict()


def test_writer_stamps_indices_and_clocks_and_reads_back(tmp_path) -> None:
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        first = history.append("p1", "invoke", "produce", {"sends": [[T0, 1, None]]})
        second = history.append("p1", "ok", "produce", {"sends": [[T0, 1, 0]]}, producer_id=7, epoch=0)
        with pytest.raises(ValueError, match="op type"):
            history.append("p1", "ok", "send")
    assert [first.index, second.index] == [0, 1]
    assert second.time_ns >= first.time_ns and second.wall_time > 1_600_000_000
    assert read_history(path) == [first, second]
    assert check(read_history(path)).valid
    with pytest.raises(ValueError, match="without 'process'"):
        list(parse_lines(['{"index": 0, "type": "ok", "f": "read"}']))


def test_committed_offsets_going_backwards() -> None:
    b = Builder()
    b.fetch_offsets("g", {IN: 3})
    high = b.fetch_offsets("g", {IN: 5})
    b.fetch_offsets("g", {IN: 5})
    low = b.fetch_offsets("g", {IN: 4})
    (anomaly,) = only(check(b.ops), "offset-regression")
    assert anomaly.ops == (high.index, low.index) and "up to 5" in anomaly.explanation


def test_read_completed_before_its_writer_asked_to_commit() -> None:
    b = Builder()
    b.op("p1", "invoke", "txn-commit", {"sends": [[T0, 1, None]]})
    reader = b.read("c1", {T0: [(0, 1)]})
    commit_invoke_ns = b.now_ns
    writer = b.op("p1", "ok", "txn-commit", {"sends": [[T0, 1, 0]], "commit_invoke_ns": commit_invoke_ns})
    b.read("c2", {T0: [(0, 1)]})
    (anomaly,) = only(check(b.ops), "early-read")
    assert anomaly.ops == (reader.index, writer.index) and "before its writer" in anomaly.explanation


def test_a_transaction_reading_its_own_send_reads_early() -> None:
    b = Builder()
    txn = b.write("p1", [(T0, 1, 0)], reads={T0: [[0, 1]]})
    (anomaly,) = only(check(b.ops), "early-read")
    assert anomaly.ops == (txn.index,) and "its own send" in anomaly.explanation


def test_send_landing_below_an_offset_known_before_it_was_invoked() -> None:
    b = Builder()
    known = b.write("p1", [(T0, 1, 5)], f="produce")
    late = b.write("p2", [(T0, 2, 3)], f="produce")
    concurrent = Builder()
    concurrent.op("p2", "invoke", "produce", {"sends": [[T0, 2, None]]})
    concurrent.write("p1", [(T0, 1, 5)], f="produce")
    concurrent.op("p2", "ok", "produce", {"sends": [[T0, 2, 3]]})
    (anomaly,) = only(check(b.ops), "realtime-order")
    assert anomaly.ops == (known.index, late.index) and "landed at offset 3" in anomaly.explanation
    assert check(concurrent.ops).valid


def test_a_transaction_fenced_between_its_writes_and_its_commit_may_be_seen_only_uncommitted() -> None:
    """Its records were written before the fence, which aborts them: read_uncommitted readers see aborted data (as
    on Kafka); a read_committed reader must not."""
    b = Builder()
    b.op("p1", "invoke", "txn-commit", {"sends": [[T0, 1, None]]})
    b.op("z", "invoke", "init-producer", {}, txn_id="tx-1")
    fence = b.op("z", "ok", "init-producer", {"producer_id": 9, "epoch": 4}, txn_id="tx-1")
    asked = b.now_ns
    b.read("u1", {T0: [(0, 1)]}, isolation="read_uncommitted")
    fenced = b.op(
        "p1", "info", "txn-commit", {"sends": [[T0, 1, None]], "commit_invoke_ns": asked}, producer_id=9, epoch=3
    )
    assert "zombie-write" not in check(b.ops).anomalies
    reader = b.read("c1", {T0: [(0, 1)]})
    (anomaly,) = only(check(b.ops), "zombie-write")
    assert anomaly.ops == (fence.index, fenced.index, reader.index)
    assert "before it asked to commit" in anomaly.explanation


def test_a_fenced_epoch_must_not_commit_nor_become_visible() -> None:
    b = Builder()
    b.op("z", "invoke", "init-producer", {}, txn_id="tx-1")
    fence = b.op("z", "ok", "init-producer", {"producer_id": 9, "epoch": 4}, txn_id="tx-1")
    b.op("p1", "invoke", "txn-commit", {"sends": [[T0, 1, None]]})
    zombie = b.op("p1", "ok", "txn-commit", {"sends": [[T0, 1, 0]]}, producer_id=9, epoch=3)
    b.op("p1", "invoke", "txn-commit", {"sends": [[T0, 2, None]]})
    leaked = b.op("p1", "info", "txn-commit", {"sends": [[T0, 2, None]]}, producer_id=9, epoch=3)
    reader = b.read("c1", {T0: [(0, 1), (1, 2)]})
    b.op("p2", "invoke", "txn-commit", {"sends": [[T0, 3, None]]})
    b.op("p2", "ok", "txn-commit", {"sends": [[T0, 3, 2]]}, producer_id=9, epoch=4)
    found = only(check(b.ops), "zombie-write")
    assert [a.ops for a in found] == [
        (fence.index, zombie.index, reader.index),
        (fence.index, leaked.index, reader.index),
    ]
    assert "epoch 3 committed" in found[0].explanation and "fenced that epoch with epoch 4" in found[0].explanation
