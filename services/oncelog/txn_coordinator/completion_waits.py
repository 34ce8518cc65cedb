"""CompletionWaits: requests parked behind the completion of a transactional id's previous transaction.

Kafka answers AddPartitionsToTxn, AddOffsetsToTxn and InitProducerId with CONCURRENT_TRANSACTIONS while the id's
previous transaction is in PrepareCommit/PrepareAbort, and its client retries after ``retry.backoff.ms`` (20 ms for
AddPartitions, design/kafka-semantics.md §2.4). With KIP-890 the next transaction's first AddPartitions arrives right
after EndTxn answered, so nearly every transaction of a busy producer paid one or more such round trips plus the
backoff. Here such a request waits server-side for the Complete* write instead (any transition of the id wakes it,
and it re-validates from scratch), at most ``completion_wait_ms`` and never past the caller's own deadline; only
then does it answer CONCURRENT_TRANSACTIONS as Kafka would. The wait holds no lock, so the markers' completion, the
sweepers and other ids proceed; a shard unload wakes every waiter, which then answers NOT_COORDINATOR.

This module keeps the signals and the parked requests; the coordinator decides when a request must wait
(:meth:`CompletionWaits.completing`, under the id's lock), wakes the waiters after every applied or abandoned
transition (:meth:`CompletionWaits.wake`), and reads the parked requests when a completion may carry the next
transaction (:meth:`CompletionWaits.carried_transaction`). It also lets an EndTxn wait for the completion of the
transaction it decided (:meth:`CompletionWaits.wait_until_left`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from oncelog.errors import ConcurrentTransactions, NotCoordinator, OncelogError
from oncelog.vocabulary import TopicPartition

from .metadata import (
    LAST_USABLE_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TransactionMetadata,
    TxnTransition,
)
from .state import TransactionState

T = TypeVar("T")


@dataclass(eq=False, slots=True)
class ParkedRequest:
    """What a request parked behind the completion of the previous transaction asks for.

    AddPartitions/AddOffsets name an identity and participants; the completion may carry them (see
    :meth:`CompletionWaits.carried_transaction`). InitProducerId names neither and is never carried, but
    holds its place in the arrival order: requests parked after it are not carried ahead of it.
    """

    transactional_id: str
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: frozenset[TopicPartition] = frozenset()
    groups: frozenset[str] = frozenset()

    def fits(self, complete: TxnTransition) -> bool:
        """Whether the request asks to join the transaction that follows ``complete`` with its identity."""
        return (
            bool(self.partitions or self.groups)
            and (self.producer_id, self.producer_epoch) == (complete.producer_id, complete.producer_epoch)
            and self.producer_epoch <= LAST_USABLE_EPOCH
        )


class PreviousTransactionCompleting(Exception):
    """The id's last transaction is in Prepare*: the request may be parked until ``settled`` resolves.

    Not an OncelogError on purpose: it never leaves the coordinator. The parking loop either retries the
    request once the id settled or raises :attr:`error` (CONCURRENT_TRANSACTIONS) when the wait is over.
    ``request`` stays registered while the request is parked, so the completion sees it.
    """

    def __init__(self, error: OncelogError, settled: asyncio.Future[None], request: ParkedRequest) -> None:
        super().__init__(error.message)
        self.error = error
        self.settled = settled
        self.request = request


class CompletionWaits:
    """Per transactional id: a signal resolved at its next applied or abandoned transition, and its parked requests.

    Args:
        completion_wait_ms: how long a request is parked at most before it answers CONCURRENT_TRANSACTIONS.
        shard_for: maps a transactional id to its shard (to wake every waiter of a shard).
    """

    def __init__(self, completion_wait_ms: int, shard_for: Callable[[str], int]) -> None:
        if completion_wait_ms < 0:
            raise ValueError(f"completion_wait_ms must not be negative, got {completion_wait_ms}")
        self._completion_wait_s = completion_wait_ms / 1000
        self._shard_for = shard_for
        self._settled: dict[str, asyncio.Future[None]] = {}
        """Per transactional id, resolved at its next applied or abandoned transition (parked requests wait on it)."""
        self._parked_requests: dict[str, list[ParkedRequest]] = {}
        """Per transactional id, its parked requests in arrival order (the completion may carry some)."""

    def signal(self, transactional_id: str) -> asyncio.Future[None]:
        """The future resolved at the id's next transition; take it without an await after checking the state."""
        settled = self._settled.get(transactional_id)
        if settled is None or settled.done():
            settled = self._settled[transactional_id] = asyncio.get_running_loop().create_future()
        return settled

    def completing(
        self, transactional_id: str, message: str, request: ParkedRequest | None = None
    ) -> PreviousTransactionCompleting:
        """The parkable form of CONCURRENT_TRANSACTIONS for the id (called under the id's lock).

        The signal is taken and the request registered here, before the lock is released, so neither a
        transition applied between this refusal and the wait nor a completion starting meanwhile can miss it.
        """
        settled = self.signal(transactional_id)
        if request is None:
            request = ParkedRequest(transactional_id)
        self._parked_requests.setdefault(transactional_id, []).append(request)
        return PreviousTransactionCompleting(ConcurrentTransactions(message), settled, request)

    def parked(self, transactional_id: str) -> Sequence[ParkedRequest]:
        """The id's parked requests in arrival order."""
        return self._parked_requests.get(transactional_id, ())

    def wake(self, transactional_id: str) -> None:
        """Resolve the id's signal: every request waiting on it re-validates."""
        settled = self._settled.pop(transactional_id, None)
        if settled is not None and not settled.done():
            settled.set_result(None)

    def wake_shard(self, shard: int) -> None:
        """Wake every request parked on ``shard``: its cache was replaced, they re-validate against the new one."""
        for transactional_id in [t for t in self._settled if self._shard_for(t) == shard]:
            self.wake(transactional_id)

    async def run_parked(self, attempt: Callable[[], Awaitable[T]], max_wait_ms: int | None) -> T:
        """Run ``attempt``; while it finds the previous transaction completing, wait for that and run it again.

        The wait ends after ``completion_wait_ms`` or ``max_wait_ms``, whichever is shorter; the request is
        then answered CONCURRENT_TRANSACTIONS, exactly what it got before waiting.
        """
        loop = asyncio.get_running_loop()
        budget_s = self._completion_wait_s if max_wait_ms is None else min(self._completion_wait_s, max_wait_ms / 1000)
        deadline = loop.time() + budget_s
        while True:
            try:
                return await attempt()
            except PreviousTransactionCompleting as busy:
                try:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        raise busy.error from None
                    try:
                        # shielded: the signal is shared by every request parked on the id
                        await asyncio.wait_for(asyncio.shield(busy.settled), remaining)
                    except TimeoutError:
                        raise busy.error from None
                finally:
                    # Woken, timed out or cancelled: the next attempt registers afresh if it must wait again.
                    # A completion that carried this request wrote its participants; the attempt that follows
                    # finds them present and answers without writing.
                    self._unregister(busy.request)

    def carried_transaction(self, transactional_id: str, complete: TxnTransition, now_ms: int) -> TxnTransition | None:
        """The Ongoing row of the next transaction if parked requests already ask for it, else None.

        Kafka appends Complete* and, one round trip later, the next Ongoing; the table keeps only an id's last
        record, so when the producer's first AddPartitions/AddOffsets of its next transaction is parked behind
        the completion, both transitions are made durable by one write of the Ongoing row: one SQL commit
        instead of two, and the parked request answers as soon as it lands. The row is prepared on a copy of
        the completed state with the producer's own identity check (the one the request would face after
        Complete*), so it is exactly the row the request would have written next; requests naming another
        identity are left to re-validate after the write, as before. Called under the id's lock, by the completion.
        """
        carried: list[ParkedRequest] = []
        for request in self.parked(transactional_id):
            if not request.fits(complete):
                break  # an earlier request (a new instance's InitProducerId, say) goes first
            carried.append(request)
        if not carried:
            return None
        completed = TransactionMetadata.from_transition(transactional_id, complete)
        return completed.prepare_add_participants(
            frozenset().union(*(request.partitions for request in carried)),
            frozenset().union(*(request.groups for request in carried)),
            now_ms,
        )

    async def wait_until_left(
        self,
        md: TransactionMetadata,
        prepared: tuple[TransactionState, int, int],
        wait_ms: int,
        *,
        still_loaded: Callable[[], bool],
    ) -> bool:
        """Wait until ``md`` left the Prepare* it was in (``prepared``: state, producer id, epoch); False if
        ``wait_ms`` ran out first.

        Every applied transition and every reload of the shard wakes the id's waiters (:meth:`wake`); no polling.

        Raises:
            NotCoordinator: ``still_loaded`` turned False: the shard changed owner meanwhile.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        while True:
            if (md.state, md.producer_id, md.producer_epoch) != prepared:
                return True
            if not still_loaded():
                raise NotCoordinator(
                    f"shard {self._shard_for(md.transactional_id)} changed owner while {md.transactional_id!r} was "
                    "completing; retry EndTxn at the new owner, which resumes its markers"
                )
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            # Taken without an await since the check above, so no transition can slip in between.
            settled = self.signal(md.transactional_id)
            try:
                # shielded: the signal is shared by every request waiting on the id
                await asyncio.wait_for(asyncio.shield(settled), remaining)
            except TimeoutError:
                return False

    def _unregister(self, request: ParkedRequest) -> None:
        parked = self._parked_requests.get(request.transactional_id)
        if parked is not None and request in parked:
            parked.remove(request)
            if not parked:
                del self._parked_requests[request.transactional_id]


__all__ = ["CompletionWaits", "ParkedRequest", "PreviousTransactionCompleting"]
