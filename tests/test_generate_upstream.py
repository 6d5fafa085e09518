"""The adversarial generator draws, around a group coordinated by the upstream (Kafka's) coordinator,
only what that coordinator can keep exclusive, and no deployment the bridge refuses.

Fleet 97000000 (100,000 drills) ran tasks twice in eight drills while the group was relaying or
released: six took over a paused relaying bridge (several bridges, ``ha.enabled``, which the bridge
refuses together with ``adoption.groups``), two partitioned the cooperative Connect leader, whose
work Kafka's coordinator dealt at once to the next leader (only Connect's leader remembers and
delays lost work; the bridge's own hold does not exist upstream). docs/drills.md, "Operations".
"""

from __future__ import annotations

import pytest

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import _alive_at, random_scenario
from connect_bridge.drills.scenario import dump_scenario
from connect_bridge.drills.sim import run_scenario

FLEET_97_UPSTREAM_DOUBLE_RUNS = (
    97000291002022, 97000291014179, 97000291022865, 97000291034969,  # paused relaying bridge taken over
    97000291058781, 97000291093039,
    97000291049161, 97000291088509,  # the upstream Connect leader partitioned
)


def _steps(seed: int, tmp_path) -> list[dict]:
    import json

    path = tmp_path / f"{seed}.json"
    dump_scenario(random_scenario(seed, adversarial=True), path)
    return json.loads(path.read_text())


def _problems(doc: dict) -> list[str]:
    """What an upstream scenario draws that Kafka's coordinator, or the bridge's settings, rule out."""
    if not doc.get("upstream"):
        return []
    steps = doc["steps"]
    timing = doc["timing"]
    unnoticed = timing["session_timeout_ms"] - timing["heartbeat_interval_ms"] - 1_000
    out = []
    for step in steps:
        action = step["action"]
        if action == "takeover_bridge":
            out.append(f"{step['at_ms']}: a takeover (ha.enabled) with adoption")
            continue
        protocol = _alive_at(steps, step["at_ms"]).get(step.get("worker"))
        if protocol in (None, "new"):
            continue
        if action == "partition":
            out.append(f"{step['at_ms']}: a partition of legacy worker {step['worker']}")
        elif action == "lose_responses" and protocol != "eager":
            out.append(f"{step['at_ms']}: a lost answer of cooperative worker {step['worker']}")
        elif action in ("stall", "pause") and step["duration_ms"] > unnoticed:
            out.append(f"{step['at_ms']}: legacy worker {step['worker']} silent past {unnoticed} ms")
    return out


@pytest.mark.parametrize("seed", FLEET_97_UPSTREAM_DOUBLE_RUNS)
def test_fleet_97000000_upstream_scenarios_stay_within_kafkas_holds(seed: int, tmp_path) -> None:
    doc = _steps(seed, tmp_path)
    assert doc["upstream"]
    assert _problems(doc) == []


def test_upstream_scenarios_of_a_fresh_seed_base_stay_within_kafkas_holds(tmp_path) -> None:
    """400 seeds: every upstream scenario keeps the rule; scenarios without adoption still take
    over paused bridges and partition legacy workers (nothing is lost where the bridge coordinates)."""
    upstream = takeovers = partitions = 0
    for seed in range(98_500_000, 98_500_400):
        doc = _steps(seed, tmp_path)
        assert _problems(doc) == [], seed
        upstream += bool(doc.get("upstream"))
        if not doc.get("upstream"):
            takeovers += any(s["action"] == "takeover_bridge" for s in doc["steps"])
            partitions += any(
                s["action"] == "partition" and _alive_at(doc["steps"], s["at_ms"]).get(s["worker"]) != "new"
                for s in doc["steps"]
            )
    assert upstream > 20 and takeovers > 20 and partitions > 5


@pytest.mark.parametrize("seed", [97000291049161, 97000291058781])
def test_fleet_97000000_upstream_double_runs_now_run_exclusive(seed: int) -> None:
    scenario = random_scenario(seed, adversarial=True)
    summary = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)
    assert summary.exclusive and summary.ok, summary.violations
