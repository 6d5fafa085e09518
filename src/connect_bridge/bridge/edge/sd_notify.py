"""systemd's readiness protocol (``Type=notify``), without a dependency: one datagram to the unix
socket named by ``NOTIFY_SOCKET``.

systemd starts a ``Type=notify`` unit with ``NOTIFY_SOCKET`` set (a path, or ``@name`` for a
socket in the abstract namespace) and considers it started only when the service sends
``READY=1`` there; units ordered after it wait until then. ``serve`` sends it once the record
store is replayed and the worker listener is up (the moment ``/readyz`` turns 200), and
``STOPPING=1`` when it begins to stop. Outside systemd (no ``NOTIFY_SOCKET``) nothing is sent.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)

READY = "READY=1"
STOPPING = "STOPPING=1"


def notify_address(environ: Mapping[str, str] | None = None) -> str | bytes | None:
    """The address ``NOTIFY_SOCKET`` names (``@`` = the abstract namespace: a leading NUL byte)."""
    value = (os.environ if environ is None else environ).get("NOTIFY_SOCKET", "")
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()
    return value


def notify(*fields: str, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``fields`` (``READY=1``, ``STATUS=...``) as one datagram; whether one was sent.

    A failure to send is logged, never raised: the bridge serves whether or not its supervisor
    hears about it (systemd then fails the start at ``TimeoutStartSec``, which says why)."""
    address = notify_address(environ)
    if address is None:
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall("\n".join(fields).encode())
    except OSError as exc:
        log.warning("cannot notify systemd at NOTIFY_SOCKET=%s: %s", os.environ.get("NOTIFY_SOCKET"), exc)
        return False
    return True
