"""Analysis-pipeline benchmark: ``analyze`` (PySpark, local[2]) vs a single-process pandas baseline.

Generates synthetic fleet event tables (the Parquet of ``connect_bridge.pipeline.schema``) of about
1M and 10M events with vectorised numpy/pyarrow: many drills of a few shapes (3-8 workers, 2-5
connectors with their tasks), each a config and worker starts, then rebalance rounds in which some
items are released and run elsewhere, workers report epochs, the coordinator a group epoch, and now
and then a worker restarts or the configuration changes one connector's task count; a ``drill_end``
closes each drill. Whether the drills keep the invariants does not matter here; volume and the
mix of event types do.

Timed: ``analyze(..., chart_drills=0)`` (reads, checks, computes, writes summary.json, the Parquet
tables, the fleet histograms and index.html) on ``local[2]`` after an untimed warm-up run, and
``baseline.analyze_pandas`` (read + compute) on the same files. Reported for both: seconds,
events/s and the ratio 10M-time / 1M-time (target <= 11, i.e. linear). Both must give the same
per-drill numbers. The last line printed is one JSON object, with the seconds of each of
``analyze``'s steps (``spark_<size>_phases_s``).

The pandas baseline holds every event in one process: before each run its peak memory is estimated
(the larger of the previous run's peak growth per event and :data:`PANDAS_BYTES_PER_EVENT`) and a run that
would not fit in 80% of the available memory is not started; the result says why
(``pandas_<size>_error``, ``pandas_<size>_estimated_gib``). ``--large 100000000`` thus measures
Spark at 100M events and records where pandas stops.

    python benchmarks/pipeline.py [--small N] [--large N] [--dir DIR] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from connect_bridge.pipeline.schema import arrow_schema

TYPES = ("run", "release", "epoch", "group", "worker_start", "worker_stop", "config", "drill_end")
T = {name: i for i, name in enumerate(TYPES)}
PROTOCOLS = ("eager", "compatible", "sessioned", "new")
MAX_WORKERS = 8
WORKERS = tuple(f"w{i}" for i in range(MAX_WORKERS))
CONNECTORS = tuple(f"c{i}" for i in range(5))
# (workers, tasks per connector): the drill shapes, cycled over the drills
SHAPES = ((3, (1, 2)), (4, (2, 3, 4)), (6, (4, 4, 6, 2)), (8, (8, 8, 4, 4, 2)))
EVENTS_PER_DRILL = 2_000
P_MOVE, P_EPOCH, P_RESTART, P_CONFIG, P_LATE = 0.15, 0.7, 0.03, 0.03, 0.02
"""Per round: an item moves, a worker reports an epoch, a worker restarts, the config changes;
per move: the old owner releases only after the new one runs it (an overlap)."""
TARGET_RATIO = 11.0


def _take(vocab: tuple[str, ...] | list[str], codes: np.ndarray) -> pa.Array:
    """Strings ``vocab[code]``, null where ``code < 0``."""
    return pa.array(list(vocab), pa.string()).take(pa.array(codes, pa.int64(), mask=codes < 0))


def _long(values: np.ndarray, null: np.ndarray) -> pa.Array:
    return pa.array(values, pa.int64(), mask=null)


def _shape_chunk(
    rng: np.random.Generator, drills: list[int], workers: int, tasks: tuple[int, ...], rounds: int
) -> pa.Table:
    """The events of ``drills`` (global drill numbers), all of one shape, as an Arrow table."""
    D, W, R = len(drills), workers, rounds
    item_conn = np.concatenate([np.full(n + 1, c) for c, n in enumerate(tasks)])
    item_task = np.concatenate([np.arange(-1, n) for n in tasks])
    ni = len(item_conn)
    # config variants: as configured, and the last connector with one task fewer
    variants = [
        json.dumps({CONNECTORS[c]: n for c, n in enumerate(tasks)}, separators=(",", ":")),
        json.dumps(
            {CONNECTORS[c]: (n - 1 if c == len(tasks) - 1 else n) for c, n in enumerate(tasks)},
            separators=(",", ":"),
        ),
    ]

    # owner of every item after each round: random moves, forward-filled
    change = rng.random((D, R, ni)) < P_MOVE
    change[:, 0, :] = True
    new_owner = rng.integers(0, W, (D, R, ni))
    last_change = np.maximum.accumulate(np.where(change, np.arange(R)[None, :, None], 0), axis=1)
    owner = np.take_along_axis(new_owner, last_change, axis=1)
    prev_owner = np.concatenate([owner[:, :1, :], owner[:, :-1, :]], axis=1)
    moved = change.copy()
    moved[:, 0, :] = False
    late = moved & (rng.random((D, R, ni)) < P_LATE)

    gaps = rng.integers(3_000, 60_000, (D, R))
    t0 = 5_000 + np.cumsum(gaps, axis=1)  # (D, R)
    restart = rng.random((D, R)) < P_RESTART
    restart_w = rng.integers(0, W, (D, R))
    config = rng.random((D, R)) < P_CONFIG
    config_v = rng.integers(0, 2, (D, R))
    epoch_on = rng.random((D, R, W)) < P_EPOCH
    # a restarted worker runs its items again (the stop ended them)
    rerun = change | (restart[:, :, None] & (owner == restart_w[:, :, None]))

    # slots of one round: stop, start, releases, epochs, group, runs, late releases, config
    S = 1 + 1 + ni + W + 1 + ni + ni + 1
    shape = (D, R, S)
    kind = np.full(shape, -1, np.int64)
    worker = np.full(shape, -1, np.int64)
    conn = np.full(shape, -1, np.int64)
    task = np.zeros(shape, np.int64)
    number = np.zeros(shape, np.int64)  # epoch / group_epoch / offset
    cfg = np.full(shape, -1, np.int64)
    dt = np.zeros(shape, np.int64)
    keep = np.zeros(shape, bool)
    rr = np.broadcast_to(np.arange(R)[None, :], (D, R))

    s = 0
    keep[:, :, s], kind[:, :, s], worker[:, :, s] = restart, T["worker_stop"], restart_w
    s += 1
    keep[:, :, s], kind[:, :, s], worker[:, :, s], dt[:, :, s] = restart, T["worker_start"], restart_w, 1
    s += 1
    sl = slice(s, s + ni)
    keep[:, :, sl], kind[:, :, sl], worker[:, :, sl] = moved & ~late, T["release"], prev_owner
    conn[:, :, sl], task[:, :, sl], dt[:, :, sl] = item_conn, item_task, 2
    s += ni
    sl = slice(s, s + W)
    keep[:, :, sl], kind[:, :, sl], worker[:, :, sl] = epoch_on, T["epoch"], np.arange(W)
    number[:, :, sl], dt[:, :, sl] = rr[:, :, None] + 1, 50
    s += W
    keep[:, :, s], kind[:, :, s], number[:, :, s], dt[:, :, s] = True, T["group"], rr + 1, 60
    s += 1
    sl = slice(s, s + ni)
    keep[:, :, sl], kind[:, :, sl], worker[:, :, sl] = rerun, T["run"], owner
    conn[:, :, sl], task[:, :, sl], dt[:, :, sl] = item_conn, item_task, 100 + np.arange(ni)
    s += ni
    sl = slice(s, s + ni)
    keep[:, :, sl], kind[:, :, sl], worker[:, :, sl] = late, T["release"], prev_owner
    conn[:, :, sl], task[:, :, sl], dt[:, :, sl] = item_conn, item_task, 120 + ni
    s += ni
    keep[:, :, s], kind[:, :, s], cfg[:, :, s] = config, T["config"], config_v
    number[:, :, s], dt[:, :, s] = rr + 2, 150 + ni
    t = t0[:, :, None] + dt

    # header: config, worker starts; trailer: drill_end
    H = 1 + W
    head_kind = np.concatenate([[T["config"]], np.full(W, T["worker_start"])])
    head_worker = np.concatenate([[-1], np.arange(W)])
    head_cfg = np.concatenate([[0], np.full(W, -1)])

    def row(head: np.ndarray, body: np.ndarray, tail: Any) -> np.ndarray:
        return np.concatenate(
            [
                np.broadcast_to(head, (D, H)),
                body.reshape(D, R * S),
                np.broadcast_to(np.asarray(tail), (D, 1)),
            ],
            axis=1,
        )

    end = t0[:, -1:] + 60_000
    kind2 = row(head_kind, kind, T["drill_end"])
    keep2 = row(np.ones(H, bool), keep, True)
    worker2 = row(head_worker, worker, -1)
    conn2 = row(np.full(H, -1), conn, -1)
    task2 = row(np.zeros(H, np.int64), task, 0)
    number2 = row(np.concatenate([[1], np.zeros(W, np.int64)]), number, 0)
    cfg2 = row(head_cfg, cfg, -1)
    t2 = np.concatenate([np.zeros((D, H), np.int64), t.reshape(D, R * S), end], axis=1)
    drill2 = np.broadcast_to(np.asarray(drills)[:, None], kind2.shape)

    flat = keep2.ravel()
    kind_f, worker_f, conn_f = kind2.ravel()[flat], worker2.ravel()[flat], conn2.ravel()[flat]
    task_f, number_f, cfg_f = task2.ravel()[flat], number2.ravel()[flat], cfg2.ravel()[flat]
    t_f, drill_f = t2.ravel()[flat], drill2.ravel()[flat]
    counts = keep2.sum(axis=1)
    seq = np.arange(len(kind_f)) - np.repeat(np.cumsum(counts) - counts, counts)

    own = (kind_f == T["run"]) | (kind_f == T["release"])
    lifecycle = (kind_f == T["worker_start"]) | (kind_f == T["worker_stop"])
    names = [f"synth-{i:07d}" for i in drills]
    drill_codes = np.searchsorted(np.asarray(drills), drill_f)
    columns = {
        "drill": _take(names, drill_codes),
        "seq": _long(seq, np.zeros(len(seq), bool)),
        "t_ms": _long(t_f, np.zeros(len(t_f), bool)),
        "type": _take(TYPES, kind_f),
        "worker": _take(WORKERS, worker_f),
        "connector": _take(CONNECTORS, np.where(own, conn_f, -1)),
        "task": _long(task_f, ~own),
        "protocol": _take(PROTOCOLS, np.where(lifecycle, (drill_f + worker_f) % len(PROTOCOLS), -1)),
        "epoch": _long(number_f, kind_f != T["epoch"]),
        "group_type": _take(("connect",), np.where(kind_f == T["group"], 0, -1)),
        "group_epoch": _long(number_f, kind_f != T["group"]),
        "connectors": _take(variants, cfg_f),
        "offset": _long(number_f, kind_f != T["config"]),
    }
    return pa.table(columns, schema=arrow_schema())


def events_per_round(workers: int, tasks: tuple[int, ...]) -> float:
    items = sum(n + 1 for n in tasks)
    return 2 * P_MOVE * items + P_EPOCH * workers + 1 + 2 * P_RESTART + P_CONFIG


def generate(path: Path, target_events: int, seed: int = 1) -> tuple[int, int]:
    """Write about ``target_events`` events as Parquet files under ``path``; (events, drills)."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    n_drills = max(len(SHAPES), round(target_events / EVENTS_PER_DRILL))
    total = 0
    per_file = 200  # drills per chunk (about 400k events)
    part = 0
    for k, (workers, tasks) in enumerate(SHAPES):
        rounds = max(2, round(EVENTS_PER_DRILL / events_per_round(workers, tasks)))
        mine = list(range(k, n_drills, len(SHAPES)))
        for i in range(0, len(mine), per_file):
            table = _shape_chunk(rng, mine[i : i + per_file], workers, tasks, rounds)
            pq.write_table(table, str(path / f"part-{part:05d}.parquet"))
            total += table.num_rows
            part += 1
    return total, n_drills


PANDAS_MEMORY_SHARE = 0.8
"""The pandas baseline runs only when its estimated peak memory fits in this share of the memory
available when it would start (it holds every event in one process; the machine must survive)."""
PANDAS_BYTES_PER_EVENT = 400
"""Peak bytes per event assumed at least (about 0.3 KB were measured at 10M events); a measured
run's peak growth per event counts only when it is more. A 1M run's growth is far less (the
process's resident memory already covers much of it): with it as the estimate, a run of
``--large 100000000`` started pandas on 100M events, past 16 GB of resident memory on a 23 GiB
machine, before it was stopped."""


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _available_mb() -> float:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


class _Phases:
    """``analyze``'s progress lines with the seconds until the next one: where the time goes."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, str]] = []

    def __call__(self, message: str) -> None:
        self.marks.append((time.monotonic(), message.split(" for ")[0].split(" 0 ")[0]))

    def seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for (start, name), (end, _) in zip(self.marks, self.marks[1:], strict=False):
            key = name.split(":")[0]
            out[key] = round(out.get(key, 0.0) + end - start, 2)
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=1_000_000, help="events of the small run")
    parser.add_argument("--large", type=int, default=10_000_000, help="events of the large run")
    parser.add_argument("--dir", help="work directory (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep the generated data")
    parser.add_argument("--driver-memory", default="6g", help="Spark driver memory (local mode)")
    parser.add_argument(
        "--engines",
        default="auto,sql",
        help="analyze engines to time, comma-separated: auto (by drill at these sizes), sql (the "
        "DataFrame plan), by-drill; keys spark_<size>_* for the first, spark_<engine>_<size>_* "
        "for the others",
    )
    args = parser.parse_args()

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="pipeline-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", f"--driver-memory {args.driver_memory} pyspark-shell")
    from connect_bridge.pipeline.analyze import analyze
    from connect_bridge.pipeline.baseline import analyze_pandas
    from connect_bridge.pipeline.session import get_spark

    result: dict[str, Any] = {"master": "local[2]", "cpus": os.cpu_count(), "target_ratio": TARGET_RATIO}
    sizes = {"1m": args.small, "10m": args.large}
    data: dict[str, Path] = {}
    for label, n in sizes.items():
        started = time.monotonic()
        events, drills = generate(work / f"events-{label}.parquet", n)
        secs = time.monotonic() - started
        data[label] = work / f"events-{label}.parquet"
        result[f"events_{label}"] = events
        result[f"drills_{label}"] = drills
        print(f"generated {events:,} events in {drills:,} drills ({label}) in {secs:.1f} s", flush=True)

    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    result["engines"] = engines
    spark = get_spark("local[2]")
    warm = work / "events-warmup.parquet"
    generate(warm, 20_000, seed=2)
    for engine in dict.fromkeys(engines):  # auto picks the sql engine for the small warm-up input
        warm_engine = "by-drill" if engine == "auto" else engine
        analyze([warm], work / "out-warmup", spark=spark, chart_drills=0, engine=warm_engine)

    spark_docs: dict[str, dict[str, Any]] = {}
    for label in sizes:
        for i, engine in enumerate(engines):
            prefix = "spark" if i == 0 else f"spark_{engine.replace('-', '_')}"
            phases = _Phases()
            started = time.monotonic()
            doc = analyze(
                [data[label]],
                work / f"out-{label}",
                spark=spark,
                chart_drills=0,
                progress=phases,
                engine=engine,
            )
            secs = time.monotonic() - started
            if i == 0:
                spark_docs[label] = doc
            elif doc != spark_docs[label]:
                raise SystemExit(f"{label}: engine {engine} gave other numbers than {engines[0]}")
            result[f"{prefix}_{label}_phases_s"] = phases.seconds()
            result[f"{prefix}_{label}_s"] = round(secs, 2)
            result[f"{prefix}_{label}_events_per_s"] = round(result[f"events_{label}"] / secs)
            print(
                f"spark  local[2] {engine} {label}: {secs:7.1f} s, "
                f"{result[f'events_{label}'] / secs:,.0f} events/s",
                flush=True,
            )
    result["spark_ratio_10m_1m"] = round(result["spark_10m_s"] / result["spark_1m_s"], 2)

    agree = True
    per_event = float(PANDAS_BYTES_PER_EVENT)
    for label in sizes:
        events = result[f"events_{label}"]
        before = _current_rss_mb()
        needed, available = before + per_event * events / 2**20, _available_mb()
        if needed > PANDAS_MEMORY_SHARE * available:
            why = (
                f"not run: needs about {needed / 1024:,.1f} GiB ({per_event:,.0f} bytes per event), "
                f"more than {PANDAS_MEMORY_SHARE:.0%} of the {available / 1024:,.1f} GiB available"
            )
            print(f"pandas 1 process {label}: {why}", flush=True)
            result[f"pandas_{label}_s"] = None
            result[f"pandas_{label}_error"] = why
            result[f"pandas_{label}_estimated_gib"] = round(needed / 1024, 1)
            continue
        try:
            started = time.monotonic()
            doc = analyze_pandas([data[label]])
            secs = time.monotonic() - started
        except MemoryError:
            print(f"pandas {label}: out of memory", flush=True)
            result[f"pandas_{label}_s"] = None
            result[f"pandas_{label}_error"] = "MemoryError"
            continue
        if _rss_mb() > before:  # this run set the peak: bytes per event for the next estimate
            per_event = max(per_event, (_rss_mb() - before) * 2**20 / events)
        result[f"pandas_{label}_s"] = round(secs, 2)
        result[f"pandas_{label}_events_per_s"] = round(result[f"events_{label}"] / secs)
        same = doc["drills"] == spark_docs[label]["drills"]
        agree = agree and same
        print(
            f"pandas 1 process {label}: {secs:7.1f} s, {result[f'events_{label}'] / secs:,.0f} events/s "
            f"(max RSS so far {_rss_mb():,.0f} MB; same numbers as Spark: {same})",
            flush=True,
        )
    if result.get("pandas_1m_s") and result.get("pandas_10m_s"):
        result["pandas_ratio_10m_1m"] = round(result["pandas_10m_s"] / result["pandas_1m_s"], 2)
    for label in sizes:  # Spark's speed as a share of pandas' (target: at least 0.5 at 10M)
        for key in [k for k in result if k.startswith("spark") and k.endswith(f"_{label}_s")]:
            if result.get(f"pandas_{label}_s"):
                result[key[:-2] + "_vs_pandas"] = round(result[f"pandas_{label}_s"] / result[key], 2)
    result["spark_linear"] = result["spark_ratio_10m_1m"] <= TARGET_RATIO
    result["same_numbers"] = agree
    result["pandas_max_rss_mb"] = round(_rss_mb())
    print(
        f"10M/1M time ratio: spark {result['spark_ratio_10m_1m']} (target <= {TARGET_RATIO}), "
        f"pandas {result.get('pandas_ratio_10m_1m')}"
    )
    if not args.keep and not args.dir:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
