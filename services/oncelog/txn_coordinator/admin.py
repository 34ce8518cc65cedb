"""Operator escapes of the coordinator that need no decision of their own (design/kafka-semantics.md §5.4)."""

from __future__ import annotations

import logging
from collections.abc import Collection

from oncelog.errors import InvalidRequest, InvalidTxnState
from oncelog.vocabulary import TopicPartition

from .ports import MarkerSink
from .state_manager import TransactionStateManager

log = logging.getLogger("oncelog.txn_coordinator.coordinator")


async def skip_markers(
    state: TransactionStateManager,
    markers: MarkerSink,
    transactional_id: str,
    partitions: Collection[TopicPartition],
    groups: Collection[str],
) -> tuple[set[TopicPartition], set[str]]:
    """:meth:`~.coordinator.TransactionCoordinator.skip_markers`: give up on markers that can never be delivered."""
    if not transactional_id:
        raise InvalidRequest("transactional id must not be empty")
    if not partitions and not groups:
        raise InvalidRequest("name at least one partition or group whose marker to skip")
    entry = state.entry_for(transactional_id)
    async with state.lock(transactional_id):
        md = state.persisted(entry, transactional_id)
        if not md.state.is_prepare:
            raise InvalidTxnState(
                f"transactional id {transactional_id!r} is {md.state.name}, not completing: no marker to skip"
            )
        strangers = sorted(f"{t}-{p}" for t, p in set(partitions) - md.partitions)
        strangers += sorted(repr(g) for g in set(groups) - md.groups)
        if strangers:
            raise InvalidRequest(
                f"{', '.join(strangers)} not a participant of {transactional_id!r}; describe the transaction "
                "for its partitions and groups"
            )
        skipped = markers.skip(transactional_id, partitions, groups)
    log.warning("skipped markers of %r on request: %s", transactional_id, skipped)
    return skipped


__all__ = ["skip_markers"]
