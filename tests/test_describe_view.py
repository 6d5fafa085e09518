"""What ``connect-bridge describe`` is built from, without a bridge: the engine's waits and held work
(``state/connect/describe.py``), ConnectGroupDescribe v1 on the wire (and v0 unchanged), and the table.

The live end-to-end check (a served bridge, real worker clients, the CLI) is tests/test_describe.py.
"""

from __future__ import annotations

from connect_bridge.bridge.describe_view import (
    classic_group_view,
    connect_group_view,
    count_phrase,
    render_table,
)
from connect_bridge.codecs.connect_protocol import (
    Assignment,
    Subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.state import api as napi
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.group import ClassicDescribedGroup, ClassicDescribedMember
from connect_bridge.state.model import EMPTY, HeldWork
from connect_bridge.wire import maps as wm
from test_connect_group import ALL, G, Sim, items
from test_migration import protocols
from test_wire_map import response_trip

REBALANCE_MS = 60_000


def by_id(described: napi.DescribedGroup) -> dict[str, napi.DescribedMember]:
    return {m.member_id: m for m in described.members}


def test_a_revocation_shows_who_revokes_until_when_and_who_waits_for_it() -> None:
    sim = Sim()
    sim.join("m1", url="http://m1:8083/")
    sim.settle()
    sim.now = 1_000
    sim.join("m2")
    sim.beat("m1")  # told to revoke; it has not acknowledged yet
    described = sim.coord.describe(G, 1_500)
    m1, m2 = by_id(described)["m1"], by_id(described)["m2"]
    assert described.now_ms == 1_500
    assert (m1.waiting_for, m1.wait_deadline_ms) == ("revoking", 1_000 + REBALANCE_MS)
    assert m1.revoking and m1.revoking == m2.target
    assert (m2.waiting_for, m2.wait_deadline_ms) == ("released-work", -1)
    assert m1.classic_state is None and m1.url == "http://m1:8083/"

    sim.settle()
    settled = sim.coord.describe(G, 2_000)
    assert {m.waiting_for for m in settled.members} == {"stable"}
    assert {m.wait_deadline_ms for m in settled.members} == {-1}


def test_work_of_a_departed_worker_is_shown_held_with_its_deadline() -> None:
    sim = Sim(delay=30_000)
    sim.join("m1")
    sim.join("m2")
    sim.settle()
    owned = sim.running["m2"]
    sim.now = 5_000
    sim.leave("m2")
    described = sim.coord.describe(G, 6_000)
    assert described.held == (HeldWork(owned, "http://m2:8083/", None, 5_000 + 30_000),)
    view = connect_group_view(described)
    assert view["held"] == [
        {
            "worker_url": "http://m2:8083/",
            "instance_id": None,
            "deadline_ms": 35_000,
            "deadline": "1970-01-01T00:00:35Z",
            "in_s": 29.0,
            "count": len(owned),
            "items": sorted(str(i) for i in owned),
        }
    ]


def test_a_legacy_member_is_awaited_through_its_sync_and_join() -> None:
    sim = Sim()
    sim.join("m1")
    sim.settle()
    join = capi.JoinGroupRequest(
        G, "l1", "connect", protocols("http://l1:8083/", EMPTY), client_id="l1", client_host="/10.0.0.7"
    )
    answer = sim.coord.classic_join(join, 100)
    assert answer is not None and answer.error_code == 0
    legacy = by_id(sim.coord.describe(G, 200))["l1"]
    assert (legacy.protocol, legacy.classic_state) == ("sessioned", "CompletingRebalance")
    assert (legacy.waiting_for, legacy.wait_deadline_ms) == ("sync", 100 + REBALANCE_MS)
    assert (legacy.client_id, legacy.client_host) == ("l1", "/10.0.0.7")

    sync = capi.SyncGroupRequest(G, "l1", answer.generation_id, protocol_type="connect", api_version=4)
    assert sim.coord.classic_sync(sync, 300).error_code == 0
    legacy = by_id(sim.coord.describe(G, 400))["l1"]
    assert (legacy.classic_state, legacy.waiting_for) == ("Stable", "released-work")  # m1 still runs it
    # Once m1 has released that work, l1's next Heartbeat tells it to rejoin: the bridge then waits for
    # its JoinGroup, bounded by the join timer.
    for now in range(500, 600, 10):
        sim.now = now
        sim.beat("m1", ack=True)
        sim.coord.classic_heartbeat(capi.HeartbeatRequest(G, "l1", answer.generation_id), now)
        legacy = by_id(sim.coord.describe(G, now))["l1"]
        if legacy.waiting_for == "join":
            assert legacy.wait_deadline_ms == now + REBALANCE_MS
            break
    else:
        raise AssertionError(f"never asked to rejoin: {legacy}")


def _wire_group() -> napi.DescribedGroup:
    return napi.DescribedGroup(
        group_id="g",
        group_type="connect",
        state="RECONCILING",
        group_epoch=9,
        assignment_epoch=9,
        assignor="connect-cooperative",
        leader_id="m1",
        leader_url="http://w1:8083/",
        config_offset=12,
        members=(
            napi.DescribedMember(
                "m1",
                None,
                "new",
                8,
                "UNREVOKED",
                "http://w1:8083/",
                12,
                items("A"),
                items("A-0", "A-1"),
                items("A"),
                client_id="w1",
                client_host="/10.0.0.1",
                waiting_for="revoking",
                wait_deadline_ms=70_000,
            ),
            napi.DescribedMember(
                "l2",
                None,
                "sessioned",
                9,
                "UNRELEASED",
                "http://w2:8083/",
                12,
                EMPTY,
                EMPTY,
                items("A-0", "A-1"),
                client_id="w2",
                client_host="/10.0.0.2",
                classic_state="Stable",
                waiting_for="released-work",
            ),
        ),
        now_ms=10_000,
        held=(HeldWork(items("B", "B-0"), "http://w3:8083/", "i3", 40_000),),
    )


def test_connect_group_describe_v1_carries_waits_and_held_work_and_v0_does_not() -> None:
    group = _wire_group()
    v1 = response_trip(wm.describe_response_to_wire([group], 1), 1)
    assert wm.describe_response_from_wire(v1) == [group]
    assert v1.groups[0].held_work[0].deadline_ms == 40_000 and v1.groups[0].now_ms == 10_000

    v0 = response_trip(wm.describe_response_to_wire([group], 0), 0)
    [old] = wm.describe_response_from_wire(v0)
    assert old.now_ms == -1 and old.held == ()
    assert [(m.revoking, m.waiting_for, m.wait_deadline_ms, m.classic_state) for m in old.members] == [
        (EMPTY, "", -1, None)
    ] * 2
    # What v0 always had is still there (client host included, now filled).
    assert [(m.member_id, m.current, m.target, m.client_host) for m in old.members] == [
        (m.member_id, m.current, m.target, m.client_host) for m in group.members
    ]


def test_the_table_shows_counts_waits_and_deadlines_against_the_bridge_clock() -> None:
    view = connect_group_view(_wire_group())
    m1, l2 = view["members"]
    assert (m1["owned_count"], m1["revoking_count"], m1["target_count"]) == (3, 2, 1)
    assert (m1["waiting"], m1["wait_in_s"]) == ("revoking 2 tasks", 60.0)
    assert m1["wait_deadline"] == "1970-01-01T00:01:10Z"
    assert l2["waiting"] == "awaiting 2 tasks released by others" and l2["wait_deadline_ms"] is None

    lines = render_table([view]).splitlines()
    assert lines[0] == (
        "GROUP g  type connect  state RECONCILING  group epoch 9  target epoch 9"
        "  assignor connect-cooperative"
    )
    assert lines[1] == "  leader m1 (http://w1:8083/)  config offset 12  bridge time 1970-01-01T00:00:10Z"
    header, row1, row2 = lines[2:5]
    assert header.split() == [
        "MEMBER",
        "WORKER",
        "URL",
        "CLIENT",
        "HOST",
        "PROTOCOL",
        "EPOCH",
        "OWNED",
        "TARGET",
        "WAITING",
        "FOR",
    ]
    assert row1.split()[:7] == ["m1", "http://w1:8083/", "/10.0.0.1", "new", "8", "3", "1"]
    assert row1.endswith("revoking 2 tasks (removed in 60s if not)")
    assert row2.split()[:8] == ["l2", "http://w2:8083/", "/10.0.0.2", "sessioned", "(classic)", "9", "0", "2"]
    # Columns line up: every member row starts its url where the header's WORKER URL starts.
    assert {row.index("http://") for row in (row1, row2)} == {header.index("WORKER URL")}
    assert lines[5].split() == ["HELD", "FOR", "ITEMS", "UNTIL"]
    assert lines[6].split() == ["http://w3:8083/", "2", "1970-01-01T00:00:40Z", "(in", "30s)"]
    assert "A-0" not in "\n".join(lines)  # counts in the table; the lists are in --json


def test_a_classic_group_is_read_from_describe_groups_and_the_connect_assignment() -> None:
    owned_before = sorted(items("A", "A-0"))
    allocation = Assignment.build(0, "c1", "http://c1:8083/", 7, owned_before, ())
    subscription = encode_subscription(Subscription("http://c1:8083/", 7, allocation), 1)
    assignment = encode_assignment(
        Assignment.build(0, "c1", "http://c1:8083/", 7, sorted(items("B")), sorted(items("A-0"))), 1
    )
    member = ClassicDescribedMember("c1", None, "w-c1", "/10.0.0.9", subscription, assignment)
    stable = ClassicDescribedGroup("classic-g", 0, "Stable", "connect", "compatible", (member,))
    view = classic_group_view(stable)
    assert (view["group_type"], view["state"], view["leader_url"], view["config_offset"]) == (
        "classic",
        "Stable",
        "http://c1:8083/",
        7,
    )
    [m] = view["members"]
    assert (m["protocol"], m["url"], m["client_host"]) == ("compatible", "http://c1:8083/", "/10.0.0.9")
    assert m["owned"] == ["A", "B"] and m["owned_count"] == 2 and m["target_count"] is None
    assert m["waiting"] == "revoking 1 task"

    rebalancing = ClassicDescribedGroup("classic-g", 0, "CompletingRebalance", "connect", "", (member,))
    [m] = classic_group_view(rebalancing)["members"]
    assert m["waiting"] == "awaiting SyncGroup" and m["protocol"] == ""
    table = render_table([classic_group_view(rebalancing)])
    assert table.splitlines()[0] == "GROUP classic-g  type classic  state CompletingRebalance  protocol -"
    assert "awaiting SyncGroup" in table


def test_count_phrases() -> None:
    assert [count_phrase(x) for x in (EMPTY, items("A"), items("A-0"), items("A", "B", "A-0"), ALL)] == [
        "nothing",
        "1 connector",
        "1 task",
        "2 connectors and 1 task",
        "2 connectors and 3 tasks",
    ]
