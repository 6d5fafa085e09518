"""Randomized scenarios in simulated time: each must stay exclusive, converge and balance.

New-protocol-only clusters exercise the epoch engine alone; mixed clusters of all four protocols
exercise classic groups, the translation of legacy workers inside connect groups, conversions in
both directions and bridge restarts.
"""

from __future__ import annotations

import pytest

from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.sim import run_scenario


def _assert_ok(seed: int, protocols: tuple[str, ...]) -> None:
    scenario = random_scenario(seed, protocols=protocols)
    summary = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)
    assert summary.ok, (scenario.model_dump_json(), summary.violations)


@pytest.mark.parametrize("seed", range(80))
def test_random_new_protocol_scenario(seed: int) -> None:
    _assert_ok(seed, ("new",))


@pytest.mark.parametrize("seed", range(10_000, 10_200))
def test_random_mixed_protocol_scenario(seed: int) -> None:
    _assert_ok(seed, ("eager", "compatible", "sessioned", "new"))


@pytest.mark.parametrize("seed", range(20_000, 20_060))
def test_random_legacy_only_scenario(seed: int) -> None:
    _assert_ok(seed, ("eager", "compatible", "sessioned"))


# Adversarial drills (issue 10): misbehaving workers, both invariants (exclusive counting zombies,
# live). The seeds that still fail are listed with their cause (docs/known-issues.md) and run as
# strict xfails, so a fix shows up as an unexpected pass.
ADVERSARIAL_OPEN: dict[int, str] = {}


@pytest.mark.parametrize(
    "seed",
    [
        pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=ADVERSARIAL_OPEN[s]))
        if s in ADVERSARIAL_OPEN
        else s
        for s in range(50_000, 50_250)
    ],
)
def test_random_adversarial_scenario(seed: int) -> None:
    scenario = random_scenario(seed, adversarial=True)
    summary = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)
    assert summary.ok, (scenario.model_dump_json(), summary.violations)


# Fleet drills that still fail, each a failure class the checker keeps reporting (no exemption):
# strict xfails, so a fix shows up as an unexpected pass.
FLEET_OPEN: dict[int, str] = {
    93000279001093: (
        "docs/known-issues.md item 13: a hand-back after the upstream leader-to-be missed the revoking "
        "generation; its Connect assignor remembers the bridge's generation and delays the revoked "
        "work a second scheduled delay (114.9 s of could-run time against a 90 s bound)"
    ),
}


@pytest.mark.parametrize(
    "seed", [pytest.param(s, marks=pytest.mark.xfail(strict=True, reason=r)) for s, r in FLEET_OPEN.items()]
)
def test_open_fleet_failure_is_still_reported(seed: int) -> None:
    scenario = random_scenario(seed, adversarial=True)
    summary = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)
    assert summary.ok, (scenario.model_dump_json(), summary.violations)
