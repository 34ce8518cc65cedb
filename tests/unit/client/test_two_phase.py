"""TwoPhaseTransactionManager against the in-memory coordinator: prepare, take-over with keep_prepared, complete,
and the errors that leave a prepared transaction pending."""

from __future__ import annotations

import pytest

from oncelog.client.errors import AbortableError, IllegalStateError
from oncelog.client.records import PreparedTransaction
from oncelog.client.transaction_manager import TransactionState
from oncelog.client.transport import Deadline
from oncelog.client.two_phase import TokenMismatchError
from oncelog.errors import InvalidTxnState

from .test_transaction_manager import TID, Harness

S = TransactionState
pytestmark = pytest.mark.timeout(20)


async def prepared() -> Harness:
    h = Harness()
    await h.init()
    await h.begin_with_offsets()
    await h.prepare()
    return h


async def test_prepare_flushes_then_returns_the_token_of_the_current_identity() -> None:
    h = Harness()
    await h.init()
    await h.begin_with_offsets()
    identity = h.sequences.identity
    token = await h.manager.prepare_transaction(h.flush, Deadline(5), "app:7070")
    assert token == PreparedTransaction(TID, identity.producer_id, identity.epoch)
    assert h.flushes == 1
    assert h.services.calls[-1] == ("PrepareTransaction", TID, identity, "app:7070")
    assert h.state is S.PREPARED_TRANSACTION and h.manager.prepared == token


async def test_complete_adopts_the_bumped_epoch_and_forgets_the_token() -> None:
    h = await prepared()
    token = h.manager.prepared
    assert token is not None
    await h.complete()
    assert h.state is S.READY and h.manager.prepared is None
    assert h.sequences.identity.epoch == token.producer_epoch + 1


async def test_init_keeping_prepared_takes_the_pending_transaction_over() -> None:
    first = await prepared()
    token = first.manager.prepared
    second = Harness()
    second.services = first.services
    second.manager._client = first.services  # the same coordinator
    assert await second.manager.init_transactions_keeping_prepared(Deadline(5)) == token
    assert second.state is S.PREPARED_TRANSACTION
    assert second.sequences.identity.epoch == token.producer_epoch + 1  # the owner's epoch, not the token's


async def test_complete_with_another_token_changes_nothing() -> None:
    h = await prepared()
    token = h.manager.prepared
    assert token is not None
    other = PreparedTransaction(TID, token.producer_id, token.producer_epoch + 1)
    with pytest.raises(TokenMismatchError, match="is not the prepared transaction of this producer"):
        await h.manager.complete_transaction(other, True, Deadline(5), False)
    assert h.state is S.PREPARED_TRANSACTION
    assert "CompleteTransaction" not in h.services.names()


async def test_a_token_the_coordinator_refuses_leaves_the_producer_usable() -> None:
    h = await prepared()
    h.services.fail("CompleteTransaction", InvalidTxnState("the token does not name its prepared transaction"))
    with pytest.raises(InvalidTxnState):
        await h.complete()
    assert h.state is S.PREPARED_TRANSACTION and h.fatal == []
    await h.complete()
    assert h.state is S.READY


async def test_prepare_of_a_transaction_that_sent_nothing_is_refused_before_any_call() -> None:
    h = Harness()
    await h.init()
    h.manager.begin_transaction()
    with pytest.raises(IllegalStateError, match="at least one record"):
        await h.prepare()
    assert h.state is S.IN_TRANSACTION
    assert "PrepareTransaction" not in h.services.names()


async def test_a_record_failing_while_the_prepare_is_written_aborts_the_prepared_transaction() -> None:
    h = Harness()
    await h.init()
    await h.begin_with_offsets()

    async def failing_flush(deadline: Deadline) -> None:
        h.manager.set_abortable(AbortableError("a batch failed"), epoch_bump=False)

    with pytest.raises(AbortableError, match="a batch failed"):
        await h.manager.prepare_transaction(failing_flush, Deadline(5), "")
    calls = [name for name in h.services.names() if name != "FindCoordinator"]
    assert calls[-2:] == ["PrepareTransaction", "CompleteTransaction"]
    assert h.services.calls[-1][-1] is False  # aborted, not committed
    assert h.state is S.ABORTABLE_ERROR and h.manager.prepared is None
    await h.abort()
    assert h.state is S.READY
    assert [n for n in h.services.names() if n != "FindCoordinator"] == calls  # nothing left to end at the coordinator
