"""TransactionExpirySweeper: the coordinator's two periodic sweeps (design/kafka-semantics.md §2.7, §2.8).

* every ``abort_check_interval_ms`` (Kafka ``transaction.abort.timed.out.transaction.cleanup.interval.ms``),
  fence and abort every Ongoing transaction open longer than its timeout, so no transaction hangs
  (design/architecture.md §1.5);
* every ``expiration_check_interval_ms`` (Kafka ``transaction.remove.expired.transaction.cleanup.interval.ms``),
  remove transactional ids idle for ``transactional_id_expiration_ms`` with no open transaction.

Both go through the coordinator's state machine; a failed sweep is logged and the next one tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from oncelog.torture import mutants

from .coordinator import TransactionCoordinator
from .ports import Clock

log = logging.getLogger(__name__)


class TransactionExpirySweeper:
    """Runs the timeout-abort and id-expiration sweeps of one coordinator on their own periods.

    Args:
        coordinator: the sweeps' target.
        clock: Unix milliseconds.
        abort_check_interval_ms: period of the timeout-abort sweep.
        expiration_check_interval_ms: period of the expiration sweep.
        transactional_id_expiration_ms: idle time after which an id without an open transaction goes.
    """

    def __init__(
        self,
        coordinator: TransactionCoordinator,
        clock: Clock,
        *,
        abort_check_interval_ms: int,
        expiration_check_interval_ms: int,
        transactional_id_expiration_ms: int,
    ) -> None:
        self._coordinator = coordinator
        self._clock = clock
        self._abort_interval_s = abort_check_interval_ms / 1000
        self._expiration_interval_s = expiration_check_interval_ms / 1000
        self._expiration_ms = transactional_id_expiration_ms
        self._tasks: list[asyncio.Task[None]] = []

    async def abort_timed_out(self) -> list[str]:
        """One timeout-abort sweep; returns the ids whose abort was made durable."""
        if mutants.active("no-txn-timeout"):  # test builds only (design/torture.md §4)
            return []
        aborted = await self._coordinator.abort_timed_out_transactions(self._clock())
        if aborted:
            log.info("aborted %d timed-out transaction(s): %s", len(aborted), ", ".join(aborted))
        return aborted

    async def expire_transactional_ids(self) -> list[str]:
        """One expiration sweep; returns the ids removed."""
        expired = await self._coordinator.expire_transactional_ids(self._clock(), self._expiration_ms)
        if expired:
            log.info("expired %d transactional id(s)", len(expired))
        return expired

    def start(self) -> None:
        """Start both periodic sweeps."""
        if self._tasks:
            return
        self._tasks = [
            asyncio.create_task(self._every(self._abort_interval_s, self.abort_timed_out), name="txn-timeout-sweep"),
            asyncio.create_task(
                self._every(self._expiration_interval_s, self.expire_transactional_ids), name="txn-id-expiration-sweep"
            ),
        ]

    async def stop(self) -> None:
        """Cancel both sweeps and wait for them."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @staticmethod
    async def _every(interval_s: float, sweep: Callable[[], Awaitable[list[str]]]) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await sweep()
            except Exception:
                log.exception("transaction sweep failed; the next one retries")


__all__ = ["TransactionExpirySweeper"]
