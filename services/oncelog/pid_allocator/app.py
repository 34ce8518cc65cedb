"""Composition root of the pid-allocator: settings → catalog → SqlBlockStore → allocator → servicer."""

from __future__ import annotations

from oncelog.api.pid import v1 as pb
from oncelog.api.pid.v1 import pid_allocator_service_pb2
from oncelog.catalog.node import node_context
from oncelog.pid_allocator.allocator import ProducerIdAllocator
from oncelog.pid_allocator.block_store import SqlBlockStore
from oncelog.pid_allocator.config import PidAllocatorSettings
from oncelog.pid_allocator.servicer import PidAllocatorServicer
from oncelog.rpc import ServiceSpec
from oncelog.rpc.runner import run_service
from oncelog.vocabulary import Role

ROLE = Role.PID_ALLOCATOR


def build(settings: PidAllocatorSettings) -> ServiceSpec:
    """Wire the service; tests and LocalCluster call this with explicit settings."""
    node = node_context(settings, ROLE)
    allocator = ProducerIdAllocator(SqlBlockStore(node.store.engine), settings.block_size)
    node.spec.add(
        pb.add_PidAllocatorServiceServicer_to_server,
        PidAllocatorServicer(allocator),
        pid_allocator_service_pb2.DESCRIPTOR.services_by_name["PidAllocatorService"].full_name,
    )
    return node.spec


def main() -> int:
    """Console entry point: ``oncelog-pid-allocator`` / ``python -m oncelog.pid_allocator``."""
    return run_service(ROLE, PidAllocatorSettings.from_env, build)  # type: ignore[arg-type]
