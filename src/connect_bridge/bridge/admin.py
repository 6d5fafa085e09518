"""The admin endpoint on the metrics listener: adoption progress and ``connect-bridge adopt``.

HTTPS when ``metrics_tls`` is set; the CLI's client side is ``cli_admin.py``.

Served by ``edge.http.start_http`` on ``metrics_listen``, behind ``admin_access.AdminAccess``: the
listener may be open to the network for Prometheus, but these resources answer only loopback peers,
clients whose certificate ``metrics_tls`` verified, or everyone with ``admin_allow_remote``; anyone
else gets 403 before this handler is called (docs/security.md "Fail-closed defaults"):

- ``GET /admin/groups``: every group under adoption, its phase and progress (JSON);
- ``POST /admin/groups/GROUP/adopt``: take GROUP over now (``adoption.mode: command``, or to skip
  the wait in ``auto``; a ``released`` GROUP is put under adoption again first); 200 when adopted,
  409 with the reason when the condition does not hold;
- ``POST /admin/groups/GROUP/release``: hand an adopted GROUP back to the upstream coordinator
  (docs/adoption.md "Hand-back"); 200 once ``releasing`` (or ``released``) is durable, 409 with the
  reason otherwise (not adopted, or new-protocol members to downgrade first).
- ``GET /admin/ha``: several bridges (``ha.enabled``): this bridge's node id, lease, partitions
  owned and loading, every partition's owner, and the partition of each group it coordinates;
- ``POST /admin/drain``: give every partition to the other bridges now, then stop (a rolling
  upgrade of the bridges themselves); 200 once drained.
- ``GET /admin/relay``: proxy mode: requests and bytes relayed per client kind, and the connector
  task clients seen relaying through the bridge (host, kind, client id: ``task_clients.py``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, unquote

from connect_bridge.bridge.ha.partitions import HighAvailability
from connect_bridge.bridge.proxy.relay import Relay

if TYPE_CHECKING:  # imported only when adoption is configured (``proxy.listeners``)
    from connect_bridge.bridge.adoption.wiring import Adoption

ADOPT_PATH = "/admin/groups/{group}/adopt"
RELEASE_PATH = "/admin/groups/{group}/release"


def adopt_path(group_id: str) -> str:
    return ADOPT_PATH.format(group=quote(group_id, safe=""))


def release_path(group_id: str) -> str:
    return RELEASE_PATH.format(group=quote(group_id, safe=""))


def _json(status: int, value: Any) -> tuple[int, bytes]:
    return status, (json.dumps(value, sort_keys=True) + "\n").encode()


DRAIN_PATH = "/admin/drain"
HA_PATH = "/admin/ha"
RELAY_PATH = "/admin/relay"


class AdminHost(Protocol):
    """What the admin resources need of the server (``BridgeServer``), all of it public: the HA
    gate (``/admin/ha``, ``/admin/drain``), the relay (``/admin/relay``) and its drain."""

    ha: HighAvailability | None
    relay: Relay | None

    async def drain(self) -> None: ...


def admin_handler(
    adoption: Callable[[], Adoption | None],
    server: Callable[[], AdminHost | None] | None = None,
) -> Callable[[str, str], Awaitable[tuple[int, bytes]]]:
    """The handler ``start_http(admin=...)`` calls; ``adoption``: the server's (None until started,
    or when ``adoption.groups`` is not set); ``server``: the ``BridgeServer`` (its ``ha``, ``relay``
    and ``drain``)."""

    async def handle(method: str, path: str) -> tuple[int, bytes]:
        host = server() if server is not None else None
        if path in (HA_PATH, DRAIN_PATH):
            return await _ha(method, path, host)
        if method == "GET" and path == RELAY_PATH:
            relay = host.relay if host is not None else None
            if relay is None or relay.clients is None:
                return _json(409, {"message": "this bridge relays nothing (no upstream)"})
            return _json(200, relay.clients.status())
        wiring = adoption()
        if method == "GET" and path == "/admin/groups":
            return _json(200, wiring.status() if wiring is not None else {})
        parts = path.split("/")
        action = parts[4] if len(parts) == 5 and parts[:3] == ["", "admin", "groups"] else None
        if method == "POST" and action in ("adopt", "release"):
            group_id, key = unquote(parts[3]), "adopted" if action == "adopt" else "released"
            if wiring is None:
                return _json(409, {key: False, "message": "adoption is off (set adoption.groups)"})
            command = wiring.command_adopt if action == "adopt" else wiring.command_release
            done, message = await command(group_id)
            return _json(200 if done else 409, {key: done, "message": message})
        return _json(404, {"message": f"no admin resource {method} {path}"})

    return handle


async def _ha(method: str, path: str, server: AdminHost | None) -> tuple[int, bytes]:
    ha = server.ha if server is not None else None
    if server is None or ha is None:
        return _json(409, {"message": "this bridge runs alone (ha.enabled is off)"})
    if method == "GET" and path == HA_PATH:
        return _json(200, ha.status())
    if method == "POST" and path == DRAIN_PATH:
        await server.drain()
        return _json(200, {"drained": True, "message": "every partition handed on; stopping"})
    return _json(404, {"message": f"no admin resource {method} {path}"})


__all__ = [
    "ADOPT_PATH",
    "DRAIN_PATH",
    "HA_PATH",
    "RELAY_PATH",
    "RELEASE_PATH",
    "AdminHost",
    "admin_handler",
    "adopt_path",
    "release_path",
]
