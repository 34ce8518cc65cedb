"""Server and client interceptors: OpenTelemetry spans, W3C trace propagation, and error translation.

Server side, every call runs inside a SERVER span whose parent is the ``traceparent`` the client sent, and
an :class:`~oncelog.errors.OncelogError` escaping the servicer becomes a precise status with an
``ErrorInfo`` detail (see :mod:`oncelog.rpc.errors`); any other exception becomes INTERNAL /
UNKNOWN_SERVER_ERROR and is logged, and the server keeps serving. Every served call (health and reflection
excepted) is timed into ``oncelog.rpc.server.duration`` with its method and status code. Client side, each
call runs inside a CLIENT span and carries the active context in its metadata, so one user action is one trace.

Spans of a request that names a transactional id (InitProducerId, AddPartitionsToTxn, EndTxn, Produce,
TxnOffsetCommit...) carry it as ``oncelog.transactional_id`` on both sides, so a transaction's calls can be
found in Tempo by that attribute. It is a span attribute only, never a metric label (unbounded cardinality).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import grpc
from grpc import aio
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.metrics import MeterProvider
from opentelemetry.propagators.textmap import Getter
from opentelemetry.trace import SpanKind, Status, StatusCode, TracerProvider

from oncelog.errors import OncelogError, UnknownServerError
from oncelog.rpc.errors import to_status
from oncelog.telemetry.metrics import OncelogMetrics, default_metrics

log = logging.getLogger("oncelog.rpc")
_TRACER_NAME = "oncelog.rpc"


def _split_method(full_method: str) -> tuple[str, str]:
    service, _, method = full_method.lstrip("/").partition("/")
    return service, method


def _rpc_attributes(full_method: str) -> dict[str, str]:
    service, method = _split_method(full_method)
    return {"rpc.system": "grpc", "rpc.service": service, "rpc.method": method}


TRANSACTIONAL_ID_ATTRIBUTE = "oncelog.transactional_id"
"""Span attribute naming the transaction a call belongs to (what Tempo is searched by)."""


def _annotate(span: trace.Span, request: Any) -> None:
    """Put the request's transactional id on ``span`` (a request stream or a message without one adds nothing)."""
    transactional_id = getattr(request, "transactional_id", None)
    if isinstance(transactional_id, str) and transactional_id:
        span.set_attribute(TRANSACTIONAL_ID_ATTRIBUTE, transactional_id)


class _MetadataGetter(Getter[Sequence[tuple[str, Any]]]):
    def get(self, carrier: Sequence[tuple[str, Any]], key: str) -> list[str] | None:
        values = [v for k, v in carrier if k == key and isinstance(v, str)]
        return values or None

    def keys(self, carrier: Sequence[tuple[str, Any]]) -> list[str]:
        return [k for k, _ in carrier]


_GETTER = _MetadataGetter()


class ServerInterceptor(aio.ServerInterceptor):
    """Wrap every handler of a grpc.aio server with a span, a duration measurement and domain-error translation."""

    def __init__(
        self, tracer_provider: TracerProvider | None = None, meter_provider: MeterProvider | None = None
    ) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)
        self._metrics: OncelogMetrics = default_metrics() if meter_provider is None else OncelogMetrics(meter_provider)

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(handler_call_details)
        if handler is None:
            return None
        method = handler_call_details.method
        if method.startswith("/grpc.health.v1.Health/") or method.startswith("/grpc.reflection."):
            return handler
        metadata = tuple(handler_call_details.invocation_metadata or ())
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(
                self._wrap_unary(handler.unary_unary, method, metadata),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(
                self._wrap_stream(handler.unary_stream, method, metadata),
                handler.request_deserializer,
                handler.response_serializer,
            )
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(
                self._wrap_unary(handler.stream_unary, method, metadata),
                handler.request_deserializer,
                handler.response_serializer,
            )
        return grpc.stream_stream_rpc_method_handler(
            self._wrap_stream(handler.stream_stream, method, metadata),
            handler.request_deserializer,
            handler.response_serializer,
        )

    def _start_span(self, method: str, metadata: Sequence[tuple[str, Any]]) -> tuple[trace.Span, Any]:
        parent = propagate.extract(metadata, getter=_GETTER)
        token = otel_context.attach(parent)
        span = self._tracer.start_span(method.lstrip("/"), kind=SpanKind.SERVER, attributes=_rpc_attributes(method))
        return span, token

    async def _handle_error(
        self, exc: BaseException, span: trace.Span, context: aio.ServicerContext, outcome: list[grpc.StatusCode]
    ) -> None:
        if isinstance(exc, OncelogError):
            err = exc
        else:
            log.exception("unexpected error while serving a call")
            err = UnknownServerError(f"internal error: {type(exc).__name__}: {exc}")
        code, message, trailers = to_status(err)
        outcome[0] = code
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        span.set_attribute("oncelog.error.reason", err.reason.name)
        span.set_status(Status(StatusCode.ERROR, message))
        await context.abort(code, message, trailing_metadata=trailers)

    def _wrap_unary(self, behavior: Callable[..., Awaitable[Any]], method: str, metadata: Sequence[tuple[str, Any]]):
        async def wrapper(request_or_iterator: Any, context: aio.ServicerContext) -> Any:
            started = time.perf_counter()
            outcome = [grpc.StatusCode.UNKNOWN]
            span, token = self._start_span(method, metadata)
            _annotate(span, request_or_iterator)
            try:
                with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
                    try:
                        response = await behavior(request_or_iterator, context)
                    except aio.AbortError:
                        outcome[0] = _aborted_code(context)
                        raise
                    except Exception as exc:
                        await self._handle_error(exc, span, context, outcome)
                        raise  # unreachable: abort raises
                    except asyncio.CancelledError:
                        outcome[0] = grpc.StatusCode.CANCELLED
                        raise
                    outcome[0] = grpc.StatusCode.OK
                    span.set_attribute("rpc.grpc.status_code", 0)
                    return response
            finally:
                otel_context.detach(token)
                self._record(method, outcome[0], started)

        return wrapper

    def _wrap_stream(
        self, behavior: Callable[..., AsyncIterator[Any]], method: str, metadata: Sequence[tuple[str, Any]]
    ):
        async def wrapper(request_or_iterator: Any, context: aio.ServicerContext) -> AsyncIterator[Any]:
            started = time.perf_counter()
            outcome = [grpc.StatusCode.UNKNOWN]
            span, token = self._start_span(method, metadata)
            _annotate(span, request_or_iterator)
            try:
                with trace.use_span(span, end_on_exit=True, record_exception=False, set_status_on_exception=False):
                    try:
                        async for item in behavior(request_or_iterator, context):
                            yield item
                    except aio.AbortError:
                        outcome[0] = _aborted_code(context)
                        raise
                    except Exception as exc:
                        await self._handle_error(exc, span, context, outcome)
                        raise
                    except (asyncio.CancelledError, GeneratorExit):
                        outcome[0] = grpc.StatusCode.CANCELLED
                        raise
                    outcome[0] = grpc.StatusCode.OK
                    span.set_attribute("rpc.grpc.status_code", 0)
            finally:
                otel_context.detach(token)
                self._record(method, outcome[0], started)

        return wrapper

    def _record(self, method: str, code: grpc.StatusCode, started: float) -> None:
        try:
            self._metrics.record_rpc_server_duration(method, code.value[0], time.perf_counter() - started)
        except Exception:
            # a metrics failure must never turn a served call into an error
            log.exception("recording the call duration failed")


def _aborted_code(context: aio.ServicerContext) -> grpc.StatusCode:
    """The status a servicer aborted with (``context.abort``); UNKNOWN if the context does not say."""
    code = context.code() if hasattr(context, "code") else None
    if isinstance(code, grpc.StatusCode):
        return code
    if isinstance(code, int):
        return next((c for c in grpc.StatusCode if c.value[0] == code), grpc.StatusCode.UNKNOWN)
    return grpc.StatusCode.UNKNOWN


def _inject(metadata: Sequence[tuple[str, Any]] | None) -> list[tuple[str, Any]]:
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    merged = list(metadata or ())
    merged.extend(carrier.items())
    return merged


def _with_metadata(details: Any, metadata: list[tuple[str, Any]]) -> Any:
    return details._replace(metadata=metadata) if hasattr(details, "_replace") else details


class _ClientSpanMixin:
    def __init__(self, tracer_provider: TracerProvider | None = None) -> None:
        self._tracer = trace.get_tracer(_TRACER_NAME, tracer_provider=tracer_provider)

    def _span(self, method: Any) -> trace.Span:
        name = method.decode() if isinstance(method, bytes) else str(method)
        return self._tracer.start_span(name.lstrip("/"), kind=SpanKind.CLIENT, attributes=_rpc_attributes(name))


def _finish(span: trace.Span, code: grpc.StatusCode | None, details: str | None = None) -> None:
    if code is not None:
        span.set_attribute("rpc.grpc.status_code", code.value[0])
        if code != grpc.StatusCode.OK:
            span.set_status(Status(StatusCode.ERROR, details or code.name))
    span.end()


class AioClientInterceptor(
    _ClientSpanMixin,
    aio.UnaryUnaryClientInterceptor,
    aio.UnaryStreamClientInterceptor,
    aio.StreamUnaryClientInterceptor,
    aio.StreamStreamClientInterceptor,
):
    """CLIENT span + trace-context injection for every call on a grpc.aio channel."""

    async def _call(self, continuation: Any, details: Any, request: Any) -> Any:
        span = self._span(details.method)
        if not span.is_recording():
            # tracing off (no exporter): nothing to annotate, end or wait for, but the caller's trace context
            # still travels on, so a downstream service that records joins the caller's trace
            with trace.use_span(span, end_on_exit=False):
                return await continuation(_with_metadata(details, _inject(details.metadata)), request)
        _annotate(span, request)
        with trace.use_span(span, end_on_exit=False):
            call = await continuation(_with_metadata(details, _inject(details.metadata)), request)

        if hasattr(call, "add_done_callback"):
            call.add_done_callback(lambda c: self._on_done(span, c))
        else:
            span.end()
        return call

    @staticmethod
    def _on_done(span: trace.Span, call: Any) -> None:
        # the callback runs after the call finished, so code() resolves without waiting
        async def record() -> None:
            try:
                code = await call.code()
                details = await call.details()
            except Exception:
                code, details = None, None
            _finish(span, code, details)

        try:
            asyncio.get_running_loop().create_task(record())
        except RuntimeError:
            span.end()

    async def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await self._call(continuation, client_call_details, request)

    async def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return await self._call(continuation, client_call_details, request)

    async def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await self._call(continuation, client_call_details, request_iterator)

    async def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return await self._call(continuation, client_call_details, request_iterator)


class _SyncDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: list[tuple[str, Any]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class SyncClientInterceptor(
    _ClientSpanMixin,
    grpc.UnaryUnaryClientInterceptor,
    grpc.UnaryStreamClientInterceptor,
    grpc.StreamUnaryClientInterceptor,
    grpc.StreamStreamClientInterceptor,
):
    """CLIENT span + trace-context injection for every call on a blocking channel."""

    def _call(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        span = self._span(details.method)
        _annotate(span, request)
        with trace.use_span(span, end_on_exit=False):
            response = continuation(_SyncDetails(details, _inject(details.metadata)), request)
        if hasattr(response, "add_done_callback"):
            response.add_done_callback(lambda f: _finish(span, f.code(), f.details()))
        else:
            _finish(span, None)
        return response

    def intercept_unary_unary(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return self._call(continuation, client_call_details, request)

    def intercept_unary_stream(self, continuation: Any, client_call_details: Any, request: Any) -> Any:
        return self._call(continuation, client_call_details, request)

    def intercept_stream_unary(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return self._call(continuation, client_call_details, request_iterator)

    def intercept_stream_stream(self, continuation: Any, client_call_details: Any, request_iterator: Any) -> Any:
        return self._call(continuation, client_call_details, request_iterator)
