"""GroupMembership (design/consumer-groups.md §7): what each heartbeat reports and when callbacks run.

The coordinator is a scripted coroutine here (pure client logic); the real exchange is covered by
tests/integration/test_consumer_groups.py.
"""

from __future__ import annotations

import asyncio

import pytest

from oncelog.client.group_membership import GroupMembership
from oncelog.client.records import TopicPartition
from oncelog.client.services import HeartbeatAnswer, MemberHeartbeat
from oncelog.errors import InvalidRegularExpression, UnknownMemberId

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


class Script:
    """Answers heartbeats from a list (a response or an exception each) and records the requests."""

    def __init__(self, *answers: object) -> None:
        self.answers = list(answers)
        self.requests: list[MemberHeartbeat] = []

    async def __call__(self, request: MemberHeartbeat, timeout_s: float) -> HeartbeatAnswer:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]


def answer(epoch: int, *tps: TopicPartition) -> HeartbeatAnswer:
    return HeartbeatAnswer(member_id="m", member_epoch=epoch, assignment=frozenset(tps), heartbeat_interval_ms=100)


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, set[TopicPartition]]] = []
        self.held: set[TopicPartition] = set()

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        assert revoked <= self.held, "revoked is called while the partitions are still held (commit there)"
        self.calls.append(("revoked", revoked))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", assigned))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", lost))

    def add(self, tps: set[TopicPartition]) -> None:
        self.held |= tps

    def remove(self, tps: set[TopicPartition]) -> None:
        self.held -= tps


def owned_in(request: MemberHeartbeat) -> set[TopicPartition]:
    return set(request.owned)


def test_revoked_partitions_are_reported_released_only_after_the_callback() -> None:
    script = Script(answer(1, A, B), answer(2, B), answer(2, B))
    membership = GroupMembership("g", script, topics=["t"])
    app = Recorder()
    asyncio.run(membership.join(1))
    membership.reconcile(app, app.add, app.remove)
    assert app.held == {A, B} and app.calls == [("assigned", {A, B})]
    asyncio.run(membership.join(1))  # the coordinator now wants A back
    assert owned_in(script.requests[1]) == {A, B}
    membership.reconcile(app, app.add, app.remove)
    assert app.calls[-1] == ("revoked", {A}) and app.held == {B}
    asyncio.run(membership.join(1))
    assert owned_in(script.requests[2]) == {B}, "the next heartbeat tells the coordinator A is released"
    assert script.requests[0].member_epoch == 0 and script.requests[2].member_epoch == 2


def test_a_fenced_member_loses_its_partitions_and_rejoins_with_epoch_zero() -> None:
    script = Script(answer(3, A), UnknownMemberId("removed"), answer(5, B))
    membership = GroupMembership("g", script, topics=["t"])
    app = Recorder()
    asyncio.run(membership.join(1))
    membership.reconcile(app, app.add, app.remove)
    with pytest.raises(UnknownMemberId):
        asyncio.run(membership.join(1))
    wake = membership.reconcile(app, app.add, app.remove)
    assert wake is not None and app.calls[-1] == ("lost", {A}) and app.held == set()
    asyncio.run(membership.join(1))
    assert script.requests[2].member_epoch == 0 and owned_in(script.requests[2]) == set()
    membership.reconcile(app, app.add, app.remove)
    assert app.held == {B}


def test_a_refusal_for_good_is_raised_by_the_next_poll() -> None:
    membership = GroupMembership("g", Script(InvalidRegularExpression("bad")), pattern="t.*")
    with pytest.raises(InvalidRegularExpression):
        asyncio.run(membership.join(1))
    with pytest.raises(InvalidRegularExpression):
        membership.reconcile(None, lambda tps: None, lambda tps: None)
