"""Randomized valid scenarios: the raw material of fuzz tests and fleet drills.

A scenario is generated from a seed alone, so any failing drill can be regenerated (or written out
and replayed with ``drill run``). Every generated scenario keeps at least one worker alive at the
end and leaves enough time after its last step for held work to be released and reconciled, so a
correct coordinator must end converged and balanced.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from connect_bridge.drills.scenario import Scenario, load_scenario

ALL_PROTOCOLS: tuple[str, ...] = ("eager", "compatible", "sessioned", "new")


def random_scenario(
    seed: int,
    protocols: Sequence[str] = ALL_PROTOCOLS,
    max_workers: int = 6,
    max_steps: int = 12,
) -> Scenario:
    rng = random.Random(seed)
    delay = rng.choice([0, 15_000, 30_000, 60_000])
    timing = {
        "session_timeout_ms": 10_000,
        "rebalance_timeout_ms": 30_000,
        "heartbeat_interval_ms": 3_000,
        "scheduled_rebalance_max_delay_ms": delay,
    }
    connectors = {f"c{i}": rng.randint(0, 6) for i in range(rng.randint(1, 5))}
    workers = [f"w{i}" for i in range(rng.randint(1, max_workers))]
    steps: list[dict] = []
    running: dict[str, str] = {}  # worker -> protocol
    stopped: list[str] = []
    for name in workers:
        at = 0 if rng.random() < 0.6 else rng.randint(0, 20_000)
        protocol = rng.choice(list(protocols))
        steps.append({"at_ms": at, "action": "start", "worker": name, "protocol": protocol})
        running[name] = protocol
    steps.sort(key=lambda s: s["at_ms"])
    t = max(s["at_ms"] for s in steps) + rng.randint(5_000, 30_000)
    next_connector = len(connectors)
    live_connectors = set(connectors)
    for _ in range(rng.randint(0, max_steps)):
        kind = rng.choice(["restart", "restart", "crash", "stop", "start", "config", "config", "bridge"])
        if kind in ("restart", "crash", "stop") and len(running) > 1:
            name = rng.choice(sorted(running))
            if kind == "restart":
                protocol = rng.choice(list(protocols))
                down = rng.choice([1_000, 5_000, delay // 2 if delay else 2_000, delay + 20_000])
                steps.append(
                    {"at_ms": t, "action": "restart", "worker": name, "down_ms": down, "protocol": protocol}
                )
                running[name] = protocol
                t += down
            else:
                steps.append({"at_ms": t, "action": kind, "worker": name})
                del running[name]
                stopped.append(name)
        elif kind == "start" and stopped:
            name = stopped.pop(rng.randrange(len(stopped)))
            protocol = rng.choice(list(protocols))
            steps.append({"at_ms": t, "action": "start", "worker": name, "protocol": protocol})
            running[name] = protocol
        elif kind == "config":
            choice = rng.random()
            if choice < 0.4 or not live_connectors:
                name = f"c{next_connector}"
                next_connector += 1
                steps.append(
                    {"at_ms": t, "action": "add_connector", "connector": name, "tasks": rng.randint(0, 6)}
                )
                live_connectors.add(name)
            elif choice < 0.7:
                name = rng.choice(sorted(live_connectors))
                steps.append(
                    {"at_ms": t, "action": "set_tasks", "connector": name, "tasks": rng.randint(0, 8)}
                )
            else:
                name = rng.choice(sorted(live_connectors))
                steps.append({"at_ms": t, "action": "remove_connector", "connector": name})
                live_connectors.discard(name)
        elif kind == "bridge":
            down = rng.choice([500, 2_000, 5_000])
            steps.append({"at_ms": t, "action": "restart_bridge", "down_ms": down})
            t += down
        t += rng.randint(1_000, 40_000)
    settle = delay + 2 * timing["session_timeout_ms"] + timing["rebalance_timeout_ms"] + 60_000
    doc = {
        "name": f"random-{seed}",
        "seed": seed,
        "timing": timing,
        "connectors": connectors,
        "steps": steps,
        "end_ms": t + settle,
    }
    return load_scenario(doc)
