"""Server-side assignors: declarative target assignments computed by the coordinator.

``connect-cooperative`` follows Connect's IncrementalCooperativeAssignor (research note §9) recast
declaratively: work stays where it is (sticky), lost work is held for the scheduled delay (the group
resolves holds before calling us), and when nothing is held the target is balanced, connectors and
tasks separately, each within one across workers. ``connect-eager`` is Connect's EagerAssignor:
sorted round-robin, no stickiness.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
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
    """The previous target of each current member."""
    returned: dict[str, Items]
    """Held work whose worker came back: it goes straight back to that member."""
    holding: bool
    """True while some lost work is still held: no balancing revocations then (Connect's rule)."""


Assignor = Callable[[AssignmentSpec], dict[str, Items]]


def _split(items: Iterable[ConnectorTaskId]) -> tuple[list[ConnectorTaskId], list[ConnectorTaskId]]:
    connectors, tasks = [], []
    for item in items:
        (connectors if item.is_connector else tasks).append(item)
    return connectors, tasks


def _fill(
    pool: list[ConnectorTaskId],
    members: tuple[str, ...],
    keep: dict[str, list[ConnectorTaskId]],
    other_load: dict[str, int],
) -> None:
    """Deal ``pool`` (sorted) to the least loaded members; ties go to the lighter member overall."""
    heap = [(len(keep[m]), other_load[m], m) for m in members]
    heapq.heapify(heap)
    for item in pool:
        load, other, m = heap[0]
        keep[m].append(item)
        heapq.heapreplace(heap, (load + 1, other, m))


def _balance_kind(
    wanted: list[ConnectorTaskId],
    members: tuple[str, ...],
    sticky: dict[str, list[ConnectorTaskId]],
    revoke: bool,
    other_load: dict[str, int],
) -> dict[str, list[ConnectorTaskId]]:
    keep = {m: sorted(sticky.get(m, ())) for m in members}
    if revoke:
        base, extra = divmod(len(wanted), len(members))
        by_load = sorted(members, key=lambda m: (-len(keep[m]), m))
        for rank, m in enumerate(by_load):
            quota = base + (1 if rank < extra else 0)
            if len(keep[m]) > quota:
                del keep[m][quota:]
    kept = {item for items in keep.values() for item in items}
    pool = sorted(item for item in wanted if item not in kept)
    _fill(pool, members, keep, other_load)
    return keep


def cooperative(spec: AssignmentSpec) -> dict[str, Items]:
    if not spec.members:
        return {}
    configured = spec.configured
    sticky_c: dict[str, list[ConnectorTaskId]] = {}
    sticky_t: dict[str, list[ConnectorTaskId]] = {}
    # Returned work may sit in another member's previous target (work a departed worker still ran
    # after a newer target had moved it): it goes back to the worker that runs it, never to both.
    returned_all: Items = frozenset().union(*spec.returned.values()) if spec.returned else EMPTY
    for m in spec.members:
        mine = ((spec.previous.get(m, EMPTY) - returned_all) | spec.returned.get(m, EMPTY)) & configured
        sticky_c[m], sticky_t[m] = _split(mine)
    connectors, tasks = _split(configured)
    revoke = not spec.holding
    load_c = {m: len(sticky_t[m]) for m in spec.members}
    out_c = _balance_kind(connectors, spec.members, sticky_c, revoke, load_c)
    load_t = {m: len(out_c[m]) for m in spec.members}
    out_t = _balance_kind(tasks, spec.members, sticky_t, revoke, load_t)
    return {m: frozenset(out_c[m]) | frozenset(out_t[m]) for m in spec.members}


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


SERVER_ASSIGNORS: dict[str, Assignor] = {COOPERATIVE: cooperative, EAGER: eager}
