"""Adopting a released group again (issue 16, docs/adoption.md "Adopting a released group again").

``connect-bridge adopt GROUP`` (``POST /admin/groups/GROUP/adopt``) on a ``released`` group writes
``relaying`` (durable before anything else), then takes the normal adoption path: the takeover
condition on a fresh upstream DescribeGroups, the group's records, durable before any request is
answered locally. Fast and in-process, on the harness of ``tests/test_adoption_wiring.py`` and
``tests/test_adoption_handback.py`` (the upstream is the bridge's classic engine behind
``tests/adoption_relay.py``, frames at Java Connect 4.3.1's versions). A restart (replay) at each
cut of the records ends with exactly one coordinator.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from adoption_relay import G, Relay
from connect_bridge.bridge.admin import admin_handler, adopt_path
from connect_bridge.state.adoption.records import OwnershipState
from connect_bridge.state.records import RecordType
from test_adoption_handback import Local, adopted, join_frame, replayed, revoking_generation, route
from test_adoption_wiring import WORKERS, Bridge, Recorder


async def released() -> tuple[Bridge, Relay, Recorder, dict[str, str]]:
    """A group taken over and handed back (every worker sent away and its rejoin relayed once
    ``released`` was durable); then Kafka's coordinator forms its group of the three workers
    again, through the bridge: the worker -> member id map of that upstream generation."""
    bridge, relay, recorder, _, ids = await adopted()
    local = Local(bridge, relay)
    assert (await bridge.adoption.command_release(G))[0]
    await revoking_generation(bridge, ids, local)
    held = {}
    for worker in WORKERS:
        join = join_frame(worker, ids[worker], [])
        assert (await route(bridge, worker, join)).result() is False
        local(join, f"away-{worker}")
        held[worker] = await route(bridge, worker, join_frame(worker, "", []))
    for task in held.values():
        assert await asyncio.wait_for(task, 1) is True  # relayed upstream, observed
        bridge.adoption.not_relayed(G)  # the harness forms the upstream generation itself, below
    assert bridge.adoption.phase(G) is OwnershipState.RELEASED and G not in bridge.coordinator.groups
    recorder.exchanges.clear()
    _, upstream_ids, _ = relay.form_generation(WORKERS)
    for request, response in recorder.exchanges:
        await bridge.relay_exchange(request, response)  # asserts: relayed as a group under adoption
    return bridge, relay, recorder, upstream_ids


def test_adopting_a_released_group_again() -> None:
    asyncio.run(_adopt_again())


async def _adopt_again() -> None:
    bridge, relay, _, ids = await released()
    adoption, coordinator = bridge.adoption, bridge.coordinator
    status = adoption.status()[G]  # the upstream generation after the hand-back was observed
    assert (status["phase"], status["members_behind_bridge"], status["members"]) == ("released", 3, 3)
    start = len(bridge.submitted)
    code, body = await admin_handler(lambda: adoption)("POST", adopt_path(G))
    answer = json.loads(body)
    assert code == 200 and answer["adopted"], answer
    upstream_generation = relay.described()  # emptied by the takeover's LeaveGroup
    assert upstream_generation.members == () and sorted(bridge.upstream.left[-3:]) == sorted(ids.values())
    added = bridge.submitted[start:]
    assert [(r.type, getattr(r.value, "state", None)) for r in added] == [
        (RecordType.GROUP_OWNERSHIP, OwnershipState.RELAYING),
        (RecordType.CLASSIC_GROUP, None),
        (RecordType.GROUP_OWNERSHIP, OwnershipState.ADOPTED),
    ]
    # ``relaying`` was durable before the takeover started, the group's records before the answer.
    assert bridge.durable_calls[-2:] == [start + 1, start + 3]
    group = coordinator.groups[G]
    assert set(group.members) == set(ids.values())
    generation = added[-1].value.generation
    assert group.generation_id == generation and f"adopted at generation {generation}" in answer["message"]
    assert adoption.status()[G]["taken_over_generation"] == generation

    # A restart at every cut of the records, from ``released`` on: exactly one coordinator.
    for cut in range(start, len(bridge.submitted) + 1):
        after = replayed(bridge.submitted[:cut])
        phase = after.ownership.state(G)
        expected = [OwnershipState.RELEASED, OwnershipState.RELAYING, OwnershipState.RELAYING]
        assert phase is (expected[cut - start] if cut - start < 3 else OwnershipState.ADOPTED), cut
        # the bridge holds a group exactly when it is the coordinator (the cut between the group
        # snapshot and ``adopted`` drops the snapshot: the upstream still has the group)
        assert (G in after.groups) == phase.bridge_coordinates, (cut, phase)
    assert set(replayed(bridge.submitted).groups[G].members) == set(ids.values())


def test_adopting_a_released_group_after_a_restart_waits_for_a_complete_generation() -> None:
    asyncio.run(_after_restart())


async def _after_restart() -> None:
    bridge, relay, recorder, ids = await released()
    # The bridge restarts while the group is released: the observation (soft state) is gone.
    again = Bridge(relay)
    again.coordinator = replayed(bridge.submitted)
    assert again.adoption.phase(G) is OwnershipState.RELEASED
    start = len(again.submitted)
    code, body = await admin_handler(lambda: again.adoption)("POST", adopt_path(G))
    message = json.loads(body)["message"]
    assert code == 409 and "is relaying again (it was released) but not adopted yet" in message, message
    assert "no generation" in message and "on the next adopt" in message, message
    assert again.adoption.phase(G) is OwnershipState.RELAYING and G not in again.coordinator.groups
    assert [r.value.state for r in again.submitted[start:]] == [OwnershipState.RELAYING]
    assert again.durable_calls[-1] == start + 1
    # Asked again while relaying: refused the ordinary way (nothing more is written).
    code, body = await admin_handler(lambda: again.adoption)("POST", adopt_path(G))
    assert code == 409 and json.loads(body)["message"].startswith(f"group {G} not adopted:"), body
    assert len(again.submitted) == start + 1

    # The next rebalance upstream, seen through the bridge, completes the observation.
    recorder.exchanges.clear()
    rebalance(relay, ids)
    for request, response in recorder.exchanges:
        await again.relay_exchange(request, response)
    code, body = await admin_handler(lambda: again.adoption)("POST", adopt_path(G))
    assert code == 200 and json.loads(body)["adopted"], body
    assert set(again.coordinator.groups[G].members) == set(ids.values())


def rebalance(relay: Relay, ids: dict[str, str]) -> None:
    """Every worker rejoins with its member id (the leader's rejoin starts a rebalance, as in
    Kafka), the join completes, the leader assigns and everyone syncs: a new generation."""
    joins = {w: relay.join(w, ids[w])[0] for w in WORKERS}
    relay.at(relay.now + 1)
    answers: dict[str, Any] = {w: relay.answers[c] for w, c in joins.items()}
    assert all(a.error_code == 0 for a in answers.values()), answers
    generation = answers[WORKERS[0]].generation_id
    leader = next(w for w, a in answers.items() if a.member_id == a.leader)
    relay.sync(leader, ids[leader], generation, {ids[w]: f"gen{generation}:{w}".encode() for w in WORKERS})
    for worker in WORKERS:
        if worker != leader:
            assert relay.sync(worker, ids[worker], generation)[1].error_code == 0
