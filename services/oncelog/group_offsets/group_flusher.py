"""GroupFlusher: runs the group coordinator's flush off the event loop when heartbeats wait for their writes.

One flush runs at a time; heartbeats that stage changes while it runs are written by the next one, so under load
each flush carries many members' changes in one fenced transaction per shard and at rest a change is written at
once (design/consumer-groups.md §5.1).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class GroupFlusher:
    """Calls ``flush`` (blocking) in a worker thread whenever :meth:`request` was called since the last call began.

    Args:
        flush: :meth:`GroupCoordinator.flush`; it settles the waiting heartbeats itself, also on failure.
    """

    def __init__(self, flush: Callable[[], object]) -> None:
        self._flush = flush
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def request(self) -> None:
        """Ask for a flush soon (on the event loop): the running one, if any, is followed by another."""
        self._wanted.set()
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="consumer-group-flush")

    async def _run(self) -> None:
        while self._wanted.is_set():
            self._wanted.clear()
            try:
                await asyncio.to_thread(self._flush)
            except Exception:  # flush settles its heartbeats with the error; a bug must not stop later flushes
                log.exception("consumer group flush failed")

    async def close(self) -> None:
        """Let a running flush finish (its heartbeats are answered), then stop."""
        if self._task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


__all__ = ["GroupFlusher"]
