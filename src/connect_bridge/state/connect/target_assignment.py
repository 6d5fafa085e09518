"""From the group to a target assignment and back to records (Kafka's TargetAssignmentBuilder).

Pure steps: :func:`resolve_held` decides what happens to work held for departed workers,
:func:`assignment_spec` builds the assignor's input, and :func:`target_records` turns a new target
into the records that install it (only the members whose target or assignor metadata changed, so a
big group's steady members cost no records).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Mapping, Set

from connect_bridge.state.assignors import AssignmentSpec
from connect_bridge.state.connect.records import (
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
    TargetMetadata,
)
from connect_bridge.state.records import Record


def resolve_held(
    held: tuple[HeldWork, ...], owner_of: Callable[[str | None, str], str | None], now_ms: int
) -> tuple[tuple[HeldWork, ...], dict[str, Items]]:
    """(holds still waiting, work returned per member): a hold goes back to the member that came
    back with its instance id (first) or url, expires at its deadline, or keeps waiting.

    ``owner_of(instance_id, url)`` is the group's lookup (``ConnectGroup.held_owner``, kept by
    its member index): building url and instance id maps of every member here cost each join into a
    big group a pass over all of them.
    """
    if not held:
        return held, {}
    waiting: list[HeldWork] = []
    returned: dict[str, Items] = {}
    for h in held:
        owner = owner_of(h.instance_id, h.url)
        if owner is not None:
            returned[owner] = returned.get(owner, EMPTY) | h.items
        elif h.deadline_ms > now_ms:
            waiting.append(h)
    return tuple(waiting), returned


def assignment_spec(
    sorted_ids: Iterable[str],
    configured: Items,
    waiting: tuple[HeldWork, ...],
    previous: dict[str, Items],
    returned: dict[str, Items],
    member_set: Container[str] | None = None,
) -> AssignmentSpec:
    """The assignor's input: configured work minus what is still held, members in id order
    (``sorted_ids``: the group keeps them sorted; ``member_set``: the same ids for ``in`` tests)."""
    held_items: set = set()
    for h in waiting:
        held_items |= h.items
    return AssignmentSpec(
        members=tuple(sorted_ids),
        configured=configured - held_items,
        previous=previous,
        returned=returned,
        holding=bool(waiting),
        member_set=member_set,
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
    old = old_target.get
    if not kept and not old_metadata:
        # Server-side assignors: no metadata anywhere, so only items can differ. Identity first
        # (the assignor hands back the previous set of a member whose work did not move): a
        # 10,000-member group costs one cheap comparison per member, not a record or an __eq__.
        out = [
            target_member_record(group_id, mid, items)
            for mid, items in target.items()
            if (o := old(mid)) is not items and o != items
        ]
    else:
        out = []
        for mid, items in target.items():
            data = kept.get(mid, NO_METADATA)
            o = old(mid)
            od = old_metadata.get(mid, NO_METADATA)
            if (o is not items and o != items) or (od is not data and od != data):
                out.append(target_member_record(group_id, mid, items, data))
    if not old_target.keys() <= target.keys():  # members left the target: their tombstones
        gone = old_target.keys() - target.keys()
        if len(gone) == 1:
            out.append(target_member_tombstone(group_id, gone.pop()))
        else:  # in the old target's order
            out.extend(target_member_tombstone(group_id, mid) for mid in old_target if mid in gone)
    out.append(target_metadata_record(group_id, TargetMetadata(epoch, error)))
    return out


def work_records(
    group_id: str,
    old_target: Mapping[str, Items],
    epoch: int,
    work: Mapping[str, Items],
    maybe_changed: Set[str],
    departed: Set[str],
) -> list[Record]:
    """``target_records`` of a server-side target given as the members with work (everyone else
    gets none), when the old target has no assignor metadata, without a pass over every member.

    The full target lists every member in id order, so only these can differ from ``old_target``:
    members given work, and ``maybe_changed`` (the group's members that had work or had no entry);
    they are compared in id order. Tombstones go to ``departed``, target entries of members no
    longer in the group, in the old target's order. Same records, same order as
    ``target_records(..., full_target(spec, work))`` (``tests/test_member_index.py``).
    """
    out = []
    for mid in sorted(work.keys() | maybe_changed):
        items = work.get(mid, EMPTY)
        o = old_target.get(mid)
        if o is not items and o != items:
            out.append(target_member_record(group_id, mid, items))
    if len(departed) == 1:
        out.extend(target_member_tombstone(group_id, mid) for mid in departed)
    elif departed:
        out.extend(target_member_tombstone(group_id, mid) for mid in old_target if mid in departed)
    out.append(target_metadata_record(group_id, TargetMetadata(epoch)))
    return out
