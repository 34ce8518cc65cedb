"""PartitionStorageSettings, read from ``ONCELOG_PARTITION_STORAGE_*`` and the shared ``ONCELOG_*`` variables.

Segment size, retention and ``flush`` are per topic (catalog topic configs); the settings here are the node's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from oncelog.config import ServiceSettings
from oncelog.config.settings import setting

_MIB = 1024 * 1024


@dataclass(frozen=True)
class PartitionStorageSettings(ServiceSettings):
    """Settings of the partition-storage process (Kafka's broker config names in the help where one exists)."""

    ENV_PREFIX: ClassVar[str] = "ONCELOG_PARTITION_STORAGE_"

    # Failover within a few seconds (docs/design/replication.md §6): the controller replaces the leader of a
    # replicated partition once that leader's lease lapsed, so storage nodes keep a short lease renewed often.
    node_lease_ms: int = setting(
        2_000,
        help="how long a storage node's registration lives without a heartbeat; the controller replaces the leaders "
        "of a node whose lease lapsed, so this bounds failover",
    )
    node_heartbeat_interval_ms: int = setting(
        400, help="period of the storage node's lease renewal (a fifth of the lease: four renewals may be late)"
    )
    data_dir: str = setting(
        ".oncelog/partition-storage", help="directory of the partition logs (log.dirs); one per node, on its own disk"
    )
    producer_id_expiration_ms: int = setting(
        86_400_000, help="idle time after which a producer id without an open transaction is forgotten"
    )
    producer_id_expiration_check_interval_ms: int = setting(600_000, help="period of the producer-id expiry sweep")
    retention_check_interval_ms: int = setting(300_000, help="period of the retention sweep")
    flush_interval_ms: int = setting(1_000, help="period of the background fsync of topics with flush=async")
    checkpoint_interval_ms: int = setting(
        60_000, help="period of the recovery-point checkpoint, which bounds the rescan after a crash"
    )
    metadata_refresh_interval_ms: int = setting(
        2_000, help="period of the partition-leadership refresh from the catalog"
    )
    index_interval_bytes: int = setting(4096, help="bytes between offset index entries (log.index.interval.bytes)")
    validate_records: bool = setting(
        False, help="also parse every record of produced batches; off, the header and CRC32C are checked"
    )
    flush_threads: int = setting(4, help="threads running group-commit fsyncs")
    produce_timeout_ms: int = setting(30_000, help="durability wait of a produce request that sets no timeout")
    fetch_max_wait_ms: int = setting(30_000, help="upper bound of a fetch's long-poll")
    fetch_max_bytes: int = setting(50 * _MIB, help="largest fetch response (fetch.max.bytes)")
    partition_fetch_bytes: int = setting(
        _MIB, help="fetch bytes per partition when the request leaves it 0 (max.partition.fetch.bytes)"
    )
    replica_lag_time_max_ms: int = setting(
        10_000,
        help="a follower not caught up for this long leaves the ISR (replica.lag.time.max.ms)",
    )
    replica_fetch_wait_ms: int = setting(
        500, help="long-poll of a follower's replica fetch (replica.fetch.wait.max.ms)"
    )
    leader_rebalance_interval_ms: int = setting(
        300_000,
        help="how often the controller moves leadership back to preferred replicas that are in sync again "
        "(leader.imbalance.check.interval); 0 never",
    )
    stream_max_in_flight: int = setting(32, help="requests of one ProduceStream awaiting durability at once")

    def validate(self) -> list[str]:
        problems = super().validate()
        if not self.data_dir:
            problems.append("data_dir must not be empty")
        for name in (
            "producer_id_expiration_ms",
            "producer_id_expiration_check_interval_ms",
            "retention_check_interval_ms",
            "flush_interval_ms",
            "checkpoint_interval_ms",
            "metadata_refresh_interval_ms",
            "flush_threads",
            "produce_timeout_ms",
            "fetch_max_bytes",
            "partition_fetch_bytes",
            "stream_max_in_flight",
            "replica_lag_time_max_ms",
            "replica_fetch_wait_ms",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive, got {getattr(self, name)}")
        if self.index_interval_bytes < 0 or self.fetch_max_wait_ms < 0 or self.leader_rebalance_interval_ms < 0:
            problems.append(
                "index_interval_bytes, fetch_max_wait_ms and leader_rebalance_interval_ms must not be negative"
            )
        if self.fetch_max_bytes > self.max_message_bytes - _MIB:
            problems.append(
                f"fetch_max_bytes={self.fetch_max_bytes} must leave 1 MiB of max_message_bytes="
                f"{self.max_message_bytes} for one oversized batch and the response envelope"
            )
        return problems
