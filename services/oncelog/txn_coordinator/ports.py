"""What the transaction coordinator needs from outside and what it answers with.

The coordinator takes these ports through its constructor, so its unit tests run over in-memory fakes: a source of
producer ids (the pid-allocator's prefetched blocks, :class:`oncelog.client.pid_allocator.ProducerIdSource`) and a
sink for markers (:class:`~.marker_channel.TransactionMarkerChannelManager`). The durable table is the state
manager's port (:class:`~.state_manager.TransactionStore`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import NamedTuple, Protocol

from oncelog.vocabulary import ProducerIdAndEpoch, TopicPartition

from .state import TransactionResult

Clock = Callable[[], int]
"""Wall-clock time in milliseconds."""

MarkerCompletion = Callable[[], Awaitable[None]]
"""Called by the marker sink once every participant acknowledged its marker."""


class ProducerIdSource(Protocol):
    """Hands out producer ids that are never reused (the pid-allocator's prefetched blocks)."""

    async def next_id(self) -> int:
        """Return a fresh producer id.

        Raises:
            CoordinatorLoadInProgress: no block is available yet (retriable, design/kafka-semantics.md §5.5).
        """
        ...


class MarkerSink(Protocol):
    """Delivers COMMIT/ABORT markers to every participant (``TransactionMarkerChannelManager``,
    design/kafka-semantics.md §3.2)."""

    def enqueue(
        self,
        *,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        result: TransactionResult,
        partitions: frozenset[TopicPartition],
        groups: frozenset[str],
        coordinator_epoch: int,
        on_complete: MarkerCompletion,
    ) -> None:
        """Queue markers without blocking; retry them until acknowledged while the epoch holds.

        Once every partition and group acknowledged (immediately when there are none), await
        ``on_complete``. If it raises NotCoordinator, drop the transaction: the next owner resumes it.
        Any other error means Complete* could not be written yet; call it again later.
        """
        ...

    def skip(
        self, transactional_id: str, partitions: Collection[TopicPartition], groups: Collection[str]
    ) -> tuple[set[TopicPartition], set[str]]:
        """Treat the named participants of a queued transaction as acknowledged; returns those still waiting."""
        ...


class EndTxnOutcome(NamedTuple):
    """The answer of an EndTxn that waits for completion (``TransactionCoordinator.end_txn_and_wait``)."""

    producer: ProducerIdAndEpoch
    """The identity for the next transaction, as ``TransactionCoordinator.end_txn`` returns it."""
    completed: bool
    """Complete* was durable before the reply: every participant has its marker."""


__all__ = ["Clock", "EndTxnOutcome", "MarkerCompletion", "MarkerSink", "ProducerIdAndEpoch", "ProducerIdSource"]
