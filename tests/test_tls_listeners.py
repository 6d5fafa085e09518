"""TLS wired into the bridge (issue 15, docs/security.md "TLS on the bridge"): the worker listener of
a real in-process ``BridgeServer``, the metrics HTTPS listener, the client-certificate principal and
certificate reload seen by a new connection, and the one-line start errors of ``serve``.

No process is started: the server runs in the test's event loop, clients are real TLS clients over
loopback (the bridge's own ``KafkaConnection``, ``urllib``), certificates come from ``tests/certs.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import ssl
import struct
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from certs import TlsMaterial, tls_material
from connect_bridge.bridge import app
from connect_bridge.bridge.edge.connection import ANONYMOUS
from connect_bridge.bridge.edge.http import start_http
from connect_bridge.bridge.metrics import Metrics
from connect_bridge.bridge.security.tls import ListenerTls, ReloadingServerContext, certificate_principal
from connect_bridge.bridge.security.upstream_security import UpstreamSecurity
from connect_bridge.bridge.server import BridgeServer, ServerOptions
from connect_bridge.bridge.settings import SettingsError, load_settings
from connect_bridge.bridge.stores.store import MemoryRecordStore
from connect_bridge.wire.client import ClientError, KafkaConnection

__all__ = ["tls_material"]

HOST = "127.0.0.1"


def client_ssl(m: TlsMaterial, *, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(m.ca_cert))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


def copied(m: TlsMaterial, directory: Path) -> tuple[Path, Path]:
    """The server certificate and key copied to ``directory`` (the reload test rewrites them)."""
    cert, key = directory / "listener.pem", directory / "listener.key"
    shutil.copy(m.server_cert, cert)
    shutil.copy(m.server_key, key)
    return cert, key


async def api_versions(port: int, context: ssl.SSLContext) -> tuple[KafkaConnection, int]:
    """A TLS connection to the bridge that answered ApiVersions; the serial of the certificate the
    bridge presented on it."""
    conn = await KafkaConnection.connect(HOST, port, client_id="tls-test", ssl=context)
    response = await conn.request(ApiVersionsRequest(), 0, timeout=5)
    assert response.error_code == 0
    return conn, int(conn.writer.get_extra_info("peercert")["serialNumber"], 16)


def principals(server: BridgeServer) -> list[str]:
    return sorted(c.principal for c in server.open_connections)


def test_listener_principal_refusal_and_reload(tls_material: TlsMaterial, tmp_path: Path) -> None:
    """One bridge with ``client_auth: required``: a client with the CA's client certificate is
    served and gets Kafka's SSL principal; one without a certificate, or with one from another CA,
    is refused in the handshake; after the certificate files are replaced (write beside, rename
    over) a new connection sees the new certificate while the open one keeps working."""
    m = tls_material
    cert, key = copied(m, tmp_path)
    tls = ReloadingServerContext(
        ListenerTls(certfile=cert, keyfile=key, cafile=m.ca_cert, client_auth="required"), "tls"
    )

    async def scenario() -> None:
        server = BridgeServer(ServerOptions(host=HOST, port=0, tls=tls), MemoryRecordStore())
        await server.start()
        try:
            first, serial = await api_versions(server.port, client_ssl(m, cert=(m.client_cert, m.client_key)))
            assert serial == m.server_serial
            assert principals(server) == ["User:CN=client"]
            for refused in (client_ssl(m), client_ssl(m, cert=(m.rogue_cert, m.rogue_key))):
                with pytest.raises((ClientError, OSError, asyncio.TimeoutError)):
                    conn, _ = await api_versions(server.port, refused)
                    await conn.close()
            # Rotation as cert-manager does it: new files beside, renamed over the old ones.
            for source, target in ((m.server2_cert, cert), (m.server2_key, key)):
                shutil.copy(source, target.with_suffix(".new"))
                os.replace(target.with_suffix(".new"), target)
            second, serial = await api_versions(
                server.port, client_ssl(m, cert=(m.client_cert, m.client_key))
            )
            assert serial == m.server2_serial and tls.generation == 1
            again = await first.request(ApiVersionsRequest(), 0, timeout=5)  # the old session still works
            assert again.error_code == 0
            assert principals(server) == ["User:CN=client", "User:CN=client"]
            await first.close()
            await second.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_requested_client_auth_leaves_a_client_without_certificate_anonymous(
    tls_material: TlsMaterial,
) -> None:
    m = tls_material
    listener = ListenerTls(
        certfile=m.server_cert, keyfile=m.server_key, cafile=m.ca_cert, client_auth="requested"
    )

    async def scenario() -> None:
        server = BridgeServer(
            ServerOptions(host=HOST, port=0, tls=ReloadingServerContext(listener)), MemoryRecordStore()
        )
        await server.start()
        try:
            conn, _ = await api_versions(server.port, client_ssl(m))
            assert principals(server) == [ANONYMOUS]
            await conn.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_metrics_listener_over_https(tls_material: TlsMaterial) -> None:
    m = tls_material
    context = ReloadingServerContext(ListenerTls(certfile=m.server_cert, keyfile=m.server_key)).context

    async def scenario() -> None:
        http = await start_http(HOST, 0, Metrics(), lambda: True, ssl=context)
        port = http.sockets[0].getsockname()[1]
        try:

            def get(url: str, ctx: ssl.SSLContext) -> Any:
                with urllib.request.urlopen(url, context=ctx, timeout=5) as response:
                    return response.status, response.read()

            status, body = await asyncio.to_thread(get, f"https://127.0.0.1:{port}/metrics", client_ssl(m))
            assert status == 200 and b"# TYPE" in body
            with pytest.raises(OSError):  # plain HTTP to a TLS port gets no HTTP answer
                await asyncio.to_thread(get, f"http://127.0.0.1:{port}/livez", client_ssl(m))
        finally:
            http.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(
    ("subject", "expected"),
    [
        ((((("commonName", "client"),),)), "User:CN=client"),
        (
            (
                (("countryName", "US"),),
                (("organizationName", "Acme, Inc"),),
                (("organizationalUnitName", "ops"), ("userId", "u1")),
                (("commonName", "#worker "),),
            ),
            "User:CN=\\#worker\\ ,OU=ops+UID=u1,O=Acme\\, Inc,C=US",
        ),
        (((("emailAddress", "a@b"),),), "User:1.2.840.113549.1.9.1=#1603614062"),
    ],
)
def test_certificate_principal_is_kafkas_rfc2253_form(subject: Any, expected: str) -> None:
    """What Java's ``X500Principal.getName()`` prints (last RDN first, specials escaped), which is
    what Kafka's default principal builder puts after ``User:``."""
    assert certificate_principal({"subject": subject}) == expected
    assert certificate_principal({}) is None and certificate_principal(None) is None


def test_settings_and_start_errors(tls_material: TlsMaterial, tmp_path: Path, capsys: Any) -> None:
    """``tls``/``metrics_tls``/``upstream_tls`` are validated settings; a certificate that cannot be
    used stops ``serve`` with one ``connect-bridge: cannot start: TLS ...`` line, before any port
    is bound; ``upstream_tls`` without ``upstream`` is refused."""
    m = tls_material
    config = tmp_path / "bridge.yaml"
    doc = {
        "listen": "127.0.0.1:0",
        "metrics_listen": "off",
        "state_dir": str(tmp_path / "state"),
        "tls": {"certfile": str(tmp_path / "missing.pem"), "keyfile": str(m.server_key)},
    }
    config.write_text(json.dumps(doc), encoding="utf-8")
    assert app.main(load_settings(config)) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"connect-bridge: cannot start: TLS tls: certfile {tmp_path / 'missing.pem'}: no such file"
    ]

    doc["tls"] = {"certfile": str(m.server_cert), "keyfile": str(m.client_key)}
    config.write_text(json.dumps(doc), encoding="utf-8")
    assert app.main(load_settings(config)) == 1
    assert "is not the key of certfile" in capsys.readouterr().err

    with pytest.raises(SettingsError, match="upstream_tls needs upstream"):
        load_settings(None, {"upstream_tls.cafile": str(m.ca_cert)})
    with pytest.raises(SettingsError, match=r"tls\.client_auth"):
        load_settings(None, {"tls.certfile": "a", "tls.keyfile": "b", "tls.client_auth": "sometimes"})
    settings = load_settings(None, {"upstream": "127.0.0.1:9093", "upstream_tls.cafile": str(m.ca_cert)})
    listener, metrics, security = app.tls_contexts(settings)
    assert listener is None and metrics is None and security.ssl is not None
    assert security.kafka_python_options() == {"security_protocol": "SSL", "ssl_context": security.ssl}
    assert UpstreamSecurity().kafka_python_options() == {}


def test_reload_is_seen_by_a_new_connection_only_after_a_good_rotation(
    tls_material: TlsMaterial, tmp_path: Path
) -> None:
    """A half-written rotation keeps the old certificate for new connections (and says why)."""
    m = tls_material
    cert, key = copied(m, tmp_path)
    tls = ReloadingServerContext(ListenerTls(certfile=cert, keyfile=key), "tls")

    async def scenario() -> None:
        server = BridgeServer(ServerOptions(host=HOST, port=0, tls=tls), MemoryRecordStore())
        await server.start()
        try:
            shutil.copy(m.server2_cert, cert)  # the certificate changed, its key not yet
            conn, serial = await api_versions(server.port, client_ssl(m))
            assert serial == m.server_serial and tls.last_error and "is not the key" in tls.last_error
            await conn.close()
            shutil.copy(m.server2_key, key)
            conn, serial = await api_versions(server.port, client_ssl(m))
            assert serial == m.server2_serial and tls.last_error is None
            await conn.close()
        finally:
            await server.stop()

    asyncio.run(scenario())


def test_operator_guide_tls_block_is_a_valid_configuration() -> None:
    """The worked configuration of operator-guide.md "Security" / "TLS" has the right keys and
    values (its files are the operator's; that they load is checked at start, above)."""
    import yaml

    from connect_bridge.bridge.settings import BridgeSettings
    from doc_commands import REPO, fenced_blocks

    text = (REPO / "docs" / "operator-guide.md").read_text(encoding="utf-8")
    section = text[text.index("\n### TLS\n") :]
    block = next(b for b in fenced_blocks(section) if b.lang == "yaml")
    settings = BridgeSettings.model_validate(yaml.safe_load(block.body))
    assert settings.tls is not None and settings.tls.client_auth == "required"
    assert settings.metrics_tls is not None and settings.upstream_tls is not None
    assert settings.upstream_tls.check_hostname


def api_versions_v0_frame(correlation_id: int) -> bytes:
    """A framed ApiVersions v0 request (header v1, empty body), written by hand so that several go
    out in one write."""
    client_id = b"pipelined"
    payload = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(payload)) + payload


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_pipelined_requests_are_all_answered_over_tls(tls_material: TlsMaterial, loop: str) -> None:
    """A client that sends its next request before the answer to the previous one (Java's consumer
    does, a Metadata request for its topic behind its own metadata refresh) gets every answer over
    TLS, on both event loops ``serve`` can run on. The bridge waits after each answer until the
    transport took it (Kafka's muting); with a write-buffer high-water mark of 0, asyncio's TLS
    transport paused the writer on an empty buffer and resumed it only on the next bytes read, so
    the first answer's wait never ended and the second answer was never sent."""
    m = tls_material
    listener = ListenerTls(certfile=m.server_cert, keyfile=m.server_key)

    async def scenario() -> None:
        server = BridgeServer(
            ServerOptions(host=HOST, port=0, tls=ReloadingServerContext(listener)), MemoryRecordStore()
        )
        await server.start()
        try:
            reader, writer = await asyncio.open_connection(
                HOST, server.port, ssl=client_ssl(m), server_hostname="localhost"
            )
            writer.write(b"".join(api_versions_v0_frame(c) for c in (7, 8, 9)))
            await writer.drain()
            answered = []
            for _ in range(3):
                (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
                frame = await asyncio.wait_for(reader.readexactly(size), 5)
                answered.append(struct.unpack_from(">i", frame, 0)[0])
            assert answered == [7, 8, 9]
            writer.close()
        finally:
            await server.stop()

    runner = app.loop_factory(loop)
    with asyncio.Runner(loop_factory=runner) as run:
        run.run(scenario())
