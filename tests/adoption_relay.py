"""A small relay for the adoption tests: kafka-python frames in, an upstream coordinator, frames out.

The "upstream" is the bridge's own classic group engine (``GroupCoordinator``), which answers the
classic APIs as Apache Kafka 4.3.1's coordinator does (``tests/test_classic_differential.py``
compares them request by request). Every exchange travels as the bytes a relay sees: the request is
built with kafka-python's own message classes at the versions Java Connect 4.3.1 workers use
(JoinGroup v9, SyncGroup v5, Heartbeat v4, LeaveGroup v5) and framed with a request header; the
upstream's answer is written with kafka-python's response classes and framed; both frames go to a
:class:`RelayObserver`, exactly as ``bridge/proxy/relay.py`` will hand them over.
"""

from __future__ import annotations

import itertools
from typing import Any

from kafka.protocol.admin.groups import DescribeGroupsRequest, DescribeGroupsResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from connect_bridge.bridge.adoption.observer import RelayObserver
from connect_bridge.codecs.requests import decode_request, encode_request, encode_response_frame
from connect_bridge.state.classic import api as capi
from connect_bridge.state.classic.state import ClassicDescribedGroup
from connect_bridge.state.config import CoordinatorConfig
from connect_bridge.state.coordinator import GroupCoordinator
from connect_bridge.wire import classic as wc

G = "connect-cluster"
JOIN_V, SYNC_V, HEARTBEAT_V, LEAVE_V, DESCRIBE_V = 9, 5, 4, 5, 5
SESSION_MS = 10_000
REBALANCE_MS = 60_000


def protocols(name: str) -> tuple[tuple[str, bytes], ...]:
    """A Connect worker's JoinGroup protocols (opaque metadata, distinct per worker)."""
    return (
        ("sessioned", f"sessioned:{name}".encode()),
        ("compatible", f"compatible:{name}".encode()),
        ("default", f"default:{name}".encode()),
    )


class Relay:
    """Clients -> frames -> upstream engine -> frames -> observer, with a manual clock."""

    def __init__(self, observer: RelayObserver | None = None) -> None:
        config = CoordinatorConfig(
            classic_initial_rebalance_delay_ms=0, classic_cooperative_switch_rebalance_ms=None
        )
        self.upstream = GroupCoordinator(config)
        self.observer = observer or RelayObserver()
        self.now = 1_000
        self._corr = itertools.count(1)
        self._parked: dict[int, tuple[bytes, int, int, str | None]] = {}
        self.answers: dict[int, Any] = {}
        """Correlation id -> the kafka-python response sent back to the client."""

    # ------------------------------------------------------------------ plumbing
    def _send(self, msg: Any, version: int, client_id: str, host: str, observe: bool) -> tuple[int, Any]:
        corr = next(self._corr)
        frame = encode_request(msg, version, corr, client_id)
        decoded = decode_request(frame)
        key = decoded.api_key
        body: Any = decoded.body
        if key == JoinGroupRequest.API_KEY:
            req = wc.join_from_wire(body, version, client_id, host)
            typed = self.upstream.classic_join(_with_token(req, corr), self.now)
        elif key == SyncGroupRequest.API_KEY:
            typed = self.upstream.classic_sync(_with_token(wc.sync_from_wire(body, version), corr), self.now)
        elif key == HeartbeatRequest.API_KEY:
            typed = self.upstream.classic_heartbeat(wc.classic_heartbeat_from_wire(body, version), self.now)
        elif key == LeaveGroupRequest.API_KEY:
            typed = self.upstream.classic_leave(wc.leave_from_wire(body, version), self.now)
        else:
            raise AssertionError(f"unexpected api {key}")
        seen_from = host if observe else None
        if typed is None:
            self._parked[corr] = (frame, key, version, seen_from)
        else:
            self._reply(corr, frame, key, version, typed, seen_from)
        self._deliver()
        return corr, self.answers.get(corr)

    def _reply(self, corr: int, frame: bytes, key: int, version: int, typed: Any, host: str | None) -> None:
        """Answer the client; ``host``: the client's address, None when it bypasses the relay."""
        msg = _response_msg(key, typed)
        self.answers[corr] = msg
        if host is not None:
            self.observer.observe(frame, encode_response_frame(key, version, corr, msg), self.now, host)

    def _deliver(self) -> None:
        for token, typed in self.upstream.drain_responses():
            frame, key, version, host = self._parked.pop(token)
            self._reply(token, frame, key, version, typed, host)
        self.upstream.drain_records()

    def at(self, now_ms: int) -> None:
        """Move the upstream's clock, firing its timers (the join barrier closes here)."""
        while (deadline := self.upstream.next_deadline()) is not None and deadline <= now_ms:
            self.now = max(self.now, deadline)
            self.upstream.advance(self.now)
            self._deliver()
        self.now = now_ms
        self._deliver()

    # ------------------------------------------------------------------ client requests
    def join(
        self, client_id: str, member_id: str = "", *, instance: str | None = None, observe: bool = True
    ) -> tuple[int, Any]:
        """JoinGroup v9 of worker ``client_id``; ``observe=False``: sent straight upstream."""
        msg = JoinGroupRequest(
            group_id=G,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=REBALANCE_MS,
            member_id=member_id,
            group_instance_id=instance,
            protocol_type="connect",
            protocols=[
                JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=md)
                for n, md in protocols(client_id)
            ],
            reason=None,
        )
        return self._send(msg, JOIN_V, client_id, f"/10.0.0.{len(client_id)}", observe)

    def sync(
        self,
        client_id: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes] | None = None,
        *,
        observe: bool = True,
    ) -> tuple[int, Any]:
        msg = SyncGroupRequest(
            group_id=G,
            generation_id=generation,
            member_id=member_id,
            group_instance_id=None,
            protocol_type="connect",
            protocol_name="sessioned",
            assignments=[
                SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        return self._send(msg, SYNC_V, client_id, "", observe)

    def heartbeat(self, client_id: str, member_id: str, generation: int, *, observe: bool = True) -> int:
        msg = HeartbeatRequest(
            group_id=G, generation_id=generation, member_id=member_id, group_instance_id=None
        )
        return int(self._send(msg, HEARTBEAT_V, client_id, "", observe)[1].error_code)

    def leave(self, client_id: str, member_id: str) -> Any:
        msg = LeaveGroupRequest(
            group_id=G,
            members=[
                LeaveGroupRequest.MemberIdentity(member_id=member_id, group_instance_id=None, reason=None)
            ],
        )
        return self._send(msg, LEAVE_V, client_id, "", True)[1]

    def describe_frames(self) -> tuple[bytes, bytes]:
        """An admin client's DescribeGroups v5 of the group and the upstream's answer, as frames."""
        corr = next(self._corr)
        request = encode_request(
            DescribeGroupsRequest(groups=[G], include_authorized_operations=False), DESCRIBE_V, corr, "admin"
        )
        response = encode_response_frame(
            DescribeGroupsRequest.API_KEY, DESCRIBE_V, corr, describe_msg(self.described())
        )
        return request, response

    def described(self) -> ClassicDescribedGroup:
        """The upstream's own DescribeGroups view of the group (what the takeover check asks for)."""
        described = self.upstream.describe_any(G)
        assert isinstance(described, ClassicDescribedGroup)
        return described

    # ------------------------------------------------------------------ scenarios
    def form_generation(self, workers: list[str]) -> tuple[int, dict[str, str], dict[str, bytes]]:
        """Workers join (MEMBER_ID_REQUIRED first, as Java's client does), the leader assigns, every
        worker syncs: (generation, worker -> member id, member id -> assignment)."""
        ids: dict[str, str] = {}
        for w in workers:
            ids[w] = self.join(w)[1].member_id
        joins = {w: self.join(w, ids[w])[0] for w in workers}
        self.at(self.now + 1)
        answers = {w: self.answers[c] for w, c in joins.items()}
        assert all(a.error_code == 0 for a in answers.values()), answers
        generation = answers[workers[0]].generation_id
        leader = next(w for w, a in answers.items() if a.member_id == a.leader)
        assignments = {ids[w]: f"gen{generation}:{w}".encode() for w in workers}
        self.sync(leader, ids[leader], generation, assignments)
        for w in workers:
            if w != leader:
                assert self.sync(w, ids[w], generation)[1].error_code == 0
        return generation, ids, assignments


def _with_token(req: Any, token: int) -> Any:
    from dataclasses import replace

    return replace(req, token=token)


def _response_msg(key: int, typed: Any) -> Any:
    """The upstream's typed answer written with kafka-python's own response classes."""
    if key == JoinGroupRequest.API_KEY:
        return JoinGroupResponse(
            throttle_time_ms=0,
            error_code=typed.error_code,
            generation_id=typed.generation_id,
            protocol_type=typed.protocol_type,
            protocol_name=typed.protocol_name,
            leader=typed.leader,
            skip_assignment=typed.skip_assignment,
            member_id=typed.member_id,
            members=[
                JoinGroupResponse.JoinGroupResponseMember(
                    member_id=m.member_id, group_instance_id=m.group_instance_id, metadata=m.metadata
                )
                for m in typed.members
            ],
        )
    if key == SyncGroupRequest.API_KEY:
        return SyncGroupResponse(
            throttle_time_ms=0,
            error_code=typed.error_code,
            protocol_type=typed.protocol_type,
            protocol_name=typed.protocol_name,
            assignment=typed.assignment,
        )
    if key == HeartbeatRequest.API_KEY:
        return HeartbeatResponse(throttle_time_ms=0, error_code=typed.error_code)
    assert isinstance(typed, capi.LeaveGroupResponse)
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=typed.error_code,
        members=[
            LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
            for m, i, e in typed.members
        ],
    )


def describe_msg(g: ClassicDescribedGroup) -> Any:
    return DescribeGroupsResponse(
        throttle_time_ms=0,
        groups=[
            DescribeGroupsResponse.DescribedGroup(
                error_code=g.error_code,
                group_id=g.group_id,
                group_state=g.state,
                protocol_type=g.protocol_type,
                protocol_data=g.protocol_data,
                members=[
                    DescribeGroupsResponse.DescribedGroup.DescribedGroupMember(
                        member_id=m.member_id,
                        group_instance_id=m.group_instance_id,
                        client_id=m.client_id,
                        client_host=m.client_host,
                        member_metadata=m.metadata,
                        member_assignment=m.assignment,
                    )
                    for m in g.members
                ],
                authorized_operations=None,
            )
        ],
    )
