"""Composition root of the kafka-gateway: settings -> typed clients -> handlers -> Kafka TCP server.

The gateway is the fifth oncelog process. It speaks Kafka's binary protocol to unmodified Kafka clients on
``kafka_listen`` and translates each request into calls on the other services (docs/kafka-compatibility.md). Like
every oncelog process it runs under :func:`oncelog.rpc.runner.run_service`: its gRPC ``listen`` address serves
health and reflection (probes, drains), SIGTERM drains it, and the ready file carries its ``kafka_address``. It
holds no durable state and registers nowhere; ``ONCELOG_BOOTSTRAP`` names the cluster.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from oncelog.client.services import (
    ClusterClient,
    GroupOffsetsClient,
    PartitionStorageClient,
    TransactionCoordinatorClient,
)
from oncelog.config import ConfigError
from oncelog.kafka_gateway.admin_servicer import AdminServicer
from oncelog.kafka_gateway.classic_groups import ClassicMembers
from oncelog.kafka_gateway.config import KafkaGatewaySettings
from oncelog.kafka_gateway.connection import KafkaServer
from oncelog.kafka_gateway.data_servicer import DataServicer
from oncelog.kafka_gateway.group_servicer import GroupServicer
from oncelog.kafka_gateway.producer_epochs import TransactionalIdentities
from oncelog.kafka_gateway.protocol import Request, encode_response
from oncelog.kafka_gateway.relay import TransactionalRelay
from oncelog.kafka_gateway.routing import ClusterRoutes
from oncelog.kafka_gateway.txn_servicer import TxnServicer
from oncelog.rpc import ServiceSpec
from oncelog.rpc.channels import ChannelFactory, ChannelPool
from oncelog.rpc.runner import run_service

NAME = "kafka-gateway"
log = logging.getLogger("oncelog.kafka_gateway")


class KafkaGateway:
    """The Kafka listener and the clients of the oncelog services behind it."""

    def __init__(self, settings: KafkaGatewaySettings, channels: ChannelFactory | None = None) -> None:
        self.settings = settings
        self._pool = ChannelPool(channels or ChannelFactory.from_settings(settings))
        host, _, port = settings.kafka_listen.rpartition(":")
        self.server = KafkaServer(
            self.handle,
            host=host,
            port=int(port),
            max_frame_bytes=settings.max_frame_bytes,
            max_queued_requests=settings.max_queued_requests,
            ssl_context=kafka_ssl_context(settings),
        )
        self.identities = TransactionalIdentities()
        self.members = ClassicMembers()
        self._handlers: dict[int, Callable[[Request], Awaitable[dict[str, Any] | None]]] = {}
        self.relay: TransactionalRelay | None = None
        self.address = ""

    async def start(self) -> str:
        """Bind the Kafka listener and wire the handlers; returns the address Kafka clients use."""
        bound = await self.server.start()
        self.address = self.settings.kafka_advertise or bound
        timeout = self.settings.request_timeout_s
        cluster = ClusterClient(self._pool.get, timeout_s=timeout)
        routes = ClusterRoutes(cluster, self.settings.bootstrap.split(","))
        storage = PartitionStorageClient(self._pool.get, timeout_s=timeout)
        txn_client = TransactionCoordinatorClient(self._pool.get, timeout_s=timeout)
        data = DataServicer(
            routes=routes,
            cluster=cluster,
            storage=storage,
            identities=self.identities,
            brokers=self.settings.broker_list(self.address),
            timeout_s=timeout,
        )
        groups = GroupOffsetsClient(self._pool.get, timeout_s=timeout)
        txn = TxnServicer(
            routes=routes,
            txn=txn_client,
            groups=groups,
            identities=self.identities,
            members=self.members,
            timeout_s=timeout,
        )
        classic = GroupServicer(routes=routes, groups=groups, members=self.members, timeout_s=timeout)
        admin = AdminServicer(routes=routes, cluster=cluster, txn=txn_client, storage=storage, timeout_s=timeout)
        self._handlers = {**data.handlers(), **txn.handlers(), **classic.handlers(), **admin.handlers()}
        self.relay = TransactionalRelay(
            self.settings.broker_id,
            data.broker_for,
            ssl_context=relay_ssl_context(self.settings),
            timeout_s=timeout,
        )
        log.info("kafka-gateway serving Kafka clients on %s (cluster %s)", self.address, self.settings.bootstrap)
        return self.address

    async def handle(self, request: Request) -> bytes | None:
        """Answer one request (each connection calls this in order); a transactional id's requests are answered by
        its home gateway (``relay.py``).

        Raises:
            RelayFailed: the home gateway could not answer; the connection is closed and the client retries.
        """
        if self.relay is not None and (home := self.relay.home(request)) is not None:
            return await self.relay.relay(home, request)
        body = await self._handlers[request.api_key](request)
        if body is None:
            return None
        return encode_response(request.api_key, request.version, request.correlation_id, body)

    async def stop(self) -> None:
        """Close the listener, every Kafka connection and every channel."""
        await self.server.stop()
        if self.relay is not None:
            await self.relay.close()
        await self._pool.close()


def kafka_ssl_context(settings: KafkaGatewaySettings) -> ssl.SSLContext | None:
    """The Kafka listener's TLS (``ONCELOG_KAFKA_GATEWAY_KAFKA_TLS_*``), or None for plaintext.

    As on every oncelog listener a certificate and key turn TLS on and a CA bundle makes client certificates
    required (mutual TLS, Kafka's ``ssl.client.auth=required``); TLS 1.2 is the oldest version accepted.

    Raises:
        ConfigError: a file is missing, not PEM, or the key does not belong to the certificate (named).
    """
    problems = settings.kafka_tls_problems()
    if problems:
        raise ConfigError(problems)
    if not settings.kafka_tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    prefix = settings.ENV_PREFIX
    try:
        context.load_cert_chain(settings.kafka_tls_cert, settings.kafka_tls_key)
    except (ssl.SSLError, OSError) as exc:
        raise ConfigError(
            [f"{prefix}KAFKA_TLS_CERT / {prefix}KAFKA_TLS_KEY: not a PEM certificate and its matching key ({exc})"]
        ) from exc
    if settings.kafka_tls_ca:
        try:
            context.load_verify_locations(cafile=settings.kafka_tls_ca)
        except (ssl.SSLError, OSError) as exc:
            raise ConfigError([f"{prefix}KAFKA_TLS_CA={settings.kafka_tls_ca}: not a PEM CA bundle ({exc})"]) from exc
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def relay_ssl_context(settings: KafkaGatewaySettings) -> ssl.SSLContext | None:
    """The client side of TLS for requests relayed to another gateway (``relay.py``), or None when the Kafka
    listeners are plaintext.

    The other gateway's certificate is trusted when the system's trust store, ``KAFKA_TLS_CA`` or this gateway's own
    listener certificate vouches for it (replicas usually share one certificate, which may come from a private CA),
    and its name must match the address the other gateway advertises. This gateway shows its own listener
    certificate, for listeners that require a client certificate (it then needs the clientAuth usage too).
    """
    if not settings.kafka_tls_cert:
        return None
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=settings.kafka_tls_ca or None)
    context.load_verify_locations(cafile=settings.kafka_tls_cert)
    context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # a shared leaf certificate is a trust anchor itself
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.kafka_tls_cert, settings.kafka_tls_key)
    return context


def build(settings: KafkaGatewaySettings) -> ServiceSpec:
    """Wire the process: gRPC health on ``listen``, the Kafka listener started with the server."""
    spec = ServiceSpec(name=NAME)
    gateway = KafkaGateway(settings)

    async def start(_grpc_address: str) -> None:
        spec.ready_info["kafka_address"] = await gateway.start()

    spec.on_start.append(start)
    spec.on_stop.append(gateway.stop)
    return spec


def main() -> int:
    """Console entry point: ``oncelog-kafka-gateway`` / ``python -m oncelog.kafka_gateway``."""
    return run_service(NAME, _load, build, settings_class=KafkaGatewaySettings)  # type: ignore[arg-type]


def _load() -> KafkaGatewaySettings:
    settings = KafkaGatewaySettings.from_env()
    kafka_ssl_context(settings)  # read the listener's certificate now: a broken one exits 2 like a bad setting
    return settings
