"""TLS and mutual TLS for oncelog servers and channels, configured by the shared ``ONCELOG_TLS_*`` variables.

Every process reads the same variables, so one Kubernetes Secret mounted into every pod secures the whole
cluster:

================  ==================  ===========================================================
cert + key        CA                  mode
================  ==================  ===========================================================
unset             unset               plaintext (local development, ``oncelog dev``)
set               unset               TLS: servers present the certificate; clients verify it
                                      against the system roots
set               set                 mutual TLS: servers also require a client certificate signed
                                      by the CA, and every outgoing channel presents the node's own
                                      certificate and trusts only the CA
unset             set                 clients only: verify servers against the CA, present nothing
================  ==================  ===========================================================

``ONCELOG_TLS_SERVER_NAME`` is the name verified in a server's certificate instead of the host of the address
dialled. Services reach each other by pod IP or per-pod DNS name (their advertised addresses), which a shared
certificate cannot list, so a deployment gives the certificate one internal DNS name and sets it here.

Files are checked twice: :meth:`TlsConfig.problems` (run by ``ServiceSettings.validate()``) catches a missing
half of the pair and unreadable paths from the environment alone; :meth:`TlsConfig.server_credentials` and
:meth:`TlsConfig.channel_credentials` read the files and reject content that is not PEM or a key that does not
belong to its certificate. Both raise :class:`~oncelog.config.ConfigError` naming the variable, so a broken
Secret stops the process at start instead of failing every handshake later.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from typing import Any

import grpc

from oncelog.config import ConfigError
from oncelog.config.tls import CA_ENV, CERT_ENV, KEY_ENV, SERVER_NAME_ENV, TlsMode, TlsSettings

# grpc core option that replaces the dialled host in certificate verification (and the TLS SNI).
_TARGET_NAME_OVERRIDE = "grpc.ssl_target_name_override"


class TlsConfig(TlsSettings):
    """:class:`~oncelog.config.tls.TlsSettings` that also builds gRPC server and channel credentials from its files."""

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """Credentials for ``add_secure_port``, or ``None`` in plaintext mode.

        With a CA the server requires a client certificate signed by it (mutual TLS); handshakes without one
        fail before any call reaches a servicer.

        Raises:
            ConfigError: a file is unreadable, not PEM, or the key does not match the certificate.
        """
        self._raise_problems(serving=True)
        if self.mode is TlsMode.PLAINTEXT:
            return None
        cert, key, ca = self._load()
        assert cert is not None and key is not None
        return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """Credentials for outgoing channels, or ``None`` for plaintext.

        The CA (system roots when unset) verifies servers; the node's certificate and key, when set, are
        presented to servers that ask for them.

        Raises:
            ConfigError: as :meth:`server_credentials`.
        """
        self._raise_problems(serving=False)
        if not self.secures_channels:
            return None
        cert, key, ca = self._load()
        return grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)

    def _raise_problems(self, *, serving: bool) -> None:
        problems = self.problems(serving=serving)
        if problems:
            raise ConfigError(problems)

    def _load(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        cert = _read(CERT_ENV, self.cert) if self.cert else None
        key = _read(KEY_ENV, self.key) if self.key else None
        ca = _read(CA_ENV, self.ca) if self.ca else None
        problems = []
        if cert is not None:
            problems += _pem_certificates_problem(CERT_ENV, self.cert, cert)
        if ca is not None:
            problems += _pem_certificates_problem(CA_ENV, self.ca, ca)
        if cert is not None and key is not None and not problems:
            problems += _key_matches_problem(self.cert, self.key)
        if problems:
            raise ConfigError(problems)
        return cert, key, ca


def client_credentials_from_env(environ: Mapping[str, str] | None = None) -> grpc.ChannelCredentials | None:
    """Channel credentials from ``ONCELOG_TLS_*`` (``None`` when unset), for clients outside a service."""
    return TlsConfig.from_env(environ).channel_credentials()


def server_name_options(server_name: str) -> list[tuple[str, Any]]:
    """Channel options that verify ``server_name`` in the server's certificate instead of the dialled host."""
    return [(_TARGET_NAME_OVERRIDE, server_name)] if server_name else []


def _read(variable: str, path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as exc:
        raise ConfigError([f"{variable}={path} cannot be read: {exc.strerror or exc}"]) from exc


def _pem_certificates_problem(variable: str, path: str, data: bytes) -> list[str]:
    try:
        ssl.create_default_context(cadata=data.decode("ascii"))
    except (UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
        return [f"{variable}={path} holds no PEM certificate ({_reason(exc)})"]
    return []


def _key_matches_problem(cert_path: str, key_path: str) -> list[str]:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        # an empty password makes an encrypted key fail here instead of prompting on the terminal
        context.load_cert_chain(cert_path, key_path, password=b"")
    except (ssl.SSLError, OSError) as exc:
        return [
            f"{KEY_ENV}={key_path} is not an unencrypted PEM private key of the certificate in {CERT_ENV}"
            f" ({_reason(exc)})"
        ]
    return []


def _reason(exc: Exception) -> str:
    return getattr(exc, "reason", None) or type(exc).__name__


__all__ = [
    "CA_ENV",
    "CERT_ENV",
    "KEY_ENV",
    "SERVER_NAME_ENV",
    "TlsConfig",
    "TlsMode",
    "client_credentials_from_env",
    "server_name_options",
]
