"""The classic group state machine (``state/classic/group.py``) against Kafka's classic protocol.

Each test drives one group through JoinGroup/SyncGroup/Heartbeat/LeaveGroup and the shared timer
table with explicit ``now_ms``; parked responses are collected by token. Kafka's behaviour these
tests pin down is cited by the GroupMetadataManager/ClassicGroup method it comes from.
"""

from __future__ import annotations

import pytest

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state.classic import group as classic
from connect_bridge.state.classic.api import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from connect_bridge.state.classic.group import (
    ClassicGroup,
    ClassicGroupSnapshot,
    ClassicGroupState,
    java_hashmap_order,
    java_string_hash,
)
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.records import Record, RecordType
from connect_bridge.state.timers import TimerKey, Timers

G = "connect-cluster"
SESSIONED = (("sessioned", b"s2"), ("compatible", b"s1"), ("default", b"s0"))
COMPATIBLE = (("compatible", b"c1"), ("default", b"c0"))
EAGER = (("default", b"e0"),)
DELAY = 3000
SESSION = 10_000
REBALANCE = 60_000
NONE = int(ErrorCode.NONE)

S = ClassicGroupState


class Harness:
    """One group, its timers, a clock, and every response and record it has produced."""

    def __init__(self, protocol_type: str = "connect", **config: int) -> None:
        self.protocol_type = protocol_type
        self.config = CoordinatorConfig(classic_initial_rebalance_delay_ms=DELAY, **config)
        self.timers = Timers()
        self.group = ClassicGroup(G, self.config, self.timers)
        self.now = 0
        self.responses: dict[object, object] = {}
        self.records: list[Record] = []

    def _collect(self) -> None:
        for token, response in self.group.drain_responses():
            assert token not in self.responses, f"token {token} answered twice"
            self.responses[token] = response
        self.records.extend(self.group.drain_records())

    def at(self, now_ms: int) -> Harness:
        """Move the clock, firing due timers (and timers they schedule at or before now)."""
        assert now_ms >= self.now
        while (deadline := self.timers.next_deadline()) is not None and deadline <= now_ms:
            self.now = max(self.now, deadline)  # each timer fires at its own deadline
            for key in self.timers.expired(self.now):
                classic.on_timer(self.group, key, self.now)
        self.now = now_ms
        self._collect()
        return self

    def join(
        self,
        member_id: str = "",
        protocols: tuple[tuple[str, bytes], ...] = SESSIONED,
        *,
        token: object = None,
        **kw: object,
    ) -> JoinGroupResponse | None:
        kw.setdefault("session_timeout_ms", SESSION)
        kw.setdefault("rebalance_timeout_ms", REBALANCE)
        kw.setdefault("client_id", "worker")
        req = JoinGroupRequest(
            kw.pop("group_id", G),
            member_id,
            kw.pop("protocol_type", self.protocol_type),
            protocols,
            token=token,
            **kw,
        )
        response = classic.join(self.group, req, self.now)
        self._collect()
        return response

    def sync(
        self, member_id: str, generation: int, assignments: dict[str, bytes] | None = None, **kw: object
    ) -> SyncGroupResponse | None:
        req = SyncGroupRequest(G, member_id, generation, assignments=tuple((assignments or {}).items()), **kw)
        response = classic.sync(self.group, req, self.now)
        self._collect()
        return response

    def heartbeat(self, member_id: str, generation: int, instance: str | None = None) -> int:
        request = HeartbeatRequest(G, member_id, generation, instance)
        response = classic.heartbeat(self.group, request, self.now)
        self._collect()
        return response.error_code

    def leave(self, *members: tuple[str, str | None]) -> list[tuple[str, str | None, int]]:
        req = LeaveGroupRequest(G, tuple(LeavingMember(mid, iid) for mid, iid in members))
        response = classic.leave(self.group, req, self.now)
        self._collect()
        return response.members

    def new_member_id(self, protocols=SESSIONED, **kw: object) -> str:
        response = self.join("", protocols, **kw)
        assert response is not None and response.error_code == ErrorCode.MEMBER_ID_REQUIRED
        return response.member_id


def finish_initial_rebalance(h: Harness) -> None:
    """Each delay that saw a new member is extended by another delay (InitialDelayedJoin)."""
    while h.group.state is S.PREPARING_REBALANCE:
        h.at(h.now + DELAY)


def stable_group(h: Harness, *protocol_lists: tuple[tuple[str, bytes], ...]) -> list[str]:
    """Members join an empty group together, the first is leader, everyone syncs: generation 1."""
    ids = [h.new_member_id(p) for p in protocol_lists]
    for mid, protocols in zip(ids, protocol_lists, strict=True):
        assert h.join(mid, protocols, token=("join", mid)) is None
    finish_initial_rebalance(h)
    assert h.group.state is S.COMPLETING_REBALANCE
    leader = h.group.leader_id
    assert leader == ids[0]
    for mid in ids[1:]:
        assert h.sync(mid, 1, token=("sync", mid)) is None
    response = h.sync(leader, 1, {mid: mid.encode() for mid in ids}, token=("sync", leader))
    assert response is not None and response.error_code == NONE
    assert h.group.state is S.STABLE
    return ids


# ------------------------------------------------------------------------------------ join basics


def test_single_member_member_id_required_then_leader_then_stable() -> None:
    h = Harness()
    first = h.join("", SESSIONED, client_id="w1")
    assert first is not None
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED
    assert first.member_id.startswith("w1-")
    mid = first.member_id
    assert h.group.pending_member_ids == [mid] and not h.group.members
    # Creating the group persists it (Kafka's newEmptyGroupMetadataRecord), with the id counter.
    assert [r.value.member_seq for r in h.records] == [1]
    assert h.join(mid, SESSIONED, token="j1") is None  # parked: initial rebalance delay
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.group.parked_tokens() == ["j1"]
    h.at(DELAY - 1)
    assert "j1" not in h.responses
    h.at(DELAY)
    joined = h.responses["j1"]
    assert joined.error_code == NONE
    assert (joined.generation_id, joined.leader, joined.member_id) == (1, mid, mid)
    assert (joined.protocol_type, joined.protocol_name) == ("connect", "sessioned")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(mid, b"s2")]
    assert h.group.state is S.COMPLETING_REBALANCE
    synced = h.sync(mid, 1, {mid: b"assignment"}, protocol_type="connect", protocol_name="sessioned")
    assert synced == SyncGroupResponse(
        protocol_type="connect", protocol_name="sessioned", assignment=b"assignment"
    )
    assert h.group.state is S.STABLE
    snapshot = h.records[-1].value
    assert isinstance(snapshot, ClassicGroupSnapshot)
    assert (snapshot.generation, snapshot.leader, snapshot.protocol_name) == (1, mid, "sessioned")
    assert [(m.member_id, m.assignment) for m in snapshot.members] == [(mid, b"assignment")]
    assert h.heartbeat(mid, 1) == NONE
    assert h.sync(mid, 1).assignment == b"assignment"  # Stable: the stored assignment again


def test_join_before_v4_needs_no_member_id_round_trip() -> None:
    h = Harness()
    assert h.join("", SESSIONED, api_version=3, token="j") is None
    (mid,) = h.group.members
    assert h.group.members[mid].is_new
    h.at(DELAY)
    assert h.responses["j"].member_id == mid and h.responses["j"].leader == mid


def test_member_ids_are_deterministic_and_unique() -> None:
    def ids() -> list[str]:
        h = Harness()
        return [h.new_member_id(client_id="c") for _ in range(3)]

    first = ids()
    assert first == ids()
    assert len(set(first)) == 3


@pytest.mark.parametrize(
    ("kw", "code"),
    [
        ({"group_id": ""}, ErrorCode.INVALID_GROUP_ID),
        ({"session_timeout_ms": 5999}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"session_timeout_ms": 1_800_001}, ErrorCode.INVALID_SESSION_TIMEOUT),
        ({"protocol_type": ""}, ErrorCode.INCONSISTENT_GROUP_PROTOCOL),
    ],
)
def test_join_validation(kw: dict, code: ErrorCode) -> None:
    h = Harness()
    response = h.join("", SESSIONED, **kw)
    assert response is not None and response.error_code == code


def test_join_with_no_protocols_is_inconsistent() -> None:
    response = Harness().join("", ())
    assert response is not None and response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL


def test_join_with_unknown_member_id() -> None:
    h = Harness()
    # A group that does not exist yet is not created for a member that claims an id.
    assert h.join("ghost").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert not h.records
    stable_group(h, SESSIONED)
    assert h.join("ghost").error_code == ErrorCode.UNKNOWN_MEMBER_ID


def test_inconsistent_protocol_against_the_group() -> None:
    h = Harness()
    stable_group(h, SESSIONED)
    assert h.join("", SESSIONED, protocol_type="consumer").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.join("", (("range", b""),)).error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # A common protocol is enough.
    assert h.join("", EAGER).error_code == ErrorCode.MEMBER_ID_REQUIRED


def test_group_max_size() -> None:
    h = Harness(max_group_size=1)
    stable_group(h, SESSIONED)
    response = h.join("", SESSIONED)
    assert response is not None and response.error_code == ErrorCode.GROUP_MAX_SIZE_REACHED


# ------------------------------------------------------------------------------------ the barrier


def test_second_member_is_parked_until_the_first_rejoins() -> None:
    h = Harness()
    (m1,) = stable_group(h, SESSIONED)
    h.at(h.now + 1000)
    m2 = h.new_member_id(COMPATIBLE)
    assert h.group.state is S.STABLE  # a pending member does not start a rebalance
    assert h.join(m2, COMPATIBLE, token="j2") is None
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(m1, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.sync(m1, 1).error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert "j2" not in h.responses
    joined = h.join(m1, SESSIONED, token="j1")  # completes the barrier: answered directly
    assert joined is not None and joined.error_code == NONE
    assert (joined.generation_id, joined.leader, joined.protocol_name) == (2, m1, "compatible")
    assert [(m.member_id, m.metadata) for m in joined.members] == [(m1, b"s1"), (m2, b"c1")]
    follower = h.responses["j2"]
    assert (follower.generation_id, follower.leader, follower.members) == (2, m1, ())
    assert h.group.state is S.COMPLETING_REBALANCE
    assert h.heartbeat(m2, 2) == NONE  # heartbeats of the new generation are fine before SyncGroup
    assert h.sync(m2, 2, token="s2") is None  # the follower waits for the leader
    leader_sync = h.sync(m1, 2, {m1: b"a1"}, token="s1")
    assert leader_sync is not None and leader_sync.assignment == b"a1"
    assert h.responses["s2"] == SyncGroupResponse(
        protocol_type="connect", protocol_name="compatible", assignment=b""
    )  # missing from the leader's assignment: empty
    assert h.group.state is S.STABLE


def test_members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout() -> None:
    h = Harness()
    (m1,) = stable_group(h, SESSIONED)
    m2 = h.new_member_id()
    h.join(m2, SESSIONED, token="j2", rebalance_timeout_ms=20_000)
    start = h.now
    # m1 keeps its session alive but never rejoins; the group's rebalance timeout is the max (60s).
    for t in range(start + 3000, start + REBALANCE, 3000):
        h.at(t)
        assert h.heartbeat(m1, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    assert "j2" not in h.responses
    h.at(start + REBALANCE)
    joined = h.responses["j2"]
    assert (joined.generation_id, joined.leader, joined.member_id) == (2, m2, m2)
    assert list(h.group.members) == [m2]
    assert h.heartbeat(m1, 1) == ErrorCode.UNKNOWN_MEMBER_ID


def test_pending_member_holds_the_barrier_until_its_session_expires() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    h.new_member_id()  # never comes back
    assert h.join(m1, SESSIONED, token="j1") is None
    assert h.join(m2, SESSIONED, token="j2") is None
    h.at(h.now + SESSION - 1)
    assert "j1" not in h.responses
    h.at(h.now + 1)
    assert h.responses["j1"].generation_id == 2 and h.responses["j2"].generation_id == 2
    assert not h.group.pending_member_ids


def test_rejoin_with_same_metadata_while_completing_repeats_the_answer() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    h.join(m1, SESSIONED, token="j1")
    h.join(m2, SESSIONED, token="j2")
    again = h.join(m2, SESSIONED)  # lost response
    assert again is not None and (again.generation_id, again.leader, again.members) == (2, m1, ())
    changed = h.join(m2, COMPATIBLE, token="j2b")  # changed metadata: a new rebalance
    assert changed is None and h.group.state is S.PREPARING_REBALANCE


def test_follower_rejoin_while_stable_without_change_does_not_rebalance() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    response = h.join(m2, SESSIONED)
    assert response is not None and (response.generation_id, response.members) == (1, ())
    assert h.group.state is S.STABLE
    assert h.join(m1, SESSIONED, token="j1") is None  # the leader rejoining forces a rebalance
    assert h.group.state is S.PREPARING_REBALANCE


# ------------------------------------------------------------------------------------ initial delay


def test_initial_delay_is_extended_by_new_members() -> None:
    """InitialDelayedJoin: delay 3s, rebalance timeout 10s, so remaining = 7s."""
    h = Harness()
    joins = {}
    for t, name in [(0, "a"), (1000, "b"), (2500, "c")]:
        h.at(t)
        mid = h.new_member_id()
        h.join(mid, SESSIONED, token=name, rebalance_timeout_ms=10_000)
        joins[name] = mid
    h.at(3000)  # a new member arrived during the first delay: wait another 3s
    assert not h.responses and h.timers.deadline(TimerKey.classic_join(G)) == 6000
    h.at(6000)
    assert {h.responses[n].generation_id for n in joins} == {1}
    assert h.responses["a"].leader == joins["a"]


def test_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    h = Harness()
    fired = []
    for t in (0, 2000, 5000, 8000, 9500):
        h.at(t)
        h.join(h.new_member_id(), SESSIONED, token=t, rebalance_timeout_ms=10_000)
        fired.append(h.timers.deadline(TimerKey.classic_join(G)))
    assert fired == [3000, 3000, 6000, 9000, 10_000]
    h.at(9999)
    assert not h.responses
    h.at(10_000)
    assert len(h.responses) == 5


def test_rejoining_members_do_not_wait_for_the_initial_delay_after_the_first_generation() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    h.join(m1, SESSIONED, token="j1")
    assert h.join(m2, SESSIONED) is not None  # the barrier closes at once


# ------------------------------------------------------------------------------------ protocol vote


@pytest.mark.parametrize(
    ("lists", "expected"),
    [
        ([SESSIONED, COMPATIBLE], "compatible"),
        ([SESSIONED, SESSIONED], "sessioned"),
        ([SESSIONED, COMPATIBLE, EAGER], "default"),
        ([SESSIONED, SESSIONED, COMPATIBLE], "compatible"),
        # Ties: first maximum in Java HashMap order. "sessioned" hashes to bucket 15, "default"
        # and "compatible" share bucket 2 (insertion order within it).
        ([(("sessioned", b""), ("default", b"")), (("default", b""), ("sessioned", b""))], "default"),
        ([(("default", b""), ("sessioned", b"")), (("sessioned", b""), ("default", b""))], "default"),
        ([(("compatible", b""), ("default", b"")), (("default", b""), ("compatible", b""))], "compatible"),
        ([(("default", b""), ("compatible", b"")), (("compatible", b""), ("default", b""))], "default"),
    ],
)
def test_protocol_vote(lists: list, expected: str) -> None:
    h = Harness()
    stable_group(h, *lists)
    assert h.group.protocol_name == expected


def test_java_hash_helpers() -> None:
    # Values of Java's "default".hashCode() etc.
    assert java_string_hash("default") == 1544803905
    assert java_string_hash("") == 0
    assert java_string_hash("a") == 97
    order = java_hashmap_order(["sessioned", "compatible", "default"])
    assert order == ["compatible", "default", "sessioned"]


# ------------------------------------------------------------------------------------ errors


def test_illegal_generation() -> None:
    h = Harness()
    (m1,) = stable_group(h, SESSIONED)
    assert h.heartbeat(m1, 0) == ErrorCode.ILLEGAL_GENERATION
    assert h.sync(m1, 2).error_code == ErrorCode.ILLEGAL_GENERATION


def test_unknown_member_id() -> None:
    h = Harness()
    assert h.heartbeat("ghost", 0) == ErrorCode.UNKNOWN_MEMBER_ID  # empty group
    assert h.sync("ghost", 0).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    stable_group(h, SESSIONED)
    assert h.heartbeat("ghost", 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.sync("ghost", 1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    pending = h.new_member_id()
    assert h.heartbeat(pending, 1) == ErrorCode.UNKNOWN_MEMBER_ID  # not a member until it joins


def test_sync_protocol_mismatch_is_inconsistent() -> None:
    h = Harness()
    (m1,) = stable_group(h, SESSIONED)
    assert h.sync(m1, 1, protocol_name="default").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync(m1, 1, protocol_type="consumer").error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    assert h.sync(m1, 1, protocol_type=None, protocol_name=None).error_code == NONE


# ------------------------------------------------------------------------------------ timeouts


def test_session_timeout_removes_a_member_and_rebalances() -> None:
    h = Harness()
    m1, _ = stable_group(h, SESSIONED, SESSIONED)
    start = h.now
    for t in range(start + 3000, start + SESSION, 3000):
        h.at(t)
        assert h.heartbeat(m1, 1) == NONE
    h.at(start + SESSION)  # m2 never heartbeated
    assert list(h.group.members) == [m1]
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(m1, 1) == ErrorCode.REBALANCE_IN_PROGRESS
    joined = h.join(m1, SESSIONED)
    assert joined is not None and joined.generation_id == 2 and [m.member_id for m in joined.members] == [m1]


def test_parked_join_keeps_an_existing_member_alive() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    h.join(m1, SESSIONED, token="j1")
    h.at(h.now + SESSION + 1)  # m1's session expired while parked: it is not removed
    assert m1 in h.group.members and m2 not in h.group.members
    assert h.responses["j1"].generation_id == 2  # m2's removal closed the barrier


def test_a_member_that_never_syncs_is_removed_after_the_sync_timeout() -> None:
    h = Harness()
    ids = [h.new_member_id() for _ in range(2)]
    for mid in ids:
        h.join(mid, SESSIONED, token=mid)
    finish_initial_rebalance(h)
    m1, m2 = ids
    joined_at = h.now
    assert h.group.leader_id == m1
    assert h.sync(m1, 1, {m1: b"a", m2: b"b"}) is not None
    assert h.group.state is S.STABLE
    assert h.timers.deadline(TimerKey.classic_sync(G)) == joined_at + REBALANCE
    for t in range(joined_at + 3000, joined_at + REBALANCE, 3000):
        h.at(t)
        assert h.heartbeat(m1, 1) == NONE
        assert h.heartbeat(m2, 1) == NONE  # alive, but never syncs
    h.at(joined_at + REBALANCE)
    assert list(h.group.members) == [m1]
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(m1, 1) == ErrorCode.REBALANCE_IN_PROGRESS


def test_sync_timer_is_cancelled_once_everyone_synced() -> None:
    h = Harness()
    stable_group(h, SESSIONED, SESSIONED)
    assert TimerKey.classic_sync(G) not in h.timers


def test_parked_syncs_are_answered_rebalance_in_progress_when_a_rebalance_starts() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    h.join(m1, SESSIONED, token="j1")
    h.join(m2, SESSIONED, token="j2")
    assert h.sync(m2, 2, token="s2") is None
    h.leave((m1, None))
    assert h.responses["s2"].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group.members[m2].assignment == b""  # Kafka resets assignments in CompletingRebalance


# ------------------------------------------------------------------------------------ leave


def test_leave_batch_with_per_member_errors() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    results = h.leave((m2, None), ("ghost", None), ("", "no-such-instance"))
    assert results == [
        (m2, None, NONE),
        ("ghost", None, int(ErrorCode.UNKNOWN_MEMBER_ID)),
        ("", "no-such-instance", int(ErrorCode.UNKNOWN_MEMBER_ID)),
    ]
    assert h.group.state is S.PREPARING_REBALANCE
    assert TimerKey.classic_session(G, m2) not in h.timers
    joined = h.join(m1, SESSIONED)
    assert joined.generation_id == 2
    assert h.sync(m1, 2, {m1: b"x"}).error_code == NONE
    h.records.clear()
    assert h.leave((m1, None)) == [(m1, None, NONE)]
    assert h.group.state is S.EMPTY and h.group.generation_id == 3
    (record,) = h.records
    assert record.value.members == () and record.value.protocol_name is None


def test_leave_answers_the_leavers_parked_join() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, SESSIONED)
    h.join(m2, COMPATIBLE, token="j2")
    h.leave((m2, None))
    assert h.responses["j2"] == JoinGroupResponse(error_code=int(ErrorCode.UNKNOWN_MEMBER_ID))
    joined = h.join(m1, SESSIONED)
    assert joined is not None and joined.generation_id == 2


def test_leave_of_a_pending_member() -> None:
    h = Harness()
    pending = h.new_member_id()
    assert h.leave((pending, None)) == [(pending, None, NONE)]
    assert not h.group.pending_member_ids and TimerKey.classic_session(G, pending) not in h.timers


# ------------------------------------------------------------------------------------ static members


def static_group(h: Harness, *instances: str, api_version: int = 9) -> list[str]:
    for instance in instances:
        h.join("", SESSIONED, token=("join", instance), group_instance_id=instance, api_version=api_version)
    finish_initial_rebalance(h)
    ids = [h.responses[("join", i)].member_id for i in instances]
    assert h.sync(ids[0], 1, {mid: mid.encode() for mid in ids}) is not None
    for mid, instance in zip(ids[1:], instances[1:], strict=True):
        assert h.sync(mid, 1, group_instance_id=instance).error_code == NONE
    return ids


def test_static_member_restart_takes_over_without_rebalance() -> None:
    h = Harness("consumer")  # Kafka's shortcut, kept for every protocol type but Connect's
    w1, w2 = static_group(h, "w1", "w2")
    assert w1.startswith("w1-")
    h.records.clear()
    h.at(h.now + 1000)
    response = h.join("", SESSIONED, group_instance_id="w2", client_id="other")
    assert response is not None and response.error_code == NONE
    new = response.member_id
    assert new != w2 and (response.generation_id, response.leader, response.skip_assignment) == (1, w1, False)
    assert h.group.state is S.STABLE and h.group.generation_id == 1
    assert h.group.static_member_id("w2") == new
    assert h.heartbeat(w2, 1, "w2") == ErrorCode.FENCED_INSTANCE_ID
    assert h.heartbeat(w2, 1) == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.heartbeat(new, 1, "w2") == NONE
    assert h.sync(new, 1, group_instance_id="w2").assignment == w2.encode()  # assignment carried over
    assert h.group.members[new].client_id == "worker"  # Kafka keeps the replaced member's client id
    (record,) = h.records  # Kafka persists the replacement
    assert [m.member_id for m in record.value.members] == [w1, new]


def test_static_leader_restart_skips_assignment_v9_or_poses_as_follower_before() -> None:
    h = Harness("consumer")
    static_group(h, "w1", "w2")
    v9 = h.join("", SESSIONED, group_instance_id="w1")
    assert v9.leader == v9.member_id and v9.skip_assignment and len(v9.members) == 2
    v8 = h.join("", SESSIONED, group_instance_id="w1", api_version=8)
    assert v8.leader == v9.member_id and not v8.skip_assignment and v8.members == ()
    assert h.group.leader_id == v8.member_id


def test_a_restarted_static_connect_worker_gets_a_rebalance_not_the_old_assignment() -> None:
    """A Java WorkerCoordinator elected with skipAssignment throws (Connect has no static
    membership), and a fresh worker handed its predecessor's cooperative delta would run only the
    delta: for protocol type ``connect`` a static replacement rebalances (adversarial drill 10000602)."""
    h = Harness()
    w1, _ = static_group(h, "w1", "w2")
    assert h.join("", SESSIONED, group_instance_id="w1", token=("again", "w1")) is None
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(w1, 1, "w1") == ErrorCode.FENCED_INSTANCE_ID  # the old process is fenced
    last = h.join("", SESSIONED, group_instance_id="w2", token=("again", "w2"))  # completes the join
    joined = {"w1": h.responses[("again", "w1")], "w2": last or h.responses[("again", "w2")]}
    assert {r.generation_id for r in joined.values()} == {2}
    assert not any(r.skip_assignment for r in joined.values())
    assert joined["w1"].leader == joined["w1"].member_id and len(joined["w1"].members) == 2


def test_static_member_with_another_protocol_choice_triggers_a_rebalance() -> None:
    h = Harness()
    static_group(h, "w1", "w2")
    assert h.join("", EAGER, group_instance_id="w2", token="j") is None
    assert h.group.state is S.PREPARING_REBALANCE


def test_static_member_rejoin_fences_the_old_parked_join() -> None:
    h = Harness()
    w1, w2 = static_group(h, "w1", "w2")
    assert h.join(w2, COMPATIBLE, token="old", group_instance_id="w2") is None
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.join("", COMPATIBLE, token="new", group_instance_id="w2") is None
    fenced = h.responses["old"]
    assert (fenced.error_code, fenced.member_id) == (ErrorCode.FENCED_INSTANCE_ID, w2)
    joined = h.join(w1, SESSIONED, group_instance_id="w1")
    new = h.group.static_member_id("w2")
    assert joined.generation_id == 2 and h.responses["new"].member_id == new


def test_static_member_with_a_stale_member_id_is_fenced() -> None:
    h = Harness()
    static_group(h, "w1")
    assert h.join("stale", SESSIONED, group_instance_id="w1").error_code == ErrorCode.FENCED_INSTANCE_ID
    assert h.join("stale", SESSIONED, group_instance_id="w9").error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert h.leave(("stale", "w1")) == [("stale", "w1", int(ErrorCode.FENCED_INSTANCE_ID))]


def test_static_members_are_kept_when_they_miss_a_rebalance() -> None:
    h = Harness()
    w1, w2 = static_group(h, "w1", "w2")
    h.join(w1, COMPATIBLE, token="j1", group_instance_id="w1")
    start = h.now
    for t in range(start + 3000, start + REBALANCE, 3000):
        h.at(t)
        assert h.heartbeat(w2, 1, "w2") == ErrorCode.REBALANCE_IN_PROGRESS
    h.at(start + REBALANCE)
    joined = h.responses["j1"]
    # Unlike a dynamic member, w2 stays in the group (and in the leader's member list).
    assert joined.generation_id == 2 and [m.member_id for m in joined.members] == [w1, w2]
    assert h.heartbeat(w2, 2, "w2") == NONE


def test_admin_leave_by_instance_id() -> None:
    h = Harness()
    _, w2 = static_group(h, "w1", "w2")
    assert h.leave(("", "w2")) == [("", "w2", NONE)]
    assert w2 not in h.group.members and h.group.static_member_id("w2") is None


# ------------------------------------------------------------------------------------ describe


def test_describe() -> None:
    h = Harness()
    m1, m2 = stable_group(h, SESSIONED, COMPATIBLE)
    described = h.group.describe()
    assert (described.state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "connect",
        "compatible",
    )
    assert [(m.member_id, m.metadata, m.assignment) for m in described.members] == [
        (m1, b"s1", m1.encode()),
        (m2, b"c1", m2.encode()),
    ]
    h.join(m1, SESSIONED, token="j")
    described = h.group.describe()
    assert (described.state, described.protocol_data) == ("PreparingRebalance", "")
    assert [m.metadata for m in described.members] == [b"", b""]


# ------------------------------------------------------------------------------------ records


def replay(records: list[Record], now_ms: int, config: CoordinatorConfig | None = None) -> ClassicGroup:
    timers = Timers()
    group = ClassicGroup(G, config or CoordinatorConfig(), timers)
    for record in records:
        group.apply(record)
    classic.rebuild_after_load(group, now_ms)
    return group


def test_records_replay_rebuilds_the_group() -> None:
    h = Harness()
    stable_group(h, SESSIONED, COMPATIBLE)
    h.join("", SESSIONED, group_instance_id="w3", token="j3")
    w1 = h.group.leader_id
    h.join(w1, SESSIONED, token="j1")
    h.join(list(h.group.members)[1], COMPATIBLE, token="j2")
    assert h.group.state is S.COMPLETING_REBALANCE
    h.sync(w1, 2, {mid: b"gen2-" + mid.encode() for mid in h.group.members})
    assert h.group.state is S.STABLE
    h.join("", SESSIONED, group_instance_id="w3", protocol_type="consumer")  # persisted, no rebalance
    assert all(r.type is RecordType.CLASSIC_GROUP and r.group_id == G for r in h.records)
    loaded = replay(h.records, 100_000)
    assert loaded.snapshot() == h.group.snapshot()
    assert loaded.state is S.STABLE and loaded.static_member_id("w3") == h.group.static_member_id("w3")
    for mid in loaded.members:
        assert loaded.timers.deadline(TimerKey.classic_session(G, mid)) == 100_000 + SESSION
    # The loaded group carries on: a member's heartbeat, then a rebalance.
    assert classic.heartbeat(loaded, HeartbeatRequest(G, w1, 2), 100_000).error_code == NONE
    assert classic.join(loaded, JoinGroupRequest(G, w1, "connect", SESSIONED, token="x"), 100_000) is None
    assert loaded.state is S.PREPARING_REBALANCE


def test_records_replay_of_an_emptied_group_and_of_a_tombstone() -> None:
    h = Harness()
    (m1,) = stable_group(h, SESSIONED)
    h.leave((m1, None))
    loaded = replay(h.records, 0)
    assert loaded.state is S.EMPTY and loaded.snapshot() == h.group.snapshot()
    assert loaded.generation_id == 2 and loaded.member_seq == h.group.member_seq
    # New ids keep counting from the persisted counter.
    assert classic.join(loaded, JoinGroupRequest(G, "", "connect", SESSIONED), 1).member_id not in {m1}
    assert loaded.member_seq == h.group.member_seq + 1
    classic.delete(h.group, h.now)
    assert h.group.drain_records()[-1].value is None
    assert replay([*h.records, Record(RecordType.CLASSIC_GROUP, G)], 0).state is S.DEAD


def test_loaded_group_over_capacity_rebalances() -> None:
    h = Harness()
    stable_group(h, SESSIONED, SESSIONED)
    loaded = replay(h.records, 0, CoordinatorConfig(max_group_size=1))
    assert loaded.state is S.PREPARING_REBALANCE


def test_delete_releases_parked_requests_and_timers() -> None:
    h = Harness()
    m1, _ = stable_group(h, SESSIONED, SESSIONED)
    h.join(m1, SESSIONED, token="j1")
    assert h.group.parked_tokens() == ["j1"]
    classic.delete(h.group, h.now)
    h.at(h.now)
    assert h.responses["j1"].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    assert h.group.state is S.DEAD and not h.group.members and not h.timers.keys()
    assert h.records[-1].value is None
    assert h.join("", SESSIONED).error_code == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.heartbeat(m1, 1) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert h.leave((m1, None)) == []


def test_a_superseded_parked_join_is_answered() -> None:
    """A member's second parked JoinGroup replaces the first; the first is answered, not orphaned."""
    h = Harness()
    m1, m2, m3 = stable_group(h, SESSIONED, COMPATIBLE, EAGER)
    assert h.join(m1, SESSIONED, token="j1") is None
    assert h.join(m2, COMPATIBLE, token="j2") is None
    assert h.join(m2, COMPATIBLE, token="j2-again") is None
    assert h.responses["j2"].error_code == ErrorCode.REBALANCE_IN_PROGRESS
    h.at(h.now + SESSION)  # m3 never rejoins nor heartbeats: dropped, the barrier closes
    assert m3 not in h.group.members
    assert h.responses["j1"].error_code == NONE and h.responses["j2-again"].error_code == NONE
    assert h.responses["j1"].protocol_name == "compatible"
    assert not h.group.parked_tokens()


def test_heartbeat_response_type() -> None:
    h = Harness()
    (m1,) = stable_group(h, SESSIONED)
    response = classic.heartbeat(h.group, HeartbeatRequest(G, m1, 1), h.now)
    assert response == HeartbeatResponse()


def test_stale_timer_deliveries_in_one_batch_are_ignored() -> None:
    """The coordinator fires a whole batch of due keys with one ``now``: a key cancelled or re-armed
    by an earlier handler of the batch must not act."""
    h = Harness()
    m1, m2, _ = stable_group(h, SESSIONED, SESSIONED, SESSIONED)
    h.join(m1, SESSIONED, token="j1")
    h.join(m2, SESSIONED, token="j2")
    late = h.now + 2 * REBALANCE
    for key in h.timers.expired(late):  # m3's session, m1's and m2's sessions, the join timer
        classic.on_timer(h.group, key, late)
    h.at(late)
    # m3's expiry closed the barrier and re-armed m1's and m2's sessions: they stay.
    assert list(h.group.members) == [m1, m2]
    assert h.group.state is S.COMPLETING_REBALANCE and h.group.generation_id == 2
    assert h.responses["j1"].generation_id == 2


# --- found by the differential test against Kafka 4.3.1 (tests/test_classic_differential.py) ---------


def test_static_join_with_a_pending_member_id_answers_unknown_server_error_without_member_id() -> None:
    """Kafka answers the IllegalStateException as any exception: the error code alone, member id ""
    (the bridge used to echo the pending id)."""
    h = Harness()
    pending = h.new_member_id()
    response = h.join(pending, group_instance_id="someone")
    assert response is not None and response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert response.member_id == "" and response.generation_id == -1 and response.protocol_name is None


@pytest.mark.parametrize("missing", ["protocol_type", "protocol_name"])
def test_sync_v5_without_protocol_type_or_name_is_inconsistent_before_the_group_lookup(missing: str) -> None:
    """KafkaApis checks areMandatoryProtocolTypeAndNamePresent (v5+) before the coordinator: even
    for a group that does not exist the answer is INCONSISTENT_GROUP_PROTOCOL, not UNKNOWN_MEMBER_ID."""
    from connect_bridge.state.coordinator import GroupCoordinator

    coord = GroupCoordinator(CoordinatorConfig(classic_initial_rebalance_delay_ms=0))
    names = {"protocol_type": "connect", "protocol_name": "sessioned"} | {missing: None}
    for group in ("no-such-group", G):
        req = SyncGroupRequest(group, "m", 1, api_version=5, **names)  # type: ignore[arg-type]
        response = coord.classic_sync(req, 0)
        assert response is not None and response.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    # v4 has neither field: the group's own checks answer.
    response = coord.classic_sync(SyncGroupRequest("no-such-group", "m", 1, api_version=4), 0)
    assert response is not None and response.error_code == ErrorCode.UNKNOWN_MEMBER_ID


# ------------------------------------------------------- leaving eager: one more round (docs/live-drills.md)


def _leave_eager(h: Harness) -> tuple[str, str]:
    """An eager + sessioned group (generation 1 runs ``default``); the eager member leaves and the
    sessioned one rejoins alone: generation 2 elects ``sessioned`` and becomes Stable."""
    eager, sessioned = stable_group(h, EAGER, SESSIONED)
    assert h.group.protocol_name == "default"
    h.leave((eager, None))
    joined = h.join(sessioned, SESSIONED)
    assert joined is not None and joined.generation_id == 2 and h.group.protocol_name == "sessioned"
    assert h.sync(sessioned, 2, {sessioned: b"a"}).error_code == NONE
    return eager, sessioned


def _idle(h: Harness, ms: int, generation: int, *members: str) -> None:
    """Let ``ms`` pass with every member heartbeating every 3 s (all answered NONE)."""
    end = h.now + ms
    while h.now < end:
        h.at(min(end, h.now + 3_000))
        assert [h.heartbeat(m, generation) for m in members] == [NONE] * len(members)


def test_the_first_cooperative_generation_after_an_eager_one_gets_one_more_rebalance() -> None:
    """Java Connect 4.3.1 stops tasks on stale task-config updates of the eager phase right after
    such a generation and never asks for the rebalance that restarts them (under Kafka's own
    coordinator too): the bridge starts that rebalance itself, once, a few seconds later."""
    h = Harness()
    _, sessioned = _leave_eager(h)
    h.at(h.now + 2_999)
    assert h.group.state is S.STABLE and h.heartbeat(sessioned, 2) == NONE
    h.at(h.now + 1)
    assert h.group.state is S.PREPARING_REBALANCE
    assert h.heartbeat(sessioned, 2) == int(ErrorCode.REBALANCE_IN_PROGRESS)
    joined = h.join(sessioned, SESSIONED)
    assert joined is not None and joined.generation_id == 3
    assert h.sync(sessioned, 3, {sessioned: b"a"}).error_code == NONE
    _idle(h, 60_000, 3, sessioned)  # once: the next cooperative generation is left alone
    assert h.group.state is S.STABLE and h.group.generation_id == 3


@pytest.mark.parametrize("switch_ms", [None, 3000])
def test_no_extra_rebalance_without_a_switch_or_when_turned_off(switch_ms: int | None) -> None:
    h = Harness(classic_cooperative_switch_rebalance_ms=switch_ms)
    if switch_ms is None:
        members: tuple[str, ...] = (_leave_eager(h)[1],)
        generation = 2
    else:  # cooperative all along
        members = tuple(stable_group(h, SESSIONED, COMPATIBLE))
        generation = 1
    _idle(h, 60_000, generation, *members)
    assert h.group.state is S.STABLE and h.group.generation_id == generation
