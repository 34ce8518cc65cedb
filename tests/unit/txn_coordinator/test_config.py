"""TxnCoordinatorSettings: defaults, environment names, and every problem reported at once."""

from __future__ import annotations

import pytest

from oncelog.config import ConfigError
from oncelog.txn_coordinator.config import TxnCoordinatorSettings


def test_settings_are_read_from_the_service_prefix() -> None:
    settings = TxnCoordinatorSettings.from_env(
        {
            "ONCELOG_TXN_COORDINATOR_STATE_DATABASE_URL": "sqlite:///tmp/txn.db",
            "ONCELOG_TXN_COORDINATOR_LEASE_MS": "1500",
            "ONCELOG_TXN_COORDINATOR_ABORT_CHECK_INTERVAL_MS": "200",
        }
    )
    assert (settings.state_database_url, settings.lease_ms, settings.abort_check_interval_ms) == (
        "sqlite:///tmp/txn.db",
        1500,
        200,
    )
    assert settings.transaction_max_timeout_ms == 900_000, "Kafka's transaction.max.timeout.ms default"


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as info:
        TxnCoordinatorSettings.from_env(
            {
                "ONCELOG_DATABASE_URL": "postgresql+psycopg://db/oncelog",
                "ONCELOG_TXN_COORDINATOR_LEASE_MS": "0",
                "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MS": "500",
                "ONCELOG_TXN_COORDINATOR_MARKER_RETRY_BACKOFF_MAX_MS": "100",
                "ONCELOG_TXN_COORDINATOR_TRANSACTION_MAX_TIMEOUT_MS": str(2**31),
            }
        )
    problems = "\n".join(info.value.problems)
    assert len(info.value.problems) == 4, problems
    assert "SQLite file while the catalog is a database server" in problems
    assert "lease_ms must be positive" in problems
    assert "marker_retry_backoff_max_ms must not be below" in problems
    assert "does not fit in int32" in problems


def test_completion_wait_defaults_to_parking_and_zero_keeps_kafka_behaviour() -> None:
    assert TxnCoordinatorSettings.from_env({}).completion_wait_ms == 5_000
    kafka_like = TxnCoordinatorSettings.from_env({"ONCELOG_TXN_COORDINATOR_COMPLETION_WAIT_MS": "0"})
    assert kafka_like.completion_wait_ms == 0


def test_negative_completion_wait_is_a_problem() -> None:
    with pytest.raises(ConfigError) as info:
        TxnCoordinatorSettings.from_env({"ONCELOG_TXN_COORDINATOR_COMPLETION_WAIT_MS": "-1"})
    assert info.value.problems == ["completion_wait_ms must not be negative, got -1"]
