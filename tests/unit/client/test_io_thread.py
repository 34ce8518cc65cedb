"""The client's I/O thread closes without leaving a channel open on a stopped loop."""

from __future__ import annotations

import asyncio

from oncelog.client import transport
from oncelog.client.transport import Channels, IoThread


def test_a_task_that_respawns_on_cancel_cannot_open_a_channel_after_the_release() -> None:
    # A late task (a retry, a metadata refresh started by a cancelled call's callback) can outlive every
    # cancel-and-release round. If it could still open a channel, that channel's poller would fire on the closed
    # loop ("Event loop is closed"). Each cancelled task here starts one more that dials, more times than there
    # are rounds.
    io = IoThread("test-io")
    channels = Channels()
    opened_after_close: list[str] = []
    released: list[bool] = []

    async def release() -> None:
        released.append(True)
        await channels.close()

    respawns = transport._CLOSE_ROUNDS + 3

    async def dialler(generation: int) -> None:
        address = f"127.0.0.1:{generation + 1}"
        was_released = bool(released)
        channels.get(address)
        if was_released:
            opened_after_close.append(address)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if generation < respawns:
                asyncio.get_running_loop().create_task(dialler(generation + 1))
            raise

    started = io.submit(_start(dialler))
    started.result(timeout=5)
    io.close(release=release)

    assert released, "the release never ran"
    assert not io._thread.is_alive() and io.loop.is_closed()
    assert not [t for t in asyncio.all_tasks(io.loop) if not t.done()], "a task was left pending on the closed loop"
    assert opened_after_close == [], f"channels opened after the client released its channels: {opened_after_close}"
    assert len(channels) == 0


async def _start(dialler) -> None:  # type: ignore[no-untyped-def]
    asyncio.get_running_loop().create_task(dialler(0))
    await asyncio.sleep(0)


def test_a_closed_client_loop_drops_a_completion_handed_over_from_another_thread() -> None:
    # grpc.aio's completion queue reader runs on one client's loop and hands each completion to its call's loop
    # with call_soon_threadsafe. A completion for a client closed meanwhile must not raise inside the live one.
    closed = IoThread("closed-client")
    closed.close()
    live = IoThread("live-client")
    ran: list[bool] = []
    try:
        handed_over = live.submit(_hand_over(closed.loop, lambda: ran.append(True)))
        assert handed_over.result(timeout=5) is None
    finally:
        live.close()
    assert ran == [], "a callback ran on a closed loop"


async def _hand_over(loop: asyncio.AbstractEventLoop, callback) -> None:  # type: ignore[no-untyped-def]
    handle = loop.call_soon_threadsafe(callback)
    assert handle.cancelled()
