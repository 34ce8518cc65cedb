"""The producer's settings: their checks, and the ones the public API keeps for itself."""

from __future__ import annotations

from dataclasses import dataclass

from oncelog.client.sequences import MAX_IN_FLIGHT
from oncelog.records import Compression

__all__ = ["ProducerConfig", "check_options"]

_ACKS = {"all": True, "-1": True, "1": False}  # acks -> every in-sync replica (True) or the leader alone
_COMPRESSION = {
    None: Compression.NONE,
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


@dataclass(frozen=True, slots=True)
class ProducerConfig:
    """What :class:`~oncelog.client.producer.Producer` reads of its settings after construction."""

    client_id: str
    transactional_id: str | None
    retry_backoff_ms: int
    retry_backoff_max_ms: int
    max_block_ms: int
    commit_wait_for_completion: bool = False


def check_options(
    *,
    acks: str | int,
    transactional_id: str | None,
    enable_idempotence: bool,
    max_in_flight: int,
    compression: str | None,
    transaction_timeout_ms: int,
    request_timeout_ms: int,
    max_block_ms: int,
    metadata_max_age_ms: int = 300_000,
) -> tuple[bool, Compression]:
    """Check the producer's options together; return whether acks is "all", and the compression codec.

    Raises:
        ValueError: every inconsistent option, each with what to change.
    """
    problems = []
    acks_all = _ACKS.get(str(acks).lower())
    if acks_all is None:
        problems.append(f"acks={acks!r}; use 'all' or 1")
    if transactional_id is not None and not transactional_id:
        problems.append("transactional_id must not be empty; pass None for a non-transactional producer")
    if transactional_id and not enable_idempotence:
        problems.append("a transactional producer must be idempotent: drop enable_idempotence=False")
    if enable_idempotence and acks_all is False:
        problems.append("an idempotent producer needs acks='all' (or pass enable_idempotence=False)")
    if not 1 <= max_in_flight <= MAX_IN_FLIGHT:
        problems.append(f"max_in_flight must be between 1 and {MAX_IN_FLIGHT}, got {max_in_flight}")
    if compression not in _COMPRESSION:
        unsupported = " is not supported by oncelog" if compression == "snappy" else ""
        problems.append(f"compression={compression!r}{unsupported}; use one of None, 'gzip', 'lz4', 'zstd'")
    if transaction_timeout_ms <= 0 or request_timeout_ms <= 0 or max_block_ms < 0:
        problems.append("transaction_timeout_ms and request_timeout_ms must be positive, max_block_ms >= 0")
    if metadata_max_age_ms < 0:
        problems.append(f"metadata_max_age_ms must not be negative, got {metadata_max_age_ms}")
    if problems:
        raise ValueError("invalid producer configuration: " + "; ".join(problems))
    assert acks_all is not None
    return acks_all, _COMPRESSION[compression]
