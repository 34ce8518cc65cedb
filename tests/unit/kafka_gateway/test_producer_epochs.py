"""TransactionalIdentities: transaction-version-1 clients over the coordinator's per-transaction epochs."""

from __future__ import annotations

from oncelog.kafka_gateway.producer_epochs import TransactionalIdentities
from oncelog.records import Record, build_batch, validate_batch
from oncelog.vocabulary import ProducerIdAndEpoch, TopicPartition

TP = TopicPartition("t", 0)
CLIENT = ProducerIdAndEpoch(7, 3)


def _batch(identity: ProducerIdAndEpoch, sequence: int, count: int = 2) -> bytes:
    records = [Record(b"k", f"v{i}".encode(), timestamp=1_000 + i) for i in range(count)]
    return build_batch(
        records, producer_id=identity.producer_id, producer_epoch=identity.epoch, base_sequence=sequence,
        transactional=True,
    )  # fmt: skip


def test_the_first_transaction_after_init_passes_its_batches_byte_for_byte() -> None:
    ids = TransactionalIdentities()
    ids.initialized("tx", CLIENT)
    batch = _batch(CLIENT, 0)
    assert ids.rewrite_batch("tx", TP, batch) is batch
    assert ids.to_server("tx", CLIENT) == CLIENT


def test_after_an_end_txn_batches_carry_the_coordinators_epoch_and_sequences_from_zero_with_a_valid_crc() -> None:
    ids = TransactionalIdentities()
    ids.initialized("tx", CLIENT)
    ids.rewrite_batch("tx", TP, _batch(CLIENT, 0))
    ids.ended("tx", CLIENT, CLIENT, ProducerIdAndEpoch(7, 4))
    assert ids.to_server("tx", CLIENT) == ProducerIdAndEpoch(7, 4)
    first = validate_batch(ids.rewrite_batch("tx", TP, _batch(CLIENT, 2)))
    second = validate_batch(ids.rewrite_batch("tx", TP, _batch(CLIENT, 4)))
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (7, 4, 0)
    assert (second.producer_epoch, second.base_sequence) == (4, 2)
    other = validate_batch(ids.rewrite_batch("tx", TopicPartition("t", 1), _batch(CLIENT, 0)))
    assert (other.producer_epoch, other.base_sequence) == (4, 0)


def test_a_retried_batch_gets_the_same_sequence_as_its_first_send() -> None:
    ids = TransactionalIdentities()
    ids.initialized("tx", CLIENT)
    ids.ended("tx", CLIENT, CLIENT, ProducerIdAndEpoch(7, 4))
    batch = _batch(CLIENT, 6)
    assert ids.rewrite_batch("tx", TP, batch) == ids.rewrite_batch("tx", TP, batch)


def test_an_older_instance_is_passed_through_so_the_services_fence_it() -> None:
    ids = TransactionalIdentities()
    ids.initialized("tx", CLIENT)
    ids.ended("tx", CLIENT, CLIENT, ProducerIdAndEpoch(7, 4))
    ids.initialized("tx", ProducerIdAndEpoch(7, 5))  # a new instance called InitProducerId
    zombie_batch = _batch(CLIENT, 2)
    assert ids.rewrite_batch("tx", TP, zombie_batch) is zombie_batch
    assert ids.to_server("tx", CLIENT) == CLIENT


def test_a_retried_end_txn_is_sent_with_the_identity_of_its_first_send_until_a_transaction_begins() -> None:
    ids = TransactionalIdentities()
    ids.initialized("tx", CLIENT)
    ids.ended("tx", CLIENT, CLIENT, ProducerIdAndEpoch(7, 4))
    assert ids.end_identity("tx", CLIENT) == CLIENT
    ids.began("tx", CLIENT)
    assert ids.end_identity("tx", CLIENT) == ProducerIdAndEpoch(7, 4)


def test_a_fenced_id_is_forgotten() -> None:
    ids = TransactionalIdentities()
    ids.initialized("tx", CLIENT)
    ids.forget("tx")
    assert len(ids) == 0
