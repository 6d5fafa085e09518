"""The bridge's own SASL login on a connection it opens to the upstream cluster (``upstream_sasl:``).

Discovery and DescribeAcls use ``wire.client.KafkaConnection``, an asyncio connection of the bridge's own;
on a SASL listener the broker closes it unless the first requests are SaslHandshake (v1) and
SaslAuthenticate. The mechanisms' messages are kafka-python's own (``kafka.net.sasl``: PLAIN and
SCRAM-SHA-256/512, with the server signature checked), so the bridge speaks exactly what its
kafka-python clients (state and config topics) speak with the same settings.
"""

from __future__ import annotations

import functools
from typing import Any, Protocol

from kafka.net.sasl import get_sasl_mechanism
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest

from connect_bridge.bridge.security.sasl_settings import UpstreamSasl
from connect_bridge.bridge.startup import StartupError
from connect_bridge.codecs.error_codes import ErrorCode, error_name
from connect_bridge.wire.client import Login


class KafkaConnection(Protocol):
    """What a login needs of ``wire.client.KafkaConnection`` (its ``request``; a test's fake will do)."""

    async def request(self, message: Any, version: int, timeout: float | None = 30.0) -> Any: ...


__all__ = ["SaslLoginError", "sasl_login", "upstream_login"]

AUTHENTICATE_VERSION = 1
"""SaslAuthenticate v1: the first with ``session_lifetime_ms`` (KIP-368); every Kafka 2.2+ has it."""
MAX_ROUNDS = 5
"""More rounds than any password mechanism has: a broker that keeps asking is refused."""


class SaslLoginError(StartupError):
    """The upstream refused the bridge's own credentials, as one line (never the password). Not an
    ``OSError``: a wrong password is not retried like an unreachable broker, ``serve`` stops at once."""


async def sasl_login(conn: KafkaConnection, sasl: UpstreamSasl) -> int:
    """Authenticate ``conn`` as ``sasl.username``; the session lifetime the broker granted (0: none).

    Raises ``SaslLoginError`` with the broker's error, e.g. a wrong password or a mechanism the
    listener does not enable (its list is in the message)."""
    handshake = await conn.request(SaslHandshakeRequest(mechanism=sasl.mechanism), 1)
    if handshake.error_code != ErrorCode.NONE:
        offered = ", ".join(handshake.mechanisms or []) or "none"
        raise SaslLoginError(
            f"upstream_sasl: the broker refused mechanism {sasl.mechanism} "
            f"({error_name(handshake.error_code)}; it offers {offered})"
        )
    mechanism: Any = get_sasl_mechanism(sasl.mechanism)(
        sasl_mechanism=sasl.mechanism,
        sasl_plain_username=sasl.username,
        sasl_plain_password=sasl.password.get_secret_value(),
    )
    for _ in range(MAX_ROUNDS):
        reply = await conn.request(
            SaslAuthenticateRequest(auth_bytes=mechanism.auth_bytes()), AUTHENTICATE_VERSION
        )
        if reply.error_code != ErrorCode.NONE:
            detail = f": {reply.error_message}" if reply.error_message else ""
            raise SaslLoginError(
                f"upstream_sasl: the broker refused user {sasl.username!r} "
                f"({error_name(reply.error_code)}{detail})"
            )
        try:
            mechanism.receive(reply.auth_bytes)
        except (ValueError, KeyError) as exc:  # e.g. a SCRAM server signature that does not match
            wrong = f"upstream_sasl: the broker's {sasl.mechanism} reply is wrong: {exc}"
            raise SaslLoginError(wrong) from None
        if mechanism.is_done():
            if not mechanism.is_authenticated():
                raise SaslLoginError(f"upstream_sasl: {sasl.mechanism} did not authenticate")
            return int(reply.session_lifetime_ms or 0)
    raise SaslLoginError(f"upstream_sasl: {sasl.mechanism} took more than {MAX_ROUNDS} rounds")


def upstream_login(sasl: UpstreamSasl | None) -> Login | None:
    """The login ``wire.client.KafkaConnection.connect(login=...)`` runs on a new connection: this
    identity's :func:`sasl_login`, or None (no ``upstream_sasl:``, a plaintext listener)."""
    return None if sasl is None else functools.partial(sasl_login, sasl=sasl)
