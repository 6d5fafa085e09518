"""Adoption wired into the server (issue 16, docs/adoption.md): relay, observe, take over.

For a group matching ``adoption.groups`` that exists upstream the bridge writes ``relaying`` and
relays the group's requests unchanged (``Relay.coordinates`` reads the ownership table). Each
relayed exchange is fed to the :class:`RelayObserver`, and the member ids in it are noted against
the client connection they came through (dropped when it closes): "members behind the bridge".

The takeover, when ``takeover_ready`` holds on a fresh upstream DescribeGroups (mode ``auto``, or
``connect-bridge adopt GROUP`` in mode ``command``): the group's new requests are held (their
connection's reader waits, so per-connection order is kept), its relayed requests already in flight
are let finish, the condition is checked once more, ``GroupCoordinator.adopt`` runs and its records
are made durable; only then are the held requests let through, and they are answered locally. The
upstream group is then emptied with one LeaveGroup of the adopted members and watched for a member
the bridge did not adopt (a conflict: an ERROR line, a metric, and the status).

The hand-back (``connect-bridge release GROUP``): ``releasing`` is made durable and the bridge's
group rebalances; the generation it completes revokes everything (``state.adoption.handback``). A member's
JoinGroup that reports an empty allocation removes it (UNKNOWN_MEMBER_ID, so it rejoins with an
empty id); a JoinGroup with an empty or unknown id is held until the bridge's group is empty and
every member sent away is back with its rejoin (or ``settle_timeout_ms`` passed): then the
tombstone and ``released`` are made durable and the held rejoins are relayed together
(docs/adoption.md "Hand-back"). A ``released`` group is relayed and still observed; ``connect-bridge
adopt GROUP`` writes ``relaying`` for it and takes the normal path again (docs/adoption.md "Adopting a
released group again").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.bridge.adoption.observer import OBSERVED_APIS, RelayObserver
from connect_bridge.bridge.adoption.settings import AdoptionSettings
from connect_bridge.bridge.adoption.upstream import UpstreamGroups
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.edge.connection import Connection
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import ApiKey
from connect_bridge.codecs.requests import DecodedRequest, decode_response
from connect_bridge.state.adoption.build import AdoptionError
from connect_bridge.state.adoption.handback import reports_nothing
from connect_bridge.state.adoption.observation import (
    Observation,
    TakeoverCheck,
    takeover_ready,
    upstream_conflict,
)
from connect_bridge.state.adoption.records import OwnershipError, OwnershipState
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.wire.classic import (
    classic_heartbeat_from_wire,
    classic_heartbeat_response_to_wire,
    join_from_wire,
)

log = logging.getLogger("connect_bridge.adoption")
_SIZE = struct.Struct(">i")
_UPSTREAM_GONE = frozenset({ClassicGroupState.EMPTY.value, ClassicGroupState.DEAD.value})
_MEMBER_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT})
_OBSERVED_PHASES = frozenset({OwnershipState.RELAYING, OwnershipState.RELEASED})
"""Phases whose relayed requests are observed. ``released`` too: the workers a hand-back sent
upstream rejoin Kafka's group through the bridge, and observing that generation is what lets
``connect-bridge adopt`` take a released group over again at once (a fresh observation would wait
for the next rebalance, which nothing triggers while every worker stays put)."""


@dataclass
class GroupProgress:
    """What describe, /metrics and ``adopt`` show of one group's adoption."""

    last_check: TakeoverCheck | None = None
    taken_over_generation: int | None = None
    upstream_state: str | None = None
    """The upstream group's state at the last look after the takeover (Empty/Dead once drained)."""
    conflict: str | None = None
    takeover_step: str | None = None
    """While a takeover attempt runs: ``checking`` (the first fresh upstream DescribeGroups),
    ``holding`` (the group's new requests are held while in-flight ones finish and the condition is
    checked again), ``committing`` (the group's records are written and awaited durable; still
    holding); None otherwise. Soft state, for the operator (a takeover that holds the group for
    ``settle_timeout_ms`` shows here) and for the Java proof, which kills the bridge when it
    reports ``holding`` or ``committing`` (docs/adoption.md "kill -9 during the takeover")."""


_OWED_ROUND_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT})
"""The requests of an owed unsynced leader round (``Adoption.owed_round``)."""


def _locally_ready(obs: Observation, behind: set[str]) -> bool:
    """The takeover condition's parts the relayed traffic alone can tell; only when they hold is
    the upstream asked (so a busy relay does not send a DescribeGroups per heartbeat)."""
    gen = obs.generation()
    return (
        gen is not None
        and obs.ending is None
        and bool(gen.members)
        and all(m.member_id in behind and m.joined and m.synced for m in gen.members)
    )


@dataclass(eq=False, repr=False)
class Adoption:
    """The server's adoption side. Every change it makes to the coordinator (an ownership phase, a
    takeover, a member sent away) is a step run through ``runtime``, as a request's is, and awaited
    durable there before anything that depends on it.

    A dataclass: the runtime plus per-group bookkeeping that starts empty; the relay observer is
    derived from the settings in ``__post_init__``."""

    settings: AdoptionSettings
    upstream: UpstreamGroups
    runtime: CoordinatorRuntime
    metrics: Any = None
    observer: RelayObserver = field(init=False)
    progress: dict[str, GroupProgress] = field(default_factory=dict, init=False)
    _members: dict[Connection, dict[str, set[str]]] = field(default_factory=dict, init=False)
    _inflight: dict[str, int] = field(default_factory=dict, init=False)
    _settled: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    _holds: dict[str, asyncio.Event] = field(default_factory=dict, init=False)
    _running: dict[str, asyncio.Task[Any]] = field(default_factory=dict, init=False)
    _locks: dict[str, asyncio.Lock] = field(default_factory=dict, init=False)
    _released: dict[str, asyncio.Event] = field(default_factory=dict, init=False)
    """Hand-back: set once ``released`` is durable; the held rejoins then go upstream."""
    _sent_away: dict[str, set[Connection]] = field(default_factory=dict, init=False)
    """Hand-back: connections whose member the bridge removed, until they closed or are held."""
    _held: dict[str, set[Connection]] = field(default_factory=dict, init=False)
    _empty_since: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self.observer = RelayObserver(self.settings.watches)

    # ------------------------------------------------------------------ routing
    def phase(self, group_id: str) -> OwnershipState | None:
        return self.runtime.coordinator.ownership.state(group_id)

    async def before_routing(self, conn: Connection, api_key: int, decoded: DecodedRequest) -> bool:
        """Called for a decoded group request before it is routed. Waits while the group is being
        taken over, and puts a group seen for the first time under adoption if it lives upstream.
        True when the request will be relayed as part of a group under adoption: the caller then
        hands its outcome to :meth:`relayed` (or calls :meth:`not_relayed`)."""
        group_id = getattr(decoded.body, "group_id", None)
        if not group_id or not self.settings.watches(group_id):
            return False
        hold = self._holds.get(group_id)
        while hold is not None:
            await hold.wait()
            hold = self._holds.get(group_id)
        if self.phase(group_id) is OwnershipState.RELEASING and api_key == ApiKey.JOIN_GROUP:
            await self._route_releasing(conn, group_id, decoded)
        if api_key == ApiKey.JOIN_GROUP and self.phase(group_id) is None:
            local = self.runtime.coordinator.groups.get(group_id)
            if local is None or not local.members:  # a config view makes an empty one
                await self._classify(group_id)
        if self.phase(group_id) not in _OBSERVED_PHASES or self.owed_round(api_key, decoded):
            return False
        self._inflight[group_id] = self._inflight.get(group_id, 0) + 1
        return True

    def owed_round(self, api_key: int, decoded: DecodedRequest) -> bool:
        """``released``: whether the coordinator answers this request itself, as part of the
        unsynced leader round owed to a worker a timer removed during the hand-back (its
        JoinGroup, then that round's SyncGroup and Heartbeat: ``GroupCoordinator.unsynced_round``),
        although the group is the upstream's: neither relayed nor observed."""
        if api_key not in _OWED_ROUND_APIS:
            return False  # (DescribeGroups, ListGroups and the rest name no single group_id)
        if self.phase(decoded.body.group_id) is not OwnershipState.RELEASED:
            return False
        coordinator = self.runtime.coordinator
        if api_key == ApiKey.JOIN_GROUP:
            return coordinator.unsynced_round_due(join_from_wire(decoded.body, decoded.api_version))
        body = decoded.body
        return coordinator.from_unsynced_round(body.group_id, body.member_id, body.generation_id)

    async def _classify(self, group_id: str) -> None:
        """A watched group's first JoinGroup: ``relaying`` if the upstream has the group with
        members. If the upstream cannot be asked the group is relayed too (the safe side: the
        bridge never forms a second group next to one it could not see)."""
        try:
            described = await self.upstream.describe(group_id)
            lives_upstream = described.error_code == 0 and described.state not in _UPSTREAM_GONE
        except Exception as exc:  # UpstreamGroupError, or an answer that cannot be read
            log.warning("adoption: cannot describe %s upstream (%s): relaying it", group_id, exc)
            lives_upstream = True
        if not lives_upstream or self.phase(group_id) is not None:
            return
        self.runtime.run(
            lambda c: c.change_ownership(group_id, OwnershipState.RELAYING, -1, self.runtime.clock())
        )
        log.info(
            "adoption: group %s lives upstream: relaying it until every member is behind the bridge", group_id
        )
        self.observe_phase(group_id)

    def not_relayed(self, group_id: str) -> None:
        self._finished(group_id)

    def relayed(self, conn: Connection, payload: bytes, decoded: DecodedRequest, outcome: Any) -> None:
        """A relayed request of a group under adoption: observe its exchange when answered."""
        group_id = decoded.body.group_id
        if not isinstance(outcome, asyncio.Future):
            self._finished(group_id)
            return

        def done(future: asyncio.Future[Any]) -> None:
            self._finished(group_id)
            if future.cancelled() or future.exception() is not None:
                return
            frame = future.result()
            self._exchange(conn, payload, decoded, frame)

        outcome.add_done_callback(done)

    def _finished(self, group_id: str) -> None:
        self._inflight[group_id] = max(0, self._inflight.get(group_id, 0) - 1)
        self._settled.set()

    def _exchange(self, conn: Connection, payload: bytes, decoded: DecodedRequest, frame: Any) -> None:
        api_key, body = decoded.api_key, decoded.body
        group_id = body.group_id
        if api_key in OBSERVED_APIS:
            self.observer.observe(_SIZE.pack(len(payload)) + payload, frame, self.runtime.clock(), conn.host)
        ids = self._members.setdefault(conn, {}).setdefault(group_id, set())
        if api_key in _MEMBER_APIS and body.member_id:
            ids.add(body.member_id)
        if api_key == ApiKey.JOIN_GROUP:
            with contextlib.suppress(Exception):  # the observer already logged an odd answer
                answer = decode_response(api_key, decoded.api_version, frame)
                if answer.member_id:
                    ids.add(answer.member_id)
        elif api_key == ApiKey.LEAVE_GROUP:
            ids.difference_update(m.member_id for m in (body.members or ()))
            if body.member_id:
                ids.discard(body.member_id)
        self.poke(group_id)

    def connection_closed(self, conn: Connection) -> None:
        self._members.pop(conn, None)
        for conns in (*self._sent_away.values(), *self._held.values()):
            conns.discard(conn)

    # ------------------------------------------------------------------ hand-back
    async def _route_releasing(self, conn: Connection, group_id: str, decoded: DecodedRequest) -> None:
        """Per-member routing of a JoinGroup while ``releasing``. A member of the bridge's group that
        still runs something joins the bridge's group (whose generation revokes everything,
        ``state.adoption.handback``); one that reports nothing is removed and answered locally
        (UNKNOWN_MEMBER_ID: it joins again with an empty id). A JoinGroup with an empty or unknown
        id waits here until ``released`` is durable, then goes upstream; if it reports nothing, a
        member of the bridge's group with its url or instance id is an earlier incarnation of the
        worker, which has stopped, and is removed at once (``release_returned``). Other requests
        of the group are the bridge's to answer (a removed member's Heartbeat: UNKNOWN_MEMBER_ID)."""
        member_id = decoded.body.member_id or ""
        group = self.runtime.coordinator.groups.get(group_id)
        if member_id and member_id in (getattr(group, "members", None) or {}):
            protocols = join_from_wire(decoded.body, decoded.api_version).protocols
            if not reports_nothing(protocols):
                return  # joins the revoking generation
            if self.runtime.run(lambda c: c.release_member(group_id, member_id, self.runtime.clock())):
                self._sent_away.setdefault(group_id, set()).add(conn)
                log.info("adoption: hand-back of %s: member %s sent upstream", group_id, member_id)
                await self.finish_release(group_id)
            return
        join = join_from_wire(decoded.body, decoded.api_version)
        stale = self.runtime.run(
            lambda c: c.release_returned(
                group_id, join.protocols, join.group_instance_id, self.runtime.clock()
            )
        )
        if stale:  # an earlier incarnation of this worker, which has stopped: no hold for it
            log.info("adoption: hand-back of %s: %s came back stopped, sent upstream", group_id, stale)
        if self.runtime.coordinator.unsynced_round_due(join):
            # answered here with a leader round it never syncs (``state.adoption.handback``), then held
            return
        released = self._released.setdefault(group_id, asyncio.Event())
        held = self._held.setdefault(group_id, set())
        held.add(conn)
        try:
            await self.finish_release(group_id)
            await released.wait()
        finally:
            held.discard(conn)

    async def finish_release(self, group_id: str) -> bool:
        """Write the tombstone and ``released`` once the bridge's group is empty and every member
        sent away is back with its rejoin (held), or ``settle_timeout_ms`` after the group emptied
        (a worker that does not come back is gone or partitioned: as after its session timeout)."""
        group = self.runtime.coordinator.groups.get(group_id)
        if self.phase(group_id) is not OwnershipState.RELEASING or getattr(group, "members", None):
            return False
        loop = asyncio.get_running_loop()
        missing = self._sent_away.get(group_id, set()) - self._held.get(group_id, set())
        emptied = self._empty_since.setdefault(group_id, loop.time())
        if missing and loop.time() - emptied < self.settings.settle_timeout_ms / 1000:
            return False
        async with self._locks.setdefault(group_id, asyncio.Lock()):
            if not self.runtime.run(lambda c: c.finish_release(group_id, self.runtime.clock())):
                return self.phase(group_id) is OwnershipState.RELEASED
            await self.runtime.durable()  # before any held rejoin goes upstream
        self._sent_away.pop(group_id, None)
        self._empty_since.pop(group_id, None)
        held = len(self._held.get(group_id, ()))
        self._released.setdefault(group_id, asyncio.Event()).set()
        log.info("adoption: group %s released upstream; %d rejoins go there now", group_id, held)
        self.observe_phase(group_id)
        return True

    def _local_members(self, group_id: str) -> int:
        return len(getattr(self.runtime.coordinator.groups.get(group_id), "members", None) or {})

    async def command_release(self, group_id: str) -> tuple[bool, str]:
        """``connect-bridge release GROUP``: start handing an adopted group back (or report that it
        is under way / done). True when ``releasing`` or ``released`` is durable."""
        if not self.settings.watches(group_id):
            return False, f"group {group_id} does not match adoption.groups"
        phase = self.phase(group_id)
        if phase is OwnershipState.ADOPTED:
            async with self._locks.setdefault(group_id, asyncio.Lock()):
                try:
                    self.runtime.run(lambda c: c.start_release(group_id, self.runtime.clock()))
                except (AdoptionError, OwnershipError) as exc:
                    return False, str(exc)
                self._released[group_id] = asyncio.Event()
                self._empty_since.pop(group_id, None)
                await self.runtime.durable()  # before any member is sent away
            log.info("adoption: hand-back of group %s started", group_id)
            self.observe_phase(group_id)
            await self.finish_release(group_id)
            phase = self.phase(group_id)
        if phase is OwnershipState.RELEASED:
            return True, f"group {group_id} is released: the upstream coordinator has it"
        if phase is OwnershipState.RELEASING:
            left = self._local_members(group_id)
            return True, (
                f"group {group_id} is being handed back: {left} member(s) left in the bridge's group, "
                "each sent upstream at its next request"
            )
        shown = phase.value if phase is not None else "none"
        return False, f"group {group_id} is not adopted (phase {shown}): nothing to hand back"

    def behind(self, group_id: str) -> set[str]:
        """Member ids of ``group_id`` with a live client connection through the bridge."""
        out: set[str] = set()
        for groups in self._members.values():
            out |= groups.get(group_id, set())
        return out

    # ------------------------------------------------------------------ takeover
    def poke(self, group_id: str, periodic: bool = False) -> None:
        """Start a takeover attempt (mode ``auto``) when the relayed traffic says it may be ready;
        ``periodic`` (the watch loop, every ``check_interval_ms``) also when it does not, because the
        upstream group may have emptied by its session timers, which no relayed request tells
        (then the group is taken over with no member: ``TakeoverCheck.emptied``)."""
        if self.settings.mode != "auto" or group_id in self._running:
            return
        if self.phase(group_id) is not OwnershipState.RELAYING:
            return
        obs = self.observer.observation(group_id)
        if periodic or (obs is not None and _locally_ready(obs, self.behind(group_id))):
            task = asyncio.get_running_loop().create_task(self.take_over(group_id))
            self._running[group_id] = task
            task.add_done_callback(lambda done: self._attempt_over(group_id, done))

    def _attempt_over(self, group_id: str, task: asyncio.Task[Any]) -> None:
        self._running.pop(group_id, None)
        if not task.cancelled() and task.exception() is not None:  # relaying simply goes on
            log.error("adoption: takeover attempt for %s failed: %r", group_id, task.exception())

    async def check(self, group_id: str) -> TakeoverCheck:
        """The takeover condition now, on a fresh upstream DescribeGroups. When only a rebalance
        through the relay can show the upstream's generation (``TakeoverCheck.rejoin``: after a
        restart the observation starts empty), the members are asked to rejoin once
        (:meth:`asks_rejoin`)."""
        try:
            described = await self.upstream.describe(group_id)
        except Exception as exc:  # UpstreamGroupError, or an answer that cannot be read
            check = TakeoverCheck(False, f"cannot describe the group upstream: {exc}")
        else:
            obs = self.observer.observation(group_id) or Observation(group_id)
            check = takeover_ready(obs, self.behind(group_id), described)
            if check.rejoin and self.observer.observing(group_id).ask_rejoin(check.rejoin):
                log.info(
                    "adoption: group %s: %s; asking its %d members to rejoin so the upstream "
                    "rebalances through the bridge",
                    group_id,
                    check.reason,
                    len(check.rejoin),
                )
        self.progress.setdefault(group_id, GroupProgress()).last_check = check
        return check

    def rejoin_answer(self, api_key: int, decoded: DecodedRequest) -> Any:
        """The REBALANCE_IN_PROGRESS the bridge answers itself, instead of relaying, to the
        Heartbeat of a relayed group's member asked to rejoin (:meth:`check`; once per member);
        None for any other request."""
        if api_key != ApiKey.HEARTBEAT or self.phase(decoded.body.group_id) is not OwnershipState.RELAYING:
            return None
        obs = self.observer.observation(decoded.body.group_id)
        beat = classic_heartbeat_from_wire(decoded.body, decoded.api_version)
        if obs is None or not obs.answers_rejoin(beat):
            return None
        log.info("adoption: asked member %s of %s to rejoin", beat.member_id, beat.group_id)
        rejoin = capi.HeartbeatResponse(error_code=int(ErrorCode.REBALANCE_IN_PROGRESS))
        return classic_heartbeat_response_to_wire(rejoin, decoded.api_version)

    async def take_over(self, group_id: str) -> TakeoverCheck:
        """One takeover attempt; the answer says whether it happened, or why not."""
        lock = self._locks.setdefault(group_id, asyncio.Lock())
        async with lock:
            phase = self.phase(group_id)
            if phase is not OwnershipState.RELAYING:
                return TakeoverCheck(False, f"group {group_id} is not relaying (phase {phase})")
            progress = self.progress.setdefault(group_id, GroupProgress())
            progress.takeover_step = "checking"
            try:
                return await self._take_over_locked(group_id, progress)
            finally:
                progress.takeover_step = None

    async def _take_over_locked(self, group_id: str, progress: GroupProgress) -> TakeoverCheck:
        """The takeover proper (:meth:`take_over` holds the group's lock)."""
        check = await self.check(group_id)
        if not check.ready:
            return check
        hold = self._holds[group_id] = asyncio.Event()
        progress.takeover_step = "holding"
        try:
            if not await self._settle(group_id):
                return TakeoverCheck(False, "relayed requests still in flight; retrying later")
            check = await self.check(group_id)  # nothing moves upstream now but expiries
            if check.emptied:
                return await self._adopt_emptied(group_id, progress, check)
            if not check.ready or check.generation is None:
                return check
            principals = {
                member_id: conn.principal
                for conn, groups in self._members.items()
                for member_id in groups.get(group_id, ())
            }
            try:
                self.runtime.run(lambda c: c.adopt(check.generation, self.runtime.clock(), principals))
            except (AdoptionError, OwnershipError) as exc:
                log.error("adoption: cannot take %s over: %s", group_id, exc)
                return TakeoverCheck(False, str(exc), check.behind, check.total)
            progress.takeover_step = "committing"
            await self.runtime.durable()  # before anything of the group is answered locally
        finally:
            del self._holds[group_id]
            hold.set()
        progress.takeover_step = "emptying upstream" if self.settings.leave_upstream else None
        generation = check.generation.generation_id
        progress.taken_over_generation = generation
        log.info(
            "adoption: took group %s over at generation %d with %d members", group_id, generation, check.total
        )
        self.observe_phase(group_id)
        if self.settings.leave_upstream:
            await self._leave_upstream(group_id, check)
        return check

    async def _adopt_emptied(
        self, group_id: str, progress: GroupProgress, check: TakeoverCheck
    ) -> TakeoverCheck:
        """The takeover of a group whose upstream group emptied (the group's requests are held):
        ``adopted`` with no member, durable before anything of the group is answered locally.
        Nothing is left upstream to empty."""
        obs = self.observer.observation(group_id)
        generation = obs.generation_id if obs is not None else -1
        try:
            self.runtime.run(lambda c: c.adopt_emptied(group_id, generation, self.runtime.clock()))
        except (AdoptionError, OwnershipError) as exc:
            log.error("adoption: cannot take %s over: %s", group_id, exc)
            return TakeoverCheck(False, str(exc))
        progress.takeover_step = "committing"
        await self.runtime.durable()
        progress.taken_over_generation = generation
        log.info("adoption: took group %s over with no member (%s)", group_id, check.reason)
        self.observe_phase(group_id)
        return check

    async def _settle(self, group_id: str) -> bool:
        """Wait until no relayed request of the group is in flight (bounded)."""
        deadline = asyncio.get_running_loop().time() + self.settings.settle_timeout_ms / 1000
        while self._inflight.get(group_id, 0) > 0:
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return False
            self._settled.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._settled.wait(), remaining)
        return True

    async def _leave_upstream(self, group_id: str, check: TakeoverCheck) -> None:
        assert check.generation is not None
        members = [(m.member_id, m.group_instance_id) for m in check.generation.members]
        try:
            errors = await self.upstream.leave(group_id, members)
        except Exception as exc:  # UpstreamGroupError, or an answer that cannot be read
            log.warning(
                "adoption: LeaveGroup of the adopted members of %s upstream failed (%s); "
                "they expire there after their session timeout",
                group_id,
                exc,
            )
            return
        log.info("adoption: adopted members of %s left the upstream group: %s", group_id, errors)

    # ------------------------------------------------------------------ the periodic side
    async def watch(self) -> None:
        """Every ``check_interval_ms``: re-check relaying groups (mode auto) and watch adopted ones
        upstream for a conflict."""
        while True:
            await asyncio.sleep(self.settings.check_interval_ms / 1000)
            for group_id, owned in list(self.runtime.coordinator.ownership.snapshot().items()):
                if not self.settings.watches(group_id):
                    continue
                if owned.state is OwnershipState.RELAYING:
                    self.poke(group_id, periodic=True)
                elif owned.state is OwnershipState.ADOPTED:
                    await self._watch_upstream(group_id)
                elif owned.state is OwnershipState.RELEASING:
                    await self.finish_release(group_id)

    async def _watch_upstream(self, group_id: str) -> None:
        group = self.runtime.coordinator.groups.get(group_id)
        adopted = set(getattr(group, "members", {}) or {})
        try:
            described = await self.upstream.describe(group_id)
        except Exception as exc:  # UpstreamGroupError, or an answer that cannot be read
            log.debug("adoption: cannot watch %s upstream: %s", group_id, exc)
            return
        progress = self.progress.setdefault(group_id, GroupProgress())
        progress.upstream_state = described.state
        conflict = upstream_conflict(adopted, described)
        if conflict is not None and conflict != progress.conflict:
            log.error("adoption: CONFLICT: %s", conflict)
            if self.metrics is not None:
                self.metrics.adoption_conflicts.labels(self.metrics.group_label(group_id)).inc()
        progress.conflict = conflict

    def observe_phase(self, group_id: str) -> None:
        if self.metrics is not None:
            self.metrics.observe_ownership(group_id, self.phase(group_id))

    # ------------------------------------------------------------------ status
    def status(self) -> dict[str, Any]:
        """Every group with an ownership record: its phase and progress (the admin endpoint)."""
        out: dict[str, Any] = {}
        for group_id, owned in sorted(self.runtime.coordinator.ownership.snapshot().items()):
            progress = self.progress.get(group_id, GroupProgress())
            check = progress.last_check
            obs = self.observer.observation(group_id)
            gen = obs.generation() if obs is not None else None
            members = gen.member_ids if gen is not None else frozenset()
            out[group_id] = {
                "phase": owned.state.value,
                "generation": owned.generation,
                "members_behind_bridge": len(members & self.behind(group_id)),
                "members": len(members),
                "reason": check.reason if check is not None else None,
                "taken_over_generation": progress.taken_over_generation
                if progress.taken_over_generation is not None
                else (owned.generation if owned.state is OwnershipState.ADOPTED else None),
                "upstream_state": progress.upstream_state,
                "conflict": progress.conflict,
                "bridge_members": self._local_members(group_id),
                "takeover_step": progress.takeover_step,
            }
        return out

    async def command_adopt(self, group_id: str) -> tuple[bool, str]:
        """``connect-bridge adopt GROUP``: take the group over now if the condition holds. A
        ``released`` group is put under adoption again first (:meth:`_relay_again`)."""
        if not self.settings.watches(group_id):
            return False, f"group {group_id} does not match adoption.groups"
        if self.phase(group_id) is OwnershipState.ADOPTED:
            return True, f"group {group_id} is already adopted"
        again = self.phase(group_id) is OwnershipState.RELEASED and await self._relay_again(group_id)
        running = self._running.get(group_id)
        if running is not None:
            with contextlib.suppress(Exception):
                await running
        check = await self.take_over(group_id)
        if self.phase(group_id) is OwnershipState.ADOPTED:
            generation = self.progress[group_id].taken_over_generation
            return True, f"group {group_id} adopted at generation {generation}"
        if again:
            when = "once the condition holds" if self.settings.mode == "auto" else "on the next adopt"
            return False, (
                f"group {group_id} is relaying again (it was released) but not adopted yet: {check.reason}; "
                f"the bridge takes it over {when}"
            )
        if check.rejoin:
            when = "the bridge takes it over then" if self.settings.mode == "auto" else "run adopt again then"
            return False, (
                f"group {group_id} not adopted: {check.reason}; its members were asked to rejoin, "
                f"so the upstream rebalances through the bridge within a heartbeat interval: {when}"
            )
        return False, f"group {group_id} not adopted: {check.reason}"

    async def _relay_again(self, group_id: str) -> bool:
        """``released -> relaying``: the upstream still coordinates the group, and from now on the
        normal adoption path applies (observation, the takeover condition, the takeover). The
        record is made durable before the takeover is tried, so a restart at any point after the
        command answered finds the group ``relaying``, and a restart before that ``released``:
        either way the upstream is the only coordinator until ``adopted`` is durable."""
        async with self._locks.setdefault(group_id, asyncio.Lock()):
            if self.phase(group_id) is not OwnershipState.RELEASED:
                return False
            now = self.runtime.clock()
            self.runtime.run(lambda c: c.change_ownership(group_id, OwnershipState.RELAYING, -1, now))
            self.progress[group_id] = GroupProgress()
            await self.runtime.durable()
        log.info("adoption: released group %s is relaying again, to be adopted once more", group_id)
        self.observe_phase(group_id)
        return True

    async def close(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        await self.upstream.close()


__all__ = ["Adoption", "GroupProgress"]
