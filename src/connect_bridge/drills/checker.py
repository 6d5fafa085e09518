"""The invariant checker: one pass over an event log → ``summary.json`` (docs/drills.md, "Metrics").

The numbers here must equal what the PySpark pipeline computes from the same log, so the
definitions are spelt out in ``docs/drills.md``. In short, processing events in file
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
  live worker is not stalled, paused or partitioned (``stall_start`` / ``stall_end``). A failure the
  coordinator learns of only by a timer (a crash, a stop without LeaveGroup, a process falling
  silent) restarts, once it could be told from slowness (a session timeout plus the zombie grace,
  :func:`failure_detection_ms`), the clock of the items *that worker* ran or was being given (its
  latest ``assign`` event): per item, so an unrelated worker's failure forgives nothing else. In a
  classic group (``group`` events) the leader computes every assignment and the join barrier waits
  on every member: a silent failure of the generation's ``leader``, or of any member while the
  group rebalances (``group_state``), restarts the clock of every item the group has yet to deal
  (unowned then or before that failure is detected). A bridge restart is the coordinator's own
  failure: it restarts the clock of every item unowned when the bridge is back, and of every item a
  worker whose failure was not yet detected ran or was being given, :func:`reload_detection_ms`
  later.

It keeps only dicts keyed by item and worker and does O(1) work per event (a ``config`` event costs
O(items it changes), a failure or rebalance that holds a classic group O(unowned items)), because it
runs over logs of millions of events.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from connect_bridge.codecs.ids import CONNECTOR_TASK, ConnectorTaskId
from connect_bridge.drills.events import EventLogError, iter_events, iter_numbered, order_note, time_order
from connect_bridge.state.holds import zombie_grace_ms

MAX_VIOLATIONS = 20
"""How many violation messages a summary keeps; the rest are counted in one final line."""

Item = tuple[str, int]


@dataclass(frozen=True, slots=True)
class Summary:
    """``summary.json``: the contract keys plus ``overlap_ms`` and readable ``violations``."""

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
    notes: tuple[str, ...] = field(default=())
    """How the log was read when that is not plain file order (a merged log sorted by ``t_ms``)."""

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
        } | ({"notes": list(self.notes)} if self.notes else {})


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


JOIN_GROUP_LAPSE_MS = 5_000
"""Java's client waits for a JoinGroup answer ``max(request.timeout.ms, rebalance.timeout.ms + 5 s)``."""


def join_wait_ms(timing: Mapping[str, Any]) -> int:
    """How long a Java worker waits for the answer to a JoinGroup (``AbstractCoordinator``): the
    longest a request can stay parked at a coordinator that stops answering (a paused bridge)."""
    rebalance = int(timing.get("rebalance_timeout_ms", 60_000))
    return max(int(timing.get("request_timeout_ms", 40_000)), rebalance + JOIN_GROUP_LAPSE_MS)


def reload_detection_ms(timing: Mapping[str, Any]) -> int:
    """``failure_detection_ms`` after a coordinator restart or takeover: a member parked in a
    JoinGroup at the previous coordinator sends nothing until that JoinGroup times out, so no new
    coordinator can tell it from a dead one before ``max(session, join wait)`` (the first session a
    correct coordinator gives a loaded legacy member, docs/classic-group.md deviation 12), then the
    zombie grace. Judged from the client's real wait (:func:`join_wait_ms`), not from what the
    engine chose: an engine that expires members earlier is what the exclusive check catches."""
    session = int(timing.get("session_timeout_ms", 10_000))
    return max(session, join_wait_ms(timing)) + zombie_grace_ms(session)


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
    worker already runs are no-ops. A list whose ``t_ms`` goes backwards (a log merged from several
    workers' files) is checked in ``t_ms`` order, stable for equal times, and the summary gets a
    ``notes`` line saying so (a one-shot iterator cannot be re-read: then it is an error, and
    :func:`check_file` sorts files). Raises :class:`EventLogError` for an event without ``t_ms``, a
    log that contradicts itself once sorted (:func:`~connect_bridge.drills.events.time_order`), or a
    ``run``/``release`` without worker, connector or task.
    ``live_bound_ms`` overrides the liveness bound the log's ``timing`` event gives, ``detection_ms``
    the failure-detection window (:func:`failure_detection_ms`).
    """
    try:
        return _check(events, name, end_ms, _Judge(live_bound_ms, detection_ms))
    except _Backwards:
        if not isinstance(events, Sequence):
            raise  # a one-shot stream cannot be re-read: check_file sorts files
    order, moved = time_order(events)
    summary = _check([events[i] for i in order], name, end_ms, _Judge(live_bound_ms, detection_ms), order)
    return replace(summary, notes=(order_note("the event log", moved),))


class _Backwards(EventLogError):
    """``t_ms`` went backwards: the log must be sorted (:func:`time_order`) and checked again."""


def _check(
    events: Iterable[Mapping[str, Any]],
    name: str,
    end_ms: int | None,
    judge: _Judge,
    file_index: Sequence[int] | None = None,
) -> Summary:
    """One pass over events in time order; ``file_index`` maps a position to the event's index in
    the file (for messages) when the events were sorted."""
    on = judge.handlers()
    now = n = 0
    for n, event in enumerate(events, 1):  # n is also the event count afterwards
        index = n - 1 if file_index is None else file_index[n - 1]
        try:
            t = event["t_ms"]
            kind = event["type"]
        except KeyError as exc:
            raise EventLogError(f"event {index}: missing field {exc.args[0]!r}") from None
        if t < now:
            raise _Backwards(f"event {index} ({kind}): t_ms {t} is before the previous event's {now}")
        if judge.bridge_up and judge.able > 0:
            judge.could_ms += t - now
        now = t
        handler = on.get(kind)
        if handler is not None:
            handler(event, t, index)
    return judge.summary(name, n, now, now if end_ms is None else max(end_ms, now))


class _Judge:
    """The running state of one :func:`check` pass, with one handler per event type.

    Liveness: "could run" time is a clock (``could_ms``) that only runs while the bridge is up and
    some live worker is not stalled; an unowned item's cost is that clock's advance since the item
    became unowned, or since a failure that concerned it was detected (``shielded``).
    """

    def __init__(self, live_bound_ms: int | None, detection_ms: int | None) -> None:
        self.running: dict[Item, set[str]] = {}  # item -> workers running it now (kept when empty)
        self.by_worker: dict[str, set[Item]] = {}  # worker -> items it runs now
        self.just_released: dict[str, tuple[int, set[Item]]] = {}
        """worker -> (time, items it released then): a process that stops or dies logs the release
        of what it ran before its ``worker_stop`` / ``worker_crash`` at the same moment."""
        self.live: set[str] = set()
        self.last_runner: dict[Item, str] = {}
        self.configured: set[Item] = set()
        self.unassigned_since: dict[Item, int] = {}  # configured items running nowhere, since when
        self.overlap_since: dict[Item, int] = {}  # items run by >= 2 workers, since when
        self.violations: list[str] = []
        self.n_violations = 0
        self.overlaps = self.moves = self.rebalances = self.unassigned_ms = self.overlap_ms = 0
        self.fixed_bound = live_bound_ms is not None  # the caller's bound beats the log's timing
        self.fixed_detection = detection_ms is not None
        self.bound = live_bound_ms
        self.detection = detection_ms or 0  # the live clock restarts this late after a silent failure
        self.reload_detection = self.detection  # ... and this late after a bridge restart
        self.reload_until = 0  # clock value at which the last reload's first sessions (+ grace) end
        self.stalls: dict[str, int] = {}
        self.able = 0  # live workers that are not stalled, paused or partitioned
        self.bridge_up = True
        self.could_ms = 0  # the "could run" clock
        self.unowned_at: dict[Item, int] = {}  # the clock's value when the item became unowned
        self.given: dict[str, frozenset[Item]] = {}  # worker -> items it was last given (``assign``)
        self.shielded: dict[Item, int] = {}  # item -> clock value before which a failure excuses it
        self.silent: dict[str, tuple[int, bool]] = {}  # worker -> (clock value its failure is
        # detected at, whether its process is gone): failures the coordinator cannot have seen yet
        self.classic = False  # the group is a classic group (the last ``group`` event's type)
        self.leader: str | None = None  # the worker leading the classic group's generation
        self.rebalancing = False  # the classic group waits on its members (join barrier, leader sync)
        self.group_held = 0  # clock value before which the classic group's undealt work is excused
        self.unpersisted_leaves: set[str] = set()  # left a classic group whose next generation is
        # not yet stored: a bridge restart forgets the LeaveGroup (:meth:`bridge_restart`)
        self.max_unowned = 0
        self.live_problems: list[str] = []

    def handlers(self) -> dict[str, Callable[[Mapping[str, Any], int, int], None]]:
        """Event type -> handler(event, t_ms, index); types not here are counted and ignored."""
        return {
            "run": self.run,
            "release": self.release,
            "epoch": self.epoch,
            "worker_stop": self.worker_gone,
            "worker_crash": self.worker_gone,
            "worker_start": self.worker_start,
            "stall_start": self.stall_start,
            "stall_end": self.stall_end,
            "bridge_restart": self.bridge_restart,
            "bridge_up": self.bridge_back,
            "assign": self.assign,
            "group": self.group,
            "group_state": self.group_state,
            "timing": self.timing,
            "config": self.config,
        }

    # --- helpers ----------------------------------------------------------------------------------

    def owned_again(self, item: Item, t: int) -> None:
        """The item runs again (or stops being configured): judge how long nobody could run it."""
        waited = max(0, self.could_ms - self.unowned_at.pop(item, self.could_ms))
        self.max_unowned = max(self.max_unowned, waited)
        if self.bound is not None and waited > self.bound:
            self.live_problems.append(
                f"t_ms={t}: {_show(item)} ran nowhere for {waited} ms while a worker could run it "
                f"(bound {self.bound} ms)"
            )

    def unowned(self, item: Item, t: int) -> None:
        self.unassigned_since[item] = t
        self.unowned_at[item] = max(self.could_ms, self.shielded.get(item, 0), self.group_held)

    def shield(self, items: Iterable[Item], until: int) -> None:
        """A failure excuses ``items`` until the clock reads ``until``: one unowned now starts its
        clock then, one that becomes unowned before then starts it then too (a zombie releasing
        its work, a revocation freeing an item that was being given to the failed worker)."""
        shielded, unowned_at = self.shielded, self.unowned_at
        for item in items:
            if shielded.get(item, 0) < until:
                shielded[item] = until
            at = unowned_at.get(item)
            if at is not None and at < until:
                unowned_at[item] = until

    def unseen(self, worker: Any, ran: Iterable[Item] = (), gone: bool = False) -> None:
        """``worker`` failed in a way the coordinator learns of only by a timer: the live clock of
        what it ran (``ran``, or what it runs now) or was being given (its last ``assign``) restarts
        a detection later; in a classic group that it leads or that is rebalancing, so does the clock
        of everything the group has yet to deal (:meth:`hold_group`). ``gone``: the process died (a
        crash, a stop without LeaveGroup), so its member lingers until the detection even if the
        worker starts again. A detection of 0 (failures seen at once) restarts nothing."""
        if self.detection <= 0:
            return
        # A member the reloaded coordinator has not heard from yet is on its first session after
        # the load (``holds.first_session_after_load_ms``): failing inside it, it is found out no
        # earlier than that first session ends (plus the grace), ``reload_until``.
        until = max(self.could_ms + self.detection, self.reload_until)
        items = set(ran) | self.by_worker.get(worker, set()) | self.given.get(worker, frozenset())
        self.shield(items, until)
        self.silent[worker] = (until, gone)
        if self.classic and (worker == self.leader or self.rebalancing):
            self.hold_group(until)

    def hold_group(self, until: int) -> None:
        """The classic group cannot deal anything before the clock reads ``until``: its leader, who
        computes every assignment, or a member its join barrier waits on, failed silently. Every
        item unowned now, or becoming unowned (or configured) before then, starts its clock then.
        Kafka's classic coordinator completes a join only when every known member rejoined or the
        rebalance timeout passed (and keeps a static member that did not), and the followers' sync
        waits on the leader's; a connect group's members do not wait on each other."""
        if until <= self.group_held:
            return
        self.group_held = until
        unowned_at = self.unowned_at
        for item, at in unowned_at.items():
            if at < until:
                unowned_at[item] = until

    def silent_now(self) -> Iterable[tuple[str, int]]:
        """(worker, detection) of failures not yet detected whose worker is still silent: its
        process is gone, or it is still stalled, paused, cut off or waiting. Detected ones are
        dropped."""
        now = self.could_ms
        for worker, (until, gone) in list(self.silent.items()):
            if until <= now:
                del self.silent[worker]
            elif gone or self.stalls.get(worker):
                yield worker, until

    def stop(self, item: Item, worker: str, t: int) -> None:
        """``worker`` stops running ``item`` at ``t`` (release, stop or crash)."""
        workers = self.running[item]
        workers.discard(worker)
        left = len(workers)
        if left == 1:
            self.overlap_ms += t - self.overlap_since.pop(item)
        elif left == 0 and item in self.configured:
            self.unowned(item, t)

    def not_able(self, worker: Any) -> None:
        """``worker`` stops counting as able to take work (if it did)."""
        if worker in self.live and not self.stalls.get(worker):
            self.able -= 1

    # --- handlers ---------------------------------------------------------------------------------

    def run(self, event: Mapping[str, Any], t: int, index: int) -> None:
        worker = event.get("worker")
        item = _item_of(event, index)
        if worker is None:
            raise EventLogError(f"event {index} (run): worker is null")
        workers = self.running.get(item)
        if workers is None:
            workers = self.running[item] = set()
        elif worker in workers:
            return  # already running there: nothing changes
        if workers:
            self.overlap(item, worker, workers, t)
        elif item in self.unassigned_since:
            self.unassigned_ms += t - self.unassigned_since.pop(item)
            self.owned_again(item, t)
        workers.add(worker)
        mine = self.by_worker.get(worker)
        if mine is None:
            mine = self.by_worker[worker] = set()
        mine.add(item)
        previous = self.last_runner.get(item)
        if previous is not None and previous != worker:
            self.moves += 1
        self.last_runner[item] = worker

    def overlap(self, item: Item, worker: str, workers: set[str], t: int) -> None:
        """``worker`` starts ``item`` while ``workers`` run it: the exclusive invariant is broken."""
        self.overlaps += 1
        self.n_violations += 1
        if len(self.violations) < MAX_VIOLATIONS:
            others = ", ".join(sorted(workers))
            self.violations.append(f"t_ms={t}: {_show(item)} started on {worker} while {others} runs it")
        if len(workers) == 1:
            self.overlap_since[item] = t

    def release(self, event: Mapping[str, Any], t: int, index: int) -> None:
        worker = event.get("worker")
        item = _item_of(event, index)
        mine = self.by_worker.get(worker)
        if mine is not None and item in mine:
            mine.discard(item)
            self.stop(item, worker, t)
            at, items = self.just_released.get(worker, (None, set()))
            if at != t:
                items = set()
                self.just_released[worker] = (t, items)
            items.add(item)

    def epoch(self, event: Mapping[str, Any], t: int, index: int) -> None:
        self.rebalances += 1

    def worker_gone(self, event: Mapping[str, Any], t: int, index: int) -> None:
        """``worker_stop`` or ``worker_crash``: everything it runs stops, and it is not live."""
        worker = event.get("worker")
        self.not_able(worker)
        self.live.discard(worker)
        self.stalls.pop(worker, None)
        mine = self.by_worker.get(worker)
        ran = sorted(mine) if mine else []  # sorted: the verdict's messages must not depend on hashing
        for item in ran:
            self.stop(item, worker, t)
        if mine:
            mine.clear()
        if event["type"] == "worker_crash" or event.get("left") is False or not self.bridge_up:
            # No LeaveGroup, or one sent to a bridge that is down (restarting, or paused for a
            # takeover) and so never heard: only the session timer will tell the coordinator. What
            # the process released as it went (logged just before, at the same moment) is as
            # unknown to the coordinator as what it ran: an item it was giving up (revoked, given
            # to another worker already) is free only once the failure is detected (fleet drill
            # 99300298360: a static worker stopped without leaving right after a bridge restart,
            # while two items were being moved off it; the bridge rightly held them for the
            # reloaded member's first session, and the clock of those two ran from the stop).
            at, released = self.just_released.pop(worker, (None, set()))
            self.unseen(worker, sorted(set(ran) | (released if at == t else set())), gone=True)
        else:
            # A departure the coordinator hears about: what the worker was being given is lost work
            # to Connect's assignor, dealt again within delay + rebalance timeout from now.
            self.shield(self.given.get(worker, frozenset()), self.could_ms)
            if self.classic:
                self.unpersisted_leaves.add(worker)
        self.given.pop(worker, None)

    def assign(self, event: Mapping[str, Any], t: int, index: int) -> None:
        """``assign``: the items the coordinator (or the group's leader) now gives ``worker``, whether
        or not it has started them; replaces the worker's previous ``assign``. Items given to a
        worker whose silent failure is not yet detected are excused until that detection."""
        items = event.get("items")
        problem = f"event {index} (assign): items must be a list of [connector, task]"
        if not isinstance(items, list):
            raise EventLogError(problem)
        try:
            given = frozenset((c, k) for c, k in items)
        except (TypeError, ValueError):
            raise EventLogError(problem) from None
        worker = event.get("worker")
        self.given[worker] = given
        for silent, until in self.silent_now():
            if silent == worker:
                # Given to a member whose failure the coordinator cannot have seen yet: it waits
                # for that detection like what the member had when it failed.
                self.shield(given, until)

    def group(self, event: Mapping[str, Any], t: int, index: int) -> None:
        """``group``: the group's epoch moved. A classic generation names its ``leader``; a leader
        already silent holds up the generation it was just elected to lead. A connect group's
        coordinator (the bridge) deals by itself: nothing classic carries over."""
        if event.get("group_type") == "classic":
            self.classic = True
            self.leader = event.get("leader")
            for worker, until in self.silent_now():
                if worker == self.leader:
                    self.hold_group(until)
        else:
            self.classic = self.rebalancing = False
            self.leader = None
            self.group_held = 0
            self.unpersisted_leaves.clear()  # a connect group stores every leave as it happens

    def group_state(self, event: Mapping[str, Any], t: int, index: int) -> None:
        """``group_state`` of a classic group: a rebalance begun while a member is silent waits on
        it (the join barrier), and on a silent leader (its SyncGroup)."""
        self.rebalancing = event.get("state") in ("PreparingRebalance", "CompletingRebalance")
        if event.get("state") in ("Stable", "Empty") and self.bridge_up:
            self.unpersisted_leaves.clear()  # the generation without them is stored
        if self.rebalancing:
            for _, until in self.silent_now():
                self.hold_group(until)

    def worker_start(self, event: Mapping[str, Any], t: int, index: int) -> None:
        worker = event.get("worker")
        if worker not in self.live:
            self.live.add(worker)
            self.able += 0 if self.stalls.get(worker) else 1

    def stall_start(self, event: Mapping[str, Any], t: int, index: int) -> None:
        worker = event.get("worker")
        self.not_able(worker)
        self.stalls[worker] = self.stalls.get(worker, 0) + 1
        self.unseen(worker)  # a silent process (paused, cut off, stuck, or waiting on a lost answer)

    def stall_end(self, event: Mapping[str, Any], t: int, index: int) -> None:
        worker = event.get("worker")
        open_stalls = self.stalls.get(worker, 0)
        if open_stalls:  # an end without its start (the process restarted since) changes nothing
            self.stalls[worker] = open_stalls - 1
            if worker in self.live and open_stalls == 1:
                self.able += 1
            if open_stalls == 1 and not self.silent.get(worker, (0, True))[1]:
                self.silent.pop(worker, None)  # it speaks again: no barrier waits on it any more

    def bridge_restart(self, event: Mapping[str, Any], t: int, index: int) -> None:
        """The coordinator goes down. A classic group stores its members only when a generation
        is stored (the leader's SyncGroup, or an empty generation), as Kafka's does: a member that
        left since is a member again after the load, and only its session timer can remove it,
        like a worker stopped while the bridge is down (fleet drill 98801296409473: an eager
        worker's LeaveGroup 1.7 s before a restart; the reloaded member held a join barrier)."""
        self.bridge_up = False
        for worker in sorted(self.unpersisted_leaves):
            if worker not in self.live:
                self.unseen(worker, gone=True)
        self.unpersisted_leaves.clear()

    def bridge_back(self, event: Mapping[str, Any], t: int, index: int) -> None:
        """The restarted (or taken-over) coordinator answers again. It is the failed party and was
        giving out every unowned item, and it re-arms every session from its load: the clocks of
        all unowned items, and of the items of workers whose failure it had not yet detected,
        restart :func:`reload_detection_ms` later; so does that of a worker failing silently
        before then (:meth:`unseen`), whose member may still be on its first session."""
        self.bridge_up = True
        if self.reload_detection <= 0:
            return
        now = self.could_ms
        pending = [item for item, until in self.shielded.items() if until > now]
        back = self.reload_until = now + self.reload_detection
        self.shield([*self.unowned_at, *pending], back)
        for worker, (until, gone) in self.silent.items():
            if until > now:
                self.silent[worker] = (back, gone)
        if self.group_held > now:
            self.hold_group(back)

    def timing(self, event: Mapping[str, Any], t: int, index: int) -> None:
        if not self.fixed_detection:
            self.detection = failure_detection_ms(event)
            self.reload_detection = reload_detection_ms(event)
        if not self.fixed_bound:
            self.bound = live_bound(event)

    def config(self, event: Mapping[str, Any], t: int, index: int) -> None:
        connectors = event.get("connectors")
        if not isinstance(connectors, Mapping):
            raise EventLogError(f"event {index} (config): connectors must be an object")
        new = config_items(connectors)
        for item in sorted(self.configured - new):
            since = self.unassigned_since.pop(item, None)
            if since is not None:
                self.unassigned_ms += t - since
                self.owned_again(item, t)
        for item in sorted(new - self.configured):
            if not self.running.get(item):
                self.unowned(item, t)
        self.configured = new

    # --- the end ----------------------------------------------------------------------------------

    def summary(self, name: str, events: int, now: int, end: int) -> Summary:
        """Close every open clock at ``end`` and judge the end state."""
        if self.bridge_up and self.able > 0:
            self.could_ms += end - now
        for since in self.unassigned_since.values():
            self.unassigned_ms += end - since
        for item in sorted(self.unowned_at):
            self.owned_again(item, end)
        for since in self.overlap_since.values():
            self.overlap_ms += end - since
        at_end = f"end (t_ms={end})"
        end_problems = self.placement_problems(at_end)
        converged = not end_problems
        balance_problems = self.balance_problems(at_end)
        end_problems += balance_problems
        live_problems, violations = self.live_problems, self.violations
        n_violations = self.n_violations + len(end_problems) + len(live_problems)
        violations.extend((live_problems + end_problems)[: max(0, MAX_VIOLATIONS - len(violations))])
        if n_violations > len(violations):
            violations.append(f"... and {n_violations - len(violations)} more")
        exclusive, balanced, live_ok = self.overlaps == 0, not balance_problems, not live_problems
        return Summary(  # in field order
            name, exclusive and converged and balanced and live_ok, exclusive, converged, balanced,
            self.overlaps, self.moves, self.rebalances, self.unassigned_ms, events, self.overlap_ms,
            tuple(violations), live_ok, self.max_unowned, self.bound,
        )  # fmt: skip

    def placement_problems(self, at_end: str) -> list[str]:
        """Configured items not running on exactly one live worker, and unconfigured ones running.
        Sorted, so two runs of the same drill print the same summary."""
        problems: list[str] = []
        running = self.running
        for item in sorted(self.configured):
            workers = running.get(item)
            if not workers:
                problems.append(f"{at_end}: {_show(item)} is configured but runs nowhere")
            elif len(workers) > 1:
                problems.append(f"{at_end}: {_show(item)} runs on {', '.join(sorted(workers))}")
            else:
                (worker,) = workers
                if worker not in self.live:
                    problems.append(f"{at_end}: {_show(item)} runs on {worker}, which is not live")
        for item in sorted(i for i, ws in running.items() if ws and i not in self.configured):
            where = ", ".join(sorted(running[item]))
            problems.append(f"{at_end}: {_show(item)} runs on {where} but is not configured")
        return problems

    def balance_problems(self, at_end: str) -> list[str]:
        """Live workers whose connector or task counts differ by more than one."""
        if not self.live:
            return []
        connector_counts: dict[str, int] = {}
        task_counts: dict[str, int] = {}
        for worker in sorted(self.live):
            mine = self.by_worker.get(worker, set())
            instances = sum(1 for _, task in mine if task == CONNECTOR_TASK)
            connector_counts[worker] = instances
            task_counts[worker] = len(mine) - instances
        problems: list[str] = []
        for what, counts in (("connectors", connector_counts), ("tasks", task_counts)):
            if max(counts.values()) - min(counts.values()) > 1:
                shown = ", ".join(f"{w}={c}" for w, c in counts.items())
                problems.append(f"{at_end}: unbalanced {what} per live worker: {shown}")
        return problems


def check_file(path: str | Path, name: str | None = None, end_ms: int | None = None) -> Summary:
    """Check an ``events.jsonl`` file, or a drill directory holding one, streaming it.

    A file whose ``t_ms`` goes backwards (concatenated from several workers' files) is read whole,
    sorted by ``t_ms`` (stable) and checked again; the summary notes it, and a contradiction that
    sorting cannot repair names the file and line (:func:`~connect_bridge.drills.events.time_order`).

    The name defaults as in the pipeline: ``name`` from a ``summary.json`` next to the log,
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
    try:
        return check(iter_events(path), name=name, end_ms=end_ms)
    except _Backwards:
        pass  # a merged log: read it whole, sort it by time, check again
    numbered = list(iter_numbered(path))
    events = [event for _, event in numbered]
    try:
        order, moved = time_order(events, where=lambda i: f"line {numbered[i][0]}")
    except EventLogError as exc:
        raise EventLogError(f"{path}: {exc}") from None
    summary = _check([events[i] for i in order], name, end_ms, _Judge(None, None), order)
    return replace(summary, notes=(order_note(path.name, moved),))
