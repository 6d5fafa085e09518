"""The client side of the bridge's admin endpoint (``adopt``, ``release``, ``describe --admin``).

The admin endpoint is served on ``metrics_listen``, which is HTTPS when ``metrics_tls`` is set
(docs/security.md). ``--admin`` therefore takes ``https://HOST:PORT`` as well as ``HOST:PORT`` (plain
HTTP, as before; ``http://HOST:PORT`` is the same), and the TLS options are the ones ``describe``
already has for the worker listener (``--ca-file``, ``--cert``/``--key``), turned into a context by
the same ``bridge.tls.client_context`` that ``upstream_tls`` uses, so a bad file is refused with the
same one line.

Why a module of its own: the failures of a TLS connection (a certificate that is not trusted, a
listener that does not speak TLS, one that wants a client certificate, plain HTTP sent to an HTTPS
port) surface from ``urllib`` as half a dozen exception types whose text means nothing to an
operator; :func:`admin_request` turns each into one line saying what to change on the command line.

A state-changing request (POST: adopt, release, drain) carries the bridge's admin token
(``Authorization: Bearer``, ``admin_access.py``; with a client certificate only if it can be read):
read from
``--admin-token-file``, else ``$CONNECT_BRIDGE_ADMIN_TOKEN_FILE``, else the file the bridge names at
``GET /admin/token-file``; the file is readable by the bridge's user only, which is the proof.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

__all__ = ["TOKEN_ENV", "AdminEndpoint", "AdminError", "admin_endpoint", "admin_request", "admin_token"]

_SCHEMES = ("http", "https")


class AdminError(ValueError):
    """Why the admin endpoint cannot be used, as one operator-readable line."""


@dataclass(frozen=True)
class AdminEndpoint:
    """Where the admin endpoint is and how to talk to it."""

    shown: str
    """``--admin`` as given (for messages)."""
    base_url: str
    """``http://HOST:PORT`` or ``https://HOST:PORT`` (IPv6 hosts in brackets)."""
    context: ssl.SSLContext | None
    """The client TLS context for ``https``; None for plain HTTP."""
    client_cert: bool = False
    """Whether the context presents a client certificate (``--cert``)."""
    token_file: str | None = None
    """``--admin-token-file``; None: ``$CONNECT_BRIDGE_ADMIN_TOKEN_FILE``, else the bridge's answer."""

    @property
    def tls(self) -> bool:
        return self.context is not None


def admin_endpoint(
    admin: str,
    ca_file: str | None = None,
    cert: str | None = None,
    key: str | None = None,
    *,
    tls_options_are_for_admin: bool = True,
    token_file: str | None = None,
) -> AdminEndpoint:
    """Parse ``--admin`` and build the TLS context for an ``https://`` address.

    ``tls_options_are_for_admin``: ``adopt``/``release``, whose TLS options serve only the admin
    endpoint, refuse them next to a plain-HTTP address (the operator meant HTTPS); ``describe``'s
    serve its worker-listener connection too, so there they are simply not used for plain HTTP.
    Raises :class:`AdminError` (a bad address, a scheme other than http/https, a TLS file that cannot
    be used)."""
    from connect_bridge.bridge.security.tls import TlsError, UpstreamTls, client_context
    from connect_bridge.bridge.settings import parse_host_port

    scheme, sep, rest = admin.partition("://")
    if not sep:
        scheme, rest = "http", admin
    scheme = scheme.lower()
    if scheme not in _SCHEMES:
        raise AdminError(
            f"--admin: unknown scheme {scheme!r} in {admin!r}: use HOST:PORT (plain HTTP) or "
            "https://HOST:PORT (a bridge with metrics_tls)"
        )
    try:
        host, port = parse_host_port(rest.rstrip("/"))
    except ValueError as exc:
        raise AdminError(f"--admin: {exc}") from None
    shown_host = f"[{host}]" if ":" in host else host
    base_url = f"{scheme}://{shown_host}:{port}"
    if scheme == "http":
        if tls_options_are_for_admin and (ca_file or cert or key):
            raise AdminError(
                f"--ca-file/--cert/--key are for an HTTPS admin endpoint, but --admin {admin} is plain "
                f"HTTP: use --admin https://{shown_host}:{port} (a bridge with metrics_tls)"
            )
        return AdminEndpoint(admin, base_url, None, token_file=token_file)
    try:
        settings = UpstreamTls(cafile=ca_file, certfile=cert, keyfile=key)
    except ValueError:
        raise AdminError("--cert and --key go together (a client certificate needs its key)") from None
    try:
        context = client_context(settings, "--admin")
    except TlsError as exc:
        raise AdminError(str(exc)) from None
    return AdminEndpoint(admin, base_url, context, client_cert=cert is not None, token_file=token_file)


def _reason(endpoint: AdminEndpoint, exc: BaseException) -> str:
    """One line for a failed admin request: what went wrong and which option fixes it."""
    at = f"the bridge's admin endpoint at {endpoint.shown}"
    cause = exc.reason if isinstance(exc, urllib.error.URLError) else exc
    if isinstance(cause, ssl.SSLCertVerificationError):
        return (
            f"{at}: its certificate is not trusted ({cause.verify_message}): pass --ca-file with the CA "
            "that signed metrics_tls's certificate"
        )
    if isinstance(cause, ssl.SSLError):
        text = f"{cause.reason or ''} {cause}".upper()
        not_tls = ("WRONG_VERSION_NUMBER", "RECORD_LAYER", "RECORD LAYER", "UNEXPECTED_EOF", "EOF OCCURRED")
        if any(marker in text for marker in not_tls):  # an HTTP answer, or a close, to a ClientHello
            plain = endpoint.base_url.replace("https://", "", 1)
            return f"{at} does not speak TLS (metrics_tls is not set there): use --admin {plain} (plain HTTP)"
        if "CERTIFICATE_REQUIRED" in text or "HANDSHAKE_FAILURE" in text or "UNKNOWN_CA" in text:
            return _client_cert_refused(endpoint, at, str(cause.reason or cause))
        return f"{at}: TLS failed ({cause.reason or cause})"
    no_http_answer = (http.client.RemoteDisconnected, http.client.BadStatusLine, ConnectionResetError)
    if isinstance(cause, no_http_answer) or (isinstance(cause, OSError) and cause.errno is None):
        if not endpoint.tls:
            https = endpoint.base_url.replace("http://", "https://", 1)
            return (
                f"{at} gave no HTTP answer ({type(cause).__name__}): if the bridge sets metrics_tls, "
                f"use --admin {https} with --ca-file"
            )
        if isinstance(cause, ConnectionResetError | http.client.RemoteDisconnected):
            # TLS 1.3: the server checks the client certificate after the client's handshake ended,
            # so a refusal arrives as a closed connection at the first read.
            return _client_cert_refused(endpoint, at, f"closed the connection: {type(cause).__name__}")
    detail = getattr(cause, "strerror", None) or str(cause) or type(cause).__name__
    return f"cannot reach {at}: {detail}; it is served on metrics_listen (--admin is that address)"


def _client_cert_refused(endpoint: AdminEndpoint, at: str, detail: str) -> str:
    if endpoint.client_cert:
        return (
            f"{at} refused the TLS connection ({detail}): its metrics_tls cafile does not trust the "
            "client certificate of --cert"
        )
    return (
        f"{at} refused the TLS connection ({detail}): it requires a client certificate "
        "(metrics_tls client_auth): pass --cert and --key"
    )


TOKEN_ENV = "CONNECT_BRIDGE_ADMIN_TOKEN_FILE"


def admin_token(endpoint: AdminEndpoint, timeout: float) -> str:
    """The admin token: from ``--admin-token-file``, ``$CONNECT_BRIDGE_ADMIN_TOKEN_FILE``, or the file
    ``GET /admin/token-file`` names (module docstring). :class:`AdminError` when it cannot be read."""
    from connect_bridge.bridge.security.admin_access import TOKEN_FILE_PATH

    path = endpoint.token_file or os.environ.get(TOKEN_ENV)
    if not path:
        _, answer = admin_request(endpoint, "GET", TOKEN_FILE_PATH, timeout)
        path = answer.get("token_file") if isinstance(answer, dict) else None
        if not path:
            raise AdminError(
                f"{endpoint.shown} names no admin token file: pass --admin-token-file (the bridge's "
                "admin_token_file) or a client certificate (--cert, --key)"
            )
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise AdminError(
            f"cannot read the bridge's admin token {path} ({why}): run as the bridge's user (or root), "
            "or pass --admin-token-file"
        ) from None


def admin_request(endpoint: AdminEndpoint, method: str, path: str, timeout: float) -> tuple[int, Any]:
    """One request to the admin endpoint: (HTTP status, JSON body). Raises :class:`AdminError` with
    one line when there is no JSON answer (unreachable, TLS refused, not the admin endpoint), or
    when the bridge refused it (403: who may; 401: the token). A change (not GET) carries the admin
    token (``admin_token``) unless a client certificate is presented."""
    headers = {}
    if method not in ("GET", "HEAD"):
        try:
            headers["Authorization"] = f"Bearer {admin_token(endpoint, timeout)}"
        except AdminError:
            if not endpoint.client_cert:  # with one, the certificate may be enough
                raise
    request = urllib.request.Request(endpoint.base_url + path, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=endpoint.context) as answer:
            status, body = answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read() or b"{}"
    except (OSError, http.client.HTTPException) as exc:  # URLError is an OSError
        raise AdminError(_reason(endpoint, exc)) from None
    try:
        parsed = json.loads(body)
    except ValueError:
        raise AdminError(
            f"the bridge's admin endpoint at {endpoint.shown} answered HTTP {status} without JSON: "
            "is --admin the bridge's metrics_listen?"
        ) from None
    if status in (401, 403) and isinstance(parsed, dict):  # admin_access.py: who, Host/Origin, token
        raise AdminError(f"{endpoint.shown} refused the admin request: {parsed.get('message')}")
    return status, parsed
