"""The invariant checker: one pass over an event log → ``summary.json`` (DESIGN §4.3, §4.4).

The numbers here must equal what the PySpark pipeline computes from the same log, so the
definitions are those of §4.4, spelt out in ``docs/drills.md``. In short, processing events in file
order (which is causal order):

- an *item* is a ``(connector, task)`` pair; ``run`` starts it on a worker, ``release`` stops it
  there, ``worker_stop`` / ``worker_crash`` stop everything the worker runs and make it not live,
  ``worker_start`` makes it live;
- ``overlaps``: ``run`` events that start an item while another worker runs it; ``overlap_ms``:
  summed over items, the time two or more workers run it; ``exclusive`` = no overlaps;
- ``moves``: ``run`` events of an item on a worker other than the one that last ran it;
- ``rebalances``: ``epoch`` events;
- ``unassigned_item_ms``: summed over items, the time a configured item runs nowhere;
- ``converged`` / ``balanced``: judged on the state at the end;
- ``live``: no configured item runs nowhere for longer than ``scheduled_rebalance_max_delay_ms +
  rebalance_timeout_ms`` (from the log's ``timing`` event) of time during which some worker could
  run it: the bridge is up (between ``bridge_restart`` and ``bridge_up`` it is not) and at least one
  live worker is not stalled, paused or partitioned (``stall_start`` / ``stall_end``); after a
  failure the coordinator learns of only by a timer (a crash, a stop without LeaveGroup, a process
  falling silent, a bridge restart) the clock of every unowned item restarts once that failure
  could be told from slowness (a session timeout plus the zombie grace, :func:`failure_detection_ms`).

It keeps only dicts keyed by item and worker and does O(1) work per event (a ``config`` event costs
O(items it changes)), because it runs over logs of millions of events.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from connect_bridge.codecs.ids import CONNECTOR_TASK, ConnectorTaskId
from connect_bridge.drills.events import EventLogError, iter_events
from connect_bridge.state.holds import zombie_grace_ms

MAX_VIOLATIONS = 20
"""How many violation messages a summary keeps; the rest are counted in one final line."""

Item = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Summary:
    """``summary.json`` of §4.3 plus ``overlap_ms`` (§4.4) and readable ``violations``."""

    name: str
    ok: bool
    exclusive: bool
    converged: bool
    balanced: bool
    overlaps: int
    moves: int
    rebalances: int
    unassigned_item_ms: int
    events: int
    overlap_ms: int
    violations: tuple[str, ...] = field(default=())
    live: bool = True
    max_unowned_ms: int = 0
    """Longest time a configured item ran nowhere while some worker could have run it."""
    live_bound_ms: int | None = None
    """The bound ``live`` was judged against; ``None`` = the log has no ``timing`` (not judged)."""

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` object, keys in contract order."""
        return {
            "name": self.name,
            "ok": self.ok,
            "exclusive": self.exclusive,
            "converged": self.converged,
            "balanced": self.balanced,
            "overlaps": self.overlaps,
            "moves": self.moves,
            "rebalances": self.rebalances,
            "unassigned_item_ms": self.unassigned_item_ms,
            "events": self.events,
            "overlap_ms": self.overlap_ms,
            "live": self.live,
            "max_unowned_ms": self.max_unowned_ms,
            "live_bound_ms": self.live_bound_ms,
            "violations": list(self.violations),
        }


def config_items(connectors: Mapping[str, int]) -> set[Item]:
    """Items a ``config`` event lists: each connector instance (task -1) and tasks 0..n-1."""
    out: set[Item] = set()
    for name, tasks in connectors.items():
        out.add((name, CONNECTOR_TASK))
        out.update((name, t) for t in range(tasks))
    return out


def _show(item: Item) -> str:
    return str(ConnectorTaskId(*item))


def _item_of(event: Mapping[str, Any], index: int) -> Item:
    try:
        return (event["connector"], event["task"])
    except KeyError as exc:
        raise EventLogError(f"event {index} ({event.get('type')}): missing field {exc.args[0]!r}") from None


def live_bound(timing: Mapping[str, Any]) -> int:
    """How long a configured item may run nowhere while some worker could run it (issue 10)."""
    return int(timing.get("scheduled_rebalance_max_delay_ms", 300_000)) + int(
        timing.get("rebalance_timeout_ms", 60_000)
    )


def failure_detection_ms(timing: Mapping[str, Any]) -> int:
    """How long after a crash (or a coordinator restart) nobody can *safely* run the dead worker's work.

    A crashed process and a slow or partitioned one look the same until its session expires, and a
    removed process may still run its work for the zombie grace: handing it out earlier is exactly the
    double run the exclusive invariant forbids. Kafka's own coordinator has the same blind window, and
    a coordinator failover re-arms every session, so the live clock of such work starts after it.
    """
    session = int(timing.get("session_timeout_ms", 10_000))
    return session + zombie_grace_ms(session)


def check(
    events: Iterable[Mapping[str, Any]],
    name: str = "",
    end_ms: int | None = None,
    live_bound_ms: int | None = None,
    detection_ms: int | None = None,
) -> Summary:
    """Judge one drill's event log (any iterable of event dicts, in file order).

    The end of the drill is ``end_ms`` when given (the scenario's end; never earlier than the last
    event), else the largest ``t_ms``. Unknown event types are counted in ``events`` and otherwise
    ignored. A ``release`` of an item the worker does not run and a repeated ``run`` of an item the
    worker already runs are no-ops. Raises :class:`EventLogError` for an event without ``t_ms``, a
    ``t_ms`` that goes backwards, or a ``run``/``release`` without worker, connector or task.
    ``live_bound_ms`` overrides the liveness bound the log's ``timing`` event gives, ``detection_ms``
    the failure-detection window (:func:`failure_detection_ms`).
    """
    running: dict[Item, set[str]] = {}  # item -> workers running it now (sets are kept when empty)
    by_worker: dict[str, set[Item]] = {}  # worker -> items it runs now
    live: set[str] = set()
    last_runner: dict[Item, str] = {}
    configured: set[Item] = set()
    unassigned_since: dict[Item, int] = {}  # configured items running nowhere, since when
    overlap_since: dict[Item, int] = {}  # items run by >= 2 workers, since when
    violations: list[str] = []
    n_violations = 0
    overlaps = moves = rebalances = unassigned_ms = overlap_ms = 0
    n = 0
    now = 0
    # Liveness: "could run" time is a clock that only runs while the bridge is up and some live worker
    # is not stalled; an unowned item's cost is that clock's advance since the item became unowned.
    bound = live_bound_ms
    detection = detection_ms or 0  # the live clock restarts this late after a silent failure
    stalls: dict[str, int] = {}
    able = 0  # live workers that are not stalled, paused or partitioned
    bridge_up = True
    could_ms = 0  # the "could run" clock
    unowned_at: dict[Item, int] = {}  # the clock's value when the item became unowned
    max_unowned = 0
    live_problems: list[str] = []

    def owned_again(item: Item, t: int) -> None:
        """The item runs again (or stops being configured): judge how long nobody could run it."""
        nonlocal max_unowned
        waited = max(0, could_ms - unowned_at.pop(item, could_ms))
        max_unowned = max(max_unowned, waited)
        if bound is not None and waited > bound:
            live_problems.append(
                f"t_ms={t}: {_show(item)} ran nowhere for {waited} ms while a worker could run it "
                f"(bound {bound} ms)"
            )

    def unowned(item: Item, t: int) -> None:
        unassigned_since[item] = t
        unowned_at[item] = could_ms

    def unseen() -> None:
        """A failure the coordinator learns of only by a timer: the live clock of every unowned item
        (the failed worker's, and any it may have been assigned without starting) restarts a
        detection later. A detection of 0 (failures seen at once) restarts nothing."""
        if detection <= 0:
            return
        for item, at in unowned_at.items():
            unowned_at[item] = max(at, could_ms + detection)

    def stop(item: Item, worker: str, t: int) -> None:
        """``worker`` stops running ``item`` at ``t`` (release, stop or crash)."""
        nonlocal overlap_ms
        workers = running[item]
        workers.discard(worker)
        left = len(workers)
        if left == 1:
            overlap_ms += t - overlap_since.pop(item)
        elif left == 0 and item in configured:
            unowned(item, t)

    for n, event in enumerate(events, 1):  # n is also the event count afterwards
        try:
            t = event["t_ms"]
            kind = event["type"]
        except KeyError as exc:
            raise EventLogError(f"event {n - 1}: missing field {exc.args[0]!r}") from None
        if t < now:
            raise EventLogError(f"event {n - 1} ({kind}): t_ms {t} is before the previous event's {now}")
        if bridge_up and able > 0:
            could_ms += t - now
        now = t

        if kind == "run":
            worker = event.get("worker")
            item = _item_of(event, n - 1)
            if worker is None:
                raise EventLogError(f"event {n - 1} (run): worker is null")
            workers = running.get(item)
            if workers is None:
                workers = running[item] = set()
            elif worker in workers:
                continue  # already running there: nothing changes
            if workers:
                overlaps += 1
                n_violations += 1
                if len(violations) < MAX_VIOLATIONS:
                    others = ", ".join(sorted(workers))
                    violations.append(f"t_ms={t}: {_show(item)} started on {worker} while {others} runs it")
                if len(workers) == 1:
                    overlap_since[item] = t
            elif item in unassigned_since:
                unassigned_ms += t - unassigned_since.pop(item)
                owned_again(item, t)
            workers.add(worker)
            mine = by_worker.get(worker)
            if mine is None:
                mine = by_worker[worker] = set()
            mine.add(item)
            previous = last_runner.get(item)
            if previous is not None and previous != worker:
                moves += 1
            last_runner[item] = worker
        elif kind == "release":
            worker = event.get("worker")
            item = _item_of(event, n - 1)
            mine = by_worker.get(worker)
            if mine is not None and item in mine:
                mine.discard(item)
                stop(item, worker, t)
        elif kind == "epoch":
            rebalances += 1
        elif kind == "worker_stop" or kind == "worker_crash":
            worker = event.get("worker")
            if worker in live and not stalls.get(worker):
                able -= 1
            live.discard(worker)
            stalls.pop(worker, None)
            mine = by_worker.get(worker)
            if mine:
                for item in mine:
                    stop(item, worker, t)
                mine.clear()
            if kind == "worker_crash" or event.get("left") is False:
                unseen()  # no LeaveGroup: only the session timer will tell the coordinator
        elif kind == "worker_start":
            worker = event.get("worker")
            if worker not in live:
                live.add(worker)
                able += 0 if stalls.get(worker) else 1
        elif kind == "stall_start":
            worker = event.get("worker")
            if worker in live and not stalls.get(worker):
                able -= 1
            stalls[worker] = stalls.get(worker, 0) + 1
            unseen()  # a silent process (paused, cut off, stuck, or waiting on a lost answer)
        elif kind == "stall_end":
            worker = event.get("worker")
            open_stalls = stalls.get(worker, 0)
            if open_stalls:  # an end without its start (the process restarted since) changes nothing
                stalls[worker] = open_stalls - 1
                if worker in live and open_stalls == 1:
                    able += 1
        elif kind == "bridge_restart":
            bridge_up = False
        elif kind == "bridge_up":
            bridge_up = True
            unseen()  # the restarted bridge re-arms every session from its load
        elif kind == "timing":
            if detection_ms is None:
                detection = failure_detection_ms(event)
            if live_bound_ms is None:
                bound = live_bound(event)
        elif kind == "config":
            connectors = event.get("connectors")
            if not isinstance(connectors, Mapping):
                raise EventLogError(f"event {n - 1} (config): connectors must be an object")
            new = config_items(connectors)
            for item in configured - new:
                since = unassigned_since.pop(item, None)
                if since is not None:
                    unassigned_ms += t - since
                    owned_again(item, t)
            for item in new - configured:
                if not running.get(item):
                    unowned(item, t)
            configured = new

    end = now if end_ms is None else max(end_ms, now)
    if bridge_up and able > 0:
        could_ms += end - now
    for since in unassigned_since.values():
        unassigned_ms += end - since
    for item in sorted(unowned_at):
        owned_again(item, end)
    for since in overlap_since.values():
        overlap_ms += end - since

    # End state. Messages are sorted so two runs of the same drill print the same summary.
    at_end = f"end (t_ms={end})"
    end_problems: list[str] = []
    for item in sorted(configured):
        workers = running.get(item)
        if not workers:
            end_problems.append(f"{at_end}: {_show(item)} is configured but runs nowhere")
        elif len(workers) > 1:
            end_problems.append(f"{at_end}: {_show(item)} runs on {', '.join(sorted(workers))}")
        else:
            (worker,) = workers
            if worker not in live:
                end_problems.append(f"{at_end}: {_show(item)} runs on {worker}, which is not live")
    for item in sorted(i for i, ws in running.items() if ws and i not in configured):
        where = ", ".join(sorted(running[item]))
        end_problems.append(f"{at_end}: {_show(item)} runs on {where} but is not configured")
    converged = not end_problems

    balanced = True
    if live:
        connector_counts: dict[str, int] = {}
        task_counts: dict[str, int] = {}
        for worker in sorted(live):
            mine = by_worker.get(worker, set())
            instances = sum(1 for _, task in mine if task == CONNECTOR_TASK)
            connector_counts[worker] = instances
            task_counts[worker] = len(mine) - instances
        for what, counts in (("connectors", connector_counts), ("tasks", task_counts)):
            if max(counts.values()) - min(counts.values()) > 1:
                balanced = False
                shown = ", ".join(f"{w}={c}" for w, c in counts.items())
                end_problems.append(f"{at_end}: unbalanced {what} per live worker: {shown}")

    n_violations += len(end_problems) + len(live_problems)
    violations.extend((live_problems + end_problems)[: max(0, MAX_VIOLATIONS - len(violations))])
    if n_violations > len(violations):
        violations.append(f"... and {n_violations - len(violations)} more")

    exclusive = overlaps == 0
    live_ok = not live_problems
    return Summary(
        name=name,
        ok=exclusive and converged and balanced and live_ok,
        exclusive=exclusive,
        converged=converged,
        balanced=balanced,
        overlaps=overlaps,
        moves=moves,
        rebalances=rebalances,
        unassigned_item_ms=unassigned_ms,
        events=n,
        overlap_ms=overlap_ms,
        violations=tuple(violations),
        live=live_ok,
        max_unowned_ms=max_unowned,
        live_bound_ms=bound,
    )


def check_file(path: str | Path, name: str | None = None, end_ms: int | None = None) -> Summary:
    """Check an ``events.jsonl`` file, or a drill directory holding one, streaming it.

    The name defaults as in the pipeline (§4.4): ``name`` from a ``summary.json`` next to the log,
    else the directory's name.
    """
    path = Path(path)
    if path.is_dir():
        path = path / "events.jsonl"
    if name is None:
        name = path.resolve().parent.name
        summary = path.parent / "summary.json"
        if summary.is_file():
            try:
                name = str(json.loads(summary.read_text(encoding="utf-8")).get("name") or name)
            except (ValueError, AttributeError):
                pass  # a broken summary.json is about to be rewritten; the directory name will do
    return check(iter_events(path), name=name, end_ms=end_ms)
