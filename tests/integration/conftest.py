"""Integration fixtures: real service processes from oncelog.testing.LocalCluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from oncelog.testing import LocalCluster

GROUP_TIMEOUTS = {
    "ONCELOG_GROUP_OFFSETS_SESSION_TIMEOUT_MS": "4000",
    "ONCELOG_GROUP_OFFSETS_HEARTBEAT_INTERVAL_MS": "400",
}
"""A consumer killed with SIGKILL holds its group's partitions until the session timeout: keep it short here."""


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, cluster_database: Callable[[], str]) -> Iterator[LocalCluster]:
    """The whole local cluster (every service as a process, two storage nodes), shared by the session; on the
    database ``--cluster`` selects."""
    with LocalCluster(
        tmp_path_factory.mktemp("cluster"), storage_nodes=2, database_url=cluster_database(), env=GROUP_TIMEOUTS
    ) as running:
        yield running
