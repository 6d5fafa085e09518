"""Which membership requests a proxy-mode bridge answers itself and which it relays upstream.

A Connect worker drops its member id when its coordinator answers UNKNOWN_MEMBER_ID, and rejoins
as a new member. The upstream broker answers exactly that for a member it never saw, so a
membership request of a group the bridge coordinates must never be relayed while the bridge cannot
answer it: its state still loading (a restart), or, with several bridges, the group's partition
owned by another bridge or loading here. It is answered here instead (COORDINATOR_LOAD_IN_PROGRESS,
NOT_COORDINATOR), and the worker retries or looks the coordinator up again, keeping its id. Found
by the Java failover drill (`tests/test_ha_java.py`) on a loaded machine.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from kafka.protocol.consumer.group import HeartbeatRequest, LeaveGroupRequest, SyncGroupRequest

from connect_bridge.bridge.proxy.listeners import refused_here
from connect_bridge.bridge.proxy.relay import Relay
from connect_bridge.codecs.requests import decode_request, encode_request

OURS, BROKERS = "connect-cluster", "payments"


def relay(refused: set[str], held: frozenset[str] = frozenset()) -> Relay:
    return Relay(
        None,  # type: ignore[arg-type]  # the cluster: routing alone reaches no broker
        lambda g: g.startswith("connect"),
        lambda: held,
        None,  # type: ignore[arg-type]
        refused_here=refused.__contains__,
    )


def frames(group: str) -> dict[str, Any]:
    heartbeat = HeartbeatRequest(group_id=group, generation_id=3, member_id="m-1", group_instance_id=None)
    leave = LeaveGroupRequest(group_id=group, members=[])
    sync = SyncGroupRequest(
        group_id=group,
        generation_id=3,
        member_id="m-1",
        group_instance_id=None,
        protocol_type="connect",
        protocol_name="sessioned",
        assignments=[],
    )
    return {
        "heartbeat": decode_request(encode_request(heartbeat, 4, 1, "w1")),
        "leave": decode_request(encode_request(leave, 4, 2, "w1")),
        "sync": decode_request(encode_request(sync, 5, 3, "w1")),
    }


@pytest.mark.parametrize("request_name", ["heartbeat", "sync", "leave"])
def test_a_member_of_a_group_the_bridge_cannot_answer_now_is_answered_here(request_name: str) -> None:
    decoded = frames(OURS)[request_name]
    # Not held here yet (loading, or another bridge's partition): answered here, never relayed.
    assert relay({OURS}).answers_locally(decoded.api_key, decoded)
    # Answerable and not held: a matching group the bridge does not hold is the broker's (a sink
    # connector's consumer group), relayed as before.
    assert not relay(set()).answers_locally(decoded.api_key, decoded)
    # Held: answered here either way.
    assert relay(set(), frozenset({OURS})).answers_locally(decoded.api_key, decoded)
    # A group whose id does not match is always the broker's.
    other = frames(BROKERS)[request_name]
    assert not relay({BROKERS}).answers_locally(other.api_key, other)


def test_refused_while_loading_and_where_another_bridge_owns_the_partition() -> None:
    runtime = SimpleNamespace(loaded=False)
    alone = refused_here(runtime, None)  # type: ignore[arg-type]
    assert alone(OURS)
    runtime.loaded = True
    assert not alone(OURS)
    gate = SimpleNamespace(not_owned_here=lambda g: g == OURS)
    several = refused_here(runtime, gate)  # type: ignore[arg-type]
    assert several(OURS) and not several("connect-mine")
    runtime.loaded = False
    assert several("connect-mine")
