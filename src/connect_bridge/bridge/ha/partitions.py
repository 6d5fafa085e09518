"""Several bridges share the groups: which ones this bridge answers for, and the hand-overs.

Kafka spreads its consumer groups over the partitions of ``__consumer_offsets`` and moves a
partition's groups when its leader changes; the bridges do the same with parts Kafka provides
(docs/high-availability.md):

* a group's records live in partition ``partition_for(group id)`` of the state topic;
* the bridges are the members of one consumer group on that topic (``ha.membership``), so Kafka's
  group coordinator decides which bridge holds which partition;
* a bridge writes a partition through a transactional producer of its own (``partitioned_store``):
  the next holder's ``init_transactions`` fences it.

This module is the server's side of it. A partition is *loading* from its assignment until its
records are replayed, then *owned* until it is revoked or fenced. Group requests of a group whose
partition is not owned get NOT_COORDINATOR (COORDINATOR_LOAD_IN_PROGRESS while loading), and so do
all of them while the bridge's lease in the bridges' group is not fresh: a bridge paused for longer
than a session timeout has lost its partitions and must not answer for them before it learns so
(a steady heartbeat writes nothing, so fencing alone would not stop it).

Giving a partition up closes it to requests first, then unloads its groups (parked JoinGroup and
SyncGroup answered NOT_COORDINATOR), then waits until everything written for it is durable, and
only then lets the membership hand it on: the next owner reads every record this bridge revealed.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.ha.owners import BridgeAddress
from connect_bridge.bridge.ha.settings import HaSettings
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.upstream_security import UpstreamSecurity
from connect_bridge.bridge.stores.partitioned_store import PartitionedFenced
from connect_bridge.bridge.upstream.cluster import OWNER_UNKNOWN
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.partitioning import partition_for
from connect_bridge.state.records import Record

log = logging.getLogger("connect_bridge.ha")

HANDOVER_TIMEOUT_S = 60.0
"""The longest a rebalance callback waits for the loop to load or unload partitions (a bridge
that cannot do it in this time is stopping or stuck; the membership then carries on)."""


class PartitionPhase(StrEnum):
    LOADING = "loading"
    OWNED = "owned"


_REFUSAL = {
    None: ErrorCode.NOT_COORDINATOR,
    PartitionPhase.LOADING: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


class PartitionStore(Protocol):
    """What this module needs of ``partitioned_store.PartitionedTopicStore``."""

    partitions: int

    def acquire(self, partition: int) -> list[Record]: ...
    def release(self, partition: int) -> None: ...


class UpstreamOptions(Protocol):
    """What the membership needs of the server's options (``server_options.ServerOptions``)."""

    upstream: list[tuple[str, int]]
    state_topic: str
    upstream_security: UpstreamSecurity


class Membership(Protocol):
    """What this module needs of ``ha.membership.BridgeMembership``."""

    def start(self) -> None: ...
    def owners(self) -> dict[int, BridgeAddress]: ...
    def lease_valid(self) -> bool: ...
    def drain(self, timeout_s: float = 30.0) -> None: ...
    def close(self) -> None: ...
    def failed(self) -> str | None: ...


@dataclass(eq=False)
class HighAvailability:
    """The partitions this bridge holds and the gate in front of their groups (module docstring)."""

    settings: HaSettings
    store: PartitionStore
    on_loaded: Callable[[set[str]], None]
    """Called with the group ids a partition brought in (the server applies the config view)."""
    fail: Callable[[str], None]
    """Stops the bridge with one line (a partition that cannot be read)."""
    metrics: Metrics | None = None
    phases: dict[int, PartitionPhase] = field(default_factory=dict)
    lost: set[str] = field(default_factory=set)
    """Groups this bridge gave up: their requests get NOT_COORDINATOR here rather than being relayed
    upstream (which knows nothing of them) until their partition comes back."""
    membership: Membership | None = None
    node_id: int | None = None
    """This bridge's name among the bridges: ``ha.node_id``, else its listen port (the server
    sets it once bound)."""
    runtime: CoordinatorRuntime | None = None
    """The way to the coordinator, from :meth:`start` on: partitions are loaded and dropped
    through it, as requests change it."""
    _loop: asyncio.AbstractEventLoop | None = None
    _held_lease: bool = False

    # ------------------------------------------------------------------ lifecycle
    def __post_init__(self) -> None:
        if self.node_id is None:
            self.node_id = self.settings.node_id

    def start(self, runtime: CoordinatorRuntime, membership_factory: Callable[..., Membership]) -> None:
        """Join the bridges' group; partitions arrive through the callbacks and are loaded into
        the coordinator through ``runtime``."""
        self.runtime = runtime
        self._loop = asyncio.get_running_loop()
        self.membership = membership_factory(on_assigned=self._assigned, on_revoked=self._revoked)
        self.membership.start()

    async def drain(self) -> None:
        """Give every partition to the other bridges now (rolling upgrade of the bridges)."""
        if self.membership is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.membership.drain)

    async def close(self) -> None:
        if self.membership is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.membership.close)

    # ------------------------------------------------------------------ the gate
    def partition(self, group_id: str) -> int:
        return partition_for(group_id, self.store.partitions)

    def lease_valid(self) -> bool:
        return self.membership is not None and self.membership.lease_valid()

    def relay_allowed(self) -> bool:
        """Whether the proxy may forward a client's request now: not after the lease, once held
        (a partition owned, or a request forwarded under it), ran out (``Relay.may_forward``). A
        bridge that has not joined yet holds nothing stale."""
        if self.lease_valid():
            self._held_lease = True
            return True
        return not self._held_lease

    def refusal(self, group_id: str) -> int | None:
        """The error code a request of ``group_id`` gets here, or None when this bridge answers it."""
        phase = self.phases.get(self.partition(group_id))
        if phase is PartitionPhase.OWNED and self.lease_valid():
            return None
        return int(_REFUSAL.get(phase, ErrorCode.NOT_COORDINATOR))

    def gave_up(self, group_id: str) -> bool:
        return group_id in self.lost

    def not_owned_here(self, group_id: str) -> bool:
        """Whether a request of ``group_id`` is refused here now (:meth:`refusal`): the relay
        answers such a group's membership requests here instead of passing them upstream."""
        return self.refusal(group_id) is not None

    def owner(self, group_id: str) -> BridgeAddress | None:
        """The owning bridge (its node id, host and proxy base port), None while unknown."""
        if self.membership is None:
            return None
        return self.membership.owners().get(self.partition(group_id))

    def listener_for(self, matches: Callable[[str], bool], group_id: str) -> tuple[str, int] | object | None:
        """Where FindCoordinator sends a client for ``group_id`` (``UpstreamCluster.owner_of``): the
        owning bridge's (host, proxy base port); None for this bridge or a group the bridges do not
        coordinate (``matches`` is ``coordinated_groups``); ``OWNER_UNKNOWN`` while it moves."""
        if not matches(group_id) or self.refusal(group_id) is None:
            return None
        owner = self.owner(group_id)
        if owner is None:
            return OWNER_UNKNOWN
        if owner.node_id == self.node_id:
            return None
        return owner.host, owner.port

    # ------------------------------------------------------------------ hand-overs
    def _assigned(self, partitions: frozenset[int]) -> None:
        """Membership thread: blocks until the partitions are loaded."""
        self._on_loop(self._acquire(partitions))

    def _revoked(self, partitions: frozenset[int]) -> None:
        """Membership thread: blocks until the bridge stopped answering for the partitions and
        everything it wrote for them is durable."""
        self._on_loop(self._give_up(partitions))

    def _on_loop(self, coro: Awaitable[None]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(coro, loop)  # type: ignore[arg-type]
        try:
            future.result(HANDOVER_TIMEOUT_S)
        except Exception:
            log.exception("partition hand-over did not finish")

    async def _acquire(self, partitions: frozenset[int]) -> None:
        loop = asyncio.get_running_loop()
        for partition in sorted(partitions):
            self.phases[partition] = PartitionPhase.LOADING
        for partition in sorted(partitions):
            try:
                records = await loop.run_in_executor(None, self.store.acquire, partition)
            except PartitionedFenced:  # released while it loaded: nothing to install
                self.phases.pop(partition, None)
                continue
            except Exception as exc:
                self.phases.pop(partition, None)
                self.fail(f"cannot load partition {partition} of the state topic: {exc}")
                return
            if self.phases.get(partition) is not PartitionPhase.LOADING:
                continue  # revoked while it loaded
            runtime = self.runtime
            assert runtime is not None
            now = runtime.clock()
            loaded = runtime.run(lambda coordinator: coordinator.replay(records, now))  # noqa: B023
            self.lost -= {g for g in self.lost if self.partition(g) == partition}
            self.phases[partition] = PartitionPhase.OWNED
            self._held_lease = True
            self.on_loaded(loaded)
            log.info(
                "now coordinating partition %d of the state topic: %d records, %d groups",
                partition,
                len(records),
                len(loaded),
            )
        self._observe()

    def _drop(self, partitions: frozenset[int]) -> set[str]:
        """Stop answering for ``partitions`` now: close the gate, unload their groups (parked
        JoinGroup/SyncGroup answered NOT_COORDINATOR) and remember them as given up."""
        runtime = self.runtime
        for partition in partitions:
            self.phases.pop(partition, None)
        if runtime is None:  # not started: nothing loaded
            return set()
        groups = {g for g in runtime.coordinator.groups if self.partition(g) in partitions}
        runtime.run(lambda coordinator: coordinator.unload(groups))
        self.lost |= groups
        return groups

    async def _give_up(self, partitions: frozenset[int]) -> None:
        """Revoked: drop the partitions, wait until what was written for them is durable, then let
        the store stop writing them (the membership hands them on when this returns)."""
        groups = self._drop(partitions)
        try:
            if self.runtime is not None:
                await self.runtime.durable()
        except Exception as exc:  # fenced or failed: the store says so on its own path
            log.warning("giving up partitions %s: writes not confirmed: %s", sorted(partitions), exc)
        loop = asyncio.get_running_loop()
        for partition in sorted(partitions):
            await loop.run_in_executor(None, self.store.release, partition)
        if groups or partitions:
            log.info("gave up partitions %s of the state topic (%d groups)", sorted(partitions), len(groups))
        self._observe()

    def fenced(self, partitions: frozenset[int]) -> None:
        """The committer found this bridge's writes to ``partitions`` fenced: another bridge holds
        them. Stop answering for their groups at once (the store has dropped them already)."""
        log.warning(
            "partitions %s of the state topic were taken over by another bridge (writes fenced); "
            "dropping their groups",
            sorted(partitions),
        )
        if self.metrics is not None:
            self.metrics.ha_fenced.inc(len(partitions))
        self._drop(partitions)
        self._observe()

    async def watch(self) -> None:
        """Keep the partition-map metrics current (other bridges' rebalances change it too), and
        stop the bridge when its membership gave up (a load that failed): it then holds nothing."""
        while True:
            self._observe()
            failed = self.membership.failed() if self.membership is not None else None
            if failed is not None:  # it left the bridges' group for good: a restart rejoins it
                self.fail(f"the bridges' group membership ended: {failed}")
                return
            await asyncio.sleep(self.settings.refresh_owners_ms / 1000)

    # ------------------------------------------------------------------ reporting
    def owned(self) -> list[int]:
        return sorted(p for p, phase in self.phases.items() if phase is PartitionPhase.OWNED)

    def status(self) -> dict[str, Any]:
        """``GET /admin/ha``: this bridge, its partitions and everyone's (``describe --admin``)."""
        owners = self.membership.owners() if self.membership is not None else {}
        return {
            "node_id": self.node_id,
            "lease_valid": self.lease_valid(),
            "partitions": self.store.partitions,
            "owned": self.owned(),
            "loading": sorted(p for p, phase in self.phases.items() if phase is PartitionPhase.LOADING),
            "owners": {str(p): dataclasses.asdict(a) for p, a in sorted(owners.items())},
            "groups": {
                g: self.partition(g) for g in sorted(self.runtime.coordinator.groups if self.runtime else ())
            },
        }

    def _observe(self) -> None:
        if self.metrics is None or self.membership is None:
            return
        owners = {p: str(a.node_id) for p, a in self.membership.owners().items()}
        self.metrics.observe_ha(owners, self.owned(), self.lease_valid())


def membership_factory(
    settings: HaSettings, options: UpstreamOptions, me: BridgeAddress
) -> Callable[..., Membership]:
    """Builds the ``BridgeMembership``: this bridge (``me``) is named by its node id and reached at
    its proxy listeners (upstream broker N's listener is base port + N on every bridge)."""
    from connect_bridge.bridge.ha.membership import BridgeMembership

    def build(**callbacks: Any) -> Membership:
        return BridgeMembership(  # type: ignore[no-any-return]
            ",".join(f"{h}:{p}" for h, p in options.upstream),
            options.state_topic,
            settings.group,
            me,
            session_timeout_ms=settings.session_timeout_ms,
            heartbeat_interval_ms=settings.heartbeat_interval_ms,
            refresh_owners_ms=settings.refresh_owners_ms,
            client_options=options.upstream_security.kafka_python_options(),
            **callbacks,
        )

    return build
