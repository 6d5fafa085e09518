"""A single-process pandas implementation of the per-drill metrics (the benchmark baseline).

Same inputs as ``analyze`` (fleet Parquet, ``events.jsonl`` files or directories of them), same
per-drill numbers (``events``, ``overlaps``, ``overlap_ms``, ``unassigned_item_ms``, ``moves``,
``rebalances``, ``converged``, ``balanced``), same method as :mod:`.metrics` (docs/pipeline.md, "How
each metric is computed") but with vectorised numpy/pandas on integer codes in one process:

1. events sorted by ``(drill, t_ms, seq)``; strings become category codes, an item is a
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from connect_bridge.codecs.ids import CONNECTOR_TASK
from connect_bridge.drills.events import order_note
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
        marker = {"drill": name, "seq": -1, "t_ms": 0, "type": "__empty__"}
        frame = pd.DataFrame([marker], columns=list(READ_COLUMNS))
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


@dataclass(slots=True)
class _Coded:
    """Every event as integer codes, in ``(drill, t_ms, seq)`` order: the arrays all steps index into."""

    order: np.ndarray
    drill_names: pd.Index
    d: np.ndarray
    t: np.ndarray
    kind: np.ndarray
    tcode: dict[str, int]
    w1: np.ndarray
    """Worker code + 1 (0 = null worker)."""
    n_workers: int
    conn: np.ndarray
    """Connector code in the shared run/release/config vocabulary (-1 = null)."""
    task: np.ndarray
    end_ms: np.ndarray
    """Per drill: its largest ``t_ms``."""
    worker_names: pd.Index
    """Worker code (``w1 - 1``) → name."""
    conn_names: list[str]
    """Connector code → name."""

    @property
    def n_drills(self) -> int:
        return len(self.drill_names)

    def is_type(self, *names: str) -> np.ndarray:
        return _type_mask(self.kind, self.tcode, names)

    def worker_key(self, rows: np.ndarray) -> np.ndarray:
        """The ``(drill, worker)`` key of ``rows``."""
        return _combine((self.d[rows], self.n_drills), (self.w1[rows], self.n_workers))


@dataclass(slots=True)
class _Configs:
    """The numbered ``config`` events exploded to their configured items (instance task -1 first)."""

    rows: np.ndarray
    """Positions of the config events in :class:`_Coded` order."""
    d: np.ndarray
    k: np.ndarray
    """Index of each config event within its drill."""
    item_row: np.ndarray
    """Per configured item: index into ``rows``."""
    item_conn: np.ndarray
    item_task: np.ndarray


@dataclass(slots=True)
class _ItemSpace:
    """Mixed-radix coding of ``(drill, connector, task)`` items into one int64."""

    n_drills: int
    n_conn: int
    n_tasks: int
    min_task: int

    def key(self, dd: np.ndarray, cc_: np.ndarray, tt: np.ndarray) -> np.ndarray:
        return _combine((dd, self.n_drills), (cc_ + 1, self.n_conn), (tt - self.min_task, self.n_tasks))


def _encode(events: pd.DataFrame) -> tuple[_Coded, _Configs, _ItemSpace]:
    """Sort by ``(drill, t_ms, seq)`` (a merged log is analyzed in time order, file order for equal
    times, as ``analyze`` does) and turn every string into a code (docstring step 1)."""
    drill_codes, drill_names = _codes(events["drill"])
    seq = events["seq"].to_numpy(dtype=np.int64)
    t_file = events["t_ms"].to_numpy(dtype=np.int64)
    order = np.lexsort((seq, t_file, drill_codes))
    d = drill_codes[order]
    t = t_file[order]
    type_codes, type_names = _codes(events["type"])
    kind = type_codes[order]
    tcode = {name: i for i, name in enumerate(type_names)}
    worker_codes, worker_names = _codes(events["worker"])
    conf_rows = np.flatnonzero(_type_mask(kind, tcode, ("config",)))
    conf_text = events["connectors"].to_numpy(dtype=object)[order[conf_rows]]
    conf_maps = [json.loads(x) if isinstance(x, str) else dict(x) for x in conf_text]
    vocab = _connector_vocabulary(events["connector"], conf_maps)
    cc, cats = _codes(events["connector"])
    remap = np.array([vocab[str(c)] for c in cats] + [-1], dtype=np.int64)
    task_raw = events["task"].to_numpy(dtype=np.float64, na_value=np.nan)[order]
    end_ms = pd.Series(t).groupby(d).max().reindex(range(len(drill_names)), fill_value=0)
    coded = _Coded(
        order,
        drill_names,
        d,
        t,
        kind,
        tcode,
        w1=worker_codes[order] + 1,
        n_workers=len(worker_names) + 1,
        conn=remap[cc[order]],  # -1 (null) indexes the trailing -1
        task=np.where(np.isnan(task_raw), 0, task_raw).astype(np.int64),
        end_ms=end_ms.to_numpy(np.int64),
        worker_names=worker_names,
        conn_names=list(vocab),
    )
    configs = _explode_configs(d, conf_rows, conf_maps, vocab)
    return coded, configs, _item_space(coded, configs, len(vocab) + 1)


def _type_mask(kind: np.ndarray, tcode: dict[str, int], names: Sequence[str]) -> np.ndarray:
    """Rows whose type is one of ``names`` (a type absent from the input matches nothing)."""
    wanted = [tcode[n] for n in names if n in tcode]
    return np.isin(kind, wanted) if wanted else np.zeros(len(kind), dtype=bool)


def _connector_vocabulary(connectors: pd.Series, conf_maps: list[dict[str, Any]]) -> dict[str, int]:
    """One code per connector name across the run/release column and every config map."""
    vocab: dict[str, int] = {}
    cats = connectors.astype("category").cat.categories if len(connectors) else pd.Index([])
    for name in cats:
        vocab.setdefault(str(name), len(vocab))
    for m in conf_maps:
        for name in m:
            vocab.setdefault(str(name), len(vocab))
    return vocab


def _explode_configs(
    d: np.ndarray, conf_rows: np.ndarray, conf_maps: list[dict[str, Any]], vocab: dict[str, int]
) -> _Configs:
    """Configured items per config event (``k`` = index within the drill)."""
    conf_d = d[conf_rows]  # sorted: rows are in (drill, t_ms, seq) order
    ci_row: list[int] = []
    ci_conn: list[int] = []
    ci_task: list[int] = []
    for i, m in enumerate(conf_maps):
        for name, tasks in m.items():
            c = vocab[str(name)]
            ci_row.extend([i] * (int(tasks) + 1))
            ci_conn.extend([c] * (int(tasks) + 1))
            ci_task.extend(range(CONNECTOR_TASK, int(tasks)))
    return _Configs(
        rows=conf_rows,
        d=conf_d,
        k=np.arange(len(conf_rows)) - np.searchsorted(conf_d, conf_d),
        item_row=np.asarray(ci_row, dtype=np.int64),
        item_conn=np.asarray(ci_conn, dtype=np.int64),
        item_task=np.asarray(ci_task, dtype=np.int64),
    )


def _item_space(c: _Coded, configs: _Configs, n_conn: int) -> _ItemSpace:
    """Task codes must cover every ownership event's task and every configured one."""
    own_mask = c.is_type("run", "release")
    ci_task = configs.item_task
    max_task = max(
        int(c.task[own_mask].max()) if own_mask.any() else 0, int(ci_task.max()) if len(ci_task) else 0
    )
    min_task = min(int(c.task[own_mask].min()) if own_mask.any() else 0, CONNECTOR_TASK)
    return _ItemSpace(c.n_drills, n_conn, max_task - min_task + 1, min_task)


@dataclass(slots=True)
class _Toggles:
    """Ownership toggles sorted by ``(item, worker, position)``."""

    row: np.ndarray
    item: np.ndarray
    delta: np.ndarray
    w: np.ndarray
    eff: np.ndarray
    """The toggle is an effective start or stop (the checker's no-op rules)."""
    run_item: np.ndarray
    """Holders still running at the end: their item ..."""
    run_w: np.ndarray
    """... and worker."""


def _toggles(c: _Coded, space: _ItemSpace) -> _Toggles:
    """Step 2: ``run`` +1, ``release`` -1, stop/crash -1 for every pair the worker ever ran."""
    run_m = c.is_type("run")
    own_rows = np.flatnonzero(c.is_type("run", "release"))
    own_item = space.key(c.d[own_rows], c.conn[own_rows], c.task[own_rows])
    own_delta = np.where(run_m[own_rows], 1, -1)
    run_rows = np.flatnonzero(run_m)
    pairs = pd.DataFrame(
        {"dw": c.worker_key(run_rows), "item": space.key(c.d[run_rows], c.conn[run_rows], c.task[run_rows])}
    ).drop_duplicates()
    stop_rows = np.flatnonzero(c.is_type("worker_stop", "worker_crash") & (c.w1 > 0))
    ended = pd.DataFrame({"dw": c.worker_key(stop_rows), "row": stop_rows}).merge(pairs, on="dw")
    tog_row = np.concatenate([own_rows, ended["row"].to_numpy(np.int64)])
    tog_item = np.concatenate([own_item, ended["item"].to_numpy(np.int64)])
    tog_delta = np.concatenate([own_delta, -np.ones(len(ended), dtype=np.int64)])
    tog_w = c.w1[tog_row]
    o = np.lexsort((tog_row, tog_w, tog_item))
    tog_row, tog_item, tog_delta, tog_w = tog_row[o], tog_item[o], tog_delta[o], tog_w[o]
    holder_first = _group_starts(tog_item) | _group_starts(tog_w)
    prev = np.empty_like(tog_delta)
    prev[0:1] = 0
    prev[1:] = tog_delta[:-1]
    prev[holder_first] = 0
    eff_start = (tog_delta == 1) & (prev != 1)
    eff_stop = (tog_delta == -1) & (prev == 1)
    # state at the end per holder: its last toggle
    holder_last = np.ones(len(tog_item), dtype=bool)
    holder_last[:-1] = holder_first[1:]
    running_end = holder_last & (tog_delta == 1)
    return _Toggles(
        tog_row, tog_item, tog_delta, tog_w, eff_start | eff_stop, tog_item[running_end], tog_w[running_end]
    )


def _config_changes(configs: _Configs, space: _ItemSpace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Step 3: ``(row, item, ±1)``: enter at config ``k``, leave at ``k+1``."""
    if not len(configs.item_row):
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    ci_row_a, conf_k, conf_d = configs.item_row, configs.k, configs.d
    ci_d = conf_d[ci_row_a]
    ci_k = conf_k[ci_row_a]
    ci_item = space.key(ci_d, configs.item_conn, configs.item_task)
    n_k = int(conf_k.max()) + 2
    listed = ci_item * n_k + ci_k  # (item, k) pairs listed by config k
    listed_set = np.unique(listed)
    was_listed = np.where(ci_k > 0, np.isin(listed - 1, listed_set), False)
    enter_idx = np.flatnonzero(~was_listed)
    # leave at config k+1 of the same drill when it exists and does not list the item
    n_conf_in_drill = np.bincount(conf_d, minlength=space.n_drills)
    has_next = ci_k + 1 < n_conf_in_drill[ci_d]
    next_listed = np.isin(listed + 1, listed_set)
    leave_idx = np.flatnonzero(has_next & ~next_listed)
    conf_rows = configs.rows
    cfg_row = np.concatenate([conf_rows[ci_row_a[enter_idx]], conf_rows[ci_row_a[leave_idx] + 1]])
    cfg_item = np.concatenate([ci_item[enter_idx], ci_item[leave_idx]])
    cfg_delta = np.concatenate([np.ones(len(enter_idx), np.int64), -np.ones(len(leave_idx), np.int64)])
    return cfg_row, cfg_item, cfg_delta


@dataclass(slots=True)
class _Timeline:
    """Per-item rows sorted by ``(item, position)`` with the running state after each row."""

    item: np.ndarray
    d: np.ndarray
    t: np.ndarray
    cnt: np.ndarray
    cfg: np.ndarray
    start: np.ndarray
    w: np.ndarray
    last: np.ndarray
    """The item's last row."""
    dc: np.ndarray
    """The row's change of ``cnt`` (+1 effective start, -1 effective stop, 0 configured change)."""


def _timeline(c: _Coded, tog: _Toggles, cfg_changes: tuple[np.ndarray, ...]) -> _Timeline:
    """Step 4: effective toggles and configured changes together, with running counts."""
    cfg_row, cfg_item, cfg_delta = cfg_changes
    eff = tog.eff
    e_row, e_item, e_delta, e_w = tog.row[eff], tog.item[eff], tog.delta[eff], tog.w[eff]
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
        cum = np.cumsum(x)
        base = (cum - x)[item_first]
        return cum - base[seg]

    return _Timeline(
        item=tl_item,
        d=c.d[tl_row],
        t=c.t[tl_row],
        cnt=seg_cumsum(tl_dc),
        cfg=seg_cumsum(tl_dcfg),
        start=tl_start,
        w=tl_w,
        last=item_last,
        dc=tl_dc,
    )


def _timeline_numbers(tl: _Timeline, end_ms: np.ndarray, n_drills: int) -> dict[str, np.ndarray]:
    """Per drill: overlaps, overlap time, unassigned time, the longest unassigned stretch and moves
    from the item timeline."""
    cnt, cfg, tl_d, tl_t, tl_start = tl.cnt, tl.cfg, tl.d, tl.t, tl.start
    nxt = np.empty_like(tl_t)
    nxt[:-1] = tl_t[1:]
    nxt[tl.last] = end_ms[tl_d[tl.last]]
    dur = nxt - tl_t
    s_idx = np.flatnonzero(tl_start)
    s_item, s_w = tl.item[s_idx], tl.w[s_idx]
    same_item = np.zeros(len(s_idx), dtype=bool)
    same_item[1:] = s_item[1:] == s_item[:-1]
    moved = np.zeros(len(s_idx), dtype=bool)
    moved[1:] = s_w[1:] != s_w[:-1]
    # The longest single stretch an item ran nowhere, per drill (as the Spark step: per timeline
    # row, configured and run by nobody; rows are not merged).
    longest = np.zeros(n_drills, dtype=np.int64)
    np.maximum.at(longest, tl_d, np.where((cfg > 0) & (cnt == 0), dur, 0).astype(np.int64))
    return {
        "longest_unassigned_ms": longest,
        "overlaps": np.bincount(tl_d[tl_start & (cnt >= 2)], minlength=n_drills),
        "overlap_ms": np.bincount(tl_d, weights=np.where(cnt >= 2, dur, 0), minlength=n_drills),
        "unassigned_item_ms": np.bincount(
            tl_d, weights=np.where((cfg == 1) & (cnt == 0), dur, 0), minlength=n_drills
        ),
        "moves": np.bincount(tl_d[s_idx[same_item & moved]], minlength=n_drills),
    }


def _live_workers(c: _Coded, null_worker: bool = False) -> np.ndarray:
    """``(drill, worker)`` keys whose last start/stop/crash is a start; ``null_worker``: lifecycle
    events without a worker count as one more worker (as :mod:`.metrics` groups them)."""
    life = c.is_type("worker_start", "worker_stop", "worker_crash")
    life_rows = np.flatnonzero(life if null_worker else life & (c.w1 > 0))
    life_key = c.worker_key(life_rows)
    lo = np.lexsort((life_rows, life_key))
    lk, lr = life_key[lo], life_rows[lo]
    last = np.ones(len(lk), dtype=bool)
    last[:-1] = lk[1:] != lk[:-1]
    return lk[last & c.is_type("worker_start")[lr]]


def _end_state(
    c: _Coded, space: _ItemSpace, tog: _Toggles, tl: _Timeline, live_keys: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Step 5: per drill, converged (every item run by exactly its one live owner, or by nobody
    when unconfigured) and balanced (live workers' instances and tasks differ by at most one)."""
    n_drills, n_workers = space.n_drills, c.n_workers
    if live_keys is None:
        live_keys = _live_workers(c)
    end_item = tl.item[tl.last]
    item_d = tog.run_item // (space.n_conn * space.n_tasks)
    held_key = _combine((item_d, n_drills), (tog.run_w, n_workers))
    run_live = pd.Index(held_key).isin(pd.Index(live_keys))
    owner_live = pd.Series(run_live, index=tog.run_item).groupby(level=0).any()
    single_live = owner_live.reindex(end_item, fill_value=False).to_numpy()
    end_cnt = tl.cnt[tl.last]
    fine = np.where(tl.cfg[tl.last] == 1, (end_cnt == 1) & single_live, end_cnt == 0)
    converged = np.bincount(tl.d[tl.last][~fine], minlength=n_drills) == 0

    # balanced: per live worker, connector instances and tasks it runs at the end
    item_task = (tog.run_item % space.n_tasks) + space.min_task
    lw = pd.DataFrame({"key": live_keys, "inst": 0, "tasks": 0}).set_index("key")
    held = pd.DataFrame(
        {
            "key": held_key,
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
    return converged, balanced


def _moved(events: pd.DataFrame, c: _Coded) -> np.ndarray:
    """Per drill: how many events are at another position in time order than in file order."""
    drill_codes, _ = _codes(events["drill"])
    file_order = np.lexsort((events["seq"].to_numpy(dtype=np.int64), drill_codes))
    return np.bincount(c.d[file_order != c.order], minlength=c.n_drills)


def compute(events: pd.DataFrame) -> list[dict[str, Any]]:
    """Per-drill dicts (the summary keys plus ``exclusive``, ``ok`` and ``moved``: events that sorting
    by time moved), sorted by name."""
    c, configs, space = _encode(events)
    n_drills = c.n_drills
    n_events = np.bincount(c.d[~c.is_type("__empty__")], minlength=n_drills)
    rebalances = np.bincount(c.d[c.is_type("epoch")], minlength=n_drills)
    tog = _toggles(c, space)
    tl = _timeline(c, tog, _config_changes(configs, space))
    numbers = _timeline_numbers(tl, c.end_ms, n_drills)
    converged, balanced = _end_state(c, space, tog, tl)
    moved = _moved(events, c)
    out = []
    for i, name in enumerate(c.drill_names):
        row = {
            "name": str(name),
            "events": int(n_events[i]),
            "overlaps": int(numbers["overlaps"][i]),
            "overlap_ms": int(numbers["overlap_ms"][i]),
            "converged": bool(converged[i]),
            "balanced": bool(balanced[i]),
            "moves": int(numbers["moves"][i]),
            "rebalances": int(rebalances[i]),
            "unassigned_item_ms": int(numbers["unassigned_item_ms"][i]),
            "longest_unassigned_ms": int(numbers["longest_unassigned_ms"][i]),
            "moved": int(moved[i]),
        }
        row["exclusive"] = row["overlaps"] == 0
        row["ok"] = row["exclusive"] and row["converged"] and row["balanced"]
        out.append(row)
    out.sort(key=lambda r: r["name"])
    return out


def _seg_sum(x: np.ndarray, first: np.ndarray) -> np.ndarray:
    """Sums of the segments of ``x`` that start at the indices ``first`` (exact, int64)."""
    if not len(first):
        return np.zeros(0, np.int64)
    return np.add.reduceat(x.astype(np.int64), first)


def tables(events: pd.DataFrame) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The three tables ``analyze`` writes, as columns (``{name: array}``): per drill, per item and
    per ownership interval, with the columns and meaning of :class:`connect_bridge.pipeline.metrics.Metrics`'
    ``drills``, ``items`` and ``intervals``. ``events`` (:data:`READ_COLUMNS`, valid: checked
    beforehand) must hold every event of its drills. Workers are grouped as :mod:`.metrics` groups
    them: lifecycle events without a worker count as one more worker (null).

    Items are those with a timeline row (an effective ownership change or a configured change); an
    interval runs from an effective start to its holder's next effective change, else to the
    drill's end (``open``)."""
    c, configs, space = _encode(events)
    n_drills, n_workers = c.n_drills, c.n_workers
    tog = _toggles(c, space)
    tl = _timeline(c, tog, _config_changes(configs, space))
    live_keys = _live_workers(c, null_worker=True)
    _, balanced = _end_state(c, space, tog, tl, live_keys)

    # per item: the timeline's segments
    first = np.flatnonzero(_group_starts(tl.item)) if len(tl.item) else np.zeros(0, np.int64)
    last = np.flatnonzero(tl.last) if len(tl.item) else np.zeros(0, np.int64)
    seg = np.cumsum(_group_starts(tl.item)) - 1 if len(tl.item) else np.zeros(0, np.int64)
    nxt = np.empty_like(tl.t)
    nxt[:-1] = tl.t[1:]
    nxt[tl.last] = c.end_ms[tl.d[tl.last]]
    dur = nxt - tl.t
    gap = np.where((tl.cfg > 0) & (tl.cnt == 0), dur, 0)
    s_idx = np.flatnonzero(tl.start)
    same_item = np.zeros(len(s_idx), dtype=bool)
    same_item[1:] = tl.item[s_idx][1:] == tl.item[s_idx][:-1]
    moved = np.zeros(len(s_idx), dtype=bool)
    moved[1:] = tl.w[s_idx][1:] != tl.w[s_idx][:-1]
    row_live = pd.Index(_combine((tl.d, n_drills), (tl.w, n_workers))).isin(pd.Index(live_keys))
    workers_at_end = tl.cnt[last]
    configured_at_end = tl.cfg[last] > 0
    live_at_end = _seg_sum(np.where(row_live, tl.dc, 0), first)
    item_key = tl.item[last]
    item_d = item_key // (space.n_conn * space.n_tasks)
    conn_names = np.asarray([*c.conn_names, None], dtype=object)  # code -1: the trailing None
    drill_names = np.asarray(c.drill_names, dtype=object)
    items = {
        "drill": drill_names[item_d],
        "connector": conn_names[(item_key // space.n_tasks) % space.n_conn - 1],
        "task": item_key % space.n_tasks + space.min_task,
        "runs": _seg_sum(tl.start, first),
        "moves": np.bincount(seg[s_idx[same_item & moved]], minlength=len(first)).astype(np.int64),
        "overlaps": _seg_sum(tl.start & (tl.cnt >= 2), first),
        "overlap_ms": _seg_sum(np.where(tl.cnt >= 2, dur, 0), first),
        "unassigned_item_ms": _seg_sum(gap, first),
        "longest_unassigned_ms": (
            np.maximum.reduceat(gap.astype(np.int64), first) if len(first) else np.zeros(0, np.int64)
        ),
        "workers_at_end": workers_at_end.astype(np.int64),
        "configured_at_end": configured_at_end,
        "live_workers_at_end": live_at_end,
        "converged": np.where(
            configured_at_end, (workers_at_end == 1) & (live_at_end == 1), workers_at_end == 0
        ),
    }

    def per_drill(values: np.ndarray, how: Any = np.add) -> np.ndarray:
        out = np.zeros(n_drills, np.int64)
        how.at(out, item_d, values.astype(np.int64))
        return out

    drills: dict[str, Any] = {
        "drill": drill_names,
        "events": np.bincount(c.d, minlength=n_drills).astype(np.int64),
        **{k: per_drill(items[k]) for k in ("overlaps", "overlap_ms")},
        "converged": per_drill(~items["converged"]) == 0,
        "balanced": balanced,
        "moves": per_drill(items["moves"]),
        "rebalances": np.bincount(c.d[c.is_type("epoch")], minlength=n_drills).astype(np.int64),
        "unassigned_item_ms": per_drill(items["unassigned_item_ms"]),
        "longest_unassigned_ms": per_drill(items["longest_unassigned_ms"], np.maximum),
        "end_ms": c.end_ms,
        "items": np.bincount(item_d, minlength=n_drills).astype(np.int64),
        "live_workers": np.bincount(live_keys // n_workers, minlength=n_drills).astype(np.int64),
    }
    drills["exclusive"] = drills["overlaps"] == 0
    drills["ok"] = drills["exclusive"] & drills["converged"] & drills["balanced"]

    # intervals: each effective start to its holder's next effective change (a stop)
    e = np.flatnonzero(tog.eff)
    e_item, e_w = tog.item[e], tog.w[e]
    same_holder = np.zeros(len(e), dtype=bool)
    same_holder[:-1] = (e_item[1:] == e_item[:-1]) & (e_w[1:] == e_w[:-1])
    j = np.flatnonzero(tog.delta[e] == 1)
    closed = same_holder[j]
    start_row = tog.row[e[j]]
    end_row = tog.row[e[np.minimum(j + 1, len(e) - 1)]] if len(e) else start_row
    iv_key = e_item[j]
    iv_d = iv_key // (space.n_conn * space.n_tasks)
    worker_names = np.asarray([None, *c.worker_names], dtype=object)  # w1 = 0: null
    intervals = {
        "drill": drill_names[iv_d],
        "connector": conn_names[(iv_key // space.n_tasks) % space.n_conn - 1],
        "task": iv_key % space.n_tasks + space.min_task,
        "worker": worker_names[e_w[j]],
        "start_ms": c.t[start_row],
        "end_ms": np.where(closed, c.t[end_row], c.end_ms[iv_d]),
        "open": ~closed,
    }
    return drills, items, intervals


def analyze_pandas(paths: Sequence[str | Path]) -> dict[str, Any]:
    """``summary.json`` as ``analyze`` would write it, computed with pandas in this process."""
    drills = compute(load_events(paths))
    doc = {"drills": [{k: r[k] for k in DRILL_KEYS} for r in drills], "totals": totals(drills)}
    files = {name: path.name for path, name in find_inputs(paths).logs.items()}
    notes = [
        order_note(f"drill {r['name']!r}: {files.get(r['name'], 'the event table')}", r["moved"])
        for r in drills
        if r["moved"]
    ]
    return doc | ({"notes": notes} if notes else {})
