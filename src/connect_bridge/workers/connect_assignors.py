"""Kafka Connect's leader-side assignors (``EagerAssignor`` and ``IncrementalCooperativeAssignor``).

A legacy worker elected leader of a classic group runs one of these on the decoded subscriptions of
every member, exactly as Connect's ``WorkerCoordinator.onLeaderElected`` does: the eager assignor when
the elected protocol is ``default``, the incremental cooperative one otherwise. They are reproduced
from Apache Kafka's Java (trunk, 3.x/4.x ``IncrementalCooperativeAssignor`` with the consecutive-
revocation backoff) rather than re-designed, because the point of the legacy worker is to behave like
a real Connect worker in front of the bridge. Deviations are listed in ``docs/legacy-workers.md``.

Both are free of I/O: time arrives as ``now_ms``, nothing random. Where Java iterates a ``HashMap`` or
``HashSet`` (arbitrary order) we iterate member ids in sorted order, so results are deterministic.

Connectors and tasks are kept apart internally, as in Java: they are balanced separately. At the API
edge every item is a :class:`ConnectorTaskId` (``task == -1`` is the connector instance).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, TypeVar

from connect_bridge.codecs.connect_protocol import Assignment, Subscription
from connect_bridge.codecs.ids import CONNECTOR_TASK, ConnectorTaskId
from connect_bridge.state.model import ConfigView

__all__ = [
    "CONFIG_MISMATCH",
    "DEFAULT_MAX_DELAY_MS",
    "NO_ERROR",
    "ConfigLike",
    "EagerAssignor",
    "IncrementalCooperativeAssignor",
    "as_config_view",
    "revoking_backoff_ms",
]

NO_ERROR: Final = 0
CONFIG_MISMATCH: Final = 1
"""Assignment error: the leader could not catch up to the highest config offset a member reported."""

DEFAULT_MAX_DELAY_MS: Final = 300_000
"""``scheduled.rebalance.max.delay.ms`` default."""

ConfigLike = ConfigView | tuple[int, Mapping[str, int]]
"""A config view: ``(offset, {connector: task_count})`` or a :class:`ConfigView`."""

T = TypeVar("T")

ConfigRefresh = Callable[[], ConfigLike]
"""Java's ``coordinator.configFreshSnapshot()``: re-read the config topic (the leader may catch up)."""


def as_config_view(config: ConfigLike) -> ConfigView:
    """Accept both config spellings; the rest of the module only sees :class:`ConfigView`."""
    if isinstance(config, ConfigView):
        return config
    offset, connectors = config
    return ConfigView.of(offset, dict(connectors))


def revoking_backoff_ms(attempts: int, max_delay_ms: int) -> int:
    """Kafka's ``ExponentialBackoff(maxDelay == 0 ? 0 : 1, 40, maxDelay, 0).backoff(attempts)``.

    Reproduced with its floating-point steps (the exponent is capped at log40(max)) so the values match
    Java's to the millisecond: 40, 1600, 64000, then the cap (300000 with the default max).
    """
    initial = min(max_delay_ms, 0 if max_delay_ms == 0 else 1)
    if max_delay_ms <= initial:
        return initial
    exp_max = math.log(max_delay_ms / max(initial, 1)) / math.log(40)
    term = initial * math.pow(40, min(attempts, exp_max))
    return min(int(term), max_delay_ms)


# --------------------------------------------------------------------------------------------------
# Small value types (Java's ConnectorsAndTasks / WorkerLoad)
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Work:
    """Connectors and tasks of one worker or one derived set; dicts are ordered sets (Java's
    ``LinkedHashSet``), because "revoke from the front of the worker's list" depends on order."""

    connectors: dict[str, None] = field(default_factory=dict)
    tasks: dict[ConnectorTaskId, None] = field(default_factory=dict)

    @classmethod
    def of(cls, connectors: Iterable[str] = (), tasks: Iterable[ConnectorTaskId] = ()) -> _Work:
        return cls(dict.fromkeys(connectors), dict.fromkeys(tasks))

    @classmethod
    def from_items(cls, items: Iterable[ConnectorTaskId]) -> _Work:
        items = list(items)
        return cls.of(
            (i.connector for i in items if i.task == CONNECTOR_TASK),
            (i for i in items if i.task != CONNECTOR_TASK),
        )

    def copy(self) -> _Work:
        return _Work(dict(self.connectors), dict(self.tasks))

    def is_empty(self) -> bool:
        return not self.connectors and not self.tasks

    def add(self, other: _Work) -> None:
        self.connectors.update(other.connectors)
        self.tasks.update(other.tasks)

    def remove(self, other: _Work) -> None:
        for connector in other.connectors:
            self.connectors.pop(connector, None)
        for task in other.tasks:
            self.tasks.pop(task, None)

    def minus(self, *others: _Work) -> _Work:
        """Sorted difference: Java's ``diff`` builds ``TreeSet``s, so derived sets come out sorted."""
        connectors = set(self.connectors)
        tasks = set(self.tasks)
        for other in others:
            connectors -= other.connectors.keys()
            tasks -= other.tasks.keys()
        return _Work.of(sorted(connectors), sorted(tasks))

    def minus_ordered(self, other: _Work) -> _Work:
        """Items not in ``other``, keeping this set's order (Java's per-worker incremental ``diff``)."""
        return _Work.of(
            (c for c in self.connectors if c not in other.connectors),
            (t for t in self.tasks if t not in other.tasks),
        )

    def intersection(self, other: _Work) -> _Work:
        return _Work.of(
            (c for c in self.connectors if c in other.connectors), (t for t in self.tasks if t in other.tasks)
        )

    def items(self) -> list[ConnectorTaskId]:
        """Connector instances first, then tasks: the order Java hands them to the writer."""
        return [ConnectorTaskId(c, CONNECTOR_TASK) for c in self.connectors] + list(self.tasks)


def _work_of(subscription: Subscription) -> _Work:
    """What a member reports running: its allocation (null/absent — v0 metadata — means nothing)."""
    allocation = subscription.allocation
    if not isinstance(allocation, Assignment):
        return _Work()
    return _Work.from_items(allocation.items)


def _configured(config: ConfigView) -> _Work:
    tasks = config.connector_tasks
    return _Work.of(sorted(tasks), sorted(ConnectorTaskId(c, t) for c in tasks for t in range(tasks[c])))


def _leader_url(members: Mapping[str, Subscription], leader_id: str, leader_url: str | None) -> str:
    """Java takes the leader's url from its own subscription; an explicit value wins (bridge use)."""
    if leader_url is not None:
        return leader_url
    leader = members.get(leader_id)
    return leader.url if leader is not None else ""


def _ensure_leader_config(
    config: ConfigView, max_offset: int, refresh: ConfigRefresh | None
) -> tuple[ConfigView, int] | None:
    """Java's ``ensureLeaderConfig``: the config to assign from and the offset to stamp, or None.

    Behind the highest reported offset, the leader takes one fresh snapshot; still behind means
    CONFIG_MISMATCH for everyone. Note the offset stamped is ``max_offset`` unless a refresh happened.
    """
    if config.offset >= max_offset:
        return config, max_offset
    if refresh is not None:
        fresh = as_config_view(refresh())
        if fresh.offset >= max_offset:
            return fresh, fresh.offset
    return None


def _max_offset(members: Mapping[str, Subscription]) -> int:
    if not members:
        raise ValueError("an assignment needs at least one member (the leader itself)")
    return max(sub.config_offset for sub in members.values())


@dataclass(frozen=True, slots=True)
class _Stamp:
    """What every assignment of one round carries besides its items: leader, url, config offset."""

    leader_id: str
    url: str
    offset: int

    def build(
        self,
        assigned: Iterable[ConnectorTaskId],
        revoked: Iterable[ConnectorTaskId] = (),
        delay: int = 0,
        error: int = NO_ERROR,
    ) -> Assignment:
        return Assignment.build(error, self.leader_id, self.url, self.offset, assigned, revoked, delay)


def _leader_view(
    members: Mapping[str, Subscription],
    leader_id: str,
    leader_url: str | None,
    config: ConfigLike,
    refresh: ConfigRefresh | None,
) -> tuple[_Stamp, ConfigView | None]:
    """The start of both assignors: the round's stamp and the config to assign from (``None``: the
    leader cannot catch up, stamped with the highest reported offset for :func:`_mismatch`)."""
    url = _leader_url(members, leader_id, leader_url)
    max_offset = _max_offset(members)
    ensured = _ensure_leader_config(as_config_view(config), max_offset, refresh)
    if ensured is None:
        return _Stamp(leader_id, url, max_offset), None
    view, offset = ensured
    return _Stamp(leader_id, url, offset), view


def _mismatch(members: Iterable[str], stamp: _Stamp) -> dict[str, Assignment]:
    return {m: stamp.build((), error=CONFIG_MISMATCH) for m in sorted(members)}


# --------------------------------------------------------------------------------------------------
# EagerAssignor
# --------------------------------------------------------------------------------------------------


class EagerAssignor:
    """Connect's v0 assignor: complete sets, round-robin over sorted member ids.

    Stateless. Every member stopped everything before joining, so each gets its complete set; the
    result is meant to be encoded at version 0.
    """

    def assign(
        self,
        members: Mapping[str, Subscription],
        leader_id: str,
        leader_url: str | None,
        config: ConfigLike,
        *,
        refresh_config: ConfigRefresh | None = None,
    ) -> dict[str, Assignment]:
        """Connectors sorted, dealt over sorted member ids; then every task continues the same deal."""
        stamp, view = _leader_view(members, leader_id, leader_url, config, refresh_config)
        if view is None:
            return _mismatch(members, stamp)
        order = sorted(members)
        owned: dict[str, list[ConnectorTaskId]] = {m: [] for m in order}
        deal = 0
        connectors = sorted(view.connector_tasks)
        for connector in connectors:
            owned[order[deal % len(order)]].append(ConnectorTaskId(connector, CONNECTOR_TASK))
            deal += 1
        for connector in connectors:
            for task in range(view.connector_tasks[connector]):
                owned[order[deal % len(order)]].append(ConnectorTaskId(connector, task))
                deal += 1
        return {m: stamp.build(owned[m]) for m in order}


# --------------------------------------------------------------------------------------------------
# IncrementalCooperativeAssignor
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Round:
    """Working state of one ``performTaskAssignment`` call."""

    current: dict[str, _Work]
    """Each member's reported work minus deleted items: what ``next`` is diffed against."""
    next: dict[str, _Work]
    """The assignment after this round, built up step by step."""
    revoke: dict[str, _Work]


class IncrementalCooperativeAssignor:
    """Connect's v1/v2 assignor (KIP-415 "deferred resolution of imbalance"), stateful across rounds.

    The state is what Java keeps in the leader's memory; a new leader starts from nothing, which is
    how KIP-415's "leader leaves" scenario loses the delay. ``assign`` returns per member the work
    *newly* assigned (a delta), what to revoke, the common delay, leader, leader url and config offset.
    """

    def __init__(self, max_delay_ms: int = DEFAULT_MAX_DELAY_MS) -> None:
        self.max_delay_ms = max_delay_ms
        self.previous_assignment = _Work()
        self.previous_revocation = _Work()
        self.revoked_in_previous = False
        self.candidate_workers: dict[str, None] = {}
        """Workers with no work while lost work waits (ordered set): who gets it when the delay ends."""
        self.scheduled_rebalance_ms = 0
        """Deadline of the current delay; 0 = none (Java's sentinel)."""
        self.delay_ms = 0
        self.previous_generation = -1
        self.previous_members: frozenset[str] = frozenset()
        self.num_successive_revoking_rebalances = 0
        self.last_full_assignment: dict[str, frozenset[ConnectorTaskId]] = {}
        """Who runs what once this round's revocations are done (Java's ``LeaderState``, for routing)."""

    # -- public API --------------------------------------------------------------------------------

    def assign(
        self,
        members: Mapping[str, Subscription],
        leader_id: str,
        leader_url: str | None,
        config: ConfigLike,
        generation: int,
        now_ms: int,
        max_delay_ms: int | None = None,
        *,
        last_completed_generation: int | None = None,
        refresh_config: ConfigRefresh | None = None,
    ) -> dict[str, Assignment]:
        """One rebalance round, computed by the leader of ``generation``.

        ``last_completed_generation`` is the leader's last *synced* generation; when it differs from
        the generation of the previous computation, Java discards the remembered previous assignment
        (the leader failed to sync it). ``None`` means "the previous round completed".
        """
        if max_delay_ms is not None:
            self.max_delay_ms = max_delay_ms
        stamp, view = _leader_view(members, leader_id, leader_url, config, refresh_config)
        if view is None:
            # Java returns before touching any state, previousGenerationId included.
            return _mismatch(members, stamp)
        completed = last_completed_generation
        if completed is None:
            completed = self.previous_generation
        reported = {m: _work_of(members[m]) for m in sorted(members)}
        round_ = self._perform(view, completed, generation, reported, now_ms)
        return {
            m: stamp.build(
                round_.next[m].minus_ordered(round_.current[m]).items(),
                round_.revoke.get(m, _Work()).items(),
                self.delay_ms,
            )
            for m in reported
        }

    # -- performTaskAssignment ---------------------------------------------------------------------

    def _perform(
        self,
        config: ConfigView,
        last_completed_generation: int,
        generation: int,
        reported: dict[str, _Work],
        now_ms: int,
    ) -> _Round:
        if self.previous_generation != last_completed_generation:
            self.previous_assignment = _Work()
        configured = _configured(config)
        active = _Work()
        for work in reported.values():
            active.add(work)
        self._reset_previous_if_revocation_failed(active)

        previous = self.previous_assignment
        deleted = previous.minus(configured)
        duplicated = _duplicated(reported)
        lost = previous.minus(active, deleted)
        created = configured.minus(previous, active)

        round_ = _Round(
            current={m: _without(w, deleted) for m, w in reported.items()},
            next={m: w.copy() for m, w in reported.items()},
            revoke={},
        )
        for mandatory in (deleted, duplicated):
            per_worker = {m: w.intersection(mandatory) for m, w in reported.items()}
            _add_all(round_.revoke, per_worker)
            _remove_all(round_.next, per_worker)

        to_reassign = self._handle_lost(lost, round_.next, now_ms)
        self._balance(configured, round_, now_ms)

        to_assign = _Work.of(created.connectors, created.tasks)
        to_assign.add(to_reassign)
        _assign(round_.next, list(to_assign.connectors), lambda w: w.connectors)
        _assign(round_.next, list(to_assign.tasks), lambda w: w.tasks)

        self._remember(round_, lost, generation, reported)
        return round_

    def _reset_previous_if_revocation_failed(self, active: _Work) -> None:
        """A revoked item still reported running means the revocation did not take effect."""
        rev = self.previous_revocation
        if rev.is_empty():
            return
        if any(c in active.connectors for c in rev.connectors) or any(t in active.tasks for t in rev.tasks):
            self.previous_assignment = active.copy()
        self.previous_revocation = _Work()

    def _handle_lost(self, lost: _Work, next_: dict[str, _Work], now_ms: int) -> _Work:
        """Java's ``handleLostAssignments``: returns the lost work to hand out as if new this round.

        May also give lost work straight to candidate workers (mutating ``next_``), start or continue
        the scheduled delay, or reset it.
        """
        if lost.is_empty() and not self.revoked_in_previous:
            self._reset_delay()
            return _Work()
        if self.scheduled_rebalance_ms <= 0 and next_.keys() >= self.previous_members:
            # Nobody left: the missing items just missed their last assignment.
            return lost
        if self.max_delay_ms == 0:
            return lost
        if self.scheduled_rebalance_ms > 0 and now_ms >= self.scheduled_rebalance_ms:
            candidates = [next_[w] for w in self.candidate_workers if w in next_]
            to_reassign = _Work()
            if candidates:
                for index, connector in enumerate(lost.connectors):
                    candidates[index % len(candidates)].connectors[connector] = None
                for index, task in enumerate(lost.tasks):
                    candidates[index % len(candidates)].tasks[task] = None
            else:
                to_reassign = lost
            self._reset_delay()
            self.revoked_in_previous = False
            return to_reassign
        for worker in sorted(next_):
            if next_[worker].is_empty():
                self.candidate_workers[worker] = None
        if now_ms < self.scheduled_rebalance_ms:
            remaining = self.scheduled_rebalance_ms - now_ms
            self.delay_ms = min(remaining, self.max_delay_ms) if remaining > 0 else 0
        else:
            self.delay_ms = self.max_delay_ms
        self.scheduled_rebalance_ms = now_ms + self.delay_ms
        return _Work()

    def _reset_delay(self) -> None:
        self.candidate_workers.clear()
        self.scheduled_rebalance_ms = 0
        self.delay_ms = 0

    def _balance(self, configured: _Work, round_: _Round, now_ms: int) -> None:
        """Load-balancing revocations, only while no delay is active, with the 40^k backoff when
        consecutive rounds keep revoking (so a flapping group cannot revoke forever)."""
        if self.delay_ms != 0:
            self.revoked_in_previous = False
            return
        revocations = _load_balancing_revocations(configured, round_.next)
        if self.revoked_in_previous and revocations:
            self.num_successive_revoking_rebalances += 1
            self.delay_ms = revoking_backoff_ms(self.num_successive_revoking_rebalances, self.max_delay_ms)
            if self.delay_ms != 0:
                self.scheduled_rebalance_ms = now_ms + self.delay_ms
                return
        elif revocations:
            self.revoked_in_previous = True
        elif self.revoked_in_previous:
            self.revoked_in_previous = False
            self.num_successive_revoking_rebalances = 0
            return
        else:
            return
        _add_all(round_.revoke, revocations)
        _remove_all(round_.next, revocations)

    def _remember(self, round_: _Round, lost: _Work, generation: int, reported: dict[str, _Work]) -> None:
        """Java's ``computePreviousAssignment`` plus the bookkeeping at the end of the round."""
        previous = _Work()
        for work in round_.next.values():
            previous.add(work)
        for revoked in round_.revoke.values():
            previous.remove(revoked)
            self.previous_revocation.add(revoked)
        previous.add(lost)
        self.previous_assignment = previous
        self.previous_generation = generation
        self.previous_members = frozenset(reported)
        self.last_full_assignment = {
            m: frozenset(_without(round_.next[m], round_.revoke.get(m, _Work())).items()) for m in round_.next
        }


# --------------------------------------------------------------------------------------------------
# Helpers shared by the rounds
# --------------------------------------------------------------------------------------------------


def _without(work: _Work, exclude: _Work) -> _Work:
    return work.minus_ordered(exclude)


def _duplicated(reported: Mapping[str, _Work]) -> _Work:
    """Items reported by more than one member."""
    seen = _Work()
    dup = _Work()
    for work in reported.values():
        for connector in work.connectors:
            (dup.connectors if connector in seen.connectors else seen.connectors)[connector] = None
        for task in work.tasks:
            (dup.tasks if task in seen.tasks else seen.tasks)[task] = None
    return dup


def _add_all(base: dict[str, _Work], to_add: Mapping[str, _Work]) -> None:
    for worker, work in to_add.items():
        base.setdefault(worker, _Work()).add(work)


def _remove_all(loads: dict[str, _Work], to_remove: Mapping[str, _Work]) -> None:
    for worker, work in to_remove.items():
        if worker in loads:
            loads[worker].remove(work)


def _load_balancing_revocations(configured: _Work, workers: dict[str, _Work]) -> dict[str, _Work]:
    """Java's ``performLoadBalancingRevocations``: connectors and tasks balanced separately."""
    if all(w.is_empty() for w in workers.values()) or configured.is_empty():
        return {}
    result: dict[str, _Work] = {}
    revoked_connectors = _revocations(len(configured.connectors), workers, lambda w: w.connectors)
    revoked_tasks = _revocations(len(configured.tasks), workers, lambda w: w.tasks)
    for worker, connectors in revoked_connectors.items():
        result.setdefault(worker, _Work()).connectors.update(dict.fromkeys(connectors))
    for worker, tasks in revoked_tasks.items():
        result.setdefault(worker, _Work()).tasks.update(dict.fromkeys(tasks))
    return result


def _revocations(
    total: int, workers: dict[str, _Work], pick: Callable[[_Work], dict[T, None]]
) -> dict[str, list[T]]:
    """Revoke from the front of each over-allocated worker's list until it holds its fair share.

    Every worker may keep ``total // n``; ``total % n`` of them (the first over-allocated ones met, in
    worker order) may keep one more. Nothing is revoked if that allocation already holds.
    """
    n = len(workers)
    minimum, extras = divmod(total, n)
    sizes = [len(pick(w)) for w in workers.values()]
    at_min = sizes.count(minimum)
    at_extra = sizes.count(minimum + 1)
    if at_extra == extras and at_min + at_extra == n:
        return {}
    result: dict[str, list[T]] = {}
    allocated_extras = 0
    for worker in sorted(workers):
        current = list(pick(workers[worker]))
        if len(current) <= minimum:
            continue
        if allocated_extras < extras:
            allocated_extras += 1
            if len(current) == minimum + 1:
                continue
            allowed = minimum + 1
        else:
            allowed = minimum
        result[worker] = current[: len(current) - allowed]
    return result


def _assign(loads: dict[str, _Work], items: list[T], pick: Callable[[_Work], dict[T, None]]) -> None:
    """Java's ``assignConnectors``/``assignTasks``: fill the least-loaded workers up level by level.

    Workers are sorted once by (load, worker id); each pass gives one item to every worker in the
    leading block that shares the first worker's (growing) load, until the items run out.
    """
    if not items or not loads:
        return
    order = sorted(loads, key=lambda w: (len(pick(loads[w])), w))
    first = pick(loads[order[0]])
    pending = iter(items)
    remaining = len(items)
    while remaining:
        level = len(first)
        upto = next((i for i, w in enumerate(order) if len(pick(loads[w])) > level), len(order))
        for worker in order[:upto]:
            pick(loads[worker])[next(pending)] = None
            remaining -= 1
            if not remaining:
                break
