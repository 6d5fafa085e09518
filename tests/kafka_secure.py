"""One secured Apache Kafka 4.3.1 broker for the security tests (issue 15): TLS, SASL and ACLs.

``start_secure_kafka(workdir, tls)`` runs one KRaft node (broker + controller) on 127.0.0.1 with
five listeners, each on its own free port:

==================  ==============================================================================
PLAINTEXT           setup only (topics, ACLs): principal ``User:ANONYMOUS``, a super user
SSL                 TLS, ``ssl.client.auth=requested``: with the client certificate the principal
                    is ``User:CN=client`` (Kafka's default: the subject DN in RFC 2253 form),
                    without one ``User:ANONYMOUS``
SASL_PLAINTEXT      SASL PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 and OAUTHBEARER, no TLS
SASL_SSL            the same mechanisms over TLS (no client certificate asked)
CONTROLLER          the KRaft quorum (not for clients)
==================  ==============================================================================

Certificates come from ``tests/certs.py`` (the CA signs the broker's ``localhost``/``127.0.0.1``
certificate and the client certificate); Kafka reads them as PEM (``ssl.keystore.type=PEM``). SCRAM
users are created by Kafka's own ``StorageTool format --add-scram`` (as ``kafka-storage.sh`` does),
PLAIN users are listed in the listener's JAAS config; every user has the same password for all three
mechanisms (``SecureKafka.users``).

OAUTHBEARER (tests only) uses Kafka's *unsecured* JWS support: the broker's default server callback
handler (``OAuthBearerUnsecuredValidatorCallbackHandler``, no ``sasl.oauthbearer.jwks.endpoint.url``)
accepts an ``alg: none`` token whose ``sub`` claim names the principal (``User:<sub>``) and whose
``exp`` is in the future; it checks no signature, so anyone may claim any name (``admin`` too:
loopback test brokers only). Kafka 4.3.1 needs nothing more than the listener's
``OAuthBearerLoginModule`` JAAS line (verified by running ``tests/test_sasl_oauth.py``).
``SecureKafka.mechanisms`` stays the password mechanisms; ``SecureKafka.unsecured_jws(sub)`` makes a
token, ``oauth_jaas(sub)`` a Java client's JAAS.

Authorization: ``StandardAuthorizer`` with ``super.users`` = ``User:admin`` (the bridge's own
identity in the tests) and ``User:ANONYMOUS`` (the PLAINTEXT setup listener and the controller
listener, which broker and controller use between themselves). ``allow.everyone.if.no.acl.found``
is **true** in the shared session broker: a resource without ACLs is open to every authenticated
principal, so a test restricts exactly the groups/topics it creates ACLs for (with
``SecureKafka.admin()``'s ``create_acls``, names unique per test) and no test needs ACLs for the rest.
``start_secure_kafka(..., allow_everyone_if_no_acl=False)`` starts a stricter one if ever needed.

The session fixture ``secure_kafka`` (registered in ``tests/conftest.py``; marks ``broker`` + ``jvm``)
shares one such broker for the run. Its interface (``SecureKafka``'s fields and helpers) is stable:
the SASL and authorization tests use it too.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from certs import TlsMaterial, make_tls_material
from kafka_fixtures import BROKER_START_TIMEOUT_S, broker_properties, format_storage
from kafka_processes import (
    HEAP,
    HOST,
    KafkaProcess,
    KafkaStartError,
    free_ports,
    jvm_command,
    require_java,
    spawn,
    write_properties,
)
from tansu import accepts, await_ready, broker_answers, session_process

__all__ = [
    "ADMIN",
    "OAUTHBEARER",
    "SASL_MECHANISMS",
    "USERS",
    "SecureKafka",
    "secure_kafka",
    "start_secure_kafka",
]

ADMIN = "admin"
"""The super user (the bridge's own ``upstream_sasl`` identity in tests)."""
USERS: dict[str, str] = {ADMIN: "admin-secret", "alice": "alice-secret", "bob": "bob-secret"}
"""User -> password, for PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 alike."""
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
"""The password mechanisms (every user in ``USERS`` logs in with each)."""
OAUTHBEARER = "OAUTHBEARER"
"""Also enabled on both SASL listeners, with Kafka's unsecured JWS validator (tests only)."""
CLIENT_PRINCIPAL = "User:CN=client"
"""The SSL principal of ``TlsMaterial.client_cert`` (subject ``/CN=client``)."""
LISTENERS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL", "CONTROLLER")


@dataclass
class SecureKafka(KafkaProcess):
    """The running secured broker: one bootstrap address per listener, the TLS material (CA and
    client certificate paths) and the users. ``plaintext`` is for setup; the others are what the
    bridge (or a client) connects to."""

    plaintext: str = ""
    ssl: str = ""
    sasl_plaintext: str = ""
    sasl_ssl: str = ""
    controller: str = ""
    tls: TlsMaterial | None = None
    users: dict[str, str] = field(default_factory=lambda: dict(USERS))
    admin_user: str = ADMIN
    client_principal: str = CLIENT_PRINCIPAL
    mechanisms: tuple[str, ...] = SASL_MECHANISMS
    workdir: Path = Path()
    cluster_id: str = ""

    @property
    def material(self) -> TlsMaterial:
        assert self.tls is not None
        return self.tls

    @property
    def ca_file(self) -> Path:
        return self.material.ca_cert

    @property
    def client_cert(self) -> Path:
        return self.material.client_cert

    @property
    def client_key(self) -> Path:
        return self.material.client_key

    def password(self, user: str) -> str:
        return self.users[user]

    def answers(self) -> bool:
        """Ready: the PLAINTEXT listener answers kafka-python's metadata request."""
        host, port = self.plaintext.rsplit(":", 1)
        return accepts(host, int(port)) and broker_answers(self.plaintext, "secure-probe", 5000)

    def ssl_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        """A client ``SSLContext`` trusting the test CA (hostname checked: the broker certificate
        names 127.0.0.1), presenting the client certificate unless ``client_cert=False``."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def kafka_python_config(
        self,
        listener: str,
        *,
        user: str | None = None,
        mechanism: str = "SCRAM-SHA-256",
        client_cert: bool = True,
    ) -> dict[str, Any]:
        """Keyword arguments for a kafka-python client (``KafkaProducer(**cfg)``) on ``listener``
        (``PLAINTEXT``, ``SSL``, ``SASL_PLAINTEXT`` or ``SASL_SSL``) as ``user`` over ``mechanism``."""
        listener = listener.upper()
        cfg: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap(listener),
            "security_protocol": listener,
        }
        if listener in ("SSL", "SASL_SSL"):
            cfg["ssl_context"] = self.ssl_context(client_cert=client_cert and listener == "SSL")
        if listener.startswith("SASL"):
            name = user or self.admin_user
            cfg |= {
                "sasl_mechanism": mechanism,
                "sasl_plain_username": name,
                "sasl_plain_password": self.users[name],
            }
        return cfg

    def java_client_properties(
        self,
        listener: str,
        *,
        user: str | None = None,
        mechanism: str = "SCRAM-SHA-256",
        client_cert: bool = True,
        bootstrap: str | None = None,
    ) -> dict[str, str]:
        """Java client properties (``security.protocol``, ``ssl.*`` as PEM, ``sasl.*``) for
        ``listener``; ``bootstrap`` replaces the broker's address (e.g. by a bridge's)."""
        listener = listener.upper()
        props = {
            "bootstrap.servers": bootstrap or self.bootstrap(listener),
            "security.protocol": listener,
        }
        if listener in ("SSL", "SASL_SSL"):
            props |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.ca_file)}
            if client_cert and listener == "SSL":
                props |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(self.client_keystore)}
        if listener.startswith("SASL"):
            props |= {
                "sasl.mechanism": mechanism,
                "sasl.jaas.config": self.jaas(user or self.admin_user, mechanism),
            }
        return props

    @property
    def client_keystore(self) -> Path:
        """The client key and certificate in one PEM file, as Kafka's PEM keystore reads them."""
        return self.workdir / "client-keystore.pem"

    def jaas(self, user: str, mechanism: str) -> str:
        module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
        return (
            f"org.apache.kafka.common.security.{module} required "
            f'username="{user}" password="{self.users[user]}";'
        )

    @staticmethod
    def unsecured_jws(sub: str, *, lifetime_s: float = 3600.0, **claims: Any) -> str:
        """An unsecured JWS (``alg: none``, empty signature) as Kafka's unsecured login module makes
        it: ``sub``, ``iat`` and ``exp`` (``lifetime_s`` from now; negative: already expired) plus
        ``claims``. The shared broker accepts it on its SASL listeners (OAUTHBEARER)."""
        now = time.time()
        payload = {"sub": sub, "iat": int(now), "exp": int(now + lifetime_s)} | claims

        def b64(doc: dict[str, Any]) -> str:
            return base64.urlsafe_b64encode(json.dumps(doc).encode()).rstrip(b"=").decode()

        return f"{b64({'alg': 'none'})}.{b64(payload)}."

    @staticmethod
    def oauth_jaas(sub: str) -> str:
        """A Java client's ``sasl.jaas.config`` for OAUTHBEARER with Kafka's unsecured login module."""
        return (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            f'unsecuredLoginStringClaim_sub="{sub}";'
        )

    def bootstrap(self, listener: str) -> str:
        """The bootstrap address of ``listener`` (case-insensitive name)."""
        return str(getattr(self, listener.lower()))

    def admin(self) -> Any:
        """A kafka-python ``KafkaAdminClient`` on the PLAINTEXT listener (a super user): create
        topics and ACLs (``create_acls``); close it after use."""
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.plaintext, client_id="secure-admin")


def _pem_bundle(path: Path, *parts: Path) -> Path:
    path.write_text("".join(p.read_text(encoding="utf-8") for p in parts), encoding="utf-8")
    return path


def secure_properties(
    workdir: Path,
    ports: dict[str, int],
    tls: TlsMaterial,
    allow_everyone_if_no_acl: bool,
    reauth_ms: int = 0,
) -> dict[str, Any]:
    """``broker_properties`` plus the four client listeners, PEM TLS, SASL and the authorizer;
    ``reauth_ms`` is ``connections.max.reauth.ms`` (KIP-368 session lifetime, 0: never expires)."""
    listeners = ",".join(f"{name}://{HOST}:{ports[name]}" for name in LISTENERS)
    keystore = _pem_bundle(workdir / "broker-keystore.pem", tls.server_key, tls.server_cert)
    plain_users = " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
    props = broker_properties(workdir, ports["PLAINTEXT"], ports["CONTROLLER"]) | {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": ",".join(
            f"{name}:{'PLAINTEXT' if name == 'CONTROLLER' else name}" for name in LISTENERS
        ),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": keystore,
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": tls.ca_cert,
        "listener.name.ssl.ssl.client.auth": "requested",
        "sasl.enabled.mechanisms": ",".join((*SASL_MECHANISMS, OAUTHBEARER)),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:{ADMIN};User:ANONYMOUS",
        "allow.everyone.if.no.acl.found": str(allow_everyone_if_no_acl).lower(),
        "connections.max.reauth.ms": str(reauth_ms),
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):
        props[f"listener.name.{listener}.plain.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{ADMIN}" password="{USERS[ADMIN]}" {plain_users};'
        )
        for scram in SASL_MECHANISMS[1:]:
            props[f"listener.name.{listener}.{scram.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
        # The broker's own login (its unsecured token is never used: no broker connects over SASL).
        props[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = SecureKafka.oauth_jaas(ADMIN)
    return props


def _format_with_scram(config: Path, workdir: Path) -> str:
    """``StorageTool format --standalone --add-scram ...`` for every user and SCRAM mechanism."""
    scram = [
        arg
        for user, password in USERS.items()
        for mechanism in SASL_MECHANISMS[1:]
        for arg in ("--add-scram", f"{mechanism}=[name={user},password={password}]")
    ]
    return format_storage(config, workdir, *scram)


def start_secure_kafka(
    workdir: Path,
    tls: TlsMaterial | None = None,
    *,
    allow_everyone_if_no_acl: bool = True,
    reauth_ms: int = 0,
    timeout_s: float = BROKER_START_TIMEOUT_S,
    heap: str = HEAP,
) -> SecureKafka:
    """Format storage (with the SCRAM users) and start the secured broker on free ports; returns
    once its PLAINTEXT listener answers. ``tls`` defaults to new material under ``workdir``;
    ``reauth_ms`` > 0 makes SASL sessions expire (``connections.max.reauth.ms``, KIP-368), as
    ``tests/test_sasl_reauth.py``'s own short-lived broker does (the shared one keeps 0)."""
    require_java()
    workdir = Path(workdir)
    tls = tls or make_tls_material(_mkdir(workdir / "tls"))
    last_error = ""
    for attempt in range(3):
        attempt_dir = _mkdir(workdir / f"secure-broker-{attempt}")
        ports = dict(zip(LISTENERS, free_ports(len(LISTENERS)), strict=True))
        props = secure_properties(attempt_dir, ports, tls, allow_everyone_if_no_acl, reauth_ms)
        config = write_properties(attempt_dir / "server.properties", props)
        cluster_id = _format_with_scram(config, attempt_dir)
        log_path = attempt_dir / "broker.log"
        process, log_file = spawn(jvm_command("kafka.Kafka", str(config), heap=heap), log_path, attempt_dir)
        addresses = {name.lower(): f"{HOST}:{port}" for name, port in ports.items()}
        broker = SecureKafka(
            process, log_path, log_file, tls=tls, workdir=attempt_dir, cluster_id=cluster_id, **addresses
        )
        _pem_bundle(broker.client_keystore, tls.client_key, tls.client_cert)
        what = f"secured Kafka broker on {broker.plaintext}"
        last_error = await_ready(broker, SecureKafka.answers, what, timeout_s, 0.2, KafkaStartError)
        if not last_error:
            return broker
        if "address already in use" not in last_error.lower():
            break
    raise KafkaStartError(last_error)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def secure_kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    """One secured Apache Kafka 4.3.1 broker for the session (TLS, SASL, authorizer); fails (never
    skips) when it cannot start."""
    start = lambda: start_secure_kafka(tmp_path_factory.mktemp("secure-kafka"))  # noqa: E731
    yield from session_process(start, KafkaStartError, "secured Apache Kafka broker")
