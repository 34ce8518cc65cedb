"""The client's view of the cluster: topics, partition leaders and coordinators (Kafka's ``Metadata``).

:class:`ClusterMetadata` caches what ClusterService answers — each topic's partitions with their leader
address and leader epoch, and the owner of each transactional id's or group's coordinator shard — and
asks again when an answer goes stale: a partition reports NOT_LEADER, a fenced leader epoch or an unknown
partition, a connection breaks, or a coordinator says NOT_COORDINATOR. Any process of the cluster
answers ClusterService, so a question goes to the bootstrap addresses first and then to any node seen in
an answer, moving on while one is unreachable. At first contact (and again every metadata max age) the
client learns every live node from DescribeCluster, so it still finds the cluster when its bootstrap
address and the leaders it knew are gone.

Cached reads (:meth:`ClusterMetadata.cached_topic`) are safe from any thread: each topic's entry is an
immutable value replaced whole. Everything that calls the network runs on the client's I/O loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TypeVar

from oncelog.client.records import ClusterDescription, NodeInfo, PartitionInfo, TopicInfo, TopicPartition
from oncelog.client.services import Backoff, ClusterClient, Deadline, Retry, retry_of
from oncelog.client.transport import BootstrapError, Channels
from oncelog.errors import NotLeader, OncelogError, Reason, UnknownTopicOrPartition
from oncelog.vocabulary import CoordinatorKind

__all__ = [
    "ClusterDescription",
    "ClusterMetadata",
    "NodeInfo",
    "PartitionInfo",
    "TopicInfo",
]

T = TypeVar("T")

log = logging.getLogger("oncelog.client.metadata")

_MAX_KNOWN_ADDRESSES = 64


class ClusterMetadata:
    """Cache of topics, leaders and coordinators, refreshed from ClusterService on demand.

    Args:
        channels: the client's channels.
        bootstrap: addresses tried first for ClusterService calls.
        request_timeout_s: deadline of one call.
        retry_backoff_ms: first pause before asking again after a failure.
        retry_backoff_max_ms: the pause doubles up to this.
        metadata_max_age_ms: a cached topic older than this is refreshed when next used (Kafka's
            ``metadata.max.age.ms``).
    """

    def __init__(
        self,
        channels: Channels,
        bootstrap: Sequence[str],
        *,
        request_timeout_s: float = 30.0,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        metadata_max_age_ms: int = 300_000,
    ) -> None:
        self.cluster = ClusterClient(channels.get, timeout_s=request_timeout_s)
        self._bootstrap = tuple(bootstrap)
        self._known_addresses: dict[str, None] = {}  # oldest first; at most _MAX_KNOWN_ADDRESSES
        self._nodes_learned_at: float | None = None
        self._learn_task: asyncio.Task[None] | None = None
        self._retry_backoff_ms = retry_backoff_ms
        self._retry_backoff_max_ms = retry_backoff_max_ms
        self._max_age_s = metadata_max_age_ms / 1000
        self._topics: dict[str, tuple[TopicInfo, float]] = {}
        self._stale: set[str] = set()
        self._refreshing: dict[str, asyncio.Task[TopicInfo]] = {}
        self._coordinators: dict[tuple[CoordinatorKind, str], str] = {}

    # ---------------------------------------------------------------------------------------- cluster calls

    async def cluster_call(self, rpc: Callable[[str], Awaitable[T]]) -> T:
        """Make a ClusterService call (``rpc(address)``) on the first address that answers.

        A network failure moves on to the next bootstrap or known address; any other error is the
        server's answer and is raised.

        Raises:
            BootstrapError: no address answered (retriable).
            OncelogError: the server's answer.
        """
        last: OncelogError | None = None
        for address in self._addresses():
            try:
                answer = await rpc(address)
            except OncelogError as err:
                if err.reason not in (Reason.NETWORK_EXCEPTION, Reason.REQUEST_TIMED_OUT):
                    raise
                last = err
                continue
            self._maybe_learn_nodes()
            return answer
        raise BootstrapError(
            f"no oncelog server answered at {', '.join(self._addresses())} (last error: {last}); check that the "
            "cluster runs (`oncelog dev`) and that bootstrap names one of its addresses",
            retriable=True,
        )

    def _addresses(self) -> list[str]:
        return list(dict.fromkeys([*self._bootstrap, *self._known_addresses]))

    def _learn(self, addresses: Iterable[str]) -> None:
        for address in addresses:
            if address:
                self._known_addresses.pop(address, None)  # newest last: the oldest (likeliest gone) go first
                self._known_addresses[address] = None
        while len(self._known_addresses) > _MAX_KNOWN_ADDRESSES:
            del self._known_addresses[next(iter(self._known_addresses))]

    def _maybe_learn_nodes(self) -> None:
        """Learn every live node's address in the background, at first contact and then every max age.

        Every process serves ClusterService, so each is a bootstrap candidate (Kafka keeps every node of its
        metadata as one): a client whose bootstrap address and leaders are gone still reaches the cluster.
        """
        now = time.monotonic()
        if self._nodes_learned_at is not None and now - self._nodes_learned_at < self._max_age_s:
            return
        self._nodes_learned_at = now
        self._learn_task = asyncio.get_running_loop().create_task(self._learn_nodes())

    async def _learn_nodes(self) -> None:
        try:
            await self.describe_cluster()
        except OncelogError as err:
            self._nodes_learned_at = None  # try again at the next successful call
            log.debug("could not learn the cluster's nodes: %s", err)

    async def describe_cluster(self, *, include_expired: bool = False) -> ClusterDescription:
        """DescribeCluster, on any address."""
        description = await self.cluster_call(
            lambda address: self.cluster.describe_cluster(address, include_expired=include_expired)
        )
        self._learn(n.address for n in description.nodes)
        return description

    # ---------------------------------------------------------------------------------------- topics

    def cached_topic(self, name: str) -> TopicInfo | None:
        """The cached topic, or None when never fetched; safe from any thread."""
        entry = self._topics.get(name)
        return None if entry is None else entry[0]

    def cached_leader(self, tp: TopicPartition) -> PartitionInfo | None:
        """The cached leader of ``tp`` when it is known and live; None asks for a refresh."""
        topic = self.cached_topic(tp.topic)
        if topic is None or not 0 <= tp.partition < len(topic.partitions):
            return None
        info = topic.partitions[tp.partition]
        return info if info.leader_address else None

    def request_update(self, topic: str) -> None:
        """Mark ``topic`` stale: the next :meth:`topic` call asks the cluster again."""
        self._stale.add(topic)

    def note_failure(self, topics: Iterable[str], err: OncelogError) -> None:
        """Mark ``topics`` stale when ``err`` from a partition's leader means the leader may have moved."""
        if retry_of(err) is Retry.LOCATE:
            for topic in topics:
                self.request_update(topic)

    def needs_update(self, topic: str) -> bool:
        """Whether ``topic`` is stale, too old, or never fetched."""
        entry = self._topics.get(topic)
        return entry is None or topic in self._stale or time.monotonic() - entry[1] > self._max_age_s

    def known_topics(self) -> list[str]:
        """Topics in the cache."""
        return list(self._topics)

    async def topic(self, name: str, *, refresh: bool = False) -> TopicInfo:
        """The topic's metadata from the cache, or from the cluster when stale, old, missing or ``refresh``.

        Concurrent refreshes of one topic share a single call.

        Raises:
            UnknownTopicOrPartition: the topic does not exist (it is also dropped from the cache).
            BootstrapError: no server answered.
        """
        if not refresh and not self.needs_update(name):
            return self._topics[name][0]
        task = self._refreshing.get(name)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._fetch_topic(name))
            self._refreshing[name] = task
            task.add_done_callback(lambda _t: self._refreshing.pop(name, None))
        return await asyncio.shield(task)

    async def _fetch_topic(self, name: str) -> TopicInfo:
        try:
            topics = await self.cluster_call(lambda address: self.cluster.metadata(address, [name]))
        except OncelogError as err:
            if err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION:
                self._topics.pop(name, None)
                self._stale.discard(name)
                raise UnknownTopicOrPartition(
                    f"topic {name!r} does not exist; create it first (AdminClient.create_topics or "
                    f"`oncelog topics create {name}`)"
                ) from err
            raise
        for info in topics:
            if info.name == name:
                self._topics[name] = (info, time.monotonic())
                self._stale.discard(name)
                self._learn(p.leader_address for p in info.partitions)
                return info
        raise UnknownTopicOrPartition(f"topic {name!r} is missing from the metadata answer")

    async def refresh_stale(self) -> None:
        """Refresh every stale topic in the cache; failures are left for the next attempt."""
        stale = [t for t in self._topics if self.needs_update(t)]
        if stale:
            await asyncio.gather(*(self.topic(t, refresh=True) for t in stale), return_exceptions=True)

    async def wait_for_leader(self, tp: TopicPartition, deadline: Deadline) -> PartitionInfo:
        """The live leader of ``tp``, refreshing until one is known or the deadline passes.

        Raises:
            UnknownTopicOrPartition: the topic or partition does not exist.
            OncelogError: no leader became live in time (NOT_LEADER, retriable).
        """
        backoff = Backoff(self._retry_backoff_ms, self._retry_backoff_max_ms)
        refresh = False
        while True:
            topic = await self.topic(tp.topic, refresh=refresh)
            if not 0 <= tp.partition < len(topic.partitions):
                raise UnknownTopicOrPartition(
                    f"{tp} does not exist: topic {tp.topic!r} has {len(topic.partitions)} partition(s)"
                )
            info = topic.partitions[tp.partition]
            if info.leader_address:
                return info
            if deadline.expired:
                raise NotLeader(f"{tp} has no live leader ({info.leader_node_id or 'none'} is not serving); retry")
            await asyncio.sleep(deadline.cap(backoff.next_s()))
            refresh = True

    # ---------------------------------------------------------------------------------------- coordinators

    async def find_coordinator(self, key: str, kind: CoordinatorKind, *, refresh: bool = False) -> str:
        """Address of the process owning ``key``'s shard (FindCoordinator), cached until invalidated.

        Args:
            key: the transactional id or group id.
            kind: which coordinator: a transactional id's or a group's.
            refresh: ignore the cache.

        Raises:
            OncelogError: COORDINATOR_NOT_AVAILABLE while no process owns the shard (retriable), or the
                failure of the call.
        """
        cached = self._coordinators.get((kind, key))
        if cached is not None and not refresh:
            return cached
        address = await self.cluster_call(lambda bootstrap: self.cluster.find_coordinator(bootstrap, key, kind))
        self._coordinators[(kind, key)] = address
        self._learn([address])
        return address

    def invalidate_coordinator(self, key: str, kind: CoordinatorKind) -> None:
        """Forget the cached coordinator of ``key`` (after NOT_COORDINATOR or a broken connection)."""
        self._coordinators.pop((kind, key), None)
