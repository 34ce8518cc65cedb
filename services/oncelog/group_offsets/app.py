"""Composition root of the group-offsets process.

Until its domain is wired in, the process joins the cluster, serves health and the ClusterService, and
keeps its catalog registration alive, so the local cluster and deployments already have their shape.
"""

from __future__ import annotations

from oncelog.catalog.node import node_context
from oncelog.group_offsets.config import GroupOffsetsSettings
from oncelog.rpc import ServiceSpec
from oncelog.rpc.runner import run_service

ROLE = "group-offsets"


def build(settings: GroupOffsetsSettings) -> ServiceSpec:
    """Wire the service; tests and LocalCluster call this with explicit settings."""
    return node_context(settings, ROLE).spec


def main() -> int:
    """Console entry point: ``oncelog-group-offsets`` / ``python -m oncelog.group_offsets``."""
    return run_service(ROLE, GroupOffsetsSettings.from_env, build)  # type: ignore[arg-type]
