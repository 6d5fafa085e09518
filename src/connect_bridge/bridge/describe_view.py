"""What ``connect-bridge describe`` shows: described groups as plain dicts (``--json``) and as a table.

Why a module of its own: fetching (``describe``) is I/O against a bridge, this is pure presentation
of what came back, tested without a bridge. The dict field names are a contract (docs/serve.md,
"describe"): scripts read ``--json``, so fields are added, never renamed.

Every deadline is shown against the *bridge's* clock (ConnectGroupDescribe v1 ``NowMs``), so a
client whose clock is off still reads "in 40s" right.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from connect_bridge.codecs.connect_protocol import (
    Assignment,
    decode_assignment,
    decode_subscription,
)
from connect_bridge.codecs.errors import CodecError
from connect_bridge.codecs.ids import CONNECTOR_TASK, ConnectorTaskId
from connect_bridge.state.connect.legacy_members import MODE_OF_PROTOCOL
from connect_bridge.state.model import GroupType

__all__ = [
    "classic_group_view",
    "connect_group_view",
    "printable",
    "render_members",
    "render_table",
    "running",
    "waiting_phrase",
]

_WAITS: dict[str, str] = {
    "stable": "stable",
    "installed": "assignment installed",
    "heartbeat": "awaiting its next heartbeat",
    "rejoin": "to rejoin at its next Heartbeat",
    "join": "waiting for its JoinGroup",
    "sync": "awaiting SyncGroup",
}
"""``WaitingFor`` codes (``state.connect.describe.Waiting``) as an operator reads them; ``revoking`` and
``released-work`` name their counts (:func:`waiting_phrase`)."""

_CLASSIC_WAITS: dict[str, str] = {"PreparingRebalance": "join", "CompletingRebalance": "sync"}
"""A classic group's state as what each of its members waits for (DescribeGroups has no per-member
state: the round is the group's)."""


def _items(items: Iterable[Any]) -> list[str]:
    return sorted(str(ConnectorTaskId(*i)) if isinstance(i, tuple) else str(i) for i in items)


def running(items: Iterable[Any]) -> dict[str, list[str]]:
    """What a worker runs, as Connect's own logs and REST API list it: connector names, and task
    ids (``name-N``), each sorted; kept apart because ``a-0`` may be a connector's name too."""
    ids = [ConnectorTaskId(*i) for i in items]
    return {
        "connectors": sorted(i.connector for i in ids if i.is_connector),
        "tasks": [str(i) for i in sorted(i for i in ids if not i.is_connector)],
    }


def count_phrase(items: Iterable[ConnectorTaskId]) -> str:
    """``2 tasks``, ``1 connector and 3 tasks``: what an operator counts in."""
    items = list(items)
    connectors = sum(1 for i in items if i.task == CONNECTOR_TASK)
    tasks = len(items) - connectors
    counts = ((connectors, "connector"), (tasks, "task"))
    parts = [f"{n} {word}{'s' if n != 1 else ''}" for n, word in counts if n]
    return " and ".join(parts) or "nothing"


def waiting_phrase(code: str, revoking: Iterable[ConnectorTaskId], awaited: Iterable[ConnectorTaskId]) -> str:
    """The ``waiting`` text of a member: ``revoking 3 tasks``, ``waiting for its JoinGroup``..."""
    if code == "revoking":
        return f"revoking {count_phrase(revoking)}"
    if code == "released-work":
        return f"awaiting {count_phrase(awaited)} released by others"
    return _WAITS.get(code, code or "unknown")


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def _deadline(deadline_ms: int, now_ms: int) -> dict[str, Any]:
    """A deadline as absolute time and seconds from the bridge's now (None where not known)."""
    if deadline_ms < 0:
        return {"deadline_ms": None, "deadline": None, "in_s": None}
    in_s = round((deadline_ms - now_ms) / 1000, 1) if now_ms >= 0 else None
    return {"deadline_ms": deadline_ms, "deadline": _iso(deadline_ms), "in_s": in_s}


def _connect_member(m: Any, now_ms: int) -> dict[str, Any]:
    owned = m.current | m.revoking
    wait = _deadline(m.wait_deadline_ms, now_ms)
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id,
        "url": m.url,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "protocol": m.protocol,
        "classic_state": m.classic_state,
        "member_epoch": m.member_epoch,
        "state": m.state,
        "waiting_for": m.waiting_for,
        "waiting": waiting_phrase(m.waiting_for, m.revoking, m.target - owned),
        "wait_deadline_ms": wait["deadline_ms"],
        "wait_deadline": wait["deadline"],
        "wait_in_s": wait["in_s"],
        "owned_count": len(owned),
        "revoking_count": len(m.revoking),
        "target_count": len(m.target),
        "current": _items(m.current),
        "revoking": _items(m.revoking),
        "target": _items(m.target),
        **running(owned),
    }


def connect_group_view(g: Any) -> dict[str, Any]:
    """A ConnectGroupDescribe group (``state.api.DescribedGroup``) for ``--json`` and the table."""
    now = g.now_ms
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
        "now_ms": now if now >= 0 else None,
        "now": _iso(now) if now >= 0 else None,
        "held": [
            {
                "worker_url": h.url or None,
                "instance_id": h.instance_id,
                **_deadline(h.deadline_ms, now),
                "count": len(h.items),
                "items": _items(h.items),
            }
            for h in g.held
        ],
        "members": [_connect_member(m, now) for m in g.members],
    }


def _decoded(data: bytes, decode: Any) -> Any:
    try:
        return decode(data) if data else None
    except CodecError:
        return None


def _classic_member(m: Any, state: str, mode: str) -> dict[str, Any]:
    """A DescribeGroups member: what it runs after its last SyncGroup (its JoinGroup allocation, then
    the delta it was given, for an incremental protocol), its url from its subscription (only while
    the group is Stable: Kafka sends no metadata otherwise)."""
    assignment = _decoded(m.assignment, decode_assignment)
    subscription = _decoded(m.metadata, decode_subscription)
    assigned = frozenset(assignment.items) if assignment else frozenset()
    revoked = frozenset(assignment.revoked_items) if assignment else frozenset()
    allocation = getattr(subscription, "allocation", None)
    incremental = isinstance(allocation, Assignment) and mode != "eager"
    before = frozenset(allocation.items) if incremental else frozenset()
    owned = (before | assigned) - revoked
    code = _CLASSIC_WAITS.get(state, "stable" if state == "Stable" else "")
    if code == "stable" and revoked:
        code = "revoking"
    return {
        "member_id": m.member_id,
        "instance_id": m.group_instance_id,
        "url": subscription.url if subscription else None,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "protocol": mode,
        "member_epoch": None,
        "waiting_for": code,
        "waiting": waiting_phrase(code, revoked, ()) if code else "",
        "owned_count": len(owned),
        "revoking_count": len(revoked),
        "target_count": None,
        "scheduled_delay_ms": assignment.delay_ms if assignment else 0,
        "owned": _items(owned),
        "last_assignment": _items(assigned),
        "last_revoked": _items(revoked),
        **running(owned),
    }


def classic_group_view(g: Any) -> dict[str, Any]:
    """A DescribeGroups group (``state.classic.group.ClassicDescribedGroup``), members' Connect
    assignments decoded. The protocol (eager/compatible/sessioned) is the group's elected one, known
    while it is Stable; epochs are not in DescribeGroups (None)."""
    protocol = g.protocol_data or ""
    mode = MODE_OF_PROTOCOL.get(protocol, protocol)
    members = [_classic_member(m, g.state, mode) for m in g.members]
    assignments = (_decoded(m.assignment, decode_assignment) for m in g.members)
    leader = next((a for a in assignments if a is not None), None)  # every one names the leader
    return {
        "group_id": g.group_id,
        "error_code": g.error_code,
        "group_type": GroupType.CLASSIC.value,
        "state": g.state,
        "protocol": protocol,
        "group_epoch": None,
        "assignment_epoch": None,
        "leader_id": leader.leader if leader else None,
        "leader_url": leader.leader_url if leader else None,
        "config_offset": leader.config_offset if leader else None,
        "members": members,
    }


def printable(value: Any) -> Any:
    """``value`` with every string made safe for a terminal: ids, URLs and names are chosen by
    clients, and an escape sequence in one must not reach the operator's terminal (issue 11.8).
    Characters that are not printable are shown as Python escapes (``\\x1b``); a backslash is
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


# --- The table ------------------------------------------------------------------------------------


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value)


def _aligned(header: Sequence[str], rows: list[list[str]], indent: str = "  ") -> list[str]:
    """Columns padded to their widest cell (the last one is not padded)."""
    widths = [max(len(r[i]) for r in [list(header), *rows]) for i in range(len(header) - 1)]
    return [
        indent + "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in [list(header), *rows]
    ]


def _in(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"in {seconds:.0f}s" if seconds >= 0 else f"{-seconds:.0f}s overdue"


def _waiting_cell(m: dict[str, Any]) -> str:
    text = m.get("waiting") or m.get("state") or ""
    due = _in(m.get("wait_in_s"))
    return f"{text} (removed {due} if not)" if due else text


_MEMBER_HEADER = (
    "MEMBER",
    "WORKER URL",
    "CLIENT HOST",
    "PROTOCOL",
    "EPOCH",
    "OWNED",
    "TARGET",
    "WAITING FOR",
)


def _member_row(m: dict[str, Any]) -> list[str]:
    owned = m.get("owned_count", len(m.get("current", m.get("last_assignment", []))))
    target = m.get("target_count", len(m["target"]) if "target" in m else None)
    protocol = m.get("protocol") or "?"
    if m.get("classic_state"):
        protocol = f"{protocol} (classic)"
    return [
        _cell(m["member_id"]),
        _cell(m.get("url")),
        _cell(m.get("client_host")),
        protocol,
        _cell(m.get("member_epoch")),
        _cell(owned),
        _cell(target),
        _waiting_cell(m),
    ]


def adoption_line(a: dict[str, Any]) -> str:
    """A group's adoption progress (``describe --admin``; docs/adoption.md "Wired")."""
    line = f"  adoption: {a['phase']}"
    if a["phase"] == "relaying":
        line += f", members behind the bridge {a['members_behind_bridge']} of {a['members']}"
        if a.get("reason"):
            line += f" ({a['reason']})"
    elif a["phase"] == "releasing":  # the hand-back: members still to be sent upstream
        line += f", members left in the bridge's group {a.get('bridge_members')}"
    elif a["phase"] == "released":
        line += ", the upstream coordinator has the group again"
    elif a.get("taken_over_generation") is not None:
        line += f", taken over at generation {a['taken_over_generation']}"
        if a.get("upstream_state"):
            line += f", upstream group {a['upstream_state']}"
    if a.get("conflict"):
        line += f"; CONFLICT: {a['conflict']}"
    return line


def ha_line(h: dict[str, Any]) -> str:
    """Which bridge coordinates the group (``describe --admin`` with several bridges)."""
    owner = h.get("owner")
    where = f"bridge node {owner['node_id']} ({owner['host']})" if owner else "no bridge (moving)"
    return f"  bridges: state partition {h['partition']}, coordinated by {where}"


def _group_lines(g: dict[str, Any]) -> list[str]:
    classic = g["group_type"] == GroupType.CLASSIC
    head = f"GROUP {g['group_id']}  type {g['group_type']}  state {_cell(g['state'])}"
    if classic:
        protocol = g.get("protocol") or ""
        head += f"  protocol {_cell(MODE_OF_PROTOCOL.get(protocol, protocol))}"
    else:
        head += (
            f"  group epoch {g['group_epoch']}  target epoch {g['assignment_epoch']}"
            f"  assignor {_cell(g.get('assignor'))}"
        )
    lines = [head]
    if g.get("adoption"):
        lines.append(adoption_line(g["adoption"]))
    if g.get("ha"):
        lines.append(ha_line(g["ha"]))
    if g.get("error_code"):
        lines.append(f"  error {g['error_code']}")
    detail = f"  leader {_cell(g.get('leader_id'))} ({_cell(g.get('leader_url'))})"
    detail += f"  config offset {_cell(g.get('config_offset'))}"
    if g.get("now"):
        detail += f"  bridge time {g['now']}"
    lines.append(detail)
    members = g.get("members", [])
    if members:
        lines += _aligned(_MEMBER_HEADER, [_member_row(m) for m in members])
    else:
        lines.append("  (no members)")
    delays = [m.get("scheduled_delay_ms", 0) for m in members]
    if any(delays):
        lines.append(f"  Connect's assignor holds lost work: next rebalance within {max(delays) / 1000:.0f}s")
    held = g.get("held", [])
    if held:
        rows = [
            [
                _cell(h.get("worker_url") or h.get("instance_id")),
                str(h["count"]),
                f"{_cell(h.get('deadline'))} ({_in(h.get('in_s'))})"
                if h.get("in_s") is not None
                else _cell(h.get("deadline")),
            ]
            for h in held
        ]
        lines += _aligned(("HELD FOR", "ITEMS", "UNTIL"), rows)
    return lines


_MEMBERS_HEADER = ("GROUP", "MEMBER", "WORKER URL", "CLIENT ID", "CLIENT HOST", "#CONNECTORS", "#TASKS")


def render_members(groups: list[dict[str, Any]], verbose: bool = False) -> str:
    """``describe --members``: one row per worker of every group, as ``kafka-consumer-groups
    --describe --members`` lists consumers; ``verbose`` adds the connectors and tasks each one runs
    (what its last assignment left it owning), as ``--verbose`` adds the partitions there."""
    header = (*_MEMBERS_HEADER, "CONNECTORS", "TASKS") if verbose else _MEMBERS_HEADER
    rows = []
    for g in printable(groups):
        for m in g.get("members", []):
            row = [
                g["group_id"],
                _cell(m["member_id"]),
                _cell(m.get("url")),
                _cell(m.get("client_id")),
                _cell(m.get("client_host")),
                str(len(m.get("connectors", []))),
                str(len(m.get("tasks", []))),
            ]
            if verbose:
                row += [",".join(m.get("connectors", [])) or "-", ",".join(m.get("tasks", [])) or "-"]
            rows.append(row)
    if not rows:
        return "(no members)" if groups else "(no groups)"
    return "\n".join(_aligned(header, rows, indent=""))


def render_table(groups: list[dict[str, Any]]) -> str:
    """:func:`describe`'s groups for a terminal: one block per group, counts rather than item lists
    (``--json`` has the lists), every client-chosen string made printable."""
    blocks = ["\n".join(_group_lines(g)) for g in printable(groups)]
    return "\n\n".join(blocks) if blocks else "(no groups)"
