"""``connections:``: what a client may hold on the worker listener before it has authenticated.

Why a section of its own: before authentication a peer has proven nothing, so what it can reserve
(connection slots, bytes of partly read frames, the time it keeps a slot) must be small and bounded
separately from what an authenticated worker may use, or anyone who can reach the port can lock the
workers out (docs/security.md "Before authentication"). ``edge.accept.ConnectionSlots`` enforces
the slot limits, ``server.py`` the deadline and the frame limits.

A connection counts as *unauthenticated* from the moment it is accepted (before its TLS handshake)
until it has proven who it is: its SASL exchange completed (``sasl.mode`` passthrough or
terminated); without SASL, until its TLS handshake completed (then the certificate is all there is
to prove), or at once on a plaintext listener without SASL. The frame limits and the deadline apply
only on listeners that require SASL, where the unauthenticated phase lasts past the handshake.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

KiB = 1024
MiB = 1024 * KiB


class ConnectionSettings(BaseModel):
    """``connections:`` (docs/security.md "Before authentication", docs/serve.md "Settings")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    listen_backlog: int = Field(1024, gt=0, le=65535)
    """Connections the kernel queues on the worker listener before the bridge accepts them (Kafka's
    ``socket.listen.backlog.size``, default 50; the kernel caps it at ``net.core.somaxconn``). The
    bridge fronts every Kafka client of the workers, and after a restart all of them reconnect at
    once: past a full queue the kernel drops their SYNs and each retries 1, 3, 7 s later. A queued
    connection holds no slot and nothing of the bridge's until it is accepted."""
    tls_handshake_timeout_ms: int = Field(10_000, gt=0)
    """A TLS handshake not completed this long after the connection was accepted is aborted (asyncio's
    own default is 60 s). 10 s: a handshake takes milliseconds, and a JVM worker on a loaded host or a
    client across a slow link still finishes well inside it."""
    max_unauthenticated: int | None = Field(None, gt=0)
    """Connections not yet authenticated (including TLS handshakes in progress) at once; further
    connections are closed at accept. None: half of ``max_connections``, so the other half stays for
    authenticated clients however many peers without credentials connect."""
    max_unauthenticated_per_address: int | None = Field(100, gt=0)
    """Unauthenticated connections from one client address at once (each loopback address counts as
    its own address; None: no per-address limit)."""
    max_per_address: int | None = Field(None, gt=0)
    """All connections from one client address at once (Kafka's ``max.connections.per.ip``, whose
    default is no limit, as here: a fleet behind one NAT address or proxy shares it)."""
    authentication_timeout_ms: int = Field(30_000, gt=0)
    """On a listener with SASL, a connection that has not authenticated this long after it was
    accepted is closed. 30 s: a Kafka client's default ``request.timeout.ms``; an honest client
    completes ApiVersions, SaslHandshake and SaslAuthenticate in milliseconds."""
    max_unauthenticated_frame_bytes: int = Field(512 * KiB, gt=0)
    """On a listener with SASL, the largest request frame before authentication, checked on the size
    prefix before anything of the frame is read (Kafka's ``sasl.server.max.receive.size``, same
    default); a larger one closes the connection."""
    max_unauthenticated_buffered_bytes: int = Field(16 * MiB, gt=0)
    """On a listener with SASL, bytes of unauthenticated frames above 64 KiB being read at once over
    all connections (SASL requests are far smaller; an OAUTHBEARER token of some kilobytes fits
    under 64 KiB). A frame that would exceed it closes its connection."""

    def unauthenticated_limit(self, max_connections: int) -> int:
        """``max_unauthenticated``, or its default: half of ``max_connections`` (at least one)."""
        limit = self.max_unauthenticated if self.max_unauthenticated is not None else max_connections // 2
        return max(1, min(limit, max_connections))


__all__ = ["ConnectionSettings"]
