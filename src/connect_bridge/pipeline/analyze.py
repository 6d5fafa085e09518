"""``connect-bridge analyze``: drill event logs → summary.json, Parquet tables, charts, index.html.

Inputs (docs/pipeline.md, "Inputs") are ``events.jsonl`` files, directories searched recursively for them, and
fleet Parquet (the table of :mod:`.schema`). A JSON-lines drill is named by the ``name`` of a
``summary.json`` next to its log, else by the log's directory (as
:func:`connect_bridge.drills.checker.check_file` does); a Parquet drill by its ``drill`` column.

File order is event order. All logs are read in one text scan whose rows get
``monotonically_increasing_id()`` as ``seq``: Spark splits a file into byte ranges kept in offset
order (``FileSourceScanExec`` sorts splits by length, stably, and only a file's last split is
shorter), packs them into partitions in that order, and the id is ``partition << 33 | row``, so
``seq`` increases along each file. The drill key of a row is its file (``_metadata.file_path``),
mapped to the drill's name only on the small per-drill results. Events are then analyzed in
``t_ms`` order, file order for equal times (:func:`.metrics.in_time_order`): a log merged from
several workers' files is sorted and noted in the summary, as the checker does, and one that
contradicts itself is reported as malformed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from connect_bridge.drills.events import EventLogError, order_note
from connect_bridge.pipeline.schema import (
    DRILL_NUMBERS,
    EVENT_COLUMNS,
    EVENT_FIELDS,
    LOG_FIELDS,
    spark_schema,
)
from connect_bridge.progress import counted

DRILL_KEYS = ("name", *DRILL_NUMBERS)
"""The keys of a drill entry in ``summary.json`` (docs/pipeline.md, "Outputs"), in order."""

SUM_KEYS = ("events", "overlaps", "overlap_ms", "moves", "rebalances", "unassigned_item_ms")
LOG_NAME = "events.jsonl"
DEFAULT_CHART_DRILLS = 10
CHART_BINS = 400


class AnalyzeError(ValueError):
    """Bad input to ``analyze`` (no logs found, unreadable Parquet, duplicate inputs)."""


@dataclass
class Inputs:
    """What :func:`find_inputs` found."""

    logs: dict[Path, str] = field(default_factory=dict)
    """Resolved ``events.jsonl`` path → drill name (before de-duplication)."""
    parquet: list[Path] = field(default_factory=list)


def _drill_name(log: Path) -> str:
    name = log.parent.name
    summary = log.parent / "summary.json"
    if summary.is_file():
        try:
            name = str(json.loads(summary.read_text(encoding="utf-8")).get("name") or name)
        except (ValueError, AttributeError, OSError):
            pass
    return name


def _is_parquet_dir(path: Path) -> bool:
    """A Parquet dataset: named ``*.parquet``, holding Parquet files, or partitioned (``key=value``)."""
    if path.suffix == ".parquet":
        return True
    children = [p for p in path.iterdir() if not p.name.startswith((".", "_"))]
    return any(p.suffix == ".parquet" and p.is_file() for p in children) or any(
        p.is_dir() and "=" in p.name for p in children
    )


def find_inputs(paths: Iterable[str | Path]) -> Inputs:
    """Expand the command-line paths: logs (any ``*.jsonl`` file given, ``events.jsonl`` files
    found in directories) and Parquet datasets (a ``*.parquet`` file or directory, or a directory
    holding ``*.parquet`` files; not searched further)."""
    found = Inputs()

    def add_log(path: Path) -> None:
        found.logs.setdefault(path.resolve(), _drill_name(path))

    def walk(directory: Path) -> None:
        if _is_parquet_dir(directory):
            found.parquet.append(directory.resolve())
            return
        for child in sorted(directory.iterdir()):
            if child.name.startswith((".", "_")):
                continue
            if child.is_dir():
                walk(child)
            elif child.name == LOG_NAME:
                add_log(child)

    for raw in paths:
        path = Path(raw)
        if not path.exists():
            raise AnalyzeError(f"{path}: no such file or directory")
        if path.is_dir():
            walk(path)
        elif path.suffix == ".parquet":
            found.parquet.append(path.resolve())
        else:
            add_log(path)
    if not found.logs and not found.parquet:
        raise AnalyzeError("no events.jsonl or Parquet input found in " + ", ".join(map(str, paths)))
    return found


def input_bytes(inputs: Inputs) -> int:
    """The size of every input file: what decides whether a run is short (:mod:`.session`)."""
    files = list(inputs.logs)
    for path in inputs.parquet:
        files.extend(p for p in ([path] if path.is_file() else path.rglob("*")) if p.is_file())
    return sum(p.stat().st_size for p in files)


def _local_path(uri: str) -> Path:
    """A ``file:`` URI from Spark (``file:/a%20b/x``) → the local path."""
    parsed = urlparse(uri)
    return Path(unquote(parsed.path if parsed.scheme else uri))


def load_events(spark: Any, inputs: Inputs) -> Any:
    """The event table (:mod:`.schema` columns) of every input; ``drill`` of a JSON-lines row is
    its file's URI as Spark reports it (see :func:`drill_names`)."""
    from pyspark.sql import functions as F

    frames = []
    if inputs.logs:
        text = spark.read.text([str(p) for p in inputs.logs])
        rows = text.select(
            F.col("_metadata.file_path").alias("drill"),
            F.monotonically_increasing_id().alias("seq"),
            "value",
        ).where(F.col("value").rlike(r"\S"))  # iter_events skips blank lines
        parsed = rows.select("drill", "seq", F.from_json("value", spark_schema(LOG_FIELDS)).alias("e"))
        frames.append(parsed.select("drill", "seq", *(f"e.{name}" for name, _ in LOG_FIELDS)))
    for path in inputs.parquet:
        df = spark.read.parquet(str(path))
        missing = [c for c in EVENT_COLUMNS if c not in df.columns]
        if missing:
            raise AnalyzeError(f"{path}: not an event table (missing columns {', '.join(missing)})")
        frames.append(df.select(*(F.col(name).cast(kind).alias(name) for name, kind in EVENT_FIELDS)))
    events = frames[0]
    for frame in frames[1:]:
        events = events.unionByName(frame)
    return events


def drill_names(keys: Iterable[str], inputs: Inputs) -> dict[str, str]:
    """Drill key (file URI of a log, or a Parquet ``drill`` value) → unique drill name.

    Names that collide get `` (2)``, `` (3)``… in key order, so every drill stays separate."""
    by_path = {str(p): name for p, name in inputs.logs.items()}
    base: dict[str, str] = {}
    for key in keys:
        if key.startswith("file:"):
            local = str(_local_path(key).resolve())
            if local not in by_path:
                raise AnalyzeError(f"Spark read {key}, which is not one of the inputs")
            base[key] = by_path[local]
        else:
            base[key] = key
    taken: set[str] = set()
    names: dict[str, str] = {}
    for key in sorted(base, key=lambda k: (base[k], k)):
        name, n = base[key], 1
        while name in taken:
            n += 1
            name = f"{base[key]} ({n})"
        names[key] = name
        taken.add(name)
    return names


def _summary_entry(row: dict[str, Any]) -> dict[str, Any]:
    return {k: row[k] for k in DRILL_KEYS}


def totals(drills: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The ``totals`` object: sums of the numbers and counts of drills by verdict."""
    out: dict[str, Any] = {"drills": len(drills)}
    for flag in ("ok", "exclusive", "converged", "balanced"):
        out[flag] = sum(1 for d in drills if d[flag])
    for key in SUM_KEYS:
        out[key] = sum(int(d[key]) for d in drills)
    out["longest_unassigned_ms"] = max((int(d.get("longest_unassigned_ms", 0)) for d in drills), default=0)
    out["not_ok"] = sorted(d["name"] for d in drills if not d["ok"])[:50]
    return out


_EMPTY_DRILL: dict[str, Any] = {
    "events": 0,
    "overlaps": 0,
    "overlap_ms": 0,
    "converged": True,
    "balanced": True,
    "moves": 0,
    "rebalances": 0,
    "unassigned_item_ms": 0,
    "longest_unassigned_ms": 0,
    "end_ms": 0,
    "items": 0,
    "live_workers": 0,
    "exclusive": True,
    "ok": True,
}
"""The collected row of a drill whose ``events.jsonl`` holds no events (Spark yields no row)."""


@dataclass
class Result:
    """What :func:`run` computed: the collected per-drill rows and the lazy tables."""

    drills: list[dict[str, Any]]
    """One dict per drill, sorted by name: the summary keys, longest_unassigned_ms, exclusive, ok,
    end_ms, items, live_workers."""
    items: Any
    """The item table (:attr:`.metrics.Metrics.items`), keyed by drill key."""
    intervals: Any
    """The interval table (:attr:`.metrics.Metrics.intervals`), keyed by drill key."""
    names: dict[str, str]
    """Drill key → name."""
    inputs: Inputs
    notes: list[str] = field(default_factory=list)
    """One line per drill whose events were not in time order and were sorted (:func:`summary_doc`)."""
    events: Any = None
    """The time-ordered event table, when the run computed :attr:`metrics` (a small input)."""
    metrics: Any = None
    """:func:`.metrics.compute`'s DataFrames, for a small input; a big one is analyzed by drill
    (:mod:`.by_drill`) and :meth:`charted` computes them for the charted drills alone."""
    cached: list[Any] = field(default_factory=list)
    """DataFrames persisted by the run (:func:`analyze` unpersists them)."""
    spark: Any = None
    staged: Path | None = None
    """Where a by-drill run wrote :attr:`items` and :attr:`intervals` (``items/``, ``intervals/``:
    Parquet keyed by drill key), to be moved or renamed into the outputs."""

    def charted(self, keys: Sequence[str]) -> tuple[Any, Any]:
        """``(events, metrics)`` holding (at least) the drills ``keys``: for the charts."""
        if self.metrics is not None:
            return self.events, self.metrics
        from pyspark.sql import functions as F

        from connect_bridge.pipeline import metrics

        events = metrics.in_time_order(
            load_events(self.spark, self.inputs).where(F.col("drill").isin(list(keys)))
        )
        return events, metrics.compute(events)


BY_DRILL_EVENTS = 200_000
"""Inputs of more events than this (estimated: :func:`.by_drill.estimated_events`) are analyzed
by drill with pandas in the executors (:mod:`.by_drill`); smaller ones with the DataFrame plan of
:mod:`.metrics`, which starts no Python worker processes (seconds of a short run)."""
ENGINES = ("auto", "sql", "by-drill")


def run(
    spark: Any,
    paths: Iterable[str | Path],
    progress: Callable[[str], None] | None = None,
    engine: str = "auto",
    tables_dir: str | Path | None = None,
) -> Result:
    """Find inputs, load, validate and compute; collects only the per-drill rows.

    ``engine``: ``sql`` (the DataFrame plan of :mod:`.metrics`), ``by-drill`` (:mod:`.by_drill`)
    or ``auto`` (by the input's size, :data:`BY_DRILL_EVENTS`). Both give the same tables. A
    by-drill run stages its item and interval tables in a new directory under ``tables_dir``
    (default: the system's temporary directory, removed at exit; on a cluster it must be shared,
    as ``analyze``'s output directory is)."""
    from pyspark import StorageLevel

    from connect_bridge.pipeline import by_drill, metrics
    from connect_bridge.pipeline.session import fit_shuffle_partitions, ship_package

    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    say = progress or (lambda _msg: None)
    inputs = find_inputs(paths)
    fit_shuffle_partitions(spark, input_bytes(inputs))
    logs, parquet = counted(len(inputs.logs), "event log"), counted(len(inputs.parquet), "Parquet input")
    say(f"reading {logs} and {parquet}")
    cached: list[Any] = []
    if engine == "auto":
        size = by_drill.estimated_events(list(inputs.logs), inputs.parquet)
        engine = "by-drill" if size > BY_DRILL_EVENTS else "sql"
    if engine == "by-drill":
        ship_package(spark)
        found = by_drill.layout(list(inputs.logs), inputs.parquet)
        shuffle = None if found.whole else by_drill.partitions(spark, found.events)
        if tables_dir is not None:
            Path(tables_dir).mkdir(parents=True, exist_ok=True)
        staged = Path(tempfile.mkdtemp(prefix="_tables-", dir=tables_dir))
        if tables_dir is None:
            atexit.register(shutil.rmtree, staged, True)
        out = by_drill.analyze(spark, load_events(spark, inputs), shuffle, staged)
        say("analyzing the drills")
        # The scan's partitions are planned when the job starts: whole files, if that needs no shuffle.
        with _session_conf(spark, {} if shuffle else by_drill.whole_file_conf(found)):
            collected = out.collect()
        checked = [
            {k: r[k] for k in by_drill.PROBLEM_COLUMNS} for r in collected if r["part"] == by_drill.PROBLEM
        ]
        drill_rows = [r for r in collected if r["part"] == by_drill.DRILL]
        items, intervals = (
            spark.read.schema(by_drill.spark_table_schema(name)).parquet(str(staged / name))
            for name in ("items", "intervals")
        )
        events = m = None
    else:
        events = metrics.in_time_order(load_events(spark, inputs)).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(events)
        say("checking the logs")
        checked = [r.asDict() for r in metrics.problems(events).collect()]
    _raise_malformed(checked, inputs)
    if engine != "by-drill":
        staged = None
        say("computing metrics")
        m = metrics.compute(events)
        for df in (m.changes, m.items, m.intervals):
            df.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(df)
        drill_rows = m.drills.collect()
        items, intervals = m.items, m.intervals
    rows = [{k: r[k] for k in by_drill.DRILL_COLUMNS} for r in drill_rows]
    # An events.jsonl without events is an (ok, empty) drill too, but it yields no rows.
    read = {str(_local_path(r["drill"]).resolve()) for r in rows if r["drill"].startswith("file:")}
    for path in sorted(set(map(str, inputs.logs)) - read):
        rows.append({"drill": Path(path).as_uri(), **_EMPTY_DRILL})
    names = drill_names([r["drill"] for r in rows], inputs)
    for row in rows:
        row["name"] = names[row["drill"]]
    rows.sort(key=lambda r: r["name"])
    notes = sorted(
        order_note(f"drill {names[r['drill']]!r}: {_source(r['drill'])}", r["moved"]) for r in checked
    )
    return Result(
        drills=rows,
        items=items,
        intervals=intervals,
        names=names,
        inputs=inputs,
        notes=notes,
        events=events,
        metrics=m,
        cached=cached,
        spark=spark,
        staged=staged,
    )


@contextlib.contextmanager
def _session_conf(spark: Any, settings: dict[str, str]) -> Iterator[None]:
    """Run with the session's SQL settings changed, then restore them."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _raise_malformed(checked: Sequence[dict[str, Any]], inputs: Inputs) -> None:
    """Raise :class:`EventLogError` for the first malformed event of the first drill (by name)."""
    bad = [r for r in checked if r["n"]]
    if bad:
        names = drill_names([r["drill"] for r in bad], inputs)
        first = min(bad, key=lambda r: names[r["drill"]])
        more = sum(r["n"] for r in bad) - 1
        raise EventLogError(
            f"drill {names[first['drill']]!r}: event {first['index']} ({first['type']}): {first['reason']}"
            + (f" (and {more} more malformed events)" if more else "")
        )


def _source(key: str) -> str:
    """How a note names a drill's input: its file name, or ``the event table`` for Parquet rows."""
    return _local_path(key).name if key.startswith("file:") else "the event table"


def summary_doc(result: Result) -> dict[str, Any]:
    """``summary.json``: ``{"drills": [entries], "totals": {...}}``, plus ``"notes"`` when a
    log had to be sorted by time (a merged log)."""
    doc = {"drills": [_summary_entry(r) for r in result.drills], "totals": totals(result.drills)}
    return doc | ({"notes": result.notes} if result.notes else {})


def analyze(
    paths: Sequence[str | Path],
    out: str | Path,
    *,
    master: str | None = None,
    spark: Any = None,
    chart_drills: int = DEFAULT_CHART_DRILLS,
    progress: Callable[[str], None] | None = None,
    engine: str = "auto",
) -> dict[str, Any]:
    """Analyze drill logs into ``out`` and return the ``summary.json`` document.

    Writes ``summary.json``, ``drills.parquet``, ``items.parquet``, ``intervals.parquet``, PNG
    charts under ``charts/`` (timeline and ownership per drill for ``chart_drills`` drills, worst
    first; fleet histograms), ``index.html`` and, for a fleet, ``drills/*.html``. Uses ``spark``
    if given, else :func:`.session.get_spark`. Raises :class:`AnalyzeError` or
    :class:`EventLogError` for bad input.
    """
    from connect_bridge.pipeline import chartdata, charts, report
    from connect_bridge.pipeline.session import SHORT_RUN_BYTES, get_spark

    say = progress or (lambda _msg: None)
    if spark is None:
        say("starting Spark")
        spark = get_spark(master, short_run=input_bytes(find_inputs(paths)) <= SHORT_RUN_BYTES)
    out = Path(out)
    result = run(spark, paths, progress=say, engine=engine, tables_dir=out)
    out.mkdir(parents=True, exist_ok=True)
    doc = summary_doc(result)

    say(f"writing tables for {counted(len(result.drills), 'drill')}")
    _write_tables(spark, result, out)

    say("drawing charts")
    chosen = charts.pick_drills(result.drills, chart_drills)
    keys = [r["drill"] for r in chosen]
    events, m = result.charted(keys) if keys else (None, None)
    series = _chart_series(events, m, keys)
    detail = chartdata.collect(events, m, keys)  # actions, ownership: capped per drill
    pictures = charts.draw_all(out / "charts", result.drills, chosen, series, CHART_BINS, detail)

    (out / "summary.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    report.write_index(out, doc, result.drills, pictures)
    for df in result.cached:
        df.unpersist()
    if result.staged is not None:
        shutil.rmtree(result.staged, ignore_errors=True)
    say(f"done: {out / 'index.html'}")
    return doc


_DRILLS_SCHEMA = (
    "drill string, events long, overlaps long, overlap_ms long, converged boolean, balanced boolean, "
    "moves long, rebalances long, unassigned_item_ms long, longest_unassigned_ms long, exclusive boolean, "
    "ok boolean, end_ms long, items long, live_workers long"
)
_DRILL_COLUMNS = (
    "name",
    *DRILL_KEYS[1:],
    "longest_unassigned_ms",
    "exclusive",
    "ok",
    "end_ms",
    "items",
    "live_workers",
)
"""The collected per-drill row's keys in :data:`_DRILLS_SCHEMA` order (``name`` becomes ``drill``)."""


MAPPED_NAMES = 64
"""Drill keys renamed through a literal map in the tables; more go through a broadcast join."""


def _write_tables(spark: Any, result: Result, out: Path) -> None:
    """``drills.parquet`` from the collected rows; ``items`` / ``intervals`` with drill names for keys.

    No DataFrame is made from Python data here: that would start Python worker processes (seconds,
    more than the rest of a small analysis). Only keys whose name differs are renamed (a fleet's
    Parquet drills keep their keys: no lookup at all): a few through a literal map, many through a
    broadcast join with a literal table (a map lookup scans the map's keys, which cost 10-30 s per
    5,000 drills at 10M events). The already collected per-drill rows are written with pyarrow, as
    one part file in a directory like Spark's own output. A by-drill run's tables, written by the
    executors, are moved into place when no drill is renamed."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    renamed = sorted((key, name) for key, name in result.names.items() if key != name)

    def named(df: Any) -> Any:
        cols = [c for c in df.columns if c != "drill"]
        if not renamed:
            return df
        if len(renamed) <= MAPPED_NAMES:
            mapping = F.create_map(*(F.lit(text) for pair in renamed for text in pair))
            name = F.coalesce(F.try_element_at(mapping, F.col("drill")), F.col("drill"))
            return df.select(name.alias("drill"), *cols)
        pairs = F.array(*(F.struct(F.lit(k).alias("_key"), F.lit(v).alias("_name")) for k, v in renamed))
        table = spark.range(1).select(F.inline(pairs))
        joined = df.join(F.broadcast(table), F.col("drill") == F.col("_key"), "left")
        return joined.select(F.coalesce(F.col("_name"), F.col("drill")).alias("drill"), *cols)

    kinds = {"string": pa.string(), "long": pa.int64(), "boolean": pa.bool_()}
    fields = [field.split() for field in _DRILLS_SCHEMA.split(", ")]
    schema = pa.schema([(column, kinds[kind]) for column, kind in fields])
    columns = {
        column: [r[key] for r in result.drills]
        for (column, _), key in zip(fields, _DRILL_COLUMNS, strict=True)
    }
    drills_dir = out / "drills.parquet"
    shutil.rmtree(drills_dir, ignore_errors=True)
    drills_dir.mkdir()
    pq.write_table(pa.table(columns, schema=schema), drills_dir / "part-00000.parquet")
    for name, df in (("items", result.items), ("intervals", result.intervals)):
        target = out / f"{name}.parquet"
        if result.staged is not None and not renamed:  # written by the executors as they are
            shutil.rmtree(target, ignore_errors=True)
            shutil.move(result.staged / name, target)
        else:
            named(df).write.mode("overwrite").parquet(str(target))


def _chart_series(events: Any, m: Any, keys: list[str]) -> dict[str, dict[str, Any]]:
    """The binned series of the charted drills, collected in one job (none: no job at all)."""
    from connect_bridge.pipeline import metrics

    if not keys:
        return {}
    parts = {
        "load": metrics.worker_load(m, keys),
        "states": metrics.item_states(m, keys),
        "epochs": metrics.epochs(events, keys),
    }
    return metrics.collect_series(parts, m.ends, CHART_BINS)
