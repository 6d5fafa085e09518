"""Ownership timelines from real Java Connect workers' logs → the drill event log (docs/drills.md).

A Java Connect worker (Apache Kafka 4.3.1, ``ConnectDistributed``) says in its own log when it
starts and stops each connector instance and task. With the tests' log4j2 pattern
(``jvm/log4j2.properties``: ``[yyyy-MM-dd HH:mm:ss,SSS] LEVEL message (logger)``, JVMs run with
``-Duser.timezone=UTC``) every line has a millisecond timestamp, so the lines below become
``run`` / ``release`` / ``epoch`` / ``worker_start`` / ``worker_stop`` events, and the checker
(:func:`connect_bridge.drills.checker.check`) and ``analyze`` judge a real cluster unchanged.

Pure parsing: no I/O besides reading the text it is given. The lines it trusts (docs/live-drills.md,
"Java worker drills"), chosen **conservatively**: an item runs from the earliest line that announces
its start until the line that proves it can no longer act:

========================  ==========================================================================
event                     worker log line (logger)
========================  ==========================================================================
``run`` connector         ``Starting connector NAME`` (``DistributedHerder``): logged before the
                          worker creates the instance
``release`` connector     ``Completed shutdown for WorkerConnector{id=NAME}`` (``WorkerConnector``),
                          after ``Stopping connector NAME`` (``Worker``): ``Connector.stop()`` returned
``run`` task              ``Starting task NAME-N`` (``DistributedHerder``): before ``Creating task``
``release`` task          ``App info kafka.producer for connector-producer-NAME-N unregistered``
                          (source task) or ``... kafka.consumer for connector-consumer-NAME-N ...``
                          (sink task): the task's client is closed, which the runtime does after
                          the task's loop ended and ``Task.stop()`` returned (``WorkerTask.doClose``).
                          ``Stopping task NAME-N`` (``Worker``) only *requests* the stop and is not
                          trusted as a release.
``release`` start failed  a start that created no instance, after the ``Starting ...`` line that
                          opened the run: ``Couldn't instantiate task NAME-N because it has an
                          invalid task configuration`` (``DistributedHerder``; e.g. a task assigned
                          whose config the worker does not have), ``Failed to start task NAME-N``
                          (``Worker``; e.g. ``TooManyTasksException`` between a lower ``tasks.max``
                          and its new task configs), ``Failed to start connector NAME`` (``Worker``),
                          ``Unexpected error while trying to start connector NAME``
                          (``DistributedHerder``). Ignored when the item was already running before
                          that ``Starting`` line (Java refuses a second instance, "already exists",
                          and the first one goes on).
``epoch``                 ``Joined group at generation N`` (``DistributedHerder``)
``worker_start``          ``Kafka Connect starting`` (``Connect``)
``worker_stop``           ``Kafka Connect stopped`` (``Connect``): every item is stopped by then
``worker_crash``          not in the log: the caller says when it killed the process
                          (``ended_at_ms``); an incarnation without ``Kafka Connect stopped`` ends
                          at the first such time after its start
========================  ==========================================================================

A worker's lines are taken in timestamp order, not file order (threads of one JVM may write them
a few milliseconds out of order). An item whose stop is requested but never confirmed stays
running (until its worker stops or crashes) and is reported in
:attr:`WorkerTimeline.unconfirmed_stops`. A log file holding several
incarnations of one worker (a restart appends) is split at ``Kafka Connect starting``.

Timestamps: naive ``yyyy-MM-dd HH:mm:ss,SSS`` read in UTC (``tz``), so they compare with
``time.time()`` of the process that drives the drill. Log lines of different workers that carry
the same millisecond are ordered conservatively when merged (:func:`merge_streams`): ``run`` before
anything else, so an equal-millisecond hand-over counts as an overlap (of 0 ms) rather than being
assumed safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, tzinfo
from typing import Any

from connect_bridge.codecs.ids import CONNECTOR_TASK

HEADER = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\] ([A-Z]+) (.*)$")
"""The first line of a log event: ``[2026-11-25 15:44:56,468] INFO message (logger)``."""
_PREFIX = r"(?:\[Worker clientId=[^\]]*\] )?"
HERDER = "org.apache.kafka.connect.runtime.distributed.DistributedHerder"
PATTERNS: dict[str, re.Pattern[str]] = {
    "run_connector": re.compile(rf"^{_PREFIX}Starting connector (.+) \({re.escape(HERDER)}\)$"),
    "run_task": re.compile(rf"^{_PREFIX}Starting task (.+)-(\d+) \({re.escape(HERDER)}\)$"),
    "release_connector": re.compile(
        r"^Completed shutdown for WorkerConnector\{id=(.+)\} "
        r"\(org\.apache\.kafka\.connect\.runtime\.WorkerConnector\)$"
    ),
    "release_task": re.compile(
        r"^App info kafka\.(?:producer|consumer) for connector-(?:producer|consumer)-(.+)-(\d+) unregistered "
        r"\(org\.apache\.kafka\.common\.utils\.AppInfoParser\)$"
    ),
    "stop_connector": re.compile(
        r"^Stopping connector (.+) \(org\.apache\.kafka\.connect\.runtime\.Worker\)$"
    ),
    "stop_task": re.compile(r"^Stopping task (.+)-(\d+) \(org\.apache\.kafka\.connect\.runtime\.Worker\)$"),
    "start_failed_task": re.compile(
        rf"^{_PREFIX}Couldn't instantiate task (.+)-(\d+) because it has an invalid task configuration\."
        rf".* \({re.escape(HERDER)}\)$"
    ),
    "worker_start_failed_task": re.compile(
        r"^Failed to start task (.+)-(\d+) \(org\.apache\.kafka\.connect\.runtime\.Worker\)$"
    ),
    "start_failed_connector": re.compile(
        rf"^{_PREFIX}Unexpected error while trying to start connector (.+) \({re.escape(HERDER)}\)$"
    ),
    "worker_start_failed_connector": re.compile(
        r"^Failed to start connector (.+) \(org\.apache\.kafka\.connect\.runtime\.Worker\)$"
    ),
    "epoch": re.compile(rf"^{_PREFIX}Joined group at generation (-?\d+) "),
    "starting": re.compile(r"^Kafka Connect starting \(org\.apache\.kafka\.connect\.runtime\.Connect\)$"),
    "stopped": re.compile(r"^Kafka Connect stopped \(org\.apache\.kafka\.connect\.runtime\.Connect\)$"),
}

Item = tuple[str, int]
START_FAILED = frozenset(
    {
        "start_failed_task",
        "worker_start_failed_task",
        "start_failed_connector",
        "worker_start_failed_connector",
    }
)
"""Line kinds of a start that created no instance."""


def parse_timestamp(date_time: str, millis: str, tz: tzinfo = UTC) -> int:
    """``2026-11-25 15:44:56`` + ``468`` → epoch milliseconds (the naive time read in ``tz``)."""
    moment = datetime.strptime(date_time, "%Y-%m-%d %H:%M:%S").replace(tzinfo=tz)
    return int(moment.timestamp()) * 1000 + int(millis)


@dataclass(frozen=True, slots=True)
class LogLine:
    """A recognised log line: ``kind`` (a key of :data:`PATTERNS`), epoch ms, the regex groups."""

    at_ms: int
    kind: str
    groups: tuple[str, ...]
    lineno: int
    text: str


def scan(text: str, tz: tzinfo = UTC) -> list[LogLine]:
    """The lines of ``text`` that :data:`PATTERNS` recognise, in file order."""
    out: list[LogLine] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.startswith("["):
            continue
        header = HEADER.match(line)
        if header is None:
            continue
        message = header.group(4)
        for kind, pattern in PATTERNS.items():
            found = pattern.match(message)
            if found is not None:
                at = parse_timestamp(header.group(1), header.group(2), tz)
                out.append(LogLine(at, kind, found.groups(), lineno, line))
                break
    return out


@dataclass
class WorkerTimeline:
    """One worker's event-log events (``t_ms`` = epoch ms, not yet relative) and what was doubtful."""

    worker: str
    events: list[dict[str, Any]] = field(default_factory=list)
    unconfirmed_stops: list[str] = field(default_factory=list)
    """``Stopping ...`` lines whose item never logged its completed stop before the process ended."""
    incarnations: int = 0


def worker_timeline(
    text: str,
    worker: str,
    *,
    protocol: str | None = None,
    ended_at_ms: Sequence[int] = (),
    tz: tzinfo = UTC,
) -> WorkerTimeline:
    """Turn one worker's log (all its incarnations) into event-log events with epoch-ms ``t_ms``.

    ``worker`` names the worker in the events; ``protocol`` goes on ``worker_start`` /
    ``worker_stop`` / ``worker_crash``. ``ended_at_ms`` are the times the caller killed (or otherwise
    ended) this worker's processes: an incarnation that did not log ``Kafka Connect stopped`` ends
    with ``worker_crash`` at the first of them that is not before its last line."""
    reader = _LogReader(WorkerTimeline(worker), protocol, sorted(ended_at_ms))
    # Threads of one JVM write their lines in the order they get the appender, which may differ by
    # tens of milliseconds from the order of their timestamps (seen: a herder line 37 ms before a
    # task thread's line that preceded it in the file). The timestamps say when things happened.
    for line in sorted(scan(text, tz), key=lambda ln: ln.at_ms):
        if line.kind == "starting":
            reader.starting(line)
        elif not reader.alive:
            continue  # a line before the first "Kafka Connect starting" cannot start anything
        else:
            _LINE_HANDLERS[line.kind](reader, line)
        reader.last_at = line.at_ms
    reader.finish()
    return reader.out


class _LogReader:
    """One worker's timeline being read, line by line (one handler per line kind, in
    :data:`_LINE_HANDLERS`)."""

    def __init__(self, out: WorkerTimeline, protocol: str | None, ends: list[int]) -> None:
        self.out = out
        self.protocol = protocol
        self.ends = ends
        self.running: dict[Item, int] = {}  # item -> line number of its start
        self.fresh: set[Item] = set()  # items whose last "Starting" line opened their run (not a repeat)
        self.stop_requested: dict[Item, LogLine] = {}
        self.alive = False
        self.last_at = 0

    def emit(self, at: int, kind: str, **fields: Any) -> None:
        self.out.events.append({"t_ms": at, "type": kind, "worker": self.out.worker, **fields})

    def end_incarnation(self, at: int, kind: str) -> None:
        for _, line in sorted(self.stop_requested.items()):
            self.doubt(line, f"never completed; ended by {kind}")
        self.stop_requested.clear()
        self.running.clear()
        self.fresh.clear()
        self.emit(at, kind, protocol=self.protocol)
        self.alive = False

    def doubt(self, line: LogLine, why: str) -> None:
        self.out.unconfirmed_stops.append(f"{self.out.worker}: {line.text.strip()} ({why})")

    def crash_after(self, at: int) -> int | None:
        """The first time the caller ended a process that is not before ``at``."""
        return next((end for end in self.ends if end >= at), None)

    def starting(self, line: LogLine) -> None:
        if self.alive:  # the previous process ended without saying so: it was killed
            self.end_incarnation(self.crash_after(self.last_at) or line.at_ms, "worker_crash")
        self.alive = True
        self.out.incarnations += 1
        self.emit(line.at_ms, "worker_start", protocol=self.protocol)

    def stopped(self, line: LogLine) -> None:
        self.end_incarnation(line.at_ms, "worker_stop")

    def run(self, line: LogLine) -> None:
        item = _item(line)
        self.stop_requested.pop(item, None)
        if item not in self.running:
            self.running[item] = line.lineno
            self.fresh.add(item)
            self.emit(line.at_ms, "run", connector=item[0], task=item[1])
        else:
            self.fresh.discard(item)  # a start of a running item: Java refuses it, the first goes on

    def release(self, line: LogLine) -> None:
        item = _item(line)
        self.stop_requested.pop(item, None)
        self.fresh.discard(item)
        if self.running.pop(item, None) is not None:
            self.emit(line.at_ms, "release", connector=item[0], task=item[1])

    def start_failed(self, line: LogLine) -> None:
        item = _item(line)
        if item in self.fresh:  # the start that opened its run created no instance
            self.fresh.discard(item)
            self.stop_requested.pop(item, None)
            self.running.pop(item, None)
            self.emit(line.at_ms, "release", connector=item[0], task=item[1])

    def stop(self, line: LogLine) -> None:
        item = _item(line)
        if item in self.running:
            self.stop_requested[item] = line

    def epoch(self, line: LogLine) -> None:
        self.emit(line.at_ms, "epoch", epoch=int(line.groups[0]))

    def finish(self) -> None:
        """The log ends: a live process ends at the caller's kill, or is still running."""
        if not self.alive:
            return
        end = self.crash_after(self.last_at)
        if end is not None:
            self.end_incarnation(end, "worker_crash")
        else:
            for _, line in sorted(self.stop_requested.items()):
                self.doubt(line, "not completed yet")


_LINE_HANDLERS: dict[str, Callable[[_LogReader, LogLine], None]] = {
    "stopped": _LogReader.stopped,
    "run_connector": _LogReader.run,
    "run_task": _LogReader.run,
    "release_connector": _LogReader.release,
    "release_task": _LogReader.release,
    **dict.fromkeys(START_FAILED, _LogReader.start_failed),
    "stop_connector": _LogReader.stop,
    "stop_task": _LogReader.stop,
    "epoch": _LogReader.epoch,
}
"""Line kind (of a live process; ``starting`` is read apart) -> what it does to the timeline."""


def _item(line: LogLine) -> Item:
    if line.kind.endswith("connector"):
        return (line.groups[0], CONNECTOR_TASK)
    return (line.groups[0], int(line.groups[1]))


_RUN_FIRST = {"run": 0}


def merge_streams(streams: Iterable[Sequence[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """Merge event streams (each in its own causal order, ``t_ms`` not decreasing) into one list
    ordered by ``t_ms``. Each stream keeps its order; among heads with the same ``t_ms``, a ``run``
    goes first (conservative: a hand-over inside one millisecond is judged an overlap), then the
    earlier stream."""
    heads = [list(s) for s in streams]
    pos = [0] * len(heads)
    out: list[dict[str, Any]] = []
    while True:
        best = -1
        best_key: tuple[int, int] | None = None
        for i, stream in enumerate(heads):
            if pos[i] < len(stream):
                event = stream[pos[i]]
                key = (int(event["t_ms"]), _RUN_FIRST.get(event["type"], 1))
                if best_key is None or key < best_key:
                    best, best_key = i, key
        if best < 0:
            return out
        out.append(dict(heads[best][pos[best]]))
        pos[best] += 1


@dataclass
class JavaWorkerLog:
    """What :func:`build_event_log` needs about one worker: its name in the events, its log text,
    its ``connect.protocol`` and when the driver killed it (epoch ms)."""

    worker: str
    text: str
    protocol: str | None = None
    ended_at_ms: Sequence[int] = ()


@dataclass
class Timeline:
    """A drill's merged event log (``t_ms`` relative to ``t0_ms``) and the doubts of its parse."""

    events: list[dict[str, Any]]
    t0_ms: int
    end_ms: int
    unconfirmed_stops: list[str]

    def write_jsonl(self, path: Any) -> None:
        import json

        with open(path, "w", encoding="utf-8") as out:
            out.writelines(json.dumps(e, separators=(",", ":")) + "\n" for e in self.events)


def build_event_log(
    workers: Iterable[JavaWorkerLog],
    driver_events: Iterable[Mapping[str, Any]] = (),
    *,
    t0_ms: int,
    end_ms: int | None = None,
    tz: tzinfo = UTC,
    recorded: Iterable[Sequence[Mapping[str, Any]]] = (),
) -> Timeline:
    """Merge the workers' timelines and the driver's own events into one event log.

    ``driver_events`` are what only the test knows, with epoch-ms ``t_ms``: ``config`` (from its
    REST actions), ``timing``, ``bridge_restart`` / ``bridge_up``... ``recorded`` are event streams
    recorded as they happened by workers running in the driver's process (new-protocol workers,
    :class:`connect_bridge.drills.live.Incarnation`), with epoch-ms ``t_ms`` not decreasing within a
    stream; each keeps its order. ``t_ms`` becomes relative to ``t0_ms`` (events before it are
    clamped to 0). With ``end_ms`` (epoch ms) a final ``drill_end`` is added and later events are
    dropped, so every worker's log is cut at the same instant."""
    streams: list[list[dict[str, Any]]] = [[dict(e) for e in stream] for stream in recorded]
    doubts: list[str] = []
    for log in workers:
        timeline = worker_timeline(
            log.text, log.worker, protocol=log.protocol, ended_at_ms=log.ended_at_ms, tz=tz
        )
        streams.append(timeline.events)
        doubts.extend(timeline.unconfirmed_stops)
    streams.append(sorted((dict(e) for e in driver_events), key=lambda e: int(e["t_ms"])))
    merged = merge_streams(streams)
    if end_ms is not None:
        merged = [e for e in merged if e["t_ms"] <= end_ms]
        merged.append({"t_ms": end_ms, "type": "drill_end", "worker": None})
    for event in merged:
        event["t_ms"] = max(0, int(event["t_ms"]) - t0_ms)
    end = merged[-1]["t_ms"] if merged else 0
    return Timeline(merged, t0_ms, end, doubts)


def config_event(at_ms: int, connectors: Mapping[str, int], offset: int = -1) -> dict[str, Any]:
    """A driver ``config`` event (epoch ms): the connectors and their task counts after a REST action."""
    return {"t_ms": at_ms, "type": "config", "worker": None, "connectors": dict(connectors), "offset": offset}
