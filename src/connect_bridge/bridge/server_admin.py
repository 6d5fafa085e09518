"""The admin endpoint on the metrics listener: adoption progress and ``connect-bridge adopt``.

Served by ``metrics.start_http`` on ``metrics_listen`` (loopback unless configured otherwise, so an
operator command needs a shell on the bridge's host or a deliberately exposed listener):

- ``GET /admin/groups``: every group under adoption, its phase and progress (JSON);
- ``POST /admin/groups/GROUP/adopt``: take GROUP over now (``adoption.mode: command``, or to skip
  the wait in ``auto``); 200 when adopted, 409 with the reason when the condition does not hold.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote

from connect_bridge.bridge.server_adoption import Adoption

ADOPT_PATH = "/admin/groups/{group}/adopt"


def adopt_path(group_id: str) -> str:
    return ADOPT_PATH.format(group=quote(group_id, safe=""))


def _json(status: int, value: Any) -> tuple[int, bytes]:
    return status, (json.dumps(value, sort_keys=True) + "\n").encode()


def admin_handler(
    adoption: Callable[[], Adoption | None],
) -> Callable[[str, str], Awaitable[tuple[int, bytes]]]:
    """The handler ``start_http(admin=...)`` calls; ``adoption``: the server's (None until started,
    or when ``adoption.groups`` is not set)."""

    async def handle(method: str, path: str) -> tuple[int, bytes]:
        wiring = adoption()
        if method == "GET" and path == "/admin/groups":
            return _json(200, wiring.status() if wiring is not None else {})
        parts = path.split("/")
        adopt = len(parts) == 5 and parts[:3] == ["", "admin", "groups"] and parts[4] == "adopt"
        if method == "POST" and adopt:
            group_id = unquote(parts[3])
            if wiring is None:
                return _json(409, {"adopted": False, "message": "adoption is off (set adoption.groups)"})
            adopted, message = await wiring.command_adopt(group_id)
            return _json(200 if adopted else 409, {"adopted": adopted, "message": message})
        return _json(404, {"message": f"no admin resource {method} {path}"})

    return handle


__all__ = ["ADOPT_PATH", "admin_handler", "adopt_path"]
