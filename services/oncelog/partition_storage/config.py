"""PartitionStorageSettings, read from ``ONCELOG_PARTITION_STORAGE_*`` and the shared ``ONCELOG_*`` variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings


@dataclass(frozen=True)
class PartitionStorageSettings(ServiceSettings):
    """Settings of the partition-storage process."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_PARTITION_STORAGE_"
