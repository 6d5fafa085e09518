"""The legacy worker's state machine, driven by hand-made JoinGroup / SyncGroup / Heartbeat responses.

Each test plays the coordinator's part by constructing responses directly; assignments are real
encoded payloads, so the worker's decoding and its leader-side encoding are exercised too.
"""

from __future__ import annotations

import pytest

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    payload_version,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.classic.api import (
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    SyncGroupRequest,
    SyncGroupResponse,
)
from connect_bridge.workers.legacy import ActionKind, LegacyWorker, MemberState, Reaction

GROUP = "connect-cluster"
URL = "http://w1:8083/"
CONFIG = (5, {"A": 2, "B": 1})
VERSION = {"default": 0, "compatible": 1, "sessioned": 2}


def ids(*names: str) -> frozenset[ConnectorTaskId]:
    out = set()
    for name in names:
        connector, _, task = name.partition("-")
        out.add(ConnectorTaskId(connector, int(task) if task else -1))
    return frozenset(out)


def make(mode: str = "compatible", **kw) -> LegacyWorker:
    kw.setdefault("config", CONFIG)
    return LegacyWorker(GROUP, URL, mode, heartbeat_interval_ms=3_000, **kw)  # type: ignore[arg-type]


def step(w: LegacyWorker, now: int) -> tuple[ActionKind, int | None, str]:
    action = w.next_action(now)
    return action.kind, action.at_ms, action.reason


def join(w: LegacyWorker, now: int = 0) -> tuple[Reaction, JoinGroupRequest]:
    assert w.next_action(now).kind is ActionKind.JOIN
    prepared = w.prepare_join(now)
    return prepared, w.join_request(now)


def joined(gen: int, protocol: str, member: str = "m1", leader: str = "m0", **kw) -> JoinGroupResponse:
    return JoinGroupResponse(0, gen, "connect", protocol, leader, member_id=member, **kw)


def payload(protocol: str, assigned=(), revoked=(), delay=0, error=0, offset=5, leader="m0") -> bytes:
    asg = Assignment.build(
        error, leader, "http://leader:8083/", offset, sorted(assigned), sorted(revoked), delay
    )
    return encode_assignment(asg, VERSION[protocol])


def rebalance(w: LegacyWorker, gen: int, protocol: str, now: int = 0, **asg) -> tuple[Reaction, Reaction]:
    """One full follower round: prepare + JoinGroup, SyncGroup, assignment applied."""
    prepared, _ = join(w, now)
    sync = w.on_join_response(joined(gen, protocol, member=w.member_id or "m1"), now)
    assert isinstance(sync.request, SyncGroupRequest) and sync.request.assignments == ()
    done = w.on_sync_response(SyncGroupResponse(0, "connect", protocol, payload(protocol, **asg)), now)
    return prepared, done


# ---------------------------------------------------------------------------------------------------
# JoinGroup metadata
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "names"),
    [
        ("eager", ["default"]),
        ("compatible", ["compatible", "default"]),
        ("sessioned", ["sessioned", "compatible", "default"]),
    ],
)
def test_join_request_advertises_the_modes_protocols_each_at_its_version(mode: str, names: list[str]) -> None:
    w = make(mode, instance_id="i-1")
    _, req = join(w)
    assert (req.group_id, req.member_id, req.protocol_type, req.group_instance_id) == (
        GROUP,
        "",
        "connect",
        "i-1",
    )
    assert [name for name, _ in req.protocols] == names
    for name, metadata in req.protocols:
        assert payload_version(metadata) == VERSION[name]
        sub = decode_subscription(metadata)
        assert (sub.url, sub.config_offset) == (URL, 5)
        assert not isinstance(sub.allocation, Assignment)  # no snapshot yet: null (v1/v2) or absent (v0)
    assert w.state is MemberState.PREPARING_REBALANCE


def test_allocation_is_the_full_snapshot_with_the_last_leader() -> None:
    w = make("sessioned")
    rebalance(w, 1, "sessioned", assigned=ids("A", "A-0"))
    w.on_heartbeat_response(HeartbeatResponse(), 0)  # not in flight: ignored
    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_001)
    _, req = join(w, 3_001)
    metadata = dict(req.protocols)
    for name in ("sessioned", "compatible"):
        allocation = decode_subscription(metadata[name]).allocation
        assert isinstance(allocation, Assignment)
        assert frozenset(allocation.items) == ids("A", "A-0")
        assert (allocation.leader, allocation.leader_url, allocation.config_offset) == (
            "m0",
            "http://leader:8083/",
            5,
        )
    assert payload_version(metadata["sessioned"]) == 2


def test_join_request_needs_prepare_join_first() -> None:
    w = make()
    with pytest.raises(RuntimeError, match="prepare_join"):
        w.join_request(0)


# ---------------------------------------------------------------------------------------------------
# Applying assignments
# ---------------------------------------------------------------------------------------------------


def test_eager_stops_everything_before_joining_and_starts_the_complete_set() -> None:
    w = make("eager")
    _, first = rebalance(w, 1, "default", assigned=ids("A", "A-0", "A-1"))
    assert first.start == ids("A", "A-0", "A-1") and first.generation_changed and first.generation == 1
    assert w.running == ids("A", "A-0", "A-1")

    w.heartbeat_request(3_000)
    rejoin = w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_001)
    assert rejoin.rejoin and not rejoin.stop  # nothing stops until the rebalance actually starts
    prepared, second = rebalance(w, 2, "default", now=3_002, assigned=ids("A", "B"))
    assert prepared.stop == ids("A", "A-0", "A-1") and w.running == ids("A", "B")
    assert second.start == ids("A", "B") and not second.stop
    assert second.epoch_changed and second.generation == 2


def test_cooperative_keeps_running_applies_revoked_and_delta_then_rejoins() -> None:
    w = make("compatible")
    rebalance(w, 1, "compatible", assigned=ids("A", "A-0", "A-1", "B"))
    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_000)

    prepared, done = rebalance(w, 2, "compatible", now=3_000, assigned=ids("B-0"), revoked=ids("A", "A-1"))
    assert prepared.stop == frozenset()  # cooperative: no stop on join
    assert done.stop == ids("A", "A-1")
    assert done.start == ids("B-0")
    assert w.running == ids("A-0", "B", "B-0")  # previous - revoked + delta
    assert done.rejoin and step(w, 3_000) == (ActionKind.JOIN, 3_000, "rejoin requested")
    assert isinstance(w.snapshot, Assignment) and w.snapshot.revoked_items == ()

    # The follow-up rebalance hands out nothing new: the worker keeps what it has.
    prepared, again = rebalance(w, 3, "compatible", now=3_010)
    assert not prepared.stop and not again.stop and not again.start and not again.rejoin
    assert w.next_action(3_010).kind is ActionKind.HEARTBEAT


def test_delay_schedules_a_rejoin_and_heartbeats_continue_meanwhile() -> None:
    w = make("sessioned")
    _, done = rebalance(w, 4, "sessioned", now=1_000, assigned=ids("A"), delay=5_000)
    assert done.rejoin_at_ms == 6_000 and not done.rejoin
    assert step(w, 1_000) == (ActionKind.HEARTBEAT, 4_000, "heartbeat interval")
    w.heartbeat_request(4_000)
    assert w.next_action(4_000).kind is ActionKind.JOIN and w.next_action(4_000).at_ms == 6_000
    w.on_heartbeat_response(HeartbeatResponse(), 4_001)
    assert w.next_action(5_999).kind is ActionKind.JOIN and w.next_action(5_999).at_ms == 6_000
    assert not w.needs_rejoin(5_999) and w.needs_rejoin(6_000)
    prepared, _ = join(w, 6_000)
    assert not prepared.stop and w.running == ids("A")


def test_delay_replaced_by_the_next_assignment() -> None:
    w = make("compatible")
    rebalance(w, 1, "compatible", assigned=ids("A"), delay=5_000)
    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_000)
    rebalance(w, 2, "compatible", now=3_000)
    assert w.scheduled_rejoin_ms is None and not w.needs_rejoin(10_000)


def test_config_mismatch_rejoins_after_reading_the_config() -> None:
    w = make("compatible")
    rebalance(w, 1, "compatible", assigned=ids("A"))
    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_000)
    _, done = rebalance(w, 2, "compatible", now=3_000, error=1, offset=9)
    assert done.rejoin and not done.start and not done.stop
    assert w.running == ids("A")  # cooperative work keeps running through a failed round
    assert w.config.offset == 9  # caught up to the leader's offset before rejoining
    assert w.next_action(3_000).kind is ActionKind.JOIN
    _, req = join(w, 3_000)
    allocation = decode_subscription(dict(req.protocols)["compatible"])
    assert allocation.config_offset == 9
    assert isinstance(allocation.allocation, Assignment) and allocation.allocation.error == 1


def test_config_provider_is_read_and_a_lagging_worker_does_not_start() -> None:
    views = [(5, {"A": 1}), (5, {"A": 1}), (6, {"A": 1})]
    w = make("compatible", config_provider=lambda: views.pop(0) if len(views) > 1 else views[0])
    _, done = rebalance(w, 1, "compatible", assigned=ids("A"), offset=7)
    # Read to the end: offset 6, still not the leader's 7 -> start nothing, rejoin.
    assert w.config.offset == 6 and not done.start and done.rejoin and w.running == frozenset()


def test_lagging_worker_without_provider_trusts_the_leaders_offset_and_starts() -> None:
    w = make("compatible")
    _, done = rebalance(w, 1, "compatible", assigned=ids("A"), offset=8)
    assert w.config.offset == 8 and done.start == ids("A") and not done.rejoin


def test_switch_to_the_eager_protocol_stops_everything_on_the_eager_election() -> None:
    w = make("compatible")
    rebalance(w, 1, "compatible", assigned=ids("A", "B"))
    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_000)
    prepared, _ = join(w, 3_000)
    assert not prepared.stop  # the last elected protocol was cooperative: nothing stops before joining
    joined_eager = w.on_join_response(joined(2, "default"), 3_000)
    assert joined_eager.stop == ids("A", "B") and w.running == frozenset()  # the eager election stops all
    done = w.on_sync_response(
        SyncGroupResponse(0, "connect", "default", payload("default", assigned=ids("B", "A-0"))), 3_000
    )
    assert not done.stop and done.start == ids("B", "A-0") and w.running == ids("B", "A-0")
    w.heartbeat_request(6_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 6_000)
    prepared, _ = join(w, 6_000)
    assert prepared.stop == ids("B", "A-0")  # now eager: everything stops before joining


# ---------------------------------------------------------------------------------------------------
# The leader
# ---------------------------------------------------------------------------------------------------


def other_member(protocol: str, owned=()) -> JoinGroupMember:
    allocation = Assignment.build(0, "m1", URL, 5, sorted(owned)) if owned else None
    sub = Subscription("http://w2:8083/", 5, allocation)
    return JoinGroupMember("m2", None, encode_subscription(sub, VERSION[protocol]))


@pytest.mark.parametrize("protocol", ["compatible", "sessioned"])
def test_leader_runs_the_cooperative_assignor_and_encodes_at_the_elected_version(protocol: str) -> None:
    w = make("sessioned")
    _, req = join(w)
    own = JoinGroupMember("m1", None, dict(req.protocols)[protocol])
    resp = joined(1, protocol, member="m1", leader="m1", members=(own, other_member(protocol)))
    sync = w.on_join_response(resp, 0)
    assert isinstance(sync.request, SyncGroupRequest)
    assert (sync.request.member_id, sync.request.generation_id, sync.request.protocol_name) == (
        "m1",
        1,
        protocol,
    )
    assignments = dict(sync.request.assignments)
    assert set(assignments) == {"m1", "m2"}
    decoded = {m: decode_assignment(b) for m, b in assignments.items()}
    assert {payload_version(b) for b in assignments.values()} == {VERSION[protocol]}
    assert frozenset(decoded["m1"].items) | frozenset(decoded["m2"].items) == ids(
        "A", "A-0", "A-1", "B", "B-0"
    )
    for asg in decoded.values():
        assert (asg.leader, asg.leader_url, asg.config_offset, asg.delay_ms) == ("m1", URL, 5, 0)

    done = w.on_sync_response(SyncGroupResponse(0, "connect", protocol, assignments["m1"]), 0)
    assert done.start == frozenset(decoded["m1"].items) and w.is_leader and w.leader_url == URL


def test_leader_remembers_the_previous_round_and_revokes_for_a_newcomer() -> None:
    w = make("compatible")
    _, req = join(w)
    own = JoinGroupMember("m1", None, dict(req.protocols)["compatible"])
    sync = w.on_join_response(joined(1, "compatible", "m1", "m1", members=(own,)), 0)
    w.on_sync_response(SyncGroupResponse(0, "connect", "compatible", dict(sync.request.assignments)["m1"]), 0)
    assert w.running == ids("A", "A-0", "A-1", "B", "B-0")

    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_000)
    _, req = join(w, 3_000)
    own = JoinGroupMember("m1", None, dict(req.protocols)["compatible"])
    sync = w.on_join_response(
        joined(2, "compatible", "m1", "m1", members=(own, other_member("compatible"))), 3_000
    )
    mine = decode_assignment(dict(sync.request.assignments)["m1"])
    theirs = decode_assignment(dict(sync.request.assignments)["m2"])
    assert mine.revoked_items and not mine.items and not theirs.items  # two-phase: revoke first
    done = w.on_sync_response(
        SyncGroupResponse(0, "connect", "compatible", dict(sync.request.assignments)["m1"]), 3_000
    )
    assert done.stop == frozenset(mine.revoked_items) and done.rejoin


def test_leader_on_the_default_protocol_deals_complete_sets_at_v0() -> None:
    w = make("compatible")
    _, req = join(w)
    own = JoinGroupMember("m1", None, dict(req.protocols)["default"])
    members = (own, other_member("default"))
    # A leader that did not complete the previous generation under eager cannot know that every
    # member stopped its work before joining: KIP-415's downgrade round hands out nothing first.
    sync = w.on_join_response(joined(1, "default", "m1", "m1", members=members), 0)
    assignments = dict(sync.request.assignments)
    assert {payload_version(b) for b in assignments.values()} == {0}
    assert all(not decode_assignment(b).items for b in assignments.values())
    w.on_sync_response(
        SyncGroupResponse(protocol_type="connect", protocol_name="default", assignment=assignments["m1"]), 0
    )
    assert w.needs_rejoin(0)  # ... and asks for the second, regular eager rebalance
    w.prepare_join(1)
    w.join_request(1)
    sync = w.on_join_response(joined(2, "default", "m1", "m1", members=members), 1)
    assignments = dict(sync.request.assignments)
    assert {payload_version(b) for b in assignments.values()} == {0}
    assert frozenset(decode_assignment(assignments["m1"]).items) == ids("A", "A-0", "B-0")
    assert frozenset(decode_assignment(assignments["m2"]).items) == ids("B", "A-1")


def test_perform_assignment_hook_accepts_a_mapping() -> None:
    w = make("eager")
    w.protocols()
    w._leader.led = (0, "default", frozenset({"m1"}))  # it led generation 0 eagerly: no downgrade round
    out = w.perform_assignment("m1", "default", {"m1": encode_subscription(Subscription(URL, 5), 0)}, 1, 0)
    assert frozenset(decode_assignment(out["m1"]).items) == ids("A", "A-0", "A-1", "B", "B-0")


# ---------------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------------


def test_member_id_required_takes_the_id_and_rejoins_without_a_new_prepare() -> None:
    w = make("eager")
    join(w)
    r = w.on_join_response(JoinGroupResponse(ErrorCode.MEMBER_ID_REQUIRED, member_id="m-42"), 1)
    assert r.rejoin and w.member_id == "m-42"
    assert step(w, 1) == (ActionKind.JOIN, 1, "no assignment yet")
    req = w.join_request(1)  # no prepare_join needed: the rebalance already started
    assert req.member_id == "m-42"


def test_heartbeat_rebalance_in_progress_rejoins_only_when_stable() -> None:
    w = make()
    join(w)
    w.on_join_response(joined(1, "compatible"), 0)
    w.heartbeat_request(3_000)  # heartbeats also run while SyncGroup is pending
    ignored = w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_000)
    assert not ignored.rejoin and w.state is MemberState.COMPLETING_REBALANCE
    w.on_sync_response(
        SyncGroupResponse(0, "connect", "compatible", payload("compatible", assigned=ids("A"))), 3_000
    )
    w.heartbeat_request(6_000)
    r = w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 6_000)
    assert r.rejoin and w.next_action(6_000).kind is ActionKind.JOIN and w.running == ids("A")


@pytest.mark.parametrize(
    ("code", "member_after"),
    [(ErrorCode.UNKNOWN_MEMBER_ID, ""), (ErrorCode.ILLEGAL_GENERATION, "m1")],
)
def test_heartbeat_fencing_resets_the_generation_but_cooperative_work_keeps_running(
    code, member_after
) -> None:
    w = make("compatible")
    rebalance(w, 3, "compatible", assigned=ids("A", "B"))
    w.heartbeat_request(3_000)
    r = w.on_heartbeat_response(HeartbeatResponse(code), 3_000)
    assert r.rejoin and not r.stop
    assert (w.generation, w.member_id, w.state) == (-1, member_after, MemberState.UNJOINED)
    prepared, req = join(w, 3_000)
    assert not prepared.stop and w.running == ids("A", "B")  # Java: kept, reported as the allocation
    assert req.member_id == member_after
    allocation = decode_subscription(dict(req.protocols)["compatible"]).allocation
    assert isinstance(allocation, Assignment) and frozenset(allocation.items) == ids("A", "B")


def test_revoke_on_generation_reset_stops_everything_and_drops_the_allocation() -> None:
    w = make("compatible", revoke_on_generation_reset=True)
    rebalance(w, 3, "compatible", assigned=ids("A", "B"))
    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.UNKNOWN_MEMBER_ID), 3_000)
    prepared, req = join(w, 3_000)
    assert prepared.stop == ids("A", "B") and w.running == frozenset()
    assert decode_subscription(dict(req.protocols)["compatible"]).allocation is None


def test_fenced_instance_id_is_fatal() -> None:
    w = make("compatible", instance_id="static-1")
    rebalance(w, 1, "compatible", assigned=ids("A"))
    w.heartbeat_request(3_000)
    r = w.on_heartbeat_response(HeartbeatResponse(ErrorCode.FENCED_INSTANCE_ID), 3_000)
    assert r.fatal and r.stop == ids("A") and w.running == frozenset()
    assert w.next_action(3_000).kind is ActionKind.STOPPED and w.state is MemberState.DEAD


@pytest.mark.parametrize(
    ("code", "kind", "at"),
    [
        (ErrorCode.REBALANCE_IN_PROGRESS, ActionKind.JOIN, 10),
        (ErrorCode.UNKNOWN_MEMBER_ID, ActionKind.JOIN, 10),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ActionKind.JOIN, 110),
        (ErrorCode.NOT_COORDINATOR, ActionKind.JOIN, 110),
        (ErrorCode.INVALID_SESSION_TIMEOUT, ActionKind.STOPPED, None),
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, ActionKind.STOPPED, None),
        (ErrorCode.ILLEGAL_GENERATION, ActionKind.STOPPED, None),  # unexpected for JoinGroup in Java
    ],
)
def test_join_errors_follow_abstract_coordinator(code, kind, at) -> None:
    w = make()
    join(w)
    w.on_join_response(JoinGroupResponse(code), 10)
    action = w.next_action(10)
    assert (action.kind, action.at_ms) == (kind, at)


def test_sync_illegal_generation_keeps_the_member_id_and_restarts_the_rebalance() -> None:
    w = make("eager")
    rebalance(w, 1, "default", assigned=ids("A"))
    w.heartbeat_request(3_000)
    w.on_heartbeat_response(HeartbeatResponse(ErrorCode.REBALANCE_IN_PROGRESS), 3_000)
    prepared, _ = join(w, 3_000)
    assert prepared.stop == ids("A")
    w.on_join_response(joined(2, "default"), 3_000)
    r = w.on_sync_response(SyncGroupResponse(ErrorCode.ILLEGAL_GENERATION), 3_001)
    assert r.rejoin and (w.generation, w.member_id) == (-1, "m1")
    assert w.prepare_join(3_001).stop == frozenset()  # prepare runs again; nothing left to stop
    rejoin = w.join_request(3_001)
    assert (rejoin.group_id, rejoin.member_id, rejoin.protocol_type) == (GROUP, "m1", "connect")


def test_stale_responses_are_ignored() -> None:
    w = make()
    assert w.on_join_response(joined(1, "compatible"), 0) == Reaction()
    assert w.on_sync_response(SyncGroupResponse(), 0) == Reaction()
    assert w.on_heartbeat_response(HeartbeatResponse(ErrorCode.UNKNOWN_MEMBER_ID), 0) == Reaction()


def test_inconsistent_protocol_type_is_fatal() -> None:
    w = make()
    join(w)
    r = w.on_join_response(JoinGroupResponse(0, 1, "consumer", "range", "m0", member_id="m1"), 0)
    assert r.fatal and "INCONSISTENT_GROUP_PROTOCOL" in r.fatal


# ---------------------------------------------------------------------------------------------------
# Leaving
# ---------------------------------------------------------------------------------------------------


def test_shutdown_stops_everything_then_leaves() -> None:
    w = make("compatible")
    rebalance(w, 1, "compatible", assigned=ids("A", "B"))
    r = w.shutdown(5_000)
    assert r.stop == ids("A", "B") and r.fatal is None
    assert isinstance(r.request, LeaveGroupRequest)
    assert [(m.member_id, m.group_instance_id) for m in r.request.members] == [("m1", None)]
    assert w.next_action(5_000).kind is ActionKind.STOPPED


def test_static_members_and_unjoined_workers_send_no_leave() -> None:
    assert make().leave_request() is None
    w = make(instance_id="static-1")
    rebalance(w, 1, "compatible", assigned=ids("A"))
    assert w.leave_request() is None


def test_coordinator_lost_revokes_the_assignment_and_rejoins_with_no_allocation() -> None:
    w = make("compatible")
    rebalance(w, 1, "compatible", assigned=ids("A"))
    r = w.coordinator_lost(9_000)
    assert r.stop == ids("A") and r.rejoin and w.snapshot is None
    assert step(w, 9_000) == (ActionKind.JOIN, 9_100, "no assignment yet")


# ---------------------------------------------------------------------------------------------------
# A whole two-worker exchange through bytes
# ---------------------------------------------------------------------------------------------------


def test_two_workers_migrate_work_in_two_phases() -> None:
    """W1 leads; W2 joins. Round 1 revokes from W1, round 2 gives the freed work to W2."""
    w1, w2 = make("sessioned"), LegacyWorker(GROUP, "http://w2:8083/", "compatible", config=CONFIG)
    gen = 0

    def round_(now: int, workers: list[LegacyWorker]) -> dict[str, Reaction]:
        nonlocal gen
        gen += 1
        reqs = {}
        for i, w in enumerate(workers, 1):
            w.prepare_join(now)
            reqs[f"m{i}"] = w.join_request(now)
        # Both support "compatible"; W1 prefers "sessioned", which W2 lacks.
        members = tuple(JoinGroupMember(m, None, dict(r.protocols)["compatible"]) for m, r in reqs.items())
        syncs = {}
        for i, w in enumerate(workers, 1):
            m = f"m{i}"
            resp = joined(gen, "compatible", member=m, leader="m1", members=members if m == "m1" else ())
            syncs[m] = w.on_join_response(resp, now).request
        table = dict(syncs["m1"].assignments)
        return {
            f"m{i}": w.on_sync_response(SyncGroupResponse(0, "connect", "compatible", table[f"m{i}"]), now)
            for i, w in enumerate(workers, 1)
        }

    round_(0, [w1])
    assert w1.running == ids("A", "A-0", "A-1", "B", "B-0")
    first = round_(10, [w1, w2])
    assert first["m1"].stop and first["m1"].rejoin and not first["m2"].start
    second = round_(20, [w1, w2])
    assert second["m2"].start == first["m1"].stop
    assert w1.running | w2.running == ids("A", "A-0", "A-1", "B", "B-0")
    assert not w1.running & w2.running
    assert w2.leader_id == "m1" and w2.leader_url == URL


# ---------------------------------------------------------------------------------------------------
# Odds and ends
# ---------------------------------------------------------------------------------------------------


def test_next_action_waits_for_responses_and_heartbeats_during_sync() -> None:
    w = make()
    join(w)
    assert step(w, 0) == (ActionKind.WAIT, None, "awaiting JoinGroup response")
    w.on_join_response(joined(1, "compatible"), 100)
    assert step(w, 100) == (ActionKind.HEARTBEAT, 3_100, "heartbeat interval")
    w.heartbeat_request(3_100)
    assert step(w, 3_100) == (ActionKind.WAIT, None, "awaiting SyncGroup response")


def test_heartbeat_needs_a_joined_member_and_retries_after_coordinator_errors() -> None:
    w = make()
    with pytest.raises(RuntimeError, match="no heartbeats"):
        w.heartbeat_request(0)
    rebalance(w, 1, "compatible", assigned=ids("A"))
    w.heartbeat_request(3_000)
    r = w.on_heartbeat_response(HeartbeatResponse(ErrorCode.NOT_COORDINATOR), 3_005)
    assert not r.rejoin and step(w, 3_005) == (ActionKind.HEARTBEAT, 3_100, "heartbeat interval")


@pytest.mark.parametrize(
    ("code", "kind", "at"),
    [
        (ErrorCode.NOT_COORDINATOR, ActionKind.JOIN, 110),
        (ErrorCode.REBALANCE_IN_PROGRESS, ActionKind.JOIN, 10),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ActionKind.STOPPED, None),  # unexpected in Java
    ],
)
def test_sync_errors_follow_abstract_coordinator(code, kind, at) -> None:
    w = make()
    join(w)
    w.on_join_response(joined(1, "compatible"), 0)
    w.on_sync_response(SyncGroupResponse(code), 10)
    action = w.next_action(10)
    assert (action.kind, action.at_ms) == (kind, at)


def test_config_attribute_accepts_a_tuple() -> None:
    w = make()
    w.config = (9, {"Z": 1})
    assert (w.config.offset, w.config.connector_tasks) == (9, {"Z": 1})
    _, req = join(w)
    assert decode_subscription(dict(req.protocols)["default"]).config_offset == 9


def test_lagging_leader_sends_config_mismatch_then_catches_up() -> None:
    views = iter([(5, {"A": 1})] * 3 + [(9, {"A": 1, "C": 1})] * 10)
    w = make("compatible", config_provider=lambda: next(views))
    _, req = join(w)
    own = JoinGroupMember("m1", None, dict(req.protocols)["compatible"])
    ahead = JoinGroupMember("m2", None, encode_subscription(Subscription("http://w2:8083/", 9), 1))
    sync = w.on_join_response(joined(1, "compatible", "m1", "m1", members=(own, ahead)), 0)
    # The leader's fresh snapshot (offset 5 again) is still behind the 9 m2 reported.
    table = {m: decode_assignment(b) for m, b in sync.request.assignments}
    assert {(a.error, a.config_offset) for a in table.values()} == {(1, 9)}
    done = w.on_sync_response(
        SyncGroupResponse(0, "connect", "compatible", dict(sync.request.assignments)["m1"]), 0
    )
    assert done.rejoin and not done.start and w.config.offset == 9  # the leader read to the end
