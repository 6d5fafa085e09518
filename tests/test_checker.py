"""The invariant checker on hand-written logs, with exact numbers (docs/drills.md, "Metrics")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.drills.checker import MAX_VIOLATIONS, Summary, check, check_file, reload_detection_ms
from connect_bridge.drills.events import EventLog, EventLogError, read_events

A = ConnectorTaskId("A", -1)
A0, A1, A2 = (ConnectorTaskId("A", i) for i in range(3))
B = ConnectorTaskId("B", -1)
B0 = ConnectorTaskId("B", 0)
C, D = ConnectorTaskId("C", -1), ConnectorTaskId("D", -1)
D0, D1, D2 = (ConnectorTaskId("D", i) for i in range(3))


def _log(*workers: str, connectors: dict[str, int] | None = None) -> EventLog:
    """A log that starts with a config and the given workers live, all at t=0."""
    log = EventLog()
    if connectors is not None:
        log.config(0, connectors, offset=1)
    for w in workers:
        log.worker_start(0, w, "new")
    return log


def _numbers(s: Summary) -> dict[str, object]:
    live = ("live", "max_unowned_ms", "live_bound_ms")  # judged by the live tests below
    return {k: v for k, v in s.to_json().items() if k not in ("name", "violations", *live)}


def test_clean_handover() -> None:
    log = _log("w1", "w2", connectors={"A": 1})
    log.run(1000, "w1", A)
    log.run(1000, "w1", A0)
    log.epoch(1000, "w1", 1)
    log.release(5000, "w1", A0)
    log.run(5000, "w2", A0)
    log.epoch(5000, "w2", 2)
    s = check(log, name="handover", end_ms=10000)
    assert _numbers(s) == {
        "ok": True,
        "exclusive": True,
        "converged": True,
        "balanced": True,
        "overlaps": 0,
        "moves": 1,
        "rebalances": 2,
        "unassigned_item_ms": 2000,  # A and A-0, each 0..1000
        "events": 9,
        "overlap_ms": 0,
    }
    assert s.name == "handover" and s.violations == ()


def test_summary_json_has_the_contract_keys_in_order() -> None:
    assert list(check([]).to_json()) == [
        "name",
        "ok",
        "exclusive",
        "converged",
        "balanced",
        "overlaps",
        "moves",
        "rebalances",
        "unassigned_item_ms",
        "events",
        "overlap_ms",
        "live",
        "max_unowned_ms",
        "live_bound_ms",
        "violations",
    ]


def test_injected_overlap() -> None:
    log = _log("w1", "w2", "w3", connectors={"A": 0})
    log.run(0, "w1", A)
    log.run(2000, "w2", A)  # overlap 1 starts: 2 runners
    log.run(3000, "w3", A)  # overlap 2: 3 runners
    log.release(5000, "w1", A)  # still 2
    log.release(6000, "w2", A)  # 1 runner: overlapping 2000..6000
    s = check(log, end_ms=8000)
    assert (s.exclusive, s.converged, s.balanced, s.ok) == (False, True, True, False)
    assert (s.overlaps, s.overlap_ms, s.moves, s.unassigned_item_ms) == (2, 4000, 2, 0)
    assert s.violations == (
        "t_ms=2000: A started on w2 while w1 runs it",
        "t_ms=3000: A started on w3 while w1, w2 runs it",
    )


def test_overlap_still_open_at_the_end_counts_until_the_end() -> None:
    log = _log("w1", "w2", connectors={"A": 0})
    log.run(0, "w1", A)
    log.run(1000, "w2", A)
    s = check(log, end_ms=4000)
    assert (s.overlaps, s.overlap_ms, s.converged) == (1, 3000, False)
    assert s.violations[-1] == "end (t_ms=4000): A runs on w1, w2"


def test_release_then_run_at_same_time_is_not_an_overlap_but_run_then_release_is() -> None:
    handover = _log("w1", "w2", connectors={"A": 0})
    handover.run(0, "w1", A)
    handover.release(1000, "w1", A)
    handover.run(1000, "w2", A)
    s = check(handover)
    assert (s.exclusive, s.overlaps, s.overlap_ms, s.unassigned_item_ms, s.ok) == (True, 0, 0, 0, True)

    racing = _log("w1", "w2", connectors={"A": 0})
    racing.run(0, "w1", A)
    racing.run(1000, "w2", A)
    racing.release(1000, "w1", A)
    s = check(racing)
    assert (s.exclusive, s.overlaps, s.overlap_ms, s.ok) == (False, 1, 0, False)


def test_gaps_and_crash_ending_work() -> None:
    log = _log("w1", connectors={"A": 2})
    log.run(100, "w1", A)
    log.run(100, "w1", A0)
    log.run(300, "w1", A1)  # unassigned so far: 100 + 100 + 300
    log.worker_crash(1000, "w1", "new")  # all three run nowhere from 1000
    log.worker_start(1500, "w2", "new")
    for item in (A, A0, A1):
        log.run(2000, "w2", item)  # + 3 * 1000, and no overlap: the crash ended w1's work
    s = check(log, end_ms=2500)
    assert _numbers(s) == {
        "ok": True,
        "exclusive": True,
        "converged": True,
        "balanced": True,  # only w2 is live
        "overlaps": 0,
        "moves": 3,
        "rebalances": 0,
        "unassigned_item_ms": 3500,
        "events": 10,
        "overlap_ms": 0,
    }


@pytest.mark.parametrize("ending", ["worker_stop", "worker_crash"])
def test_stop_and_crash_end_every_item_of_the_worker(ending: str) -> None:
    log = _log("w1", "w2", connectors={"A": 1})
    log.run(0, "w1", A)
    log.run(0, "w1", A0)
    getattr(log, ending)(1000, "w1", "new")
    log.run(1000, "w2", A0)
    log.run(4000, "w2", A)
    s = check(log)
    assert (s.overlaps, s.moves, s.unassigned_item_ms, s.converged, s.ok) == (0, 2, 3000, True, True)


def test_configured_item_never_run_is_unassigned_until_the_end() -> None:
    s = check(_log("w1", connectors={"A": 0}), end_ms=7000)
    assert (s.unassigned_item_ms, s.converged, s.ok) == (7000, False, False)
    assert s.violations == ("end (t_ms=7000): A is configured but runs nowhere",)


def test_removed_connector() -> None:
    log = _log("w1", connectors={"A": 0, "B": 1})
    for item in (A, B, B0):
        log.run(0, "w1", item)
    log.release(500, "w1", B0)
    log.release(500, "w1", B)  # B and B-0 unassigned 500..1000
    log.config(1000, {"A": 0}, offset=2)  # dropped: no unassigned time after this
    s = check(log, end_ms=5000)
    assert (s.unassigned_item_ms, s.converged, s.ok) == (1000, True, True)

    log.config(2000, {"A": 0, "B": 0}, offset=3)  # B back, running nowhere until the end
    s = check(log, end_ms=5000)
    assert (s.unassigned_item_ms, s.converged) == (1000 + 3000, False)


def test_removed_connector_still_running_at_the_end_is_not_converged() -> None:
    log = _log("w1", "w2", connectors={"A": 0, "B": 1})
    log.run(0, "w1", A)
    log.run(0, "w2", B)
    log.run(0, "w2", B0)
    log.config(1000, {"A": 0, "B": 0}, offset=2)  # B-0 dropped by set_tasks, still running
    s = check(log, end_ms=5000)
    assert (s.unassigned_item_ms, s.exclusive, s.converged, s.balanced, s.ok) == (0, True, False, True, False)
    assert s.violations == ("end (t_ms=5000): B-0 runs on w2 but is not configured",)


def test_items_run_before_any_config_are_not_unassigned_and_not_converged() -> None:
    log = _log("w1")
    log.run(1000, "w1", A)
    s = check(log, end_ms=2000)
    assert (s.unassigned_item_ms, s.converged) == (0, False)


def test_item_on_a_worker_that_is_not_live_is_not_converged() -> None:
    log = _log(connectors={"A": 0})
    log.run(0, "ghost", A)
    s = check(log)
    assert (s.converged, s.balanced) == (False, True)
    assert s.violations == ("end (t_ms=0): A runs on ghost, which is not live",)


def test_moves() -> None:
    log = _log("w1", "w2", connectors={"A": 1})
    log.run(0, "w1", A0)  # first run: not a move
    log.release(10, "w1", A0)
    log.run(20, "w1", A0)  # same worker again: not a move
    log.run(20, "w1", A0)  # duplicate run: a no-op
    log.release(30, "w1", A0)
    log.run(30, "w2", A0)  # move 1
    log.release(40, "w2", A0)
    log.run(40, "w1", A0)  # move 2
    log.run(40, "w2", A)  # first run of A: not a move
    log.release(50, "w9", A)  # release by a worker that does not run it: a no-op
    s = check(log, end_ms=100)
    assert (s.moves, s.overlaps, s.unassigned_item_ms, s.ok) == (2, 0, 10 + 40, True)


def test_unbalanced_end() -> None:
    log = _log("w1", "w2", connectors={"A": 0, "B": 0, "C": 0, "D": 3})
    for item in (A, B, C):
        log.run(0, "w1", item)
    for item in (D, D0, D1, D2):
        log.run(0, "w2", item)
    s = check(log)
    assert (s.exclusive, s.converged, s.balanced, s.ok) == (True, True, False, False)
    assert s.violations == (
        "end (t_ms=0): unbalanced connectors per live worker: w1=3, w2=1",
        "end (t_ms=0): unbalanced tasks per live worker: w1=0, w2=3",
    )


def test_off_by_one_is_balanced_and_idle_live_worker_counts() -> None:
    log = _log("w1", "w2", "w3", connectors={"A": 2, "B": 0})
    for w, item in (("w1", A), ("w1", B), ("w1", A0), ("w3", A1)):
        log.run(0, w, item)
    assert check(log).balanced is False  # connectors 2, 0, 0
    log2 = _log("w1", "w2", "w3", connectors={"A": 2, "B": 0})
    for w, item in (("w1", A), ("w1", A0), ("w2", B), ("w3", A1)):
        log2.run(0, w, item)
    s = check(log2)
    assert (s.balanced, s.ok) == (True, True)


def test_empty_log() -> None:
    s = check([], name="empty")
    assert s.to_json() == {
        "name": "empty",
        "ok": True,
        "exclusive": True,
        "converged": True,
        "balanced": True,
        "overlaps": 0,
        "moves": 0,
        "rebalances": 0,
        "unassigned_item_ms": 0,
        "events": 0,
        "overlap_ms": 0,
        "live": True,
        "max_unowned_ms": 0,
        "live_bound_ms": None,
        "violations": [],
    }


def test_end_defaults_to_last_event_and_is_never_before_it() -> None:
    log = _log(connectors={"A": 0})
    log.bridge_restart(3000)
    log.emit(4000, "something_new", "w1", detail=1)  # unknown types: counted, otherwise ignored
    assert (check(log).unassigned_item_ms, check(log).events) == (4000, 3)
    assert check(log, end_ms=10000).unassigned_item_ms == 10000
    assert check(log, end_ms=1000).unassigned_item_ms == 4000


def test_drill_end_marker_makes_the_default_end_equal_end_ms() -> None:
    log = _log(connectors={"A": 0})
    log.drill_end(9000)
    assert check(log).unassigned_item_ms == check(log, end_ms=9000).unassigned_item_ms == 9000


def test_violations_are_capped() -> None:
    log = _log(*(f"w{i}" for i in range(31)), connectors={"A": 0})
    for i in range(31):
        log.run(i, f"w{i}", A)
    s = check(log)
    assert s.overlaps == 30
    assert len(s.violations) == MAX_VIOLATIONS + 1
    # 30 overlaps + "runs on w0, w1, ..." at the end (each live worker runs A once: balanced)
    assert s.balanced
    assert s.violations[-1] == f"... and {30 + 1 - MAX_VIOLATIONS} more"


@pytest.mark.parametrize(
    ("events", "message"),
    [
        (  # time going backwards is sorted out (tests/test_merged_logs.py) unless it contradicts itself
            [
                {"t_ms": 5, "type": "run", "worker": "w1", "connector": "A", "task": 0},
                {"t_ms": 4, "type": "release", "worker": "w1", "connector": "A", "task": 0},
            ],
            "event 1 (release): release of A-0 by w1 at t_ms 4 is before the run at event 0 (t_ms 5)",
        ),
        ([{"type": "run"}], "event 0: missing field 't_ms'"),
        ([{"t_ms": 0, "type": "run", "worker": "w1", "task": 0}], "event 0 (run): missing field 'connector'"),
        (
            [{"t_ms": 0, "type": "run", "worker": None, "connector": "A", "task": 0}],
            "event 0 (run): worker is null",
        ),
        ([{"t_ms": 0, "type": "config", "connectors": None}], "event 0 (config): connectors"),
    ],
)
def test_malformed_logs_are_rejected(events: list[dict[str, object]], message: str) -> None:
    with pytest.raises(EventLogError) as info:
        check(events)
    assert str(info.value).startswith(message)


def test_event_log_shape_and_order() -> None:
    log = EventLog()
    log.config(0, {"A": 1}, offset=7)
    log.run(1, "w1", A0)
    log.worker_stop(2, "w1")
    log.group(3, "connect", 4)
    assert log.events == [
        {"t_ms": 0, "type": "config", "worker": None, "connectors": {"A": 1}, "offset": 7},
        {"t_ms": 1, "type": "run", "worker": "w1", "connector": "A", "task": 0},
        {"t_ms": 2, "type": "worker_stop", "worker": "w1", "protocol": None},
        {"t_ms": 3, "type": "group", "worker": None, "group_type": "connect", "group_epoch": 4},
    ]
    with pytest.raises(EventLogError, match="t_ms 2 < previous 3"):
        log.epoch(2, "w1", 1)


def test_jsonl_round_trip_and_check_file(tmp_path: Path) -> None:
    log = _log("w1", connectors={"A": 0})
    log.run(500, "w1", A)
    drill = tmp_path / "my-drill"
    drill.mkdir()
    log.write_jsonl(drill / "events.jsonl")
    lines = (drill / "events.jsonl").read_text().splitlines()
    assert lines[0] == '{"t_ms":0,"type":"config","worker":null,"connectors":{"A":0},"offset":1}'
    assert read_events(drill / "events.jsonl") == log.events
    assert check_file(drill) == check(log, name="my-drill")
    (drill / "summary.json").write_text(json.dumps({"name": "named"}))
    assert check_file(drill / "events.jsonl").name == "named"
    assert check_file(drill, end_ms=1000).unassigned_item_ms == 500


def test_read_events_skips_blank_lines_and_names_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"t_ms":0,"type":"epoch","worker":"w","epoch":1}\n\n  \n{"t_ms": 1, oops}\n')
    with pytest.raises(EventLogError, match=r"events\.jsonl:4: bad JSON: "):
        read_events(path)
    path.write_text('{"t_ms":0,"type":"epoch","worker":"w","epoch":1}\n\n[1]\n')
    with pytest.raises(EventLogError, match=r"events\.jsonl:3: expected a JSON object, got list"):
        read_events(path)
    path.write_text('\n{"t_ms":0,"type":"epoch","worker":"w","epoch":1}\n\n')
    assert check_file(path).rebalances == 1


def test_large_log_is_one_fast_pass() -> None:
    """200k events of steady handovers: a smoke test that nothing is quadratic."""
    log = _log("w1", "w2", connectors={"A": 0})
    workers = ("w1", "w2")
    for t in range(50_000):
        log.run(t, workers[t % 2], A)
        log.release(t, workers[t % 2], A)
        log.epoch(t, "w1", t)
    s = check(log)
    assert (s.events, s.rebalances, s.moves, s.overlaps) == (150_003, 50_000, 49_999, 0)


# --- live (issue 10): configured work runs nowhere no longer than delay + rebalance timeout while
# some worker could run it


TIMING = {
    "t_ms": 0,
    "type": "timing",
    "worker": None,
    "scheduled_rebalance_max_delay_ms": 10_000,
    "rebalance_timeout_ms": 5_000,
    "session_timeout_ms": 3_000,
    "request_timeout_ms": 4_000,
}


def _ev(t: int, type_: str, worker: str | None = None, **fields: object) -> dict:
    return {"t_ms": t, "type": type_, "worker": worker, **fields}


def _unowned_for(gap: int, *middle: dict, leave: str = "worker_stop") -> list[dict]:
    """w1 runs A, w2 is live; A runs nowhere from t=1000 for ``gap`` ms (w1 ``leave``s), then on w2."""
    return [
        TIMING,
        _ev(0, "config", connectors={"A": 0}, offset=0),
        _ev(0, "worker_start", "w1", protocol="new"),
        _ev(0, "worker_start", "w2", protocol="new"),
        _ev(0, "run", "w1", connector="A", task=-1),
        _ev(1_000, leave, "w1", protocol="new"),
        *middle,
        _ev(1_000 + gap, "run", "w2", connector="A", task=-1),
    ]


def test_live_holds_within_the_bound_and_fails_past_it() -> None:
    ok = check(_unowned_for(15_000))
    assert (ok.live, ok.ok, ok.max_unowned_ms, ok.live_bound_ms) == (True, True, 15_000, 15_000)
    late = check(_unowned_for(15_001))
    assert (late.live, late.ok) == (False, False)
    assert "A ran nowhere for 15001 ms" in late.violations[0]


def test_live_does_not_count_time_nobody_could_run_it() -> None:
    """Bridge down and a stalled only worker do not count; a log without timing is not judged."""
    gaps = [
        _ev(2_000, "bridge_restart"),
        _ev(7_000, "bridge_up"),
        _ev(8_000, "stall_start", "w2", kind="pause"),
        _ev(12_000, "stall_end", "w2", kind="pause"),
    ]
    s = check(_unowned_for(24_000, *gaps), detection_ms=0)  # 24 s unowned, 9 s of it nobody able
    assert (s.live, s.max_unowned_ms) == (True, 15_000)
    assert check(_unowned_for(24_000)[1:]).live_bound_ms is None
    assert check(_unowned_for(24_000)[1:]).live


def test_a_stall_that_ends_after_its_process_restarted_does_not_make_anyone_able() -> None:
    """A restarted worker's earlier process may end a stall it began (a request it waited for): that
    end must not count the worker as able twice, or time nobody could use would count (drill
    17001912)."""
    gaps = [
        _ev(1_500, "stall_start", "w2", kind="timeout"),
        _ev(2_000, "worker_stop", "w2", protocol="sessioned"),
        _ev(2_000, "worker_start", "w2", protocol="sessioned"),
        _ev(3_000, "stall_end", "w2", kind="timeout"),  # the old process's wait ends: no effect
        _ev(4_000, "stall_start", "w2", kind="pause"),  # the only worker is paused from here
        _ev(20_000, "stall_end", "w2", kind="pause"),
    ]
    s = check(_unowned_for(24_000, *gaps), detection_ms=0)  # A unowned 1-25 s; w2 able 1-1.5, 2-4, 20-25 s
    assert (s.live, s.max_unowned_ms) == (True, 7_500)


def test_live_starts_the_clock_of_a_crashed_workers_work_after_failure_detection() -> None:
    """A crash is told from slowness only after a session timeout plus the zombie grace (3 s + 1 s +
    5 s with this timing): the bound counts from there, not from the crash."""
    detection = 3_000 + 1_000 + 5_000
    ok = check(_unowned_for(detection + 15_000, leave="worker_crash"))
    assert (ok.live, ok.max_unowned_ms) == (True, 15_000)
    late = check(_unowned_for(detection + 15_001, leave="worker_crash"))
    assert (late.live, late.max_unowned_ms) == (False, 15_001)
    assert check(_unowned_for(5_000, leave="worker_crash")).max_unowned_ms == 0


def test_what_a_silently_failing_worker_released_as_it_went_waits_for_the_detection() -> None:
    """A process that stops without LeaveGroup (or crashes) logs the release of what it ran just
    before its ``worker_stop``, at the same moment. An item it was giving up (already assigned to
    another worker) is as unknown to the coordinator as the rest: its clock starts once the failure
    is detected, not at the stop (fleet drill 99300298360). A release before the stop counts as
    usual."""
    detection = 3_000 + 1_000 + 5_000
    moving = [_ev(500, "assign", "w1", items=[]), _ev(500, "assign", "w2", items=[["A", -1]])]

    def log(released_at: int, gap: int) -> list[dict]:
        return [
            TIMING,
            _ev(0, "config", connectors={"A": 0}, offset=0),
            _ev(0, "worker_start", "w1", protocol="new"),
            _ev(0, "worker_start", "w2", protocol="new"),
            _ev(0, "run", "w1", connector="A", task=-1),
            *moving,
            _ev(released_at, "release", "w1", connector="A", task=-1),
            _ev(1_000, "worker_stop", "w1", protocol="new", left=False),
            _ev(1_000 + gap, "run", "w2", connector="A", task=-1),
        ]

    ok = check(log(1_000, detection + 15_000))
    assert (ok.live, ok.max_unowned_ms) == (True, 15_000), ok.violations
    assert not check(log(1_000, detection + 15_001)).live
    earlier = check(log(900, 14_900))  # released 100 ms before the stop: its clock ran from then
    assert (earlier.live, earlier.max_unowned_ms) == (True, 15_000)
    assert not check(log(900, 14_901)).live


def test_live_restarts_failure_detection_when_the_bridge_comes_back() -> None:
    """A restarted bridge re-arms every session from its load, a loaded legacy member's first one as
    long as a JoinGroup parked at the previous coordinator can last: the clock of work still unowned
    then starts that detection later, however long it had already waited."""
    detection = reload_detection_ms(TIMING)
    assert detection == max(3_000, 5_000 + 5_000) + 3_000 // 3 + 5_000  # first session + grace
    restart = [_ev(10_000, "bridge_restart"), _ev(11_000, "bridge_up")]
    s = check(_unowned_for(9_000 + 1_000 + detection + 15_000, *restart))  # 9 s before, 1 s down
    assert (s.live, s.max_unowned_ms) == (True, 15_000)
    assert not check(_unowned_for(9_000 + 1_000 + detection + 15_001, *restart)).live


def test_live_restarts_failure_detection_when_the_bridge_comes_back_after_a_long_request_timeout() -> None:
    """A JoinGroup parked at a paused coordinator waits max(request timeout, rebalance + 5 s): with
    a request timeout past that, the restart's detection is the request timeout plus the grace."""
    timing = {**TIMING, "request_timeout_ms": 90_000}
    assert reload_detection_ms(timing) == 90_000 + 3_000 // 3 + 5_000
    assert reload_detection_ms({}) == max(40_000, 60_000 + 5_000) + 10_000 // 3 + 5_000  # Connect's


def test_live_restarts_failure_detection_when_a_process_falls_silent() -> None:
    """A pause, partition, stall or lost answer is noticed only by a timer too, and the silent
    process may hold an assignment it never started: the clock of what it was given restarts."""
    pause = [
        _ev(4_000, "assign", "w3", items=[["A", -1]]),  # A is being given to w3
        _ev(5_000, "stall_start", "w3", kind="pause"),
        _ev(6_000, "stall_end", "w3", kind="pause"),
    ]
    events = _unowned_for(4_000 + 9_000 + 15_000, *pause)
    events[3:3] = [_ev(0, "worker_start", "w3", protocol="new")]
    assert check(events).max_unowned_ms == 15_000
    assert check(events, detection_ms=0).max_unowned_ms == 28_000


def test_an_unrelated_workers_silent_failure_does_not_hide_an_outage() -> None:
    """The live clock is per item: w3 pausing (it ran B and was given nothing else) forgives B, not
    A, which the coordinator left unowned 28 s against a 15 s bound. Before the per-item clock, any
    silent failure restarted every unowned item's clock and this outage passed as live."""
    pause = [
        _ev(500, "assign", "w3", items=[["B", -1]]),
        _ev(5_000, "stall_start", "w3", kind="pause"),
        _ev(6_000, "stall_end", "w3", kind="pause"),
    ]
    events = _unowned_for(4_000 + 9_000 + 15_000, *pause)
    events[1] = _ev(0, "config", connectors={"A": 0, "B": 0}, offset=0)
    events[3:3] = [_ev(0, "worker_start", "w3", protocol="new"), _ev(0, "run", "w3", connector="B", task=-1)]
    s = check(events)
    assert (s.live, s.max_unowned_ms) == (False, 28_000)
    assert "A ran nowhere for 28000 ms" in s.violations[0]


def test_a_crash_forgives_what_the_worker_ran_and_was_given_only() -> None:
    """w3 crashes: B (which it ran) and C (which it was given and had not started) wait a detection
    (3 s + 1 s + 5 s) before their clocks start; A, left unowned by a graceful stop, does not."""
    events = [
        TIMING,
        _ev(0, "config", connectors={"A": 0, "B": 0, "C": 0}, offset=0),
        *(_ev(0, "worker_start", w, protocol="new") for w in ("w1", "w2", "w3")),
        _ev(0, "run", "w1", connector="A", task=-1),
        _ev(0, "run", "w3", connector="B", task=-1),
        _ev(0, "run", "w2", connector="C", task=-1),
        _ev(1_000, "release", "w2", connector="C", task=-1),
        _ev(1_000, "assign", "w3", items=[["B", -1], ["C", -1]]),
        _ev(2_000, "worker_stop", "w1", protocol="new"),
        _ev(2_000, "worker_crash", "w3", protocol="new"),
        _ev(2_000 + 9_000 + 15_000, "run", "w2", connector="B", task=-1),
        _ev(2_000 + 9_000 + 15_000, "run", "w2", connector="C", task=-1),
        _ev(2_000 + 16_000, "run", "w2", connector="A", task=-1),
    ]
    events.sort(key=lambda e: e["t_ms"])
    s = check(events)
    assert s.max_unowned_ms == 16_000  # A: no failure of its own excuses it
    assert [v.split(": ", 1)[1].split(" ran")[0] for v in s.violations] == ["A"]
    events[-1] = _ev(2_000 + 15_000, "run", "w2", connector="A", task=-1)
    events.sort(key=lambda e: e["t_ms"])
    assert check(events).live  # B and C waited 15 s after w3's detection, A 15 s


def test_a_zombie_releasing_before_its_failure_is_detected_is_excused() -> None:
    """A paused worker runs A on; when it releases A before the coordinator could have noticed its
    silence, A's clock starts at the detection, not at the release."""
    events = [
        TIMING,
        _ev(0, "config", connectors={"A": 0}, offset=0),
        _ev(0, "worker_start", "w1", protocol="new"),
        _ev(0, "worker_start", "w2", protocol="new"),
        _ev(0, "run", "w1", connector="A", task=-1),
        _ev(1_000, "stall_start", "w1", kind="pause"),
        _ev(3_000, "stall_end", "w1", kind="pause"),
        _ev(4_000, "release", "w1", connector="A", task=-1),
        _ev(1_000 + 9_000 + 15_000, "run", "w2", connector="A", task=-1),
    ]
    assert check(events).max_unowned_ms == 15_000


def test_live_judges_work_still_unowned_at_the_end() -> None:
    events = _unowned_for(0)[:-1]  # A never runs again
    s = check(events, end_ms=30_000)
    assert not s.live and s.max_unowned_ms == 29_000


def test_a_zombie_still_running_is_an_overlap() -> None:
    """A stalled worker keeps its work: another worker starting it is an overlap, stall or not."""
    events = [
        _ev(0, "config", connectors={"A": 0}, offset=0),
        _ev(0, "worker_start", "w1", protocol="sessioned"),
        _ev(0, "worker_start", "w2", protocol="sessioned"),
        _ev(0, "run", "w1", connector="A", task=-1),
        _ev(1_000, "stall_start", "w1", kind="stall"),
        _ev(5_000, "run", "w2", connector="A", task=-1),
    ]
    s = check(events)
    assert (s.exclusive, s.overlaps) == (False, 1)


def test_work_given_to_a_worker_that_then_leaves_counts_from_its_leave() -> None:
    """Connect's assignor treats what a departed worker was given as lost work and delays it again:
    A, given to w3 (never started) when w3 leaves, counts from the leave (drill 93000437: a stalled
    worker was dealt held work and then stopped; the work came back a delay later)."""
    events = [
        TIMING,
        _ev(0, "config", connectors={"A": 0}, offset=0),
        _ev(0, "worker_start", "w2", protocol="compatible"),
        _ev(0, "worker_start", "w3", protocol="compatible"),
        _ev(1_000, "assign", "w3", items=[["A", -1]]),
        _ev(10_000, "worker_stop", "w3", protocol="compatible"),
        _ev(25_000, "run", "w2", connector="A", task=-1),
    ]
    assert check(events).max_unowned_ms == 15_000


# --- live in a classic group: the leader deals everything, the join barrier waits on every member

CLASSIC_TIMING = {
    "t_ms": 0,
    "type": "timing",
    "worker": None,
    "session_timeout_ms": 10_000,
    "rebalance_timeout_ms": 30_000,
    "heartbeat_interval_ms": 3_000,
    "scheduled_rebalance_max_delay_ms": 30_000,
    "request_timeout_ms": 40_000,
}
"""The generator's timing: bound 60 s, detection 10 s + 3.33 s + 5 s = 18.33 s."""


def test_a_silent_classic_leader_holds_up_everything_its_group_deals() -> None:
    """Drill 93000279001173 (eager, nothing else drawn): each generation's leader deals an empty
    first round (Connect's eager leader that did not lead the last generation) and then loses its
    SyncGroup answer, waiting the request timeout (40 s) before it rejoins. w2's silence also holds
    the next join barrier for the rebalance timeout. Nothing can be dealt until w0 is back at 79 s:
    the leaders' failures, not the coordinator's. Before the classic rule, no `assign` named A or B
    for w0 or w2, so the 79.4 s counted against the 60 s bound."""
    events = [
        CLASSIC_TIMING,
        _ev(0, "config", connectors={"A": 0, "B": 1}, offset=0),
        _ev(0, "worker_start", "w0", protocol="eager"),
        _ev(0, "worker_start", "w2", protocol="eager"),
        _ev(6_003, "group", group_type="classic", group_epoch=1, leader="w2"),
        _ev(6_003, "group_state", state="CompletingRebalance"),
        _ev(6_010, "group_state", state="Stable"),
        _ev(6_010, "assign", "w0", items=[]),
        _ev(6_010, "assign", "w2", items=[]),
        _ev(6_010, "stall_start", "w2", kind="timeout"),
        _ev(7_361, "worker_start", "w1", protocol="eager"),
        _ev(7_369, "group_state", state="PreparingRebalance"),
        _ev(37_369, "group", group_type="classic", group_epoch=2, leader="w0"),
        _ev(37_369, "group_state", state="CompletingRebalance"),
        _ev(37_378, "group_state", state="Stable"),
        _ev(37_378, "assign", "w1", items=[]),
        _ev(37_378, "stall_start", "w0", kind="timeout"),
        _ev(46_005, "stall_end", "w2", kind="timeout"),
        _ev(77_374, "stall_end", "w0", kind="timeout"),
        _ev(79_388, "run", "w2", connector="A", task=-1),
        _ev(79_388, "run", "w0", connector="B", task=-1),
        _ev(79_392, "run", "w1", connector="B", task=0),
    ]
    s = check(events)
    assert (s.live, s.max_unowned_ms) == (True, 79_392 - (37_378 + 18_333))


def _classic_rows() -> list[tuple[str, list[dict], bool]]:
    pause = [_ev(5_000, "stall_start", "w2", kind="pause"), _ev(9_000, "stall_end", "w2", kind="pause")]
    return [
        ("a member pauses while its group is stable", pause, False),
        ("the leader pauses", [{**e, "worker": "w0"} for e in pause], True),
        (
            "a member pauses while its group rebalances",
            [_ev(4_000, "group_state", state="PreparingRebalance"), *pause],
            True,
        ),
        (
            "a rebalance begins while a member is silent",
            [pause[0], _ev(6_000, "group_state", state="PreparingRebalance"), pause[1]],
            True,
        ),
        (
            "a rebalance begins after the member speaks again",
            [
                _ev(5_000, "stall_start", "w2", kind="pause"),
                _ev(6_000, "stall_end", "w2", kind="pause"),
                _ev(7_000, "group_state", state="PreparingRebalance"),
            ],
            False,
        ),
        (
            "a rebalance begins before a crashed member's session can have run out",
            [
                _ev(5_000, "worker_crash", "w2", protocol="eager"),
                _ev(20_000, "group_state", state="PreparingRebalance"),
            ],
            True,
        ),
        (
            "a rebalance begins after a crashed member's failure is detected",
            [
                _ev(5_000, "worker_crash", "w2", protocol="eager"),
                _ev(24_000, "group_state", state="PreparingRebalance"),
            ],
            False,
        ),
        (
            "a silent member is elected leader",
            [pause[0], _ev(6_000, "group", group_type="classic", group_epoch=2, leader="w2"), pause[1]],
            True,
        ),
        (
            "the group became a connect group: its coordinator deals, nobody waits on the old leader",
            [
                _ev(1_000, "group", group_type="connect", group_epoch=3),
                _ev(5_000, "stall_start", "w0", kind="pause"),
                _ev(9_000, "stall_end", "w0", kind="pause"),
            ],
            False,
        ),
    ]


@pytest.mark.parametrize(("case", "middle", "excused"), _classic_rows(), ids=[r[0] for r in _classic_rows()])
def test_a_classic_members_silent_failure_excuses_its_groups_pending_rebalance_only(
    case: str, middle: list[dict], excused: bool
) -> None:
    """A (nobody's, unowned from t=0) runs at 61 s against the 60 s bound: excused only by a silent
    failure the classic group's dealing waits on (its leader's, or a member's during a rebalance, or
    one still undetected when a rebalance begins), never by another member's while the group is
    stable, nor once the group is a connect group."""
    events = [
        CLASSIC_TIMING,
        _ev(0, "config", connectors={"A": 0}, offset=0),
        *(_ev(0, "worker_start", w, protocol="eager") for w in ("w0", "w1", "w2")),
        _ev(0, "group", group_type="classic", group_epoch=1, leader="w0"),
        _ev(0, "group_state", state="Stable"),
        *middle,
        _ev(61_000, "run", "w1", connector="A", task=-1),
    ]
    s = check(events)
    assert s.live is excused, case
    assert s.max_unowned_ms == (61_000 - (5_000 + 18_333) if excused else 61_000)


def test_work_given_to_a_worker_whose_failure_is_not_yet_detected_waits_for_the_detection() -> None:
    """w3 crashes at 1 s; A, configured at 2 s, is dealt to w3's member, which the coordinator
    cannot yet know is gone: A's clock starts when w3's failure could be detected (1 s + 9 s), as
    for what w3 had when it crashed. Fleet drill 94000282002035 (a connector added while every
    member was parked at a paused bridge, its tasks dealt to them)."""
    events = [
        TIMING,
        _ev(0, "config", connectors={"B": 0}, offset=0),
        *(_ev(0, "worker_start", w, protocol="new") for w in ("w2", "w3")),
        _ev(0, "run", "w2", connector="B", task=-1),
        _ev(1_000, "worker_crash", "w3", protocol="new"),
        _ev(2_000, "config", connectors={"A": 0, "B": 0}, offset=1),
        _ev(2_000, "assign", "w3", items=[["A", -1]]),
        _ev(1_000 + 9_000 + 15_000, "run", "w2", connector="A", task=-1),
    ]
    assert check(events).max_unowned_ms == 15_000
    late = [*events[:-1], _ev(1_000 + 9_000 + 15_001, "run", "w2", connector="A", task=-1)]
    assert not check(late).live
    # Dealt after the detection: nothing to wait for.
    after = [
        *events[:6],
        _ev(10_000, "config", connectors={"A": 0, "B": 0}, offset=1),
        _ev(10_000, "assign", "w3", items=[["A", -1]]),
        _ev(25_001, "run", "w2", connector="A", task=-1),
    ]
    assert not check(after).live


def test_a_stop_while_the_bridge_is_down_is_a_silent_failure() -> None:
    """w3 stops (with a LeaveGroup) while the bridge is down: the LeaveGroup is never heard, so its
    member lingers until the restarted bridge's detection (a first session as long as a parked
    JoinGroup, then the grace); A, dealt to that member after the bridge is back, waits for it.
    Seen in fleet drill 94000282001682, where w0 stopped while the bridge was paused for a takeover
    and a connector added later was dealt to its old member (that drill also passes on the rule
    above alone: w0's next process was parked at the paused bridge too)."""
    back = 500 + reload_detection_ms(TIMING)  # could-run time at bridge_up is 500 ms
    events = [
        TIMING,
        _ev(0, "config", connectors={"B": 0}, offset=0),
        *(_ev(0, "worker_start", w, protocol="compatible") for w in ("w2", "w3")),
        _ev(0, "run", "w2", connector="B", task=-1),
        _ev(500, "bridge_restart"),
        _ev(1_000, "worker_stop", "w3", protocol="compatible"),
        _ev(1_500, "bridge_up"),
        _ev(2_000, "config", connectors={"A": 0, "B": 0}, offset=1),
        _ev(2_000, "assign", "w3", items=[["A", -1]]),
        _ev(back + 1_000 + 15_000, "run", "w2", connector="A", task=-1),
    ]
    assert check(events).max_unowned_ms == 15_000
    heard = [{**e, "t_ms": 1_600} if e["type"] == "worker_stop" else e for e in events]
    heard.sort(key=lambda e: e["t_ms"])
    assert not check(heard).live  # the same stop once the bridge is up is heard at once


def test_a_silent_failure_during_the_first_sessions_after_a_reload_waits_for_them() -> None:
    """The bridge is back at 1.5 s and w3 crashes at 2 s running A. The reloaded coordinator gives
    every member it has not heard from since the load its first session after a load
    (``holds.first_session_after_load_ms``: as long as a JoinGroup parked at the previous bridge),
    so w3's crash is found out at the end of that first session plus the grace, not a session
    after the crash: A's clock starts then (docs/drills.md, "the bound after a bridge restart").
    Fleet drills of 97000000 judged such a crash by session + grace and flagged the bridge."""
    back = 500 + reload_detection_ms(TIMING)  # could-run time at bridge_up is 500 ms
    events = [
        TIMING,
        _ev(0, "config", connectors={"A": 0, "B": 0}, offset=0),
        *(_ev(0, "worker_start", w, protocol="compatible") for w in ("w2", "w3")),
        _ev(0, "run", "w2", connector="B", task=-1),
        _ev(0, "run", "w3", connector="A", task=-1),
        _ev(500, "bridge_restart"),
        _ev(1_500, "bridge_up"),
        _ev(2_000, "worker_crash", "w3", protocol="compatible"),
        _ev(back + 1_000 + 15_000, "run", "w2", connector="A", task=-1),
    ]
    assert check(events).max_unowned_ms == 15_000
    late = [*events[:-1], _ev(back + 1_000 + 15_001, "run", "w2", connector="A", task=-1)]
    assert not check(late).live
    # A crash after those first sessions ended is judged by session + grace again.
    after = [
        *events[:8],
        _ev(back + 1_000, "worker_crash", "w3", protocol="compatible"),
        _ev(back + 1_000 + 9_000 + 15_000, "run", "w2", connector="A", task=-1),
    ]
    assert check(after).max_unowned_ms == 15_000
