"""Shared fixtures: catalog databases (SQLite file and a real PostgreSQL) and the local cluster."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from oncelog.testing.cluster import DATABASE_SERVER_ENV
from oncelog.testing.postgres import find_postgres_bin, new_database, postgres_server
from oncelog.testing.servers import find_redis_server, redis_server

# Property tests check results, never speed: Hypothesis's default 200 ms deadline per example turned a busy
# machine into failures (DeadlineExceeded), so no example has a deadline. Timing belongs in bench/.
settings.register_profile("oncelog", deadline=None)
settings.load_profile("oncelog")


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for the whole session; skipped with the reason when PostgreSQL is not installed.

    CI installs the ``postgresql`` package, so there the PostgreSQL variants always run; set
    ``ONCELOG_REQUIRE_POSTGRES=1`` to turn the skip into a failure.
    """
    bin_dir = find_postgres_bin()
    if bin_dir is None:
        if os.environ.get("ONCELOG_REQUIRE_POSTGRES") == "1":
            pytest.fail("PostgreSQL is required (ONCELOG_REQUIRE_POSTGRES=1) but initdb was not found")
        pytest.skip("PostgreSQL is not installed (apt-get install -y postgresql)")
    with postgres_server(bin_dir) as url:
        yield url


CLUSTERS = {"all": ("sqlite", "postgres"), "local": ("sqlite",), "postgres": ("postgres",)}
"""What ``--cluster`` selects: the backends of ``database_url`` (and so of every store test)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--cluster``: the one switch of the test environment, as Temporal's ``--workflow-environment``."""
    parser.addoption(
        "--cluster",
        choices=sorted(CLUSTERS),
        default=os.environ.get("ONCELOG_TEST_CLUSTER", "all"),
        help=(
            "local: SQLite only, no PostgreSQL needed (the stores' tests on SQLite, local clusters on SQLite files, "
            "as `oncelog dev`); postgres: the stores' tests and every local cluster on PostgreSQL; all "
            "(default, what CI runs): the stores' tests on both, the shared local clusters on SQLite files. "
            "Also ONCELOG_TEST_CLUSTER."
        ),
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "database_url" in metafunc.fixturenames:
        metafunc.parametrize("database_url", CLUSTERS[metafunc.config.getoption("cluster")], indirect=True)


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty catalog database of each backend ``--cluster`` selects (both by default)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'catalog.db'}"
        return
    yield new_database(request.getfixturevalue("postgres_url"))


@pytest.fixture(scope="session")
def cluster_database(request: pytest.FixtureRequest) -> Callable[[], str]:
    """The catalog URL for each shared ``LocalCluster`` (pass it as ``database_url``): empty, so the cluster keeps
    SQLite files in its data directory as ``oncelog dev`` does, unless ``--cluster=postgres``, which gives every
    cluster a fresh PostgreSQL database."""
    if request.config.getoption("cluster") != "postgres":
        return lambda: ""
    server = request.getfixturevalue("postgres_url")
    return lambda: new_database(server)


@pytest.fixture(scope="session", autouse=True)
def local_clusters_follow_the_switch(request: pytest.FixtureRequest) -> Iterator[None]:
    """With ``--cluster=postgres``, every ``LocalCluster`` a test builds without a ``database_url`` (its own
    cluster, a CLI or script subprocess's) gets a fresh PostgreSQL database (``DATABASE_SERVER_ENV``); tests that
    pass a URL keep it. Otherwise local clusters keep SQLite files, as ``oncelog dev`` does."""
    if request.config.getoption("cluster") != "postgres":
        yield
        return
    server = request.getfixturevalue("postgres_url")
    previous = os.environ.get(DATABASE_SERVER_ENV)
    os.environ[DATABASE_SERVER_ENV] = server
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DATABASE_SERVER_ENV, None)
        else:
            os.environ[DATABASE_SERVER_ENV] = previous


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A throwaway redis-server without persistence for the session; skipped with the reason when Redis is
    not installed (CI installs it; ``ONCELOG_REQUIRE_REDIS=1`` turns the skip into a failure).
    Tests that share it use their own key names.
    """
    if find_redis_server() is None:
        if os.environ.get("ONCELOG_REQUIRE_REDIS") == "1":
            pytest.fail("redis-server is required (ONCELOG_REQUIRE_REDIS=1) but was not found")
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    with redis_server() as url:
        yield url
