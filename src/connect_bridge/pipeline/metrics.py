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
    changes: DataFrame
    """What the others are made of: effective toggles (``src`` own), configured changes (cfg) and
    worker starts (life), per drill (see :func:`_changes`)."""


def _int(cond: Column) -> Column:
    return F.when(cond, F.lit(1)).otherwise(F.lit(0))


def in_time_order(events: DataFrame) -> DataFrame:
    """The events with ``index`` = position in the file (0-based, per drill) and ``seq`` renumbered
    to ``t_ms`` order, file order for equal times: a log merged from several workers' files is
    analyzed as the checker does after sorting it (:func:`connect_bridge.drills.events.time_order`).

    One more column for :func:`compute`, from the same window: ``end_ms``, the drill's largest
    ``t_ms``. Both windows are partitioned by drill: one shuffle, and the result stays partitioned
    by drill, so that every later window and aggregation (all keyed by drill first) runs without
    another shuffle."""
    by_file = Window.partitionBy("drill").orderBy("seq")
    by_time = Window.partitionBy("drill").orderBy("t_ms", "seq")
    whole = by_time.rowsBetween(_UNBOUNDED, Window.unboundedFollowing)
    return events.select(
        *(c for c in events.columns if c != "seq"),
        (F.row_number().over(by_file) - 1).cast("long").alias("index"),
        (F.row_number().over(by_time) - 1).cast("long").alias("seq"),
        F.max("t_ms").over(whole).alias("end_ms"),
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
    ownership = F.coalesce(kind.isin(*OWNERSHIP), F.lit(False))
    # Only run / release need the previous toggle of their holder: the window sorts those alone.
    by_holder = Window.partitionBy("drill", "worker", "connector", "task").orderBy("index")
    prev = F.col("prev")

    def reason() -> Column:
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
        return (
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

    columns = ("drill", "index", "seq", "type")
    toggles = events.where(ownership).select(
        *columns,
        "t_ms",
        "worker",
        "connector",
        "task",
        "connectors",
        F.lag(F.struct("index", "type", "t_ms")).over(by_holder).alias("prev"),
    )
    others = events.where(~ownership).select(
        *columns,
        "t_ms",
        "worker",
        "connector",
        "task",
        "connectors",
        F.lit(None).cast("struct<index:bigint,type:string,t_ms:bigint>").alias("prev"),
    )
    checked = toggles.select(*columns, reason().alias("reason")).unionByName(
        others.select(*columns, reason().alias("reason"))
    )
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


_STOPS = ("worker_stop", "worker_crash")
_LIFECYCLE = ("worker_start", *_STOPS)
_OWN, _CFG, _LIFE = "own", "cfg", "life"
"""The kinds of :attr:`Metrics.changes` rows (``src``): an effective ownership toggle, a configured
change, a ``worker_start`` (so that a live worker running nothing still has a row)."""


def compute(events: DataFrame) -> Metrics:
    """Every drill metric per drill, plus the item and interval tables (lazy DataFrames).

    ``events`` must be :func:`in_time_order`'s (partitioned by drill, with ``end_ms``) and valid
    (see :func:`problems`). Every window and aggregation here is keyed by drill first and nothing
    is joined on a bigger key, so the plan has no shuffle beyond the one of :func:`in_time_order`
    (the per-drill tables are joined at the end, one row per drill): each partition's drills are
    computed where they are. The caller may persist the results (:attr:`Metrics.changes` is what
    the others are made of).
    """
    kind = F.col("type")
    base = events.groupBy("drill").agg(
        F.count(F.lit(1)).alias("events"),
        F.sum(_int(kind == "epoch")).cast("long").alias("rebalances"),
        F.coalesce(F.max("t_ms"), F.lit(0)).cast("long").alias("end_ms"),
    )
    changes = _changes(events)
    own = changes.where(F.col("src") == _OWN)
    timeline = _timeline(changes.where(F.col("src") != _LIFE))
    items = _per_item(timeline)
    return Metrics(
        drills=_drill_table(base, items, _balance(changes.where(F.col("src") != _CFG))),
        items=items,
        intervals=_intervals(own),
        effective=own.select(*ITEM, "worker", "seq", "t_ms", "d"),
        timeline=timeline.select(*ITEM, "seq", "t_ms", "cnt", "cfg"),
        ends=base.select("drill", "end_ms"),
        changes=changes,
    )


def _change(
    connector: Column,
    task: Column,
    worker: Column,
    seq: Column,
    t_ms: Column,
    d: int | Column,
    d_cfg: int,
    src: str,
    live: Column,
    end_t: Column | None = None,
) -> Column:
    """One row of :attr:`Metrics.changes` as a struct (every kind has the same fields; ``end_t``:
    when the run an effective start begins ends, null if it still runs at the end)."""
    return F.struct(
        connector.cast("string").alias("connector"),
        task.cast("long").alias("task"),
        worker.cast("string").alias("worker"),
        seq.cast("long").alias("seq"),
        t_ms.cast("long").alias("t_ms"),
        (d if isinstance(d, Column) else F.lit(d)).cast("int").alias("d"),
        F.lit(d_cfg).cast("int").alias("d_cfg"),
        F.lit(src).alias("src"),
        live.cast("boolean").alias("live"),
        (F.lit(None) if end_t is None else end_t).cast("long").alias("end_t"),
    )


def _listed(m: Column) -> Column:
    """The items a ``config`` map lists: ``(connector, task)`` structs, the instance (task -1) and
    tasks ``0..n-1`` of each connector."""
    instance = F.lit(CONNECTOR_TASK).cast("long")
    return F.flatten(
        F.transform(
            F.map_entries(m),
            lambda e: F.transform(
                F.sequence(instance, F.greatest(e["value"], F.lit(0).cast("long")) - 1),
                lambda t: F.struct(e["key"].alias("connector"), t.alias("task")),
            ),
        )
    )


def _lists(m: Column, item: Column) -> Column:
    """Whether the ``config`` map ``m`` lists ``item`` (a :func:`_listed` struct)."""
    n = F.coalesce(F.try_element_at(m, item["connector"]), F.lit(0).cast("long"))
    return F.map_contains_key(m, item["connector"]) & ((item["task"] == CONNECTOR_TASK) | (item["task"] < n))


def _changes(ev: DataFrame) -> DataFrame:
    """Steps 1 and 2 in one pass over the ownership, ``config`` and worker lifecycle events: the
    rows of :attr:`Metrics.changes` (drill, connector, task, worker, seq, t_ms, d, d_cfg, src,
    live, end_t, end_ms).

    Ownership toggles per holder ``(item, worker)``: a ``run`` sets the holder's state to +1, a
    ``release`` to -1, and a stop or crash of the worker sets it to -1 for every item. Rather than
    joining each stop with the items its worker ever ran, every ``run`` / ``release`` carries the
    worker's next stop (a window per worker in reverse order): the previous toggle's state is -1 if
    that toggle's next stop came before this toggle, else its own; and a stop ends a holder's run
    exactly when the last toggle before the stop was a ``run`` (one -1 row at the stop). Configured
    changes come from each ``config`` event and the previous one (in time order): items it
    lists that the previous did not enter, items the previous listed that it does not leave.
    ``live``: the worker's last ``worker_start`` / ``worker_stop`` / ``worker_crash`` is a start.
    ``end_t`` (of an effective start): the time of the worker's next stop or the holder's next
    release, whichever is first; the ownership intervals need no window of their own."""
    kind, worker, seq = F.col("type"), F.col("worker"), F.col("seq")
    rows = ev.where(kind.isin(*OWNERSHIP, "config", *_LIFECYCLE)).select(
        "drill",
        "seq",
        "t_ms",
        "type",
        "worker",
        "connector",
        "task",
        "connectors",
        "end_ms",
    )
    later_first = Window.partitionBy("drill", "worker").orderBy(F.desc("seq"))
    stop = kind.isin(*_STOPS) & worker.isNotNull()
    rows = rows.select(
        "*",
        F.last(F.when(stop, F.struct("seq", "t_ms")), ignorenulls=True)
        .over(later_first.rowsBetween(_UNBOUNDED, Window.currentRow))
        .alias("next_stop"),
        F.first(F.when(kind.isin(*_LIFECYCLE), kind), ignorenulls=True)
        .over(later_first.rowsBetween(_UNBOUNDED, Window.unboundedFollowing))
        .alias("last_life"),
    )
    # Newest first, so that the nearest later release is a running frame. config events have no
    # item and no worker: a partition of their own (per drill).
    newest_first = Window.partitionBy("drill", "connector", "task", "worker", kind == "config").orderBy(
        F.desc("seq")
    )
    d = F.when(kind == "run", F.lit(1)).when(kind == "release", F.lit(-1))
    rows = rows.select(
        "*",
        d.alias("d"),
        F.lead("connectors").over(newest_first).alias("prev_connectors"),
        F.lead(F.struct(d.alias("d"), F.col("next_stop.seq").alias("stop"))).over(newest_first).alias("prev"),
        F.lag("seq").over(newest_first).alias("next_seq"),
        F.last(F.when(d == -1, F.struct("seq", "t_ms")), ignorenulls=True)
        .over(newest_first.rowsBetween(_UNBOUNDED, -1))
        .alias("next_release"),
    )
    d, prev, next_stop = F.col("d"), F.col("prev"), F.col("next_stop")
    prev_state = F.when(prev["stop"] < seq, F.lit(-1)).otherwise(prev["d"])
    effective = ((d == 1) & (prev_state.isNull() | (prev_state == -1))) | ((d == -1) & (prev_state == 1))
    stopped = (
        (d == 1)
        & next_stop.isNotNull()
        & (F.col("next_seq").isNull() | (next_stop["seq"] < F.col("next_seq")))
    )
    live = F.coalesce(F.col("last_life") == "worker_start", F.lit(False))
    item = (F.col("connector"), F.col("task"), worker)
    # an effective start runs until the worker's next stop or the holder's next release, whichever
    # comes first (runs in between repeat it)
    until = F.least(next_stop, F.col("next_release"))["t_ms"]
    own = F.array(
        F.when(effective, _change(*item, seq, F.col("t_ms"), d, 0, _OWN, live, F.when(d == 1, until))),
        F.when(stopped, _change(*item, next_stop["seq"], next_stop["t_ms"], -1, 0, _OWN, live)),
    )
    nobody = F.lit(None)
    empty = F.from_json(F.lit("{}"), CONNECTORS_TYPE)
    now = F.coalesce(F.from_json(F.col("connectors"), CONNECTORS_TYPE), empty)
    before = F.coalesce(F.from_json(F.col("prev_connectors"), CONNECTORS_TYPE), empty)

    def configured(listed: Column, dropped_by: Column, d_cfg: int) -> Column:
        return F.transform(
            F.filter(listed, lambda x: ~_lists(dropped_by, x)),
            lambda x: _change(x["connector"], x["task"], nobody, seq, F.col("t_ms"), 0, d_cfg, _CFG, nobody),
        )

    cfg = F.concat(configured(_listed(now), before, 1), configured(_listed(before), now, -1))
    start = F.array(_change(nobody, nobody, worker, seq, F.col("t_ms"), 0, 0, _LIFE, live))
    out = F.when(kind.isin(*OWNERSHIP), own).when(kind == "config", cfg).when(kind == "worker_start", start)
    return (
        rows.select("drill", "end_ms", F.explode(out).alias("c"))
        .where(F.col("c").isNotNull())
        .select("drill", "c.*", "end_ms")
    )


def _intervals(own: DataFrame) -> DataFrame:
    """Ownership intervals: each effective start to the holder's next effective change (``end_t``,
    or the drill's end, then ``open``)."""
    return own.where(F.col("d") == 1).select(
        *ITEM,
        "worker",
        F.col("t_ms").alias("start_ms"),
        F.coalesce("end_t", "end_ms").alias("end_ms"),
        F.col("end_t").isNull().alias("open"),
    )


def _timeline(rows: DataFrame) -> DataFrame:
    """Step 3: the item timeline (effective toggles and configured changes) with the state after
    each row (``cnt`` runners, ``live_cnt`` of them live at the end, ``cfg``) and its duration."""
    by_item = Window.partitionBy(*ITEM).orderBy("seq")
    so_far = by_item.rowsBetween(_UNBOUNDED, Window.currentRow)
    before = by_item.rowsBetween(_UNBOUNDED, -1)
    d = F.col("d")
    return rows.select(
        *ITEM,
        "seq",
        "t_ms",
        "worker",
        F.col("d").alias("d_own"),
        F.sum("d").over(so_far).alias("cnt"),
        F.sum(F.when(F.col("live"), d).otherwise(0)).over(so_far).alias("live_cnt"),
        F.sum("d_cfg").over(so_far).alias("cfg"),
        (F.coalesce(F.lead("t_ms").over(by_item), F.col("end_ms")) - F.col("t_ms")).alias("dur"),
        F.last(F.when(d == 1, F.col("worker")), ignorenulls=True).over(before).alias("prev_runner"),
    )


def _per_item(timeline: DataFrame) -> DataFrame:
    """Step 3's sums per item and step 4's end state: runs, moves, overlaps, overlap / unassigned
    time, runners (and live runners) at the end, configured at the end, converged."""
    cnt, cfg, dur = F.col("cnt"), F.col("cfg"), F.col("dur")
    starts = F.col("d_own") == 1
    moved = starts & F.col("prev_runner").isNotNull() & (F.col("prev_runner") != F.col("worker"))
    items = timeline.groupBy(*ITEM).agg(
        F.sum(_int(starts)).cast("long").alias("runs"),
        F.sum(_int(moved)).cast("long").alias("moves"),
        F.sum(_int(starts & (cnt >= 2))).cast("long").alias("overlaps"),
        F.sum(F.when(cnt >= 2, dur).otherwise(0)).cast("long").alias("overlap_ms"),
        F.sum(F.when((cfg > 0) & (cnt == 0), dur).otherwise(0)).cast("long").alias("unassigned_item_ms"),
        F.max(F.when((cfg > 0) & (cnt == 0), dur).otherwise(0)).cast("long").alias("longest_unassigned_ms"),
        F.max_by("cnt", "seq").cast("long").alias("workers_at_end"),
        (F.max_by("cfg", "seq") > 0).alias("configured_at_end"),
        F.max_by("live_cnt", "seq").cast("long").alias("live_workers_at_end"),
    )
    item_ok = F.when(
        F.col("configured_at_end"),
        (F.col("workers_at_end") == 1) & (F.col("live_workers_at_end") == 1),
    ).otherwise(F.col("workers_at_end") == 0)
    return items.withColumn("converged", item_ok)


def _balance(rows: DataFrame) -> DataFrame:
    """Per drill: ``balanced`` (over live workers, connector instances per worker differ by at most
    1, and tasks too; a live worker running nothing counts 0) and ``live_workers``."""
    own = F.col("src") == _OWN
    instance = F.col("task") == CONNECTOR_TASK
    workers = rows.groupBy("drill", "worker").agg(
        F.max("live").alias("live"),
        F.sum(F.when(own & instance, F.col("d")).otherwise(0)).alias("conns"),
        F.sum(F.when(own & ~instance, F.col("d")).otherwise(0)).alias("tasks"),
    )
    spread_ok = (F.max("conns") - F.min("conns") <= 1) & (F.max("tasks") - F.min("tasks") <= 1)
    return (
        workers.where(F.col("live"))
        .groupBy("drill")
        .agg(spread_ok.alias("balanced"), F.count(F.lit(1)).alias("live_workers"))
    )


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
