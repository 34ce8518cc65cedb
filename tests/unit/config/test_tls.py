"""TlsSettings: the TLS checks that need no TLS library, as ServiceSettings.validate() runs them.

Credentials built from real certificates are tested in tests/integration/test_tls.py (oncelog.rpc.TlsConfig).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from oncelog.config.tls import CA_ENV, CERT_ENV, KEY_ENV, SERVER_NAME_ENV, TlsMode, TlsSettings
from oncelog.rpc import TlsConfig


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    """Readable files standing in for a certificate, its key and a CA (only readability is checked here)."""
    paths = {}
    for name in ("node.crt", "node.key", "ca.crt"):
        (tmp_path / name).write_text("placeholder\n")
        paths[name] = str(tmp_path / name)
    return paths


def test_the_mode_follows_which_files_are_set(files: dict[str, str]) -> None:
    cert, key, ca = files["node.crt"], files["node.key"], files["ca.crt"]
    assert TlsSettings().mode is TlsMode.PLAINTEXT and not TlsSettings().secures_channels
    assert TlsSettings(cert=cert, key=key).mode is TlsMode.TLS
    assert TlsSettings(cert=cert, key=key, ca=ca).mode is TlsMode.MUTUAL_TLS
    assert TlsSettings(ca=ca).mode is TlsMode.PLAINTEXT and TlsSettings(ca=ca).secures_channels


def test_a_half_pair_and_a_ca_without_identity_are_named_by_variable(files: dict[str, str]) -> None:
    (problem,) = TlsSettings(cert=files["node.crt"]).problems()
    assert problem.startswith(f"{CERT_ENV} is set but {KEY_ENV} is not")
    (problem,) = TlsSettings(key=files["node.key"]).problems()
    assert problem.startswith(f"{KEY_ENV} is set but {CERT_ENV} is not")
    (problem,) = TlsSettings(ca=files["ca.crt"]).problems(serving=True)
    assert problem.startswith(f"{CA_ENV} is set but {CERT_ENV} and {KEY_ENV} are not")
    assert TlsSettings(ca=files["ca.crt"]).problems(serving=False) == []


def test_unreadable_paths_are_reported_together(files: dict[str, str], tmp_path: Path) -> None:
    missing_key, missing_ca = tmp_path / "gone.key", tmp_path / "gone.crt"
    problems = TlsSettings(cert=files["node.crt"], key=str(missing_key), ca=str(missing_ca)).problems()
    assert problems == [
        f"{KEY_ENV}={missing_key} cannot be read: No such file or directory",
        f"{CA_ENV}={missing_ca} cannot be read: No such file or directory",
    ]


def test_from_env_and_from_settings_read_the_same_four_values(files: dict[str, str]) -> None:
    environ = {CERT_ENV: files["node.crt"], KEY_ENV: files["node.key"], CA_ENV: files["ca.crt"], SERVER_NAME_ENV: "n"}

    @dataclass
    class Settings:
        tls_cert: str
        tls_key: str
        tls_ca: str
        tls_server_name: str

    from_settings = TlsSettings.from_settings(Settings(files["node.crt"], files["node.key"], files["ca.crt"], "n"))
    expected = TlsSettings(cert=files["node.crt"], key=files["node.key"], ca=files["ca.crt"], server_name="n")
    assert TlsSettings.from_env(environ) == from_settings == expected


def test_the_rpc_config_is_built_from_the_same_settings(files: dict[str, str]) -> None:
    config = TlsConfig.from_env({CERT_ENV: files["node.crt"], KEY_ENV: files["node.key"]})
    assert isinstance(config, TlsConfig) and isinstance(config, TlsSettings)
    assert config.mode is TlsMode.TLS and config.problems() == []
