"""Fail-closed defaults at start (issue 15 item 5): say so when the worker listener is open to the
network with neither TLS nor SASL.

Why a warning and not a refusal: a bridge inside a private network segment (a Kubernetes pod
network, a lab) is a legitimate deployment without either, as a Kafka PLAINTEXT listener is; but an
operator should never end up there by accident, so the start says it once, in one line naming the
settings that close it. The metrics listener needs no such check: it defaults to 127.0.0.1 and is
only elsewhere when ``metrics_listen`` says so.
"""

from __future__ import annotations

import ipaddress

__all__ = ["is_loopback", "listener_exposure_warning"]


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


def listener_exposure_warning(host: str, port: int, tls: bool, sasl: bool) -> str | None:
    """The start-up warning for a worker listener on ``host``:``port``, or None when it is fine."""
    if tls or sasl or is_loopback(host):
        return None
    return (
        f"the worker listener {host}:{port} is reachable from the network without TLS or SASL: anyone "
        "who can connect may join and describe every group (set tls and sasl, see docs/security.md)"
    )
