"""Prepared transactions on the producer: two-phase commit with an external system (KIP-939,
design/kafka-semantics.md §5.7).

A prepared transaction has all its records written and its outcome undecided; a token
(:class:`~oncelog.client.records.PreparedTransaction`) names it. The application stores the token with the outcome
it stands for (for example in the same database commit as its rows, which is what :mod:`oncelog.outbox` does) and
then completes it; after a crash, the next instance gets the token back from
``init_transactions(keep_prepared=True)`` and completes it according to what the database says::

    producer.begin_transaction()
    producer.send("orders", b"...")
    token = producer.prepare_transaction()       # durable; survives this process; no timeout abort
    ...database commit that stores token.to_text()...
    producer.complete_transaction(token, commit=True)

:class:`TwoPhaseTransactionManager` adds the three operations to the transaction manager's state machine (its
table, :data:`~oncelog.client.transaction_manager.TRANSITIONS`, has the states); :class:`TwoPhaseCommit` is the
producer's part of the API.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from oncelog.client.coordinator_client import EndTxnResult, TwoPhaseCoordinatorClient
from oncelog.client.errors import IllegalStateError, RetriableError
from oncelog.client.records import PreparedTransaction
from oncelog.client.transaction_manager import TransactionEvent, TransactionManager, TransactionState
from oncelog.client.transport import Deadline
from oncelog.errors import InvalidTxnState, OncelogError

__all__ = ["PreparedTransaction", "TokenMismatchError", "TwoPhaseCommit", "TwoPhaseTransactionManager"]

log = logging.getLogger("oncelog.client.producer")


class TokenMismatchError(IllegalStateError):
    """``complete_transaction`` named a token that is not this producer's prepared transaction; nothing was done."""


class TwoPhaseTransactionManager(TransactionManager):
    """The transaction manager with prepare, complete, and InitProducerId keeping a prepared transaction."""

    prepared: PreparedTransaction | None = None
    """The prepared transaction this instance owns, until it is completed."""

    @property
    def transactional_id(self) -> str:
        """The producer's transactional id."""
        return self._tid

    @property
    def _two_phase(self) -> TwoPhaseCoordinatorClient:
        return cast(TwoPhaseCoordinatorClient, self._client)

    async def init_transactions_keeping_prepared(self, deadline: Deadline) -> PreparedTransaction | None:
        """InitProducerId(keep_prepared): fence older instances, but take their prepared transaction over."""
        with self._lock:
            self._start(TransactionEvent.INIT, "init_transactions()")
        try:
            identity, prepared = await self._coordinator_call(
                "InitProducerId",
                lambda address: self._two_phase.init_producer_id_keeping_prepared(
                    address, self._tid, self._transaction_timeout_ms, timeout_s=self._request_timeout_s
                ),
                deadline,
            )
        except OncelogError as err:
            raise self._on_call_failed(err, "init_transactions(keep_prepared=True)") from err
        self._sequences.set_identity(identity)
        with self._lock:
            self.prepared = prepared
            kept = prepared is not None
            self._transition(TransactionEvent.INITIALIZED_PREPARED if kept else TransactionEvent.INITIALIZED)
        log.info("transactional id %r initialised with %s, prepared transaction %s", self._tid, identity, prepared)
        return prepared

    async def prepare_transaction(
        self, flush: Callable[[Deadline], Awaitable[None]], deadline: Deadline, check_back_address: str
    ) -> PreparedTransaction:
        """Make every partition a participant, then write the records and PrepareTransaction side by side.

        The prepare needs the participants, not the records: a prepared transaction is decided only after this
        returns, and this returns only once every record is acknowledged too. So the flush and the coordinator's
        durable PREPARED write overlap instead of running one after the other. If a record fails after the
        prepare was written, the prepared transaction is aborted here (CompleteTransaction) and the failure raised
        as for a commit: abort_transaction() and run the transaction again.
        """
        with self._lock:
            if self.state is TransactionState.IN_TRANSACTION and not (
                self._started or self._pending_partitions or self._pending_offsets
            ):
                raise IllegalStateError(
                    "prepare_transaction() needs a transaction with at least one record or offsets; "
                    "send something first (or commit the empty transaction)"
                )
            self._start(TransactionEvent.PREPARE, "prepare_transaction()")
        flushing = asyncio.ensure_future(flush(deadline))
        try:
            await self._add_partitions()  # every partition is a participant before the prepare
            with self._lock:
                self._raise_if_failed()
            for group_id, (offsets, group) in list(self._pending_offsets.items()):
                await self._commit_offsets(offsets, group, deadline)
                del self._pending_offsets[group_id]
            with self._lock:
                self._raise_if_failed()
            identity = self._sequences.identity
            try:
                token = await self._coordinator_call(
                    "PrepareTransaction",
                    lambda address: self._two_phase.prepare_transaction(
                        address,
                        self._tid,
                        identity,
                        check_back_address=check_back_address,
                        timeout_s=self._request_timeout_s,
                    ),
                    deadline,
                )
            except OncelogError as err:
                raise self._on_call_failed(err, "prepare_transaction()") from err
        except BaseException:
            await asyncio.gather(flushing, return_exceptions=True)
            raise
        await flushing
        with self._lock:
            failure = self.last_error if self.state is TransactionState.ABORTABLE_ERROR else None
        if failure is not None:
            await self._abort_prepared(token, deadline)
            with self._lock:
                self._raise_if_failed()
        with self._lock:
            self.prepared = token
            self._transition(TransactionEvent.PREPARED)
        return token

    async def _abort_prepared(self, token: PreparedTransaction, deadline: Deadline) -> None:
        """A record of a transaction just prepared failed: abort the prepared transaction, so that the application's
        abort_transaction() only has to reset the producer (its EndTxn would be refused on a prepared transaction)."""
        identity = self._sequences.identity
        try:
            result = await self._coordinator_call(
                "CompleteTransaction",
                lambda address: self._two_phase.complete_transaction(
                    address, identity, token, commit=False, wait_for_completion=False, timeout_s=self._request_timeout_s
                ),
                deadline,
            )
        except OncelogError as err:
            raise self._on_call_failed(err, "aborting the prepared transaction after a failed record") from err
        self._sequences.set_identity(result.identity)
        with self._lock:
            self._started = False  # nothing open at the coordinator any more

    async def complete_transaction(
        self, token: PreparedTransaction, commit: bool, deadline: Deadline, wait_for_completion: bool
    ) -> None:
        """CompleteTransaction(token) until it answers (and, if asked, until complete); adopt the epoch it returns.

        Raises:
            TokenMismatchError: ``token`` is not this producer's prepared transaction (nothing is sent).
            InvalidTxnState: the coordinator refused the token (it names no prepared transaction of the id);
                the producer stays usable and the prepared transaction, if any, stays pending.
        """
        with self._lock:
            if self.state not in (TransactionState.PREPARED_TRANSACTION, TransactionState.COMPLETING_TRANSACTION):
                self._raise_if_failed()
                raise IllegalStateError(
                    f"complete_transaction() needs a prepared transaction, and transactional id {self._tid!r} has "
                    f"none in state {self.state.value}: prepare_transaction() or init_transactions(keep_prepared=True) "
                    "returns it (None there means it was already completed)"
                )
            if token != self.prepared:
                raise TokenMismatchError(
                    f"token {token.to_text()!r} is not the prepared transaction of this producer "
                    f"({self.prepared.to_text() if self.prepared else 'none'!r}); nothing was completed"
                )
            self._start(TransactionEvent.COMPLETE, "complete_transaction()")
        identity = self._sequences.identity
        timeout_s = deadline.cap(self._request_timeout_s) if wait_for_completion else self._request_timeout_s
        try:
            while True:
                result: EndTxnResult = await self._coordinator_call(
                    "CompleteTransaction",
                    lambda address: self._two_phase.complete_transaction(
                        address,
                        identity,
                        token,
                        commit=commit,
                        wait_for_completion=wait_for_completion,
                        timeout_s=timeout_s,
                    ),
                    deadline,
                )
                if result.completed or not wait_for_completion:
                    break
                if deadline.expired:
                    raise RetriableError(
                        f"the {'commit' if commit else 'abort'} of prepared transaction {token.to_text()!r} is "
                        "decided, but not every marker was written in time; call complete_transaction() again to wait"
                    )
        except InvalidTxnState:
            with self._lock:
                self.state = TransactionState.PREPARED_TRANSACTION  # refused, nothing changed: it may be retried
            raise
        except OncelogError as err:
            raise self._on_call_failed(err, "complete_transaction()") from err
        self._sequences.set_identity(result.identity)
        with self._lock:
            self._transition(TransactionEvent.COMPLETED)
            self.prepared = None
            self._reset_transaction()


class TwoPhaseCommit:
    """The producer's prepared-transaction methods (mixed into :class:`~oncelog.client.producer.Producer`)."""

    _txn: TransactionManager | None

    def _require_transactional(self, what: str) -> TransactionManager:
        raise NotImplementedError

    def _deadline(self, timeout: float | None) -> Deadline:
        raise NotImplementedError

    def _run(self, coro: Awaitable[Any]) -> Any:
        raise NotImplementedError

    def _flush(self, deadline: Deadline) -> Coroutine[Any, Any, None]:
        raise NotImplementedError

    def _two_phase(self, what: str) -> TwoPhaseTransactionManager:
        txn = self._require_transactional(what)
        assert isinstance(txn, TwoPhaseTransactionManager)
        return txn

    def init_transactions(
        self, timeout: float | None = None, *, keep_prepared: bool = False
    ) -> PreparedTransaction | None:
        """Register the transactional id: fence older instances and finish their open transaction.

        Must be called once, before any other transactional method. May be called again after a
        :class:`RetriableError`. With ``keep_prepared``, a transaction an older instance prepared
        (``prepare_transaction()``) is not aborted: this instance takes it over, and its token is returned, to be
        completed with ``complete_transaction()`` as the application's own records say (KIP-939).

        Returns:
            The token of the prepared transaction now owned (``keep_prepared`` only), else None.

        Raises:
            ProducerFencedError: a newer instance took over concurrently.
            RetriableError: the coordinator did not answer within ``timeout`` (default ``max_block_ms``).
            IllegalStateError: not transactional, or already initialised.
        """
        if keep_prepared:
            txn = self._two_phase("init_transactions()")
            kept = self._run(txn.init_transactions_keeping_prepared(self._deadline(timeout)))
            return cast(PreparedTransaction | None, kept)
        self._run(self._init_transactions(timeout))
        return None

    def _init_transactions(self, timeout: float | None) -> Coroutine[Any, Any, None]:
        return self._require_transactional("init_transactions()").init_transactions(self._deadline(timeout))

    def prepare_transaction(self, timeout: float | None = None, *, check_back_address: str = "") -> PreparedTransaction:
        """Flush the transaction and make it durably prepared: written, undecided, named by the returned token.

        From here only ``complete_transaction(token, commit=...)`` finishes it, from this instance or from the next
        one (``init_transactions(keep_prepared=True)``). The transaction timeout stops applying; the coordinator's
        ``max_prepared_ms`` still does. With ``check_back_address`` (host:port of a TransactionCheckService the
        application serves), the coordinator asks there for the outcome of a transaction nobody completes.

        Raises:
            AbortableError: a record or offset commit of the transaction failed; abort and run it again.
            ProducerFencedError: a newer instance took over.
            RetriableError: no answer within ``timeout``; call again (the same transaction is prepared).
            IllegalStateError: no open transaction, or nothing was sent in it.
        """
        txn = self._two_phase("prepare_transaction()")
        token = self._run(txn.prepare_transaction(self._flush, self._deadline(timeout), check_back_address))
        return cast(PreparedTransaction, token)

    def complete_transaction(
        self,
        token: PreparedTransaction,
        commit: bool,
        timeout: float | None = None,
        *,
        wait_for_completion: bool = False,
    ) -> None:
        """Commit (``commit=True``) or abort the prepared transaction ``token`` names.

        With ``wait_for_completion`` it returns once every marker is written (as ``commit_transaction``).

        Raises:
            ValueError: the token belongs to another transactional id.
            TokenMismatchError: the token is not this producer's prepared transaction.
            InvalidTxnState: the coordinator refused the token; the producer stays usable.
            ProducerFencedError: a newer instance owns the transactional id (and the transaction) now.
            RetriableError: no answer within ``timeout``; call again with the same arguments, never the other outcome.
        """
        txn = self._two_phase("complete_transaction()")
        if token.transactional_id != txn.transactional_id:
            raise ValueError(
                f"the token is for transactional id {token.transactional_id!r}; complete it with a producer of that id"
            )
        self._run(txn.complete_transaction(token, commit, self._deadline(timeout), wait_for_completion))

    @property
    def prepared_transaction(self) -> PreparedTransaction | None:
        """The prepared transaction this producer owns and has not completed, else None."""
        return self._txn.prepared if isinstance(self._txn, TwoPhaseTransactionManager) else None
