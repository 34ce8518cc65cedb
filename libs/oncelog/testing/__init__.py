"""Test and development helpers: a whole local cluster as OS processes."""

from oncelog.testing.cluster import SERVICES, ClusterStartError, DataDirInUseError, LocalCluster

__all__ = ["SERVICES", "ClusterStartError", "DataDirInUseError", "LocalCluster"]
