"""The TLS files of a node (``ONCELOG_TLS_*``) and the checks that need no TLS library: which mode they select,
and which variables are missing or name unreadable files.

:class:`TlsSettings` is what :meth:`oncelog.config.ServiceSettings.validate` checks; :mod:`oncelog.rpc.tls` builds
gRPC credentials on top of it (:class:`oncelog.rpc.TlsConfig`). Keeping the checks here lets the settings module
validate TLS without importing the RPC layer, which itself imports the settings.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

CERT_ENV = "ONCELOG_TLS_CERT"
KEY_ENV = "ONCELOG_TLS_KEY"
CA_ENV = "ONCELOG_TLS_CA"
SERVER_NAME_ENV = "ONCELOG_TLS_SERVER_NAME"

T = TypeVar("T", bound="TlsSettings")


class TlsMode(enum.Enum):
    """How a server accepts connections."""

    PLAINTEXT = "plaintext"
    TLS = "tls"
    MUTUAL_TLS = "mtls"


@dataclass(frozen=True)
class TlsSettings:
    """Paths of this node's certificate, key and CA bundle (PEM), plus the name servers' certificates carry.

    Attributes:
        cert: certificate chain of this node (``ONCELOG_TLS_CERT``); empty for plaintext.
        key: private key of ``cert`` (``ONCELOG_TLS_KEY``), unencrypted.
        ca: CA bundle that signs peers' certificates (``ONCELOG_TLS_CA``); turns on client verification.
        server_name: name checked in servers' certificates instead of the dialled host
            (``ONCELOG_TLS_SERVER_NAME``); empty checks the host of the address.
    """

    cert: str = ""
    key: str = ""
    ca: str = ""
    server_name: str = ""

    @classmethod
    def from_settings(cls: type[T], settings: Any) -> T:
        """The TLS part of a service's settings (``tls_cert``, ``tls_key``, ``tls_ca``, ``tls_server_name``)."""
        return cls(
            cert=settings.tls_cert, key=settings.tls_key, ca=settings.tls_ca, server_name=settings.tls_server_name
        )

    @classmethod
    def from_env(cls: type[T], environ: Mapping[str, str] | None = None) -> T:
        """Read the shared variables, for processes without service settings (CLI, tools, tests)."""
        environ = os.environ if environ is None else environ
        return cls(
            cert=environ.get(CERT_ENV, ""),
            key=environ.get(KEY_ENV, ""),
            ca=environ.get(CA_ENV, ""),
            server_name=environ.get(SERVER_NAME_ENV, ""),
        )

    @property
    def mode(self) -> TlsMode:
        """What a server built from this configuration requires of its clients."""
        if not (self.cert and self.key):
            return TlsMode.PLAINTEXT
        return TlsMode.MUTUAL_TLS if self.ca else TlsMode.TLS

    @property
    def secures_channels(self) -> bool:
        """Whether outgoing channels use TLS (any of cert, key or CA set)."""
        return bool(self.cert or self.key or self.ca)

    def problems(self, *, serving: bool = True) -> list[str]:
        """Problems visible without parsing the files: an incomplete pair, a CA without a server identity,
        paths that cannot be read. One message per problem, each naming its variable.

        Args:
            serving: check the configuration of a server; ``False`` allows a CA alone (a client that
                verifies servers but has no certificate of its own).
        """
        problems = []
        if self.cert and not self.key:
            problems.append(f"{CERT_ENV} is set but {KEY_ENV} is not: a certificate needs its private key")
        if self.key and not self.cert:
            problems.append(f"{KEY_ENV} is set but {CERT_ENV} is not: a private key needs its certificate")
        if serving and self.ca and not (self.cert or self.key):
            problems.append(
                f"{CA_ENV} is set but {CERT_ENV} and {KEY_ENV} are not: verifying client certificates needs TLS,"
                " which needs a server certificate"
            )
        for variable, path in ((CERT_ENV, self.cert), (KEY_ENV, self.key), (CA_ENV, self.ca)):
            if path:
                problem = _unreadable(variable, path)
                if problem:
                    problems.append(problem)
        return problems


def _unreadable(variable: str, path: str) -> str | None:
    try:
        with open(path, "rb"):
            return None
    except OSError as exc:
        return f"{variable}={path} cannot be read: {exc.strerror or exc}"


__all__ = ["CA_ENV", "CERT_ENV", "KEY_ENV", "SERVER_NAME_ENV", "TlsMode", "TlsSettings"]
