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
from connect_bridge.state.classic_group import ClassicGroup
from connect_bridge.state.conversion import ConversionError, allocation


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


__all__ = ["reports_nothing", "revoke_all"]
