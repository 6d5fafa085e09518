"""Adoption foundations (issue 16, docs/adoption.md): the relay observer, the takeover condition,
the adopted group, and the ownership record across restarts.

Fast and in-process: the upstream is the bridge's classic engine behind a frame-level relay
(``tests/adoption_relay.py``), the frames are kafka-python's own messages at the versions Java
Connect 4.3.1 workers send, and every record goes through the durable codec before a replay.
"""

from __future__ import annotations

import json
import logging
import struct
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.consumer.group import HeartbeatRequest, HeartbeatResponse

from adoption_relay import SESSION_MS, G, Relay, protocols
from connect_bridge.bridge.adoption.observer import RelayObserver
from connect_bridge.bridge.coordination.decisions import log_decisions
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.requests import encode_request, encode_response_frame
from connect_bridge.state.adoption.build import AdoptionError, adoption_records
from connect_bridge.state.adoption.observation import Observation, takeover_ready, upstream_conflict
from connect_bridge.state.adoption.records import (
    GroupOwnership,
    OwnershipError,
    OwnershipState,
    OwnershipTable,
    check_transition,
    ownership_record,
)
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic import group as classic
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.classic.group import ClassicGroup
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record, RecordType

WORKERS = ["w1", "w2", "w3"]
OWN = OwnershipState


def _formed() -> tuple[Relay, int, dict[str, str], dict[str, bytes]]:
    relay = Relay()
    generation, ids, assignments = relay.form_generation(WORKERS)
    return relay, generation, ids, assignments


def _obs(relay: Relay) -> Observation:
    obs = relay.observer.observation(G)
    assert obs is not None
    return obs


def _durable(records: list[Record]) -> list[Record]:
    """Records as a restarted bridge reads them: through the durable byte form."""
    return [decode_record(*encode_record(r)) for r in records]


def _compacted(records: list[Record]) -> list[Record]:
    """What a compacted log keeps: the latest record per key, in the order of latest writes."""
    latest: dict[tuple[int, str, str], Record] = {}
    for r in records:
        latest.pop(r.key, None)
        latest[r.key] = r
    return [r for r in latest.values() if not r.is_tombstone]


# --------------------------------------------------------------------------- the observer


def test_relayed_frames_build_the_generation_as_the_upstream_formed_it() -> None:
    relay, generation, ids, assignments = _formed()
    gen = _obs(relay).generation()
    assert gen is not None
    upstream = relay.upstream.groups[G]
    assert isinstance(upstream, ClassicGroup)
    assert (gen.generation_id, gen.protocol_type, gen.protocol_name, gen.leader_id) == (
        upstream.generation_id,
        "connect",
        "sessioned",
        upstream.leader_id,
    )
    assert [m.member_id for m in gen.members] == list(upstream.members)
    for w in WORKERS:
        m = gen.member(ids[w])
        assert m is not None
        # Full protocol list, timeouts and client id come from the member's own JoinGroup frame.
        assert m.protocols == protocols(w) and m.joined and m.synced
        assert (m.client_id, m.client_host) == (w, f"/10.0.0.{len(w)}")
        assert (m.session_timeout_ms, m.rebalance_timeout_ms) == (SESSION_MS, 60_000)
        assert m.assignment == assignments[ids[w]] == upstream.members[ids[w]].assignment
    assert generation == gen.generation_id


def test_takeover_waits_for_every_member_behind_the_bridge_at_a_stable_boundary() -> None:
    relay = Relay()
    obs = relay.observer
    assert takeover_ready(Observation(G), set(), None).reason.startswith("no generation")
    ids = {w: relay.join(w)[1].member_id for w in WORKERS}
    joins = {w: relay.join(w, ids[w])[0] for w in WORKERS}
    relay.at(relay.now + 1)
    answers = {w: relay.answers[c] for w, c in joins.items()}
    generation = answers["w1"].generation_id
    everyone = set(ids.values())
    check = takeover_ready(_obs(relay), everyone, relay.described())
    assert not check.ready and "CompletingRebalance, not Stable" in check.reason
    leader = next(w for w, a in answers.items() if a.member_id == a.leader)
    followers = [w for w in WORKERS if w != leader]
    relay.sync(leader, ids[leader], generation, {ids[w]: f"a-{w}".encode() for w in WORKERS})
    check = takeover_ready(_obs(relay), everyone, relay.described())
    assert not check.ready and "has not received its assignment" in check.reason
    for w in followers:
        relay.sync(w, ids[w], generation)
    behind = {ids["w1"], ids["w2"]}
    check = takeover_ready(_obs(relay), behind, relay.described())
    assert not check.ready and (check.behind, check.total) == (2, 3)
    assert check.reason.startswith("2 of 3 members behind the bridge") and ids["w3"] in check.reason
    check = takeover_ready(_obs(relay), everyone, relay.described())
    assert check.ready and check.generation == _obs(relay).generation(), check.reason
    assert (check.behind, check.total) == (3, 3)
    assert obs.ignored == 0


def test_a_rebalance_upstream_ends_the_generation_for_takeover() -> None:
    relay, generation, ids, _ = _formed()
    everyone = set(ids.values())
    assert takeover_ready(_obs(relay), everyone, relay.described()).ready
    # A worker not repointed joins upstream directly: the relay never sees it, but the next relayed
    # heartbeat is answered REBALANCE_IN_PROGRESS.
    w4 = relay.join("w4", observe=False)[1].member_id
    relay.join("w4", w4, observe=False)
    assert relay.heartbeat("w1", ids["w1"], generation) == ErrorCode.REBALANCE_IN_PROGRESS
    check = takeover_ready(_obs(relay), everyone, relay.described())
    assert not check.ready and "is ending" in check.reason and "REBALANCE_IN_PROGRESS" in check.reason


def test_a_member_leaving_ends_the_generation() -> None:
    relay, _generation, ids, _ = _formed()
    answer = relay.leave("w2", ids["w2"])
    assert answer.error_code == 0 and answer.members[0].error_code == 0
    check = takeover_ready(_obs(relay), set(ids.values()), relay.described())
    assert not check.ready and f"member {ids['w2']} left" in check.reason
    gen = _obs(relay).generation()
    assert gen is not None and ids["w2"] not in gen.member_ids


def test_the_upstream_describe_decides_not_the_observation() -> None:
    relay, _generation, ids, _ = _formed()
    everyone = set(ids.values())
    described = relay.described()
    obs = _obs(relay)
    other = replace(described, members=described.members[:2])
    assert "upstream members differ" in takeover_ready(obs, everyone, other).reason
    stale = replace(described, members=tuple(replace(m, assignment=b"older") for m in described.members))
    assert "differs from generation" in takeover_ready(obs, everyone, stale).reason
    failed = replace(described, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    assert "error 15" in takeover_ready(obs, everyone, failed).reason
    eager = replace(described, protocol_data="default")
    assert "upstream runs protocol connect/default" in takeover_ready(obs, everyone, eager).reason
    assert takeover_ready(obs, everyone, None).reason == "no upstream DescribeGroups answer"


def test_a_member_joined_upstream_directly_has_no_full_metadata() -> None:
    relay = Relay()
    ids = {w: relay.join(w, observe=w != "w3")[1].member_id for w in WORKERS}
    joins = {w: relay.join(w, ids[w], observe=w != "w3")[0] for w in WORKERS}
    relay.at(relay.now + 1)
    answers = {w: relay.answers[c] for w, c in joins.items()}
    generation = answers["w1"].generation_id
    leader = next(w for w, a in answers.items() if a.member_id == a.leader)
    relay.sync(leader, ids[leader], generation, {ids[w]: w.encode() for w in WORKERS}, observe=leader != "w3")
    for w in WORKERS:
        if w != leader:
            relay.sync(w, ids[w], generation, observe=w != "w3")
    gen = _obs(relay).generation()
    assert gen is not None and gen.member_ids == set(ids.values())
    if leader != "w3":
        # Known only from the leader's member list: the elected protocol's metadata, nothing else.
        w3 = gen.member(ids["w3"])
        assert w3 is not None and not w3.joined and w3.protocols == (("sessioned", b"sessioned:w3"),)
    check = takeover_ready(_obs(relay), set(ids.values()), relay.described())
    assert not check.ready
    with pytest.raises(AdoptionError):
        adoption_records(gen, relay.now)


def test_stale_answers_do_not_rewind_the_generation() -> None:
    relay, generation, ids, _ = _formed()
    obs = _obs(relay)
    before = obs.generation()
    old = capi.JoinGroupResponse(generation_id=generation - 1, member_id=ids["w1"], leader=ids["w1"])
    obs.on_join(capi.JoinGroupRequest(G, ids["w1"], "connect", ()), old, relay.now)
    obs.on_sync(capi.SyncGroupRequest(G, ids["w1"], generation - 1), capi.SyncGroupResponse(), relay.now)
    obs.on_heartbeat(
        capi.HeartbeatRequest(G, ids["w1"], generation - 1),
        capi.HeartbeatResponse(int(ErrorCode.ILLEGAL_GENERATION)),
        relay.now,
    )
    assert obs.generation() == before and obs.ending is None


def test_relayed_describe_is_kept_for_describe() -> None:
    relay, _, _, _ = _formed()
    request, response = relay.describe_frames()
    relay.observer.observe(request, response, relay.now)
    assert _obs(relay).last_describe == relay.described()


def test_frames_it_cannot_read_are_ignored_never_raised() -> None:
    relay, generation, ids, _ = _formed()
    obs = _obs(relay)
    before = obs.generation()
    beat = HeartbeatRequest(group_id=G, generation_id=generation, member_id=ids["w1"], group_instance_id=None)
    request = encode_request(beat, 4, 77, "w1")
    rebalance = HeartbeatResponse(throttle_time_ms=0, error_code=int(ErrorCode.REBALANCE_IN_PROGRESS))
    observer = relay.observer
    bad = [
        (b"", b""),
        (request[:9], encode_response_frame(12, 4, 77, rebalance)),
        (request, b"\x00\x00\x00\x02\x00"),
        (request, encode_response_frame(12, 4, 78, rebalance)),  # answers another request
        (request, encode_response_frame(12, 4, 77, rebalance)[:-3]),
        (struct.pack(">ihhi", 8, 12, 99, 77), b""),  # a version nobody decodes
    ]
    for req, resp in bad:
        observer.observe(req, resp, relay.now)
    assert observer.ignored == len(bad)
    assert obs.generation() == before and obs.ending is None
    # The same heartbeat, well formed, is read.
    observer.observe(request, encode_response_frame(12, 4, 77, rebalance), relay.now)
    assert observer.ignored == len(bad) and obs.ending is not None


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request=st.binary(max_size=64), response=st.binary(max_size=64))
def test_random_bytes_never_raise(request: bytes, response: bytes) -> None:
    observer = RelayObserver()
    observer.observe(request, response, 0)
    framed = struct.pack(">i", len(request)) + request
    observer.observe(framed, struct.pack(">i", len(response)) + response, 0)


def test_watched_groups_only() -> None:
    relay = Relay(RelayObserver(watched=lambda group: group == "another"))
    relay.form_generation(WORKERS)
    assert relay.observer.observations == {}


# --------------------------------------------------------------------------- the adopted group


def _adopt(relay: Relay, at_ms: int, principals: dict[str, str] | None = None) -> GroupCoordinator:
    ids = _obs(relay).generation()
    assert ids is not None
    check = takeover_ready(_obs(relay), set(ids.member_ids), relay.described())
    assert check.ready and check.generation is not None, check.reason
    bridge = GroupCoordinator(relay.upstream.config)
    bridge.adopt(check.generation, at_ms, principals)
    return bridge


def test_adopted_group_continues_the_generation_without_a_rebalance() -> None:
    relay, generation, ids, assignments = _formed()
    takeover_at = relay.now + 5_000
    bridge = _adopt(relay, takeover_at)
    group = bridge.groups[G]
    upstream = relay.upstream.groups[G]
    assert isinstance(group, ClassicGroup) and isinstance(upstream, ClassicGroup)
    assert group.state is ClassicGroupState.STABLE
    assert (group.generation_id, group.protocol_name, group.leader_id) == (
        upstream.generation_id,
        upstream.protocol_name,
        upstream.leader_id,
    )
    # What DescribeGroups shows matches the upstream's, member by member (metadata, assignment).
    mine, theirs = group.describe(), relay.described()
    assert (mine.state, mine.protocol_type, mine.protocol_data) == (
        theirs.state,
        theirs.protocol_type,
        theirs.protocol_data,
    )
    assert [(m.member_id, m.metadata, m.assignment) for m in mine.members] == [
        (m.member_id, m.metadata, m.assignment) for m in theirs.members
    ]
    for w in WORKERS:
        beat = bridge.classic_heartbeat(capi.HeartbeatRequest(G, ids[w], generation), takeover_at)
        assert beat.error_code == ErrorCode.NONE
        synced = bridge.classic_sync(
            capi.SyncGroupRequest(G, ids[w], generation, None, "connect", "sessioned"), takeover_at
        )
        assert synced is not None and synced.error_code == ErrorCode.NONE
        assert synced.assignment == assignments[ids[w]]
    # A follower rejoining with the same metadata gets the same generation at once (Stable).
    follower = next(w for w in WORKERS if ids[w] != group.leader_id)
    rejoin = bridge.classic_join(
        capi.JoinGroupRequest(G, ids[follower], "connect", protocols(follower), SESSION_MS, 60_000),
        takeover_at,
    )
    assert rejoin is not None and (rejoin.error_code, rejoin.generation_id) == (0, generation)
    assert bridge.ownership.get(G) == GroupOwnership(OWN.ADOPTED, generation, takeover_at)


def test_upstream_drains_after_the_takeover_and_a_stranger_is_a_conflict() -> None:
    relay = _formed()[0]
    adopted = _obs(relay).generation()
    assert adopted is not None
    _adopt(relay, relay.now)
    # The adopted members linger upstream until their sessions expire there: not a conflict.
    assert upstream_conflict(adopted.member_ids, relay.described()) is None
    relay.at(relay.now + SESSION_MS + 1)  # nobody heartbeats upstream any more
    drained = relay.described()
    assert (drained.state, drained.members) == ("Empty", ())
    assert upstream_conflict(adopted.member_ids, drained) is None
    # A worker that was not repointed joins the upstream coordinator directly.
    stranger = relay.join("w9", observe=False)[1].member_id
    relay.join("w9", stranger, observe=False)
    relay.at(relay.now + 1)
    conflict = upstream_conflict(adopted.member_ids, relay.described())
    assert conflict is not None and stranger in conflict and "run the same work twice" in conflict


def test_sessions_start_fresh_at_the_takeover() -> None:
    relay, _generation, _ids, _ = _formed()
    takeover_at = relay.now + 7_777
    bridge = _adopt(relay, takeover_at)
    assert bridge.next_deadline() == takeover_at + SESSION_MS
    bridge.advance(takeover_at + SESSION_MS - 1)
    assert bridge.groups[G].state is ClassicGroupState.STABLE
    bridge.advance(takeover_at + SESSION_MS)  # nobody heartbeated: Kafka's session expiry
    assert bridge.groups[G].state is not ClassicGroupState.STABLE


def test_replayed_adoption_is_the_same_group() -> None:
    relay, generation, ids, assignments = _formed()
    takeover_at = relay.now + 100
    principals = {ids["w1"]: "User:alice", ids["w2"]: "User:bob"}
    bridge = _adopt(relay, takeover_at, principals)
    records = bridge.drain_records()
    assert [r.type for r in records] == [RecordType.CLASSIC_GROUP, RecordType.GROUP_OWNERSHIP]
    members = records[0].value.members  # type: ignore[union-attr]
    assert [m.principal for m in members if m.member_id in principals] == [
        principals[m.member_id] for m in members if m.member_id in principals
    ]
    restarted = GroupCoordinator(relay.upstream.config)
    restarted.replay(_durable(records), takeover_at + 60_000)
    assert restarted.snapshot() == bridge.snapshot()
    assert restarted.drain_records() == []
    later = takeover_at + 60_000
    for w in WORKERS:
        principal = principals.get(ids[w], "User:ANONYMOUS")
        beat = restarted.classic_heartbeat(
            capi.HeartbeatRequest(G, ids[w], generation, principal=principal), later
        )
        assert beat.error_code == ErrorCode.NONE
        synced = restarted.classic_sync(
            capi.SyncGroupRequest(G, ids[w], generation, None, "connect", "sessioned", principal=principal),
            later,
        )
        assert synced is not None and synced.assignment == assignments[ids[w]]


def test_adoption_refusals() -> None:
    relay, _generation, _ids, _ = _formed()
    gen = _obs(relay).generation()
    assert gen is not None
    bridge = GroupCoordinator(relay.upstream.config)
    bridge.adopt(gen, relay.now)
    with pytest.raises(AdoptionError, match="already coordinates a live group"):
        bridge.adopt(gen, relay.now)
    fresh = GroupCoordinator(relay.upstream.config)
    fresh.change_ownership(G, OWN.RELAYING, -1, relay.now)
    fresh.adopt(gen, relay.now)
    with pytest.raises(OwnershipError):
        fresh.change_ownership(G, OWN.RELAYING, -1, relay.now)
    unsynced = replace(gen, members=(replace(gen.members[0], synced=False), *gen.members[1:]))
    with pytest.raises(AdoptionError, match="has not received its assignment"):
        adoption_records(unsynced, 0)
    no_leader = replace(gen, leader_id="somebody-else")
    with pytest.raises(AdoptionError, match="is not a member"):
        adoption_records(no_leader, 0)
    wrong_protocol = replace(gen, protocol_name="eager-only")
    with pytest.raises(AdoptionError, match="elected protocol"):
        adoption_records(wrong_protocol, 0)
    with pytest.raises(AdoptionError, match="no members"):
        adoption_records(replace(gen, members=()), 0)


def test_an_empty_local_group_is_replaced_and_its_id_counter_kept() -> None:
    relay, _generation, _ids, _ = _formed()
    gen = _obs(relay).generation()
    assert gen is not None
    bridge = GroupCoordinator(relay.upstream.config)
    # A JoinGroup that created the group locally and left it Empty (e.g. before the group was
    # configured for adoption): the counter behind member ids must carry over.
    first = bridge.classic_join(capi.JoinGroupRequest(G, "", "connect", protocols("x"), SESSION_MS), 0)
    assert first is not None and first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    bridge.classic_leave(capi.LeaveGroupRequest(G, (capi.LeavingMember(first.member_id),)), 0)
    local = bridge.groups[G]
    assert isinstance(local, ClassicGroup) and not local.members
    seq = local.member_seq
    bridge.adopt(gen, relay.now)
    adopted = bridge.groups[G]
    assert isinstance(adopted, ClassicGroup) and adopted.member_seq == seq >= 1
    assert adopted.state is ClassicGroupState.STABLE


# --------------------------------------------------------------------------- ownership records


@pytest.mark.parametrize("state", list(OwnershipState))
def test_ownership_record_round_trips(state: OwnershipState) -> None:
    record = ownership_record(G, GroupOwnership(state, 12, 3456))
    key, value = encode_record(record)
    assert key[:2] == struct.pack(">h", 107)
    assert decode_record(key, value) == record
    assert decode_record(*encode_record(ownership_record(G, None))) == ownership_record(G, None)


def test_phase_changes() -> None:
    allowed = {
        (None, OWN.RELAYING),
        (None, OWN.ADOPTED),
        (OWN.RELAYING, OWN.ADOPTED),
        (OWN.ADOPTED, OWN.RELEASING),
        (OWN.RELEASING, OWN.RELEASED),
        (OWN.RELEASED, OWN.RELAYING),
        (OWN.RELEASED, OWN.ADOPTED),
    }
    for current in [None, *OwnershipState]:
        for target in OwnershipState:
            if (current, target) in allowed:
                check_transition(current, target)
            else:
                with pytest.raises(OwnershipError):
                    check_transition(current, target)
    assert [s for s in OwnershipState if s.bridge_coordinates] == [OWN.ADOPTED, OWN.RELEASING]
    table = OwnershipTable()
    table.change(G, OWN.RELAYING, -1, 1)
    table.apply(ownership_record(G, None))
    assert table.get(G) is None and table.snapshot() == {}


def _phases() -> tuple[Relay, list[list[Record]], GroupCoordinator]:
    """The log of a whole adoption and hand-back, cut into phases (records written per step)."""
    relay, generation, _ids, _ = _formed()
    gen = _obs(relay).generation()
    assert gen is not None
    bridge = GroupCoordinator(relay.upstream.config)
    t = relay.now
    steps: list[list[Record]] = []
    bridge.change_ownership(G, OWN.RELAYING, -1, t)
    steps.append(bridge.drain_records())
    bridge.adopt(gen, t + 1)
    steps.append(bridge.drain_records())
    bridge.change_ownership(G, OWN.RELEASING, generation, t + 2)
    steps.append(bridge.drain_records())
    group = bridge.groups.pop(G)
    assert isinstance(group, ClassicGroup)
    classic.delete(group, t + 3)
    steps.append(group.drain_records())
    bridge.change_ownership(G, OWN.RELEASED, generation, t + 3)
    steps.append(bridge.drain_records())
    return relay, steps, bridge


@pytest.mark.parametrize(
    ("cut", "owner", "has_group"),
    [
        (1, OWN.RELAYING, False),  # restarted while relaying: keep relaying
        (2, OWN.ADOPTED, True),  # after the takeover: the bridge coordinates
        (3, OWN.RELEASING, True),  # during hand-back: still the bridge's group
        (4, OWN.RELEASING, False),  # the group is gone, the hand-back must be finished
        (5, OWN.RELEASED, False),  # handed back: upstream coordinates
    ],
)
def test_a_restart_at_each_phase_knows_who_owns_the_group(
    cut: int, owner: OwnershipState, has_group: bool
) -> None:
    relay, steps, _ = _phases()
    log = [r for step in steps[:cut] for r in step]
    for records in (log, _compacted(log)):
        restarted = GroupCoordinator(relay.upstream.config)
        restarted.replay(_durable(records), relay.now + 10_000)
        assert restarted.ownership.state(G) is owner
        assert (G in restarted.groups) is has_group
        assert restarted.drain_records() == []
        if has_group:  # a hand-back rebalances the loaded group again (docs/adoption.md "Hand-back")
            releasing = owner is OWN.RELEASING
            expected = ClassicGroupState.PREPARING_REBALANCE if releasing else ClassicGroupState.STABLE
            assert restarted.groups[G].state is expected


def test_a_cut_inside_a_phase_change_leaves_exactly_one_coordinator() -> None:
    relay, steps, _ = _phases()
    relaying, (group_record, adopted), releasing, _tombstone, released = steps
    # Killed between the adoption's two records: the group snapshot without the ownership change.
    restarted = GroupCoordinator(relay.upstream.config)
    restarted.replay(_durable([*relaying, group_record]), relay.now + 10)
    assert restarted.ownership.state(G) is OWN.RELAYING and G not in restarted.groups
    assert restarted.drain_records() == [Record(RecordType.CLASSIC_GROUP, G, "", None)]
    # A hand-back that wrote "released" before its tombstone: the leftover group is dropped.
    restarted = GroupCoordinator(relay.upstream.config)
    restarted.replay(_durable([*relaying, group_record, adopted, *releasing, *released]), relay.now + 10)
    assert restarted.ownership.state(G) is OWN.RELEASED and G not in restarted.groups
    assert [r.is_tombstone for r in restarted.drain_records()] == [True]


def test_phase_changes_are_logged_as_decisions(caplog: pytest.LogCaptureFixture) -> None:
    _, steps, _ = _phases()
    with caplog.at_level(logging.INFO, logger="connect_bridge.rebalance"):
        log_decisions([r for step in steps for r in step])
    events = [json.loads(r.getMessage()) for r in caplog.records]
    phases = [(e["state"], e["generation"]) for e in events if e["event"] == "group_ownership"]
    generation = steps[1][1].value.generation  # type: ignore[union-attr]
    assert phases == [
        ("relaying", -1),
        ("adopted", generation),
        ("releasing", generation),
        ("released", generation),
    ]


# --------------------------------------------------------------------------- an emptied upstream group


@pytest.mark.parametrize("state", [ClassicGroupState.EMPTY, ClassicGroupState.DEAD])
def test_an_emptied_upstream_group_is_taken_over_with_no_member(state: ClassicGroupState) -> None:
    """A relayed group whose upstream group has no member left (its workers stopped, or came back
    speaking the new protocol, which the upstream cannot coordinate) is ready to take over with
    nothing to hand over: ``adopted`` alone, the bridge's empty group kept (drill 97000291054133,
    where it stayed relayed for ever and a new-protocol worker got UNSUPPORTED_VERSION)."""
    relay, generation, _ids, _ = _formed()
    emptied = replace(relay.described(), state=state.value, protocol_type="", protocol_data="", members=())
    check = takeover_ready(_obs(relay), set(), emptied)
    assert check.ready and check.emptied and check.generation is None, check.reason
    assert state.value in check.reason
    # An answer with an error, or one still listing members, is not an emptied group.
    assert not takeover_ready(
        _obs(relay), set(), replace(emptied, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    ).emptied
    assert not takeover_ready(_obs(relay), set(), relay.described()).emptied
    bridge = GroupCoordinator(relay.upstream.config)
    bridge.change_ownership(G, OwnershipState.RELAYING, -1, 0)
    bridge.adopt_emptied(G, generation, relay.now)
    assert bridge.ownership.state(G) is OwnershipState.ADOPTED
    assert G not in bridge.groups
    assert [type(r.value).__name__ for r in bridge.drain_records()][-1] == "GroupOwnership"


def test_an_emptied_group_is_not_taken_over_over_a_live_local_group() -> None:
    relay, generation, _ids, _ = _formed()
    bridge = GroupCoordinator(relay.upstream.config)
    bridge.change_ownership(G, OwnershipState.RELAYING, -1, 0)
    first = bridge.classic_join(capi.JoinGroupRequest(G, "", "connect", protocols("x"), SESSION_MS), 0)
    assert first is not None
    bridge.classic_join(capi.JoinGroupRequest(G, first.member_id, "connect", protocols("x"), SESSION_MS), 0)
    with pytest.raises(AdoptionError, match="already coordinates a live group"):
        bridge.adopt_emptied(G, generation, relay.now)
    assert bridge.ownership.state(G) is OwnershipState.RELAYING
