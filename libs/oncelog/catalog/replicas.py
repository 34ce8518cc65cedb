"""Pure replica rules: replication-factor checks, replica placement over storage nodes, reassignment steps.

Placement follows Kafka's ``AdminUtils.assignReplicasToBrokers`` (design/replication.md §1): the first replica of each
partition goes round-robin over the nodes from a per-topic starting point (so replication factor 1 places leaders
exactly as before replication existed), and the other replicas follow at a shift that grows every full round, so
the followers of one node's partitions spread over all other nodes instead of always landing on its neighbour.
When every node carries a rack label the node list is first interleaved by rack and each partition's replicas
take distinct racks while unused racks remain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from oncelog.catalog.records import PartitionRecord
from oncelog.errors import InvalidReplicationFactor, InvalidRequest

MAX_REPLICATION_FACTOR = 32_767  # Kafka's int16 wire limit


@dataclass(frozen=True, slots=True)
class StorageNode:
    """A live storage node as placement sees it: its id and optional rack label."""

    node_id: str
    rack: str | None = None


def validate_replication_factor(replication_factor: int, live_storage_nodes: int) -> None:
    """Raise :class:`InvalidReplicationFactor` unless ``1 <= replication_factor <= live_storage_nodes``.

    The message names the number of live storage nodes, so the caller knows the largest factor it may ask for.
    """
    nodes = f"{live_storage_nodes} live storage node{'' if live_storage_nodes == 1 else 's'}"
    if replication_factor < 1:
        raise InvalidReplicationFactor(
            f"replication_factor={replication_factor}; it must be at least 1 (the cluster has {nodes})"
        )
    if replication_factor > min(live_storage_nodes, MAX_REPLICATION_FACTOR):
        raise InvalidReplicationFactor(
            f"replication_factor={replication_factor} is larger than the {nodes}; use at most "
            f"{live_storage_nodes} or start more storage nodes"
        )


def place_replicas(
    partition_count: int, nodes: Sequence[StorageNode], replication_factor: int, start: int
) -> list[tuple[str, ...]]:
    """Replica lists (preferred leader first) for ``partition_count`` partitions.

    Args:
        partition_count: partitions of the topic.
        nodes: live storage nodes (any order; placement sorts them, so every caller places alike).
        replication_factor: copies per partition; must already be valid for ``len(nodes)``.
        start: per-topic starting point (the topic name's hash), spreading topics over the nodes.
    """
    validate_replication_factor(replication_factor, len(nodes))
    racked = all(n.rack for n in nodes)
    ordered = _rack_alternated(nodes) if racked else sorted(nodes, key=lambda n: n.node_id)
    count = len(ordered)
    racks = {n.rack for n in ordered}
    first_index = start % count
    shift = start % count
    placement: list[tuple[str, ...]] = []
    for p in range(partition_count):
        if p > 0 and p % count == 0:
            shift += 1
        first = (first_index + p) % count
        chosen = [ordered[first]]
        for _ in range(replication_factor - 1):
            chosen.append(_next_replica(ordered, first, shift, chosen, racks if racked else set()))
        placement.append(tuple(n.node_id for n in chosen))
    return placement


def _next_replica(
    ordered: Sequence[StorageNode], first: int, shift: int, chosen: list[StorageNode], racks: set[str | None]
) -> StorageNode:
    """The next follower: walk the shifted sequence, preferring a node on a rack this partition does not use yet."""
    count = len(ordered)
    used_racks = {n.rack for n in chosen}
    candidates = [ordered[(first + 1 + (shift + k) % (count - 1)) % count] for k in range(count - 1)]
    fresh = [n for n in candidates if n not in chosen]
    if racks and used_racks != racks:
        for node in fresh:
            if node.rack not in used_racks:
                return node
    return fresh[0]


def _rack_alternated(nodes: Sequence[StorageNode]) -> list[StorageNode]:
    """Kafka's ``getRackAlternatedBrokerList``: one node of each rack in turn (racks and nodes sorted)."""
    by_rack: dict[str, list[StorageNode]] = {}
    for node in sorted(nodes, key=lambda n: n.node_id):
        by_rack.setdefault(node.rack or "", []).append(node)
    columns = [by_rack[rack] for rack in sorted(by_rack)]
    result: list[StorageNode] = []
    for depth in range(max(len(c) for c in columns)):
        result.extend(column[depth] for column in columns if depth < len(column))
    return result


@dataclass(frozen=True, slots=True)
class Election:
    """What the controller decides for a partition whose leader is gone: a new leader and ISR, or offline."""

    leader_node_id: str  # empty: offline, no eligible replica
    isr: tuple[str, ...]


def elect_leader(replicas: Sequence[str], isr: Sequence[str], live: set[str], *, unclean: bool = False) -> Election:
    """Clean election (docs/design/replication.md §6): the first live ISR member in replica order leads, and the
    ISR keeps its live members. With no live ISR member the partition goes offline and keeps its ISR, so the
    last in-sync replica is elected when it returns; an out-of-sync replica is never chosen, unless ``unclean``
    (the topic's ``unclean_leader_election``): then the first live replica leads alone (ISR = {it}), and what
    the old ISR had beyond its log is lost."""
    candidates = [r for r in replicas if r in isr and r in live]
    if not candidates:
        stale = [r for r in replicas if r in live]
        if unclean and stale:
            return Election(stale[0], (stale[0],))
        return Election("", tuple(isr))
    return Election(candidates[0], tuple(r for r in replicas if r in isr and r in live))


def leave_isr_after_disk_loss(seen: PartitionRecord, node_id: str, live: set[str]) -> Election | None:
    """What a partition becomes when ``node_id`` restarted with an empty data directory (design/replication.md
    §6, "Disk loss"): the node leaves the ISR, since it no longer holds what the ISR promised; if it led, the first
    other live in-sync replica leads (or, with none live, the partition goes offline and keeps the others as its
    ISR, so one of them is elected cleanly when it returns). None when nothing changes: the node is not in the
    ISR, or it is the only member (no copy of the acknowledged records is left to prefer over the empty log)."""
    if node_id not in seen.isr or len(seen.isr) == 1:
        return None
    others = tuple(r for r in seen.isr if r != node_id)
    if seen.leader_node_id != node_id:
        return Election(seen.leader_node_id, others)
    successor = next((r for r in seen.replicas if r in others and r in live), "")
    return Election(successor, others)


def reassignment_step(name: str, seen: PartitionRecord, wanted: Sequence[str], live: set[str]) -> tuple[list[str], str]:
    """The ISR and leader a partition gets when its replicas become ``wanted`` (a step of a reassignment): the
    listed in-sync replicas, and the current leader if listed, else the first listed in-sync replica.

    Raises:
        InvalidRequest: no replicas or duplicates, a node not among the ``live`` storage nodes, the partition is
            offline, or no listed replica is in sync (add them next to the current replicas first).
    """
    if not wanted or len(set(wanted)) != len(wanted):
        raise InvalidRequest(f"replicas {list(wanted)} of {name} must be distinct storage nodes, at least one")
    unknown = [n for n in wanted if n not in live]
    if unknown:
        raise InvalidRequest(
            f"{', '.join(unknown)} is not a live storage node; live storage nodes: {', '.join(sorted(live)) or 'none'}"
        )
    if not seen.leader_node_id:
        raise InvalidRequest(f"{name} is offline: bring an in-sync replica back before moving it")
    isr = [n for n in wanted if n in seen.isr]
    leader = seen.leader_node_id if seen.leader_node_id in wanted else next(iter(isr), "")
    if not leader:
        raise InvalidRequest(
            f"none of {list(wanted)} is in sync for {name} (ISR {list(seen.isr)}): add the new replicas next to "
            "the current ones first and wait until they join the ISR"
        )
    return isr, leader
