"""How the bridge's own connections reach the upstream cluster securely: one object for all of them.

The bridge talks to the real brokers from several places (the per-client relay links and upstream
discovery in ``upstream/cluster.py``, the state topic's and the config topic's kafka-python
clients); each must use the same TLS settings, or one of them silently falls back to plaintext and
fails against a TLS-only listener. ``UpstreamSecurity`` is built once at start (``app.run``) from the
settings' ``upstream_tls:`` block and handed to every one of them:

- ``ssl``: the ``ssl.SSLContext`` for asyncio connections (``server_hostname`` = the broker's host,
  which is what hostname verification checks), or None for plaintext.
- ``kafka_python_options()``: the matching kafka-python keyword arguments (``security_protocol``,
  ``ssl_context``), merged into every KafkaConsumer/KafkaProducer/KafkaAdminClient the bridge makes.

SASL towards the upstream (``upstream_sasl:``) extends ``kafka_python_options`` with the
``sasl_*`` arguments and turns ``security_protocol`` into ``SASL_SSL``/``SASL_PLAINTEXT``.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any

from connect_bridge.bridge.security.sasl_settings import UpstreamSasl
from connect_bridge.bridge.security.tls import UpstreamTls, client_context

__all__ = ["UpstreamSecurity", "upstream_security"]


@dataclass(frozen=True)
class UpstreamSecurity:
    """TLS (and SASL, ``sasl_options``) of the bridge's own upstream connections."""

    ssl: ssl.SSLContext | None = None
    sasl_options: dict[str, Any] = field(default_factory=dict, repr=False)  # holds the password
    """kafka-python ``sasl_mechanism``/``sasl_plain_username``/... for the bridge's own identity;
    empty without SASL."""
    sasl: UpstreamSasl | None = None
    """The bridge's own SASL identity (``upstream_sasl:``), for its asyncio connections (discovery,
    ``KafkaConnection.connect(login=upstream_login(sasl))``); ``sasl_options`` is the same for
    kafka-python."""

    def kafka_python_options(self) -> dict[str, Any]:
        """kafka-python client keyword arguments; empty for a plaintext cluster without SASL."""
        sasl = bool(self.sasl_options)
        if self.ssl is None and not sasl:
            return {}
        protocol = ("SASL_" if sasl else "") + ("SSL" if self.ssl is not None else "PLAINTEXT")
        options: dict[str, Any] = {"security_protocol": protocol, **self.sasl_options}
        if self.ssl is not None:
            options["ssl_context"] = self.ssl
        return options


def upstream_security(tls: UpstreamTls | None, sasl: UpstreamSasl | None = None) -> UpstreamSecurity:
    """Build the contexts from the settings; ``TlsError`` (one line) when a file cannot be used."""
    options = sasl.kafka_python_options() if sasl is not None else {}
    options.pop("security_protocol", None)  # kafka_python_options() above decides it, with TLS
    return UpstreamSecurity(
        ssl=client_context(tls, "upstream_tls") if tls is not None else None, sasl_options=options, sasl=sasl
    )
