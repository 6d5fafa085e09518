"""Work per request does not grow with the number of groups, and every request's cost has a bound
(issue 11, finding 6). No timings: each test counts the work itself (groups described per step,
name comparisons of the client-assignor range check, groups described per DescribeGroups), so it
fails on the code that did the unbounded work and passes however loaded the machine is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.protocol.admin.groups import DescribeGroupsRequest

from connect_bridge.bridge import describe as describe_cli
from connect_bridge.bridge.coordination.handlers import LocalApis, now_ms
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.server import BridgeServer, ServerOptions
from connect_bridge.bridge.stores.committer import Committer
from connect_bridge.bridge.stores.store import MemoryRecordStore
from connect_bridge.codecs.connect_protocol import Assignment, Subscription, encode_subscription
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.requests import decode_request, encode_request
from connect_bridge.state.api import HeartbeatRequest
from connect_bridge.state.classic import api as capi
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.connect import group as connect_steps
from connect_bridge.state.connect.client_side import check_client_ranges, range_conflict
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.errors import RequestError
from connect_bridge.state.limits import RequestLimits
from connect_bridge.state.model import ClientAssignor, ConfigView
from connect_bridge.wire import maps as wm
from polling import eventually

_L = RequestLimits()

VIEW = ConfigView.of(3, {"A": 4, "B": 2})
CONFIG = CoordinatorConfig(session_timeout_ms=10**9, classic_initial_rebalance_delay_ms=0)
DEFERRED = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def join(group: str, member: str, **kw: Any) -> HeartbeatRequest:
    return HeartbeatRequest(group, member, 0, rebalance_timeout_ms=60_000, url=f"http://{member}", **kw)


# ----------------------------------------------------------------------- client-assignor range check


def pairwise_conflict(
    assignors: Mapping[str, tuple[ClientAssignor, ...]], member_id: str, offered: tuple[ClientAssignor, ...]
) -> tuple[ClientAssignor, str, ClientAssignor] | None:
    """The check as it was (ConnectGroup._check_client_ranges before issue 11.6): every pair."""
    for a in offered:
        for mid, advertised in assignors.items():
            if mid == member_id:
                continue
            for other in advertised:
                if other.name == a.name and (
                    other.maximum_version < a.minimum_version or a.maximum_version < other.minimum_version
                ):
                    return a, mid, other
    return None


@st.composite
def assignor(draw: st.DrawFn) -> ClientAssignor:
    lo = draw(st.integers(-1, 6))
    hi = draw(st.integers(max(lo, 0), 8))
    return ClientAssignor(draw(st.sampled_from("abcd")), lo, hi, 0, max(lo, 0))


assignor_lists = st.lists(assignor(), max_size=5).map(tuple)


@settings(max_examples=400, deadline=None)
@given(
    members=st.dictionaries(st.sampled_from(["m1", "m2", "m3", "m4", "m5"]), assignor_lists, max_size=5),
    member_id=st.sampled_from(["", "m1", "m3", "new"]),
    offered=assignor_lists,
)
def test_range_conflict_finds_exactly_what_the_pairwise_scan_found(
    members: dict[str, tuple[ClientAssignor, ...]], member_id: str, offered: tuple[ClientAssignor, ...]
) -> None:
    expected = pairwise_conflict(members, member_id, offered)
    assert range_conflict(members, member_id, offered) == expected
    if expected is None:
        check_client_ranges(members, member_id, offered)
    else:
        a, mid, other = expected
        with pytest.raises(RequestError) as raised:
            check_client_ranges(members, member_id, offered)
        assert raised.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
        assert raised.value.message == (
            f"assignor {a.name} versions [{a.minimum_version}-{a.maximum_version}] do not "
            f"overlap member {mid}'s [{other.minimum_version}-{other.maximum_version}]"
        )


class CountedName(str):
    """An assignor name that counts how often it is compared for equality."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        CountedName.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def counted_assignors(n: int) -> tuple[ClientAssignor, ...]:
    return tuple(ClientAssignor(CountedName(f"assignor-{i}"), 0, 5, 0, 1) for i in range(n))


def test_a_join_compares_assignor_names_linearly_not_pairwise() -> None:
    """Two joins carrying 30,000 assignors stalled the loop 23 s: the second compared every pair
    (N^2 = 90,000 name comparisons for N = 300 here). Now it is a few per assignor."""
    n = 300
    coord = GroupCoordinator(CONFIG)
    first = coord.connect_heartbeat(join("g", "m1", client_assignors=counted_assignors(n)), 0)
    assert first.member_id == "m1"
    CountedName.comparisons = 0
    second = coord.connect_heartbeat(join("g", "m2", client_assignors=counted_assignors(n)), 0)
    assert second.error_code == 0 and set(coord.groups["g"].members) == {"m1", "m2"}
    assert CountedName.comparisons <= 20 * n, CountedName.comparisons


def test_a_conflicting_range_is_still_refused_with_the_same_answer() -> None:
    coord = GroupCoordinator(CONFIG)
    coord.connect_heartbeat(join("g", "m1", client_assignors=(ClientAssignor("x", 1, 2, 0, 1),)), 0)
    offered = (ClientAssignor("y", 0, 9, 0, 0), ClientAssignor("x", 3, 4, 0, 3))
    refused = coord.connect_heartbeat(join("g", "m2", client_assignors=offered), 0)
    assert refused.error_code == ErrorCode.UNSUPPORTED_ASSIGNOR
    assert refused.error_message == "assignor x versions [3-4] do not overlap member m1's [1-2]"
    assert set(coord.groups["g"].members) == {"m1"}


# ----------------------------------------------------------------------- metrics: touched groups only


def described_as_before(coord: GroupCoordinator, gid: str) -> tuple[int, dict[tuple[str, str], int]]:
    """What BridgeServer._observe_groups published for a group before issue 11.6 (via describe),
    with a classic group's members in the group's state (Kafka keeps none per classic member)."""
    described = coord.describe_any(gid)
    counts: dict[tuple[str, str], int] = {}
    for m in described.members:
        key = (str(getattr(m, "protocol", "classic")), str(getattr(m, "state", described.state)))
        counts[key] = counts.get(key, 0) + 1
    epoch = getattr(described, "group_epoch", getattr(coord.groups[gid], "generation_id", 0))
    return epoch, counts


def classic_join(group: str, url: str, version: int = 3) -> capi.JoinGroupRequest:
    allocation = Assignment.build(0, "", "", VIEW.offset, [], ())
    protocols = (("sessioned", encode_subscription(Subscription(url, VIEW.offset, allocation), 2)),)
    return capi.JoinGroupRequest(group, "", "connect", protocols, 10_000, 30_000, api_version=version)


def test_metrics_view_gives_the_figures_describe_gave() -> None:
    coord = GroupCoordinator(CONFIG)
    coord.default_view = VIEW
    for i in range(4):  # a connect group mid-rebalance: STABLE, UNREVOKED and UNRELEASED members
        coord.connect_heartbeat(join("connect", f"m{i}", owned=frozenset()), i)
    coord.classic_join(classic_join("classic", "http://c1"), 0)  # a classic group, mid-join
    coord.classic_join(classic_join("classic", "http://c2"), 0)
    coord.advance(10)
    coord.connect_heartbeat(join("mixed", "n1", owned=frozenset()), 0)  # legacy + new members
    coord.classic_join(classic_join("mixed", "http://l1"), 0)
    coord.drain_records()
    states = {m.current.state.value for m in coord.groups["connect"].members.values()}
    assert len(states) > 1
    assert {type(g).__name__ for g in coord.groups.values()} == {"ConnectGroup", "ClassicGroup"}
    for gid in coord.groups:
        assert coord.metrics_view(gid) == described_as_before(coord, gid), gid
    assert coord.metrics_view("nope") is None


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))


async def started(store: MemoryRecordStore) -> tuple[BridgeServer, Metrics]:
    metrics = Metrics()
    server = BridgeServer(ServerOptions(host="127.0.0.1", port=0, coordinator=CONFIG), store, metrics)
    await server.start()
    await eventually(lambda: server.loaded, 20.0)
    return server, metrics


def epoch_series(metrics: Metrics) -> set[str]:
    lines = metrics.render().decode().splitlines()
    return {line.split('"')[1] for line in lines if line.startswith("connect_bridge_group_epoch{")}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How often the coordinator is asked about a group, by method."""
    calls = {"describe_any": 0, "metrics_view": 0}
    for name in calls:
        original = getattr(GroupCoordinator, name)

        def wrapper(self: GroupCoordinator, gid: str, _name: str = name, _original: Any = original) -> Any:
            calls[_name] += 1
            return _original(self, gid)

        monkeypatch.setattr(GroupCoordinator, name, wrapper)
    yield calls


def test_a_step_refreshes_the_metrics_of_the_groups_it_touched_only(counted: dict[str, int]) -> None:
    """After every change the server described every group (95% of join time at 3,000 groups)."""
    groups = 300
    seed = GroupCoordinator(CONFIG)
    for i in range(groups):
        seed.connect_heartbeat(join(f"g{i}", "m"), 0)
    store = MemoryRecordStore()
    store.commit(seed.drain_records())

    async def scenario() -> None:
        server, metrics = await started(store)
        try:
            assert epoch_series(metrics) == {f"g{i}" for i in range(groups)}  # all, once, after loading
            for name in counted:
                counted[name] = 0
            now = server.clock()
            server.runtime.run(lambda c: c.connect_heartbeat(join("fresh", "m"), now))  # a new group
            server.runtime.run(lambda c: c.connect_heartbeat(join("g7", "m2"), now))  # a member joins another
            server.runtime.run(lambda c: None)  # a step without records refreshes nothing
            assert counted == {"describe_any": 0, "metrics_view": 2}
            assert 'connect_bridge_group_epoch{group="fresh"} 1.0' in metrics.render().decode()
            epoch, counts = server.coordinator.metrics_view("g7")
            text = metrics.render().decode()
            assert f'connect_bridge_group_epoch{{group="g7"}} {float(epoch)}' in text
            for (protocol, state), n in counts.items():
                line = f'connect_bridge_group_members{{group="g7",protocol="{protocol}",state="{state}"}}'
                assert f"{line} {float(n)}" in text
            assert 'connect_bridge_rebalances_total{group="g7"} 1.0' in text
        finally:
            await server.stop()

    run(scenario())


def test_a_deleted_group_loses_its_series(counted: dict[str, int]) -> None:
    async def scenario() -> None:
        server, metrics = await started(MemoryRecordStore())
        try:
            now = server.clock()
            for gid in ("kept", "gone"):
                for member in ("m", "m2"):  # the second join is a rebalance
                    server.runtime.run(lambda c: c.connect_heartbeat(join(gid, member), now))  # noqa: B023
            assert epoch_series(metrics) == {"kept", "gone"}
            assert 'connect_bridge_rebalances_total{group="gone"}' in metrics.render().decode()
            group = server.coordinator.groups.pop("gone")  # what deleting the group does
            connect_steps.tombstone_all(group)
            server.coordinator._records.extend(group.drain_records())
            server.runtime.run(lambda c: None)
            text = metrics.render().decode()
            assert epoch_series(metrics) == {"kept"}
            assert 'group="gone"' not in text
            assert metrics.observed_groups == {"kept"}
        finally:
            await server.stop()

    run(scenario())


# ----------------------------------------------------------------------- describe: bounded per request


def decoded(msg: Any, version: int) -> Any:
    return decode_request(encode_request(msg, version, 1, "t")[4:], framed=False)


def describe_groups_request(ids: list[str], version: int) -> Any:
    return decoded(DescribeGroupsRequest(groups=ids, include_authorized_operations=False), version)


def loaded_runtime(coord: GroupCoordinator) -> CoordinatorRuntime:
    """The runtime of a loaded bridge over ``coord`` (records kept in memory)."""
    runtime = CoordinatorRuntime(coord, Committer(MemoryRecordStore()), now_ms)
    runtime.loaded = True
    return runtime


def apis_with(coord: GroupCoordinator, **limits: int) -> LocalApis:
    apis = LocalApis(loaded_runtime(coord), ("127.0.0.1", 9092))
    apis.limits = SimpleNamespace(**{f"describe_max_{k}": v for k, v in limits.items()})
    return apis


@pytest.mark.parametrize("version", [0, 5, 6])
def test_describe_groups_describes_at_most_the_cap_and_defers_the_rest(
    counted: dict[str, int], version: int
) -> None:
    coord = GroupCoordinator(CONFIG)
    coord.connect_heartbeat(join("real", "m"), 0)
    apis = LocalApis(loaded_runtime(coord), ("127.0.0.1", 9092))
    cap, total = _L.describe_max_groups, _L.describe_max_groups + 500
    assert total <= _L.describe_max_ids
    ids = ["real"] + [f"g{i}" for i in range(total - 1)]
    response = apis.describe_groups(describe_groups_request(ids, version).body, version)
    assert counted["describe_any"] == cap  # was: one per id
    assert [g.group_id for g in response.groups] == ids
    assert response.groups[0].error_code == 0 and len(response.groups[0].members) == 1
    assert {g.error_code for g in response.groups[cap:]} == {DEFERRED}
    assert DEFERRED not in {g.error_code for g in response.groups[:cap]}
    if version >= 6:
        assert "ask again for this group" in response.groups[cap].error_message


def test_describe_member_budget_defers_groups_but_always_answers_the_first() -> None:
    coord = GroupCoordinator(CONFIG)
    for gid, size in (("big", 6), ("mid", 3), ("small", 1)):
        for i in range(size):
            coord.connect_heartbeat(join(gid, f"m{i}"), 0)
    apis = apis_with(coord, groups=100, members=5, ids=100)
    answer = apis.describe_groups(describe_groups_request(["big", "small"], 5).body, 5)
    assert [(g.group_id, g.error_code, len(g.members)) for g in answer.groups] == [
        ("big", 0, 6),  # over the budget alone: the first group is always described
        ("small", DEFERRED, 0),
    ]
    answer = apis.describe_groups(describe_groups_request(["mid", "small", "big", "none"], 5).body, 5)
    assert [(g.group_id, g.error_code) for g in answer.groups] == [
        ("mid", 0),
        ("small", 0),
        ("big", DEFERRED),
        ("none", DEFERRED),  # after a deferred group, everything is deferred (order is kept)
    ]
    connect = apis.connect_describe(decoded(wm.describe_to_wire(["small", "big", "mid"]), 0).body, 0)
    assert [(g.group_id, g.error_code) for g in connect.groups] == [
        ("small", 0),
        ("big", DEFERRED),
        ("mid", DEFERRED),
    ]
    assert "at most 100 groups and 5 members" in connect.groups[1].error_message


def test_too_many_ids_are_refused_before_any_work() -> None:
    """Answering each id costs ~8 us even unlooked-up: past the id cap the connection is closed
    (the server closes on a handler exception), as for an oversized frame."""
    coord = GroupCoordinator(CONFIG)
    apis = LocalApis(loaded_runtime(coord), ("127.0.0.1", 9092))
    too_many = [f"g{i}" for i in range(_L.describe_max_ids + 1)]
    with pytest.raises(ValueError, match="more than"):
        apis.describe_groups(describe_groups_request(too_many, 5).body, 5)
    with pytest.raises(ValueError, match="more than"):
        apis.connect_describe(decoded(wm.describe_to_wire(too_many), 0).body, 0)
    limit = too_many[: _L.describe_max_ids]
    assert len(apis.describe_groups(describe_groups_request(limit, 5).body, 5).groups) == len(limit)


def test_describe_every_group_lists_a_bounded_number() -> None:
    coord = GroupCoordinator(CONFIG)
    for i in range(12):
        coord.connect_heartbeat(join(f"g{i:02d}", "m"), 0)
    apis = apis_with(coord, groups=3, members=100, ids=5)
    answer = apis.connect_describe(decoded(wm.describe_to_wire([]), 0).body, 0)
    assert [(g.group_id, g.error_code) for g in answer.groups] == [
        ("g00", 0),
        ("g01", 0),
        ("g02", 0),
        ("g03", DEFERRED),
        ("g04", DEFERRED),
    ]


def test_the_describe_command_asks_in_batches_and_again_for_deferred_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(describe_cli, "DESCRIBE_BATCH", 4)
    asked: list[list[str]] = []

    async def bridge(ids: list[str]) -> list[Any]:  # describes two groups per request
        asked.append(ids)
        return [SimpleNamespace(group_id=g, error_code=0 if i < 2 else DEFERRED) for i, g in enumerate(ids)]

    ids = [f"g{i}" for i in range(9)]
    answers = run(describe_cli._in_batches(ids, bridge))
    assert [(g.group_id, g.error_code) for g in answers] == [(g, 0) for g in ids]
    assert max(len(a) for a in asked) == 4

    async def loading(ids: list[str]) -> list[Any]:
        return [SimpleNamespace(group_id=g, error_code=DEFERRED) for g in ids]

    answers = run(describe_cli._in_batches(ids, loading))  # no progress: shown as answered
    assert [(g.group_id, g.error_code) for g in answers] == [(g, DEFERRED) for g in ids]
