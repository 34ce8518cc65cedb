"""What every oncelog process runs besides its own service: catalog access, ClusterService, membership."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from oncelog.api.cluster import v1 as cluster_pb
from oncelog.api.cluster.v1 import cluster_service_pb2
from oncelog.catalog.membership import NodeMembership
from oncelog.catalog.servicer import ClusterServicer
from oncelog.catalog.store import CatalogStore, ClusterInfo
from oncelog.config import ServiceSettings
from oncelog.rpc import ServiceSpec
from oncelog.storage.sql import create_engine


def wall_clock_ms() -> int:
    """Unix time in milliseconds: the clock production code passes to domain objects."""
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    """A monotonic clock in milliseconds, for deadlines that a wall-clock step must not move."""
    return time.monotonic_ns() // 1_000_000


@dataclass
class NodeContext:
    """Catalog handles a service's ``build()`` can use (the store, this node's membership, cluster info)."""

    store: CatalogStore
    membership: NodeMembership
    cluster: ClusterInfo
    spec: ServiceSpec


def node_context(settings: ServiceSettings, role: str, *, clock: Callable[[], int] = wall_clock_ms) -> NodeContext:
    """Open the catalog, create or upgrade its schema, and start a ServiceSpec that serves ClusterService
    and keeps this node registered. Services add their own servicers to ``context.spec``.
    """
    engine = create_engine(settings.database_url)
    store = CatalogStore(engine)
    store.migrate()
    cluster = store.ensure_cluster(settings.txn_coordinator_shards, settings.group_offsets_shards, clock())
    spec = ServiceSpec(name=role)
    membership = NodeMembership(
        store,
        settings.resolved_node_id(),
        role,
        settings.node_lease_ms,
        clock,
        rack=settings.rack,
        heartbeat_interval_ms=settings.node_heartbeat_interval_ms or None,
        on_fenced=lambda: spec.set_serving(False),
    )
    cluster_service = cluster_service_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name
    spec.add(
        cluster_pb.add_ClusterServiceServicer_to_server,
        ClusterServicer(store, clock, default_replication_factor=settings.default_replication_factor),
        cluster_service,
    )
    external = ClusterServicer(
        store, clock, default_replication_factor=settings.default_replication_factor, external=True
    )
    spec.external_registrations[cluster_service] = lambda server: cluster_pb.add_ClusterServiceServicer_to_server(
        external, server
    )

    async def register(address: str) -> None:
        await membership.start(address, external_address=spec.external_address)

    spec.on_start.append(register)

    async def dispose() -> None:
        await asyncio.to_thread(engine.dispose)

    # on_stop runs in reverse: membership ends its lease first, then the engine closes
    spec.on_stop.append(dispose)
    spec.on_stop.append(membership.stop)
    return NodeContext(store=store, membership=membership, cluster=cluster, spec=spec)
