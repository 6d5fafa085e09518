"""The classic API of a connect group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup of its legacy
(classic-protocol) workers, as steps that take the group (docs/legacy-workers.md; seed 003).

Each legacy worker is an ordinary member of the epoch engine whose generation *is* its member epoch.
JoinGroup is answered at once (no barrier, empty leader, so no legacy worker runs its own assignor),
reporting the worker's owned work from the allocation in its subscription; SyncGroup re-encodes the
member's current assignment at the worker's own protocol version; Heartbeat tells it to rejoin when
its reconciliation needs another round. The members' classic states are ``legacy_members``'s
``LegacyMembers`` (``group.legacy_members``); the group changes only through the membership and
reconciliation steps (``connect.membership``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from connect_bridge.codecs.connect_protocol import (
    CONNECT_PROTOCOL_NAMES,
    Assignment,
    Subscription,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.classic import api as api
from connect_bridge.state.classic.api import ClassicGroupState
from connect_bridge.state.connect import membership as membership
from connect_bridge.state.connect.legacy_members import (
    CONFIG_MISMATCH,
    MODE_OF_PROTOCOL,
    PROTOCOL_TYPE,
    first_protocol,
    legacy_metadata,
    owned_from_metadata,
)
from connect_bridge.state.errors import RequestError
from connect_bridge.state.holds import rejoin_delay_ms
from connect_bridge.state.model import EMPTY, Member, MemberMetadata, MemberState

if TYPE_CHECKING:
    from connect_bridge.state.connect.state import ConnectGroup


def _member(group: ConnectGroup, member_id: str, instance_id: str | None) -> Member:
    member = group.members.get(member_id)
    if member is None or not member.metadata.is_legacy:
        if member is None and instance_id and group.member_by_instance(instance_id) is not None:
            raise RequestError(ErrorCode.FENCED_INSTANCE_ID, f"instance {instance_id} has another member id")
        raise RequestError(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id!r} is not in the group")
    if instance_id is not None and member.metadata.instance_id != instance_id:
        raise RequestError(ErrorCode.FENCED_INSTANCE_ID, f"member {member_id} is not instance {instance_id}")
    return member


def _check_generation(member: Member, generation_id: int) -> None:
    if generation_id != member.current.member_epoch:
        raise RequestError(
            ErrorCode.ILLEGAL_GENERATION,
            f"generation {generation_id} is not member epoch {member.current.member_epoch}",
        )


# ------------------------------------------------------------------ JoinGroup
def join(group: ConnectGroup, req: api.JoinGroupRequest, now_ms: int) -> api.JoinGroupResponse:
    try:
        return _join(group, req, now_ms)
    except RequestError as exc:
        return api.JoinGroupResponse(
            error_code=int(exc.code), member_id=req.member_id, error_message=exc.message
        )


def _validate_join(group: ConnectGroup, req: api.JoinGroupRequest) -> MemberMetadata:
    config = group.config
    if (
        not config.classic_min_session_timeout_ms
        <= req.session_timeout_ms
        <= config.classic_max_session_timeout_ms
    ):
        raise RequestError(ErrorCode.INVALID_SESSION_TIMEOUT, f"session timeout {req.session_timeout_ms} ms")
    if req.protocol_type != PROTOCOL_TYPE or not req.protocols:
        raise RequestError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
            f"protocol type {req.protocol_type!r} with {len(req.protocols)} protocols",
        )
    name, metadata = req.protocols[0]
    if name not in MODE_OF_PROTOCOL:
        raise RequestError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"unknown Connect protocol {name!r}")
    try:
        subscription = decode_subscription(metadata)
    except CodecError as exc:
        raise RequestError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"bad {name} subscription: {exc}") from exc
    rebalance_timeout_ms = (
        req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms
    )
    return legacy_metadata(req, name, subscription, tuple(req.protocols), rebalance_timeout_ms)


def _join(group: ConnectGroup, req: api.JoinGroupRequest, now_ms: int) -> api.JoinGroupResponse:
    metadata = _validate_join(group, req)
    member = group.members.get(req.member_id) if req.member_id else None
    repeat, before = False, None
    if req.group_instance_id:
        member = _static_join(group, req, member, metadata, now_ms)
    if member is None:
        if not req.member_id and req.api_version >= 4 and not req.group_instance_id:
            # MEMBER_ID_REQUIRED keeps no state: the id is admitted when the worker rejoins with it.
            return api.JoinGroupResponse(
                error_code=int(ErrorCode.MEMBER_ID_REQUIRED), member_id=membership.new_member_id(group)
            )
        if len(group.members) >= group.config.max_group_size:
            raise RequestError(ErrorCode.GROUP_MAX_SIZE_REACHED, f"group {group.group_id} is full")
        member = membership.add_member(
            group, req.member_id or membership.new_member_id(group), metadata, now_ms
        )
    elif not member.metadata.is_legacy:
        raise RequestError(
            ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"member {member.member_id} uses ConnectGroupHeartbeat"
        )
    else:
        state = group.legacy_members.states.get(member.member_id, ClassicGroupState.STABLE)
        synced = state is ClassicGroupState.STABLE
        repeat = synced and member.metadata == metadata
        if (
            repeat
            and req.member_id == member.member_id  # its own id: not a new process (empty id)
            and _reports_less_than_given(group, member, metadata)
            and group.legacy_members.refuse_once(member.member_id, metadata.classic_protocols or ())
        ):
            # Possibly a copy of the JoinGroup this member sent before the SyncGroup that gave it
            # that work (a request delayed past the worker's resend): taken as its join, it would
            # show the work as released while the worker runs it. Refused once, as in a classic
            # group (docs/classic-group.md, deviation 18); the same bytes again are its join.
            raise RequestError(
                ErrorCode.REBALANCE_IN_PROGRESS,
                "the JoinGroup repeats one from before the SyncGroup that gave the member its work",
            )
        group.legacy_members.join_taken(member.member_id)
        before = member.current
        membership.update_member_metadata(group, member, metadata)
    owned = owned_from_metadata(metadata)
    membership.release_unowned(group, member, owned)
    group.arm_session(member, now_ms)
    membership.maybe_update_target(group, now_ms)
    membership.reconcile(group, member, owned, now_ms)
    if not (repeat and member.current == before):
        # A repeated JoinGroup of a synced member that changes nothing (a client resend whose
        # original was answered) is answered again without a new sync deadline, as Kafka answers
        # it in a Stable group: arming one would remove a healthy member that never syncs again.
        group.legacy_members.set_state(
            member.member_id,
            ClassicGroupState.COMPLETING_REBALANCE,
            now_ms,
            member.metadata.rebalance_timeout_ms,
        )
    name = req.protocols[0][0]
    leader = ""
    members: tuple[api.JoinGroupMember, ...] = ()
    if member.member_id == group.metadata.leader_id:
        leader, members = member.member_id, leader_view(group, CONNECT_PROTOCOL_NAMES[name])
        group.legacy_members.note_elected(member.member_id)
    return api.JoinGroupResponse(
        generation_id=member.current.member_epoch,
        protocol_type=PROTOCOL_TYPE,
        protocol_name=name,
        leader=leader,
        member_id=member.member_id,
        members=members,
    )


def _reports_less_than_given(group: ConnectGroup, member: Member, metadata: MemberMetadata) -> bool:
    """Whether a cooperative (v1/v2) member's JoinGroup reports an allocation lacking work its last
    SyncGroup gave it (``LegacyMembers.given``). Connect names what a worker runs as of its last
    completed generation, so after applying an assignment its next JoinGroup names that work; the
    bytes of the join before it are a copy sent earlier or a worker that never applied the
    assignment. An eager subscription reports nothing (an eager worker stops everything before it
    joins)."""
    protocols = metadata.classic_protocols or ()
    if not protocols or CONNECT_PROTOCOL_NAMES.get(protocols[0][0], 0) < 1:
        return False
    given = group.legacy_members.given.get(member.member_id, EMPTY)
    return not given <= owned_from_metadata(metadata)


def _config_mismatch(group: ConnectGroup) -> bool:
    """A member has read config records the bridge's view has not (``encode_member_assignment``)."""
    return group.assignment_config_offset() > group.view.offset


# ------------------------------------------------------------------ SyncGroup
def sync(group: ConnectGroup, req: api.SyncGroupRequest, now_ms: int) -> api.SyncGroupResponse:
    try:
        member = _member(group, req.member_id, req.group_instance_id)
        _check_generation(member, req.generation_id)
        # The protocol its JoinGroup answer named: its own first choice, or, for a member of a
        # classic group converted while it was between JoinGroup and SyncGroup, the protocol that
        # group elected (any it advertised). Refusing that is fatal to a Java worker (drill
        # 16005445: a stalled leader's SyncGroup arriving just after the upgrade).
        advertised = [n for n, _ in member.metadata.classic_protocols or ()]
        name = req.protocol_name if req.protocol_name in advertised else first_protocol(member.metadata)
        if (req.protocol_type is not None and req.protocol_type != PROTOCOL_TYPE) or (
            req.protocol_name is not None and req.protocol_name != name
        ):
            raise RequestError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
                f"protocol {req.protocol_type}/{req.protocol_name} is not connect/{name}",
            )
        if group.legacy_members.states.get(member.member_id) is ClassicGroupState.PREPARING_REBALANCE:
            raise RequestError(ErrorCode.REBALANCE_IN_PROGRESS, "rejoin first")
        if _target_moved_since_join(group, member):
            group.legacy_members.set_state(
                member.member_id,
                ClassicGroupState.PREPARING_REBALANCE,
                now_ms,
                member.metadata.rebalance_timeout_ms,
            )
            raise RequestError(
                ErrorCode.REBALANCE_IN_PROGRESS,
                f"the target moved to epoch {group.assignment_epoch} after this member joined",
            )
    except RequestError as exc:
        return api.SyncGroupResponse(error_code=int(exc.code), error_message=exc.message)
    group.arm_session(member, now_ms)
    group.legacy_members.set_state(member.member_id, ClassicGroupState.STABLE, now_ms, 0)
    # A member that syncs is a process talking to the bridge, not a stale member that never
    # will: what was returned to it is its own from now on (owned once granted), as for any
    # worker that is back; work the target has since moved elsewhere is no longer kept for it.
    group.legacy_members.own_returned(member.member_id)
    assignment = encode_member_assignment(group, member, name, now_ms)
    group.legacy_members.note_given(
        member.member_id, EMPTY if _config_mismatch(group) else member.current.assigned
    )
    return api.SyncGroupResponse(protocol_type=PROTOCOL_TYPE, protocol_name=name, assignment=assignment)


def _target_moved_since_join(group: ConnectGroup, member: Member) -> bool:
    """Whether the target moved past the epoch the member's JoinGroup answered while it was
    between JoinGroup and SyncGroup (another member joined or left, a hold ended).

    A JoinGroup reconciles the member to the newest target it can reach: the target's epoch, or,
    while it still has work to revoke (UNREVOKED), its old one. So a member behind the target
    that is not revoking saw the target move after its join, and another JoinGroup moves it on.
    Kafka's classic coordinator answers such a SyncGroup REBALANCE_IN_PROGRESS; answering it with
    the old epoch's assignment left the worker without its new work until its next heartbeat, a
    heartbeat interval later (a Java worker whose scheduled rebalance fired a few ms before the
    bridge's hold ended, tests/test_java_versus_kafka.py). A revoking member gets its revocation:
    Connect rejoins right after applying one."""
    current = member.current
    return current.member_epoch < group.assignment_epoch and current.state is not MemberState.UNREVOKED


# ------------------------------------------------------------------ Heartbeat
def heartbeat(group: ConnectGroup, req: api.HeartbeatRequest, now_ms: int) -> api.HeartbeatResponse:
    try:
        member = _member(group, req.member_id, req.group_instance_id)
        _check_generation(member, req.generation_id)
    except RequestError as exc:
        return api.HeartbeatResponse(error_code=int(exc.code))
    group.arm_session(member, now_ms)
    state = group.legacy_members.states.get(member.member_id, ClassicGroupState.STABLE)
    if state is ClassicGroupState.STABLE and needs_rejoin(group, member):
        state = ClassicGroupState.PREPARING_REBALANCE
        group.legacy_members.set_state(member.member_id, state, now_ms, member.metadata.rebalance_timeout_ms)
    if state is ClassicGroupState.PREPARING_REBALANCE:
        return api.HeartbeatResponse(error_code=int(ErrorCode.REBALANCE_IN_PROGRESS))
    return api.HeartbeatResponse()


def needs_rejoin(group: ConnectGroup, member: Member) -> bool:
    """Rejoin when the target moved on, to acknowledge a revocation, or to collect released work.

    The epoch comes first (Kafka's ``throwIfRebalanceInProgress``): a member behind the target
    epoch may have to give up work that another member waits for, and it can only learn that by
    rejoining. Testing "is what it waits for free" first let two UNRELEASED members wait for
    each other forever. A member at the target epoch that is UNRELEASED is told only once
    everything it waits for is free, so it does not loop through rebalances while other workers
    are still stopping that work (KAFKA-16793), or once some of it is free and the rest belongs
    to members that have sent nothing since a load: those may stay parked at the previous
    coordinator for their whole first session after it (a JoinGroup timeout), and the free
    part would wait that long with them (fleet drills 97000291010819, 050344, 076073).
    """
    current = member.current
    if current.state is MemberState.UNREVOKED or current.member_epoch < group.assignment_epoch:
        return True
    if member.member_id == group.metadata.leader_id and group.legacy_members.elected != member.member_id:
        return True  # it became the Connect leader: it must be elected to build its leader state
    if current.state is MemberState.UNRELEASED:
        awaited = group.target.get(member.member_id, EMPTY) - current.assigned
        owner_of = group.owner_lookup()
        owned_by = {owner_of(item) for item in awaited}
        free = None in owned_by
        owners = {owner for owner in owned_by if owner is not None and owner != member.member_id}
        return not owners or (free and all(group.waits_elsewhere(owner) for owner in owners))
    return False


# ------------------------------------------------------------------ LeaveGroup
def leave(group: ConnectGroup, req: api.LeaveGroupRequest, now_ms: int) -> api.LeaveGroupResponse:
    results: list[tuple[str, str | None, int]] = []
    for leaving in req.members:
        member = group.members.get(leaving.member_id) if leaving.member_id else None
        if member is None and leaving.group_instance_id:
            member = group.member_by_instance(leaving.group_instance_id)
        code = ErrorCode.NONE
        if member is None:
            code = ErrorCode.UNKNOWN_MEMBER_ID
        elif leaving.group_instance_id and member.metadata.instance_id != leaving.group_instance_id:
            code = ErrorCode.FENCED_INSTANCE_ID
        elif leaving.member_id and member.member_id != leaving.member_id:
            code = ErrorCode.FENCED_INSTANCE_ID
        else:
            membership.remove_member(group, member, now_ms)
        results.append((leaving.member_id, leaving.group_instance_id, int(code)))
    membership.maybe_update_target(group, now_ms)
    return api.LeaveGroupResponse(members=results)


def _static_join(
    group: ConnectGroup,
    req: api.JoinGroupRequest,
    member: Member | None,
    metadata: MemberMetadata,
    now_ms: int,
) -> Member | None:
    """Kafka's classic rules for a JoinGroup with a group.instance.id.

    Only a process that does not know its member id (a restart) replaces the member holding the
    instance id; one that names another member id is a zombie sharing the instance id and is
    fenced; a member id with an instance id nobody holds is unknown. Letting any of them take
    over left the old member's owner entries behind and its work running nowhere.
    """
    instance_id = req.group_instance_id
    assert instance_id
    static = group.member_by_instance(instance_id)
    if static is None:
        if req.member_id:
            raise RequestError(
                ErrorCode.UNKNOWN_MEMBER_ID, f"instance {instance_id} has no member {req.member_id}"
            )
        return None
    if static is member:
        return member
    if req.member_id:
        raise RequestError(
            ErrorCode.FENCED_INSTANCE_ID,
            f"instance {instance_id} is member {static.member_id}, not {req.member_id}",
        )
    return membership.take_over_static(group, static, membership.new_member_id(group), metadata, now_ms)


def leader_view(group: ConnectGroup, version: int) -> tuple[api.JoinGroupMember, ...]:
    """What the Connect leader is elected with: every member with what it runs now.

    A Java worker has leader state (``WorkerCoordinator.leaderState``: REST owner lookups for
    restarts, the session-key writer role) only after it ran its assignor in
    ``onLeaderElected``, and ``onJoinPrepare`` clears it on every rejoin. So the designated
    leader is elected in each of its JoinGroup responses, with each member's current assignment
    as its allocation: the assignor it runs then starts from the bridge's ownership. What it
    sends back in SyncGroup is ignored; the bridge's own assignment is what it receives.
    """
    out = []
    for mid in sorted(group.members):
        m = group.members[mid]
        allocation = None
        if version > 0:
            allocation = Assignment.build(
                0,
                group.metadata.leader_id,
                group.leader_url(),
                group.assignment_config_offset(),
                sorted(m.current.assigned),
                (),
                0,
            )
        subscription = Subscription(m.metadata.url, m.metadata.config_offset, allocation)
        metadata = encode_subscription(subscription, version)
        out.append(api.JoinGroupMember(mid, m.metadata.instance_id, metadata))
    return tuple(out)


def encode_member_assignment(
    group: ConnectGroup, member: Member, protocol: str | None = None, now_ms: int | None = None
) -> bytes:
    """The SyncGroup payload: v0 the complete set; v1/v2 newly granted work + what to stop, and
    while work is held, how long until the first hold ends as the assignment's ``delay``
    (``holds.rejoin_delay_ms``: the worker rejoins by itself then and collects what the hold
    released, as it would from Connect's own leader). ``protocol``: the one the member syncs under
    (default: its first choice); ``now_ms``: when the answer is given (None: no delay)."""
    own = CONNECT_PROTOCOL_NAMES[first_protocol(member.metadata)]
    version = CONNECT_PROTOCOL_NAMES.get(protocol or "", own)
    offset = group.assignment_config_offset()
    if _config_mismatch(group):
        # A member has read config records the bridge's view has not (the bridge reads the config
        # topic on its own, a poll behind): the target was computed from an older config, e.g.
        # still holding a connector just deleted or tasks above a lowered tasks.max. A Java
        # worker as far as that offset would start them (no config: "Couldn't instantiate
        # task"; a stale one: a removed task running again). Java's leader never assigns from a
        # config older than a member's (IncrementalCooperativeAssignor/EagerAssignor
        # ensureLeaderConfig: "do not have latest config found in sync request"): it answers
        # CONFIG_MISMATCH, nothing assigned or revoked, at the highest offset, to everyone. So
        # does the bridge until its view catches up; workers start nothing, catch up and rejoin.
        payload = Assignment.build(
            CONFIG_MISMATCH, group.metadata.leader_id, group.leader_url(), offset, (), (), 0
        )
        return encode_assignment(payload, version)
    assigned = member.current.assigned
    if version == 0:
        granted, revoked = assigned, EMPTY
    else:
        owned = owned_from_metadata(member.metadata)
        granted, revoked = assigned - owned, owned - assigned
    delay = rejoin_delay_ms(group.metadata.held, now_ms) if now_ms is not None and version > 0 else 0
    payload = Assignment.build(
        0,
        group.metadata.leader_id,
        group.leader_url(),
        offset,
        sorted(granted),
        sorted(revoked),
        delay,
    )
    return encode_assignment(payload, version)
