"""The one retry table of the client library and its one backoff (design/client.md §2, §3)."""

from __future__ import annotations

import enum
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TypeVar

import grpc
import tenacity

from oncelog.errors import OncelogError, Reason
from oncelog.rpc.errors import from_rpc_error

T = TypeVar("T")

# ------------------------------------------------------------------------------------------- retries


class Retry(enum.Enum):
    """How a retriable failure is retried."""

    SAME = "same"
    """Send the same request to the same server after a pause: it is busy, loading, or was slow."""
    LOCATE = "locate"
    """Find the server again first (partition metadata for a leader, FindCoordinator for a coordinator), then
    send the same request: the server moved, or the connection to it broke."""


RETRY_TABLE: Mapping[Reason, Retry] = {
    # the leader of a partition moved, or its metadata is not there yet
    Reason.NOT_LEADER: Retry.LOCATE,
    Reason.FENCED_LEADER_EPOCH: Retry.LOCATE,
    Reason.UNKNOWN_LEADER_EPOCH: Retry.LOCATE,
    Reason.UNKNOWN_TOPIC_OR_PARTITION: Retry.LOCATE,
    # a coordinator shard moved or has no owner right now
    Reason.NOT_COORDINATOR: Retry.LOCATE,
    Reason.COORDINATOR_NOT_AVAILABLE: Retry.LOCATE,
    # the connection broke: Kafka's NetworkException is an InvalidMetadataException
    Reason.NETWORK_EXCEPTION: Retry.LOCATE,
    # the right server, not ready yet
    Reason.COORDINATOR_LOAD_IN_PROGRESS: Retry.SAME,
    Reason.CONCURRENT_TRANSACTIONS: Retry.SAME,
    Reason.UNSTABLE_OFFSET_COMMIT: Retry.SAME,
    Reason.NOT_ENOUGH_REPLICAS: Retry.SAME,
    Reason.STORAGE_UNAVAILABLE: Retry.SAME,
    Reason.REQUEST_TIMED_OUT: Retry.SAME,
    # damaged in transit: the stored copy is checked before it is served (Kafka retries CORRUPT_MESSAGE)
    Reason.CORRUPT_MESSAGE: Retry.SAME,
    # the partition forgot the producer (retention); the producer's own handler decides (design/kafka-semantics.md §4.2)
    Reason.UNKNOWN_PRODUCER_ID: Retry.SAME,
}
"""Every reason a call may be retried for, and how: the one table of the client library.

A reason missing here is final. The keys are exactly the reasons :data:`oncelog.errors.REASONS` marks
retriable (a unit test keeps the two in step); this table adds what to do before the next attempt.
"""


def retry_of(err: OncelogError) -> Retry | None:
    """How to retry ``err``, or None when it is final.

    The error's own ``retriable`` flag, as the server sent it, can only turn a retry off: a server that knows
    an attempt cannot succeed (a topic it has just been told is gone) says so.
    """
    if not err.retriable:
        return None
    return RETRY_TABLE.get(err.reason)


def is_retriable(err: OncelogError, *, unknown_topic_is_final: bool = False) -> bool:
    """Whether :func:`retry_of` allows another attempt.

    Args:
        unknown_topic_is_final: UNKNOWN_TOPIC_OR_PARTITION ends the call. The catalog is authoritative about
            topics, so a topic it does not know will not appear by waiting; a partition leader that does not
            know it yet (a topic just created) is retried by the callers that leave this False.
    """
    if unknown_topic_is_final and err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION:
        return False
    return retry_of(err) is not None


class Deadline:
    """A point in monotonic time that bounds a blocking call (Kafka's ``max.block.ms``)."""

    def __init__(self, timeout_s: float | None) -> None:
        self._at = None if timeout_s is None else time.monotonic() + timeout_s

    def remaining(self) -> float | None:
        """Seconds left (never negative), or None without a bound."""
        return None if self._at is None else max(self._at - time.monotonic(), 0.0)

    @property
    def expired(self) -> bool:
        """True once the time is up."""
        return self._at is not None and time.monotonic() >= self._at

    def cap(self, timeout_s: float) -> float:
        """``timeout_s``, shortened to what is left."""
        left = self.remaining()
        return timeout_s if left is None else min(timeout_s, left)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The one backoff of the client library: exponential from ``initial_ms`` to ``max_ms``, ±20 % jitter.

    Kafka's ``retry.backoff.ms`` and ``retry.backoff.max.ms``. :meth:`run` retries a coroutine with tenacity
    while :func:`retry_of` allows and a :class:`Deadline` lasts; :meth:`backoff` hands the same curve to a
    loop that schedules its own retries (the producer's sender re-enqueues batches instead of awaiting).
    """

    initial_ms: int = 100
    max_ms: int = 1_000

    def pause_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """Seconds to pause after failed attempt number ``attempt`` (0 for the first failure)."""
        initial = max(self.initial_ms, 1)
        base = min(initial * 2 ** min(attempt, 32), max(self.max_ms, initial))
        return base * (rng or random).uniform(0.8, 1.2) / 1000

    def backoff(self, rng: random.Random | None = None) -> Backoff:
        """A stateful pause counter on this curve."""
        return Backoff(self.initial_ms, self.max_ms, rng=rng)

    async def run(
        self,
        attempt: Callable[[], Awaitable[T]],
        deadline: Deadline,
        *,
        retry_if: Callable[[OncelogError], bool] = is_retriable,
        before_retry: Callable[[OncelogError], object] | None = None,
        out_of_time: Callable[[OncelogError], BaseException] | None = None,
    ) -> T:
        """Await ``attempt()`` until it succeeds, fails for good, or ``deadline`` passes.

        Args:
            attempt: makes one attempt; raises :class:`OncelogError` on failure.
            deadline: no attempt starts after it; pauses are cut short to end with it.
            retry_if: whether a failure is worth another attempt (default: :data:`RETRY_TABLE`).
            before_retry: called with the failure before the pause (refresh metadata, forget a coordinator).
            out_of_time: builds the exception raised when a retriable failure is still there at the deadline;
                by default that failure itself.

        Raises:
            OncelogError: the final failure.
        """

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if before_retry is not None:
                before_retry(_failure(state))

        try:
            async for state in tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, OncelogError) and retry_if(exc)),
                stop=lambda _state: deadline.expired,
                wait=lambda state: deadline.cap(self.pause_s(state.attempt_number - 1)),
                before_sleep=before_sleep,
                reraise=True,
            ):
                with state:
                    return await attempt()
        except OncelogError as err:
            if out_of_time is not None and deadline.expired and retry_if(err):
                raise out_of_time(err) from err
            raise
        raise AssertionError("tenacity ended without an outcome")  # pragma: no cover

    def run_sync(
        self,
        attempt: Callable[[], T],
        deadline: Deadline,
        *,
        retry_if: Callable[[OncelogError], bool] = is_retriable,
        before_retry: Callable[[OncelogError], object] | None = None,
    ) -> T:
        """:meth:`run` for blocking code (the Spark connector's executors): pauses with ``time.sleep``.

        Raises:
            OncelogError: the final failure, or the last retriable one once ``deadline`` passed.
        """

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if before_retry is not None:
                before_retry(_failure(state))

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda exc: isinstance(exc, OncelogError) and retry_if(exc)),
            stop=lambda _state: deadline.expired,
            wait=lambda state: deadline.cap(self.pause_s(state.attempt_number - 1)),
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(attempt)


def _failure(state: tenacity.RetryCallState) -> OncelogError:
    assert state.outcome is not None
    failure = state.outcome.exception()
    assert isinstance(failure, OncelogError)
    return failure


class Backoff:
    """Pauses between the retries of one operation, on :class:`RetryPolicy`'s curve.

    Args:
        initial_ms: the first pause.
        max_ms: pauses double up to this.
        rng: source of jitter; the module's by default.
    """

    def __init__(self, initial_ms: int = 100, max_ms: int = 1_000, *, rng: random.Random | None = None) -> None:
        self._policy = RetryPolicy(initial_ms, max_ms)
        self._attempts = 0
        self._rng = rng

    def next_s(self) -> float:
        """Seconds to wait before the next attempt; grows with each call."""
        pause = self._policy.pause_s(self._attempts, self._rng)
        self._attempts += 1
        return pause

    def reset(self) -> None:
        """Start again from the initial pause (after a success)."""
        self._attempts = 0


async def call(rpc: Callable[..., Awaitable[T]], request: object, *, timeout_s: float) -> T:
    """Make one unary call and turn a failure into the server's domain error.

    Raises:
        OncelogError: the server's error (``ErrorInfo``), or a transport failure mapped from the status
            code: UNAVAILABLE becomes NETWORK_EXCEPTION and DEADLINE_EXCEEDED becomes REQUEST_TIMED_OUT,
            both retriable and indeterminate.
    """
    try:
        return await rpc(request, timeout=max(timeout_s, 0.001))
    except grpc.RpcError as exc:
        raise from_rpc_error(exc) from exc
