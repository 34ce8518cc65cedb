"""NodeMembership: register this process in the catalog, keep its lease alive, deregister on stop."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable

from oncelog.catalog.store import CatalogStore

log = logging.getLogger("oncelog.catalog.membership")


class NodeMembership:
    """Owns this process's node row: epoch on registration, heartbeats every ``heartbeat_interval_ms`` (default
    a third of the lease)."""

    def __init__(
        self,
        store: CatalogStore,
        node_id: str,
        role: str,
        lease_ms: int,
        clock: Callable[[], int],
        *,
        rack: str | None = None,
        heartbeat_interval_ms: int | None = None,
        on_fenced: Callable[[], Awaitable[None]] | None = None,
        monotonic_clock: Callable[[], int] | None = None,
    ) -> None:
        self.store = store
        self.rack = rack or None
        self.on_fenced = on_fenced
        """Awaited once another process registered this node id (this one is fenced): the node withdraws."""
        self.node_id = node_id
        self.role = role
        self.lease_ms = lease_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms or lease_ms // 3
        self.clock = clock
        self.node_epoch = 0
        self.address = ""
        self._task: asyncio.Task[None] | None = None
        self._monotonic = monotonic_clock or (lambda: time.monotonic_ns() // 1_000_000)
        # the lease as last renewed, on this process's monotonic clock (design/replication.md §9): it runs
        # until ``_valid_until``; it has run without a gap since ``_valid_since``
        self._valid_since = 0
        self._valid_until = 0

    def monotonic_ms(self) -> int:
        """This process's monotonic clock, in milliseconds (the clock of :meth:`lease_valid_until`)."""
        return self._monotonic()

    def lease_valid_since(self) -> int:
        """Monotonic ms since which the lease has been renewed without a gap (0 before registration)."""
        return self._valid_since

    def lease_valid_until(self) -> int:
        """Monotonic ms until which the lease, as last renewed, surely holds in the catalog too: each renewal
        counts from the moment it was sent, before the catalog stamped it (0 before registration)."""
        return self._valid_until

    def _renewed(self, sent_ms: int, margin_ms: int) -> None:
        if sent_ms + margin_ms >= self._valid_until:  # it may have lapsed in between: a new, unbroken stretch
            self._valid_since = sent_ms
        self._valid_until = max(self._valid_until, sent_ms + self.lease_ms)

    async def start(self, address: str, *, external_address: str = "") -> None:
        """Register with ``address`` (and the external listener's address, if any) and start heartbeating."""
        self.address = address
        sent = self._monotonic()
        self.node_epoch = await asyncio.to_thread(
            functools.partial(
                self.store.register_node,
                self.node_id,
                self.role,
                address,
                self.lease_ms,
                self.clock(),
                rack=self.rack,
                external_address=external_address or None,
            )
        )
        self._renewed(sent, self.lease_ms // 5)
        self._task = asyncio.create_task(self._heartbeats(), name=f"heartbeat-{self.node_id}")
        log.info("registered %s as %s epoch %d at %s", self.node_id, self.role, self.node_epoch, address)

    async def _heartbeats(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            sent = self._monotonic()
            try:
                alive = await asyncio.to_thread(
                    self.store.heartbeat, self.node_id, self.node_epoch, self.lease_ms, self.clock()
                )
            except Exception:
                log.exception("heartbeat failed; retrying")
                continue
            if not alive:
                log.error(
                    "node %s was registered again elsewhere (epoch > %d): this process is fenced and reports "
                    "NOT_SERVING; stop it",
                    self.node_id,
                    self.node_epoch,
                )
                if self.on_fenced is not None:
                    await self.on_fenced()
                return
            self._renewed(sent, self.lease_ms // 5)

    async def stop(self) -> None:
        """Stop heartbeating and end the lease now (an ``on_stop`` hook)."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self.node_epoch:
            try:
                await asyncio.to_thread(self.store.deregister_node, self.node_id, self.node_epoch)
            except Exception:
                log.exception("deregistration failed; the lease will lapse on its own")
