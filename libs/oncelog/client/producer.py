"""The producer: idempotent by default, transactional with a ``transactional_id`` (Kafka's ``KafkaProducer``).

:class:`Producer` is the public API. ``send()`` picks the partition and appends the record to its open batch in
the :class:`~oncelog.client.accumulator.RecordAccumulator`; the :class:`~oncelog.client.sender.Sender` sends the
batches on the producer's I/O thread; the :class:`~oncelog.client.transaction_manager.TransactionManager` runs
the transactional state machine and the coordinator calls; :mod:`oncelog.client.producer_rpc` carries both over
gRPC. Errors are those of :mod:`oncelog.client.errors`: a fatal error ends the producer, an ``AbortableError``
the transaction. Delivery callbacks run on the I/O thread: keep them short and call no blocking method there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

import grpc

from oncelog.client.accumulator import DEFAULT_BUFFER_MEMORY, DEFAULT_MAX_REQUEST_SIZE, RecordAccumulator
from oncelog.client.bulk_records import BulkRecords, ColumnRecords, RowRecords, Serializer
from oncelog.client.errors import IllegalStateError
from oncelog.client.futures import RecordFuture, gather_runs
from oncelog.client.metadata import ClusterMetadata, TopicInfo
from oncelog.client.partitioner import DefaultPartitioner
from oncelog.client.producer_config import ProducerConfig, check_options
from oncelog.client.producer_rpc import GrpcProducerTransport
from oncelog.client.records import ConsumerGroupMetadata, OffsetAndMetadata, RecordMetadata, TopicPartition
from oncelog.client.sender import ProduceSettings, Sender, SenderConfig
from oncelog.client.sequences import ProducerSequences
from oncelog.client.transaction_manager import TransactionManager, TransactionState
from oncelog.client.transport import Backoff, Channels, Deadline, IoThread, resolve_bootstrap
from oncelog.client.two_phase import TwoPhaseCommit, TwoPhaseTransactionManager
from oncelog.errors import OncelogError, Reason, UnknownTopicOrPartition
from oncelog.vocabulary import ProducerIdAndEpoch

__all__ = ["Producer", "TransactionState"]

log = logging.getLogger("oncelog.client.producer")

T = TypeVar("T")


class Producer(TwoPhaseCommit):
    """Send records to oncelog topics; idempotent by default, transactional with ``transactional_id``.

    Example:
        >>> from oncelog.client import Producer
        >>> with Producer() as producer:                      # bootstrap from .oncelog/cluster.json
        ...     producer.send("orders", b"hello", key=b"customer-7").result().offset
        0

    Transactions (design/kafka-semantics.md §1.1)::

        producer = Producer(transactional_id="copier-0")
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("out", b"x")
        producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(42)},
                                             consumer.group_metadata())
        producer.commit_transaction()

    Args:
        bootstrap: any cluster address(es), ``"host:port[,host:port]"``; None reads ``.oncelog/cluster.json``.
        transactional_id: stable identity across restarts; enables the transactional API and fences
            older instances that used the same id.
        enable_idempotence: stamp batches with producer id, epoch and sequence so retries never
            duplicate (requires ``acks="all"``); required for transactions.
        acks: ``"all"`` (every in-sync replica has the batch durably) or ``1`` (the leader appended it).
        linger_ms: how long a batch that is not full waits for more records.
        batch_size: bytes that fill a batch.
        max_in_flight: unacknowledged batches per partition, 1 to 5. An idempotent producer with a backlog
            sends up to half of them (rounded up) in one request, so that two requests stay on the wire.
        delivery_timeout_ms: upper bound on the time from ``send()`` to the acknowledgement, retries
            included; a record still unacknowledged then fails.
        transaction_timeout_ms: the coordinator aborts a transaction open longer than this.
        commit_wait_for_completion: the default of ``commit_transaction(wait_for_completion=...)``: False
            returns once the commit is durable (Kafka's contract), True once every marker is written too, so a
            read_committed read started afterwards sees the whole transaction (docs/design/read-after-commit.md).
        compression: None, ``"gzip"``, ``"lz4"`` or ``"zstd"`` (snappy is not supported: refused here).
        buffer_memory: bytes of records waiting to be sent before ``send()`` blocks.
        max_request_size: largest batch sent; larger records are refused at ``send()``.
        max_block_ms: how long ``send()`` (metadata, memory) and the blocking calls (``init_transactions``,
            ``commit_transaction``, ...) may block.
        request_timeout_ms: deadline of one request.
        retry_backoff_ms: first pause before a retry.
        retry_backoff_max_ms: the pause doubles up to this.
        metadata_max_age_ms: topic metadata older than this is refreshed, so partitions added to a topic are
            used by keyed and unkeyed records (Kafka's ``metadata.max.age.ms``); a record sent to a partition
            the cached metadata does not list refreshes it at once.
        key_serializer: turns a key into bytes (default: keys must be bytes or None).
        value_serializer: turns a value into bytes (default: values must be bytes or None).
        client_id: a name for logs and thread names.
        credentials: TLS channel credentials; None for plaintext.

    Raises:
        ValueError: an inconsistent configuration (every problem is listed).
        BootstrapError: ``bootstrap`` is None and ``.oncelog/cluster.json`` does not exist, or an address
            is malformed.
    """

    def __init__(
        self,
        bootstrap: str | Sequence[str] | None = None,
        *,
        transactional_id: str | None = None,
        enable_idempotence: bool = True,
        acks: str | int = "all",
        linger_ms: int = 5,
        batch_size: int = 16384,
        max_in_flight: int = 5,
        delivery_timeout_ms: int = 120_000,
        transaction_timeout_ms: int = 60_000,
        commit_wait_for_completion: bool = False,
        compression: str | None = None,
        buffer_memory: int = DEFAULT_BUFFER_MEMORY,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        max_block_ms: int = 60_000,
        request_timeout_ms: int = 30_000,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1_000,
        metadata_max_age_ms: int = 300_000,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        client_id: str | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        acks_all, codec = check_options(
            acks=acks,
            transactional_id=transactional_id,
            enable_idempotence=enable_idempotence,
            max_in_flight=max_in_flight,
            compression=compression,
            transaction_timeout_ms=transaction_timeout_ms,
            request_timeout_ms=request_timeout_ms,
            max_block_ms=max_block_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        self._config = ProducerConfig(
            client_id=client_id or f"producer-{uuid.uuid4().hex[:8]}",
            transactional_id=transactional_id,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            max_block_ms=max_block_ms,
            commit_wait_for_completion=commit_wait_for_completion,
        )
        sender_config = SenderConfig(
            produce=ProduceSettings(transactional_id or "", acks_all, request_timeout_ms),
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            max_request_size=max_request_size,
            max_in_flight=max_in_flight,
            transaction_timeout_ms=transaction_timeout_ms,
        )
        bootstrap_addresses = resolve_bootstrap(bootstrap)
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._sequences = (
            ProducerSequences(transactional=transactional_id is not None, max_in_flight=max_in_flight)
            if enable_idempotence
            else None
        )
        self._accumulator = RecordAccumulator(
            batch_size=batch_size,
            linger_ms=linger_ms,
            buffer_memory=buffer_memory,
            max_request_size=max_request_size,
            compression=codec,
            retry_backoff_ms=retry_backoff_ms,
            delivery_timeout_ms=delivery_timeout_ms,
            sequences=self._sequences,
        )
        self._partitioner = DefaultPartitioner(sticky_batch_size=batch_size)
        self._metrics: Counter[str] = Counter()
        self._closed = False
        self._close_lock = threading.Lock()
        self._fatal: OncelogError | None = None
        self._wake_pending = False
        self._io = IoThread(f"oncelog-{self._config.client_id}")
        self._channels = Channels(credentials=credentials)
        self._metadata = ClusterMetadata(
            self._channels,
            bootstrap_addresses,
            request_timeout_s=request_timeout_ms / 1000,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            metadata_max_age_ms=metadata_max_age_ms,
        )
        transport = GrpcProducerTransport(self._channels, self._metadata)
        self._txn: TransactionManager | None = None
        if transactional_id is not None:
            assert self._sequences is not None
            self._txn = TwoPhaseTransactionManager(
                transactional_id=transactional_id,
                sequences=self._sequences,
                accumulator=self._accumulator,
                client=transport,
                wake=self._wake_on_loop,
                enter_fatal=self._enter_fatal,
                transaction_timeout_ms=transaction_timeout_ms,
                request_timeout_ms=request_timeout_ms,
                retry_backoff_ms=retry_backoff_ms,
                retry_backoff_max_ms=retry_backoff_max_ms,
            )
        self._sender = self._io.run(self._create_sender(sender_config, transport))
        self._sender_task = self._io.submit(self._sender.run())

    async def _create_sender(self, config: SenderConfig, transport: GrpcProducerTransport) -> Sender:
        # created on the loop so its asyncio primitives belong to it
        return Sender(
            config=config,
            accumulator=self._accumulator,
            sequences=self._sequences,
            metadata=self._metadata,
            transport=transport,
            transactions=self._txn,
            enter_fatal=self._enter_fatal,
            metrics=self._metrics,
        )

    # -------------------------------------------------------------------------------- helpers

    def _wake_on_loop(self) -> None:
        self._wake_pending = False
        self._sender.wakeup()

    def _wake(self) -> None:
        # A cross-thread wakeup is a syscall on the loop's self-pipe: coalesce them, so a burst of send()
        # calls costs one until the sender has run (a lost race only costs one extra wakeup).
        if not self._wake_pending:
            self._wake_pending = True
            self._io.call_soon(self._wake_on_loop)

    def _enter_fatal(self, error: OncelogError) -> None:
        """Runs on the loop: fail everything pending, refuse everything later."""
        if self._fatal is not None:
            return
        log.error("producer %s hit a fatal error: %s", self._config.client_id, error)
        self._fatal = error
        self._sender.fatal = error
        if self._txn is not None:
            self._txn.set_fatal(error)
        self._accumulator.abort_all(error)
        self._sender.stop()  # nothing may be written any more: drop the streams now, close() does the rest

    def _ensure_usable(self) -> None:
        if self._closed:
            raise IllegalStateError("the producer is closed; create a new Producer")
        if self._fatal is not None:
            raise self._fatal

    def _require_transactional(self, what: str) -> TransactionManager:
        self._ensure_usable()
        if self._txn is None:
            raise IllegalStateError(f"{what} needs a transactional producer: pass transactional_id=... to Producer()")
        return self._txn

    def _deadline(self, timeout: float | None) -> Deadline:
        return Deadline(self._config.max_block_ms / 1000 if timeout is None else timeout)

    def _run(self, coro: Awaitable[T]) -> T:
        return self._io.run(coro)  # type: ignore[arg-type]

    async def _topic(self, topic: str, deadline: Deadline, *, refresh: bool = False) -> TopicInfo:
        backoff = Backoff(self._config.retry_backoff_ms, self._config.retry_backoff_max_ms)
        while True:
            try:
                return await self._metadata.topic(topic, refresh=refresh)
            except OncelogError as err:
                if err.reason is Reason.UNKNOWN_TOPIC_OR_PARTITION or not err.retriable or deadline.expired:
                    raise
                await asyncio.sleep(deadline.cap(backoff.next_s()))

    def _topic_for_send(self, topic: str, partition: int | None) -> TopicInfo:
        """The cached metadata of ``topic`` (fetched when missing, refreshed when it lacks ``partition``).

        Raises:
            UnknownTopicOrPartition: the topic, or ``partition`` of it, does not exist.
        """
        info = self._metadata.cached_topic(topic)
        if info is None:
            info = self._run(self._topic(topic, self._deadline(None)))
        elif self._metadata.needs_update(topic):
            self._wake()  # the sender refreshes stale metadata in the background
        if partition is not None and partition >= len(info.partitions):  # the topic may have grown since
            info = self._run(self._topic(topic, self._deadline(None), refresh=True))
        if partition is not None and not 0 <= partition < len(info.partitions):
            raise UnknownTopicOrPartition(
                f"partition {partition} of topic {topic!r} does not exist (the topic has {len(info.partitions)} "
                "partition(s))"
            )
        return info

    # -------------------------------------------------------------------------------- public API

    @property
    def transactional_id(self) -> str | None:
        """The transactional id, or None for an idempotent or plain producer."""
        return self._config.transactional_id

    @property
    def transaction_state(self) -> TransactionState | None:
        """The transactional state (None for a non-transactional producer)."""
        return None if self._txn is None else self._txn.state

    @property
    def producer_id_and_epoch(self) -> ProducerIdAndEpoch | None:
        """The identity stamped on the next batch, or None for a producer that is not idempotent."""
        return None if self._sequences is None else self._sequences.identity

    def metrics(self) -> dict[str, int]:
        """Counters since creation: ``batches_sent``, ``produce_requests`` (an idempotent producer that outruns
        the network sends several batches of a partition per request), ``batch_retries``, ``duplicate_batches``
        (retries the partition recognised as already written), ``epoch_bumps``, ``stream_breaks``."""
        values = dict(self._metrics)
        values["stream_breaks"] = self._sender.stream_breaks()
        for key in ("batches_sent", "produce_requests", "batch_retries", "duplicate_batches", "epoch_bumps"):
            values.setdefault(key, 0)
        return values

    def partitions_for(self, topic: str) -> list[int]:
        """The partition indexes of ``topic``.

        Raises:
            UnknownTopicOrPartition: the topic does not exist.
        """
        self._ensure_usable()
        info = self._run(self._topic(topic, self._deadline(None)))
        return [p.partition for p in info.partitions]

    def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue a record and return a future for its :class:`RecordMetadata` (topic, partition, offset).

        The record goes to ``partition`` if given, else to murmur2(key) mod partitions (Kafka's default
        partitioner), else to a sticky round-robin partition. In a transaction, the first record for a
        partition makes the producer add the partition to the transaction before the batch is sent.

        Args:
            topic: an existing topic.
            value: the value (bytes or None, or anything ``value_serializer`` accepts).
            key: the key (bytes or None, or anything ``key_serializer`` accepts).
            headers: ``(name, bytes)`` pairs or a mapping.
            partition: an explicit partition.
            timestamp_ms: the record's CreateTime; default now.

        Raises:
            UnknownTopicOrPartition: the topic or partition does not exist.
            MessageTooLarge: the record alone exceeds ``max_request_size``.
            BufferExhaustedError: ``buffer_memory`` stayed full for ``max_block_ms``.
            IllegalStateError: the producer is closed, or (transactional) no transaction is open.
            AbortableError: the open transaction already failed; abort it.
            ProducerFencedError: a newer instance with the same transactional id exists.
            TypeError: key or value is not bytes and no serializer was given.
        """
        return self._send(topic, value, key, headers, partition, timestamp_ms, max_block_s=self._max_block_s())

    def _send(
        self,
        topic: str,
        value: Any,
        key: Any,
        headers: Iterable[tuple[str, bytes | None]] | Mapping[str, bytes | None] | None,
        partition: int | None,
        timestamp_ms: int | None,
        *,
        max_block_s: float,
    ) -> RecordFuture:
        """:meth:`send` without the wait for memory beyond ``max_block_s`` (the asyncio producer passes 0)."""
        self._ensure_usable()
        if self._txn is not None:
            self._txn.check_send()
        key_bytes = self._key_serializer(key) if self._key_serializer is not None and key is not None else key
        value_bytes = (
            self._value_serializer(value) if self._value_serializer is not None and value is not None else value
        )
        info = self._topic_for_send(topic, partition)
        if partition is not None:
            chosen = partition
        else:
            chosen = self._partitioner.partition(topic, key_bytes, len(info.partitions), info.available_partitions())
        tp = TopicPartition(topic, chosen)
        if self._txn is not None:
            self._txn.maybe_add_partition(tp)
        result = self._accumulator.append(
            tp, key_bytes, value_bytes, headers or (), timestamp_ms, max_block_s=max_block_s
        )
        if partition is None and key_bytes is None:
            self._partitioner.on_append(topic, chosen, result.appended_bytes, enable_switch=result.open_batch_is_full)
        # the sender needs to hear of a batch only when it starts (linger clock) or fills up
        if result.new_batch_created or result.open_batch_is_full:
            self._wake()
        return result.future

    def send_batch(
        self,
        topic: str,
        values: Sequence[Any],
        keys: Sequence[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Future[Sequence[RecordMetadata]]:
        """Queue many records at once and return one future for all their :class:`RecordMetadata`, in order.

        The bulk form of :meth:`send` for high throughput: the records are checked, partitioned and appended
        under one lock, and the returned future settles once per underlying batch instead of once per
        record. Records keep their order within each partition, exactly as the same ``send()`` calls would;
        records without keys and without ``partition`` all go to the current sticky partition.

        Args:
            topic: an existing topic.
            values: the values (bytes or None, or what ``value_serializer`` accepts).
            keys: one key per value, or None for keyless records.
            partition: an explicit partition for every record.
            timestamp_ms: the CreateTime of every record; default now.

        Returns:
            A future resolving to a sequence of one :class:`RecordMetadata` per value (built when first
            read), or raising the first error of the batches that hold the records.

        Raises:
            ValueError: ``keys`` and ``values`` differ in length.
            The exceptions of :meth:`send`; a record that is refused (too large, wrong type) refuses all.
        """
        return self._send_bulk(topic, self._rows(values, keys), partition, timestamp_ms, self._max_block_s())

    def send_arrow(
        self,
        topic: str,
        values: object,
        keys: object | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> Future[Sequence[RecordMetadata]]:
        """Queue Arrow columns of records: :meth:`send_batch` with no Python per record.

        ``values`` (and ``keys``) are ``pyarrow`` arrays or chunked arrays of ``binary``, ``large_binary``,
        ``string`` or ``large_string`` (a string is written as its UTF-8 bytes); a null is a null value (a
        tombstone) or a null key. Arrow and numpy kernels encode them into each partition's batches
        (:mod:`oncelog.records.columnar`), byte for byte what :meth:`send_batch` writes; their fixed cost per call
        is repaid from a few thousand rows a call. The columns are the records' bytes: the serializers do not
        apply. Keys are hashed per record, as :meth:`send` does. Needs ``pip install 'oncelog[arrow]'``.

        Returns and raises as :meth:`send_batch`, and ``TypeError`` for a column that is not binary or string.
        """
        columns = partial(ColumnRecords.from_arrow, values, keys)
        return self._send_bulk(topic, columns, partition, timestamp_ms, self._max_block_s())

    def _max_block_s(self) -> float:
        # waiting for memory on the I/O thread (a send() from a callback) would wait for ourselves
        return 0.0 if self._io.on_loop_thread else self._config.max_block_ms / 1000

    def _rows(self, values: Sequence[Any], keys: Sequence[Any] | None) -> Callable[[], BulkRecords]:
        return partial(RowRecords.serialized, values, keys, self._key_serializer, self._value_serializer)

    def _send_bulk(
        self,
        topic: str,
        make_records: Callable[[], BulkRecords],
        partition: int | None,
        timestamp_ms: int | None,
        max_block_s: float,
    ) -> Future[Sequence[RecordMetadata]]:
        """:meth:`send_batch` and :meth:`send_arrow` once the caller's wait for memory is known (the asyncio
        producer passes 0): the records made, grouped by partition and appended all or nothing."""
        self._ensure_usable()
        if self._txn is not None:
            self._txn.check_send()
        records = make_records()
        groups = records.by_partition(self._partitioner, topic, self._topic_for_send(topic, partition), partition)
        if self._txn is not None:
            for target in groups:
                self._txn.maybe_add_partition(TopicPartition(topic, target))
        # one all-or-nothing append across partitions: a refused record (or a full buffer) adds none anywhere
        runs_per_group, wake = self._accumulator.append_groups(
            [(TopicPartition(topic, target), group) for target, (_, group) in groups.items()],
            timestamp_ms,
            max_block_s=max_block_s,
        )
        placements = [(positions, runs) for (positions, _), runs in zip(groups.values(), runs_per_group, strict=True)]
        if partition is None and records.keyless:
            for target, (_, group) in groups.items():
                self._partitioner.on_append(topic, target, group.payload_bytes(), enable_switch=True)
        if wake:
            self._wake()
        return gather_runs(placements, len(records))

    def flush(self, timeout: float | None = None) -> None:
        """Send every queued record now and wait until each is acknowledged or failed.

        Failures are reported through each record's future, not raised here.

        Raises:
            RetriableError: ``timeout`` seconds passed first.
        """
        if self._closed:
            return
        self._io.run(self._flush(Deadline(timeout)))

    def _flush(self, deadline: Deadline) -> Coroutine[Any, Any, None]:
        return self._sender.flush(deadline)

    def begin_transaction(self) -> None:
        """Start a transaction; every record sent until commit or abort belongs to it.

        Raises:
            IllegalStateError: ``init_transactions()`` was not called, or a transaction is open.
            AbortableError: the previous transaction failed and was not aborted.
        """
        self._require_transactional("begin_transaction()").begin_transaction()

    def send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None = None,
    ) -> None:
        """Commit consumer offsets as part of the transaction (consume-transform-produce).

        The offsets become visible to the group exactly when the transaction commits, and vanish with
        it on abort (design/architecture.md §1.2). Pass the consumer's positions (the next offset to read) and
        ``consumer.group_metadata()``.

        Raises:
            ProducerFencedError: a newer instance took over.
            AbortableError: the group rejected the commit (stale generation or member); abort.
            RetriableError: no answer within ``timeout`` (default ``max_block_ms``). The offsets stay part of
                the transaction: call again, or go on to ``commit_transaction()``, which commits them before
                the transaction (and does not commit the transaction without them).
            IllegalStateError: no open transaction.
        """
        self._run(self._send_offsets_to_transaction(offsets, group_metadata, timeout))

    def _send_offsets_to_transaction(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
        group_metadata: ConsumerGroupMetadata | str,
        timeout: float | None,
    ) -> Coroutine[Any, Any, None]:
        txn = self._require_transactional("send_offsets_to_transaction()")
        group = ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        if not group.group_id:
            raise ValueError("group_metadata names no group; use consumer.group_metadata() of a consumer with group_id")
        normalized = {
            TopicPartition(*tp): om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            for tp, om in offsets.items()
        }
        return txn.send_offsets(normalized, group, self._deadline(timeout))

    def add_offsets_to_transaction(
        self, group_metadata: ConsumerGroupMetadata | str, timeout: float | None = None
    ) -> None:
        """Make the group's offsets part of the open transaction now, before they are known.

        :meth:`send_offsets_to_transaction` does two round trips: it adds the group to the transaction
        (AddOffsetsToTxn, to the transaction coordinator), then commits the offsets (TxnOffsetCommit, to the
        group's owner). A caller that knows the group early — at the start of the transaction — but its
        offsets only at the end can take the first round trip here, while it is still producing; the later
        ``send_offsets_to_transaction`` for the group then only commits the offsets. Calling it again for
        the same group in the same transaction does nothing.

        Raises:
            The exceptions of :meth:`send_offsets_to_transaction`.
        """
        self._run(self._add_offsets_to_transaction(group_metadata, timeout))

    def _add_offsets_to_transaction(
        self, group_metadata: ConsumerGroupMetadata | str, timeout: float | None
    ) -> Coroutine[Any, Any, str]:
        txn = self._require_transactional("add_offsets_to_transaction()")
        group = ConsumerGroupMetadata(group_metadata) if isinstance(group_metadata, str) else group_metadata
        if not group.group_id:
            raise ValueError("group_metadata names no group; use consumer.group_metadata() of a consumer with group_id")
        return txn.add_offsets(group.group_id, self._deadline(timeout))

    def commit_transaction(self, timeout: float | None = None, *, wait_for_completion: bool | None = None) -> None:
        """Flush the transaction's records, then commit it; returns once the commit is durable.

        Offsets of a ``send_offsets_to_transaction()`` call that failed with a retriable error are committed
        first: the transaction commits with every offset it was given, or not at all.

        Durable means decided: nothing can undo the commit, but, as in Kafka, the markers that make the records
        visible reach the partitions shortly after, so a read_committed read started right away may not see them
        yet. With ``wait_for_completion`` (default: the ``commit_wait_for_completion`` setting) it returns only
        once every marker is written, so any read_committed read started afterwards sees every record and
        offset of the transaction (docs/design/read-after-commit.md).

        Args:
            timeout: seconds to block; default ``max_block_ms``.
            wait_for_completion: also wait for the markers (see above).

        Raises:
            AbortableError: a record or offset commit of the transaction failed; call
                ``abort_transaction()`` and run the transaction again.
            ProducerFencedError: a newer instance took over; close this producer. It does not prove that
                nothing committed: if an earlier attempt of this commit reached the coordinator, the
                transaction may have committed (the new instance's ``init_transactions()`` completes it).
            RetriableError: no answer within ``timeout`` (default ``max_block_ms``). ``definite`` is False
                when any attempt may have reached the coordinator (the commit may have happened or may
                still happen): call ``commit_transaction()`` again — never ``abort_transaction()``. Also
                when the commit is decided but its markers were not all written in time
                (``wait_for_completion``); calling it again waits again.
            IllegalStateError: no open transaction.
        """
        self._run(self._commit_transaction(timeout, wait_for_completion))

    def _commit_transaction(
        self, timeout: float | None, wait_for_completion: bool | None = None
    ) -> Coroutine[Any, Any, None]:
        txn = self._require_transactional("commit_transaction()")
        wait = self._config.commit_wait_for_completion if wait_for_completion is None else wait_for_completion
        return txn.commit_transaction(self._flush, self._deadline(timeout), wait)

    def abort_transaction(self, timeout: float | None = None) -> None:
        """Abort the transaction: unsent records are dropped, sent ones and its offsets never become visible.

        Raises:
            ProducerFencedError: a newer instance took over (its InitProducerId already aborted this
                transaction).
            RetriableError: no answer within ``timeout`` (default ``max_block_ms``); call again.
            IllegalStateError: no open transaction, or a commit with unknown outcome is pending.
        """
        self._run(self._abort_transaction(timeout))

    def _abort_transaction(self, timeout: float | None) -> Coroutine[Any, Any, None]:
        txn = self._require_transactional("abort_transaction()")
        return txn.abort_transaction(self._flush, self._deadline(timeout))

    def close(self, timeout: float | None = None) -> None:
        """Send what is queued and release the connections. Idempotent.

        An open transaction is aborted (as Kafka's producer does on close), unless a commit is pending.
        Records still unsent after ``timeout`` seconds (default: wait for all) fail with
        :class:`IllegalStateError`.

        ``timeout=0`` is Kafka's forced close (``close(Duration.ZERO)``): nothing is flushed and no EndTxn is
        sent, so an open transaction stays open on the coordinator until its ``transaction_timeout_ms``
        aborts it (or a new producer with the same transactional id fences it); records not yet sent fail.
        """
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self._io.on_loop_thread:
            raise IllegalStateError("close() was called from a send() callback; call it from another thread")
        deadline = Deadline(timeout)
        self._accumulator.close()
        try:
            txn = self._txn
            # a forced close (timeout=0) sends nothing more: the transaction is left to the coordinator's timeout
            graceful = timeout != 0 and self._fatal is None
            if (
                graceful
                and txn is not None
                and txn.state in (TransactionState.IN_TRANSACTION, TransactionState.ABORTABLE_ERROR)
            ):
                log.info("aborting the open transaction of %r on close", self._config.transactional_id)
                self._io.run(txn.abort_transaction(self._flush, deadline))
            elif graceful:
                self._io.run(self._flush(deadline))
        except OncelogError as err:
            log.warning("producer %s closed with records unsettled: %s", self._config.client_id, err)
        finally:
            self._io.call_soon(self._sender.stop)
            try:
                self._sender_task.result(timeout=10)
            except (concurrent.futures.TimeoutError, concurrent.futures.CancelledError, Exception):
                pass
            self._accumulator.abort_all(IllegalStateError("the producer was closed before this record was sent"))
            try:
                self._io.submit(self._channels.close()).result(timeout=5)
            except Exception:
                pass
            self._io.close(release=self._channels.close)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        kind = "idempotent" if self._sequences else "non-idempotent"
        if self._txn is not None:
            kind = f"transactional_id={self._config.transactional_id!r}"
        return f"Producer({self._config.client_id}, {kind})"
