"""Figures of a hand-over, measured on a merged Java drill timeline (event-log events) and the workers'
own log lines: how late a departed worker's work runs again, how long a resumed, paused worker's
tasks overlap with their new owners, and how often heartbeats were refused.

The Java drill that runs one scenario directly on Kafka's coordinator and through the bridge
(``tests/test_java_versus_kafka.py``, docs/live-drills.md "Held work and zombies, both ways")
compares these figures between the two ways. Pure functions over events and log text: no I/O, no
clock.

The event-level definitions (every time in ms on the timeline's clock):

- a *run* is one worker running one item from its ``run`` event to the ``release`` (or the
  ``worker_stop`` / ``worker_crash``) that ends it, open when nothing ended it
  (:func:`runs_of`);
- an *overlap* is the time two runs of one item on different workers both last
  (:func:`overlaps`);
- a member's *session expiry* is the last group request its process sent (Heartbeat, JoinGroup or
  SyncGroup, from ``AbstractCoordinator``'s DEBUG lines, :func:`group_requests`) plus its
  ``session.timeout.ms``: the earliest moment any coordinator may consider it gone;
- the *release delay* of a departed worker is from its session expiry to the ``run`` of the last
  of its items on another worker (:func:`back_on_others`);
- the *zombie overlap* of a paused worker is, per item it ran when paused, the overlap of that
  run with a new owner's run after the resume (SIGCONT), up to the moment the resumed worker
  released it (:func:`zombie_overlaps`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from connect_bridge.drills.java_timeline import HEADER, parse_timestamp

Item = tuple[str, int]

_COORDINATOR = (
    r"\(org\.apache\.kafka\.(?:clients\.consumer\.internals\.AbstractCoordinator"
    r"|connect\.runtime\.distributed\.WorkerCoordinator)\)$"
)
GROUP_REQUEST = re.compile(
    r"(?:Sending Heartbeat request with generation|Sending JoinGroup \("
    r"|Sending (?:leader|follower) SyncGroup).* " + _COORDINATOR
)
"""A group request the worker's client sends (``AbstractCoordinator`` at DEBUG, which logs under
its subclass's name, ``WorkerCoordinator`` in a Connect worker): each one restarts the member's
session at the coordinator when it arrives."""
HEARTBEAT_ERROR = re.compile(
    r"Attempt to heartbeat (?:with (?:stale )?\S.* failed due to (?P<error>[A-Z_]+)"
    r"|failed since (?P<reason>group is rebalancing|coordinator))"
)
"""A heartbeat answered with an error (``AbstractCoordinator``, INFO): ``ILLEGAL_GENERATION``,
``UNKNOWN_MEMBER_ID``, ``FENCED_INSTANCE_ID``...; "group is rebalancing" is
``REBALANCE_IN_PROGRESS``."""


@dataclass(frozen=True, slots=True)
class Run:
    """``worker`` ran ``item`` from ``start`` until ``end`` (None: still running at the log's end)."""

    worker: str
    item: Item
    start: int
    end: int | None

    def until(self, end: int) -> int:
        """The run's end, ``end`` when it is still open."""
        return end if self.end is None else self.end


@dataclass(frozen=True, slots=True)
class Overlap:
    """Two runs of ``item`` on different workers both lasting from ``start`` to ``end``."""

    item: Item
    first: Run
    second: Run
    start: int
    end: int

    @property
    def ms(self) -> int:
        return self.end - self.start


def runs_of(events: Iterable[Mapping[str, Any]]) -> list[Run]:
    """Every run in a timeline (events in time order), in the order they started."""
    open_runs: dict[tuple[str, Item], int] = {}
    order: list[tuple[str, Item, int]] = []
    ended: dict[tuple[str, Item, int], int] = {}
    for event in events:
        kind, worker, t = event["type"], event.get("worker"), int(event["t_ms"])
        if kind == "run":
            key = (str(worker), (str(event["connector"]), int(event["task"])))
            if key not in open_runs:
                open_runs[key] = t
                order.append((*key, t))
        elif kind == "release":
            key = (str(worker), (str(event["connector"]), int(event["task"])))
            start = open_runs.pop(key, None)
            if start is not None:
                ended[(*key, start)] = t
        elif kind in ("worker_stop", "worker_crash"):
            for key in [k for k in open_runs if k[0] == worker]:
                ended[(*key, open_runs.pop(key))] = t
    return [Run(w, item, start, ended.get((w, item, start))) for w, item, start in order]


def running_at(runs: Iterable[Run], t: int) -> dict[str, set[Item]]:
    """worker -> items it runs at ``t`` (a run that ends at ``t`` no longer counts)."""
    out: dict[str, set[Item]] = {}
    for run in runs:
        if run.start <= t and (run.end is None or run.end > t):
            out.setdefault(run.worker, set()).add(run.item)
    return out


def overlaps(runs: Iterable[Run], end: int) -> list[Overlap]:
    """Every pair of runs of one item on two workers that last at once (runs still open last until
    ``end``); a pair touching in one millisecond counts (0 ms), as the checker counts it."""
    by_item: dict[Item, list[Run]] = {}
    for run in runs:
        by_item.setdefault(run.item, []).append(run)
    found: list[Overlap] = []
    for item, mine in sorted(by_item.items()):
        mine.sort(key=lambda r: r.start)
        for i, first in enumerate(mine):
            for second in mine[i + 1 :]:
                if second.start > first.until(end):
                    break
                if second.worker != first.worker:
                    stop = min(first.until(end), second.until(end))
                    found.append(Overlap(item, first, second, second.start, stop))
    return found


def back_on_others(
    runs: Iterable[Run], items: Iterable[Item], since: int, worker: str | None
) -> dict[Item, int | None]:
    """item -> when it first started after ``since`` on a worker other than ``worker`` (any worker
    when ``worker`` is None); None when it did not."""
    wanted = set(items)
    first: dict[Item, int | None] = dict.fromkeys(wanted)
    for run in sorted(runs, key=lambda r: r.start):
        if run.item in wanted and run.start >= since and run.worker != worker and first[run.item] is None:
            first[run.item] = run.start
    return first


@dataclass(frozen=True, slots=True)
class ZombieFigures:
    """How long a resumed worker's tasks ran on it and on their new owners at once."""

    per_item_ms: dict[Item, int]
    """Item the worker ran when paused -> overlap after the resume (0: none)."""
    released_after_resume_ms: dict[Item, int | None]
    """Item -> from the resume to the worker's release of it (None: it never released it)."""
    during_pause_ms: int
    """Task-ms the same runs overlapped while the worker was paused (its process could not act)."""

    @property
    def task_ms(self) -> int:
        return sum(self.per_item_ms.values())

    @property
    def longest_ms(self) -> int:
        return max(self.per_item_ms.values(), default=0)


def zombie_overlaps(runs: list[Run], worker: str, paused: int, resumed: int, end: int) -> ZombieFigures:
    """The zombie overlap of ``worker``, paused (SIGSTOP) at ``paused`` and resumed at ``resumed``:
    for each item it ran at ``paused``, the time after ``resumed`` during which that run and
    another worker's run of the item both lasted."""
    held = [r for r in runs if r.worker == worker and r.start <= paused and r.until(end) > paused]
    per_item: dict[Item, int] = {}
    released: dict[Item, int | None] = {}
    during = 0
    for zombie in held:
        zombie_end = zombie.until(end)
        released[zombie.item] = None if zombie.end is None else zombie.end - resumed
        after = during_item = 0
        for other in runs:
            if other.item != zombie.item or other.worker == worker:
                continue
            lo, hi = max(other.start, zombie.start), min(other.until(end), zombie_end)
            if hi <= lo:
                continue
            after += max(0, hi - max(lo, resumed))
            during_item += max(0, min(hi, resumed) - lo)
        per_item[zombie.item] = after
        during += during_item
    return ZombieFigures(per_item, released, during)


def is_zombie_overlap(overlap: Overlap, worker: str, paused: int) -> bool:
    """The overlap is one of the paused worker's runs that began before its pause with another
    worker's run: the zombie window every coordinator has (a frozen process cannot be told)."""
    return any(r.worker == worker and r.start <= paused for r in (overlap.first, overlap.second))


def _timed(text: str, pattern: re.Pattern[str]) -> Iterable[tuple[int, re.Match[str]]]:
    for line in text.splitlines():
        if not line.startswith("["):
            continue
        header = HEADER.match(line)
        if header is None:
            continue
        found = pattern.search(header.group(4))
        if found is not None:
            yield parse_timestamp(header.group(1), header.group(2)), found


def group_requests(text: str) -> list[int]:
    """Epoch ms of each group request (Heartbeat, JoinGroup, SyncGroup) a worker's log shows sent,
    sorted; empty unless its ``AbstractCoordinator`` logger is at DEBUG."""
    return sorted(at for at, _ in _timed(text, GROUP_REQUEST))


def session_expiry(text: str, before: int, session_timeout_ms: int) -> int | None:
    """Epoch ms at which the member of the process whose log is ``text``, silent from ``before``
    on (killed or paused then), may first be taken as gone: its last group request before
    ``before`` plus its session. None when the log shows no request (DEBUG off)."""
    sent = [at for at in group_requests(text) if at <= before]
    return sent[-1] + session_timeout_ms if sent else None


def heartbeat_errors(text: str, since: int = 0) -> Counter[str]:
    """How many heartbeats of a worker's log were answered with each error, from ``since`` (epoch ms)."""
    counts: Counter[str] = Counter()
    for at, found in _timed(text, HEARTBEAT_ERROR):
        if at >= since:
            reason = found.group("reason")
            error = found.group("error") or (
                "REBALANCE_IN_PROGRESS" if reason == "group is rebalancing" else "COORDINATOR_NOT_AVAILABLE"
            )
            counts[error] += 1
    return counts


def members_reachable_after(texts: Iterable[str], moment: int) -> int | None:
    """ms from ``moment`` (epoch ms) until every worker whose log is in ``texts`` had sent a group
    request at or after it: the earliest a coordinator of the classic protocol, which answers
    requests and sends nothing of its own, could have told each of them anything that happened at
    ``moment``. With workers idle between heartbeats it is the wait for the last one's next
    heartbeat, a phase that neither Kafka nor the bridge chooses. None when a log shows no request
    after ``moment``."""
    waits = []
    for text in texts:
        later = [at for at in group_requests(text) if at >= moment]
        if not later:
            return None
        waits.append(later[0] - moment)
    return max(waits, default=0)
