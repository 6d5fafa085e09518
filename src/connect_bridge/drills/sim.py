"""Simulated-time drills: the real engine, simulated workers, a simulated clock and network.

One priority queue of timed actions drives everything; latencies come from a generator seeded by
the scenario, so a run is a pure function of its scenario file. The coordinator is the production
``GroupCoordinator``; its records go to an in-memory compacted store, which is what a
``restart_bridge`` step replays into a fresh coordinator. Workers are the I/O-free worker objects of
``connect_bridge.workers`` (the live clients drive the same ones): ``NewProtocolWorker`` through
ConnectGroupHeartbeat, ``LegacyWorker`` through JoinGroup / SyncGroup / Heartbeat / LeaveGroup.
While the bridge is down every request is answered COORDINATOR_NOT_AVAILABLE, as a refused
connection would be, and the workers retry.
"""

from __future__ import annotations

import heapq
import os
import random
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.drills.events import EventLog
from connect_bridge.drills.scenario import Scenario
from connect_bridge.state import api, classic_api
from connect_bridge.state.classic_group import ClassicGroup
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import NEW_PROTOCOL, ConfigView, Items
from connect_bridge.state.records import Record
from connect_bridge.workers.legacy import ActionKind, LegacyWorker
from connect_bridge.workers.new_protocol import NewProtocolWorker

_SIM_MEMBER_IDS = uuid.UUID("6d1f0c52-4b7e-4c2e-9a57-3c2f1e0b8d11")
"""Namespace of the member ids simulated new-protocol workers generate (deterministic per drill)."""

_TRACE = bool(os.environ.get("CONNECT_BRIDGE_SIM_TRACE"))
"""Print every request the bridge answers, with its answer, to stderr (for reading a failing drill)."""

Logic = NewProtocolWorker | LegacyWorker
_UNAVAILABLE = int(ErrorCode.COORDINATOR_NOT_AVAILABLE)

# kind -> (coordinator method name, error response factory, worker response handler name)
_LEGACY_CALLS: dict[str, tuple[str, Callable[[], Any], str]] = {
    "join": (
        "classic_join",
        lambda: classic_api.JoinGroupResponse(error_code=_UNAVAILABLE),
        "on_join_response",
    ),
    "sync": (
        "classic_sync",
        lambda: classic_api.SyncGroupResponse(error_code=_UNAVAILABLE),
        "on_sync_response",
    ),
    "heartbeat": (
        "classic_heartbeat",
        lambda: classic_api.HeartbeatResponse(error_code=_UNAVAILABLE),
        "on_heartbeat_response",
    ),
}


_STALL_ATTRS = {"stall": "stalled_until", "pause": "paused_until", "partition": "partitioned_until"}
_MISBEHAVIOURS = frozenset(
    {
        *_STALL_ATTRS,
        "lose_responses",
        "duplicate_requests",
        "duplicate_responses",
        "delay_sync",
        "slow_revocation",
    }
)
_FOREVER = 2**62


@dataclass(slots=True)
class _SimWorker:
    name: str
    protocol: str
    logic: Logic
    incarnation: int
    alive: bool = True
    step_seq: int = 0
    last_answer_ms: int = 0
    """When the coordinator last answered this worker (KAFKA-9184: silence for a heartbeat interval
    makes a legacy worker revoke everything)."""
    in_flight: set[str] = field(default_factory=set)
    """Kinds of classic requests sent and not yet answered (a bridge restart drops them)."""
    paused_until: int = -1
    """SIGSTOP: nothing in the process runs before this time."""
    stalled_until: int = -1
    """The herder (legacy: JoinGroup/SyncGroup and their answers; new: the heartbeat loop) is stuck."""
    partitioned_until: int = -1
    deferred: list[Callable[[int], None]] = field(default_factory=list)
    """What the process would have done while paused or stalled, run in order when it resumes."""
    lose: int = 0
    duplicate: int = 0
    duplicate_responses: int = 0
    """The next this many answers are delivered twice (the copy must be ignored as stale)."""
    sent_seq: dict[str, int] = field(default_factory=dict)
    """Per classic request kind, the sequence number of the last one sent: an answer carrying an older
    one is for a request the worker gave up on (the client's correlation id no longer matches)."""
    sync_delay_ms: int = 0
    slow_revocation: tuple[int, int] = (0, -1)
    """(delay of each stop, until when): stopping revoked work takes that long."""
    new_seq: int = 0
    """Sequence number of the new-protocol heartbeat in flight (older answers are stale)."""

    @property
    def running(self) -> Items:
        return self.logic.running


@dataclass
class SimulatedDrill:
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
            migration_policy=MigrationPolicy(sc.migration_policy),
            classic_min_session_timeout_ms=min(6000, t.session_timeout_ms),
        )
        self.rng = random.Random(sc.seed)
        self.now = 0
        self.queue: list[tuple[int, int, Callable[[int], None]]] = []
        self.seq = 0
        self.store: dict[tuple[int, str, str], Record] = {}
        self.connectors = dict(sc.connectors)
        self.config_offset = 0
        self.workers: dict[str, _SimWorker] = {}
        self.incarnations = 0
        self.bridge_up = True
        self.bridge_incarnation = 0
        self.tick_at: int | None = None
        self.last_group: tuple[str, int] | None = None
        self.coordinator = self._new_coordinator()

    # ------------------------------------------------------------------ plumbing
    def _new_coordinator(self) -> GroupCoordinator:
        coord = GroupCoordinator(self.config)
        coord.default_view = self.view()
        return coord

    def view(self) -> ConfigView:
        return ConfigView.of(self.config_offset, self.connectors)

    def at(self, t_ms: int, action: Callable[[int], None]) -> None:
        """Queue ``action``; a deadline already in the past (a timer re-armed on load) runs now."""
        self.seq += 1
        heapq.heappush(self.queue, (max(t_ms, self.now), self.seq, action))

    def latency(self) -> int:
        lo, hi = self.latency_ms
        return self.rng.randint(lo, hi)

    def _after_coordinator(self, now: int) -> None:
        """Persist records, deliver parked responses, report the group, queue the next timer tick."""
        for record in self.coordinator.drain_records():
            self.store[record.key] = record
        for token, resp in self.coordinator.drain_responses():
            name, incarnation, kind, seq, tag, timeout_at = token  # type: ignore[misc]
            worker = self.workers.get(name)
            if worker is None or tag == "dup":
                continue  # a resend's answer: the client already matched the original's
            if tag == "lost" or now < worker.partitioned_until:
                # Lost, or parked until the worker was cut off: it waits until its request times out.
                resp = _LEGACY_CALLS[kind][1]()
                at = max(now, timeout_at)
                self.log.stall_start(now, name, "timeout")
                self.at(at, lambda t, name=name: self.log.stall_end(t, name, "timeout"))
            else:
                at = now + self.latency()
            self.at(at, self._legacy_response_cb(worker, incarnation, kind, resp, seq))
            if tag == "dupresp":
                again = self._legacy_response_cb(worker, incarnation, kind, resp, seq, True)
                self.at(at + self.latency(), again)
        group = self.coordinator.groups.get(self.scenario.group)
        if group is not None:
            if isinstance(group, ClassicGroup):
                current = ("classic", group.generation_id)
            else:
                current = ("connect", group.group_epoch)
            if current != self.last_group:
                self.last_group = current
                self.log.group(now, current[0], current[1])
        deadline = self.coordinator.next_deadline()
        if self.tick_at is not None and self.tick_at < self.now:
            self.tick_at = None  # that tick has run (or was dropped with an old bridge incarnation)
        if deadline is not None and (self.tick_at is None or deadline < self.tick_at):
            self.tick_at = deadline
            incarnation = self.bridge_incarnation
            self.at(deadline, lambda t: self._tick(t, incarnation))

    def _tick(self, now: int, incarnation: int) -> None:
        if incarnation != self.bridge_incarnation or not self.bridge_up:
            return
        if self.tick_at == now:
            self.tick_at = None
        self.coordinator.advance(now)
        self._after_coordinator(now)

    def _apply(self, now: int, worker: _SimWorker, stop: Items, start: Items, epoch: int | None) -> None:
        for item in sorted(stop):
            self.log.release(now, worker.name, item)
        for item in sorted(start):
            self.log.run(now, worker.name, item)
        if epoch is not None:
            self.log.epoch(now, worker.name, epoch)

    def _apply_later(
        self, at: int, worker: _SimWorker, stop: Items, start: Items, epoch: int | None
    ) -> None:
        """A slow stop finishes at ``at``, unless the process is gone by then: its stop or crash
        already ended everything it ran, and a later incarnation's items are not its to stop."""
        incarnation = worker.incarnation

        def finish(t: int) -> None:
            if self._current(worker, incarnation):
                self._apply(t, worker, stop, start, epoch)

        self.at(at, finish)

    def _current(self, worker: _SimWorker, incarnation: int) -> bool:
        return worker.alive and worker.incarnation == incarnation

    # ------------------------------------------------------------------ lifecycle
    def _start(self, now: int, name: str, protocol: str, instance_id: str | None = None) -> None:
        self.incarnations += 1
        timing = self.scenario.timing
        url = f"http://{name}:8083/"
        logic: Logic
        if protocol == NEW_PROTOCOL:
            logic = NewProtocolWorker(
                group_id=self.scenario.group,
                url=url,
                rebalance_timeout_ms=timing.rebalance_timeout_ms,
                session_timeout_ms=timing.session_timeout_ms,
                config_offset=self.config_offset,
                instance_id=instance_id,
                # The client picks its member id (the spec requires a non-empty one; Kafka's
                # KIP-1082): a duplicated first heartbeat then cannot create a second member.
                member_id=str(uuid.uuid5(_SIM_MEMBER_IDS, f"{name}/{self.incarnations}")),
            )
        else:
            logic = LegacyWorker(
                self.scenario.group,
                url,
                protocol,
                session_timeout_ms=timing.session_timeout_ms,
                rebalance_timeout_ms=timing.rebalance_timeout_ms,
                heartbeat_interval_ms=timing.heartbeat_interval_ms,
                config_provider=self.view,
                max_delay_ms=timing.scheduled_rebalance_max_delay_ms,
                instance_id=instance_id,
            )
        worker = _SimWorker(name, protocol, logic, self.incarnations)
        self.workers[name] = worker
        self.log.worker_start(now, name, protocol)
        if isinstance(logic, NewProtocolWorker):
            self._new_heartbeat(now, worker)
        else:
            self._legacy_step(now, worker)

    def _stop(self, now: int, name: str) -> None:
        worker = self.workers[name]
        worker.alive = False
        logic = worker.logic
        if isinstance(logic, NewProtocolWorker):
            self._apply(now, worker, logic.running, frozenset(), None)
            request: Any = logic.leave_request()
            logic.running = frozenset()
            call = "connect_heartbeat"
        else:
            reaction = logic.shutdown(now)
            self._apply(now, worker, reaction.stop, frozenset(), None)
            request = reaction.request
            call = "classic_leave"
        # A static member's clean stop does not end its membership (KIP-345; epoch -2 in KIP-848).
        self.log.worker_stop(now, name, worker.protocol, left=logic.instance_id is None)
        if request is None:
            return

        def arrive(t: int) -> None:
            if self.bridge_up:
                getattr(self.coordinator, call)(request, t)
                self._after_coordinator(t)

        self.at(now + self.latency(), arrive)

    def _crash(self, now: int, name: str) -> None:
        worker = self.workers[name]
        worker.alive = False
        self.log.worker_crash(now, name, worker.protocol)

    # ------------------------------------------------------------------ misbehaviour
    def _held_up(self, now: int, worker: _SimWorker, herder: bool, action: Callable[[int], None]) -> bool:
        """Defer ``action`` while the process is paused (or, for herder work, stalled)."""
        if not worker.alive:
            return False
        if now < worker.paused_until or (herder and now < worker.stalled_until):
            worker.deferred.append(action)
            return True
        return False

    def _stall(self, now: int, worker: _SimWorker, kind: str, duration_ms: int) -> None:
        """Start a stall, pause or partition of ``duration_ms``; logged so liveness is judged fairly."""
        attr = _STALL_ATTRS[kind]
        until = now + duration_ms
        setattr(worker, attr, max(getattr(worker, attr), until))
        self.log.stall_start(now, worker.name, kind)
        incarnation = worker.incarnation
        self.at(until, lambda t: self._stall_over(t, worker, incarnation, kind))
        legacy = isinstance(worker.logic, LegacyWorker)
        if kind == "stall" and legacy and duration_ms > self.scenario.timing.rebalance_timeout_ms:
            at = now + self.scenario.timing.rebalance_timeout_ms
            self.at(at, lambda t: self._poll_timeout(t, worker, incarnation))

    def _stall_over(self, now: int, worker: _SimWorker, incarnation: int, kind: str) -> None:
        if worker.incarnation != incarnation or not worker.alive:
            return
        self.log.stall_end(now, worker.name, kind)
        deferred, worker.deferred = worker.deferred, []
        for action in deferred:
            action(now)
        if isinstance(worker.logic, LegacyWorker):
            self._schedule_step(now, worker)

    def _poll_timeout(self, now: int, worker: _SimWorker, incarnation: int) -> None:
        """The heartbeat thread gives up on a stalled herder: LeaveGroup, tasks keep running."""
        if worker.incarnation != incarnation or not worker.alive or now >= worker.stalled_until:
            return
        if now < worker.paused_until:
            return  # a paused process sends nothing
        logic = worker.logic
        assert isinstance(logic, LegacyWorker)
        request = logic.poll_timeout_leave()
        worker.in_flight.clear()
        if request is None or now < worker.partitioned_until:
            return

        def arrive(t: int) -> None:
            if self.bridge_up:
                self.coordinator.classic_leave(request, t)
                self._after_coordinator(t)

        self.at(now + self.latency(), arrive)

    def _misbehave(self, now: int, step: Any) -> None:
        worker = self.workers.get(step.worker)
        if worker is None or not worker.alive:
            return
        action = step.action
        if action in _STALL_ATTRS:
            self._stall(now, worker, action, step.duration_ms)
        elif action == "lose_responses":
            worker.lose += step.count
        elif action == "duplicate_requests":
            worker.duplicate += step.count
        elif action == "duplicate_responses":
            worker.duplicate_responses += step.count
        elif action == "delay_sync":
            worker.sync_delay_ms = step.delay_ms
        elif action == "slow_revocation":
            until = _FOREVER if step.duration_ms is None else now + step.duration_ms
            worker.slow_revocation = (step.delay_ms, until)

    def _slow_stop(self, now: int, worker: _SimWorker, stop: Items) -> int:
        """How long stopping ``stop`` takes now (0 = at once); a slow stop keeps the herder busy."""
        delay, until = worker.slow_revocation
        if not stop or now >= until or delay <= 0:
            return 0
        self._stall(now, worker, "stall", delay)
        return delay

    def _send(
        self,
        now: int,
        worker: _SimWorker,
        method: str,
        request: Any,
        unavailable: Callable[[], Any],
        deliver: Callable[[Any, int, bool], None],
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
        timing = self.scenario.timing

        def time_out(start: int, at: int) -> None:
            """The worker waits for an answer that never comes: it cannot take work meanwhile."""
            self.log.stall_start(start, worker.name, "timeout")

            def expired(resp: Any, t: int) -> None:
                self.at(t, lambda t2: self.log.stall_end(t2, worker.name, "timeout"))
                deliver(resp, t, False)

            expired(unavailable(), at)

        cut_off = min(timeout_ms, timing.session_timeout_ms)
        if now < worker.partitioned_until:
            time_out(now, now + cut_off)
            return
        lost, duplicate = worker.lose > 0, worker.duplicate > 0
        worker.lose -= lost
        worker.duplicate -= duplicate
        twice = not lost and worker.duplicate_responses > 0
        worker.duplicate_responses -= twice
        main_tag = "lost" if lost else "dupresp" if twice else ""

        def arrive(t: int, tag: str) -> None:
            if t < worker.partitioned_until:
                if tag != "dup":  # cut off on the way: the bridge never sees it
                    # Stall from ``t``, not the send time ``now``: the log has moved past ``now``.
                    time_out(t, max(t, now + cut_off))
                return
            req = request if token is None else _with_token(request, (*token, tag, now + timeout_ms))
            if self.bridge_up:
                resp = getattr(self.coordinator, method)(req, t)
                self._after_coordinator(t)
            else:
                resp = unavailable()
            if _TRACE:
                head = f"{t:>8} {worker.name:<4} {method} {tag or '-'}"
                print(f"{head}\n    > {req!r}\n    < {resp!r}", file=sys.stderr)
            if tag == "dup":
                return
            if tag == "lost":
                if resp is not None:
                    time_out(t, max(t, now + timeout_ms))
                return
            if resp is not None:
                at = t + self.latency()
                deliver(resp, at, False)
                if tag == "dupresp":
                    deliver(resp, at + self.latency(), True)

        first = now + self.latency()
        self.at(first, lambda t: arrive(t, main_tag))
        if duplicate:  # the resend reaches the bridge after its original (one connection, in order)
            self.at(first + self.latency() + self.latency(), lambda t: arrive(t, "dup"))

    # ------------------------------------------------------------------ new-protocol workers
    def _new_heartbeat(self, now: int, worker: _SimWorker) -> None:
        if self._held_up(now, worker, True, lambda t: self._new_heartbeat(t, worker)):
            return
        logic = worker.logic
        assert isinstance(logic, NewProtocolWorker)
        req = logic.heartbeat_request(now)
        incarnation = worker.incarnation
        worker.new_seq += 1
        seq = worker.new_seq

        def deliver(resp: Any, at: int, dup: bool) -> None:
            self.at(at, lambda t: self._new_response(t, worker, incarnation, seq, resp, dup))

        self._send(
            now,
            worker,
            "connect_heartbeat",
            req,
            lambda: api.HeartbeatResponse(error_code=_UNAVAILABLE),
            deliver,
            self.scenario.timing.request_timeout_ms,
        )

    def _new_response(
        self,
        now: int,
        worker: _SimWorker,
        incarnation: int,
        seq: int,
        resp: api.HeartbeatResponse,
        dup: bool = False,
    ) -> None:
        """Hand an answer to the worker. ``seq`` is the client's correlation: an answer to anything but
        the last heartbeat sent is dropped here; a duplicate of the last one reaches the worker, which
        must see it as stale (``reaction.stale``) and schedule nothing."""
        if not self._current(worker, incarnation) or seq != worker.new_seq:
            return
        if self._held_up(
            now, worker, True, lambda t: self._new_response(t, worker, incarnation, seq, resp, dup)
        ):
            return
        logic = worker.logic
        assert isinstance(logic, NewProtocolWorker)
        reaction = logic.on_response(resp)
        if reaction.stale:
            return
        if reaction.fatal is not None:
            self._apply(now, worker, reaction.stop, frozenset(), None)
            worker.alive = False
            self.log.worker_crash(now, worker.name, worker.protocol)
            return
        epoch = logic.member_epoch if reaction.epoch_changed else None
        slow = self._slow_stop(now, worker, reaction.stop)
        if slow:
            stop, start = reaction.stop, reaction.start
            self._apply_later(now + slow, worker, stop, start, epoch)
        else:
            self._apply(now, worker, reaction.stop, reaction.start, epoch)
        delay = 0 if reaction.heartbeat_now else reaction.interval_ms
        self.at(now + max(delay, slow), lambda t: self._new_retry(t, worker, incarnation))
        expiry = logic.session_expiry_ms()
        if expiry is not None:
            self.at(expiry, lambda t: self._check_session(t, worker, incarnation))

    def _new_retry(self, now: int, worker: _SimWorker, incarnation: int) -> None:
        if self._current(worker, incarnation):
            self._new_heartbeat(now, worker)

    def _check_session(self, now: int, worker: _SimWorker, incarnation: int) -> None:
        """A worker cut off from the coordinator for a session timeout stops its work by itself."""
        if not self._current(worker, incarnation):
            return
        # Stalled or paused, the worker's own timer cannot fire: it fences itself once it resumes.
        if self._held_up(now, worker, True, lambda t: self._check_session(t, worker, incarnation)):
            return
        assert isinstance(worker.logic, NewProtocolWorker)
        reaction = worker.logic.expire_session(now)
        if reaction is not None:
            self._apply(now, worker, reaction.stop, reaction.start, 0 if reaction.epoch_changed else None)

    # ------------------------------------------------------------------ legacy workers
    def _schedule_step(self, at: int, worker: _SimWorker) -> None:
        """Only the latest scheduled step of a worker runs, so retries never pile up."""
        worker.step_seq += 1
        seq, incarnation = worker.step_seq, worker.incarnation
        self.at(at, lambda t: self._legacy_step(t, worker, seq, incarnation))

    def _legacy_step(
        self, now: int, worker: _SimWorker, seq: int | None = None, incarnation: int | None = None
    ) -> None:
        if not worker.alive or (
            seq is not None and (seq != worker.step_seq or incarnation != worker.incarnation)
        ):
            return
        if self._held_up(now, worker, False, lambda t: self._schedule_step(t, worker)):
            return
        logic = worker.logic
        assert isinstance(logic, LegacyWorker)
        action = logic.next_action(now)
        if action.kind in (ActionKind.WAIT, ActionKind.STOPPED) or action.at_ms is None:
            return
        if action.at_ms > now:
            self._schedule_step(action.at_ms, worker)
            return
        if action.kind is ActionKind.JOIN:
            # The herder joins; while it is stalled only the heartbeat thread runs. A REBALANCE_IN_
            # PROGRESS answer only *requested* the rejoin (the member stays STABLE in Java until the
            # herder polls), so the heartbeat thread keeps the session alive until the poll timeout.
            if self._held_up(now, worker, True, lambda t: self._schedule_step(t, worker)):
                due = logic.heartbeat_due_ms()
                if due is not None and now >= worker.paused_until:
                    if due > now:
                        self._schedule_step(due, worker)
                    else:
                        self._legacy_send(now, worker, "heartbeat", logic.heartbeat_request(now))
                return
            reaction = logic.prepare_join(now)
            self._apply(now, worker, reaction.stop, reaction.start, None)
            self._legacy_send(now, worker, "join", logic.join_request(now))
        else:
            self._legacy_send(now, worker, "heartbeat", logic.heartbeat_request(now))

    def _legacy_send(self, now: int, worker: _SimWorker, kind: str, request: Any) -> None:
        incarnation = worker.incarnation
        method, unavailable, _ = _LEGACY_CALLS[kind]
        worker.in_flight.add(kind)
        seq = worker.sent_seq[kind] = worker.sent_seq.get(kind, 0) + 1
        timing = self.scenario.timing
        # When the worker gives up on an answer: JoinGroup waits the rebalance timeout + 5 s (Java's
        # client); a heartbeat is given up once the session has expired, measured from the last
        # answer the worker got (the heartbeat thread marks the coordinator unknown then); SyncGroup
        # waits ``request.timeout.ms``.
        timeout = {
            "join": timing.rebalance_timeout_ms + 5_000,
            "heartbeat": max(1, worker.last_answer_ms + timing.session_timeout_ms - now),
        }.get(kind, timing.request_timeout_ms)

        def deliver(resp: Any, at: int, dup: bool) -> None:
            self.at(at, self._legacy_response_cb(worker, incarnation, kind, resp, seq, dup))

        token = (worker.name, incarnation, kind, seq) if kind in ("join", "sync") else None
        self._send(now, worker, method, request, unavailable, deliver, timeout, token)

    def _legacy_response_cb(
        self, worker: _SimWorker, incarnation: int, kind: str, resp: Any, seq: int, dup: bool = False
    ) -> Callable[[int], None]:
        return lambda t: self._legacy_response(t, worker, incarnation, kind, resp, seq, dup)

    def _legacy_response(
        self,
        now: int,
        worker: _SimWorker,
        incarnation: int,
        kind: str,
        resp: Any,
        seq: int,
        dup: bool = False,
    ) -> None:
        """Hand an answer to the worker. An answer to anything but the last request of its kind is
        dropped (the client's correlation check). A duplicate of the last one is handed to the worker
        even though the sim knows it is not awaited: the worker object must ignore it by itself."""
        if not self._current(worker, incarnation) or seq != worker.sent_seq.get(kind):
            return
        if not dup and kind not in worker.in_flight:
            return
        herder = kind != "heartbeat"  # heartbeat answers are the heartbeat thread's
        cb = self._legacy_response_cb(worker, incarnation, kind, resp, seq, dup)
        if self._held_up(now, worker, herder, cb):
            return
        worker.in_flight.discard(kind)
        logic = worker.logic
        assert isinstance(logic, LegacyWorker)
        stalled = now < worker.stalled_until  # only the heartbeat thread runs
        if resp.error_code != _UNAVAILABLE:
            worker.last_answer_ms = now
        elif not stalled and now - worker.last_answer_ms >= self.scenario.timing.heartbeat_interval_ms:
            lost = logic.coordinator_lost(now)
            self._apply(now, worker, lost.stop, frozenset(), None)
        reaction = getattr(logic, _LEGACY_CALLS[kind][2])(resp, now)
        epoch = reaction.generation if reaction.generation_changed else None
        slow = self._slow_stop(now, worker, reaction.stop) if reaction.fatal is None else 0
        if slow:
            stop, start = reaction.stop, reaction.start
            self._apply_later(now + slow, worker, stop, start, epoch)
        else:
            self._apply(now, worker, reaction.stop, reaction.start, epoch)
        if reaction.fatal is not None:
            worker.alive = False
            self.log.worker_crash(now, worker.name, worker.protocol)
            return
        if isinstance(reaction.request, classic_api.SyncGroupRequest):
            request = reaction.request
            if worker.sync_delay_ms:
                # A late SyncGroup: the herder is held up between JoinGroup and SyncGroup.
                self._stall(now, worker, "stall", worker.sync_delay_ms)
                worker.sync_delay_ms = 0
                worker.deferred.append(lambda t: self._legacy_send(t, worker, "sync", request))
            else:
                self._legacy_send(now, worker, "sync", request)
        self._schedule_step(now, worker)

    # ------------------------------------------------------------------ config and bridge
    def _config_changed(self, now: int) -> None:
        self.config_offset += 1
        self.log.config(now, dict(self.connectors), self.config_offset)
        view = self.view()
        self.coordinator.default_view = view
        if self.bridge_up:
            self.coordinator.set_config(self.scenario.group, view, now)
            self._after_coordinator(now)
        # Legacy workers read the config topic too; their herders ask for a rebalance.
        for worker in self.workers.values():
            if worker.alive and isinstance(worker.logic, LegacyWorker):
                reaction = worker.logic.on_config_change()
                self._apply(now, worker, reaction.stop, frozenset(), None)
                self._schedule_step(now, worker)

    def _restart_bridge(self, now: int, down_ms: int) -> None:
        self.bridge_up = False
        self.bridge_incarnation += 1
        self.tick_at = None
        self.log.bridge_restart(now)
        # Connections drop: parked JoinGroup/SyncGroup requests fail and their workers retry.
        for worker in self.workers.values():
            for kind in sorted(worker.in_flight & {"join", "sync"}):
                resp = _LEGACY_CALLS[kind][1]()
                seq = worker.sent_seq[kind]
                self.at(
                    now + self.latency(),
                    self._legacy_response_cb(worker, worker.incarnation, kind, resp, seq),
                )

        def up(t: int) -> None:
            self.coordinator = self._new_coordinator()
            live = [r for r in self.store.values() if not r.is_tombstone]
            self.coordinator.replay(live, t)
            self.coordinator.set_config(self.scenario.group, self.view(), t)
            self.bridge_up = True
            self.log.bridge_up(t)
            self._after_coordinator(t)

        self.at(now + down_ms, up)

    def _step(self, step: Any) -> Callable[[int], None]:
        action = step.action
        if action == "start":
            return lambda t: self._start(t, step.worker, step.protocol, step.instance_id)
        if action == "stop":
            return lambda t: self._stop(t, step.worker)
        if action == "crash":
            return lambda t: self._crash(t, step.worker)
        if action == "restart":

            def restart(t: int) -> None:
                protocol = step.protocol or self.workers[step.worker].protocol
                instance_id = self.workers[step.worker].logic.instance_id
                self._stop(t, step.worker)
                self.at(t + step.down_ms, lambda t2: self._start(t2, step.worker, protocol, instance_id))

            return restart
        if action in ("add_connector", "set_tasks"):

            def set_tasks(t: int) -> None:
                self.connectors[step.connector] = step.tasks
                self._config_changed(t)

            return set_tasks
        if action == "remove_connector":

            def remove(t: int) -> None:
                self.connectors.pop(step.connector, None)
                self._config_changed(t)

            return remove
        if action == "restart_bridge":
            return lambda t: self._restart_bridge(t, step.down_ms)
        if action in _MISBEHAVIOURS:
            return lambda t: self._misbehave(t, step)
        raise ValueError(f"unknown action {action!r}")

    # ------------------------------------------------------------------ run
    def run(self) -> EventLog:
        sc = self.scenario
        self.log.timing(0, **sc.timing.model_dump())
        self.log.config(0, dict(self.connectors), self.config_offset)
        self.coordinator.set_config(sc.group, self.view(), 0)
        self._after_coordinator(0)
        for step in sc.steps:
            self.at(step.at_ms, self._step(step))
        last_report = 0
        while self.queue and self.queue[0][0] <= sc.end_ms:
            t, _, action = heapq.heappop(self.queue)
            self.now = t
            action(t)
            if self.progress is not None and t - last_report >= 10_000:
                last_report = t
                self.progress(t, sc.end_ms)
        self.log.drill_end(sc.end_ms)
        if self.progress is not None:
            self.progress(sc.end_ms, sc.end_ms)
        return self.log


def _with_token(request: Any, token: object) -> Any:
    from dataclasses import replace

    return replace(request, token=token)


def run_scenario(scenario: Scenario, progress: Callable[[int, int], None] | None = None) -> EventLog:
    return SimulatedDrill(scenario, progress=progress).run()
