"""Composition root of the partition-storage process: settings -> catalog -> PartitionManager -> servicer.

Idempotent-only producers get their producer id from InitProducerId on the transaction coordinator (any
replica, no transactional id), so this process allocates no producer ids.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from oncelog.api.storage import v1 as pb
from oncelog.api.storage.v1 import partition_storage_service_pb2
from oncelog.catalog.node import node_context, wall_clock_ms
from oncelog.partition_storage.config import PartitionStorageSettings
from oncelog.partition_storage.controller import Controller
from oncelog.partition_storage.partition_manager import PartitionManager, StorageNodeConfig
from oncelog.partition_storage.replica_transport import GrpcReplicaTransport
from oncelog.partition_storage.servicer import PartitionStorageServicer
from oncelog.rpc import ChannelFactory, ServiceSpec
from oncelog.rpc.runner import run_service
from oncelog.vocabulary import Role

ROLE = Role.PARTITION_STORAGE

log = logging.getLogger(__name__)


def build(settings: PartitionStorageSettings) -> ServiceSpec:
    """Wire the service; tests and LocalCluster call this with explicit settings."""
    if not settings.node_id:
        log.warning("no ONCELOG_PARTITION_STORAGE_NODE_ID: partitions follow the node id, so set a stable one")
    node = node_context(settings, ROLE)
    flush_executor = ThreadPoolExecutor(settings.flush_threads, thread_name_prefix="partition-flush")
    replica_transport = GrpcReplicaTransport(ChannelFactory.from_settings(settings))
    partitions = PartitionManager(
        node.store,
        node.membership.node_id,
        StorageNodeConfig(
            data_dir=Path(settings.data_dir),
            index_interval_bytes=settings.index_interval_bytes,
            producer_id_expiration_ms=settings.producer_id_expiration_ms,
            validate_records=settings.validate_records,
            metadata_refresh_interval_ms=settings.metadata_refresh_interval_ms,
            producer_id_expiration_check_interval_ms=settings.producer_id_expiration_check_interval_ms,
            retention_check_interval_ms=settings.retention_check_interval_ms,
            flush_interval_ms=settings.flush_interval_ms,
            checkpoint_interval_ms=settings.checkpoint_interval_ms,
            partition_fetch_bytes=settings.partition_fetch_bytes,
            fetch_max_bytes=settings.fetch_max_bytes,
            fetch_max_wait_ms=settings.fetch_max_wait_ms,
            replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
            replica_fetch_wait_ms=settings.replica_fetch_wait_ms,
        ),
        clock=wall_clock_ms,
        flush_executor=flush_executor,
        replica_transport=replica_transport,
        node_epoch=lambda: node.membership.node_epoch,
        lease=node.membership,
    )
    controller = Controller(
        node.store,
        node.membership.node_id,
        clock=wall_clock_ms,
        lease_ms=settings.node_lease_ms,
        on_change=partitions.request_refresh,
        rebalance_interval_ms=settings.leader_rebalance_interval_ms,
    )
    node.spec.add(
        pb.add_PartitionStorageServiceServicer_to_server,
        PartitionStorageServicer(
            partitions,
            produce_timeout_ms=settings.produce_timeout_ms,
            stream_max_in_flight=settings.stream_max_in_flight,
        ),
        partition_storage_service_pb2.DESCRIPTOR.services_by_name["PartitionStorageService"].full_name,
    )

    async def start(address: str) -> None:
        await partitions.start()
        await controller.start()

    async def stop() -> None:
        # runs after the server drained its calls: every engine flushes and writes its snapshot
        await controller.stop()
        await partitions.stop()
        await replica_transport.close()
        await asyncio.to_thread(flush_executor.shutdown)

    # membership.start runs first (registered by node_context); on_stop runs in reverse, so this stops first.
    node.spec.on_start.append(start)
    node.spec.on_drain.append(partitions.hand_over_leadership)
    node.spec.on_stop.append(stop)
    return node.spec


def main() -> int:
    """Console entry point: ``oncelog-partition-storage`` / ``python -m oncelog.partition_storage``."""
    return run_service(ROLE, PartitionStorageSettings.from_env, build)  # type: ignore[arg-type]
