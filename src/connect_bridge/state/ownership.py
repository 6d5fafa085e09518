"""Member ownership: a member id never lets one principal act on another principal's member.

A member id is a bearer token in Kafka's group protocols: whoever sends it is the member. Behind a
bridge that authenticates its clients that is not enough (issue 15): a principal allowed to READ a
group could still heartbeat another worker's member out of it (epoch -1), rejoin with its id and
receive its tasks, or leave it. So every member remembers the principal that created it (persisted
with the member: ``MemberMetadata.principal``, ``ClassicMember.principal``, a tagged field of each
member record), and the coordinator checks every member-scoped request against it before the
group sees the request.

What a refused request is answered (chosen to reveal nothing a stranger could not learn anyway):

- a member id owned by another principal is answered exactly as an id the group does not know:
  UNKNOWN_MEMBER_ID, on every API (JoinGroup, SyncGroup, Heartbeat, LeaveGroup per member,
  ConnectGroupHeartbeat at any epoch, PrepareAssignment, InstallAssignment). Only a caller that
  already holds the id can tell, and only at a ConnectGroupHeartbeat epoch 0 (where an unknown id
  would be admitted), that it exists.
- a static member's instance id owned by another principal: FENCED_INSTANCE_ID, Kafka's answer to
  two workers configured with one ``group.instance.id`` (fatal for a Java client, which is right:
  retrying cannot succeed). Instance ids are configuration, not secrets; the answer says only that
  the id is in use, as Kafka's does.

Deployments without authentication are all ``User:ANONYMOUS`` (every request's default), so
nothing changes for them. Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from connect_bridge.codecs.error_codes import ErrorCode


class OwnedMembers(Protocol):
    """What a group tells about its members' owners (``ConnectGroup``, ``ClassicGroup``)."""

    def principal_of(self, member_id: str) -> str | None: ...

    def instance_principal(self, instance_id: str) -> str | None: ...


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request may not act on the member it names: the error code and a message that says no
    more than the code (the same words as for an id the group does not know)."""

    code: ErrorCode
    message: str


def refusal(group: OwnedMembers, member_id: str, instance_id: str | None, principal: str) -> Refusal | None:
    """The refusal for ``principal`` naming ``member_id`` / ``instance_id`` in ``group``, or None.

    The member id is checked first, so a request naming someone else's member id with its own
    instance id reads as an unknown member, as it would if the id did not exist.
    """
    if member_id:
        owner = group.principal_of(member_id)
        if owner is not None and owner != principal:
            return Refusal(ErrorCode.UNKNOWN_MEMBER_ID, f"member {member_id} is not in the group")
    if instance_id:
        owner = group.instance_principal(instance_id)
        if owner is not None and owner != principal:
            message = f"instance id {instance_id} is used by another member"
            return Refusal(ErrorCode.FENCED_INSTANCE_ID, message)
    return None


def split_leaving(
    group: OwnedMembers, leaving: Iterable[tuple[str, str | None]], principal: str
) -> dict[int, Refusal]:
    """LeaveGroup batches: the positions of the members ``principal`` may not remove, with why."""
    return {
        i: r
        for i, (member_id, instance_id) in enumerate(leaving)
        if (r := refusal(group, member_id, instance_id, principal)) is not None
    }


__all__ = ["OwnedMembers", "Refusal", "refusal", "split_leaving"]
