"""Integration fixtures: real service processes from oncelog.testing.LocalCluster."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from oncelog.testing import LocalCluster


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The whole local cluster (every service as a process, one storage node), shared by the session."""
    with LocalCluster(tmp_path_factory.mktemp("cluster"), storage_nodes=2) as running:
        yield running
