"""Composition root of group-offsets: settings → catalog → shard leases → SQL store (+ Redis cache) → manager.

Every replica serves the groups of the shards it leases (``ShardLeaseManager``); the others get NOT_COORDINATOR
naming the owner. Shards are acquired before the process reports SERVING and released on a clean stop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import redis

from oncelog.api.offsets import v1 as pb
from oncelog.api.offsets.v1 import group_offsets_service_pb2
from oncelog.catalog.node import monotonic_ms, node_context, wall_clock_ms
from oncelog.group_offsets.config import GroupOffsetsSettings
from oncelog.group_offsets.group_coordinator import GroupCoordinator
from oncelog.group_offsets.group_flusher import GroupFlusher
from oncelog.group_offsets.offset_cache import CachedOffsetStore
from oncelog.group_offsets.offset_manager import OffsetMetadataManager, OffsetStore
from oncelog.group_offsets.offset_store import SqlOffsetStore
from oncelog.group_offsets.partitions import CatalogPartitions, CatalogTopics
from oncelog.group_offsets.servicer import GroupOffsetsServicer
from oncelog.group_offsets.shards import GroupShardOwnership, group_shard_leases
from oncelog.rpc import ServiceSpec
from oncelog.rpc.runner import run_service
from oncelog.storage.sql import create_engine
from oncelog.vocabulary import Role

ROLE = Role.GROUP_OFFSETS
log = logging.getLogger(__name__)


def build(settings: GroupOffsetsSettings) -> ServiceSpec:
    """Wire the service; tests and LocalCluster call this with explicit settings."""
    node = node_context(settings, ROLE)
    engine = create_engine(settings.state_database_url)
    sql_store = SqlOffsetStore(engine)
    sql_store.migrate()
    store: OffsetStore = sql_store
    redis_client = None
    if settings.redis_url:
        timeout_s = settings.redis_timeout_ms / 1000
        redis_client = redis.Redis.from_url(
            settings.redis_url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        store = CachedOffsetStore(
            sql_store,
            redis_client,
            incarnation=uuid.uuid4().hex,
            ttl_s=settings.cache_ttl_s,
            key_prefix=cache_key_prefix(node.cluster.cluster_id),
        )
    leases = group_shard_leases(
        node.store,
        node_id=node.membership.node_id,
        shard_count=node.cluster.group_offsets_shards,
        lease_ms=settings.shard_lease_ms,
        clock=wall_clock_ms,
        claim=store.claim_shard,
        role=ROLE,
        deadline_clock=monotonic_ms,
        database_clock=True,
    )
    ownership = GroupShardOwnership(leases)
    manager = OffsetMetadataManager(
        store,
        ownership,
        partitions=CatalogPartitions(node.store),
        max_metadata_bytes=settings.max_metadata_bytes,
    )
    groups = GroupCoordinator(
        sql_store,
        ownership,
        CatalogTopics(node.store, monotonic_ms),
        monotonic_ms,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.heartbeat_interval_ms,
        rebalance_timeout_ms=settings.rebalance_timeout_ms,
    )
    flusher = GroupFlusher(groups.flush)
    node.spec.add(
        pb.add_GroupOffsetsServiceServicer_to_server,
        GroupOffsetsServicer(manager, groups, flusher),
        group_offsets_service_pb2.DESCRIPTOR.services_by_name["GroupOffsetsService"].full_name,
    )

    sweeper: list[asyncio.Task[None]] = []

    async def sweep() -> None:
        while True:
            try:
                removed = await asyncio.to_thread(groups.expire)
                for group_id, member_id in removed:
                    log.info("group %s: member %s removed (session or rebalance timeout)", group_id, member_id)
            except Exception:  # the next sweep retries; a lost shard is re-checked there
                log.exception("consumer group sweep failed")
            await asyncio.sleep(settings.group_sweep_ms / 1000)

    async def start(address: str) -> None:
        await leases.start()  # shards are claimed before the server reports SERVING
        sweeper.append(asyncio.create_task(sweep(), name="consumer-group-sweep"))

    async def stop_sweep() -> None:
        for task in sweeper:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await flusher.close()

    node.spec.on_start.append(start)

    async def dispose() -> None:
        if redis_client is not None:
            await asyncio.to_thread(redis_client.close)
        await asyncio.to_thread(engine.dispose)

    # on_stop runs in reverse: shards are released (catalog still open), then the state engine closes
    node.spec.on_stop.append(dispose)
    node.spec.on_stop.append(leases.stop)
    node.spec.on_stop.append(stop_sweep)
    return node.spec


def cache_key_prefix(cluster_id: str) -> str:
    """Namespace of this cluster's group-offset cache entries, so clusters can share one Redis."""
    return f"oncelog:{cluster_id}:group-offsets:"


def main() -> int:
    """Console entry point: ``oncelog-group-offsets`` / ``python -m oncelog.group_offsets``."""
    return run_service(ROLE, GroupOffsetsSettings.from_env, build)  # type: ignore[arg-type]
