"""Hand-back (issue 16 item 3, docs/adoption.md "Hand-back"): ``releasing`` -> ``released``.

Fast and in-process, on the harness of ``tests/test_adoption_wiring.py`` (the upstream is the
bridge's classic engine behind ``tests/adoption_relay.py``, frames at Java Connect 4.3.1's
versions): a group is taken over, then handed back; each member's request is routed per member
(a member of the bridge's group is sent away, any other request of the group held until
``released`` is durable), and the records replay to exactly one coordinator at every cut.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from typing import Any

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, JoinGroupRequest, SyncGroupRequest

from adoption_relay import SESSION_MS, G
from connect_bridge.bridge.admin import admin_handler, release_path
from connect_bridge.bridge.coordination.fastpath import SteadyHeartbeats
from connect_bridge.bridge.coordination.runtime import CoordinatorRuntime
from connect_bridge.bridge.proxy.relay import Relay as ServerRelay
from connect_bridge.codecs.connect_protocol import (
    ABSENT,
    Assignment,
    Subscription,
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.requests import DecodedRequest, decode_request, encode_request
from connect_bridge.state.adoption.build import AdoptionError
from connect_bridge.state.adoption.handback import reports_nothing
from connect_bridge.state.adoption.records import OwnershipState
from connect_bridge.state.classic.state import ClassicGroupState
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.state.records import RecordType
from connect_bridge.wire import classic as wc
from test_adoption_wiring import Bridge, Recorder, formed

OWNED = {"w1": [("alpha", -1), ("alpha", 0)], "w2": [("alpha", 1), ("beta", -1)], "w3": [("beta", 0)]}
"""What each worker runs when the hand-back starts."""


async def adopted() -> tuple[Bridge, Any, Recorder, int, dict[str, str]]:
    """A group relayed, then taken over by the bridge with all three workers behind it."""
    relay, recorder, generation, ids = formed()
    bridge = Bridge(relay)
    for request, response in recorder.exchanges:
        await bridge.relay_exchange(request, response)
    assert (await bridge.adoption.take_over(G)).ready
    recorder.exchanges.clear()
    return bridge, relay, recorder, generation, ids


def join_frame(worker: str, member_id: str, owned: list[tuple[str, int]]) -> DecodedRequest:
    """A Java Connect 4.3.1 worker's JoinGroup v9: sessioned/compatible subscriptions report what it
    runs (``owned``), the eager one nothing."""
    allocation = Assignment.build(0, "w1-id", "http://w1", 7, owned)
    subscriptions = [
        (name, encode_subscription(Subscription(f"http://{worker}", 7, allocation if v else ABSENT), v))
        for name, v in (("sessioned", 2), ("compatible", 1), ("default", 0))
    ]
    msg = JoinGroupRequest(
        group_id=G, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=60_000, member_id=member_id,
        group_instance_id=None, protocol_type="connect", reason=None,
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=md) for n, md in subscriptions],
    )  # fmt: skip
    return decode_request(encode_request(msg, 9, 1, worker))


def sync_frame(worker: str, member_id: str, generation: int, assignments: dict[str, bytes]) -> DecodedRequest:
    msg = SyncGroupRequest(
        group_id=G, generation_id=generation, member_id=member_id, group_instance_id=None,
        protocol_type="connect", protocol_name="sessioned",
        assignments=[SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                     for m, a in assignments.items()],
    )  # fmt: skip
    return decode_request(encode_request(msg, 5, 1, worker))


class Local:
    """The bridge answering a request locally (``LocalApis``), parked answers collected."""

    def __init__(self, bridge: Bridge, relay: Any) -> None:
        self.bridge, self.relay = bridge, relay
        self.answers: dict[Any, Any] = {}

    def __call__(self, decoded: DecodedRequest, token: str) -> Any:
        coordinator, now = self.bridge.coordinator, self.relay.now
        body, version = decoded.body, decoded.api_version
        answer: Any
        if decoded.api_key == JoinGroupRequest.API_KEY:
            req = replace(wc.join_from_wire(body, version, decoded.client_id, "/10.0.0.1"), token=token)
            answer = coordinator.classic_join(req, now)
        elif decoded.api_key == SyncGroupRequest.API_KEY:
            answer = coordinator.classic_sync(replace(wc.sync_from_wire(body, version), token=token), now)
        else:
            answer = coordinator.classic_heartbeat(wc.classic_heartbeat_from_wire(body, version), now)
        self.bridge.settle()
        self.answers.update(self.bridge.responses())
        if answer is not None:
            self.answers[token] = answer
        return self.answers.get(token)


async def route(bridge: Bridge, worker: str, decoded: DecodedRequest) -> asyncio.Task[bool]:
    """``BridgeServer._serve``'s call for one request of ``worker``; a few loop turns later."""
    task = asyncio.create_task(bridge.adoption.before_routing(bridge.conn(worker), decoded.api_key, decoded))
    for _ in range(10):
        await asyncio.sleep(0)
    return task


def unsynced_round(local: Local, worker: str, join: DecodedRequest) -> None:
    """A worker sent away (or back with an empty id) that reports nothing is answered with a
    generation of its own that it leads and never completes, so that its Connect assignor forgets
    the bridge's generations before it leads upstream (``state.adoption.handback.unsynced_leader_round``):
    its SyncGroup is answered UNKNOWN_MEMBER_ID and it joins again with an empty id. The generation
    is the group's next: above any the worker can have completed."""
    generation = local.bridge.coordinator.groups[G].generation_id + 1
    answer = local(join, f"away-{worker}")
    assert (answer.error_code, answer.generation_id, answer.leader) == (0, generation, answer.member_id)
    assert [m.member_id for m in answer.members] == [answer.member_id]
    assert answer.member_id not in local.bridge.coordinator.groups[G].members
    unsynced = local(sync_frame(worker, answer.member_id, generation, {}), f"unsynced-{worker}")
    assert unsynced.error_code == ErrorCode.UNKNOWN_MEMBER_ID


def replayed(records: list[Any]) -> GroupCoordinator:
    coordinator = GroupCoordinator(CoordinatorConfig())
    coordinator.replay(records, 0)
    return coordinator


async def revoking_generation(bridge: Bridge, ids: dict[str, str], local: Local) -> None:
    """Every worker rejoins the bridge's group still running its work; the generation completes and
    the leader's assignments come back revoking all of it (``state.adoption.handback``)."""
    for worker in ("w1", "w2", "w3"):
        join = join_frame(worker, ids[worker], OWNED[worker])
        assert (await route(bridge, worker, join)).result() is False
        assert ids[worker] in bridge.coordinator.groups[G].members  # still the bridge's member
        local(join, f"join-{worker}")
    joined = {w: local.answers[f"join-{w}"] for w in ids}
    assert all(a.error_code == 0 for a in joined.values()), joined
    generation = joined["w1"].generation_id
    leader = next(w for w, a in joined.items() if a.member_id == a.leader)
    keep = {  # what Connect's leader would deal: everyone keeps its work
        ids[w]: encode_assignment(Assignment.build(0, ids[leader], "http://l", 7, OWNED[w]), 2) for w in ids
    }
    for worker in ("w1", "w2", "w3"):
        local(sync_frame(worker, ids[worker], generation, keep if worker == leader else {}), f"sync-{worker}")
    for worker in ("w1", "w2", "w3"):
        got = decode_assignment(local.answers[f"sync-{worker}"].assignment)
        assert not got.items and sorted(got.revoked_items) == sorted(OWNED[worker]), (worker, got)
        assert (got.leader, got.config_offset) == (ids[leader], 7)


def test_hand_back_revokes_then_sends_each_member_upstream() -> None:
    asyncio.run(_hand_back())


async def _hand_back() -> None:
    bridge, relay, _, generation, ids = await adopted()
    adoption, coordinator = bridge.adoption, bridge.coordinator
    local = Local(bridge, relay)
    code, body = await admin_handler(lambda: adoption)("POST", release_path(G))
    assert code == 200 and json.loads(body)["released"], body
    assert adoption.phase(G) is OwnershipState.RELEASING and "3 member(s) left" in json.loads(body)["message"]
    ownership = [r for r in bridge.submitted if r.type is RecordType.GROUP_OWNERSHIP]
    assert ownership[-1].value.state is OwnershipState.RELEASING
    assert bridge.durable_calls[-1] == len(bridge.submitted)  # durable before any member is sent away
    assert adoption.status()[G]["bridge_members"] == 3

    # Every member is told to rejoin; a steady heartbeat is not answered on the fast path.
    beat = HeartbeatRequest(group_id=G, generation_id=generation, member_id=ids["w1"], group_instance_id=None)
    steady = SteadyHeartbeats(CoordinatorRuntime(coordinator, bridge, lambda: relay.now))
    assert steady.answer(encode_request(beat, 4, 7, "w1")[4:]) is None
    heartbeat = decode_request(encode_request(beat, 4, 7, "w1"))
    assert local(heartbeat, "hb").error_code == ErrorCode.REBALANCE_IN_PROGRESS

    await revoking_generation(bridge, ids, local)
    held: dict[str, asyncio.Task[bool]] = {}
    for worker in ("w1", "w2"):  # revoked: the worker rejoins reporting nothing, and is sent away
        join = join_frame(worker, ids[worker], [])
        assert (await route(bridge, worker, join)).result() is False  # answered by the bridge ...
        unsynced_round(local, worker, join)  # ... with a round it never completes
        assert local.answers[f"away-{worker}"].member_id == ids[worker]
        held[worker] = await route(bridge, worker, join_frame(worker, "", []))
        assert not held[worker].done()  # held: the upstream gets the rejoins together
    join = join_frame("w3", ids["w3"], [])
    await route(bridge, "w3", join)
    unsynced_round(local, "w3", join)
    assert G in coordinator.groups and not coordinator.groups[G].members
    assert adoption.phase(G) is OwnershipState.RELEASING  # w3's rejoin has not come back yet
    assert not any(task.done() for task in held.values())
    held["w3"] = await route(bridge, "w3", join_frame("w3", "", []))
    for worker, task in held.items():
        # released: relayed by phase, and observed (a released group can be adopted again)
        assert await asyncio.wait_for(task, 1) is True, worker
    assert adoption.phase(G) is OwnershipState.RELEASED and G not in coordinator.groups
    types = [r.type for r in bridge.submitted[-2:]]
    assert types == [RecordType.CLASSIC_GROUP, RecordType.GROUP_OWNERSHIP]
    assert bridge.submitted[-2].value is None  # the tombstone first, then ``released``
    assert bridge.durable_calls[-1] == len(bridge.submitted)
    server_relay = ServerRelay(None, lambda g: True, lambda: set(coordinator.groups), None)  # type: ignore[arg-type]
    server_relay.owner = coordinator.ownership.state
    assert not server_relay.coordinates(G, "connect")  # every request of the group goes upstream now
    code, body = await admin_handler(lambda: adoption)("POST", release_path(G))
    assert code == 200 and "is released" in json.loads(body)["message"]
    # Exactly one coordinator after a restart at each cut of the hand-back's records.
    start = next(
        i
        for i, r in enumerate(bridge.submitted)
        if r.type is RecordType.GROUP_OWNERSHIP
        and r.value is not None
        and r.value.state is OwnershipState.RELEASING
    )
    tombstone, end = len(bridge.submitted) - 2, len(bridge.submitted)
    for cut in range(start, end + 1):
        after = replayed(bridge.submitted[:cut])
        phase = after.ownership.state(G)
        assert phase is (
            OwnershipState.ADOPTED
            if cut == start
            else OwnershipState.RELEASING
            if cut < end
            else OwnershipState.RELEASED
        ), cut
        assert (G in after.groups) == (cut <= tombstone), cut  # a group only while the bridge answers


def test_a_restarted_bridge_finishes_the_hand_back() -> None:
    asyncio.run(_restart())


async def _restart() -> None:
    bridge, relay, _, _, ids = await adopted()
    assert (await bridge.adoption.command_release(G))[0]
    await revoking_generation(bridge, ids, Local(bridge, relay))
    await route(bridge, "w1", join_frame("w1", ids["w1"], []))  # w1 sent away; the bridge is killed
    records = list(bridge.submitted)

    # Restart 1: the group loads as its last generation (w1 too: a member's removal is not a record
    # of its own, as in Kafka), with fresh sessions. w2 and w3 rejoin reporting nothing and are sent
    # away; w1 and w2 come back with empty ids, w3 never does (its worker is gone): w1's rejoin,
    # reporting nothing from w1's url, shows its loaded member to be an earlier incarnation that has
    # stopped, removed at once with no hold, and the release waits settle_timeout_ms for w3.
    again = Bridge(relay)
    again.coordinator = replayed(records)
    again.adoption.settings = again.adoption.settings.model_copy(update={"settle_timeout_ms": 50})
    assert again.adoption.phase(G) is OwnershipState.RELEASING
    assert set(again.coordinator.groups[G].members) == set(ids.values())
    # The loaded group rebalances again: its last generation may not be the revoking one.
    assert again.coordinator.groups[G].state is ClassicGroupState.PREPARING_REBALANCE
    local = Local(again, relay)
    for worker in ("w2", "w3"):
        join = join_frame(worker, ids[worker], [])
        await route(again, worker, join)
        unsynced_round(local, worker, join)
    assert set(again.coordinator.groups[G].members) == {ids["w1"]}
    # w1 had its unsynced round before the restart, which the bridge kept in memory only: it gets
    # another one (its empty id is answered here, not held), then its next rejoin is held.
    back = join_frame("w1", "", [])
    assert (await route(again, "w1", back)).result() is False
    unsynced_round(local, "w1", back)
    rejoins = {w: await route(again, w, join_frame(w, "", [])) for w in ("w1", "w2")}
    assert not again.coordinator.groups[G].members  # w1's loaded member went with its rejoin
    assert again.coordinator.hand_back_hold_until(G) == -1  # it had stopped: nothing to hold
    watch = asyncio.create_task(again.adoption.watch())
    for worker, task in rejoins.items():
        assert await asyncio.wait_for(task, 2) is True, worker  # relayed (and observed)
    watch.cancel()
    assert again.adoption.phase(G) is OwnershipState.RELEASED and G not in again.coordinator.groups

    # Restart 2, killed between the tombstone and ``released``: nothing is left to wait for.
    log = records + again.submitted[1:]  # [0]: the harness's own ``relaying`` of a fresh coordinator
    cut = replayed(log[:-1])
    assert cut.ownership.state(G) is OwnershipState.RELEASING and G not in cut.groups
    third = Bridge(relay)
    third.coordinator = cut
    rejoin = await route(third, "w2", join_frame("w2", "", []))
    assert await asyncio.wait_for(rejoin, 1) is True and third.adoption.phase(G) is OwnershipState.RELEASED


def test_the_wiring_waits_out_the_hold_of_a_silent_member_before_releasing() -> None:
    asyncio.run(_silent_member())


async def _silent_member() -> None:
    """w3 falls silent during the hand-back, after joining the revoking generation still running its
    work: its session ends, and its worker may still run its tasks. w1 and w2 are sent away and
    their rejoins held. Before the engine kept a hold, the group was released once w3 was removed,
    and the upstream's leader, seeing w1 and w2 report nothing, dealt w3's tasks while w3 still ran
    them. Now ``released`` waits for the hold to end (the watch finishes it then), and the held
    rejoins go upstream only after it."""
    bridge, relay, _, _, ids = await adopted()
    adoption, coordinator = bridge.adoption, bridge.coordinator
    local = Local(bridge, relay)
    assert (await adoption.command_release(G))[0]
    await revoking_generation(bridge, ids, local)
    held: dict[str, asyncio.Task[bool]] = {}
    for worker in ("w1", "w2"):
        join = join_frame(worker, ids[worker], [])
        assert (await route(bridge, worker, join)).result() is False
        unsynced_round(local, worker, join)
        held[worker] = await route(bridge, worker, join_frame(worker, "", []))
    assert set(coordinator.groups[G].members) == {ids["w3"]}
    watch = asyncio.create_task(adoption.watch())
    try:
        removed_at = relay.now + SESSION_MS
        relay.now = removed_at
        coordinator.advance(removed_at)  # w3's session ends
        bridge.settle()
        assert not coordinator.groups[G].members
        for now in (removed_at, removed_at + coordinator.config.scheduled_rebalance_max_delay_ms - 1):
            relay.now = now
            await asyncio.sleep(0.1)  # ten watch ticks (check_interval_ms 10)
            assert adoption.phase(G) is OwnershipState.RELEASING and G in coordinator.groups, now
            assert not any(task.done() for task in held.values()), now
        hold_until = coordinator.hand_back_hold_until(G)
        assert hold_until == removed_at + coordinator.config.scheduled_rebalance_max_delay_ms
        relay.now = hold_until
        for worker, task in held.items():
            assert await asyncio.wait_for(task, 2) is True, worker  # relayed upstream now
    finally:
        watch.cancel()
    assert adoption.phase(G) is OwnershipState.RELEASED


def test_reports_nothing_reads_the_cooperative_subscriptions() -> None:
    assert not reports_nothing(wc.join_from_wire(join_frame("w1", "m", OWNED["w1"]).body, 9).protocols)
    assert reports_nothing(wc.join_from_wire(join_frame("w1", "m", []).body, 9).protocols)
    assert reports_nothing([("default", b"\x00\x00")])  # eager only: it stopped before joining
    assert not reports_nothing([("sessioned", b"garbage")])  # unreadable: the safe side


def test_release_refusals() -> None:
    asyncio.run(_refusals())


async def _refusals() -> None:
    relay = formed()[0]
    bridge = Bridge(relay)  # relaying: nothing to hand back yet
    code, body = await admin_handler(lambda: bridge.adoption)("POST", release_path(G))
    assert code == 409 and "not adopted (phase relaying)" in json.loads(body)["message"]
    code, body = await admin_handler(lambda: bridge.adoption)("POST", release_path("other"))
    assert code == 409 and "does not match adoption.groups" in json.loads(body)["message"]
    code, body = await admin_handler(lambda: None)("POST", release_path(G))
    assert code == 409 and "adoption is off" in json.loads(body)["message"]


def test_release_command_errors_are_one_line(capsys: Any) -> None:
    import socket

    from connect_bridge.cli import main

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert main(["release", G, "--admin", f"127.0.0.1:{closed}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("connect-bridge: cannot reach the bridge's admin endpoint") and err.count("\n") == 1
    assert main(["release", G, "--admin", "nowhere"]) == 1
    assert capsys.readouterr().err.startswith("connect-bridge: --admin: expected HOST:PORT")


def test_a_group_with_new_protocol_members_is_not_handed_back() -> None:
    """Kafka's coordinator does not speak the new protocol: downgrade first (docs/adoption.md)."""
    from test_member_ownership import connect_member, coordinator

    coord = coordinator()
    connect_member(coord)
    coord.change_ownership(G, OwnershipState.ADOPTED, 3, 0)
    refusal = r"1 member\(s\) use the new protocol: downgrade them first \(connect-bridge docs migration\)"
    with pytest.raises(AdoptionError, match=refusal):
        coord.start_release(G, 0)
    assert coord.ownership.state(G) is OwnershipState.ADOPTED


def test_describe_shows_the_hand_back() -> None:
    from connect_bridge.bridge.describe_view import adoption_line

    releasing = {"phase": "releasing", "bridge_members": 2, "taken_over_generation": 12}
    assert adoption_line(releasing) == "  adoption: releasing, members left in the bridge's group 2"
    released = {"phase": "released", "taken_over_generation": 12}
    assert adoption_line(released) == "  adoption: released, the upstream coordinator has the group again"
