"""Misbehaving simulated workers (issue 10): each behaviour does what it claims, and the scenario
file validates it. The invariants of adversarial drills are judged in test_sim_fuzz.py."""

from __future__ import annotations

from typing import Any

import pytest

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.scenario import ScenarioError, load_scenario
from connect_bridge.drills.sim import SimulatedDrill

TIMING = {"session_timeout_ms": 10_000, "rebalance_timeout_ms": 30_000, "heartbeat_interval_ms": 3_000,
          "scheduled_rebalance_max_delay_ms": 60_000}


def drill(steps: list[dict[str, Any]], end_ms: int = 200_000, **timing: int) -> tuple[SimulatedDrill, list]:
    scenario = load_scenario(
        {"name": "t", "seed": 3, "timing": {**TIMING, **timing}, "connectors": {"a": 3, "b": 2},
         "steps": steps, "end_ms": end_ms}
    )
    sim = SimulatedDrill(scenario)
    events = sim.run().events
    summary = check(events, end_ms=end_ms)
    assert summary.ok, summary.violations
    return sim, events


def of(events: list, worker: str, lo: int, hi: int, *types: str) -> list:
    return [e for e in events if e["worker"] == worker and lo < e["t_ms"] < hi and e["type"] in types]


START = [
    {"at_ms": 0, "action": "start", "worker": "w1", "protocol": "sessioned"},
    {"at_ms": 0, "action": "start", "worker": "w2", "protocol": "new"},
]


def test_a_stalled_legacy_herder_keeps_running_and_its_heartbeat_thread_leaves() -> None:
    """Stalled past the rebalance timeout while a rebalance needs it: no JoinGroup, its work keeps
    running, the heartbeat thread leaves at the poll timeout, and after the stall it rejoins."""
    steps = [*START, {"at_ms": 20_000, "action": "stall", "worker": "w1", "duration_ms": 50_000},
             {"at_ms": 21_000, "action": "start", "worker": "w3", "protocol": "new"}]
    _, events = drill(steps)
    assert not of(events, "w1", 20_000, 70_000, "release")  # a zombie: nothing stops
    assert [e["kind"] for e in of(events, "w1", 0, 80_000, "stall_start", "stall_end")] == ["stall", "stall"]
    assert of(events, "w1", 70_000, 200_000, "epoch"), "it rejoins after the stall"


def test_a_paused_process_does_nothing_then_resumes() -> None:
    steps = [*START, {"at_ms": 30_000, "action": "pause", "worker": "w2", "duration_ms": 5_000}]
    _, events = drill(steps)
    assert of(events, "w2", 30_000, 35_000, "run", "release", "epoch") == []
    assert [e["kind"] for e in of(events, "w2", 0, 40_000, "stall_start", "stall_end")] == ["pause", "pause"]


def test_a_lost_answer_is_waited_for_as_a_stall() -> None:
    steps = [*START, {"at_ms": 30_000, "action": "lose_responses", "worker": "w1", "count": 1}]
    _, events = drill(steps)
    stalls = of(events, "w1", 30_000, 200_000, "stall_start", "stall_end")
    kinds = [(e["type"], e["kind"]) for e in stalls][:2]
    assert kinds == [("stall_start", "timeout"), ("stall_end", "timeout")]


def test_duplicated_requests_and_a_late_sync_keep_the_group_exclusive() -> None:
    steps = [*START, {"at_ms": 10_000, "action": "duplicate_requests", "worker": "w1", "count": 3},
             {"at_ms": 10_000, "action": "duplicate_requests", "worker": "w2", "count": 3},
             {"at_ms": 11_000, "action": "delay_sync", "worker": "w1", "delay_ms": 4_000},
             {"at_ms": 12_000, "action": "start", "worker": "w3", "protocol": "compatible"}]
    drill(steps)


def test_a_partitioned_new_worker_fences_itself_and_comes_back() -> None:
    steps = [*START, {"at_ms": 30_000, "action": "partition", "worker": "w2", "duration_ms": 25_000}]
    _, events = drill(steps)
    assert of(events, "w2", 30_000, 55_000, "release"), "it stopped its work by itself"
    assert of(events, "w2", 55_000, 200_000, "run"), "and got work back afterwards"


def test_slow_revocation_releases_late_and_acknowledges_after() -> None:
    steps = [{"at_ms": 0, "action": "start", "worker": "w1", "protocol": "sessioned"},
             {"at_ms": 5_000, "action": "slow_revocation", "worker": "w1", "delay_ms": 4_000,
              "duration_ms": 60_000},
             {"at_ms": 20_000, "action": "start", "worker": "w2", "protocol": "new"}]
    _, events = drill(steps)
    [stall] = of(events, "w1", 20_000, 60_000, "stall_start")
    [end] = of(events, "w1", 20_000, 60_000, "stall_end")
    assert end["t_ms"] - stall["t_ms"] == 4_000
    releases = of(events, "w1", 20_000, 60_000, "release")
    assert releases and {e["t_ms"] for e in releases} == {end["t_ms"]}  # stopped only once done


def test_a_fresh_process_reusing_a_dead_static_workers_instance_id_takes_its_place() -> None:
    steps = [{"at_ms": 0, "action": "start", "worker": "w1", "protocol": "new", "instance_id": "i1"},
             {"at_ms": 0, "action": "start", "worker": "w2", "protocol": "sessioned"},
             {"at_ms": 30_000, "action": "crash", "worker": "w1"},
             {"at_ms": 32_000, "action": "start", "worker": "z1", "protocol": "new",
              "instance_id": "i1"}]
    _, events = drill(steps)
    assert of(events, "z1", 32_000, 200_000, "run")


def test_a_static_legacy_worker_reusing_an_id_dies_as_java_connect_does() -> None:
    """Connect has no static membership: a classic static rejoin answered with skip_assignment kills
    the worker ("Connect does not support static membership"); nothing runs twice meanwhile."""
    steps = [{"at_ms": 0, "action": "start", "worker": "w1", "protocol": "sessioned", "instance_id": "i1"},
             {"at_ms": 0, "action": "start", "worker": "w2", "protocol": "sessioned"},
             {"at_ms": 30_000, "action": "crash", "worker": "w1"},
             {"at_ms": 32_000, "action": "start", "worker": "z1", "protocol": "sessioned",
              "instance_id": "i1"}]
    sim, _ = drill(steps)
    assert "static membership" in (sim.workers["z1"].logic.fatal_error or "")


def test_misbehaviour_of_a_worker_that_is_not_running_is_rejected() -> None:
    doc = {"name": "x", "connectors": {}, "end_ms": 10, "steps": [
        {"at_ms": 0, "action": "stall", "worker": "w9", "duration_ms": 5}]}
    problem = r"steps\[0\].worker: cannot stall worker 'w9': it is not running"
    with pytest.raises(ScenarioError, match=problem):
        load_scenario(doc)
    doc["steps"] = [{"at_ms": 0, "action": "pause", "worker": "w9", "duration_ms": 0}]
    with pytest.raises(ScenarioError, match="duration_ms"):
        load_scenario(doc)


def test_adversarial_generation_is_deterministic_and_leaves_the_plain_stream_alone() -> None:
    assert random_scenario(42, adversarial=True) == random_scenario(42, adversarial=True)
    plain = random_scenario(42)
    assert plain.name == "random-42"
    kinds = {s.action for seed in range(40) for s in random_scenario(seed, adversarial=True).steps}
    assert {"stall", "pause", "partition", "lose_responses", "duplicate_requests", "delay_sync",
            "slow_revocation", "restart_bridge"} <= kinds
