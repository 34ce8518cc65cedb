"""Where the gateway sends each call: the topics, partition leaders and coordinators of the oncelog cluster.

Answers come from ClusterService on any bootstrap address and are cached; a call that meets NOT_LEADER,
UNKNOWN_TOPIC_OR_PARTITION, NOT_COORDINATOR or a transport failure drops the entry it used, so the Kafka
client's retry (Kafka clients retry exactly these errors) reads the catalog again.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from oncelog.client.records import TopicInfo
from oncelog.client.services import ClusterClient
from oncelog.errors import CoordinatorNotAvailable, OncelogError, Reason, UnknownTopicOrPartition
from oncelog.vocabulary import CoordinatorKind, Role, TopicPartition

T = TypeVar("T")

_ROUTING_ERRORS = frozenset(
    {
        Reason.NOT_LEADER,
        Reason.FENCED_LEADER_EPOCH,
        Reason.UNKNOWN_LEADER_EPOCH,
        Reason.UNKNOWN_TOPIC_OR_PARTITION,
        Reason.NOT_COORDINATOR,
        Reason.COORDINATOR_NOT_AVAILABLE,
        Reason.NETWORK_EXCEPTION,
        Reason.STORAGE_UNAVAILABLE,
    }
)


class NoLeader(OncelogError):
    """A partition has no live leader in the catalog right now (the client retries)."""

    reason = Reason.NOT_LEADER


class ClusterRoutes:
    """Cached catalog answers for one gateway process.

    Args:
        cluster: the ClusterService client.
        bootstrap: addresses of oncelog processes, tried in order.
        topics_ttl_s: how long a topic listing is trusted without an error.
    """

    def __init__(self, cluster: ClusterClient, bootstrap: Iterable[str], *, topics_ttl_s: float = 5.0) -> None:
        self._cluster = cluster
        self.cluster = cluster
        """The ClusterService client these routes read (for callers that ask it through :meth:`ask`)."""
        self._bootstrap = [b.strip() for b in bootstrap if b.strip()]
        self._ttl = topics_ttl_s
        self._topics: dict[str, TopicInfo] = {}
        self._topics_read_at = float("-inf")
        self._coordinators: dict[tuple[str, CoordinatorKind], str] = {}
        self._idempotent_coordinators: list[str] = []
        self._next = 0

    async def ask(self, call_with_address: Callable[[str], Awaitable[T]]) -> T:
        """Run ``call_with_address(address)`` on the first bootstrap address that answers."""
        last: OncelogError | None = None
        for _ in range(len(self._bootstrap)):
            address = self._bootstrap[self._next % len(self._bootstrap)]
            try:
                return await call_with_address(address)
            except OncelogError as exc:
                if exc.reason is not Reason.NETWORK_EXCEPTION:
                    raise
                last = exc
                self._next += 1
        assert last is not None
        raise last

    async def topics(self, *, fresh: bool = False) -> dict[str, TopicInfo]:
        """Every topic by name (cached for ``topics_ttl_s`` unless ``fresh``)."""
        if fresh or time.monotonic() - self._topics_read_at > self._ttl:
            listing = await self.ask(lambda a: self._cluster.metadata(a))
            self._topics = {t.name: t for t in listing}
            self._topics_read_at = time.monotonic()
        return self._topics

    def forget_topics(self) -> None:
        """Read the topics again on the next call."""
        self._topics_read_at = float("-inf")

    async def leader(self, tp: TopicPartition) -> str:
        """The address of the partition's leader.

        Raises:
            UnknownTopicOrPartition: no such topic or partition (after a fresh read).
            NoLeader: the partition has no leader now.
        """
        for fresh in (False, True):
            topic = (await self.topics(fresh=fresh)).get(tp.topic)
            if topic is not None and 0 <= tp.partition < len(topic.partitions):
                address = topic.partitions[tp.partition].leader_address
                if address:
                    return address
                if fresh:
                    raise NoLeader(f"partition {tp.topic}-{tp.partition} has no leader right now")
        raise UnknownTopicOrPartition(f"topic partition {tp.topic}-{tp.partition} does not exist")

    async def leader_epoch(self, tp: TopicPartition) -> int:
        """The partition's leader epoch as the cached catalog has it (-1 for an unknown partition)."""
        topic = (await self.topics()).get(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return -1
        return topic.partitions[tp.partition].leader_epoch

    async def coordinator(self, key: str, kind: CoordinatorKind) -> str:
        """The address of the process owning ``key``'s shard."""
        cached = self._coordinators.get((key, kind))
        if cached is None:
            cached = await self.ask(lambda a: self._cluster.find_coordinator(a, key, kind))
            self._coordinators[(key, kind)] = cached
        return cached

    async def any_txn_coordinator(self) -> str:
        """A transaction coordinator for an idempotent producer's InitProducerId (any replica will do)."""
        if not self._idempotent_coordinators:
            cluster = await self.ask(lambda a: self._cluster.describe_cluster(a))
            self._idempotent_coordinators = list(cluster.addresses(Role.TXN_COORDINATOR))
            if not self._idempotent_coordinators:
                raise CoordinatorNotAvailable("no transaction coordinator is live")
        self._next += 1
        return self._idempotent_coordinators[self._next % len(self._idempotent_coordinators)]

    def failed(self, error: OncelogError, *, key: tuple[str, CoordinatorKind] | None = None) -> None:
        """A call routed here failed with ``error``: drop what may have sent it to the wrong place."""
        if error.reason not in _ROUTING_ERRORS:
            return
        self.forget_topics()
        self._idempotent_coordinators.clear()
        if key is not None:
            self._coordinators.pop(key, None)
