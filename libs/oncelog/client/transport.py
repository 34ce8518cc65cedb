"""How a client reaches the cluster: bootstrap addresses, one gRPC channel per server, and the I/O thread.

Every client object (producer, consumer, admin) owns one :class:`IoThread`: a daemon thread running an
asyncio loop on which all of its gRPC traffic happens through ``grpc.aio``. The public API stays
synchronous, like Kafka's Java client: a blocking call submits a coroutine to the loop and waits for its
result. One loop per client multiplexes any number of ProduceStreams (one per storage node, up to five
batches in flight per partition) and concurrent fetches without a thread per connection, and keeps every
piece of sender state on one thread, so the producer's sequence book needs no lock.

Bootstrap: any oncelog process serves ClusterService (design/architecture.md §2), so any address of the cluster will do.
``bootstrap=None`` reads ``$ONCELOG_BOOTSTRAP``, then the addresses in ``.oncelog/cluster.json``, the file
``oncelog dev`` writes.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import threading
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import grpc

from oncelog.client.errors import IllegalStateError
from oncelog.client.services import Backoff, Deadline, call  # re-exported: the producer's modules import them here
from oncelog.errors import OncelogError, Reason
from oncelog.rpc.channels import DEFAULT_MAX_MESSAGE_BYTES, ChannelFactory, ChannelPool

__all__ = [
    "BOOTSTRAP_ENV",
    "DEFAULT_CLUSTER_FILE",
    "Backoff",
    "BootstrapError",
    "Channels",
    "Deadline",
    "IoThread",
    "call",
    "resolve_bootstrap",
]

T = TypeVar("T")

DEFAULT_CLUSTER_FILE = Path(".oncelog") / "cluster.json"
"""Where ``oncelog dev`` writes the local cluster's addresses (relative to the working directory)."""

BOOTSTRAP_ENV = "ONCELOG_BOOTSTRAP"
"""The environment variable naming the cluster when no bootstrap is passed (before the cluster file)."""

# A restarted server should be dialled again within a second, not after gRPC's default backoff of up
# to two minutes: a producer retrying a batch is waiting for exactly that reconnect. (Not
# grpc.min_reconnect_backoff_ms: gRPC also uses it as the connect timeout, which must stay generous.)
_RECONNECT_OPTIONS = (
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1_000),
)


class BootstrapError(OncelogError):
    """No usable bootstrap address: none given and no cluster file, a malformed address, or nothing answers.

    The message says which, and how to fix it (start ``oncelog dev`` or pass ``bootstrap="host:port"``).
    """

    reason = Reason.NETWORK_EXCEPTION

    def __init__(self, message: str, *, retriable: bool = False) -> None:
        super().__init__(message, definite=True)
        self.retriable = retriable


def resolve_bootstrap(
    bootstrap: str | Sequence[str] | None,
    *,
    environ: Mapping[str, str] | None = None,
    cluster_file: Path | str = DEFAULT_CLUSTER_FILE,
    how_to_pass: str = 'pass bootstrap="host:port"',
) -> tuple[str, ...]:
    """The bootstrap addresses to use: the argument, else ``$ONCELOG_BOOTSTRAP``, else the local cluster file.

    Every client (producer, consumer, admin, the CLI and the Spark source and sink) resolves its addresses here.

    Args:
        bootstrap: ``"host:port"``, a comma-separated list of them, a sequence of them, or None to read
            ``ONCELOG_BOOTSTRAP`` and then ``cluster_file``.
        environ: where ``ONCELOG_BOOTSTRAP`` is looked up; ``os.environ`` by default.
        cluster_file: the file ``oncelog dev`` writes; read only when neither names an address.
        how_to_pass: how the caller's user names the cluster, for the error messages (the CLI says
            ``pass --bootstrap host:port``).

    Raises:
        BootstrapError: nothing names an address (no argument, no variable, no readable file), or an
            address is not ``host:port`` with a port in 1-65535.
    """
    environ = os.environ if environ is None else environ
    source = ""
    if bootstrap is None and environ.get(BOOTSTRAP_ENV, "").strip():
        bootstrap, source = environ[BOOTSTRAP_ENV], f" (from {BOOTSTRAP_ENV})"
    if bootstrap is None:
        path = Path(cluster_file)
        source = f" (from {path})"
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise BootstrapError(
                f"no bootstrap address given, {BOOTSTRAP_ENV} is not set and {path} does not exist; start a local "
                f"cluster with `oncelog dev` or {how_to_pass} (any oncelog service address)"
            ) from None
        except (OSError, ValueError) as exc:
            raise BootstrapError(f"cannot read the cluster file {path}: {exc}; {how_to_pass}") from None
        services = data.get("services", {}) if isinstance(data, dict) else {}
        listed = [data.get("bootstrap")] if isinstance(data, dict) else []
        listed += [a for role in sorted(services) for a in services[role]]
        found: list[str] = [a for a in listed if isinstance(a, str) and a]
        if not found:
            raise BootstrapError(f"the cluster file {path} names no address; restart `oncelog dev`")
        bootstrap = found
    items: list[str] = bootstrap.split(",") if isinstance(bootstrap, str) else list(bootstrap)
    addresses = tuple(dict.fromkeys(item.strip() for item in items if item and item.strip()))
    if not addresses:
        raise BootstrapError(f"bootstrap is empty{source}; {how_to_pass} (any oncelog service address)")
    for address in addresses:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise BootstrapError(f"bootstrap address {address!r} is not host:port (for example 127.0.0.1:7101){source}")
        if not 0 < int(port) < 65536:
            raise BootstrapError(
                f"bootstrap address {address!r}{source} has an invalid port {port}: a port is 1-65535 "
                "(host:port, for example 127.0.0.1:7101)"
            )
    return addresses


# rounds of cancel-and-release when the I/O thread closes (see IoThread.close)
_CLOSE_ROUNDS = 5


class _ClientEventLoop(asyncio.SelectorEventLoop):
    """The I/O thread's loop: once closed, it drops callbacks handed to it from other threads.

    grpc.aio has one completion queue per process, polled by a reader on whichever client's loop opened the
    first channel; that reader hands every completion to the loop of its call with ``call_soon_threadsafe``.
    gRPC can complete an operation of a closed client's cancelled call after that client's loop closed: a
    plain loop then raises "Event loop is closed" inside another, live client's reader (which also stops it
    from handing on the rest of the queue until its next wake-up). Nobody waits on a closed client's calls, so
    such a completion is dropped.
    """

    def call_soon_threadsafe(  # type: ignore[override]  # same parameters; typeshed spells them with a TypeVarTuple
        self, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = None
    ) -> asyncio.Handle:
        try:
            return super().call_soon_threadsafe(callback, *args, context=context)
        except RuntimeError:
            if not self.is_closed():
                raise
            dropped = asyncio.Handle(callback, args, self, context)
            dropped.cancel()
            return dropped


class IoThread:
    """A daemon thread running the asyncio loop on which one client does all its network I/O.

    Args:
        name: thread name, shown in stack dumps.
    """

    def __init__(self, name: str) -> None:
        self.loop: asyncio.AbstractEventLoop = _ClientEventLoop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._closed = False
        self._thread.start()
        self._thread_id = self._thread.ident

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def on_loop_thread(self) -> bool:
        """True when called from the I/O thread itself (for example inside a send() callback)."""
        return threading.get_ident() == self._thread_id

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        """Schedule ``coro`` on the loop and return a future for its result."""
        if self._closed:
            coro.close()
            raise IllegalStateError("the client is closed; create a new one")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run ``coro`` on the loop and wait for its result; the coroutine bounds its own duration.

        Raises:
            IllegalStateError: called from the I/O thread, where waiting would deadlock (a blocking
                client method called from a delivery callback).
        """
        if self.on_loop_thread:
            coro.close()
            raise IllegalStateError(
                "a blocking client method was called from the client's I/O thread (for example inside a "
                "send() callback); call it from another thread"
            )
        return self.submit(coro).result()

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` on the loop as soon as possible; a no-op once closed."""
        if not self._closed:
            try:
                self.loop.call_soon_threadsafe(callback)
            except RuntimeError:
                pass  # the loop stopped between the check and the call

    def close(self, timeout_s: float = 5.0, *, release: Callable[[], Coroutine[Any, Any, None]] | None = None) -> None:
        """Stop the loop and join the thread; pending tasks are cancelled, then ``release()`` (closing the client's
        channels) runs on the loop: a task cancelled only now may have opened a channel after the client closed its
        own, and a channel left open past the loop reports "Event loop is closed" when its poller fires. Idempotent."""
        if self._closed:
            return
        if self.on_loop_thread:
            raise IllegalStateError("close() was called from the client's I/O thread; call it from another thread")
        self._closed = True

        def others() -> list[asyncio.Task[Any]]:
            return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

        async def cancel_all() -> None:
            # Rounds until a round leaves no task behind: a callback of a call cancelled in one round (or failed
            # by closing the channels) can start a task, such as a metadata refresh, that opens a channel after
            # the release; the next round cancels that task and releases its channel while the loop still runs.
            for _ in range(_CLOSE_ROUNDS):
                tasks = others()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                if release is not None:
                    await release()
                # grpc.aio feeds intercepted streaming calls through async generators. One left suspended is
                # finalized whenever it is garbage collected, by scheduling aclose() on its loop: after the
                # loop closed, that prints "Event loop is closed". Close them while the loop still runs; the
                # loop tracks every one it started until it is collected, so no collection is needed here (a
                # full gc.collect() took 20-40 ms of CPU per closed client in a process with pyspark loaded).
                await self.loop.shutdown_asyncgens()
                await asyncio.sleep(0)  # let callbacks of the cancelled calls run
                if not others():
                    break

        try:
            asyncio.run_coroutine_threadsafe(cancel_all(), self.loop).result(timeout_s)
        except Exception:
            pass  # best effort: the loop stops below either way
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout_s)
        if not self._thread.is_alive():
            self.loop.close()


class Channels(ChannelPool):
    """The client's channels: one ``grpc.aio`` channel per server address, opened lazily on the client's loop
    (an :class:`~oncelog.rpc.ChannelPool`).

    gRPC's own retries are off on them: the library retries by itself, knowing which calls are idempotent, and a
    transparent channel-level retry could replay a non-idempotent produce whose first attempt was written. A
    restarted server is dialled again within a second (the reconnect backoff below).

    Args:
        credentials: TLS credentials for every channel; None for plaintext.
        max_message_bytes: largest message sent or received.
    """

    def __init__(
        self, *, credentials: grpc.ChannelCredentials | None = None, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> None:
        super().__init__(
            ChannelFactory(
                credentials=credentials,
                max_message_bytes=max_message_bytes,
                retries=False,
                extra_options=_RECONNECT_OPTIONS,
            )
        )

    def closed_error(self) -> Exception:
        """A call made after the client closed its channels (a late retry or refresh) fails with this."""
        return IllegalStateError("the client is closed; create a new one")
