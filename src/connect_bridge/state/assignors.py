"""Server-side assignors: declarative target assignments computed by the coordinator.

``connect-cooperative`` follows Connect's IncrementalCooperativeAssignor (KIP-415, Kafka 4.3.1)
recast declaratively: work stays where it is (sticky), lost work is held for the scheduled delay (the group
resolves holds before calling us), and when nothing is held the target is balanced, connectors and
tasks separately, each within one across workers. ``connect-eager`` is Connect's EagerAssignor:
sorted round-robin, no stickiness.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.model import EMPTY, Items

COOPERATIVE = "connect-cooperative"
EAGER = "connect-eager"


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """Everything an assignor may look at: the group metadata the target is computed from."""

    members: tuple[str, ...]
    """Member ids, sorted."""
    configured: Items
    """Work the config view asks for, minus work held back for a departed worker."""
    previous: dict[str, Items]
    """The previous target of current members; a member without an entry had none (the group passes
    only members with work, so a big group's idle members cost the assignor nothing)."""
    returned: dict[str, Items]
    """Held work whose worker came back: it goes straight back to that member."""
    holding: bool
    """True while some lost work is still held: no balancing revocations then (Connect's rule)."""
    member_set: Container[str] | None = None
    """``members`` again, for ``in`` tests: the group passes its member dict's keys so that a big
    group is not copied into a set on every join; None: the assignor builds the set."""


Assignor = Callable[[AssignmentSpec], dict[str, Items]]


def _split(items: Iterable[ConnectorTaskId]) -> tuple[list[ConnectorTaskId], list[ConnectorTaskId]]:
    connectors: list[ConnectorTaskId] = []
    tasks: list[ConnectorTaskId] = []
    for item in items:
        (connectors if item.is_connector else tasks).append(item)
    return connectors, tasks


def _fill(
    pool: list[ConnectorTaskId],
    members: tuple[str, ...],
    keep: dict[str, list[ConnectorTaskId]],
    other_load: dict[str, int],
) -> None:
    """Deal ``pool`` (sorted) to the least loaded members; ties go to the lighter member overall.

    Each item goes to the smallest ``(load, other load, member id)`` and raises its load, so only
    the ``len(pool)`` smallest starting keys can ever be picked: a member ranked lower would need
    everyone before it picked first. Those are the busy members (in ``keep`` or ``other_load``)
    plus the first idle ones in id order (``members`` is sorted), found without building a key for
    each of thousands of idle members.
    """
    if not pool:
        return
    busy = keep.keys() | {m for m, n in other_load.items() if n}
    heap = [(len(keep.get(m, ())), other_load.get(m, 0), m) for m in busy]
    idle = (m for m in members if m not in busy)
    heap.extend((0, 0, m) for m in itertools.islice(idle, len(pool)))
    heapq.heapify(heap)
    for item in pool:
        load, other, m = heap[0]
        keep.setdefault(m, []).append(item)
        heapq.heapreplace(heap, (load + 1, other, m))


def _balance_kind(
    wanted: list[ConnectorTaskId],
    members: tuple[str, ...],
    sticky: dict[str, list[ConnectorTaskId]],
    revoke: bool,
    other_load: dict[str, int],
) -> dict[str, list[ConnectorTaskId]]:
    """Keep what each member had (trimmed to a balanced quota when revoking), deal the rest.

    Only members with work appear in the result; the others get nothing of this kind. Members
    without sticky work rank last by load, so trimming needs only the ones with work.
    """
    keep = {m: sorted(items) for m, items in sticky.items() if items}
    if revoke:
        base, extra = divmod(len(wanted), len(members))
        by_load = sorted(keep, key=lambda m: (-len(keep[m]), m))
        for rank, m in enumerate(by_load):
            quota = base + (1 if rank < extra else 0)
            if len(keep[m]) > quota:
                del keep[m][quota:]
    kept = {item for items in keep.values() for item in items}
    pool = sorted(item for item in wanted if item not in kept)
    _fill(pool, members, keep, other_load)
    return keep


def cooperative_work(spec: AssignmentSpec) -> dict[str, Items]:
    """``connect-cooperative`` as the members that get work, each with its work (everyone else gets
    none): the group installs it without a pass over thousands of idle members."""
    if not spec.members:
        return {}
    configured = spec.configured
    sticky_c: dict[str, list[ConnectorTaskId]] = {}
    sticky_t: dict[str, list[ConnectorTaskId]] = {}
    # Returned work may sit in another member's previous target (work a departed worker still ran
    # after a newer target had moved it): it goes back to the worker that runs it, never to both.
    returned_all: Items = frozenset().union(*spec.returned.values()) if spec.returned else EMPTY
    members = spec.member_set if spec.member_set is not None else set(spec.members)
    with_work = {m for m, items in spec.previous.items() if items and m in members}
    with_work.update(m for m in spec.returned if m in members)
    for m in with_work:  # members with neither keep nothing: skip thousands of idle ones
        mine = ((spec.previous.get(m, EMPTY) - returned_all) | spec.returned.get(m, EMPTY)) & configured
        sticky_c[m], sticky_t[m] = _split(mine)
    connectors, tasks = _split(configured)
    revoke = not spec.holding
    load_c = {m: len(t) for m, t in sticky_t.items() if t}
    out_c = _balance_kind(connectors, spec.members, sticky_c, revoke, load_c)
    load_t = {m: len(c) for m, c in out_c.items()}
    out_t = _balance_kind(tasks, spec.members, sticky_t, revoke, load_t)
    out: dict[str, Items] = {}
    previous = spec.previous
    for m in out_c.keys() | out_t.keys():
        items = frozenset(out_c.get(m, ())) | frozenset(out_t.get(m, ()))
        # The previous set itself when nothing moved: installing the target then finds the member
        # unchanged by identity (``target_assignment.target_records``), without comparing items.
        before = previous.get(m)
        out[m] = before if before is not None and before == items else items
    return out


def full_target(spec: AssignmentSpec, work: Mapping[str, Items]) -> dict[str, Items]:
    """Every member's target, in member id order, from the members that get work."""
    out = dict.fromkeys(spec.members, EMPTY)
    out.update(work)
    return out


def cooperative(spec: AssignmentSpec) -> dict[str, Items]:
    return full_target(spec, cooperative_work(spec))


def eager(spec: AssignmentSpec) -> dict[str, Items]:
    """Connect's EagerAssignor: connectors then tasks, sorted, dealt round-robin over sorted members."""
    out: dict[str, set[ConnectorTaskId]] = {m: set() for m in spec.members}
    if not spec.members:
        return {}
    connectors, tasks = _split(spec.configured)
    n = len(spec.members)
    for i, item in enumerate(sorted(connectors) + sorted(tasks)):
        out[spec.members[i % n]].add(item)
    return {m: frozenset(items) for m, items in out.items()}


def eager_work(spec: AssignmentSpec) -> dict[str, Items]:
    """``connect-eager`` as the members that get work (it deals to every member anyway)."""
    return {m: items for m, items in eager(spec).items() if items}


SERVER_ASSIGNORS: dict[str, Assignor] = {COOPERATIVE: cooperative, EAGER: eager}
WORK_ASSIGNORS: dict[str, Assignor] = {COOPERATIVE: cooperative_work, EAGER: eager_work}
"""The same assignors giving only the members with work: ``full_target(spec, WORK_ASSIGNORS[n](spec))
== SERVER_ASSIGNORS[n](spec)`` (``tests/test_member_index.py``). The group installs these."""
