"""TxnCoordinatorSettings, read from ``ONCELOG_TXN_COORDINATOR_*`` and the shared ``ONCELOG_*`` variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings


@dataclass(frozen=True)
class TxnCoordinatorSettings(ServiceSettings):
    """Settings of the txn-coordinator process."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_TXN_COORDINATOR_"
