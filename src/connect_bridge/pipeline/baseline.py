"""A single-process pandas implementation of the per-drill §4.4 metrics (the benchmark baseline).

Same inputs as ``analyze`` (fleet Parquet, ``events.jsonl`` files or directories of them), same
per-drill numbers (``events``, ``overlaps``, ``overlap_ms``, ``unassigned_item_ms``, ``moves``,
``rebalances``, ``converged``, ``balanced``), same method as :mod:`.metrics` (docs/pipeline.md, "How
each metric is computed") but with vectorised numpy/pandas on integer codes in one process:

1. events sorted by ``(drill, seq)``; strings become category codes, an item is a
   ``(drill, connector, task)`` code, a holder an ``(item, worker)`` pair;
2. ownership toggles (``run`` +1, ``release`` -1, stop/crash -1 for every pair the worker ever ran)
   sorted by ``(holder, position)``: effective starts/stops from the previous toggle;
3. configured changes from the numbered ``config`` events (enter at ``k`` / leave at ``k+1``);
4. item timeline = both, sorted by ``(item, position)``: running counts, durations to the next row
   or the drill's end, overlap / unassigned time, overlaps, moves;
5. end state: last toggle per holder, last start/stop/crash per worker → converged, balanced.

No malformation checks: the input is assumed valid (as ``metrics.compute`` assumes after
``analyze`` has checked it). Nothing here imports pyspark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from connect_bridge.codecs.ids import CONNECTOR_TASK
from connect_bridge.pipeline.analyze import DRILL_KEYS, find_inputs, totals

READ_COLUMNS = ("drill", "seq", "t_ms", "type", "worker", "connector", "task", "connectors")


def _read_parquet(path: Path) -> pd.DataFrame:
    import pyarrow.dataset as ds

    dataset = ds.dataset(str(path), format="parquet", partitioning="hive")
    names = set(dataset.schema.names)
    missing = [c for c in READ_COLUMNS if c not in names]
    if missing:
        raise ValueError(f"{path}: not an event table (missing columns {', '.join(missing)})")
    table = dataset.to_table(columns=list(READ_COLUMNS))
    # hive partition values may come back typed or dictionary-encoded: make every column plain
    import pyarrow as pa

    cols = {}
    for name in READ_COLUMNS:
        col = table.column(name)
        want = pa.int64() if name in ("seq", "t_ms", "task") else pa.string()
        if pa.types.is_dictionary(col.type):
            col = col.cast(col.type.value_type)
        cols[name] = col.cast(want)
    return pa.table(cols).to_pandas(strings_to_categorical=True)


def _read_jsonl(path: Path, name: str) -> pd.DataFrame:
    from connect_bridge.pipeline.schema import event_row

    rows = []
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(event_row(json.loads(line), name, len(rows)))
    frame = pd.DataFrame(rows, columns=list(READ_COLUMNS))
    if frame.empty:  # an empty log is an ok drill with zeros; keep it visible through a marker row
        frame = pd.DataFrame([{"drill": name, "seq": -1, "t_ms": 0, "type": "__empty__"}])
    return frame


def load_events(paths: Iterable[str | Path]) -> pd.DataFrame:
    """The :data:`READ_COLUMNS` of every input (drill names as ``analyze`` gives them, except that
    colliding ``summary.json`` names are not de-duplicated)."""
    inputs = find_inputs(paths)
    frames = [_read_parquet(p) for p in inputs.parquet]
    frames += [_read_jsonl(p, name) for p, name in inputs.logs.items()]
    if len(frames) == 1:
        return frames[0]
    frames = [
        f.astype({c: "object" for c in ("drill", "type", "worker", "connector", "connectors")})
        for f in frames
    ]
    return pd.concat(frames, ignore_index=True)


def _codes(series: pd.Series) -> tuple[np.ndarray, pd.Index]:
    """Category codes (-1 = null) and categories of a string column."""
    cat = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
    return cat.cat.codes.to_numpy().astype(np.int64), cat.cat.categories


def _group_starts(keys: np.ndarray) -> np.ndarray:
    """For sorted ``keys``: True where a new key starts."""
    first = np.ones(len(keys), dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    return first


def _combine(*parts: tuple[np.ndarray, int]) -> np.ndarray:
    """Mixed-radix int64 key of several non-negative code arrays ``(codes, cardinality)``."""
    total = 1
    for _, size in parts:
        total *= max(size, 1)
    if total >= 2**62:
        raise OverflowError("too many distinct keys for one int64")
    key = np.zeros(len(parts[0][0]), dtype=np.int64)
    for codes, size in parts:
        key = key * max(size, 1) + codes
    return key


def compute(events: pd.DataFrame) -> list[dict[str, Any]]:
    """Per-drill dicts (the §4.4 keys plus ``exclusive`` and ``ok``), sorted by name."""
    drill_codes, drill_names = _codes(events["drill"])
    seq = events["seq"].to_numpy(dtype=np.int64)
    order = np.lexsort((seq, drill_codes))
    d = drill_codes[order]
    t = events["t_ms"].to_numpy(dtype=np.int64)[order]
    type_codes, type_names = _codes(events["type"])
    kind = type_codes[order]
    tcode = {name: i for i, name in enumerate(type_names)}

    def is_type(*names: str) -> np.ndarray:
        wanted = [tcode[n] for n in names if n in tcode]
        return np.isin(kind, wanted) if wanted else np.zeros(len(kind), dtype=bool)

    n_drills = len(drill_names)
    real = ~is_type("__empty__")
    n_events = np.bincount(d[real], minlength=n_drills)
    rebalances = np.bincount(d[is_type("epoch")], minlength=n_drills)
    end_ms = pd.Series(t).groupby(d).max().reindex(range(n_drills), fill_value=0).to_numpy(np.int64)

    worker_codes, worker_names = _codes(events["worker"])
    w = worker_codes[order]
    n_workers = len(worker_names) + 1
    w1 = w + 1  # 0 = null worker

    # connectors: one vocabulary for run/release columns and config maps
    conn_series = events["connector"]
    conf_mask = is_type("config")
    conf_rows = np.flatnonzero(conf_mask)
    conf_text = events["connectors"].to_numpy(dtype=object)[order[conf_rows]]
    conf_maps = [json.loads(x) if isinstance(x, str) else dict(x) for x in conf_text]
    vocab: dict[str, int] = {}
    conn_cats = conn_series.astype("category").cat.categories if len(conn_series) else pd.Index([])
    for name in conn_cats:
        vocab.setdefault(str(name), len(vocab))
    for m in conf_maps:
        for name in m:
            vocab.setdefault(str(name), len(vocab))
    cc, cats = _codes(conn_series)
    remap = np.array([vocab[str(c)] for c in cats] + [-1], dtype=np.int64)
    conn = remap[cc[order]]  # -1 (null) indexes the trailing -1
    task_raw = events["task"].to_numpy(dtype=np.float64, na_value=np.nan)[order]
    task = np.where(np.isnan(task_raw), 0, task_raw).astype(np.int64)

    # configured items per config event (k = index within the drill)
    conf_d = d[conf_rows]  # sorted: rows are in (drill, seq) order
    conf_k = np.arange(len(conf_rows)) - np.searchsorted(conf_d, conf_d)
    ci_row, ci_conn, ci_task = [], [], []
    for i, m in enumerate(conf_maps):
        for name, tasks in m.items():
            c = vocab[str(name)]
            ci_row.extend([i] * (int(tasks) + 1))
            ci_conn.extend([c] * (int(tasks) + 1))
            ci_task.extend(range(CONNECTOR_TASK, int(tasks)))
    ci_row_a = np.asarray(ci_row, dtype=np.int64)
    ci_conn_a = np.asarray(ci_conn, dtype=np.int64)
    ci_task_a = np.asarray(ci_task, dtype=np.int64)

    own_mask = is_type("run", "release")
    max_task = max(
        int(task[own_mask].max()) if own_mask.any() else 0, int(ci_task_a.max()) if len(ci_task_a) else 0
    )
    min_task = min(int(task[own_mask].min()) if own_mask.any() else 0, CONNECTOR_TASK)
    n_tasks = max_task - min_task + 1
    n_conn = len(vocab) + 1

    def item_key(dd: np.ndarray, cc_: np.ndarray, tt: np.ndarray) -> np.ndarray:
        return _combine((dd, n_drills), (cc_ + 1, n_conn), (tt - min_task, n_tasks))

    # --- 1. ownership toggles -------------------------------------------------------------------
    run_m = is_type("run")
    own_rows = np.flatnonzero(own_mask)
    own_item = item_key(d[own_rows], conn[own_rows], task[own_rows])
    own_delta = np.where(run_m[own_rows], 1, -1)
    # stop/crash: -1 for every (item, worker) pair the worker ever ran in the drill
    run_rows = np.flatnonzero(run_m)
    pairs = pd.DataFrame(
        {
            "dw": _combine((d[run_rows], n_drills), (w1[run_rows], n_workers)),
            "item": item_key(d[run_rows], conn[run_rows], task[run_rows]),
        }
    ).drop_duplicates()
    stop_rows = np.flatnonzero(is_type("worker_stop", "worker_crash") & (w1 > 0))
    stops = pd.DataFrame(
        {"dw": _combine((d[stop_rows], n_drills), (w1[stop_rows], n_workers)), "row": stop_rows}
    )
    ended = stops.merge(pairs, on="dw")
    tog_row = np.concatenate([own_rows, ended["row"].to_numpy(np.int64)])
    tog_item = np.concatenate([own_item, ended["item"].to_numpy(np.int64)])
    tog_delta = np.concatenate([own_delta, -np.ones(len(ended), dtype=np.int64)])
    tog_w = w1[tog_row]
    o = np.lexsort((tog_row, tog_w, tog_item))
    tog_row, tog_item, tog_delta, tog_w = tog_row[o], tog_item[o], tog_delta[o], tog_w[o]
    holder_first = _group_starts(tog_item) | _group_starts(tog_w)
    prev = np.empty_like(tog_delta)
    prev[0:1] = 0
    prev[1:] = tog_delta[:-1]
    prev[holder_first] = 0
    eff_start = (tog_delta == 1) & (prev != 1)
    eff_stop = (tog_delta == -1) & (prev == 1)
    eff = eff_start | eff_stop
    # state at the end per holder: its last toggle
    holder_last = np.ones(len(tog_item), dtype=bool)
    holder_last[:-1] = holder_first[1:]
    running_end = holder_last & (tog_delta == 1)
    run_item, run_w = tog_item[running_end], tog_w[running_end]

    # --- 2. configured changes ------------------------------------------------------------------
    if len(ci_row_a):
        ci_d = conf_d[ci_row_a]
        ci_k = conf_k[ci_row_a]
        ci_item = item_key(ci_d, ci_conn_a, ci_task_a)
        n_k = int(conf_k.max()) + 2
        listed = ci_item * n_k + ci_k  # (item, k) pairs listed by config k
        listed_set = np.unique(listed)
        was_listed = np.where(ci_k > 0, np.isin(listed - 1, listed_set), False)
        enter_idx = np.flatnonzero(~was_listed)
        # leave at config k+1 of the same drill when it exists and does not list the item
        n_conf_in_drill = np.bincount(conf_d, minlength=n_drills)
        has_next = ci_k + 1 < n_conf_in_drill[ci_d]
        next_listed = np.isin(listed + 1, listed_set)
        leave_idx = np.flatnonzero(has_next & ~next_listed)
        cfg_row = np.concatenate([conf_rows[ci_row_a[enter_idx]], conf_rows[ci_row_a[leave_idx] + 1]])
        cfg_item = np.concatenate([ci_item[enter_idx], ci_item[leave_idx]])
        cfg_delta = np.concatenate([np.ones(len(enter_idx), np.int64), -np.ones(len(leave_idx), np.int64)])
    else:
        cfg_row = cfg_item = cfg_delta = np.zeros(0, dtype=np.int64)

    # --- 3. item timeline -----------------------------------------------------------------------
    e_row, e_item, e_delta, e_w = tog_row[eff], tog_item[eff], tog_delta[eff], tog_w[eff]
    tl_row = np.concatenate([e_row, cfg_row])
    tl_item = np.concatenate([e_item, cfg_item])
    tl_dc = np.concatenate([e_delta, np.zeros(len(cfg_row), np.int64)])
    tl_dcfg = np.concatenate([np.zeros(len(e_row), np.int64), cfg_delta])
    tl_start = np.concatenate([e_delta == 1, np.zeros(len(cfg_row), bool)])
    tl_w = np.concatenate([e_w, np.zeros(len(cfg_row), np.int64)])
    o = np.lexsort((tl_row, tl_item))
    tl_row, tl_item, tl_dc, tl_dcfg, tl_start, tl_w = (
        a[o] for a in (tl_row, tl_item, tl_dc, tl_dcfg, tl_start, tl_w)
    )
    item_first = _group_starts(tl_item)
    item_last = np.ones(len(tl_item), dtype=bool)
    item_last[:-1] = item_first[1:]
    seg = np.cumsum(item_first) - 1

    def seg_cumsum(x: np.ndarray) -> np.ndarray:
        c = np.cumsum(x)
        base = (c - x)[item_first]
        return c - base[seg]

    cnt = seg_cumsum(tl_dc)
    cfg = seg_cumsum(tl_dcfg)
    tl_d = d[tl_row]
    tl_t = t[tl_row]
    nxt = np.empty_like(tl_t)
    nxt[:-1] = tl_t[1:]
    nxt[item_last] = end_ms[tl_d[item_last]]
    dur = nxt - tl_t
    overlaps = np.bincount(tl_d[tl_start & (cnt >= 2)], minlength=n_drills)
    overlap_ms = np.bincount(tl_d, weights=np.where(cnt >= 2, dur, 0), minlength=n_drills)
    unassigned = np.bincount(tl_d, weights=np.where((cfg == 1) & (cnt == 0), dur, 0), minlength=n_drills)
    s_idx = np.flatnonzero(tl_start)
    s_item, s_w = tl_item[s_idx], tl_w[s_idx]
    same_item = np.zeros(len(s_idx), dtype=bool)
    same_item[1:] = s_item[1:] == s_item[:-1]
    moved = np.zeros(len(s_idx), dtype=bool)
    moved[1:] = s_w[1:] != s_w[:-1]
    moves = np.bincount(tl_d[s_idx[same_item & moved]], minlength=n_drills)

    # --- 4. end state ---------------------------------------------------------------------------
    life_rows = np.flatnonzero(is_type("worker_start", "worker_stop", "worker_crash") & (w1 > 0))
    life_key = _combine((d[life_rows], n_drills), (w1[life_rows], n_workers))
    lo = np.lexsort((life_rows, life_key))
    lk, lr = life_key[lo], life_rows[lo]
    last = np.ones(len(lk), dtype=bool)
    last[:-1] = lk[1:] != lk[:-1]
    live_keys = lk[last & is_type("worker_start")[lr]]
    live_set = pd.Index(live_keys)

    end_cnt, end_cfg, end_item = cnt[item_last], cfg[item_last], tl_item[item_last]
    end_d = tl_d[item_last]
    item_d = run_item // (n_conn * n_tasks)
    run_live = pd.Index(_combine((item_d, n_drills), (run_w, n_workers))).isin(live_set)
    owner_live = pd.Series(run_live, index=run_item).groupby(level=0).any()
    single_live = owner_live.reindex(end_item, fill_value=False).to_numpy()
    fine = np.where(end_cfg == 1, (end_cnt == 1) & single_live, end_cnt == 0)
    converged = np.bincount(end_d[~fine], minlength=n_drills) == 0

    # balanced: per live worker, connector instances and tasks it runs at the end
    item_task = (run_item % n_tasks) + min_task
    lw = pd.DataFrame({"key": live_keys, "inst": 0, "tasks": 0}).set_index("key")
    held = pd.DataFrame(
        {
            "key": _combine((item_d, n_drills), (run_w, n_workers)),
            "inst": (item_task == CONNECTOR_TASK).astype(int),
            "tasks": (item_task != CONNECTOR_TASK).astype(int),
        }
    )
    held = held[run_live].groupby("key").sum()
    lw = lw.add(held, fill_value=0).loc[live_keys] if len(live_keys) else lw
    lw["drill"] = lw.index.to_numpy() // n_workers
    spread = lw.groupby("drill").agg(["min", "max"]) if len(lw) else None
    balanced = np.ones(n_drills, dtype=bool)
    if spread is not None:
        bad = ((spread[("inst", "max")] - spread[("inst", "min")]) > 1) | (
            (spread[("tasks", "max")] - spread[("tasks", "min")]) > 1
        )
        balanced[spread.index.to_numpy()[bad.to_numpy()]] = False

    out = []
    for i, name in enumerate(drill_names):
        row = {
            "name": str(name),
            "events": int(n_events[i]),
            "overlaps": int(overlaps[i]),
            "overlap_ms": int(overlap_ms[i]),
            "converged": bool(converged[i]),
            "balanced": bool(balanced[i]),
            "moves": int(moves[i]),
            "rebalances": int(rebalances[i]),
            "unassigned_item_ms": int(unassigned[i]),
        }
        row["exclusive"] = row["overlaps"] == 0
        row["ok"] = row["exclusive"] and row["converged"] and row["balanced"]
        out.append(row)
    out.sort(key=lambda r: r["name"])
    return out


def analyze_pandas(paths: Sequence[str | Path]) -> dict[str, Any]:
    """``summary.json`` as ``analyze`` would write it, computed with pandas in this process."""
    drills = compute(load_events(paths))
    return {"drills": [{k: r[k] for k in DRILL_KEYS} for r in drills], "totals": totals(drills)}
