"""Kafka clients of transaction version 1 on oncelog's coordinator, which bumps the epoch on every EndTxn.

librdkafka, kafka-python, aiokafka and Kafka's Java client (unless a broker finalizes ``transaction.version`` 2)
speak KIP-98's protocol: InitProducerId hands a producer (id, epoch) that stays the same for every transaction
until the next InitProducerId, and a partition's sequence numbers go on across transactions. oncelog's
coordinator follows KIP-890 instead (design/architecture.md §5.5): every EndTxn answers with the identity of the
next transaction, one epoch higher, whose sequences start at 0 on every partition; markers and data are fenced
by it.

:class:`TransactionalIdentities` keeps, per transactional id, the identity the client holds and the identity the
coordinator expects now, and translates between them: requests that carry (producer id, epoch) are sent with
the coordinator's identity, and a transactional batch gets the coordinator's producer id and epoch and a sequence
counted from the first batch the partition received in the coordinator's current epoch (then its CRC is
recomputed). A batch whose identity needs no change passes byte for byte, as every idempotent producer's and
every batch of the first transaction after InitProducerId do. A client naming another identity than the one
held (an older instance, a zombie) is passed through unchanged, so the coordinator and the partitions fence it
as they would. The map lives in the gateway process: a gateway restart forgets it, and the client's next
transactional request is fenced (its producer must be created again).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import google_crc32c

from oncelog.records import read_header
from oncelog.vocabulary import ProducerIdAndEpoch, TopicPartition

_IDENTITY = struct.Struct(">qhi")  # producer id, producer epoch, base sequence
_IDENTITY_OFFSET = 43
_CRC = struct.Struct(">I")
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21
_INT32_SPAN = 1 << 31


@dataclass
class _Held:
    client: ProducerIdAndEpoch
    server: ProducerIdAndEpoch
    first_sequences: dict[TopicPartition, int] = field(default_factory=dict)
    """Per partition, the client's sequence of the first batch sent in the server's current epoch."""
    ended_from: ProducerIdAndEpoch | None = None
    """The identity the last EndTxn was sent with, until the next transaction begins (a retried EndTxn)."""


class TransactionalIdentities:
    """Client identity <-> coordinator identity, per transactional id (module docstring)."""

    def __init__(self) -> None:
        self._held: dict[str, _Held] = {}

    def __len__(self) -> int:
        """How many transactional ids are held."""
        return len(self._held)

    def initialized(self, transactional_id: str, identity: ProducerIdAndEpoch) -> None:
        """InitProducerId answered ``identity``: the client and the coordinator hold the same one now."""
        self._held[transactional_id] = _Held(client=identity, server=identity)

    def to_server(self, transactional_id: str, client: ProducerIdAndEpoch) -> ProducerIdAndEpoch:
        """The identity to send for a request in which the client names ``client``."""
        held = self._held.get(transactional_id)
        return held.server if held is not None and held.client == client else client

    def began(self, transactional_id: str, client: ProducerIdAndEpoch) -> None:
        """A partition or group joined the client's transaction: an EndTxn from now on ends this one."""
        held = self._held.get(transactional_id)
        if held is not None and held.client == client:
            held.ended_from = None

    def end_identity(self, transactional_id: str, client: ProducerIdAndEpoch) -> ProducerIdAndEpoch:
        """The identity to send an EndTxn with: the previous one's when nothing began since (a retry, which the
        coordinator answers as it answered the first), else the current one."""
        held = self._held.get(transactional_id)
        if held is not None and held.client == client and held.ended_from is not None:
            return held.ended_from
        return self.to_server(transactional_id, client)

    def ended(
        self,
        transactional_id: str,
        client: ProducerIdAndEpoch,
        sent: ProducerIdAndEpoch,
        next_server: ProducerIdAndEpoch,
    ) -> None:
        """EndTxn sent with ``sent`` succeeded: the coordinator expects ``next_server`` from the next transaction."""
        held = self._held.get(transactional_id)
        if held is not None and held.client == client:
            if held.server != next_server:
                held.first_sequences.clear()
            held.server = next_server
            held.ended_from = sent

    def forget(self, transactional_id: str) -> None:
        """Drop what is held for the id (it was fenced)."""
        self._held.pop(transactional_id, None)

    def rewrite_batch(self, transactional_id: str, tp: TopicPartition, batch: bytes) -> bytes:
        """``batch`` as the coordinator's identity writes it (the same object when nothing changes).

        Raises:
            CorruptMessage: ``batch`` does not start with a RecordBatch v2 header.
        """
        header = read_header(batch)
        held = self._held.get(transactional_id)
        if held is None or held.client != ProducerIdAndEpoch(header.producer_id, header.producer_epoch):
            return batch
        first = held.first_sequences.setdefault(tp, header.base_sequence)
        sequence = (header.base_sequence - first) % _INT32_SPAN
        if held.server == held.client and sequence == header.base_sequence:
            return batch
        out = bytearray(batch)
        _IDENTITY.pack_into(out, _IDENTITY_OFFSET, held.server.producer_id, held.server.epoch, sequence)
        _CRC.pack_into(out, _CRC_OFFSET, google_crc32c.value(bytes(out[_ATTRIBUTES_OFFSET:])))
        return bytes(out)
