"""KafkaGatewaySettings, read from ``ONCELOG_KAFKA_GATEWAY_*`` and the shared ``ONCELOG_*`` variables."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings
from oncelog.config.settings import setting


@dataclass(frozen=True)
class KafkaGatewaySettings(ServiceSettings):
    """Settings of the kafka-gateway process.

    ``listen`` serves gRPC health (and reflection) only, like every oncelog process, for probes and drains; Kafka
    clients connect to ``kafka_listen``. The gateway keeps no catalog connection: ``database_url`` is unused.
    """

    ENV_PREFIX: ClassVar[str] = "ONCELOG_KAFKA_GATEWAY_"

    kafka_listen: str = setting("127.0.0.1:9092", help="host:port of the Kafka listener; port 0 picks a free port")
    kafka_advertise: str = setting(
        "", help="host:port Kafka clients reach this gateway at (Metadata's broker address); default the bound address"
    )

    bootstrap: str = setting(
        "",
        env="ONCELOG_BOOTSTRAP",
        help="comma-separated host:port of oncelog processes (any of them: every process serves ClusterService)",
    )
    broker_id: int = setting(0, help="this gateway's broker id in Metadata answers (0, 1, ... one per replica)")
    brokers: str = setting(
        "",
        help="every gateway replica as id@host:port, comma-separated, for Metadata answers (partition leaders and"
        " coordinators are spread over them); default: this gateway alone at its advertised address",
    )
    max_frame_bytes: int = setting(
        100 * 1024 * 1024, help="largest Kafka request accepted (Kafka's socket.request.max.bytes); larger closes"
    )
    max_queued_requests: int = setting(
        16, help="requests one connection may have waiting before the gateway stops reading it (back-pressure)"
    )
    request_timeout_s: float = setting(30.0, help="deadline of each call the gateway makes to the oncelog services")
    kafka_tls_cert: str = setting(
        "", help="PEM certificate chain of the Kafka listener; with kafka_tls_key Kafka clients connect with SSL"
    )
    kafka_tls_key: str = setting("", help="PEM private key of kafka_tls_cert (unencrypted)")
    kafka_tls_ca: str = setting(
        "", help="PEM CA bundle: Kafka clients must then present a certificate it signed (ssl.client.auth=required)"
    )

    def broker_list(self, own_address: str) -> list[tuple[int, str, int]]:
        """(broker id, host, port) of every gateway replica; this one alone at ``own_address`` by default."""
        if not self.brokers:
            host, _, port = own_address.rpartition(":")
            return [(self.broker_id, host, int(port))]
        brokers = []
        for item in self.brokers.split(","):
            node, _, address = item.strip().partition("@")
            host, _, port = address.rpartition(":")
            brokers.append((int(node), host, int(port)))
        return brokers

    def kafka_tls_problems(self) -> list[str]:
        """An incomplete certificate/key pair, a CA without them, files that cannot be read (each named)."""
        cert, key, ca = (f"{self.ENV_PREFIX}KAFKA_TLS_{n}" for n in ("CERT", "KEY", "CA"))
        problems = []
        if bool(self.kafka_tls_cert) != bool(self.kafka_tls_key):
            problems.append(f"{cert} and {key} go together: the Kafka listener's certificate needs its private key")
        if self.kafka_tls_ca and not self.kafka_tls_cert:
            problems.append(f"{ca} is set but {cert} is not: verifying Kafka clients' certificates needs TLS")
        for variable, path in ((cert, self.kafka_tls_cert), (key, self.kafka_tls_key), (ca, self.kafka_tls_ca)):
            if path and not os.access(path, os.R_OK):
                problems.append(f"{variable}={path} cannot be read")
        return problems

    def validate(self) -> list[str]:
        problems = super().validate()
        if not self.bootstrap:
            problems.append("ONCELOG_BOOTSTRAP is required: host:port of any oncelog process")
        if self.brokers:
            for item in self.brokers.split(","):
                node, at, address = item.strip().partition("@")
                host, _, port = address.rpartition(":")
                if not (at and node.isdigit() and host and port.isdigit()):
                    problems.append(
                        f"ONCELOG_KAFKA_GATEWAY_BROKERS entry {item.strip()!r} must be id@host:port (0@gw-0:9092)"
                    )
            if str(self.broker_id) not in {i.strip().partition("@")[0] for i in self.brokers.split(",")}:
                problems.append(
                    f"ONCELOG_KAFKA_GATEWAY_BROKER_ID={self.broker_id} is not one of ONCELOG_KAFKA_GATEWAY_BROKERS"
                )
        for name in ("kafka_listen", "kafka_advertise"):
            value = getattr(self, name)
            host, _, port = value.rpartition(":")
            if (value or name == "kafka_listen") and not (host and port.isdigit() and int(port) <= 65535):
                problems.append(f"ONCELOG_KAFKA_GATEWAY_{name.upper()}={value!r} must be host:port (port 0-65535)")
        if self.broker_id < 0:
            problems.append(f"ONCELOG_KAFKA_GATEWAY_BROKER_ID={self.broker_id} must be 0 or more")
        if not 1024 <= self.max_frame_bytes <= 1 << 30:
            problems.append(f"ONCELOG_KAFKA_GATEWAY_MAX_FRAME_BYTES={self.max_frame_bytes}; use 1024..1073741824")
        if not 1 <= self.max_queued_requests <= 1000:
            problems.append(f"ONCELOG_KAFKA_GATEWAY_MAX_QUEUED_REQUESTS={self.max_queued_requests}; use 1..1000")
        problems += self.kafka_tls_problems()
        if self.request_timeout_s <= 0:
            problems.append(f"ONCELOG_KAFKA_GATEWAY_REQUEST_TIMEOUT_S={self.request_timeout_s} must be positive")
        return problems
