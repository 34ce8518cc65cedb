"""gRPC access from Spark processes: one channel per server per Python process, and a small log client.

Spark pickles readers and ships them to executors, and a ``grpc.Channel`` cannot be pickled (design/spark-connector.md
§3.1), so no reader or partition holds one. Channels live in a module-level cache keyed by
``(process id, address)`` and are opened lazily on first use. Python workers are reused across tasks
(``spark.python.worker.reuse``), so one executor process opens one channel per server and reuses it for
every partition it reads (design/spark-connector.md §5). The process id in the key keeps a forked child from using its
parent's
channel, which gRPC does not support.

:class:`LogClient` is what the connector needs of the cluster, as blocking calls with retries, made through the
typed :class:`~oncelog.client.services.BlockingClient` (no request is built here): partition
leaders from ClusterService ``Metadata``, ``ListOffsets`` and ``Fetch`` on the leaders, and the sink's
batch markers from the group offsets service (``FetchOffsets`` with ``require_stable``). It holds only
addresses and timeouts, so it pickles with the reader. Leaders are cached per process and per bootstrap
list, and dropped when a leader answers NOT_LEADER or a stale leader epoch. TLS follows the process's
``ONCELOG_TLS_*`` variables (:meth:`oncelog.rpc.ChannelFactory.from_env`); executors need the same
variables (and files) as the driver.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import grpc

from oncelog.client.records import TopicPartition
from oncelog.client.services import (
    BlockingClient,
    Deadline,
    FetchedPartition,
    FetchPosition,
    OffsetQuery,
    RetryPolicy,
    retry_of,
)
from oncelog.errors import NotLeader, OncelogError, Reason, UnknownTopicOrPartition
from oncelog.rpc import ChannelFactory
from oncelog.vocabulary import CoordinatorKind, IsolationLevel

__all__ = ["LogClient", "PartitionLeader", "channel"]

T = TypeVar("T")

_lock = threading.Lock()
_channels: dict[tuple[int, str], grpc.Channel] = {}
_factories: dict[int, ChannelFactory] = {}
# (pid, bootstrap, topic) -> leaders of the topic's partitions, by partition index
_leaders: dict[tuple[int, tuple[str, ...], str], dict[int, PartitionLeader]] = {}
# (pid, bootstrap, group id) -> address of the group-offsets process owning the group's shard
_coordinators: dict[tuple[int, tuple[str, ...], str], str] = {}


def channel(target: str) -> grpc.Channel:
    """The channel of this process to ``target`` (host:port), opened on first use and then reused."""
    pid = os.getpid()
    with _lock:
        opened = _channels.get((pid, target))
        if opened is None:
            factory = _factories.get(pid)
            if factory is None:
                factory = _factories[pid] = ChannelFactory.from_env()
            opened = _channels[(pid, target)] = factory.sync(target)
        return opened


@dataclass(frozen=True, slots=True)
class PartitionLeader:
    """Where one partition is served.

    Attributes:
        address: host:port of the leading storage node; empty while no leader is live.
        leader_epoch: sent with Fetch so that a deposed leader refuses to answer.
    """

    address: str
    leader_epoch: int


class LogClient:
    """Blocking metadata, ListOffsets and Fetch calls with retries, for the driver and executors.

    Args:
        bootstrap: cluster addresses; ClusterService calls go to the first that answers.
        request_timeout_s: deadline of one call, and of the retries of one operation.
        retry_backoff_s: first pause between retries; it doubles up to one second.
    """

    def __init__(
        self, bootstrap: Sequence[str], *, request_timeout_s: float = 30.0, retry_backoff_s: float = 0.05
    ) -> None:
        self.bootstrap = tuple(bootstrap)
        self.request_timeout_s = request_timeout_s
        self.retry_backoff_s = retry_backoff_s

    @property
    def _calls(self) -> BlockingClient:
        """The typed blocking calls on this process's channels (built on use: a LogClient pickles addresses only)."""
        return BlockingClient(channel, timeout_s=self.request_timeout_s)

    # ------------------------------------------------------------------------------------------- metadata

    def partitions(self, topic: str, *, refresh: bool = False) -> dict[int, PartitionLeader]:
        """The topic's partitions and their leaders (cached in this process until a leader moves).

        Raises:
            UnknownTopicOrPartition: the topic does not exist.
            OncelogError: no bootstrap address answered within the request timeout.
        """
        key = (os.getpid(), self.bootstrap, topic)
        cached = None if refresh else _leaders.get(key)
        if cached is not None:
            return cached
        described_topics = self._retry(
            lambda: self._cluster_call(lambda address: self._calls.metadata(address, [topic])),
            fatal={Reason.UNKNOWN_TOPIC_OR_PARTITION},
        )
        for described in described_topics:
            if described.name == topic:
                leaders = {p.partition: PartitionLeader(p.leader_address, p.leader_epoch) for p in described.partitions}
                _leaders[key] = leaders
                return leaders
        raise UnknownTopicOrPartition(f"topic {topic!r} is missing from the metadata answer")

    def topic_partitions(self, topics: Iterable[str]) -> list[TopicPartition]:
        """Every partition of ``topics``, sorted, from fresh metadata (new partitions show up).

        Raises:
            UnknownTopicOrPartition: a topic does not exist; the message names it.
        """
        return sorted(
            TopicPartition(topic, index) for topic in topics for index in self.partitions(topic, refresh=True)
        )

    def topic_names(self) -> list[str]:
        """Every topic of the cluster, sorted (a ``Metadata`` call naming none)."""
        described = self._retry(lambda: self._cluster_call(lambda address: self._calls.metadata(address, [])))
        return sorted(t.name for t in described)

    def _leader(self, tp: TopicPartition) -> PartitionLeader:
        leaders = self.partitions(tp.topic)
        if tp.partition not in leaders:
            leaders = self.partitions(tp.topic, refresh=True)
        leader = leaders.get(tp.partition)
        if leader is None:
            err = UnknownTopicOrPartition(f"{tp} does not exist: topic {tp.topic!r} has {len(leaders)} partition(s)")
            err.retriable = False  # fresh metadata says so; a storage node saying it may just be loading
            raise err
        if not leader.address:
            self._forget(tp.topic)
            raise NotLeader(f"{tp} has no live leader right now")
        return leader

    def _forget(self, topic: str) -> None:
        _leaders.pop((os.getpid(), self.bootstrap, topic), None)

    def _cluster_call(self, rpc: Callable[[str], T]) -> T:
        last: OncelogError | None = None
        for address in self.bootstrap:
            try:
                return rpc(address)
            except OncelogError as err:
                if err.reason not in (Reason.NETWORK_EXCEPTION, Reason.REQUEST_TIMED_OUT):
                    raise
                last = err
        assert last is not None
        raise last

    # ------------------------------------------------------------------------------------------- offsets

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int], isolation: IsolationLevel
    ) -> dict[TopicPartition, int | None]:
        """The first offset of each partition whose record's timestamp is at or after the given ms, below the
        last stable offset under read_committed; None where no readable record is that recent.

        Raises:
            UnknownTopicOrPartition: a partition does not exist.
            OncelogError: a partition could not be resolved in time.
        """
        answers = self._list(dict(timestamps.items()), isolation)
        return {tp: None if offset < 0 else offset for tp, offset in answers.items()}

    def list_offsets(
        self, tps: Iterable[TopicPartition], spec: str, isolation: IsolationLevel
    ) -> dict[TopicPartition, int]:
        """Resolve ``spec`` (``"earliest"`` or ``"latest"``) for each partition.

        LATEST is the last stable offset under read_committed and the high watermark otherwise. One call
        goes to each leader; partitions whose leader moved are asked again until the request timeout.

        Raises:
            ValueError: ``spec`` is neither name (a protobuf ``OFFSET_SPEC_*`` number would otherwise be read as
                a timestamp in ms and answer offsets near 0).
            UnknownTopicOrPartition: a partition does not exist.
            OncelogError: a partition could not be resolved in time.
        """
        if spec not in ("earliest", "latest"):
            raise ValueError(f"offset spec {spec!r}: LogClient.list_offsets takes 'earliest' or 'latest'")
        return self._list(dict.fromkeys(tps, spec), isolation)

    def _list(self, specs: Mapping[TopicPartition, str | int], isolation: IsolationLevel) -> dict[TopicPartition, int]:
        pending = sorted(specs)
        resolved: dict[TopicPartition, int] = {}
        queries = {tp: OffsetQuery.of(spec) for tp, spec in specs.items()}

        def attempt() -> None:
            by_leader: dict[str, list[TopicPartition]] = {}
            for tp in pending:
                if tp not in resolved:
                    by_leader.setdefault(self._leader(tp).address, []).append(tp)
            failure: OncelogError | None = None
            for address, group in by_leader.items():
                try:
                    answers = self._calls.list_offsets(address, {tp: queries[tp] for tp in group}, isolation=isolation)
                except OncelogError as err:
                    failure = self._failed(group, err)
                    continue
                for tp in group:
                    answer = answers[tp]
                    if isinstance(answer, OncelogError):
                        failure = self._failed([tp], answer)
                    else:
                        resolved[tp] = answer.offset
            if failure is not None:
                raise failure

        self._retry(attempt)
        return {tp: resolved[tp] for tp in pending}

    # --------------------------------------------------------------------------------------------- fetch

    def fetch(self, tp: TopicPartition, offset: int, *, max_bytes: int, isolation: IsolationLevel) -> FetchedPartition:
        """Fetch whole record batches of ``tp`` from the one holding ``offset``, retrying leader moves.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or beyond the log end.
            OncelogError: any other failure, or a transient one that outlived the request timeout.
        """
        return self.fetch_many({tp: (offset, max_bytes)}, isolation=isolation)[tp]

    def fetch_many(
        self, wanted: Mapping[TopicPartition, tuple[int, int]], *, isolation: IsolationLevel
    ) -> dict[TopicPartition, FetchedPartition]:
        """Fetch several partitions, ``{tp: (offset, max_bytes)}``, with one call per leader.

        Raises:
            As :meth:`fetch`.
        """
        results: dict[TopicPartition, FetchedPartition] = {}

        def attempt() -> None:
            by_leader: dict[str, list[tuple[TopicPartition, PartitionLeader]]] = {}
            for tp in wanted:
                if tp not in results:
                    leader = self._leader(tp)
                    by_leader.setdefault(leader.address, []).append((tp, leader))
            failure: OncelogError | None = None
            for address, group in by_leader.items():
                positions = [
                    FetchPosition(tp, wanted[tp][0], leader.leader_epoch, wanted[tp][1]) for tp, leader in group
                ]
                try:
                    answers = self._calls.fetch(
                        address, positions, isolation=isolation, max_bytes=sum(wanted[tp][1] for tp, _ in group)
                    )
                except OncelogError as err:
                    failure = self._failed([tp for tp, _ in group], err)
                    continue
                for (tp, _), result in zip(group, answers, strict=True):
                    if result.error is not None:
                        failure = self._failed([tp], result.error)
                    else:
                        results[tp] = result
            if failure is not None:
                raise failure

        self._retry(attempt)
        return {tp: results[tp] for tp in wanted}

    # ------------------------------------------------------------------------------------- group offsets

    def committed_offset(self, group_id: str, tp: TopicPartition) -> tuple[int, str]:
        """The offset and metadata committed for ``tp`` in ``group_id``, ``(-1, "")`` when none.

        Asks with ``require_stable``: while a transactional commit of the group is pending (its transaction's
        markers are still on their way) the group answers UNSTABLE_OFFSET_COMMIT and the call is retried, so
        the answer never misses a commit that already happened (KIP-447, design/kafka-semantics.md §6).

        Raises:
            OncelogError: no stable answer within the request timeout.
        """

        def attempt() -> tuple[int, str]:
            address = self._coordinator(group_id)
            try:
                found = self._calls.fetch_offsets(address, group_id, [tp], require_stable=True).get(tp)
            except OncelogError as err:
                if err.reason in (Reason.NOT_COORDINATOR, Reason.NETWORK_EXCEPTION):
                    _coordinators.pop((os.getpid(), self.bootstrap, group_id), None)
                raise
            return (-1, "") if found is None else (found.offset, found.metadata)

        return self._retry(attempt)

    def _coordinator(self, group_id: str) -> str:
        key = (os.getpid(), self.bootstrap, group_id)
        address = _coordinators.get(key)
        if address is None:
            address = _coordinators[key] = self._cluster_call(
                lambda bootstrap: self._calls.find_coordinator(bootstrap, group_id, CoordinatorKind.GROUP)
            )
        return address

    # ------------------------------------------------------------------------------------------- retries

    def _failed(self, tps: Sequence[TopicPartition], err: OncelogError) -> OncelogError:
        if retry_of(err) is not None:  # the leader may have moved: look it up again before the retry
            for topic in {tp.topic for tp in tps}:
                self._forget(topic)
        if err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION and tps:
            err.metadata.setdefault("partition", str(tps[0]))
        return err

    def _retry(self, operation: Callable[[], T], *, fatal: Iterable[Reason] = ()) -> T:
        """Run ``operation`` until it succeeds, fails for good, or the request timeout passes.

        What is retried is the client library's one table (:data:`oncelog.client.services.RETRY_TABLE`), minus
        ``fatal``; the pauses are its one backoff, from ``retry_backoff_s`` doubling up to one second.
        """
        final = set(fatal)
        policy = RetryPolicy(max(int(self.retry_backoff_s * 1000), 1), 1_000)
        return policy.run_sync(
            operation,
            Deadline(self.request_timeout_s),
            retry_if=lambda err: retry_of(err) is not None and err.reason not in final,
        )
