"""``connect-bridge drill fleet``: many randomized drills run inside Spark executors, then analyzed.

Drill ``i`` of a fleet with seed ``S`` is :func:`connect_bridge.drills.generate.random_scenario`
of ``scenario_seed(S, i)``, so every drill can be regenerated on the driver from the fleet seed
alone. The drill ids are a Spark DataFrame; ``mapInPandas`` runs each id's scenario in simulated
time (the engine is pure Python, so every executor runs its drills independently) and yields its
events as rows of the :mod:`.schema` table, drill name = scenario name. The rows are written as
Parquet partitioned by drill and then analyzed (:func:`connect_bridge.pipeline.analyze.analyze`).
Drills that break an invariant get their scenario written to ``failed/NAME.json`` for ``drill run``.

Layout of ``out_dir``::

    events.parquet/drill=NAME/part-*.parquet   the fleet's event table
    report/                                    analyze's output (summary.json, index.html, ...)
    failed/NAME.json                           scenario of each failing drill (replayable)
    fleet.json                                 {"count", "seed", "failed", "totals", ...}

(The event table directory ends in ``.parquet`` so that ``analyze`` reads it as one dataset, with
the ``drill`` column from the partition directories.)
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from connect_bridge.pipeline.analyze import analyze
from connect_bridge.pipeline.job_progress import drills_done
from connect_bridge.progress import counted

SEED_STRIDE = 1_000_003
EVENTS_DIR = "events.parquet"
REPORT_DIR = "report"
FAILED_DIR = "failed"
FLEET_JSON = "fleet.json"


def scenario_seed(seed: int, index: int) -> int:
    """The scenario seed of drill ``index`` (0-based) of the fleet ``seed``."""
    return seed * SEED_STRIDE + index


def drill_ok(entry: Mapping[str, Any]) -> bool:
    """A ``summary.json`` drill entry keeps every invariant (exclusive, converged, balanced)."""
    return int(entry["overlaps"]) == 0 and bool(entry["converged"]) and bool(entry["balanced"])


def _in_spark_task() -> bool:
    """Whether this runs in a Spark executor's Python worker (not a test calling the body)."""
    from pyspark import TaskContext

    return TaskContext.get() is not None


def _drill_functions(engine: str | None) -> tuple[Any, bool]:
    """In an executor: the compiled engine at ``engine`` when this machine has it (a local session,
    or a standalone cluster on this machine), else the interpreted one (``drills/compiled.py``); and
    whether that was a fallback (``engine`` named a directory this machine does not have)."""
    from connect_bridge.drills.compiled import drill_functions

    fallback = engine is not None and not Path(engine).is_dir()
    return drill_functions(None if fallback else engine), fallback


def _drill_events(engine: str | None, fallbacks: Any, batches: Iterator[Any]) -> Iterator[Any]:
    """``mapInPandas`` body (with ``engine`` bound): a batch of ``seed`` values → the event rows of
    their drills.

    Runs in the executors' Python workers, so the engine is imported there (the package must be
    installed where the executors run)."""
    import pandas as pd
    import pyarrow as pa

    from connect_bridge.drills.batch import collected_between_drills
    from connect_bridge.pipeline.schema import arrow_schema, event_row

    drills, fallback = _drill_functions(engine)
    random_scenario, run_scenario = drills.random_scenario, drills.run_scenario

    schema = arrow_schema()
    nullable_longs = {pa.int64(): pd.Int64Dtype()}.get

    def frame(rows: list[dict[str, Any]]) -> Any:
        return pa.Table.from_pylist(rows, schema=schema).to_pandas(types_mapper=nullable_longs)

    with collected_between_drills(keep_frozen=_in_spark_task()) as between_drills:
        for batch in batches:
            rows: list[dict[str, Any]] = []
            seeds = batch["seed"].tolist()
            if fallback:
                fallbacks.add(len(seeds))
            for seed in seeds:
                scenario = random_scenario(int(seed))
                log = run_scenario(scenario)
                rows.extend(event_row(e, scenario.name, i) for i, e in enumerate(log.events))
                del log
                between_drills()
                if len(rows) >= 20_000:
                    yield frame(rows)
                    rows = []
            if rows:
                yield frame(rows)


EVENTS_PER_CORE = 4
CHECKS_PER_CORE = 8
"""Partitions per core of the seeds of a fleet (with events) and of a checks-only fleet."""


PROGRESS_STEPS = 50
"""At least this many partitions (at most one per drill): the progress bar counts finished tasks,
so with only ``per_core`` per core on a small machine (8 on two cores) a fleet of 200 drills sat at
0 for a minute and then jumped by 25; with 50 it moves every 2%."""

CHECKS_PER_TASK = 100
"""At least this many drills per task of a checks-only fleet (unless that leaves a core idle): a
task costs Spark and its Python worker about 60-110 ms besides its drills (measured on two cores,
2026-11-29), 8% of a task of 40 adversarial drills (1.2 s); 100 drills are about 3 s of work. A
fleet with events keeps a task per drill share of :data:`PROGRESS_STEPS`: its drills are slower
and its tasks write their rows."""


def _partitions(spark: Any, count: int, per_core: int, per_task: int = 1) -> int:
    """Up to ``per_core`` partitions per core, and at least :data:`PROGRESS_STEPS`, with at least
    ``per_task`` drills each unless that leaves a core without one, at most one per drill: also the
    number of tasks of the stage that runs the drills, which is how :mod:`.job_progress` recognizes
    it."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    wanted = min(max(cores * per_core, PROGRESS_STEPS), max(cores, count // per_task))
    return max(1, min(count, wanted))


def _seed_frame(spark: Any, count: int, seed: int, per_core: int) -> Any:
    """The scenario seeds of drills ``0..count-1`` as a one-column DataFrame, spread over up to
    ``per_core`` partitions per core (a drill is the unit of work; there is nothing else to split)."""
    from pyspark.sql import functions as F

    ids = spark.range(0, count, numPartitions=1).select(
        (F.lit(seed).cast("long") * F.lit(SEED_STRIDE) + F.col("id")).alias("seed")
    )
    # Round-robin spreads consecutive ids (similar work on average) evenly over the partitions.
    return ids.repartition(_partitions(spark, count, per_core))


SHORT_RUN_DRILLS = 100
"""A fleet of at most this many drills starts a short-run session (``session.get_spark``): its
events (a few hundred to a couple of thousand per drill) stay within what ``analyze`` counts as a
short run (``session.SHORT_RUN_BYTES``), and its Spark work is seconds, where compiling generated
code and a JIT at full strength cost more than they save."""


def _prepare(
    count: int,
    out_dir: str | Path,
    master: str | None,
    spark: Any,
    progress: Callable[..., None] | None,
    short_run: bool | None = None,
) -> tuple[Callable[..., None], Path, Any]:
    """Both fleet kinds refuse an empty fleet before starting Spark, then make ``out_dir``; on a
    cluster the executors get this package (:func:`.session.ship_package`). A session started here
    is a short-run one (``session.get_spark``) when ``short_run`` says so, else for a fleet of at
    most :data:`SHORT_RUN_DRILLS`."""
    from connect_bridge.pipeline.session import get_spark, ship_package

    if count < 1:
        raise ValueError("a fleet needs at least one drill")
    say = progress or (lambda _msg, done=None: None)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if spark is None:
        say("starting Spark")  # (tens of seconds on a cold JVM: say so before the bar sits still)
        spark = get_spark(master, short_run=count <= SHORT_RUN_DRILLS if short_run is None else short_run)
    ship_package(spark)  # the drills run in the executors' Python: on a cluster they need the package
    return say, out, spark


ENGINES = ("auto", "compiled", "python")
"""``drill fleet --engine``: the compiled engine when it can be built here (``auto``), the compiled
one or an error (``compiled``), or the interpreted one (``python``)."""


def _resolve_engine(engine: str, say: Callable[..., None]) -> tuple[str | None, str]:
    """The compiled engine's directory for the executors (``None``: the interpreted engine) and
    what ``fleet.json`` says ran: ``compiled``, or ``python`` with the reason when ``auto`` could
    not build it. Built here, before the drills' clock starts, once per source tree."""
    from connect_bridge.drills.compiled import EngineBuildError, engine_or_reason, ensure_engine, is_built

    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
    if engine == "python":
        return None, "python"
    if not is_built():
        say("building the compiled drill engine (mypyc; once per source tree, one to two minutes)")
    if engine == "compiled":
        try:
            return str(ensure_engine()), "compiled"
        except EngineBuildError as exc:
            raise ValueError(f"the compiled engine: {exc}") from exc
    path, ran = engine_or_reason()
    return (str(path) if path is not None else None), ran


def _watching(
    spark: Any,
    count: int,
    per_core: int,
    progress: Callable[..., None] | None,
    message: str,
    per_task: int = 1,
) -> contextlib.AbstractContextManager[None]:
    """While the drills run: ``progress(message, done=N)`` as Spark finishes them (nothing to watch
    when nobody listens)."""
    if progress is None:
        return contextlib.nullcontext()
    tasks = _partitions(spark, count, per_core, per_task)
    return drills_done(spark, count, tasks, lambda done: progress(message, done=done))


def _clear_failed(out: Path) -> None:
    """``failed/`` of an earlier run in the same directory would name drills this run did not fail."""
    failed_dir = out / FAILED_DIR
    if failed_dir.exists():
        shutil.rmtree(failed_dir)


def _keep_scenario(out: Path, scenario: Any) -> str:
    """Write a failing drill's scenario for ``drill run``; its path relative to ``out``."""
    from connect_bridge.drills.scenario import dump_scenario

    failed_dir = out / FAILED_DIR
    failed_dir.mkdir(parents=True, exist_ok=True)
    path = failed_dir / f"{scenario.name}.json"
    dump_scenario(scenario, path)
    return str(path.relative_to(out))


def _write_fleet_json(out: Path, fleet: dict[str, Any]) -> None:
    """Both fleet kinds return the document they write, so a caller need not read it back."""
    (out / FLEET_JSON).write_text(json.dumps(fleet, indent=2) + "\n", encoding="utf-8")


def write_fleet_events(
    spark: Any, count: int, seed: int, path: str | Path, engine: str | None = None, fallbacks: Any = None
) -> int:
    """Run drills ``0..count-1`` of fleet ``seed`` in the executors (the compiled engine in the
    directory ``engine``, or the interpreted one); write their events to ``path`` (Parquet
    partitioned by ``drill``). Returns the number of event rows written. ``fallbacks`` (a Spark
    accumulator, see :func:`_fallback_counter`) counts the drills an executor without ``engine`` ran
    on the interpreted engine."""
    from connect_bridge.pipeline.schema import spark_schema

    fallbacks = fallbacks if fallbacks is not None else _fallback_counter(spark)
    events = _seed_frame(spark, count, seed, EVENTS_PER_CORE).mapInPandas(
        partial(_drill_events, engine, fallbacks), schema=spark_schema()
    )
    events.write.mode("overwrite").partitionBy("drill").parquet(str(path))
    return int(spark.read.parquet(str(path)).count())


def _fallback_counter(spark: Any) -> Any:
    """A Spark accumulator the executors add to for each drill they ran on the interpreted engine
    although the compiled one was asked for (its directory is only on the driver's machine)."""
    return spark.sparkContext.accumulator(0)


def _engine_that_ran(ran_on: str, engine_dir: str | None, fallbacks: Any, count: int) -> str:
    """``fleet.json``'s ``engine``: what :func:`_resolve_engine` chose, unless executors ran drills
    interpreted because they do not have the compiled engine's directory (a cluster on other
    machines); then it says how many."""
    interpreted = int(fallbacks.value)
    if engine_dir is None or interpreted == 0:
        return ran_on
    return (
        f"{ran_on}, except {interpreted} of {counted(count, 'drill')} on the interpreted engine "
        f"(their executors do not have {engine_dir})"
    )


def run_fleet(
    count: int,
    seed: int,
    out_dir: str | Path,
    master: str | None = None,
    spark: Any = None,
    progress: Callable[..., None] | None = None,
    engine: str = "auto",
) -> dict[str, Any]:
    """Run a fleet of ``count`` random drills and analyze it; returns (and writes) ``fleet.json``.

    ``progress(message, done=None)`` hears each stage, and ``done`` (drills done) where it is known.

    ``fleet.json``: ``count``, ``seed``, ``events`` (rows written), ``seconds`` (``run`` = drills,
    ``analyze``), ``report`` (the analyze directory), ``failed`` (per failing drill: ``name``,
    ``seed``, ``scenario`` = path of its JSON relative to ``out_dir``, ``overlaps``, ``converged``,
    ``balanced``), ``totals`` (analyze's) and ``engine`` (:func:`_resolve_engine`). Uses ``spark``
    if given, else :func:`.session.get_spark` with ``master``.
    """
    say, out, spark = _prepare(count, out_dir, master, spark, progress)
    engine_dir, ran_on = _resolve_engine(engine, say)
    running = f"running {counted(count, 'drill')} (seed {seed})"
    say(running, done=0)
    started = time.monotonic()
    fallbacks = _fallback_counter(spark)
    with _watching(spark, count, EVENTS_PER_CORE, progress, running):
        n_events = write_fleet_events(spark, count, seed, out / EVENTS_DIR, engine_dir, fallbacks)
    ran = time.monotonic()
    say(f"{n_events} events written to {out / EVENTS_DIR}", done=count)

    doc = analyze([out / EVENTS_DIR], out / REPORT_DIR, spark=spark, progress=say)
    analyzed = time.monotonic()

    _clear_failed(out)
    seeds = {f"random-{scenario_seed(seed, i)}": scenario_seed(seed, i) for i in range(count)}
    failed = [
        _failed_drill(entry, seeds.get(entry["name"]), out) for entry in doc["drills"] if not drill_ok(entry)
    ]
    fleet = {
        "count": count,
        "seed": seed,
        "events": n_events,
        "drills_analyzed": len(doc["drills"]),
        "missing_drills": count - len(doc["drills"]),
        "seconds": {"run": round(ran - started, 3), "analyze": round(analyzed - ran, 3)},
        "report": str(out / REPORT_DIR / "index.html"),
        "failed": failed,
        "totals": doc["totals"],
        "engine": _engine_that_ran(ran_on, engine_dir, fallbacks, count),
    }
    _write_fleet_json(out, fleet)
    say(f"{len(failed)} of {counted(count, 'drill')} failed; {out / FLEET_JSON}")
    return fleet


def _failed_drill(entry: Mapping[str, Any], drill_seed: int | None, out: Path) -> dict[str, Any]:
    """``fleet.json``'s record of a failing drill; its scenario is regenerated from the seed and
    kept when the name matches (a drill not of this fleet has no seed and no scenario)."""
    from connect_bridge.drills.generate import random_scenario

    record: dict[str, Any] = {
        "name": entry["name"],
        "seed": drill_seed,
        "scenario": None,
        "overlaps": entry["overlaps"],
        "converged": entry["converged"],
        "balanced": entry["balanced"],
    }
    if drill_seed is not None:
        scenario = random_scenario(drill_seed)
        if scenario.name == entry["name"]:
            record["scenario"] = _keep_scenario(out, scenario)
    return record


# -------------------------------------------------------------------------------- checks only

CHECKS_DIR = "checks.parquet"
CHECK_FIELDS: tuple[tuple[str, str], ...] = (
    ("name", "string"),
    ("seed", "long"),
    ("ok", "boolean"),
    ("exclusive", "boolean"),
    ("live", "boolean"),
    ("converged", "boolean"),
    ("balanced", "boolean"),
    ("overlaps", "long"),
    ("max_unowned_ms", "long"),
    ("events", "long"),
    ("violation", "string"),
    ("crashed", "boolean"),
)


def _crashed_row(name: str, seed: int, exc: Exception) -> dict[str, Any]:
    """The row of a drill whose simulation or check raised: failed, invariants unknown (null), and
    the error kept so the seed can be replayed with ``drill run``."""
    return {
        "name": name,
        "seed": seed,
        "ok": False,
        "exclusive": None,
        "live": None,
        "converged": None,
        "balanced": None,
        "overlaps": 0,
        "max_unowned_ms": 0,
        "events": 0,
        "violation": f"crashed: {type(exc).__name__}: {exc}",
        "crashed": True,
    }


def _check_drills(
    adversarial: bool, engine: str | None, fallbacks: Any
) -> Callable[[Iterable[int]], Iterator[dict[str, Any]]]:
    """``mapPartitions`` body of a checks-only fleet: each seed's drill is run and judged in the
    executor (the checker of ``drill run``, both invariants included); one row per drill (a dict of
    :data:`CHECK_FIELDS`) leaves it.

    At 100,000 drills the event table would be ~15M rows in 100,000 partition directories; the
    summaries are what the run is for, and a failing drill's scenario can be regenerated from its
    seed to look at its events."""

    def run(seeds: Iterable[int]) -> Iterator[dict[str, Any]]:
        from connect_bridge.drills.batch import collected_between_drills

        drills, fallback = _drill_functions(engine)
        random_scenario, run_scenario, check = drills.random_scenario, drills.run_scenario, drills.check
        with collected_between_drills(keep_frozen=_in_spark_task()) as between_drills:
            for row in _checked(seeds, adversarial, random_scenario, run_scenario, check, between_drills):
                if fallback:
                    fallbacks.add(1)
                yield row

    return run


def _checked(
    seeds: Iterable[int],
    adversarial: bool,
    random_scenario: Callable[..., Any],
    run_scenario: Callable[..., Any],
    check: Callable[..., Any],
    between_drills: Callable[[], None],
) -> Iterator[dict[str, Any]]:
    """One verdict row per seed (``between_drills()`` after each drill)."""
    for seed in seeds:
        scenario = random_scenario(int(seed), adversarial=adversarial)
        try:
            s = check(run_scenario(scenario).events, name=scenario.name, end_ms=scenario.end_ms)
        except Exception as exc:  # one broken drill must not end the fleet
            between_drills()
            yield _crashed_row(scenario.name, int(seed), exc)
            continue
        between_drills()
        yield {
            "name": s.name,
            "seed": int(seed),
            "ok": s.ok,
            "exclusive": s.exclusive,
            "live": s.live,
            "converged": s.converged,
            "balanced": s.balanced,
            "overlaps": s.overlaps,
            "max_unowned_ms": s.max_unowned_ms,
            "events": s.events,
            "violation": s.violations[0] if s.violations else None,
            "crashed": False,
        }


def _seed_slices(spark: Any, count: int, seed: int, per_core: int) -> Any:
    """The scenario seeds of drills ``0..count-1`` as an RDD of ints, dealt round-robin over the
    partitions (consecutive drills, similar work on average, spread evenly): only the partition
    numbers travel; each partition makes its own seeds."""
    n = _partitions(spark, count, per_core, CHECKS_PER_TASK)
    base = seed * SEED_STRIDE
    return spark.sparkContext.parallelize(range(n), n).flatMap(lambda p: range(base + p, base + count, n))


def run_fleet_checks(
    count: int,
    seed: int,
    out_dir: str | Path,
    *,
    adversarial: bool = False,
    master: str | None = None,
    spark: Any = None,
    progress: Callable[..., None] | None = None,
    engine: str = "auto",
) -> dict[str, Any]:
    """Run ``count`` drills of fleet ``seed`` in the executors and keep only their verdicts
    (``progress`` and ``engine`` as for :func:`run_fleet`).

    Writes ``checks.parquet`` (one row per drill), ``failed/NAME.json`` for every drill that broke
    an invariant and ``fleet.json``: ``count``, ``seed``, ``adversarial``, ``seconds``, ``drills_per_s``,
    ``violations`` (drills breaking exclusive / live / converged / balanced), ``max_unowned_ms`` and
    ``failed`` (name, seed, scenario, first violation), ``engine``.

    A session started here is a short-run one whatever ``count`` (:data:`CHECKS_SHORT_RUN`)."""
    say, out, spark = _prepare(count, out_dir, master, spark, progress, short_run=CHECKS_SHORT_RUN)
    engine_dir, ran_on = _resolve_engine(engine, say)
    kind = "adversarial " if adversarial else ""
    running = f"running {counted(count, kind + 'drill')} (seed {seed}), checked in the executors"
    say(running, done=0)
    started = time.monotonic()
    fallbacks = _fallback_counter(spark)
    checks = _seed_slices(spark, count, seed, CHECKS_PER_CORE).mapPartitions(
        _check_drills(adversarial, engine_dir, fallbacks)
    )
    with _watching(spark, count, CHECKS_PER_CORE, progress, running, CHECKS_PER_TASK):
        rows = sorted(checks.collect(), key=lambda row: row["seed"])
    say("writing the verdicts", done=count)
    _write_checks(rows, out / CHECKS_DIR)
    totals, bad = _check_totals(rows)
    seconds = time.monotonic() - started

    _clear_failed(out)
    failed = [_failed_check(row, adversarial, out) for row in bad]
    fleet = {
        "count": count,
        "seed": seed,
        "adversarial": adversarial,
        "drills": int(totals["drills"]),
        "events": int(totals["events"] or 0),
        "seconds": round(seconds, 1),
        "drills_per_s": round(count / seconds, 1) if seconds else None,
        "violations": {key: int(totals[key] or 0) for key in _VIOLATIONS},
        "failed_drills": int(totals["failed"] or 0),
        "max_unowned_ms": int(totals["max_unowned_ms"] or 0),
        "failed": failed,
        "engine": _engine_that_ran(ran_on, engine_dir, fallbacks, count),
    }
    _write_fleet_json(out, fleet)
    failed_of = f"{fleet['failed_drills']} of {counted(count, 'drill')}"
    say(f"{failed_of} failed in {fleet['seconds']} s; {out / FLEET_JSON}")
    return fleet


CHECKS_SHORT_RUN = True
"""A checks-only fleet starts a short-run session (C1 JIT only, serial collector, no generated
code: ``session.SHORT_RUN_JAVA_OPTIONS``) at any size: its JVM moves one small row per drill, so
the drills' Python is all the work, and a JVM compiling its hot paths with C2 for minutes took CPU
from the drills on a machine with two cores (2,000 adversarial drills: 36-45 s of JVM CPU beside
about 95 s of drills before, about 20 s after; docs/pipeline.md, "Checks only, adversarial
fleets")."""

_VIOLATIONS = ("exclusive", "live", "converged", "balanced", "crashed")
_FAILED_LISTED = 1000
"""At most this many failing drills are collected (by seed) and written out."""


def _write_checks(rows: list[dict[str, Any]], path: Path) -> None:
    """``checks.parquet``: the verdict rows (by seed) as one Parquet file in a dataset directory,
    written by the driver, which holds them all (one small row per drill: ~15 MB at 100,000)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    types = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_()}
    schema = pa.schema([(name, types[type_]) for name, type_ in CHECK_FIELDS])
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path / "part-00000.parquet")


def _check_totals(rows: list[dict[str, Any]]) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """The totals of the verdict rows (a drill counts against an invariant when it is known
    broken; a crashed drill's unknown invariants count only as ``crashed``), and the first
    :data:`_FAILED_LISTED` failing drills of ``rows`` (sorted by seed)."""
    totals = {
        "drills": len(rows),
        "failed": sum(not row["ok"] for row in rows),
        **{name: sum(row[name] is not None and not row[name] for row in rows) for name in _VIOLATIONS[:-1]},
        "crashed": sum(bool(row["crashed"]) for row in rows),
        "max_unowned_ms": max((row["max_unowned_ms"] for row in rows), default=0),
        "events": sum(row["events"] for row in rows),
    }
    return totals, [row for row in rows if not row["ok"]][:_FAILED_LISTED]


def _failed_check(row: Mapping[str, Any], adversarial: bool, out: Path) -> dict[str, Any]:
    """``fleet.json``'s record of a failing checks-only drill, its scenario regenerated and kept."""
    from connect_bridge.drills.generate import random_scenario

    scenario = random_scenario(int(row["seed"]), adversarial=adversarial)
    return {
        "name": row["name"],
        "seed": row["seed"],
        "scenario": _keep_scenario(out, scenario),
        "violation": row["violation"],
    }
