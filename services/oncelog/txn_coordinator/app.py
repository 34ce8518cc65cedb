"""Composition root of the txn-coordinator process.

Until its domain is wired in, the process joins the cluster, serves health and the ClusterService, and
keeps its catalog registration alive, so the local cluster and deployments already have their shape.
"""

from __future__ import annotations

from oncelog.catalog.node import node_context
from oncelog.rpc import ServiceSpec
from oncelog.rpc.runner import run_service
from oncelog.txn_coordinator.config import TxnCoordinatorSettings

ROLE = "txn-coordinator"


def build(settings: TxnCoordinatorSettings) -> ServiceSpec:
    """Wire the service; tests and LocalCluster call this with explicit settings."""
    return node_context(settings, ROLE).spec


def main() -> int:
    """Console entry point: ``oncelog-txn-coordinator`` / ``python -m oncelog.txn_coordinator``."""
    return run_service(ROLE, TxnCoordinatorSettings.from_env, build)  # type: ignore[arg-type]
