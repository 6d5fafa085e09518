"""A second, independent witness of duplicate task instances: VerifiableSource's own output.

``org.apache.kafka.connect.tools.VerifiableSourceConnector`` (Apache Kafka's test connector) gives
each task a sequence number: task N writes records with key ``N`` and value ``seqno`` (JSON ints
with the tests' JsonConverter, no schemas) to the connector's topic, 0, 1, 2, ... at ``throughput``
records/s, and commits ``{"seqno": i}`` as its source offset; a new instance of the task resumes
after the last committed seqno. It also prints every record to the worker's stdout as
``{"task":N,"seqno":i,"time_ms":T,"name":CONNECTOR,"topic":TOPIC}``.

So in the topic (one partition: topic order is the order records arrived), one task's seqnos are
consecutive runs ("streams"). A legal hand-over starts a new stream that goes back to the last
committed seqno (records produced after the last commit are produced again: at-least-once), and the
old stream never continues. Two instances running at once interleave: a record continues a stream
that is no longer the newest one. :func:`check_sequences` flags that when the continued stream's
last record is less than ``window_ms`` older (by record timestamp) than the continuing one: an
instance writing at 20 records/s continues within 50 ms, while a later instance that by coincidence
resumes right after an old stream's last seqno does so only after a whole other instance's life
and a hand-over (seconds).

:func:`check_prints` reads the stdout lines of each worker's log instead: a task printing on two
workers in overlapping time windows (a window ends at a pause longer than ``gap_ms``) ran twice.

Pure functions: consuming the topic is the caller's business (tests use kafka-python).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SequenceReport:
    """What the topic says about one connector's tasks."""

    records: int = 0
    tasks: dict[int, int] = field(default_factory=dict)
    """task -> records seen."""
    restarts: dict[int, int] = field(default_factory=dict)
    """task -> how many times its seqnos went back (a new instance resuming from a commit)."""
    duplicates: list[str] = field(default_factory=list)
    """Evidence of two instances of one task producing concurrently."""
    gaps: list[str] = field(default_factory=list)
    """Seqnos skipped forward (records lost): not a duplicate, reported apart."""
    unreadable: int = 0

    @property
    def ok(self) -> bool:
        return not self.duplicates


def decode_record(key: Any, value: Any) -> tuple[int, int] | None:
    """(task, seqno) of a VerifiableSource record: key and value JSON ints (bytes or str), or a JSON
    object value with ``task`` and ``seqno``. None when it is neither."""
    try:
        k = json.loads(key) if isinstance(key, (bytes, str)) else key
        v = json.loads(value) if isinstance(value, (bytes, str)) else value
    except ValueError:
        return None
    if isinstance(v, dict):
        task, seqno = v.get("task"), v.get("seqno")
    else:
        task, seqno = k, v
    if isinstance(task, int) and isinstance(seqno, int) and not isinstance(task, bool):
        return task, seqno
    return None


def check_sequences(
    records: Iterable[tuple[Any, Any, int]], *, window_ms: int = 5000, max_messages: int = 20
) -> SequenceReport:
    """Judge one connector's topic partition: ``records`` are ``(key, value, timestamp_ms)`` in
    offset order (see :func:`decode_record` for key and value)."""
    report = SequenceReport()
    # task -> streams, newest last: [last seqno, timestamp of that record, first seqno]
    streams: dict[int, list[list[int]]] = {}
    for key, value, ts in records:
        decoded = decode_record(key, value)
        if decoded is None:
            report.unreadable += 1
            continue
        task, seqno = decoded
        report.records += 1
        report.tasks[task] = report.tasks.get(task, 0) + 1
        mine = streams.setdefault(task, [])
        if not mine:
            mine.append([seqno, ts, seqno])
            continue
        current = mine[-1]
        if seqno == current[0] + 1:
            current[0], current[1] = seqno, ts
            continue
        older = next((s for s in reversed(mine[:-1]) if seqno == s[0] + 1), None)
        if older is not None and ts - older[1] <= window_ms:
            if len(report.duplicates) < max_messages:
                report.duplicates.append(
                    f"task {task}: seqno {seqno} (ts {ts}) continues an older instance's run "
                    f"{older[2]}..{older[0]} ({ts - older[1]} ms after its last record) while a newer "
                    f"run {current[2]}..{current[0]} is live: two instances interleave"
                )
            mine.remove(older)
            older[0], older[1] = seqno, ts
            mine.append(older)
        elif seqno <= current[0] or older is not None:
            report.restarts[task] = report.restarts.get(task, 0) + 1
            mine.append([seqno, ts, seqno])
        else:
            if len(report.gaps) < max_messages:
                report.gaps.append(f"task {task}: seqno {current[0]} then {seqno} (ts {ts})")
            current[0], current[1] = seqno, ts
    return report


@dataclass(frozen=True, slots=True)
class Print:
    connector: str
    task: int
    seqno: int
    time_ms: int
    worker: str


def worker_prints(text: str, worker: str) -> list[Print]:
    """VerifiableSource's stdout lines in one worker's log (``{"task":..,"seqno":..,"time_ms":..}``)."""
    out: list[Print] = []
    for line in text.splitlines():
        if not line.startswith('{"task"') and not line.startswith('{"name"'):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and {"task", "seqno", "time_ms", "name"} <= doc.keys():
            out.append(
                Print(str(doc["name"]), int(doc["task"]), int(doc["seqno"]), int(doc["time_ms"]), worker)
            )
    return out


def check_prints(logs: Mapping[str, str], *, gap_ms: int = 1000, max_messages: int = 20) -> list[str]:
    """Tasks printed by two workers in overlapping windows (each worker's prints of a task split
    where it paused longer than ``gap_ms``); empty when every task printed on one worker at a time."""
    windows: dict[tuple[str, int], list[tuple[int, int, str]]] = {}
    for worker, text in logs.items():
        prints = sorted(worker_prints(text, worker), key=lambda p: (p.connector, p.task, p.time_ms))
        start = last = None
        key: tuple[str, int] | None = None
        for p in prints:
            if key != (p.connector, p.task) or last is None or p.time_ms - last > gap_ms:
                if key is not None and start is not None and last is not None:
                    windows.setdefault(key, []).append((start, last, worker))
                key, start = (p.connector, p.task), p.time_ms
            last = p.time_ms
        if key is not None and start is not None and last is not None:
            windows.setdefault(key, []).append((start, last, worker))
    problems: list[str] = []
    for (connector, task), spans in sorted(windows.items()):
        spans.sort()
        for i, (s1, e1, w1) in enumerate(spans):
            for s2, e2, w2 in spans[i + 1 :]:
                if s2 > e1:
                    break
                if w1 != w2 and len(problems) < max_messages:
                    problems.append(
                        f"{connector}-{task}: printed on {w1} during {s1}..{e1} and on {w2} during {s2}..{e2}"
                    )
    return problems
