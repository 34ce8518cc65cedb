"""GrpcMarkerTransport through the typed service clients: a destination that does not answer is a retriable
transport error, and the channel to it is closed so the retry dials afresh; a live storage node answers per
partition.
"""

from __future__ import annotations

import pytest

from oncelog.errors import OncelogError, Reason
from oncelog.testing import LocalCluster
from oncelog.testing.servers import free_port
from oncelog.txn_coordinator.marker_channel import DestinationService, MarkerDestination, TxnMarkerEntry
from oncelog.txn_coordinator.marker_transport import GrpcMarkerTransport
from oncelog.txn_coordinator.state import TransactionResult
from oncelog.vocabulary import TopicPartition

pytestmark = pytest.mark.timeout(60)


def marker(*partitions: tuple[str, int], groups: tuple[str, ...] = ()) -> TxnMarkerEntry:
    return TxnMarkerEntry(
        transactional_id="marker-transport",
        producer_id=424_242,
        producer_epoch=0,
        coordinator_epoch=1,
        result=TransactionResult.ABORT,
        partitions=tuple(partitions),
        groups=groups,
    )


async def test_an_unreachable_destination_is_a_transport_error_and_its_channel_is_dropped() -> None:
    transport = GrpcMarkerTransport(timeout_s=5.0)
    nowhere = MarkerDestination(DestinationService.PARTITION_STORAGE, "storage-gone", f"127.0.0.1:{free_port()}")
    try:
        with pytest.raises(OncelogError) as failure:
            await transport.write_markers(nowhere, [marker(("orders", 0))])
        assert failure.value.reason in (Reason.NETWORK_EXCEPTION, Reason.REQUEST_TIMED_OUT)
        assert failure.value.retriable
        assert len(transport._channels) == 0, "the channel to the dead address was closed"
    finally:
        await transport.close()


async def test_a_storage_node_answers_each_partition_of_a_marker(cluster: LocalCluster) -> None:
    storage = next(node for node in cluster.nodes if node.service == "partition-storage")
    destination = MarkerDestination(DestinationService.PARTITION_STORAGE, storage.node_id, storage.address)
    transport = GrpcMarkerTransport(timeout_s=10.0)
    try:
        (outcome,) = await transport.write_markers(destination, [marker(("no-such-topic-for-markers", 0))])
    finally:
        await transport.close()
    error = outcome.partition_errors[TopicPartition("no-such-topic-for-markers", 0)]
    assert isinstance(error, OncelogError), outcome
    assert error.reason in (Reason.UNKNOWN_TOPIC_OR_PARTITION, Reason.NOT_LEADER), error
