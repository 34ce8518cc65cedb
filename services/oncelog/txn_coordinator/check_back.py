"""Check-back: the coordinator asks the application what became of a prepared transaction (RocketMQ's
transaction check, design/kafka-semantics.md §5.7).

A prepared transaction whose owner does not complete it would hang its partitions' last stable offset. A
producer may name a ``TransactionCheckService`` when it prepares; then every ``sweep_interval_ms`` this sweep:

* asks that service about each PREPARED transaction older than ``check_back_after_ms`` (at most once per
  ``check_back_interval_ms`` per transaction, ``concurrency`` calls at a time);
* on COMMIT or ROLLBACK, decides the transaction that way
  (:meth:`~.prepared.PreparedTransactionsMixin.resolve_prepared`);
* counts UNKNOWN, an unreachable service and a failed call as one attempt; after ``check_back_max_attempts`` it
  applies ``default_commit`` (abort unless configured otherwise);
* decides every PREPARED transaction older than ``max_prepared_ms`` by ``default_commit`` whether or not it has
  a check-back service.

Attempts are counted in memory: after a coordinator failover the new owner starts counting again, which only
delays the default. Each call is an ``oncelog.txn.check_back`` span (its gRPC client span and, when it decides,
the ``oncelog.txn.persist`` of the decision are its children). The sweep also reports the prepared count and the
oldest one's age.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from opentelemetry import trace

from oncelog.telemetry.metrics import OncelogMetrics, default_metrics

from .ports import Clock
from .prepared import PreparedListing, PreparedToken

log = logging.getLogger(__name__)


class CheckVerdict(enum.Enum):
    """The application's answer to CheckTransaction."""

    COMMIT = "commit"
    ROLLBACK = "rollback"
    UNKNOWN = "unknown"


class TransactionChecker(Protocol):
    """Calls an application's TransactionCheckService (gRPC in the service, a fake in unit tests)."""

    async def check(self, address: str, token: PreparedToken, timeout_s: float) -> CheckVerdict:
        """The verdict of the service at ``address``; raises when it cannot be reached or fails."""
        ...


class PreparedSource(Protocol):
    """What the sweep needs of the coordinator."""

    def prepared_transactions(self) -> list[PreparedListing]: ...

    async def resolve_prepared(self, token: PreparedToken, commit: bool, why: str) -> bool: ...


@dataclass(frozen=True, slots=True)
class CheckBackPolicy:
    """When to ask, how often, and what to do without an answer (the coordinator's settings)."""

    check_back_after_ms: int = 60_000
    check_back_interval_ms: int = 30_000
    check_back_max_attempts: int = 15
    default_commit: bool = False
    max_prepared_ms: int = 24 * 3600 * 1000
    timeout_ms: int = 5_000
    sweep_interval_ms: int = 5_000
    concurrency: int = 64


@dataclass(slots=True)
class _Attempts:
    count: int = 0
    next_at: int = 0
    last_failure: str = ""


class PreparedTransactionResolver:
    """Runs the check-back sweep of one coordinator (see the module doc).

    Args:
        coordinator: lists and decides prepared transactions.
        checker: calls the applications' check-back services.
        clock: Unix milliseconds.
        policy: the settings.
        metrics: where the prepared count, the oldest age and the calls are reported.
        tracer_provider: provider of the ``oncelog.txn.check_back`` spans; the global one by default.
    """

    def __init__(
        self,
        coordinator: PreparedSource,
        checker: TransactionChecker,
        clock: Clock,
        policy: CheckBackPolicy,
        *,
        metrics: OncelogMetrics | None = None,
        tracer_provider: trace.TracerProvider | None = None,
    ) -> None:
        self._coordinator = coordinator
        self._checker = checker
        self._clock = clock
        self._policy = policy
        self._metrics = default_metrics() if metrics is None else metrics
        self._tracer = trace.get_tracer("oncelog.txn_coordinator.check_back", tracer_provider=tracer_provider)
        self._attempts: dict[PreparedToken, _Attempts] = {}
        self._task: asyncio.Task[None] | None = None

    async def sweep(self) -> list[tuple[PreparedToken, bool]]:
        """One pass; returns the transactions decided here and whether each was committed."""
        now = self._clock()
        prepared = self._coordinator.prepared_transactions()
        if self._attempts:
            live = {p.token for p in prepared}
            for token in [t for t in self._attempts if t not in live]:
                del self._attempts[token]
        oldest = max((now - p.info.prepared_at for p in prepared), default=0)
        self._metrics.set_transactions_prepared(len(prepared), max(0, oldest))
        policy = self._policy
        work: list[Callable[[], Awaitable[tuple[PreparedToken, bool] | None]]] = []
        for p in prepared:
            age = now - p.info.prepared_at
            if age >= policy.max_prepared_ms:
                why = f"prepared {age} ms ago, max_prepared_ms is {policy.max_prepared_ms}"
                work.append(functools.partial(self._decide, p.token, policy.default_commit, why))
            elif p.info.check_back_address and age >= policy.check_back_after_ms:
                attempts = self._attempts.setdefault(p.token, _Attempts())
                if now >= attempts.next_at:
                    work.append(functools.partial(self._check, p))
        limit = asyncio.Semaphore(policy.concurrency)

        async def bounded(
            job: Callable[[], Awaitable[tuple[PreparedToken, bool] | None]],
        ) -> tuple[PreparedToken, bool] | None:
            async with limit:
                return await job()

        results = await asyncio.gather(*(bounded(job) for job in work), return_exceptions=True)
        decided: list[tuple[PreparedToken, bool]] = []
        for result in results:
            if isinstance(result, BaseException):
                log.warning("check-back of a prepared transaction failed; the next sweep retries: %r", result)
            elif result is not None:
                decided.append(result)
        return decided

    async def _check(self, p: PreparedListing) -> tuple[PreparedToken, bool] | None:
        token, address = p.token, p.info.check_back_address
        attempts = self._attempts.setdefault(token, _Attempts())
        attempts.count += 1
        attributes: dict[str, str | int] = {
            "oncelog.transactional_id": token.transactional_id,
            "oncelog.producer_id": token.producer_id,
            "oncelog.producer_epoch": token.producer_epoch,
            "oncelog.txn.check_back.address": address,
            "oncelog.txn.check_back.attempt": attempts.count,
        }
        with self._tracer.start_as_current_span("oncelog.txn.check_back", attributes=attributes) as span:
            try:
                verdict = await self._checker.check(address, token, self._policy.timeout_ms / 1000)
                outcome = verdict.value
            except Exception as error:  # an unreachable or failing service is one attempt without an answer
                span.record_exception(error)
                verdict, outcome = CheckVerdict.UNKNOWN, "unreachable"
                attempts.last_failure = f"{address} unreachable: {error}"
            else:
                attempts.last_failure = f"{address} answered UNKNOWN"
            span.set_attribute("oncelog.txn.check_back.verdict", outcome)
            self._metrics.record_check_back(outcome)
            if verdict is not CheckVerdict.UNKNOWN:
                commit = verdict is CheckVerdict.COMMIT
                return await self._decide(token, commit, f"the check-back at {address} answered {outcome.upper()}")
            if attempts.count >= self._policy.check_back_max_attempts:
                why = f"no answer after {attempts.count} check-back attempt(s) ({attempts.last_failure})"
                return await self._decide(token, self._policy.default_commit, why)
            attempts.next_at = self._clock() + self._policy.check_back_interval_ms
            return None

    async def _decide(self, token: PreparedToken, commit: bool, why: str) -> tuple[PreparedToken, bool] | None:
        if await self._coordinator.resolve_prepared(token, commit, why):
            self._attempts.pop(token, None)
            return token, commit
        return None

    def start(self) -> None:
        """Start the periodic sweep."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="txn-check-back-sweep")

    async def stop(self) -> None:
        """Cancel the sweep and wait for it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._policy.sweep_interval_ms / 1000)
            try:
                await self.sweep()
            except Exception:
                log.exception("check-back sweep failed; the next one retries")


__all__ = ["CheckBackPolicy", "CheckVerdict", "PreparedSource", "PreparedTransactionResolver", "TransactionChecker"]
