"""Revoke before assign: moving one member from its current assignment toward its target.

This is KIP-848's CurrentAssignmentBuilder applied to connectors and tasks: a pure step from a
:class:`Reconciliation` (the member's current assignment, its target, who owns what, what it reports)
to its next :class:`CurrentAssignment`. One step never both revokes and assigns: a member first
gives up work that left its target (keeping its epoch until it acknowledges), then moves to the
target epoch and receives only the newly targeted work that no other member still owns. The same
rules serve new-protocol and legacy members; only the encoding differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.model import EMPTY, CurrentAssignment, Items, MemberState

OwnerOf = Callable[[ConnectorTaskId], str | None]


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """Everything one reconciliation step reads (the builder's inputs in Kafka's terms)."""

    member_id: str
    current: CurrentAssignment
    target_epoch: int
    target: Items
    owner_of: OwnerOf
    """Who owns an item now (a member id, a hold's owner, or None): work is granted only when free."""
    owned: Items | None
    """What the member reports running; ``None`` = not reported this time, which counts as "still
    owns everything it was given"."""


def next_assignment(step: Reconciliation) -> CurrentAssignment | None:
    """The member's next current assignment, or ``None`` when nothing changes."""
    c = step.current
    acknowledged = False
    if c.state is MemberState.UNREVOKED:
        if step.owned is None or (step.owned & c.revoking):
            return None  # still running revoked work: wait for the acknowledgement
        acknowledged = True
    elif c.state is MemberState.STABLE and c.member_epoch == step.target_epoch and c.assigned == step.target:
        return None

    target = step.target
    kept = c.assigned & target
    to_revoke = c.assigned - target
    if to_revoke:
        return CurrentAssignment(
            c.member_epoch,
            c.previous_member_epoch,
            MemberState.UNREVOKED,
            kept,
            to_revoke,
            c.left_temporarily,
        )
    grant = []
    unreleased = False
    for item in target - kept:
        owner = step.owner_of(item)
        if owner is None or owner == step.member_id:
            grant.append(item)
        else:
            unreleased = True
    assigned = kept.union(grant) if grant else kept
    state = MemberState.UNRELEASED if unreleased else MemberState.STABLE
    if (
        step.target_epoch == c.member_epoch
        and state is c.state
        and assigned == c.assigned
        and not acknowledged
    ):
        return None
    previous = c.member_epoch if c.member_epoch != step.target_epoch else c.previous_member_epoch
    return CurrentAssignment(step.target_epoch, previous, state, assigned, EMPTY, c.left_temporarily)
