"""In-memory partition-storage, txn-coordinator and group-offsets for unit tests of the sender and the
transaction manager: one object implementing :class:`~oncelog.client.sender.SenderTransport`,
:class:`~oncelog.client.sender.SenderMetadata` and :class:`~oncelog.client.transaction_manager.CoordinatorClient`.

Partitions apply the idempotence rules (one sequence line per producer id and epoch, a window of five
written batches recognised as duplicates); the coordinator hands out producer ids, bumps the epoch on
fencing InitProducerId and on every EndTxn, and records every call. Faults are queued per call name and
raised by the next calls of that name; a produce fault may write the batch and lose the answer.
"""

from __future__ import annotations

import asyncio
import copy
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, PreparedTransaction, TopicPartition
from oncelog.client.sender import PartitionResult, ProduceAnswer, ProduceEntry, ProduceSettings
from oncelog.client.sequences import ProducerIdAndEpoch
from oncelog.client.transaction_manager import CoordinatorKind, EndTxnResult
from oncelog.errors import InvalidProducerEpoch, NetworkException, OncelogError, OutOfOrderSequence
from oncelog.records import decode_records, iter_batches

STORAGE = "storage-0:1"
COORDINATOR = "txn-0:1"
OFFSETS = "offsets-0:1"

LOSE_ANSWER = "lose-answer"
"""A produce fault: the partition writes the batch, then the stream breaks before the answer."""
SILENT = "silent"
"""A produce fault: the partition never answers (the request stays in flight until the client gives up)."""
ANSWER = "answer"
"""No fault: the partition answers (to queue a fault behind some good answers)."""


@dataclass(frozen=True, slots=True)
class Leader:
    leader_address: str
    leader_epoch: int = 0


@dataclass(frozen=True, slots=True)
class Written:
    """One batch a partition received, with what it answered."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    payload: bytes
    result: PartitionResult


@dataclass
class _ProducerLine:
    epoch: int
    last_sequence: int
    recent: deque[tuple[int, int, int]] = field(default_factory=lambda: deque(maxlen=5))  # first, last, offset


class FakePartition:
    """A partition log that accepts each (producer id, epoch, sequence) once, in sequence order."""

    def __init__(self) -> None:
        self.values: list[bytes | None] = []
        self.received: list[Written] = []
        self._producers: dict[int, _ProducerLine] = {}

    def append(self, payload: bytes) -> PartitionResult:
        """Append the batches of one request entry in order, all or none, answering with the first's offset."""
        saved_values, saved_producers = len(self.values), copy.deepcopy(self._producers)
        first: PartitionResult | None = None
        for header, view in iter_batches(payload):
            batch = bytes(view)
            stamp = (header.producer_id, header.producer_epoch, header.base_sequence)
            result = self._append(batch, *stamp)
            self.received.append(Written(*stamp, batch, result))
            if result.error is not None:
                del self.values[saved_values:]
                self._producers = saved_producers
                return result
            first = result if first is None else first
        assert first is not None, "an entry without a batch"
        return first

    def _append(self, payload: bytes, producer_id: int, epoch: int, first: int) -> PartitionResult:
        records = decode_records(payload)
        last = first + len(records) - 1
        line = self._producers.get(producer_id)
        if line is not None and epoch < line.epoch:
            return PartitionResult(-1, error=InvalidProducerEpoch(f"epoch {epoch} is older than {line.epoch}"))
        if line is not None and epoch == line.epoch:
            for cached_first, cached_last, offset in line.recent:
                if (cached_first, cached_last) == (first, last):
                    return PartitionResult(offset, duplicate=True)
            if first != line.last_sequence + 1:
                return PartitionResult(
                    -1, error=OutOfOrderSequence(f"expected sequence {line.last_sequence + 1}, got {first}")
                )
        elif first != 0:
            return PartitionResult(-1, error=OutOfOrderSequence(f"a new epoch starts at sequence 0, got {first}"))
        if line is None or epoch != line.epoch:
            line = self._producers[producer_id] = _ProducerLine(epoch, -1)
        base_offset = len(self.values)
        self.values.extend(record.value for record in records)
        line.last_sequence = last
        line.recent.append((first, last, base_offset))
        return PartitionResult(base_offset)


class FakeStream:
    """A produce stream to :class:`FakeServices`: answers in request order, breaks on a lost answer."""

    def __init__(self, services: FakeServices) -> None:
        self._services = services
        self._answers: asyncio.Queue[ProduceAnswer | OncelogError] = asyncio.Queue()
        self.cancelled = False
        self.batches_per_entry: list[list[int]] = []  # the base sequences of each entry's batches, in order

    async def write(self, correlation_id: int, entries: Sequence[ProduceEntry]) -> None:
        if self.cancelled:
            raise NetworkException("write on a cancelled stream", definite=False)
        results: dict[TopicPartition, PartitionResult] = {}
        lose = False
        for tp, _epoch, payload in entries:
            self.batches_per_entry.append([header.base_sequence for header, _ in iter_batches(payload)])
            for header, view in iter_batches(payload):
                self._services.calls.append(
                    ("Produce", tp, header.producer_id, header.producer_epoch, header.base_sequence, bytes(view))
                )
            fault = self._services.take_fault("produce")
            if fault == SILENT:
                self._services.produce_written.set()
                return
            if fault == LOSE_ANSWER:
                self._services.partitions[tp].append(payload)
                lose = True
            elif isinstance(fault, OncelogError):
                results[tp] = PartitionResult(-1, error=fault)
            else:
                results[tp] = self._services.partitions[tp].append(payload)
        self._services.produce_written.set()
        if lose:
            self._answers.put_nowait(NetworkException("the connection dropped", definite=False))
        else:
            self._answers.put_nowait(ProduceAnswer(correlation_id, results))

    async def read(self) -> ProduceAnswer | None:
        answer = await self._answers.get()
        if isinstance(answer, OncelogError):
            raise answer
        return answer

    def cancel(self) -> None:
        self.cancelled = True


class FakeServices:
    """Storage, coordinators and metadata in one object; see the module docstring."""

    def __init__(self, topics: Mapping[str, int] | None = None) -> None:
        self.partitions: dict[TopicPartition, FakePartition] = {}
        self.leaders: dict[TopicPartition, Leader] = {}
        for topic, count in (topics or {"out": 1}).items():
            for index in range(count):
                tp = TopicPartition(topic, index)
                self.partitions[tp] = FakePartition()
                self.leaders[tp] = Leader(STORAGE)
        self.calls: list[tuple[Any, ...]] = []
        self.faults: dict[str, deque[OncelogError | str]] = defaultdict(deque)
        self.streams: list[FakeStream] = []
        self.metadata_updates: list[str] = []
        self.produce_written = asyncio.Event()  # set by every request written on a produce stream
        self.committed_offsets: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        self.gates: dict[str, tuple[asyncio.Event, asyncio.Event]] = {}  # name -> (entered, released)
        self._next_producer_id = 1000
        self.first_epoch = 0  # the epoch of a newly allocated producer id
        self._identities: dict[str, ProducerIdAndEpoch] = {}
        self.prepared: dict[str, PreparedTransaction] = {}  # the prepared transaction of each transactional id

    # -------------------------------------------------------------------------------- faults

    def fail(self, name: str, *faults: OncelogError | str) -> None:
        """Make the next calls of ``name`` ("produce" or a coordinator call's name) fail, one fault each."""
        self.faults[name].extend(faults)

    def hold(self, name: str) -> tuple[asyncio.Event, asyncio.Event]:
        """Make the next call of ``name`` wait: set on entry, and set it free by setting the second event."""
        gate = self.gates[name] = (asyncio.Event(), asyncio.Event())
        return gate

    async def _pass_gate(self, name: str) -> None:
        gate = self.gates.pop(name, None)
        if gate is not None:
            gate[0].set()
            await gate[1].wait()

    def take_fault(self, name: str) -> OncelogError | str | None:
        queue = self.faults.get(name)
        return queue.popleft() if queue else None

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, *args))
        fault = self.take_fault(name)
        if isinstance(fault, OncelogError):
            raise fault

    def names(self) -> list[str]:
        """The names of the calls made, in order ("Produce" for each batch written on a stream)."""
        return [call[0] for call in self.calls]

    def produced(self, tp: TopicPartition) -> list[tuple[int, int, int, bytes]]:
        """(producer id, epoch, base sequence, bytes) of every batch sent to ``tp``, retries included, in order."""
        return [(c[2], c[3], c[4], c[5]) for c in self.calls if c[0] == "Produce" and c[1] == tp]

    # -------------------------------------------------------------------------------- metadata

    def cached_leader(self, tp: TopicPartition) -> Leader | None:
        return self.leaders.get(tp)

    def needs_update(self, topic: str) -> bool:
        return False

    def request_update(self, topic: str) -> None:
        self.metadata_updates.append(topic)

    def known_topics(self) -> list[str]:
        return sorted({tp.topic for tp in self.leaders})

    async def refresh_stale(self) -> None:
        return None

    # -------------------------------------------------------------------------------- storage

    def open_produce_stream(self, address: str, settings: ProduceSettings) -> FakeStream:
        assert address == STORAGE, address
        stream = FakeStream(self)
        self.streams.append(stream)
        return stream

    # -------------------------------------------------------------------------------- coordinators

    async def txn_coordinator_addresses(self) -> list[str]:
        return [COORDINATOR]

    async def find_coordinator(self, key: str, kind: CoordinatorKind) -> str:
        self._call("FindCoordinator", key, kind)
        return COORDINATOR if kind is CoordinatorKind.TRANSACTION else OFFSETS

    def invalidate_coordinator(self, key: str, kind: CoordinatorKind) -> None:
        self.calls.append(("InvalidateCoordinator", key, kind))

    def identity(self, transactional_id: str) -> ProducerIdAndEpoch:
        """The coordinator's current identity for ``transactional_id``."""
        return self._identities[transactional_id]

    async def init_producer_id(
        self,
        address: str,
        transactional_id: str,
        transaction_timeout_ms: int,
        *,
        expected: ProducerIdAndEpoch | None,
        timeout_s: float,
    ) -> ProducerIdAndEpoch:
        self._call("InitProducerId", transactional_id, expected)
        current = self._identities.get(transactional_id) if transactional_id else None
        if current is None:
            self._next_producer_id += 1
            identity = ProducerIdAndEpoch(self._next_producer_id, self.first_epoch)
        else:
            identity = ProducerIdAndEpoch(current.producer_id, current.epoch + 1)  # fences the older instance
        if transactional_id:
            self._identities[transactional_id] = identity
        return identity

    def _check_identity(self, transactional_id: str, identity: ProducerIdAndEpoch) -> None:
        if self._identities.get(transactional_id) != identity:
            raise AssertionError(f"{transactional_id} called with {identity}, not {self._identities[transactional_id]}")

    async def add_partitions_to_txn(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        partitions: Sequence[TopicPartition],
        *,
        groups: Sequence[str] = (),
        timeout_s: float,
    ) -> None:
        await self._pass_gate("AddPartitionsToTxn")
        if groups:
            self._call("AddPartitionsToTxn", transactional_id, identity, tuple(partitions), tuple(groups))
        else:
            self._call("AddPartitionsToTxn", transactional_id, identity, tuple(partitions))
        self._check_identity(transactional_id, identity)

    async def add_offsets_to_txn(
        self, address: str, transactional_id: str, identity: ProducerIdAndEpoch, group_id: str, *, timeout_s: float
    ) -> str:
        self._call("AddOffsetsToTxn", transactional_id, identity, group_id)
        self._check_identity(transactional_id, identity)
        return OFFSETS

    async def end_txn(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        *,
        commit: bool,
        wait_for_completion: bool,
        timeout_s: float,
    ) -> EndTxnResult:
        self._call("EndTxn", transactional_id, identity, commit)
        self._check_identity(transactional_id, identity)
        bumped = ProducerIdAndEpoch(identity.producer_id, identity.epoch + 1)  # KIP-890: every EndTxn bumps
        self._identities[transactional_id] = bumped
        return EndTxnResult(bumped, completed=True)

    async def init_producer_id_keeping_prepared(
        self, address: str, transactional_id: str, transaction_timeout_ms: int, *, timeout_s: float
    ) -> tuple[ProducerIdAndEpoch, PreparedTransaction | None]:
        identity = await self.init_producer_id(
            address, transactional_id, transaction_timeout_ms, expected=None, timeout_s=timeout_s
        )
        return identity, self.prepared.get(transactional_id)

    async def prepare_transaction(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        *,
        check_back_address: str,
        timeout_s: float,
    ) -> PreparedTransaction:
        self._call("PrepareTransaction", transactional_id, identity, check_back_address)
        self._check_identity(transactional_id, identity)
        token = PreparedTransaction(transactional_id, identity.producer_id, identity.epoch)
        self.prepared[transactional_id] = token
        return token

    async def complete_transaction(
        self,
        address: str,
        identity: ProducerIdAndEpoch,
        token: PreparedTransaction,
        *,
        commit: bool,
        wait_for_completion: bool,
        timeout_s: float,
    ) -> EndTxnResult:
        self._call("CompleteTransaction", token.transactional_id, identity, token, commit)
        self._check_identity(token.transactional_id, identity)
        del self.prepared[token.transactional_id]
        bumped = ProducerIdAndEpoch(identity.producer_id, identity.epoch + 1)
        self._identities[token.transactional_id] = bumped
        return EndTxnResult(bumped, completed=True)

    async def txn_offset_commit(
        self,
        address: str,
        transactional_id: str,
        identity: ProducerIdAndEpoch,
        group: ConsumerGroupMetadata,
        offsets: Mapping[TopicPartition, OffsetAndMetadata],
        *,
        timeout_s: float,
    ) -> None:
        self._call("TxnOffsetCommit", transactional_id, identity, group.group_id)
        self.committed_offsets.setdefault(group.group_id, {}).update(offsets)
