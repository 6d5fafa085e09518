"""The bridge side of a simulated drill: the clock, the real coordinator, its store, the network.

:class:`SimulatedBridge` is what the simulated workers (:class:`connect_bridge.drills.sim.
SimulatedDrill`) talk to. One priority queue of timed actions is the clock; latencies come from a
generator seeded by the scenario, so a run is a pure function of its scenario. The coordinator is the
production ``GroupCoordinator``; its records go to an in-memory compacted store, which is what a
bridge restart replays into a fresh coordinator. While the bridge is down every request is answered
COORDINATOR_NOT_AVAILABLE, as a refused connection would be, and the workers retry.

Determinism: every :meth:`SimulatedBridge.at` takes the next sequence number (the tie-break between
actions due at the same millisecond) and every :meth:`SimulatedBridge.latency` the next draw, so the
order of these calls is part of what a scenario means.
"""

from __future__ import annotations

import heapq
import os
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

from connect_bridge.codecs.connect_protocol import decode_assignment
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.drills.events import EventLog
from connect_bridge.drills.scenario import Scenario
from connect_bridge.drills.sim_worker import LEGACY_CALLS, SimWorker
from connect_bridge.state import api
from connect_bridge.state.adoption.build import AdoptionError
from connect_bridge.state.adoption.handback import reports_nothing
from connect_bridge.state.adoption.observation import Observation, takeover_ready
from connect_bridge.state.adoption.records import OwnershipError, OwnershipState
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.classic.group import ClassicGroup
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import EMPTY, ConfigView, Items
from connect_bridge.state.records import Record

_TRACE = bool(os.environ.get("CONNECT_BRIDGE_SIM_TRACE"))
"""Print every request the bridge answers, with its answer, to stderr (for reading a failing drill)."""

RETRY_MS = 1_000
"""How often an ``adopt`` or ``release`` that cannot happen yet is tried again (the adoption
settings' ``check_interval_ms`` default)."""
SETTLE_MS = 5_000
"""How long a hand-back waits for workers sent upstream to come back with their rejoin before it
completes anyway (the adoption settings' ``settle_timeout_ms`` default)."""

_OBSERVE: dict[str, Callable[[Observation, Any, Any, int], None]] = {
    "classic_join": Observation.on_join,
    "classic_sync": Observation.on_sync,
    "classic_heartbeat": Observation.on_heartbeat,
    "classic_leave": Observation.on_leave,
}
"""Coordinator method -> what the relay's observer does with an exchange the upstream answered."""

_HELD = object()
""":meth:`SimulatedBridge._answer` for a JoinGroup held until a hand-back completes."""

Deliver = Callable[[Any, int, bool], None]
"""Hands an answer to the worker: ``deliver(response, at_ms, duplicate)``."""


class _Sent:
    """One request on its way, with what its worker does when it answers or times out.

    A plain class, not a dataclass: one is made for every message, and the compiled engine builds
    a plain class natively, where a dataclass keeps the dataclasses module's interpreted
    ``__init__``."""

    __slots__ = (
        "at",
        "cut_off",
        "deliver",
        "method",
        "request",
        "timeout_ms",
        "token",
        "unavailable",
        "worker",
    )

    def __init__(
        self,
        worker: SimWorker,
        method: str,
        request: Any,
        unavailable: Callable[[], Any],
        deliver: Deliver,
        at: int,
        timeout_ms: int,
        cut_off: int,
        token: tuple | None,
    ) -> None:
        self.worker = worker
        self.method = method
        self.request = request
        self.unavailable = unavailable
        self.deliver = deliver
        self.at = at
        """When the worker sent it."""
        self.timeout_ms = timeout_ms
        self.cut_off = cut_off
        """How long a partitioned worker waits before it sees the timeout."""
        self.token = token


_REBUILT: dict[type, tuple[Callable[[Any], tuple], int]] = {}
"""Per request type: its ``__init__`` fields read at once (``operator.attrgetter``) and where the
token is among them."""


def _with_token(req: Any, token: tuple) -> Any:
    """``dataclasses.replace(req, token=token)`` for a parked request's every arrival, with the
    fields looked up once per type and passed by position (``replace`` walks the fields and builds
    keyword arguments on every call: 2.6% of a compiled drill, py-spy)."""
    cls = type(req)
    rebuilt = _REBUILT.get(cls)
    if rebuilt is None:
        names = [f.name for f in fields(cls) if f.init]
        rebuilt = _REBUILT[cls] = (attrgetter(*names), names.index("token"))
    read, at = rebuilt
    values = list(read(req))
    values[at] = token
    return cls(*values)


@dataclass
class SimulatedBridge:
    scenario: Scenario
    log: EventLog = field(default_factory=EventLog)
    progress: Callable[[int, int], None] | None = None
    latency_ms: tuple[int, int] = (1, 5)

    def __post_init__(self) -> None:
        sc = self.scenario
        t = sc.timing
        self.config = CoordinatorConfig(
            session_timeout_ms=t.session_timeout_ms,
            heartbeat_interval_ms=t.heartbeat_interval_ms,
            scheduled_rebalance_max_delay_ms=t.scheduled_rebalance_max_delay_ms,
            worker_request_timeout_ms=t.request_timeout_ms,
            migration_policy=MigrationPolicy(sc.migration_policy),
            classic_min_session_timeout_ms=min(6000, t.session_timeout_ms),
        )
        self.rng = random.Random(sc.seed)
        lo, hi = self.latency_ms
        self._latency_draw = (lo, hi - lo + 1, (hi - lo + 1).bit_length())
        self.now = 0
        self.queue: list[tuple[int, int, Callable[[int], None]]] = []
        self.seq = 0
        self.store: dict[tuple[int, str, str], Record] = {}
        self.connectors = dict(sc.connectors)
        self.config_offset = 0
        self._view: ConfigView | None = None
        self.workers: dict[str, SimWorker] = {}
        self.incarnations = 0
        self.bridge_up = True
        self.bridge_incarnation = 0
        self.tick_at: int | None = None
        self.last_group: tuple[str, int] | None = None
        self.last_state: ClassicGroupState | None = None
        self.state_group: Any = None
        """The classic group object and its state last logged as ``group_state``. The object itself
        is held and compared by identity: comparing ``id()`` of objects that were let go made the
        log depend on whether the allocator reused an address (drills that differ run to run)."""
        self.member_workers: dict[str, str] = {}
        """Member id -> the worker whose request created or used it (also when its answer was lost)."""
        self.assignment_seen: tuple[Any, ...] | None = None
        self.assignment_group: Any = None
        """The group object of ``assignment_seen`` (held, compared by identity, as ``state_group``)."""
        self.given: dict[str, Items] = {}
        """Worker -> the items last logged as given to it (``assign`` events)."""
        self.coordinator = self._new_coordinator()
        self.upstream: GroupCoordinator | None = None
        """The upstream (Kafka) coordinator of a scenario whose group starts there: the bridge's own
        classic engine with what Kafka does not have turned off (no conversions, no extra
        rebalance after leaving eager), as tests/adoption_relay.py uses it."""
        self.observation = Observation(sc.group)
        self.upstream_parked: dict[Any, tuple[str, Any]] = {}  # token -> request parked upstream
        self.upstream_tick_at: int | None = None
        self.paused_until = -1
        """A bridge paused for a takeover answers nothing that reaches it before this time."""
        self.parked_timeouts: dict[tuple, int] = {}
        """(worker, incarnation, kind, seq) of a parked JoinGroup/SyncGroup -> when its client gives up."""
        self.held_joins: list[tuple[_Sent, str]] = []
        """Hand-back: JoinGroups without a member of the bridge's group, held until ``released``."""
        self.sent_away: set[str] = set()
        self.emptied_at: int | None = None
        if sc.upstream:
            self.upstream = GroupCoordinator(
                CoordinatorConfig(
                    session_timeout_ms=t.session_timeout_ms,
                    heartbeat_interval_ms=t.heartbeat_interval_ms,
                    migration_policy=MigrationPolicy.DISABLED,
                    classic_min_session_timeout_ms=min(6000, t.session_timeout_ms),
                    classic_cooperative_switch_rebalance_ms=None,
                )
            )
            self.coordinator.change_ownership(sc.group, OwnershipState.RELAYING, -1, 0)
            for record in self.coordinator.drain_records():
                self.store[record.key] = record

    # ------------------------------------------------------------------ clock
    def _new_coordinator(self) -> GroupCoordinator:
        coord = GroupCoordinator(self.config)
        coord.default_view = self.view()
        return coord

    def view(self) -> ConfigView:
        """The config topic as it stands. Every change of the connectors moves the offset, so the
        view is kept until the offset moves (every worker reads it, often)."""
        view = self._view
        if view is None or view.offset != self.config_offset:
            view = self._view = ConfigView.of(self.config_offset, self.connectors)
        return view

    def at(self, t_ms: int, action: Callable[[int], None]) -> None:
        """Queue ``action``; a deadline already in the past (a timer re-armed on load) runs now."""
        self.seq += 1
        now = self.now
        heapq.heappush(self.queue, (t_ms if t_ms > now else now, self.seq, action))

    def latency(self) -> int:
        """``rng.randint(lo, hi)``, drawn the way CPython's ``Random.randint`` draws it (``lo`` plus
        the first ``getrandbits(k)`` below the width, ``k`` the width's bit length), without its
        three layers of calls: the simulator draws a latency for every message, and a drill is a
        pure function of these draws (``tests/test_sim_determinism.py`` pins them to ``randint``)."""
        lo, width, bits = self._latency_draw
        getrandbits = self.rng.getrandbits
        r = getrandbits(bits)
        while r >= width:
            r = getrandbits(bits)
        return lo + r

    # ------------------------------------------------------------------ the coordinator
    def _after_coordinator(self, now: int) -> None:
        """Persist records, deliver parked responses, report the group, queue the next timer tick."""
        coordinator = self.coordinator
        records = coordinator.drain_records()
        if records:
            store = self.store
            for record in records:
                store[record.key] = record
        for token, resp in coordinator.drain_responses():
            self._deliver_parked(now, token, resp)
        group = coordinator.groups.get(self.scenario.group)
        if group is not None:
            self._report_group(now, group)
        deadline = coordinator.next_deadline()
        if self.tick_at is not None and self.tick_at < self.now:
            self.tick_at = None  # that tick has run (or was dropped with an old bridge incarnation)
        if deadline is not None and (self.tick_at is None or deadline < self.tick_at):
            self.tick_at = deadline
            incarnation = self.bridge_incarnation
            self.at(deadline, lambda t: self._tick(t, incarnation))

    def _report_group(self, now: int, group: ClassicGroup | ConnectGroup) -> None:
        """Log the group's epoch when it moves (a classic generation with the worker that leads it),
        a classic group's state when it changes, and what each worker is now given.

        The leader and the state are what the live invariant needs to judge a classic group: its
        leader computes every assignment, and its join barrier waits on every member, so a silent
        failure of the leader, or of any member while the group rebalances, holds up all the work
        the group is dealing (docs/drills.md)."""
        if isinstance(group, ClassicGroup):
            current: tuple[str, int] = ("classic", group.generation_id)
            if current != self.last_group:
                self.last_group = current
                leader = self.member_workers.get(group.leader_id) if group.leader_id else None
                self.log.group(now, "classic", group.generation_id, leader=leader)
            if group is not self.state_group or group.state != self.last_state:
                self.state_group, self.last_state = group, group.state
                self.log.group_state(now, str(group.state))
        else:
            current = ("connect", group.group_epoch)
            if current != self.last_group:
                self.last_group = current
                self.log.group(now, "connect", group.group_epoch)
            self.state_group = self.last_state = None
        self._log_assignments(now, group)

    def _log_assignments(self, now: int, group: Any) -> None:
        """Log an ``assign`` event for each worker whose given items changed: a connect group's
        target assignment of its member (pending items included), a classic group's SyncGroup
        assignment of the generation (what the leader dealt it). Whether or not the worker ever
        receives it: the checker forgives the work a silently failing worker was being given, and
        only that (docs/drills.md). Looked at only when the generation, epoch or state moves."""
        if isinstance(group, ConnectGroup):
            key: tuple[Any, ...] = (group.group_epoch, group.assignment_epoch, len(group.target))
        else:
            key = (group.generation_id, group.state, len(group.members))
        if group is self.assignment_group and key == self.assignment_seen:
            return
        self.assignment_group, self.assignment_seen = group, key
        given: dict[str, Items] = {}
        if isinstance(group, ConnectGroup):
            for member_id, items in group.target.items():
                name = self.member_workers.get(member_id)
                if name is not None:
                    given[name] = given.get(name, EMPTY) | items
        elif group.state is ClassicGroupState.STABLE:
            for member_id, member in group.members.items():
                name = self.member_workers.get(member_id)
                if name is not None and member.assignment:
                    try:
                        items = frozenset(decode_assignment(member.assignment).items)
                    except CodecError:
                        continue
                    given[name] = given.get(name, EMPTY) | items
        else:
            return  # a classic rebalance in progress deals nothing until the leader's SyncGroup
        for name, items in sorted(given.items()):
            if self.given.get(name) != items:
                self.given[name] = items
                self.log.assign(now, name, items)

    def _learn_member(self, worker_name: str, request: Any, resp: Any) -> None:
        """Remember which worker a member id belongs to (its request's, or the one its answer gave)."""
        for member_id in (getattr(resp, "member_id", None), getattr(request, "member_id", None)):
            if member_id:
                self.member_workers[member_id] = worker_name

    def _deliver_parked(self, now: int, token: Any, resp: Any) -> None:
        """A JoinGroup/SyncGroup answer the coordinator parked until now goes to its worker."""
        name, incarnation, kind, seq, tag, timeout_at = token
        self._learn_member(name, None, resp)
        worker = self.workers.get(name)
        if worker is None or tag == "dup":
            return  # a resend's answer: the client already matched the original's
        if tag == "lost" or now < worker.partitioned_until:
            # Lost, or parked until the worker was cut off: it waits until its request times out.
            resp = LEGACY_CALLS[kind].unavailable()
            at = max(now, timeout_at)
            self.log.stall_start(now, name, "timeout")
            self.at(at, self._timeout_over(worker))
        else:
            at = now + self.latency()
        self.at(at, self._legacy_response_cb(worker, incarnation, kind, resp, seq))
        if tag == "dupresp":
            again = self._legacy_response_cb(worker, incarnation, kind, resp, seq, True)
            self.at(at + self.latency(), again)

    def _tick(self, now: int, incarnation: int) -> None:
        if incarnation != self.bridge_incarnation or not self.bridge_up:
            return
        if self.tick_at == now:
            self.tick_at = None
        self.coordinator.advance(now)
        self._after_coordinator(now)

    def _legacy_response_cb(
        self, worker: SimWorker, incarnation: int, kind: str, resp: Any, seq: int, dup: bool = False
    ) -> Callable[[int], None]:
        return lambda t: self._legacy_response(t, worker, incarnation, kind, resp, seq, dup)

    def _legacy_response(self, now: int, *answer: Any) -> None:
        """Hand a classic answer (worker, incarnation, kind, response, seq, duplicate) to its worker:
        the workers' side (:class:`~connect_bridge.drills.sim.SimulatedDrill`) does."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the network
    def _send_one_way(self, at: int, method: str, request: Any) -> None:
        """A request nobody awaits an answer to (a LeaveGroup): applied if the bridge is up at ``at``.

        Routed as every other request is when it arrives: while the upstream coordinates the group
        (relaying, released) the bridge relays it there, as ``adoption.wiring`` does. (Until fleet
        97000000's drill 97000291092902 it always went to the bridge's own coordinator, so a worker
        stopped after a hand-back stayed an upstream member until its session ran out and the
        upstream leader dealt it work meanwhile.)"""

        def arrive(t: int) -> None:
            if not self.bridge_up:
                return
            upstream_coordinates = self.phase() in (OwnershipState.RELAYING, OwnershipState.RELEASED)
            if self.upstream is not None and upstream_coordinates:
                self._relay(method, request, t, None)
                return
            getattr(self.coordinator, method)(request, t)
            self._after_coordinator(t)

        self.at(at, arrive)

    def _send(
        self,
        now: int,
        worker: SimWorker,
        method: str,
        request: Any,
        unavailable: Callable[[], Any],
        deliver: Deliver,
        timeout_ms: int,
        token: tuple | None = None,
    ) -> None:
        """One request over the simulated network, with the worker's network misbehaviour applied.

        Partitioned (when sent or when it would arrive): it never arrives; the worker sees a timeout.
        Lost: the bridge applies it, the answer never comes back; the worker times out. Duplicated
        request: a resend reaches the bridge too; its answer is dropped (clients match correlation
        ids). Duplicated response: the answer is delivered twice (``deliver(..., True)`` the second
        time). A timeout reads as a disconnect (COORDINATOR_NOT_AVAILABLE), which is how Kafka's client
        reports it to the coordinator code.
        """
        cut_off = min(timeout_ms, self.scenario.timing.session_timeout_ms)
        sent = _Sent(worker, method, request, unavailable, deliver, now, timeout_ms, cut_off, token)
        if now < worker.partitioned_until:
            self._time_out(sent, now, now + cut_off)
            return
        lost, duplicate = worker.lose > 0, worker.duplicate > 0
        worker.lose -= lost
        worker.duplicate -= duplicate
        twice = not lost and worker.duplicate_responses > 0
        worker.duplicate_responses -= twice
        main_tag = "lost" if lost else "dupresp" if twice else ""
        first = now + self.latency()
        self.at(first, lambda t: self._arrive(sent, t, main_tag))
        if duplicate:  # the resend reaches the bridge after its original (one connection, in order)
            self.at(first + self.latency() + self.latency(), lambda t: self._arrive(sent, t, "dup"))

    def _timeout_over(self, worker: SimWorker) -> Callable[[int], None]:
        """The end of ``worker``'s wait for an answer that never came, logged only while the process
        that waited still runs: a restarted worker's new process has stalls of its own, and the old
        one's end would close them in the checker (drill 98803296417062: a new process's 40 s
        JoinGroup wait at a paused bridge was closed 0.3 s in by its predecessor's end, and the work
        it was given looked unowned while it could run it)."""
        name, incarnation = worker.name, worker.incarnation

        def over(t: int) -> None:
            current = self.workers.get(name)
            if current is not None and current.incarnation == incarnation:
                self.log.stall_end(t, name, "timeout")

        return over

    def _time_out(self, sent: _Sent, start: int, at: int) -> None:
        """The worker waits for an answer that never comes: it cannot take work meanwhile."""
        name = sent.worker.name
        self.log.stall_start(start, name, "timeout")
        self.at(at, self._timeout_over(sent.worker))
        sent.deliver(sent.unavailable(), at, False)

    def _arrival(self, sent: _Sent, tag: str) -> Callable[[int], None]:
        return lambda t: self._arrive(sent, t, tag)

    def _arrive(self, sent: _Sent, t: int, tag: str) -> None:
        """The request (``tag``: "" plain, "lost", "dupresp" or the resend "dup") reaches the bridge."""
        if t < sent.worker.partitioned_until:
            if tag != "dup":  # cut off on the way: the bridge never sees it
                # Stall from ``t``, not the send time: the log has moved past it.
                self._time_out(sent, t, max(t, sent.at + sent.cut_off))
            return
        req = sent.request
        if sent.token is not None:
            req = _with_token(req, (*sent.token, tag, sent.at + sent.timeout_ms))
        if t < self.paused_until:
            self._time_out(sent, t, max(t, sent.at + sent.timeout_ms))  # sent to the paused bridge
            return
        if self.bridge_up:
            resp = self._answer(sent, req, t, tag)
            if resp is _HELD:
                return
        else:
            resp = sent.unavailable()
        if _TRACE:
            head = f"{t:>8} {sent.worker.name:<4} {sent.method} {tag or '-'}"
            print(f"{head}\n    > {req!r}\n    < {resp!r}", file=sys.stderr)
        if tag == "dup" or resp is None:
            return
        if tag == "lost":
            self._time_out(sent, t, max(t, sent.at + sent.timeout_ms))
            return
        at = t + self.latency()
        sent.deliver(resp, at, False)
        if tag == "dupresp":
            sent.deliver(resp, at + self.latency(), True)

    # ------------------------------------------------------------------ who answers (adoption)
    def phase(self) -> OwnershipState | None:
        return self.coordinator.ownership.state(self.scenario.group)

    def _answer(self, sent: _Sent, req: Any, t: int, tag: str) -> Any:
        """The answer to ``req``: the bridge's coordinator's, or the upstream's through the relay
        (relaying, released), or per member while a hand-back is under way (docs/adoption.md,
        ``adoption.wiring``); ``_HELD`` for a JoinGroup held until the hand-back completes,
        ``None`` for an answer the coordinator parked."""
        # (Without an upstream the phase only matters to a JoinGroup: the hand-back case below.)
        phase = self.phase() if self.upstream is not None or sent.method == "classic_join" else None
        if (
            self.upstream is not None
            and phase in (OwnershipState.RELAYING, OwnershipState.RELEASED)
            and not self._owed_round(sent.method, req)
        ):
            return self._relay(sent.method, req, t, sent.worker.name)
        if phase is OwnershipState.RELEASING and sent.method == "classic_join":
            group = self.coordinator.groups.get(self.scenario.group)
            members = getattr(group, "members", None) or {}
            if req.member_id and req.member_id in members:
                if reports_nothing(req.protocols):  # sent away: answered UNKNOWN_MEMBER_ID below
                    self.coordinator.release_member(self.scenario.group, req.member_id, t)
                    self.sent_away.add(sent.worker.name)
                    self.at(t, self._finish_release)
            elif self.coordinator.release_returned(
                self.scenario.group, req.protocols, req.group_instance_id, t
            ):
                # An earlier incarnation of this stopped worker leaves with no hold, before the
                # round or the hold below, in the server's order (``adoption.wiring``); then the
                # same request is routed again, the group now without it.
                self._after_coordinator(t)
                self.at(t, self._finish_release)
                return self._answer(sent, req, t, tag)
            elif tag == "dup":
                return None  # a resend of a held JoinGroup: the client matches the original's answer
            elif self.coordinator.unsynced_round_due(req):
                pass  # answered below with a leader round it never syncs (``state.adoption.handback``)
            else:
                self.held_joins.append((sent, tag))
                self.at(t, self._finish_release)
                return _HELD
        resp: Any = None  # whichever response type ``sent.method`` gives
        if sent.method == "classic_heartbeat":
            # The server's short way for the commonest request (same effects, ``GroupCoordinator.
            # steady_classic_heartbeat``); anything else it leaves to the full handler.
            resp = self.coordinator.steady_classic_heartbeat(req, t)
        if resp is None:
            resp = getattr(self.coordinator, sent.method)(req, t)
        self._learn_member(sent.worker.name, req, resp)
        if resp is None and getattr(req, "token", None) is not None:
            name, incarnation, kind, seq, _, timeout_at = req.token
            self.parked_timeouts[(name, incarnation, kind, seq)] = timeout_at
        self._after_coordinator(t)
        return resp

    def _owed_round(self, method: str, req: Any) -> bool:
        """``released``: the coordinator answers the unsynced leader round owed to a worker a timer
        removed during the hand-back, as the server's ``Adoption._owed_round`` routes it."""
        if self.phase() is not OwnershipState.RELEASED:
            return False
        if method == "classic_join":
            return self.coordinator.unsynced_round_due(req)
        if method in ("classic_sync", "classic_heartbeat"):
            return self.coordinator.from_unsynced_round(req.group_id, req.member_id, req.generation_id)
        return False

    def _relay(self, method: str, req: Any, t: int, worker_name: str | None) -> Any:
        """The upstream coordinator answers; the relay's observer sees the exchange."""
        upstream = self.upstream
        assert upstream is not None
        if method == "connect_heartbeat":  # the upstream speaks only the classic protocol
            return api.HeartbeatResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION))
        if (
            method == "classic_heartbeat"
            and self.phase() is OwnershipState.RELAYING
            and self.observation.answers_rejoin(req)
        ):  # asked to rejoin so the upstream rebalances through the relay (``Adoption.asks_rejoin``)
            return capi.HeartbeatResponse(error_code=int(ErrorCode.REBALANCE_IN_PROGRESS))
        resp = getattr(upstream, method)(req, t)
        if worker_name is not None:
            self._learn_member(worker_name, req, resp)
        if resp is None and getattr(req, "token", None) is not None:
            self.upstream_parked[req.token] = (method, req)
        elif resp is not None:
            _OBSERVE[method](self.observation, req, resp, t)
        self._after_upstream(t)
        return resp

    def _after_upstream(self, now: int) -> None:
        """Deliver the upstream's parked answers (observed), report its group, tick its timers."""
        upstream = self.upstream
        assert upstream is not None
        for token, resp in upstream.drain_responses():
            method, req = self.upstream_parked.pop(token, ("", None))
            if method:
                _OBSERVE[method](self.observation, req, resp, now)
            self._deliver_parked(now, token, resp)
        upstream.drain_records()
        group = upstream.groups.get(self.scenario.group)
        if group is not None and self.phase() in (OwnershipState.RELAYING, OwnershipState.RELEASED):
            self._report_group(now, group)
        deadline = upstream.next_deadline()
        if self.upstream_tick_at is not None and self.upstream_tick_at < self.now:
            self.upstream_tick_at = None
        if deadline is not None and (self.upstream_tick_at is None or deadline < self.upstream_tick_at):
            self.upstream_tick_at = deadline
            self.at(deadline, self._upstream_tick)

    def _upstream_tick(self, now: int) -> None:
        if self.upstream_tick_at == now:
            self.upstream_tick_at = None
        assert self.upstream is not None
        self.upstream.advance(now)
        self._after_upstream(now)

    def _alive(self, name: str) -> bool:
        worker = self.workers.get(name)
        return worker is not None and worker.alive

    def _adopt(self, now: int) -> None:
        """Take the relayed group over at a generation boundary the upstream confirms (the takeover
        condition of ``state.adoption.observation``); until then retry every ``RETRY_MS``. The adopted members
        then leave the upstream group (the ``leave_upstream`` setting's default)."""
        if self.phase() is not OwnershipState.RELAYING:
            return
        upstream = self.upstream
        assert upstream is not None
        if not self.bridge_up or now < self.paused_until:
            self.at(now + RETRY_MS, self._adopt)
            return
        behind = {mid for mid, name in self.member_workers.items() if self._alive(name)}
        group = upstream.groups.get(self.scenario.group)
        described = group.describe() if isinstance(group, ClassicGroup) else None
        check = takeover_ready(self.observation, behind, described)
        if check.emptied:  # nothing to hand over: the bridge's from now on (docs/adoption.md)
            try:
                self.coordinator.adopt_emptied(self.scenario.group, self.observation.generation_id, now)
            except (AdoptionError, OwnershipError):
                self.at(now + RETRY_MS, self._adopt)
                return
            self._after_coordinator(now)
            return
        generation = check.generation
        if not check.ready or generation is None:
            self.observation.ask_rejoin(check.rejoin)  # (as ``Adoption.check`` does)
            self.at(now + RETRY_MS, self._adopt)
            return
        try:
            self.coordinator.adopt(generation, now)
        except (AdoptionError, OwnershipError):
            self.at(now + RETRY_MS, self._adopt)
            return
        self._after_coordinator(now)
        leaving = tuple(
            capi.LeavingMember(m.member_id, m.group_instance_id, "adopted") for m in generation.members
        )
        upstream.classic_leave(capi.LeaveGroupRequest(self.scenario.group, leaving), now)
        self._after_upstream(now)

    def _release(self, now: int) -> None:
        """Start the hand-back (``connect-bridge release``); retried while it cannot start yet."""
        if self.phase() is not OwnershipState.ADOPTED:
            return
        if not self.bridge_up or now < self.paused_until:
            self.at(now + RETRY_MS, self._release)
            return
        try:
            self.coordinator.start_release(self.scenario.group, now)
        except (AdoptionError, OwnershipError):
            self.at(now + RETRY_MS, self._release)
            return
        self.sent_away.clear()
        self.emptied_at = None
        self._after_coordinator(now)
        self._watch_release(now, self.bridge_incarnation)

    def _watch_release(self, now: int, incarnation: int) -> None:
        """The adoption watch loop: every ``RETRY_MS`` while the hand-back is under way, try to
        finish it (the group may empty by a timer, which no request announces). One loop per
        bridge incarnation."""
        if incarnation != self.bridge_incarnation or self.phase() is not OwnershipState.RELEASING:
            return
        self._finish_release(now)
        self.at(now + RETRY_MS, lambda t: self._watch_release(t, incarnation))

    def _finish_release(self, now: int) -> None:
        """Complete the hand-back once the bridge's group is empty and every worker sent upstream
        is back with its rejoin (held), or ``SETTLE_MS`` after the group emptied; then the held
        JoinGroups go upstream (``adoption.wiring.finish_release``)."""
        if self.phase() is not OwnershipState.RELEASING or not self.bridge_up or now < self.paused_until:
            return
        group = self.coordinator.groups.get(self.scenario.group)
        if getattr(group, "members", None):
            self.emptied_at = None
            return
        if self.emptied_at is None:
            self.emptied_at = now
        held = {sent.worker.name for sent, _ in self.held_joins}
        if self.sent_away - held and now - self.emptied_at < SETTLE_MS:
            self.at(self.emptied_at + SETTLE_MS, self._finish_release)
            return
        if not self.coordinator.finish_release(self.scenario.group, now):
            return
        self._after_coordinator(now)
        self.sent_away.clear()
        held_joins, self.held_joins = self.held_joins, []
        for sent, tag in held_joins:
            self.at(now, self._arrival(sent, tag))

    # ------------------------------------------------------------------ bridge restarts
    def _takeover_bridge(self, now: int, down_ms: int) -> None:
        """HA: the bridge is paused (SIGSTOP; its connections stay open) and another one loads the
        group's records ``down_ms`` later. Nothing the paused bridge had parked is ever answered:
        each such client waits for its own timeout (a JoinGroup: max(request timeout, rebalance
        timeout + 5 s)), and whatever reaches it meanwhile times out too."""
        self.bridge_up = False
        self.bridge_incarnation += 1
        self.tick_at = None
        self.paused_until = now + down_ms
        self.log.bridge_restart(now)
        for sent, _ in self.held_joins:  # held by the paused bridge: never answered
            self._time_out(sent, now, max(now, sent.at + sent.timeout_ms))
        self._forget_soft_state()
        for worker in self.workers.values():
            for kind in sorted(worker.in_flight & {"join", "sync"}):
                seq = worker.sent_seq[kind]
                timeout_at = self.parked_timeouts.get((worker.name, worker.incarnation, kind, seq))
                if timeout_at is None:
                    continue  # not parked at the bridge (on its way, or answered already)
                resp = LEGACY_CALLS[kind].unavailable()
                self.log.stall_start(now, worker.name, "timeout")
                self.at(max(now, timeout_at), self._timeout_over(worker))
                self.at(
                    max(now, timeout_at),
                    self._legacy_response_cb(worker, worker.incarnation, kind, resp, seq),
                )
        self.parked_timeouts.clear()
        self.at(now + down_ms, self._bridge_back)

    def _forget_soft_state(self) -> None:
        """What a bridge process keeps only in memory: the relay's observation, the hand-back's
        held JoinGroups (their connections break) and who was sent upstream."""
        self.observation = Observation(self.scenario.group)
        self.held_joins.clear()
        self.sent_away.clear()
        self.emptied_at = None

    def _restart_bridge(self, now: int, down_ms: int) -> None:
        self.bridge_up = False
        self.bridge_incarnation += 1
        self.tick_at = None
        self.log.bridge_restart(now)
        self._forget_soft_state()
        self.parked_timeouts.clear()
        # Connections drop: parked JoinGroup/SyncGroup requests fail and their workers retry.
        for worker in self.workers.values():
            for kind in sorted(worker.in_flight & {"join", "sync"}):
                resp = LEGACY_CALLS[kind].unavailable()
                seq = worker.sent_seq[kind]
                self.at(
                    now + self.latency(),
                    self._legacy_response_cb(worker, worker.incarnation, kind, resp, seq),
                )
        self.at(now + down_ms, self._bridge_back)

    def _bridge_back(self, t: int) -> None:
        """The restarted bridge loads the store's live records and answers again."""
        self.coordinator = self._new_coordinator()
        live = [r for r in self.store.values() if not r.is_tombstone]
        self.coordinator.replay(live, t)
        self.coordinator.set_config(self.scenario.group, self.view(), t)
        self.bridge_up = True
        self.log.bridge_up(t)
        self._after_coordinator(t)
        if self.phase() is OwnershipState.RELEASING:
            self._watch_release(t, self.bridge_incarnation)
