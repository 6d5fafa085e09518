"""Fail-closed defaults at start (issue 15 item 5): say so when the worker listener lets anyone who
can reach it join: open to the network with no SASL and no required client certificate.

Why a warning and not a refusal: a bridge inside a private network segment (a Kubernetes pod
network, a lab) is a legitimate deployment without either, as a Kafka PLAINTEXT listener is; but an
operator should never end up there by accident, so the start says it once, in one line naming who
can connect and the settings that close it. TLS alone is not enough to stay silent: it encrypts,
but without ``client_auth: required`` (or SASL) any client that trusts the bridge's certificate
(a public CA's, often) is let in anonymously, as on a Kafka SSL listener with
``ssl.client.auth=none``. The pointer is ``connect-bridge docs security``, which a pip install has,
not a repository path, which it has not. The admin endpoint's own gate is ``admin_access.py``.
"""

from __future__ import annotations

import ipaddress

__all__ = ["DOCS_HINT", "admin_exposure_warning", "is_loopback", "listener_exposure_warning"]

DOCS_HINT = "see `connect-bridge docs security`"


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a listen address) accepts connections from this machine only. A wildcard
    (``0.0.0.0``, ``::``, empty) or a host name other than ``localhost`` is not: it may resolve to
    any interface."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listener_exposure_warning(
    host: str, port: int, tls: bool, sasl: bool, client_certs_required: bool = False
) -> str | None:
    """The start-up warning for a worker listener on ``host``:``port``, or None when it is fine:
    loopback, SASL on, or TLS with ``client_auth: required`` (every client then proves who it is).
    ``client_auth: requested`` does not count: a client without a certificate still gets in."""
    if sasl or (tls and client_certs_required) or is_loopback(host):
        return None
    if tls:
        return (
            f"the worker listener {host}:{port} has TLS but neither required client certificates nor "
            "SASL: anyone who can reach it and trusts its certificate may join and describe every "
            f"group (set tls.client_auth: required, or sasl; {DOCS_HINT})"
        )
    return (
        f"the worker listener {host}:{port} is reachable from the network without TLS or SASL: anyone "
        "who can connect may join and describe every group (set tls with client_auth: required, "
        f"or sasl; {DOCS_HINT})"
    )


def admin_exposure_warning(host: str, port: int, allow_remote: bool) -> str | None:
    """The start-up warning for ``admin_allow_remote`` on a metrics listener open to the network
    (the admin endpoint then drains the bridge for anyone who reaches it), or None."""
    if not allow_remote or is_loopback(host):
        return None
    return (
        f"admin_allow_remote is on and the metrics listener {host}:{port} is reachable from the network: "
        "anyone who can connect may adopt, release and drain (set it off and use metrics_tls with "
        f"client_auth: required, {DOCS_HINT})"
    )
