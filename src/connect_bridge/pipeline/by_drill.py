"""``analyze`` of a big input: each drill's events in one partition, each partition analyzed with
the vectorised pandas code of :mod:`.baseline` in the executors' Python (``mapInArrow``), in one job.

Every drill metric depends on the events of one drill only, so once a drill's events are in one
partition the whole analysis of that partition is local: the malformation check (what
:func:`connect_bridge.pipeline.metrics.problems` reports, with the same messages), the time order,
and the per-drill, per-item and per-interval tables (:func:`connect_bridge.pipeline.baseline.tables`,
the method of :mod:`.metrics` on integer codes). The plan is one scan, at most one shuffle (hash by
drill, no sort: none when every drill lies in one file, :func:`layout`) and one Python pass per
partition, where the DataFrame plan of :mod:`.metrics` sorts the events six times. The partitions
write the item and interval tables as Parquet part files themselves and return only the per-drill
rows (and the problems of malformed logs): nothing is cached. Partitions are sized to the input so
that one Python worker holds about :data:`EVENTS_PER_PARTITION` events, whatever the input's size.

Small inputs keep the DataFrame plan (:func:`connect_bridge.pipeline.analyze.run`): this one starts
Python worker processes, which costs seconds that a short run does not have.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from connect_bridge.codecs.ids import CONNECTOR_TASK
from connect_bridge.drills.events import CONTRADICTION, OWNERSHIP
from connect_bridge.pipeline.schema import DRILL_NUMBERS

EVENTS_PER_PARTITION = 1_000_000
"""At most about this many events per partition: the pandas analysis of one partition holds its
events and a few arrays per event (about 0.3 GB per million events in one process)."""
JSON_BYTES_PER_EVENT = 70
"""Bytes of an ``events.jsonl`` line, to estimate a log's events from its size."""

INPUT_COLUMNS = ("drill", "seq", "t_ms", "type", "worker", "connector", "task", "connectors")
"""What the partition function reads (``connectors``: normalised, see :func:`_input`)."""

_FIELDS: tuple[tuple[str, Any, str], ...] = (
    # (column, Arrow type, Spark type): the union of the four parts' columns
    ("part", pa.string(), "string"),
    ("drill", pa.string(), "string"),
    ("events", pa.int64(), "long"),
    ("overlaps", pa.int64(), "long"),
    ("overlap_ms", pa.int64(), "long"),
    ("converged", pa.bool_(), "boolean"),
    ("balanced", pa.bool_(), "boolean"),
    ("moves", pa.int64(), "long"),
    ("rebalances", pa.int64(), "long"),
    ("unassigned_item_ms", pa.int64(), "long"),
    ("longest_unassigned_ms", pa.int64(), "long"),
    ("exclusive", pa.bool_(), "boolean"),
    ("ok", pa.bool_(), "boolean"),
    ("end_ms", pa.int64(), "long"),
    ("items", pa.int64(), "long"),
    ("live_workers", pa.int64(), "long"),
    ("connector", pa.string(), "string"),
    ("task", pa.int64(), "long"),
    ("runs", pa.int64(), "long"),
    ("workers_at_end", pa.int64(), "long"),
    ("configured_at_end", pa.bool_(), "boolean"),
    ("live_workers_at_end", pa.int64(), "long"),
    ("worker", pa.string(), "string"),
    ("start_ms", pa.int64(), "long"),
    ("open", pa.bool_(), "boolean"),
    ("n", pa.int64(), "long"),
    ("index", pa.int64(), "long"),
    ("type", pa.string(), "string"),
    ("reason", pa.string(), "string"),
    ("moved", pa.int64(), "long"),
)
OUT_SCHEMA = pa.schema([(name, kind) for name, kind, _ in _FIELDS])
SPARK_SCHEMA = ", ".join(f"`{name}` {kind}" for name, _, kind in _FIELDS)

DRILL, PROBLEM = "drill", "problem"
"""The values of ``part``: a per-drill row, or the first problem of a drill's log."""
ITEM_COLUMNS = (
    "drill",
    "connector",
    "task",
    "runs",
    "moves",
    "overlaps",
    "overlap_ms",
    "unassigned_item_ms",
    "longest_unassigned_ms",
    "workers_at_end",
    "configured_at_end",
    "live_workers_at_end",
    "converged",
)
"""The columns of :attr:`connect_bridge.pipeline.metrics.Metrics.items`, in its order."""
INTERVAL_COLUMNS = ("drill", "connector", "task", "worker", "start_ms", "end_ms", "open")
DRILL_COLUMNS = (
    "drill",
    *DRILL_NUMBERS,
    "longest_unassigned_ms",
    "end_ms",
    "items",
    "live_workers",
    "exclusive",
    "ok",
)
"""The columns of :attr:`connect_bridge.pipeline.metrics.Metrics.drills`, in its order."""
PROBLEM_COLUMNS = ("drill", "n", "index", "type", "reason", "moved")


WHOLE_FILE_EVENTS = 4_000_000
"""A file of more events than this is never read as one partition (see :func:`layout`)."""


@dataclass(frozen=True)
class Layout:
    """What the driver learns about the inputs before the job (file footers, Parquet ``drill``
    columns): their events and whether every drill lies in one file."""

    events: int
    """Events in the inputs (Parquet row counts, logs by size)."""
    whole: bool
    """Every drill's events are in one file, and no file is too big for one partition: reading
    whole files into partitions (:func:`whole_file_conf`) needs no shuffle by drill."""
    split_bytes: int
    """Input bytes per partition for about :data:`EVENTS_PER_PARTITION` events, at least the
    biggest file."""


def layout(logs: list[Path], parquet: list[Path]) -> Layout:
    """The :class:`Layout` of the inputs. An ``events.jsonl`` is one drill; a Parquet file's drills
    are its ``drill`` column's values (read dictionary-encoded, values only), or its hive
    directory's ``drill=`` value. A Parquet drill named like a log's URI (``file:``) could be the
    same drill as that log: then the layout is not ``whole``."""
    import pyarrow.parquet as pq

    sizes = {p: p.stat().st_size for p in logs}
    counts = {p: size // JSON_BYTES_PER_EVENT for p, size in sizes.items()}
    whole = True
    owner: dict[str, Path] = {}
    for path in parquet:
        files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
        for file in files:
            if not file.is_file() or any(
                part.startswith((".", "_")) for part in file.relative_to(path).parts
            ):
                continue
            meta = pq.ParquetFile(file).metadata
            sizes[file], counts[file] = file.stat().st_size, meta.num_rows
            if not whole:
                continue
            if "drill" in meta.schema.names:
                # the dictionaries: every value of the column (perhaps one more: never less)
                try:
                    table = pq.read_table(file, columns=["drill"], read_dictionary=["drill"])
                    chunks = table.column("drill").chunks
                    values = list({str(v) for chunk in chunks for v in chunk.dictionary.to_pylist()})
                except (pa.ArrowException, AttributeError):  # not a string column: not looked into
                    whole = False
                    continue
            else:
                values = [part.split("=", 1)[1] for part in file.parts if part.startswith("drill=")][-1:]
                if not values:
                    whole = False
            for value in values:
                if value.startswith("file:") or owner.setdefault(value, file) != file:
                    whole = False
    events = sum(counts.values())
    total = sum(sizes.values())
    per_event = total / events if events else 1.0
    biggest = max(sizes.values(), default=0)
    whole = whole and max(counts.values(), default=0) <= WHOLE_FILE_EVENTS
    return Layout(events, whole, max(biggest, int(EVENTS_PER_PARTITION * per_event)))


def estimated_events(logs: list[Path], parquet: list[Path]) -> int:
    """Events in the inputs: Parquet row counts from the files' footers, logs by size."""
    import pyarrow.parquet as pq

    total = sum(p.stat().st_size for p in logs) // JSON_BYTES_PER_EVENT
    for path in parquet:
        files = [path] if path.is_file() else sorted(path.rglob("*.parquet"))
        for file in files:
            if file.is_file() and not file.name.startswith((".", "_")):
                total += pq.ParquetFile(file).metadata.num_rows
    return total


def whole_file_conf(found: Layout) -> dict[str, str]:
    """Session settings under which a scan reads every file whole into one partition (none split,
    several packed up to :attr:`Layout.split_bytes`): Spark splits a file only when it is bigger
    than ``min(maxPartitionBytes, max(openCostInBytes, input bytes / minPartitionNum))``."""
    return {
        "spark.sql.files.maxPartitionBytes": str(found.split_bytes),
        "spark.sql.files.minPartitionNum": "1",
    }


def partitions(spark: Any, events: int) -> int:
    """One partition per :data:`EVENTS_PER_PARTITION` events, at least one per core."""
    return max(spark.sparkContext.defaultParallelism, -(-events // EVENTS_PER_PARTITION))


def _input(events: Any) -> Any:
    """The columns the partition function reads. ``connectors`` of a ``config`` event becomes
    Spark's own reading of it (``from_json`` as a string → long map, duplicate keys last-wins,
    negative or null task counts as 0, the reading of :mod:`.metrics`), as JSON text, null when it
    is not an object: the partition function then sees exactly the map the DataFrame plan sees."""
    from pyspark.sql import functions as F

    from connect_bridge.pipeline.metrics import CONNECTORS_TYPE

    parsed = F.from_json(F.col("connectors"), CONNECTORS_TYPE)
    counts = F.transform_values(parsed, lambda _k, v: F.greatest(v, F.lit(0).cast("long")))
    connectors = F.when(F.col("type") == "config", F.to_json(counts))
    return events.select(*INPUT_COLUMNS[:-1], connectors.alias("connectors"))


def analyze(spark: Any, events: Any, n_partitions: int | None, staging: Path) -> Any:
    """The lazy per-drill table (:data:`SPARK_SCHEMA`; ``part`` says which rows are drills, which
    the problems of malformed logs) of ``events`` (the table of
    :func:`connect_bridge.pipeline.analyze.load_events`): shuffled by drill into ``n_partitions``,
    or as read (``None``: the scan's partitions hold whole drills, :func:`whole_file_conf`). The
    item and interval tables are written by the partitions themselves, as Parquet part files under
    ``staging`` (:data:`TABLES`; the directory must be visible to the executors): no cache, no
    second pass over the result."""
    selected = _input(events)
    if n_partitions is not None:
        selected = selected.repartition(n_partitions, "drill")
    for name in TABLES:
        (staging / name).mkdir(parents=True, exist_ok=True)
    return selected.mapInArrow(functools.partial(analyze_batches, staging=str(staging)), SPARK_SCHEMA)


TABLES = {"items": ITEM_COLUMNS, "intervals": INTERVAL_COLUMNS}
"""The tables written under the staging directory: name → columns."""


def table_schema(name: str) -> pa.Schema:
    """The Arrow schema of the staged table ``name``."""
    return pa.schema([OUT_SCHEMA.field(column) for column in TABLES[name]])


def spark_table_schema(name: str) -> str:
    """The Spark schema (DDL) of the staged table ``name``."""
    kinds = {name: kind for name, _, kind in _FIELDS}
    return ", ".join(f"`{column}` {kinds[column]}" for column in TABLES[name])


def analyze_batches(batches: Iterator[pa.RecordBatch], staging: str) -> Iterator[pa.RecordBatch]:
    """The partition function: every drill of the partition (all its events are here)."""
    collected = list(batches)
    if not collected or not sum(b.num_rows for b in collected):
        return
    frame = pa.Table.from_batches(collected).to_pandas(strings_to_categorical=True)
    del collected
    bad, problems = _problems(frame)
    if len(problems["drill"]):
        yield _batch(PROBLEM, problems)
    if bad.any():
        frame = frame[~frame["drill"].isin(frame["drill"][bad].unique()).to_numpy()]
        if frame.empty:
            return
        frame = frame.assign(drill=frame["drill"].cat.remove_unused_categories())
    from connect_bridge.pipeline.baseline import tables

    drills, items, intervals = tables(frame)
    _write(Path(staging), {"items": items, "intervals": intervals})
    yield _batch(DRILL, drills)


def _write(staging: Path, columns: dict[str, dict[str, Any]]) -> None:
    """One Parquet part file per table and partition, named by the partition: a retried task
    replaces its own file (written under a hidden name, then renamed)."""
    import os

    import pyarrow.parquet as pq
    from pyspark import TaskContext

    context = TaskContext.get()
    partition, attempt = (context.partitionId(), context.attemptNumber()) if context else (0, 0)
    for name, table in columns.items():
        schema = table_schema(name)
        arrays = [pa.array(table[f.name], f.type, from_pandas=True) for f in schema]
        target = staging / name / f"part-{partition:05d}.parquet"
        hidden = target.with_name(f".{target.name}.{attempt}")
        pq.write_table(pa.Table.from_arrays(arrays, schema=schema), str(hidden))
        os.replace(hidden, target)


def _batch(part: str, columns: dict[str, Any]) -> pa.RecordBatch:
    n = len(columns["drill"])
    arrays = []
    for field in OUT_SCHEMA:
        if field.name == "part":
            arrays.append(pa.array([part] * n, pa.string()))
        elif field.name in columns:
            arrays.append(pa.array(columns[field.name], field.type, from_pandas=True))
        else:
            arrays.append(pa.nulls(n, field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=OUT_SCHEMA)


def _codes(series: pd.Series) -> np.ndarray:
    """Category codes of a column (-1 = null)."""
    cat = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
    return cat.cat.codes.to_numpy().astype(np.int64)


def _problems(frame: pd.DataFrame) -> tuple[np.ndarray, dict[str, Any]]:
    """Per row: malformed (what :func:`connect_bridge.pipeline.metrics.problems` rejects, same
    rules in the same order); per drill with a malformed event or events out of time order: how
    many malformed, the first (file index, type, reason) and how many events sorting moved."""
    n_rows = len(frame)
    drill = _codes(frame["drill"])
    seq = frame["seq"].to_numpy(dtype=np.float64, na_value=np.nan)
    seq = np.where(np.isnan(seq), -np.inf, seq)  # Spark sorts nulls first
    t_raw = frame["t_ms"].to_numpy(dtype=np.float64, na_value=np.nan)
    t_null = np.isnan(t_raw)
    t_sort = np.where(t_null, -np.inf, t_raw)
    by_file = np.lexsort((seq, drill))
    index = np.empty(n_rows, np.int64)
    starts = np.searchsorted(drill[by_file], drill[by_file], side="left")
    index[by_file] = np.arange(n_rows) - starts
    by_time = np.lexsort((seq, t_sort, drill))
    position = np.empty(n_rows, np.int64)
    position[by_time] = np.arange(n_rows) - starts
    moved_rows = index != position

    kind = frame["type"].astype("category")
    kind_code = kind.cat.codes.to_numpy()
    kind_null = kind_code < 0
    type_names = list(kind.cat.categories)

    def is_type(*names: str) -> np.ndarray:
        wanted = [type_names.index(n) for n in names if n in type_names]
        return np.isin(kind_code, wanted) if wanted else np.zeros(n_rows, dtype=bool)

    ownership = is_type(*OWNERSHIP)
    conn_null = frame["connector"].isna().to_numpy()
    task_raw = frame["task"].to_numpy(dtype=np.float64, na_value=np.nan)
    task_null = np.isnan(task_raw)
    worker_null = frame["worker"].isna().to_numpy()

    # the previous run/release of the same holder (drill, worker, connector, task) in file order
    own = np.flatnonzero(ownership)
    holder = (
        drill,
        _codes(frame["worker"]),
        _codes(frame["connector"]),
        np.nan_to_num(task_raw, nan=-(2.0**62)),
    )
    o = own[np.lexsort((index[own], *(key[own] for key in reversed(holder))))]
    same = np.zeros(len(o), dtype=bool)
    if len(o) > 1:
        same[1:] = np.logical_and.reduce([key[o][1:] == key[o][:-1] for key in holder])
    prev_row = np.full(n_rows, -1, np.int64)
    prev_row[o[1:][same[1:]]] = o[:-1][same[1:]]
    has_prev = prev_row >= 0
    prev_t = np.where(has_prev, t_raw[np.maximum(prev_row, 0)], np.nan)
    with np.errstate(invalid="ignore"):
        contradiction = ownership & has_prev & (prev_t > t_raw)

    connectors_null = frame["connectors"].isna().to_numpy()
    conditions = (
        t_null,
        kind_null,
        ownership & conn_null,
        ownership & task_null,
        contradiction,
        is_type("run") & worker_null,
        is_type("config") & connectors_null,
    )
    choice = np.select(conditions, np.arange(len(conditions)), default=-1)
    # a contradiction by a null worker has a null message in the DataFrame plan: not reported
    bad = (choice >= 0) & ~((choice == 4) & worker_null)

    n_drills = int(drill.max()) + 1 if n_rows else 0
    n_bad = np.bincount(drill[bad], minlength=n_drills)
    n_moved = np.bincount(drill[moved_rows], minlength=n_drills)
    report = np.flatnonzero((n_bad > 0) | (n_moved > 0))
    names = np.asarray(frame["drill"].cat.categories, dtype=object)
    first_index = np.full(n_drills, -1, np.int64)
    first_row = np.full(n_drills, -1, np.int64)
    bad_rows = np.flatnonzero(bad)
    if len(bad_rows):
        ordered = bad_rows[np.lexsort((index[bad_rows], drill[bad_rows]))]
        firsts = ordered[np.r_[True, drill[ordered][1:] != drill[ordered][:-1]]]
        first_row[drill[firsts]] = firsts
        first_index[drill[firsts]] = index[firsts]
    fixed = {
        0: "missing field 't_ms' (or not a JSON object)",
        1: "missing field 'type'",
        2: "missing field 'connector'",
        3: "missing field 'task'",
        5: "worker is null",
        6: "connectors must be an object",
    }

    def text(column: str, row: int) -> str | None:
        value = frame[column].iloc[row]
        return None if pd.isna(value) else str(value)

    index_out, type_out, reason_out = [], [], []
    for dcode in report:
        row = first_row[dcode]
        if row < 0:
            index_out.append(None)
            type_out.append(None)
            reason_out.append(None)
            continue
        index_out.append(int(index[row]))
        type_out.append(text("type", row))
        if choice[row] != 4:
            reason_out.append(fixed[int(choice[row])])
            continue
        task = int(task_raw[row])
        connector = text("connector", row)
        item = connector if task == CONNECTOR_TASK else f"{connector}-{task}"
        p = prev_row[row]
        reason_out.append(
            f"{text('type', row)} of {item} by {text('worker', row)} at t_ms {int(t_raw[row])} is before "
            f"the {text('type', p)} at event {int(index[p])} (t_ms {int(t_raw[p])}) {CONTRADICTION}"
        )
    problems = {
        "drill": names[report],
        "n": n_bad[report].astype(np.int64),
        "index": pd.array(index_out, dtype="Int64"),
        "type": np.asarray(type_out, dtype=object),
        "reason": np.asarray(reason_out, dtype=object),
        "moved": n_moved[report].astype(np.int64),
    }
    return bad, problems
