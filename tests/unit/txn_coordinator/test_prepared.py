"""Tests of prepared transactions (two-phase commit, design/kafka-semantics.md §5.7) and the check-back sweep,
over the in-memory ports of test_coordinator."""

from __future__ import annotations

import pytest

from oncelog.errors import InvalidTxnState, NetworkException, ProducerFenced
from oncelog.telemetry.metrics import OncelogMetrics
from oncelog.txn_coordinator.check_back import CheckBackPolicy, CheckVerdict, PreparedTransactionResolver
from oncelog.txn_coordinator.metadata import PreparedInfo
from oncelog.txn_coordinator.prepared import PreparedToken
from oncelog.txn_coordinator.state import TransactionResult, TransactionState

from .test_coordinator import TIMEOUT, TP0, Harness, expect

S = TransactionState
pytestmark = pytest.mark.timeout(20)


@pytest.fixture
async def h() -> Harness:
    harness = Harness()
    await harness.load_all()
    return harness


async def prepared(h: Harness, tid: str = "t", check_back: str = "") -> tuple[tuple[int, int], PreparedToken]:
    identity = await h.begin(tid)
    token = await h.coordinator.prepare_transaction(tid, *identity, check_back)
    return (identity[0], identity[1]), token


# ------------------------------------------------------------------------------------------ prepare


async def test_prepare_persists_prepared_with_the_token_of_the_records_identity(h: Harness) -> None:
    (pid, epoch), token = await prepared(h, check_back="app:1")
    assert token == PreparedToken("t", pid, epoch)
    row = h.store.rows["t"]
    assert (row.state, row.producer_id, row.producer_epoch, row.partitions) == (S.PREPARED, pid, epoch, {TP0})
    assert row.prepared == PreparedInfo(epoch, h.clock.now, "app:1")
    assert h.markers.sent == []  # nothing is decided yet


async def test_prepare_retry_returns_the_same_token_without_writing(h: Harness) -> None:
    (pid, epoch), token = await prepared(h)
    writes = len(h.store.writes)
    assert await h.coordinator.prepare_transaction("t", pid, epoch) == token
    assert len(h.store.writes) == writes


async def test_prepare_without_an_open_transaction_says_to_send_first(h: Harness) -> None:
    pid, epoch = await h.init("t")
    with pytest.raises(InvalidTxnState, match="no open transaction to prepare"):
        await h.coordinator.prepare_transaction("t", pid, epoch)


async def test_prepare_by_a_stale_epoch_is_fenced(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    await expect(ProducerFenced, h.coordinator.prepare_transaction("t", pid, epoch - 1))
    assert h.store.rows["t"].state is S.ONGOING


async def test_prepared_transaction_outlives_the_transaction_timeout(h: Harness) -> None:
    await prepared(h)
    h.clock.now += 10 * TIMEOUT
    assert await h.coordinator.abort_timed_out_transactions(h.clock.now) == []
    assert h.store.rows["t"].state is S.PREPARED


async def test_nothing_may_be_added_to_a_prepared_transaction(h: Harness) -> None:
    (pid, epoch), _ = await prepared(h)
    with pytest.raises(InvalidTxnState, match="prepared: nothing may be added"):
        await h.coordinator.add_partitions("t", pid, epoch, {("orders", 1)})


async def test_prepared_transaction_survives_a_coordinator_reload(h: Harness) -> None:
    _, token = await prepared(h, check_back="app:1")
    coordinator = h.new_coordinator()
    await h.load_all(coordinator)
    assert [p.token for p in coordinator.prepared_transactions()] == [token]
    assert coordinator.prepared_transactions()[0].info.check_back_address == "app:1"


# ------------------------------------------------------------------------------------------ complete


@pytest.mark.parametrize("commit", [True, False])
async def test_owner_completes_its_token_with_markers_above_the_records_epoch(h: Harness, commit: bool) -> None:
    (pid, epoch), token = await prepared(h)
    outcome = await h.coordinator.end_txn_and_wait("t", pid, epoch, commit, 0, token=(pid, token.producer_epoch))
    result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
    assert h.store.rows["t"].state is result.prepare_state
    assert [(m.result, m.producer_epoch) for m in h.markers.for_id("t")] == [(result, epoch + 1)]
    assert outcome.producer == (pid, epoch + 1)
    await h.markers.deliver_all()
    assert h.store.rows["t"].state is result.complete_state
    assert h.store.rows["t"].prepared is None


async def test_complete_retry_after_the_decision_gets_the_same_answer(h: Harness) -> None:
    (pid, epoch), _ = await prepared(h)
    first = await h.coordinator.end_txn_and_wait("t", pid, epoch, True, 0, token=(pid, epoch))
    await h.markers.deliver_all()
    again = await h.coordinator.end_txn_and_wait("t", pid, epoch, True, 0, token=(pid, epoch))
    assert again.producer == first.producer
    assert len(h.markers.for_id("t")) == 1


async def test_complete_with_a_token_of_another_transaction_names_the_prepared_one(h: Harness) -> None:
    (pid, epoch), _ = await prepared(h)
    with pytest.raises(InvalidTxnState, match=rf"does not name its prepared transaction.*epoch {epoch}\)"):
        await h.coordinator.end_txn_and_wait("t", pid, epoch, True, 0, token=(pid, epoch + 7))
    assert h.store.rows["t"].state is S.PREPARED


async def test_complete_without_a_prepared_transaction_says_so(h: Harness) -> None:
    pid, epoch = await h.begin("t")
    with pytest.raises(InvalidTxnState, match="has no prepared transaction"):
        await h.coordinator.end_txn_and_wait("t", pid, epoch, True, 0, token=(pid, epoch))
    assert h.store.rows["t"].state is S.ONGOING


async def test_plain_end_txn_cannot_finish_a_prepared_transaction(h: Harness) -> None:
    (pid, epoch), _ = await prepared(h)
    with pytest.raises(InvalidTxnState, match=r"complete_transaction\(token\)"):
        await h.coordinator.end_txn("t", pid, epoch, commit=True)


# ------------------------------------------------------------------------------------------ new owners


async def test_keep_prepared_hands_the_token_to_the_new_instance_and_fences_the_old(h: Harness) -> None:
    (pid, epoch), token = await prepared(h)
    owner = await h.coordinator.init_producer_id("t", TIMEOUT, keep_prepared=True)
    assert owner == (pid, epoch + 1)
    assert h.coordinator.prepared_token("t", owner) == token
    assert h.store.rows["t"].state is S.PREPARED
    # the zombie holds the token but not the id any more
    await expect(ProducerFenced, h.coordinator.end_txn_and_wait("t", pid, epoch, True, 0, token=(pid, epoch)))
    assert h.markers.sent == []
    await h.coordinator.end_txn_and_wait("t", *owner, True, 0, token=(pid, epoch))
    assert [(m.result, m.producer_epoch) for m in h.markers.for_id("t")] == [(TransactionResult.COMMIT, epoch + 2)]


async def test_init_without_keep_prepared_aborts_the_prepared_transaction(h: Harness) -> None:
    await prepared(h)
    owner = await h.init_until_done("t")
    assert [m.result for m in h.markers.for_id("t")] == [TransactionResult.ABORT]
    assert h.store.rows["t"].state is S.EMPTY
    assert h.coordinator.prepared_token("t", owner) is None


async def test_admin_abort_finishes_a_prepared_transaction(h: Harness) -> None:
    await prepared(h)
    await h.coordinator.abort_transaction("t")
    assert h.store.rows["t"].state is S.PREPARE_ABORT


# ------------------------------------------------------------------------------------------ check-back


class FakeChecker:
    def __init__(self, *answers: CheckVerdict | Exception) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, PreparedToken]] = []

    async def check(self, address: str, token: PreparedToken, timeout_s: float) -> CheckVerdict:
        self.calls.append((address, token))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer


def resolver(h: Harness, checker: FakeChecker, **policy: int | bool) -> PreparedTransactionResolver:
    settings = {"check_back_after_ms": 1_000, "check_back_interval_ms": 500, "check_back_max_attempts": 3}
    settings.update(policy)
    return PreparedTransactionResolver(
        h.coordinator,
        checker,
        h.clock,
        CheckBackPolicy(**settings),
        metrics=OncelogMetrics(),  # type: ignore[arg-type]
    )


async def test_check_back_waits_for_check_back_after_ms(h: Harness) -> None:
    await prepared(h, check_back="app:1")
    checker = FakeChecker(CheckVerdict.COMMIT)
    h.clock.now += 999
    assert await resolver(h, checker).sweep() == []
    assert checker.calls == []


@pytest.mark.parametrize(
    ("verdict", "state"), [(CheckVerdict.COMMIT, S.PREPARE_COMMIT), (CheckVerdict.ROLLBACK, S.PREPARE_ABORT)]
)
async def test_check_back_verdict_decides_the_transaction(h: Harness, verdict: CheckVerdict, state: S) -> None:
    _, token = await prepared(h, check_back="app:1")
    checker = FakeChecker(verdict)
    h.clock.now += 1_000
    assert await resolver(h, checker).sweep() == [(token, verdict is CheckVerdict.COMMIT)]
    assert checker.calls == [("app:1", token)]
    assert h.store.rows["t"].state is state


@pytest.mark.parametrize("failure", [CheckVerdict.UNKNOWN, NetworkException("connection refused")])
@pytest.mark.parametrize("default_commit", [False, True])
async def test_check_back_without_an_answer_applies_the_default_after_the_attempts(
    h: Harness, failure: CheckVerdict | Exception, default_commit: bool
) -> None:
    _, token = await prepared(h, check_back="app:1")
    checker = FakeChecker(failure)
    sweep = resolver(h, checker, default_commit=default_commit)
    h.clock.now += 1_000
    for attempt in (1, 2):
        assert await sweep.sweep() == []
        assert len(checker.calls) == attempt
        assert await sweep.sweep() == []  # within check_back_interval_ms: not asked again
        assert len(checker.calls) == attempt
        h.clock.now += 500
    assert await sweep.sweep() == [(token, default_commit)]
    assert len(checker.calls) == 3
    assert h.store.rows["t"].state is (S.PREPARE_COMMIT if default_commit else S.PREPARE_ABORT)


async def test_max_prepared_ms_decides_a_transaction_without_check_back(h: Harness) -> None:
    _, token = await prepared(h)
    checker = FakeChecker(CheckVerdict.COMMIT)
    sweep = resolver(h, checker, max_prepared_ms=5_000)
    h.clock.now += 4_999
    assert await sweep.sweep() == []
    h.clock.now += 1
    assert await sweep.sweep() == [(token, False)]
    assert checker.calls == []
    assert h.store.rows["t"].state is S.PREPARE_ABORT


async def test_resolve_ignores_a_token_the_owner_already_completed(h: Harness) -> None:
    (pid, epoch), token = await prepared(h)
    await h.coordinator.end_txn_and_wait("t", pid, epoch, True, 0, token=(pid, epoch))
    assert not await h.coordinator.resolve_prepared(token, False, "test")
    assert h.store.rows["t"].state is S.PREPARE_COMMIT


async def test_check_backs_the_prepared_count_and_the_oldest_age_are_reported(h: Harness) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    reader = InMemoryMetricReader()
    await prepared(h, check_back="app:1")
    await prepared(h, "u")
    checker = FakeChecker(CheckVerdict.UNKNOWN, NetworkException("refused"), CheckVerdict.COMMIT)
    sweep = PreparedTransactionResolver(
        h.coordinator,
        checker,
        h.clock,
        CheckBackPolicy(check_back_after_ms=1_000, check_back_interval_ms=1, check_back_max_attempts=5),
        metrics=OncelogMetrics(MeterProvider(metric_readers=[reader])),
    )
    for _ in range(3):
        h.clock.now += 1_000
        await sweep.sweep()

    points = {
        (metric.name, tuple(sorted(point.attributes.items()))): point.value
        for resource in reader.get_metrics_data().resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        for point in metric.data.data_points
    }
    verdicts = {"unknown": 1, "unreachable": 1, "commit": 1}
    for verdict, count in verdicts.items():
        assert points[("oncelog.transactions.check_backs", (("verdict", verdict),))] == count
    assert points[("oncelog.transactions.prepared", ())] == 2  # both still prepared at the last sweep's start
    assert points[("oncelog.transactions.prepared.max_age", ())] == 3_000
    assert h.store.rows["t"].state is S.PREPARE_COMMIT


async def test_every_check_back_call_is_a_span_with_its_verdict(h: Harness) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _, token = await prepared(h, check_back="app:1")
    sweep = PreparedTransactionResolver(
        h.coordinator,
        FakeChecker(NetworkException("refused"), CheckVerdict.ROLLBACK),
        h.clock,
        CheckBackPolicy(check_back_after_ms=0, check_back_interval_ms=0, check_back_max_attempts=5),
        metrics=OncelogMetrics(),
        tracer_provider=provider,
    )
    await sweep.sweep()
    await sweep.sweep()
    spans = [s for s in exporter.get_finished_spans() if s.name == "oncelog.txn.check_back"]
    assert [
        (s.attributes["oncelog.txn.check_back.attempt"], s.attributes["oncelog.txn.check_back.verdict"]) for s in spans
    ] == [(1, "unreachable"), (2, "rollback")]
    assert all(s.attributes["oncelog.transactional_id"] == "t" for s in spans)
    assert all(s.attributes["oncelog.producer_epoch"] == token.producer_epoch for s in spans)
    assert [e.name for e in spans[0].events] == ["exception"]
    assert h.store.rows["t"].state is S.PREPARE_ABORT
