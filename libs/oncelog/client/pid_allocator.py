"""ProducerIdSource: hand out producer ids from prefetched pid-allocator blocks (KIP-730's RPCProducerIdManager).

It holds the current block and, once 90 % of it is used, fetches the next one in the background, so a caller
never waits on the network while ids are left. Only when both blocks are exhausted does ``next_id()`` wait
for the fetch in flight, bounded by ``wait_timeout_s``; past that it raises COORDINATOR_LOAD_IN_PROGRESS
(Kafka's answer too) so the caller retries instead of hanging. A retriable fetch failure is retried after a
backoff; a fatal one (a stale requester epoch) is raised to the caller waiting for an id.

The ids left without a network call (current plus prefetched block) are reported as
``oncelog.pid.block.remaining`` whenever they change, so a dashboard shows a source running dry before callers
start to wait.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import grpc
from grpc import aio

from oncelog.client.services import PidAllocatorClient
from oncelog.errors import CoordinatorLoadInProgress, OncelogError
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics

log = logging.getLogger("oncelog.client.pid_allocator")

FetchBlock = Callable[[], Awaitable[tuple[int, int]]]


class ProducerIdSource:
    """Prefetching source of unique producer ids.

    Args:
        fetch: returns the next inclusive ``(first, last)`` block (see :func:`grpc_block_fetcher`).
        prefetch_ratio: fraction of the current block used before the next one is fetched.
        wait_timeout_s: how long ``next_id`` may wait when no id is left at all.
        retry_backoff_s: pause after a failed fetch before trying again.
        metrics: where the ids left are reported; the process-wide instruments by default.
    """

    def __init__(
        self,
        fetch: FetchBlock,
        *,
        prefetch_ratio: float = 0.9,
        wait_timeout_s: float = 5.0,
        retry_backoff_s: float = 0.05,
        metrics: OncelogMetrics | None = None,
    ) -> None:
        if not 0 < prefetch_ratio <= 1:
            raise ValueError("prefetch_ratio must be in (0, 1]")
        self._fetch = fetch
        self._ratio = prefetch_ratio
        self._wait_timeout_s = wait_timeout_s
        self._backoff_s = retry_backoff_s
        self._current: tuple[int, int] | None = None
        self._next_id = 0
        self._prefetched: tuple[int, int] | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._last_error: BaseException | None = None
        self.blocks_fetched = 0
        self._metrics = default_metrics() if metrics is None else metrics

    @property
    def remaining(self) -> int:
        """Ids that can be handed out without any network call."""
        left = 0
        if self._current is not None:
            left += self._current[1] - self._next_id + 1
        if self._prefetched is not None:
            left += self._prefetched[1] - self._prefetched[0] + 1
        return left

    async def next_id(self) -> int:
        """Return an id never returned before by any source of the cluster."""
        while True:
            if self._current is not None and self._next_id <= self._current[1]:
                pid = self._next_id
                self._next_id += 1
                self._metrics.set_pid_block_remaining(self.remaining)
                self._maybe_prefetch()
                return pid
            if self._prefetched is not None:
                self._current, self._prefetched = self._prefetched, None
                self._next_id = self._current[0]
                continue
            self._start_fetch()
            assert self._inflight is not None
            try:
                await asyncio.wait_for(asyncio.shield(self._inflight), self._wait_timeout_s)
            except TimeoutError:
                raise CoordinatorLoadInProgress(
                    f"no producer id block arrived within {self._wait_timeout_s}s (last error: {self._last_error}); "
                    "retry"
                ) from None

    def _maybe_prefetch(self) -> None:
        if self._prefetched is not None or self._current is None:
            return
        first, last = self._current
        used = self._next_id - first
        if used >= self._ratio * (last - first + 1):
            self._start_fetch()

    def _start_fetch(self) -> None:
        if self._inflight is None or self._inflight.done():
            self._inflight = asyncio.create_task(self._fetch_until_success(), name="pid-block-fetch")
            # a fatal error is re-raised to whoever awaits; mark it retrieved so asyncio does not warn
            self._inflight.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _fetch_until_success(self) -> None:
        while True:
            try:
                block = await self._fetch()
            except (OncelogError, OSError, grpc.RpcError) as exc:
                self._last_error = exc
                if isinstance(exc, OncelogError) and not exc.retriable:
                    raise  # e.g. STALE_REQUESTER_EPOCH: this process is a zombie; the caller must hear it
                log.warning("producer id block fetch failed: %s; retrying", exc)
                await asyncio.sleep(self._backoff_s)
                continue
            if self._current is not None and block[0] <= self._current[1]:
                # KIP-730 sanity check: a block must never go backwards
                self._last_error = RuntimeError(f"block {block} overlaps the current block {self._current}")
                log.error("%s; fetching again", self._last_error)
                await asyncio.sleep(self._backoff_s)
                continue
            self.blocks_fetched += 1
            self._prefetched = block
            self._metrics.set_pid_block_remaining(self.remaining)
            return

    async def close(self) -> None:
        """Cancel a fetch in flight."""
        if self._inflight is not None and not self._inflight.done():
            self._inflight.cancel()
            try:
                await self._inflight
            except asyncio.CancelledError:
                pass


def grpc_block_fetcher(
    channel: aio.Channel, requester_id: str, requester_epoch: int, block_size: int = 0, timeout_s: float = 5
) -> FetchBlock:
    """A ``fetch`` for :class:`ProducerIdSource`: AllocateProducerIdBlock through
    :class:`~oncelog.client.services.PidAllocatorClient` on ``channel`` (a ``grpc.aio`` channel to a pid-allocator).
    """
    client = PidAllocatorClient(lambda _address: channel, timeout_s=timeout_s)

    async def fetch() -> tuple[int, int]:
        block = await client.allocate_producer_id_block("", requester_id, requester_epoch, block_size=block_size)
        return block.first_id, block.last_id

    return fetch
