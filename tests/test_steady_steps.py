"""The steady-heartbeat steps: the short way through the coordinator and the runtime for a heartbeat
that only renews a session (``GroupCoordinator.steady_connect_heartbeat`` and
``steady_classic_heartbeat``, ``CoordinatorRuntime.submit_steady``).

Every heartbeat of a stable worker takes them, so they must change exactly what the full steps
change for the heartbeats they take (the state, the timers, the effects a result carries) and take
no other heartbeat, leaving everything as it was for the full step to answer.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.stores.committer import Committer
from connect_bridge.bridge.stores.store import MemoryRecordStore
from connect_bridge.codecs.connect_protocol import Assignment, Subscription, encode_subscription
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicGroup
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.records import Record
from test_connect_group import EMPTY, G, stable_pair

CLASSIC = "classic-group"
METADATA = encode_subscription(Subscription("http://w:8083/", -1, Assignment.build(0, "", "", -1, [], ())), 2)
"""A Connect worker's subscription (v2), as a Java worker joins with."""


def state_of(coord: GroupCoordinator) -> tuple[Any, ...]:
    """Everything a step may change: the groups, every armed timer, and the effects the next
    result carries (taking them, as the runtime does after every step)."""
    timers = {key: coord.timers.deadline(key) for key in coord.timers.keys()}
    result = coord.result()
    effects = (result.records, result.released, result.classic_changed, result.next_deadline)
    return coord.snapshot(), waiting_elsewhere(coord), timers, effects


def waiting_elsewhere(coord: GroupCoordinator) -> dict[str, Any]:
    """Soft state a heartbeat clears (``_heard_from``): who may still wait on a JoinGroup parked at
    the coordinator before a load, per group."""
    out: dict[str, Any] = {}
    for gid, group in coord.groups.items():
        if isinstance(group, ClassicGroup):
            out[gid] = {mid: m.waits_elsewhere_until_ms for mid, m in group.members.items()}
        else:
            out[gid] = dict(group.waits_elsewhere_until)
    return out


def compare(
    coord: GroupCoordinator,
    steady: Callable[[GroupCoordinator, Any, int], Any],
    full: Callable[[GroupCoordinator, Any, int], Any],
    req: Any,
    now: int,
) -> bool:
    """Answer ``req`` the steady way first (the full way when it declines) on one copy of ``coord``
    and the full way on another: the same answer and the same state after. Whether the steady way
    took it (when it declines, it has changed nothing)."""
    coord.result()  # what earlier steps left is not the step's
    short, reference = copy.deepcopy(coord), copy.deepcopy(coord)
    before = state_of(copy.deepcopy(coord))
    answer = steady(short, req, now)
    taken = answer is not None
    if not taken:
        assert state_of(copy.deepcopy(short)) == before
        answer = full(short, req, now)
    assert answer == full(reference, req, now)
    assert state_of(short) == state_of(reference)
    return taken


def connect_pair() -> tuple[GroupCoordinator, dict[str, int], int]:
    sim = stable_pair()
    return sim.coord, dict(sim.epoch), sim.now


CONNECT_CASES: list[tuple[str, Callable[[dict[str, int]], HeartbeatRequest], int, bool]] = [
    ("steady", lambda e: HeartbeatRequest(G, "m1", e["m1"]), 0, True),
    ("steady later", lambda e: HeartbeatRequest(G, "m2", e["m2"]), 4_000, True),
    ("reports what it owns", lambda e: HeartbeatRequest(G, "m1", e["m1"], owned=EMPTY), 0, False),
    ("an older epoch", lambda e: HeartbeatRequest(G, "m1", e["m1"] - 1), 0, False),
    ("an unknown member", lambda e: HeartbeatRequest(G, "nobody", e["m1"]), 0, False),
    (
        "another principal's member",
        lambda e: HeartbeatRequest(G, "m1", e["m1"], principal="User:eve"),
        0,
        False,
    ),
    ("a group that does not exist", lambda e: HeartbeatRequest("other", "m1", e["m1"]), 0, False),
    ("no group id", lambda e: HeartbeatRequest("", "m1", e["m1"]), 0, False),
    ("a leave", lambda e: HeartbeatRequest(G, "m1", -1), 0, False),
]


@pytest.mark.parametrize(
    ("make", "later", "steady"), [c[1:] for c in CONNECT_CASES], ids=[c[0] for c in CONNECT_CASES]
)
def test_steady_connect_heartbeats_change_what_the_full_step_changes(
    make: Callable[[dict[str, int]], HeartbeatRequest], later: int, steady: bool
) -> None:
    coord, epochs, now = connect_pair()
    taken = compare(
        coord,
        GroupCoordinator.steady_connect_heartbeat,
        GroupCoordinator.connect_heartbeat,
        make(epochs),
        now + later,
    )
    assert taken == steady


def classic_group(records: list[Record] | None = None) -> tuple[GroupCoordinator, list[str], int]:
    """A Stable classic connect group of one member (no initial rebalance delay): its id and
    generation; ``records``: gets every record written on the way."""
    records = [] if records is None else records
    coord = GroupCoordinator(CoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    request = capi.JoinGroupRequest(CLASSIC, "", "connect", (("sessioned", METADATA),), 10_000, 30_000)
    first = coord.classic_join(request, 0)
    assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member = first.member_id
    assert coord.classic_join(replace(request, member_id=member, token="join"), 0) is None  # parked
    deadline = coord.next_deadline()
    assert deadline is not None
    coord.advance(deadline)  # the join phase ends: the parked JoinGroup is answered
    result = coord.result()
    records.extend(result.records)
    [(token, joined)] = result.released
    assert token == "join" and joined.error_code == 0, joined
    sync = capi.SyncGroupRequest(
        CLASSIC,
        member,
        joined.generation_id,
        assignments=((member, b""),),
        protocol_type="connect",
        protocol_name="sessioned",
    )
    synced = coord.classic_sync(sync, deadline)
    assert synced is not None and synced.error_code == 0, synced
    records.extend(coord.drain_records())
    return coord, [member], joined.generation_id


CLASSIC_CASES: list[tuple[str, Callable[[list[str], int], capi.HeartbeatRequest], int, bool]] = [
    ("steady", lambda ids, gen: capi.HeartbeatRequest(CLASSIC, ids[0], gen), 0, True),
    ("steady later", lambda ids, gen: capi.HeartbeatRequest(CLASSIC, ids[0], gen), 5_000, True),
    ("another generation", lambda ids, gen: capi.HeartbeatRequest(CLASSIC, ids[0], gen + 1), 0, False),
    ("an unknown member", lambda ids, gen: capi.HeartbeatRequest(CLASSIC, "nobody", gen), 0, False),
    ("an unknown instance id", lambda ids, gen: capi.HeartbeatRequest(CLASSIC, ids[0], gen, "i-1"), 0, False),
    (
        "another principal's member",
        lambda ids, gen: capi.HeartbeatRequest(CLASSIC, ids[0], gen, principal="User:eve"),
        0,
        False,
    ),
    ("no group id", lambda ids, gen: capi.HeartbeatRequest("", ids[0], gen), 0, False),
]


@pytest.mark.parametrize(
    ("make", "later", "steady"), [c[1:] for c in CLASSIC_CASES], ids=[c[0] for c in CLASSIC_CASES]
)
def test_steady_classic_heartbeats_change_what_the_full_step_changes(
    make: Callable[[list[str], int], capi.HeartbeatRequest], later: int, steady: bool
) -> None:
    coord, ids, generation = classic_group()
    taken = compare(
        coord,
        GroupCoordinator.steady_classic_heartbeat,
        GroupCoordinator.classic_heartbeat,
        make(ids, generation),
        later,
    )
    assert taken == steady


def test_a_steady_classic_heartbeat_after_a_load_is_heard_from() -> None:
    """After a restart a loaded member may still wait on a JoinGroup parked at the previous
    coordinator; its first heartbeat here says it does not, the steady way too."""
    records: list[Record] = []
    coord, ids, generation = classic_group(records)
    replayed = GroupCoordinator(coord.config)
    replayed.replay(records, 0)
    loaded = replayed.groups[CLASSIC]
    assert isinstance(loaded, ClassicGroup) and loaded.members[ids[0]].waits_elsewhere_until_ms is not None
    req = capi.HeartbeatRequest(CLASSIC, ids[0], generation)
    assert compare(
        replayed, GroupCoordinator.steady_classic_heartbeat, GroupCoordinator.classic_heartbeat, req, 1
    )


def test_a_classic_group_in_a_rebalance_takes_the_full_step() -> None:
    """Only a Stable group's heartbeats are steady: during a rebalance the answer tells the member
    to rejoin (REBALANCE_IN_PROGRESS), which the full step does."""
    coord, ids, generation = classic_group()
    newcomer = capi.JoinGroupRequest(CLASSIC, "", "connect", (("sessioned", METADATA),), 10_000, 30_000)
    first = coord.classic_join(newcomer, 0)
    assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert coord.classic_join(replace(newcomer, member_id=first.member_id, token="t"), 0) is None
    req = capi.HeartbeatRequest(CLASSIC, ids[0], generation)
    assert not compare(
        coord, GroupCoordinator.steady_classic_heartbeat, GroupCoordinator.classic_heartbeat, req, 1
    )
    assert coord.classic_heartbeat(req, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS


def test_a_steady_heartbeat_leaves_the_runtime_no_result_to_settle() -> None:
    """Nothing to apply after a steady heartbeat: no result is built for it. A step with effects
    (here the full step of a join, which writes records) still hands its result back, its records
    already with the committer."""
    coord, epochs, now = connect_pair()
    coord.result()  # the group's forming, applied
    store = MemoryRecordStore()
    runtime = CoordinatorRuntime(coord, Committer(store), lambda: now)
    runtime.loaded = True
    steady, full = GroupCoordinator.steady_connect_heartbeat, GroupCoordinator.connect_heartbeat
    response, result = runtime.submit_steady(steady, full, HeartbeatRequest(G, "m1", epochs["m1"]))
    assert response.error_code == 0 and result is None
    runtime.settle_steady(result)
    join = HeartbeatRequest(G, "", 0, rebalance_timeout_ms=60_000, url="http://m3:8083/", owned=EMPTY)
    response, result = runtime.submit_steady(steady, full, join)
    assert response.error_code == 0 and result is not None and result.records
    assert runtime.committer.written == 1  # handed to the committer before the answer is written
    runtime.settle_steady(result)
