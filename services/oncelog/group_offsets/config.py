"""GroupOffsetsSettings, read from ``ONCELOG_GROUP_OFFSETS_*`` and the shared ``ONCELOG_*`` variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings


@dataclass(frozen=True)
class GroupOffsetsSettings(ServiceSettings):
    """Settings of the group-offsets process."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_GROUP_OFFSETS_"
