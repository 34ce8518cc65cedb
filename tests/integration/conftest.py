"""Integration fixtures: real service processes from oncelog.testing.LocalCluster."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from oncelog.testing import LocalCluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory, cluster_database: Callable[[], str]) -> Iterator[LocalCluster]:
    """The whole local cluster (every service as a process, two storage nodes), shared by the session; on the
    database ``--cluster`` selects."""
    with LocalCluster(tmp_path_factory.mktemp("cluster"), storage_nodes=2, database_url=cluster_database()) as running:
        yield running
