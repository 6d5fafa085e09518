"""The failure hunter: search keeps failing seeds, minimize shrinks a scenario under a predicate."""

from __future__ import annotations

from connect_bridge.drills.scenario import load_scenario
from connect_bridge.drills.search import Failure, broken, judge, minimize, search

BIG = {
    "name": "big",
    "seed": 1,
    "timing": {"scheduled_rebalance_max_delay_ms": 20_000},
    "connectors": {"a": 3, "b": 2, "c": 1},
    "steps": [
        {"at_ms": 0, "action": "start", "worker": "w1", "protocol": "sessioned"},
        {"at_ms": 0, "action": "start", "worker": "w2", "protocol": "new"},
        {"at_ms": 1_000, "action": "start", "worker": "w3", "protocol": "compatible"},
        {"at_ms": 5_000, "action": "pause", "worker": "w3", "duration_ms": 4_000},
        {"at_ms": 9_000, "action": "add_connector", "connector": "d", "tasks": 4},
        {"at_ms": 12_000, "action": "restart", "worker": "w1", "down_ms": 3_000, "protocol": "new"},
        {"at_ms": 20_000, "action": "crash", "worker": "w2"},
    ],
    "end_ms": 200_000,
}


def test_minimize_keeps_only_what_the_predicate_needs() -> None:
    """Synthetic predicate: "fails" while w3 starts and later pauses for at least 500 ms."""

    def still_fails(s) -> bool:  # type: ignore[no-untyped-def]
        actions = [(st.action, getattr(st, "worker", None)) for st in s.steps]
        pauses = [st for st in s.steps if st.action == "pause" and st.duration_ms >= 500]
        return ("start", "w3") in actions and bool(pauses)

    small = minimize(load_scenario(BIG), still_fails)
    assert [(st.action, st.worker) for st in small.steps] == [("start", "w3"), ("pause", "w3")]
    assert small.steps[1].duration_ms == 500  # halved while still failing, 4000 -> ... -> 500
    assert len(small.connectors) == 1


def test_search_reports_failures_with_their_invariant() -> None:
    """A generator whose drill cannot converge (a connector and no worker at the end)."""
    doc = {
        **BIG,
        "steps": [
            *BIG["steps"],
            {"at_ms": 30_000, "action": "stop", "worker": "w1"},
            {"at_ms": 31_000, "action": "stop", "worker": "w3"},
        ],
    }
    failures = list(search([7, 8], lambda seed: load_scenario({**doc, "seed": seed})))
    assert [f.seed for f in failures] == [7, 8]
    assert all(isinstance(f, Failure) and f.invariant == "converged" for f in failures)
    assert broken(judge(load_scenario(BIG))) is None


def test_an_overlap_shrinks_only_into_overlaps_against_the_same_worker(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A shrink that keeps "exclusive broken" but against another worker tells another story (drill
    99302309272 shrank into two live processes with one static instance id): it is refused."""
    from types import SimpleNamespace

    from connect_bridge.drills import search as search_module

    verdicts = {
        "same": ("t_ms=9: c0 started on w2 while w4 runs it",),
        "other": ("t_ms=9: c3 started on z1 while w1 runs it",),
        "none": (),
    }
    monkeypatch.setattr(
        search_module,
        "judge",
        lambda candidate: SimpleNamespace(exclusive=not verdicts[candidate], violations=verdicts[candidate]),
    )
    still_fails = search_module.same_failure("exclusive", "t_ms=41356: c0 started on w3 while w4 runs it")
    assert still_fails("same") and not still_fails("other") and not still_fails("none")
    assert search_module.same_failure("exclusive")("other"), "without the original violation: any overlap"
