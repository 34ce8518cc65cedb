"""The Kafka listener's TLS settings: what turns TLS on, and bad files refused at start with their variables named."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from oncelog.config import ConfigError
from oncelog.kafka_gateway.app import kafka_ssl_context
from oncelog.kafka_gateway.config import KafkaGatewaySettings

pytest.importorskip("cryptography.x509", reason="certificates are made with cryptography (pip install)")
from oncelog.testing.pki import Issued, Pki

PREFIX = "ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def listener(pki: Pki) -> Issued:
    return pki.issue("listener", ips=("127.0.0.1",))


def _settings(**tls: str) -> KafkaGatewaySettings:
    return KafkaGatewaySettings.from_env({"ONCELOG_BOOTSTRAP": "127.0.0.1:1"} | {PREFIX + k: v for k, v in tls.items()})


def test_no_certificate_is_plaintext_a_certificate_tls_and_a_ca_requires_client_certificates(
    pki: Pki, listener: Issued
) -> None:
    assert kafka_ssl_context(_settings()) is None
    tls = kafka_ssl_context(_settings(CERT=str(listener.cert), KEY=str(listener.key)))
    assert tls is not None and tls.verify_mode == ssl.CERT_NONE
    mutual = kafka_ssl_context(_settings(CERT=str(listener.cert), KEY=str(listener.key), CA=str(pki.ca)))
    assert mutual is not None and mutual.verify_mode == ssl.CERT_REQUIRED


def test_a_certificate_without_its_key_or_a_ca_alone_is_refused_naming_the_variables(
    pki: Pki, listener: Issued
) -> None:
    with pytest.raises(ConfigError, match=f"{PREFIX}CERT and {PREFIX}KEY go together"):
        _settings(CERT=str(listener.cert))
    with pytest.raises(ConfigError, match=f"{PREFIX}CA is set but {PREFIX}CERT is not"):
        _settings(CA=str(pki.ca))


def test_an_unreadable_file_is_named(listener: Issued, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=f"{PREFIX}KEY={tmp_path / 'absent.key'} cannot be read"):
        _settings(CERT=str(listener.cert), KEY=str(tmp_path / "absent.key"))


def test_a_key_of_another_certificate_or_a_ca_that_is_not_pem_is_refused(
    pki: Pki, listener: Issued, tmp_path: Path
) -> None:
    other = pki.issue("other")
    with pytest.raises(ConfigError, match=f"{PREFIX}CERT / {PREFIX}KEY: not a PEM certificate and its matching key"):
        kafka_ssl_context(_settings(CERT=str(listener.cert), KEY=str(other.key)))
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ConfigError, match=f"{PREFIX}CA={garbage}: not a PEM CA bundle"):
        kafka_ssl_context(_settings(CERT=str(listener.cert), KEY=str(listener.key), CA=str(garbage)))
