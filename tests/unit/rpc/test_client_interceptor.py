"""The asyncio client interceptor with tracing off: the call goes through unannotated and unwaited-for, and the
caller's trace context still travels in its metadata (so a service that records joins the caller's trace)."""

from __future__ import annotations

from typing import Any

from grpc import aio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from oncelog.rpc.interceptors import AioClientInterceptor

PARENT = SpanContext(trace_id=0x1234, span_id=0x5678, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED))


class _Call:
    """What a continuation returns: a call whose end the recording interceptor waits for."""

    def __init__(self) -> None:
        self.callbacks: list[Any] = []

    def add_done_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)


async def _intercept(interceptor: AioClientInterceptor) -> tuple[_Call, list[tuple[str, Any]]]:
    seen: list[tuple[str, Any]] = []
    call = _Call()

    async def continuation(details: aio.ClientCallDetails, request: Any) -> _Call:
        seen.extend(details.metadata)
        return call

    details = aio.ClientCallDetails("/oncelog.x.v1.S/M", None, None, None, None)
    with trace.use_span(NonRecordingSpan(PARENT)):
        assert await interceptor.intercept_unary_unary(continuation, details, object()) is call
    return call, seen


async def test_without_tracing_the_callers_context_travels_and_nothing_waits_for_the_call() -> None:
    call, metadata = await _intercept(AioClientInterceptor(tracer_provider=trace.NoOpTracerProvider()))
    assert ("traceparent", f"00-{PARENT.trace_id:032x}-{PARENT.span_id:016x}-01") in metadata
    assert not call.callbacks, "no span to end: no callback, no task per call"


async def test_with_tracing_the_call_gets_a_child_span_that_ends_with_it() -> None:
    provider = TracerProvider()
    call, metadata = await _intercept(AioClientInterceptor(tracer_provider=provider))
    [traceparent] = [v for k, v in metadata if k == "traceparent"]
    assert traceparent.startswith(f"00-{PARENT.trace_id:032x}-") and f"-{PARENT.span_id:016x}-" not in traceparent
    assert len(call.callbacks) == 1
