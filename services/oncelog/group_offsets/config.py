"""GroupOffsetsSettings, read from ``ONCELOG_GROUP_OFFSETS_*`` and the shared ``ONCELOG_*`` variables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings
from oncelog.config.settings import setting


@dataclass(frozen=True)
class GroupOffsetsSettings(ServiceSettings):
    """Settings of the group-offsets process."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_GROUP_OFFSETS_"

    state_database_url: str = setting(
        "sqlite:///.oncelog/group-offsets.db",
        help="SQLAlchemy URL of the group-offsets tables; every replica of the service shares it",
    )
    shard_lease_ms: int = setting(
        10_000, help="how long a shard lease lasts without renewal (renewed every third); failover takes about this"
    )
    max_metadata_bytes: int = setting(4096, help="longest offset metadata accepted (Kafka offset.metadata.max.bytes)")
    cache_ttl_s: int = setting(300, help="lifetime of a Redis read-cache entry (only with ONCELOG_REDIS_URL)")
    redis_timeout_ms: int = setting(200, help="Redis socket timeout; a slow or absent Redis falls back to SQL")
    session_timeout_ms: int = setting(
        45_000, help="a consumer group member that does not heartbeat for this long is removed (Kafka 45 s)"
    )
    heartbeat_interval_ms: int = setting(5_000, help="how often consumer group members heartbeat (Kafka 5 s)")
    rebalance_timeout_ms: int = setting(
        300_000, help="default bound on a member's revocation when it sends none (Kafka max.poll.interval.ms)"
    )
    group_sweep_ms: int = setting(250, help="how often expired consumer group members are looked for")

    def validate(self) -> list[str]:
        problems = super().validate()
        if not self.state_database_url:
            problems.append("ONCELOG_GROUP_OFFSETS_STATE_DATABASE_URL must not be empty")
        if self.shard_lease_ms < 300:
            problems.append(f"shard_lease_ms={self.shard_lease_ms}; use at least 300 (renewals run every third)")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            problems.append(
                f"heartbeat_interval_ms={self.heartbeat_interval_ms} must be below "
                f"session_timeout_ms={self.session_timeout_ms}"
            )
        for name in (
            "max_metadata_bytes",
            "cache_ttl_s",
            "redis_timeout_ms",
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "rebalance_timeout_ms",
            "group_sweep_ms",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        return problems
