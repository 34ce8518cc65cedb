"""OpenTelemetry and logging setup shared by every oncelog process."""

from oncelog.telemetry.logging import configure_logging
from oncelog.telemetry.setup import Telemetry, configure_telemetry

__all__ = ["Telemetry", "configure_logging", "configure_telemetry"]
