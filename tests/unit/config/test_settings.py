"""Settings from the environment: types, shared names, and every problem in one error."""

from __future__ import annotations

import pytest

from oncelog.config import ConfigError, ServiceSettings
from oncelog.pid_allocator.config import PidAllocatorSettings


def test_service_prefix_and_shared_names() -> None:
    s = PidAllocatorSettings.from_env(
        {
            "ONCELOG_PID_ALLOCATOR_LISTEN": "0.0.0.0:7101",
            "ONCELOG_PID_ALLOCATOR_BLOCK_SIZE": "50",
            "ONCELOG_DATABASE_URL": "postgresql+psycopg://u@db/oncelog",
            "ONCELOG_PID_ALLOCATOR_DRAIN_DELAY_S": "1.5",
            "ONCELOG_DATABASE": "ignored: not one of our names",
        }
    )
    assert (s.listen, s.block_size, s.database_url, s.drain_delay_s) == (
        "0.0.0.0:7101",
        50,
        "postgresql+psycopg://u@db/oncelog",
        1.5,
    )
    assert PidAllocatorSettings.from_env({}).block_size == 1000


def test_all_problems_reported_together() -> None:
    with pytest.raises(ConfigError) as info:
        PidAllocatorSettings.from_env(
            {"ONCELOG_PID_ALLOCATOR_BLOCK_SIZE": "x", "ONCELOG_PID_ALLOCATOR_MAX_MESSAGE_BYTES": "1e3"}
        )
    assert len(info.value.problems) == 2
    assert "ONCELOG_PID_ALLOCATOR_BLOCK_SIZE='x'" in str(info.value)


def test_validation_runs_after_parsing() -> None:
    with pytest.raises(ConfigError) as info:
        ServiceSettings.from_env({"ONCELOG_NODE_LEASE_MS": "0", "ONCELOG_LISTEN": "nohost"})
    assert len(info.value.problems) == 2


def test_a_heartbeat_interval_not_below_the_lease_is_refused_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"node_heartbeat_interval_ms=2000 must be 0 .* below node_lease_ms=2000"):
        ServiceSettings.from_env({"ONCELOG_NODE_LEASE_MS": "2000", "ONCELOG_NODE_HEARTBEAT_INTERVAL_MS": "2000"})
    assert ServiceSettings.from_env({"ONCELOG_NODE_HEARTBEAT_INTERVAL_MS": "0"}).node_heartbeat_interval_ms == 0


def test_overrides_win_over_environment() -> None:
    s = PidAllocatorSettings.from_env({"ONCELOG_PID_ALLOCATOR_BLOCK_SIZE": "7"}, block_size=9)
    assert s.block_size == 9


@pytest.mark.parametrize(("raw", "value"), [("true", True), ("0", False), ("Yes", True), ("off", False)])
def test_booleans(raw: str, value: bool) -> None:
    from dataclasses import dataclass

    from oncelog.config.settings import load_settings, setting

    @dataclass(frozen=True)
    class Flags:
        on: bool = setting(False, help="a flag")

    assert load_settings(Flags, "T_", {"T_ON": raw}).on is value


def test_external_listener_addresses_are_checked() -> None:
    with pytest.raises(ConfigError) as info:
        PidAllocatorSettings.from_env(
            {"ONCELOG_PID_ALLOCATOR_EXTERNAL_LISTEN": "nowhere", "ONCELOG_PID_ALLOCATOR_EXTERNAL_ADVERTISE": "h:99999"}
        )
    assert "ONCELOG_PID_ALLOCATOR_EXTERNAL_LISTEN='nowhere' must be host:port (port 0-65535)" in str(info.value)
    assert "ONCELOG_PID_ALLOCATOR_EXTERNAL_ADVERTISE='h:99999' must be host:port (port 0-65535)" in str(info.value)
    with pytest.raises(ConfigError, match="EXTERNAL_ADVERTISE needs ONCELOG_PID_ALLOCATOR_EXTERNAL_LISTEN"):
        PidAllocatorSettings.from_env({"ONCELOG_PID_ALLOCATOR_EXTERNAL_ADVERTISE": "lb.example.com:30110"})
    settings = PidAllocatorSettings.from_env(
        {"ONCELOG_PID_ALLOCATOR_EXTERNAL_LISTEN": "0.0.0.0:7111", "ONCELOG_PID_ALLOCATOR_EXTERNAL_ADVERTISE": "h:30111"}
    )
    assert (settings.external_listen, settings.external_advertise) == ("0.0.0.0:7111", "h:30111")
