"""Small Spark aggregates behind the report's per-drill charts: the scenario's actions and the
ownership of the items that matter most.

Both are computed only for the drills the report charts (``keys``, a handful) and are capped per
drill before they are collected, so a fleet of millions of events sends at most
``MAX_ACTIONS`` actions and ``MAX_INTERVALS`` ownership rows per charted drill to the driver.

Actions are derived from event types (docs/drills.md, "Event log"), per drill in log order:

============================  ==============================================================
event                         action
============================  ==============================================================
``worker_start`` (first)      ``join`` — a worker added later (starts at the time of the
                              drill's first action are its initial cluster, not marked)
``worker_start`` (again)      ``restart`` (same protocol), ``upgrade`` / ``downgrade`` (the
                              protocol moved along eager → compatible → sessioned → new)
``worker_stop``               ``stop``
``worker_crash``              ``crash``
``bridge_restart``            ``bridge restart``
``config`` (not the first)    ``config change``
``stall_start``               ``stall``
============================  ==============================================================
"""

from __future__ import annotations

from typing import Any

MAX_ACTIONS = 300
"""Actions collected per charted drill (the earliest ones; the chart says how many were left out)."""
MAX_ITEMS = 40
"""Items shown in a drill's ownership chart: those with overlaps first, then unassigned time, moves."""
MAX_INTERVALS = 4000
"""Ownership intervals (and overlap / gap segments) collected per charted drill, earliest first."""
PROTOCOL_ORDER = ("eager", "compatible", "sessioned", "new")
"""Worker protocols from oldest to newest: a restart moving right is an upgrade."""
ACTION_KINDS = (
    "crash",
    "stop",
    "restart",
    "upgrade",
    "downgrade",
    "join",
    "bridge restart",
    "config change",
    "stall",
)
"""Every action kind, in the order the timeline lists them (worst first)."""

_ACTION_TYPES = ("worker_start", "worker_stop", "worker_crash", "bridge_restart", "config", "stall_start")


def actions(events: Any, keys: list[str], limit: int = MAX_ACTIONS) -> Any:
    """DataFrame ``drill, seq, t_ms, kind, worker, detail, total`` of the drills ``keys``: at most
    ``limit`` actions per drill (``total`` = all of that drill's actions)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    ev = events.where(F.col("drill").isin(keys) & F.col("type").isin(*_ACTION_TYPES))
    # per (drill, worker, type): the n-th start of a worker, the n-th config of a drill (worker null)
    own = Window.partitionBy("drill", "worker", "type").orderBy("seq")
    whole = Window.partitionBy("drill")
    rank = F.create_map(*(x for i, p in enumerate(PROTOCOL_ORDER) for x in (F.lit(p), F.lit(i))))
    ev = ev.select(
        "drill",
        "seq",
        "t_ms",
        "type",
        "worker",
        "protocol",
        F.lag("protocol").over(own).alias("prev_protocol"),
        F.row_number().over(own).alias("nth"),
        F.min("t_ms").over(whole).alias("t0"),
    )
    kind_col, proto, prev = F.col("type"), F.col("protocol"), F.col("prev_protocol")
    kind_of_start = (
        F.when(F.col("nth") == 1, F.when(F.col("t_ms") > F.col("t0"), F.lit("join")))
        .when(proto.eqNullSafe(prev), F.lit("restart"))
        .when(rank[proto] > rank[prev], F.lit("upgrade"))
        .when(rank[proto] < rank[prev], F.lit("downgrade"))
        .otherwise(F.lit("restart"))
    )
    kind = (
        F.when(kind_col == "worker_start", kind_of_start)
        .when(kind_col == "worker_stop", F.lit("stop"))
        .when(kind_col == "worker_crash", F.lit("crash"))
        .when(kind_col == "bridge_restart", F.lit("bridge restart"))
        .when((kind_col == "config") & (F.col("nth") > 1), F.lit("config change"))
        .when(kind_col == "stall_start", F.lit("stall"))
    )
    changed = (kind_col == "worker_start") & prev.isNotNull() & ~proto.eqNullSafe(prev)
    detail = F.when(
        changed, F.concat(F.coalesce(prev, F.lit("?")), F.lit(" → "), F.coalesce(proto, F.lit("?")))
    ).when(kind_col.isin("worker_start", "worker_stop", "worker_crash"), proto)
    marked = ev.select("drill", "seq", "t_ms", kind.alias("kind"), "worker", detail.alias("detail")).where(
        F.col("kind").isNotNull()
    )
    by_drill = Window.partitionBy("drill").orderBy("seq")
    return (
        marked.select(
            "*", F.row_number().over(by_drill).alias("n"), F.count(F.lit(1)).over(whole).alias("total")
        )
        .where(F.col("n") <= limit)
        .drop("n")
    )


def ownership(m: Any, keys: list[str], max_items: int = MAX_ITEMS, limit: int = MAX_INTERVALS) -> Any:
    """DataFrame ``drill, connector, task, kind, worker, start_ms, end_ms, items``: the ownership
    intervals (kind ``run``) and the overlap / gap segments (kinds ``overlap``, ``unassigned``)
    of the ``max_items`` most eventful items of each drill ``keys``; ``items`` = all its items."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    item = ["drill", "connector", "task"]
    worst = Window.partitionBy("drill").orderBy(
        F.desc("overlaps"),
        F.desc("overlap_ms"),
        F.desc("unassigned_item_ms"),
        F.desc("moves"),
        "connector",
        "task",
    )
    chosen = (
        m.items.where(F.col("drill").isin(keys))
        .select(
            *item,
            F.row_number().over(worst).alias("r"),
            F.count(F.lit(1)).over(Window.partitionBy("drill")).alias("items"),
        )
        .where(F.col("r") <= max_items)
        .drop("r")
    )
    runs = m.intervals.where(F.col("drill").isin(keys)).select(
        *item, F.lit("run").alias("kind"), "worker", "start_ms", "end_ms"
    )
    by_item = Window.partitionBy(*item).orderBy("seq")
    tl = (
        m.timeline.where(F.col("drill").isin(keys))
        .select(*item, "t_ms", "cnt", "cfg", F.lead("t_ms").over(by_item).alias("next_t"))
        .join(F.broadcast(m.ends), "drill")
    )
    kind = F.when(F.col("cnt") >= 2, F.lit("overlap")).when(
        (F.col("cfg") > 0) & (F.col("cnt") == 0), F.lit("unassigned")
    )
    segments = tl.select(
        *item,
        kind.alias("kind"),
        F.lit(None).cast("string").alias("worker"),
        F.col("t_ms").alias("start_ms"),
        F.coalesce("next_t", "end_ms").alias("end_ms"),
    ).where(F.col("kind").isNotNull() & (F.col("end_ms") > F.col("start_ms")))
    rows = runs.unionByName(segments).join(F.broadcast(chosen), item)
    earliest = Window.partitionBy("drill").orderBy("start_ms", "connector", "task", "kind", "worker")
    return rows.select("*", F.row_number().over(earliest).alias("n")).where(F.col("n") <= limit).drop("n")


def worker_protocols(events: Any, keys: list[str], limit: int = MAX_ACTIONS) -> Any:
    """DataFrame ``drill, seq, t_ms, worker, protocol``: every ``worker_start`` of the drills
    ``keys`` (at most ``limit`` per drill, the earliest): which protocol each worker ran from then
    on, so the ownership chart can colour a run by its worker's protocol."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    starts = events.where(F.col("drill").isin(keys) & (F.col("type") == "worker_start"))
    by_drill = Window.partitionBy("drill").orderBy("seq")
    return (
        starts.select("drill", "seq", "t_ms", "worker", "protocol", F.row_number().over(by_drill).alias("n"))
        .where(F.col("n") <= limit)
        .drop("n")
    )


_ACTION_COLUMNS = ("seq", "t_ms", "kind", "worker", "detail", "total")
_PROTOCOL_COLUMNS = ("seq", "t_ms", "worker", "protocol")
_OWNERSHIP_COLUMNS = ("connector", "task", "kind", "worker", "start_ms", "end_ms", "items")


def collect(events: Any, m: Any, keys: list[str]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """``{"actions": {drill: [row, ...]}, "ownership": {...}, "protocols": {...}}``, in one job
    (each job costs a scheduling round trip; the rows are few). Rows are dicts of
    :func:`actions`' / :func:`ownership`'s / :func:`worker_protocols`' columns without ``drill``,
    in time order."""
    from pyspark.sql import functions as F

    out: dict[str, dict[str, list[dict[str, Any]]]] = {"actions": {}, "ownership": {}, "protocols": {}}
    if not keys:
        return out
    columns = {"actions": _ACTION_COLUMNS, "ownership": _OWNERSHIP_COLUMNS, "protocols": _PROTOCOL_COLUMNS}
    names = sorted(set(_ACTION_COLUMNS) | set(_OWNERSHIP_COLUMNS) | set(_PROTOCOL_COLUMNS))
    frames = []
    parts = (
        ("actions", actions(events, keys)),
        ("ownership", ownership(m, keys)),
        ("protocols", worker_protocols(events, keys)),
    )
    for part, df in parts:
        fields = dict(df.dtypes)
        frames.append(
            df.select(
                F.lit(part).alias("part"),
                "drill",
                *(F.col(c) if c in fields else F.lit(None).alias(c) for c in names),
            )
        )
    for row in frames[0].unionByName(frames[1]).unionByName(frames[2]).collect():
        part = row["part"]
        out[part].setdefault(row["drill"], []).append({c: row[c] for c in columns[part]})
    order = {
        "actions": ("seq",),
        "ownership": ("start_ms", "connector", "task", "kind", "worker"),
        "protocols": ("seq",),
    }
    for part, drills in out.items():
        for rows in drills.values():
            rows.sort(key=lambda r, keys=order[part]: tuple((r[k] is None, r[k]) for k in keys))
    return out
