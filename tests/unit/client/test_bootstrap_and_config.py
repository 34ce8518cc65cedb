"""Client construction: one bootstrap resolver for every client, and configurations refused before any I/O."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from oncelog.client import AdminClient, BootstrapError, Consumer, Producer
from oncelog.client.transport import resolve_bootstrap


def test_resolver_prefers_the_argument_then_the_variable_then_the_cluster_file(tmp_path: Path) -> None:
    cluster_file = tmp_path / "cluster.json"
    cluster_file.write_text(json.dumps({"bootstrap": "127.0.0.1:9", "services": {"pid-allocator": ["127.0.0.1:8"]}}))
    env = {"ONCELOG_BOOTSTRAP": "a:1, b:2"}
    assert resolve_bootstrap("x:5", environ=env, cluster_file=cluster_file) == ("x:5",)
    assert resolve_bootstrap(None, environ=env, cluster_file=cluster_file) == ("a:1", "b:2")
    assert resolve_bootstrap(None, environ={}, cluster_file=cluster_file) == ("127.0.0.1:9", "127.0.0.1:8")


def test_resolver_names_the_variable_and_the_file_when_nothing_is_set(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError) as info:
        resolve_bootstrap(None, environ={}, cluster_file=tmp_path / "missing.json")
    assert "ONCELOG_BOOTSTRAP is not set" in info.value.message
    assert str(tmp_path / "missing.json") in info.value.message and "oncelog dev" in info.value.message


@pytest.mark.parametrize(
    ("how_to_pass", "said"),
    [
        (None, 'pass bootstrap="host:port"'),
        ("pass --bootstrap host:port", "pass --bootstrap host:port"),
        ('set .option("bootstrap", "host:port")', 'set .option("bootstrap", "host:port")'),
    ],
)
def test_one_resolver_tells_each_caller_how_its_users_name_the_cluster(
    tmp_path: Path, how_to_pass: str | None, said: str
) -> None:
    """The library, the CLI and the Spark options share the resolver; only the advice differs."""
    extra = {} if how_to_pass is None else {"how_to_pass": how_to_pass}
    for cluster_file in (tmp_path / "missing.json", tmp_path):  # missing, and unreadable (a directory)
        with pytest.raises(BootstrapError) as info:
            resolve_bootstrap(None, environ={}, cluster_file=cluster_file, **extra)
        assert said in info.value.message
    with pytest.raises(BootstrapError) as info:
        resolve_bootstrap(" , ", environ={}, **extra)
    assert said in info.value.message


def test_a_malformed_variable_is_named_as_the_source(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError) as info:
        resolve_bootstrap(None, environ={"ONCELOG_BOOTSTRAP": "localhost"}, cluster_file=tmp_path / "none.json")
    assert info.value.message == (
        "bootstrap address 'localhost' is not host:port (for example 127.0.0.1:7101) (from ONCELOG_BOOTSTRAP)"
    )


@pytest.mark.parametrize("port", ["0", "65536", "99999"])
def test_a_port_out_of_range_is_reported_as_an_invalid_port(port: str) -> None:
    with pytest.raises(BootstrapError) as info:
        resolve_bootstrap(f"127.0.0.1:{port}", environ={})
    assert info.value.message == (
        f"bootstrap address '127.0.0.1:{port}' has an invalid port {port}: a port is 1-65535 "
        "(host:port, for example 127.0.0.1:7101)"
    )


@pytest.mark.parametrize("client", [Producer, Consumer, AdminClient], ids=lambda c: c.__name__)
def test_every_client_reads_oncelog_bootstrap(client: type, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no .oncelog/cluster.json here: only the variable can name the cluster
    monkeypatch.setenv("ONCELOG_BOOTSTRAP", "127.0.0.1:notaport")
    with pytest.raises(BootstrapError) as info:
        client()
    assert "'127.0.0.1:notaport'" in info.value.message and "ONCELOG_BOOTSTRAP" in info.value.message
    monkeypatch.setenv("ONCELOG_BOOTSTRAP", "127.0.0.1:7101")
    client().close()  # resolved from the variable: no "cluster file does not exist" error


def test_snappy_is_refused_at_construction_naming_the_supported_codecs() -> None:
    with pytest.raises(ValueError) as info:
        Producer("127.0.0.1:7101", compression="snappy")
    assert str(info.value) == (
        "invalid producer configuration: compression='snappy' is not supported by oncelog; "
        "use one of None, 'gzip', 'lz4', 'zstd'"
    )


@pytest.mark.parametrize("codec", [None, "none", "gzip", "lz4", "zstd"])
def test_supported_codecs_are_accepted(codec: str | None) -> None:
    Producer("127.0.0.1:7101", compression=codec).close()
