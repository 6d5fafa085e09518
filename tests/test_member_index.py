"""The incremental aggregates of a connect group against the from-scratch passes they replace.

``state.connect.member_index.MemberIndex`` (assignor votes, client assignor counts, url and instance id
lookups, config offsets) and ``ConnectGroup.working`` are changed only where records are
applied. Random histories of joins, leaves, temporary leaves, metadata changes, expiries and config
changes run through the coordinator; after every step each aggregate must equal the pass over the
members that it replaces (the reference functions below are those passes, as the engine had them),
and replaying the drained records (in order, and compacted the way the state topic keeps them) into
a fresh coordinator must give the same answers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.state import assignors
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.assignors import AssignmentSpec
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect.client_side import _JOINING, _server_side_after, common_client_assignor
from connect_bridge.state.connect.records import (
    current_assignment_record,
    member_metadata_record,
    member_tombstones,
    target_member_record,
    target_member_tombstone,
    target_metadata_record,
)
from connect_bridge.state.connect.state import ConnectGroup
from connect_bridge.state.connect.target_assignment import target_records, work_records
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.model import (
    EMPTY,
    NEW_PROTOCOL,
    NO_METADATA,
    AssignedMetadata,
    ClientAssignor,
    ConfigView,
    CurrentAssignment,
    Items,
    MemberMetadata,
    MemberState,
    TargetMetadata,
)
from connect_bridge.state.record_codec import decode_record, encode_record
from connect_bridge.state.records import Record
from connect_bridge.state.timers import Timers
from test_assignors import specs

G = "g"
WORKERS = ("m0", "m1", "m2", "m3", "m4")
INSTANCES = (None, "i1", "i2")
URLS = ("", "http://a/", "http://b/")

# ---------------------------------------------------------------------- references (from scratch)


def ref_assignor_name(group: ConnectGroup) -> str:
    """The vote over every member, as ``assignor_name`` computed it before the index."""
    client = common_client_assignor({mid: m.metadata.client_assignors for mid, m in group.members.items()})
    if client is not None:
        return client
    votes: dict[str, int] = {}
    for m in group.members.values():
        name = m.metadata.server_assignor or group.config.default_assignor
        votes[name] = votes.get(name, 0) + 1
    if not votes:
        return group.config.default_assignor
    return min(votes, key=lambda n: (-votes[n], n))


def ref_config_offset(group: ConnectGroup) -> int:
    offset = group.view.offset
    for m in group.members.values():
        offset = max(offset, m.metadata.config_offset)
    return offset


def ref_member_by_instance(group: ConnectGroup, instance_id: str | None) -> str | None:
    for m in group.members.values():
        if m.metadata.instance_id == instance_id:
            return m.member_id
    return None


def ref_held_owner(group: ConnectGroup, instance_id: str | None, url: str) -> str | None:
    """``resolve_held``'s url and instance id maps as it built them per call."""
    members = group.members
    by_url = {m.metadata.url: mid for mid, m in members.items() if m.metadata.url}
    by_instance = {m.metadata.instance_id: mid for mid, m in members.items() if m.metadata.instance_id}
    return (by_instance.get(instance_id) if instance_id else None) or by_url.get(url)


def ref_target_records(
    group_id: str,
    old_target: dict[str, Items],
    old_metadata: dict[str, AssignedMetadata],
    epoch: int,
    target: dict[str, Items],
    error: int = 0,
    metadata: dict[str, AssignedMetadata] | None = None,
) -> list[Record]:
    """``target_records`` as it was: every member compared by value."""
    kept = {mid: d for mid, d in (metadata or {}).items() if mid in target and d != NO_METADATA}
    out = []
    for mid, items in target.items():
        data = kept.get(mid, NO_METADATA)
        if old_target.get(mid) != items or old_metadata.get(mid, NO_METADATA) != data:
            out.append(target_member_record(group_id, mid, items, data))
    out.extend(target_member_tombstone(group_id, mid) for mid in old_target if mid not in target)
    out.append(target_metadata_record(group_id, TargetMetadata(epoch, error)))
    return out


def answers(group: ConnectGroup) -> dict:
    """Every answer the aggregates give, in a comparable form."""
    return {
        "assignor": group.assignor_name(),
        "offset": group.assignment_config_offset(),
        "by_instance": {i: getattr(group.member_by_instance(i), "member_id", None) for i in (*INSTANCES, "")},
        "held_owner": {(i, u): group.held_owner(i, u) for i in INSTANCES for u in URLS},
        "working": dict(group.working),
    }


def check_against_scratch(group: ConnectGroup) -> None:
    members = group.members
    index = group.index
    assert index.server_votes == Counter(m.metadata.server_assignor or None for m in members.values())
    assert index.no_client == sum(1 for m in members.values() if not m.metadata.client_assignors)
    names: Counter[str] = Counter()
    for m in members.values():
        names.update({a.name for a in m.metadata.client_assignors})
    assert index.client_names == names
    states = Counter((m.metadata.protocol, m.current.state.value) for m in members.values())
    assert index.states == states  # what metrics_view counted member by member
    offsets = [m.metadata.config_offset for m in members.values()]
    assert index.max_config_offset() == (max(offsets) if offsets else None)
    got = answers(group)
    assert got["assignor"] == ref_assignor_name(group)
    assert got["offset"] == ref_config_offset(group)
    for instance_id, mid in got["by_instance"].items():
        assert mid == ref_member_by_instance(group, instance_id)
    for (instance_id, url), mid in got["held_owner"].items():
        assert mid == ref_held_owner(group, instance_id, url)
    assert got["working"] == {mid: items for mid, items in group.target.items() if items}
    assert index.ids == sorted(members)
    assert group.untargeted == members.keys() - group.target.keys()
    assert group.departed == group.target.keys() - members.keys()


def check_client_side_shortcut(group: ConnectGroup, req: HeartbeatRequest) -> None:
    """``_server_side_after`` says exactly whether the dict ``check_heartbeat`` used to build has a
    member without client assignors (then no cover problem can exist)."""
    member = group.members.get(req.member_id) if req.member_id else None
    if req.member_epoch < 0 or (member is None and req.member_epoch != 0):
        return
    current = {mid: m.metadata.client_assignors for mid, m in group.members.items()}
    if member is not None and req.client_assignors is None:
        built = current
    else:
        built = {
            mid: offered
            for mid, offered in current.items()
            if not (req.instance_id and group.members[mid].metadata.instance_id == req.instance_id)
        }
        offered = req.client_assignors
        if offered is None:
            offered = member.metadata.client_assignors if member is not None else ()
        built[req.member_id or _JOINING] = tuple(offered)
    assert _server_side_after(group, req, member) == any(not a for a in built.values())


# ---------------------------------------------------------------------- random histories

client_assignor = st.builds(
    lambda name, lo, span: ClientAssignor(name, lo, lo + span, version=lo),
    st.sampled_from(["sessioned", "custom"]),
    st.integers(0, 2),
    st.integers(0, 2),
)
fields = st.fixed_dictionaries(
    {},
    optional={
        "instance_id": st.sampled_from(INSTANCES[1:]),
        "server_assignor": st.sampled_from([assignors.COOPERATIVE, assignors.EAGER]),
        "client_assignors": st.lists(client_assignor, max_size=2).map(tuple),
        "url": st.sampled_from(URLS),
        "config_offset": st.integers(-1, 5),
    },
)
op = st.one_of(
    st.tuples(st.just("join"), st.sampled_from(WORKERS), fields),
    st.tuples(st.just("update"), st.sampled_from(WORKERS), fields),
    st.tuples(st.just("leave"), st.sampled_from(WORKERS), st.just({})),
    st.tuples(st.just("away"), st.sampled_from(WORKERS), st.just({})),
    st.tuples(st.just("advance"), st.integers(1, 12_000), st.just({})),
    st.tuples(st.just("config"), st.integers(0, 6), st.just({})),
)


def request(coord: GroupCoordinator, operation: tuple) -> HeartbeatRequest | None:
    kind, who, extra = operation
    group = coord.connect_group(G)
    member = group.members.get(who) if group is not None else None
    if kind == "join":
        return HeartbeatRequest(G, who, 0, rebalance_timeout_ms=30_000, owned=EMPTY, **extra)
    if member is None:
        return None
    if kind == "update":
        return HeartbeatRequest(G, who, member.current.member_epoch, **extra)
    if kind == "leave":
        return HeartbeatRequest(G, who, -1)
    return HeartbeatRequest(G, who, -2, instance_id=member.metadata.instance_id)


def run(coord: GroupCoordinator, operation: tuple, now: int) -> int:
    kind, arg, _ = operation
    if kind == "advance":
        now += arg
        coord.advance(now)
    elif kind == "config":
        coord.set_config(G, ConfigView.of(arg, {"A": arg % 3, "B": 2}), now)
    else:
        req = request(coord, operation)
        group = coord.connect_group(G)
        if req is not None:
            if group is not None:
                check_client_side_shortcut(group, req)
            coord.connect_heartbeat(req, now)
    return now


def replayed(config: CoordinatorConfig, records: list[Record], now: int, compact: bool) -> GroupCoordinator:
    if compact:
        kept: dict = {}
        for record in records:
            key, value = encode_record(record)
            kept[key] = decode_record(key, value)
        records = [r for r in kept.values() if not r.is_tombstone]
    coord = GroupCoordinator(config)
    coord.replay(records, now)
    return coord


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(op, max_size=40), delay=st.sampled_from([0, 15_000]))
def test_aggregates_equal_the_passes_they_replace_and_replay(ops: list[tuple], delay: int) -> None:
    config = CoordinatorConfig(session_timeout_ms=10_000, scheduled_rebalance_max_delay_ms=delay)
    coord = GroupCoordinator(config)
    coord.set_config(G, ConfigView.of(0, {"A": 2, "B": 1}), 0)
    records = coord.drain_records()
    now = 0
    for operation in ops:
        now = run(coord, operation, now)
        records += coord.drain_records()
        group = coord.connect_group(G)
        if group is not None:
            check_against_scratch(group)
    live = coord.connect_group(G)
    for compact in (False, True):
        again = replayed(config, records, now, compact).connect_group(G)
        assert (again is None) == (live is None)
        if again is None or live is None:
            continue
        check_against_scratch(again)
        if not compact:  # the same member order: the very same answers
            assert answers(again) == answers(live)
        assert again.snapshot() == live.snapshot()


# ---------------------------------------------------------------------- target records

item_sets = st.sampled_from([EMPTY, frozenset({1}), frozenset({1, 2}), frozenset({3})])
meta = st.sampled_from([NO_METADATA, AssignedMetadata(1, b"x"), AssignedMetadata(2, b"")])
mids = st.sampled_from(WORKERS)


@settings(max_examples=300, deadline=None)
@given(
    old=st.dictionaries(mids, item_sets),
    old_meta=st.dictionaries(mids, meta.filter(lambda d: d != NO_METADATA)),
    new=st.dictionaries(mids, item_sets),
    new_meta=st.none() | st.dictionaries(mids, meta),
    share=st.booleans(),
    error=st.integers(0, 1),
)
def test_target_records_are_the_value_comparison(
    old: dict, old_meta: dict, new: dict, new_meta: dict | None, share: bool, error: int
) -> None:
    """Same records in the same order as comparing every member by value, whether the new target
    shares the old sets (what the cooperative assignor hands back) or carries equal copies."""
    if share:
        new = {mid: old[mid] if old.get(mid) == items else items for mid, items in new.items()}
    else:
        new = {mid: frozenset(set(items)) for mid, items in new.items()}
    got = target_records(G, old, old_meta, 3, new, error, new_meta)
    assert got == ref_target_records(G, old, old_meta, 3, new, error, new_meta)


# ---------------------------------------------------------------------- any record sequence

metadata = st.builds(
    MemberMetadata,
    instance_id=st.sampled_from(INSTANCES),
    url=st.sampled_from(URLS),
    config_offset=st.integers(-1, 3),
    server_assignor=st.sampled_from([None, assignors.COOPERATIVE, assignors.EAGER]),
    client_assignors=st.lists(client_assignor, max_size=2).map(tuple),
    protocol=st.sampled_from([NEW_PROTOCOL, "sessioned"]),
)
current = st.builds(
    CurrentAssignment, member_epoch=st.integers(0, 2), state=st.sampled_from(list(MemberState))
)
record_op = st.one_of(
    st.tuples(st.just("metadata"), mids, metadata),
    st.tuples(st.just("current"), mids, current),
    st.tuples(st.just("delete"), mids, st.none()),
    st.tuples(st.just("delete current"), mids, st.none()),
)


@settings(max_examples=300, deadline=None)
@given(ops=st.lists(record_op, max_size=40))
def test_any_record_sequence_keeps_the_aggregates(ops: list[tuple]) -> None:
    """Records the engine would not write itself but a compacted log may hold: members sharing a url
    or an instance id (the group's member order decides), current assignments before metadata
    (placeholder members), protocols and states changing in any order."""
    group = ConnectGroup(G, CoordinatorConfig(), Timers())
    for kind, mid, value in ops:
        if kind == "metadata":
            group.apply(member_metadata_record(G, mid, value))
        elif kind == "current":
            group.apply(current_assignment_record(G, mid, value))
        elif kind == "delete":
            for record in member_tombstones(G, mid):
                group.apply(record)
        else:
            group.apply(member_tombstones(G, mid)[0])
        check_against_scratch(group)
        for mid in WORKERS:  # the joins and rejoins check_heartbeat sees
            for instance_id in INSTANCES:
                req = HeartbeatRequest(G, mid, 0, instance_id=instance_id, client_assignors=(CLIENT,))
                check_client_side_shortcut(group, req)


CLIENT = ClientAssignor("sessioned", 0, 2)


def test_a_static_member_coming_back_with_client_assignors_is_not_counted() -> None:
    """The member a join with an instance id replaces keeps no vote: here it was the only member
    without a client assignor, so the join's ranges are checked (and found wanting)."""
    coord = GroupCoordinator(CoordinatorConfig(session_timeout_ms=10_000))
    # [1-3] and [2-5] overlap (the join passes the range check) but neither covers the other.
    low = (ClientAssignor("sessioned", 1, 3, version=1),)
    high = (ClientAssignor("sessioned", 2, 5, version=2),)
    coord.connect_heartbeat(HeartbeatRequest(G, "m0", 0, rebalance_timeout_ms=1, client_assignors=low), 0)
    coord.connect_heartbeat(HeartbeatRequest(G, "m1", 0, instance_id="i1", rebalance_timeout_ms=1), 0)
    coord.connect_heartbeat(HeartbeatRequest(G, "m1", -2, instance_id="i1"), 0)
    group = coord.connect_group(G)
    assert group is not None
    join = HeartbeatRequest(G, "m2", 0, instance_id="i1", rebalance_timeout_ms=1, client_assignors=high)
    check_client_side_shortcut(group, join)
    assert not _server_side_after(group, join, None)
    resp = coord.connect_heartbeat(join, 0)
    assert resp.error_code == int(ErrorCode.UNSUPPORTED_ASSIGNOR), resp
    assert "covers every member" in (resp.error_message or "")


# ---------------------------------------------------------------------- sparse server-side targets


@settings(max_examples=150, deadline=None)
@given(spec=specs())
def test_work_assignors_are_the_server_assignors_without_idle_members(spec: AssignmentSpec) -> None:
    for name, assign in assignors.SERVER_ASSIGNORS.items():
        work = assignors.WORK_ASSIGNORS[name](spec)
        assert all(work.values())
        full = assignors.full_target(spec, work)
        expected = assign(spec)
        assert full == expected and list(full) == list(expected)
        with_set = replace(spec, member_set=set(spec.members))
        assert assignors.WORK_ASSIGNORS[name](with_set) == work


@settings(max_examples=300, deadline=None)
@given(
    members=st.lists(mids, unique=True),
    old=st.lists(st.tuples(mids, item_sets), unique_by=lambda t: t[0]).map(dict),
    work=st.dictionaries(mids, item_sets.filter(bool)),
    share=st.booleans(),
)
def test_work_records_are_the_records_of_the_full_target(
    members: list[str], old: dict, work: dict, share: bool
) -> None:
    """Looking only at members with work (before or now) and members without a target entry gives
    the records of comparing the whole target, in the same order."""
    spec = AssignmentSpec(tuple(sorted(members)), EMPTY, {}, {}, False)
    work = {mid: (old[mid] if share and old.get(mid) == items else items) for mid, items in work.items()}
    work = {mid: items for mid, items in work.items() if mid in members}
    working = {mid for mid, items in old.items() if items}
    maybe_changed = {mid for mid in working if mid in members} | (set(members) - old.keys())
    departed = old.keys() - set(members)
    got = work_records(G, old, 4, work, maybe_changed, departed)
    assert got == target_records(G, old, {}, 4, assignors.full_target(spec, work))
