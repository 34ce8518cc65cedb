"""PidAllocatorSettings, read from ``ONCELOG_PID_ALLOCATOR_*`` and the shared ``ONCELOG_*`` variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings
from oncelog.config.settings import setting


@dataclass(frozen=True)
class PidAllocatorSettings(ServiceSettings):
    """Settings of the pid-allocator process."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_PID_ALLOCATOR_"

    block_size: int = setting(1000, help="ids per block when a request does not ask for a size (Kafka: 1000)")

    def validate(self) -> list[str]:
        problems = super().validate()
        if not 1 <= self.block_size <= 1_000_000:
            problems.append(f"block_size={self.block_size}; use 1..1000000")
        return problems
