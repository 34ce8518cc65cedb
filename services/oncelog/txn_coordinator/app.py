"""Composition root of the txn-coordinator: settings -> stores -> coordinator -> leases, markers, sweeps -> servicer."""

from __future__ import annotations

import asyncio
import functools
import logging

from oncelog.api.txn import v1 as pb
from oncelog.api.txn.v1 import transaction_coordinator_service_pb2
from oncelog.catalog.membership import NodeMembership
from oncelog.catalog.node import monotonic_ms, node_context, wall_clock_ms
from oncelog.catalog.store import CatalogStore
from oncelog.catalog.topics import shard_for
from oncelog.client.pid_allocator import ProducerIdSource, grpc_block_fetcher
from oncelog.errors import CoordinatorLoadInProgress, CoordinatorNotAvailable, OncelogError, Reason
from oncelog.rpc import ChannelFactory, ServiceSpec
from oncelog.rpc.runner import run_service
from oncelog.storage.sql import create_engine
from oncelog.txn_coordinator.check_back import CheckBackPolicy, PreparedTransactionResolver
from oncelog.txn_coordinator.check_back_client import GrpcTransactionChecker
from oncelog.txn_coordinator.config import TxnCoordinatorSettings
from oncelog.txn_coordinator.coordinator import TransactionCoordinator
from oncelog.txn_coordinator.expiry import TransactionExpirySweeper
from oncelog.txn_coordinator.marker_channel import TransactionMarkerChannelManager
from oncelog.txn_coordinator.marker_destinations import CatalogMarkerDestinations
from oncelog.txn_coordinator.marker_transport import GrpcMarkerTransport
from oncelog.txn_coordinator.servicer import CatalogLookups, TransactionCoordinatorServicer
from oncelog.txn_coordinator.shards import ROLE, txn_shard_leases
from oncelog.txn_coordinator.state_manager import TransactionStateManager
from oncelog.txn_coordinator.transaction_log import TransactionLog
from oncelog.vocabulary import Role

log = logging.getLogger(__name__)


class CatalogPidBlockFetcher:
    """Fetches producer-id blocks from a live pid-allocator found in the catalog, as this node's membership.

    The requester id and epoch are this node's id and registration epoch, so a replaced incarnation of
    the node can no longer take ids. After a transport failure the allocator is looked up again.
    """

    def __init__(self, catalog: CatalogStore, membership: NodeMembership, channels: ChannelFactory) -> None:
        self._catalog = catalog
        self._membership = membership
        self._channels = channels
        self._channel = None

    async def __call__(self) -> tuple[int, int]:
        if not self._membership.node_epoch:
            raise CoordinatorLoadInProgress("this coordinator has not registered yet; retry")
        if self._channel is None:
            nodes = await asyncio.to_thread(self._catalog.list_nodes, wall_clock_ms(), role=Role.PID_ALLOCATOR)
            if not nodes:
                raise CoordinatorNotAvailable("no live pid-allocator is registered in the catalog")
            self._channel = self._channels.aio(nodes[0].address)
        fetch = grpc_block_fetcher(self._channel, self._membership.node_id, self._membership.node_epoch)
        try:
            return await fetch()
        except OncelogError as exc:
            if exc.reason in (Reason.NETWORK_EXCEPTION, Reason.REQUEST_TIMED_OUT):
                await self.close()
            raise

    async def close(self) -> None:
        """Close the channel to the allocator."""
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()


def build(settings: TxnCoordinatorSettings) -> ServiceSpec:
    """Wire the service; tests and LocalCluster call this with explicit settings."""
    node = node_context(settings, ROLE)
    shard_of = functools.partial(_shard_of, count=node.cluster.txn_coordinator_shards)
    engine = create_engine(settings.state_database_url)
    store = TransactionLog(engine, shard_of, on_fenced=lambda shard, epoch: leases.fenced(shard, epoch))
    store.migrate()
    channels = ChannelFactory.from_settings(settings)
    pid_fetcher = CatalogPidBlockFetcher(node.store, node.membership, channels)
    producer_ids = ProducerIdSource(pid_fetcher)

    def holds(shard: int, coordinator_epoch: int) -> bool:
        return coordinator.owned_shards.get(shard) == coordinator_epoch

    markers = TransactionMarkerChannelManager(
        resolver=CatalogMarkerDestinations(node.store, wall_clock_ms),
        transport=GrpcMarkerTransport(timeout_s=settings.marker_request_timeout_ms / 1000, channels=channels),
        shard_for=shard_of,
        is_current=holds,
        retry_backoff_ms=settings.marker_retry_backoff_ms,
        retry_backoff_max_ms=settings.marker_retry_backoff_max_ms,
        max_participants_per_request=settings.marker_max_participants_per_request,
    )
    coordinator = TransactionCoordinator(
        state=TransactionStateManager(store, shard_for=shard_of, leased=lambda shard: leases.holds(shard)),
        producer_ids=producer_ids,
        markers=markers,
        clock=wall_clock_ms,
        max_transaction_timeout_ms=settings.transaction_max_timeout_ms,
        completion_wait_ms=settings.completion_wait_ms,
    )
    leases = txn_shard_leases(
        catalog=node.store,
        coordinator=coordinator,
        table=store,
        markers=markers,
        node_id=node.membership.node_id,
        shard_count=node.cluster.txn_coordinator_shards,
        lease_ms=settings.lease_ms,
        clock=wall_clock_ms,
        deadline_clock=monotonic_ms,
        database_clock=True,
    )
    sweeper = TransactionExpirySweeper(
        coordinator,
        wall_clock_ms,
        abort_check_interval_ms=settings.abort_check_interval_ms,
        expiration_check_interval_ms=settings.expiration_check_interval_ms,
        transactional_id_expiration_ms=settings.transactional_id_expiration_ms,
    )
    checker = GrpcTransactionChecker(channels)
    resolver = PreparedTransactionResolver(
        coordinator,
        checker,
        wall_clock_ms,
        CheckBackPolicy(
            check_back_after_ms=settings.check_back_after_ms,
            check_back_interval_ms=settings.check_back_interval_ms,
            check_back_max_attempts=settings.check_back_max_attempts,
            default_commit=settings.check_back_default == "commit",
            max_prepared_ms=settings.max_prepared_ms,
            timeout_ms=settings.check_back_timeout_ms,
            sweep_interval_ms=settings.check_back_sweep_interval_ms,
        ),
    )
    node.spec.add(
        pb.add_TransactionCoordinatorServiceServicer_to_server,
        TransactionCoordinatorServicer(
            coordinator, CatalogLookups(node.store, wall_clock_ms), node_id=node.membership.node_id, shard_for=shard_of
        ),
        transaction_coordinator_service_pb2.DESCRIPTOR.services_by_name["TransactionCoordinatorService"].full_name,
    )

    async def start(address: str) -> None:
        markers.start()
        await leases.start()  # shards are loaded before the server reports SERVING
        sweeper.start()
        resolver.start()

    async def stop() -> None:
        await resolver.stop()
        await checker.close()
        await sweeper.stop()
        await leases.stop()
        await markers.close()
        await producer_ids.close()
        await pid_fetcher.close()
        await store.close()
        await asyncio.to_thread(engine.dispose)

    # membership.start runs first (registered by node_context); on_stop runs in reverse, so this stops first.
    node.spec.on_start.append(start)
    node.spec.on_stop.append(stop)
    return node.spec


def _shard_of(transactional_id: str, *, count: int) -> int:
    return shard_for(transactional_id, count)


def main() -> int:
    """Console entry point: ``oncelog-txn-coordinator`` / ``python -m oncelog.txn_coordinator``."""
    return run_service(ROLE, TxnCoordinatorSettings.from_env, build)  # type: ignore[arg-type]
