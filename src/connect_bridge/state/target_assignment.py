"""From the group to a target assignment and back to records (Kafka's TargetAssignmentBuilder).

Pure steps: :func:`resolve_held` decides what happens to work held for departed workers,
:func:`assignment_spec` builds the assignor's input, and :func:`target_records` turns a new target
into the records that install it (only the members whose target or assignor metadata changed, so a
big group's steady members cost no records).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from connect_bridge.state.assignors import AssignmentSpec
from connect_bridge.state.connect_records import (
    target_member_record,
    target_member_tombstone,
    target_metadata_record,
)
from connect_bridge.state.model import (
    EMPTY,
    NO_METADATA,
    AssignedMetadata,
    HeldWork,
    Items,
    Member,
    TargetMetadata,
)
from connect_bridge.state.records import Record


def resolve_held(
    held: tuple[HeldWork, ...], members: Mapping[str, Member], now_ms: int
) -> tuple[tuple[HeldWork, ...], dict[str, Items]]:
    """(holds still waiting, work returned per member): a hold goes back to the member that came
    back with its instance id (first) or url, expires at its deadline, or keeps waiting."""
    waiting: list[HeldWork] = []
    returned: dict[str, Items] = {}
    by_url = {m.metadata.url: mid for mid, m in members.items() if m.metadata.url}
    by_instance = {m.metadata.instance_id: mid for mid, m in members.items() if m.metadata.instance_id}
    for h in held:
        owner = (by_instance.get(h.instance_id) if h.instance_id else None) or by_url.get(h.url)
        if owner is not None:
            returned[owner] = returned.get(owner, EMPTY) | h.items
        elif h.deadline_ms > now_ms:
            waiting.append(h)
    return tuple(waiting), returned


def assignment_spec(
    member_ids: Iterable[str],
    configured: Items,
    waiting: tuple[HeldWork, ...],
    previous: dict[str, Items],
    returned: dict[str, Items],
) -> AssignmentSpec:
    """The assignor's input: configured work minus what is still held, members in id order."""
    held_items: set = set()
    for h in waiting:
        held_items |= h.items
    return AssignmentSpec(
        members=tuple(sorted(member_ids)),
        configured=configured - held_items,
        previous=previous,
        returned=returned,
        holding=bool(waiting),
    )


def target_records(
    group_id: str,
    old_target: Mapping[str, Items],
    old_metadata: Mapping[str, AssignedMetadata],
    epoch: int,
    target: Mapping[str, Items],
    error: int = 0,
    metadata: Mapping[str, AssignedMetadata] | None = None,
) -> list[Record]:
    """The records installing ``target`` at ``epoch`` over ``old_target``.

    ``metadata``: the client-side assignor's per-member metadata (none from server-side assignors);
    only that of target members is kept.
    """
    kept = {mid: d for mid, d in (metadata or {}).items() if mid in target and d != NO_METADATA}
    out = []
    for mid, items in target.items():
        data = kept.get(mid, NO_METADATA)
        if old_target.get(mid) != items or old_metadata.get(mid, NO_METADATA) != data:
            out.append(target_member_record(group_id, mid, items, data))
    out.extend(target_member_tombstone(group_id, mid) for mid in old_target if mid not in target)
    out.append(target_metadata_record(group_id, TargetMetadata(epoch, error)))
    return out
