"""NodeMembership: register this process in the catalog, keep its lease alive, deregister on stop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from oncelog.catalog.store import CatalogStore

log = logging.getLogger("oncelog.catalog.membership")


class NodeMembership:
    """Owns this process's node row: epoch on registration, heartbeats every third of the lease."""

    def __init__(
        self,
        store: CatalogStore,
        node_id: str,
        role: str,
        lease_ms: int,
        clock: Callable[[], int],
        *,
        rack: str | None = None,
        on_fenced: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.rack = rack or None
        self.on_fenced = on_fenced
        """Awaited once another process registered this node id (this one is fenced): the node withdraws."""
        self.node_id = node_id
        self.role = role
        self.lease_ms = lease_ms
        self.clock = clock
        self.node_epoch = 0
        self.address = ""
        self._task: asyncio.Task[None] | None = None

    async def start(self, address: str) -> None:
        """Register with ``address`` and start heartbeating (an ``on_start`` hook)."""
        self.address = address
        self.node_epoch = await asyncio.to_thread(
            self.store.register_node, self.node_id, self.role, address, self.lease_ms, self.clock(), rack=self.rack
        )
        self._task = asyncio.create_task(self._heartbeats(), name=f"heartbeat-{self.node_id}")
        log.info("registered %s as %s epoch %d at %s", self.node_id, self.role, self.node_epoch, address)

    async def _heartbeats(self) -> None:
        interval = self.lease_ms / 3000
        while True:
            await asyncio.sleep(interval)
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
