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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum, StrEnum
from typing import Final, Literal

from connect_bridge.codecs.connect_protocol import (
    CONNECT_PROTOCOL_NAMES,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.error_codes import ErrorCode, error_name
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.classic_api import (
    NO_GENERATION,
    UNKNOWN_MEMBER_ID,
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
from connect_bridge.state.model import EMPTY, ConfigView, Items
from connect_bridge.workers.connect_assignors import (
    DEFAULT_MAX_DELAY_MS,
    NO_ERROR,
    ConfigLike,
    EagerAssignor,
    IncrementalCooperativeAssignor,
    as_config_view,
)

__all__ = [
    "MODE_PROTOCOLS",
    "PROTOCOL_TYPE",
    "ActionKind",
    "LegacyWorker",
    "MemberState",
    "Mode",
    "NextAction",
    "Reaction",
]

PROTOCOL_TYPE: Final = "connect"

Mode = Literal["eager", "compatible", "sessioned"]

MODE_PROTOCOLS: Final[dict[str, tuple[str, ...]]] = {
    "eager": ("default",),
    "compatible": ("compatible", "default"),
    "sessioned": ("sessioned", "compatible", "default"),
}
"""What each ``connect.protocol`` mode advertises in JoinGroup, most preferred first."""

EAGER_PROTOCOL: Final = "default"

_NO_CONFIG: Final = ConfigView()
"""Offset -1, no connectors: a worker that has not read the config topic yet."""


# --------------------------------------------------------------------------------------------------
# What the worker tells its driver
# --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Reaction:
    """The outcome of one step: work to stop and start, and what the driver must do next.

    Stop before start: a driver emits every ``release`` for ``stop`` before any ``run`` for ``start``.
    """

    stop: Items = EMPTY
    start: Items = EMPTY
    generation_changed: bool = False
    """The worker now holds a new generation (its epoch): emit an ``epoch`` event."""
    generation: int = NO_GENERATION
    request: SyncGroupRequest | LeaveGroupRequest | None = None
    """A request to send right away; it already counts as in flight."""
    rejoin: bool = False
    """The worker wants to rejoin now (``next_action`` says JOIN)."""
    rejoin_at_ms: int | None = None
    """A rejoin scheduled by the assignment's delay."""
    fatal: str | None = None
    """The worker died (e.g. FENCED_INSTANCE_ID): everything it ran is in ``stop``."""

    @property
    def epoch_changed(self) -> bool:
        """Same name as the new-protocol worker's Reaction: a legacy worker's epoch is its generation."""
        return self.generation_changed


class ActionKind(StrEnum):
    JOIN = "join"
    """Call ``prepare_join`` (emit its stops) then send ``join_request`` at ``at_ms``."""
    HEARTBEAT = "heartbeat"
    """Send ``heartbeat_request`` at ``at_ms``."""
    WAIT = "wait"
    """A JoinGroup / SyncGroup / Heartbeat response is outstanding; nothing to send before ``at_ms``
    (``None``: until the response arrives)."""
    STOPPED = "stopped"
    """Dead (fatal error or shut down): nothing more to do."""


@dataclass(frozen=True, slots=True)
class NextAction:
    kind: ActionKind
    at_ms: int | None = None
    reason: str = ""


class MemberState(StrEnum):
    """``AbstractCoordinator.MemberState`` plus DEAD (fatal error or shut down)."""

    UNJOINED = "UNJOINED"
    PREPARING_REBALANCE = "PREPARING_REBALANCE"
    COMPLETING_REBALANCE = "COMPLETING_REBALANCE"
    STABLE = "STABLE"
    DEAD = "DEAD"


class _Event(Enum):
    JOIN_SENT = "join sent"
    JOINED = "joined"
    SYNCED = "synced"
    RESET = "generation reset"
    DIED = "died"


_S = MemberState
_ALIVE = (_S.UNJOINED, _S.PREPARING_REBALANCE, _S.COMPLETING_REBALANCE, _S.STABLE)
_TRANSITIONS: Final[dict[tuple[MemberState, _Event], MemberState]] = {
    # A failed SyncGroup that needs no reset rejoins straight from COMPLETING_REBALANCE.
    **{(s, _Event.JOIN_SENT): _S.PREPARING_REBALANCE for s in _ALIVE},
    (_S.PREPARING_REBALANCE, _Event.JOINED): _S.COMPLETING_REBALANCE,
    (_S.COMPLETING_REBALANCE, _Event.SYNCED): _S.STABLE,
    **{(s, _Event.RESET): _S.UNJOINED for s in _ALIVE},
    **{(s, _Event.DIED): _S.DEAD for s in (*_ALIVE, _S.DEAD)},
}
"""The member state machine; anything not listed is a driver bug (a response out of turn)."""


class _Outcome(Enum):
    """What Kafka's response handlers do with an error code (``AbstractCoordinator``)."""

    OK = "ok"
    REJOIN = "rejoin now"
    RESET_REJOIN = "reset generation and member id, rejoin now"
    RESET_GENERATION_REJOIN = "reset generation (keep member id), rejoin now"
    MEMBER_ID = "take the member id, rejoin now"
    RETRY = "coordinator not ready: retry after retry.backoff.ms"
    IGNORE = "ignore"
    FATAL = "fatal"


_E = ErrorCode
_JOIN_OUTCOMES: Final[dict[int, _Outcome]] = {
    _E.NONE: _Outcome.OK,
    _E.COORDINATOR_LOAD_IN_PROGRESS: _Outcome.RETRY,
    _E.COORDINATOR_NOT_AVAILABLE: _Outcome.RETRY,
    _E.NOT_COORDINATOR: _Outcome.RETRY,
    _E.UNKNOWN_MEMBER_ID: _Outcome.RESET_REJOIN,
    _E.MEMBER_ID_REQUIRED: _Outcome.MEMBER_ID,
    _E.REBALANCE_IN_PROGRESS: _Outcome.REJOIN,
    # FENCED_INSTANCE_ID, INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID,
    # GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, UNSUPPORTED_VERSION and anything unexpected
    # (ILLEGAL_GENERATION included: JoinGroup never returns it, Java treats it as unexpected) are fatal.
}
_SYNC_OUTCOMES: Final[dict[int, _Outcome]] = {
    _E.NONE: _Outcome.OK,
    _E.COORDINATOR_NOT_AVAILABLE: _Outcome.RETRY,
    _E.NOT_COORDINATOR: _Outcome.RETRY,
    _E.REBALANCE_IN_PROGRESS: _Outcome.REJOIN,
    _E.UNKNOWN_MEMBER_ID: _Outcome.RESET_REJOIN,
    _E.ILLEGAL_GENERATION: _Outcome.RESET_GENERATION_REJOIN,
    # COORDINATOR_LOAD_IN_PROGRESS is not handled by Java's SyncGroup handler: unexpected, fatal.
}
_HEARTBEAT_OUTCOMES: Final[dict[int, _Outcome]] = {
    _E.NONE: _Outcome.OK,
    _E.COORDINATOR_NOT_AVAILABLE: _Outcome.RETRY,
    _E.NOT_COORDINATOR: _Outcome.RETRY,
    _E.REBALANCE_IN_PROGRESS: _Outcome.REJOIN,  # only when STABLE; ignored mid-rebalance
    _E.ILLEGAL_GENERATION: _Outcome.RESET_GENERATION_REJOIN,
    _E.UNKNOWN_MEMBER_ID: _Outcome.RESET_REJOIN,
    # FENCED_INSTANCE_ID kills the heartbeat thread, and with it the worker.
}


# --------------------------------------------------------------------------------------------------
# The worker
# --------------------------------------------------------------------------------------------------


def _ordered_union(*parts: Iterable[ConnectorTaskId]) -> list[ConnectorTaskId]:
    return list(dict.fromkeys(item for part in parts for item in part))


def _full_assignment(base: Assignment, items: Iterable[ConnectorTaskId]) -> Assignment:
    """``base`` with its assignment replaced by the full set (stale revoked/delay kept, like Java)."""
    return Assignment.build(
        base.error, base.leader, base.leader_url, base.config_offset, items, base.revoked_items, base.delay_ms
    )


class LeaderStateMissing(RuntimeError):
    """A worker named Connect leader without leader state (Java: NPE in ``ownerUrl``)."""


class LegacyWorker:
    """One Connect worker speaking the classic group protocol (eager, compatible or sessioned).

    ``config`` is the worker's view of the config topic, ``(offset, {connector: task_count})``: pass
    ``config_provider`` to have it re-read whenever Java would read the config topic, or set the
    :attr:`config` attribute from the driver.
    """

    def __init__(
        self,
        group_id: str,
        url: str,
        mode: Mode,
        session_timeout_ms: int = 10_000,
        rebalance_timeout_ms: int = 60_000,
        heartbeat_interval_ms: int = 3_000,
        instance_id: str | None = None,
        config: ConfigLike = _NO_CONFIG,
        config_provider: Callable[[], ConfigLike] | None = None,
        *,
        max_delay_ms: int = DEFAULT_MAX_DELAY_MS,
        retry_backoff_ms: int = 100,
        revoke_on_generation_reset: bool = False,
    ) -> None:
        if mode not in MODE_PROTOCOLS:
            raise ValueError(
                f"unknown connect.protocol mode {mode!r}; expected one of {sorted(MODE_PROTOCOLS)}"
            )
        self.group_id = group_id
        self.url = url
        self.mode: Mode = mode
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.instance_id = instance_id
        self.config_provider = config_provider
        self._config = as_config_view(config_provider() if config_provider else config)
        self.retry_backoff_ms = retry_backoff_ms
        self.revoke_on_generation_reset = revoke_on_generation_reset
        """Off = Java (a cooperative worker keeps running after losing its generation). On = the
        consumer's rule: stop everything and rejoin with no allocation."""

        self.state = MemberState.UNJOINED
        self.member_id = UNKNOWN_MEMBER_ID
        self.generation = NO_GENERATION
        self.protocol: str | None = None
        """The elected protocol of the current generation (``AbstractCoordinator.generation``)."""
        self.current_protocol = MODE_PROTOCOLS[mode][0]
        """``currentConnectProtocol``: the last elected protocol; decides eager vs cooperative."""
        self.last_completed_generation = NO_GENERATION
        self._rejoin_after_sync = False
        self._reconfig_pending = False
        self._led: tuple[int, str, frozenset[str]] = (NO_GENERATION, "", frozenset())
        """(generation, protocol, member ids) of the last assignment this worker computed as leader."""
        self.held_generation = NO_GENERATION
        """The generation last reported in a Reaction (the worker's epoch)."""
        self.snapshot: Assignment | None = None
        """``assignmentSnapshot``: the full current assignment, sent back as the allocation."""
        self.running: Items = EMPTY
        self.leader_id = ""
        self.leader_url = ""
        self.leader_state: dict[ConnectorTaskId, str] | None = None
        """``WorkerCoordinator.leaderState``: who runs what (REST url), built only by running the
        assignor as the elected leader and cleared by every ``onJoinPrepare``."""
        self.fatal_error: str | None = None

        self._config_snapshot = self._config
        self._eager = EagerAssignor()
        self._cooperative = IncrementalCooperativeAssignor(max_delay_ms)
        self._rejoin_needed = True
        self._rejoin_requested = False
        self._needs_join_prepare = True
        self._scheduled_rebalance_ms: int | None = None
        self._retry_at_ms = 0
        self._join_in_flight = False
        self._sync_in_flight = False
        self._heartbeat_in_flight = False
        self._heartbeat_sent_generation: tuple[int, str] | None = None
        self._heartbeat_base_ms = 0
        self._heartbeat_retry = False

    # -- views -------------------------------------------------------------------------------------

    @property
    def config(self) -> ConfigView:
        """The worker's view of the config topic (the herder's ``configState``)."""
        return self._config

    @config.setter
    def config(self, value: ConfigLike) -> None:
        self._config = as_config_view(value)

    @property
    def is_leader(self) -> bool:
        """``DistributedHerder.isLeader``: the current assignment names this member as leader."""
        return self.snapshot is not None and bool(self.member_id) and self.snapshot.leader == self.member_id

    @property
    def scheduled_rejoin_ms(self) -> int | None:
        return self._scheduled_rebalance_ms

    @property
    def assignor(self) -> IncrementalCooperativeAssignor:
        """The leader-side cooperative assignor and its remembered state."""
        return self._cooperative

    def needs_rejoin(self, now_ms: int) -> bool:
        """``WorkerCoordinator.rejoinNeededOrPending`` plus the herder's scheduled rebalance."""
        if self.state is MemberState.DEAD:
            return False
        due = self._scheduled_rebalance_ms is not None and now_ms >= self._scheduled_rebalance_ms
        failed = self.snapshot is None or self.snapshot.error != NO_ERROR
        return self._rejoin_needed or self._rejoin_requested or failed or due

    def next_action(self, now_ms: int) -> NextAction:
        """What the driver should do next, and when."""
        if self.state is MemberState.DEAD:
            return NextAction(ActionKind.STOPPED, None, self.fatal_error or "shut down")
        if self._join_in_flight:
            return NextAction(ActionKind.WAIT, None, "awaiting JoinGroup response")
        if self.needs_rejoin(now_ms) and not self._sync_in_flight:
            return NextAction(ActionKind.JOIN, max(now_ms, self._retry_at_ms), self._join_reason(now_ms))
        heartbeat = self._heartbeat_due()
        scheduled = self._scheduled_rebalance_ms
        if heartbeat is not None and (scheduled is None or heartbeat < scheduled or self._sync_in_flight):
            return NextAction(ActionKind.HEARTBEAT, heartbeat, "heartbeat interval")
        if scheduled is not None and not self._sync_in_flight:
            return NextAction(ActionKind.JOIN, scheduled, "scheduled rebalance delay")
        waiting = "awaiting SyncGroup response" if self._sync_in_flight else "awaiting Heartbeat response"
        return NextAction(ActionKind.WAIT, None, waiting)

    def _join_reason(self, now_ms: int) -> str:
        if self.snapshot is None:
            return "no assignment yet"
        if self.snapshot.error != NO_ERROR:
            return "assignment failed"
        due = self._scheduled_rebalance_ms
        if due is not None and now_ms >= due and not (self._rejoin_needed or self._rejoin_requested):
            return "scheduled rebalance delay expired"
        return "rejoin requested"

    def _heartbeat_due(self) -> int | None:
        """Heartbeats run once JoinGroup succeeded (COMPLETING_REBALANCE and STABLE), one at a time."""
        if self._heartbeat_in_flight or self.state not in (_S.COMPLETING_REBALANCE, _S.STABLE):
            return None
        return self._heartbeat_base_ms + (
            self.retry_backoff_ms if self._heartbeat_retry else self.heartbeat_interval_ms
        )

    def heartbeat_due_ms(self) -> int | None:
        """When the heartbeat thread sends its next heartbeat, whatever the herder is doing (``None``:
        not in COMPLETING_REBALANCE / STABLE, or one in flight). A driver whose herder is stalled with a
        rejoin pending uses it: Java's heartbeat thread keeps the session alive until the poll timeout."""
        return self._heartbeat_due()

    # -- state machine plumbing --------------------------------------------------------------------

    def _transition(self, event: _Event) -> None:
        target = _TRANSITIONS.get((self.state, event))
        if target is None:
            raise RuntimeError(f"illegal transition: {event.value} in state {self.state}")
        self.state = target

    def _request_rejoin(self) -> None:
        self._rejoin_requested = True

    def on_config_change(self) -> Reaction:
        """The config topic changed: stop work of removed connectors and dropped tasks at once (the
        herder does this itself, whatever the group says), then ask for a rebalance."""
        configured = self._read_config().items()
        stop = self.running - configured
        self.running = self.running - stop
        self.request_rejoin()
        return Reaction(stop=stop, generation=self.generation)

    def request_rejoin(self) -> None:
        """The herder asks for a rebalance (a connector was added or removed in the config topic).

        Like ``DistributedHerder.needsReconfigRebalance``: a request that arrives during a rebalance
        is acted on once that rebalance completes (its assignment may predate the change).
        """
        if self.state is MemberState.STABLE:
            self._request_rejoin()
        else:
            self._reconfig_pending = True

    def _reset_generation(self, reset_member_id: bool) -> None:
        """``resetStateAndRejoin``: the next join starts a new rebalance (onJoinPrepare runs again)."""
        self.generation = NO_GENERATION
        self.protocol = None
        if reset_member_id:
            self.member_id = UNKNOWN_MEMBER_ID
        self._transition(_Event.RESET)
        self._rejoin_needed = True
        self._needs_join_prepare = True

    def _die(self, reason: str | None) -> Reaction:
        """The worker process stops (fatal error, or ``reason=None`` for a graceful stop), and so does
        all its work."""
        stop = self.running
        self.running = EMPTY
        self.fatal_error = reason
        self._join_in_flight = self._sync_in_flight = self._heartbeat_in_flight = False
        self._transition(_Event.DIED)
        return Reaction(stop=stop, fatal=reason, generation=self.generation)

    def _read_config(self) -> ConfigView:
        """Read the config topic to its end: the provider when there is one, else the attribute."""
        if self.config_provider is not None:
            self.config = as_config_view(self.config_provider())
        return self.config

    # -- joining -----------------------------------------------------------------------------------

    def protocols(self) -> tuple[tuple[str, bytes], ...]:
        """``WorkerCoordinator.metadata()``: one subscription per advertised protocol, each at its
        own version; v1/v2 carry the full current assignment (null when there is none)."""
        self._config_snapshot = self._read_config()
        out = []
        for name in MODE_PROTOCOLS[self.mode]:
            version = CONNECT_PROTOCOL_NAMES[name]
            out.append((name, encode_subscription(self._subscription(version), version)))
        return tuple(out)

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
        self._transition(_Event.JOIN_SENT)
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
        outcome = _JOIN_OUTCOMES.get(resp.error_code, _Outcome.FATAL)
        if outcome is _Outcome.OK:
            return self._joined(resp, now_ms)
        if outcome is _Outcome.MEMBER_ID:
            self.member_id = resp.member_id
            self.generation = NO_GENERATION
            self._rejoin_needed = True
            return Reaction(rejoin=True, generation=self.generation)
        return self._failed(outcome, resp.error_code, "JoinGroup", now_ms)

    def _failed(self, outcome: _Outcome, code: int, api: str, now_ms: int) -> Reaction:
        """The common error outcomes of JoinGroup and SyncGroup (``joinGroupIfNeeded``)."""
        if outcome is _Outcome.FATAL:
            return self._die(f"{api} failed: {error_name(code)}")
        if outcome is _Outcome.RESET_REJOIN:
            self._reset_generation(reset_member_id=True)
        elif outcome is _Outcome.RESET_GENERATION_REJOIN:
            self._reset_generation(reset_member_id=False)
        elif outcome is _Outcome.RETRY:
            self._retry_at_ms = now_ms + self.retry_backoff_ms
        self._rejoin_needed = True
        return Reaction(rejoin=True, generation=self.generation)

    def _joined(self, resp: JoinGroupResponse, now_ms: int) -> Reaction:
        if resp.protocol_type is not None and resp.protocol_type != PROTOCOL_TYPE:
            return self._die(f"JoinGroup failed: INCONSISTENT_GROUP_PROTOCOL (type {resp.protocol_type!r})")
        if resp.protocol_name not in CONNECT_PROTOCOL_NAMES:
            return self._die(f"JoinGroup elected an unknown Connect protocol {resp.protocol_name!r}")
        self._transition(_Event.JOINED)
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
        version = CONNECT_PROTOCOL_NAMES[protocol]
        downgrading = version == 0 and self._downgrading(generation, subscriptions)
        self._led = (generation, protocol, frozenset(subscriptions))
        if downgrading:
            # KIP-415: on a downgrade to eager the leader first hands out empty assignments, so the
            # cooperative workers (which did not stop their work before joining) stop everything,
            # then a second, regular eager rebalance follows.
            offset = max([self._config_snapshot.offset, *(s.config_offset for s in subscriptions.values())])
            leader_url = subscriptions[leader_id].url if leader_id in subscriptions else ""
            empty = Assignment.build(NO_ERROR, leader_id, leader_url, offset, ())
            assignments = dict.fromkeys(subscriptions, empty)
            self._rejoin_after_sync = True
        elif version == 0:
            assignments = self._eager.assign(
                subscriptions, leader_id, None, self._config_snapshot, refresh_config=self._refresh_snapshot
            )
        else:
            assignments = self._cooperative.assign(
                subscriptions,
                leader_id,
                None,
                self._config_snapshot,
                generation,
                now_ms,
                last_completed_generation=self.last_completed_generation,
                refresh_config=self._refresh_snapshot,
            )
        self._remember_leader_state(subscriptions, assignments, version)
        return {member_id: encode_assignment(asg, version) for member_id, asg in assignments.items()}

    def _remember_leader_state(
        self, subscriptions: Mapping[str, Subscription], assignments: Mapping[str, Assignment], version: int
    ) -> None:
        """``LeaderState``: the complete assignment this leader computed, as item -> owner url."""
        if version == 0:
            full = {mid: frozenset(asg.items) for mid, asg in assignments.items()}
        else:
            full = self._cooperative.last_full_assignment
        self.leader_state = {
            item: subscriptions[mid].url
            for mid, items in full.items()
            if mid in subscriptions
            for item in items
        }

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

    def _downgrading(self, generation: int, members: Mapping[str, Subscription]) -> bool:
        """Whether a member of this eager generation may still run work it did not stop.

        Every member of an eager generation has stopped everything by the time it got that
        generation's JoinGroup response (eager workers before joining, cooperative ones on seeing
        the eager election). So a regular eager assignment is safe only when this leader led the
        previous generation under eager and every member now was a member then.
        """
        led_generation, led_protocol, led_members = self._led
        # The same generation again: a coordinator that elects it in every JoinGroup (connect-bridge
        # does, so the leader has leader state) answers at an unchanged epoch; nothing new joined.
        return not (
            led_generation in (generation - 1, generation)
            and led_protocol == EAGER_PROTOCOL
            and set(members) <= led_members
        )

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
        outcome = _SYNC_OUTCOMES.get(resp.error_code, _Outcome.FATAL)
        if outcome is not _Outcome.OK:
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
            self._transition(_Event.SYNCED)
        else:  # driven through the hook API (kafka-python), which owns the protocol state itself
            self.state = MemberState.STABLE
        self.generation, self.member_id, self.protocol = generation, member_id, protocol
        self._rejoin_needed = False
        # the downgrade's second rebalance, or a config change that arrived mid-rebalance
        self._rejoin_requested = self._rejoin_after_sync or self._reconfig_pending
        self._rejoin_after_sync = self._reconfig_pending = False
        self._needs_join_prepare = True
        self.current_protocol = protocol

        reaction = Reaction(generation=generation)
        if protocol != EAGER_PROTOCOL:
            revoked = set(new.revoked_items)
            reaction.stop = self.running & revoked
            self.running -= reaction.stop
            previous = [] if self.snapshot is None else [i for i in self.snapshot.items if i not in revoked]
            self.snapshot = _full_assignment(new, _ordered_union(new.items, previous))
        else:
            self.snapshot = _full_assignment(new, _ordered_union(new.items))
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
            self.snapshot = _full_assignment(self.snapshot, [i for i in self.snapshot.items if i in items])
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
        self._heartbeat_sent_generation = (self.generation, self.member_id)
        return HeartbeatRequest(self.group_id, self.member_id, self.generation, self.instance_id)

    def on_heartbeat_response(self, resp: HeartbeatResponse, now_ms: int) -> Reaction:
        """Kafka's ``HeartbeatResponseHandler``: rejoin, reset, retry or die."""
        if not self._heartbeat_in_flight or self.state is MemberState.DEAD:
            return Reaction(generation=self.generation)
        self._heartbeat_in_flight = False
        self._heartbeat_retry = False
        outcome = _HEARTBEAT_OUTCOMES.get(resp.error_code, _Outcome.FATAL)
        if outcome is _Outcome.OK:
            return Reaction(generation=self.generation)
        if outcome is _Outcome.FATAL:
            return self._die(f"Heartbeat failed: {error_name(resp.error_code)}")
        if outcome is _Outcome.RETRY:
            self._heartbeat_retry = True
            return Reaction(generation=self.generation)
        if outcome is _Outcome.REJOIN:
            if self.state is not MemberState.STABLE:
                return Reaction(generation=self.generation)  # already rebalancing: keep heartbeating
            self._rejoin_needed = True
            return Reaction(rejoin=True, generation=self.generation)
        if self._heartbeat_sent_generation != (self.generation, self.member_id):
            return Reaction(generation=self.generation)  # about an older generation: ignore
        self._reset_generation(reset_member_id=outcome is _Outcome.RESET_REJOIN)
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
        stop = frozenset()
        if self.snapshot is not None and self.snapshot.error == NO_ERROR:
            stop = self.running
            self.running = EMPTY
            self.snapshot = None
        self._join_in_flight = self._sync_in_flight = self._heartbeat_in_flight = False
        self._retry_at_ms = now_ms + self.retry_backoff_ms
        return Reaction(stop=stop, rejoin=True, generation=self.generation)
