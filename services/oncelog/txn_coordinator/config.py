"""TxnCoordinatorSettings, read from ``ONCELOG_TXN_COORDINATOR_*`` and the shared ``ONCELOG_*`` variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings
from oncelog.config.settings import setting
from oncelog.txn_coordinator.coordinator import DEFAULT_COMPLETION_WAIT_MS, DEFAULT_MAX_TRANSACTION_TIMEOUT_MS


@dataclass(frozen=True)
class TxnCoordinatorSettings(ServiceSettings):
    """Settings of the txn-coordinator process (Kafka's ``transaction.*`` broker configs where one exists)."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_TXN_COORDINATOR_"

    state_database_url: str = setting(
        "sqlite:///.oncelog/txn-coordinator.db",
        help="SQLAlchemy URL of the transaction table (the transaction log); replicas of the role share it",
    )
    lease_ms: int = setting(10_000, help="lifetime of a shard lease; renewed every third of it")
    transaction_max_timeout_ms: int = setting(
        DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, help="largest transaction timeout a producer may ask for"
    )
    transactional_id_expiration_ms: int = setting(
        7 * 24 * 3600 * 1000, help="idle time after which a transactional id without an open transaction is removed"
    )
    abort_check_interval_ms: int = setting(10_000, help="period of the sweep that aborts timed-out transactions")
    expiration_check_interval_ms: int = setting(
        3_600_000, help="period of the sweep that removes expired transactional ids"
    )
    marker_retry_backoff_ms: int = setting(100, help="first pause before a failed WriteTxnMarkers is sent again")
    marker_retry_backoff_max_ms: int = setting(1_000, help="the retry pause doubles up to this value")
    marker_request_timeout_ms: int = setting(30_000, help="deadline of one WriteTxnMarkers call")
    marker_max_participants_per_request: int = setting(
        1_000,
        help="most partitions and groups one WriteTxnMarkers request carries; the rest go in the next one "
        "(keeps a burst of transactions under the destination's message size limit)",
    )
    completion_wait_ms: int = setting(
        DEFAULT_COMPLETION_WAIT_MS,
        help="how long AddPartitions/AddOffsets/InitProducerId wait server-side for the previous transaction's "
        "markers before answering CONCURRENT_TRANSACTIONS (0: answer at once, as Kafka does)",
    )

    max_prepared_ms: int = setting(
        24 * 3600 * 1000,
        help="longest a prepared transaction (two-phase commit) may wait for its outcome; then check_back_default "
        "decides it (the transaction timeout does not apply to prepared transactions)",
    )
    check_back_after_ms: int = setting(
        60_000, help="age of a prepared transaction at which its check-back service is first asked for the outcome"
    )
    check_back_interval_ms: int = setting(30_000, help="pause between two check-back calls for one transaction")
    check_back_max_attempts: int = setting(
        15, help="check-back calls answered UNKNOWN (or failing) before check_back_default decides the transaction"
    )
    check_back_default: str = setting(
        "abort", help="outcome of a prepared transaction nobody decided (commit or abort; RocketMQ rolls back)"
    )
    check_back_timeout_ms: int = setting(5_000, help="deadline of one CheckTransaction call")
    check_back_sweep_interval_ms: int = setting(
        5_000, help="period of the check-back sweep (it also reports the prepared count and the oldest age)"
    )

    def validate(self) -> list[str]:
        problems = super().validate()
        if not self.state_database_url:
            problems.append("state_database_url must not be empty")
        elif self.state_database_url.startswith("sqlite") and not self.database_url.startswith("sqlite"):
            # A file local to each replica would give every replica its own transaction table: no fencing.
            problems.append(
                "ONCELOG_TXN_COORDINATOR_STATE_DATABASE_URL is a SQLite file while the catalog is a database "
                "server; replicas must share the transaction table, so point it at that server too"
            )
        for name in (
            "lease_ms",
            "transaction_max_timeout_ms",
            "transactional_id_expiration_ms",
            "abort_check_interval_ms",
            "expiration_check_interval_ms",
            "marker_retry_backoff_ms",
            "marker_retry_backoff_max_ms",
            "marker_request_timeout_ms",
            "marker_max_participants_per_request",
            "max_prepared_ms",
            "check_back_interval_ms",
            "check_back_max_attempts",
            "check_back_timeout_ms",
            "check_back_sweep_interval_ms",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        if self.check_back_default not in ("commit", "abort"):
            problems.append(f"check_back_default must be commit or abort, got {self.check_back_default!r}")
        if self.check_back_after_ms < 0:
            problems.append(f"check_back_after_ms must not be negative, got {self.check_back_after_ms}")
        if self.completion_wait_ms < 0:
            problems.append(f"completion_wait_ms must not be negative, got {self.completion_wait_ms}")
        if self.transaction_max_timeout_ms > 2**31 - 1:
            problems.append(f"transaction_max_timeout_ms={self.transaction_max_timeout_ms} does not fit in int32")
        if self.marker_retry_backoff_max_ms < self.marker_retry_backoff_ms:
            problems.append("marker_retry_backoff_max_ms must not be below marker_retry_backoff_ms")
        return problems
