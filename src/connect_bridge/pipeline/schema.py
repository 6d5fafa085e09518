"""The event table schema shared by ``analyze`` and fleet drills (the event log of docs/drills.md as columns).

One row per event line. ``drill`` names the drill and ``seq`` orders its events (file order: events
at the same ``t_ms`` are ordered by ``seq`` alone). ``connectors`` is the ``config`` event's map as a
JSON string (``{"name": tasks}``), so the table needs no nested types. Types the pipeline does not
know are kept as rows (they count in ``events``) with their extra fields dropped.

This module imports neither pyspark nor pyarrow at import time: a fleet writer only needs
:func:`event_row` / :func:`write_events_parquet`, the pipeline :func:`spark_schema`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

EVENT_FIELDS: tuple[tuple[str, str], ...] = (
    ("drill", "string"),
    ("seq", "long"),
    ("t_ms", "long"),
    ("type", "string"),
    ("worker", "string"),
    ("connector", "string"),
    ("task", "long"),
    ("protocol", "string"),
    ("epoch", "long"),
    ("group_type", "string"),
    ("group_epoch", "long"),
    ("connectors", "string"),
    ("offset", "long"),
)
"""``(column, type)`` in table order; types are Spark SQL simple type names (string, long)."""

EVENT_COLUMNS: tuple[str, ...] = tuple(name for name, _ in EVENT_FIELDS)

LOG_FIELDS: tuple[tuple[str, str], ...] = tuple(f for f in EVENT_FIELDS if f[0] not in ("drill", "seq"))
"""The fields of one ``events.jsonl`` line (what ``from_json`` parses)."""


def spark_schema(fields: Iterable[tuple[str, str]] = EVENT_FIELDS) -> Any:
    """The ``pyspark.sql.types.StructType`` of the event table (all columns nullable)."""
    from pyspark.sql import types as T

    kinds = {"string": T.StringType(), "long": T.LongType()}
    return T.StructType([T.StructField(name, kinds[kind], True) for name, kind in fields])


def arrow_schema() -> Any:
    """The same schema as a ``pyarrow.Schema`` (for writers that do not run Spark)."""
    import pyarrow as pa

    kinds = {"string": pa.string(), "long": pa.int64()}
    return pa.schema([pa.field(name, kinds[kind], nullable=True) for name, kind in EVENT_FIELDS])


def event_row(event: Mapping[str, Any], drill: str, seq: int) -> dict[str, Any]:
    """One event dict (as in ``events.jsonl``) → one table row; ``connectors`` becomes JSON text."""
    row: dict[str, Any] = {name: event.get(name) for name in EVENT_COLUMNS}
    row["drill"] = drill
    row["seq"] = seq
    connectors = event.get("connectors")
    if connectors is not None and not isinstance(connectors, str):
        row["connectors"] = json.dumps(connectors, separators=(",", ":"), ensure_ascii=False)
    return row


def write_events_parquet(drills: Mapping[str, Iterable[Mapping[str, Any]]], path: str | Path) -> None:
    """Write ``{drill: events in file order}`` as one Parquet file readable by ``analyze``.

    ``seq`` is the event's index in its drill. ``path`` is a file (``.../part-0.parquet``); put it
    in a directory to make a fleet input directory (several files per directory are fine).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [event_row(e, name, i) for name, events in drills.items() for i, e in enumerate(events)]
    table = pa.Table.from_pylist(rows, schema=arrow_schema())
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))


DRILL_NUMBERS = (
    "events",
    "overlaps",
    "overlap_ms",
    "converged",
    "balanced",
    "moves",
    "rebalances",
    "unassigned_item_ms",
)
"""A drill's numbers in ``summary.json`` (after its name), in order: what every engine (the sql
plan, the by-drill engine, the pandas baseline) must give alike."""
