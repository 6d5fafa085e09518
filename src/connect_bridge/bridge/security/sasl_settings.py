"""The ``sasl:`` and ``upstream_sasl:`` settings, and what the bridge's own upstream clients make of them.

Apart from ``settings.py`` so the SASL pieces (``edge/sasl_gate.py``, ``wire/client.py``, the kafka-python
clients of the state and config topics) read one definition. ``settings.BridgeSettings`` holds both
sections and checks how they combine with ``upstream`` (``check_sasl_combination``).

- ``sasl`` is how *clients of the bridge* authenticate: ``passthrough`` (proxy mode: relayed to the
  upstream cluster on the client's own link, the principal read with ``sasl_peek``), ``terminated``
  (local mode: verified by the bridge against ``credentials_file``), or ``none``.
- ``upstream_sasl`` is *the bridge's own* identity towards the upstream cluster, used by every
  connection the bridge opens for itself (discovery, config topic, state topic, DescribeAcls). The
  password is a ``SecretStr``: it never appears in a repr, a log line or an error message.
"""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator

PasswordMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
"""The mechanisms with a user name and password, the ones the bridge can speak and terminate."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SaslSettings(_Strict):
    """``sasl:``: how clients of the bridge authenticate (docs/security.md "SASL wired")."""

    mode: Literal["none", "passthrough", "terminated"] = "none"
    mechanisms: list[PasswordMechanism] = Field(["SCRAM-SHA-256", "SCRAM-SHA-512"], min_length=1)
    """Terminated: the mechanisms offered (Kafka's ``sasl.enabled.mechanisms``). PLAIN sends the
    password in the clear: offer it only on a TLS listener. Pass-through offers what upstream offers."""
    credentials_file: Path | None = None
    """Terminated: the SCRAM credentials (``connect-bridge credentials add``); read at start."""
    session_lifetime_ms: int = Field(0, ge=0)
    """Terminated: Kafka's ``connections.max.reauth.ms`` (KIP-368); 0 = sessions never expire.
    Pass-through takes the lifetime the upstream broker announces."""
    oauth_claim: str = Field("sub", min_length=1)
    """Pass-through OAUTHBEARER: the JWT claim naming the principal (``sasl.oauthbearer.sub.claim.name``)."""
    # What a password guesser may cost (terminated; sasl_guard.py, docs/security.md "Bounds").
    failed_authentication_delay_ms: int = Field(100, ge=0)
    """Terminated: how long a failed SaslAuthenticate waits before its answer (and the close), as
    Kafka's ``connection.failed.authentication.delay.ms``; 0 answers at once."""
    password_check_threads: int = Field(1, gt=0)
    """Terminated: threads that run PLAIN's password KDF, off the event loop."""
    max_pending_password_checks: int = Field(64, gt=0)
    """Terminated: PLAIN checks running or waiting at most; past it a new one closes its connection
    unanswered (the client reconnects after its backoff)."""

    @model_validator(mode="after")
    def _terminated_needs_credentials(self) -> SaslSettings:
        if self.mode == "terminated" and self.credentials_file is None:
            raise ValueError(
                "sasl.mode terminated needs credentials_file (make one with: connect-bridge credentials add)"
            )
        return self

    @property
    def enabled(self) -> bool:
        return self.mode != "none"


class UpstreamSasl(_Strict):
    """``upstream_sasl:``: the bridge's own SASL identity on the upstream cluster."""

    mechanism: PasswordMechanism = "SCRAM-SHA-512"
    username: str = Field(min_length=1)
    password: SecretStr

    @model_validator(mode="after")
    def _password_given(self) -> UpstreamSasl:
        if not self.password.get_secret_value():
            raise ValueError("upstream_sasl.password must not be empty")
        return self

    def kafka_python_options(self, ssl_context: ssl.SSLContext | None = None) -> dict[str, Any]:
        """Keyword arguments for kafka-python's clients (``KafkaConsumer``, ``KafkaAdminClient``...)."""
        options: dict[str, Any] = {
            "security_protocol": "SASL_SSL" if ssl_context is not None else "SASL_PLAINTEXT",
            "sasl_mechanism": self.mechanism,
            "sasl_plain_username": self.username,
            "sasl_plain_password": self.password.get_secret_value(),
        }
        if ssl_context is not None:
            options["ssl_context"] = ssl_context
        return options


def check_sasl_combination(
    sasl: SaslSettings, upstream_sasl: UpstreamSasl | None, upstream: list[str]
) -> None:
    """How ``sasl`` and ``upstream_sasl`` must fit ``upstream`` (a ValueError naming the fix).

    Pass-through relays to a SASL listener, which the bridge's own connections (discovery, topics)
    must then authenticate to as well: refusing to start says so now, rather than a discovery that
    times out on a broker closing the connection."""
    if sasl.mode == "passthrough":
        if not upstream:
            raise ValueError(
                "sasl.mode passthrough needs upstream (clients authenticate against the upstream "
                "cluster); without one use sasl.mode terminated"
            )
        if upstream_sasl is None:
            raise ValueError(
                "sasl.mode passthrough needs upstream_sasl (the bridge's own identity on the upstream "
                "cluster's SASL listener, for discovery and its topics)"
            )
    if sasl.mode == "terminated" and upstream:
        raise ValueError(
            "sasl.mode terminated is for a bridge without upstream; in front of a cluster use "
            "sasl.mode passthrough"
        )
    if upstream_sasl is not None and not upstream:
        raise ValueError("upstream_sasl needs upstream")
