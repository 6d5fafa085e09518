"""A legacy (classic-protocol) Connect worker's group logic, free of I/O.

It is Connect's ``WorkerCoordinator`` (on top of Kafka's ``AbstractCoordinator``) plus the group part
of ``DistributedHerder``: JoinGroup with one subscription per advertised protocol, the leader's
assignor, SyncGroup, applying assignments (eager: complete sets after stopping everything; v1/v2:
``previous - revoked + delta``), rejoining after a revocation or when the scheduled delay expires,
and Kafka's error handling for JoinGroup / SyncGroup / Heartbeat.

Nothing here opens sockets, reads a clock or sleeps. A driver asks :meth:`LegacyWorker.next_action`
what to do and when, sends the requests the worker builds, and feeds the responses back. Every step
returns a :class:`Reaction` listing the items to stop and start, so the driver can emit ``release`` /
``run`` events. The same object can sit behind a kafka-python ``BaseCoordinator`` subclass through
the hook-shaped methods :meth:`protocols`, :meth:`prepare_join`, :meth:`perform_assignment` and
:meth:`on_join_complete`.

Behaviour follows the Java; where it deliberately does not, ``docs/legacy-workers.md`` says why.

This module holds the steps; the member's state and plumbing are :mod:`.legacy_member`, the
vocabulary (:class:`Reaction`, :class:`NextAction`, member states, error outcome tables) is
:mod:`.legacy_protocol`, and the assignment steps (leader and member) are :mod:`.legacy_assignment`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from connect_bridge.codecs.connect_protocol import (
    CONNECT_PROTOCOL_NAMES,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.error_codes import error_name
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.classic.api import (
    NO_GENERATION,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeavingMember,
    SyncGroupRequest,
    SyncGroupResponse,
)
from connect_bridge.state.model import EMPTY, ConfigView
from connect_bridge.workers.connect_assignors import NO_ERROR
from connect_bridge.workers.legacy_assignment import LeaderStateMissing, apply_assignment, full_assignment
from connect_bridge.workers.legacy_member import LegacyMember
from connect_bridge.workers.legacy_protocol import (
    EAGER_PROTOCOL,
    HEARTBEAT_OUTCOMES,
    JOIN_OUTCOMES,
    MODE_PROTOCOLS,
    PROTOCOL_TYPE,
    SYNC_OUTCOMES,
    ActionKind,
    MemberEvent,
    MemberState,
    Mode,
    NextAction,
    Outcome,
    Reaction,
)

__all__ = [
    "MODE_PROTOCOLS",
    "PROTOCOL_TYPE",
    "ActionKind",
    "LeaderStateMissing",
    "LegacyWorker",
    "MemberState",
    "Mode",
    "NextAction",
    "Reaction",
]

_S = MemberState


def _same_parts(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """The same mode, url and config offset (equal, and of the same type: the encoder tells ``1``
    from ``True``) and the same assignment object."""
    return a[3] is b[3] and all(
        x is y or (type(x) is type(y) and x == y) for x, y in zip(a[:3], b[:3], strict=True)
    )


class LegacyWorker(LegacyMember):
    """One Connect worker speaking the classic group protocol (eager, compatible or sessioned).

    ``config`` is the worker's view of the config topic, ``(offset, {connector: task_count})``: pass
    ``config_provider`` to have it re-read whenever Java would read the config topic, or set the
    :attr:`config` attribute from the driver.
    """

    _last_protocols: tuple[tuple[Any, ...], tuple[tuple[str, bytes], ...]] | None = None
    """The last :meth:`protocols` answer and what it was made of."""
    _last_heartbeat: HeartbeatRequest | None = None
    """The last :meth:`heartbeat_request`: the same (frozen) request while its fields are."""

    # -- joining -----------------------------------------------------------------------------------

    def protocols(self) -> tuple[tuple[str, bytes], ...]:
        """``WorkerCoordinator.metadata()``: one subscription per advertised protocol, each at its
        own version; v1/v2 carry the full current assignment (null when there is none)."""
        self._config_snapshot = self._read_config()
        # A worker rejoins many times with the same metadata: the last answer is kept with what it
        # was made of (the assignment held by identity: it is frozen), so only a change encodes.
        made_of = (self.mode, self.url, self._config_snapshot.offset, self.snapshot)
        last = self._last_protocols
        if last is not None and _same_parts(last[0], made_of):
            return last[1]
        out = []
        for name in MODE_PROTOCOLS[self.mode]:
            version = CONNECT_PROTOCOL_NAMES[name]
            out.append((name, encode_subscription(self._subscription(version), version)))
        protocols = tuple(out)
        self._last_protocols = (made_of, protocols)
        return protocols

    def _subscription(self, version: int) -> Subscription:
        allocation = self.snapshot if version > 0 else None
        return Subscription(self.url, self._config_snapshot.offset, allocation)

    def prepare_join(self, now_ms: int) -> Reaction:
        """``onJoinPrepare``, once per rebalance: under the eager protocol, stop everything first.

        Cooperative workers keep running until something is explicitly revoked (unless
        ``revoke_on_generation_reset`` is set and the generation was lost).
        """
        if not self._needs_join_prepare or self.state is MemberState.DEAD:
            return Reaction(generation=self.generation)
        self._needs_join_prepare = False
        self.leader_state = None  # Java: leaderState(null)
        lost_generation = self.generation == NO_GENERATION and self.snapshot is not None
        eager = self.current_protocol == EAGER_PROTOCOL
        if eager or (self.revoke_on_generation_reset and lost_generation):
            stop = self.running
            self.running = EMPTY
            if not eager:
                self.snapshot = None  # nothing owned any more: rejoin with a null allocation
            return Reaction(stop=stop, generation=self.generation)
        return Reaction(generation=self.generation)

    def join_request(self, now_ms: int, reason: str | None = None) -> JoinGroupRequest:
        """The JoinGroup to send; :meth:`prepare_join` must have run for this rebalance."""
        if self.state is MemberState.DEAD:
            raise RuntimeError("the worker is dead")
        if self._needs_join_prepare:
            raise RuntimeError("call prepare_join() first: a new rebalance may have to stop work")
        self._transition(MemberEvent.JOIN_SENT)
        self._join_in_flight = True
        self._sync_in_flight = False
        return JoinGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=self.protocols(),
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            group_instance_id=self.instance_id,
            reason=reason if reason is not None else self._join_reason(now_ms),
        )

    def on_join_response(self, resp: JoinGroupResponse, now_ms: int) -> Reaction:
        """Kafka's ``JoinGroupResponseHandler``; on success the SyncGroup goes out in ``request``."""
        if not self._join_in_flight or self.state is MemberState.DEAD:
            return Reaction(generation=self.generation)  # stale: not waiting for a JoinGroup
        self._join_in_flight = False
        outcome = JOIN_OUTCOMES.get(resp.error_code, Outcome.FATAL)
        if outcome is Outcome.OK:
            return self._joined(resp, now_ms)
        if outcome is Outcome.MEMBER_ID:
            self.member_id = resp.member_id
            self.generation = NO_GENERATION
            self._rejoin_needed = True
            return Reaction(rejoin=True, generation=self.generation)
        return self._failed(outcome, resp.error_code, "JoinGroup", now_ms)

    def _failed(self, outcome: Outcome, code: int, api: str, now_ms: int) -> Reaction:
        """The common error outcomes of JoinGroup and SyncGroup (``joinGroupIfNeeded``)."""
        if outcome is Outcome.FATAL:
            return self._die(f"{api} failed: {error_name(code)}")
        if outcome is Outcome.RESET_REJOIN:
            self._reset_generation(reset_member_id=True)
        elif outcome is Outcome.RESET_GENERATION_REJOIN:
            self._reset_generation(reset_member_id=False)
        elif outcome is Outcome.RETRY:
            self._retry_at_ms = now_ms + self.retry_backoff_ms
        self._rejoin_needed = True
        return Reaction(rejoin=True, generation=self.generation)

    def _joined(self, resp: JoinGroupResponse, now_ms: int) -> Reaction:
        if resp.protocol_type is not None and resp.protocol_type != PROTOCOL_TYPE:
            return self._die(f"JoinGroup failed: INCONSISTENT_GROUP_PROTOCOL (type {resp.protocol_type!r})")
        if resp.protocol_name not in CONNECT_PROTOCOL_NAMES:
            return self._die(f"JoinGroup elected an unknown Connect protocol {resp.protocol_name!r}")
        self._transition(MemberEvent.JOINED)
        self.generation = resp.generation_id
        self.member_id = resp.member_id
        self.protocol = resp.protocol_name
        self._heartbeat_base_ms = now_ms  # the heartbeat thread is enabled: timeouts reset
        self._heartbeat_retry = False
        stopped = EMPTY
        if resp.protocol_name == EAGER_PROTOCOL and self.current_protocol != EAGER_PROTOCOL:
            # Deviation from Java (docs/legacy-workers.md): a cooperative worker learning that the
            # group went eager stops everything now, as eager workers did before joining, so no
            # eager assignment can hand its work to someone else while it still runs it.
            stopped, self.running = self.running, EMPTY
        assignments: Mapping[str, bytes] = {}
        if resp.leader == resp.member_id and resp.members:
            if resp.skip_assignment:
                return self._die("Can't skip assignment because Connect does not support static membership.")
            try:
                assignments = self.perform_assignment(
                    resp.leader, resp.protocol_name, resp.members, resp.generation_id, now_ms
                )
            except CodecError as exc:
                return self._die(f"leader could not decode member metadata: {exc}")
        self._sync_in_flight = True
        request = SyncGroupRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            generation_id=self.generation,
            group_instance_id=self.instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol,
            assignments=tuple(sorted(assignments.items())),
        )
        return Reaction(stop=stopped, request=request, generation=self.generation)

    def perform_assignment(
        self,
        leader_id: str,
        protocol: str,
        members: Sequence[JoinGroupMember] | Mapping[str, bytes],
        generation: int,
        now_ms: int,
    ) -> dict[str, bytes]:
        """``onLeaderElected``: decode every member's metadata, run the elected protocol's assignor
        (its config view is this worker's own), and encode at that protocol's version."""
        raw = (
            members.items() if isinstance(members, Mapping) else ((m.member_id, m.metadata) for m in members)
        )
        subscriptions = {member_id: decode_subscription(metadata) for member_id, metadata in raw}
        planned = self._leader.assign(
            leader_id,
            protocol,
            subscriptions,
            generation,
            now_ms,
            self._config_snapshot,
            self.last_completed_generation,
            self._refresh_snapshot,
        )
        if planned.downgrading:
            self._rejoin_after_sync = True
        self.leader_state = planned.leader_state
        return {mid: encode_assignment(asg, planned.version) for mid, asg in planned.assignments.items()}

    def owner_url(self, item: ConnectorTaskId, now_ms: int) -> str | None:
        """``WorkerCoordinator.ownerUrl``: where the leader routes a REST restart of ``item``.

        ``None`` when this worker is not the leader or a rebalance is pending. A worker that is named
        leader in its assignment without ever having run its assignor has no leader state: Java
        fails there (a NullPointerException behind a REST 500), and so does this.
        """
        if self.needs_rejoin(now_ms) or not self.is_leader:
            return None
        if self.leader_state is None:
            raise LeaderStateMissing(f"worker {self.member_id} is named leader but was never elected")
        return self.leader_state.get(item)

    def _refresh_snapshot(self) -> ConfigView:
        """``configFreshSnapshot`` + ``configSnapshot(updated)``: a lagging leader catches up."""
        self._config_snapshot = self._read_config()
        return self._config_snapshot

    # -- syncing -----------------------------------------------------------------------------------

    def on_sync_response(self, resp: SyncGroupResponse, now_ms: int) -> Reaction:
        """Kafka's ``SyncGroupResponseHandler``, then :meth:`on_join_complete` on success."""
        if not self._sync_in_flight or self.state is MemberState.DEAD:
            return Reaction(generation=self.generation)
        self._sync_in_flight = False
        outcome = SYNC_OUTCOMES.get(resp.error_code, Outcome.FATAL)
        if outcome is not Outcome.OK:
            return self._failed(outcome, resp.error_code, "SyncGroup", now_ms)
        if resp.protocol_type is not None and resp.protocol_type != PROTOCOL_TYPE:
            return self._die(f"SyncGroup failed: INCONSISTENT_GROUP_PROTOCOL (type {resp.protocol_type!r})")
        if resp.protocol_name is not None and resp.protocol_name != self.protocol:
            return self._die(f"SyncGroup failed: INCONSISTENT_GROUP_PROTOCOL (name {resp.protocol_name!r})")
        assert self.protocol is not None  # set by the successful JoinGroup
        return self.on_join_complete(self.generation, self.member_id, self.protocol, resp.assignment, now_ms)

    def on_join_complete(
        self, generation: int, member_id: str, protocol: str, assignment: bytes, now_ms: int
    ) -> Reaction:
        """``WorkerCoordinator.onJoinComplete`` + ``DistributedHerder.onAssigned`` +
        ``handleRebalanceCompleted``: apply the assignment and start work if the config allows."""
        if self.state is MemberState.DEAD:
            return Reaction(generation=self.generation)
        try:
            new = decode_assignment(assignment)
        except CodecError as exc:
            return self._die(f"undecodable assignment: {exc}")
        if self.state is MemberState.COMPLETING_REBALANCE:
            self._transition(MemberEvent.SYNCED)
        else:  # driven through the hook API (kafka-python), which owns the protocol state itself
            self.state = MemberState.STABLE
        self.generation, self.member_id, self.protocol = generation, member_id, protocol
        self._rejoin_needed = False
        # the downgrade's second rebalance, or a config change that arrived mid-rebalance
        self._rejoin_requested = self._rejoin_after_sync or self._reconfig_pending
        self._rejoin_after_sync = self._reconfig_pending = False
        self._needs_join_prepare = True
        self.current_protocol = protocol

        stop, self.snapshot = apply_assignment(self.snapshot, new, protocol, self.running)
        self.running -= stop
        reaction = Reaction(stop=stop, generation=generation)
        self.last_completed_generation = generation
        if generation != self.held_generation:
            self.held_generation = generation
            reaction.generation_changed = True

        self.leader_id, self.leader_url = new.leader, new.leader_url
        delay = new.delay_ms
        self._scheduled_rebalance_ms = now_ms + delay if delay > 0 else None
        reaction.rejoin_at_ms = self._scheduled_rebalance_ms
        self._resolve(now_ms, reaction)
        return reaction

    def _resolve(self, now_ms: int, reaction: Reaction) -> None:
        """``handleRebalanceCompleted``: catch up on config, start the work, rejoin when needed."""
        assert self.snapshot is not None
        if self.config_provider is not None:
            self._read_config()  # the herder's config state follows the config topic on its own
        target = self.snapshot.config_offset
        needs_read = needs_rejoin = False
        if self.snapshot.error != NO_ERROR:
            needs_rejoin = True
            needs_read = self.is_leader or self.config.offset < target
        elif self.config.offset < target:
            needs_read = True
        if needs_read:
            self._catch_up(target)
        if needs_rejoin or self.config.offset != target:
            # Not caught up (or went past the leader's offset): start nothing, rejoin.
            self._request_rejoin()
            reaction.rejoin = True
            return
        # The herder never starts a connector or task missing from its config (it was removed).
        items = frozenset(self.snapshot.items) & self.config.items()
        if len(items) != len(self.snapshot.items):
            # ... and does not report it as running in its next allocation (docs/legacy-workers.md).
            self.snapshot = full_assignment(self.snapshot, [i for i in self.snapshot.items if i in items])
        reaction.stop |= self.running - items  # only ever non-empty after a protocol switch
        reaction.start = items - self.running
        self.running = items
        if self.snapshot.revoked_items:
            # Revoked work is stopped and the rest started: rejoin so the freed work can move.
            self.snapshot = Assignment.build(
                self.snapshot.error,
                self.snapshot.leader,
                self.snapshot.leader_url,
                target,
                self.snapshot.items,
                (),
                self.snapshot.delay_ms,
            )
            self._request_rejoin()
            reaction.rejoin = True

    def _catch_up(self, offset: int) -> None:
        """Read the config topic to the end. Without a provider the attribute is all there is to read;
        the worker then trusts the leader's offset (the simulated topic holds what the leader read)."""
        view = self._read_config()
        if self.config_provider is None and view.offset < offset:
            self.config = ConfigView(offset, view.connectors)

    # -- heartbeats --------------------------------------------------------------------------------

    def heartbeat_request(self, now_ms: int) -> HeartbeatRequest:
        """The next heartbeat (only once JoinGroup succeeded: COMPLETING_REBALANCE or STABLE)."""
        if self.state not in (_S.COMPLETING_REBALANCE, _S.STABLE):
            raise RuntimeError(f"no heartbeats in state {self.state}")
        self._heartbeat_in_flight = True
        self._heartbeat_base_ms = now_ms
        generation, member_id = self.generation, self.member_id
        self._heartbeat_sent_generation = (generation, member_id)
        last = self._last_heartbeat
        if (
            last is None
            or last.generation_id != generation
            or last.member_id != member_id
            or last.group_instance_id != self.instance_id
            or last.group_id != self.group_id
        ):
            last = HeartbeatRequest(self.group_id, member_id, generation, self.instance_id)
            self._last_heartbeat = last
        return last

    def on_heartbeat_response(self, resp: HeartbeatResponse, now_ms: int) -> Reaction:
        """Kafka's ``HeartbeatResponseHandler``: rejoin, reset, retry or die."""
        if not self._heartbeat_in_flight or self.state is MemberState.DEAD:
            return Reaction(generation=self.generation)
        self._heartbeat_in_flight = False
        self._heartbeat_retry = False
        outcome = HEARTBEAT_OUTCOMES.get(resp.error_code, Outcome.FATAL)
        if outcome is Outcome.OK:
            return Reaction(generation=self.generation)
        if outcome is Outcome.FATAL:
            return self._die(f"Heartbeat failed: {error_name(resp.error_code)}")
        if outcome is Outcome.RETRY:
            self._heartbeat_retry = True
            return Reaction(generation=self.generation)
        if outcome is Outcome.REJOIN:
            if self.state is not MemberState.STABLE:
                return Reaction(generation=self.generation)  # already rebalancing: keep heartbeating
            self._rejoin_needed = True
            return Reaction(rejoin=True, generation=self.generation)
        if self._heartbeat_sent_generation != (self.generation, self.member_id):
            return Reaction(generation=self.generation)  # about an older generation: ignore
        self._reset_generation(reset_member_id=outcome is Outcome.RESET_REJOIN)
        self._join_in_flight = self._sync_in_flight = False
        return Reaction(rejoin=True, generation=self.generation)

    # -- leaving -----------------------------------------------------------------------------------

    def leave_request(self, reason: str = "the worker is stopping") -> LeaveGroupRequest | None:
        """``maybeLeaveGroup``: dynamic members with a member id leave; static members never do (their
        membership ends only by session timeout)."""
        if self.instance_id is not None or not self.member_id or self.state in (_S.UNJOINED, _S.DEAD):
            return None
        return LeaveGroupRequest(self.group_id, (LeavingMember(self.member_id, None, reason),))

    def poll_timeout_leave(self) -> LeaveGroupRequest | None:
        """The heartbeat thread after the herder has not polled for the rebalance timeout
        (``AbstractCoordinator.HeartbeatThread``: "consumer poll timeout has expired"): leave the
        group and forget the generation and member id. Tasks keep running (Connect revokes nothing
        here); the herder rejoins when it polls again. Static members send no LeaveGroup."""
        if self.state is MemberState.DEAD:
            return None
        request = self.leave_request("consumer poll timeout has expired")
        self._reset_generation(reset_member_id=True)
        self._join_in_flight = self._sync_in_flight = self._heartbeat_in_flight = False
        self._rejoin_needed = True
        return request

    def shutdown(self, now_ms: int) -> Reaction:
        """Graceful stop (``DistributedHerder.halt``): stop all work, then leave the group."""
        leave = self.leave_request()
        reaction = self._die(None)
        reaction.request = leave
        return reaction

    def coordinator_lost(self, now_ms: int) -> Reaction:
        """The coordinator was unreachable for a heartbeat interval (``WorkerCoordinator.poll``,
        KAFKA-9184): revoke the whole assignment so no work runs outside the group, and rejoin."""
        if self.state is MemberState.DEAD:
            return Reaction(generation=self.generation)
        stop: frozenset[ConnectorTaskId] = frozenset()
        if self.snapshot is not None and self.snapshot.error == NO_ERROR:
            stop = self.running
            self.running = EMPTY
            self.snapshot = None
        self._join_in_flight = self._sync_in_flight = self._heartbeat_in_flight = False
        self._retry_at_ms = now_ms + self.retry_backoff_ms
        return Reaction(stop=stop, rejoin=True, generation=self.generation)
