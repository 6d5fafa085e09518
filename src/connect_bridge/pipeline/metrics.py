"""The drill metrics (docs/drills.md) as DataFrame jobs: exactly :func:`connect_bridge.drills.checker.check`.

Input: the event table of :mod:`.schema` (``drill``, ``seq``, event columns), any number of drills.
Nothing here collects events to the driver; :func:`compute` returns DataFrames, and only the
per-drill table (one row per drill) and the binned chart series are meant to be collected.

How the checker's one pass becomes window functions (docs/pipeline.md has the long version):

1. **Ownership toggles** per ``(drill, item, worker)``: ``run`` = +1, ``release`` = -1, and every
   ``worker_stop`` / ``worker_crash`` = -1 for each item the worker ever ran (a join with the
   ``(item, worker)`` pairs of ``run`` events). Each toggle sets the state absolutely, so over the
   partition ordered by ``seq`` a +1 is an *effective start* iff the previous toggle is not +1,
   and a -1 an *effective stop* iff the previous one is +1 (the checker's no-op rules).
2. **Configured changes** per ``(drill, item)``: ``config`` events numbered ``k`` within the drill,
   exploded to items (instance task -1, tasks ``0..n-1``); an item enters at ``k`` when it was not
   in ``k-1`` and leaves at ``k+1`` when it is not in ``k+1``.
3. **Item timeline** = effective toggles ∪ configured changes, per ``(drill, item)`` by ``seq``:
   running sums give the number of runners ``cnt`` and configured flag ``cfg`` after each row; the
   time to the next row (or the drill's end, its largest ``t_ms``) is overlap time when
   ``cnt >= 2`` and unassigned time when ``cfg = 1`` and ``cnt = 0``. A start with ``cnt >= 2``
   is an overlap; a start by another worker than the previous start is a move.
4. **End state**: open ownership intervals, the last configured flag per item and the last
   ``worker_start``/``stop``/``crash`` per worker give converged and balanced.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from connect_bridge.codecs.ids import CONNECTOR_TASK
from connect_bridge.drills.events import CONTRADICTION, OWNERSHIP

CONNECTORS_TYPE = T.MapType(T.StringType(), T.LongType())
ITEM = ("drill", "connector", "task")
_UNBOUNDED = Window.unboundedPreceding
_HOLDER_EVENT = ("drill", "seq", "t_ms", "worker", "connector", "task")
"""An ownership toggle's columns, before its ``d``."""


@dataclass(frozen=True)
class Metrics:
    """The result DataFrames, keyed by the ``drill`` column of the input."""

    drills: DataFrame
    """drill, events, overlaps, overlap_ms, converged, balanced, moves, rebalances,
    unassigned_item_ms, longest_unassigned_ms (the longest single stretch one item ran nowhere),
    exclusive, ok, end_ms, items, live_workers (at the end)."""
    items: DataFrame
    """drill, connector, task, runs, moves, overlaps, overlap_ms, unassigned_item_ms,
    longest_unassigned_ms, workers_at_end, live_workers_at_end, configured_at_end, converged."""
    intervals: DataFrame
    """drill, connector, task, worker, start_ms, end_ms, open (still running at the end)."""
    effective: DataFrame
    """Effective ownership changes: drill, connector, task, worker, seq, t_ms, d (+1 / -1)."""
    timeline: DataFrame
    """Per-item timeline rows: drill, connector, task, seq, t_ms, cnt, cfg (state after the row)."""
    ends: DataFrame
    """drill, end_ms."""


def _int(cond: Column) -> Column:
    return F.when(cond, F.lit(1)).otherwise(F.lit(0))


def in_time_order(events: DataFrame) -> DataFrame:
    """The events with ``index`` = position in the file (0-based, per drill) and ``seq`` renumbered
    to ``t_ms`` order, file order for equal times: a log merged from several workers' files is
    analyzed as the checker does after sorting it (:func:`connect_bridge.drills.events.time_order`).
    Both windows share one partitioning by drill, so this costs one shuffle."""
    by_file = Window.partitionBy("drill").orderBy("seq")
    by_time = Window.partitionBy("drill").orderBy("t_ms", "seq")
    return events.withColumn("index", (F.row_number().over(by_file) - 1).cast("long")).withColumn(
        "seq", (F.row_number().over(by_time) - 1).cast("long")
    )


def _item_name() -> Column:
    """``ConnectorTaskId`` as text: the connector for its instance (task -1), else ``name-task``."""
    task = F.col("task")
    return F.when(task == CONNECTOR_TASK, F.col("connector")).otherwise(
        F.concat(F.col("connector"), F.lit("-"), task.cast("string"))
    )


def problems(events: DataFrame) -> DataFrame:
    """Per drill with malformed events or events out of time order: the first problem, as the
    checker would report it, and how many events sorting by time moved.

    Input: :func:`in_time_order`'s columns. Output columns: drill, n (malformed events), index
    (0-based event index in the file), type, reason (null when n = 0), moved. A malformed event is
    what the checker rejects, including a ``run`` / ``release`` whose time is before the previous
    ``run`` / ``release`` of the same worker and item in the file (sorting would swap them).
    The checker raises on the first of these; :func:`connect_bridge.pipeline.analyze.analyze` too.
    """
    t, kind = F.col("t_ms"), F.col("type")
    ownership = kind.isin(*OWNERSHIP)
    by_holder = Window.partitionBy("drill", ownership, "worker", "connector", "task").orderBy("index")
    prev = F.lag(F.struct("index", "type", "t_ms")).over(by_holder)
    contradiction = F.concat(
        kind,
        F.lit(" of "),
        _item_name(),
        F.lit(" by "),
        F.col("worker"),
        F.lit(" at t_ms "),
        t.cast("string"),
        F.lit(" is before the "),
        prev["type"],
        F.lit(" at event "),
        prev["index"].cast("string"),
        F.lit(" (t_ms "),
        prev["t_ms"].cast("string"),
        F.lit(") " + CONTRADICTION),
    )
    reason = (
        F.when(t.isNull(), F.lit("missing field 't_ms' (or not a JSON object)"))
        .when(kind.isNull(), F.lit("missing field 'type'"))
        .when(ownership & F.col("connector").isNull(), F.lit("missing field 'connector'"))
        .when(ownership & F.col("task").isNull(), F.lit("missing field 'task'"))
        .when(ownership & (prev["t_ms"] > t), contradiction)
        .when((kind == "run") & F.col("worker").isNull(), F.lit("worker is null"))
        .when(
            (kind == "config") & F.from_json(F.col("connectors"), CONNECTORS_TYPE).isNull(),
            F.lit("connectors must be an object"),
        )
    )
    checked = events.select("drill", "index", "seq", "type", reason.alias("reason"))
    bad = F.col("reason").isNotNull()
    return (
        checked.groupBy("drill")
        .agg(
            F.sum(_int(bad)).alias("n"),
            F.min(F.when(bad, F.struct("index", "type", "reason"))).alias("first"),
            F.sum(_int(F.col("index") != F.col("seq"))).alias("moved"),
        )
        .where((F.col("n") > 0) | (F.col("moved") > 0))
        .select("drill", "n", "first.index", "first.type", "first.reason", "moved")
    )


def compute(events: DataFrame) -> Metrics:
    """Every drill metric per drill, plus the item and interval tables (lazy DataFrames).

    ``events`` must be valid (see :func:`problems`). The caller may persist the results.
    """
    kind = F.col("type")
    base = events.groupBy("drill").agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(_int(kind == "epoch")).cast("long").alias("rebalances"),
        F.coalesce(F.max("t_ms"), F.lit(0)).cast("long").alias("end_ms"),
    )
    ends = base.select("drill", "end_ms")
    effective, intervals = _ownership(events, ends)
    timeline = _timeline(effective, _config_changes(events), ends)
    items, balance = _end_state(events, intervals, _per_item(timeline))
    return Metrics(
        drills=_drill_table(base, items, balance),
        items=items,
        intervals=intervals,
        effective=effective,
        timeline=timeline.select(*ITEM, "seq", "t_ms", "cnt", "cfg"),
        ends=ends,
    )


def _ownership(ev: DataFrame, ends: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Step 1: ownership toggles → effective starts / stops, and the ownership intervals."""
    kind = F.col("type")
    own = ev.where(kind.isin("run", "release")).select(
        *_HOLDER_EVENT, F.when(kind == "run", F.lit(1)).otherwise(F.lit(-1)).alias("d")
    )
    pairs = ev.where(kind == "run").select("drill", "worker", "connector", "task").distinct()
    stops = ev.where(kind.isin("worker_stop", "worker_crash") & F.col("worker").isNotNull()).select(
        "drill", "seq", "t_ms", "worker"
    )
    ended = stops.join(pairs, ["drill", "worker"]).select(*_HOLDER_EVENT, F.lit(-1).alias("d"))
    by_holder = Window.partitionBy("drill", "connector", "task", "worker").orderBy("seq")
    prev = F.lag("d").over(by_holder)
    toggles = own.unionByName(ended).withColumn("prev", prev)
    d = F.col("d")
    effective = toggles.where(
        ((d == 1) & (F.col("prev").isNull() | (F.col("prev") == -1))) | ((d == -1) & (F.col("prev") == 1))
    ).drop("prev")
    intervals = (
        effective.withColumn("next_t", F.lead("t_ms").over(by_holder))
        .where(d == 1)
        .join(F.broadcast(ends), "drill")
        .select(
            *ITEM,
            "worker",
            F.col("t_ms").alias("start_ms"),
            F.coalesce("next_t", "end_ms").alias("end_ms"),
            F.col("next_t").isNull().alias("open"),
        )
    )
    return effective, intervals


def _config_changes(ev: DataFrame) -> DataFrame:
    """Step 2: configured changes per item (enter at config ``k``, leave at ``k+1``)."""
    configs = ev.where(F.col("type") == "config").select(
        "drill",
        "seq",
        "t_ms",
        F.row_number().over(Window.partitionBy("drill").orderBy("seq")).alias("k"),
        F.from_json(F.col("connectors"), CONNECTORS_TYPE).alias("m"),
    )
    tasks = F.sequence(F.lit(CONNECTOR_TASK).cast("long"), F.greatest("n", F.lit(0)) - 1)
    listed = configs.select("drill", "k", F.explode("m").alias("connector", "n")).select(
        "drill", "k", "connector", F.explode(tasks).alias("task")
    )
    by_cfg = Window.partitionBy(*ITEM).orderBy("k")
    listed = listed.select(
        *ITEM, "k", F.lag("k").over(by_cfg).alias("pk"), F.lead("k").over(by_cfg).alias("nk")
    )
    at = configs.select("drill", "k", "seq", "t_ms")
    k = F.col("k")
    enters = (
        listed.where(F.col("pk").isNull() | (F.col("pk") != k - 1))
        .join(at, ["drill", "k"])
        .select(*ITEM, "seq", "t_ms", F.lit(1).alias("d_cfg"))
    )
    leaves = (
        listed.where(F.col("nk").isNull() | (F.col("nk") != k + 1))
        .select(*ITEM, (k + 1).alias("k"))
        .join(at, ["drill", "k"])  # the config event that drops the item; none after the last one
        .select(*ITEM, "seq", "t_ms", F.lit(-1).alias("d_cfg"))
    )
    return enters.unionByName(leaves).select(
        *ITEM, "seq", "t_ms", F.lit(None).cast("string").alias("worker"), F.lit(0).alias("d_own"), "d_cfg"
    )


def _timeline(effective: DataFrame, cfg_changes: DataFrame, ends: DataFrame) -> DataFrame:
    """Step 3: the item timeline with the state after each row and its duration."""
    by_item = Window.partitionBy(*ITEM).orderBy("seq")
    so_far = by_item.rowsBetween(_UNBOUNDED, Window.currentRow)
    before = by_item.rowsBetween(_UNBOUNDED, -1)
    d_own = F.col("d_own")
    return (
        effective.select(*ITEM, "seq", "t_ms", "worker", F.col("d").alias("d_own"), F.lit(0).alias("d_cfg"))
        .unionByName(cfg_changes)
        .select(
            *ITEM,
            "seq",
            "t_ms",
            "worker",
            "d_own",
            F.sum("d_own").over(so_far).alias("cnt"),
            F.sum("d_cfg").over(so_far).alias("cfg"),
            F.lead("t_ms").over(by_item).alias("next_t"),
            F.last(F.when(d_own == 1, F.col("worker")), ignorenulls=True).over(before).alias("prev_runner"),
        )
        .join(F.broadcast(ends), "drill")
        .withColumn("dur", F.coalesce("next_t", "end_ms") - F.col("t_ms"))
    )


def _per_item(timeline: DataFrame) -> DataFrame:
    """Step 3's sums per item: runs, moves, overlaps, overlap / unassigned time, state at the end."""
    cnt, cfg, dur = F.col("cnt"), F.col("cfg"), F.col("dur")
    starts = F.col("d_own") == 1
    moved = starts & F.col("prev_runner").isNotNull() & (F.col("prev_runner") != F.col("worker"))
    return timeline.groupBy(*ITEM).agg(
        F.sum(_int(starts)).cast("long").alias("runs"),
        F.sum(_int(moved)).cast("long").alias("moves"),
        F.sum(_int(starts & (cnt >= 2))).cast("long").alias("overlaps"),
        F.sum(F.when(cnt >= 2, dur).otherwise(0)).cast("long").alias("overlap_ms"),
        F.sum(F.when((cfg > 0) & (cnt == 0), dur).otherwise(0)).cast("long").alias("unassigned_item_ms"),
        F.max(F.when((cfg > 0) & (cnt == 0), dur).otherwise(0)).cast("long").alias("longest_unassigned_ms"),
        F.max_by("cnt", "seq").cast("long").alias("workers_at_end"),
        (F.max_by("cfg", "seq") > 0).alias("configured_at_end"),
    )


def _end_state(ev: DataFrame, intervals: DataFrame, per_item: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Step 4: items with their converged flag, and per drill the balance of the live workers."""
    last_state = (
        ev.where(F.col("type").isin("worker_start", "worker_stop", "worker_crash"))
        .groupBy("drill", "worker")
        .agg(F.max_by("type", "seq").alias("last"))
    )
    live = last_state.where(F.col("last") == "worker_start").select("drill", "worker")
    running_at_end = intervals.where(F.col("open")).select("drill", "connector", "task", "worker")
    live_runners = (
        running_at_end.join(live.withColumn("is_live", F.lit(1)), ["drill", "worker"], "left")
        .groupBy(*ITEM)
        .agg(F.sum(F.coalesce("is_live", F.lit(0))).cast("long").alias("live_workers_at_end"))
    )
    items = per_item.join(live_runners, list(ITEM), "left").fillna(0, subset=["live_workers_at_end"])
    item_ok = F.when(
        F.col("configured_at_end"),
        (F.col("workers_at_end") == 1) & (F.col("live_workers_at_end") == 1),
    ).otherwise(F.col("workers_at_end") == 0)
    items = items.withColumn("converged", item_ok)
    load = running_at_end.groupBy("drill", "worker").agg(
        F.sum(_int(F.col("task") == CONNECTOR_TASK)).alias("conns"),
        F.sum(_int(F.col("task") != CONNECTOR_TASK)).alias("tasks"),
    )
    spread_ok = (F.max("conns") - F.min("conns") <= 1) & (F.max("tasks") - F.min("tasks") <= 1)
    balance = (
        live.join(load, ["drill", "worker"], "left")
        .fillna(0, subset=["conns", "tasks"])
        .groupBy("drill")
        .agg(spread_ok.alias("balanced"), F.count(F.lit(1)).alias("live_workers"))
    )
    return items, balance


_ITEM_SUMS = ("overlaps", "overlap_ms", "moves", "unassigned_item_ms")


def _drill_table(base: DataFrame, items: DataFrame, balance: DataFrame) -> DataFrame:
    """One row per drill: the item sums, the balance and the drill's own counts (0 when absent)."""
    item_totals = items.groupBy("drill").agg(
        *(F.sum(name).alias(name) for name in _ITEM_SUMS),
        F.max("longest_unassigned_ms").alias("longest_unassigned_ms"),
        F.sum(_int(~F.col("converged"))).alias("bad_items"),
        F.count(F.lit(1)).alias("items"),
    )
    zero = F.lit(0).cast("long")

    def long_or_zero(name: str) -> Column:
        return F.coalesce(F.col(name).cast("long"), zero).alias(name)

    return (
        base.join(item_totals, "drill", "left")
        .join(balance, "drill", "left")
        .select(
            "drill",
            F.col("events").cast("long").alias("events"),
            long_or_zero("overlaps"),
            long_or_zero("overlap_ms"),
            (F.coalesce("bad_items", F.lit(0)) == 0).alias("converged"),
            F.coalesce("balanced", F.lit(True)).alias("balanced"),
            long_or_zero("moves"),
            F.col("rebalances"),
            long_or_zero("unassigned_item_ms"),
            long_or_zero("longest_unassigned_ms"),
            "end_ms",
            long_or_zero("items"),
            long_or_zero("live_workers"),
        )
        .withColumn("exclusive", F.col("overlaps") == 0)
        .withColumn("ok", F.col("exclusive") & F.col("converged") & F.col("balanced"))
    )


# --- chart series: (drill, series, seq, t_ms, value = the series' value from this event on) ------


def worker_load(m: Metrics, drills: list[str]) -> DataFrame:
    """Items each worker runs, after each of its effective changes (series = worker)."""
    by_worker = Window.partitionBy("drill", "worker").orderBy("seq")  # RANGE: a stop's rows together
    eff = m.effective.where(F.col("drill").isin(drills))
    return eff.select(
        "drill", F.col("worker").alias("series"), "seq", "t_ms", F.sum("d").over(by_worker).alias("value")
    )


def item_states(m: Metrics, drills: list[str]) -> DataFrame:
    """Unassigned configured items and items on ≥ 2 workers, drill-wide, after each change."""
    by_item = Window.partitionBy(*ITEM).orderBy("seq")
    by_drill = Window.partitionBy("drill").orderBy("seq")  # RANGE: rows of one event together
    tl = m.timeline.where(F.col("drill").isin(drills))
    u = _int((F.col("cfg") > 0) & (F.col("cnt") == 0))
    o = _int(F.col("cnt") >= 2)
    tl = tl.select(
        "drill",
        "seq",
        "t_ms",
        (u - F.lag(u, 1, 0).over(by_item)).alias("du"),
        (o - F.lag(o, 1, 0).over(by_item)).alias("do"),
    )
    tl = tl.select(
        "drill",
        "seq",
        "t_ms",
        F.sum("du").over(by_drill).alias("unassigned"),
        F.sum("do").over(by_drill).alias("overlapping"),
    )
    return tl.select(
        "drill",
        "seq",
        "t_ms",
        F.explode(
            F.array(
                F.struct(F.lit("unassigned items").alias("series"), F.col("unassigned").alias("value")),
                F.struct(F.lit("items on >= 2 workers").alias("series"), F.col("overlapping").alias("value")),
            )
        ).alias("s"),
    ).select("drill", "s.series", "seq", "t_ms", "s.value")


def epochs(events: DataFrame, drills: list[str]) -> DataFrame:
    """Member epochs per worker and the coordinator's group epoch (series ``group <type>``)."""
    ev = events.where(F.col("drill").isin(drills))
    member = ev.where(F.col("type") == "epoch").select(
        "drill",
        F.coalesce("worker", F.lit("?")).alias("series"),
        "seq",
        "t_ms",
        F.col("epoch").alias("value"),
    )
    group = ev.where(F.col("type") == "group").select(
        "drill",
        F.concat(F.lit("group "), F.coalesce("group_type", F.lit("?"))).alias("series"),
        "seq",
        "t_ms",
        F.col("group_epoch").alias("value"),
    )
    return member.unionByName(group).where(F.col("value").isNotNull())


def collect_series(
    parts: dict[str, DataFrame], ends: DataFrame, bins: int
) -> dict[str, dict[str, dict[str, list[Any]]]]:
    """Bin and collect several series frames in one job:
    ``{part: {drill: {series: [(bin, peak, last), ...]}}}``, points sorted by bin."""
    frames = [
        df.select(F.lit(part).alias("part"), "drill", "series", "seq", "t_ms", F.col("value").cast("long"))
        for part, df in parts.items()
    ]
    union = frames[0]
    for frame in frames[1:]:
        union = union.unionByName(frame)
    b = F.floor(F.col("t_ms") * F.lit(bins) / (F.col("end_ms") + F.lit(1))).cast("int")
    binned = (
        union.join(F.broadcast(ends), "drill")
        .withColumn("bin", b)
        .groupBy("part", "drill", "series", "bin")
        .agg(F.max("value").alias("peak"), F.max_by("value", "seq").alias("last"))
    )
    out: dict[str, dict[str, dict[str, list[Any]]]] = {part: {} for part in parts}
    for row in binned.collect():
        out[row["part"]].setdefault(row["drill"], {}).setdefault(row["series"], []).append(
            (row["bin"], row["peak"], row["last"])
        )
    for drills in out.values():
        for series in drills.values():
            for points in series.values():
                points.sort()
    return out
