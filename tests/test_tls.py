"""TLS contexts and certificate reload (``bridge/security/tls.py``): real certificates, real handshakes
over loopback.

The server side is an asyncio server on ``ReloadingServerContext.context`` (as the bridge's listener
will be), the client side a context from ``client_context``; what each side saw (peer certificate
serial, client certificate subject) is read from the live TLS session, not assumed.
"""

from __future__ import annotations

import asyncio
import functools
import shutil
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from certs import KEY_PASSWORD, TlsMaterial, tls_material
from connect_bridge.bridge.security.tls import (
    ListenerTls,
    ReloadingServerContext,
    TlsError,
    UpstreamTls,
    client_context,
    server_context,
)

__all__ = ["tls_material"]


def in_loop(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an ``async def`` test in its own event loop (the project has no pytest asyncio plugin)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        asyncio.run(test(*args, **kwargs))

    return run


class EchoServer:
    """Answers each line with itself; records the client certificate each connection presented."""

    def __init__(self) -> None:
        self.client_subjects: list[Any] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.client_subjects.append(writer.get_extra_info("peercert"))
        try:
            while line := await reader.readline():
                writer.write(line)
                await writer.drain()
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def serving(context: ssl.SSLContext) -> AsyncIterator[tuple[int, EchoServer]]:
    echo = EchoServer()
    server = await asyncio.start_server(echo.handle, "127.0.0.1", 0, ssl=context)
    try:
        yield server.sockets[0].getsockname()[1], echo
    finally:
        server.close()
        await server.wait_closed()


async def connect(
    port: int, context: ssl.SSLContext, hostname: str = "localhost"
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(
        asyncio.open_connection("127.0.0.1", port, ssl=context, server_hostname=hostname), 5
    )


async def echo_once(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, text: bytes = b"ping\n"
) -> bytes:
    writer.write(text)
    await writer.drain()
    return await asyncio.wait_for(reader.readline(), 5)


def peer_serial(writer: asyncio.StreamWriter) -> int:
    return int(writer.get_extra_info("peercert")["serialNumber"], 16)


def listener(m: TlsMaterial, **overrides: Any) -> ListenerTls:
    return ListenerTls(
        **{"certfile": m.server_cert, "keyfile": m.server_key, "cafile": m.ca_cert} | overrides
    )


def upstream(m: TlsMaterial, **overrides: Any) -> ssl.SSLContext:
    return client_context(UpstreamTls(**{"cafile": m.ca_cert} | overrides))


@pytest.mark.parametrize("hostname", ["localhost", "127.0.0.1"])
@in_loop
async def test_handshake_checks_the_san_and_sees_the_server_serial(
    tls_material: TlsMaterial, hostname: str
) -> None:
    async with serving(ReloadingServerContext(listener(tls_material)).context) as (port, _):
        reader, writer = await connect(port, upstream(tls_material), hostname)
        assert await echo_once(reader, writer) == b"ping\n"
        assert peer_serial(writer) == tls_material.server_serial
        writer.close()


@in_loop
async def test_a_name_outside_the_san_is_refused(tls_material: TlsMaterial) -> None:
    async with serving(server_context(listener(tls_material))) as (port, _):
        with pytest.raises(ssl.SSLCertVerificationError, match="match"):
            await connect(port, upstream(tls_material), "broker.example")
        reader, writer = await connect(port, upstream(tls_material, check_hostname=False), "broker.example")
        assert await echo_once(reader, writer) == b"ping\n"
        writer.close()


@in_loop
async def test_a_server_from_another_ca_is_refused(tls_material: TlsMaterial) -> None:
    rogue = ListenerTls(certfile=tls_material.rogue_cert, keyfile=tls_material.rogue_key)
    async with serving(server_context(rogue)) as (port, _):
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            await connect(port, upstream(tls_material, check_hostname=False))


async def refused(port: int, context: ssl.SSLContext) -> bool:
    """True when the server ends the session instead of echoing (TLS 1.3 reports a refused client
    certificate after the client's handshake finished, on its first read)."""
    try:
        reader, writer = await connect(port, context)
        answer = await echo_once(reader, writer)
    except (ssl.SSLError, ConnectionError):
        return True
    writer.close()
    return answer == b""


@in_loop
async def test_client_auth_required(tls_material: TlsMaterial) -> None:
    m = tls_material
    async with serving(server_context(listener(m, client_auth="required"))) as (port, echo):
        reader, writer = await connect(port, upstream(m, certfile=m.client_cert, keyfile=m.client_key))
        assert await echo_once(reader, writer) == b"ping\n"
        writer.close()
        assert dict(x[0] for x in echo.client_subjects[0]["subject"])["commonName"] == "client"
        assert await refused(port, upstream(m))
        assert await refused(port, upstream(m, certfile=m.rogue_cert, keyfile=m.rogue_key))
        assert len(echo.client_subjects) == 1


@in_loop
async def test_client_auth_requested_lets_anonymous_clients_in(tls_material: TlsMaterial) -> None:
    async with serving(server_context(listener(tls_material, client_auth="requested"))) as (port, echo):
        reader, writer = await connect(port, upstream(tls_material))
        assert await echo_once(reader, writer) == b"ping\n"
        writer.close()
        assert echo.client_subjects == [None]


@in_loop
async def test_min_version_refuses_older_clients(tls_material: TlsMaterial) -> None:
    async with serving(server_context(listener(tls_material, min_version="TLSv1.3"))) as (port, _):
        old = upstream(tls_material)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        with pytest.raises((ssl.SSLError, ConnectionError)):
            await connect(port, old)


def test_an_encrypted_key_loads_with_its_password_only(tls_material: TlsMaterial) -> None:
    m = tls_material
    settings = listener(m, keyfile=m.server_key_encrypted, key_password=KEY_PASSWORD)
    assert isinstance(server_context(settings), ssl.SSLContext)
    assert KEY_PASSWORD not in repr(settings) and KEY_PASSWORD not in str(settings.model_dump())
    with pytest.raises(TlsError, match=r"is encrypted \(set key_password\)"):
        server_context(listener(m, keyfile=m.server_key_encrypted))
    with pytest.raises(TlsError, match=r"cannot decrypt it \(wrong key_password\?\)"):
        server_context(listener(m, keyfile=m.server_key_encrypted, key_password="nope"))


BAD_FILES = [
    ("certfile", "missing.pem", "certfile {path}: no such file"),
    ("keyfile", "missing.key", "keyfile {path}: no such file"),
    ("cafile", "missing-ca.pem", "cafile {path}: no such file"),
    ("certfile", "<server_key>", "certfile {path}: no PEM certificate in it"),
    ("keyfile", "<server_cert>", "keyfile {path}: no PEM private key in it"),
    ("keyfile", "<server2_key>", "keyfile {path} is not the key of certfile"),
    ("cafile", "<server_key>", "cafile {path}: no PEM certificate in it"),
    ("certfile", "<dir>", "certfile {path}: is a directory"),
]


@pytest.mark.parametrize(("field", "value", "message"), BAD_FILES, ids=[f"{f}-{v}" for f, v, _ in BAD_FILES])
def test_bad_files_fail_with_one_line_naming_the_file(
    tls_material: TlsMaterial, tmp_path: Path, field: str, value: str, message: str
) -> None:
    named = {"<server_key>": tls_material.server_key, "<server_cert>": tls_material.server_cert,
             "<server2_key>": tls_material.server2_key, "<dir>": tmp_path}  # fmt: skip
    path = named.get(value, tmp_path / value)
    for build in (
        lambda: server_context(listener(tls_material, **{field: path})),
        lambda: client_context(UpstreamTls(**{
            "cafile": tls_material.ca_cert, "certfile": tls_material.client_cert,
            "keyfile": tls_material.client_key if field != "keyfile" else path,
        } | ({field: path} if field != "keyfile" else {}))),
    ):  # fmt: skip
        if field == "keyfile" and value == "<server2_key>":
            continue  # the client pair mismatch is covered by the server pair
        with pytest.raises(TlsError) as caught:
            build()
        text = str(caught.value)
        assert "\n" not in text and text.startswith("TLS ")
        assert message.format(path=path) in text


def test_settings_that_cannot_work_are_refused_by_validation(tls_material: TlsMaterial) -> None:
    with pytest.raises(ValidationError, match="needs cafile"):
        ListenerTls(
            certfile=tls_material.server_cert, keyfile=tls_material.server_key, client_auth="required"
        )
    with pytest.raises(ValidationError, match="go together"):
        UpstreamTls(certfile=tls_material.client_cert)
    with pytest.raises(ValidationError, match="extra"):
        UpstreamTls(ca_file=tls_material.ca_cert)


def _install(source_cert: Path, source_key: Path, cert: Path, key: Path) -> None:
    """Rotate as deploy tools do: write beside, then rename over (a new inode each time)."""
    for source, target in ((source_cert, cert), (source_key, key)):
        staged = target.with_suffix(".new")
        shutil.copyfile(source, staged)
        staged.replace(target)


@in_loop
async def test_reload_new_connections_get_the_new_certificate(
    tls_material: TlsMaterial, tmp_path: Path
) -> None:
    m = tls_material
    cert, key = tmp_path / "live.pem", tmp_path / "live.key"
    _install(m.server_cert, m.server_key, cert, key)
    reloading = ReloadingServerContext(ListenerTls(certfile=cert, keyfile=key))
    async with serving(reloading.context) as (port, _):
        old_reader, old_writer = await connect(port, upstream(m))
        assert peer_serial(old_writer) == m.server_serial

        _install(m.server2_cert, m.server2_key, cert, key)
        # By IP address: no SNI is sent, and the reload must still apply.
        _, writer = await connect(port, upstream(m), "127.0.0.1")
        assert peer_serial(writer) == m.server2_serial
        assert reloading.generation == 1
        writer.close()

        # The connection opened before the rotation keeps its session and still works.
        assert await echo_once(old_reader, old_writer) == b"ping\n"
        assert peer_serial(old_writer) == m.server_serial

        # A broken rotation (key of another certificate) keeps serving the last good pair.
        _install(m.server_cert, m.server2_key, cert, key)
        _reader, writer = await connect(port, upstream(m))
        assert peer_serial(writer) == m.server2_serial
        assert reloading.last_error is not None and "is not the key of certfile" in reloading.last_error
        writer.close()

        # Once the files are whole again, the next connection gets them.
        _install(m.server_cert, m.server_key, cert, key)
        assert reloading.check() is True and reloading.last_error is None
        _, writer = await connect(port, upstream(m))
        assert peer_serial(writer) == m.server_serial
        writer.close()
        old_writer.close()
