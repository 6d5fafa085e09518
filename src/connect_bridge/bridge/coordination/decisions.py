"""Structured log lines for every rebalance decision, derived from the coordinator's records.

The records already say every decision the coordinator made (a group epoch bump, a new target, a
member moved to an epoch or told to revoke), so logging them keeps the engine free of I/O and
cannot drift from what was persisted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from connect_bridge.bridge.metrics import log_event
from connect_bridge.state.model import split_target_member
from connect_bridge.state.records import Record, RecordType

log = logging.getLogger("connect_bridge.rebalance")


def _items(items: Any) -> list[str]:
    return sorted(map(str, items))


def _fields(record: Record) -> tuple[str, dict[str, Any]] | None:
    v = record.value
    common = {"group": record.group_id}
    if record.member_id:
        common["member"] = record.member_id
    if v is None:
        return ("member_removed" if record.type is RecordType.MEMBER_METADATA else None), common
    if record.type is RecordType.GROUP_METADATA:
        return "group_epoch", {
            **common,
            "epoch": v.group_epoch,
            "leader": v.leader_id,
            "held": [_items(h.items) for h in v.held],
        }
    if record.type is RecordType.TARGET_METADATA:
        return "target_assignment", {**common, "epoch": v.assignment_epoch, "error": v.error}
    if record.type is RecordType.TARGET_MEMBER:
        return "member_target", {**common, "target": _items(split_target_member(v)[0])}
    if record.type is RecordType.CURRENT_ASSIGNMENT:
        return "member_assignment", {
            **common,
            "epoch": v.member_epoch,
            "state": v.state.value,
            "assigned": _items(v.assigned),
            "revoking": _items(v.revoking),
        }
    if record.type is RecordType.MEMBER_METADATA:
        return "member_metadata", {**common, "protocol": v.protocol, "url": v.url}
    if record.type is RecordType.CLASSIC_GROUP:
        return "classic_generation", {
            **common,
            "generation": v.generation,
            "protocol": v.protocol_name,
            "leader": v.leader,
            "members": len(v.members),
        }
    if record.type is RecordType.CONFIG:
        return "config_view", {**common, "offset": v.offset, "connectors": dict(v.connectors)}
    if record.type is RecordType.GROUP_OWNERSHIP:  # docs/adoption.md
        return "group_ownership", {**common, "state": v.state.value, "generation": v.generation}
    return None


def log_decisions(records: Iterable[Record]) -> None:
    """One ``log_event`` per record that states a decision (skipped cheaply when INFO is off)."""
    if not log.isEnabledFor(logging.INFO):
        return
    for record in records:
        entry = _fields(record)
        if entry is not None and entry[0] is not None:
            log_event(log, entry[0], **entry[1])
