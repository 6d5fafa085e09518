"""The records that make an upstream generation the bridge's own classic group (docs/adoption.md).

Taking a group over must not look like a rebalance to its workers: the bridge's group continues the
upstream generation with the same generation id, member ids, protocol, leader, metadata and
assignments, so each worker's next Heartbeat and SyncGroup at that generation are answered as the
upstream would have answered them. The group is written as records *before* anything is answered
locally: a ``CLASSIC_GROUP`` snapshot (the same record the group itself writes when a generation
becomes Stable) and a ``GROUP_OWNERSHIP`` record saying the bridge now coordinates it. Loading them
is ordinary replay (``ClassicGroup.apply`` then ``rebuild_after_load``), which gives Stable and
arms every member's session afresh from ``now_ms``, as Kafka's ``onLoaded`` does for a group it
loads when it becomes coordinator.
"""

from __future__ import annotations

from collections.abc import Mapping

from connect_bridge.state.adoption.observation import UpstreamGeneration
from connect_bridge.state.adoption.records import GroupOwnership, OwnershipState, ownership_record
from connect_bridge.state.classic.records import (
    ClassicGroupSnapshot,
    ClassicMemberSnapshot,
    classic_group_record,
)
from connect_bridge.state.model import ANONYMOUS
from connect_bridge.state.records import Record


class AdoptionError(ValueError):
    """The generation cannot be continued by the bridge (incomplete, or inconsistent)."""


def adoption_problem(gen: UpstreamGeneration) -> str | None:
    """Why ``gen`` cannot be continued as it is, or None: every member needs its full metadata
    (protocols with the elected one, timeouts) and the assignment it received."""
    if not gen.members:
        return f"generation {gen.generation_id} has no members"
    if gen.leader_id not in gen.member_ids:
        return f"leader {gen.leader_id!r} is not a member of generation {gen.generation_id}"
    if not gen.protocol_type or not gen.protocol_name:
        return f"generation {gen.generation_id} has no elected protocol"
    for m in gen.members:
        if not m.joined or m.session_timeout_ms < 0 or m.rebalance_timeout_ms < 0:
            return f"the JoinGroup of {m.member_id} in generation {gen.generation_id} was not seen"
        if gen.protocol_name not in (name for name, _ in m.protocols):
            return f"{m.member_id} does not advertise the elected protocol {gen.protocol_name}"
        if not m.synced or m.assignment is None:
            return f"{m.member_id} has not received its assignment of generation {gen.generation_id}"
    instances = [m.group_instance_id for m in gen.members if m.group_instance_id is not None]
    if len(instances) != len(set(instances)):
        return f"generation {gen.generation_id} has a group instance id twice"
    return None


def adopted_snapshot(
    gen: UpstreamGeneration,
    now_ms: int,
    *,
    principals: Mapping[str, str] | None = None,
    member_seq: int = 0,
) -> ClassicGroupSnapshot:
    """The bridge's classic group continuing ``gen``.

    ``principals``: member id -> principal of the bridge connection the member is behind (who may
    act on it from now on, ``state.ownership``); a member not listed is ``User:ANONYMOUS``.
    ``member_seq``: the id counter to continue (a former local group's, so ids are never reused).
    Raises :class:`AdoptionError` when :func:`adoption_problem` finds one.
    """
    problem = adoption_problem(gen)
    if problem is not None:
        raise AdoptionError(problem)
    owners = principals or {}
    members = tuple(
        ClassicMemberSnapshot.of(m, m.assignment or b"", owners.get(m.member_id, ANONYMOUS))
        for m in gen.members
    )
    return ClassicGroupSnapshot(
        generation=gen.generation_id,
        protocol_type=gen.protocol_type,
        protocol_name=gen.protocol_name,
        leader=gen.leader_id,
        member_seq=member_seq,
        members=members,
        current_state_timestamp=now_ms,
    )


def adoption_records(
    gen: UpstreamGeneration,
    now_ms: int,
    *,
    principals: Mapping[str, str] | None = None,
    member_seq: int = 0,
) -> list[Record]:
    """The group first, then the ownership record: a log cut between them replays as a group the
    bridge holds but does not own (still relaying), never as an owned group without state."""
    snapshot = adopted_snapshot(gen, now_ms, principals=principals, member_seq=member_seq)
    return [
        classic_group_record(gen.group_id, snapshot),
        ownership_record(gen.group_id, GroupOwnership(OwnershipState.ADOPTED, gen.generation_id, now_ms)),
    ]


__all__ = ["AdoptionError", "adopted_snapshot", "adoption_problem", "adoption_records"]
