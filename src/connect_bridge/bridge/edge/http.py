"""The metrics listener: /metrics, /livez, /readyz and the admin resources over HTTP(S).

A few lines over the bridge's own accept loop (``edge/accept.py``, which counts a connection from
accept, before its TLS handshake): it serves a handful of fixed paths to a scraper, a kubelet and
``connect-bridge adopt``, which does not justify an HTTP framework dependency. Who may call the
admin resources is ``security/admin_access.py``'s to say; what they do is ``bridge/admin.py``'s.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from ssl import SSLContext
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST

from connect_bridge.bridge.edge.accept import ConnectionSlots, Listener, RateLimited, Slot, start_listener
from connect_bridge.bridge.edge.connection_settings import ConnectionSettings
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.admin_access import TOKEN_FILE_PATH, AdminAccess

HTTP_READ_TIMEOUT_S = 5.0
"""Default time from accept to a whole request head, TLS handshake included
(``metrics_request_timeout_ms``): one deadline for the head, not one per line, or a client sending a
header line every few seconds holds its connection for ever (slowloris)."""
HTTP_MAX_CONNECTIONS = 64
"""Default connections held at once, counted from accept (``metrics_max_connections``); past it a
new one is closed at once (503 first on plaintext). Scrapers and probes open one connection at a
time."""
HTTP_MAX_LINE = 8192
HTTP_MAX_HEADERS = 100
TLS_HANDSHAKE_RECORD = b"\x16"
"""The first byte of a TLS ClientHello (a handshake record): on the plaintext listener such a
client (a scraper told ``https``) is closed at once; no HTTP answer would reach it, and waiting for
a request line it never sends held its place for ``metrics_request_timeout_ms``."""
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

log = logging.getLogger(__name__)

_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    503: "Service Unavailable",
}


Admin = Callable[[str, str], Awaitable[tuple[int, bytes]]]
"""An admin handler: (method, path) to (HTTP status, JSON body)."""


async def start_http(
    host: str,
    port: int,
    metrics: Metrics,
    ready: Callable[[], bool],
    ssl: SSLContext | None = None,
    admin: Admin | None = None,
    admin_access: AdminAccess | None = None,
    *,
    max_connections: int = HTTP_MAX_CONNECTIONS,
    request_timeout_s: float = HTTP_READ_TIMEOUT_S,
) -> Listener:
    """Serve GET/HEAD /metrics, /livez and /readyz on ``host:port`` (port 0 = any free port).

    /livez answers 200 while the event loop runs (so a wedged loop fails it); /readyz answers 200
    only when ``ready()`` is true (state replayed, listener up), otherwise 503. One request per
    connection (``Connection: close``): scrapers and probes open a new connection each time anyway.
    With ``ssl`` (``metrics_tls:``, a ``ReloadingServerContext``'s context) it is HTTPS.
    ``admin``: answers ``/admin/...`` (GET and POST; ``server_admin.py``) to the peers
    ``admin_access`` lets in (default: loopback and verified client certificates, refusals counted in
    ``admin_refused``); anyone else gets 403 (``admin_access.py``: this listener is often open to the
    network for the scraper), and a state-changing request without the admin token 401.
    At most ``max_connections`` are held at once, counted from accept (before the TLS handshake;
    at most half of them in a handshake, a quarter from one address); a plaintext connection past
    it is answered 503 and closed, a TLS one closed at accept. The TLS handshake and the request
    head must arrive within ``request_timeout_s`` of the accept (one deadline for both).
    """
    gate = admin_access if admin_access is not None else AdminAccess(refused=metrics.admin_refused.inc)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slot: Slot) -> None:
        try:
            peer = (writer.get_extra_info("peername"), writer.get_extra_info("peercert"))
            # One deadline from accept: the TLS handshake and the request head share it.
            left_s = max(0.0, request_timeout_s - (time.monotonic() - slot.accepted))
            status, content_type, body, head_only = await _respond(
                reader, metrics, ready, admin, gate, peer, left_s, plaintext=ssl is None
            )
            reason = _REASONS.get(status, "")
            headers = [
                f"HTTP/1.1 {status} {reason}",
                f"Content-Type: {content_type}",
                f"Content-Length: {len(body)}",
                "Connection: close",
            ]
            if status == 405:
                headers.append("Allow: GET, HEAD")
            if status == 401:
                headers.append('WWW-Authenticate: Bearer realm="connect-bridge admin"')
            writer.write(("\r\n".join(headers) + "\r\n\r\n").encode("ascii"))
            if not head_only:
                writer.write(body)
            await writer.drain()
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or stalled; nothing to answer
        finally:
            slots.release(slot)
            writer.close()
            try:
                await writer.wait_closed()
            except ConnectionError:
                pass

    # Counted from accept, before the TLS handshake (``server_accept``), as on the worker listener:
    # a socket that never finishes its handshake holds a place until the deadline. At most half of
    # the places may be in a handshake at once, and a quarter from one address, so a peer flooding
    # handshakes from one address leaves a scraper from another its places.
    slots = ConnectionSlots(
        max_connections,
        ConnectionSettings(max_unauthenticated_per_address=max(1, max_connections // 4)),
        names=("metrics_max_connections", "half of metrics_max_connections in a TLS handshake"),
    )
    listener = await start_listener(
        handle,
        host,
        port,
        slots,
        tls=ssl,
        handshake_timeout_ms=max(1, round(request_timeout_s * 1000)),
        limit=HTTP_MAX_LINE,
        refused=RateLimited(),
        sasl=False,
        turn_away=None if ssl is not None else _busy,
    )
    await listener.start_serving()
    return listener


def _busy(sock: socket.socket) -> None:
    """A plaintext connection past ``metrics_max_connections`` is answered 503 before it is closed
    (unread; a TLS one is closed at accept: an answer would need a handshake first)."""
    sock.send(_BUSY)


async def _respond(
    reader: asyncio.StreamReader,
    metrics: Metrics,
    ready: Callable[[], bool],
    admin: Admin | None = None,
    gate: AdminAccess | None = None,
    peer: tuple[Any, Any] = (None, None),
    request_timeout_s: float = HTTP_READ_TIMEOUT_S,
    *,
    plaintext: bool = True,
) -> tuple[int, str, bytes, bool]:
    """(status, content type, body, head only) for one request; raises ``ConnectionAbortedError``
    for a TLS client on the plaintext listener (``plaintext``), which is closed unanswered."""
    text = "text/plain; charset=utf-8"
    headers: dict[str, str] = {}
    try:
        async with asyncio.timeout(request_timeout_s):  # the whole head, not each line
            first = await reader.readexactly(1)
            if plaintext and first == TLS_HANDSHAKE_RECORD:
                log.debug("a TLS handshake on the plaintext metrics listener from %s: closed", peer[0])
                raise ConnectionAbortedError("a TLS ClientHello on the plaintext metrics listener")
            request_line = first if first == b"\n" else first + await reader.readline()
            for _ in range(HTTP_MAX_HEADERS):
                line = await reader.readline()
                if line in (b"\r\n", b"\n", b""):
                    break
                name, sep, value = line.decode("latin-1").partition(":")
                if sep:
                    headers.setdefault(name.strip().lower(), value.strip())
            else:
                return 400, text, b"too many headers\n", False
    except (ValueError, asyncio.LimitOverrunError):  # a line longer than the stream limit
        return 400, text, b"line too long\n", False
    parts = request_line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/"):
        return 400, text, b"bad request line\n", False
    method, target = parts[0], parts[1]
    if admin is not None and target.startswith("/admin/"):
        # fail closed: loopback only by default, Host/Origin checked, the token for a change
        refused = (gate or AdminAccess()).request_refusal(method, headers, *peer)
        if refused is not None:
            status, why = refused
            return status, "application/json", (json.dumps({"message": why}) + "\n").encode(), False
        if method == "GET" and target.split("?", 1)[0] == TOKEN_FILE_PATH and gate is not None:
            where = str(gate.token_file) if gate.token_file is not None else None
            return 200, "application/json", (json.dumps({"token_file": where}) + "\n").encode(), False
    if admin is not None and target.startswith("/admin/") and method in ("GET", "POST"):
        status, body = await admin(method, target.split("?", 1)[0])
        return status, "application/json", body, False
    if method not in ("GET", "HEAD"):
        return 405, text, b"method not allowed\n", False
    head_only = method == "HEAD"
    path = target.split("?", 1)[0]
    if path == "/metrics":
        return 200, CONTENT_TYPE_LATEST, metrics.render(), head_only
    if path == "/livez":
        return 200, text, b"ok\n", head_only
    if path == "/readyz":
        try:
            is_ready = bool(ready())
        except Exception:
            log.exception("readiness check failed")
            is_ready = False
        return (200, text, b"ready\n", head_only) if is_ready else (503, text, b"not ready\n", head_only)
    return 404, text, b"not found\n", head_only
