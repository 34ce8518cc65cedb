"""Composition root of the partition-storage process.

Until its domain is wired in, the process joins the cluster, serves health and the ClusterService, and
keeps its catalog registration alive, so the local cluster and deployments already have their shape.
"""

from __future__ import annotations

from oncelog.catalog.node import node_context
from oncelog.partition_storage.config import PartitionStorageSettings
from oncelog.rpc import ServiceSpec
from oncelog.rpc.runner import run_service

ROLE = "partition-storage"


def build(settings: PartitionStorageSettings) -> ServiceSpec:
    """Wire the service; tests and LocalCluster call this with explicit settings."""
    return node_context(settings, ROLE).spec


def main() -> int:
    """Console entry point: ``oncelog-partition-storage`` / ``python -m oncelog.partition_storage``."""
    return run_service(ROLE, PartitionStorageSettings.from_env, build)  # type: ignore[arg-type]
