"""Hand-back of an adopted group (docs/adoption.md "Hand-back"): every worker stops its work in the
bridge's group before any of them joins the upstream coordinator.

While a group is ``releasing``, every generation the bridge's group completes revokes everything:
the leader's SyncGroup assignments are replaced by ones that assign nothing and revoke each
member's whole reported allocation (:func:`revoke_all`). A Connect worker on a cooperative
protocol stops what is revoked and rejoins at once; its JoinGroup then reports an empty allocation
(:func:`reports_nothing`), and only such a JoinGroup sends the worker away from the bridge's group
(UNKNOWN_MEMBER_ID, after which it rejoins upstream). So the upstream's leader never sees a task
that a worker still behind the bridge runs, whichever generation each worker lands in upstream.
An eager worker stops everything before it joins, so any JoinGroup of it reports nothing.

A member that leaves without saying so (removed by a session, join or sync timer, or by an
administrative LeaveGroup naming only its instance id) may still run what it ran: upstream's
leader, which remembers nothing of the bridge's generations (below), would deal that work out as
soon as its first generation forms. So the hand-back is not finished before
:func:`hand_back_hold_ms` has passed since the removal (the same hold the bridge keeps outside a
hand-back, where Connect's leader would remember the work and wait
``scheduled.rebalance.max.delay.ms``).

A Connect worker's cooperative assignor does remember the last assignment it computed as leader,
and uses it when it next leads if its last completed generation is the one it led. A worker that
led its last bridge generation and then led upstream would take everything the hand-back revoked
for lost and delay it a second time, after the hold. Every worker sent away, or back with an empty
or unknown id, is therefore first answered with a generation of its own that it leads and never
completes (:func:`unsynced_leader_round`): its assignor then forgets.
"""

from __future__ import annotations

from collections.abc import Iterable

from connect_bridge.codecs.connect_protocol import (
    CONNECT_PROTOCOL_NAMES,
    Assignment,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    payload_version,
)
from connect_bridge.codecs.errors import CodecError
from connect_bridge.state.classic.api import (
    EAGER_PROTOCOL,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
)
from connect_bridge.state.classic.group import ClassicGroup, ClassicMember
from connect_bridge.state.classic.leader_memory import unsynced_leader_round as leader_memory_round
from connect_bridge.state.classic.leader_memory import unsynced_round_key, worker_url
from connect_bridge.state.holds import zombie_grace_ms
from connect_bridge.state.migration.conversion import ConversionError, allocation


def reports_nothing(protocols: Iterable[tuple[str, bytes]]) -> bool:
    """A Connect JoinGroup whose cooperative subscriptions all report an empty allocation (or that
    offers only the eager protocol, whose workers stop everything before joining). A subscription
    that cannot be read counts as running something: the safe side."""
    for name, metadata in protocols:
        if CONNECT_PROTOCOL_NAMES.get(name, 0) == 0:
            continue
        try:
            owned = decode_subscription(metadata).allocation if metadata else None
        except CodecError:
            return False
        if isinstance(owned, Assignment) and owned.items:
            return False
    return True


def hand_back_hold_ms(protocol_name: str | None, session_timeout_ms: int, scheduled_delay_ms: int) -> int:
    """How long after a member of a ``releasing`` group is removed without stopping its work the
    hand-back must wait: the scheduled delay a cooperative Connect leader would honour, and at
    least the zombie grace (the removed worker notices and stops; ``holds.zombie_grace_ms``). An
    eager worker's leader holds nothing, so only the grace applies to it, as outside a hand-back."""
    delay = 0 if protocol_name == EAGER_PROTOCOL else max(0, scheduled_delay_ms)
    return max(delay, zombie_grace_ms(session_timeout_ms))


def earlier_incarnations(
    group: ClassicGroup, protocols: Iterable[tuple[str, bytes]], instance_id: str | None
) -> list[ClassicMember]:
    """Members of the bridge's group that a JoinGroup with an empty member id shows to be an
    earlier incarnation of the same worker: same REST url (a url belongs to one live process) or
    same instance id. Only for a JoinGroup that :func:`reports_nothing`: the worker has left its
    old identity and runs nothing, so such a member runs nothing either (a member loaded again
    after a restart although the worker had been sent away before it, or a worker that came back
    after being cut off)."""
    protocols = tuple(protocols)
    if not reports_nothing(protocols):
        return []
    url = worker_url(protocols)
    out = []
    for member in group.members.values():
        if instance_id is not None and member.group_instance_id == instance_id:
            out.append(member)
        elif url and worker_url(member.protocols) == url:
            out.append(member)
    return out


def removed_by_admin(group: ClassicGroup, req: LeaveGroupRequest) -> list[ClassicMember]:
    """The members a LeaveGroup removes without their own word: entries naming only an instance id
    (KIP-345's administrative removal, ``Admin.removeMembersFromConsumerGroup``). A worker leaving
    on its own names its member id, and Connect sends that only after stopping its work."""
    out = []
    for leaving in req.members:
        if leaving.member_id or leaving.group_instance_id is None:
            continue
        member_id = group.static_member_id(leaving.group_instance_id)
        member = group.members.get(member_id) if member_id is not None else None
        if member is not None:
            out.append(member)
    return out


def unsynced_leader_round(last_generation: int, req: JoinGroupRequest) -> JoinGroupResponse | None:
    """The answer that makes a Connect worker going upstream forget the bridge's generations
    (``leader_memory.unsynced_leader_round``).

    A worker that led its last bridge generation (the revoking one, or the one before a timer
    removed it) would, as upstream's first leader, take everything the hand-back revoked for lost
    and delay it ``scheduled.rebalance.max.delay.ms`` once more, after the hand-back's own hold.
    ``last_generation`` is the bridge's group's generation, so the round's lies above any the
    worker completed. A worker removed by a timer may come back still running its tasks; it must
    forget too, or it would take what the others stopped for lost."""
    return leader_memory_round(last_generation, req, "handback")


Assignments = tuple[tuple[str, bytes], ...]


def revoke_all(group: ClassicGroup, assignments: Assignments) -> Assignments:
    """The leader's assignments of a ``releasing`` generation, each replaced by one that keeps the
    leader, its URL, the config offset and the error, assigns nothing and revokes all the member
    reported running when it joined (eager: nothing to revoke, the worker already stopped)."""
    name = group.protocol_name
    out = []
    for member_id, data in assignments:
        member = group.members.get(member_id)
        try:
            original = decode_assignment(data) if data else None
            version = payload_version(data) if data else CONNECT_PROTOCOL_NAMES.get(name or "", 0)
        except CodecError:
            out.append((member_id, data))  # not a Connect assignment: the leader's bytes, unchanged
            continue
        try:
            held = allocation(member, name) if member is not None and version > 0 else frozenset()
        except ConversionError:
            held = frozenset()
        revoked = sorted(held, key=lambda item: (item.connector, item.task))
        asg = Assignment.build(
            original.error if original else 0,
            original.leader if original else "",
            original.leader_url if original else "",
            original.config_offset if original else -1,
            (),
            revoked,
        )
        out.append((member_id, encode_assignment(asg, version)))
    return tuple(out)


__all__ = [
    "earlier_incarnations",
    "hand_back_hold_ms",
    "removed_by_admin",
    "reports_nothing",
    "revoke_all",
    "unsynced_leader_round",
    "unsynced_round_key",
    "worker_url",
]
