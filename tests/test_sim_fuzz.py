"""Randomized new-protocol scenarios in simulated time: each must stay exclusive, converge, balance."""

from __future__ import annotations

import pytest

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario


@pytest.mark.parametrize("seed", range(80))
def test_random_new_protocol_scenario(seed: int) -> None:
    scenario = random_scenario(seed, protocols=("new",))
    summary = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)
    assert summary.ok, (scenario.model_dump_json(), summary.violations)
