"""Test and development helpers: a whole local cluster as OS processes."""

from oncelog.testing.cluster import SERVICES, ClusterStartError, LocalCluster

__all__ = ["SERVICES", "ClusterStartError", "LocalCluster"]
