"""The ready-made check-back service of the outbox: answers the coordinator's CheckTransaction from the outbox table.

The verdict is the token's claim (:func:`~oncelog.outbox.table.claim`): COMMIT when the application's database
transaction wrote the token's row, ROLLBACK when nothing did (and now nothing can), UNKNOWN when the database
cannot be asked right now (the coordinator asks again). Calls are traced by the server interceptor like every
oncelog server.

:class:`CheckBackServer` runs it on its own thread for a synchronous application; :class:`OutboxCheckServicer` is the
servicer for an application that already runs a ``grpc.aio`` server.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from oncelog.api.txn import v1 as pb
from oncelog.api.txn.v1 import transaction_check_service_pb2
from oncelog.client.records import PreparedTransaction
from oncelog.errors import InvalidRequest
from oncelog.rpc import GrpcServer, ServiceSpec

from .table import claim

log = logging.getLogger("oncelog.outbox")

SERVICE_NAME = transaction_check_service_pb2.DESCRIPTOR.services_by_name["TransactionCheckService"].full_name


class OutboxCheckServicer(pb.TransactionCheckServiceServicer):
    """TransactionCheckService over the outbox table.

    Args:
        engine: the application's database (where the outbox table is).
        owns: which transactional ids this application answers for; others get UNKNOWN. All by default.
    """

    def __init__(self, engine: Engine, owns: Callable[[str], bool] | None = None) -> None:
        self._engine = engine
        self._owns = owns
        self.calls = 0
        """CheckTransaction calls answered so far (for operators and tests)."""

    async def CheckTransaction(
        self, request: pb.CheckTransactionRequest, context: object
    ) -> pb.CheckTransactionResponse:
        self.calls += 1
        if not request.HasField("prepared_transaction"):
            raise InvalidRequest("prepared_transaction (the token) is required")
        t = request.prepared_transaction
        if t.transactional_id != request.transactional_id:
            raise InvalidRequest(
                f"the token names transactional id {t.transactional_id!r}, the request {request.transactional_id!r}"
            )
        if self._owns is not None and not self._owns(t.transactional_id):
            return pb.CheckTransactionResponse(result=pb.TRANSACTION_CHECK_RESULT_UNKNOWN)
        token = PreparedTransaction(t.transactional_id, t.producer_id, t.producer_epoch)
        try:
            committed = await asyncio.to_thread(claim, self._engine, token)
        except sa.exc.OperationalError as error:
            log.warning("check-back of %s: the database cannot answer now: %s", token.to_text(), error)
            return pb.CheckTransactionResponse(result=pb.TRANSACTION_CHECK_RESULT_UNKNOWN)
        log.info("check-back of %s: %s", token.to_text(), "commit" if committed else "rollback")
        verdict = pb.TRANSACTION_CHECK_RESULT_COMMIT if committed else pb.TRANSACTION_CHECK_RESULT_ROLLBACK
        return pb.CheckTransactionResponse(result=verdict)


def check_back_spec(servicer: pb.TransactionCheckServiceServicer, name: str = "outbox-check-back") -> ServiceSpec:
    """A :class:`~oncelog.rpc.ServiceSpec` serving ``servicer`` (with health and reflection, traced)."""
    spec = ServiceSpec(name)
    spec.add(pb.add_TransactionCheckServiceServicer_to_server, servicer, SERVICE_NAME)
    return spec


class CheckBackServer:
    """Serve :class:`OutboxCheckServicer` (or any TransactionCheckService servicer) on a background thread.

    Example::

        with CheckBackServer(engine, "0.0.0.0:7070", advertise="orders-app:7070") as check_back:
            producer.prepare_transaction(check_back_address=check_back.address)

    Args:
        engine: the application's database; ignored when ``servicer`` is given.
        listen: host:port to bind (port 0 picks a free one).
        advertise: the address the coordinator dials, when it differs from the bound one.
        servicer: a servicer of its own instead of the outbox's.
    """

    def __init__(
        self,
        engine: Engine | None,
        listen: str = "127.0.0.1:0",
        *,
        advertise: str = "",
        servicer: pb.TransactionCheckServiceServicer | None = None,
    ) -> None:
        if servicer is None:
            if engine is None:
                raise ValueError("pass the application's engine (or a servicer of its own)")
            servicer = OutboxCheckServicer(engine)
        self.servicer = servicer
        self._listen, self._advertise = listen, advertise
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="outbox-check-back", daemon=True)
        self._server: GrpcServer | None = None
        self.address = ""

    def start(self) -> str:
        """Bind and serve; returns the address to give ``prepare_transaction(check_back_address=...)``."""
        self._thread.start()

        async def start() -> tuple[GrpcServer, str]:
            # built on the loop: grpc.aio binds a server to the loop it is created on
            server = GrpcServer(check_back_spec(self.servicer), self._listen, advertise=self._advertise)
            return server, await server.start()

        self._server, self.address = asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=30)
        return self.address

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        server, self._server = self._server, None
        if server is not None:
            asyncio.run_coroutine_threadsafe(server.stop(), self._loop).result(timeout=30)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)

    def __enter__(self) -> CheckBackServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["CheckBackServer", "OutboxCheckServicer", "check_back_spec"]
