"""Simulated-time drills: the real engine, simulated workers, a simulated clock and network.

One priority queue of timed actions drives everything; latencies come from a generator seeded by
the scenario, so a run is a pure function of its scenario file. The coordinator is the production
``GroupCoordinator``; its records go to an in-memory compacted store, which is what a
``restart_bridge`` step replays into a fresh coordinator.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from connect_bridge.drills.events import EventLog
from connect_bridge.drills.scenario import Scenario
from connect_bridge.state.api import HeartbeatResponse
from connect_bridge.state.config import CoordinatorConfig, MigrationPolicy
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import NEW_PROTOCOL, ConfigView, GroupType
from connect_bridge.state.records import Record
from connect_bridge.workers.new_protocol import NewProtocolWorker, Reaction

SUPPORTED_PROTOCOLS = frozenset({NEW_PROTOCOL})


class UnsupportedScenario(ValueError):
    """A scenario this runner cannot play yet (legacy protocols arrive with the translation layer)."""


@dataclass(slots=True)
class _SimWorker:
    name: str
    protocol: str
    logic: NewProtocolWorker
    incarnation: int
    alive: bool = True


@dataclass
class SimulatedDrill:
    scenario: Scenario
    log: EventLog = field(default_factory=EventLog)
    progress: Callable[[int, int], None] | None = None
    latency_ms: tuple[int, int] = (1, 5)

    def __post_init__(self) -> None:
        sc = self.scenario
        for step in sc.steps:
            protocol = getattr(step, "protocol", None)
            if protocol is not None and protocol not in SUPPORTED_PROTOCOLS:
                raise UnsupportedScenario(
                    f"protocol {protocol!r} (step at {step.at_ms} ms) is not supported by --mode sim yet; "
                    f"supported: {sorted(SUPPORTED_PROTOCOLS)}"
                )
        t = sc.timing
        self.config = CoordinatorConfig(
            session_timeout_ms=t.session_timeout_ms,
            heartbeat_interval_ms=t.heartbeat_interval_ms,
            scheduled_rebalance_max_delay_ms=t.scheduled_rebalance_max_delay_ms,
            migration_policy=MigrationPolicy(sc.migration_policy),
        )
        self.rng = random.Random(sc.seed)
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
        self.seq += 1
        heapq.heappush(self.queue, (t_ms, self.seq, action))

    def latency(self) -> int:
        lo, hi = self.latency_ms
        return self.rng.randint(lo, hi)

    def _after_coordinator(self, now: int) -> None:
        """Persist records, report the group epoch, and make sure the next timer tick is queued."""
        for record in self.coordinator.drain_records():
            self.store[record.key] = record
        group = self.coordinator.groups.get(self.scenario.group)
        if group is not None:
            current = (GroupType.CONNECT.value, group.group_epoch)
            if current != self.last_group:
                self.last_group = current
                self.log.group(now, current[0], current[1])
        deadline = self.coordinator.next_deadline()
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

    # ------------------------------------------------------------------ workers
    def _start(self, now: int, name: str, protocol: str) -> None:
        self.incarnations += 1
        logic = NewProtocolWorker(
            group_id=self.scenario.group,
            url=f"http://{name}:8083/",
            rebalance_timeout_ms=self.scenario.timing.rebalance_timeout_ms,
            session_timeout_ms=self.scenario.timing.session_timeout_ms,
            config_offset=self.config_offset,
        )
        worker = _SimWorker(name, protocol, logic, self.incarnations)
        self.workers[name] = worker
        self.log.worker_start(now, name, protocol)
        self._send_heartbeat(now, worker)

    def _send_heartbeat(self, now: int, worker: _SimWorker) -> None:
        req = worker.logic.heartbeat_request(now)
        incarnation = worker.incarnation

        def arrive(t: int) -> None:
            if not self.bridge_up:
                # No answer: the worker's request times out and it tries again.
                self.at(
                    t + self.scenario.timing.heartbeat_interval_ms,
                    lambda t2: self._retry(t2, worker, incarnation),
                )
                return
            resp = self.coordinator.connect_heartbeat(req, t)
            self._after_coordinator(t)
            self.at(t + self.latency(), lambda t2: self._on_response(t2, worker, incarnation, resp))

        self.at(now + self.latency(), arrive)

    def _retry(self, now: int, worker: _SimWorker, incarnation: int) -> None:
        if worker.alive and worker.incarnation == incarnation:
            self._send_heartbeat(now, worker)

    def _on_response(self, now: int, worker: _SimWorker, incarnation: int, resp: HeartbeatResponse) -> None:
        if not worker.alive or worker.incarnation != incarnation:
            return
        reaction = worker.logic.on_response(resp)
        self._apply(now, worker, reaction)
        delay = 0 if reaction.heartbeat_now else reaction.interval_ms
        self.at(now + delay, lambda t: self._retry(t, worker, incarnation))
        expiry = worker.logic.session_expiry_ms()
        if expiry is not None:
            self.at(expiry, lambda t: self._check_session(t, worker, incarnation))

    def _apply(self, now: int, worker: _SimWorker, reaction: Reaction) -> None:
        for item in sorted(reaction.stop):
            self.log.release(now, worker.name, item)
        for item in sorted(reaction.start):
            self.log.run(now, worker.name, item)
        if reaction.epoch_changed:
            self.log.epoch(now, worker.name, worker.logic.member_epoch)

    def _check_session(self, now: int, worker: _SimWorker, incarnation: int) -> None:
        """A worker cut off from the coordinator for a session timeout stops its work by itself."""
        if worker.alive and worker.incarnation == incarnation:
            reaction = worker.logic.expire_session(now)
            if reaction is not None:
                self._apply(now, worker, reaction)

    def _stop(self, now: int, name: str) -> None:
        worker = self.workers[name]
        worker.alive = False
        for item in sorted(worker.logic.running):
            self.log.release(now, name, item)
        req = worker.logic.leave_request()
        worker.logic.running = frozenset()
        self.log.worker_stop(now, name, worker.protocol)

        def arrive(t: int) -> None:
            if self.bridge_up:
                self.coordinator.connect_heartbeat(req, t)
                self._after_coordinator(t)

        self.at(now + self.latency(), arrive)

    def _crash(self, now: int, name: str) -> None:
        worker = self.workers[name]
        worker.alive = False
        self.log.worker_crash(now, name, worker.protocol)

    # ------------------------------------------------------------------ config and bridge
    def _config_changed(self, now: int) -> None:
        self.config_offset += 1
        self.log.config(now, dict(self.connectors), self.config_offset)
        view = self.view()
        self.coordinator.default_view = view
        if self.bridge_up:
            self.coordinator.set_config(self.scenario.group, view, now)
            self._after_coordinator(now)

    def _restart_bridge(self, now: int, down_ms: int) -> None:
        self.bridge_up = False
        self.bridge_incarnation += 1
        self.tick_at = None
        self.log.bridge_restart(now)

        def up(t: int) -> None:
            self.coordinator = self._new_coordinator()
            live = [r for r in self.store.values() if not r.is_tombstone]
            self.coordinator.replay(live, t)
            self.coordinator.set_config(self.scenario.group, self.view(), t)
            self.bridge_up = True
            self._after_coordinator(t)

        self.at(now + down_ms, up)

    def _step(self, step) -> Callable[[int], None]:
        action = step.action
        if action == "start":
            return lambda t: self._start(t, step.worker, step.protocol)
        if action == "stop":
            return lambda t: self._stop(t, step.worker)
        if action == "crash":
            return lambda t: self._crash(t, step.worker)
        if action == "restart":

            def restart(t: int) -> None:
                protocol = step.protocol or self.workers[step.worker].protocol
                self._stop(t, step.worker)
                self.at(t + step.down_ms, lambda t2: self._start(t2, step.worker, protocol))

            return restart
        if action == "add_connector" or action == "set_tasks":

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
        raise UnsupportedScenario(f"unknown action {action!r}")

    # ------------------------------------------------------------------ run
    def run(self) -> EventLog:
        sc = self.scenario
        self.log.config(0, dict(self.connectors), self.config_offset)
        self.coordinator.set_config(sc.group, self.view(), 0)
        self._after_coordinator(0)
        for step in sc.steps:
            self.at(step.at_ms, self._step(step))
        last_report = 0
        while self.queue and self.queue[0][0] <= sc.end_ms:
            t, _, action = heapq.heappop(self.queue)
            action(t)
            if self.progress is not None and t - last_report >= 10_000:
                last_report = t
                self.progress(t, sc.end_ms)
        self.log.drill_end(sc.end_ms)
        if self.progress is not None:
            self.progress(sc.end_ms, sc.end_ms)
        return self.log


def run_scenario(scenario: Scenario, progress: Callable[[int, int], None] | None = None) -> EventLog:
    return SimulatedDrill(scenario, progress=progress).run()
