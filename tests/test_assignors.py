"""Properties of the server-side assignors (``assignors.cooperative`` and ``assignors.eager``).

The assignors are pure functions of an :class:`AssignmentSpec`, so hypothesis drives them directly
with random members, config views, previous targets and returned (held) work.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connect_bridge.codecs.ids import ConnectorTaskId, configured_items
from connect_bridge.state.assignors import SERVER_ASSIGNORS, AssignmentSpec, cooperative, eager
from connect_bridge.state.model import EMPTY, Items

MEMBER_NAMES = ("m0", "m1", "m2", "m3", "m4", "m5")
CONNECTOR_NAMES = ("A", "B", "C", "D", "E", "F")

# ---------------------------------------------------------------------------------------------- helpers


def split_counts(items: Items) -> tuple[int, int]:
    connectors = sum(1 for i in items if i.is_connector)
    return connectors, len(items) - connectors


def assert_exact_cover(out: dict[str, Items], spec: AssignmentSpec) -> None:
    """Every configured item assigned exactly once; nothing unconfigured; one entry per member."""
    assert set(out) == set(spec.members)
    counts = Counter(item for items in out.values() for item in items)
    assert all(n == 1 for n in counts.values()), {str(i): n for i, n in counts.items() if n > 1}
    assert set(counts) == set(spec.configured)


def assert_balanced(out: dict[str, Items]) -> None:
    connectors = [split_counts(items)[0] for items in out.values()]
    tasks = [split_counts(items)[1] for items in out.values()]
    assert max(connectors) - min(connectors) <= 1, connectors
    assert max(tasks) - min(tasks) <= 1, tasks


def owner_map(assignment: dict[str, Items]) -> dict[ConnectorTaskId, str]:
    return {item: mid for mid, items in assignment.items() for item in items}


def min_moves(previous_counts: list[int], total: int, members: int) -> int:
    """Fewest items that must change owner to reach a balanced assignment of one kind.

    A balanced assignment gives ``base`` or ``base + 1`` items to every member (``extra`` of them get
    the ``+ 1``). Handing the larger quotas to the members holding most minimises what has to move.
    """
    base, extra = divmod(total, members)
    counts = sorted(previous_counts + [0] * (members - len(previous_counts)), reverse=True)
    return sum(max(0, c - (base + (1 if rank < extra else 0))) for rank, c in enumerate(counts))


# ---------------------------------------------------------------------------------------------- strategies

views = st.dictionaries(st.sampled_from(CONNECTOR_NAMES), st.integers(0, 6), max_size=6)
member_sets = st.lists(st.sampled_from(MEMBER_NAMES), min_size=1, max_size=6, unique=True).map(
    lambda ms: tuple(sorted(ms))
)


@st.composite
def specs(draw: st.DrawFn, holding: bool | None = None) -> AssignmentSpec:
    """A random spec shaped like the group builds it.

    ``previous`` is a disjoint partial assignment (it may still mention items that are no longer
    configured, and members that left); ``returned`` is disjoint from it and configured.
    """
    members = draw(member_sets)
    view = draw(views)
    configured = configured_items(view)
    # Stale items from a previous config view may linger in the previous target.
    stale = configured_items(draw(st.dictionaries(st.sampled_from(("X", "Y")), st.integers(0, 2))))
    universe = sorted(configured | stale)
    owners = draw(
        st.lists(
            st.sampled_from((None, "returned", "gone", *members)),
            min_size=len(universe),
            max_size=len(universe),
        )
    )
    previous: dict[str, set[ConnectorTaskId]] = {}
    returned_pool: list[ConnectorTaskId] = []
    for item, owner in zip(universe, owners, strict=True):
        if owner == "returned":
            if item in configured:
                returned_pool.append(item)
        elif owner is not None:
            previous.setdefault(owner, set()).add(item)
    returned: dict[str, set[ConnectorTaskId]] = {}
    for item in returned_pool:
        returned.setdefault(draw(st.sampled_from(members)), set()).add(item)
    return AssignmentSpec(
        members=members,
        configured=configured,
        previous={m: frozenset(items) for m, items in previous.items()},
        returned={m: frozenset(items) for m, items in returned.items()},
        holding=draw(st.booleans()) if holding is None else holding,
    )


# ------------------------------------------------------------------------------------------ every assignor


@pytest.mark.parametrize("name", sorted(SERVER_ASSIGNORS))
@settings(max_examples=100, deadline=None)
@given(spec=specs())
def test_every_server_assignor_covers_the_configured_work_once(name: str, spec: AssignmentSpec) -> None:
    """The contract of any assignor an operator may choose: so a new entry in ``SERVER_ASSIGNORS``
    is held to it without a test of its own (docs/engine.md, "Where a change goes")."""
    assert_exact_cover(SERVER_ASSIGNORS[name](spec), spec)


# ---------------------------------------------------------------------------------------------- cooperative


@settings(max_examples=150, deadline=None)
@given(spec=specs())
def test_cooperative_assigns_every_configured_item_exactly_once(spec: AssignmentSpec) -> None:
    assert_exact_cover(cooperative(spec), spec)


@settings(max_examples=150, deadline=None)
@given(spec=specs(holding=False))
def test_cooperative_is_balanced_when_nothing_is_held(spec: AssignmentSpec) -> None:
    """Connectors and tasks are balanced separately, each within one across members."""
    out = cooperative(spec)
    assert_exact_cover(out, spec)
    assert_balanced(out)


@settings(max_examples=150, deadline=None)
@given(spec=specs(holding=True))
def test_cooperative_never_moves_work_while_holding(spec: AssignmentSpec) -> None:
    """While lost work is held, no configured item leaves a current member that had it (Connect's rule)."""
    out = cooperative(spec)
    assert_exact_cover(out, spec)
    for m in spec.members:
        assert spec.previous.get(m, EMPTY) & spec.configured <= out[m]


@settings(max_examples=150, deadline=None)
@given(spec=specs(holding=True))
def test_cooperative_gives_returned_work_back_while_holding(spec: AssignmentSpec) -> None:
    out = cooperative(spec)
    for m, items in spec.returned.items():
        assert items & spec.configured <= out[m]


@settings(max_examples=150, deadline=None)
@given(spec=specs(holding=False))
def test_cooperative_gives_returned_work_back_within_quota(spec: AssignmentSpec) -> None:
    """Without holds the target is balanced, so returned work sticks only within the member's quota.

    When what a member keeps plus what comes back fits under the lowest quota of each kind
    (``configured // members``), nothing of it is trimmed: all the returned work goes to that member.
    """
    out = cooperative(spec)
    n = len(spec.members)
    base_c, base_t = (k // n for k in split_counts(spec.configured))
    for m, items in spec.returned.items():
        c, t = split_counts((spec.previous.get(m, EMPTY) | items) & spec.configured)
        if c <= base_c and t <= base_t:
            assert items <= out[m]


@settings(max_examples=150, deadline=None)
@given(
    members=st.lists(st.sampled_from(MEMBER_NAMES[:-1]), min_size=1, max_size=5, unique=True),
    view=views,
)
def test_cooperative_is_sticky_when_a_member_joins(members: list[str], view: dict[str, int]) -> None:
    """Starting from a balanced target, one more member moves only the minimum needed.

    Items only leave members above their quota, never shuffle between the old members, and the
    number of moves of each kind equals the fewest any balanced assignment needs.
    """
    configured = configured_items(view)
    old_members = tuple(sorted(members))
    before = cooperative(AssignmentSpec(old_members, configured, {}, {}, holding=False))
    assert_balanced(before)
    newcomer = MEMBER_NAMES[-1]
    spec = AssignmentSpec(tuple(sorted((*old_members, newcomer))), configured, before, {}, holding=False)
    after = cooperative(spec)
    assert_exact_cover(after, spec)
    assert_balanced(after)

    old_owner, new_owner = owner_map(before), owner_map(after)
    moved = [item for item in configured if old_owner[item] != new_owner[item]]
    # Everything that moved went to the newcomer: old members only lose work.
    assert all(new_owner[item] == newcomer for item in moved)
    for m in old_members:
        assert after[m] <= before[m]
    for kind in (True, False):  # connectors, then tasks
        counts = [sum(1 for i in before[m] if i.is_connector is kind) for m in old_members]
        total = sum(1 for i in configured if i.is_connector is kind)
        moved_kind = sum(1 for i in moved if i.is_connector is kind)
        assert moved_kind <= min_moves(counts, total, len(spec.members))


@settings(max_examples=200, deadline=None)
@given(spec=specs(holding=False))
def test_cooperative_is_a_fixed_point_on_its_own_output(spec: AssignmentSpec) -> None:
    """Recomputing with the same members and config from the result changes nothing (no churn)."""
    out = cooperative(spec)
    again = cooperative(AssignmentSpec(spec.members, spec.configured, out, {}, holding=False))
    assert again == out


def test_cooperative_with_no_members_assigns_nothing() -> None:
    assert cooperative(AssignmentSpec((), configured_items({"A": 2}), {}, {}, holding=False)) == {}


# ---------------------------------------------------------------------------------------------- eager


@settings(max_examples=150, deadline=None)
@given(spec=specs())
def test_eager_assigns_every_configured_item_exactly_once(spec: AssignmentSpec) -> None:
    out = eager(spec)
    assert_exact_cover(out, spec)


@settings(max_examples=150, deadline=None)
@given(spec=specs())
def test_eager_ignores_previous_holding_and_returned(spec: AssignmentSpec) -> None:
    """Eager is a pure function of the sorted members and the configured work: no stickiness."""
    bare = AssignmentSpec(spec.members, spec.configured, {}, {}, holding=False)
    assert eager(spec) == eager(bare)


@settings(max_examples=150, deadline=None)
@given(members=member_sets, view=views)
def test_eager_total_load_is_balanced(members: tuple[str, ...], view: dict[str, int]) -> None:
    """One round-robin over connectors then tasks: total item counts are within one."""
    out = eager(AssignmentSpec(members, configured_items(view), {}, {}, holding=False))
    sizes = [len(items) for items in out.values()]
    assert max(sizes) - min(sizes) <= 1


def test_eager_matches_connects_eager_assignor_round_robin() -> None:
    """Connect's EagerAssignor.performTaskAssignment on a small exact example.

    Sorted members w1, w2, w3 and one circular iterator: first every connector in name order (A, B,
    C), then, continuing the same iterator, every task of each connector in order (A-0, A-1, A-2,
    B-0, B-1). C has no tasks.
    """

    def t(connector: str, task: int) -> ConnectorTaskId:
        return ConnectorTaskId(connector, task)

    def c(connector: str) -> ConnectorTaskId:
        return ConnectorTaskId(connector, -1)

    configured = configured_items({"B": 2, "A": 3, "C": 0})
    out = eager(AssignmentSpec(("w1", "w2", "w3"), configured, {}, {}, holding=False))
    assert out == {
        "w1": frozenset({c("A"), t("A", 0), t("B", 0)}),
        "w2": frozenset({c("B"), t("A", 1), t("B", 1)}),
        "w3": frozenset({c("C"), t("A", 2)}),
    }


def test_eager_orders_tasks_numerically_and_names_by_code_point() -> None:
    """Java sorts ConnectorTaskId by connector name then task number (10 after 9), names by code unit."""
    configured = configured_items({"a": 0, "B": 11})
    out = eager(AssignmentSpec(("w1", "w2"), configured, {}, {}, holding=False))
    order = [ConnectorTaskId("B", -1), ConnectorTaskId("a", -1)] + [
        ConnectorTaskId("B", i) for i in range(11)
    ]
    expected = {"w1": frozenset(order[0::2]), "w2": frozenset(order[1::2])}
    assert out == expected


# --- the same answer as the straightforward assignor, which looked at every member (issue 11.6) ---


def _reference_cooperative(spec: AssignmentSpec) -> dict[str, Items]:
    """The assignor before it skipped idle members: every member keyed, sorted and heaped."""
    import heapq

    def split(items: Items) -> tuple[list[ConnectorTaskId], list[ConnectorTaskId]]:
        return [i for i in items if i.is_connector], [i for i in items if not i.is_connector]

    def balance(wanted: list, sticky: dict, other: dict) -> dict[str, list]:
        keep = {m: sorted(sticky.get(m, ())) for m in spec.members}
        if not spec.holding:
            base, extra = divmod(len(wanted), len(spec.members))
            for rank, m in enumerate(sorted(spec.members, key=lambda m: (-len(keep[m]), m))):
                del keep[m][base + (1 if rank < extra else 0) :]
        kept = {item for items in keep.values() for item in items}
        heap = [(len(keep[m]), other[m], m) for m in spec.members]
        heapq.heapify(heap)
        for item in sorted(i for i in wanted if i not in kept):
            load, o, m = heap[0]
            keep[m].append(item)
            heapq.heapreplace(heap, (load + 1, o, m))
        return keep

    returned_all = frozenset().union(*spec.returned.values()) if spec.returned else EMPTY
    sticky_c, sticky_t = {}, {}
    for m in spec.members:
        mine = ((spec.previous.get(m, EMPTY) - returned_all) | spec.returned.get(m, EMPTY)) & spec.configured
        sticky_c[m], sticky_t[m] = split(mine)
    connectors, tasks = split(spec.configured)
    out_c = balance(connectors, sticky_c, {m: len(sticky_t[m]) for m in spec.members})
    out_t = balance(tasks, sticky_t, {m: len(out_c[m]) for m in spec.members})
    return {m: frozenset(out_c[m]) | frozenset(out_t[m]) for m in spec.members}


@st.composite
def _specs(draw: st.DrawFn) -> AssignmentSpec:
    connectors = draw(st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 6), max_size=6))
    configured = frozenset(configured_items(connectors))
    pool = sorted(configured | {ConnectorTaskId("gone", 0), ConnectorTaskId("gone", -1)})
    members = draw(st.lists(st.text("wxyz", min_size=1, max_size=3), min_size=1, max_size=12, unique=True))
    some = st.frozensets(st.sampled_from(pool), max_size=8) if pool else st.just(EMPTY)
    previous = {m: draw(some) for m in [*members, "departed"] if draw(st.booleans())}
    returned = {m: draw(some) for m in members if draw(st.integers(0, 4)) == 0}
    return AssignmentSpec(tuple(sorted(members)), configured, previous, returned, draw(st.booleans()))


@settings(max_examples=400, deadline=None)
@given(_specs())
def test_skipping_idle_members_changes_no_assignment(spec: AssignmentSpec) -> None:
    assert cooperative(spec) == _reference_cooperative(spec)


def test_a_join_into_ten_thousand_members_gives_the_newcomer_work_and_moves_only_that() -> None:
    """The many-idle-members case the shortcut is for: 550 items over 10,000 members."""
    configured = frozenset(configured_items({f"c{i:02d}": 10 for i in range(50)}))
    members = tuple(f"w{i:05d}" for i in range(10_000))
    dealt = {m: frozenset([item]) for m, item in zip(members, sorted(configured), strict=False)}
    spec = AssignmentSpec(tuple(sorted((*members, "a-new"))), configured, dealt, {}, holding=False)
    out = cooperative(spec)
    assert out == _reference_cooperative(spec)
    moved = {m for m in dealt if out[m] != dealt[m]}
    assert moved == set() and out["a-new"] == EMPTY  # one item each already: balanced, nothing moves


def test_the_operators_choice_of_assignor_is_the_engines_list() -> None:
    """``coordinator.default_assignor`` accepts exactly the assignors the engine has: a new one added
    to ``SERVER_ASSIGNORS`` alone could not be chosen, one named only in the settings would fail at
    the first target."""
    from typing import get_args

    from connect_bridge.bridge.settings import CoordinatorSettings

    choices = get_args(CoordinatorSettings.model_fields["default_assignor"].annotation)
    assert set(choices) == set(SERVER_ASSIGNORS)
