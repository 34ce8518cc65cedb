"""Which catalog database a LocalCluster uses: the one passed, else one the ``--cluster`` switch chose.

With ``--cluster=postgres`` the session names a PostgreSQL server in ``ONCELOG_LOCAL_CLUSTER_DATABASE_SERVER`` and
every cluster built without a URL gets its own fresh database there; otherwise SQLite files, as ``oncelog dev``.
No cluster is started here (the constructor decides the URL).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from oncelog.testing import LocalCluster
from oncelog.testing.cluster import DATABASE_SERVER_ENV


def test_without_a_server_named_a_cluster_keeps_a_sqlite_file_in_its_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DATABASE_SERVER_ENV, raising=False)
    cluster = LocalCluster(tmp_path, services=("pid-allocator",))
    assert cluster.database_url == f"sqlite:///{tmp_path.resolve() / 'catalog.db'}"
    assert {n.env["ONCELOG_DATABASE_URL"] for n in cluster.nodes} == {cluster.database_url}


@pytest.mark.postgres
def test_with_a_server_named_each_cluster_gets_its_own_fresh_postgres_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_url: str
) -> None:
    monkeypatch.setenv(DATABASE_SERVER_ENV, postgres_url)
    first = LocalCluster(tmp_path / "a", services=("pid-allocator",))
    second = LocalCluster(tmp_path / "b", services=("pid-allocator",))
    assert first.database_url.startswith("postgresql") and second.database_url.startswith("postgresql")
    assert first.database_url != second.database_url, "clusters never share a catalog"
    for cluster in (first, second):
        assert {n.env["ONCELOG_DATABASE_URL"] for n in cluster.nodes} == {cluster.database_url}
        engine = sa.create_engine(cluster.database_url)
        try:
            with engine.connect() as conn:
                assert sa.inspect(conn).get_table_names() == [], "a fresh, empty database"
        finally:
            engine.dispose()
    explicit = f"sqlite:///{tmp_path / 'mine.db'}"
    assert LocalCluster(tmp_path / "c", services=("pid-allocator",), database_url=explicit).database_url == explicit
