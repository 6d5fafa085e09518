"""Event logs concatenated from several workers' files: sorted by ``t_ms``, judged alike everywhere.

A merged log is not in time order, but each worker's file was. The checker (``check``,
``check_file``), ``analyze`` (Spark) and the pandas baseline all sort it by ``t_ms`` (stable for
equal times), give the numbers of the ordered log and say so in a note; a log that contradicts
itself (a release before its own run, once sorted) is still an error that names the line.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.drills.checker import check, check_file
from connect_bridge.drills.events import EventLog, EventLogError

A = ConnectorTaskId("A", -1)
A0, A1 = ConnectorTaskId("A", 0), ConnectorTaskId("A", 1)
NUMBERS = ("events", "overlaps", "overlap_ms", "converged", "balanced", "moves", "rebalances")
NUMBERS += ("unassigned_item_ms",)


def _ordered() -> list[dict[str, Any]]:
    """Two workers hand work over; every time is distinct across workers, so sorting the merged
    files gives back exactly this order."""
    log = EventLog()
    log.config(0, {"A": 2}, offset=1)
    log.worker_start(1, "w1", "new")
    for t, item in ((2, A), (3, A0), (4, A1)):
        log.run(t, "w1", item)
    log.worker_start(10, "w2", "new")
    log.epoch(11, "w1", 2)
    log.release(12, "w1", A1)
    log.run(15, "w2", A1)
    log.epoch(16, "w2", 3)
    log.worker_stop(20, "w1")
    log.run(25, "w2", A)
    log.run(27, "w2", A0)
    log.drill_end(30)
    return list(log.events)


def _merged(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """w2's (and the coordinator's) file, then w1's: what ``cat */events.jsonl`` would give."""
    return [e for e in events if e["worker"] != "w1"] + [e for e in events if e["worker"] == "w1"]


def _write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(e) + "\n" for e in events), encoding="utf-8")
    return path


def _moved(events: list[dict[str, Any]]) -> int:
    by_time = sorted(events, key=lambda e: e["t_ms"])
    return sum(1 for a, b in zip(events, by_time, strict=True) if a is not b)


def _numbers(summary: dict[str, Any]) -> dict[str, Any]:
    return {k: summary[k] for k in NUMBERS}


def test_the_merged_log_is_out_of_order() -> None:
    merged = _merged(_ordered())
    assert any(b["t_ms"] < a["t_ms"] for a, b in itertools.pairwise(merged))
    assert _moved(merged) > 0


def test_checker_sorts_a_merged_log(tmp_path: Path) -> None:
    ordered = _ordered()
    want = check(ordered, name="d").to_json()
    assert "notes" not in want  # an ordered log reads as before
    merged = _merged(ordered)
    note = f"was not in time order: sorted by t_ms ({_moved(merged)} events moved)"
    from_list = check(merged, name="d").to_json()
    from_file = check_file(_write(tmp_path / "d" / "events.jsonl", merged)).to_json()
    for got in (from_list, from_file):
        assert {k: v for k, v in got.items() if k != "notes"} == want
    assert from_list["notes"] == [f"the event log {note}"]
    assert from_file["notes"] == [f"events.jsonl {note}"]


def test_a_one_shot_stream_out_of_order_is_an_error() -> None:
    backwards = r"^event 7 \(worker_start\): t_ms 1 is before the previous event's 30"
    with pytest.raises(EventLogError, match=backwards):
        check(iter(_merged(_ordered())))


def _contradicting() -> list[dict[str, Any]]:
    """w1's own file says it released A-0 (t_ms 4) after running it (t_ms 5): sorted, the release
    would come first. Merged after w2's file, so the log is out of order anyway."""
    w2 = [{"t_ms": 0, "type": "worker_start", "worker": "w2", "protocol": "new"}]
    w1 = [
        {"t_ms": 1, "type": "worker_start", "worker": "w1", "protocol": "new"},
        {"t_ms": 5, "type": "run", "worker": "w1", "connector": "A", "task": 0},
        {"t_ms": 4, "type": "release", "worker": "w1", "connector": "A", "task": 0},
    ]
    return [*w2, {"t_ms": 9, "type": "epoch", "worker": "w2", "epoch": 1}, *w1]


def test_checker_names_the_line_of_a_contradiction(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad" / "events.jsonl", _contradicting())
    with pytest.raises(EventLogError) as info:
        check_file(path)
    message = str(info.value)
    assert message.startswith(
        f"{path}: line 5 (release): release of A-0 by w1 at t_ms 4 is before the run at line 4 (t_ms 5)"
    )
    assert "contradicts itself" in message
    at_event = r"^event 4 \(release\): release of A-0 by w1 at t_ms 4 is before the run at event 3"
    with pytest.raises(EventLogError, match=at_event):
        check(_contradicting())


def _tree(root: Path) -> dict[str, list[dict[str, Any]]]:
    """Two drills: the ordered log and its merged form."""
    ordered = _ordered()
    drills = {"ordered": ordered, "merged": _merged(ordered)}
    for name, events in drills.items():
        _write(root / name / "events.jsonl", events)
    return drills


def test_analyze_and_the_baseline_agree_with_the_checker(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("matplotlib")
    from connect_bridge.pipeline import analyze as pipeline
    from connect_bridge.pipeline.baseline import analyze_pandas

    drills = _tree(tmp_path / "logs")
    result = pipeline.run(spark, [tmp_path / "logs"])
    doc = pipeline.summary_doc(result)
    want = _numbers(check(drills["ordered"]).to_json())
    assert {d["name"]: _numbers(d) for d in doc["drills"]} == {"merged": want, "ordered": want}
    moved = _moved(drills["merged"])
    assert doc["notes"] == [
        f"drill 'merged': events.jsonl was not in time order: sorted by t_ms ({moved} events moved)"
    ]
    assert analyze_pandas([tmp_path / "logs"]) == doc


def test_analyze_names_the_event_of_a_contradiction(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from connect_bridge.pipeline import analyze as pipeline

    _write(tmp_path / "bad" / "events.jsonl", _contradicting())
    with pytest.raises(EventLogError) as info:
        pipeline.run(spark, [tmp_path / "bad"])
    message = str(info.value)
    assert message.startswith(
        "drill 'bad': event 4 (release): release of A-0 by w1 at t_ms 4 is before the run at event 3 (t_ms 5)"
    )
    assert "contradicts itself" in message
