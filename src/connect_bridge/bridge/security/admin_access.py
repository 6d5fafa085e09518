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

A loopback peer is not proof of an operator, though: a web page in a browser on the bridge's host
can POST to ``127.0.0.1`` (a "simple" cross-site request, ``text/plain``, needs no preflight), DNS
rebinding lets such a page read the answers too, and a same-host mesh sidecar (Istio's inbound
passthrough connects from 127.0.0.6) makes remote callers look local. So, on top of the peer check
(``request_refusal``):

4. the ``Host`` header must name this listener the way an operator does: an IP address, ``localhost``,
   this machine's host name, the ``metrics_listen`` host, or one of ``admin_hosts`` (a rebinding page
   sends its own domain name); an ``Origin`` header, which browsers add and tools do not, must be the
   same origin as ``Host`` (403 otherwise);
5. a state-changing request (any method but GET and HEAD: drain, adopt, release) needs what a
   browser cannot forge: ``Authorization: Bearer <token>`` with the token of ``admin_token_file``
   (default ``<state_dir>/admin.token``, created ``0600`` at the first start: only the bridge's user
   and root can read it), or a client certificate ``metrics_tls`` verified (401 otherwise). The CLI
   finds the file itself: ``GET /admin/token-file`` names it (a path is no secret: reading the file
   is the proof), or ``--admin-token-file``.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import os
import secrets
import socket
import stat
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from connect_bridge.bridge.security.exposure import DOCS_HINT

__all__ = [
    "LOG_INTERVAL_S",
    "TOKEN_FILE_PATH",
    "AdminAccess",
    "AdminTokenError",
    "host_name_of",
    "is_loopback_peer",
    "load_admin_token",
]

TOKEN_FILE_PATH = "/admin/token-file"
"""``GET``: where the admin token is (``{"token_file": PATH}``), for the CLI on the bridge's host."""
SAFE_METHODS = frozenset({"GET", "HEAD"})
"""Methods that change nothing: no token needed."""

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


class AdminTokenError(ValueError):
    """The admin token file cannot be used, as one line naming it."""


def load_admin_token(path: Path) -> str:
    """The token in ``path``, created (32 random bytes, URL-safe base64, mode ``0600``) when the file
    does not exist. Refused when others than the owner may read or write it (as ssh refuses a private
    key others can read): anyone who can read it can drain the bridge."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another bridge of the same state_dir was faster
            pass
        except OSError as exc:
            raise AdminTokenError(f"admin_token_file {path}: cannot create it ({exc.strerror})") from None
        else:
            with os.fdopen(handle, "w", encoding="ascii") as out:
                out.write(secrets.token_urlsafe(32) + "\n")
    try:
        mode = path.stat().st_mode
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise AdminTokenError(f"admin_token_file {path}: cannot read it ({exc})") from None
    if stat.S_IMODE(mode) & 0o077:
        raise AdminTokenError(
            f"admin_token_file {path}: mode {stat.S_IMODE(mode):04o} lets others read or change it "
            f"(whoever reads it may drain the bridge): chmod 600 {path}"
        )
    if len(token) < 16:
        raise AdminTokenError(f"admin_token_file {path}: holds no token of at least 16 characters")
    return token


def host_name_of(host_header: str) -> str:
    """The host of a ``Host`` header (``name``, ``name:port``, ``[v6]:port``), lower case."""
    value = host_header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


@dataclass(eq=False)
class AdminAccess:
    """The admin endpoint's gate (module docstring); ``refusal`` is called once per admin request."""

    allow_remote: bool = False
    """``admin_allow_remote``: answer every peer that reaches the listener."""
    refused: Callable[[], None] | None = None
    """Counts one refusal (``Metrics.admin_refused.inc``)."""
    clock: Callable[[], float] = time.monotonic
    token: str | None = None
    """The admin token (``load_admin_token``); None: only a verified client certificate may change
    anything."""
    token_file: Path | None = None
    """Where ``token`` is (what ``GET /admin/token-file`` answers)."""
    hosts: Collection[str] = ()
    """Host names a ``Host`` header may carry besides addresses, ``localhost`` and this machine's
    name (``admin_hosts``, the ``metrics_listen`` host)."""
    _logged: dict[str, tuple[float, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hosts = frozenset({"localhost", socket.gethostname().lower(), *(h.lower() for h in self.hosts)})

    def request_refusal(
        self, method: str, headers: Mapping[str, str], peername: Any, peercert: Any
    ) -> tuple[int, str] | None:
        """None when the admin request may be answered, else its (HTTP status, one-line reason):
        the peer (``refusal``), then ``Host``/``Origin`` (403), then the token for a state-changing
        request (401). ``headers``: lower-case names."""
        reason = self.refusal(peername, peercert)
        if reason is not None:
            return 403, reason
        peer = str(peername[0]) if isinstance(peername, tuple) and peername else "unknown"
        host = headers.get("host", "")
        name = host_name_of(host)
        if not name or not (_is_address(name) or name in self.hosts):
            self._count_refusal(peer, f"Host {host!r} is not a name of this listener")
            return 403, (
                f"Host {host!r} is not a name of this listener: use its address, localhost, or add the "
                "name to admin_hosts (a foreign name is how DNS rebinding reaches a local endpoint)"
            )
        origin = headers.get("origin")
        if origin is not None and urlsplit(origin).netloc.lower() != host.strip().lower():
            self._count_refusal(peer, f"a web page's request (Origin {origin!r})")
            return 403, f"Origin {origin!r} is not this listener: the admin endpoint is not for web pages"
        if method.upper() in SAFE_METHODS or bool(peercert):
            return None
        offered = headers.get("authorization", "")
        scheme, _, credential = offered.partition(" ")
        if (
            self.token is not None
            and scheme.lower() == "bearer"
            and hmac.compare_digest(credential.strip().encode(), self.token.encode())
        ):
            return None
        self._count_refusal(peer, f"{method} without the admin token or a verified client certificate")
        where = f" (the token in {self.token_file})" if self.token_file is not None else ""
        return 401, (
            f"{method} needs Authorization: Bearer <admin token>{where} or a client certificate "
            "metrics_tls verified; connect-bridge reads the token file itself when run as the "
            "bridge's user, or pass --admin-token-file"
        )

    def _count_refusal(self, peer: str, why: str) -> None:
        if self.refused is not None:
            self.refused()
        self._log(peer, why)

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
        self._log(host, "not loopback, no verified client certificate, admin_allow_remote is off")
        return reason

    def _log(self, host: str, why: str) -> None:
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
        log.warning("refused an admin request from %s: %s%s", host, why, since)
