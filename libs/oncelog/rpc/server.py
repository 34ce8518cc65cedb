"""Build and run a grpc.aio server for one oncelog service, with health, reflection and graceful drain.

Lifecycle (Temporal's worker shape plus grpc's graceful-shutdown example):

* ``start()`` registers the servicers, health and reflection, binds (port 0 allowed), runs the
  ``on_start`` hooks with the bound address, sets every service SERVING, and writes the ready file.
* ``stop()`` (SIGTERM/SIGINT, ``async with`` exit, or a direct call) sets NOT_SERVING, runs the ``on_drain``
  hooks while still serving, keeps answering for ``drain_delay_s`` so load balancers and kubelet probes notice,
  stops accepting calls while in-flight ones get up to ``shutdown_grace_s`` to finish, then runs the ``on_stop``
  hooks in reverse order. It is idempotent.

With TLS on, Kubernetes' native gRPC probes cannot connect (they speak plaintext only), so a server may open a
second, plaintext listener (``health_listen``) that serves nothing but ``grpc.health.v1.Health``, backed by
the same health servicer: probes see the drain exactly as clients do, and no oncelog RPC is reachable
without TLS.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from grpc import aio
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from oncelog.rpc.interceptors import ServerInterceptor

log = logging.getLogger("oncelog.rpc.server")

StartHook = Callable[[str], Awaitable[None]]
StopHook = Callable[[], Awaitable[None]]


@dataclass
class ServiceSpec:
    """What one service process serves; built by each service's ``build()`` and run by :class:`GrpcServer`.

    Attributes:
        name: kebab-case service name (``pid-allocator``), used in logs and telemetry.
        registrations: callables that add servicers to the server (``add_XServicer_to_server``).
        service_names: fully qualified gRPC service names, reported by health and reflection.
        on_start: hooks run after binding, with the advertised address (e.g. catalog registration).
        on_drain: hooks run when draining starts (health NOT_SERVING), while calls are still served (a storage
            node hands its partitions' leadership over here).
        on_stop: hooks run after the server stopped, in reverse order (background tasks, engines).
    """

    name: str
    registrations: list[Callable[[aio.Server], None]] = field(default_factory=list)
    service_names: list[str] = field(default_factory=list)
    on_start: list[StartHook] = field(default_factory=list)
    on_drain: list[StopHook] = field(default_factory=list)
    on_stop: list[StopHook] = field(default_factory=list)
    health_reporter: Callable[[bool], Awaitable[None]] | None = None
    external_registrations: dict[str, Callable[[aio.Server], None]] = field(default_factory=dict)
    """On the external listener, these registrations replace the default ones of the named services (the
    ClusterService answering with external addresses)."""
    external_address: str = ""
    """Set by the running server before the start hooks: host:port of the external listener, empty without one."""
    """Set by the running server: reports every service SERVING (True) or NOT_SERVING (False)."""
    ready_info: dict[str, str] = field(default_factory=dict)
    """Extra entries of the ready file, set by start hooks (the kafka-gateway's Kafka address)."""

    async def set_serving(self, serving: bool) -> None:
        """Report this process SERVING or NOT_SERVING on health (a fenced node withdraws); no-op before start."""
        if self.health_reporter is not None:
            await self.health_reporter(serving)

    def add(self, register: Callable[[Any, aio.Server], None], servicer: Any, service_name: str) -> None:
        """Register ``servicer`` with its generated ``add_…_to_server`` function under ``service_name``."""
        self.registrations.append(lambda server: register(servicer, server))
        self.service_names.append(service_name)

    def extend(self, other: ServiceSpec) -> None:
        """Merge another spec's servicers and hooks into this one (used for the shared ClusterService)."""
        self.registrations += other.registrations
        self.service_names += other.service_names
        self.external_registrations.update(other.external_registrations)
        self.on_start += other.on_start
        self.on_drain += other.on_drain
        self.on_stop += other.on_stop


class GrpcServer:
    """One grpc.aio server running a :class:`ServiceSpec`."""

    def __init__(
        self,
        spec: ServiceSpec,
        listen: str,
        *,
        advertise: str = "",
        max_message_bytes: int = 64 * 1024 * 1024,
        drain_delay_s: float = 0.2,
        shutdown_grace_s: float = 10.0,
        ready_file: str = "",
        tracer_provider: Any = None,
        meter_provider: Any = None,
        server_credentials: grpc.ServerCredentials | None = None,
        health_listen: str = "",
        metrics_address: str = "",
        external_listen: str = "",
        external_advertise: str = "",
    ) -> None:
        self.spec = spec
        self._external_listen = external_listen
        self._external_advertise = external_advertise
        self._external_server: aio.Server | None = None
        self.external_address = ""
        """host:port clients outside reach the external listener at; empty when there is none."""
        self._listen = listen
        self._advertise = advertise
        self._drain_delay_s = drain_delay_s
        self._grace_s = shutdown_grace_s
        self._ready_file = ready_file
        self._credentials = server_credentials
        self._health_listen = health_listen
        self._metrics_address = metrics_address
        self._interceptors = [ServerInterceptor(tracer_provider, meter_provider)]
        self._options = [
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.max_receive_message_length", max_message_bytes),
            # a second process must never silently share a port another one is bound to
            ("grpc.so_reuseport", 0),
            # accept the client keepalive pings configured in channels.channel_options
            ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
            ("grpc.keepalive_permit_without_calls", 1),
        ]
        self._server = aio.server(interceptors=self._interceptors, options=self._options)
        self.health = health_aio.HealthServicer()
        self._health_server: aio.Server | None = None
        self.address = ""
        self.health_address = ""
        """host:port of the plaintext health-only listener; empty when there is none."""
        self._stopping: asyncio.Task[None] | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> str:
        """Bind, run start hooks, report SERVING; returns the advertised host:port."""
        for register in self.spec.registrations:
            register(self._server)
        port = self._bind_services(self._server, self._listen)  # bound whatever is advertised
        self.address = self._advertise or _reachable(self._listen, port)
        if self._external_listen:
            self._external_server = aio.server(interceptors=self._interceptors, options=self._options)
            for name, register in zip(self.spec.service_names, self.spec.registrations, strict=True):
                self.spec.external_registrations.get(name, register)(self._external_server)
            port = self._bind_services(self._external_server, self._external_listen)
            self.external_address = self._external_advertise or _reachable(self._external_listen, port)
            self.spec.external_address = self.external_address
        if self._health_listen:
            self._health_server = self._bind_health_only()
        await self._server.start()
        if self._external_server is not None:
            await self._external_server.start()
        if self._health_server is not None:
            await self._health_server.start()
        for hook in self.spec.on_start:
            await hook(self.address)
        await self._report_health(True)
        self.spec.health_reporter = self._report_health
        if self._ready_file:
            _write_ready_file(
                Path(self._ready_file),
                self.address,
                self.spec.name,
                self.health_address,
                self._metrics_address,
                self.external_address,
                self.spec.ready_info,
            )
        if self.external_address:
            log.info("%s external listener on %s", self.spec.name, self.external_address)
        if self.health_address:
            log.info("%s serving on %s, health only on %s", self.spec.name, self.address, self.health_address)
        else:
            log.info("%s serving on %s", self.spec.name, self.address)
        return self.address

    def _bind_services(self, server: aio.Server, listen: str) -> int:
        """Add health and reflection to ``server`` (its servicers are registered) and bind it; returns the port."""
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        names = [*self.spec.service_names, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name]
        reflection_names = [*names, reflection.SERVICE_NAME, REFLECTION_V1]
        reflection.enable_server_reflection(reflection_names, server)
        _add_reflection_v1(server, reflection_names)
        if self._credentials is not None:
            return server.add_secure_port(listen, self._credentials)
        return server.add_insecure_port(listen)

    async def _report_health(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for name in ["", *self.spec.service_names]:
            await self.health.set(name, status)

    def _bind_health_only(self) -> aio.Server:
        """Bind the plaintext listener that serves only the health service (bound before anything starts)."""
        server = aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        self.health_address = _reachable(self._health_listen, server.add_insecure_port(self._health_listen))
        return server

    async def stop(self) -> None:
        """Drain and stop; concurrent and repeated calls wait for the same shutdown."""
        if self._stopping is None:
            self._stopping = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._stopping)

    async def _shutdown(self) -> None:
        log.info("%s draining: health NOT_SERVING", self.spec.name)
        await self.health.enter_graceful_shutdown()
        for hook in self.spec.on_drain:
            try:
                await hook()
            except Exception:
                log.exception("drain hook failed")
        if self._drain_delay_s:
            await asyncio.sleep(self._drain_delay_s)
        await asyncio.gather(
            self._server.stop(self._grace_s),
            *([self._external_server.stop(self._grace_s)] if self._external_server is not None else []),
        )
        if self._health_server is not None:
            # after the main server: probes keep reading NOT_SERVING for the whole drain
            await self._health_server.stop(0)
        for hook in reversed(self.spec.on_stop):
            try:
                await hook()
            except Exception:
                log.exception("stop hook failed")
        self._stopped.set()
        log.info("%s stopped", self.spec.name)

    async def wait_stopped(self) -> None:
        """Wait until :meth:`stop` finished."""
        await self._stopped.wait()

    async def run_until_signal(self) -> None:
        """Serve until SIGTERM or SIGINT, then drain (the process entry point)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, lambda: asyncio.ensure_future(self.stop()))
        await self.wait_stopped()

    async def __aenter__(self) -> GrpcServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


REFLECTION_V1 = "grpc.reflection.v1.ServerReflection"
"""The stable reflection service (grpcurl and Postman try it first); grpcio-reflection ships only v1alpha."""


def _add_reflection_v1(server: aio.Server, service_names: list[str]) -> None:
    """Serve reflection v1 too: its messages are v1alpha's field for field, so v1alpha's servicer answers both."""
    from grpc_reflection.v1alpha import reflection_pb2
    from grpc_reflection.v1alpha._async import ReflectionServicer

    servicer = ReflectionServicer(service_names)
    handler = grpc.method_handlers_generic_handler(
        REFLECTION_V1,
        {
            "ServerReflectionInfo": grpc.stream_stream_rpc_method_handler(
                servicer.ServerReflectionInfo,
                request_deserializer=reflection_pb2.ServerReflectionRequest.FromString,
                response_serializer=reflection_pb2.ServerReflectionResponse.SerializeToString,
            )
        },
    )
    server.add_generic_rpc_handlers((handler,))


def _reachable(listen: str, port: int) -> str:
    """host:port a local client dials for a server bound to ``listen`` (wildcard hosts become loopback)."""
    host = listen.rsplit(":", 1)[0]
    if host in ("", "0.0.0.0", "[::]"):
        host = "127.0.0.1"
    return f"{host}:{port}"


def _write_ready_file(
    path: Path,
    address: str,
    service: str,
    health_address: str,
    metrics_address: str,
    external_address: str = "",
    extra: dict[str, str] | None = None,
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    content = {"address": address, "service": service, "pid": os.getpid()}
    if health_address:
        content["health_address"] = health_address
    if metrics_address:
        content["metrics_address"] = metrics_address
    if external_address:
        content["external_address"] = external_address
    content.update(extra or {})
    tmp.write_text(json.dumps(content))
    os.replace(tmp, path)
