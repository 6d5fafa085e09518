"""Fleet drills (``drill fleet``, ``pipeline.fleet``) and the pandas baseline (``pipeline.baseline``).

One 60-drill fleet runs in the executors of the shared local session and must keep every
invariant; its Parquet-based numbers must equal the checker's on the same scenarios' sim events.
The failed-drill path is exercised by making analyze report a drill as broken: its scenario must
be written out and replayable.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("matplotlib")

from connect_bridge.cli import main as cli_main
from connect_bridge.drills.checker import check
from connect_bridge.drills.generate import random_scenario
from connect_bridge.drills.scenario import load_scenario
from connect_bridge.drills.sim import run_scenario
from connect_bridge.pipeline import baseline, fleet
from connect_bridge.pipeline.schema import DRILL_NUMBERS, write_events_parquet

COUNT = 60
SEED = 7
NUMBERS = DRILL_NUMBERS


def _checked(seed: int) -> dict[str, Any]:
    scenario = random_scenario(seed)
    doc = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms).to_json()
    return {"name": scenario.name, **{k: doc[k] for k in NUMBERS}}


@pytest.fixture(scope="module")
def fleet_run(spark, tmp_path_factory) -> tuple[dict[str, Any], Path]:  # type: ignore[no-untyped-def]
    out = tmp_path_factory.mktemp("fleet")
    return fleet.run_fleet(COUNT, SEED, out, spark=spark), out


def test_fleet_keeps_every_invariant(fleet_run) -> None:  # type: ignore[no-untyped-def]
    doc, out = fleet_run
    assert doc["failed"] == [], doc["failed"]
    assert doc["count"] == COUNT and doc["seed"] == SEED
    assert doc["drills_analyzed"] == COUNT and doc["missing_drills"] == 0
    t = doc["totals"]
    assert t["drills"] == t["ok"] == t["converged"] == t["balanced"] == t["exclusive"] == COUNT
    assert t["overlaps"] == 0 and t["events"] == doc["events"] > COUNT * 10
    assert json.loads((out / "fleet.json").read_text()) == doc
    assert not (out / "failed").exists()
    # the report and the partitioned event table
    report = out / "report"
    for name in ("index.html", "summary.json", "drills.parquet", "items.parquet", "intervals.parquet"):
        assert (report / name).exists(), name
    summary = json.loads((report / "summary.json").read_text())
    assert len(summary["drills"]) == COUNT
    partitions = sorted(p.name for p in (out / fleet.EVENTS_DIR).iterdir() if p.is_dir())
    expected = sorted(f"drill=random-{fleet.scenario_seed(SEED, i)}" for i in range(COUNT))
    assert partitions == expected


def test_fleet_numbers_equal_the_checker(fleet_run) -> None:  # type: ignore[no-untyped-def]
    _, out = fleet_run
    summary = {d["name"]: d for d in json.loads((out / "report" / "summary.json").read_text())["drills"]}
    for i in (0, 1, 29, 43, COUNT - 1):
        expected = _checked(fleet.scenario_seed(SEED, i))
        got = summary[expected["name"]]
        assert {"name": got["name"], **{k: got[k] for k in NUMBERS}} == expected


def test_pandas_baseline_reads_the_fleet_table(fleet_run) -> None:  # type: ignore[no-untyped-def]
    _, out = fleet_run
    spark_doc = json.loads((out / "report" / "summary.json").read_text())
    assert baseline.analyze_pandas([out / fleet.EVENTS_DIR]) == spark_doc


def _hand_made() -> dict[str, list[dict[str, Any]]]:
    """Logs that break each invariant (overlap open at the end, unconverged, unbalanced)."""
    cfg = {"t_ms": 0, "type": "config", "worker": None, "connectors": {"A": 1, "B": 0}, "offset": 1}

    def ev(t: int, kind: str, worker: str | None, **kw: Any) -> dict[str, Any]:
        return {"t_ms": t, "type": kind, "worker": worker, **kw}

    starts = [ev(0, "worker_start", w, protocol="new") for w in ("w1", "w2")]
    return {
        "overlap": [
            cfg,
            *starts,
            ev(10, "run", "w1", connector="A", task=-1),
            ev(20, "run", "w2", connector="A", task=-1),
            ev(30, "release", "w1", connector="A", task=-1),
            ev(30, "run", "w1", connector="A", task=0),
            ev(40, "run", "w2", connector="B", task=-1),
            ev(50, "epoch", "w2", epoch=3),
            ev(90, "drill_end", None),
        ],
        "crash-leaves-gap": [
            cfg,
            *starts,
            ev(10, "run", "w1", connector="A", task=-1),
            ev(10, "run", "w1", connector="A", task=0),
            ev(10, "run", "w2", connector="B", task=-1),
            ev(40, "worker_crash", "w1"),
            ev(70, "run", "w2", connector="A", task=0),
            {**cfg, "t_ms": 80, "connectors": {"A": 2, "B": 0}},
            ev(90, "drill_end", None),
        ],
        "unbalanced": [
            cfg,
            *starts,
            ev(10, "run", "w1", connector="A", task=-1),
            ev(10, "run", "w1", connector="B", task=-1),
            ev(10, "run", "w1", connector="A", task=0),
            ev(95, "group", None, group_type="connect", group_epoch=2),
        ],
    }


def test_pandas_baseline_equals_the_checker(tmp_path: Path) -> None:
    drills = _hand_made()
    for seed in range(5):
        scenario = random_scenario(seed)
        drills[scenario.name] = list(run_scenario(scenario).events)
    write_events_parquet(drills, tmp_path / "fleet" / "part-0.parquet")
    got = {d["name"]: d for d in baseline.analyze_pandas([tmp_path / "fleet"])["drills"]}
    for name, events in drills.items():
        doc = check(events, name=name).to_json()
        assert {k: got[name][k] for k in NUMBERS} == {k: doc[k] for k in NUMBERS}, name
    assert got["overlap"]["overlaps"] == 1
    assert not got["crash-leaves-gap"]["converged"] and not got["unbalanced"]["balanced"]
    # events.jsonl input gives the same numbers
    log_dir = tmp_path / "logs" / "overlap"
    log_dir.mkdir(parents=True)
    (log_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in drills["overlap"]))
    (jsonl,) = baseline.analyze_pandas([tmp_path / "logs"])["drills"]
    assert jsonl == {k: got["overlap"][k] for k in jsonl}


def test_pandas_baseline_reads_a_lone_empty_log_as_an_ok_drill(tmp_path: Path) -> None:
    """An empty events.jsonl on its own used to fail with KeyError('worker'): its marker row
    lacked the columns a log with events has."""
    (tmp_path / "quiet").mkdir()
    (tmp_path / "quiet" / "events.jsonl").write_text("")
    doc = baseline.analyze_pandas([tmp_path])
    (drill,) = doc["drills"]
    assert drill["name"] == "quiet" and drill["events"] == 0 and drill["converged"] and drill["balanced"]
    assert doc["totals"]["ok"] == 1


def test_failed_drill_is_written_out_and_replayable(spark, tmp_path, monkeypatch, capsys) -> None:  # type: ignore[no-untyped-def]
    real_analyze = fleet.analyze
    seed, count = 11, 3
    broken = f"random-{fleet.scenario_seed(seed, 1)}"

    def analyze_with_a_broken_drill(*args: Any, **kwargs: Any) -> dict[str, Any]:
        doc = real_analyze(*args, **kwargs)
        for entry in doc["drills"]:
            if entry["name"] == broken:
                entry["converged"] = False
        return doc

    monkeypatch.setattr(fleet, "analyze", analyze_with_a_broken_drill)
    # the CLI asks get_spark() for a session: it returns the running one (the `spark` fixture's)
    out = tmp_path / "fleet"
    status = cli_main(["drill", "fleet", "--count", str(count), "--seed", str(seed), "--out", str(out)])
    captured = capsys.readouterr()
    assert status == 1
    assert captured.out.startswith(f"fleet: {count} drills (seed {seed})") and "1 failed" in captured.out
    assert broken in captured.err and "drill run" in captured.err

    doc = json.loads((out / "fleet.json").read_text())
    (failed,) = doc["failed"]
    assert failed["name"] == broken and failed["seed"] == fleet.scenario_seed(seed, 1)
    assert failed["converged"] is False and failed["scenario"] == f"failed/{broken}.json"
    path = out / failed["scenario"]
    assert sorted(p.name for p in (out / "failed").iterdir()) == [path.name]
    scenario = load_scenario(path)
    assert scenario == random_scenario(failed["seed"])
    # and `drill run` replays it (the real drill keeps its invariants)
    status = cli_main(["drill", "run", str(path), "--out", str(tmp_path / "replay")])
    assert status == 0
    replay = json.loads((tmp_path / "replay" / "summary.json").read_text())
    assert replay["name"] == broken and replay["ok"] is True


def test_fleet_rejects_an_empty_fleet(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert cli_main(["drill", "fleet", "--count", "0", "--out", str(tmp_path)]) == 1
    assert "--count" in capsys.readouterr().err
    with pytest.raises(ValueError):
        fleet.run_fleet(0, 1, tmp_path)


# ------------------------------------------------------------------ checks-only (adversarial) fleets


def test_a_drill_that_raises_is_a_crashed_row_not_the_end_of_the_fleet(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The executors' body of ``run_fleet_checks``, run here on three seeds: a drill whose
    simulation raises becomes a failed row (``crashed``, invariants unknown, the error kept); the
    others are judged as usual (a 100,000-drill run once died on one such drill)."""
    import pandas as pd

    from connect_bridge.drills import sim

    bad = fleet.scenario_seed(3, 1)
    real = sim.run_scenario

    def run_or_raise(scenario, *args: Any, **kwargs: Any):  # type: ignore[no-untyped-def]
        if scenario.name == f"adversarial-{bad}":
            raise RuntimeError("boom")
        return real(scenario, *args, **kwargs)

    monkeypatch.setattr(sim, "run_scenario", run_or_raise)
    seeds = [fleet.scenario_seed(3, i) for i in range(3)]
    verdicts = list(fleet._check_drills(True, None, None)(iter(seeds)))
    assert all(list(row) == [name for name, _ in fleet.CHECK_FIELDS] for row in verdicts)
    rows = pd.DataFrame(verdicts)
    crashed = rows[rows["seed"] == bad].iloc[0]
    assert bool(crashed["crashed"]) and not bool(crashed["ok"])
    assert crashed["violation"] == "crashed: RuntimeError: boom" and pd.isna(crashed["exclusive"])
    others = rows[rows["seed"] != bad]
    assert not others["crashed"].any() and others["events"].min() > 0


def test_an_adversarial_checks_only_fleet_counts_every_invariant(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    heard: list[tuple[str, int | None]] = []

    def hear(message: str, done: int | None = None) -> None:
        heard.append((message, done))

    doc = fleet.run_fleet_checks(40, 5, tmp_path, adversarial=True, spark=spark, progress=hear)
    assert doc["count"] == doc["drills"] == 40 and doc["adversarial"] is True
    # The progress bar's feed (tests/test_progress.py): drills done rise to the count, and the job
    # group that let Spark's status tracker count them is gone again.
    counts = [done for _, done in heard if done is not None]
    assert counts[0] == 0 and counts[-1] == 40 and counts == sorted(counts), heard
    assert heard[0][0] == "running 40 adversarial drills (seed 5), checked in the executors"
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None
    assert set(doc["violations"]) == {"exclusive", "live", "converged", "balanced", "crashed"}
    assert doc["violations"]["crashed"] == 0
    # Every row is the checker's verdict on that seed's drill, as `drill run` would give it.
    table = spark.read.parquet(str(tmp_path / fleet.CHECKS_DIR)).toPandas()
    assert sorted(table["seed"]) == [fleet.scenario_seed(5, i) for i in range(40)]
    for row in table.head(5).itertuples():
        scenario = random_scenario(int(row.seed), adversarial=True)
        summary = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)
        assert (row.ok, row.exclusive, row.live, row.events) == (
            summary.ok,
            summary.exclusive,
            summary.live,
            summary.events,
        )
    assert doc["failed_drills"] == int((~table["ok"]).sum()) == len(doc["failed"])
    assert json.loads((tmp_path / fleet.FLEET_JSON).read_text())["count"] == 40


class _Cores:
    """A SparkSession stand-in that only knows its default parallelism (cores)."""

    def __init__(self, cores: int) -> None:
        self.sparkContext = type("Context", (), {"defaultParallelism": cores})()


CHECKS = (fleet.CHECKS_PER_CORE, fleet.CHECKS_PER_TASK)


@pytest.mark.parametrize(
    ("cores", "count", "shape", "tasks"),
    [
        (2, 200, (fleet.EVENTS_PER_CORE, 1), 50),  # the bar moves every 4 drills, not every 25
        (2, 10, (fleet.EVENTS_PER_CORE, 1), 10),  # never more tasks than drills
        (64, 10_000, (fleet.EVENTS_PER_CORE, 1), 256),  # a large cluster keeps its tasks per core
        (2, 100_000, CHECKS, 50),
        (2, 2_000, CHECKS, 20),  # checks-only: 100 drills a task, not 40 (a task's own cost)
        (2, 200, CHECKS, 2),  # ...but never fewer tasks than cores
        (2, 1, CHECKS, 1),
        (64, 10_000, CHECKS, 100),
    ],
)
def test_the_drill_stage_has_tasks_enough_for_the_bar_to_move(
    cores: int, count: int, shape: tuple[int, int], tasks: int
) -> None:
    """The fleet's progress counts finished tasks of the drill stage (job_progress.py): on a small
    machine the stage needs more tasks than its cores' share, or the bar sits still, then jumps;
    a checks-only fleet's tasks are not so small that a task's own cost shows."""
    per_core, per_task = shape
    assert fleet._partitions(_Cores(cores), count, per_core, per_task) == tasks


class _Started(Exception):
    """Raised by a stand-in ``get_spark`` once it has heard how the session would start."""


@pytest.mark.parametrize(
    ("checks_only", "count", "short_run"),
    [
        (True, 100_000, True),  # the JVM only moves one row per drill: C2 and codegen never pay
        (True, 10, True),
        (False, 10, True),  # a small fleet with events: seconds of Spark work
        (False, 10_000, False),  # a large event table is analyzed at full strength
    ],
)
def test_a_checks_only_fleet_starts_a_short_run_session_at_any_size(
    monkeypatch, tmp_path: Path, checks_only: bool, count: int, short_run: bool
) -> None:  # type: ignore[no-untyped-def]
    """A checks-only fleet's JVM does next to nothing while the drills run in Python; a JVM at
    full strength (C2 compiling for minutes, parallel GC threads) took as much CPU as the drills
    did on a 2-core machine, so it starts the short-run session whatever its size."""
    from connect_bridge.pipeline import session

    heard: list[bool] = []

    def get_spark(master: str | None = None, app: str = "", short_run: bool = False) -> Any:
        heard.append(short_run)
        raise _Started

    monkeypatch.setattr(session, "get_spark", get_spark)
    with pytest.raises(_Started):
        if checks_only:
            fleet.run_fleet_checks(count, 1, tmp_path, adversarial=True)
        else:
            fleet.run_fleet(count, 1, tmp_path)
    assert heard == [short_run]


def test_a_failed_checks_only_drill_names_the_search_that_minimizes_it(
    monkeypatch, tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    """The fleet keeps a failing drill's seed; the command it prints for ``drill search`` runs that
    very drill (the same scenario, adversarial or not), so it can be minimized into a regression."""
    import shlex

    seed = fleet.scenario_seed(7, 3)
    name = f"adversarial-{seed}"

    def run_fleet_checks(count: int, fleet_seed: int, out_dir: Any, **kwargs: Any) -> dict[str, Any]:
        return {
            "count": count,
            "seed": fleet_seed,
            "adversarial": kwargs["adversarial"],
            "drills": count,
            "seconds": 1.0,
            "drills_per_s": 1.0,
            "failed_drills": 1,
            "max_unowned_ms": 0,
            "violations": dict.fromkeys(("exclusive", "live", "converged", "balanced", "crashed"), 0),
            "failed": [{"name": name, "seed": seed, "scenario": f"failed/{name}.json", "violation": "v"}],
            "engine": kwargs["engine"],
        }

    monkeypatch.setattr(fleet, "run_fleet_checks", run_fleet_checks)
    out = tmp_path / "fleet"
    argv = ["drill", "fleet", "--count", "4", "--seed", "7", "--adversarial", "--out", str(out)]
    assert cli_main(argv) == 1
    err = capsys.readouterr().err
    command = next(line for line in err.splitlines() if line.startswith("failed: "))
    search = shlex.split(command.split("minimize with `", 1)[1].split("`", 1)[0])
    assert search[:3] == ["connect-bridge", "drill", "search"] and "--adversarial" in search
    searched = int(search[search.index("--seed") + 1])
    assert search[search.index("--count") + 1] == "1"
    # `drill search`'s generator (every protocol) gives the scenario the fleet ran for that seed.
    from connect_bridge.drills.generate import ALL_PROTOCOLS

    searched_scenario = random_scenario(searched, protocols=ALL_PROTOCOLS, adversarial=True)
    assert searched_scenario.name == name
    assert searched_scenario == random_scenario(seed, adversarial=True)


@pytest.mark.parametrize("checks_only", [True, False], ids=["checks", "events"])
def test_drills_an_executor_ran_without_the_compiled_engine_are_counted_in_fleet_json(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checks_only: bool
) -> None:
    """An executor on another machine has no compiled engine directory and runs the interpreted
    one: ``fleet.json`` must not say ``compiled`` alone then. Here every executor lacks it."""
    missing = str(tmp_path / "no-such-engine")
    monkeypatch.setattr(fleet, "_resolve_engine", lambda engine, say: (missing, "compiled"))
    run = fleet.run_fleet_checks if checks_only else fleet.run_fleet
    doc = run(6, 3, tmp_path / "out", spark=spark)
    assert (
        doc["engine"]
        == f"compiled, except 6 of 6 drills on the interpreted engine (their executors do not have {missing})"
    )
    assert json.loads((tmp_path / "out" / fleet.FLEET_JSON).read_text())["engine"] == doc["engine"]
