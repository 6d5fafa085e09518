"""Epoch-engine benchmark: heartbeat throughput, target-assignment time, a simulated rolling restart.

Baselines measured in the same run: a bare heartbeat handler (dict lookup + epoch check + deadline
store, the least any coordinator must do) for throughput, and a plain round-robin deal of the same
items for the assignment time. The last line printed is one JSON object.
"""

from __future__ import annotations

import json
import time

from connect_bridge.drills.checker import check
from connect_bridge.drills.scenario import load_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.state import assignors
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import ConfigView
from connect_bridge.workers.new_protocol import NewProtocolWorker

G = "bench"


def stable_group(
    members: int, connectors: dict[str, int]
) -> tuple[GroupCoordinator, list[NewProtocolWorker]]:
    coord = GroupCoordinator(CoordinatorConfig(session_timeout_ms=10**9))
    coord.set_config(G, ConfigView.of(1, connectors), 0)
    workers = [NewProtocolWorker(G, f"http://w{i}:8083/") for i in range(members)]
    for w in workers:
        w.on_response(coord.connect_heartbeat(w.heartbeat_request(), 0))
    for _ in range(4):  # revoke, acknowledge, receive released work
        for w in workers:
            for _ in range(2):
                reaction = w.on_response(coord.connect_heartbeat(w.heartbeat_request(), 0))
                if not reaction.heartbeat_now:
                    break
    coord.drain_records()
    return coord, workers


def heartbeats_per_second(members: int = 1000, rounds: int = 60) -> dict[str, float]:
    coord, workers = stable_group(members, {f"c{i}": 10 for i in range(100)})
    assert coord.groups[G].state.value == "STABLE", coord.groups[G].state
    requests = [w.heartbeat_request() for w in workers]
    handle = coord.connect_heartbeat
    start = time.perf_counter()
    now = 1
    for _ in range(rounds):
        for req in requests:
            handle(req, now)
        now += 1
    engine = members * rounds / (time.perf_counter() - start)

    # Baseline: the bare minimum a heartbeat handler does.
    epochs = {w.member_id: w.member_epoch for w in workers}
    deadlines: dict[str, int] = {}

    def bare(req: HeartbeatRequest, now_ms: int) -> tuple[int, int]:
        epoch = epochs.get(req.member_id)
        if epoch != req.member_epoch:
            return (25, -1)
        deadlines[req.member_id] = now_ms + 10_000
        return (0, epoch)

    start = time.perf_counter()
    for _ in range(rounds):
        for req in requests:
            bare(req, now)
    baseline = members * rounds / (time.perf_counter() - start)
    return {
        "heartbeats_per_s": round(engine),
        "bare_handler_per_s": round(baseline),
        "heartbeat_ratio_to_bare": round(engine / baseline, 3),
    }


def target_assignment_ms(
    workers: int = 1000, connectors: int = 2000, tasks_each: int = 10
) -> dict[str, float]:
    view = ConfigView.of(1, {f"conn-{i:05d}": tasks_each for i in range(connectors)})
    items = view.items()
    members = tuple(sorted(f"member-{i:05d}" for i in range(workers)))
    spec = assignors.AssignmentSpec(members, items, {}, {}, False)
    start = time.perf_counter()
    previous = assignors.cooperative(spec)
    scratch = (time.perf_counter() - start) * 1000
    # A worker joins: the realistic recompute, sticky against the previous target.
    joined = tuple(sorted((*members, "member-new")))
    spec = assignors.AssignmentSpec(joined, items, previous, {}, False)
    start = time.perf_counter()
    assignors.cooperative(spec)
    incremental = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    ordered = sorted(items)
    deal: dict[str, list] = {m: [] for m in joined}
    for i, item in enumerate(ordered):
        deal[joined[i % len(joined)]].append(item)
    baseline = (time.perf_counter() - start) * 1000
    return {
        "assignment_from_scratch_ms": round(scratch, 1),
        "assignment_after_join_ms": round(incremental, 1),
        "round_robin_baseline_ms": round(baseline, 1),
        "items": len(items),
    }


def rolling_restart(workers: int = 100, connectors: int = 100, tasks_each: int = 49) -> dict[str, float]:
    """100 workers; 100 connectors x 49 tasks + 100 connector instances = 5,000 items; one by one."""
    steps = [
        {"at_ms": 0, "action": "start", "worker": f"w{i:03d}", "protocol": "new"} for i in range(workers)
    ]
    t = 60_000
    for i in range(workers):
        steps.append({"at_ms": t, "action": "restart", "worker": f"w{i:03d}", "down_ms": 5_000})
        t += 20_000
    scenario = load_scenario(
        {
            "name": "bench-rolling-restart",
            "seed": 1,
            "connectors": {f"c{i:03d}": tasks_each for i in range(connectors)},
            "steps": steps,
            "end_ms": t + 60_000,
        }
    )
    start = time.perf_counter()
    log = run_scenario(scenario)
    wall = time.perf_counter() - start
    summary = check(log.events, name=scenario.name, end_ms=scenario.end_ms)
    return {
        "rolling_restart_wall_s": round(wall, 2),
        "rolling_restart_ok": summary.ok,
        "rolling_restart_rebalances": summary.rebalances,
        "rolling_restart_moves": summary.moves,
        "rolling_restart_events": summary.events,
    }


def main() -> None:
    result: dict[str, object] = {}
    hb = heartbeats_per_second()
    print(
        f"heartbeats/s (1,000 stable members): {hb['heartbeats_per_s']:,} "
        f"(bare handler {hb['bare_handler_per_s']:,}); target >= 50,000"
    )
    result.update(hb)
    ta = target_assignment_ms()
    print(
        f"target assignment, 1,000 workers / {ta['items']:,} items: {ta['assignment_from_scratch_ms']} ms "
        f"from scratch, {ta['assignment_after_join_ms']} ms after a join "
        f"(round-robin baseline {ta['round_robin_baseline_ms']} ms); target <= 100 ms"
    )
    result.update(ta)
    rr = rolling_restart()
    print(
        f"rolling restart, 100 workers / 5,000 items: {rr['rolling_restart_wall_s']} s wall, "
        f"{rr['rolling_restart_rebalances']} epoch events, {rr['rolling_restart_moves']} moves, "
        f"invariants ok={rr['rolling_restart_ok']}; target <= 20 s"
    )
    result.update(rr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
