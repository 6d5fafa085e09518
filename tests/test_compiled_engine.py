"""The compiled drill engine (``connect_bridge.drills.compiled``): the same drills as the interpreted
engine, event for event, and what it compiles is what its tables say."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from connect_bridge.drills import compiled
from connect_bridge.drills.compiled import (
    COMPILED,
    LEFT_AS_PYTHON,
    compiled_modules,
    drill_functions,
    engine_digest,
    is_compiled,
)

ROOT = Path(compiled.__file__).resolve().parent.parent


def test_the_tables_name_modules_that_exist() -> None:
    """A module renamed or removed must not leave the build compiling nothing in its place."""
    for entry in (*COMPILED, *LEFT_AS_PYTHON):
        assert (ROOT / entry).exists(), entry
    modules = compiled_modules()
    assert "drills/sim.py" in modules and "state/coordinator.py" in modules
    assert not set(LEFT_AS_PYTHON) & set(modules)
    assert not any(m.endswith("__init__.py") for m in modules)


def test_any_change_to_the_sources_is_a_new_build(tmp_path: Path) -> None:
    copy = tmp_path / "connect_bridge"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = engine_digest(copy)
    assert engine_digest(copy) == before
    (copy / "state" / "holds.py").write_text((copy / "state" / "holds.py").read_text() + "\n# changed\n")
    assert engine_digest(copy) != before


SEEDS = [(seed, adversarial) for seed in range(7_100, 7_160) for adversarial in (False, True)]


@pytest.fixture(scope="module")
def engines(compiled_engine: Path) -> tuple[compiled.DrillFunctions, compiled.DrillFunctions]:
    return drill_functions(None), drill_functions(compiled_engine)


def test_the_engine_is_compiled(engines: tuple[compiled.DrillFunctions, compiled.DrillFunctions]) -> None:
    python, native = engines
    assert not is_compiled(python)
    assert is_compiled(native)
    sim = sys.modules[native.run_scenario.__module__]
    assert sim.__name__ == f"{compiled.ENGINE_PACKAGE}.drills.sim"
    coordinator = sys.modules[f"{compiled.ENGINE_PACKAGE}.state.coordinator"]
    assert not str(coordinator.__file__).endswith(".py")


def test_compiled_drills_are_the_interpreted_drills(
    engines: tuple[compiled.DrillFunctions, compiled.DrillFunctions],
) -> None:
    """Every event (time, worker, item, generation...) and every verdict the same, on plain and
    adversarial drills of every protocol: the compiled engine is a faster run of the same code,
    not a second simulator. A type the annotations lie about would stop a compiled drill with a
    TypeError instead."""
    python, native = engines
    kinds = set()
    for seed, adversarial in SEEDS:
        expected_scenario = python.random_scenario(seed, adversarial=adversarial)
        scenario = native.random_scenario(seed, adversarial=adversarial)
        assert scenario.model_dump() == expected_scenario.model_dump()
        expected = python.run_scenario(expected_scenario).events
        events = native.run_scenario(scenario).events
        assert events == expected, (seed, adversarial)
        verdict = native.check(events, name=scenario.name, end_ms=scenario.end_ms)
        expected_verdict = python.check(expected, name=scenario.name, end_ms=scenario.end_ms)
        assert verdict.to_json() == expected_verdict.to_json()
        kinds.update(step.action for step in scenario.steps)
    # the drills covered restarts, crashes, bridge restarts and misbehaviours
    assert {"crash", "restart_bridge"} <= kinds and len(kinds) >= 8, kinds


def test_the_collector_runs_between_drills_and_is_restored() -> None:
    """``drills.batch``: off during a drill, the drill's cycles freed after it, the collector as
    it was once the batch ends (also when it ends early)."""
    import gc
    import weakref

    from connect_bridge.drills.batch import collected_between_drills

    class Node:
        pass

    assert gc.isenabled()
    with pytest.raises(RuntimeError), collected_between_drills() as between_drills:
        assert not gc.isenabled()
        node = Node()
        node.self = node  # type: ignore[attr-defined]
        alive = weakref.ref(node)
        del node
        assert alive() is not None  # a cycle: only the collector frees it
        between_drills()
        assert alive() is None
        raise RuntimeError("the batch ends early")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_old_builds_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    monkeypatch.setattr(compiled, "cache_root", lambda: tmp_path)
    for age, name in enumerate(["a", "b", "c", "d", "e"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "built").write_text("x")
        os.utime(tmp_path / name / "built", (1000 + age, 1000 + age))
    (tmp_path / "f.building-1").mkdir()  # another process's build in progress
    compiled._prune(keep=tmp_path / "a")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "d", "e", "f.building-1"]
