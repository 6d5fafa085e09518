"""A hand-made drill log with one of every scenario action and an overlap, for the report tests."""

from __future__ import annotations

from pathlib import Path

from connect_bridge.drills.events import EventLog

NAME = "actions-and-overlap"
EXPECTED_ACTIONS = [
    (500, "join", "w3", "eager"),
    (1000, "stop", "w2", "eager"),
    (2000, "upgrade", "w2", "eager → new"),
    (5000, "crash", "w1", "eager"),
    (6000, "restart", "w1", "eager"),
    (6500, "bridge restart", None, None),
    (7000, "config change", None, None),
    (7200, "stall", "w3", None),
    (7600, "stop", "w2", "new"),
    (7700, "downgrade", "w2", "new → sessioned"),
]
"""``(t_ms, kind, worker, detail)`` the report must derive from :func:`actions_log`."""


def actions_log() -> EventLog:
    """w1 runs connector ``c`` (instance and task 0); w2, upgraded to ``new``, starts task 0 while
    w1 still runs it: an overlap of 1 s. Then a crash, a restart, a bridge restart, a config change
    (a second task), a stall and a downgrade. Starts at t=0 are the initial cluster (no action)."""
    log = EventLog()
    log.config(0, {"c": 1}, offset=0)
    log.worker_start(0, "w1", "eager")
    log.worker_start(0, "w2", "eager")
    log.run(0, "w1", ("c", -1))
    log.run(0, "w1", ("c", 0))
    log.worker_start(500, "w3", "eager")
    log.worker_stop(1000, "w2", "eager")
    log.worker_start(2000, "w2", "new")
    log.epoch(2000, "w2", 1)
    log.run(3000, "w2", ("c", 0))
    log.release(4000, "w1", ("c", 0))
    log.worker_crash(5000, "w1", "eager")
    log.worker_start(6000, "w1", "eager")
    log.run(6100, "w1", ("c", -1))
    log.bridge_restart(6500)
    log.config(7000, {"c": 2}, offset=1)
    log.run(7100, "w3", ("c", 1))
    log.stall_start(7200, "w3", "pause")
    log.worker_stop(7600, "w2", "new")
    log.worker_start(7700, "w2", "sessioned")
    log.run(7800, "w2", ("c", 0))
    log.drill_end(9000)
    return log


def write_actions_drill(root: Path) -> Path:
    """``root/NAME/events.jsonl``; returns the drill directory."""
    directory = root / NAME
    directory.mkdir(parents=True, exist_ok=True)
    actions_log().write_jsonl(directory / "events.jsonl")
    return directory
