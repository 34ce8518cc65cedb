"""Process entry point shared by every service: logging, telemetry, server, signals."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from collections.abc import Callable

import grpc

from oncelog.config import ConfigError, ServiceSettings
from oncelog.errors import OncelogError
from oncelog.rpc.allocator import keep_large_buffers
from oncelog.rpc.server import GrpcServer, ServiceSpec
from oncelog.rpc.tls import TlsConfig
from oncelog.telemetry import configure_logging, configure_telemetry

log = logging.getLogger("oncelog.rpc.runner")


async def serve(
    spec: ServiceSpec,
    settings: ServiceSettings,
    server_credentials: grpc.ServerCredentials | None = None,
    *,
    metrics_address: str = "",
) -> None:
    """Run ``spec`` until SIGTERM/SIGINT, then drain gracefully; TLS when ``server_credentials`` is given.

    ``metrics_address`` (the Prometheus scrape endpoint, if any) is written to the ready file next to the address.
    """
    server = GrpcServer(
        spec,
        settings.listen,
        advertise=settings.advertise,
        max_message_bytes=settings.max_message_bytes,
        drain_delay_s=settings.drain_delay_s,
        shutdown_grace_s=settings.shutdown_grace_s,
        ready_file=settings.ready_file,
        server_credentials=server_credentials,
        health_listen=settings.health_listen,
        metrics_address=metrics_address,
        external_listen=settings.external_listen,
        external_advertise=settings.external_advertise,
    )
    await server.start()
    watchdog = asyncio.create_task(_stop_when_orphaned(server, settings.parent_pid)) if settings.parent_pid else None
    try:
        await server.run_until_signal()
    finally:
        if watchdog is not None:
            watchdog.cancel()


async def _stop_when_orphaned(server: GrpcServer, parent_pid: int, interval_s: float = 0.5) -> None:
    """Drain the server once ``parent_pid`` is gone (this process was re-parented).

    A local cluster's services run in their own sessions so that Ctrl-C reaches only ``oncelog dev``; when the
    process that started them dies without stopping them (SIGKILL, a test timeout), they would otherwise serve
    on, unseen, holding ports and CPU.
    """
    while os.getppid() == parent_pid:
        await asyncio.sleep(interval_s)
    log.warning("parent process %d is gone; draining", parent_pid)
    await server.stop()


def _usage(name: str, settings_cls: type[ServiceSettings]) -> str:
    return (
        f"usage: oncelog-{name} [--help]\n\n"
        f"Runs the oncelog {name} service until SIGTERM or SIGINT (then drains). It takes no arguments: every\n"
        "setting comes from an environment variable:\n\n"
        f"{settings_cls.help_text()}\n"
    )


def run_service(
    name: str,
    load: Callable[[], ServiceSettings],
    build: Callable[[ServiceSettings], ServiceSpec],
    argv: list[str] | None = None,
    *,
    settings_class: type[ServiceSettings] | None = None,
) -> int:
    """``main()`` of a service: read settings, build the spec, serve; exit code 2 on bad configuration.

    ``--help`` (or ``-h``) prints the settings and exits 0 before anything is opened or bound; any other
    argument is refused with exit code 2, as settings come from the environment only.
    """
    argv = sys.argv[1:] if argv is None else argv
    if any(arg in ("-h", "--help") for arg in argv):
        # the class whose variables --help lists: given, else the class of a bound ``Settings.from_env``
        listed: type[ServiceSettings] = (
            settings_class if settings_class is not None else getattr(load, "__self__", ServiceSettings)
        )
        print(_usage(name, listed), end="")
        return 0
    if argv:
        print(
            f"oncelog-{name}: unexpected argument(s) {' '.join(argv)}; settings come from environment variables "
            f"(see oncelog-{name} --help)",
            file=sys.stderr,
        )
        return 2
    configure_logging(name)
    keep_large_buffers()  # before the first request: fetched MiBs reuse heap memory instead of fresh pages
    try:
        settings = load()
        # read and check the certificate files now, so a broken Secret exits 2 like any other bad setting
        credentials = TlsConfig.from_settings(settings).server_credentials()
    except ConfigError as exc:
        print(f"oncelog-{name}: {exc}", file=sys.stderr)
        return 2
    try:
        telemetry = configure_telemetry(f"oncelog-{name}", metrics_listen=settings.metrics_listen)
    except ConfigError as exc:
        print(f"oncelog-{name}: {exc}", file=sys.stderr)
        return 2

    async def main() -> None:
        spec = await asyncio.to_thread(build, settings)
        await serve(spec, settings, credentials, metrics_address=telemetry.metrics_address)

    try:
        asyncio.run(main())
    except OncelogError as exc:
        log.error("%s failed to start: %s", name, exc.message)
        return 1
    finally:
        telemetry.shutdown()
    return 0
