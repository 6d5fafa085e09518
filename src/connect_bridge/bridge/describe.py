"""``connect-bridge describe``: ask a running bridge, over the wire, what its groups look like.

Connect groups come from ConnectGroupDescribe; classic groups (all members legacy) from ListGroups +
DescribeGroups, whose member assignments are decoded with the Connect codec.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.admin.groups import DescribeGroupsRequest

from connect_bridge.bridge import wire_map as wm
from connect_bridge.bridge.client import KafkaConnection
from connect_bridge.codecs.connect_protocol import decode_assignment
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import ConnectorTaskId
from connect_bridge.state.legacy_members import MODE_OF_PROTOCOL
from connect_bridge.state.model import GroupType

DESCRIBE_GROUPS_VERSION = 5
LIST_GROUPS_VERSION = 5
DESCRIBE_BATCH = 500
"""Groups named per describe request: well below the bridge's per-request bounds (docs/serve.md
"Bounds on work per request"), which defer the rest of a request with COORDINATOR_LOAD_IN_PROGRESS."""
_DEFERRED = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)


def _items(items: Any) -> list[str]:
    return sorted(str(ConnectorTaskId(*i)) if isinstance(i, tuple) else str(i) for i in items)


def _connect_group(g: Any) -> dict[str, Any]:
    return {
        "group_id": g.group_id,
        "error_code": g.error_code,
        "group_type": g.group_type or GroupType.CONNECT.value,
        "state": g.state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "assignor": g.assignor,
        "leader_id": g.leader_id,
        "leader_url": g.leader_url,
        "config_offset": g.config_offset,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "protocol": m.protocol,
                "member_epoch": m.member_epoch,
                "state": m.state,
                "url": m.url,
                "current": _items(m.current),
                "target": _items(m.target),
            }
            for m in g.members
        ],
    }


def _classic_group(g: Any) -> dict[str, Any]:
    members = []
    for m in g.members:
        try:
            assignment = decode_assignment(m.assignment) if m.assignment else None
        except CodecError:
            assignment = None
        members.append(
            {
                "member_id": m.member_id,
                "instance_id": m.group_instance_id,
                "protocol": MODE_OF_PROTOCOL.get(g.protocol_data or "", g.protocol_data or ""),
                "client_id": m.client_id,
                "client_host": m.client_host,
                "last_assignment": _items(assignment.items) if assignment else [],
                "last_revoked": _items(assignment.revoked_items) if assignment else [],
            }
        )
    return {
        "group_id": g.group_id,
        "error_code": g.error_code,
        "group_type": GroupType.CLASSIC.value,
        "state": g.state,
        "protocol": g.protocol_data,
        "members": members,
    }


async def describe(host: str, port: int, group: str | None = None) -> list[dict[str, Any]]:
    """Every group (or ``group``) as a plain dict: ListGroups says which API describes each one."""
    conn = await KafkaConnection.connect(host, port, client_id="connect-bridge-describe")
    try:
        listed = wm.list_groups_response_from_wire(
            await conn.request(wm.list_groups_to_wire(LIST_GROUPS_VERSION), LIST_GROUPS_VERSION)
        )
        types = {entry[0]: entry[3] for entry in listed}
        wanted = [group] if group else sorted(types)
        out: list[dict[str, Any]] = []
        connect_ids = [g for g in wanted if types.get(g, GroupType.CONNECT) == GroupType.CONNECT]
        classic_ids = [g for g in wanted if types.get(g) == GroupType.CLASSIC]
        if connect_ids:

            async def ask_connect(ids: list[str]) -> list[Any]:
                return wm.describe_response_from_wire(await conn.request(wm.describe_to_wire(ids), 0))

            out += [_connect_group(g) for g in await _in_batches(connect_ids, ask_connect)]
        if classic_ids:

            async def ask_classic(ids: list[str]) -> list[Any]:
                request = DescribeGroupsRequest(groups=ids, include_authorized_operations=False)
                resp = await conn.request(request, DESCRIBE_GROUPS_VERSION)
                return wm.describe_groups_response_from_wire(resp)

            out += [_classic_group(g) for g in await _in_batches(classic_ids, ask_classic)]
        return out
    finally:
        await conn.close()


async def _in_batches(ids: list[str], ask: Callable[[list[str]], Awaitable[list[Any]]]) -> list[Any]:
    """Every group of ``ids`` (in that order), asked ``DESCRIBE_BATCH`` at a time; groups the bridge
    deferred are asked again while a round makes progress (none does while it is loading: then the
    deferred answers are what is shown)."""
    answers: dict[str, Any] = {}
    pending = list(dict.fromkeys(ids))
    while pending:
        deferred: list[Any] = []
        for i in range(0, len(pending), DESCRIBE_BATCH):
            for g in await ask(pending[i : i + DESCRIBE_BATCH]):
                if g.error_code == _DEFERRED:
                    deferred.append(g)
                else:
                    answers[g.group_id] = g
        if len(deferred) >= len(pending):
            answers.update((g.group_id, g) for g in deferred)
            break
        pending = [g.group_id for g in deferred]
    return [answers[gid] for gid in dict.fromkeys(ids) if gid in answers]


def printable(value: Any) -> Any:
    """``value`` with every string made safe for a terminal: ids, URLs and names are chosen by
    clients, and an escape sequence in one must not reach the operator's terminal (issue 11.8).
    Characters that are not printable are shown as Python escapes (``\x1b``); a backslash is
    doubled so that an escape shown cannot be forged."""
    if isinstance(value, str):
        if value.isprintable() and "\\" not in value:
            return value
        return "".join(
            ch if ch.isprintable() and ch != "\\" else ch.encode("unicode_escape").decode("ascii")
            for ch in value
        )
    if isinstance(value, dict):
        return {key: printable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [printable(item) for item in value]
    return value


def render_table(groups: list[dict[str, Any]]) -> str:
    """:func:`describe`'s groups for a terminal (every client-chosen string made printable)."""
    lines = []
    for g in printable(groups):
        if g["group_type"] == GroupType.CLASSIC:
            lines.append(f"group {g['group_id']}  type classic  state {g['state']}  protocol {g['protocol']}")
            for m in g["members"]:
                last = ",".join(m["last_assignment"])
                lines.append(f"  {m['member_id']:<44} {m['protocol']:<10} last assignment {last}")
            continue
        lines.append(
            f"group {g['group_id']}  type {g['group_type']}  state {g['state']}  epoch {g['group_epoch']}"
            f"  assignment epoch {g['assignment_epoch']}  assignor {g['assignor']}"
        )
        lines.append(f"  leader {g['leader_id']} ({g['leader_url']})  config offset {g['config_offset']}")
        lines.append(f"  {'MEMBER':<44} {'PROTOCOL':<10} {'EPOCH':>5} {'STATE':<10} CURRENT | TARGET")
        for m in g["members"]:
            lines.append(
                f"  {m['member_id']:<44} {m['protocol']:<10} {m['member_epoch']:>5} {m['state']:<10} "
                f"{','.join(m['current']) or '-'} | {','.join(m['target']) or '-'}"
            )
    return "\n".join(lines) if lines else "(no groups)"
