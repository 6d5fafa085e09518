"""Revoke before assign: moving one member from its current assignment toward its target.

This is KIP-848's CurrentAssignmentBuilder applied to connectors and tasks. One step never both
revokes and assigns: a member first gives up work that left its target (keeping its epoch until it
acknowledges), then moves to the target epoch and receives only the newly targeted work that no other
member still owns. The same rules serve new-protocol and legacy members; only the encoding differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.model import EMPTY, Items, MemberState

OwnerOf = Callable[[ConnectorTaskId], str | None]


@dataclass(frozen=True, slots=True)
class Reconciled:
    member_epoch: int
    previous_member_epoch: int
    state: MemberState
    assigned: Items
    revoking: Items


def next_assignment(
    member_id: str,
    member_epoch: int,
    previous_member_epoch: int,
    state: MemberState,
    assigned: Items,
    revoking: Items,
    target_epoch: int,
    target: Items,
    owner_of: OwnerOf,
    owned: Items | None,
) -> Reconciled | None:
    """The member's next current assignment, or ``None`` when nothing changes.

    ``owned`` is what the member reports running (``None`` = not reported this time, which counts
    as "still owns everything it was given").
    """
    acknowledged = False
    if state is MemberState.UNREVOKED:
        if owned is None or (owned & revoking):
            return None  # still running revoked work: wait for the acknowledgement
        acknowledged = True
    elif state is MemberState.STABLE and member_epoch == target_epoch and assigned == target:
        return None

    kept = assigned & target
    to_revoke = assigned - target
    if to_revoke:
        return Reconciled(member_epoch, previous_member_epoch, MemberState.UNREVOKED, kept, to_revoke)

    grant = []
    unreleased = False
    for item in target - kept:
        owner = owner_of(item)
        if owner is None or owner == member_id:
            grant.append(item)
        else:
            unreleased = True
    new_assigned = kept.union(grant) if grant else kept
    new_state = MemberState.UNRELEASED if unreleased else MemberState.STABLE
    new_previous = member_epoch if member_epoch != target_epoch else previous_member_epoch
    result = Reconciled(target_epoch, new_previous, new_state, new_assigned, EMPTY)
    if (
        result.member_epoch == member_epoch
        and result.state is state
        and result.assigned == assigned
        and not acknowledged
    ):
        return None
    return result
