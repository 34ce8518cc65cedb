"""Conditions a partition change checks inside its SQL transaction (design/replication.md §1, §6): the controller
lease of an election, the old leader's node lease, and the registrations of nodes joining an ISR."""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from oncelog.catalog import schema as t
from oncelog.errors import StaleRequesterEpoch

CONTROLLER_ROLE = "controller"


def holds_controller_lease(conn: Connection, node_id: str, controller_epoch: int, now_ms: int) -> bool:
    row = conn.execute(
        sa.select(t.coordinator_shards)
        .where(t.coordinator_shards.c.role == CONTROLLER_ROLE, t.coordinator_shards.c.shard == 0)
        .with_for_update()
    ).first()
    return (
        row is not None
        and row.owner_node_id == node_id
        and row.coordinator_epoch == controller_epoch
        and row.lease_expires_at_ms > now_ms
    )


def node_lease_holds(conn: Connection, node_id: str, now_ms: int) -> bool:
    row = conn.execute(
        sa.select(t.nodes.c.lease_expires_at_ms).where(t.nodes.c.node_id == node_id).with_for_update()
    ).first()
    return row is not None and row.lease_expires_at_ms > now_ms


def check_registrations(conn: Connection, partition: str, joining_epochs: Mapping[str, int]) -> None:
    """Raise StaleRequesterEpoch unless every joining node is still registered at the epoch its fetches carried
    (Kafka's KIP-903; design/replication.md §6, "Disk loss")."""
    for node_id, node_epoch in joining_epochs.items():
        current = conn.execute(sa.select(t.nodes.c.node_epoch).where(t.nodes.c.node_id == node_id)).scalar()
        if current != node_epoch:
            raise StaleRequesterEpoch(
                f"{node_id} fetched as node epoch {node_epoch} but is registered as {current}: it restarted since, "
                f"so it joins the ISR of {partition} only once its new incarnation caught up"
            )
