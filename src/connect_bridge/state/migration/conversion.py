"""Group conversion classic ⇄ connect (docs/migration.md).

Upgrade: the first new-protocol worker joining a classic group turns it into a connect group whose
group epoch, target epoch and every member epoch are the classic generation, with target = current =
each member's last synced full assignment, so nothing moves. Downgrade: when the last new-protocol
worker leaves, the legacy members become a classic group at generation = group epoch, each keeping
what it runs, and a rebalance lets a legacy leader take over the assignment.
"""

from __future__ import annotations

from connect_bridge.codecs.connect_protocol import (
    CONNECT_PROTOCOL_NAMES,
    Assignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
)
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.classic.api import EAGER_PROTOCOL, PROTOCOL_TYPE_CONNECT
from connect_bridge.state.classic.group import (
    ClassicGroup,
    ClassicGroupSnapshot,
    ClassicMember,
    ClassicMemberSnapshot,
    load_converted,
)
from connect_bridge.state.connect import group as connect_steps
from connect_bridge.state.connect.group import ConnectGroup
from connect_bridge.state.connect.legacy_members import MODE_OF_PROTOCOL, legacy_metadata
from connect_bridge.state.model import (
    EMPTY,
    ConfigView,
    CurrentAssignment,
    GroupMetadata,
    Items,
    MemberMetadata,
    MemberState,
    TargetMetadata,
)


class ConversionError(ValueError):
    """The classic group cannot be represented as a connect group (bad embedded metadata)."""


def _own_metadata(member: ClassicMember) -> bytes:
    """The member's preferred subscription (its first protocol's metadata)."""
    return member.protocols[0][1] if member.protocols else b""


def _allocation_in(member: ClassicMember, metadata: bytes) -> Items:
    """The allocation a Connect subscription reports (none: nothing)."""
    try:
        owned = decode_subscription(metadata).allocation if metadata else None
    except CodecError as exc:
        raise ConversionError(f"member {member.member_id}: {exc}") from exc
    return frozenset(owned.items) if isinstance(owned, Assignment) else EMPTY


def _is_eager(protocol_name: str | None) -> bool:
    return CONNECT_PROTOCOL_NAMES.get(protocol_name or "") == 0


def full_assignment(member: ClassicMember, protocol_name: str | None) -> Items:
    """What a classic member runs after its last sync.

    Eager (v0) assignments are complete sets. Cooperative (v1/v2) ones are deltas against the
    allocation the member reported when it joined: full = (allocation - revoked) + assigned. If the
    member joined again after that sync its allocation already contains the delta, and the formula
    still gives its allocation.
    """
    try:
        assignment = decode_assignment(member.assignment) if member.assignment else None
    except CodecError as exc:
        raise ConversionError(f"member {member.member_id}: {exc}") from exc
    if _is_eager(protocol_name):
        return frozenset(assignment.items) if assignment else EMPTY
    # A member that joined during the rebalance may not advertise the last elected protocol:
    # its own preferred subscription says what it runs.
    owned = _allocation_in(member, dict(member.protocols).get(protocol_name or "", _own_metadata(member)))
    if assignment is None:
        return owned
    return (owned - frozenset(assignment.revoked_items)) | frozenset(assignment.items)


def allocation(member: ClassicMember, protocol_name: str | None) -> Items:
    """What the member reported running when it last joined (eager workers stop everything first).

    Until it has applied the assignment of the current generation, this is what it runs: the
    revocations of the last round are pending until its SyncGroup response arrives. A cooperative
    worker in a generation that elected eager stops everything only once it sees that election, and
    the stopping may still be under way: its own preferred subscription says what it still runs (an
    eager worker's carries no allocation).
    """
    own = _own_metadata(member)
    metadata = own if _is_eager(protocol_name) else dict(member.protocols).get(protocol_name or "", own)
    return _allocation_in(member, metadata)


def may_run_any(classic: ClassicGroup, member: ClassicMember) -> bool:
    """The member runs something after its last sync, or still from before (a cooperative
    worker that never saw this round's answer keeps its allocation; drill 20022560). A member
    whose assignment or metadata cannot be read runs nothing the bridge knows of."""
    try:
        name = classic.protocol_name
        return bool(full_assignment(member, name) or allocation(member, name))
    except ConversionError:
        return False


def _legacy_metadata(member: ClassicMember) -> MemberMetadata:
    # Only the Connect protocols, in the member's order: a classic group elects any name its members
    # share, and a first choice such as "connect-eager" names no Connect protocol version to answer
    # the member in once it is a legacy member of the connect group (found by structured fuzzing).
    protocols = tuple((n, m) for n, m in member.protocols if n in MODE_OF_PROTOCOL)
    if not protocols:
        raise ConversionError(f"member {member.member_id} advertises no Connect protocol")
    name, metadata = protocols[0]
    try:
        subscription = decode_subscription(metadata)
    except CodecError as exc:
        raise ConversionError(f"member {member.member_id}: {exc}") from exc
    return legacy_metadata(member, name, subscription, protocols)


def upgrade(classic: ClassicGroup, group: ConnectGroup, now_ms: int) -> None:
    """Fill the (fresh) connect ``group`` from ``classic``; raises ConversionError before any change."""
    generation = classic.generation_id
    may_run: dict[str, tuple[Items, Items]] = {}
    for member in classic.members.values():
        if member.protocol_type != PROTOCOL_TYPE_CONNECT:
            raise ConversionError(f"member {member.member_id} has protocol type {member.protocol_type!r}")
        may_run[member.member_id] = (
            full_assignment(member, classic.protocol_name),
            allocation(member, classic.protocol_name),
        )
    claims = _claim(may_run, set(classic.pending_sync))
    members: list[tuple[str, MemberMetadata, CurrentAssignment]] = []
    for member in classic.members.values():
        mid = member.member_id
        assigned, pending = claims[mid]
        state = MemberState.UNREVOKED if pending else MemberState.STABLE
        current = CurrentAssignment(generation, state=state, assigned=assigned, revoking=pending)
        members.append((mid, _legacy_metadata(member), current))
    leader = classic.leader_id if classic.leader_id in classic.members else (members[0][0] if members else "")
    connect_steps.install_converted(
        group,
        GroupMetadata(group_epoch=generation, leader_id=leader or "", member_seq=classic.member_seq),
        TargetMetadata(generation),
        members,
        now_ms,
        {
            m.member_id: m.waits_elsewhere_until_ms
            for m in classic.members.values()
            if m.waits_elsewhere_until_ms is not None
        },
    )


def _claim(may_run: dict[str, tuple[Items, Items]], unsynced: set[str]) -> dict[str, tuple[Items, Items]]:
    """(assigned, pending revocation) per member, from (full assignment, allocation) per member.

    A follower whose SyncGroup of this generation is still to come has not applied the round: it
    still runs its allocation, revocations included. That work is claimed first, as pending
    revocations of that member, before anyone's newly granted work (KIP-848's online upgrade keeps
    each member's current assignment). Members that synced applied the round (a lost SyncGroup
    response is the residual case: docs/known-issues.md).
    Members that synced run their full assignment: claimed first. Under a cooperative protocol
    nothing revoked from an unsynced member is granted to anyone in the same round, so this takes
    nothing from it; under eager the leader deals everything as if all had stopped, and an item a
    synced member was given and started stays with it (the unsynced member's copy, if it is still
    stopping it, is the eager round's own race; adversarial drill 20084266 returned it to the
    unsynced member later, a second overlap).
    """
    claimed: set = set()
    assigned: dict[str, Items] = {}
    for mid, (full, _) in may_run.items():
        if mid not in unsynced:
            assigned[mid] = full - claimed
            claimed |= assigned[mid]
    running: dict[str, Items] = {}
    for mid, (_, runs) in may_run.items():
        running[mid] = runs - claimed if mid in unsynced else EMPTY
        claimed |= running[mid]
    for mid, (full, _) in may_run.items():
        if mid in unsynced:
            assigned[mid] = (full - claimed) | (full & running[mid])
            claimed |= assigned[mid]
    # A member that synced stops what the round revoked, and only then rejoins (KIP-415: the revoked
    # work is dealt in the next round). Until that rejoin it may still be stopping it (a slow
    # revocation): work revoked from it that the round gave nobody stays pending on it.
    out: dict[str, tuple[Items, Items]] = {}
    for mid, (full, runs) in may_run.items():
        pending = running[mid] - assigned[mid]
        if mid not in unsynced:
            pending = (runs - full) - claimed
            claimed |= pending
        out[mid] = (assigned[mid], pending)
    return out


def _elect(group: ConnectGroup) -> str:
    """Kafka's vote: every member votes for its most preferred protocol that all members support."""
    supported: set[str] | None = None
    for m in group.members.values():
        names = {n for n, _ in m.metadata.classic_protocols or ()}
        supported = names if supported is None else supported & names
    votes: dict[str, int] = {}
    for m in group.members.values():
        for name, _ in m.metadata.classic_protocols or ():
            if supported and name in supported:
                votes[name] = votes.get(name, 0) + 1
                break
    if not votes:
        return EAGER_PROTOCOL
    return max(votes, key=lambda n: (votes[n], CONNECT_PROTOCOL_NAMES.get(n, -1)))


def downgrade(group: ConnectGroup, classic: ClassicGroup, now_ms: int) -> None:
    """Load ``classic`` from the all-legacy ``group`` and start a rebalance.

    The classic snapshot is built from ``group`` before ``group`` is retired: its tombstones are
    applied as they are written (as replay applies them), so the group reads empty afterwards.
    """
    name = _elect(group)
    version = CONNECT_PROTOCOL_NAMES.get(name, 0)
    leader_id = group.metadata.leader_id if group.metadata.leader_id in group.members else ""
    leader_url = group.leader_url()
    offset = group.assignment_config_offset()
    members = []
    for mid, m in group.members.items():
        # What it runs, as an allocation-neutral payload: applying it changes nothing on the worker.
        payload = Assignment.build(0, leader_id, leader_url, offset, sorted(m.current.assigned), (), 0)
        members.append(
            ClassicMemberSnapshot(
                member_id=mid,
                group_instance_id=m.metadata.instance_id,
                client_id=m.metadata.client_id,
                client_host=m.metadata.client_host,
                rebalance_timeout_ms=m.metadata.rebalance_timeout_ms,
                session_timeout_ms=m.metadata.session_timeout_ms,
                protocols=tuple(m.metadata.classic_protocols or ()),
                assignment=encode_assignment(payload, version),
                principal=m.metadata.principal,
            )
        )
    snapshot = ClassicGroupSnapshot(
        # One past the group epoch: nothing a legacy worker was told in the connect era (its member
        # epoch as generation, its election as Connect leader at that epoch) can pass for the
        # generation before the first classic rebalance. An eager leader elected at epoch E would
        # otherwise take classic generation E + 1 for one it led, and skip KIP-415's empty round
        # while cooperative members still run their work (found by a random drill, seed 10254).
        generation=group.group_epoch + 1,
        protocol_type=PROTOCOL_TYPE_CONNECT,
        protocol_name=name,
        leader=leader_id or (members[0].member_id if members else None),
        member_seq=group.metadata.member_seq,
        members=tuple(members),
        current_state_timestamp=now_ms,
    )
    connect_steps.tombstone_all(group)
    load_converted(classic, snapshot, now_ms)


__all__ = ["ConfigView", "ConversionError", "downgrade", "full_assignment", "upgrade"]
