"""One JSON-lines log format for every oncelog process, carrying the active trace and span ids."""

from __future__ import annotations

import json
import logging
import sys
import time

from opentelemetry import trace


class JsonFormatter(logging.Formatter):
    """Format records as one JSON object per line with ``trace_id``/``span_id`` when a span is active."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "service": self.service,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        ctx = trace.get_current_span().get_span_context()
        if ctx.is_valid:
            entry["trace_id"] = format(ctx.trace_id, "032x")
            entry["span_id"] = format(ctx.span_id, "016x")
        for key, value in getattr(record, "fields", {}).items():
            entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(service: str, level: str = "INFO") -> None:
    """Route the root logger to stderr as JSON lines; idempotent."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, "_oncelog", False):
            root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(service))
    handler._oncelog = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(level.upper())
