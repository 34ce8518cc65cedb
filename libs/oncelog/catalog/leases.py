"""ShardLeaseManager: which coordinator shards this process serves, and at which coordinator epoch
(design/architecture.md §2).

Both coordinator roles split their keys into a fixed number of shards (``shard_for(key, n)``): Kafka's
``__transaction_state`` and ``__consumer_offsets`` partitions. Kafka serves such a partition on the broker that
leads it, at the partition's leader epoch; here each shard is leased from the catalog instead
(``CatalogStore.acquire_shards``: one transaction a round for all shards), and the lease's coordinator epoch plays
the leader epoch. Taking a shard from another owner bumps the epoch with a conditional update; renewing keeps it.
Every third of a lease a replica renews the shards it holds and takes every shard whose lease is free or lapsed,
so replicas are hot standbys. The third is counted from when the oldest held lease was written, so a slow round
does not delay the next one.

Per shard, this manager runs Kafka's ``onElection`` / ``onResignation`` pair through two callbacks:

* the **load hook** ``on_acquired(shard, coordinator_epoch)`` runs after the lease was taken and before the shard
  is served: the service claims the epoch in its state database (so every write under an older epoch fails from
  then on) and loads what it caches. It returns False, or raises, to refuse; the lease is kept and the hook runs
  again next round. A shard is never reported as served while its hook runs (design/kafka-semantics.md §2.10, load
  before serving).
* the **drop hook** ``on_lost(shard, coordinator_epoch)`` runs when serving stops. It may run again for the same
  shard and epoch (a load that finished after its shard was lost is undone), so it must be idempotent.

Serving stops when the renewal finds another owner or a moved epoch; when a write reports that a newer owner
claimed the epoch (:meth:`ShardLeaseManager.fenced`); when renewals failed and a third of the lease or less is
left; and, whatever the rounds do, a safety margin before the lease expires in the catalog (a timer, so a round
stuck on an unreachable catalog cannot keep a shard served). Another replica can take the shard only after that
expiry, so two replicas never serve one shard at once. With ``database_clock`` (as the services run) the catalog's
database alone decides expiry, and a takeover is conditional on expiry inside its update, so a renewal that commits
first always wins; each replica keeps its serving deadline on a monotonic clock from the moment its renewal
started, so only clock *rates* must agree within the margin, never their settings. Writes never depend on clocks:
the new owner's claim moves the epoch in the state database before it serves.
On a clean stop every shard is dropped first and then released, so a survivor takes it over without waiting.

The catalog names a new owner the moment its acquire commits, before the load hook even started, so FindCoordinator
can route requests to a process that does not serve the shard yet. :meth:`ShardLeaseManager.holds` covers that gap:
it is true from before the catalog write until the lease is lost, and a service answers COORDINATOR_LOAD_IN_PROGRESS
(retry here) for a shard it holds but does not serve, and NOT_COORDINATOR (look elsewhere) only for one it does not
hold.

Threads: rounds, hooks and the safety timer run on the event loop; catalog round trips run in a worker thread;
:meth:`~ShardLeaseManager.epoch_of`, :meth:`~ShardLeaseManager.owned_shards`, :meth:`~ShardLeaseManager.owner_of`
and :meth:`~ShardLeaseManager.fenced` may be called from any thread.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from oncelog.catalog.store import CatalogStore, ShardLease, ShardRound
from oncelog.errors import OncelogError

log = logging.getLogger(__name__)

MAX_SAFETY_MARGIN_MS = 1_000
"""Upper bound of the default safety margin (a tenth of the lease)."""

LoadHook = Callable[[int, int], Awaitable[bool]]
"""``(shard, coordinator_epoch) -> serve?``: claim and load a shard before it is served."""

DropHook = Callable[[int, int], None]
"""``(shard, coordinator_epoch)``: forget what was loaded for a shard that is no longer served."""


@dataclass(frozen=True)
class ShardOwner:
    """The process holding another shard's lease, as the catalog names it (for NOT_COORDINATOR redirects)."""

    node_id: str
    address: str


class _State(enum.Enum):
    IDLE = "idle"  # lease held, nothing served: not loaded yet, load refused or failed, fenced, or ran out
    LOADING = "loading"
    SERVING = "serving"


@dataclass
class _Held:
    lease: ShardLease
    serve_until_ms: int
    state: _State = _State.IDLE
    superseded: bool = False
    """A newer coordinator epoch was claimed (load refused, or fenced): the shard belongs elsewhere."""


@dataclass(frozen=True)
class _Renewal:
    """One shard's outcome of a round's ``acquire_shards`` call: the lease, None if another owner holds it, or the
    error."""

    shard: int
    now_ms: int
    """Deadline-clock time at which the call started."""
    lease: ShardLease | None
    error: Exception | None = None


class ShardLeaseManager:
    """Acquires, renews, loads, fences, drops and releases one coordinator role's shard leases.

    Args:
        catalog: where the leases live.
        role: the catalog role whose shards are leased (``txn-coordinator``, ``group-offsets``).
        node_id: this process's node id, the lease owner that FindCoordinator resolves.
        shard_count: the cluster's fixed number of shards of ``role``.
        lease_ms: lease lifetime; renewed every third of it.
        clock: Unix milliseconds: the clock lease expiries are written with unless ``database_clock``, and the
            one live owners are judged by.
        deadline_clock: milliseconds of a monotonic clock the serving deadlines are kept in (the wall clock can
            jump); ``clock`` when omitted. A deadline is the time a renewal *started* plus the lease, minus the
            safety margin, so it never outlives the expiry the catalog wrote.
        database_clock: the catalog's database decides lease expiry with its own clock (one clock for every
            replica, so a takeover can never rely on a fast local clock).
        on_acquired: the load hook (see the module docstring); without it a shard is served once leased.
        on_lost: the drop hook (see the module docstring).
        track_owners: also read the owners of the shards held elsewhere each round, for :meth:`owner_of`.
        safety_margin_ms: how long before the catalog expiry a shard stops being served; by default a tenth
            of the lease, at most :data:`MAX_SAFETY_MARGIN_MS`.
    """

    def __init__(
        self,
        catalog: CatalogStore,
        *,
        role: str,
        node_id: str,
        shard_count: int,
        lease_ms: int,
        clock: Callable[[], int],
        deadline_clock: Callable[[], int] | None = None,
        database_clock: bool = False,
        on_acquired: LoadHook | None = None,
        on_lost: DropHook | None = None,
        track_owners: bool = False,
        safety_margin_ms: int | None = None,
    ) -> None:
        if shard_count <= 0 or lease_ms <= 0:
            raise ValueError(f"shard_count and lease_ms must be positive, got {shard_count} and {lease_ms}")
        margin_ms = min(lease_ms // 10, MAX_SAFETY_MARGIN_MS) if safety_margin_ms is None else safety_margin_ms
        if not 0 <= margin_ms < lease_ms:
            raise ValueError(f"safety_margin_ms must be within [0, lease_ms={lease_ms}), got {margin_ms}")
        self._catalog = catalog
        self._role = role
        self._node_id = node_id
        self._shard_count = shard_count
        self._lease_ms = lease_ms
        self._margin_ms = margin_ms
        self._clock = clock
        self._deadline_clock = clock if deadline_clock is None else deadline_clock
        self._database_clock = database_clock
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._track_owners = track_owners
        # Guards _held, _taking, _owners and _stopped: queries and fenced() come from request threads.
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._taking: set[int] = set()
        """Shards whose catalog acquire is running or returned a lease this round that is not in ``_held`` yet."""
        self._owners: dict[int, ShardOwner] = {}
        self._stopped = False
        self._round_lock = asyncio.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None

    # ------------------------------------------------------------------------------ identity

    @property
    def role(self) -> str:
        """The catalog role whose shards are leased."""
        return self._role

    @property
    def node_id(self) -> str:
        """The lease owner name of this process."""
        return self._node_id

    @property
    def shard_count(self) -> int:
        """The role's fixed shard count."""
        return self._shard_count

    @property
    def lease_ms(self) -> int:
        """Lease lifetime in milliseconds."""
        return self._lease_ms

    @property
    def safety_margin_ms(self) -> int:
        """How long before its catalog expiry a lease stops being served."""
        return self._margin_ms

    # ------------------------------------------------------------------------------ queries (any thread)

    @property
    def leases(self) -> dict[int, ShardLease]:
        """Leases held right now, served or not, by shard."""
        with self._lock:
            return {shard: held.lease for shard, held in self._held.items()}

    def epoch_of(self, shard: int) -> int | None:
        """The coordinator epoch ``shard`` is served at, or None when this process does not serve it now."""
        now = self._deadline_clock()
        with self._lock:
            held = self._held.get(shard)
            if held is None or held.state is not _State.SERVING or now >= held.serve_until_ms:
                return None
            return held.lease.coordinator_epoch

    def owned_shards(self) -> dict[int, int]:
        """Shards served right now and their coordinator epochs."""
        now = self._deadline_clock()
        with self._lock:
            return {
                shard: held.lease.coordinator_epoch
                for shard, held in self._held.items()
                if held.state is _State.SERVING and now < held.serve_until_ms
            }

    def holds(self, shard: int) -> bool:
        """Whether this process is taking ``shard``'s lease or holds it, served or not, short of its deadline.

        True from before the catalog write that names this process the owner (so from the first moment
        FindCoordinator can send requests here), through the load hook, until the lease is lost or released, its
        serving deadline passes or a newer coordinator epoch is claimed. A request for a shard that is held but
        not served should be told COORDINATOR_LOAD_IN_PROGRESS (retry here), not NOT_COORDINATOR (look
        elsewhere): the catalog names no other owner.
        """
        now = self._deadline_clock()
        with self._lock:
            if shard in self._taking:
                return True
            held = self._held.get(shard)
            return held is not None and not held.superseded and now < held.serve_until_ms

    def owner_of(self, shard: int) -> ShardOwner | None:
        """The live owner of a shard held elsewhere, as of the last round (``track_owners`` only)."""
        with self._lock:
            return self._owners.get(shard)

    def fenced(self, shard: int, coordinator_epoch: int) -> None:
        """A write found ``shard`` claimed past ``coordinator_epoch``: stop serving it now
        (design/kafka-semantics.md §2.10).

        Reports about an epoch this process does not hold are ignored. The lease is kept, so the next round
        renews it and runs the load hook again, which refuses while the newer claim stands.
        """
        with self._lock:
            held = self._held.get(shard)
            if held is None or held.lease.coordinator_epoch != coordinator_epoch or held.state is _State.IDLE:
                return
            held.state = _State.IDLE
            held.superseded = True
        log.warning(
            "%s shard %d was claimed past coordinator epoch %d; not serving it", self._role, shard, coordinator_epoch
        )
        self._on_loop(self._drop, shard, coordinator_epoch)

    # ------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Take and load what is free now, then keep renewing in the background.

        Run it before the server reports SERVING, so the first requests find the shards loaded.
        """
        self._stopping = asyncio.Event()
        await self.run_once()
        self._task = asyncio.create_task(self._renew_forever(self._stopping), name=f"{self._role}-shard-leases")

    async def stop(self) -> None:
        """Stop renewing, stop serving every shard, then release the leases (clean shutdown).

        A round already running finishes first, so nothing it takes stays leased after the release.
        """
        with self._lock:
            self._stopped = True
        if self._stopping is not None:
            self._stopping.set()
        if self._task is not None:
            await self._task
            self._task = None
        async with self._round_lock:
            self._cancel_timer()
            with self._lock:
                held = sorted(self._held.items())
                self._held.clear()
                self._owners.clear()
            for shard, entry in held:
                if entry.state is not _State.IDLE:
                    self._drop(shard, entry.lease.coordinator_epoch)
            if held:
                log.info("releasing %s shards %s", self._role, [shard for shard, _ in held])
                await asyncio.to_thread(self._release, [entry.lease for _, entry in held])

    async def run_once(self) -> None:
        """One round: renew held leases, take free ones, drop what was lost, then load what was taken."""
        async with self._round_lock:
            with self._lock:
                if self._stopped:
                    return
            self._loop = asyncio.get_running_loop()
            to_load: list[tuple[int, _Held]] = []
            try:
                renewals, owners = await asyncio.to_thread(self._catalog_round)
                for renewal in renewals:
                    held = self._apply(renewal)
                    if held is not None and held.state is _State.IDLE:
                        to_load.append((renewal.shard, held))
            finally:
                with self._lock:
                    self._taking.clear()  # every lease taken is in _held now
            if owners:
                with self._lock:
                    for shard, owner in owners.items():
                        if owner is None or shard in self._held:
                            self._owners.pop(shard, None)
                        else:
                            self._owners[shard] = owner
            with self._lock:
                if self._stopped:
                    to_load = []  # stop() releases them; loading now would only be undone
                for _, held in to_load:
                    held.state = _State.LOADING
            await asyncio.gather(*(self._load(shard, held) for shard, held in to_load))
            self._expire_due()

    # ------------------------------------------------------------------------------ rounds

    def _catalog_round(self) -> tuple[list[_Renewal], dict[int, ShardOwner | None]]:
        """The round's catalog round trips, in a worker thread: one transaction renews and takes every shard.

        One transaction a round, not one a shard: on a busy machine a round of a transaction per shard took longer
        than a short lease, and the leases lapsed right after start-up.
        """
        shards = list(range(self._shard_count))
        now = self._deadline_clock()
        lease_now = None if self._database_clock else self._clock()

        def taking(candidates: list[int]) -> None:
            # Held from before the write that can name this process the owner: FindCoordinator may route a request
            # here as soon as it commits, well before the round applies it.
            with self._lock:
                self._taking.update(candidates)

        try:
            result = self._catalog.acquire_shards(
                self._role, shards, self._node_id, self._lease_ms, lease_now, before_write=taking
            )
        except Exception as exc:  # an unreachable catalog: every held shard counts a failed renewal
            with self._lock:
                self._taking.clear()
            return [_Renewal(shard, now, None, exc) for shard in shards], {}
        with self._lock:
            self._taking.intersection_update(result.held)
        renewals = [_Renewal(shard, now, result.held.get(shard)) for shard in shards]
        owners: dict[int, ShardOwner | None] = {}
        if self._track_owners:
            owners = self._read_owners(result)
        return renewals, owners

    def _read_owners(self, result: ShardRound) -> dict[int, ShardOwner | None]:
        """The live owner of each shard held elsewhere (None: no live owner), from the round's own read of the
        leases; empty if the node addresses could not be read."""
        others = {s: lease for s, lease in result.elsewhere.items() if s not in result.held}
        if not others:
            return {}
        try:
            addresses = {n.node_id: n.address for n in self._catalog.list_nodes(self._clock(), role=self._role)}
        except Exception as exc:  # keep what the last round learned
            log.warning("could not read the owners of %s shards %s: %s", self._role, sorted(others), exc)
            return {}
        owners: dict[int, ShardOwner | None] = {}
        for shard, lease in others.items():
            owners[shard] = None
            # judged by the clock the round's expiries were judged by
            if lease.owner_node_id and lease.lease_expires_at_ms > result.now_ms:
                owners[shard] = ShardOwner(lease.owner_node_id, addresses.get(lease.owner_node_id, ""))
        return owners

    def _apply(self, renewal: _Renewal) -> _Held | None:
        """Update one shard from its renewal; returns the held entry when the renewal succeeded."""
        shard = renewal.shard
        with self._lock:
            held = self._held.get(shard)
        if renewal.error is not None:
            if held is not None:
                self._renewal_failed(shard, held, renewal.error)
            return None
        lease = renewal.lease
        if lease is None:
            if held is not None:
                self._lose(shard, "another replica holds its lease", forget=True)
            return None
        if held is not None and held.lease.coordinator_epoch != lease.coordinator_epoch:
            # Lost and taken back between two rounds: what was loaded at the old epoch must not survive.
            self._lose(
                shard, f"its coordinator epoch moved from {held.lease.coordinator_epoch} to {lease.coordinator_epoch}"
            )
            held = None
        elif held is not None and renewal.now_ms >= held.serve_until_ms:
            # Renewed after its serving deadline: whatever was served may have missed a moment; load it afresh.
            self._lose(shard, "its lease was renewed only after its serving deadline", forget=False)
        # From when the renewal started, on this process's deadline clock: the expiry the catalog wrote lies
        # later, whatever clock wrote it.
        serve_until_ms = renewal.now_ms + self._lease_ms - self._margin_ms
        with self._lock:
            if held is None:
                held = self._held[shard] = _Held(lease, serve_until_ms)
                log.debug("acquired %s shard %d at coordinator epoch %d", self._role, shard, lease.coordinator_epoch)
            else:
                held.lease = lease
                held.serve_until_ms = serve_until_ms
            self._owners.pop(shard, None)
        return held

    def _renewal_failed(self, shard: int, held: _Held, error: Exception) -> None:
        left_ms = held.serve_until_ms + self._margin_ms - self._deadline_clock()
        # Stop serving while a third of the lease is left: another replica may take the shard at expiry.
        if left_ms <= self._lease_ms // 3:
            self._lose(shard, f"its lease could not be renewed ({error}) and runs out in {left_ms} ms", forget=False)
            return
        log.warning(
            "renewing %s shard %d failed (%s); lease valid for %d ms more",
            self._role,
            shard,
            error,
            left_ms,
            exc_info=None if isinstance(error, OncelogError) else error,
        )

    async def _load(self, shard: int, held: _Held) -> None:
        epoch = held.lease.coordinator_epoch
        error: Exception | None = None
        try:
            serve = True if self._on_acquired is None else await self._on_acquired(shard, epoch)
        except Exception as exc:  # the lease is kept; the next round loads again
            serve, error = False, exc
        with self._lock:
            current = self._held.get(shard) is held and held.state is _State.LOADING
            if current:
                held.state = _State.SERVING if serve else _State.IDLE
                held.superseded = not serve and error is None
        if not current:
            if serve:  # lost while loading: undo what the hook set up after the drop hook ran
                self._drop(shard, epoch)
            return
        if serve:
            log.info("serving %s shard %d at coordinator epoch %d", self._role, shard, epoch)
        elif error is not None:
            log.warning(
                "loading %s shard %d at coordinator epoch %d failed: %s; retrying next round",
                self._role,
                shard,
                epoch,
                error,
                exc_info=None if isinstance(error, OncelogError) else error,
            )
        else:
            log.error(
                "%s shard %d: coordinator epoch %d was refused (a newer one was claimed); not serving it",
                self._role,
                shard,
                epoch,
            )

    def _lose(self, shard: int, why: str, *, forget: bool = True) -> None:
        """Stop serving ``shard`` (drop hook); ``forget`` also forgets the lease (it is not ours any more)."""
        with self._lock:
            held = self._held.get(shard)
            if held is None:
                return
            was_served = held.state is not _State.IDLE
            held.state = _State.IDLE
            if forget:
                del self._held[shard]
        if was_served:
            log.warning(
                "stopped serving %s shard %d (coordinator epoch %d): %s",
                self._role,
                shard,
                held.lease.coordinator_epoch,
                why,
            )
            self._drop(shard, held.lease.coordinator_epoch)

    def _drop(self, shard: int, coordinator_epoch: int) -> None:
        if self._on_lost is None:
            return
        try:
            self._on_lost(shard, coordinator_epoch)
        except Exception:
            log.exception("dropping %s shard %d failed", self._role, shard)

    # ------------------------------------------------------------------------------ safety margin

    def _expire_due(self) -> None:
        """Drop every shard past its serving deadline, then wake up again at the next deadline."""
        self._cancel_timer()
        now = self._deadline_clock()
        with self._lock:
            due = [s for s, h in self._held.items() if h.state is not _State.IDLE and now >= h.serve_until_ms]
        for shard in due:
            self._lose(shard, "its lease runs out before it could be renewed", forget=False)
        self._arm_timer()

    def _arm_timer(self) -> None:
        self._cancel_timer()
        with self._lock:
            deadlines = [h.serve_until_ms for h in self._held.values() if h.state is not _State.IDLE]
        if deadlines and self._loop is not None:
            # The timer only wakes the check; the injected clock decides, so an early wake-up just re-arms.
            delay_s = max(0, min(deadlines) - self._deadline_clock()) / 1000
            self._timer = self._loop.call_later(delay_s, self._expire_due)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # ------------------------------------------------------------------------------ helpers

    def _on_loop(self, callback: Callable[[int, int], None], shard: int, coordinator_epoch: int) -> None:
        """Run ``callback`` now on the event loop's thread, or hand it to the loop from any other thread."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop or loop.is_closed():
            callback(shard, coordinator_epoch)
        else:
            loop.call_soon_threadsafe(callback, shard, coordinator_epoch)

    def _release(self, leases: list[ShardLease]) -> None:
        for lease in leases:
            try:
                self._catalog.release_shard(self._role, lease.shard, self._node_id, lease.coordinator_epoch)
            except Exception as exc:
                log.warning("could not release %s shard %d (%s); its lease will lapse", self._role, lease.shard, exc)

    def next_round_delay_s(self) -> float:
        """Seconds until the next renewal round: a third of a lease after the oldest held lease was written.

        Counting from when the leases were written, not from the end of the last round, keeps a slow round (a
        busy catalog, a loaded machine) from pushing the renewals toward the serving deadline: rounds would
        otherwise come every third of a lease *plus* the round's own duration. Never sooner than a fifteenth of
        a lease, so renewals that keep failing are not retried in a tight loop.
        """
        interval_ms = self._lease_ms / 3
        floor_ms = self._lease_ms / 15
        with self._lock:
            # when each renewal started, on the deadline clock
            written = [held.serve_until_ms + self._margin_ms - self._lease_ms for held in self._held.values()]
        due_in_ms = interval_ms if not written else min(written) + interval_ms - self._deadline_clock()
        return max(floor_ms, min(interval_ms, due_in_ms)) / 1000

    async def _renew_forever(self, stopping: asyncio.Event) -> None:
        while True:
            try:
                await asyncio.wait_for(stopping.wait(), self.next_round_delay_s())
                return
            except TimeoutError:
                pass
            try:
                await self.run_once()
            except Exception:
                log.exception("%s shard lease round failed; retrying", self._role)


__all__ = ["MAX_SAFETY_MARGIN_MS", "DropHook", "LoadHook", "ShardLeaseManager", "ShardOwner"]
