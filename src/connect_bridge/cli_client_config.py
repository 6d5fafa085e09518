"""``--command-config FILE``: Kafka client properties for the commands that connect to a bridge.

Kafka's own tools (``kafka-consumer-groups.sh --command-config admin.properties``) take the client's
security settings from a Java properties file; an operator has that file already, for the cluster
the bridge fronts. This module reads the subset a Python client can honour and turns it into the
TLS context and SASL login ``describe`` uses (the same ``UpstreamTls``/``UpstreamSasl`` the bridge's
own upstream connections take), so a file that works with ``kafka-consumer-groups.sh`` against a
broker works with ``connect-bridge describe`` against the bridge.

What is refused is refused in one line naming the property and what to set instead (a JKS or
PKCS12 store, inline PEM, a SASL mechanism other than PLAIN/SCRAM): silently connecting without the
security the file asks for would be worse than not connecting. Properties that do not change
security (``client.id``, timeouts) are ignored, as this client has its own.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ClientSecurity", "CommandConfigError", "client_security", "read_properties"]

log = logging.getLogger("connect_bridge.cli")


class CommandConfigError(ValueError):
    """The properties file cannot be used; one line naming the file and the property."""


@dataclass(frozen=True)
class ClientSecurity:
    """What a ``--command-config`` file asks for: a TLS context (None: plaintext) and a SASL login
    (an ``UpstreamSasl``; None: no SASL)."""

    protocol: str
    ssl: Any
    sasl: Any


_PROTOCOLS = {
    # security.protocol: (TLS, SASL)
    "PLAINTEXT": (False, False),
    "SSL": (True, False),
    "SASL_PLAINTEXT": (False, True),
    "SASL_SSL": (True, True),
}

_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The password mechanisms this client logs in with, and the JAAS login module each one takes."""

_STORE_CONVERSIONS = {
    "truststore": "export its CAs to PEM (keytool -exportcert -rfc -keystore STORE -alias ALIAS "
    "-file ca.pem) and set ssl.truststore.type=PEM, ssl.truststore.location=ca.pem",
    "keystore": "convert it to one PEM file holding the key and its certificate chain (openssl pkcs12 "
    "-in STORE.p12 -out client.pem) and set ssl.keystore.type=PEM, ssl.keystore.location=client.pem",
}
"""What to do instead of a JKS or PKCS12 store, which Python's ``ssl`` module cannot read."""

_INLINE_PEM = ("ssl.truststore.certificates", "ssl.keystore.certificate.chain", "ssl.keystore.key")
"""Kafka's inline-PEM properties: the PEM text in the properties file itself."""

_USED = frozenset(
    {
        "security.protocol",
        "ssl.truststore.type",
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.keystore.type",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "sasl.mechanism",
        "sasl.jaas.config",
    }
)

_PROPERTY = re.compile(r"(?P<key>[^=:\s]+)\s*(?:[=:]\s*|\s*)(?P<value>.*)", re.S)
"""A logical line: the key ends at the first ``=``, ``:`` or blank; the value is the rest."""
_JAAS = re.compile(
    r"^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)(?P<options>.*?);?\s*$", re.S
)
_JAAS_OPTION = re.compile(r"""(?P<key>[\w.\-]+)\s*=\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;]+))""")


def read_properties(path: Path) -> dict[str, str]:
    """A Java ``.properties`` file: ``key=value``, ``key: value`` or ``key value`` lines, ``#`` and
    ``!`` comments, a trailing backslash continuing a line (``sasl.jaas.config`` is often split)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CommandConfigError(f"--command-config {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise CommandConfigError(f"--command-config {path}: cannot read it ({why})") from None
    props: dict[str, str] = {}
    logical = ""
    for raw in [*text.splitlines(), ""]:
        line = raw.strip()
        if not logical and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and (len(line) - len(line.rstrip("\\"))) % 2:
            logical += line[:-1]
            continue
        logical += line
        match = _PROPERTY.match(logical)
        if match is not None:
            props[match["key"]] = match["value"].strip()
        logical = ""
    return props


def _jaas_login(where: str, mechanism: str, jaas: str) -> tuple[str, str]:
    """(username, password) of a ``sasl.jaas.config`` for ``mechanism``'s login module."""
    match = _JAAS.match(jaas)
    if match is None:
        raise CommandConfigError(
            f"{where}: sasl.jaas.config is not a JAAS entry (expected: {_LOGIN_MODULES[mechanism]} "
            'required username="USER" password="PASSWORD";)'
        )
    if match["module"] != _LOGIN_MODULES[mechanism]:
        raise CommandConfigError(
            f"{where}: sasl.jaas.config names {match['module']}, but sasl.mechanism {mechanism} "
            f"needs {_LOGIN_MODULES[mechanism]}"
        )
    options = {
        o["key"]: (re.sub(r"\\(.)", r"\1", o["quoted"]) if o["quoted"] is not None else o["bare"])
        for o in _JAAS_OPTION.finditer(match["options"])
    }
    missing = [k for k in ("username", "password") if not options.get(k)]
    if missing:
        raise CommandConfigError(f"{where}: sasl.jaas.config has no {' and no '.join(missing)}")
    return options["username"], options["password"]


def _store(where: str, props: dict[str, str], kind: str) -> Path | None:
    """``ssl.<kind>.location`` when it is a PEM file (``ssl.<kind>.type=PEM``), else None or refused."""
    location = props.get(f"ssl.{kind}.location")
    if not location:
        return None
    store_type = props.get(f"ssl.{kind}.type", "").upper()
    if store_type != "PEM":
        shown = store_type or "JKS (Kafka's default when ssl." + kind + ".type is not set)"
        raise CommandConfigError(
            f"{where}: ssl.{kind}.type {shown} is not supported, only PEM: {_STORE_CONVERSIONS[kind]}"
        )
    return Path(location)


def client_security(path: Path, name: str = "describe") -> ClientSecurity:
    """The TLS context and SASL login a ``--command-config`` file asks for (module docstring);
    ``CommandConfigError`` or ``TlsError`` (a PEM file that cannot be used) in one line."""
    from pydantic import SecretStr

    from connect_bridge.bridge.security.sasl_settings import UpstreamSasl
    from connect_bridge.bridge.security.tls import UpstreamTls, client_context

    where = f"--command-config {path}"
    props = read_properties(path)
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in _PROTOCOLS:
        raise CommandConfigError(
            f"{where}: security.protocol {protocol} is not one of {', '.join(_PROTOCOLS)}"
        )
    use_tls, use_sasl = _PROTOCOLS[protocol]
    for key in _INLINE_PEM:
        if use_tls and props.get(key):
            raise CommandConfigError(
                f"{where}: {key} (inline PEM) is not supported: put the PEM in a file and name it "
                "with ssl.truststore.location or ssl.keystore.location (type PEM)"
            )
    ignored = sorted(k for k in props if k not in _USED and k.startswith(("ssl.", "sasl.")))
    if ignored:
        log.warning("%s: ignored (this client does not use them): %s", where, ", ".join(ignored))
    context = None
    if use_tls:
        keystore = _store(where, props, "keystore")
        key_password = props.get("ssl.key.password")
        settings = UpstreamTls(
            cafile=_store(where, props, "truststore"),
            certfile=keystore,
            keyfile=keystore,  # a PEM keystore holds the private key and its certificate chain
            key_password=SecretStr(key_password) if key_password else None,
            check_hostname=props.get("ssl.endpoint.identification.algorithm", "https").strip() != "",
        )
        context = client_context(settings, name)
    login = None
    if use_sasl:
        mechanism = props.get("sasl.mechanism", "GSSAPI").upper()
        if mechanism not in _LOGIN_MODULES:
            shown = mechanism + (" (Kafka's default)" if "sasl.mechanism" not in props else "")
            raise CommandConfigError(
                f"{where}: sasl.mechanism {shown} is not supported: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"
            )
        jaas = props.get("sasl.jaas.config")
        if not jaas:
            raise CommandConfigError(f"{where}: security.protocol {protocol} needs sasl.jaas.config")
        username, password = _jaas_login(where, mechanism, jaas)
        login = UpstreamSasl(mechanism=mechanism, username=username, password=SecretStr(password))
    return ClientSecurity(protocol, context, login)
