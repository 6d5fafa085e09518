"""``rolling_figures`` of benchmarks/rolling_restart_three_ways.py on hand-made event logs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from rolling_restart_three_ways import rolling_figures


def run(t: int, worker: str, task: int, connector: str = "a") -> dict[str, Any]:
    return {"t_ms": t, "type": "run", "worker": worker, "connector": connector, "task": task}


def release(t: int, worker: str, task: int, connector: str = "a") -> dict[str, Any]:
    return {"t_ms": t, "type": "release", "worker": worker, "connector": connector, "task": task}


def stop(t: int, worker: str) -> dict[str, Any]:
    return {"t_ms": t, "type": "worker_stop", "worker": worker}


def test_a_task_back_on_its_restarted_owner_is_a_move_but_not_a_foreign_one() -> None:
    events = [
        run(0, "w0", 0),
        run(0, "w1", 1),
        run(0, "w0", -1),  # the connector does not count
        # w0 restarts: task 0 goes to w1 for a while, then back to w0
        stop(1000, "w0"),
        run(1500, "w1", 0),
        release(4000, "w1", 0),
        run(4200, "w0", 0),
        # w1 restarts: task 1 lands on w0 for good
        stop(5000, "w1"),
        run(8000, "w0", 1),
    ]
    figures = rolling_figures(events, start_ms=500, end_ms=10_000)
    assert figures == {
        "task_seconds_not_running": 3.7,  # 0.5 + 0.2 + 3.0
        "moves": 3,
        "foreign_moves": 2,  # task 0 to w1, task 1 to w0
        "longest_pause_s": 3.0,
    }


def test_the_window_clips_pauses_and_counts_what_is_still_not_running() -> None:
    events = [run(0, "w0", 0), stop(100, "w0"), run(2000, "w1", 0), stop(9000, "w1")]
    figures = rolling_figures(events, start_ms=1000, end_ms=10_000)
    # 1000..2000 before it ran again (the start is clipped), 9000..10000 at the end
    assert figures["task_seconds_not_running"] == 2.0
    assert figures["longest_pause_s"] == 1.0
    # it last ran on w0 and had no home when the window began: a foreign move
    assert (figures["moves"], figures["foreign_moves"]) == (1, 1)
