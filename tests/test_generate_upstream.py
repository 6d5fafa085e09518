"""Adversarial drills of a group coordinated by the upstream (Kafka's) coordinator draw only what that
coordinator can keep exclusive, and no deployment the bridge refuses.

Fleet 97000000 (100,000 drills) ran tasks twice in eight drills while the group was relaying or
released: six took over a paused relaying bridge (several bridges, ``ha.enabled``, which the bridge
refuses together with ``adoption.groups``), two partitioned the cooperative Connect leader, whose
work Kafka's coordinator dealt at once to the next leader (only Connect's leader remembers and
delays lost work; the bridge's own hold does not exist upstream). The generator draws no takeover
with adoption; the simulator, when a legacy worker's partition or a cooperative worker's lost answer
falls while the upstream coordinates, applies the rule of any classic group (a pause no coordinator
can notice, no lost answer). docs/drills.md, "Operations".
"""

from __future__ import annotations

import pytest

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import _alive_at, random_scenario
from connect_bridge.drills.scenario import dump_scenario
from connect_bridge.drills.sim import run_scenario

FLEET_97_TAKEOVERS_WITH_ADOPTION = (
    97000291002022,
    97000291014179,
    97000291022865,
    97000291034969,
    97000291058781,
    97000291093039,
)
"""Fleet 97000000 drills that took over a paused relaying (or released) bridge."""
FLEET_97_UPSTREAM_LEADER_PARTITIONED = (97000291049161, 97000291088509)


def _steps(seed: int, tmp_path) -> list[dict]:
    import json

    path = tmp_path / f"{seed}.json"
    dump_scenario(random_scenario(seed, adversarial=True), path)
    return json.loads(path.read_text())


def _problems(doc: dict) -> list[str]:
    """What an upstream scenario draws that the bridge's settings rule out: a takeover needs
    ``ha.enabled``, refused together with ``adoption.groups``."""
    if not doc.get("upstream"):
        return []
    takeovers = [s for s in doc["steps"] if s["action"] == "takeover_bridge"]
    return [f"{s['at_ms']}: a takeover (ha.enabled) with adoption" for s in takeovers]


@pytest.mark.parametrize("seed", FLEET_97_TAKEOVERS_WITH_ADOPTION)
def test_fleet_97000000_adoption_scenarios_take_no_bridge_over(seed: int, tmp_path) -> None:
    doc = _steps(seed, tmp_path)
    assert doc["upstream"]
    assert _problems(doc) == []


def test_adoption_scenarios_of_a_fresh_seed_base_take_no_bridge_over(tmp_path) -> None:
    """400 seeds: no upstream scenario takes a bridge over; scenarios without adoption still do,
    and still partition legacy workers."""
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


@pytest.mark.parametrize("seed", FLEET_97_UPSTREAM_LEADER_PARTITIONED)
def test_a_legacy_partition_while_kafka_coordinates_is_a_pause_no_coordinator_notices(seed: int) -> None:
    """The drawn partition of the cooperative Connect leader falls while the group is relayed: it
    runs as a pause under the unnoticed bound, and the drill keeps every invariant (before, the
    upstream expired the leader and dealt its work to the next one while it still ran it)."""
    scenario = random_scenario(seed, adversarial=True)
    (drawn,) = [s for s in scenario.steps if s.action == "partition"]
    events = run_scenario(scenario).events
    kinds = [e["kind"] for e in events if e["type"] == "stall_start" and e["t_ms"] == drawn.at_ms]
    assert kinds == ["pause"]
    summary = check(events, name=scenario.name, end_ms=scenario.end_ms)
    assert summary.exclusive and summary.ok, summary.violations
