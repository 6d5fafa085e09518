"""Hunting for failing drills: run random seeds, keep the failures, shrink each to a small scenario.

A failing random drill is usually dozens of steps of which three matter. ``minimize`` applies delta
debugging to the scenario (drop steps, then shorten durations and counts, then drop connectors),
keeping a candidate only if it still fails *the same invariant* (an overlap: against the same
worker), so what is written to
``tests/regressions/`` is the smallest story that still breaks. Every candidate is validated with
``load_scenario``; an invalid one (a step naming a worker whose start was dropped) is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from connect_bridge.drills.checker import Summary, check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.scenario import Scenario, ScenarioError, dump_scenario, load_scenario
from connect_bridge.drills.sim import run_scenario

INVARIANTS = ("exclusive", "live", "converged", "balanced")


def judge(scenario: Scenario) -> Summary:
    return check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)


def broken(summary: Summary) -> str | None:
    """The first invariant a drill broke, in the order that matters most."""
    return next((name for name in INVARIANTS if not getattr(summary, name)), None)


@dataclass(frozen=True, slots=True)
class Failure:
    seed: int
    invariant: str
    scenario: Scenario
    violation: str


def search(seeds: Iterable[int], generator: Callable[[int], Scenario] = random_scenario) -> Iterator[Failure]:
    """Run the drill of every seed; yield the ones that break an invariant."""
    for seed in seeds:
        scenario = generator(seed)
        summary = judge(scenario)
        invariant = broken(summary)
        if invariant is not None:
            yield Failure(seed, invariant, scenario, summary.violations[0] if summary.violations else "")


def _valid(doc: dict[str, Any]) -> Scenario | None:
    try:
        return load_scenario(doc)
    except ScenarioError:
        return None


def _shrunk_values(step: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The same step with one number made smaller (halved, or down to its floor)."""
    for key in ("duration_ms", "delay_ms", "down_ms", "count", "tasks"):
        value = step.get(key)
        if isinstance(value, int) and value > 1:
            for smaller in (value // 2, 1 if key in ("duration_ms", "delay_ms", "count") else 0):
                if smaller < value:
                    yield {**step, key: smaller}


def minimize(scenario: Scenario, still_fails: Callable[[Scenario], bool], budget: int = 400) -> Scenario:
    """The smallest variant of ``scenario`` for which ``still_fails`` holds (greedy delta debugging).

    ``budget`` bounds the number of candidates judged, so a shrink never runs away.
    """
    best = scenario.model_dump(mode="json", exclude_none=True)
    tries = 0

    def attempt(doc: dict[str, Any]) -> bool:
        nonlocal tries, best
        if tries >= budget:
            return False
        candidate = _valid(doc)
        if candidate is None:
            return False
        tries += 1
        if still_fails(candidate):
            best = doc
            return True
        return False

    changed = True
    while changed and tries < budget:
        changed = False
        # 1. Drop chunks of steps, large chunks first.
        size = max(1, len(best["steps"]) // 2)
        while size >= 1 and tries < budget:
            i = 0
            while i < len(best["steps"]) and tries < budget:
                steps = best["steps"][:i] + best["steps"][i + size :]
                if attempt({**best, "steps": steps}):
                    changed = True
                else:
                    i += size
            size //= 2
        # 2. Smaller numbers inside steps.
        for i in range(len(best["steps"])):
            for smaller in _shrunk_values(best["steps"][i]):
                steps = [*best["steps"][:i], smaller, *best["steps"][i + 1 :]]
                if attempt({**best, "steps": steps}):
                    changed = True
                    break
        # 3. Fewer connectors, fewer tasks.
        for name in list(best["connectors"]):
            connectors = {k: v for k, v in best["connectors"].items() if k != name}
            if connectors and attempt({**best, "connectors": connectors}):
                changed = True
        for name, tasks in list(best["connectors"].items()):
            if tasks > 0 and attempt({**best, "connectors": {**best["connectors"], name: tasks // 2}}):
                changed = True
    return load_scenario(best)


_ALREADY_RUNNING = re.compile(r" while (.+) runs it$")
"""The end of the checker's overlap violation: the worker(s) that already ran the item."""


def _already_running(violation: str) -> str | None:
    match = _ALREADY_RUNNING.search(violation)
    return match.group(1) if match else None


def same_failure(invariant: str, violation: str = "") -> Callable[[Scenario], bool]:
    """Whether a candidate still breaks ``invariant``; for an overlap (``exclusive``), still
    against the worker(s) that ``violation`` (the original first violation) names as already
    running the item. Any overlap would do otherwise, and a shrink could trade the story for
    another one: dropping the crash between two processes given one static instance id left both
    alive, an overlap no coordinator prevents (drill 99302309272 shrank into that)."""
    running = _already_running(violation) if invariant == "exclusive" else None

    def still_fails(candidate: Scenario) -> bool:
        summary = judge(candidate)
        if getattr(summary, invariant):
            return False
        return running is None or any(_already_running(v) == running for v in summary.violations)

    return still_fails


def keep(failure: Failure, directory: str | Path, budget: int = 400) -> Path:
    """Minimize ``failure`` and write it as ``DIRECTORY/INVARIANT-SEED.json``."""
    small = minimize(failure.scenario, same_failure(failure.invariant, failure.violation), budget)
    path = Path(directory) / f"{failure.invariant}-{failure.seed}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    dump_scenario(small.model_copy(update={"name": path.stem}), path)
    return path
