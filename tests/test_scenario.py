"""Scenario file validation (docs/drills.md): every example loads; every mistake is one clear line."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from connect_bridge.drills.scenario import (
    RestartStep,
    Scenario,
    ScenarioError,
    StartStep,
    Timing,
    dump_scenario,
    load_scenario,
)

EXAMPLES = sorted((Path(__file__).parent.parent / "examples").glob("*.json"))

BASE: dict[str, Any] = {
    "name": "t",
    "connectors": {"A": 2, "B": 1},
    "steps": [
        {"at_ms": 0, "action": "start", "worker": "w1", "protocol": "new"},
        {"at_ms": 1000, "action": "start", "worker": "w2", "protocol": "sessioned"},
    ],
    "end_ms": 60000,
}


def _with(**changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    data.update(changes)
    return data


def _steps(*extra: dict[str, Any]) -> dict[str, Any]:
    return _with(steps=[*copy.deepcopy(BASE["steps"]), *extra])


def test_examples_exist() -> None:
    names = {p.stem for p in EXAMPLES}
    assert {
        "scale-out-new",
        "rolling-restart-new",
        "crash-and-return-new",
        "crash-no-return-new",
        "config-churn-new",
        "rolling-upgrade-sessioned-to-new",
        "rolling-downgrade-new-to-compatible",
        "mixed-eager-cooperative-new",
        "bounce-within-delay-sessioned",
    } <= names


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_loads_and_leaves_time_to_converge(path: Path) -> None:
    scenario = load_scenario(path)
    assert scenario.name == path.stem
    # Lost work may wait a session timeout to be noticed plus the scheduled delay, then a few
    # heartbeats to be handed out; a drill that ends sooner would fail for the wrong reason.
    last = scenario.steps[-1]
    settle_from = last.at_ms + getattr(last, "down_ms", 0)
    t = scenario.timing
    margin = t.session_timeout_ms + t.scheduled_rebalance_max_delay_ms + 3 * t.heartbeat_interval_ms
    assert scenario.end_ms >= settle_from + margin


def test_defaults() -> None:
    s = load_scenario(BASE)
    assert (s.seed, s.group, s.migration_policy) == (0, "connect-cluster", "bidirectional")
    assert s.timing == Timing(
        session_timeout_ms=10000,
        rebalance_timeout_ms=60000,
        heartbeat_interval_ms=3000,
        scheduled_rebalance_max_delay_ms=300000,
    )
    assert isinstance(s.steps[0], StartStep)
    assert s.workers == ["w1", "w2"]


@pytest.mark.parametrize(
    "data",
    [
        # restart keeps the worker running, so it can be stopped or restarted again afterwards
        _steps(
            {"at_ms": 2000, "action": "restart", "worker": "w1", "down_ms": 500, "protocol": "compatible"},
            {"at_ms": 2100, "action": "restart", "worker": "w1", "down_ms": 0},
            {"at_ms": 3000, "action": "stop", "worker": "w1"},
        ),
        # a crashed or stopped worker can start again
        _steps(
            {"at_ms": 2000, "action": "crash", "worker": "w1"},
            {"at_ms": 2000, "action": "start", "worker": "w1", "protocol": "eager"},
        ),
        # a removed connector can be added back; zero tasks is allowed
        _steps(
            {"at_ms": 2000, "action": "remove_connector", "connector": "A"},
            {"at_ms": 3000, "action": "add_connector", "connector": "A", "tasks": 0},
            {"at_ms": 4000, "action": "set_tasks", "connector": "A", "tasks": 5},
            {"at_ms": 5000, "action": "restart_bridge", "down_ms": 100},
        ),
        _with(steps=[], end_ms=0),
        _with(end_ms=1000),
    ],
)
def test_valid(data: dict[str, Any]) -> None:
    """Loads, and to what the file says: every step kept, in order, with the values given."""
    scenario = load_scenario(data)
    assert (scenario.name, scenario.connectors, scenario.end_ms) == (
        data["name"],
        data["connectors"],
        data["end_ms"],
    )
    loaded = [s.model_dump(include=set(raw)) for s, raw in zip(scenario.steps, data["steps"], strict=True)]
    assert loaded == data["steps"]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_with(foo=1), "<scenario>: unknown field 'foo' (allowed: name, seed"),
        (
            _steps({"at_ms": 2000, "action": "stop", "worker": "w1", "foo": 1}),
            "steps[2]: unknown field 'foo'",
        ),
        (_with(timing={"session_timeout": 1}), "timing: unknown field 'session_timeout'"),
        (
            _steps({"at_ms": 2000, "action": "explode"}),
            "steps[2].action: unknown action 'explode'; expected one of start, stop, crash, restart, "
            "add_connector, remove_connector, set_tasks, restart_bridge",
        ),
        (_steps({"at_ms": 2000, "worker": "w1"}), "steps[2].action: missing"),
        (
            _steps({"at_ms": 2000, "action": "start", "worker": "w3", "protocol": "grpc"}),
            "steps[2].protocol: unknown protocol 'grpc'; expected one of eager, compatible, sessioned, new",
        ),
        (
            _steps({"at_ms": 2000, "action": "restart", "worker": "w1", "down_ms": 1, "protocol": "x"}),
            "steps[2].protocol: unknown protocol 'x'",
        ),
        (_with(migration_policy="sideways"), "migration_policy: unknown migration_policy 'sideways'"),
        (_steps({"at_ms": 2000, "action": "start", "worker": "w3"}), "steps[2].protocol: missing required"),
        (_with(end_ms=None), "end_ms: input should be a valid integer"),
        (_with(connectors={"A": -1}), "connectors.A: input should be greater than or equal to 0"),
        (_with(timing={"heartbeat_interval_ms": 0}), "timing.heartbeat_interval_ms: input should be greater"),
        (_with(seed="1"), "seed: input should be a valid integer"),
        (_steps({"at_ms": -5, "action": "stop", "worker": "w1"}), "steps[2].at_ms: input should be greater"),
        (
            _steps({"at_ms": 2000, "action": "stop", "worker": "w9"}),
            "steps[2].worker: cannot stop worker 'w9': it is not running (never started)",
        ),
        (
            _steps(
                {"at_ms": 2000, "action": "crash", "worker": "w1"},
                {"at_ms": 3000, "action": "restart", "worker": "w1", "down_ms": 5},
            ),
            "steps[3].worker: cannot restart worker 'w1': it is not running (stopped at steps[2])",
        ),
        (
            _steps({"at_ms": 2000, "action": "start", "worker": "w1", "protocol": "new"}),
            "steps[2].worker: worker 'w1' is already running (started at steps[0])",
        ),
        (
            _steps(
                {"at_ms": 2000, "action": "restart", "worker": "w1", "down_ms": 5},
                {"at_ms": 3000, "action": "start", "worker": "w1", "protocol": "new"},
            ),
            "steps[3].worker: worker 'w1' is already running",
        ),
        (
            _steps({"at_ms": 500, "action": "stop", "worker": "w1"}),
            "steps[2].at_ms: 500 is before the previous step's 1000 (steps must be in time order)",
        ),
        (_with(end_ms=999), "end_ms: 999 is before the last step (steps[1].at_ms = 1000)"),
        (
            _steps({"at_ms": 2000, "action": "add_connector", "connector": "B", "tasks": 1}),
            "steps[2].connector: connector 'B' already exists",
        ),
        (
            _steps({"at_ms": 2000, "action": "remove_connector", "connector": "Z"}),
            "steps[2].connector: unknown connector 'Z'",
        ),
        (
            _steps(
                {"at_ms": 2000, "action": "remove_connector", "connector": "A"},
                {"at_ms": 3000, "action": "set_tasks", "connector": "A", "tasks": 1},
            ),
            "steps[3].connector: unknown connector 'A'",
        ),
        (_with(steps=5), "steps: input should be a valid list"),
        (_with(name=""), "name: string should have at least 1 character"),
    ],
)
def test_invalid_is_one_line_naming_the_path(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(data)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("<scenario>: ")
    assert expected in message


def test_error_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(_steps({"at_ms": 2000, "action": "explode"})))
    with pytest.raises(ScenarioError, match=r"^.*bad\.json: steps\[2\]\.action: unknown action 'explode'"):
        load_scenario(path)
    path.write_text('{"name": "x",\n  "steps": [,]}')
    with pytest.raises(ScenarioError, match=r"bad\.json: invalid JSON at line 2 column 13: "):
        load_scenario(str(path))
    with pytest.raises(ScenarioError, match=r"missing\.json: cannot read: "):
        load_scenario(tmp_path / "missing.json")


def test_several_errors_still_one_line() -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario({"name": "x", "foo": 1, "bar": 2})
    message = str(info.value)
    assert "\n" not in message
    # every error is named, not "(and N more)"
    assert message.startswith("<scenario>: 5 errors: "), message
    for part in ("unknown field 'foo'", "unknown field 'bar'", "connectors: missing", "steps: missing"):
        assert part in message, message


def test_dump_round_trips(tmp_path: Path) -> None:
    original = load_scenario(
        _steps(
            {"at_ms": 2000, "action": "restart", "worker": "w1", "down_ms": 500},
            {"at_ms": 3000, "action": "restart", "worker": "w2", "down_ms": 500, "protocol": "new"},
        )
    )
    path = tmp_path / "s.json"
    dump_scenario(original, path)
    again = load_scenario(path)
    assert again == original
    assert isinstance(again.steps[2], RestartStep) and again.steps[2].protocol is None
    assert isinstance(Scenario.model_validate(json.loads(path.read_text())), Scenario)
