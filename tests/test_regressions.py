"""Every scenario in ``tests/regressions/`` replays forever: each is a failure a search or a review
found and a fix closed (``connect-bridge drill search`` writes them, minimized)."""

from __future__ import annotations

from pathlib import Path

import pytest

from connect_bridge.drills.scenario import load_scenario
from connect_bridge.drills.search import judge

REGRESSIONS = sorted((Path(__file__).parent / "regressions").glob("*.json"))


def test_the_regression_directory_is_not_empty() -> None:
    """A glob that matches nothing would make the replay below vacuous."""
    assert REGRESSIONS, "tests/regressions/ holds no scenario"


@pytest.mark.parametrize("path", REGRESSIONS, ids=lambda p: p.stem)
def test_regression_scenario_holds_every_invariant(path: Path) -> None:
    summary = judge(load_scenario(path))
    assert summary.ok, summary.violations
