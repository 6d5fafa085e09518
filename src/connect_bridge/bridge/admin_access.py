"""Who may use the admin endpoint (``/admin/...`` on the metrics listener): it fails closed.

Why a gate: the admin endpoint stops the bridge (``POST /admin/drain``), takes groups over and hands
them back, and has no login of its own; it shares the metrics listener, which a deployment opens to
the network so that Prometheus can scrape it (``deploy/bridge.yaml``: ``0.0.0.0:9404``). Reaching
/metrics must not be enough to drain the bridge. So an admin request is answered only when one of
these holds, checked per connection:

1. the peer is on loopback (127.0.0.0/8, ::1, or IPv4-mapped loopback): a shell on the bridge's
   host, where ``connect-bridge adopt`` and ``drain`` are usually run (what ``kafka-*.sh`` tools
   against a local broker need too);
2. the peer presented a client certificate that the listener verified (``metrics_tls`` with
   ``client_auth: required``, or ``requested`` and a certificate given): the CA in
   ``metrics_tls.cafile`` then says who may, as ``ssl.client.auth`` does for a Kafka listener;
3. ``admin_allow_remote: true``: anyone who reaches the listener may, a deliberate choice for a
   listener that something else already protects (a NetworkPolicy, an authenticating proxy).

Anything else gets HTTP 403 with one line saying which of those to use. Every refusal is counted
(``connect_bridge_admin_requests_refused_total``); the log gets one WARNING per peer address at
most every ``LOG_INTERVAL_S``, with the number held back since, so a scanner cannot flood it.
/metrics, /livez and /readyz are not affected: they stay readable by whoever reaches the listener.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.bridge.exposure import DOCS_HINT

__all__ = ["LOG_INTERVAL_S", "AdminAccess", "is_loopback_peer"]

LOG_INTERVAL_S = 60.0
"""At most one refusal line per peer address in this many seconds."""
MAX_TRACKED_PEERS = 1024
"""Peers remembered for the rate limit; past it the oldest is forgotten (a scan of many addresses
must not grow memory without bound)."""

log = logging.getLogger("connect_bridge.admin")


def is_loopback_peer(peername: Any) -> bool:
    """Whether a connection's ``peername`` (``(host, port, ...)``) is on loopback; an IPv4-mapped
    IPv6 address (``::ffff:127.0.0.1``, a dual-stack listener) counts by its IPv4 address."""
    if not isinstance(peername, tuple) or not peername:
        return False
    try:
        address = ipaddress.ip_address(str(peername[0]).split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


@dataclass(eq=False)
class AdminAccess:
    """The admin endpoint's gate (module docstring); ``refusal`` is called once per admin request."""

    allow_remote: bool = False
    """``admin_allow_remote``: answer every peer that reaches the listener."""
    refused: Callable[[], None] | None = None
    """Counts one refusal (``Metrics.admin_refused.inc``)."""
    clock: Callable[[], float] = time.monotonic
    _logged: dict[str, tuple[float, int]] = field(default_factory=dict)

    def refusal(self, peername: Any, peercert: Any) -> str | None:
        """None when the request may be answered, else the one-line reason of its 403 (counted and,
        rate-limited, logged). ``peercert``: the verified client certificate (asyncio's
        ``peercert`` extra info: a non-empty dict only when the listener verified one)."""
        if self.allow_remote or is_loopback_peer(peername) or bool(peercert):
            return None
        host = str(peername[0]) if isinstance(peername, tuple) and peername else "unknown"
        reason = (
            f"the admin endpoint answers {host} only with a client certificate (metrics_tls with "
            "client_auth: required) or admin_allow_remote: true; run the command on the bridge's host, "
            f"{DOCS_HINT}"
        )
        if self.refused is not None:
            self.refused()
        self._log(host)
        return reason

    def _log(self, host: str) -> None:
        now = self.clock()
        last, held = self._logged.get(host, (None, 0))
        if last is not None and now - last < LOG_INTERVAL_S:
            self._logged[host] = (last, held + 1)
            return
        self._logged.pop(host, None)
        if len(self._logged) >= MAX_TRACKED_PEERS:
            self._logged.pop(next(iter(self._logged)))
        self._logged[host] = (now, 0)
        since = f" ({held} more refused since the last line)" if held else ""
        log.warning(
            "refused an admin request from %s: not loopback, no verified client certificate, "
            "admin_allow_remote is off%s",
            host,
            since,
        )
