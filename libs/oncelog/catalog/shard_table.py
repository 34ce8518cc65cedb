"""CoordinatorShardTable: the catalog's coordinator shard leases (``coordinator_shards``), the part of
:class:`~oncelog.catalog.store.CatalogStore` that decides which process serves each transaction-coordinator and
group-offsets shard, and the controller's lease.

A lease names an owner, a coordinator epoch and an expiry. A new owner takes a shard only once the old lease
expired, and taking it bumps the coordinator epoch, which fences every write of the old owner; renewing keeps the
epoch. Every change is an ``UPDATE … WHERE`` on the epoch and owner read, so two owners never hold one shard.
:class:`~oncelog.catalog.leases.ShardLeaseManager` runs the rounds; this class is the SQL.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from oncelog.catalog import schema as t
from oncelog.catalog.records import ClusterInfo, ShardLease, ShardRound
from oncelog.catalog.topics import shard_for
from oncelog.catalog.transaction import Transaction, database_now_ms, insert_ignoring_conflicts
from oncelog.vocabulary import Role


class CoordinatorShardTable:
    """Reads and conditional writes of the coordinator shard leases; :class:`CatalogStore` is one."""

    engine: Engine

    def cluster_info(self) -> ClusterInfo:
        """Cluster-wide settings (the shard counts); defined by :class:`CatalogStore`."""
        raise NotImplementedError

    def shard_for(self, role: str, key: str) -> int:
        """Shard of ``key`` for a coordinator role, from the cluster's fixed shard counts."""
        info = self.cluster_info()
        count = info.txn_coordinator_shards if role == Role.TXN_COORDINATOR else info.group_offsets_shards
        return shard_for(key, count)

    def shard_lease(self, role: str, shard: int) -> ShardLease | None:
        """Current lease of a shard, or None if it was never acquired."""
        with self._read() as conn:
            row = conn.execute(
                sa.select(t.coordinator_shards).where(
                    t.coordinator_shards.c.role == role, t.coordinator_shards.c.shard == shard
                )
            ).first()
        if row is None:
            return None
        return ShardLease(row.role, row.shard, row.owner_node_id, row.coordinator_epoch, row.lease_expires_at_ms)

    def acquire_shard(
        self, role: str, shard: int, node_id: str, lease_ms: int, now_ms: int | None
    ) -> ShardLease | None:
        """Take or renew a shard. A new owner may take it only once the old lease expired; taking it bumps
        the coordinator epoch (fencing the old owner's writes), renewing keeps it. Returns None if held.

        ``now_ms=None`` lets the database's own clock decide expiry and write the new one, so every replica
        is judged by one clock. The takeover is conditional on expiry in the update itself.
        """
        try:
            return self._acquire_shard(role, shard, node_id, lease_ms, now_ms)
        except sa.exc.IntegrityError:
            return None  # a racing replica inserted the first lease row: it won

    def _acquire_shard(
        self, role: str, shard: int, node_id: str, lease_ms: int, now_ms: int | None
    ) -> ShardLease | None:
        with self._begin() as conn:
            if now_ms is None:
                now_ms = database_now_ms(conn)
            row = conn.execute(
                sa.select(t.coordinator_shards).where(
                    t.coordinator_shards.c.role == role, t.coordinator_shards.c.shard == shard
                )
            ).first()
            expires = now_ms + lease_ms
            if row is None:
                conn.execute(
                    sa.insert(t.coordinator_shards).values(
                        role=role, shard=shard, owner_node_id=node_id, coordinator_epoch=1, lease_expires_at_ms=expires
                    )
                )
                return ShardLease(role, shard, node_id, 1, expires)
            if row.owner_node_id != node_id and row.lease_expires_at_ms > now_ms:
                return None
            renewing = row.owner_node_id == node_id
            epoch = row.coordinator_epoch if renewing else row.coordinator_epoch + 1
            conditions = [
                t.coordinator_shards.c.role == role,
                t.coordinator_shards.c.shard == shard,
                t.coordinator_shards.c.coordinator_epoch == row.coordinator_epoch,
                t.coordinator_shards.c.owner_node_id == row.owner_node_id,
            ]
            if not renewing:
                # Re-checked by the database against the row as it is when the update runs: an owner's renewal
                # that committed after the read above makes the takeover miss (PostgreSQL re-evaluates the
                # condition on the updated row), so two owners never hold one shard.
                conditions.append(t.coordinator_shards.c.lease_expires_at_ms <= now_ms)
            result = conn.execute(
                sa.update(t.coordinator_shards)
                .where(*conditions)
                .values(owner_node_id=node_id, coordinator_epoch=epoch, lease_expires_at_ms=expires)
            )
            if result.rowcount != 1:
                return None
            return ShardLease(role, shard, node_id, epoch, expires)

    def acquire_shards(
        self,
        role: str,
        shards: Iterable[int],
        node_id: str,
        lease_ms: int,
        now_ms: int | None,
        *,
        before_write: Callable[[list[int]], None] | None = None,
    ) -> ShardRound:
        """Renew every shard of ``shards`` that ``node_id`` holds and take every free or lapsed one, in one transaction.

        The same rules as :meth:`acquire_shard`, for a whole round at the cost of one: a renewal keeps the
        coordinator epoch, a takeover bumps it and is conditional on expiry inside its own update (re-checked by
        PostgreSQL against the row as it is when the update runs, so an owner's renewal that commits first wins),
        and a shard never leased before is inserted at epoch 1 unless a racing replica inserted it first.
        ``before_write`` is called inside the transaction with the shards the write may name ``node_id`` the
        owner of, before that write (so the caller can know it holds them before anyone can route to it).
        """
        wanted = sorted(set(shards))
        with self._begin() as conn:
            if now_ms is None:
                now_ms = database_now_ms(conn)
            cs = t.coordinator_shards
            rows = {
                row.shard: row for row in conn.execute(sa.select(cs).where(cs.c.role == role, cs.c.shard.in_(wanted)))
            }
            mine = [s for s in wanted if s in rows and rows[s].owner_node_id == node_id]
            free = [
                s
                for s in wanted
                if s in rows and rows[s].owner_node_id != node_id and rows[s].lease_expires_at_ms <= now_ms
            ]
            missing = [s for s in wanted if s not in rows]
            elsewhere = {
                s: ShardLease(role, s, r.owner_node_id, r.coordinator_epoch, r.lease_expires_at_ms)
                for s, r in rows.items()
                if r.owner_node_id != node_id
            }
            if not (mine or free or missing):
                return ShardRound(now_ms, {}, elsewhere)
            if before_write is not None:
                before_write(mine + free + missing)
            expires = now_ms + lease_ms
            epochs: dict[int, int] = {}
            if mine:
                renewed = conn.execute(
                    sa.update(cs)
                    .where(cs.c.role == role, cs.c.shard.in_(mine), cs.c.owner_node_id == node_id)
                    .values(lease_expires_at_ms=expires)
                    .returning(cs.c.shard, cs.c.coordinator_epoch)
                )
                epochs.update((row.shard, row.coordinator_epoch) for row in renewed)
            if free:
                taken = conn.execute(
                    sa.update(cs)
                    .where(cs.c.role == role, cs.c.shard.in_(free), cs.c.lease_expires_at_ms <= now_ms)
                    .values(
                        owner_node_id=node_id, coordinator_epoch=cs.c.coordinator_epoch + 1, lease_expires_at_ms=expires
                    )
                    .returning(cs.c.shard, cs.c.coordinator_epoch)
                )
                epochs.update((row.shard, row.coordinator_epoch) for row in taken)
            if missing:
                insert = insert_ignoring_conflicts(conn, cs)
                inserted = conn.execute(
                    insert.values(
                        [
                            {
                                "role": role,
                                "shard": s,
                                "owner_node_id": node_id,
                                "coordinator_epoch": 1,
                                "lease_expires_at_ms": expires,
                            }
                            for s in missing
                        ]
                    ).returning(cs.c.shard, cs.c.coordinator_epoch)
                )
                epochs.update((row.shard, row.coordinator_epoch) for row in inserted)
                raced = [s for s in missing if s not in epochs]
                if raced:  # a racing replica inserted these first: read who holds them, for redirects
                    for row in conn.execute(sa.select(cs).where(cs.c.role == role, cs.c.shard.in_(raced))):
                        elsewhere[row.shard] = ShardLease(
                            role, row.shard, row.owner_node_id, row.coordinator_epoch, row.lease_expires_at_ms
                        )
        held = {s: ShardLease(role, s, node_id, epoch, expires) for s, epoch in sorted(epochs.items())}
        return ShardRound(now_ms, held, {s: lease for s, lease in elsewhere.items() if s not in held})

    def release_shard(self, role: str, shard: int, node_id: str, coordinator_epoch: int) -> None:
        """Give a shard up early (clean shutdown) so another replica need not wait for the lease to lapse."""
        with self._begin() as conn:
            conn.execute(
                sa.update(t.coordinator_shards)
                .where(
                    t.coordinator_shards.c.role == role,
                    t.coordinator_shards.c.shard == shard,
                    t.coordinator_shards.c.owner_node_id == node_id,
                    t.coordinator_shards.c.coordinator_epoch == coordinator_epoch,
                )
                .values(lease_expires_at_ms=0)
            )

    def _begin(self) -> Transaction:
        return Transaction(self.engine)

    def _read(self) -> Transaction:
        """A transaction that only reads: on SQLite it waits for no writer (:class:`Transaction`)."""
        return Transaction(self.engine, read_only=True)


__all__ = ["CoordinatorShardTable"]
