"""Simulated-time drills: the real engine, simulated workers, a simulated clock and network.

The bridge side (clock, coordinator, record store, network, bridge restarts) is
:class:`~connect_bridge.drills.sim_bridge.SimulatedBridge`; this module plays the workers against it.
Workers are the I/O-free worker objects of ``connect_bridge.workers`` (the live clients drive the same
ones), each wrapped in a :class:`~connect_bridge.drills.sim_worker.SimWorker` process:
``NewProtocolWorker`` through ConnectGroupHeartbeat, ``LegacyWorker`` through JoinGroup / SyncGroup /
Heartbeat / LeaveGroup. A run is a pure function of its scenario file.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from connect_bridge.drills.events import EventLog
from connect_bridge.drills.scenario import Scenario
from connect_bridge.drills.sim_bridge import SimulatedBridge
from connect_bridge.drills.sim_worker import (
    LEGACY_CALLS,
    MISBEHAVE,
    MISBEHAVIOURS,
    STALL_ATTRS,
    UNAVAILABLE,
    SimWorker,
    make_logic,
)
from connect_bridge.state import api
from connect_bridge.state.adoption.records import OwnershipState
from connect_bridge.state.classic import api as classic_api
from connect_bridge.state.model import Items
from connect_bridge.workers.legacy import ActionKind, LegacyWorker
from connect_bridge.workers.new_protocol import NewProtocolWorker


class SimulatedDrill(SimulatedBridge):
    """A scenario played by simulated worker processes against the simulated bridge."""

    # ------------------------------------------------------------------ what workers do
    def _apply(self, now: int, worker: SimWorker, stop: Items, start: Items, epoch: int | None) -> None:
        if stop:
            for item in sorted(stop):
                self.log.release(now, worker.name, item)
        if start:
            for item in sorted(start):
                self.log.run(now, worker.name, item)
        if epoch is not None:
            self.log.epoch(now, worker.name, epoch)

    def _apply_after(
        self, slow: int, now: int, worker: SimWorker, stop: Items, start: Items, epoch: int | None
    ) -> None:
        """Apply a reaction now, or once a slow stop of ``slow`` ms is over, unless the process is
        gone by then: its stop or crash already ended everything it ran, and a later incarnation's
        items are not its to stop."""
        if not slow:
            self._apply(now, worker, stop, start, epoch)
            return
        incarnation = worker.incarnation

        def finish(t: int) -> None:
            if self._current(worker, incarnation):
                self._apply(t, worker, stop, start, epoch)

        self.at(now + slow, finish)

    def _current(self, worker: SimWorker, incarnation: int) -> bool:
        return worker.alive and worker.incarnation == incarnation

    # ------------------------------------------------------------------ lifecycle
    def _start(self, now: int, name: str, protocol: str, instance_id: str | None = None) -> None:
        self.incarnations += 1
        logic = make_logic(
            self.scenario, name, protocol, self.incarnations, self.config_offset, self.view, instance_id
        )
        worker = SimWorker(name, protocol, logic, self.incarnations)
        self.workers[name] = worker
        self.given.pop(name, None)  # a new process: what was given to the old one is not its
        self.assignment_seen = None
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
        if request is not None:
            self._send_one_way(now + self.latency(), call, request)

    def _crash(self, now: int, name: str) -> None:
        worker = self.workers[name]
        worker.alive = False
        self.log.worker_crash(now, name, worker.protocol)

    # ------------------------------------------------------------------ misbehaviour
    def _held_up(self, now: int, worker: SimWorker, herder: bool, action: Callable[[int], None]) -> bool:
        """Defer ``action`` while the process is paused (or, for herder work, stalled)."""
        if _held(now, worker, herder):
            worker.deferred.append(action)
            return True
        return False

    def _stall(self, now: int, worker: SimWorker, kind: str, duration_ms: int) -> None:
        """Start a stall, pause or partition of ``duration_ms``; logged so liveness is judged fairly."""
        attr = STALL_ATTRS[kind]
        until = now + duration_ms
        setattr(worker, attr, max(getattr(worker, attr), until))
        self.log.stall_start(now, worker.name, kind)
        incarnation = worker.incarnation
        self.at(until, lambda t: self._stall_over(t, worker, incarnation, kind))
        legacy = isinstance(worker.logic, LegacyWorker)
        if kind == "stall" and legacy and duration_ms > self.scenario.timing.rebalance_timeout_ms:
            at = now + self.scenario.timing.rebalance_timeout_ms
            self.at(at, lambda t: self._poll_timeout(t, worker, incarnation))

    def _stall_over(self, now: int, worker: SimWorker, incarnation: int, kind: str) -> None:
        if worker.incarnation != incarnation or not worker.alive:
            return
        self.log.stall_end(now, worker.name, kind)
        deferred, worker.deferred = worker.deferred, []
        for action in deferred:
            action(now)
        if isinstance(worker.logic, LegacyWorker):
            self._schedule_step(now, worker)

    def _poll_timeout(self, now: int, worker: SimWorker, incarnation: int) -> None:
        """The heartbeat thread gives up on a stalled herder: LeaveGroup, tasks keep running."""
        if worker.incarnation != incarnation or not worker.alive or now >= worker.stalled_until:
            return
        if now < worker.paused_until:
            return  # a paused process sends nothing
        logic = worker.logic
        assert isinstance(logic, LegacyWorker)
        request = logic.poll_timeout_leave()
        worker.in_flight.clear()
        if request is not None and now >= worker.partitioned_until:
            self._send_one_way(now + self.latency(), "classic_leave", request)

    def _misbehave(self, now: int, step: Any) -> None:
        worker = self.workers.get(step.worker)
        if worker is None or not worker.alive:
            return
        action = step.action
        if self._kafka_coordinates(worker) and action in ("partition", "lose_responses"):
            # The upstream (Kafka's) coordinator holds nothing for a member its timers remove: only
            # Connect's leader delays lost work, and only if it remembers, which it does not when
            # the silent worker leads. A cooperative worker cut off from a JoinGroup answer runs its
            # work for a whole JoinGroup timeout, a zombie beyond Kafka's hold (known-issues item
            # 5), drawn only where the bridge holds. Under Kafka the rule for classic groups holds:
            # a legacy silence stays under what no coordinator can notice, no cooperative loss.
            if action == "lose_responses":
                if worker.protocol != "eager":
                    return
            else:
                action, duration = "pause", min(step.duration_ms, self.unnoticed_ms())
                self._stall(now, worker, action, duration)
                return
        if action in STALL_ATTRS:
            self._stall(now, worker, action, step.duration_ms)
        else:
            MISBEHAVE[action](worker, step, now)

    def _kafka_coordinates(self, worker: SimWorker) -> bool:
        """Whether ``worker`` is a classic-protocol worker of a group the upstream (simulated Kafka)
        coordinator coordinates now: relaying before an adoption, released after a hand-back."""
        if self.upstream is None or not isinstance(worker.logic, LegacyWorker):
            return False
        return self.phase() in (OwnershipState.RELAYING, OwnershipState.RELEASED)

    def unnoticed_ms(self) -> int:
        """A silence no coordinator can have noticed: a session less a heartbeat interval (the last
        heartbeat may be that old) and a second for the network (the generator's bound)."""
        timing = self.scenario.timing
        return timing.session_timeout_ms - timing.heartbeat_interval_ms - 1_000

    def _slow_stop(self, now: int, worker: SimWorker, stop: Items) -> int:
        """How long stopping ``stop`` takes now (0 = at once); a slow stop keeps the herder busy."""
        delay, until = worker.slow_revocation
        if not stop or now >= until or delay <= 0:
            return 0
        self._stall(now, worker, "stall", delay)
        return delay

    # ------------------------------------------------------------------ new-protocol workers
    def _new_heartbeat(self, now: int, worker: SimWorker) -> None:
        if _held(now, worker, True):
            worker.deferred.append(lambda t: self._new_heartbeat(t, worker))
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
            lambda: api.HeartbeatResponse(error_code=UNAVAILABLE),
            deliver,
            self.scenario.timing.request_timeout_ms,
        )

    def _new_response(
        self,
        now: int,
        worker: SimWorker,
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
        if _held(now, worker, True):
            worker.deferred.append(lambda t: self._new_response(t, worker, incarnation, seq, resp, dup))
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
        self._apply_after(slow, now, worker, reaction.stop, reaction.start, epoch)
        delay = 0 if reaction.heartbeat_now else reaction.interval_ms
        self.at(now + max(delay, slow), lambda t: self._new_retry(t, worker, incarnation))
        expiry = logic.session_expiry_ms()
        if expiry is not None:
            self.at(expiry, lambda t: self._check_session(t, worker, incarnation))

    def _new_retry(self, now: int, worker: SimWorker, incarnation: int) -> None:
        if self._current(worker, incarnation):
            self._new_heartbeat(now, worker)

    def _check_session(self, now: int, worker: SimWorker, incarnation: int) -> None:
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
    def _schedule_step(self, at: int, worker: SimWorker) -> None:
        """Only the latest scheduled step of a worker runs, so retries never pile up."""
        worker.step_seq += 1
        seq, incarnation = worker.step_seq, worker.incarnation
        self.at(at, lambda t: self._legacy_step(t, worker, seq, incarnation))

    def _legacy_step(
        self, now: int, worker: SimWorker, seq: int | None = None, incarnation: int | None = None
    ) -> None:
        if not worker.alive or (
            seq is not None and (seq != worker.step_seq or incarnation != worker.incarnation)
        ):
            return
        if _held(now, worker, False):
            worker.deferred.append(lambda t: self._schedule_step(t, worker))
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

    def _legacy_send(self, now: int, worker: SimWorker, kind: str, request: Any) -> None:
        incarnation = worker.incarnation
        method, unavailable, _ = LEGACY_CALLS[kind]
        worker.in_flight.add(kind)
        seq = worker.sent_seq[kind] = worker.sent_seq.get(kind, 0) + 1
        timing = self.scenario.timing
        # When the worker gives up on an answer: JoinGroup waits max(request.timeout.ms, rebalance
        # timeout + 5 s) (Java's AbstractCoordinator); a heartbeat is given up once the session has
        # expired, measured from the last answer the worker got (the heartbeat thread marks the
        # coordinator unknown then); SyncGroup waits ``request.timeout.ms``.
        if kind == "heartbeat":
            timeout = max(1, worker.last_answer_ms + timing.session_timeout_ms - now)
        elif kind == "join":
            timeout = max(timing.request_timeout_ms, timing.rebalance_timeout_ms + 5_000)
        else:
            timeout = timing.request_timeout_ms

        def deliver(resp: Any, at: int, dup: bool) -> None:
            self.at(at, self._legacy_response_cb(worker, incarnation, kind, resp, seq, dup))

        token = (worker.name, incarnation, kind, seq) if kind in ("join", "sync") else None
        self._send(now, worker, method, request, unavailable, deliver, timeout, token)

    def _legacy_response(
        self,
        now: int,
        worker: SimWorker,
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
        if _held(now, worker, herder):
            worker.deferred.append(self._legacy_response_cb(worker, incarnation, kind, resp, seq, dup))
            return
        worker.in_flight.discard(kind)
        logic = worker.logic
        assert isinstance(logic, LegacyWorker)
        stalled = now < worker.stalled_until  # only the heartbeat thread runs
        if resp.error_code != UNAVAILABLE:
            worker.last_answer_ms = now
        elif not stalled and now - worker.last_answer_ms >= self.scenario.timing.heartbeat_interval_ms:
            lost = logic.coordinator_lost(now)
            self._apply(now, worker, lost.stop, frozenset(), None)
        reaction = getattr(logic, LEGACY_CALLS[kind].on_response)(resp, now)
        epoch = reaction.generation if reaction.generation_changed else None
        if reaction.stop or reaction.start or epoch is not None:  # (most answers change nothing)
            slow = self._slow_stop(now, worker, reaction.stop) if reaction.fatal is None else 0
            self._apply_after(slow, now, worker, reaction.stop, reaction.start, epoch)
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
        # The worker's next step, when it is a heartbeat later on, is queued for then at once; any
        # other event of this moment that changes what the worker does next queues a step of its
        # own, which supersedes this one (``_schedule_step``). Until 2026-11-29 a step was queued
        # for now that only queued the heartbeat's (about half of all steps); the drills are the same
        # (``benchmarks/fleet_hash.py``: 300 + 300 of fleet 5151, 1,000 + 1,000 of fleet 777).
        action = logic.next_action(now)
        due = action.at_ms
        heartbeat_later = action.kind is ActionKind.HEARTBEAT and due is not None and due > now
        self._schedule_step(due if heartbeat_later and due is not None else now, worker)

    # ------------------------------------------------------------------ config and steps
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

    def _restart(self, t: int, step: Any) -> None:
        """Graceful stop, then the same worker (its protocol unless the step names one, its instance
        id) starts again ``down_ms`` later."""
        protocol = step.protocol or self.workers[step.worker].protocol
        instance_id = self.workers[step.worker].logic.instance_id
        self._stop(t, step.worker)
        self.at(t + step.down_ms, lambda t2: self._start(t2, step.worker, protocol, instance_id))

    def _set_tasks(self, t: int, step: Any) -> None:
        self.connectors[step.connector] = step.tasks
        self._config_changed(t)

    def _remove_connector(self, t: int, step: Any) -> None:
        self.connectors.pop(step.connector, None)
        self._config_changed(t)

    def _step(self, step: Any) -> Callable[[int], None]:
        play = _STEPS.get(step.action)
        if play is None:
            raise ValueError(f"unknown action {step.action!r}")
        return lambda t: play(self, t, step)

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
        queue, end_ms, progress, pop = self.queue, sc.end_ms, self.progress, heapq.heappop
        while queue and queue[0][0] <= end_ms:
            t, _, action = pop(queue)
            self.now = t
            action(t)
            if progress is not None and t - last_report >= 10_000:
                last_report = t
                progress(t, end_ms)
        self.log.drill_end(sc.end_ms)
        if self.progress is not None:
            self.progress(sc.end_ms, sc.end_ms)
        return self.log


def _held(now: int, worker: SimWorker, herder: bool) -> bool:
    """Whether the process is paused (or, for herder work, stalled) at ``now``: what it would do
    then waits in ``worker.deferred`` until the pause or stall is over."""
    return worker.alive and (now < worker.paused_until or (herder and now < worker.stalled_until))


_STEPS: dict[str, Callable[[SimulatedDrill, int, Any], None]] = {
    "start": lambda drill, t, step: drill._start(t, step.worker, step.protocol, step.instance_id),
    "stop": lambda drill, t, step: drill._stop(t, step.worker),
    "crash": lambda drill, t, step: drill._crash(t, step.worker),
    "restart": SimulatedDrill._restart,
    "add_connector": SimulatedDrill._set_tasks,
    "set_tasks": SimulatedDrill._set_tasks,
    "remove_connector": SimulatedDrill._remove_connector,
    "restart_bridge": lambda drill, t, step: drill._restart_bridge(t, step.down_ms),
    "takeover_bridge": lambda drill, t, step: drill._takeover_bridge(t, step.down_ms),
    "adopt": lambda drill, t, step: drill._adopt(t),
    "release": lambda drill, t, step: drill._release(t),
    **dict.fromkeys(MISBEHAVIOURS, SimulatedDrill._misbehave),
}
"""Scenario step action -> what the drill does at the step's time."""


def run_scenario(scenario: Scenario, progress: Callable[[int, int], None] | None = None) -> EventLog:
    return SimulatedDrill(scenario, progress=progress).run()
