"""Randomized valid scenarios: the raw material of fuzz tests and fleet drills.

A scenario is generated from a seed alone, so any failing drill can be regenerated (or written out
and replayed with ``drill run``). Every generated scenario keeps at least one worker alive at the
end and leaves enough time after its last step for held work to be released and reconciled, so a
correct coordinator must end converged and balanced.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from connect_bridge.drills.scenario import Scenario, load_scenario

ALL_PROTOCOLS: tuple[str, ...] = ("eager", "compatible", "sessioned", "new")


def random_scenario(
    seed: int,
    protocols: Sequence[str] = ALL_PROTOCOLS,
    max_workers: int = 6,
    max_steps: int = 12,
    *,
    adversarial: bool = False,
    operations: bool = True,
) -> Scenario:
    """A valid random scenario of ``seed``; ``adversarial`` adds misbehaving processes (see below)
    and, unless ``operations`` is false, what operators and deployments do around them: a group
    adopted from an upstream coordinator and handed back, a bridge paused while another takes over,
    a long worker request timeout, bridge restarts around each conversion, adoption and hand-back.

    Without ``adversarial`` the output for a seed never changes (tests and fleets pin it); the
    adversarial draws come from their own generator, on top of the same base scenario, and the
    operations from a third one. ``operations=False`` is the adversarial generator as it was
    before operations were drawn (a seed found then means the same scenario there).
    """
    doc = _base_scenario(seed, protocols, max_workers, max_steps)
    if adversarial:
        ops = random.Random(f"operations-{seed}") if operations else None
        if ops is not None and ops.random() < 0.25:
            # Java's JoinGroup waits max(request.timeout.ms, rebalance + 5 s): past the rebalance
            # timeout here (the generator's is 30 s), which every bound below must take in.
            doc = {**doc, "timing": {**doc["timing"], "request_timeout_ms": 90_000}}
        doc = _with_adversity(doc, random.Random(f"adversarial-{seed}"))
        if ops is not None:
            doc = _with_operations(doc, ops)
    return load_scenario(doc)


_BASE_KINDS = ("restart", "restart", "crash", "stop", "start", "config", "config", "bridge")
"""What one random step of a base scenario does; repeats weigh the draw (the order is part of every
seed's scenario: never reorder it)."""


@dataclass
class _Story:
    """A base scenario being written: the steps so far and who runs, so each next step is valid."""

    rng: random.Random
    protocols: list[str]
    delay: int
    t: int = 0
    steps: list[dict] = field(default_factory=list)
    running: dict[str, str] = field(default_factory=dict)  # worker -> protocol
    stopped: list[str] = field(default_factory=list)
    next_connector: int = 0
    live_connectors: set[str] = field(default_factory=set)

    def start(self, name: str, at: int) -> None:
        protocol = self.rng.choice(self.protocols)
        self.steps.append({"at_ms": at, "action": "start", "worker": name, "protocol": protocol})
        self.running[name] = protocol

    def leave(self, kind: str) -> None:
        """A ``restart``, ``crash`` or ``stop`` of a running worker; never of the last one."""
        if len(self.running) <= 1:
            return
        rng, name = self.rng, self.rng.choice(sorted(self.running))
        if kind != "restart":
            self.steps.append({"at_ms": self.t, "action": kind, "worker": name})
            del self.running[name]
            self.stopped.append(name)
            return
        protocol = rng.choice(self.protocols)
        delay = self.delay
        down = rng.choice([1_000, 5_000, delay // 2 if delay else 2_000, delay + 20_000])
        self.steps.append(
            {"at_ms": self.t, "action": "restart", "worker": name, "down_ms": down, "protocol": protocol}
        )
        self.running[name] = protocol
        self.t += down

    def come_back(self, _: str) -> None:
        """A stopped or crashed worker starts again."""
        if self.stopped:
            self.start(self.stopped.pop(self.rng.randrange(len(self.stopped))), self.t)

    def config(self, _: str) -> None:
        """A connector is added, resized or removed."""
        rng, t, live = self.rng, self.t, self.live_connectors
        choice = rng.random()
        if choice < 0.4 or not live:
            name = f"c{self.next_connector}"
            self.next_connector += 1
            tasks = rng.randint(0, 6)
            self.steps.append({"at_ms": t, "action": "add_connector", "connector": name, "tasks": tasks})
            live.add(name)
        elif choice < 0.7:
            name = rng.choice(sorted(live))  # drawn before the task count: the seed fixes the order
            tasks = rng.randint(0, 8)
            self.steps.append({"at_ms": t, "action": "set_tasks", "connector": name, "tasks": tasks})
        else:
            name = rng.choice(sorted(live))
            self.steps.append({"at_ms": t, "action": "remove_connector", "connector": name})
            live.discard(name)

    def restart_bridge(self, _: str) -> None:
        down = self.rng.choice([500, 2_000, 5_000])
        self.steps.append({"at_ms": self.t, "action": "restart_bridge", "down_ms": down})
        self.t += down


_BASE_STEPS: dict[str, Callable[[_Story, str], None]] = {
    "restart": _Story.leave,
    "crash": _Story.leave,
    "stop": _Story.leave,
    "start": _Story.come_back,
    "config": _Story.config,
    "bridge": _Story.restart_bridge,
}


def _base_scenario(seed: int, protocols: Sequence[str], max_workers: int, max_steps: int) -> dict:
    """The seed's well-behaved scenario. Every draw from ``rng`` is part of what a seed means: a
    change to the number or order of draws changes every pinned regression and fleet drill."""
    rng = random.Random(seed)
    delay = rng.choice([0, 15_000, 30_000, 60_000])
    timing = {
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "heartbeat_interval_ms": 3_000,
        "scheduled_rebalance_max_delay_ms": delay,
    }
    connectors = {f"c{i}": rng.randint(0, 6) for i in range(rng.randint(1, 5))}
    story = _Story(rng, list(protocols), delay, next_connector=len(connectors))
    story.live_connectors = set(connectors)
    for name in [f"w{i}" for i in range(rng.randint(1, max_workers))]:
        story.start(name, 0 if rng.random() < 0.6 else rng.randint(0, 20_000))
    story.steps.sort(key=lambda s: s["at_ms"])
    story.t = max(s["at_ms"] for s in story.steps) + rng.randint(5_000, 30_000)
    for _ in range(rng.randint(0, max_steps)):
        kind = rng.choice(_BASE_KINDS)
        _BASE_STEPS[kind](story, kind)
        story.t += rng.randint(1_000, 40_000)
    settle = delay + 2 * timing["session_timeout_ms"] + timing["rebalance_timeout_ms"] + 60_000
    return {
        "name": f"random-{seed}",
        "seed": seed,
        "timing": timing,
        "connectors": connectors,
        "steps": story.steps,
        "end_ms": story.t + settle,
    }


def _timeline(steps: list[dict]) -> list[tuple[int, str, str | None]]:
    """Every moment a worker process starts (its protocol) or goes away (``None``), in time order: a
    ``restart`` is a departure at ``at_ms`` and an arrival ``down_ms`` later."""
    moments: list[tuple[int, str, str | None]] = []
    protocol: dict[str, str] = {}
    for step in steps:
        action, name, at = step["action"], step.get("worker"), step["at_ms"]
        if name is None:
            continue
        if action == "start":
            protocol[name] = step["protocol"]
            moments.append((at, name, step["protocol"]))
        elif action in ("stop", "crash"):
            moments.append((at, name, None))
        elif action == "restart":
            protocol[name] = step.get("protocol") or protocol.get(name, "new")
            moments.append((at, name, None))
            moments.append((at + step["down_ms"], name, protocol[name]))
    return sorted(moments, key=lambda m: m[0])  # stable: same-time moments keep step order


def _alive_at(steps: list[dict], t: int) -> dict[str, str]:
    """Worker processes up at ``t`` (started, not stopped or crashed, not inside a restart's
    downtime), after every step at or before ``t``: name -> protocol."""
    alive: dict[str, str] = {}
    for at, name, protocol in _timeline(steps):
        if at > t:
            break
        if protocol is None:
            alive.pop(name, None)
        else:
            alive[name] = protocol
    return alive


def _conversions(steps: list[dict]) -> list[int]:
    """When the group converts: the first new-protocol worker arriving while only classic ones run
    (classic -> connect), and the last new-protocol one leaving while classic ones remain."""
    alive: dict[str, str] = {}
    moments: list[int] = []
    for at, name, protocol in _timeline(steps):
        before = sum(p == "new" for p in alive.values())
        if protocol is None:
            alive.pop(name, None)
        else:
            alive[name] = protocol
        after = sum(p == "new" for p in alive.values())
        classic = any(p != "new" for p in alive.values())
        if classic and ((before == 0 and after > 0) or (before > 0 and after == 0)):
            moments.append(at)
    return moments


def _static_at(steps: list[dict], worker: str, t: int) -> bool:
    """Whether ``worker``'s process at ``t`` carries a ``group.instance.id`` (restarts keep it)."""
    static = False
    for step in sorted(steps, key=lambda s: s["at_ms"]):
        if step["at_ms"] > t:
            break
        if step["action"] == "start" and step.get("worker") == worker:
            static = step.get("instance_id") is not None
    return static


class _Bounds(NamedTuple):
    """How long a misbehaving process may stay a zombie before no coordinator can keep it exclusive."""

    delay: int
    rebalance: int
    session: int
    request: int
    unnoticed: int
    """Silent for less than this, no coordinator can have noticed: the last heartbeat may be one
    interval old, and one more second for the network."""
    held: int
    """Past ``unnoticed``, only a hold protects a zombie: the bridge's (a connect group holds what a
    removed member runs for the delay) or Connect's (a cooperative classic leader that remembers the
    assignment). Eager classic groups hold nothing, and legacy workers may sit in classic groups."""
    join: int
    """How long a legacy worker waits for a JoinGroup answer: ``max(request.timeout.ms,
    rebalance.timeout.ms + 5 s)``, as Java's ``AbstractCoordinator`` (the simulator's too)."""

    @classmethod
    def of(cls, timing: dict) -> _Bounds:
        delay = timing["scheduled_rebalance_max_delay_ms"]
        session = timing["session_timeout_ms"]
        unnoticed = session - timing["heartbeat_interval_ms"] - 1_000
        return cls(
            delay,
            timing["rebalance_timeout_ms"],
            session,
            timing.get("request_timeout_ms", 40_000),
            unnoticed,
            max(unnoticed, delay - 2_000),
            max(timing.get("request_timeout_ms", 40_000), timing["rebalance_timeout_ms"] + 5_000),
        )


def _with_adversity(doc: dict, rng: random.Random) -> dict:
    """Misbehaving processes a correct bridge must survive with both invariants (docs/drills.md).

    Bounds: a process that is stalled, paused or late with its SyncGroup resumes before the work it
    still runs can have been handed to someone else: before it can have been noticed at all, or,
    where a hold protects what a removed member ran (new-protocol workers in a connect group), before
    that hold (the scheduled delay) runs out. Past that no coordinator can keep it exclusive. Static
    instance ids are reused by a fresh process only after the old one died (a concurrent duplicate is
    a misconfiguration neither Kafka nor the bridge can keep exclusive). The draws from ``rng`` come in
    a fixed order (static members, conversion restarts, misbehaviours): each seed means one scenario.
    """
    bounds = _Bounds.of(doc["timing"])
    steps: list[dict] = [dict(step) for step in doc["steps"]]
    extra = _static_members(steps, rng, bounds.session)
    _restarts_at_conversions(steps, extra, rng)
    longest, lost_wait = _misbehaviours(steps, extra, rng, bounds)
    merged = sorted(steps + extra, key=lambda s: s["at_ms"])  # stable: extra after same-time steps
    settle = longest + lost_wait + bounds.delay + 2 * bounds.session + bounds.rebalance + 60_000
    end = max(doc["end_ms"], max(s["at_ms"] for s in merged) + settle)
    return {**doc, "name": f"adversarial-{doc['seed']}", "steps": merged, "end_ms": end}


def _static_members(steps: list[dict], rng: random.Random, session: int) -> list[dict]:
    """Give some workers an instance id (kept across their restarts, set on ``steps`` in place); the
    fresh processes that reuse a crashed static worker's id are returned as extra steps."""
    extra: list[dict] = []
    names = sorted({s["worker"] for s in steps if s["action"] == "start"})
    instance = {name: f"i-{name}" for name in names if rng.random() < 0.4}
    # A fresh process reuses the instance id of a static worker that crashed; the crashed worker,
    # if it starts again later, comes back under another id (two live processes sharing one is a
    # misconfiguration nobody can keep exclusive).
    fresh = 0
    for step in steps:
        name = step.get("worker")
        if step["action"] == "start" and name in instance:
            step["instance_id"] = instance[name]
        elif step["action"] == "crash" and name in instance and rng.random() < 0.7:
            fresh += 1
            protocol = rng.choice(["compatible", "sessioned", "eager", "new"])
            at = step["at_ms"] + rng.randint(500, session)
            extra.append(
                {
                    "at_ms": at,
                    "action": "start",
                    "worker": f"z{fresh}",
                    "protocol": protocol,
                    "instance_id": instance[name],
                }
            )
            instance[name] = f"{instance[name]}-{fresh}"
    return extra


def _restarts_at_conversions(steps: list[dict], extra: list[dict], rng: random.Random) -> None:
    """Bridge restarts right at (within 50 ms of) the moments the group converts: the first
    new-protocol worker joining a classic group, the last one leaving it. Never two at once."""
    down_windows = [(s["at_ms"], s["at_ms"] + s["down_ms"]) for s in steps if s["action"] == "restart_bridge"]
    for moment in _conversions(sorted(steps + extra, key=lambda s: s["at_ms"])):
        if rng.random() < 0.7:
            at = max(0, moment + rng.randint(-50, 50))
            down = rng.choice([300, 2_000, 5_000])
            if any(lo - down <= at <= hi for lo, hi in down_windows):
                continue
            down_windows.append((at, at + down))
            extra.append({"at_ms": at, "action": "restart_bridge", "down_ms": down})


_ZOMBIE_KINDS = ("stall", "pause", "partition", "delay_sync")
"""Misbehaviours during which a worker runs work it may no longer own."""


def _misbehaviours(
    steps: list[dict], extra: list[dict], rng: random.Random, bounds: _Bounds
) -> tuple[int, int]:
    """Misbehaviour of running processes, appended to ``extra``; returns the longest duration or
    delay drawn and the time lost answers cost, which the scenario's end must leave room for."""
    first = min(s["at_ms"] for s in steps)
    last = max(s["at_ms"] for s in steps) + 30_000
    longest = lost_wait = 0
    losing: set[str] = set()
    quiet_after: dict[str, int] = {}
    for _ in range(rng.randint(2, 8)):
        at = rng.randint(first + 1_000, last)
        alive = _alive_at(sorted(steps + extra, key=lambda s: s["at_ms"]), at)
        if not alive:
            continue
        worker = rng.choice(sorted(alive))
        protocol = alive[worker]
        kinds = _kinds(bounds, protocol, _static_at(steps + extra, worker, at), worker in losing)
        if "lose_responses" in kinds:
            losing.add(worker)
        kind = rng.choice(kinds)
        step: dict = {"at_ms": at, "action": kind, "worker": worker}
        step.update(_PARAMETERS[kind](rng, bounds, protocol))
        if kind == "lose_responses":  # each costs the worker a timeout before it retries
            lost_wait += step["count"] * bounds.join
        if kind in _ZOMBIE_KINDS:
            # Zombie windows of one worker never run into each other: two short ones back to back
            # are one long one, past what the bound above allows.
            if at < quiet_after.get(worker, 0):
                continue
            window = step["delay_ms"] if kind == "delay_sync" else step["duration_ms"]
            quiet_after[worker] = at + window + bounds.session
        longest = max(longest, step.get("duration_ms", 0), step.get("delay_ms", 0))
        extra.append(step)
    return longest, lost_wait


def _kinds(bounds: _Bounds, protocol: str, static: bool, losing: bool) -> list[str]:
    """The misbehaviours a worker speaking ``protocol`` may show that no bound rules out."""
    delay, rebalance, join = bounds.delay, bounds.rebalance, bounds.join
    kinds = ["stall", "pause", "duplicate_responses", "slow_revocation"]
    if not static:
        # A resent join of a static member without a member id is, to any coordinator, a second
        # process claiming the instance id: Kafka fences the first, and the worker dies.
        kinds.append("duplicate_requests")
    if protocol != "new":
        kinds.append("delay_sync")  # only classic workers send SyncGroup
    # Eager classic groups hold nothing for anyone. A cooperative Java worker whose JoinGroup a
    # partition cut off waits max(request timeout, rebalance + 5 s) for its answer while running
    # its work, past its removal by that much: only a delay (the hold) at least that long protects
    # it (docs/known-issues.md, zombies beyond the hold).
    if protocol == "new" or (protocol != "eager" and delay >= join):
        kinds.append("partition")
    # A lost answer: a new worker fences itself in time; an eager one stopped its work before
    # joining; a cooperative one waits for a lost JoinGroup answer max(request timeout, rebalance
    # + 5 s) while still running its work, which only a hold that long protects. And whatever the
    # answer carried runs nowhere until the worker's request times out (that wait for a JoinGroup)
    # and it rejoins, which no coordinator can see: only a live bound (delay + rebalance) that
    # covers that wait plus a session for the rejoin can hold (docs/drills.md).
    blind = bounds.request if protocol == "new" else join
    if (
        (protocol in ("new", "eager") or delay >= join)
        and blind + bounds.session <= delay + rebalance
        and not losing
    ):
        # One lost answer per worker: a worker that keeps failing renews its hold each time it
        # comes back, as under Connect's own delay (docs/known-issues.md), which no bound covers.
        kinds.append("lose_responses")
    return kinds


def _zombie_max(bounds: _Bounds, protocol: str) -> int:
    return bounds.held if protocol == "new" else bounds.unnoticed


def _zombie_duration(rng: random.Random, bounds: _Bounds, protocol: str) -> dict[str, int]:
    return {"duration_ms": rng.randint(1_000, max(1_000, _zombie_max(bounds, protocol)))}


def _partition(rng: random.Random, bounds: _Bounds, protocol: str) -> dict[str, int]:
    # A new-protocol worker fences itself in time. A legacy one notices when its session ran out,
    # about when the coordinator evicts it: only a hold of the work protects it.
    return {"duration_ms": rng.randint(1_000, 3 * bounds.session if protocol == "new" else bounds.held)}


def _duplicates(rng: random.Random, bounds: _Bounds, protocol: str) -> dict[str, int]:
    return {"count": rng.randint(1, 3)}


def _delay_sync(rng: random.Random, bounds: _Bounds, protocol: str) -> dict[str, int]:
    return {"delay_ms": rng.randint(1_000, max(1_000, _zombie_max(bounds, protocol)))}


def _slow_revocation(rng: random.Random, bounds: _Bounds, protocol: str) -> dict[str, int]:
    params = {"delay_ms": rng.randint(500, bounds.rebalance // 3)}
    if rng.random() < 0.7:
        params["duration_ms"] = rng.randint(10_000, 120_000)
    return params


_PARAMETERS: dict[str, Callable[[random.Random, _Bounds, str], dict[str, int]]] = {
    "stall": _zombie_duration,
    "pause": _zombie_duration,
    "partition": _partition,
    "lose_responses": lambda rng, bounds, protocol: {"count": 1},
    "duplicate_requests": _duplicates,
    "duplicate_responses": _duplicates,
    "delay_sync": _delay_sync,
    "slow_revocation": _slow_revocation,
}
"""Misbehaviour -> its step's parameters, drawn from the scenario's generator (fixed draw order)."""


_RESTART_OFFSETS: tuple[tuple[int, int], ...] = (
    (-50, 50),  # at the moment: before or after the request that starts it
    (50, 500),  # its first rebalance under way
    (500, 3_000),  # members rejoining, answers parked
    (3_000, 15_000),  # the next generation, a hold running
)
"""Where, after a conversion, an adoption or a hand-back begins, a bridge restart may fall."""


def _with_operations(doc: dict, rng: random.Random) -> dict:
    """Operations around the adversarial scenario, from their own generator, in a fixed order:
    adoption (the group starts upstream) and hand-back, a takeover of a paused bridge, then bridge
    restarts or takeovers at each step of every conversion, adoption and hand-back.

    Adoption is drawn only when no new-protocol worker runs before it (the upstream coordinator
    speaks only the classic protocol), a hand-back only when none runs from it on (a group with
    new-protocol members cannot be handed back, and one that came back upstream could not
    coordinate them)."""
    steps: list[dict] = [dict(step) for step in doc["steps"]]
    timing = doc["timing"]
    first = min(s["at_ms"] for s in steps)
    last = max(s["at_ms"] for s in steps)
    moments = [(at, "conversion") for at in _conversions(steps)]
    extra: list[dict] = []
    upstream = False
    if rng.random() < 0.35:
        adopt_at = first + rng.randint(5_000, 40_000)
        if not _new_protocol_within(steps, 0, adopt_at):
            upstream = True
            extra.append({"at_ms": adopt_at, "action": "adopt"})
            moments.append((adopt_at, "adopt"))
            if rng.random() < 0.6:
                release_at = rng.randint(adopt_at + 5_000, max(adopt_at + 5_000, last + 30_000))
                if not _new_protocol_within(steps, release_at, None):
                    extra.append({"at_ms": release_at, "action": "release"})
                    moments.append((release_at, "release"))
    down = [(s["at_ms"], s["at_ms"] + s["down_ms"]) for s in steps if "down_ms" in s and "worker" not in s]

    def bridge_down(at: int, takeover: bool, down_ms: int) -> None:
        if any(lo - down_ms - 1_000 <= at <= hi + 1_000 for lo, hi in down):
            return  # never two outages of the bridge at once
        down.append((at, at + down_ms))
        extra.append(
            {"at_ms": at, "action": "takeover_bridge" if takeover else "restart_bridge", "down_ms": down_ms}
        )

    # A takeover needs several bridges (``ha.enabled``), which the bridge refuses together with
    # ``adoption.groups`` (bridge/settings.py): a scenario with adoption restarts its bridge instead.
    # (Drawn as before, so the other draws of a seed stay what they were.)
    if rng.random() < 0.3:
        at, down_ms = rng.randint(first + 1_000, last + 1_000), rng.choice([1_000, 5_000, 15_000])
        bridge_down(at, not upstream, down_ms)
    for moment, _ in sorted(moments):
        if rng.random() < 0.5:
            lo, hi = rng.choice(_RESTART_OFFSETS)
            takeover = rng.random() < 0.3 and not upstream
            bridge_down(max(0, moment + rng.randint(lo, hi)), takeover, rng.choice([300, 2_000, 5_000]))
    if not extra:
        return doc
    merged = sorted(steps + extra, key=lambda s: s["at_ms"])
    join_wait = max(timing.get("request_timeout_ms", 40_000), timing["rebalance_timeout_ms"] + 5_000)
    settle = (
        timing["scheduled_rebalance_max_delay_ms"] + 2 * timing["session_timeout_ms"]
        + timing["rebalance_timeout_ms"] + join_wait + 60_000
    )  # fmt: skip
    end = max(doc["end_ms"], max(s["at_ms"] for s in merged) + settle)
    out = {**doc, "steps": merged, "end_ms": end}
    if upstream:
        out["upstream"] = True
    return out


def _new_protocol_within(steps: list[dict], start: int, end: int | None) -> bool:
    """Whether a new-protocol worker process is up at some time in ``[start, end]`` (open end: to
    the end of the scenario)."""
    if any(p == "new" for p in _alive_at(steps, start).values()):
        return True
    return any(
        protocol == "new" and at >= start and (end is None or at <= end)
        for at, _, protocol in _timeline(steps)
    )
