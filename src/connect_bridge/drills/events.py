"""The drill event log (docs/drills.md, a contract): what happened, in causal order.

Runners append to an :class:`EventLog`; the checker and the PySpark pipeline read ``events.jsonl``.
A simulated drill emits millions of events, so :meth:`EventLog.emit` does nothing but build one
dict and append it; all judgement happens later, in :mod:`connect_bridge.drills.checker`.
Readers must ignore any event type they do not know: the log grows new ones (``drill_end``,
``bridge_up``, ``stall_start`` / ``stall_end``, ``assign`` and ``timing`` came after the first ones).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from connect_bridge.codecs.ids import ConnectorTaskId


class EventLogError(ValueError):
    """A malformed event log; the message names the file and line (or event index)."""


class EventLog:
    """Events in the order they are emitted, which runners guarantee is causal order.

    Timestamps must not go backwards: durations in the checker and the pipeline are differences
    of consecutive ``t_ms``, so a runner bug that reorders time is rejected where it happens.
    """

    __slots__ = ("_events", "_last_t")

    def __init__(self) -> None:
        self._events: list[dict[str, Any]] = []
        self._last_t = 0

    def emit(self, t_ms: int, type: str, worker: str | None = None, **fields: Any) -> None:
        """Append one event; ``t_ms``, ``type`` and ``worker`` are always its first keys."""
        if t_ms < self._last_t:
            raise EventLogError(f"event {len(self._events)} ({type}): t_ms {t_ms} < previous {self._last_t}")
        self._last_t = t_ms
        event = {"t_ms": t_ms, "type": type, "worker": worker}
        if fields:
            event.update(fields)
        self._events.append(event)

    # --- typed helpers: one per type, so field names are spelt in exactly one place ---------

    def run(self, t_ms: int, worker: str, item: ConnectorTaskId) -> None:
        self.emit(t_ms, "run", worker, connector=item[0], task=item[1])

    def release(self, t_ms: int, worker: str, item: ConnectorTaskId) -> None:
        self.emit(t_ms, "release", worker, connector=item[0], task=item[1])

    def worker_start(self, t_ms: int, worker: str, protocol: str) -> None:
        self.emit(t_ms, "worker_start", worker, protocol=protocol)

    def worker_stop(self, t_ms: int, worker: str, protocol: str | None = None, left: bool = True) -> None:
        """``left`` is false when the process stopped without telling the coordinator (a static
        member's clean stop sends no LeaveGroup, KIP-345); the field is written only then."""
        if left:
            self.emit(t_ms, "worker_stop", worker, protocol=protocol)
        else:
            self.emit(t_ms, "worker_stop", worker, protocol=protocol, left=False)

    def worker_crash(self, t_ms: int, worker: str, protocol: str | None = None) -> None:
        self.emit(t_ms, "worker_crash", worker, protocol=protocol)

    def epoch(self, t_ms: int, worker: str, epoch: int) -> None:
        self.emit(t_ms, "epoch", worker, epoch=epoch)

    def assign(self, t_ms: int, worker: str, items: Iterable[ConnectorTaskId]) -> None:
        """What the coordinator (or the group's leader) now gives ``worker``, started or not: a
        connect group's target assignment of its member, a classic generation's SyncGroup
        assignment. ``items`` is a sorted list of ``[connector, task]``; it replaces the worker's
        previous ``assign``. The live invariant reads it (what a silent failure may excuse)."""
        self.emit(t_ms, "assign", worker, items=[[c, t] for c, t in sorted(items)])

    def group(self, t_ms: int, group_type: str, group_epoch: int, **classic: str | None) -> None:
        """The group's epoch moved (a classic group's generation). A classic generation also names
        its ``leader`` (the worker whose member leads it, null if unknown): the worker that computes
        every assignment of that generation."""
        self.emit(t_ms, "group", None, group_type=group_type, group_epoch=group_epoch, **classic)

    def group_state(self, t_ms: int, state: str) -> None:
        """A classic group's state changed (Kafka's names: ``PreparingRebalance`` while the join
        barrier waits on every member, ``CompletingRebalance`` while the followers wait on the
        leader's SyncGroup, ``Stable``, ``Empty``, ``Dead``)."""
        self.emit(t_ms, "group_state", None, state=state)

    def config(self, t_ms: int, connectors: Mapping[str, int], offset: int) -> None:
        # Copied: the caller's dict keeps changing as the drill goes on.
        self.emit(t_ms, "config", None, connectors=dict(connectors), offset=offset)

    def bridge_restart(self, t_ms: int) -> None:
        self.emit(t_ms, "bridge_restart", None)

    def bridge_up(self, t_ms: int) -> None:
        """The restarted bridge answers again (``bridge_restart`` marked it going down)."""
        self.emit(t_ms, "bridge_up", None)

    def stall_start(self, t_ms: int, worker: str, kind: str) -> None:
        """The worker cannot take work (``kind``: stall, pause, partition); what it runs keeps running."""
        self.emit(t_ms, "stall_start", worker, kind=kind)

    def stall_end(self, t_ms: int, worker: str, kind: str) -> None:
        self.emit(t_ms, "stall_end", worker, kind=kind)

    def timing(self, t_ms: int, **timing: int) -> None:
        """The scenario's timing, so a reader can judge liveness (``live``) without the scenario."""
        self.emit(t_ms, "timing", None, **timing)

    def drill_end(self, t_ms: int) -> None:
        """Mark the scenario's ``end_ms`` in the log.

        The pipeline ends a drill at its largest ``t_ms``, while ``drill run`` knows the
        scenario's ``end_ms``; this last line makes both see the same end and so the same
        ``unassigned_item_ms`` and ``overlap_ms``. Other readers ignore the type.
        """
        self.emit(t_ms, "drill_end", None)

    # --- access and output -----------------------------------------------------------------------

    @property
    def events(self) -> list[dict[str, Any]]:
        """The underlying list (not a copy: logs are large). Do not mutate it."""
        return self._events

    def __len__(self) -> int:
        return len(self._events)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._events)

    def write_jsonl(self, path: str | Path) -> None:
        """Write one compact JSON object per line (the ``events.jsonl`` of a drill directory)."""
        dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
        with open(path, "w", encoding="utf-8") as out:
            out.writelines(dumps(e) + "\n" for e in self._events)


def iter_events(path: str | Path) -> Iterator[dict[str, Any]]:
    """Stream the events of an ``events.jsonl`` file, skipping blank lines.

    Raises :class:`EventLogError` naming the file and 1-based line number for a line that is not
    a JSON object, so a truncated or hand-edited log points straight at the damage.
    """
    for _, event in iter_numbered(path):
        yield event


def iter_numbered(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`iter_events` with each event's 1-based line number, for messages that name the line."""
    loads = json.loads
    with open(path, encoding="utf-8") as src:
        for lineno, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                event = loads(line)
            except json.JSONDecodeError as exc:
                raise EventLogError(f"{path}:{lineno}: bad JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(event, dict):
                raise EventLogError(f"{path}:{lineno}: expected a JSON object, got {type(event).__name__}")
            yield lineno, event


def read_events(path: str | Path) -> list[dict[str, Any]]:
    """All events of an ``events.jsonl`` file (see :func:`iter_events` for the error contract)."""
    return list(iter_events(path))


OWNERSHIP = ("run", "release")
"""The event types whose order per ``(worker, item)`` must survive sorting a merged log by time."""


def time_order(
    events: Sequence[Mapping[str, Any]], where: Callable[[int], str] | None = None
) -> tuple[list[int], int]:
    """The file indices of ``events`` in ``t_ms`` order (stable) and how many events that moves.

    A log concatenated from several workers' files is not in time order, but each file was: sorting
    by ``t_ms``, keeping file order for equal times, restores the interleaving. What sorting cannot
    repair is a log that contradicts itself: one worker's ``run`` / ``release`` of one item whose
    times go backwards in the file would swap places, e.g. a release before its own run. That is an
    :class:`EventLogError` naming the line (``where(index)``, default ``event <index>``), as is an
    event without ``t_ms`` (the checker's own message for it).
    """
    name = where or (lambda i: f"event {i}")
    last: dict[tuple[Any, Any, Any], int] = {}
    for i, event in enumerate(events):
        t = event.get("t_ms")
        if not isinstance(t, int) or isinstance(t, bool):
            problem = "missing field 't_ms'" if t is None else f"t_ms {t!r} is not an integer"
            raise EventLogError(f"{name(i)}: {problem}")
        kind = event.get("type")
        if kind in OWNERSHIP:
            holder = (event.get("worker"), event.get("connector"), event.get("task"))
            before = last.get(holder)
            if before is not None and events[before]["t_ms"] > t:
                raise EventLogError(contradiction(name(i), event, name(before), events[before]))
            last[holder] = i
    order = sorted(range(len(events)), key=lambda i: events[i]["t_ms"])
    return order, sum(1 for pos, i in enumerate(order) if pos != i)


CONTRADICTION = (
    "in time but after it in the file: the log contradicts itself (a worker's run and release of an "
    "item must be in time order; only events of different workers may be out of order)"
)
"""The end of the message for a log that sorting cannot repair (the pipeline builds the same)."""


def contradiction(at: str, event: Mapping[str, Any], earlier_at: str, earlier: Mapping[str, Any]) -> str:
    """The error for a ``run`` / ``release`` that sorting by time would put before an earlier line's
    event of the same worker and item."""
    kind = event.get("type")
    item = ConnectorTaskId(event["connector"], event["task"])
    return (
        f"{at} ({kind}): {kind} of {item} by {event.get('worker')} at t_ms {event.get('t_ms')} is before "
        f"the {earlier.get('type')} at {earlier_at} (t_ms {earlier.get('t_ms')}) {CONTRADICTION}"
    )


def order_note(source: str, moved: int) -> str:
    """The summary note of a log that had to be sorted (checker, ``analyze`` and the baseline alike)."""
    return f"{source} was not in time order: sorted by t_ms ({moved} events moved)"
