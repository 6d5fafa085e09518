"""The PySpark pipeline (``analyze``) computes exactly the checker's numbers (docs/pipeline.md).

One Spark session, few pipeline runs: every drill (sim runs of the examples and of random scenarios,
hand-made logs with injected faults) goes through one ``analyze`` call, and its per-drill numbers
must equal ``drills.checker.check(events, name)``. Files are split into many small partitions in
that run, so event order across splits is exercised too.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("matplotlib")

from connect_bridge.cli import main as cli_main
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.drills.checker import check
from connect_bridge.drills.events import EventLog, EventLogError
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.scenario import load_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline import analyze as pipeline
from connect_bridge.pipeline.schema import DRILL_NUMBERS, EVENT_COLUMNS, write_events_parquet

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
A = ConnectorTaskId("A", -1)
A0, A1, A2 = (ConnectorTaskId("A", i) for i in range(3))
B = ConnectorTaskId("B", -1)
B0, B1 = ConnectorTaskId("B", 0), ConnectorTaskId("B", 1)
C, D = ConnectorTaskId("C", -1), ConnectorTaskId("D", -1)
D0, D1, D2 = (ConnectorTaskId("D", i) for i in range(3))
NUMBERS = DRILL_NUMBERS


def _log(*workers: str, connectors: dict[str, int] | None = None) -> EventLog:
    log = EventLog()
    if connectors is not None:
        log.config(0, connectors, offset=1)
    for w in workers:
        log.worker_start(0, w, "new")
    return log


def _hand_made() -> dict[str, list[dict[str, Any]]]:
    """The checker's hand-written cases (tests/test_checker.py) and a few more, by drill name."""
    logs: dict[str, EventLog] = {}

    log = logs["handover"] = _log("w1", "w2", connectors={"A": 1})
    log.run(1000, "w1", A)
    log.run(1000, "w1", A0)
    log.epoch(1000, "w1", 1)
    log.release(5000, "w1", A0)
    log.run(5000, "w2", A0)
    log.epoch(5000, "w2", 2)
    log.drill_end(10000)

    log = logs["injected-overlap"] = _log("w1", "w2", "w3", connectors={"A": 0})
    log.run(0, "w1", A)
    log.run(2000, "w2", A)
    log.run(3000, "w3", A)
    log.release(5000, "w1", A)
    log.release(6000, "w2", A)
    log.drill_end(8000)

    log = logs["overlap-open-at-end"] = _log("w1", "w2", connectors={"A": 0})
    log.run(0, "w1", A)
    log.run(1000, "w2", A)
    log.drill_end(4000)

    log = logs["release-then-run"] = _log("w1", "w2", connectors={"A": 0})
    log.run(0, "w1", A)
    log.release(1000, "w1", A)
    log.run(1000, "w2", A)

    log = logs["run-then-release"] = _log("w1", "w2", connectors={"A": 0})
    log.run(0, "w1", A)
    log.run(1000, "w2", A)
    log.release(1000, "w1", A)

    log = logs["gaps-and-crash"] = _log("w1", connectors={"A": 2})
    log.run(100, "w1", A)
    log.run(100, "w1", A0)
    log.run(300, "w1", A1)
    log.worker_crash(1000, "w1", "new")
    log.worker_start(1500, "w2", "new")
    for item in (A, A0, A1):
        log.run(2000, "w2", item)
    log.drill_end(2500)

    for ending in ("worker_stop", "worker_crash"):
        log = logs[f"{ending}-ends-items"] = _log("w1", "w2", connectors={"A": 1})
        log.run(0, "w1", A)
        log.run(0, "w1", A0)
        getattr(log, ending)(1000, "w1", "new")
        log.run(1000, "w2", A0)
        log.run(4000, "w2", A)

    log = logs["crash-during-overlap"] = _log("w1", "w2", "w3", connectors={"A": 1})
    log.run(0, "w1", A)
    log.run(0, "w1", A0)
    log.run(500, "w2", A0)  # overlap 500..800 (w1 crashes)
    log.worker_crash(800, "w1", "new")  # A unassigned from 800
    log.run(900, "w3", A)
    log.worker_crash(900, "w3", "new")  # and again from 900 (same t_ms: order matters)
    log.worker_start(1200, "w1", "new")
    log.run(1200, "w1", A)  # not a move? w3 ran it last: a move
    log.run(1300, "w2", A)  # overlap open until the end
    log.drill_end(2000)

    logs["configured-never-run"] = _log("w1", connectors={"A": 0})
    logs["configured-never-run"].drill_end(7000)

    log = logs["removed-connector"] = _log("w1", connectors={"A": 0, "B": 1})
    for item in (A, B, B0):
        log.run(0, "w1", item)
    log.release(500, "w1", B0)
    log.release(500, "w1", B)
    log.config(1000, {"A": 0}, offset=2)
    log.drill_end(5000)

    log = logs["removed-and-re-added"] = _log("w1", connectors={"A": 0, "B": 1})
    for item in (A, B, B0):
        log.run(0, "w1", item)
    log.release(500, "w1", B0)
    log.release(500, "w1", B)
    log.config(1000, {"A": 0}, offset=2)
    log.config(2000, {"A": 0, "B": 0}, offset=3)
    log.config(2500, {"A": 0, "B": 2}, offset=4)  # B-0, B-1 enter
    log.run(3000, "w1", B0)
    log.config(3500, {"A": 0, "B": 2}, offset=5)  # same config again: no change
    log.config(4000, {"A": 1}, offset=6)  # B and its tasks leave (B-0 still running), A-0 enters
    log.drill_end(5000)

    log = logs["removed-still-running"] = _log("w1", "w2", connectors={"A": 0, "B": 1})
    log.run(0, "w1", A)
    log.run(0, "w2", B)
    log.run(0, "w2", B0)
    log.config(1000, {"A": 0, "B": 0}, offset=2)
    log.drill_end(5000)

    log = logs["run-before-config"] = _log("w1")
    log.run(1000, "w1", A)
    log.config(1500, {"A": 0, "C": 0}, offset=1)
    log.drill_end(2000)

    log = logs["not-live-worker"] = _log(connectors={"A": 0})
    log.run(0, "ghost", A)

    log = logs["moves"] = _log("w1", "w2", connectors={"A": 1})
    log.run(0, "w1", A0)
    log.release(10, "w1", A0)
    log.run(20, "w1", A0)
    log.run(20, "w1", A0)
    log.release(30, "w1", A0)
    log.run(30, "w2", A0)
    log.release(40, "w2", A0)
    log.run(40, "w1", A0)
    log.run(40, "w2", A)
    log.release(50, "w9", A)
    log.drill_end(100)

    log = logs["repeated-run-while-overlapping"] = _log("w1", "w2", connectors={"A": 0})
    log.run(0, "w1", A)
    log.run(10, "w2", A)
    log.run(20, "w1", A)  # no-op: w1 runs it (last runner stays w2)
    log.release(30, "w2", A)
    log.run(40, "w2", A)  # a move (last runner w2? no: w2 itself), overlap again
    log.worker_stop(50, "w2")
    log.worker_stop(60, "w2")  # stopping twice: nothing more

    log = logs["unbalanced"] = _log("w1", "w2", connectors={"A": 0, "B": 0, "C": 0, "D": 3})
    for item in (A, B, C):
        log.run(0, "w1", item)
    for item in (D, D0, D1, D2):
        log.run(0, "w2", item)

    log = logs["off-by-one-unbalanced"] = _log("w1", "w2", "w3", connectors={"A": 2, "B": 0})
    for w, item in (("w1", A), ("w1", B), ("w1", A0), ("w3", A1)):
        log.run(0, w, item)
    log = logs["off-by-one-balanced"] = _log("w1", "w2", "w3", connectors={"A": 2, "B": 0})
    for w, item in (("w1", A), ("w1", A0), ("w2", B), ("w3", A1)):
        log.run(0, w, item)

    log = logs["unknown-types"] = _log(connectors={"A": 0})
    log.bridge_restart(3000)
    log.emit(4000, "something_new", "w1", detail=1)
    log.group(4000, "connect", 3)

    log = logs["thirty-one-overlaps"] = _log(*(f"w{i}" for i in range(31)), connectors={"A": 0})
    for i in range(31):
        log.run(i, f"w{i}", A)

    log = logs["restarted-worker"] = _log("w1", "w2", connectors={"A": 1, "B": 1})
    for w, item in (("w1", A), ("w1", A0), ("w2", B), ("w2", B0)):
        log.run(0, w, item)
    log.worker_stop(100, "w2", "new")
    log.worker_start(200, "w2", "new")
    log.run(300, "w2", B)
    log.run(300, "w2", B0)
    log.epoch(300, "w2", 5)
    log.drill_end(1000)

    # Big enough to be split across many partitions; same-t_ms release/run order decides overlaps.
    log = logs["large-handover"] = _log("w1", "w2", connectors={"A": 0})
    for t in range(6000):
        log.run(t, ("w1", "w2")[t % 2], A)
        log.release(t, ("w1", "w2")[t % 2], A)
        log.epoch(t, "w1", t)
    log.run(6000, "w1", A)

    out = {name: list(log.events) for name, log in logs.items()}
    out["empty"] = []
    return out


def _all_drills() -> dict[str, list[dict[str, Any]]]:
    drills: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(EXAMPLES.glob("*.json")):
        scenario = load_scenario(path)
        drills[scenario.name] = list(run_scenario(scenario).events)
    for seed in range(12):
        drills[f"random-{seed}"] = list(run_scenario(random_scenario(seed)).events)
    drills.update(_hand_made())
    return drills


def _write_tree(root: Path, drills: dict[str, list[dict[str, Any]]]) -> None:
    """Drill directories in a nested tree; some named by summary.json, some by their directory."""
    for i, (name, events) in enumerate(drills.items()):
        directory = root / f"batch{i % 3}" / (name if i % 2 else f"dir-{i}")
        directory.mkdir(parents=True)
        log = EventLog()
        log.events.extend(events)
        log.write_jsonl(directory / "events.jsonl")
        if not i % 2:
            (directory / "summary.json").write_text(json.dumps({"name": name, "ok": None}))
    # Blank lines are skipped, as by iter_events.
    blank = root / "blank-lines"
    blank.mkdir()
    (blank / "events.jsonl").write_text(
        '\n{"t_ms":0,"type":"config","worker":null,"connectors":{"A":0},"offset":1}\n\n  \n'
        '{"t_ms":5,"type":"run","worker":"w1","connector":"A","task":-1}\n\n'
    )


def _expected(name: str, events: list[dict[str, Any]]) -> dict[str, Any]:
    doc = check(events, name=name).to_json()
    return {"name": name, **{k: doc[k] for k in NUMBERS}}


@pytest.fixture(scope="module")
def drills() -> dict[str, list[dict[str, Any]]]:
    return _all_drills()


@pytest.fixture(scope="module")
def tree(drills, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("logs")
    _write_tree(root, drills)
    return root


@pytest.fixture(scope="module")
def analyzed(spark, tree, tmp_path_factory) -> tuple[dict[str, Any], Path, float]:  # type: ignore[no-untyped-def]
    root = tree
    out = tmp_path_factory.mktemp("analysis")
    # Small splits: the large logs are read as many partitions, so order across splits matters.
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(64 * 1024))
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    started = time.monotonic()
    try:
        doc = pipeline.analyze([root], out, spark=spark, chart_drills=4)
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
    return doc, out, time.monotonic() - started


def test_every_drill_matches_the_checker(analyzed, drills) -> None:  # type: ignore[no-untyped-def]
    doc, _, _ = analyzed
    expected = {name: _expected(name, events) for name, events in drills.items()}
    expected["blank-lines"] = _expected(
        "blank-lines",
        [
            {"t_ms": 0, "type": "config", "worker": None, "connectors": {"A": 0}, "offset": 1},
            {"t_ms": 5, "type": "run", "worker": "w1", "connector": "A", "task": -1},
        ],
    )
    got = {d["name"]: d for d in doc["drills"]}
    assert sorted(got) == sorted(expected)
    mismatches = {n: (got[n], expected[n]) for n in expected if got[n] != expected[n]}
    assert not mismatches
    # The hand-made faults really are in there (the comparison is not vacuous).
    assert got["injected-overlap"]["overlaps"] == 2 and got["injected-overlap"]["overlap_ms"] == 4000
    assert got["run-then-release"]["overlaps"] == 1 and got["release-then-run"]["overlaps"] == 0
    assert got["gaps-and-crash"]["unassigned_item_ms"] == 3500
    assert got["removed-still-running"]["converged"] is False
    assert got["large-handover"]["overlaps"] == 0 and got["large-handover"]["moves"] == 6000


def test_summary_json_and_totals(analyzed, drills) -> None:  # type: ignore[no-untyped-def]
    doc, out, _ = analyzed
    assert json.loads((out / "summary.json").read_text()) == doc
    assert set(doc) == {"drills", "totals"}
    for entry in doc["drills"]:
        assert list(entry) == list(pipeline.DRILL_KEYS)
    totals = doc["totals"]
    checked = [check(events, name=name) for name, events in drills.items()]
    assert totals["drills"] == len(drills) + 1
    assert totals["moves"] == sum(d["moves"] for d in doc["drills"]) == sum(s.moves for s in checked)
    assert totals["ok"] == sum(s.ok for s in checked)  # blank-lines runs A on a worker never started
    assert totals["converged"] == sum(s.converged for s in checked)
    assert totals["events"] == sum(s.events for s in checked) + 2


def test_outputs_exist_and_link(analyzed) -> None:  # type: ignore[no-untyped-def]
    import pandas as pd

    doc, out, _ = analyzed
    drills = pd.read_parquet(out / "drills.parquet")
    assert sorted(drills["drill"]) == sorted(d["name"] for d in doc["drills"])
    items = pd.read_parquet(out / "items.parquet")
    assert {"drill", "connector", "task", "moves", "unassigned_item_ms", "converged"} <= set(items.columns)
    by_drill = items.groupby("drill")["unassigned_item_ms"].sum()
    assert by_drill["gaps-and-crash"] == 3500
    # its longest single stretch: every item ran nowhere from w1's crash (1,000) to w2's runs (2,000)
    longest = drills.set_index("drill")["longest_unassigned_ms"]
    per_item = items.groupby("drill")["longest_unassigned_ms"].max()
    assert longest["gaps-and-crash"] == per_item["gaps-and-crash"]
    assert longest["gaps-and-crash"] == 1000 and doc["totals"]["longest_unassigned_ms"] == longest.max()
    intervals = pd.read_parquet(out / "intervals.parquet")
    assert list(intervals.columns) == ["drill", "connector", "task", "worker", "start_ms", "end_ms", "open"]
    handover = intervals[intervals["drill"] == "handover"].sort_values(["task", "start_ms"])
    assert handover[["task", "worker", "start_ms", "end_ms", "open"]].values.tolist() == [
        [-1, "w1", 1000, 10000, True],
        [0, "w1", 1000, 5000, False],
        [0, "w2", 5000, 10000, True],
    ]
    pngs = sorted((out / "charts").glob("*.png"))
    assert len(pngs) == 1 + 2 * 4  # fleet histograms + timeline and ownership of 4 drills
    for png in pngs:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000
    page = (out / "index.html").read_text()
    links = re.findall(r'(?:href|src)="([^"#]+)"', page)
    assert "summary.json" in links and "charts/fleet.png" in links
    for link in links:
        assert (out / link).exists(), link
    assert page.count("<img ") == 3  # the fleet's histograms and the worst drill's two charts
    assert "injected-overlap" in page
    pages = sorted((out / "drills").glob("*.html"))
    assert len(pages) == len(doc["drills"])
    shown = []
    for drill_page in pages:
        for link in re.findall(r'(?:href|src)="([^"#]+)"', drill_page.read_text()):
            assert (drill_page.parent / link).exists(), (drill_page.name, link)
            shown += [link] if link.endswith(".png") else []
    assert sorted({Path(link).name for link in shown}) == [p.name for p in pngs if p.name != "fleet.png"]


def test_parquet_input_gives_the_same_numbers(spark, analyzed, drills, tmp_path) -> None:  # type: ignore[no-untyped-def]
    doc, _, _ = analyzed
    names = sorted(drills)
    fleet = tmp_path / "fleet"
    write_events_parquet({n: drills[n] for n in names[::2]}, fleet / "part-0.parquet")
    write_events_parquet({n: drills[n] for n in names[1::2]}, fleet / "part-1.parquet")
    result = pipeline.run(spark, [fleet])
    got = {r["name"]: {k: r[k] for k in pipeline.DRILL_KEYS} for r in result.drills}
    want = {d["name"]: d for d in doc["drills"] if d["name"] in drills and d["name"] != "empty"}
    assert got == want  # an empty drill has no rows in a table, so it is not a drill there


def _table(path: Path) -> list[tuple[Any, ...]]:
    import pandas as pd

    frame = pd.read_parquet(path)
    return sorted(
        frame.astype(object).where(frame.notna(), None).itertuples(index=False, name=None), key=repr
    )


def test_the_by_drill_engine_writes_the_same_outputs(spark, analyzed, tree, tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A big input is analyzed by drill with pandas in the executors (``pipeline.by_drill``): the
    same inputs through that engine give the same summary, tables and report as the DataFrame plan.
    (Its tables get their drill names through the join that many renamed drills take.)"""
    doc, out, _ = analyzed
    monkeypatch.setattr(pipeline, "MAPPED_NAMES", 0)
    by_drill = tmp_path / "by-drill"
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(64 * 1024))
    spark.conf.set("spark.sql.files.openCostInBytes", "0")
    try:
        got = pipeline.analyze([tree], by_drill, spark=spark, chart_drills=4, engine="by-drill")
    finally:
        spark.conf.unset("spark.sql.files.maxPartitionBytes")
        spark.conf.unset("spark.sql.files.openCostInBytes")
    assert got == doc
    assert (by_drill / "summary.json").read_text() == (out / "summary.json").read_text()
    for table in ("drills.parquet", "items.parquet", "intervals.parquet"):
        want = _table(out / table)
        assert want and _table(by_drill / table) == want, table
    assert (by_drill / "index.html").read_text() == (out / "index.html").read_text()
    assert sorted(p.name for p in (by_drill / "charts").glob("*.png")) == sorted(
        p.name for p in (out / "charts").glob("*.png")
    )


def test_the_by_drill_engine_reads_parquet_whole_or_shuffled(spark, drills, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Drills that lie in one Parquet file each are analyzed as read (whole files per partition, no
    shuffle); a drill split over two files makes the engine shuffle by drill. Same numbers as the
    DataFrame plan either way."""
    from connect_bridge.pipeline import by_drill

    names = sorted(n for n in drills if drills[n])
    whole, split = tmp_path / "whole", tmp_path / "split"
    write_events_parquet({n: drills[n] for n in names[::2]}, whole / "part-0.parquet")
    write_events_parquet({n: drills[n] for n in names[1::2]}, whole / "part-1.parquet")
    big = max(names, key=lambda n: len(drills[n]))
    half = len(drills[big]) // 2
    write_events_parquet({n: drills[n] for n in names if n != big}, split / "part-0.parquet")
    write_events_parquet({big: drills[big][:half]}, split / "part-1.parquet")
    # the second half keeps its positions in the drill (seq = index in the log)
    import pyarrow.parquet as pq

    write_events_parquet({big: drills[big][half:]}, split / "part-2.parquet")
    tail = pq.read_table(str(split / "part-2.parquet"))
    tail = tail.set_column(1, "seq", [[i + half for i in tail.column("seq").to_pylist()]])
    pq.write_table(tail, str(split / "part-2.parquet"))
    assert by_drill.layout([], [whole]).whole and not by_drill.layout([], [split]).whole
    for path in (whole, split):
        want = pipeline.run(spark, [path], engine="sql")
        got = pipeline.run(spark, [path], engine="by-drill")
        assert got.drills == want.drills and got.notes == want.notes
        for table in ("items", "intervals"):
            rows = sorted(map(tuple, getattr(want, table).collect()), key=repr)
            assert rows and sorted(map(tuple, getattr(got, table).collect()), key=repr) == rows
    # no drill renamed: the tables the executors wrote are moved into the outputs
    outputs = {e: tmp_path / f"out-{e}" for e in ("sql", "by-drill")}
    docs = [pipeline.analyze([whole], o, spark=spark, chart_drills=1, engine=e) for e, o in outputs.items()]
    assert docs[0] == docs[1]
    for table in ("drills.parquet", "items.parquet", "intervals.parquet"):
        assert _table(outputs["by-drill"] / table) == _table(outputs["sql"] / table), table
    assert not list(outputs["by-drill"].glob("_tables-*"))


MALFORMED = {
    "backwards": '{"t_ms":5,"type":"run","worker":"w","connector":"A","task":0}\n'
    '{"t_ms":4,"type":"release","worker":"w","connector":"A","task":0}\n',
    "no-time": '{"t_ms":5,"type":"run","worker":"w","connector":"A","task":0}\n{"type":"release"}\n',
    "no-type": '{"t_ms":5}\n',
    "no-connector": '{"t_ms":5,"type":"run","worker":"w","task":0}\n',
    "no-task": '{"t_ms":5,"type":"release","worker":"w","connector":"A"}\n',
    "no-worker": '{"t_ms":5,"type":"run","connector":"A","task":0}\n',
    "bad-config": '{"t_ms":0,"type":"config","connectors":[1]}\n{"t_ms":1,"type":"config"}\n',
    "instance-backwards": '{"t_ms":9,"type":"run","worker":"w2","connector":"B","task":-1}\n'
    '{"t_ms":3,"type":"run","worker":"w2","connector":"B","task":-1}\n',
    "null-worker-backwards": '{"t_ms":9,"type":"release","connector":"B","task":-1}\n'
    '{"t_ms":3,"type":"release","connector":"B","task":-1}\n',
    "merged": '{"t_ms":9,"type":"run","worker":"w2","connector":"B","task":-1}\n'
    '{"t_ms":3,"type":"run","worker":"w1","connector":"B","task":0}\n',
}
"""Logs the checker rejects (every rule of ``metrics.problems``), and two it accepts after sorting."""


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_the_by_drill_engine_checks_logs_like_the_dataframe_plan(spark, tmp_path, name) -> None:  # type: ignore[no-untyped-def]
    drill = tmp_path / name
    drill.mkdir()
    (drill / "events.jsonl").write_text(MALFORMED[name])
    (tmp_path / "fine").mkdir()
    (tmp_path / "fine" / "events.jsonl").write_text('{"t_ms":1,"type":"worker_start","worker":"w"}\n')

    def outcome(engine: str) -> Any:
        try:
            result = pipeline.run(spark, [tmp_path], engine=engine)
        except EventLogError as e:
            return str(e)
        return result.drills, result.notes

    sql = outcome("sql")
    assert outcome("by-drill") == sql
    assert isinstance(sql, str) == (not name.endswith(("merged", "null-worker-backwards"))), sql


def test_schema_is_the_fleet_table() -> None:
    assert EVENT_COLUMNS == (
        "drill",
        "seq",
        "t_ms",
        "type",
        "worker",
        "connector",
        "task",
        "protocol",
        "epoch",
        "group_type",
        "group_epoch",
        "connectors",
        "offset",
    )


def test_malformed_log_is_rejected_like_the_checker(spark, tmp_path) -> None:  # type: ignore[no-untyped-def]
    bad = tmp_path / "backwards"
    bad.mkdir()
    (bad / "events.jsonl").write_text(  # a release before its own run: sorting cannot repair it
        '{"t_ms":5,"type":"run","worker":"w","connector":"A","task":0}\n'
        '{"t_ms":4,"type":"release","worker":"w","connector":"A","task":0}\n'
    )
    with pytest.raises(EventLogError, match=r"drill 'backwards': event 1 \(release\): release of A-0 by w"):
        pipeline.run(spark, [bad])
    (tmp_path / "nothing-here").mkdir()
    with pytest.raises(pipeline.AnalyzeError, match=r"no events\.jsonl"):
        pipeline.find_inputs([tmp_path / "nothing-here"])
    with pytest.raises(pipeline.AnalyzeError, match="no such file"):
        pipeline.find_inputs([tmp_path / "missing"])


def test_cli_analyze(spark, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    scenario = load_scenario(EXAMPLES / "crash-no-return-new.json")
    drill = tmp_path / "drill"
    drill.mkdir()
    run_scenario(scenario).write_jsonl(drill / "events.jsonl")
    out = tmp_path / "out"
    assert cli_main(["analyze", str(drill / "events.jsonl"), "--out", str(out), "--charts", "1"]) == 0
    captured = capsys.readouterr()
    totals = json.loads(captured.out)
    assert totals["drills"] == 1 and totals["ok"] == 1
    assert "computing" not in captured.err  # stderr is not a terminal: no progress (tests/test_progress.py)
    doc = json.loads((out / "summary.json").read_text())
    assert doc["drills"] == [_expected("drill", list(run_scenario(scenario).events))]
    assert cli_main(["analyze", str(tmp_path / "missing"), "--out", str(out)]) == 1
