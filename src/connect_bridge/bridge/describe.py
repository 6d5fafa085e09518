"""``connect-bridge describe``: ask a running bridge, over the wire, what its groups look like.

Connect groups come from ConnectGroupDescribe (v1 where the bridge has it); classic groups (all
members legacy) from ListGroups + DescribeGroups, whose member assignments are decoded with the
Connect codec. What is shown, and how, is ``describe_view``'s job.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from ssl import SSLContext
from typing import Any

from kafka.protocol.admin.groups import DescribeGroupsRequest
from kafka.protocol.metadata import ApiVersionsRequest

from connect_bridge.bridge.describe_view import (
    classic_group_view,
    connect_group_view,
    printable,
    render_members,
    render_table,
)
from connect_bridge.bridge.security.sasl_client import upstream_login
from connect_bridge.codecs.error_codes import ErrorCode
from connect_bridge.codecs.messages import ApiKey
from connect_bridge.state.model import GroupType
from connect_bridge.wire import maps as wm
from connect_bridge.wire.client import KafkaConnection

__all__ = ["describe", "printable", "render_members", "render_table"]

DESCRIBE_GROUPS_VERSION = 5
LIST_GROUPS_VERSION = 5
DESCRIBE_BATCH = 500
"""Groups named per describe request: well below the bridge's per-request bounds (docs/serve.md
"Bounds on work per request"), which defer the rest of a request with COORDINATOR_LOAD_IN_PROGRESS."""
_DEFERRED = int(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
CONNECT_DESCRIBE_VERSION = 1
"""The newest ConnectGroupDescribe this client reads (v1: held work, members' waits and deadlines)."""


async def _connect_describe_version(conn: KafkaConnection) -> int:
    """The ConnectGroupDescribe version to ask: the newest both sides know, so that ``describe``
    still works against a bridge that answers only v0 (it then shows no waits or held work)."""
    versions = await conn.request(ApiVersionsRequest(), 0)
    for entry in versions.api_keys or ():
        if entry.api_key == ApiKey.CONNECT_GROUP_DESCRIBE:
            return max(0, min(CONNECT_DESCRIBE_VERSION, entry.max_version))
    return 0


async def describe(
    host: str, port: int, group: str | None = None, ssl: SSLContext | None = None, sasl: Any = None
) -> list[dict[str, Any]]:
    """Every group (or ``group``) as a plain dict: ListGroups says which API describes each one.
    ``ssl``: the bridge's listener has ``tls:`` (``describe --ca-file/--cert/--key``); ``sasl``: it
    has ``sasl:`` (an ``UpstreamSasl`` login, ``describe --sasl-user``)."""
    login = upstream_login(sasl)
    client_id = "connect-bridge-describe"
    conn = await KafkaConnection.connect(host, port, client_id=client_id, ssl=ssl, login=login)
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
            version = await _connect_describe_version(conn)

            async def ask_connect(ids: list[str]) -> list[Any]:
                return wm.describe_response_from_wire(await conn.request(wm.describe_to_wire(ids), version))

            out += [connect_group_view(g) for g in await _in_batches(connect_ids, ask_connect)]
        if classic_ids:

            async def ask_classic(ids: list[str]) -> list[Any]:
                request = DescribeGroupsRequest(groups=ids, include_authorized_operations=False)
                resp = await conn.request(request, DESCRIBE_GROUPS_VERSION)
                return wm.describe_groups_response_from_wire(resp)

            out += [classic_group_view(g) for g in await _in_batches(classic_ids, ask_classic)]
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
